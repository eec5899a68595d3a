#include "models/spec_io.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "models/proto/calibration.pb.h"
#include "models/proto/trace.pb.h"
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
      {SpecKind::kCalibration, "calibration"}, {SpecKind::kTrace, "trace"}};
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
    std::ifstream in(name_or_path, std::ios::binary);
    if (!in) return Status::IoError(name_or_path + ": cannot open for reading");
    std::ostringstream ss;
    ss << in.rdbuf();
    return SpecText{name_or_path, ss.str(), false};
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

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IoError(path + ": cannot open for writing");
    out << text;
    out.flush();
    if (!out) return Status::IoError(path + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::IoError(path + ": cannot replace: " + ec.message());
  }
  return Status::Ok();
}

}  // namespace hetsim::models
