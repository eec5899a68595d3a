#include "models/spec_io.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <string_view>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "models/proto/calibration.pb.h"
#include "models/proto/trace.pb.h"
#include "models/proto/advise.pb.h"
#include "models/proto/cluster.pb.h"
#include "models/proto/experiment.pb.h"
#include "models/proto/model.pb.h"
#include "models/suggest.h"
#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

const std::vector<std::pair<SpecKind, std::string>>& KindNames() {
  static const std::vector<std::pair<SpecKind, std::string>> names = {
      {SpecKind::kCluster, "cluster"}, {SpecKind::kModel, "model"}, {SpecKind::kTraining, "training"},
      {SpecKind::kPlan, "plan"},       {SpecKind::kProfile, "profile"},   {SpecKind::kExperiment, "experiment"},
      {SpecKind::kCalibration, "calibration"}, {SpecKind::kTrace, "trace"},
      {SpecKind::kAdvise, "advise"}};
  return names;
}

bool LooksLikePath(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".yaml") || s.ends_with(".yml");
}

}  // namespace

std::string SpecKindName(SpecKind kind) {
  for (const auto& [k, n] : KindNames()) {
    if (k == kind) return n;
  }
  return "?";
}

std::vector<std::string> BundledNames(SpecKind kind) {
  std::vector<std::string> names;
  for (const auto& f : BundledFiles()) {
    if (f.kind == kind) names.emplace_back(f.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<SpecText> ReadSpec(SpecKind kind, const std::string& name_or_path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) {
    // A spec is text written by people or by hetsim; past this size YAML parsing takes minutes and gigabytes.
    const auto bytes = std::filesystem::file_size(name_or_path, ec);
    const uintmax_t cap = kind == SpecKind::kTrace ? kMaxTraceYamlBytes : kMaxSpecBytes;
    if (!ec && bytes > cap) {
      return Status::Invalid(name_or_path + ": " + std::to_string(bytes >> 20) + " MiB is more than a YAML " +
                             SpecKindName(kind) + " may hold (" + std::to_string(cap >> 20) + " MiB)" +
                             (kind == SpecKind::kTrace ? "; write a large trace as binary protobuf (-o T.pb)" : ""));
    }
    std::ifstream in(name_or_path, std::ios::binary);
    if (!in) return Status::IoError(name_or_path + ": cannot open for reading");
    std::ostringstream ss;
    ss << in.rdbuf();
    return SpecText{name_or_path, ss.str(), false};
  }
  if (std::filesystem::exists(name_or_path, ec)) {
    return Status::Invalid(name_or_path + ": not a regular file (a folder or a device); give a spec file");
  }
  if (LooksLikePath(name_or_path)) {
    return Status::NotFound(name_or_path + ": no such file");
  }
  for (const auto& f : BundledFiles()) {
    if (f.kind == kind && f.name == name_or_path) return SpecText{std::string(f.path), std::string(f.text), true};
  }
  const auto names = BundledNames(kind);
  return Status::NotFound("no bundled " + SpecKindName(kind) + " named '" + name_or_path + "' and no such file" +
                          DidYouMean(name_or_path, names) + " (`hetsim list " + SpecKindName(kind) +
                          "s` prints the names)");
}

Result<SpecKind> DetectKind(const std::string& text, const std::string& file) {
  HETSIM_RETURN_IF_ERROR(PrescanYaml(text, file));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return Status::Invalid(file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                           ": YAML syntax error: " + e.msg);
  }
  std::vector<std::string> names;
  for (const auto& [k, n] : KindNames()) names.push_back(n);
  if (!root.IsMap() || !root["kind"]) {
    return Status::Invalid(file + ": missing top-level key 'kind' (one of: cluster, model, training, plan, profile, experiment)");
  }
  if (!root["kind"].IsScalar()) {
    return Status::Invalid(YamlLocation(file, root["kind"]) +
                           ": kind: expected a plain name (cluster, model, training, plan or profile)");
  }
  const std::string k = root["kind"].Scalar();
  for (const auto& [kind, n] : KindNames()) {
    if (n == k) return kind;
  }
  return Status::Invalid(YamlLocation(file, root["kind"]) + ": kind: unknown kind '" + k +
                         "' (expected cluster, model, training, plan, profile or experiment)" + DidYouMean(k, names));
}

template <typename Message>
Status ParseSpec(const SpecText& src, SpecKind kind, Message* msg) {
  const std::string want = SpecKindName(kind);
  HETSIM_RETURN_IF_ERROR(PrescanYaml(src.text, src.file));
  // A file of another kind gets one error about its kind, not one per key of the wrong schema.
  try {
    const YAML::Node root = YAML::Load(src.text);
    if (root.IsMap() && root["kind"] && root["kind"].IsScalar() && root["kind"].Scalar() != want) {
      return Status::Invalid(YamlLocation(src.file, root["kind"]) + ": kind: this is a '" + root["kind"].Scalar() +
                             "' file but a " + want + " was expected here");
    }
  } catch (const YAML::Exception&) {
    // ParseYaml below reports the syntax error with its position.
  }
  return ParseYaml(src.text, src.file, msg);
}

template Status ParseSpec(const SpecText&, SpecKind, proto::Cluster*);
template Status ParseSpec(const SpecText&, SpecKind, proto::Model*);
template Status ParseSpec(const SpecText&, SpecKind, proto::Training*);
template Status ParseSpec(const SpecText&, SpecKind, proto::Plan*);
template Status ParseSpec(const SpecText&, SpecKind, proto::Profile*);
template Status ParseSpec(const SpecText&, SpecKind, proto::Experiment*);
template Status ParseSpec(const SpecText&, SpecKind, proto::Calibration*);
template Status ParseSpec(const SpecText&, SpecKind, proto::Trace*);
template Status ParseSpec(const SpecText&, SpecKind, proto::AdviseConfig*);

Result<Cluster> LoadCluster(const std::string& name_or_path) {
  HETSIM_ASSIGN_OR_RETURN(SpecText src, ReadSpec(SpecKind::kCluster, name_or_path));
  proto::Cluster c;
  HETSIM_RETURN_IF_ERROR(ParseSpec(src, SpecKind::kCluster, &c));
  return Cluster::Build(std::move(c), src.file);
}

Result<TransformerModel> LoadModel(const std::string& name_or_path) {
  HETSIM_ASSIGN_OR_RETURN(SpecText src, ReadSpec(SpecKind::kModel, name_or_path));
  proto::Model m;
  HETSIM_RETURN_IF_ERROR(ParseSpec(src, SpecKind::kModel, &m));
  return TransformerModel::Build(std::move(m), src.file);
}

Result<proto::Training> LoadTraining(const std::string& name_or_path) {
  HETSIM_ASSIGN_OR_RETURN(SpecText src, ReadSpec(SpecKind::kTraining, name_or_path));
  proto::Training t;
  HETSIM_RETURN_IF_ERROR(ParseSpec(src, SpecKind::kTraining, &t));
  return t;
}

Result<proto::Plan> LoadPlan(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(SpecText src, ReadSpec(SpecKind::kPlan, path));
  proto::Plan p;
  HETSIM_RETURN_IF_ERROR(ParseSpec(src, SpecKind::kPlan, &p));
  return p;
}

Result<proto::Profile> LoadProfile(const std::string& name_or_path) {
  HETSIM_ASSIGN_OR_RETURN(SpecText src, ReadSpec(SpecKind::kProfile, name_or_path));
  proto::Profile p;
  HETSIM_RETURN_IF_ERROR(ParseSpec(src, SpecKind::kProfile, &p));
  return p;
}

namespace {

bool HasFileExtension(const std::string& ref) {
  static constexpr std::array<std::string_view, 9> kExt = {".yaml", ".yml", ".csv", ".json", ".jsonl",
                                                           ".txt",  ".pb",  ".textproto", ".tsv"};
  return std::any_of(kExt.begin(), kExt.end(), [&](std::string_view e) { return ref.ends_with(e); });
}

}  // namespace

std::string ResolveRelative(const std::string& ref, const std::string& from_file) {
  namespace fs = std::filesystem;
  if (ref.empty() || from_file.empty() || fs::path(ref).is_absolute()) return ref;
  std::error_code ec;
  if (!fs::is_regular_file(from_file, ec)) return ref;
  const fs::path candidate = fs::path(from_file).parent_path() / ref;
  if (ref.find('/') != std::string::npos || HasFileExtension(ref)) return candidate.lexically_normal().string();
  return fs::is_regular_file(candidate, ec) ? candidate.string() : ref;
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path, [&](const PieceSink& put) { return put(text); });
}

Status WriteFileAtomically(const std::string& path, const std::function<Status(const PieceSink& put)>& produce) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::IoError(path + ": is a folder; give a file name (e.g. " + path + "/out.json)");
  }
  // The temporary name is fresh (pid and a counter), and O_EXCL|O_NOFOLLOW refuse a file or link planted there.
  static std::atomic<unsigned> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());  // nothing half-written is left behind
    return Status::IoError(path + ": " + what + ": " + std::strerror(err) +
                           (err == ENOSPC ? " (free some space, or write elsewhere)" : ""));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return Status::IoError(path + ": cannot write here: " + std::strerror(err));
  }
  int write_error = 0;
  const PieceSink put = [&](std::string_view text) -> Status {
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        write_error = n < 0 ? errno : EIO;
        return Status::IoError(path + ": write failed");
      }
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  };
  const Status produced = produce(put);
  if (write_error != 0) {
    ::close(fd);
    return fail("write failed", write_error);
  }
  if (!produced.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return produced;
  }
  if (::close(fd) != 0) return fail("write failed", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("cannot replace the file", errno);
  return Status::Ok();
}

Status CheckWritable(const std::string& path, const std::string& flag) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::IoError(flag + " " + path + ": is a folder; give a file name (e.g. " + path + "/out.json)");
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::IoError(flag + " " + path + ": folder " + dir.string() + " does not exist; create it first");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    const int err = errno;
    return Status::IoError(flag + " " + path + ": cannot write into " + dir.string() + ": " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace hetsim::models
