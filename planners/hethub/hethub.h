// `hethub`: HetHub's automatic hybrid parallelism (papers/001, "HetHub: A Heterogeneous distributed hybrid
// training system for large-scale models", §3.3).
//
//   Search space (§3.3.1): a three-level tree — the model is cut into pipeline stages non-uniformly over the
//     GPU types (level 1), each stage is replicated uniformly over homogeneous nodes by DP (level 2) and
//     split uniformly inside a node by TP (level 3). With TP degree t and DP degree d, a GPU type with N
//     GPUs holds N / (d·t) stages; the plan is d identical pipelines.
//   Rules (§3.3.2): (1) load balance — the stages of one GPU type get layer counts that differ by at most
//     one, so the search chooses only each type's total; (2) bottleneck restriction — an upper bound on the
//     slowest stage prunes extreme partitions (here: the uniform split's slowest stage × bottleneck_slack);
//     (3) stage order — stages run in descending order of their estimated time (the slowest first, which
//     minimises 1F1B's end-to-end time by the paper's finding), so orderings are not searched.
//   Search (§3.3.3): the time of 1..L blocks on each type's hardware is estimated first; a depth-first
//     search assigns each type its total, pruning by the rules; every leaf's plan is costed by the
//     performance predictor (hetsim's analytic cost model, planners/cost_model.h, memory included) and the
//     cheapest kept.
//   Communicator (§3.1): the plan leaves comm.communicator at auto, so transfers between GPUs of different
//     vendors take the CPU path (models/communicator.h); the predictor and the simulator charge it.
// Options: planners/proto/hethub.proto; docs/planners-hethub.md.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::hethub {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::hethub
