// `hetsim validate-sim --executor --plans P1,P2,...`: the flags, the plans loaded as their files say, then
// calibration::ValidateExecutor (calibration/validate_exec.h) and its report printed; writes the per-plan CSV
// and, with --figure, a bar chart (tools/plot/exec_vs_sim.py).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <thread>

#include "calibration/validate_exec.h"
#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "sim/simulator.h"
#include "tools/hetsim/cli.h"
#include "tools/hetsim/process.h"

namespace hetsim::cli {
namespace {

namespace fs = std::filesystem;

// Draws executed against simulated time per operation (tools/plot/exec_vs_sim.py); a failure is a warning.
void DrawFigure(const std::string& csv_path, const std::string& figure, std::ostream& out, std::ostream& err) {
  // No shell between the flags and the plotter (docs/robustness.md): the paths go to exec as they are.
  const std::vector<std::string> argv = {"/usr/bin/python3", (fs::path(FindPlotDir()) / "exec_vs_sim.py").string(),
                                         csv_path, figure};
  std::fflush(nullptr);
  auto rc = RunChild(argv);
  if (!rc.ok() || *rc != 0) {
    err << "warning: drawing the figure failed (" << (rc.ok() ? "exit " + std::to_string(*rc) : rc.status().message())
        << ": " << argv[0] << " " << argv[1] << ")\n";
  } else {
    out << "figure: " << figure << "\n";
  }
}

// The options from the flags; an exit code when they do not make any (2: a bad flag, 1: a file).
std::optional<int> ExecOptionsFrom(const po::variables_map& vm, calibration::ExecOptions* o, std::ostream& err) {
  o->backend = vm["backend"].as<std::string>();
  if (o->backend != "auto" && o->backend != "cpu" && o->backend != "cuda") {
    err << "hetsim validate-sim: --backend: unknown backend '" << o->backend << "' (expected auto, cpu or cuda)\n";
    return 2;
  }
  o->calibration = vm.count("calibration") ? vm["calibration"].as<std::string>() : "";
  if (!vm.count("calibration")) {
    o->calibration = "default";
    err << "warning: --calibration not given: the bundled default's values for this device are not measured here; "
           "run `hetsim calibrate --backend "
        << (o->backend == "auto" ? std::string("cpu --gpu cpu,cpu-slow") : o->backend) << "` and pass its file\n";
  }
  if (Status c = models::CheckKernelCalibration(o->calibration); !c.ok()) {
    err << c.message() << "\n";
    return 2;
  }
  auto fid = sim::ParseFidelity(vm["fidelity"].as<std::string>());
  if (!fid.ok()) {
    err << fid.status().message() << "\n";
    return 2;
  }
  o->fidelity = *fid;
  auto exe = SiblingBinary("hetsim-exec");
  if (!exe.ok()) {
    err << "hetsim validate-sim: " << exe.status().message() << "\n";
    return 1;
  }
  o->exe = *exe;
  o->mpirun = FlagString(vm, "mpirun");
  o->work_dir = vm.count("work-dir") ? FlagString(vm, "work-dir") : "validate-exec";
  std::error_code ec;
  fs::create_directories(o->work_dir, ec);
  if (ec) {
    err << "hetsim validate-sim: --work-dir: cannot create " << o->work_dir << ": " << ec.message() << "\n";
    return 1;
  }
  o->iterations = vm["iterations"].as<uint32_t>();
  o->warmup = vm["warmup"].as<uint32_t>();
  o->repeats = std::max(1, vm["repeats"].as<int>());
  // The CPU backend's ranks all run on this machine: with more ranks than cores they compute through a pool
  // of the cores (hetsim-exec --cores), and the simulator plays the same pool (SimOptions::shared_cores).
  o->cores = vm.count("cores") ? vm["cores"].as<uint32_t>() : std::max(1u, std::thread::hardware_concurrency());
  if (Status c = sim::CheckSharedCores(o->cores, "hetsim validate-sim: --cores"); !c.ok()) {
    err << c.message() << "\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace

int RunValidateExecutor(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (!vm.count("plans")) {
    err << "hetsim validate-sim --executor: give --plans P1,P2,... (plan files or bundled names, e.g. "
           "cpu-4-single,cpu-4-pp2,cpu-4-tp2)\n";
    return 2;
  }
  calibration::ExecOptions options;
  if (auto rc = ExecOptionsFrom(vm, &options, err)) return *rc;
  auto profiles = models::ProfileDb::Load(models::CalibrationProfiles(options.calibration));
  if (!profiles.ok()) {
    err << profiles.status().message() << "\n";
    return 1;
  }
  options.profiles = &*profiles;
  const double tolerance = vm.count("tolerance") ? vm["tolerance"].as<double>() : 0;

  // The plans as their files say (a plan that does not load is counted and its reason printed).
  const auto refs = models::SplitList(FlagString(vm, "plans"));
  std::vector<std::unique_ptr<Specs>> specs;
  std::vector<calibration::ExecPlan> plans;
  int failed = 0;
  for (const std::string& ref : refs) {
    po::variables_map pvm;
    pvm.insert({"plan", po::variable_value(ref, false)});
    auto s = LoadSpecs(pvm, true, true);
    if (!s.ok()) {
      err << ref << ": " << s.status().message() << "\n";
      ++failed;
      continue;
    }
    specs.push_back(std::make_unique<Specs>(std::move(s).value()));
    const Specs& sp = *specs.back();
    plans.push_back({ref, sp.plan_file, *sp.plan, &*sp.cluster, &*sp.model, sp.training});
  }
  const calibration::ExecReport rep = calibration::ValidateExecutor(plans, options, out, err);
  failed += rep.failed;
  calibration::PrintExecComparison(rep, options.backend, options.calibration, out);
  const std::string csv_path =
      vm.count("output") ? FlagString(vm, "output") : (fs::path(options.work_dir) / "exec_vs_sim.csv").string();
  if (Status s = models::WriteFileAtomically(csv_path, rep.csv); !s.ok()) {
    err << s.message() << "\n";
    return 1;
  }
  out << "per-plan results: " << csv_path << "\n";
  if (vm.count("figure")) DrawFigure(csv_path, FlagString(vm, "figure"), out, err);
  if (failed > 0) {
    err << failed << " of " << refs.size() << " plans were not compared (see above)\n";
    return 1;
  }
  if (tolerance > 0) {
    int over = 0;
    for (const auto& r : rep.results) {
      if (std::fabs(r.error()) > tolerance) {
        err << r.plan << ": simulated " << Fmt("%+.1f%%", r.error() * 100) << " off the executor, beyond --tolerance "
            << Fmt("%.1f%%", tolerance * 100) << "\n";
        ++over;
      }
    }
    if (over > 0) return 1;
  }
  return 0;
}

}  // namespace hetsim::cli
