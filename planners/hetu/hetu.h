// `hetu`: the heterogeneous HSPMD strategies of Hetu v2 (papers/003, "Hetu v2: A General and Scalable Deep
// Learning System with Hierarchical and Heterogeneous Single Program Multiple Data Annotations").
//
// What the paper gives. Hetu v2 is a system, not a planner: its strategies (Appendix A, Tables 5, 7, 8) are
// "determined with pre-profiled results combined with a cost model" (§A.3) and expressed as HSPMD
// annotations. Every one of them has the same shape, which is what this planner searches:
//   - each GPU type has its own TP degree (§3.2's DS Union: one sharding subgroup per TP group; Table 5:
//     TP 4 on H800 and H20 for 32B, TP 8 for 70B); a node whose GPU count the degree does not divide
//     forms smaller groups from its remaining GPUs (Table 7, C2: R28-29 at TP 2 and R30 at TP 1);
//   - pipelines are built from those TP groups, one group per stage (§5.4: "independent pipelines ...
//     process different numbers of micro-batches with varying sizes"); pipelines may differ in length
//     and in GPU types (C2: a 4-stage and a 5-stage pipeline);
//   - the layers are split unevenly over a pipeline's stages (Table 5: 7/7/23/23 blocks on H20/H20/H800/
//     H800), and the micro-batches unevenly over the pipelines (C2: 33 and 31);
//   - gradients are synchronised across pipelines by SplitAllReduce (ZeRO-1: SplitReduceScatter +
//     SplitAllGather) over the finest slices when TP degrees differ (§4.2; the lowering's chunked sync).
// The search (choices where the paper is silent; docs/planners-hetu.md):
//   1. per GPU type a TP degree (the cartesian product over types);
//   2. for each pipeline count P, the TP groups dealt to the pipelines longest-processing-time first on
//      their speed (each group, fastest first, to the pipeline with the least speed so far) — this gives
//      Table 5's and Table 7's pipelines (e.g. 31 H20 at TP 4: 4 × TP4 and 3 × TP4 + TP2 + TP1);
//   3. stages ordered by GPU type, slowest type first (Table 5) or fastest first, larger TP groups first
//      within a type;
//   4. per micro-batch size, each pipeline's layers balanced on its stages' speeds under memory
//      (BalanceBlocks: the largest stage time minimised, in-flight activations of 1F1B counted), then the
//      micro-batches split over the pipelines minimising the slowest pipeline, (m − 1)·max_s t_s + Σ_s t_s
//      (MinMaxSplit, exact for these non-decreasing costs);
//   5. every candidate costed by hetsim's analytic model (memory on the real devices first) and the
//      fastest kept — in order of a lower bound of its predicted time computed from the pipelines' shapes,
//      skipping those whose bound exceeds the best time (the same plan; docs/planners-hetu.md, "Planning
//      time at scale"; `disable_bounds` costs every one).
// Options: planners/proto/hetu.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::hetu {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::hetu
