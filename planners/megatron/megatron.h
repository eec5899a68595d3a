// `megatron`: Megatron-LM's symmetric 3D parallelism (Shoeybi et al. 2019; Narayanan et al. 2021, SC'21
// §2–3). dp × tp × pp over every GPU in node order with Megatron's rank layout (TP fastest, then DP,
// then PP), TP inside a node, the same number of layers on every stage, one micro-batch size for all.
// Heterogeneity is ignored as Megatron-LM ignores it: candidates are ranked as if every GPU were the
// cluster's first GPU type (option hetero_aware ranks them on the real GPUs instead); memory is checked on
// the real devices, as a run that does not fit would crash. Options: planners/proto/megatron.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::megatron {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::megatron
