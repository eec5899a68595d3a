// Hetu v2's graph switching (papers/003 §6, §8; docs/hspmd.md): moving every weight from one plan's sharding
// to another's with BSR (models/hspmd.h), fused into one global plan with one send per GPU pair, or per
// tensor one after another, or without the sender heuristics, played as transfers on the cluster's SimGrid
// platform so that NVLink and InfiniBand show. A cost helper: the recovery policy `hetu`
// (sim/recovery/hetu.cc) decides when to switch and charges graph specialisation (a fixed time) plus this
// switch instead of a restart.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/hspmd.h"
#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"
#include "models/transformer.h"
#include "sim/simulator.h"

namespace hetsim::sim {

struct HetuSwitchOptions {
  bool fused = true;       // §6.2: every tensor's BSR table in one plan, one send per GPU pair
  bool heuristics = true;  // §4.3 (II) and (III); false: the lowest owner id sends (§8's baseline)
  // Bytes moved per parameter; 0: the weights and the optimizer state as models::EstimateMemory counts them
  // (training dtype + fp32 master weights when mixed + Adam's two moments or SGD's momentum + extra):
  // without ZeRO every replica holds all of it, and the new owner needs all of it to go on training.
  double bytes_per_param = 0;
};

// The bytes per parameter a switch moves under `options` and `training` (resolved).
double SwitchBytesPerParam(const HetuSwitchOptions& options, const proto::Training& training);

// The switch from `from` to `to`, each plan's devices placed on `cluster` (the trace's) by its place vector
// (plan device -> cluster device; empty: the identity). `lost`: cluster devices whose copies are gone.
models::hspmd::SwitchPlan PlanHetuSwitch(const proto::Plan& from, const std::vector<uint32_t>& from_place,
                                         const proto::Plan& to, const std::vector<uint32_t>& to_place,
                                         const models::TransformerModel& model, const proto::Training& training,
                                         const models::Cluster& cluster, const std::set<uint32_t>& lost,
                                         const HetuSwitchOptions& options);

// GPU-to-GPU transfers of one round.
std::vector<Transfer> SwitchTransfers(const std::vector<models::hspmd::Send>& sends);

// Seconds to play the switch on `cluster`: each round's transfers at once (SimulateTransfers), the rounds one
// after another (unfused: one round per tensor).
Result<double> SimulateSwitch(const models::hspmd::SwitchPlan& plan, const models::Cluster& cluster,
                              const std::string& calibration = "");

// Table 2's breakdown: per sender, bytes over its node's fabric (NVLink) and over the network.
struct SenderVolume {
  uint32_t device = 0;
  double intra_node_bytes = 0;
  double inter_node_bytes = 0;
};
std::vector<SenderVolume> VolumesBySender(const models::hspmd::SwitchPlan& plan, const models::Cluster& cluster);

}  // namespace hetsim::sim
