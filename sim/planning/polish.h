// Polishing a plan on the twin (`--polish N`, opt-in): a local search from a planner's simulator-checked
// choice that goes beyond the planner's paper. The paper's search and cost model pick the plan (and
// `--refine K` chooses among its best K in the simulator); polishing then tries small changes to that plan
// and keeps each one the simulator says is faster, until no change helps or N simulations are spent.
//
// The changes (neighbours of a plan), tried in this order:
//   1. one layer moved from a stage to another of its pipeline (the boundaries between them shifted by one);
//   2. the devices of two stages with the same device count and TP degree swapped (a faster group to the
//      heavier stage);
//   3. one micro-batch moved from one pipeline to another of the same micro-batch size (DP load balance);
//   4. a pipeline's micro-batch size doubled or halved, its micro-batch count the other way;
//   5. two pipelines merged into one deeper pipeline (the second's stages after the first's, or the stages
//      of both grouped by machine; each stage keeping about half its share of the layers, the micro-batches
//      summed);
//   6. a pipeline's runs of stages on one machine put in another order (up to 5 runs: which machine holds
//      the embedding, the head and the middle);
//   7. the plan's ZeRO stage one lower or higher;
//   8. one pipeline with a stage per machine, all of each machine's GPUs (idle ones included) as that stage's
//      data-parallel replicas (micro-batches of the least divisor of the batch at least the widest machine),
//      layers by device count;
//   9. a stage of several DP replicas split into consecutive stages, one per machine where it spans several,
//      else two halves of its replicas (data parallelism over a slow network turned into a pipeline);
//  10. one pipeline with a stage per GPU of the cluster (TP 1, micro-batches of one sequence, layers evenly),
//      its machines in the cluster's order, slowest GPUs first and fastest first: the deepest pipeline,
//      reached from wide DP or TP stages otherwise only by a chain of changes each slower on its own; and
//      the same with stages of g = 2, 4, ... GPUs of one machine as DP replicas, g below the widest machine
//      (a machine's remainder its first stage; micro-batches of at least g sequences): the depths between it
//      and change 8;
//  11. two adjacent stages with the same TP group shape joined into one stage holding both as DP replicas
//      (the inverse of 9), the micro-batch doubled until it has a sequence per replica;
//  12. a stage's TP degree halved and its DP doubled on the same devices, or the other way (micro-batch
//      doubled as in 11);
//  13. the plan's recomputation set to each other policy of none, selective and full than the one it runs
//      with: less recomputation is faster where memory allows it, more fits a deeper or narrower plan;
//  14. one machine left idle: its GPUs taken out of every stage that holds them (a stage whose replicas all
//      sat there is dropped, its layers given to the rest; a pipeline that lay on it alone is dropped, its
//      sequences given to the others). A slow GPU on a slow network can cost a plan more than it adds, and
//      repeated, this leaves a whole GPU type idle.
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
// but a layer move (2-14 above) before it is judged.
// `stop` (optional) is asked before each estimate: when it says true, the split reached so far is returned.
proto::Plan RebalanceLayers(const proto::Plan& plan, const planners::AnalyticCostModel& cost,
                            const models::PlanContext& ctx, uint32_t max_rounds,
                            const std::function<bool()>& stop = {});

// One neighbour of a plan: the changed plan, a short description of the change, and whether it is a layer
// move (change 1, judged as it is; every other change is rebalanced first).
struct PlanChange {
  proto::Plan plan;
  std::string change;
  bool layer_move = false;
};

// The neighbours of `plan` on `cluster` in the order above (exposed for tests); `layers` is the model's
// layer count, `training_recompute` the training spec's policy (what a plan without its own runs with; none
// when unspecified). None for interleaved plans (their stages hold several chunks).
std::vector<PlanChange> PlanNeighbours(const proto::Plan& plan, const models::Cluster& cluster, uint32_t layers,
                                       proto::Recompute training_recompute = proto::RECOMPUTE_UNSPECIFIED);

}  // namespace hetsim::planning
