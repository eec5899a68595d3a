// The iteration as per-device programs the SimGrid engine plays: the plan's lowering (models/lowering.h,
// shared with the executor) with a duration on every compute operation and the fidelity's choices made
// (TP collectives per layer, fused per pass, or costed analytically). No SimGrid here; sim/engine.cc plays
// the programs, one actor per device (plus one "DP stream" actor per device when gradient
// synchronisation overlaps the backward pass).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/cost.h"
#include "models/lowering.h"
#include "models/op_prices.h"
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
  kPostRecv,    // post the receive of the next message from `peer` without waiting (the kRecv completes it)
  kCollective,  // take part (as `rank`) in a collective over group `group`
  kTpAnalytic,  // TP collective time computed from the route (TpDetail::kAnalytic)
  kSignal,      // (main stream) tell the device's DP stream that a gradient group is ready; (DP stream,
                // comm.param_gather_overlap) tell the main stream that a group's parameters are gathered
  kAwait,       // wait for the other stream's next kSignal
  kJoin,        // (main stream) wait until the device's DP stream has finished
  kWaitSends,   // wait for every posted send to complete
  kComputeAsync,  // start `seconds` of compute and go on (comm.tp_overlap: TP collectives run meanwhile)
  kComputeJoin,   // wait for the compute kComputeAsync started
  kHostCopy,      // CPU offload: copy `bytes` over the route between the device and its node's host memory
                  // (the GPU's PCIe link and the host memory link; `to_host`: device to host) and wait for it
};

// One vocabulary with the lowering and the executor.
using models::Algorithm;
using models::Category;
using models::CategoryName;
using models::CollectiveKind;
using models::Channel;
using models::kChanDp;
using models::kChanPpBackward;
using models::kChanPpForward;
using models::kChanTp;

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
  double seconds = 0;  // compute; collectives: the call's fixed cost α before its transfers
  double bytes = 0;    // payload (collectives: the full buffer S)
  bool to_host = false;  // host copy: device to host
  float hide_share = 0;  // TP collective behind the backward's GEMMs (models::Op::hide_share)
  // Collective: models::Op::sm_share; kComputeAsync: the largest of the collectives it hides.
  float sm_share = 0;
};

struct DeviceProgram {
  std::vector<Op> ops;        // the device's main stream
  std::vector<Op> dp_stream;  // the overlapped DP stream (empty unless the plan overlaps)
  uint32_t pipeline = 0;
  uint32_t stage = 0;
};

// The key of the ordered message stream from device `src` to device `dst` on `channel` (p2p channels
// 0..7, collective group g on channel 8 + g); also the engine's mailbox key.
inline uint64_t StreamKey(uint32_t src, uint32_t dst, uint32_t channel) {
  return (uint64_t{src} << 42) | (uint64_t{dst} << 20) | channel;
}

// The key of a representative's ring messages on `channel` (FoldMap::ring_peer).
inline uint64_t RingKey(uint32_t device, uint32_t channel) { return (uint64_t{device} << 8) | channel; }

// Folding identical work (docs/simulator.md, "Folding"; the decision is models/fold.h's, shared with the
// planners' played estimate). When every pipeline (DP replica) plays the same operations as pipeline 0 and
// every device of a stage the same as the stage's first device (the same compute times, bytes,
// micro-batches and schedule; peers and groups in the same places), only one device per stage of
// pipeline 0 — its representative — is played, and the others take its trace. Its transfers still load the
// links the folded devices would load: a collective (ring, NVLS or all-to-all) plays the flows of every
// member of its group and of the folded groups whose flows share a link with them (a node's shared NIC,
// rail striping, an oversubscribed uplink); a send adds the folded devices' copies that share a link with
// its route. A CP ring's messages between devices that fold onto one representative are played as its
// sends to its ring peer, and its receives complete as those arrive. Plans that are not symmetric in this
// sense (heterogeneous pipelines, mixed TP, uneven splits, compute jitter, CPU staging, trees, broadcasts,
// CPU offload, whose host copies share their node's host memory link) are played in full.
struct FoldMap {
  std::vector<uint32_t> rep;                   // per slot: the slot whose program stands for it (itself: played)
  std::vector<std::vector<uint32_t>> family;   // per group with a played member: the groups folded onto it
                                               // (itself first); empty for the others
  // Per played send stream (StreamKey of the representatives' devices): the folded devices' copies of it,
  // as (sender device, receiver device).
  std::unordered_map<uint64_t, std::vector<std::pair<uint32_t, uint32_t>>> send_copies;
  // Per (representative device, channel) with ring messages (RingKey): the device its ring sends go to.
  std::unordered_map<uint64_t, uint32_t> ring_peer;
  uint32_t played = 0;                         // representatives
};

// NCCL's choice for one kind of collective call between nodes (models/nccl.h), for the report.
struct NcclCallNote {
  models::Category category = models::Category::kDp;
  models::CollectiveKind kind = models::CollectiveKind::kAllReduce;
  uint32_t ranks = 0, nodes = 0;
  double bytes = 0;  // one call's buffer
  models::NcclCall call;
  proto::Nic::Kind nic = proto::Nic::KIND_INFINIBAND;
};

struct Programs {
  std::vector<uint32_t> devices;               // devices the plan uses, in plan order
  // The distinct collective calls between nodes the programs make, NCCL's choice for each, largest first
  // (at most 8).
  std::vector<NcclCallNote> nccl_calls;
  std::vector<DeviceProgram> programs;         // parallel to `devices`
  std::vector<std::vector<uint32_t>> groups;   // collective groups (device lists in rank order)
  std::vector<uint32_t> device_slot;           // device -> index into `devices` (or UINT32_MAX)
  Fidelity fidelity;
  // HetHub §3.1: transfers between nodes are staged through host memory (GPU -> CPU -> network -> CPU -> GPU):
  // all of them (cpu_staged), or those between the node groups the communicator stages
  // (models/communicator.h: staged_groups is a groups × groups matrix, node_group each node's group).
  bool cpu_staged = false;
  std::vector<uint8_t> staged_groups;
  std::vector<uint32_t> node_group;
  uint32_t num_groups = 0;
  // Set when the ranks were folded (ProgramOptions::fold and a symmetric plan): the folded slots' programs
  // are empty and the engine copies their representative's trace. `fold_note` says why a plan did not fold.
  bool folded = false;
  FoldMap fold;
  std::string fold_note;
  bool StagedBetween(uint32_t node_a, uint32_t node_b) const {
    if (node_a == node_b) return false;
    if (cpu_staged) return true;
    if (staged_groups.empty()) return false;
    return staged_groups[size_t{node_group[node_a]} * num_groups + node_group[node_b]] != 0;
  }
};

struct ProgramOptions {
  Fidelity fidelity;
  // Multiplies every compute operation by a log-normal factor of mean 1 and this coefficient of
  // variation (kernel-time variability), drawn from a generator seeded with (seed, device).
  double compute_jitter_cv = 0;
  uint64_t seed = 1;
  // Fold identical ranks (see FoldMap) when the plan allows it. Never at CollectiveDetail::kFull, which
  // stays the unfolded reference.
  bool fold = false;
  // Debugging: also decide folding by comparing every operation of a full lowering, and fail (Internal)
  // where that disagrees with the structural decision BuildPrograms takes (see DecideFold).
  bool verify_fold = false;
};

// TP communication overlap (comm.tp_overlap): models/op_prices.h kTpOverlapChunks.
using models::kTpOverlapChunks;

// Lowers the plan (models::LowerPlan) and costs every compute operation with `cost`. The plan must be
// valid (ValidatePlanStructure); a plan the lowering rejects is an error.
Result<Programs> BuildPrograms(const proto::Plan& plan, const models::PlanContext& ctx, const models::ComputeCost& cost,
                               const ProgramOptions& options);

// The seconds ProgramsFromLowering gives compute operation `op` of rank `r` (before consecutive compute of
// one pass is merged into one operation): what `hetsim export-chakra` records as each node's duration.
double PriceComputeOp(const models::Op& op, const models::RankOps& r, const models::PlanContext& ctx,
                      const models::ComputeCost& cost, bool separate_recompute);

// Costs an existing lowering (consumed: its operation lists are released device by device). A lowering
// with skeletons (models::LoweringOptions::skeletons) is folded by comparing those; a partial one
// (lower_devices) only when it folds — otherwise the ranks left out get empty programs.
Programs ProgramsFromLowering(models::Lowering&& lowering, const models::PlanContext& ctx,
                              const models::ComputeCost& cost, const ProgramOptions& options);
// The same with the seconds of every compute operation given instead of the cost model's price (imported
// Chakra traces, sim/chakra.h): compute_seconds(slot, dp_stream, index) for operation `index` of slot
// `slot`'s main stream (or DP stream). Collectives are priced as for a plan.
using ComputeSecondsFn = std::function<double(uint32_t slot, bool dp_stream, size_t index)>;
Programs ProgramsFromLowering(models::Lowering&& lowering, const models::PlanContext& ctx,
                              const models::ComputeCost& cost, const ProgramOptions& options,
                              const ComputeSecondsFn& compute_seconds);

// The folding decision, taken two ways. Structurally (what BuildPrograms does): the plan's shape first —
// no CPU staging, every pipeline as deep as pipeline 0 with stages as wide, one replica and one sequence
// shard per stage — then a lowering of the representatives' operations only, with every rank's skeleton
// compared to its representative's (and its pipeline's stage and micro-batch counts). Or, with
// `full_comparison`, every operation of every rank of a full lowering (the reference, for tests and
// ProgramOptions::verify_fold). `groups` are the lowering's collective groups, which `fold` refers to.
struct FoldDecision {
  bool folded = false;
  std::string note;  // why not, when not folded
  FoldMap fold;
  std::vector<std::vector<uint32_t>> groups;
};
Result<FoldDecision> DecideFold(const proto::Plan& plan, const models::PlanContext& ctx,
                                const models::LoweringOptions& options, bool full_comparison);
// Empty when two decisions agree: both refuse, or both fold with the same groups and FoldMap.
std::string CompareFoldDecisions(const FoldDecision& a, const FoldDecision& b);

// ---- what the engine measures (sim/engine.h plays; these types carry no SimGrid) -----------------

struct Slice {
  double start_s = 0;
  double end_s = 0;
  Category category = Category::kForward;
  uint16_t micro_batch = 0;
};

// What one device did.
struct DeviceTrace {
  double compute_s = 0;        // forward + backward + optimizer
  double fwd_bwd_s = 0;        // forward + backward only
  double tp_s = 0;             // time inside TP collectives
  double pp_s = 0;             // PP transfer time (after the peer was ready)
  double dp_s = 0;             // gradient sync on the main stream (or the exposed part when overlapped)
  double zero_s = 0;           // ZeRO gathers
  double cp_s = 0;             // context-parallel ring exchanges and Ulysses all-to-alls (exposed)
  double ep_s = 0;             // expert parallelism's dispatch and combine (exposed)
  double pipeline_end_s = 0;   // end of the last backward compute
  double end_s = 0;            // end of the device's iteration
  // Communication and waiting inside collectives up to the end of the last forward/backward compute: the
  // part of the pipeline phase that is neither compute nor a bubble.
  double comm_in_phase_s = 0;
  std::vector<Slice> slices;   // filled when recording a timeline
};

struct EngineResult {
  double iteration_s = 0;
  std::vector<DeviceTrace> devices;  // parallel to Programs::devices
  // Folded runs: links run at 1/n of their bandwidth instead of playing n − 1 copies of each pipeline
  // transfer on them (sim/engine_fold.cc ScaleTwinLinks).
  uint32_t scaled_links = 0;
};

}  // namespace hetsim::sim
