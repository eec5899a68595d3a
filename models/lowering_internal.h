// The lowering's Lowerer (internal to models/lowering*.cc): turns one Plan into every rank's operations
// (models/lowering.h says what is decided, once). Its methods live by concern:
//   lowering.cc        — the ranks and their order, the schedules (1F1B, GPipe, interleaved 1F1B) that say
//                        which pass of which micro-batch runs when; the formatting of a lowering;
//   lowering_passes.cc — one pass of one micro-batch on one rank: the layers' compute, their TP collectives,
//                        the CP ring exchanges and Ulysses all-to-alls, and the PP transfers between stages;
//   lowering_sync.cc   — after the passes: gradient sync groups in buckets, ZeRO-3 gathers, CPU offload
//                        copies, the optimizer step and the parameter all-gathers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/lowering.h"

namespace hetsim::models {

class Lowerer {
 public:
  Lowerer(const proto::Plan& plan, const PlanContext& ctx, const LoweringOptions& options)
      : plan_(plan), ctx_(ctx), options_(options), model_(ctx.model), tr_(ctx.training),
        full_recompute_(EffectiveRecompute(plan, ctx.training) == proto::RECOMPUTE_FULL) {}

  Result<Lowering> Lower();

 private:
  Status CheckSupported() const;

  struct Segment {
    uint32_t layer_begin = 0, layer_end = 0;
    uint32_t group = kNone;  // index into out_.sync_groups; kNone: layers no other replica holds (offload)
  };

  // ---- the schedules (lowering.cc) ----

  // The rank's operations (or its skeleton: LoweringOptions::skeletons).
  void EmitRank(int p, int s, uint32_t r, uint32_t seq_shard, uint32_t k, bool skeleton);

  // Interleaved 1F1B (Narayanan et al. 2021 §2.2, Megatron-LM's virtual pipeline): each stage's layers are
  // cut into v chunks, and chunk c of stage s is virtual stage c·S + s, so a micro-batch runs chunk 0 on
  // stages 0..S−1, then chunk 1 on stages 0..S−1, and so on (stage S−1 hands chunk c to stage 0's chunk
  // c + 1). Chunks split the stage's transformer blocks as evenly as possible (the first chunks take the
  // remainder); the embedding goes with the first chunk and the head with the last. Since a plan names
  // each stage's layers as one range, chunk c of stage s holds blocks of that range: with identical blocks
  // this relabels layers without changing any time or byte.
  //
  // The order is Megatron-LM's (schedules.py, forward_backward_pipelining_with_interleaving): m·v
  // forward micro-steps, step i running chunk (i mod S·v) / S on micro-batch (i / (S·v))·S + i mod S
  // (backward: chunk v − 1 − that); stage s first runs min(m·v, 2(S − s − 1) + (v − 1)·S) forwards, then
  // one forward and one backward alternately, then the remaining backwards. With free communication and
  // equal chunks this takes (m·v + S − 1)·(f + b) for chunk times f and b (tests/sim).
  //
  // With comm.dp_overlap, a gradient group is handed to the DP stream after the last backward of the lowest
  // chunk it touches (the chunk that finishes last).
  void EmitInterleaved(int p, int s, uint32_t r, uint32_t k, uint32_t device, std::pair<uint32_t, uint32_t> seqs,
                       std::vector<Op>& ops, bool skeleton);

  void Signal(std::vector<Op>& ops) {
    Op sig;
    sig.kind = OpKind::kSignal;
    ops.push_back(sig);
  }

  // comm.param_gather_overlap (Megatron-LM's --overlap-param-gather): the device's parameter all-gathers,
  // in ascending layer order (the order its forwards reach them); empty without the option. Each gradient
  // group is gathered in its dp_bucket_mib buckets as Megatron's buckets are, here cut at layer boundaries
  // (so at most one piece per layer). The pieces' all-gathers open the DP stream, each followed by a
  // kSignal, and the first forward over a piece's layers (micro-batch 0) waits for it with a kAwait.
  struct GatherPiece {
    uint32_t group = kNone, layer_begin = 0, layer_end = 0, index = 0, count = 1;
    double bytes = 0;
  };
  std::vector<GatherPiece> GatheredAhead(uint32_t device) const;
  // A forward pass over layers [a, b): AddLayers, with the waits for the parameter all-gathers above cut in
  // before each gathered group's layers on micro-batch 0.
  void AddForward(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t r, uint32_t a, uint32_t b,
                  std::pair<uint32_t, uint32_t> seqs, uint16_t mb);

  // ---- one pass (lowering_passes.cc) ----

  // One id per member list and stream: with comm.dp_overlap the gradient sync runs on each rank's second
  // stream beside its passes, so its collectives get ids of their own even where their members are those of
  // a pass's collective (ZeRO-3's gathers, a Ulysses group): consumers match a group's calls in order, and
  // two streams' calls on one id would match by timing.
  uint32_t GroupId(std::vector<uint32_t> members, bool dp_stream = false);

  static uint32_t RankIn(const std::vector<uint32_t>& members, uint32_t device) {
    return static_cast<uint32_t>(std::find(members.begin(), members.end(), device) - members.begin());
  }

  // The TP group of sequence shard j of replica r.
  static std::vector<uint32_t> TpGroup(const proto::Stage& st, uint32_t r, uint32_t j) {
    std::vector<uint32_t> out;
    for (uint32_t k = 0; k < TpDegree(st); ++k) out.push_back(StageDevice(st, r, j, k));
    return out;
  }

  // The CP ring (in CP-rank order) and the Ulysses group of the rank at (r, j, k).
  static std::vector<uint32_t> CpGroup(const proto::Stage& st, uint32_t r, uint32_t j, uint32_t k) {
    const SequenceSharding sh = StageSharding(st);
    std::vector<uint32_t> out;
    for (uint32_t c = 0; c < sh.cp; ++c) out.push_back(StageDevice(st, r, c * sh.ulysses + j % sh.ulysses, k));
    return out;
  }
  static std::vector<uint32_t> UlyssesGroup(const proto::Stage& st, uint32_t r, uint32_t j, uint32_t k) {
    const SequenceSharding sh = StageSharding(st);
    std::vector<uint32_t> out;
    for (uint32_t q = 0; q < sh.ulysses; ++q) out.push_back(StageDevice(st, r, (j / sh.ulysses) * sh.ulysses + q, k));
    return out;
  }

  // Sequence ranges of each replica inside one micro-batch.
  static std::vector<std::pair<uint32_t, uint32_t>> Ranges(const proto::Stage& st, uint32_t mbs) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t at = 0;
    for (uint32_t b : MicroBatchSplit(st, mbs)) {
      out.emplace_back(at, at + b);
      at += b;
    }
    return out;
  }

  Op& AddCollective(std::vector<Op>& ops, const std::vector<uint32_t>& members, uint32_t device, double bytes,
                    CollectiveKind kind, Category cat, uint16_t mb, Algorithm algo = Algorithm::kRing);

  // The plan's algorithm for TP all-reduces (validation keeps nvls to TP groups inside NVSwitch nodes).
  Algorithm TpAlgorithm() const;

  void AddCompute(std::vector<Op>& ops, uint32_t layer, double flops, Category cat, uint16_t mb,
                  std::pair<uint32_t, uint32_t> seqs, bool recompute);

  // A fused pass's TP traffic (LoweringOptions::fuse_passes): the exposed collectives' and the ones behind
  // the backward's GEMMs (TpCollective::hidden_flops), each as one all-reduce moving as many bytes.
  struct FusedTp {
    double bytes[2] = {0, 0};   // [exposed, hidden]
    uint32_t gathers[2] = {0, 0}, others[2] = {0, 0};  // calls (an all-gather with a reduce-scatter: one
                                                       // all-reduce's call; two lone all-gathers: one)
    double hidden_flops = 0;
  };
  // One layer's TP collectives in one direction (or their bytes into the pass's fused all-reduces).
  void AddLayerTp(std::vector<Op>& ops, uint32_t device, const std::vector<uint32_t>& tp_group, uint32_t layer,
                  double batch, uint32_t local_seq, bool forward, uint16_t mb, FusedTp* fused);

  // Ring-attention point-to-point operations of one pass of one block (or of a fused pass). Before the
  // compute (`before`): one send per ring step (`bytes[i]` at step i) to the next CP rank and as many
  // receives posted from the previous one, so the transfers run during the compute; after it: the receives
  // completed.
  void AddRing(std::vector<Op>& ops, const std::vector<uint32_t>& ring, uint32_t device, bool before,
               const std::vector<double>& bytes, uint16_t mb, uint32_t a, uint32_t b, double batch);

  // Expert parallelism's exchange around one MoE layer's experts in one direction (docs/moe.md): the
  // all-to-all dispatch of the rank's routed token copies in its EP group and the combine back, and with
  // expert TP the all-gather of the group's tokens after the dispatch and the reduce-scatter before the
  // combine; or their bytes into the pass's fused calls (`fused`: [all-to-all, expert-TP] bytes and calls).
  struct FusedEp {
    double bytes[3] = {0, 0, 0};  // [EP all-to-all (node_dedup: inside the node), expert TP, node_dedup's rail]
    uint32_t calls[3] = {0, 0, 0};
  };
  // A device's expert groups (its EP group and expert-TP group in the stage's layout) and, under
  // comm.ep_dispatcher node_dedup on an EP group over several nodes of as many ranks each, the same-rail ranks
  // of the group's nodes (`rail`, in node order), the group's ranks on the device's node (`local`) and the rail
  // all-to-all's buffer per routed token; empty `rail` and `local` for the plain all-to-all. Made once per device.
  struct EpRoute {
    std::vector<uint32_t> ep_group, etp_group, rail, local;
    double rail_bytes_per_token = 0;
  };
  const EpRoute& RouteOf(uint32_t device, const proto::Stage& st);
  std::unordered_map<uint32_t, EpRoute> routes_;  // RouteOf's, by device
  // Under comm.ep_overlap, the share of `device`'s SMs an EP collective over `group` holds while it runs
  // beside the layer's compute (Op::sm_share; comm.ep_sms, else the dispatcher's default); 0 without overlap.
  float EpSmShare(uint32_t device, const std::vector<uint32_t>& group, bool all_to_all) const;
  void AddExpertExchange(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t layer, double batch,
                         uint32_t local_seq, uint16_t mb, FusedEp* fused);

  // Compute of layers [a, b) in one direction (backward: b − 1 down to a), with the TP collectives, the
  // CP ring exchanges and the Ulysses all-to-alls (see the header comment).
  void AddLayers(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t r, uint32_t a, uint32_t b,
                 std::pair<uint32_t, uint32_t> seqs, bool forward, uint16_t mb);

  // Point-to-point transfers of micro-batch `mb` between stage `from` and stage `to` of pipeline p
  // (forward: to = from + 1; backward: to = from − 1), as seen by `device` at (stage, r, k).
  void AddPp(std::vector<Op>& ops, int p, int from, int to, uint32_t device, bool sending, uint32_t r, uint32_t k,
             bool forward, uint16_t mb);

  // ---- gradient sync, ZeRO, offload and the optimizer step (lowering_sync.cc) ----

  // After the rank's passes: the gradient sync of each of its segments (on the DP stream with
  // comm.dp_overlap), the optimizer step over its shard, and under ZeRO ≥ 1 the parameter all-gathers; under
  // CPU offload the copies to and from host memory around the step.
  void EmitSyncAndStep(uint32_t device, const proto::Stage& st, RankOps& rank, std::vector<Op>& ops, bool overlap,
                       bool skeleton);

  // The pieces of each rank's parameters that its gradient sync and CPU offload handle, in backward order
  // (later layers first, then by chunk): the sync groups it belongs to and, under CPU offload, each layer
  // of the rank that no other replica holds (copied to and from host memory one layer at a time).
  void MakeSegments();

  // Bytes of a segment's parameters (or gradients) on rank `device` of TP degree `tp`: a sync group's
  // share is its bytes over its holders (the rank's ZeRO shard); a layer no other replica holds is whole.
  double SegmentShardBytes(const Segment& seg, uint32_t tp, bool holds_embedding) const;

  // training.activation_offload_layers: after a forward pass over [a, b) the activations of its blocks among the
  // stage's first N go to host memory, before the backward they come back: one host copy behind the pass's
  // compute (hide_share 1, category the pass's), of those blocks' kept activations for the pass's sequences.
  void AddActivationOffload(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t a, uint32_t b,
                            double batch, uint32_t local_seq, bool forward, uint16_t mb);
  void AddHostCopy(std::vector<Op>& ops, double bytes, bool to_host, Category cat, uint16_t mb, uint32_t a,
                   uint32_t b, uint32_t sync_group = kNone);

  // A DP all-reduce with the plan's algorithm; hierarchical expands into reduce-scatter inside each node,
  // all-reduce across nodes among same-local-index peers, all-gather inside each node (needs the same
  // number of members on every node; otherwise it falls back to a ring).
  void AddAllReduce(std::vector<Op>& ops, const std::vector<uint32_t>& members, uint32_t device, const Op& proto_op);

  double GroupBytes(const GradSyncGroup& g) const { return GroupBytes(g, g.layer_begin, g.layer_end); }
  // The bytes of the group's parameters on layers [a, b) (a piece of it).
  double GroupBytes(const GradSyncGroup& g, uint32_t a, uint32_t b) const;

  // ZeRO-3's gathers of the rank's layers before a pass, where its units are not lowered (zero_units_ off:
  // CPU offload, TP). With the parameters offloaded each shard comes from host memory first, and the layers
  // no other replica holds are copied whole.
  void AddZeroGathers(std::vector<Op>& ops, uint32_t device, uint16_t mb);

  // ZeRO-3 by units (zero_units_; models/lowering.h "ZeRO-3 and FSDP by units"): the all-gather of layer
  // l's parameters (`gather`) or the reduce-scatter of its gradients in each of the device's sync groups
  // that hold l. `hide_share` > 0: behind the compute operation before it (prefetched gathers, the previous
  // unit's reduce-scatter). A hidden call of a fused pass goes into `fused` (per sync group: bytes, calls)
  // instead, emitted after the pass as one call per group.
  struct FusedUnits {
    std::map<uint32_t, std::pair<double, uint32_t>> gathers, reduces;
  };
  void AddZeroUnit(std::vector<Op>& ops, uint32_t device, uint32_t l, bool gather, bool hidden, uint16_t mb,
                   FusedUnits* fused);
  // A fused pass's hidden unit calls, sharing `share` of the pass's compute between them.
  void EmitFusedUnits(std::vector<Op>& ops, uint32_t device, const FusedUnits& fused, float share, uint16_t mb,
                      uint32_t a, uint32_t b);
  // One unit call of sync group `g` on the main stream (AddZeroUnit, EmitFusedUnits).
  Op& AddUnitCall(std::vector<Op>& ops, uint32_t device, uint32_t g, double bytes, bool gather, uint16_t mb);

  const proto::Plan& plan_;
  const PlanContext& ctx_;
  const LoweringOptions& options_;
  const TransformerModel& model_;
  const proto::Training& tr_;
  const bool full_recompute_;
  bool zero_units_ = false;  // ZeRO-3 lowered by units (Lower() decides; Lowering::zero_units)
  Lowering out_;
  std::vector<std::vector<uint32_t>> device_groups_;
  std::vector<std::vector<Segment>> segments_;  // per device (MakeSegments)
  std::vector<uint32_t> node_ranks_;            // per node: the plan's ranks on it
  std::map<std::vector<uint32_t>, uint32_t> group_ids_, dp_group_ids_;
  size_t last_rank_ops_ = 0;      // operations of the rank lowered last
  size_t last_skeleton_ops_ = 0;  // and of the skeleton lowered last
};

}  // namespace hetsim::models
