// `hetsim advise CONFIG` (docs/advise.md): the joint choice of GPUs (types, counts, on-demand or spot),
// parallelism plan, recovery policy and checkpoint interval for training a model on a token target.
//
// The space: every candidate cluster (sim/advise/config.h) × planner is a group, planned once on the twin
// (planning::PlanOnTwin, so the plan's iteration time is simulated); each group's configurations (policy ×
// spares × checkpoint interval) are replayed over the candidate's availability trace (sim/advise/
// availability.h) for every trace seed. Time to train = tokens / goodput over the replayed window, cost =
// that time × the rent (on-demand nodes all the time, spot nodes while granted, hot spares).
//
// Pruning (exact for the Pareto front and the recommendation): a group's configurations cannot train faster
// than its plan's iteration without interruptions, nor rent for less than its on-demand nodes and least spot
// rent; groups are replayed in order of that bound on the objective, and a group whose bound corner is
// dominated by a configuration already replayed is skipped. `--no-prune` replays everything.
//
// Results are written point by point (resumable), spread over `--jobs` workers or `mpirun` ranks.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "models/status.h"
#include "sim/advise/config.h"

namespace hetsim::advise {

struct AdviseOptions {
  std::string out_dir;  // default out/<name>
  bool resume = false;
  int jobs = 1;
  bool prune = true;
  bool figures = true;
  bool progress = true;
  // Wall-clock seconds after which no plan or replay starts and running workers are stopped (0: none); what
  // was computed is reported, marked partial, and --resume continues.
  double time_limit_s = 600;
};

// Runs the search and writes OUT/{results.jsonl,results.csv,configurations.csv,advice.json,
// recommendation.md,pareto.png,recommended-replay.{json,png}}. Returns non-OK when the search could not be
// carried out or points are missing (killed workers; --resume computes them).
Status RunAdvise(const Config& config, const AdviseOptions& options, std::ostream& out, std::ostream& err);

// ---- the decision, as pure functions (tested on hand-made inputs) ----

// One configuration's outcome over its seeds.
struct Outcome {
  bool ok = false;   // every seed replayed
  double time_s = std::numeric_limits<double>::infinity();  // mean time to train
  double cost_usd = std::numeric_limits<double>::infinity();
  bool finite() const { return ok && time_s < std::numeric_limits<double>::infinity(); }
};

// Whether each outcome is on the Pareto front of (time, cost), both minimised: finite, and no other finite
// outcome is at most as long and as costly and better in one.
std::vector<bool> ParetoFront(const std::vector<Outcome>& outcomes);

// Whether (time_lb, cost_lb) — a group's lower bounds — is dominated by an outcome: then none of the group's
// configurations can be on the front or recommended.
bool BoundDominated(double time_lb_s, double cost_lb_usd, const std::vector<Outcome>& outcomes);

// The recommendation: "cheapest" the least cost whose time meets `deadline_s`, "soonest" the least time
// whose cost meets `budget_usd` (either limit may be infinite); ties go to the other metric, then the lower
// index. -1 when no finite outcome meets the limits.
int Recommend(const std::vector<Outcome>& outcomes, const std::string& objective, double deadline_s,
              double budget_usd);

}  // namespace hetsim::advise
