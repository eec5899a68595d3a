// Simulation for the Python package: one iteration (`hetsim simulate`), a plan's lowering (`hetsim lower`) and
// a replay over a trace (`hetsim replay`), with the steps and checks of tools/hetsim/sim_commands.cc and
// replay_command.cc. The GIL is released while the libraries work.
#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <sstream>

#include "models/intervals.h"
#include "models/kernels.h"
#include "models/lowering.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/yaml_proto.h"
#include "sim/replay.h"
#include "sim/runner/replay_setup.h"
#include "sim/simulator.h"
#include "tools/python/bindings.h"

namespace hetsim::python {
namespace {

// How `simulate` and `replay` simulate iterations (the CLI's --fidelity, --calibration, --profile, ...).
struct SimArgs {
  std::string fidelity = "balanced";
  std::string calibration;  // empty: the plan's own, else "default"
  std::vector<std::string> profiles;
  bool fold = true;
  uint32_t shared_cores = 0;
  std::string timeline_out;
  std::string timeline_devices = "auto";   // auto | all | stages
  std::vector<uint32_t> timeline_device_ids;  // when given: these devices
  py::object progress = py::none();
};

// The profiles and options a simulation runs with; the profiles live here, the options point at them.
struct SimSetup {
  models::ProfileDb profiles;
  sim::SimOptions options;
  std::string calibration;
};

std::unique_ptr<SimSetup> MakeSimSetup(const SimArgs& a, const Specs& specs) {
  auto setup = std::make_unique<SimSetup>();
  setup->options.fidelity = Unwrap(sim::ParseFidelity(a.fidelity));
  // The calibration: the argument, else the one the plan names (its software stack), else `default`.
  const bool plan_names = a.calibration.empty() && specs.plan && !specs.plan->calibration().empty();
  setup->calibration = plan_names ? models::ResolveRelative(specs.plan->calibration(), specs.plan_file)
                                  : (a.calibration.empty() ? "default" : a.calibration);
  std::vector<std::string> refs = a.profiles;
  for (auto& p : models::CalibrationProfiles(setup->calibration)) refs.push_back(std::move(p));
  setup->profiles = Unwrap(models::ProfileDb::Load(refs));
  Check(plan_names ? models::CheckKernelCalibration(setup->calibration, specs.plan_file + ": calibration")
                   : models::CheckKernelCalibration(setup->calibration));
  setup->options.profiles = &setup->profiles;
  setup->options.compute.calibration = setup->calibration;
  setup->options.fold = a.fold;
  return setup;
}

// Whether every id is a device the plan uses (the CLI's --timeline-devices ids).
void CheckPlanDevices(const std::vector<uint32_t>& ids, const proto::Plan& plan, const std::string& what) {
  std::vector<uint32_t> used;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) used.insert(used.end(), st.devices().begin(), st.devices().end());
  }
  for (uint32_t d : ids) {
    if (std::find(used.begin(), used.end(), d) == used.end()) {
      throw SpecError(what + ": device " + std::to_string(d) +
                      " is not used by the plan (hetsim.describe(plan=...) lists its devices)");
    }
  }
  if (ids.empty()) throw SpecError(what + ": no device given");
}

// The devices a timeline keeps (empty: all) and the note saying so.
void ChooseTimelineDevices(const SimArgs& a, const Specs& specs, sim::SimOptions* opt) {
  const proto::Plan& plan = *specs.plan;
  if (!a.timeline_device_ids.empty()) {
    CheckPlanDevices(a.timeline_device_ids, plan, "timeline_devices");
    opt->timeline_devices = a.timeline_device_ids;
  } else if (a.timeline_devices == "auto") {
    opt->timeline_devices = sim::DefaultTimelineDevices(plan, *specs.cluster);
  } else if (a.timeline_devices == "stages") {
    opt->timeline_devices = sim::StageTimelineDevices(plan);
  } else if (a.timeline_devices != "all") {
    throw SpecError("timeline_devices: '" + a.timeline_devices +
                    "' is not auto, all, stages or a list of device ids such as [0, 8, 16]");
  }
}

// Hands each SimProgress record to the Python callback as a dict (with the CLI's line under "line").
// `callback` must outlive the simulation; it is captured by address, so that copies of the function made
// without the GIL touch no Python reference count.
std::function<void(const sim::SimProgress&)> ProgressTo(const py::object& callback) {
  if (callback.is_none()) return {};
  const py::object* cb = &callback;
  return [cb](const sim::SimProgress& p) {
    py::gil_scoped_acquire gil;
    try {
      py::dict d;
      d["phase"] = p.phase == sim::SimProgress::kBuilt ? "built" : "playing";
      d["done"] = p.done;
      d["total"] = p.total;
      d["simulated_s"] = p.simulated_s;
      d["wall_s"] = p.wall_s;
      d["line"] = sim::DescribeProgress(p);
      (*cb)(d);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("hetsim simulate progress callback");
    }
  };
}

// What a simulation gives back, computed without the GIL.
struct Simulated {
  sim::SimResult result;
  models::PredictionInterval interval;
  std::string calibration;
};

Simulated SimulateWithoutGil(const SpecSources& sources, const SimArgs& a) {
  const Specs specs = LoadSpecs(sources, true, true);
  if (!specs.plan) throw SpecError("simulate: give plan= (a plan file, dict or hetsim.Plan) or planner=");
  models::PlanContext ctx{*specs.cluster, *specs.model, specs.training};
  Check(models::ValidatePlanStructure(*specs.plan, ctx, specs.plan_file));
  auto setup = MakeSimSetup(a, specs);
  sim::SimOptions& opt = setup->options;
  if (a.shared_cores > 0) {
    opt.shared_cores = a.shared_cores;
    Check(sim::CheckSharedCores(opt.shared_cores, "simulate: shared_cores"));
  }
  opt.record_timeline = !a.timeline_out.empty();
  if (opt.record_timeline) {
    Check(models::CheckWritable(a.timeline_out, "timeline_out"));
    ChooseTimelineDevices(a, specs, &opt);
  }
  opt.progress = ProgressTo(a.progress);
  Simulated out{Unwrap(sim::SimulateIteration(*specs.plan, ctx, opt)), {}, setup->calibration};
  if (opt.record_timeline) {
    Check(models::WriteFileAtomically(a.timeline_out, sim::ChromeTraceJson(out.result, *specs.cluster)));
  }
  proto::IterationReport& r = out.result.report;
  if (specs.plan->name().empty()) r.set_plan(specs.plan_file);
  out.interval = models::IntervalFor(
      models::ClassOf(*specs.plan, ctx.cluster, ctx.training, models::AllComputeMeasured(r), ctx.model.HasMoe()));
  return out;
}

// The headline numbers as values; the whole report as serialized protobuf (report_bytes), turned into JSON
// only when asked (report_json): a 16,384-GPU report is 8 MB of JSON.
py::dict Simulate(const SpecSources& sources, const SimArgs& a) {
  std::optional<Simulated> s;
  const auto t0 = std::chrono::steady_clock::now();
  {
    py::gil_scoped_release release;
    s = SimulateWithoutGil(sources, a);
  }
  // The C++ side's wall time (specs loaded, plan checked, simulated): what the CLI does, without its printing;
  // the Python layer is the rest of a hetsim.simulate call (tools/benchmarks/python_bench.py).
  const double cpp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const proto::IterationReport& r = s->result.report;
  const double t = r.iteration_time_s();
  py::dict out;
  out["report_bytes"] = py::bytes(r.SerializeAsString());
  for (const auto& [key, value] : std::initializer_list<std::pair<const char*, double>>{
           {"iteration_time_s", t}, {"tokens_per_s", r.tokens_per_s()}, {"mfu", r.mfu()},
           {"bubble_fraction", r.bubble_fraction()}, {"wall_time_s", r.wall_time_s()},
           {"interval_lo_s", s->interval.lo * t}, {"interval_hi_s", s->interval.hi * t}, {"cpp_s", cpp_s}}) {
    out[key] = value;
  }
  out["any_oom"] = r.any_oom();
  out["plan"] = r.plan();
  out["model"] = r.model();
  out["cluster"] = r.cluster();
  out["interval_runs"] = s->interval.runs;
  out["interval"] = models::DescribeInterval(s->interval, t);
  out["played_devices"] = s->result.played_devices;
  out["fold_note"] = s->result.fold_note;
  out["calibration"] = s->calibration;
  return out;
}

// A report from report_bytes as JSON (`hetsim simulate --report-out`'s text).
std::string ReportBytesJson(const py::bytes& bytes) {
  proto::IterationReport r;
  if (!r.ParseFromString(std::string(bytes))) throw SimulationError("report_json: not a serialized IterationReport");
  py::gil_scoped_release release;
  return models::ReportJson(r);
}

// `lower` writes every operation; past this many the text alone is gigabytes (the CLI's bound).
constexpr double kMaxLoweredOps = 8e6;

size_t CountOps(const models::Lowering& l) {
  size_t ops = 0;
  for (const auto& r : l.ranks) ops += r.ops.size() + r.dp_stream.size();
  return ops;
}

std::string Lower(const SpecSources& sources, bool fused, const std::vector<uint32_t>& devices) {
  const Specs specs = LoadSpecs(sources, true, true);
  if (!specs.plan) throw SpecError("lower: give plan=");
  models::PlanContext ctx{*specs.cluster, *specs.model, specs.training};
  Check(models::ValidatePlanStructure(*specs.plan, ctx, specs.plan_file));
  models::LoweringOptions lo;
  lo.fuse_passes = fused;
  if (!devices.empty()) {
    CheckPlanDevices(devices, *specs.plan, "devices");
    lo.lower_devices.assign(specs.cluster->num_devices(), false);
    for (uint32_t d : devices) lo.lower_devices[d] = true;
  }
  py::gil_scoped_release release;
  if (devices.empty()) {
    // Every rank's list: estimated from one device's before lowering them all.
    const uint32_t first = specs.plan->pipelines(0).stages(0).devices(0);
    models::LoweringOptions one = lo;
    one.lower_devices.assign(specs.cluster->num_devices(), false);
    one.lower_devices[first] = true;
    auto l = models::LowerPlan(*specs.plan, ctx, one);
    size_t used = 0;
    for (const auto& pipe : specs.plan->pipelines()) {
      for (const auto& st : pipe.stages()) used += static_cast<size_t>(st.devices_size());
    }
    if (l.ok() && static_cast<double>(CountOps(*l)) * static_cast<double>(used) > kMaxLoweredOps) {
      throw SpecError("lower: " + specs.plan_file + ": every rank's operations would be more than 8 million; " +
                      "choose devices with devices=[...] or fused=True");
    }
  }
  auto lowering = models::LowerPlan(*specs.plan, ctx, lo);
  if (!lowering.ok()) throw SpecError(specs.plan_file + ": " + lowering.status().message());
  return models::FormatLowering(*lowering);
}

// `hetsim replay`: `replay_yaml` holds the replay settings (models/proto/replay.proto's Replay, the CLI's flags).
py::list Replay(const SpecSources& sources, const std::string& replay_yaml, const SimArgs& a, uint64_t seed,
                const std::string& report_out, const std::string& figure) {
  const Specs specs = LoadSpecs(sources, true, true);
  if (!specs.plan) throw SpecError("replay: give plan= or planner= (the plan the run starts with)");
  models::PlanContext ctx{*specs.cluster, *specs.model, specs.training};
  Check(models::ValidatePlanStructure(*specs.plan, ctx, specs.plan_file));
  proto::Replay spec;
  ParseText(replay_yaml, "replay keywords", &spec);
  if (spec.policies_size() == 0) spec.add_policies()->set_name("checkpoint-restart");
  Check(models::CheckRanges(spec, "replay"));
  Check(runner::CheckReplaySpec(spec, "replay"));
  auto setup = MakeSimSetup(a, specs);
  const std::string cluster_ref = sources.cluster.ref.empty() ? specs.cluster->name() : sources.cluster.ref;
  const auto trace = Unwrap(runner::LoadReplayTrace(spec, *specs.cluster, cluster_ref, seed));
  sim::ReplayCache cache;
  std::vector<proto::ReplayReport> reports;
  for (const auto& policy : spec.policies()) {
    sim::ReplayInputs in;
    in.cluster = &*specs.cluster;
    in.model = &*specs.model;
    in.training = specs.training;
    in.plan = *specs.plan;
    in.trace = trace.trace;
    in.trace_name = trace.name;
    in.spec = spec;
    in.policy = policy;
    in.sim = setup->options;
    in.replan = runner::MakeReplanner(*specs.model, specs.training, setup->options.profiles);
    in.cache = &cache;
    const py::object* callback = &a.progress;  // by address: copies of the function need no GIL
    in.progress = [callback](const std::string& line) { CallQuietly(*callback, line); };
    py::gil_scoped_release release;
    auto rep = sim::ReplayRun(in);
    if (!rep.ok()) ThrowStatus(Status::Invalid("replay: policy " + policy.name() + ": " + rep.status().message()));
    reports.push_back(std::move(rep).value());
  }
  std::ostringstream said;
  Check(runner::WriteReplayOutputs(reports, report_out, figure, said));
  py::list out;
  for (const auto& r : reports) out.append(ToJson(r));
  return out;
}

}  // namespace

void BindSimulate(py::module_& m) {
  py::class_<SimArgs>(m, "SimArgs", "How iterations are simulated (the CLI's simulate flags)")
      .def(py::init<>())
      .def_readwrite("fidelity", &SimArgs::fidelity)
      .def_readwrite("calibration", &SimArgs::calibration)
      .def_readwrite("profiles", &SimArgs::profiles)
      .def_readwrite("fold", &SimArgs::fold)
      .def_readwrite("shared_cores", &SimArgs::shared_cores)
      .def_readwrite("timeline_out", &SimArgs::timeline_out)
      .def_readwrite("timeline_devices", &SimArgs::timeline_devices)
      .def_readwrite("timeline_device_ids", &SimArgs::timeline_device_ids)
      .def_readwrite("progress", &SimArgs::progress);
  m.def("simulate", &Simulate, py::arg("sources"), py::arg("args"));
  m.def("report_json", &ReportBytesJson, py::arg("report_bytes"));
  m.def("lower", &Lower, py::arg("sources"), py::arg("fused") = false, py::arg("devices") = std::vector<uint32_t>{});
  m.def("replay", &Replay, py::arg("sources"), py::arg("replay_yaml"), py::arg("args"), py::arg("seed") = 1,
        py::arg("report_out") = "", py::arg("figure") = "");
}

}  // namespace hetsim::python
