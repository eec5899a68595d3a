// `hetsim validate-sim --executor --plans P1,P2,...`: runs each plan on hetsim-exec (under mpirun, one rank
// per device) and in the simulator with the same calibration, and reports per plan the iteration time of
// both, the executor's run-to-run noise, and the error per operation class (compute, TP, PP, CP, DP
// communication, idle; mean over the plan's devices, as a share of the measured iteration). Writes a CSV
// and, with --figure, a bar chart (tools/plot/exec_vs_sim.py).
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include "calibration/error_tally.h"
#include "models/kernels.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "sim/simulator.h"
#include "tools/hetsim/cli.h"
#include "tools/hetsim/process.h"

namespace hetsim::cli {
namespace {

namespace fs = std::filesystem;

// Mean over the report's devices of each class: compute, TP, PP, CP (ring, all-to-alls), DP, idle.
constexpr int kClasses = 6;
const char* const kClassNames[kClasses] = {"compute", "tp", "pp", "cp", "dp", "idle"};

std::vector<double> ClassSeconds(const proto::IterationReport& r) {
  std::vector<double> s(kClasses, 0);
  if (r.devices_size() == 0) return s;
  for (const auto& d : r.devices()) {
    s[0] += d.compute_s(), s[1] += d.tp_communication_s(), s[2] += d.pp_communication_s();
    s[3] += d.cp_communication_s(), s[4] += d.dp_communication_s(), s[5] += d.idle_s();
  }
  for (double& x : s) x /= r.devices_size();
  return s;
}

struct PlanResult {
  std::string plan;
  int ranks = 0;
  double exec_s = 0, sim_s = 0, noise = 0;  // noise: coefficient of variation of the executor's iterations
  std::vector<double> exec_classes, sim_classes;
  double error() const { return (sim_s - exec_s) / exec_s; }
};

// The executor's per-iteration times from --loss-out files (step,loss,iteration_s).
std::vector<double> IterationTimes(const std::string& path) {
  std::vector<double> t;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const auto c = line.rfind(',');
    const double s = c == std::string::npos ? 0 : std::strtod(line.c_str() + c + 1, nullptr);
    if (s > 0) t.push_back(s);  // warm-up steps are written with 0
  }
  return t;
}

}  // namespace

// How the executor runs each plan (validate-sim --executor's flags).
struct ExecSettings {
  std::string exe, mpirun, backend, dir;
  uint32_t iterations = 0, warmup = 0;
  int repeats = 1;
};

// The executor's side of plan i of n: `repeats` runs under mpirun; r gets the report of the run with the median
// iteration time and the iterations' spread. False (and why on err) when a run fails.
bool ExecutePlan(const ExecSettings& x, const std::string& plan_ref, size_t i, size_t n, uint32_t pool, PlanResult& r,
                 std::ostream& out, std::ostream& err) {
  std::vector<double> iters;
  std::vector<std::pair<double, proto::IterationReport>> runs;
  for (int k = 0; k < x.repeats; ++k) {
    const std::string stem = (fs::path(x.dir) / (r.plan + "-" + std::to_string(k))).string();
    std::vector<std::string> argv = MpirunPrefix(x.mpirun, r.ranks);
    argv.insert(argv.end(), {x.exe, "--plan", plan_ref, "--backend", x.backend, "--iterations", std::to_string(x.iterations),
                             "--warmup", std::to_string(x.warmup), "--report-out", stem + ".json", "--loss-out",
                             stem + ".loss.csv"});
    if (x.backend == "cpu") argv.insert(argv.end(), {"--cores", std::to_string(pool)});
    out << "[" << i + 1 << "/" << n << "] " << r.plan << ": run " << k + 1 << "/" << x.repeats << " ("
        << r.ranks << " rank" << (r.ranks == 1 ? "" : "s") << ")\n"
        << std::flush;
    auto rc = RunChild(argv, stem + ".log");
    if (!rc.ok() || *rc != 0) {
      err << r.plan << ": the executor failed (" << (rc.ok() ? "exit " + std::to_string(*rc) : rc.status().message())
          << "); its output: " << stem << ".log; command: " << JoinArgs(argv) << "\n";
      return false;
    }
    std::ifstream in(stem + ".json");
    std::stringstream text;
    text << in.rdbuf();
    proto::IterationReport rep;
    if (!google::protobuf::util::JsonStringToMessage(text.str(), &rep).ok()) {
      err << stem << ".json: not an IterationReport\n";
      return false;
    }
    for (double t : IterationTimes(stem + ".loss.csv")) iters.push_back(t);
    runs.emplace_back(rep.iteration_time_s(), rep);
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const auto& median = runs[runs.size() / 2].second;
  r.exec_s = median.iteration_time_s();
  r.exec_classes = ClassSeconds(median);
  if (iters.size() > 1) {
    double mean = 0, var = 0;
    for (double t : iters) mean += t / static_cast<double>(iters.size());
    for (double t : iters) var += (t - mean) * (t - mean) / static_cast<double>(iters.size() - 1);
    r.noise = std::sqrt(var) / mean;
  }
  return true;
}

namespace {

// Prints the per-plan table of simulated against executed times (and by operation class) with the tally;
// returns the same as CSV.
std::string PrintComparison(const std::vector<PlanResult>& results, const std::string& backend,
                            const std::string& calibration, std::ostream& out) {
  out << "\nsimulated vs executed (" << backend << " backend, calibration " << calibration << ")\n";
  out << "  plan                    ranks  executed ms  simulated ms   error   noise |  ms executed/simulated:";
  for (const char* c : kClassNames) out << "  " << c;
  out << "\n";
  calibration::ErrorTally tally;
  std::string csv = "plan,ranks,executed_s,simulated_s,error,noise";
  for (const char* c : kClassNames) csv += std::string(",exec_") + c + "_s,sim_" + c + "_s";
  csv += "\n";
  for (const auto& r : results) {
    out << "  " << r.plan << std::string(r.plan.size() < 24 ? 24 - r.plan.size() : 1, ' ') << Fmt("%5.0f", r.ranks)
        << Fmt("  %11.2f  %12.2f  %+6.1f%%  %5.1f%% |", r.exec_s * 1e3, r.sim_s * 1e3, r.error() * 100, r.noise * 100);
    for (int c = 0; c < kClasses; ++c) out << Fmt("  %.1f/%.1f", r.exec_classes[c] * 1e3, r.sim_classes[c] * 1e3);
    out << "\n";
    tally.Add(r.error());
    csv += r.plan + "," + std::to_string(r.ranks) + Fmt(",%.6g,%.6g,%.6g,%.6g", r.exec_s, r.sim_s, r.error(), r.noise);
    for (int c = 0; c < kClasses; ++c) csv += Fmt(",%.6g,%.6g", r.exec_classes[c], r.sim_classes[c]);
    csv += "\n";
  }
  if (tally.count() > 0) {
    out << Fmt("  %.0f plans: MAPE %.1f%%, bias %+.1f%%, worst %.1f%%\n", static_cast<double>(tally.count()),
               100 * tally.mape(), 100 * tally.bias(), 100 * tally.worst());
  }
  return csv;
}

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

}  // namespace

int RunValidateExecutor(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (!vm.count("plans")) {
    err << "hetsim validate-sim --executor: give --plans P1,P2,... (plan files or bundled names, e.g. "
           "cpu-4-single,cpu-4-pp2,cpu-4-tp2)\n";
    return 2;
  }
  const std::string backend = vm["backend"].as<std::string>();
  if (backend != "cpu" && backend != "cuda") {
    err << "hetsim validate-sim: --backend: unknown backend '" << backend << "' (expected cpu or cuda)\n";
    return 2;
  }
  std::string calibration = vm.count("calibration") ? vm["calibration"].as<std::string>() : "";
  if (!vm.count("calibration")) {
    calibration = "default";
    err << "warning: --calibration not given: the bundled default's values for this device are not measured here; "
           "run `hetsim calibrate --backend "
        << backend << "` and pass its file\n";
  }
  if (Status c = models::CheckKernelCalibration(calibration); !c.ok()) {
    err << c.message() << "\n";
    return 2;
  }
  auto fid = sim::ParseFidelity(vm["fidelity"].as<std::string>());
  if (!fid.ok()) {
    err << fid.status().message() << "\n";
    return 2;
  }
  auto profiles = models::ProfileDb::Load(models::CalibrationProfiles(calibration));
  if (!profiles.ok()) {
    err << profiles.status().message() << "\n";
    return 1;
  }
  auto exe = SiblingBinary("hetsim-exec");
  if (!exe.ok()) {
    err << "hetsim validate-sim: " << exe.status().message() << "\n";
    return 1;
  }
  const std::string dir = vm.count("work-dir") ? FlagString(vm, "work-dir") : "validate-exec";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    err << "hetsim validate-sim: --work-dir: cannot create " << dir << ": " << ec.message() << "\n";
    return 1;
  }
  const uint32_t iterations = vm["iterations"].as<uint32_t>(), warmup = vm["warmup"].as<uint32_t>();
  const int repeats = std::max(1, vm["repeats"].as<int>());
  const double tolerance = vm.count("tolerance") ? vm["tolerance"].as<double>() : 0;
  // The CPU backend's ranks all run on this machine: with more ranks than cores they compute through a pool
  // of the cores (hetsim-exec --cores), and the simulator plays the same pool (SimOptions::shared_cores).
  const uint32_t cores =
      vm.count("cores") ? vm["cores"].as<uint32_t>() : std::max(1u, std::thread::hardware_concurrency());
  if (Status c = sim::CheckSharedCores(cores, "hetsim validate-sim: --cores"); !c.ok()) {
    err << c.message() << "\n";
    return 2;
  }

  const ExecSettings x{*exe, FlagString(vm, "mpirun"), backend, dir, iterations, warmup, repeats};
  const auto plans = SplitList(FlagString(vm, "plans"));
  std::vector<PlanResult> results;
  int failed = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::string& plan_ref = plans[i];
    // The simulator's side first: it also checks the plan and counts its ranks.
    po::variables_map pvm;
    pvm.insert({"plan", po::variable_value(plan_ref, false)});
    auto specs = LoadSpecs(pvm, true, true);
    if (!specs.ok()) {
      err << plan_ref << ": " << specs.status().message() << "\n";
      ++failed;
      continue;
    }
    const models::PlanContext ctx{*specs->cluster, *specs->model, specs->training};
    if (Status st = models::ValidatePlanStructure(*specs->plan, ctx, specs->plan_file); !st.ok()) {
      err << st.message() << "\n";
      ++failed;
      continue;
    }
    std::set<uint32_t> devices;
    for (const auto& p : specs->plan->pipelines()) {
      for (const auto& s : p.stages()) devices.insert(s.devices().begin(), s.devices().end());
    }
    PlanResult r;
    r.plan = specs->plan->name().empty() ? fs::path(plan_ref).stem().string() : specs->plan->name();
    r.ranks = static_cast<int>(devices.size());
    sim::SimOptions opt;
    opt.fidelity = *fid;
    opt.compute.calibration = calibration;
    opt.profiles = &*profiles;
    // All but one core (at least one): the CPU backend's communication moves data with the CPU.
    const uint32_t pool = backend == "cpu" && static_cast<uint32_t>(r.ranks) > cores ? std::max(1u, cores - 1) : 0;
    if (pool > 0) {
      opt.shared_cores = pool;
      out << r.plan << ": " << r.ranks << " ranks on " << cores << " core" << (cores == 1 ? "" : "s")
          << ": executed and simulated computing through a pool of " << pool << " core" << (pool == 1 ? "" : "s")
          << " (hetsim-exec --cores)\n";
    }
    auto sim = sim::SimulateIteration(*specs->plan, ctx, opt);
    if (!sim.ok()) {
      err << plan_ref << ": simulation failed: " << sim.status().message() << "\n";
      ++failed;
      continue;
    }
    r.sim_s = sim->report.iteration_time_s();
    r.sim_classes = ClassSeconds(sim->report);

    // The executor's side, `repeats` runs; the report of the run with the median iteration time.
    if (!ExecutePlan(x, plan_ref, i, plans.size(), pool, r, out, err)) {
      ++failed;
      continue;
    }
    out << "      executed " << Fmt("%.2f ms", r.exec_s * 1e3) << " (iterations vary " << Fmt("%.1f%%", r.noise * 100)
        << "), simulated " << Fmt("%.2f ms", r.sim_s * 1e3) << ": " << Fmt("%+.1f%%", r.error() * 100) << "\n";
    results.push_back(r);
  }

  const std::string csv = PrintComparison(results, backend, calibration, out);
  const std::string csv_path = vm.count("output") ? FlagString(vm, "output") : (fs::path(dir) / "exec_vs_sim.csv").string();
  if (Status s = models::WriteFileAtomically(csv_path, csv); !s.ok()) {
    err << s.message() << "\n";
    return 1;
  }
  out << "per-plan results: " << csv_path << "\n";
  if (vm.count("figure")) DrawFigure(csv_path, FlagString(vm, "figure"), out, err);
  if (failed > 0) {
    err << failed << " of " << plans.size() << " plans were not compared (see above)\n";
    return 1;
  }
  if (tolerance > 0) {
    int over = 0;
    for (const auto& r : results) {
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
