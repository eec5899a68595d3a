// `hetsim validate-sim --runs FILE.csv` where the CSV names a plan file per run (a `plan` column): each
// measured run is a hetsim plan (any layout, heterogeneous or uneven; its own `cluster:`, `model:` and
// `training:`), so published plans that no uniform Megatron layout describes can be checked — Sailor's
// GH200 plans (experiments/validation/sailor_gh200_opt350/, written by tools/convert_sailor_plans.py).
//
// Columns: plan (relative to the CSV's folder) and iteration_ms, required; grad_sync_ms (the measured
// gradient all-reduce) and peak_memory_gib (the fullest GPU's measured peak), optional; nodes, dp, pp, tp,
// micro_batch and anything else are kept for the breakdown and provenance. Rows alternate between a
// development and a held-out half, as in the other layouts.
//
// Reported per run and in summary: the iteration-time error; the gradient-sync error (simulated: the largest
// exposed DP communication of any device); the peak-memory error (simulated: the largest peak of any device,
// models/plan.h EstimateMemory). Breakdowns by DP width, PP depth and node count.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include <ostream>

#include "calibration/validate_plan_runs.h"

#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/training.h"

namespace hetsim::calibration {
namespace {

std::string FolderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

Result<double> Number(const std::string& cell, const std::string& where, const std::string& column) {
  char* end = nullptr;
  const double x = std::strtod(cell.c_str(), &end);
  if (cell.empty() || end == cell.c_str() || *end != '\0' || !std::isfinite(x) || !(x > 0) || x > 1e9) {
    return Status::Invalid(where + ": " + column + ": '" + cell + "' is not a positive number");
  }
  return x;
}

}  // namespace

Result<std::vector<PlanRun>> ReadPlanRuns(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::Invalid(path + ": cannot open the runs file (--runs)");
  std::vector<PlanRun> runs;
  std::vector<std::string> header;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.size() >= 3 && static_cast<unsigned char>(line[0]) == 0xEF) line = line.substr(3);  // UTF-8 BOM
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cells = models::SplitCsv(line);
    for (auto& c : cells) c = models::TrimBlanks(c);
    const std::string where = path + ":" + std::to_string(n);
    if (header.empty()) {
      header = cells;
      if (std::find(header.begin(), header.end(), "iteration_ms") == header.end()) {
        return Status::Invalid(where + ": the header names no 'iteration_ms' column (a plan-file runs CSV needs plan "
                               "and iteration_ms; experiments/validation/README.md)");
      }
      continue;
    }
    if (cells.size() != header.size()) {
      return Status::Invalid(where + ": expected " + std::to_string(header.size()) + " cells (the header's columns), found " +
                             std::to_string(cells.size()));
    }
    PlanRun r;
    r.line = n;
    for (size_t i = 0; i < header.size(); ++i) r.cells[header[i]] = cells[i];
    r.plan = r.cells["plan"];
    if (r.plan.empty()) return Status::Invalid(where + ": plan: empty (give the plan file, relative to the CSV)");
    HETSIM_ASSIGN_OR_RETURN(r.measured_ms, Number(r.cells["iteration_ms"], where, "iteration_ms"));
    if (r.cells.count("grad_sync_ms") && !r.cells["grad_sync_ms"].empty()) {
      HETSIM_ASSIGN_OR_RETURN(r.measured_sync_ms, Number(r.cells["grad_sync_ms"], where, "grad_sync_ms"));
    }
    // A run's software stack (e.g. megatron-deepspeed), its calibration by the one rule; checked here so that
    // a typo fails before any simulation.
    if (r.cells.count("calibration")) {
      return Status::Invalid(where + ": a `calibration` column is no longer read: name the run's software stack in "
                             "a `stack` column (or the plan's `calibration:`), and the one rule picks its "
                             "calibration (docs/calibration.md \"One rule\"); --calibration applies one to every run");
    }
    if (r.cells.count("stack") && !r.cells["stack"].empty()) {
      HETSIM_ASSIGN_OR_RETURN(r.stack_calibration, models::StackCalibration(r.cells["stack"], where + ": stack"));
    }
    if (r.cells.count("peak_memory_gib") && !r.cells["peak_memory_gib"].empty()) {
      HETSIM_ASSIGN_OR_RETURN(r.measured_peak_gib, Number(r.cells["peak_memory_gib"], where, "peak_memory_gib"));
    }
    runs.push_back(std::move(r));
  }
  if (runs.empty()) return Status::Invalid(path + ": no runs");
  return runs;
}

namespace {

// The measured layer profiles a run is simulated with: --profile's and the calibration's own, loaded once
// per calibration.
class Profiles {
 public:
  explicit Profiles(std::vector<std::string> refs) : refs_(std::move(refs)) {}
  Result<const models::ProfileDb*> For(const std::string& calibration) {
    auto it = dbs_.find(calibration);
    if (it != dbs_.end()) return &it->second;
    std::vector<std::string> refs = refs_;
    for (auto& p : models::CalibrationProfiles(calibration)) refs.push_back(std::move(p));
    HETSIM_ASSIGN_OR_RETURN(models::ProfileDb db, models::ProfileDb::Load(refs));
    return &dbs_.emplace(calibration, std::move(db)).first->second;
  }

 private:
  std::vector<std::string> refs_;
  std::map<std::string, models::ProfileDb> dbs_;
};

// `calibration` empty: the plan's own (its `calibration`, relative to the plan), else `default`.
void SimulatePlanRun(PlanRun& r, const std::string& csv_path, std::string calibration, const sim::Fidelity& fidelity,
                     Profiles& profiles) {
  const std::string file = r.plan[0] == '/' ? r.plan : FolderOf(csv_path) + r.plan;
  auto fail = [&](const std::string& why) { r.error = why; };
  auto plan = models::LoadPlan(file);
  if (!plan.ok()) return fail(plan.status().message());
  if (plan->cluster().empty() || plan->model().empty() || !plan->has_training()) {
    return fail(file + ": a plan of a runs CSV names its cluster, model and training");
  }
  auto cluster = models::LoadCluster(models::ResolveRelative(plan->cluster(), file));
  if (!cluster.ok()) return fail(file + ": cluster: " + cluster.status().message());
  auto model = models::LoadModel(models::ResolveRelative(plan->model(), file));
  if (!model.ok()) return fail(file + ": model: " + model.status().message());
  auto training = models::ResolveTraining(plan->training(), *model, file);
  if (!training.ok()) return fail(training.status().message());
  const models::PlanContext ctx{*cluster, *model, *training};
  if (calibration.empty()) {
    calibration = plan->calibration().empty() ? "default" : models::ResolveRelative(plan->calibration(), file);
    if (Status c = models::CheckKernelCalibration(calibration, file + ": calibration"); !c.ok()) return fail(c.message());
  }
  r.calibration = calibration;
  auto db = profiles.For(calibration);
  if (!db.ok()) return fail(db.status().message());
  sim::SimOptions opt;
  opt.fidelity = fidelity;
  opt.compute.calibration = calibration;
  opt.profiles = *db;
  auto res = sim::SimulateIteration(*plan, ctx, opt);
  if (!res.ok()) return fail(res.status().message());
  r.simulated_ms = res->report.iteration_time_s() * 1e3;
  for (const auto& d : res->report.devices()) {
    r.simulated_sync_ms = std::max(r.simulated_sync_ms, d.dp_communication_s() * 1e3);
    r.simulated_peak_gib = std::max(r.simulated_peak_gib, d.peak_memory_gib());
  }
  r.cls = models::ClassOf(*plan, *cluster, *training, models::AllComputeMeasured(res->report), model->HasMoe());
  r.ok = true;
}

std::string Fixed(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

}  // namespace

bool IsPlanRunsCsv(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() >= 3 && static_cast<unsigned char>(line[0]) == 0xEF) line = line.substr(3);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    for (const auto& c : models::SplitCsv(line)) {
      if (models::TrimBlanks(c) == "plan") return true;
    }
    return false;
  }
  return false;
}

Result<PlanRunsReport> ValidatePlanRuns(const std::string& path, const PlanRunsOptions& options) {
  HETSIM_ASSIGN_OR_RETURN(std::vector<PlanRun> runs, ReadPlanRuns(path));
  // Each run's calibration: options.calibration for every run, else the one rule: the calibration of the
  // row's `stack`, else the plan's own `calibration` (its software stack's), else `default`.
  const bool given = !options.calibration.empty();
  Profiles profiles(options.profiles);
  if (auto check = profiles.For(given ? options.calibration : "default"); !check.ok()) {
    return Status::Invalid("--profile: " + check.status().message());
  }
  PlanRunsReport rep;
  rep.attempted = std::min(options.limit, runs.size());
  rep.csv =
      "line,plan,nodes,dp,pp,tp,micro_batch,half,measured_ms,simulated_ms,error,measured_grad_sync_ms,"
      "simulated_grad_sync_ms,grad_sync_error,measured_peak_gib,simulated_peak_gib,memory_error,family,dtype,zero3,"
      "gpus,interval_lo_ms,interval_hi_ms,in_interval,measured,moe\n";
  for (size_t i = 0; i < rep.attempted; ++i) {
    PlanRun& r = runs[i];
    SimulatePlanRun(r, path, given ? options.calibration : r.stack_calibration, options.fidelity, profiles);
    if (!r.calibration.empty()) rep.calibrations.insert(r.calibration);
    rep.runs.push_back(r);
    const double rel = r.ok ? (r.simulated_ms - r.measured_ms) / r.measured_ms : 0;
    const bool development = rep.Record(i, path, r.line, r.ok, r.error, rel);
    if (!r.ok) continue;
    const double sync_rel = r.measured_sync_ms > 0 ? (r.simulated_sync_ms - r.measured_sync_ms) / r.measured_sync_ms : 0;
    if (r.measured_sync_ms > 0) rep.grad_sync.Add(sync_rel);
    const double mem_rel = r.measured_peak_gib > 0 ? (r.simulated_peak_gib - r.measured_peak_gib) / r.measured_peak_gib : 0;
    if (r.measured_peak_gib > 0) rep.peak_memory.Add(mem_rel);
    for (const char* key : {"dp", "pp", "tp", "nodes", "micro_batch"}) {
      if (!r.cells.count(key)) continue;
      const PlanRunsReport::Key k{key, std::strtod(r.cells[key].c_str(), nullptr)};
      rep.by_configuration[k].Add(rel);
      if (r.measured_peak_gib > 0) rep.memory_by_configuration[k].Add(mem_rel);
    }
    const auto cell = [&](const char* key) { return r.cells.count(key) ? r.cells[key] : std::string(); };
    rep.csv += std::to_string(r.line) + "," + r.plan + "," + cell("nodes") + "," + cell("dp") + "," + cell("pp") + "," +
               cell("tp") + "," + cell("micro_batch") + "," + (development ? "development" : "held_out") + "," +
               Fixed(r.measured_ms, 4) + "," + Fixed(r.simulated_ms, 4) + "," + Fixed(rel, 6) + "," +
               (r.measured_sync_ms > 0 ? Fixed(r.measured_sync_ms, 4) : "") + "," + Fixed(r.simulated_sync_ms, 4) + "," +
               (r.measured_sync_ms > 0 ? Fixed(sync_rel, 6) : "") + "," +
               (r.measured_peak_gib > 0 ? Fixed(r.measured_peak_gib, 4) : "") + "," + Fixed(r.simulated_peak_gib, 4) +
               "," + (r.measured_peak_gib > 0 ? Fixed(mem_rel, 6) : "");
    const models::PredictionInterval interval = models::IntervalFor(r.cls);
    const bool in = rep.cover_all.Add(interval, r.simulated_ms, r.measured_ms);
    if (!development) rep.cover_held_out.Add(interval, r.simulated_ms, r.measured_ms);
    rep.csv += "," + r.cls.family + "," + r.cls.dtype + "," + (r.cls.zero3 ? "1" : "0") + "," +
               std::to_string(r.cls.gpus) + "," + Fixed(r.simulated_ms * interval.lo, 4) + "," +
               Fixed(r.simulated_ms * interval.hi, 4) + "," + (in ? "1" : "0") + "," + (r.cls.measured ? "1" : "0") +
               "," + (r.cls.moe ? "1" : "0") + "\n";
  }
  return rep;
}

}  // namespace hetsim::calibration
