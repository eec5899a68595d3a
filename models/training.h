// Training specs resolved against a model: defaults filled in, limits checked.
#pragma once

#include <string>

#include "models/proto/training.pb.h"
#include "models/transformer.h"

namespace hetsim::models {

inline constexpr double kDefaultWorkspaceGib = 1.0;
// Sources in models/proto/training.proto (cuda_context_gib, nccl_communicator_gib).
inline constexpr double kDefaultCudaContextGib = 400.0 / 1024;
inline constexpr double kDefaultNcclCommunicatorGib = 688.0 / 1024;
inline constexpr double kNcclTwoRankFraction = 544.0 / 688.0;
// NCCL's buffers grow with its channels (NVIDIA/nccl#986). The 688 MiB were measured on NVLink-connected
// A100s: with NCCL's default buffers per receive connection and channel (LL 0.5 MiB + LL128 4.69 MiB +
// Simple 4 MiB = 9.19 MiB, src/init.cc DEFAULT_*_BUFFSIZE) that is 75 connection-channels, about 25
// channels of a ring and a tree. On nodes whose GPUs talk over PCIe only, and on one-GPU nodes (every
// communicator through the NIC), NCCL's topology search opens two channels (one ring, duplicated): 2/25 of
// the measured size. Our choice, see docs/simulator.md.
inline constexpr double kNcclPcieChannelFraction = 2.0 / 25.0;

// A recomputation policy's name in specs and on command lines ("none", "selective", "full",
// "op_selective"); RECOMPUTE_UNSPECIFIED is "unspecified".
const char* RecomputeName(proto::Recompute recompute);
// The policy named `name`, or RECOMPUTE_UNSPECIFIED for a name that is none of them.
proto::Recompute ParseRecompute(const std::string& name);
// The names, for error messages: "none, selective, full or op_selective".
std::string RecomputeNames();

// Fills every unset field (global batch and sequence length from the model's defaults; bf16, Adam,
// no recomputation, flash attention, 1 GiB workspace) and checks the result against `model`.
Result<proto::Training> ResolveTraining(proto::Training training, const TransformerModel& model,
                                        const std::string& file);

}  // namespace hetsim::models
