// The iteration as per-device programs: what each GPU does, in order, during one training iteration.
//
// Built from a Plan without SimGrid (so it is testable on its own); sim/engine.cc plays the programs on
// the SimGrid platform, one actor per device (plus one "DP stream" actor per device when gradient
// synchronisation overlaps the backward pass).
//
// Schedules (per pipeline, stage s of S, m micro-batches):
//   1F1B (PipeDream-flush): min(S − s − 1, m) warm-up forwards, then alternate one forward and one
//         backward, then the remaining backwards.
//   GPipe: all m forwards, then all m backwards.
// Forward of a micro-batch on a device: receive the activations from the previous stage (PP), [ZeRO-3
// all-gather], compute (with the TP collectives of each layer), send to the next stage. Backward mirrors
// it. After the last backward: the gradient-sync collectives of the device's groups (models/plan.h
// DeriveGradSyncGroups), then the optimizer step (and ZeRO's parameter all-gather).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cost.h"
#include "models/plan.h"

namespace hetsim::sim {

// How much of each collective is simulated (docs/simulator.md, "Fidelity").
enum class CollectiveDetail {
  kFull,       // every step of the algorithm as its own transfers
  kAggregate,  // one bandwidth-equivalent transfer per member (+ the remaining steps' latencies)
};
enum class TpDetail {
  kPerLayer,  // the 2 all-reduces of every block in every micro-batch
  kPerStage,  // one fused all-reduce per stage and micro-batch (same bytes)
  kAnalytic,  // no transfers: α–β time of the TP group's route added to the device's timeline
};

struct Fidelity {
  CollectiveDetail collectives = CollectiveDetail::kAggregate;
  TpDetail tp = TpDetail::kPerStage;
  static Fidelity Full() { return {CollectiveDetail::kFull, TpDetail::kPerLayer}; }
  static Fidelity Balanced() { return {CollectiveDetail::kAggregate, TpDetail::kPerStage}; }
  static Fidelity Fast() { return {CollectiveDetail::kAggregate, TpDetail::kAnalytic}; }
};

enum class OpKind : uint8_t {
  kCompute,     // busy for `seconds`
  kSend,        // post an asynchronous point-to-point send of `bytes` to `peer`
  kRecv,        // block until the matching message from `peer` arrived
  kCollective,  // take part (as `rank`) in a collective over group `group`
  kTpAnalytic,  // TP collective time computed from the route (TpDetail::kAnalytic)
  kSignal,      // (main stream) tell the device's DP stream that a gradient group is ready
  kAwait,       // (DP stream) wait for the next kSignal of the main stream
  kJoin,        // (main stream) wait until the device's DP stream has finished
  kWaitSends,   // wait for every posted send to complete
};

enum class Category : uint8_t { kForward, kBackward, kOptimizer, kTp, kPp, kDp, kZero, kIdle };
const char* CategoryName(Category c);

enum class CollectiveKind : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast };
enum class Algorithm : uint8_t { kRing, kTree };

// Point-to-point channels: messages between two devices are matched in order per channel.
enum Channel : uint8_t { kChanPpForward = 0, kChanPpBackward = 1, kChanTp = 2, kChanDp = 3 };

struct Op {
  OpKind kind = OpKind::kCompute;
  Category category = Category::kForward;
  CollectiveKind collective = CollectiveKind::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  uint8_t channel = 0;
  uint16_t micro_batch = 0;
  uint32_t peer = 0;   // send/recv peer device
  uint32_t group = 0;  // collective group (index into Programs::groups)
  uint32_t rank = 0;   // this device's rank in the group
  double seconds = 0;  // compute
  double bytes = 0;    // payload (collectives: the full buffer S)
};

struct DeviceProgram {
  std::vector<Op> ops;        // the device's main stream
  std::vector<Op> dp_stream;  // the overlapped DP stream (empty unless the plan overlaps)
  uint32_t pipeline = 0;
  uint32_t stage = 0;
};

struct Programs {
  std::vector<uint32_t> devices;               // devices the plan uses, in plan order
  std::vector<DeviceProgram> programs;         // parallel to `devices`
  std::vector<std::vector<uint32_t>> groups;   // collective groups (device lists in rank order)
  std::vector<uint32_t> device_slot;           // device -> index into `devices` (or UINT32_MAX)
  Fidelity fidelity;
  // HetHub §3.1: transfers between nodes are staged through host memory (GPU -> CPU -> network -> CPU -> GPU).
  bool cpu_staged = false;
};

struct ProgramOptions {
  Fidelity fidelity;
  // Multiplies every compute operation by a log-normal factor of mean 1 and this coefficient of
  // variation (kernel-time variability), drawn from a generator seeded with (seed, device).
  double compute_jitter_cv = 0;
  uint64_t seed = 1;
};

// Builds every device's program. The plan must be valid (ValidatePlanStructure); a plan the simulator
// cannot play (interleaved 1F1B, ZeRO-3 across pipelines of different micro-batch counts) is an error.
Result<Programs> BuildPrograms(const proto::Plan& plan, const models::PlanContext& ctx, const models::ComputeCost& cost,
                       const ProgramOptions& options);

}  // namespace hetsim::sim
