// `autohet`: AutoHet (papers/000, "Diving into 3D Parallelism with Heterogeneous Spot Instance GPUs",
// §III, Algorithm 1): asymmetric 3D plans for heterogeneous GPUs.
//
//   Observations (§II): TP is symmetric (every TP group has one degree t and one GPU type, inside a node);
//     pipelines may differ across DP groups (stage counts, GPU types, layer counts), so gradients are
//     synchronised layer by layer (models::DeriveGradSyncGroups; the simulator plays it).
//   Device grouping (§III-B, eq. 2-3, grouping.cc): for each t and number of DP groups D, the TP groups
//     are split into D groups maximising D × the smallest effective computing power (1 − bubble) × Σ power,
//     every GPU in exactly one group, each group holding the model's memory; solved exactly by CBC.
//   Node and stage mapping (§III-C, mapping.cc): lower-end GPUs take the earlier stages; the same stage of
//     every group is placed on one node while one holds them (its DP all-reduce on NVLink); the rest in order.
//   Layer partition (§III-C, eq. 4, mapping.cc): per group, the block counts minimising the group's eq. 1
//     time under each stage's memory (weights, gradients, optimizer states and 1F1B's in-flight
//     activations); solved exactly by CBC on stage times composed from profiles of 2^k layers (§III-D, eq. 5).
//   Selection (Algorithm 1 lines 14-16): every (t, micro-batch size, D) plan is ranked by eq. 1.
// Options: planners/proto/autohet.proto; docs/planners-autohet.md gives the equations as implemented and
// the choices where the paper's text is silent.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::autohet {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::autohet
