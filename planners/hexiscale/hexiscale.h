// `hexiscale`: HexiScale (Yan et al. 2024, "HexiScale: Accommodating Large Language Model Training over
// Heterogeneous Environment", papers/002): asymmetric 3D plans found by hierarchical graph partitioning.
//
//   Phase one (§4.2, graph.h): the cluster as a graph (GPUs weighted by compute, edges by bandwidth) is cut
//     by METIS into D_dp groups of balanced compute, one per pipeline, with the inter-group cut minimised
//     (slow links carry DP; fast links stay inside pipelines) or maximised (fast links carry DP).
//   Phase two (§4.3, pipeline.h): each group is cut again into k_i parts; each part's GPUs on each machine
//     form stages of one TP degree (the locally optimal one under the Appendix A cost model); the parts are
//     ordered by a top-τ greedy search; blocks are balanced over the stages under memory caps.
//   Iterative optimisation (§4.4): D_dp is enumerated (and the micro-batch size), k_i is varied per group,
//     and each iteration's partition option (min or max cut) is chosen from the moving averages of the
//     simulated DP and pipeline costs of the recent iterations; out-of-memory plans cost infinity; the
//     cheapest plan under Appendix A (cost.h, latency included) wins.
//   Asymmetric execution (§3.2): pipelines get different numbers of micro-batches (the batch is split to
//     equalise their eq. 9 times), stages different TP degrees and layer counts, the stage leader receives
//     and broadcasts (CommOptions.pp_leader_broadcast), and the gradient synchronisation is chunked to the
//     smallest TP shard (models::DeriveGradSyncGroups; the simulator plays it).
// Options: planners/proto/hexiscale.proto; docs/planners-hexiscale.md explains the choices.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::hexiscale {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::hexiscale
