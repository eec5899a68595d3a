// Specs for the Python package: clusters, models, training specs and plans from bundled names, files or
// dicts, loaded as the CLI loads them (tools/hetsim/commands.cc), and what `hetsim list` and `describe` print.
#include "models/describe.h"
#include "models/gpu_catalog.h"
#include "models/hspmd.h"
#include "models/kernels.h"
#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "planners/planner.h"
#include "sim/replay.h"
#include "tools/python/bindings.h"

namespace hetsim::python {
namespace {

using models::SpecKind;

template <typename Message>
Message ParseSource(const Source& s, SpecKind kind) {
  Message msg;
  Check(models::ParseSpec(models::SpecText{s.label, s.text}, kind, &msg));
  return msg;
}

Result<models::Cluster> LoadClusterSource(const Source& s) {
  if (s.text.empty()) return models::LoadCluster(s.ref);
  return models::Cluster::Build(ParseSource<proto::Cluster>(s, SpecKind::kCluster), s.label);
}

Result<models::TransformerModel> LoadModelSource(const Source& s) {
  if (s.text.empty()) return models::LoadModel(s.ref);
  return models::TransformerModel::Build(ParseSource<proto::Model>(s, SpecKind::kModel), s.label);
}

// A cluster or model the plan names (`cluster:` beside the plan file) unless the caller gives one.
Source Referenced(const Source& given, const std::string& plan_ref, const std::string& plan_file) {
  if (given.given() || plan_ref.empty()) return given;
  return Source{models::ResolveRelative(plan_ref, plan_file), "", ""};
}

// The training spec: the given one, else the plan's own; the keyword overrides on top; resolved.
proto::Training LoadTraining(const SpecSources& s, const models::TransformerModel& model, const proto::Plan* plan) {
  proto::Training t;
  std::string file = "training keywords";
  if (s.training.given()) {
    t = s.training.text.empty() ? Unwrap(models::LoadTraining(s.training.ref))
                                : ParseSource<proto::Training>(s.training, SpecKind::kTraining);
    file = s.training.name();
  } else if (plan != nullptr && plan->has_training()) {
    t = plan->training();
    file = "plan training";
  }
  if (!s.training_overrides.empty()) {
    proto::Training over;
    ParseText(s.training_overrides, "training keywords", &over);
    t.MergeFrom(over);
  }
  return Unwrap(models::ResolveTraining(std::move(t), model, file));
}

}  // namespace

Specs LoadSpecs(const SpecSources& s, bool need_cluster, bool need_model) {
  Specs specs;
  if (s.plan.given()) {
    specs.plan_file = s.plan.name();
    specs.plan = s.plan.text.empty() ? Unwrap(models::LoadPlan(s.plan.ref)) : ParseSource<proto::Plan>(s.plan, SpecKind::kPlan);
  }
  const proto::Plan empty;
  const proto::Plan& plan = specs.plan ? *specs.plan : empty;
  const Source cluster = Referenced(s.cluster, plan.cluster(), specs.plan_file);
  const Source model = Referenced(s.model, plan.model(), specs.plan_file);
  auto missing = [&](const std::string& what) {
    return SpecError((specs.plan_file.empty() ? std::string("hetsim") : specs.plan_file) + ": no " + what +
                     " given; pass " + what + "=" + (specs.plan_file.empty() ? "" : " or add `" + what + ":` to the plan"));
  };
  if (!cluster.given() && need_cluster) throw missing("cluster");
  if (!model.given() && need_model) throw missing("model");
  // A cluster or model named by the plan's own keys: an error names the plan file and the key.
  auto from_plan = [&](const char* key, const Source& given, const Status& st) {
    return given.given() || specs.plan_file.empty() ? st : Status::Invalid(specs.plan_file + ": " + key + ": " + st.message());
  };
  if (cluster.given()) {
    auto c = LoadClusterSource(cluster);
    if (!c.ok()) ThrowStatus(from_plan("cluster", s.cluster, c.status()));
    specs.cluster = std::move(c).value();
  }
  if (model.given()) {
    auto m = LoadModelSource(model);
    if (!m.ok()) ThrowStatus(from_plan("model", s.model, m.status()));
    specs.model = std::move(m).value();
    specs.training = LoadTraining(s, *specs.model, specs.plan ? &*specs.plan : nullptr);
  }
  return specs;
}

namespace {

std::vector<std::string> ListBundled(const std::string& what) {
  std::vector<std::string> names;
  if (what == "planners") return planners::PlannerNames();
  if (what == "policies") {
    for (const auto& p : sim::RecoveryPolicies()) names.push_back(p.name);
    return names;
  }
  if (what == "gpus") {
    for (const auto& g : models::GpuCatalog::Bundled().gpus()) names.push_back(g.name);
    return names;
  }
  const std::vector<std::pair<std::string, SpecKind>> kinds = {
      {"clusters", SpecKind::kCluster}, {"models", SpecKind::kModel},     {"plans", SpecKind::kPlan},
      {"trainings", SpecKind::kTraining}, {"profiles", SpecKind::kProfile}, {"calibrations", SpecKind::kCalibration},
      {"traces", SpecKind::kTrace}};
  for (const auto& [name, kind] : kinds) {
    if (name == what) return models::BundledNames(kind);
  }
  throw SpecError("list: unknown kind '" + what +
                  "' (expected one of: clusters, models, gpus, planners, plans, trainings, profiles, calibrations, "
                  "traces, policies)");
}

std::string DescribeGpuType(const std::string& name) {
  auto gpu = models::GpuCatalog::Bundled().Find(name);
  if (!gpu.ok()) throw SpecError("gpu: " + gpu.status().message());
  return models::DescribeGpu(**gpu);
}

// `hetsim describe`: the cluster and model, or the plan (validated in full, memory included).
std::string Describe(const SpecSources& s, bool hspmd) {
  const bool with_plan = s.plan.given();
  Specs specs = LoadSpecs(s, with_plan, with_plan);
  std::string out;
  if (!specs.plan) {
    if (specs.cluster) out += models::DescribeCluster(*specs.cluster);
    if (specs.model) out += models::DescribeModel(*specs.model) + "  training: " + models::DescribeTraining(specs.training) + "\n";
    return out;
  }
  models::PlanContext ctx{*specs.cluster, *specs.model, specs.training};
  Check(models::ValidatePlanStructure(*specs.plan, ctx, specs.plan_file));
  out = models::DescribePlan(*specs.plan, ctx);
  if (hspmd) out += models::hspmd::DescribeAnnotations(*specs.plan, *specs.model);
  Check(models::ValidatePlan(*specs.plan, ctx, specs.plan_file));
  return out;
}

}  // namespace

py::dict ClusterDict(const models::Cluster& c) {
  py::list devices;
  for (uint32_t d = 0; d < c.num_devices(); ++d) {
    const models::DeviceInfo& dev = c.device(d);
    py::dict row;
    row["device"] = d;
    row["node"] = dev.node;
    row["node_name"] = c.node(dev.node).name;
    row["local"] = dev.local;
    row["gpu"] = dev.gpu->name;
    row["memory_gib"] = dev.gpu->memory_gib;
    row["peak_bf16_tflops"] = dev.gpu->peak_bf16_tflops;
    devices.append(row);
  }
  py::dict info;
  info["name"] = c.name();
  info["summary"] = c.Summary();
  info["num_devices"] = c.num_devices();
  info["num_nodes"] = c.nodes().size();
  info["devices"] = devices;
  info["spec"] = MessageToPython(c.spec());
  info["description"] = models::DescribeCluster(c);
  return info;
}

py::dict ModelDict(const models::TransformerModel& m) {
  py::dict info;
  info["name"] = m.name();
  info["num_blocks"] = m.num_blocks();
  info["num_layers"] = m.num_layers();  // blocks plus the embedding and the head, as plans count layers
  info["params"] = m.TotalParams();
  info["spec"] = MessageToPython(m.spec());
  info["description"] = models::DescribeModel(m);
  return info;
}

namespace {

// The resolved training spec (defaults from the model).
py::object ResolvedTraining(const SpecSources& s) { return MessageToPython(LoadSpecs(s, false, true).training); }

// Checks a plan in full against its cluster, model and training (`hetsim validate`): a one-line description.
std::string ValidatePlan(const SpecSources& s) {
  Specs specs = LoadSpecs(s, true, true);
  if (!specs.plan) throw SpecError("validate: give plan=");
  models::PlanContext ctx{*specs.cluster, *specs.model, specs.training};
  Check(models::ValidatePlan(*specs.plan, ctx, specs.plan_file));
  return "plan for " + specs.model->name() + " on " + specs.cluster->name();
}

}  // namespace

void BindSpecs(py::module_& m) {
  py::class_<Source>(m, "Source", "Where a spec comes from: a bundled name or path, or YAML/JSON text")
      .def(py::init<std::string, std::string, std::string>(), py::arg("ref") = "", py::arg("text") = "",
           py::arg("label") = "")
      .def_readwrite("ref", &Source::ref)
      .def_readwrite("text", &Source::text)
      .def_readwrite("label", &Source::label);
  py::class_<SpecSources>(m, "SpecSources", "The cluster, model, training and plan a call names")
      .def(py::init<>())
      .def_readwrite("cluster", &SpecSources::cluster)
      .def_readwrite("model", &SpecSources::model)
      .def_readwrite("training", &SpecSources::training)
      .def_readwrite("plan", &SpecSources::plan)
      .def_readwrite("training_overrides", &SpecSources::training_overrides);
  m.def("list_bundled", &ListBundled, py::arg("what"));
  m.def("describe_gpu", &DescribeGpuType, py::arg("name"));
  m.def("describe", &Describe, py::arg("sources"), py::arg("hspmd") = false);
  m.def("cluster_info", [](const Source& s) { return ClusterDict(Unwrap(LoadClusterSource(s))); }, py::arg("source"));
  m.def("model_info", [](const Source& s) { return ModelDict(Unwrap(LoadModelSource(s))); }, py::arg("source"));
  m.def("resolved_training", &ResolvedTraining, py::arg("sources"));
  m.def("validate_plan", &ValidatePlan, py::arg("sources"));
  m.def("check_calibration", [](const std::string& c) { Check(models::CheckKernelCalibration(c)); }, py::arg("name"));
}

}  // namespace hetsim::python
