// `metis`: Metis (Um et al., "Metis: Fast Automatic Distributed Training on Heterogeneous GPUs", USENIX
// ATC 2024), reimplemented from §2–§5 of the paper (shared/papers/004). One pipeline per plan:
//   - §4.1 hetero-aware search space: a stage runs on a device group, any combination of k GPUs per node,
//     unique by size, then per-type counts, then node placement (mixed types, unequal sizes, nodes with
//     different GPU counts); DP × TP per stage; a non-uniform micro-batch split inside mixed stages; any
//     contiguous layer range per stage; the number of micro-batches.
//   - §4.2.1 cost model (eq. 1): Σ t_i + (B − 1)·max t_j + DP_all, PP and DP communication from
//     bandwidths, TP communication from profiles.
//   - §4.2.2 search (Algorithm 1): stage counts × micro-batch counts × stage-device assignments, pruned by
//     the group-size bound N/S·(1 − var) and the maximum permutation length; DP-first intra-stage plans
//     with a DFS that trades DP for TP or moves layers away when a stage runs out of memory;
//     capacity-aware layer load balancing across stages and data load balancing inside mixed stages.
//   - §4.3 profiling-based estimation: per-layer times per GPU type, TP degree and profiled micro-batch
//     size (measured profiles, else the analytic model), other sizes composed from profiled ones; memory
//     from compositions of up to k layers.
// Not in the paper: an exact lower-bound cut, the order of work, threads, an anytime time limit
// (`time_limit_s`: the best plan found so far, with a note saying how much of the space was covered), and
// runners-up (PlanningProblem::alternatives: the next-best distinct plans by eq. 1, for `--refine`).
// docs/planners-metis.md says how each part is implemented and which choices were ours.
// Options: planners/proto/metis.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::metis {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::metis
