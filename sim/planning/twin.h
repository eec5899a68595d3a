// `twin`, hetsim's own planner, on the simulator (beyond every paper; asked for by name, `--planner twin`).
//
//   1. The pool (planners/twin/twin.h): every other planner's pick and runners-up, each also with every other
//      recomputation policy, the ones that fit, ranked by the played estimate.
//   2. The check: every candidate of the pool simulated in that order unless its lower bound
//      (AnalyticCostModel::LowerBoundSeconds, never above the simulated time) is no better than the fastest
//      simulated so far. Every planner's pick is in the pool, so the plan returned simulates at least as fast
//      as every planner's pick (up to the time limit: candidates not reached are said so).
//   3. The local search (sim/planning/polish.h: layer splits, device swaps, micro-batches, merged and split
//      pipelines, stage per machine or per GPU, ZeRO, TP/DP trades, recomputation, machines left idle) from
//      TwinOptions.polish_starts candidates in turn — the fastest confirmed one, then the next by what the
//      check knows of them (simulated time, else the lower bound that ruled them out; such a start is simulated
//      first) — sharing polish_simulations and the time left; the fastest plan seen is returned.
// Budgets: simulations are counted (the result is the same on every machine that spends them); the CPU-time
// limit (TwinOptions.time_limit_s, 60 s of CPU: this process and its simulations, sim/planning/cpu_clock.h)
// stops the check (at half of it) and the polish early on a slow machine or a large cluster, and the notes say
// what it stopped. The pool's own planners are not interrupted: metis is given its anytime limit
// (TwinOptions.planner_time_limit_s).
#pragma once

#include "planners/planner.h"
#include "sim/planning/refine.h"

namespace hetsim::planning {

inline constexpr double kDefaultTwinTimeLimitS = 60;
inline constexpr uint32_t kDefaultTwinPolishSimulations = 200;
inline constexpr uint32_t kDefaultTwinPolishStarts = 8;

// PlanOnTwin for `twin` (`planner` must be the registered twin planner). `options.k` = kAutoRefine checks every
// candidate of the pool; a K limits the check to the pool's K best by estimate. `options.polish` > 0 replaces
// polish_simulations. The outcome's candidates are the pool's; `polish` is the winning start's polish.
Result<planners::PlannerResult> TwinOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                           const RefineOptions& options, RefineOutcome* outcome);

}  // namespace hetsim::planning
