// `galvatron`: Galvatron (Miao et al., VLDB 2023, "Galvatron: Efficient Transformer Training over Multiple
// GPUs Using Automatic Parallelism") as the heterogeneous-training papers run it as a baseline (HexiScale
// §5.2 and Appendix C.2, "(D_dp, D_tp, D_pp) = (4, 2, 7)"): the same dp, tp and pp degrees for every
// stage and replica (it has no asymmetric DP/TP, no per-replica batch split and one pipeline template),
// but the layer count of each stage is chosen freely — balanced on the stages' real speed and memory, as
// Galvatron-BMW's pipeline partitioning does. Options: planners/proto/galvatron.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::galvatron {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::galvatron
