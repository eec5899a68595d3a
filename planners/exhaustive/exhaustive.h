// `exhaustive`: the exact reference. For small clusters it enumerates every plan of the space the
// heterogeneous planners search and returns the proven best under the analytic cost model
// (planners/cost_model.h), so that every heuristic planner can report its optimality gap against it.
//
// The space (docs/planners.md, "exhaustive", says it in full):
//   - any number of pipelines (data-parallel replicas), each with its own micro-batch size b_p ≤
//     max_micro_batch_size and count m_p, Σ b_p·m_p = global batch;
//   - per pipeline, any sequence of stages; a stage is any set of TP groups of one degree t, each group t
//     devices of one node (TP never crosses nodes); any contiguous layer range per stage;
//   - per stage, any split of the micro-batch over its TP groups (each at least one sequence);
//   - every device used, or whole nodes left idle (any set of nodes, identical nodes taken in index order;
//     use_every_device: every device busy; allow_unused_devices: any subset); ZeRO stage from zero_stages (default 1, 2, 3;
//     0 is dominated by 1), 1F1B, Megatron sequence parallelism on (it only saves memory), recomputation as
//     the training spec says.
// Exactness: devices of one node are interchangeable and so are identical nodes under the same switch,
// which the enumeration exploits (symmetry reduction); a subtree is cut only when a lower bound on its
// iteration time is no better than the best plan found; each stage's micro-batch split is the min-max
// optimum (MinMaxSplit) given its memory caps. Options: planners/proto/exhaustive.proto.
#pragma once

#include <cstdint>
#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::exhaustive {

// PlanningProblem::alternatives asking for the proof list of the simulator's optimum: the pick (the
// closed form's best by the played estimate) and every plan of the space whose lower bound of the
// simulated iteration is below a threshold, by increasing lower bound (RankedPlan::lower_bound_s), with
// PlannerResult::complete_below_s the threshold when the search covered the whole space.
inline constexpr uint32_t kEveryCandidate = UINT32_MAX;

// The largest cluster the exact search takes by default (option max_devices).
inline constexpr uint32_t kDefaultMaxDevices = 16;

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::exhaustive
