// `alpa` and `amp`: the automatic planners that average heterogeneity away. Metis §3: "Alpa and AMP simply
// take an average of the computing power across GPUs and operate on the premise that all GPUs have this
// averaged compute capacity". Both rank candidates as if every device were the cluster's average GPU
// (memory is still checked on the real devices).
//   - alpa (Zheng et al., OSDI 2022): one pipeline whose stages run on equal slices of the devices in node
//     order (submeshes); each stage picks its own DP × TP degree (the intra-operator pass) and layers are
//     balanced on the averaged costs (the inter-operator pass); each micro-batch is split evenly over a
//     stage's DP replicas.
//   - amp (Li et al., NeurIPS 2022): symmetric dp × tp × pp (Megatron's layout) with the layer partition
//     balanced on the averaged costs.
// Options: planners/proto/alpa.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::alpa {

std::unique_ptr<Planner> NewAlpaPlanner();
std::unique_ptr<Planner> NewAmpPlanner();

}  // namespace hetsim::planners::alpa
