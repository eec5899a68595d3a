// The subcommands of `hetsim`. Each command is a few lines over the libraries.
#include <filesystem>
#include <ostream>

#include "models/describe.h"
#include "models/gpu_catalog.h"
#include "models/hspmd.h"
#include "models/plan.h"
#include "models/proto/cluster.pb.h"
#include "models/proto/model.pb.h"
#include "models/kernels.h"
#include "models/spec_io.h"
#include "models/suggest.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/replay.h"
#include "tools/hetsim/cli.h"

namespace hetsim::cli {
namespace {

using models::SpecKind;

std::string Str(const po::variables_map& vm, const char* key) { return FlagString(vm, key); }

}  // namespace

// Flags that build a training spec without a file.
void AddTrainingFlags(po::options_description& d) {
  d.add_options()
      ("training,t", po::value<std::string>(), "training spec file (defaults come from the model)")
      ("global-batch", po::value<int64_t>(), "global batch size in sequences (overrides the spec)")
      ("seq-len", po::value<int64_t>(), "sequence length in tokens (overrides the spec)")
      ("dtype", po::value<std::string>(), "bf16 | fp16 | fp32 | fp8 | tf32 (overrides the spec)")
      ("recompute", po::value<std::string>(), "none | selective | full | op_selective (overrides the spec; docs/formats.md)");
}

namespace {

// The training spec from --training, the plan's inline spec and the flags (flags win), resolved.
Result<proto::Training> TrainingFromFlags(const po::variables_map& vm, const models::TransformerModel& model,
                                          const proto::Training* from_plan) {
  proto::Training t;
  std::string file = "training flags";
  if (vm.count("training")) {
    HETSIM_ASSIGN_OR_RETURN(t, models::LoadTraining(Str(vm, "training")));
    file = Str(vm, "training");
  } else if (from_plan != nullptr) {
    t = *from_plan;
    file = "plan training";
  }
  for (const char* flag : {"global-batch", "seq-len"}) {
    if (!vm.count(flag)) continue;
    const int64_t v = vm[flag].as<int64_t>();
    const bool seq = std::string(flag) == "seq-len";
    const int64_t most = seq ? 1048576 : 16777216;  // training.proto's bounds
    if (v < 1 || v > most) {
      return Status::Invalid("--" + std::string(flag) + ": expected 1.." + std::to_string(most) + " " +
                             (seq ? "tokens" : "sequences") + ", found " + std::to_string(v));
    }
    if (std::string(flag) == "seq-len") {
      t.set_seq_len(static_cast<uint32_t>(v));
    } else {
      t.set_global_batch_size(static_cast<uint32_t>(v));
    }
  }
  if (vm.count("dtype")) {
    HETSIM_ASSIGN_OR_RETURN(const int d, models::ParseEnumFlag("dtype", Str(vm, "dtype"), proto::DType_descriptor()));
    t.set_dtype(static_cast<proto::DType>(d));
  }
  if (vm.count("recompute")) {
    HETSIM_ASSIGN_OR_RETURN(const int r, models::ParseEnumFlag("recompute", Str(vm, "recompute"), proto::Recompute_descriptor()));
    t.set_recompute(static_cast<proto::Recompute>(r));
  }
  return models::ResolveTraining(std::move(t), model, file);
}

// A reference inside a plan (`cluster: ../c.yaml`) is resolved relative to the plan file.
std::string RelativeTo(const std::string& ref, const std::string& plan_file) {
  return models::ResolveRelative(ref, plan_file);
}


// ---- list ----------------------------------------------------------------------------------------

int RunList(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  const std::string what = Str(vm, "what");
  const std::vector<std::string> kinds = {"clusters", "models",   "gpus",         "planners", "plans",
                                          "trainings", "profiles", "calibrations", "traces",   "policies"};
  if (what == "policies") {
    for (const auto& p : sim::RecoveryPolicies()) out << p.name << "\t" << p.summary << "\n";
    return 0;
  }
  if (what == "planners") {
    for (const auto& [name, summary] : ListPlanners()) out << name << "\t" << summary << "\n";
    return 0;
  }
  if (what == "gpus") {
    for (const auto& g : models::GpuCatalog::Bundled().gpus()) {
      out << g.name << "\t" << g.peak_bf16_tflops << " TFLOPS bf16\t" << g.peak_fp16_tflops << " TFLOPS fp16\t"
          << g.memory_gib << " GiB\t" << g.scale_up << "\n";
    }
    return 0;
  }
  const std::vector<std::pair<std::string, SpecKind>> map = {{"clusters", SpecKind::kCluster},
                                                              {"models", SpecKind::kModel},
                                                              {"plans", SpecKind::kPlan},
                                                              {"trainings", SpecKind::kTraining},
                                                              {"profiles", SpecKind::kProfile},
                                                              {"calibrations", SpecKind::kCalibration},
                                                              {"traces", SpecKind::kTrace}};
  for (const auto& [name, kind] : map) {
    if (name == what) {
      for (const auto& n : models::BundledNames(kind)) out << n << "\n";
      return 0;
    }
  }
  err << "hetsim list: unknown kind '" << what << "'" << DidYouMean(what, kinds)
      << " (expected one of: clusters, models, gpus, planners, plans, trainings, profiles, calibrations, traces, "
         "policies)\n";
  return 2;
}

// ---- validate ------------------------------------------------------------------------------------

// Validates one file; prints "FILE: OK (…)" or its errors. Returns true when valid.
bool ValidateOne(const std::string& path, const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (path.ends_with(".pb")) {  // a binary trace (traces/trace.h)
    auto desc = ValidateTraceFile(path);
    if (!desc.ok()) {
      err << desc.status().message() << "\n";
      return false;
    }
    out << path << ": OK (" << *desc << ")\n";
    return true;
  }
  auto text = models::ReadSpec(SpecKind::kPlan, path);
  // ReadSpec with any kind reads files; a bare name is looked up among every kind of bundled spec.
  if (!text.ok()) {
    std::vector<std::string> names;
    for (auto k : {SpecKind::kCluster, SpecKind::kModel, SpecKind::kTraining, SpecKind::kPlan, SpecKind::kProfile,
                   SpecKind::kCalibration}) {
      auto t = models::ReadSpec(k, path);
      if (t.ok()) {
        text = t;
        break;
      }
      for (auto&& n : models::BundledNames(k)) names.push_back(n);
    }
    if (!text.ok()) {
      err << (text.status().code() == Status::Code::kNotFound && path.find('/') == std::string::npos &&
                      !path.ends_with(".yaml")
                  ? "no bundled spec named '" + path + "' and no such file" + DidYouMean(path, names)
                  : text.status().message())
          << "\n";
      return false;
    }
  }
  auto kind = models::DetectKind(text->text, text->file);
  if (!kind.ok()) {
    err << kind.status().message() << "\n";
    return false;
  }
  Status st;
  std::string what;
  switch (*kind) {
    case SpecKind::kCluster: {
      proto::Cluster c;
      st = models::ParseSpec(*text, *kind, &c);
      if (st.ok()) {
        auto built = models::Cluster::Build(c, text->file);
        st = built.status();
        if (built.ok()) what = "cluster, " + built->Summary();
      }
      break;
    }
    case SpecKind::kModel: {
      proto::Model m;
      st = models::ParseSpec(*text, *kind, &m);
      if (st.ok()) {
        auto built = models::TransformerModel::Build(m, text->file);
        st = built.status();
        if (built.ok()) {
          char buf[64];
          std::snprintf(buf, sizeof(buf), "%.3f", built->TotalParams() / 1e9);
          what = std::string("model, ") + buf + " B parameters";
        }
      }
      break;
    }
    case SpecKind::kTraining: {
      proto::Training t;
      st = models::ParseSpec(*text, *kind, &t);
      what = "training";
      if (st.ok() && vm.count("model")) {
        auto model = models::LoadModel(Str(vm, "model"));
        st = model.ok() ? models::ResolveTraining(t, *model, text->file).status() : model.status();
      }
      break;
    }
    case SpecKind::kProfile: {
      proto::Profile p;
      st = models::ParseSpec(*text, *kind, &p);
      if (st.ok()) {
        auto gpu = models::GpuCatalog::Bundled().Find(p.gpu());
        if (!gpu.ok()) st = Status::Invalid(text->file + ": gpu: " + gpu.status().message());
      }
      what = "profile";
      break;
    }
    case SpecKind::kCalibration: {
      auto c = models::LoadKernelCalibration(path);
      st = c.status();
      if (c.ok()) what = "calibration of " + std::to_string(c->gpus_size()) + " GPU group(s)";
      break;
    }
    case SpecKind::kTrace: {
      auto desc = ValidateTraceFile(text->file);
      st = desc.status();
      if (desc.ok()) what = *desc;
      break;
    }
    case SpecKind::kAdvise: {
      auto desc = ValidateAdviseConfig(text->file);
      st = desc.status();
      if (desc.ok()) what = *desc;
      break;
    }
    case SpecKind::kExperiment: {
      auto desc = ValidateExperiment(text->file);
      st = desc.status();
      if (desc.ok()) what = *desc;
      break;
    }
    case SpecKind::kPlan: {
      proto::Plan p;
      st = models::ParseSpec(*text, *kind, &p);
      if (!st.ok()) break;
      const std::string cref = vm.count("cluster") ? Str(vm, "cluster") : RelativeTo(p.cluster(), text->file);
      const std::string mref = vm.count("model") ? Str(vm, "model") : RelativeTo(p.model(), text->file);
      if (cref.empty() || mref.empty()) {
        st = Status::Invalid(text->file + ": " + (cref.empty() ? "cluster" : "model") +
                             ": the plan names no " + (cref.empty() ? "cluster" : "model") +
                             "; add the key to the plan or pass --" + (cref.empty() ? "cluster" : "model"));
        break;
      }
      auto cluster = models::LoadCluster(cref);
      auto model = models::LoadModel(mref);
      if (!cluster.ok() || !model.ok()) {
        const bool c = !cluster.ok();
        const bool from_flag = vm.count(c ? "cluster" : "model") > 0;
        const std::string msg = c ? cluster.status().message() : model.status().message();
        st = Status::Invalid(from_flag ? msg : text->file + ": " + (c ? "cluster" : "model") + ": " + msg);
        break;
      }
      auto training = TrainingFromFlags(vm, *model, p.has_training() ? &p.training() : nullptr);
      if (!training.ok()) {
        st = Status::Invalid(text->file + ": training: " + training.status().message());
        break;
      }
      models::PlanContext ctx{*cluster, *model, *training};
      st = models::ValidatePlan(p, ctx, text->file);
      what = "plan for " + model->name() + " on " + cluster->name();
      break;
    }
  }
  if (!st.ok()) {
    err << st.message() << "\n";
    return false;
  }
  out << text->file << ": OK (" << what << ")\n";
  return true;
}

int RunValidate(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (!vm.count("files")) {
    err << "hetsim validate: give one or more spec files (or bundled names)\n";
    return 2;
  }
  bool all_ok = true;
  for (const auto& f : vm["files"].as<std::vector<std::string>>()) all_ok &= ValidateOne(f, vm, out, err);
  return all_ok ? 0 : 1;
}

// ---- describe ------------------------------------------------------------------------------------

// `describe --gpu NAME`: the catalog row, then what its compute times rest on in each dtype it can train in.
int DescribeGpuType(const std::string& name, std::ostream& out, std::ostream& err) {
  auto gpu = models::GpuCatalog::Bundled().Find(name);
  if (!gpu.ok()) return Fail(err, Status::NotFound("--gpu: " + gpu.status().message()));
  const models::GpuSpec& g = **gpu;
  out << models::DescribeGpu(g);
  for (proto::DType d : {proto::DTYPE_BF16, proto::DTYPE_FP16, proto::DTYPE_TF32, proto::DTYPE_FP32, proto::DTYPE_FP8}) {
    if (g.PeakTflops(d) <= 0) continue;
    const proto::ComputeBasisReport b = models::ComputeBasisFor(g, "", d);
    const std::string math = g.MathDType(d) == d ? "" : std::string(" (runs as ") + models::DTypeName(g.MathDType(d)) + ")";
    out << "  compute basis   " << models::DTypeName(d) << math << ": " << ComputeBasisText(b, "") << "\n";
  }
  return 0;
}

int RunDescribe(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (vm.count("gpu")) {
    if (vm.count("cluster") || vm.count("model") || vm.count("plan")) {
      err << "hetsim describe: --gpu describes a catalog GPU type on its own; give it without --cluster, --model "
             "and --plan\n";
      return 2;
    }
    return DescribeGpuType(vm["gpu"].as<std::string>(), out, err);
  }
  if (!vm.count("cluster") && !vm.count("model") && !vm.count("plan")) {
    err << "hetsim describe: give --gpu, --cluster, --model and/or --plan (`hetsim describe --help`)\n";
    return 2;
  }
  auto specs = LoadSpecs(vm, vm.count("plan") > 0, vm.count("plan") > 0);
  if (!specs.ok()) return Fail(err, specs.status());
  if (!specs->plan) {
    if (specs->cluster) out << models::DescribeCluster(*specs->cluster);
    if (specs->model) {
      out << models::DescribeModel(*specs->model);
      out << "  training: " << models::DescribeTraining(specs->training) << "\n";
    }
    return 0;
  }
  models::PlanContext ctx{*specs->cluster, *specs->model, specs->training};
  Status st = models::ValidatePlanStructure(*specs->plan, ctx, specs->plan_file);
  if (!st.ok()) return Fail(err, st);
  out << models::DescribePlan(*specs->plan, ctx);
  if (vm.count("hspmd")) out << models::hspmd::DescribeAnnotations(*specs->plan, *specs->model);
  const Status mem = models::ValidatePlan(*specs->plan, ctx, specs->plan_file);
  if (!mem.ok()) {
    err << mem.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = [] {
    std::vector<Command> all = SpecCommands();
    for (auto&& c : PlannerCommands()) all.push_back(std::move(c));
    for (auto&& c : SimCommands()) all.push_back(std::move(c));
    for (auto&& c : ChakraCommands()) all.push_back(std::move(c));
    for (auto&& c : RunCommands()) all.push_back(std::move(c));
    for (auto&& c : CalibrationCommands()) all.push_back(std::move(c));
    for (auto&& c : TraceCommands()) all.push_back(std::move(c));
    for (auto&& c : ReplayCommands()) all.push_back(std::move(c));
    for (auto&& c : MixedLengthCommands()) all.push_back(std::move(c));
    for (auto&& c : AdviseCommands()) all.push_back(std::move(c));
    return all;
  }();
  return commands;
}

std::vector<Command> SpecCommands() {
  return {
      {"list", "print the bundled clusters, models, GPUs, plans, trainings or profiles",
       "hetsim list clusters|models|gpus|planners|plans|trainings|profiles|calibrations|traces|policies",
       [](po::options_description& d, po::positional_options_description& p) {
         d.add_options()("what", po::value<std::string>()->default_value("clusters"), "what to list");
         p.add("what", 1);
       },
       RunList},
      {"validate", "check spec files (any kind) and print OK or every error",
       "hetsim validate FILE... [--cluster C] [--model M] [--training T]",
       [](po::options_description& d, po::positional_options_description& p) {
         d.add_options()("files", po::value<std::vector<std::string>>(), "files or bundled names to check")
             ("cluster,c", po::value<std::string>(), "cluster for plan files that name none (name or path)")
             ("model,m", po::value<std::string>(), "model for plans and training specs (name or path)");
         AddTrainingFlags(d);
         p.add("files", -1);
       },
       RunValidate},
      {"describe", "print a GPU type, a cluster, a model, or a plan as tables (peaks, devices, TP×DP, layers, memory)",
       "hetsim describe --gpu NAME | --cluster C --model M [--training T] [--plan P [--hspmd]]",
       [](po::options_description& d, po::positional_options_description&) {
         AddSpecFlags(d, true);
         d.add_options()("hspmd", "with --plan: also the plan's HSPMD annotations (Hetu v2, docs/hspmd.md)")(
             "gpu", po::value<std::string>(),
             "a catalog GPU type (`hetsim list gpus`): its peaks per dtype, memory, links, power, source and "
             "compute basis");
       },
       RunDescribe},
  };
}

int Fail(std::ostream& err, const Status& s) {
  err << s.message() << "\n";
  return 1;
}

std::string ComputeBasisText(const proto::ComputeBasisReport& b, const std::string& model) {
  std::string s = b.profiled() ? "measured layer profile of " + model + " (layers it covers); else " : "";
  s += "calibration " + b.calibration() + " — " + b.source();
  if (!b.measured() && !b.profiled()) {
    s += " — NO MEASURED BASIS for this GPU type: its compute times are estimates from generic values "
         "(docs/calibration.md, \"Which data each GPU type rests on\")";
  }
  return s;
}

std::string Fmt(const char* f, double a, double b, double c, double d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

std::string FlagString(const po::variables_map& vm, const char* key) {
  return vm.count(key) ? vm[key].as<std::string>() : std::string();
}

Result<int> RefineFlag(const po::variables_map& vm) {
  if (!vm.count("refine")) return -1;
  const int k = vm["refine"].as<int>();
  if (k < 0 || k > 64) return Status::Invalid("--refine: expected 0..64 candidates to simulate, found " + std::to_string(k));
  return k;
}

Result<int> PolishFlag(const po::variables_map& vm) {
  if (!vm.count("polish")) return -1;
  const int n = vm["polish"].as<int>();
  if (n < 0 || n > 100000) {
    return Status::Invalid("--polish: expected 0..100000 simulations for the local search, found " + std::to_string(n));
  }
  if (n > 0 && vm.count("refine") && vm["refine"].as<int>() == 0) {
    return Status::Invalid("--polish needs the twin check: drop --refine 0 (the pick is simulated once before it is "
                           "polished)");
  }
  return n;
}

void AddRefineFlags(po::options_description& d) {
  d.add_options()("refine", po::value<int>(),
                  "opt-in, beyond the planner's paper: simulate the planner's pick and its next K-1 runners-up and "
                  "keep the fastest (default 0: the planner's own pick; exhaustive and twin check their candidates "
                  "by default)")(
      "polish", po::value<int>(),
      "opt-in, beyond the planner's paper: then improve the chosen plan on the twin with up to N simulations of "
      "small changes (layer boundaries, device swaps, micro-batches, merged pipelines, recomputation, idle "
      "machines; at most 120 s); the notes say so (default 0)");
}

Status PlanWithFlags(const po::variables_map& vm, Specs* specs) {
  std::string options, options_file = "--planner-options";
  if (vm.count("planner-options")) {
    HETSIM_ASSIGN_OR_RETURN(models::SpecText text,
                            models::ReadSpec(models::SpecKind::kPlan, FlagString(vm, "planner-options")));
    options = text.text;
    options_file = text.file;
  }
  HETSIM_ASSIGN_OR_RETURN(const int refine, RefineFlag(vm));
  HETSIM_ASSIGN_OR_RETURN(const int polish, PolishFlag(vm));
  HETSIM_ASSIGN_OR_RETURN(specs->plan, PlanWithPlanner(FlagString(vm, "planner"), options, options_file,
                                                       *specs->cluster, *specs->model, specs->training, refine,
                                                       polish, &specs->plan_notes));
  specs->plan_file = FlagString(vm, "planner") + "'s plan";
  return Status::Ok();
}

void AddSpecFlags(po::options_description& d, bool with_plan) {
  d.add_options()("cluster,c", po::value<std::string>(), "cluster: bundled name or path (`hetsim list clusters`)")
      ("model,m", po::value<std::string>(), "model: bundled name or path (`hetsim list models`)");
  if (with_plan) d.add_options()("plan,p", po::value<std::string>(), "plan file");
  AddTrainingFlags(d);
}

Result<Specs> LoadSpecs(const po::variables_map& vm, bool need_cluster, bool need_model) {
  Specs specs;
  if (vm.count("plan")) {
    specs.plan_file = FlagString(vm, "plan");
    HETSIM_ASSIGN_OR_RETURN(specs.plan, models::LoadPlan(specs.plan_file));
  }
  const proto::Plan empty;
  const proto::Plan& plan = specs.plan ? *specs.plan : empty;
  const std::string cref = vm.count("cluster") ? FlagString(vm, "cluster") : RelativeTo(plan.cluster(), specs.plan_file);
  const std::string mref = vm.count("model") ? FlagString(vm, "model") : RelativeTo(plan.model(), specs.plan_file);
  auto missing = [&](const char* what) {
    return Status::Invalid((specs.plan_file.empty() ? std::string("hetsim") : specs.plan_file) + ": no " + what +
                           " given; pass --" + what + (specs.plan_file.empty() ? "" : std::string(" or add `") + what +
                           ":` to the plan"));
  };
  if (cref.empty() && need_cluster) return missing("cluster");
  if (mref.empty() && need_model) return missing("model");
  // A cluster or model named by the plan's own keys: an error names the plan file and the key.
  auto from_plan = [&](const char* key, const Status& st) {
    return vm.count(key) || specs.plan_file.empty() ? st
                                                    : Status::Invalid(specs.plan_file + ": " + key + ": " + st.message());
  };
  if (!cref.empty()) {
    auto cluster = models::LoadCluster(cref);
    if (!cluster.ok()) return from_plan("cluster", cluster.status());
    specs.cluster = std::move(cluster).value();
  }
  if (!mref.empty()) {
    auto model = models::LoadModel(mref);
    if (!model.ok()) return from_plan("model", model.status());
    specs.model = std::move(model).value();
    HETSIM_ASSIGN_OR_RETURN(specs.training,
                            TrainingFromFlags(vm, *specs.model, plan.has_training() ? &plan.training() : nullptr));
  }
  return specs;
}

}  // namespace hetsim::cli
