// Chakra ET files: the length-delimited stream, file names, attributes, the feeder's first issuable nodes and
// the summary (models/chakra.h).
#include "models/chakra.h"

#include <fcntl.h>
#include <google/protobuf/io/gzip_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <queue>
#include <set>
#include <sstream>
#include <unordered_set>

#include "models/spec_io.h"

namespace hetsim::models {
namespace {

namespace pb = google::protobuf;
namespace fs = std::filesystem;

// The feeder's first window (et_feeder.cpp: window_size_ = 4096 * 256).
constexpr size_t kFeederWindow = 4096 * 256;

// Closes the descriptor when the reader is done.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool IsGzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  unsigned char b[2] = {0, 0};
  const size_t n = std::fread(b, 1, 2, f);
  std::fclose(f);
  return n == 2 && b[0] == 0x1f && b[1] == 0x8b;
}

// Reads the nodes after the metadata; `stream` is positioned after it.
Status ReadNodes(pb::io::ZeroCopyInputStream* stream, const std::string& path, ChakraTrace* trace) {
  for (;;) {
    ChakraProtoMsg::Node node;
    bool clean_eof = false;
    if (!pb::util::ParseDelimitedFromZeroCopyStream(&node, stream, &clean_eof)) {
      if (clean_eof) return Status::Ok();
      const std::string after = trace->nodes.empty() ? "right after the GlobalMetadata"
                                                     : "after node id " + std::to_string(trace->nodes.back().id());
      return Status::Invalid(path + ": message " + std::to_string(trace->nodes.size() + 2) + " (" + after +
                             ") is not a Chakra Node: a damaged size prefix, a cut-off file or another format "
                             "(expected the length-delimited stream Chakra's converter writes: a GlobalMetadata, "
                             "then Node messages)");
    }
    if (!ChakraProtoMsg::NodeType_IsValid(node.type())) {
      return Status::Invalid(path + ": node id " + std::to_string(node.id()) + ": field type holds " +
                             std::to_string(node.type()) +
                             ", not a Chakra NodeType (0-7: INVALID_NODE ... COMM_COLL_NODE); the file is damaged "
                             "or from a newer schema");
    }
    trace->nodes.push_back(std::move(node));
  }
}

}  // namespace

Result<ChakraTrace> ReadChakraTrace(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return Status::Invalid(path + ": is a folder, not a Chakra ET file");
  Fd fd{::open(path.c_str(), O_RDONLY)};
  if (fd.fd < 0) return Status::IoError(path + ": cannot open: " + std::strerror(errno));
  pb::io::FileInputStream file(fd.fd);
  std::unique_ptr<pb::io::GzipInputStream> gzip;
  pb::io::ZeroCopyInputStream* in = &file;
  if (IsGzip(path)) {  // Chakra's protoio reads gzip-compressed traces too
    gzip = std::make_unique<pb::io::GzipInputStream>(&file);
    in = gzip.get();
  }
  ChakraTrace trace;
  trace.path = path;
  const int64_t rank = ChakraRankOfFileName(path);
  trace.rank = rank < 0 ? 0 : static_cast<uint32_t>(rank);
  bool clean_eof = false;
  if (!pb::util::ParseDelimitedFromZeroCopyStream(&trace.metadata, in, &clean_eof)) {
    return Status::Invalid(path + (clean_eof ? ": empty file" : ": the first message is not a Chakra GlobalMetadata") +
                           " (expected a Chakra ET file: a length-delimited GlobalMetadata, then Node messages, as "
                           "Chakra's converter writes)");
  }
  HETSIM_RETURN_IF_ERROR(ReadNodes(in, path, &trace));
  return trace;
}

std::string EncodeChakraTrace(const ChakraTrace& trace) {
  std::ostringstream out;
  pb::util::SerializeDelimitedToOstream(trace.metadata, &out);
  for (const auto& n : trace.nodes) pb::util::SerializeDelimitedToOstream(n, &out);
  return out.str();
}

Status WriteChakraTrace(const std::string& path, const ChakraTrace& trace) {
  return WriteFileAtomically(path, EncodeChakraTrace(trace));
}

std::string ChakraFileName(const std::string& prefix, uint32_t rank) {
  return prefix + "." + std::to_string(rank) + ".et";
}

int64_t ChakraRankOfFileName(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  if (name.size() < 4 || name.compare(name.size() - 3, 3, ".et") != 0) return -1;
  const std::string stem = name.substr(0, name.size() - 3);
  const size_t dot = stem.rfind('.');
  const std::string digits = dot == std::string::npos ? stem : stem.substr(dot + 1);
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

namespace {

// Every <prefix>.<rank>.et (or .et.gz) file of a folder, in name order.
std::vector<std::string> EtFilesIn(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec) && ChakraRankOfFileName(e.path().string()) >= 0) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<std::vector<std::string>> ChakraFiles(const std::vector<std::string>& args) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& a : args) {
    if (fs::is_directory(a, ec)) {
      const auto in = EtFilesIn(a);
      if (in.empty()) return Status::Invalid(a + ": no Chakra ET files (*.et) in this folder");
      files.insert(files.end(), in.begin(), in.end());
    } else if (fs::exists(a, ec)) {
      files.push_back(a);
    } else {
      return Status::NotFound(a + ": no such file or folder");
    }
  }
  if (files.empty()) return Status::Invalid("no Chakra ET files given (name files or a folder of <prefix>.<rank>.et)");
  if (files.size() == 1) return files;
  std::map<int64_t, std::string> by_rank;
  for (const auto& f : files) {
    const int64_t r = ChakraRankOfFileName(f);
    if (r < 0) {
      return Status::Invalid(f + ": with several files every name must end in .<rank>.et (Chakra's naming, e.g. "
                                 "trace.0.et, trace.1.et) so that each file's rank is known");
    }
    if (!by_rank.emplace(r, f).second) {
      return Status::Invalid("two files of rank " + std::to_string(r) + ": " + by_rank[r] + " and " + f +
                             " (give one trace per rank)");
    }
  }
  std::vector<std::string> out;
  for (const auto& [r, f] : by_rank) {
    if (r != static_cast<int64_t>(out.size())) {
      return Status::Invalid("no trace of rank " + std::to_string(out.size()) + " among the " +
                             std::to_string(files.size()) + " files (ranks run 0..N-1; the next file is " + f + ")");
    }
    out.push_back(f);
  }
  return out;
}

const ChakraProtoMsg::AttributeProto* FindAttr(const ChakraProtoMsg::Node& node, std::string_view name) {
  for (const auto& a : node.attr()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

const ChakraProtoMsg::AttributeProto* FindAttr(const ChakraProtoMsg::GlobalMetadata& meta, std::string_view name) {
  for (const auto& a : meta.attr()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

double AttrNumber(const ChakraProtoMsg::AttributeProto& a) {
  using A = ChakraProtoMsg::AttributeProto;
  switch (a.value_case()) {
    case A::kDoubleVal: return a.double_val();
    case A::kFloatVal: return a.float_val();
    case A::kInt32Val: return a.int32_val();
    case A::kInt64Val: return static_cast<double>(a.int64_val());
    case A::kUint32Val: return a.uint32_val();
    case A::kUint64Val: return static_cast<double>(a.uint64_val());
    case A::kSint32Val: return a.sint32_val();
    case A::kSint64Val: return static_cast<double>(a.sint64_val());
    case A::kFixed32Val: return a.fixed32_val();
    case A::kFixed64Val: return static_cast<double>(a.fixed64_val());
    case A::kSfixed32Val: return a.sfixed32_val();
    case A::kSfixed64Val: return static_cast<double>(a.sfixed64_val());
    case A::kBoolVal: return a.bool_val() ? 1 : 0;
    default: return 0;
  }
}

std::vector<uint64_t> IssuableNodes(const ChakraTrace& trace, size_t max) {
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> ready;
  const size_t window = std::min(trace.nodes.size(), kFeederWindow);
  for (size_t i = 0; i < window; ++i) {
    if (trace.nodes[i].data_deps_size() == 0) ready.push(trace.nodes[i].id());
  }
  std::vector<uint64_t> out;
  while (!ready.empty() && out.size() < max) {
    out.push_back(ready.top());
    ready.pop();
  }
  return out;
}

ChakraSummary Summarize(const ChakraTrace& trace) {
  ChakraSummary s;
  for (const auto& n : trace.nodes) {
    ++s.by_type[n.type()];
    s.data_deps += n.data_deps_size();
    s.ctrl_deps += n.ctrl_deps_size();
    s.with_duration += n.duration_micros() > 0;
    s.duration_s += static_cast<double>(n.duration_micros()) * 1e-6;
    if (const auto* a = FindAttr(n, "is_cpu_op"); a != nullptr && a->bool_val()) ++s.cpu_ops;
    if (const auto* a = FindAttr(n, "num_ops")) s.num_ops += AttrNumber(*a);
    if (const auto* a = FindAttr(n, "comm_size")) s.comm_bytes += AttrNumber(*a);
    if (n.type() == ChakraProtoMsg::COMM_COLL_NODE) {
      if (const auto* a = FindAttr(n, "comm_type")) ++s.by_comm[static_cast<int64_t>(AttrNumber(*a))];
    }
  }
  return s;
}

namespace {

std::string AttrText(const ChakraProtoMsg::AttributeProto& a) {
  std::string text = a.ShortDebugString();
  if (text.size() > 120) text = text.substr(0, 117) + "...";
  return text;
}

std::string CommTypeName(int64_t t) {
  if (t >= 0 && t <= INT32_MAX && ChakraProtoMsg::CollectiveCommType_IsValid(static_cast<int>(t))) {
    return ChakraProtoMsg::CollectiveCommType_Name(static_cast<ChakraProtoMsg::CollectiveCommType>(t));
  }
  return "unknown " + std::to_string(t);
}

void DescribeNode(const ChakraProtoMsg::Node& n, std::ostream& out) {
  out << "    id " << n.id() << "  " << ChakraProtoMsg::NodeType_Name(n.type()) << "  \"" << n.name() << "\"";
  if (n.duration_micros() > 0) out << "  duration " << n.duration_micros() << " us";
  out << "\n";
  for (const auto& a : n.attr()) out << "      " << AttrText(a) << "\n";
}

}  // namespace

std::string DescribeChakraTrace(const ChakraTrace& trace, size_t issuable) {
  std::ostringstream out;
  const ChakraSummary s = Summarize(trace);
  out << trace.path << " (rank " << trace.rank << "): " << trace.nodes.size() << " nodes";
  if (!trace.metadata.version().empty()) out << ", schema version " << trace.metadata.version();
  for (const auto& a : trace.metadata.attr()) {
    if (a.name() == "schema") out << ", schema " << a.string_val();
  }
  out << "\n  by type:";
  for (const auto& [t, c] : s.by_type) out << " " << ChakraProtoMsg::NodeType_Name(static_cast<ChakraProtoMsg::NodeType>(t)) << " " << c;
  if (!s.by_comm.empty()) {
    out << "\n  collectives:";
    for (const auto& [t, c] : s.by_comm) out << " " << CommTypeName(t) << " " << c;
  }
  out << "\n  " << s.cpu_ops << " CPU operators, " << s.with_duration << " nodes with a duration (" << s.duration_s * 1e3
      << " ms in all), " << s.data_deps << " data and " << s.ctrl_deps << " control dependencies";
  if (s.num_ops > 0) out << ", " << s.num_ops << " FLOPs (num_ops)";
  if (s.comm_bytes > 0) out << ", " << s.comm_bytes << " bytes communicated (comm_size)";
  out << "\n";
  std::map<uint64_t, const ChakraProtoMsg::Node*> by_id;
  for (const auto& n : trace.nodes) by_id.emplace(n.id(), &n);
  const auto first = IssuableNodes(trace, issuable);
  out << "  first issuable nodes (Chakra's feeder: no data dependencies, smallest id first):\n";
  for (uint64_t id : first) DescribeNode(*by_id.at(id), out);
  return out.str();
}

double TensorBytes(const ChakraProtoMsg::IOInfo& io) {
  // Each tensor is "[id, storage, offset, elements, element_bytes, 'device']": six fields whose last is quoted.
  const std::string& v = io.values();
  double bytes = 0;
  for (size_t open = v.find('['); open != std::string::npos; open = v.find('[', open + 1)) {
    const size_t close = v.find(']', open);
    if (close == std::string::npos) break;
    const std::string inner = v.substr(open + 1, close - open - 1);
    if (inner.find('[') != std::string::npos || inner.find('\'') == std::string::npos) continue;
    long long f[5];
    char device[64];
    if (std::sscanf(inner.c_str(), "%lld , %lld , %lld , %lld , %lld , '%63[^']'", &f[0], &f[1], &f[2], &f[3], &f[4],
                    device) == 6 &&
        f[3] >= 0 && f[4] >= 0) {
      bytes += static_cast<double>(f[3]) * static_cast<double>(f[4]);
    }
  }
  return bytes;
}

}  // namespace hetsim::models
