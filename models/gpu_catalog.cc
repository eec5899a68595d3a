#include "models/gpu_catalog.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "models/bundled.h"
#include "models/suggest.h"

namespace hetsim::models {
// Splits one CSV line; fields may be double-quoted (with "" for a quote).
std::string CsvCell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string TrimBlanks(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size()) {
    const size_t end = std::min(s.find(',', begin), s.size());
    if (end > begin) out.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}


double GpuSpec::PeakTflops(proto::DType dtype) const {
  switch (MathDType(dtype)) {
    case proto::DTYPE_FP16: return peak_fp16_tflops;
    case proto::DTYPE_FP32: return peak_fp32_tflops;
    case proto::DTYPE_TF32: return peak_tf32_tflops;
    case proto::DTYPE_FP8: return peak_fp8_tflops;
    default: return peak_bf16_tflops;
  }
}

proto::DType GpuSpec::MathDType(proto::DType dtype) const {
  return dtype == proto::DTYPE_TF32 && peak_tf32_tflops <= 0 ? proto::DTYPE_FP32 : dtype;
}

const char* DTypeName(proto::DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FP16: return "fp16";
    case proto::DTYPE_FP32: return "fp32";
    case proto::DTYPE_TF32: return "tf32";
    case proto::DTYPE_FP8: return "fp8";
    default: return "bf16";
  }
}

const char* SuggestedDType(const GpuSpec& gpu, proto::DType unusable) {
  if (gpu.peak_bf16_tflops > 0 && unusable != proto::DTYPE_BF16) return "bf16";
  if (gpu.peak_fp16_tflops > 0 && unusable != proto::DTYPE_FP16) return "fp16";
  return "fp32";
}

Result<GpuCatalog> GpuCatalog::Parse(const std::string& csv_text, const std::string& file) {
  static const std::vector<std::string> kColumns = {
      "name", "aliases", "vendor", "form_factor", "peak_bf16_tflops", "peak_fp16_tflops",
      "peak_fp32_tflops", "peak_tf32_tflops", "peak_fp8_tflops", "memory_gib", "hbm_bandwidth_gbyte_s", "scale_up", "scale_up_bandwidth_gbyte_s",
      "pcie_gen", "pcie_bandwidth_gbyte_s", "source"};
  GpuCatalog cat;
  ErrorList errors;
  std::istringstream in(csv_text);
  std::string line;
  int line_no = 0;
  bool header_seen = false;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    auto cells = SplitCsv(line);
    const std::string where = file + ":" + std::to_string(line_no) + ": ";
    if (!header_seen) {
      if (cells != kColumns) return Status::Invalid(where + "unexpected header; expected the columns of gpus.csv");
      header_seen = true;
      continue;
    }
    if (cells.size() != kColumns.size()) {
      errors.Add(where + "expected " + std::to_string(kColumns.size()) + " columns, found " +
                 std::to_string(cells.size()));
      continue;
    }
    auto num = [&](size_t col, double* out) {
      const std::string& s = cells[col];
      const auto res = std::from_chars(s.data(), s.data() + s.size(), *out);
      if (res.ec != std::errc() || res.ptr != s.data() + s.size() || *out < 0) {
        errors.Add(where + kColumns[col] + ": expected a non-negative number, found '" + s + "'");
      }
    };
    GpuSpec g;
    g.name = cells[0];
    std::istringstream al(cells[1]);
    for (std::string a; std::getline(al, a, ';');) {
      if (!a.empty()) g.aliases.push_back(a);
    }
    g.vendor = cells[2];
    g.form_factor = cells[3];
    num(4, &g.peak_bf16_tflops);
    num(5, &g.peak_fp16_tflops);
    num(6, &g.peak_fp32_tflops);
    num(7, &g.peak_tf32_tflops);
    num(8, &g.peak_fp8_tflops);
    num(9, &g.memory_gib);
    num(10, &g.hbm_bandwidth_gbyte_s);
    g.scale_up = cells[11];
    num(12, &g.scale_up_bandwidth_gbyte_s);
    double gen = 0;
    num(13, &gen);
    g.pcie_gen = static_cast<int>(gen);
    num(14, &g.pcie_bandwidth_gbyte_s);
    g.source = cells[15];
    static const std::vector<std::string> kFabrics = {"nvswitch", "nvlink", "pcie", "xgmi"};
    if (std::find(kFabrics.begin(), kFabrics.end(), g.scale_up) == kFabrics.end()) {
      errors.Add(where + "scale_up: unknown fabric '" + g.scale_up + "'" + DidYouMean(g.scale_up, kFabrics));
    }
    cat.gpus_.push_back(std::move(g));
  }
  if (!header_seen) errors.Add(file + ": no header line");
  if (!errors.empty()) return errors.ToStatus();
  return cat;
}

const GpuCatalog& GpuCatalog::Bundled() {
  static const GpuCatalog* cat = [] {
    auto r = Parse(std::string(BundledGpuCatalogCsv()), "models/catalog/gpus.csv");
    HETSIM_CHECK(r.ok(), r.status().message());
    return new GpuCatalog(std::move(r).value());
  }();
  return *cat;
}

Result<const GpuSpec*> GpuCatalog::Find(const std::string& name) const {
  const std::string want = AsciiLower(name);
  std::vector<std::string> names;
  for (const auto& g : gpus_) {
    if (AsciiLower(g.name) == want) return &g;
    for (const auto& a : g.aliases) {
      if (AsciiLower(a) == want) return &g;
    }
    names.push_back(g.name);
  }
  // Suggest the canonical name of the closest name or alias.
  std::vector<std::string> spellings;
  std::vector<const GpuSpec*> owners;
  for (const auto& g : gpus_) {
    spellings.push_back(g.name);
    owners.push_back(&g);
    for (const auto& a : g.aliases) {
      spellings.push_back(a);
      owners.push_back(&g);
    }
  }
  const std::string nearest = NearestName(name, spellings);
  std::string hint;
  for (size_t i = 0; i < spellings.size() && !nearest.empty(); ++i) {
    if (spellings[i] == nearest) {
      hint = "; did you mean '" + owners[i]->name + "'?";
      break;
    }
  }
  return Status::NotFound("unknown GPU type '" + name + "'" + hint + " (`hetsim list gpus` prints the catalog)");
}

}  // namespace hetsim::models
