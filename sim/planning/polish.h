// Polishing a plan on the twin (`--polish N`, opt-in): a local search from a planner's simulator-checked
// choice that goes beyond the planner's paper. The paper's search and cost model pick the plan (and
// `--refine K` chooses among its best K in the simulator); polishing then tries small changes to that plan
// and keeps each one the simulator says is faster, until no change helps or N simulations are spent.
//
// The changes (neighbours of a plan) are the fourteen moves of sim/planning/moves.h, tried in its table's
// order (layer-boundary, device-swap, ..., machine-idle).
// A change that the plan checks refuse (models::ValidatePlan: structure and memory) or that simulates out
// of memory is skipped. The rest are tried in the order of their played estimate (AnalyticCostModel::
// Estimate; the list's order breaks ties); one whose lower bound (LowerBoundSeconds, never above the simulated
// time) is no better than the current plan is ruled out without a simulation. The first change that
// simulates faster by more than 0.01% is kept and the search starts again from it, until a whole list
// without one (a local optimum). A plan is simulated once (those seen are skipped). From a local optimum the
// search restarts up to 8 times (iterated local search): it takes the fastest neighbour that simulated and
// was not faster, descends from it without walking back into plans seen, and keeps the result if it beats
// the best so far; the next restart starts from the best's next such neighbour. It stops when the restarts
// or the simulations are spent. Deterministic: same inputs, same plan.
//
// The result is a plan the planner's paper would not have returned: the notes say so, with both times.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "planners/cost_model.h"
#include "planners/planner.h"
#include "sim/planning/moves.h"
#include "sim/simulator.h"

namespace hetsim::planning {

struct PolishOutcome {
  double start_s = 0;          // the plan's simulated iteration before
  double end_s = 0;            // after
  uint32_t simulated = 0;      // changes simulated
  uint32_t ruled_out = 0;      // changes ruled out by their lower bound
  uint32_t refused = 0;        // changes the plan checks refused or that ran out of memory
  // The changes from the input plan to the result, in order, each with its simulated time; a restart that
  // led to the result is listed as "restart (CHANGE, slower): T".
  std::vector<std::string> kept;
  uint32_t restarts = 0;       // restarts from slower neighbours tried (at most 8)
  bool local_optimum = false;  // stopped at a local optimum no restart escaped (else: a budget ran out)
  bool timed_out = false;      // the CPU-time limit stopped it
};

// What a polish may spend: simulations (the counted budget: the same result on every machine) and CPU seconds
// (sim/planning/cpu_clock.h: this process and its simulations; a safety limit for large clusters, where one
// simulation takes seconds; 0 = none). The clock is checked before each simulation.
struct PolishBudget {
  uint32_t simulations = 0;
  double time_limit_s = 0;
};

// Polishes `plan` (simulated at `plan_s` under `sim`) within `budget`. Returns the best plan found (the input
// when nothing helped).
proto::Plan PolishOnTwin(const proto::Plan& plan, double plan_s, const planners::PlanningProblem& problem,
                         const sim::SimOptions& sim, PolishBudget budget, PolishOutcome* outcome);

// `plan` with its layers rebalanced on the played estimate (AnalyticCostModel::Estimate), the plan kept
// valid. The start is the plan's own split or, where the estimate prefers it, each pipeline's split that
// balances its stages' closed-form compute (1F1B's (m − 1)·max + Σ over the stages, a dynamic programme over
// the boundaries), with the PP hops weighed at 0, 1/4, 1/2 or 1 (how much of a hop the schedule hides is
// not in the closed form). From there a layer is moved at a time while the estimate improves, at most
// `max_rounds` moves: between adjacent stages first, and when none helps a layer moved further (every
// boundary between shifted; it leaves a plateau where two stages tie for the slowest). Used on each change
// but a layer move (every move but layer-boundary) before it is judged.
// `stop` (optional) is asked before each estimate: when it says true, the split reached so far is returned.
proto::Plan RebalanceLayers(const proto::Plan& plan, const planners::AnalyticCostModel& cost,
                            const models::PlanContext& ctx, uint32_t max_rounds,
                            const std::function<bool()>& stop = {});

}  // namespace hetsim::planning
