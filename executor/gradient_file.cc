#include "executor/gradient_file.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "models/spec_io.h"

namespace hetsim::executor {
namespace {

constexpr char kMagic[] = "HSGRAD1\n";

template <typename T>
void Put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class Reader {
 public:
  explicit Reader(const std::string& data) : d_(data) {}
  template <typename T>
  bool Get(T* v) {
    if (pos_ + sizeof(T) > d_.size()) return false;
    std::memcpy(v, d_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetBytes(size_t n, void* out) {
    if (pos_ + n > d_.size()) return false;
    std::memcpy(out, d_.data() + pos_, n);
    pos_ += n;
    return true;
  }

 private:
  const std::string& d_;
  size_t pos_ = 0;
};

}  // namespace

Status WriteGradientDump(const std::string& path, const GradientDump& dump) {
  std::string out(kMagic, sizeof(kMagic) - 1);
  Put(&out, static_cast<uint32_t>(dump.tensors.size()));
  for (const auto& t : dump.tensors) {
    Put(&out, static_cast<uint32_t>(t.name.size()));
    out += t.name;
    Put(&out, t.rows);
    Put(&out, t.cols);
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  }
  Put(&out, dump.loss);
  return models::WriteFileAtomically(path, out);
}

Result<GradientDump> ReadGradientDump(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  const auto bad = [&](const std::string& what) { return Status::Invalid(path + ": not a gradient dump (" + what + ")"); };
  if (data.compare(0, sizeof(kMagic) - 1, kMagic) != 0) return bad("bad magic");
  Reader r(data);
  char magic[sizeof(kMagic) - 1];
  r.GetBytes(sizeof(magic), magic);
  uint32_t n = 0;
  if (!r.Get(&n)) return bad("truncated header");
  GradientDump dump;
  for (uint32_t i = 0; i < n; ++i) {
    GradientTensor t;
    uint32_t len = 0;
    if (!r.Get(&len) || len > 4096) return bad("bad name length");
    t.name.resize(len);
    if (!r.GetBytes(len, t.name.data()) || !r.Get(&t.rows) || !r.Get(&t.cols) || t.rows < 0 || t.cols < 0) {
      return bad("truncated tensor header");
    }
    t.data.resize(static_cast<size_t>(t.rows * t.cols));
    if (!r.GetBytes(t.data.size() * sizeof(float), t.data.data())) return bad("truncated tensor " + t.name);
    dump.tensors.push_back(std::move(t));
  }
  if (!r.Get(&dump.loss)) return bad("missing loss");
  return dump;
}

const TensorDifference* DumpComparison::worst() const {
  const TensorDifference* w = nullptr;
  for (const auto& t : tensors) {
    if (w == nullptr || t.relative_l2 > w->relative_l2) w = &t;
  }
  return w;
}

bool DumpComparison::Within(double rtol) const {
  if (!(loss_relative <= rtol)) return false;
  for (const auto& t : tensors) {
    if (!(t.relative_l2 <= rtol)) return false;
  }
  return true;
}

Result<DumpComparison> CompareGradientDumps(const GradientDump& got, const GradientDump& ref) {
  if (got.tensors.size() != ref.tensors.size()) {
    return Status::Invalid("gradient dumps hold " + std::to_string(got.tensors.size()) + " and " +
                           std::to_string(ref.tensors.size()) + " tensors; were they made with the same model?");
  }
  DumpComparison c;
  for (size_t i = 0; i < got.tensors.size(); ++i) {
    const auto &a = got.tensors[i], &b = ref.tensors[i];
    if (a.name != b.name || a.rows != b.rows || a.cols != b.cols) {
      return Status::Invalid("gradient dumps differ in tensor " + std::to_string(i) + ": " + a.name + " [" +
                             std::to_string(a.rows) + "x" + std::to_string(a.cols) + "] vs " + b.name + " [" +
                             std::to_string(b.rows) + "x" + std::to_string(b.cols) + "]");
    }
    double diff2 = 0, ref2 = 0, max_abs = 0;
    for (size_t k = 0; k < a.data.size(); ++k) {
      const double d = double(a.data[k]) - double(b.data[k]);
      diff2 += d * d;
      ref2 += double(b.data[k]) * b.data[k];
      max_abs = std::max(max_abs, std::abs(d));
    }
    TensorDifference td;
    td.name = a.name;
    td.ref_norm = std::sqrt(ref2);
    td.max_abs = max_abs;
    td.relative_l2 = diff2 == 0 ? 0.0 : (ref2 > 0 ? std::sqrt(diff2 / ref2) : INFINITY);
    c.tensors.push_back(td);
  }
  c.loss_relative = ref.loss != 0 ? std::abs(got.loss - ref.loss) / std::abs(ref.loss) : std::abs(got.loss);
  return c;
}

}  // namespace hetsim::executor
