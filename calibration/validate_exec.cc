// The simulator against plans run on hetsim-exec (validate_exec.h): each plan simulated, then executed
// `repeats` times under mpirun; the run with the median iteration time is compared, operation class by class.
#include "calibration/validate_exec.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "models/child_process.h"
#include "models/plan.h"

namespace hetsim::calibration {

namespace fs = std::filesystem;

std::vector<double> OpClassSeconds(const proto::IterationReport& r) {
  std::vector<double> s(kOpClasses, 0);
  if (r.devices_size() == 0) return s;
  for (const auto& d : r.devices()) {
    s[0] += d.compute_s(), s[1] += d.tp_communication_s(), s[2] += d.pp_communication_s();
    s[3] += d.cp_communication_s(), s[4] += d.dp_communication_s(), s[5] += d.idle_s();
  }
  for (double& x : s) x /= r.devices_size();
  return s;
}

namespace {

std::string Fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

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

// The executor's side of plan i of n: `repeats` runs under mpirun; r gets the report of the run with the median
// iteration time and the iterations' spread. False (and why on err) when a run fails.
bool ExecutePlan(const ExecOptions& x, const std::string& plan_ref, size_t i, size_t n, uint32_t pool,
                 ExecPlanResult& r, std::ostream& out, std::ostream& err) {
  std::vector<double> iters;
  std::vector<std::pair<double, proto::IterationReport>> runs;
  for (int k = 0; k < x.repeats; ++k) {
    const std::string stem = (fs::path(x.work_dir) / (r.plan + "-" + std::to_string(k))).string();
    std::vector<std::string> argv = models::MpirunPrefix(x.mpirun, r.ranks);
    argv.insert(argv.end(), {x.exe, "--plan", plan_ref, "--backend", x.backend, "--iterations", std::to_string(x.iterations),
                             "--warmup", std::to_string(x.warmup), "--report-out", stem + ".json", "--loss-out",
                             stem + ".loss.csv"});
    if (x.backend != "cuda") argv.insert(argv.end(), {"--cores", std::to_string(pool)});
    out << "[" << i + 1 << "/" << n << "] " << r.plan << ": run " << k + 1 << "/" << x.repeats << " ("
        << r.ranks << " rank" << (r.ranks == 1 ? "" : "s") << ")\n"
        << std::flush;
    auto rc = models::RunProgram(argv, stem + ".log");
    if (!rc.ok() || *rc != 0) {
      err << r.plan << ": the executor failed (" << (rc.ok() ? "exit " + std::to_string(*rc) : rc.status().message())
          << "); its output: " << stem << ".log; command: " << models::JoinArgs(argv) << "\n";
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
  r.exec_classes = OpClassSeconds(median);
  if (iters.size() > 1) {
    double mean = 0, var = 0;
    for (double t : iters) mean += t / static_cast<double>(iters.size());
    for (double t : iters) var += (t - mean) * (t - mean) / static_cast<double>(iters.size() - 1);
    r.noise = std::sqrt(var) / mean;
  }
  return true;
}

// Whether every rank of the plan runs the CPU backend (`--backend cpu`, or auto with CPU workers only): then its
// ranks may share a pool of cores (hetsim-exec --cores).
bool CpuJob(const std::string& backend, const models::Cluster& cluster, const std::set<uint32_t>& devices) {
  if (backend != "auto") return backend == "cpu";
  return std::all_of(devices.begin(), devices.end(),
                     [&](uint32_t d) { return cluster.device(d).gpu->form_factor == "CPU worker"; });
}

// The CSV of the plans compared.
std::string ComparisonCsv(const std::vector<ExecPlanResult>& results) {
  std::string csv = "plan,ranks,executed_s,simulated_s,error,noise";
  for (const char* c : kOpClassNames) csv += std::string(",exec_") + c + "_s,sim_" + c + "_s";
  csv += "\n";
  for (const auto& r : results) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ",%.6g,%.6g,%.6g,%.6g", r.exec_s, r.sim_s, r.error(), r.noise);
    csv += r.plan + "," + std::to_string(r.ranks) + buf;
    for (int c = 0; c < kOpClasses; ++c) {
      std::snprintf(buf, sizeof buf, ",%.6g,%.6g", r.exec_classes[c], r.sim_classes[c]);
      csv += buf;
    }
    csv += "\n";
  }
  return csv;
}

}  // namespace

ExecReport ValidateExecutor(const std::vector<ExecPlan>& plans, const ExecOptions& options, std::ostream& out,
                            std::ostream& err) {
  ExecReport rep;
  for (size_t i = 0; i < plans.size(); ++i) {
    const ExecPlan& p = plans[i];
    // The simulator's side first: it also checks the plan and counts its ranks.
    const models::PlanContext ctx{*p.cluster, *p.model, p.training};
    if (Status st = models::ValidatePlanStructure(p.plan, ctx, p.file); !st.ok()) {
      err << st.message() << "\n";
      ++rep.failed;
      continue;
    }
    std::set<uint32_t> devices;
    for (const auto& pl : p.plan.pipelines()) {
      for (const auto& s : pl.stages()) devices.insert(s.devices().begin(), s.devices().end());
    }
    ExecPlanResult r;
    r.plan = p.plan.name().empty() ? fs::path(p.ref).stem().string() : p.plan.name();
    r.ranks = static_cast<int>(devices.size());
    sim::SimOptions opt;
    opt.fidelity = options.fidelity;
    opt.compute.calibration = options.calibration;
    opt.profiles = options.profiles;
    // All but one core (at least one): the CPU backend's communication moves data with the CPU.
    const uint32_t cores = options.cores;
    const uint32_t pool =
        CpuJob(options.backend, *p.cluster, devices) && static_cast<uint32_t>(r.ranks) > cores ? std::max(1u, cores - 1)
                                                                                                : 0;
    if (pool > 0) {
      opt.shared_cores = pool;
      out << r.plan << ": " << r.ranks << " ranks on " << cores << " core" << (cores == 1 ? "" : "s")
          << ": executed and simulated computing through a pool of " << pool << " core" << (pool == 1 ? "" : "s")
          << " (hetsim-exec --cores)\n";
    }
    auto sim = sim::SimulateIteration(p.plan, ctx, opt);
    if (!sim.ok()) {
      err << p.ref << ": simulation failed: " << sim.status().message() << "\n";
      ++rep.failed;
      continue;
    }
    r.sim_s = sim->report.iteration_time_s();
    r.sim_classes = OpClassSeconds(sim->report);

    // The executor's side, `repeats` runs; the report of the run with the median iteration time.
    if (!ExecutePlan(options, p.ref, i, plans.size(), pool, r, out, err)) {
      ++rep.failed;
      continue;
    }
    out << "      executed " << Fmt("%.2f ms", r.exec_s * 1e3) << " (iterations vary " << Fmt("%.1f%%", r.noise * 100)
        << "), simulated " << Fmt("%.2f ms", r.sim_s * 1e3) << ": " << Fmt("%+.1f%%", r.error() * 100) << "\n";
    rep.tally.Add(r.error());
    rep.results.push_back(r);
  }
  rep.csv = ComparisonCsv(rep.results);
  return rep;
}

void PrintExecComparison(const ExecReport& report, const std::string& backend, const std::string& calibration,
                         std::ostream& out) {
  out << "\nsimulated vs executed (" << backend << " backend, calibration " << calibration << ")\n";
  out << "  plan                    ranks  executed ms  simulated ms   error   noise |  ms executed/simulated:";
  for (const char* c : kOpClassNames) out << "  " << c;
  out << "\n";
  for (const auto& r : report.results) {
    char cols[128];
    std::snprintf(cols, sizeof cols, "%5d  %11.2f  %12.2f  %+6.1f%%  %5.1f%% |", r.ranks, r.exec_s * 1e3,
                  r.sim_s * 1e3, r.error() * 100, r.noise * 100);
    out << "  " << r.plan << std::string(r.plan.size() < 24 ? 24 - r.plan.size() : 1, ' ') << cols;
    for (int c = 0; c < kOpClasses; ++c) {
      std::snprintf(cols, sizeof cols, "  %.1f/%.1f", r.exec_classes[c] * 1e3, r.sim_classes[c] * 1e3);
      out << cols;
    }
    out << "\n";
  }
  const ErrorTally& t = report.tally;
  if (t.count() > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "  %.0f plans: MAPE %.1f%%, bias %+.1f%%, worst %.1f%%\n",
                  static_cast<double>(t.count()), 100 * t.mape(), 100 * t.bias(), 100 * t.worst());
    out << line;
  }
}

}  // namespace hetsim::calibration
