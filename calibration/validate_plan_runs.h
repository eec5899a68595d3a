// Validation against measured runs whose CSV names a plan file per run (a `plan` column): each measured run
// is a hetsim plan (any layout, heterogeneous or uneven; its own `cluster:`, `model:` and `training:`), so
// published plans that no uniform Megatron layout describes can be checked — Sailor's GH200 plans
// (experiments/validation/sailor_gh200_opt350/). `hetsim validate-sim --runs` prints a PlanRunsReport; tests
// assert on it. The uniform layouts are validate_runs.h's; validate_plan_runs.cc says the columns.
#pragma once

#include <cstddef>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "calibration/error_tally.h"
#include "models/intervals.h"
#include "models/status.h"
#include "sim/simulator.h"

namespace hetsim::calibration {

// One measured run of a plan-file CSV and what the simulator made of it.
struct PlanRun {
  int line = 0;
  std::string plan;  // as written
  std::map<std::string, std::string> cells;
  double measured_ms = 0, measured_sync_ms = -1, measured_peak_gib = -1;  // -1: not measured
  double simulated_ms = 0, simulated_sync_ms = 0, simulated_peak_gib = 0;
  bool ok = false;
  std::string error;
  std::string stack_calibration;  // the one rule's pick for the row's `stack` (empty: the plan's own)
  std::string calibration;        // the one it was simulated with
  models::RunClass cls;           // for its prediction interval (models/intervals.h)
};

// Whether the CSV's first line names a `plan` column.
bool IsPlanRunsCsv(const std::string& path);
// The runs of a plan-file CSV; errors name FILE:LINE and the column.
Result<std::vector<PlanRun>> ReadPlanRuns(const std::string& path);

struct PlanRunsOptions {
  sim::Fidelity fidelity = sim::Fidelity::Fast();
  std::string calibration;               // for every run; empty: each run's `stack`, else its plan's own
  std::vector<std::string> profiles;     // measured layer profiles besides the calibrations' own
  size_t limit = std::numeric_limits<size_t>::max();  // simulate only the first `limit` runs
};

struct PlanRunsReport : HalvesTally {
  using Key = std::pair<std::string, double>;  // (column, value): dp=2 sorts before dp=16
  std::vector<PlanRun> runs;                   // the attempted ones (ok or not), in file order
  ErrorTally grad_sync, peak_memory;           // over the runs that measured them
  std::map<Key, ErrorTally> by_configuration, memory_by_configuration;
  models::IntervalCoverage cover_held_out, cover_all;
  std::set<std::string> calibrations;  // the calibrations used
  size_t attempted = 0;
  std::string csv;                    // one row per simulated run (`validate-sim -o`)
};

// Reads and simulates the runs of `path`; an error when the file or --profile cannot be read (a run that
// does not simulate is a failure in the report, not an error).
Result<PlanRunsReport> ValidatePlanRuns(const std::string& path, const PlanRunsOptions& options);

}  // namespace hetsim::calibration
