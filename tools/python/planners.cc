// Planning from Python: `hetsim.plan` runs a registered planner or a planner written in Python (a subclass of
// hetsim.Planner) through planning::PlanOnTwin, as `hetsim plan` does (tools/hetsim/plan_commands.cc). A Python
// planner is a planners::Planner (PyPlanner below), so the manifest runner and advise run it like any other:
// the scheme "python" (planners/planner.h RegisterPlannerScheme) makes `python:module:Class` a planner name.
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <google/protobuf/empty.pb.h>

#include "models/describe.h"
#include "models/plan.h"
#include "models/profile_db.h"
#include "models/kernels.h"
#include "models/yaml_proto.h"
#include "planners/planner.h"
#include "sim/planning/refine.h"
#include "tools/python/bindings.h"

namespace hetsim::python {
namespace {

// A YAML value as Python: mappings as dicts, sequences as lists, scalars as int, float, bool, None or str.
py::object YamlToPython(const YAML::Node& node) {
  if (node.IsMap()) {
    py::dict d;
    for (const auto& kv : node) d[py::str(kv.first.Scalar())] = YamlToPython(kv.second);
    return d;
  }
  if (node.IsSequence()) {
    py::list l;
    for (const auto& v : node) l.append(YamlToPython(v));
    return l;
  }
  if (!node.IsScalar()) return py::none();
  if (node.Tag() == "!") return py::str(node.Scalar());  // quoted: a string whatever it looks like
  const std::string& s = node.Scalar();
  if (s == "null" || s == "~") return py::none();
  if (s == "true" || s == "false") return py::bool_(s == "true");
  long long i = 0;
  if (auto r = std::from_chars(s.data(), s.data() + s.size(), i); r.ec == std::errc() && r.ptr == s.data() + s.size()) {
    return py::int_(i);
  }
  double f = 0;
  if (auto r = std::from_chars(s.data(), s.data() + s.size(), f); r.ec == std::errc() && r.ptr == s.data() + s.size()) {
    return py::float_(f);
  }
  return py::str(s);
}

}  // namespace

py::object MessageToPython(const google::protobuf::Message& msg) {
  return YamlToPython(YAML::Load(models::MessageToYaml(msg)));
}

namespace {

// A Python exception in one line: its type, its message and where it was raised ("ValueError: bad (at
// my_planners.py:42)"); the full traceback is the Python side's to print.
std::string PythonErrorText(const py::error_already_set& e) {
  std::string text = e.type() ? py::str(e.type().attr("__name__")).cast<std::string>() : "error";
  if (e.value()) text += ": " + py::str(e.value()).cast<std::string>();
  py::object tb = e.trace();  // may be null (no traceback)
  if (!tb || tb.is_none()) return text;
  while (!tb.attr("tb_next").is_none()) tb = tb.attr("tb_next");
  return text + " (at " + py::str(tb.attr("tb_frame").attr("f_code").attr("co_filename")).cast<std::string>() + ":" +
         py::str(tb.attr("tb_lineno")).cast<std::string>() + ")";
}

// A plan from Python (a dict of the plan file's keys, a hetsim.Plan, or YAML text), parsed as a plan file is;
// errors name `label` and the key path.
proto::Plan PlanFromPython(py::handle obj, const std::string& label) {
  py::object value = py::reinterpret_borrow<py::object>(obj);
  if (py::hasattr(value, "to_dict")) value = value.attr("to_dict")();
  std::string text;
  if (py::isinstance<py::str>(value)) {
    text = value.cast<std::string>();
  } else if (py::isinstance<py::dict>(value)) {
    text = py::module_::import("json").attr("dumps")(value, py::arg("indent") = 1).cast<std::string>();
  } else {
    throw SpecError(label + ": got a " + std::string(py::str(value.get_type().attr("__name__"))) +
                    "; a plan is a dict of the plan file's keys (pipelines: [...]), a hetsim.Plan or YAML text");
  }
  proto::Plan plan;
  ParseText(text, label, &plan);
  return plan;
}

// What a Python planner's make_plan receives (wrapped by hetsim.Problem): the problem of the call, valid until
// make_plan returns.
class ProblemView {
 public:
  explicit ProblemView(const planners::PlanningProblem* p) : p_(p) {}
  void Invalidate() { p_ = nullptr; }
  const planners::PlanningProblem& get() const {
    if (p_ == nullptr) throw SpecError("this problem belongs to a make_plan call that has returned; keep its data, not it");
    return *p_;
  }
  py::dict Cluster() const { return ClusterDict(get().cluster); }
  py::dict Model() const { return ModelDict(get().model); }
  py::object Training() const { return MessageToPython(get().training); }
  // The analytic estimate (the baselines' cost model, planners/cost_model.h) of a plan, memory included.
  py::dict Estimate(py::handle plan_obj) const {
    const proto::Plan plan = PlanFromPython(plan_obj, "estimate(plan)");
    const models::PlanContext ctx{get().cluster, get().model, get().training};
    Check(models::ValidatePlanStructure(plan, ctx, "estimate(plan)"));
    planners::PlanEstimate e;
    {
      py::gil_scoped_release release;
      e = planners::AnalyticCostModel(get()).Estimate(plan, true);
    }
    py::dict d;
    d["iteration_s"] = e.iteration_s;
    d["tokens_per_s"] = e.tokens_per_s;
    d["mfu"] = e.mfu;
    d["oom"] = e.oom;
    d["peak_memory_fraction"] = e.peak_memory_fraction;
    d["worst_shortfall_gib"] = e.worst_shortfall_gib;
    return d;
  }
  void Validate(py::handle plan_obj) const {
    const proto::Plan plan = PlanFromPython(plan_obj, "validate(plan)");
    Check(models::ValidatePlan(plan, models::PlanContext{get().cluster, get().model, get().training}, "validate(plan)"));
  }

 private:
  const planners::PlanningProblem* p_;
};

// A planner written in Python: an instance of a hetsim.Planner subclass. Every call into it takes the GIL.
class PyPlanner final : public planners::Planner {
 public:
  PyPlanner(py::object instance, std::string name) : instance_(std::move(instance)), name_(std::move(name)) {}
  ~PyPlanner() override {
    py::gil_scoped_acquire gil;
    instance_ = py::object();
  }
  std::string name() const override { return name_; }
  Status Configure(const YAML::Node& node, const std::string& file) override {
    if (!node || node.IsNull()) return Status::Ok();
    py::gil_scoped_acquire gil;
    try {
      instance_.attr("configure")(YamlToPython(node));
    } catch (py::error_already_set& e) {
      return Status::Invalid(file + ": options of planner '" + name_ + "': " + PythonErrorText(e));
    }
    return Status::Ok();
  }
  Status ConfigureText(const std::string& yaml, const std::string& file) override {
    if (yaml.empty()) return Status::Ok();
    try {
      return Configure(YAML::Load(yaml), file);
    } catch (const YAML::Exception& e) {
      return Status::Invalid(file + ": " + e.what());
    }
  }
  const google::protobuf::Message& options() const override { return options_; }
  Result<planners::PlannerResult> MakePlan(const planners::PlanningProblem& problem) const override;

 private:
  py::object instance_;
  std::string name_;
  google::protobuf::Empty options_;  // its options are the Python object's own
};

Result<planners::PlannerResult> PyPlanner::MakePlan(const planners::PlanningProblem& problem) const {
  py::gil_scoped_acquire gil;
  const std::string label = name_ + " make_plan()";
  ProblemView view(&problem);
  proto::Plan plan;
  try {
    py::object wrapped = py::module_::import("hetsim").attr("Problem")(py::cast(&view, py::return_value_policy::reference));
    py::object result = instance_.attr("make_plan")(wrapped);
    view.Invalidate();
    if (result.is_none()) return Status::Infeasible(label + ": returned None (no plan fits)");
    plan = PlanFromPython(result, label);
  } catch (py::error_already_set& e) {
    view.Invalidate();
    if (e.matches(py::module_::import("hetsim").attr("InfeasibleError"))) {
      return Status::Infeasible(label + ": " + PythonErrorText(e));
    }
    return Status::Invalid(label + " raised " + PythonErrorText(e));
  } catch (const SpecError& e) {
    view.Invalidate();
    return Status::Invalid(e.what());
  }
  // A Python planner's plan is the user's input: checked here with the key paths, not as a planner bug.
  HETSIM_RETURN_IF_ERROR(models::ValidatePlan(plan, models::PlanContext{problem.cluster, problem.model, problem.training}, label));
  planners::PlannerResult r;
  r.plan = std::move(plan);
  r.stats.candidates_evaluated = 1;
  return r;
}

// "python:module:Class" for an instance of that class.
std::string PythonPlannerName(const py::handle& instance) {
  const py::object cls = instance.attr("__class__");
  return "python:" + py::str(cls.attr("__module__")).cast<std::string>() + ":" +
         py::str(cls.attr("__qualname__")).cast<std::string>();
}

// The scheme "python": `module:Class` imported, checked to be a hetsim.Planner and instantiated.
Result<std::unique_ptr<planners::Planner>> CreatePythonPlanner(const std::string& ref) {
  const size_t colon = ref.find(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == ref.size()) {
    return Status::Invalid("python planner '" + ref + "': expected module:Class (e.g. my_planners:Greedy)");
  }
  py::gil_scoped_acquire gil;
  try {
    py::object cls = py::module_::import(ref.substr(0, colon).c_str());
    const std::string qualname = ref.substr(colon + 1);  // may be dotted: Outer.Inner
    for (size_t at = 0;;) {
      const size_t dot = qualname.find('.', at);
      cls = cls.attr(qualname.substr(at, dot == std::string::npos ? std::string::npos : dot - at).c_str());
      if (dot == std::string::npos) break;
      at = dot + 1;
    }
    const py::object base = py::module_::import("hetsim").attr("Planner");
    if (!PyType_Check(cls.ptr()) || PyObject_IsSubclass(cls.ptr(), base.ptr()) != 1) {
      return Status::Invalid("python planner '" + ref + "' is not a subclass of hetsim.Planner");
    }
    return std::unique_ptr<planners::Planner>(new PyPlanner(cls(), "python:" + ref));
  } catch (py::error_already_set& e) {
    const bool import = e.matches(PyExc_ImportError);
    return Status::NotFound("python planner '" + ref + "': " + PythonErrorText(e) +
                            (import ? " (is the module importable from the Python that runs it, e.g. on PYTHONPATH?)"
                                    : " (expected module:Class, a subclass of hetsim.Planner)"));
  }
}

struct PlanArgs {
  std::string planner;                // a registered name or python:module:Class
  py::object instance = py::none();   // or a hetsim.Planner instance
  std::string options;                // the planner's options (YAML text)
  std::string calibration;
  std::vector<std::string> profiles;
  int refine = -1, polish = -1;       // -1: the defaults
  py::object progress = py::none();
};

std::unique_ptr<planners::Planner> MakePlanner(const PlanArgs& a) {
  std::unique_ptr<planners::Planner> planner;
  if (!a.instance.is_none()) {
    planner = std::make_unique<PyPlanner>(a.instance, PythonPlannerName(a.instance));
  } else {
    planner = Unwrap(planners::CreatePlanner(a.planner));
  }
  Check(planner->ConfigureText(a.options, "planner options"));
  return planner;
}

py::dict PlanResultDict(const planners::PlannerResult& r, const planning::RefineOutcome& checked, const Specs& specs,
                        const SpecSources& s) {
  const models::PlanContext ctx{*specs.cluster, *specs.model, specs.training};
  proto::Plan named = r.plan;
  if (named.name().empty()) named.set_name(r.plan.planner() + "-" + specs.model->name() + "-" + specs.cluster->name());
  py::dict d;
  d["plan"] = MessageToPython(r.plan);
  d["plan_yaml"] = planners::PlanFileYaml(named, s.cluster.ref, s.model.ref, specs.training);
  d["description"] = models::DescribePlan(r.plan, ctx) + planners::DescribeEstimate(r.estimate) +
                     planners::DescribeStats(r.stats);
  d["estimated_iteration_s"] = r.estimate.iteration_s;
  d["candidates"] = r.stats.candidates_evaluated;
  d["search_wall_s"] = r.stats.wall_time_s;
  d["notes"] = r.stats.notes;
  d["training"] = MessageToPython(specs.training);
  if (!checked.candidates.empty()) {
    d["twin_chosen_rank"] = checked.candidates[checked.chosen].rank;
    d["twin_simulated_s"] = checked.candidates[checked.chosen].simulated_s;
  }
  return d;
}

py::dict Plan(const SpecSources& s, const PlanArgs& a) {
  auto planner = MakePlanner(a);
  const Specs specs = LoadSpecs(s, true, true);
  std::optional<models::ProfileDb> profiles;
  models::ComputeOptions compute;
  std::vector<std::string> refs = a.profiles;
  if (!a.calibration.empty()) {
    compute.calibration = a.calibration;
    Check(models::CheckKernelCalibration(a.calibration));
    for (auto& p : models::CalibrationProfiles(a.calibration)) refs.push_back(std::move(p));
  }
  if (!refs.empty()) profiles = Unwrap(models::ProfileDb::Load(refs));
  planners::PlanningProblem problem{*specs.cluster, *specs.model, specs.training, profiles ? &*profiles : nullptr,
                                    compute};
  const py::object* progress = &a.progress;  // by address: copies of the function need no GIL
  if (!a.progress.is_none()) problem.progress = [progress](const std::string& line) { CallQuietly(*progress, line); };
  planning::RefineOptions refine;
  if (a.refine >= 0) refine.k = static_cast<uint32_t>(a.refine);
  if (a.polish >= 0) refine.polish = static_cast<uint32_t>(a.polish);
  if (a.refine > 64) throw SpecError("refine: expected 0..64 candidates to simulate, found " + std::to_string(a.refine));
  if (a.polish > 0 && a.refine == 0) throw SpecError("polish needs the twin check: drop refine=0");
  planning::RefineOutcome checked;
  Result<planners::PlannerResult> result = Status::Internal("not planned");
  {
    py::gil_scoped_release release;
    result = planning::PlanOnTwin(*planner, problem, refine, &checked);
  }
  if (!result.ok()) ThrowStatus(result.status());
  return PlanResultDict(*result, checked, specs, s);
}

}  // namespace

void BindPlanners(py::module_& m) {
  planners::RegisterPlannerScheme("python", CreatePythonPlanner);
  py::class_<ProblemView>(m, "ProblemView", "The problem a Python planner's make_plan receives (see hetsim.Problem)")
      .def("cluster", &ProblemView::Cluster)
      .def("model", &ProblemView::Model)
      .def("training", &ProblemView::Training)
      .def("estimate", &ProblemView::Estimate, py::arg("plan"))
      .def("validate", &ProblemView::Validate, py::arg("plan"));
  py::class_<PlanArgs>(m, "PlanArgs", "Which planner and how (the CLI's plan flags)")
      .def(py::init<>())
      .def_readwrite("planner", &PlanArgs::planner)
      .def_readwrite("instance", &PlanArgs::instance)
      .def_readwrite("options", &PlanArgs::options)
      .def_readwrite("calibration", &PlanArgs::calibration)
      .def_readwrite("profiles", &PlanArgs::profiles)
      .def_readwrite("refine", &PlanArgs::refine)
      .def_readwrite("polish", &PlanArgs::polish)
      .def_readwrite("progress", &PlanArgs::progress);
  m.def("plan", &Plan, py::arg("sources"), py::arg("args"));
  m.def("planner_summaries", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& p : planners::Planners()) out.emplace_back(p.name, p.summary);
    return out;
  });
}

}  // namespace hetsim::python
