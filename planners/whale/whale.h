// `whale`: Whale (Jia et al., USENIX ATC 2022, "Whale: Efficient Giant Model Training over Heterogeneous
// GPUs") as Metis (§5.3, Fig. 6) and AutoHet (§V-B) describe it: symmetric stages (every stage the same
// dp × tp shape) with uniform layers; "intra-TaskGraph" load balancing splits each micro-batch over a
// stage's data-parallel replicas in proportion to their GPUs' speed, capped by their memory; the
// "inter-TaskGraph" placement puts the stages with the largest memory demand on the device blocks with the
// most memory (it does not rebalance layers). Devices are taken in node order. Candidates are ranked on
// the real GPUs (Whale is hardware-aware). Options: planners/proto/whale.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::whale {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::whale
