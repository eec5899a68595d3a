#include "models/lowering.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "models/cost.h"

namespace hetsim::models {

const char* CategoryName(Category c) {
  switch (c) {
    case Category::kForward: return "forward";
    case Category::kBackward: return "backward";
    case Category::kOptimizer: return "optimizer";
    case Category::kTp: return "tp";
    case Category::kPp: return "pp";
    case Category::kDp: return "dp";
    case Category::kZero: return "zero";
    case Category::kCp: return "cp";
    case Category::kIdle: return "idle";
  }
  return "?";
}

const char* CollectiveName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
  }
  return "?";
}

std::vector<TpCollective> LayerTpCollectives(const TransformerModel& model, uint32_t layer, bool forward, double batch,
                                             uint32_t seq_len, proto::DType dtype) {
  const double activations = DTypeBytes(dtype) * batch * seq_len * model.spec().hidden_size();
  switch (model.kind(layer)) {
    case LayerKind::kEmbedding:
      // Vocabulary-parallel lookup: partial embeddings summed; the input gradient is the token ids' (none).
      if (forward) return {{activations, ReduceOp::kSum}};
      return {};
    case LayerKind::kTransformer:
      // After the row-parallel attention output and MLP down projections (forward), after the
      // column-parallel QKV and MLP up projections' input gradients (backward).
      return {{activations, ReduceOp::kSum}, {activations, ReduceOp::kSum}};
    case LayerKind::kHead: {
      // Vocabulary-parallel cross-entropy: the row maxima (one fp32 per token), then the softmax
      // denominators and the target logits (two fp32 per token); backward: the input gradient of the
      // column-parallel output projection.
      const double tokens = batch * seq_len;
      if (forward) return {{4.0 * tokens, ReduceOp::kMax}, {8.0 * tokens, ReduceOp::kSum}};
      return {{activations, ReduceOp::kSum}};
    }
  }
  return {};
}

double RingKvBlockBytes(const TransformerModel& model, double batch, uint32_t seq_len, uint32_t tp, uint32_t cp,
                        proto::DType dtype) {
  const double kv_heads = std::max(1.0, static_cast<double>(model.kv_heads()) / tp);
  return 2.0 * batch * (static_cast<double>(seq_len) / cp) * kv_heads * model.head_dim() * DTypeBytes(dtype);
}

std::vector<double> UlyssesAllToAllBytes(const TransformerModel& model, bool forward, double batch, uint32_t seq_len,
                                         uint32_t tp, uint32_t ulysses, proto::DType dtype) {
  // DeepSpeed-Ulysses §3.1: q, k, v go from [s/u, heads] to [s, heads/u] before attention and the
  // output comes back after it; the backward moves the gradients the opposite way.
  const double tokens = batch * static_cast<double>(seq_len) / ulysses;
  const double e = DTypeBytes(dtype), d = model.head_dim();
  const double q = tokens * model.spec().num_attention_heads() / tp * d * e;
  const double kv = tokens * std::max(1.0, static_cast<double>(model.kv_heads()) / tp) * d * e;
  if (forward) return {q, kv, kv, q};
  return {q, q, kv, kv};
}

namespace {

class Lowerer {
 public:
  Lowerer(const proto::Plan& plan, const PlanContext& ctx, const LoweringOptions& options)
      : plan_(plan), ctx_(ctx), options_(options), model_(ctx.model), tr_(ctx.training),
        full_recompute_(EffectiveRecompute(plan, ctx.training) == proto::RECOMPUTE_FULL) {}

  Result<Lowering> Lower() {
    HETSIM_RETURN_IF_ERROR(CheckSupported());
    out_.cpu_staged = plan_.comm().cpu_staged();
    out_.comm = plan_.comm();
    out_.tp_overlap = plan_.comm().tp_overlap();
    out_.separate_recompute = full_recompute_ && !options_.fuse_passes;
    out_.device_slot.assign(ctx_.cluster.num_devices(), kNone);
    for (int p = 0; p < plan_.pipelines_size(); ++p) {
      const auto& pipe = plan_.pipelines(p);
      for (int s = 0; s < pipe.stages_size(); ++s) {
        const auto& st = pipe.stages(s);
        const uint32_t t = TpDegree(st), width = ReplicaWidth(st);
        for (int i = 0; i < st.devices_size(); ++i) {
          const uint32_t d = st.devices(i);
          out_.device_slot[d] = static_cast<uint32_t>(out_.devices.size());
          out_.devices.push_back(d);
          RankOps r;
          r.device = d;
          r.pipeline = static_cast<uint32_t>(p);
          r.stage = static_cast<uint32_t>(s);
          r.replica = static_cast<uint32_t>(i) / width;
          r.tp_rank = static_cast<uint32_t>(i) % t;
          r.tp = t;
          r.shard_rank = (static_cast<uint32_t>(i) % width) / t;
          r.shard = StageSharding(st);
          r.layer_begin = st.layer_begin();
          r.layer_end = st.layer_end();
          r.num_stages = static_cast<uint32_t>(pipe.stages_size());
          r.num_micro_batches = pipe.num_micro_batches();
          out_.ranks.push_back(std::move(r));
        }
      }
    }
    out_.sync_groups = DeriveGradSyncGroups(plan_, model_);
    // Backward order: later layers first, then by chunk.
    std::stable_sort(out_.sync_groups.begin(), out_.sync_groups.end(), [](const auto& a, const auto& b) {
      return a.layer_begin != b.layer_begin ? a.layer_begin > b.layer_begin : a.chunk < b.chunk;
    });
    device_groups_.assign(ctx_.cluster.num_devices(), {});
    for (uint32_t g = 0; g < out_.sync_groups.size(); ++g) {
      for (uint32_t d : out_.sync_groups[g].devices) device_groups_[d].push_back(g);
    }
    MakeSegments();
    node_ranks_.assign(ctx_.cluster.nodes().size(), 0);
    for (uint32_t d : out_.devices) ++node_ranks_[ctx_.cluster.device(d).node];
    for (int p = 0; p < plan_.pipelines_size(); ++p) {
      const auto& pipe = plan_.pipelines(p);
      for (int s = 0; s < pipe.stages_size(); ++s) {
        const auto& st = pipe.stages(s);
        for (uint32_t r = 0; r < DpDegree(st); ++r) {
          for (uint32_t j = 0; j < StageSharding(st).ways(); ++j) {
            for (uint32_t k = 0; k < TpDegree(st); ++k) {
              const uint32_t d = StageDevice(st, r, j, k);
              if (options_.lower_devices.empty() || (d < options_.lower_devices.size() && options_.lower_devices[d])) {
                EmitRank(p, s, r, j, k, false);
              } else {
                out_.partial = true;
              }
              if (options_.skeletons) EmitRank(p, s, r, j, k, true);
            }
          }
        }
      }
    }
    return std::move(out_);
  }

 private:
  Status CheckSupported() const {
    if (EffectiveSchedule(plan_) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B && plan_.zero_stage() >= 3) {
      return Status::Invalid("plan: zero_stage: interleaved_1f1b runs with ZeRO 0-2; use zero_stage: 2 "
                             "or the 1f1b schedule for ZeRO-3");
    }
    if (EffectiveSchedule(plan_) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B && OffloadsOptimizer(plan_)) {
      return Status::Invalid("plan: offload: CPU offload is lowered for the 1f1b and gpipe schedules; use one of "
                             "them or offload: none");
    }
    if (plan_.zero_stage() >= 3) {
      for (const auto& pipe : plan_.pipelines()) {
        if (pipe.num_micro_batches() != plan_.pipelines(0).num_micro_batches()) {
          return Status::Invalid("plan: zero_stage: ZeRO-3 gathers weights every micro-batch across pipelines, so "
                                 "every pipeline needs the same num_micro_batches");
        }
      }
    }
    return Status::Ok();
  }

  struct Segment {
    uint32_t layer_begin = 0, layer_end = 0;
    uint32_t group = kNone;  // index into out_.sync_groups; kNone: layers no other replica holds (offload)
  };
  // The pieces of each rank's parameters that its gradient sync and CPU offload handle, in backward order
  // (later layers first, then by chunk): the sync groups it belongs to and, under CPU offload, each layer
  // of the rank that no other replica holds (copied to and from host memory one layer at a time).
  void MakeSegments() {
    segments_.assign(ctx_.cluster.num_devices(), {});
    const bool offload = OffloadsOptimizer(plan_);
    for (const auto& r : out_.ranks) {
      auto& segs = segments_[r.device];
      for (uint32_t g : device_groups_[r.device]) {
        segs.push_back({out_.sync_groups[g].layer_begin, out_.sync_groups[g].layer_end, g});
      }
      if (!offload) continue;
      for (uint32_t l = r.layer_begin; l < r.layer_end; ++l) {
        bool covered = false;
        for (uint32_t g : device_groups_[r.device]) {
          covered |= out_.sync_groups[g].layer_begin <= l && l < out_.sync_groups[g].layer_end;
        }
        if (!covered) segs.push_back({l, l + 1, kNone});
      }
      std::stable_sort(segs.begin(), segs.end(),
                       [](const Segment& a, const Segment& b) { return a.layer_begin > b.layer_begin; });
    }
  }

  // Bytes of a segment's parameters (or gradients) on rank `device` of TP degree `tp`: a sync group's
  // share is its bytes over its holders (the rank's ZeRO shard); a layer no other replica holds is whole.
  double SegmentShardBytes(const Segment& seg, uint32_t tp, bool holds_embedding) const {
    if (seg.group != kNone) {
      const auto& sg = out_.sync_groups[seg.group];
      return GroupBytes(sg) / static_cast<double>(sg.devices.size());
    }
    double params = 0;
    for (uint32_t l = seg.layer_begin; l < seg.layer_end; ++l) params += model_.ParamsPerRank(l, tp, !holds_embedding);
    return params * DTypeBytes(tr_.dtype());
  }

  void AddHostCopy(std::vector<Op>& ops, double bytes, bool to_host, Category cat, uint16_t mb, uint32_t a,
                   uint32_t b, uint32_t sync_group = kNone) {
    if (bytes <= 0) return;
    Op op;
    op.kind = OpKind::kHostCopy;
    op.category = cat;
    op.to_host = to_host;
    op.bytes = bytes;
    op.micro_batch = mb;
    op.layer_begin = a;
    op.layer_end = b;
    op.sync_group = sync_group;
    ops.push_back(op);
  }

  // One id per member list and stream: with comm.dp_overlap the gradient sync runs on each rank's second
  // stream beside its passes, so its collectives get ids of their own even where their members are those of
  // a pass's collective (ZeRO-3's gathers, a Ulysses group): consumers match a group's calls in order, and
  // two streams' calls on one id would match by timing.
  uint32_t GroupId(std::vector<uint32_t> members, bool dp_stream = false) {
    auto& ids = dp_stream ? dp_group_ids_ : group_ids_;
    auto [it, inserted] = ids.emplace(members, static_cast<uint32_t>(out_.groups.size()));
    if (inserted) out_.groups.push_back(std::move(members));
    return it->second;
  }

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
                    CollectiveKind kind, Category cat, uint16_t mb, Algorithm algo = Algorithm::kRing) {
    Op op;
    op.kind = OpKind::kCollective;
    op.category = cat;
    op.collective = kind;
    op.algorithm = algo;
    op.group = GroupId(members, cat == Category::kDp && plan_.comm().dp_overlap());
    op.rank = RankIn(members, device);
    op.bytes = bytes;
    op.micro_batch = mb;
    ops.push_back(op);
    return ops.back();
  }

  // The plan's algorithm for TP all-reduces (validation keeps nvls to TP groups inside NVSwitch nodes).
  Algorithm TpAlgorithm() const {
    return plan_.comm().tp_algorithm() == proto::CommOptions::ALGORITHM_NVLS ? Algorithm::kNvls : Algorithm::kRing;
  }

  // A DP all-reduce with the plan's algorithm; hierarchical expands into reduce-scatter inside each node,
  // all-reduce across nodes among same-local-index peers, all-gather inside each node (needs the same
  // number of members on every node; otherwise it falls back to a ring).
  void AddAllReduce(std::vector<Op>& ops, const std::vector<uint32_t>& members, uint32_t device, const Op& proto_op) {
    const auto add = [&](const std::vector<uint32_t>& m, double bytes, CollectiveKind kind, Algorithm algo) {
      if (m.size() < 2) return;
      Op& op = AddCollective(ops, m, device, bytes, kind, proto_op.category, 0, algo);
      op.sync_group = proto_op.sync_group;
      op.bucket = proto_op.bucket;
      op.num_buckets = proto_op.num_buckets;
      op.layer_begin = proto_op.layer_begin;
      op.layer_end = proto_op.layer_end;
    };
    const double bytes = proto_op.bytes;
    const auto algo = plan_.comm().dp_algorithm();
    if (algo == proto::CommOptions::ALGORITHM_TREE) {
      add(members, bytes, CollectiveKind::kAllReduce, Algorithm::kTree);
      return;
    }
    if (algo == proto::CommOptions::ALGORITHM_HIERARCHICAL) {
      std::map<uint32_t, std::vector<uint32_t>> by_node;
      for (uint32_t d : members) by_node[ctx_.cluster.device(d).node].push_back(d);
      const size_t c = by_node.begin()->second.size();
      bool uniform = by_node.size() > 1 && c > 1;
      for (const auto& [node, ds] : by_node) uniform &= ds.size() == c;
      if (uniform) {
        const auto& local = by_node[ctx_.cluster.device(device).node];
        const size_t idx = RankIn(local, device);
        std::vector<uint32_t> cross;
        for (const auto& [node, ds] : by_node) cross.push_back(ds[idx]);
        add(local, bytes, CollectiveKind::kReduceScatter, Algorithm::kRing);
        add(cross, bytes / static_cast<double>(c), CollectiveKind::kAllReduce, Algorithm::kRing);
        add(local, bytes, CollectiveKind::kAllGather, Algorithm::kRing);
        return;
      }
    }
    add(members, bytes, CollectiveKind::kAllReduce, Algorithm::kRing);
  }

  void AddCompute(std::vector<Op>& ops, uint32_t layer, double flops, Category cat, uint16_t mb,
                  std::pair<uint32_t, uint32_t> seqs, bool recompute) {
    if (options_.fuse_passes && !ops.empty() && ops.back().kind == OpKind::kCompute && ops.back().category == cat &&
        ops.back().micro_batch == mb && ops.back().layer_begin <= layer + 1 && layer <= ops.back().layer_end) {
      // Consecutive layers of one pass (forward: ascending, backward: descending, with recomputation)
      // are one operation.
      ops.back().layer_begin = std::min(ops.back().layer_begin, layer);
      ops.back().layer_end = std::max(ops.back().layer_end, layer + 1);
      ops.back().flops += flops;
      return;
    }
    Op op;
    op.kind = OpKind::kCompute;
    op.category = cat;
    op.micro_batch = mb;
    op.layer_begin = layer;
    op.layer_end = layer + 1;
    op.seq_begin = seqs.first;
    op.seq_end = seqs.second;
    op.flops = flops;
    op.recompute = recompute && !options_.fuse_passes;
    ops.push_back(op);
  }

  // One layer's TP collectives in one direction (or their bytes into the pass's fused all-reduce).
  void AddLayerTp(std::vector<Op>& ops, uint32_t device, const std::vector<uint32_t>& tp_group, uint32_t layer,
                  double batch, uint32_t local_seq, bool forward, uint16_t mb, double* fused_bytes,
                  uint32_t* fused_calls) {
    if (tp_group.size() < 2) return;
    if (options_.tp_in_compute && options_.tp_in_compute(device, layer, static_cast<uint32_t>(tp_group.size()), batch)) {
      return;
    }
    for (const auto& c : LayerTpCollectives(model_, layer, forward, batch, local_seq, tr_.dtype())) {
      if (options_.fuse_passes) {
        *fused_bytes += c.bytes;
        ++*fused_calls;
        continue;
      }
      Op& op = AddCollective(ops, tp_group, device, c.bytes, CollectiveKind::kAllReduce, Category::kTp, mb, TpAlgorithm());
      op.reduce = c.reduce;
      op.in_pass = true;
      op.layer_begin = layer;
      op.layer_end = layer + 1;
    }
  }

  // Ring-attention point-to-point operations of one pass of one block (or of a fused pass). Before the
  // compute (`sending`): `steps` sends of `bytes` each to the next CP rank and as many receives posted
  // from the previous one, so the transfers run during the compute; after it: the receives completed.
  void AddRing(std::vector<Op>& ops, const std::vector<uint32_t>& ring, uint32_t device, bool before, uint32_t steps,
               double bytes, uint16_t mb, uint32_t a, uint32_t b, double batch) {
    const uint32_t n = static_cast<uint32_t>(ring.size()), c = RankIn(ring, device);
    const auto add = [&](OpKind kind) {
      for (uint32_t i = 0; i < steps; ++i) {
        Op op;
        op.kind = kind;
        op.category = Category::kCp;
        op.channel = kChanCp;
        op.peer = kind == OpKind::kSend ? ring[(c + 1) % n] : ring[(c + n - 1) % n];
        op.micro_batch = mb;
        op.layer_begin = a;
        op.layer_end = b;
        op.seq_end = static_cast<uint32_t>(batch);
        op.bytes = bytes;
        ops.push_back(op);
      }
    };
    if (before) {
      add(OpKind::kSend);
      add(OpKind::kPostRecv);
    } else {
      add(OpKind::kRecv);
    }
  }

  // Compute of layers [a, b) in one direction (backward: b − 1 down to a), with the TP collectives, the
  // CP ring exchanges and the Ulysses all-to-alls (see the header comment).
  void AddLayers(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t r, uint32_t a, uint32_t b,
                 std::pair<uint32_t, uint32_t> seqs, bool forward, uint16_t mb) {
    const RankOps& me = out_.ranks[out_.device_slot[device]];
    const uint32_t t = TpDegree(st);
    const SequenceSharding sh = StageSharding(st);
    const double ways = sh.ways();
    const uint32_t local_seq = tr_.seq_len() / sh.ways();
    const double batch = seqs.second - seqs.first;
    const Category cat = forward ? Category::kForward : Category::kBackward;
    const auto tp_group = TpGroup(st, r, me.shard_rank);
    const auto ring = CpGroup(st, r, me.shard_rank, me.tp_rank);
    const auto uly_group = UlyssesGroup(st, r, me.shard_rank, me.tp_rank);
    const uint32_t L = model_.num_layers();
    const bool fuse = options_.fuse_passes;
    // One K/V block per ring step in a forward (or recomputed forward), K/V and dK/dV in a backward.
    const uint32_t steps = sh.cp - 1;
    const double kv_block = sh.cp > 1 ? RingKvBlockBytes(model_, batch, tr_.seq_len(), t, sh.cp, tr_.dtype()) : 0;
    const auto is_block = [&](uint32_t l) { return model_.kind(l) == LayerKind::kTransformer; };
    const auto ring_bytes = [&](bool fwd_pass) { return fwd_pass ? kv_block : 2 * kv_block; };
    double fused_ring = 0;
    if (fuse && steps > 0) {
      // The pass's ring traffic as one send before it and one receive after it (per ring step).
      for (uint32_t l = a; l < b; ++l) {
        if (!is_block(l)) continue;
        fused_ring += ring_bytes(forward);
        if (!forward && full_recompute_) fused_ring += ring_bytes(true);
      }
      if (fused_ring > 0) AddRing(ops, ring, device, true, steps, fused_ring, mb, a, b, batch);
    }
    double fused_bytes = 0, fused_a2a = 0;
    uint32_t fused_calls = 0, fused_a2a_calls = 0;
    // One block pass (forward, recomputed forward or backward): ring sends, compute, ring receives, TP
    // collectives, Ulysses all-to-alls.
    const auto pass = [&](uint32_t l, bool fwd_pass, bool recompute) {
      const bool ring_here = !fuse && steps > 0 && is_block(l);
      if (ring_here) AddRing(ops, ring, device, true, steps, ring_bytes(fwd_pass), mb, l, l + 1, batch);
      const double flops = (fwd_pass ? model_.ForwardFlops(l, batch, tr_.seq_len())
                                     : model_.BackwardFlops(l, batch, tr_.seq_len())) /
                           (t * ways);
      AddCompute(ops, l, flops, cat, mb, seqs, recompute);
      if (ring_here) AddRing(ops, ring, device, false, steps, ring_bytes(fwd_pass), mb, l, l + 1, batch);
      AddLayerTp(ops, device, tp_group, l, batch, local_seq, fwd_pass, mb, &fused_bytes, &fused_calls);
      if (sh.ulysses > 1 && is_block(l)) {
        for (double bytes : UlyssesAllToAllBytes(model_, fwd_pass, batch, tr_.seq_len(), t, sh.ulysses, tr_.dtype())) {
          if (fuse) {
            fused_a2a += bytes;
            ++fused_a2a_calls;
            continue;
          }
          Op& op = AddCollective(ops, uly_group, device, bytes, CollectiveKind::kAllToAll, Category::kCp, mb);
          op.in_pass = true;
          op.layer_begin = l;
          op.layer_end = l + 1;
        }
      }
    };
    for (uint32_t i = 0; i < b - a; ++i) {
      const uint32_t l = forward ? a + i : b - 1 - i;
      if (forward) {
        pass(l, true, false);
        continue;
      }
      // Megatron-LM's full recomputation re-runs each transformer block's forward right before its backward.
      if (full_recompute_ && l > 0 && l + 1 < L) pass(l, true, true);
      pass(l, false, false);
    }
    if (fused_ring > 0) AddRing(ops, ring, device, false, steps, fused_ring, mb, a, b, batch);
    if (fused_bytes > 0) {
      Op& op = AddCollective(ops, tp_group, device, fused_bytes, CollectiveKind::kAllReduce, Category::kTp, mb,
                             TpAlgorithm());
      op.in_pass = true;
      op.calls = fused_calls;
      op.layer_begin = a;
      op.layer_end = b;
    }
    if (fused_a2a > 0) {
      Op& op = AddCollective(ops, uly_group, device, fused_a2a, CollectiveKind::kAllToAll, Category::kCp, mb);
      op.in_pass = true;
      op.calls = fused_a2a_calls;
      op.layer_begin = a;
      op.layer_end = b;
    }
  }

  // Point-to-point transfers of micro-batch `mb` between stage `from` and stage `to` of pipeline p
  // (forward: to = from + 1; backward: to = from − 1), as seen by `device` at (stage, r, k).
  void AddPp(std::vector<Op>& ops, int p, int from, int to, uint32_t device, bool sending, uint32_t r, uint32_t k,
             bool forward, uint16_t mb) {
    const auto& pipe = plan_.pipelines(p);
    const auto& sst = pipe.stages(from);
    const auto& rst = pipe.stages(to);
    const uint32_t ts = TpDegree(sst), trv = TpDegree(rst);
    const auto srange = Ranges(sst, pipe.micro_batch_size());
    const auto rrange = Ranges(rst, pipe.micro_batch_size());
    // CP and Ulysses: sequence shard j of one stage hands its seq_len / ways tokens to shard j of the next
    // (every stage of a pipeline shards alike).
    const uint32_t j = out_.ranks[out_.device_slot[device]].shard_rank;
    const double per_seq =
        PipelineBoundaryBytes(model_, 1, tr_.seq_len(), tr_.dtype()) / StageSharding(rst).ways();
    const bool leader = plan_.comm().pp_leader_broadcast();
    // Scatter-gather: each TP rank moves 1/t of the tensor to its peer rank, then the receivers all-gather.
    // Under sequence parallelism the boundary tensor is sequence-sharded anyway (Megatron-LM sends
    // [s/t, b, h] per rank): 1/t each, nothing to gather.
    const bool same_tp = !leader && ts == trv && ts > 1;
    const bool sharded = same_tp && plan_.sequence_parallel();
    const bool scatter = same_tp && (sharded || plan_.comm().pp_scatter_gather());
    const uint8_t chan = forward ? kChanPpForward : kChanPpBackward;
    for (uint32_t rr = sending ? 0 : r; rr < (sending ? rrange.size() : r + 1); ++rr) {
      for (uint32_t kr = 0; kr < (leader ? 1u : trv); ++kr) {
        for (uint32_t sr = sending ? r : 0; sr < (sending ? r + 1 : srange.size()); ++sr) {
          const uint32_t lo = std::max(rrange[rr].first, srange[sr].first);
          const uint32_t hi = std::min(rrange[rr].second, srange[sr].second);
          if (lo >= hi) continue;
          const uint32_t ks = leader ? 0 : kr % ts;
          const bool mine = sending ? (sr == r && ks == k) : (rr == r && kr == k);
          if (!mine) continue;
          const uint32_t sender = StageDevice(sst, sr, j, ks);
          const uint32_t receiver = StageDevice(rst, rr, j, kr);
          const uint32_t base = sending ? srange[sr].first : rrange[rr].first;
          Op op;
          op.kind = sending ? OpKind::kSend : OpKind::kRecv;
          op.category = Category::kPp;
          op.channel = chan;
          op.peer = sending ? receiver : sender;
          op.seq_begin = lo - base;
          op.seq_end = hi - base;
          op.bytes = (hi - lo) * per_seq / (scatter ? ts : 1);
          op.micro_batch = mb;
          ops.push_back(op);
        }
      }
    }
    if (!sending && scatter && !sharded) {
      const double bytes = (rrange[r].second - rrange[r].first) * per_seq;
      AddCollective(ops, TpGroup(rst, r, j), device, bytes, CollectiveKind::kAllGather, Category::kPp, mb);
    }
    if (!sending && leader && trv > 1) {
      const double bytes = (rrange[r].second - rrange[r].first) * per_seq;
      AddCollective(ops, TpGroup(rst, r, j), device, bytes, CollectiveKind::kBroadcast, Category::kPp, mb);
    }
  }

  double GroupBytes(const GradSyncGroup& g) const {
    double params = 0;
    for (uint32_t l = g.layer_begin; l < g.layer_end; ++l) params += model_.ParamsPerRank(l, g.num_chunks, g.layer_begin != 0);
    return params * DTypeBytes(tr_.dtype());
  }

  // ZeRO-3's gathers of the rank's layers before a pass. With the parameters offloaded each shard comes
  // from host memory first, and the layers no other replica holds are copied whole.
  void AddZeroGathers(std::vector<Op>& ops, uint32_t device, uint16_t mb) {
    if (plan_.zero_stage() < 3) return;
    const RankOps& me = out_.ranks[out_.device_slot[device]];
    const bool params_offloaded = OffloadsParams(plan_);
    for (const Segment& seg : segments_[device]) {
      if (params_offloaded) {
        AddHostCopy(ops, SegmentShardBytes(seg, me.tp, me.layer_begin == 0), false, Category::kZero, mb,
                    seg.layer_begin, seg.layer_end, seg.group);
      }
      if (seg.group == kNone) continue;
      const uint32_t g = seg.group;
      const auto& sg = out_.sync_groups[g];
      if (sg.devices.size() < 2) continue;
      Op& op = AddCollective(ops, sg.devices, device, GroupBytes(sg), CollectiveKind::kAllGather, Category::kZero, mb);
      op.sync_group = g;
      op.layer_begin = sg.layer_begin;
      op.layer_end = sg.layer_end;
    }
  }

  void Signal(std::vector<Op>& ops) {
    Op sig;
    sig.kind = OpKind::kSignal;
    ops.push_back(sig);
  }

  // The rank's operations (or its skeleton: LoweringOptions::skeletons).
  void EmitRank(int p, int s, uint32_t r, uint32_t seq_shard, uint32_t k, bool skeleton) {
    const auto& pipe = plan_.pipelines(p);
    const auto& st = pipe.stages(s);
    const uint32_t device = StageDevice(st, r, seq_shard, k);
    RankOps& rank = out_.ranks[out_.device_slot[device]];
    std::vector<Op>& ops = skeleton ? rank.skeleton : rank.ops;
    // Ranks come stage by stage, and the ranks of a stage have (nearly) as many operations: room for the
    // previous rank's count saves growing the vector (and its page faults) a dozen times over.
    if (!skeleton) ops.reserve(last_rank_ops_);
    const int S = pipe.stages_size();
    const uint32_t m = pipe.num_micro_batches();
    const auto seqs = Ranges(st, pipe.micro_batch_size())[r];
    const auto& segments = segments_[device];
    const bool overlap = plan_.comm().dp_overlap() && !segments.empty();
    const bool offload = OffloadsOptimizer(plan_);

    auto forward = [&](uint16_t j) {
      if (s > 0) AddPp(ops, p, s - 1, s, device, false, r, k, true, j);
      AddZeroGathers(ops, device, j);
      AddLayers(ops, device, st, r, st.layer_begin(), st.layer_end(), seqs, true, j);
      if (s + 1 < S) AddPp(ops, p, s, s + 1, device, true, r, k, true, j);
    };
    auto backward = [&](uint16_t j) {
      if (s + 1 < S) AddPp(ops, p, s + 1, s, device, false, r, k, false, j);
      AddZeroGathers(ops, device, j);
      if (overlap && j + 1u == m) {
        // The last backward runs segment by segment (later layers first) and hands each finished
        // segment's gradient groups (and, under CPU offload, its layers no other replica holds) to the DP
        // stream.
        std::vector<uint32_t> cuts = {st.layer_end()};
        for (const Segment& seg : segments) cuts.push_back(seg.layer_begin);
        std::sort(cuts.rbegin(), cuts.rend());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        for (size_t i = 0; i + 1 < cuts.size(); ++i) {
          AddLayers(ops, device, st, r, cuts[i + 1], cuts[i], seqs, false, j);
          for (const Segment& seg : segments) {
            if (seg.layer_begin == cuts[i + 1]) Signal(ops);
          }
        }
      } else {
        AddLayers(ops, device, st, r, st.layer_begin(), st.layer_end(), seqs, false, j);
      }
      if (s > 0) AddPp(ops, p, s, s - 1, device, true, r, k, false, j);
    };

    const auto schedule = EffectiveSchedule(plan_);
    if (skeleton && schedule != proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
      // One pass of each kind (LoweringOptions::skeletons).
      forward(0);
      backward(0);
      if (m > 1) backward(static_cast<uint16_t>(m - 1));
    } else if (schedule == proto::Plan::SCHEDULE_GPIPE) {
      for (uint32_t j = 0; j < m; ++j) forward(static_cast<uint16_t>(j));
      for (uint32_t j = 0; j < m; ++j) backward(static_cast<uint16_t>(j));
    } else if (schedule == proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
      EmitInterleaved(p, s, r, k, device, seqs, ops, skeleton);
    } else {
      const uint32_t warmup = std::min<uint32_t>(static_cast<uint32_t>(S - s - 1), m);
      uint32_t f = 0, b = 0;
      for (; f < warmup; ++f) forward(static_cast<uint16_t>(f));
      while (f < m) {
        forward(static_cast<uint16_t>(f++));
        backward(static_cast<uint16_t>(b++));
      }
      while (b < m) backward(static_cast<uint16_t>(b++));
    }
    Op wait;
    wait.kind = OpKind::kWaitSends;
    ops.push_back(wait);

    // Gradient synchronisation (ZeRO ≥ 1 reduce-scatters instead of all-reducing); under CPU offload each
    // bucket's shard then goes to host memory.
    std::vector<Op>& dp_ops = overlap && !skeleton ? rank.dp_stream : ops;
    const bool holds_embedding = st.layer_begin() == 0;
    for (const Segment& seg : segments) {
      if (overlap) {
        Op aw;
        aw.kind = OpKind::kAwait;
        dp_ops.push_back(aw);
      }
      if (seg.group == kNone) {
        // A layer only this rank holds (offload): its whole gradient goes to host memory.
        AddHostCopy(dp_ops, SegmentShardBytes(seg, TpDegree(st), holds_embedding), true, Category::kDp, 0,
                    seg.layer_begin, seg.layer_end);
        continue;
      }
      const uint32_t g = seg.group;
      const auto& sg = out_.sync_groups[g];
      if (sg.devices.size() < 2) continue;
      const double bytes = GroupBytes(sg);
      // Buckets of at most dp_bucket_mib each (all the same size), one collective per bucket.
      const double bucket = plan_.comm().dp_bucket_mib() * 1024 * 1024;
      const int buckets = bucket > 0 ? std::max(1, static_cast<int>(std::ceil(bytes / bucket))) : 1;
      for (int i = 0; i < buckets; ++i) {
        Op op;
        op.category = Category::kDp;
        op.sync_group = g;
        op.bucket = static_cast<uint16_t>(i);
        op.num_buckets = static_cast<uint16_t>(buckets);
        op.layer_begin = sg.layer_begin;
        op.layer_end = sg.layer_end;
        op.bytes = bytes / buckets;
        if (plan_.zero_stage() >= 1) {
          Op& rs = AddCollective(dp_ops, sg.devices, device, op.bytes, CollectiveKind::kReduceScatter, Category::kDp, 0);
          rs.sync_group = g;
          rs.bucket = op.bucket;
          rs.num_buckets = op.num_buckets;
          rs.layer_begin = sg.layer_begin;
          rs.layer_end = sg.layer_end;
          if (offload) {
            AddHostCopy(dp_ops, op.bytes / static_cast<double>(sg.devices.size()), true, Category::kDp, 0,
                        sg.layer_begin, sg.layer_end, g);
            dp_ops.back().bucket = op.bucket;
            dp_ops.back().num_buckets = op.num_buckets;
          }
        } else {
          AddAllReduce(dp_ops, sg.devices, device, op);
        }
      }
    }
    if (overlap) {
      Op join;
      join.kind = OpKind::kJoin;
      ops.push_back(join);
    }
    // Optimizer step over the parameters this device updates (its ZeRO shard).
    double params = 0;
    for (uint32_t l = st.layer_begin(); l < st.layer_end(); ++l) {
      params += model_.ParamsPerRank(l, TpDegree(st), st.layer_begin() != 0);
    }
    double shard = 1;
    if (plan_.zero_stage() >= 1 && !device_groups_[device].empty()) {
      shard = static_cast<double>(out_.sync_groups[device_groups_[device].front()].devices.size());
    }
    Op opt;
    opt.kind = OpKind::kCompute;
    opt.category = Category::kOptimizer;
    opt.layer_begin = st.layer_begin();
    opt.layer_end = st.layer_end();
    opt.params = params / shard;
    // CPU offload: the step runs on the node's CPU, whose cores the plan's ranks there share.
    if (offload) opt.host_ranks = node_ranks_[ctx_.cluster.device(device).node];
    ops.push_back(opt);
    if (offload && !OffloadsParams(plan_)) {
      // The updated fp16 shard back to the GPU (ZeRO-Offload §4.1), before the all-gathers.
      double bytes = 0;
      for (const Segment& seg : segments) bytes += SegmentShardBytes(seg, TpDegree(st), holds_embedding);
      AddHostCopy(ops, bytes, false, Category::kZero, 0, st.layer_begin(), st.layer_end());
    }
    if (plan_.zero_stage() >= 1) {
      for (uint32_t g : device_groups_[device]) {
        const auto& sg = out_.sync_groups[g];
        if (sg.devices.size() < 2) continue;
        // With the parameters offloaded the updated shard is in host memory: copied up before its gather.
        if (OffloadsParams(plan_)) {
          AddHostCopy(ops, GroupBytes(sg) / static_cast<double>(sg.devices.size()), false, Category::kZero, 0,
                      sg.layer_begin, sg.layer_end, g);
        }
        Op& op = AddCollective(ops, sg.devices, device, GroupBytes(sg), CollectiveKind::kAllGather, Category::kZero, 0);
        op.sync_group = g;
        op.layer_begin = sg.layer_begin;
        op.layer_end = sg.layer_end;
      }
    }
    if (!skeleton) last_rank_ops_ = ops.size();
  }

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
                       std::vector<Op>& ops, bool skeleton) {
    const auto& pipe = plan_.pipelines(p);
    const auto& st = pipe.stages(s);
    const uint32_t S = static_cast<uint32_t>(pipe.stages_size());
    const uint32_t m = pipe.num_micro_batches();
    const uint32_t v = std::max<uint32_t>(1, plan_.virtual_stages());
    const uint32_t L = model_.num_layers();
    // Chunk boundaries over the stage's blocks [first, last).
    const uint32_t first = std::max<uint32_t>(st.layer_begin(), 1), last = std::min<uint32_t>(st.layer_end(), L - 1);
    const uint32_t blocks = last > first ? last - first : 0;
    std::vector<uint32_t> cut(v + 1);
    for (uint32_t c = 0; c <= v; ++c) cut[c] = first + c * (blocks / v) + std::min(c, blocks % v);
    cut[0] = st.layer_begin();
    cut[v] = st.layer_end();
    const bool overlap = plan_.comm().dp_overlap() && !device_groups_[device].empty();
    // The lowest chunk each of the device's gradient groups touches.
    std::vector<uint32_t> done_chunk;
    for (uint32_t g : device_groups_[device]) {
      uint32_t c = 0;
      while (c + 1 < v && cut[c + 1] <= out_.sync_groups[g].layer_begin) ++c;
      done_chunk.push_back(c);
    }
    const int prev = s > 0 ? s - 1 : static_cast<int>(S) - 1, next = s + 1 < static_cast<int>(S) ? s + 1 : 0;
    auto forward = [&](uint32_t c, uint16_t j) {
      if (s > 0 || (c > 0 && S > 1)) AddPp(ops, p, prev, s, device, false, r, k, true, j);
      AddLayers(ops, device, st, r, cut[c], cut[c + 1], seqs, true, j);
      if (s + 1 < static_cast<int>(S) || (c + 1 < v && S > 1)) AddPp(ops, p, s, next, device, true, r, k, true, j);
    };
    auto backward = [&](uint32_t c, uint16_t j) {
      if (s + 1 < static_cast<int>(S) || (c + 1 < v && S > 1)) AddPp(ops, p, next, s, device, false, r, k, false, j);
      AddLayers(ops, device, st, r, cut[c], cut[c + 1], seqs, false, j);
      if (overlap && j + 1u == m) {
        for (size_t i = 0; i < done_chunk.size(); ++i) {
          if (done_chunk[i] == c) Signal(ops);
        }
      }
      if (s > 0 || (c > 0 && S > 1)) AddPp(ops, p, s, prev, device, true, r, k, false, j);
    };
    if (skeleton) {  // one pass of each kind (LoweringOptions::skeletons)
      for (uint32_t c = 0; c < v; ++c) forward(c, 0);
      for (uint32_t c = v; c-- > 0;) backward(c, 0);
      if (m > 1) {
        for (uint32_t c = v; c-- > 0;) backward(c, static_cast<uint16_t>(m - 1));
      }
      return;
    }
    const uint32_t total = m * v;
    const auto micro_batch = [&](uint32_t i) { return static_cast<uint16_t>((i / (S * v)) * S + i % S); };
    const auto chunk = [&](uint32_t i, bool fwd) {
      const uint32_t c = (i % (S * v)) / S;
      return fwd ? c : v - 1 - c;
    };
    const uint32_t warmup = std::min(total, 2 * (S - static_cast<uint32_t>(s) - 1) + (v - 1) * S);
    uint32_t f = 0, b = 0;
    for (; f < warmup; ++f) forward(chunk(f, true), micro_batch(f));
    while (f < total) {
      forward(chunk(f, true), micro_batch(f));
      ++f;
      backward(chunk(b, false), micro_batch(b));
      ++b;
    }
    for (; b < total; ++b) backward(chunk(b, false), micro_batch(b));
  }

  const proto::Plan& plan_;
  const PlanContext& ctx_;
  const LoweringOptions& options_;
  const TransformerModel& model_;
  const proto::Training& tr_;
  const bool full_recompute_;
  Lowering out_;
  std::vector<std::vector<uint32_t>> device_groups_;
  std::vector<std::vector<Segment>> segments_;  // per device (MakeSegments)
  std::vector<uint32_t> node_ranks_;            // per node: the plan's ranks on it
  std::map<std::vector<uint32_t>, uint32_t> group_ids_, dp_group_ids_;
  size_t last_rank_ops_ = 0;  // operations of the rank lowered last
};

std::string Devices(const std::vector<uint32_t>& ds) {
  std::string s = "[";
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? "," : "") + std::to_string(ds[i]);
  return s + "]";
}

const char* KindName(OpKind k) {
  switch (k) {
    case OpKind::kCompute: return "compute";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kPostRecv: return "post_recv";
    case OpKind::kCollective: return "collective";
    case OpKind::kSignal: return "signal";
    case OpKind::kAwait: return "await";
    case OpKind::kJoin: return "join";
    case OpKind::kWaitSends: return "wait_sends";
    case OpKind::kHostCopy: return "host_copy";
  }
  return "?";
}

}  // namespace

Result<Lowering> LowerPlan(const proto::Plan& plan, const PlanContext& ctx, const LoweringOptions& options) {
  return Lowerer(plan, ctx, options).Lower();
}

std::string FormatOp(const Lowering& lowering, uint32_t device, const char* stream, size_t index, const Op& op) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "device %u %s %zu %s %s mb %u", device, stream, index, KindName(op.kind),
                CategoryName(op.category), op.micro_batch);
  std::string s = buf;
  switch (op.kind) {
    case OpKind::kCompute:
      std::snprintf(buf, sizeof(buf), " layers %u-%u seqs %u-%u%s flops %.6g params %.6g", op.layer_begin,
                    op.layer_end, op.seq_begin, op.seq_end, op.recompute ? " recompute" : "", op.flops, op.params);
      s += buf;
      if (op.host_ranks > 0) s += " on_host " + std::to_string(op.host_ranks);
      break;
    case OpKind::kHostCopy:
      std::snprintf(buf, sizeof(buf), " %s layers %u-%u bytes %.6g", op.to_host ? "d2h" : "h2d", op.layer_begin,
                    op.layer_end, op.bytes);
      s += buf;
      break;
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kPostRecv:
      std::snprintf(buf, sizeof(buf), " peer %u rows %u-%u bytes %.6g", op.peer, op.seq_begin, op.seq_end, op.bytes);
      s += buf;
      break;
    case OpKind::kCollective:
      std::snprintf(buf, sizeof(buf), " %s%s group ", CollectiveName(op.collective),
                    op.reduce == ReduceOp::kMax ? "(max)" : "");
      s += buf + Devices(lowering.groups.at(op.group));
      std::snprintf(buf, sizeof(buf), " layers %u-%u bytes %.6g", op.layer_begin, op.layer_end, op.bytes);
      s += buf;
      if (op.num_buckets > 1) s += " bucket " + std::to_string(op.bucket) + "/" + std::to_string(op.num_buckets);
      break;
    default:
      break;
  }
  return s;
}

std::string FormatLowering(const Lowering& lowering) {
  std::vector<uint32_t> order(lowering.devices.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return lowering.devices[a] < lowering.devices[b]; });
  std::string out;
  for (uint32_t i : order) {
    const auto& r = lowering.ranks[i];
    for (size_t k = 0; k < r.ops.size(); ++k) out += FormatOp(lowering, r.device, "main", k, r.ops[k]) + "\n";
    for (size_t k = 0; k < r.dp_stream.size(); ++k) out += FormatOp(lowering, r.device, "dp", k, r.dp_stream[k]) + "\n";
  }
  return out;
}

OpTotals TotalOps(const Lowering& lowering) {
  OpTotals t;
  for (const auto& r : lowering.ranks) {
    for (const auto* stream : {&r.ops, &r.dp_stream}) {
      for (const Op& op : *stream) {
        switch (op.kind) {
          case OpKind::kCompute:
            t.flops += op.flops;
            t.optimizer_params += op.params;
            if (op.host_ranks > 0) t.host_optimizer_params += op.params;
            break;
          case OpKind::kHostCopy: (op.to_host ? t.d2h_bytes : t.h2d_bytes) += op.bytes; break;
          case OpKind::kSend:
            t.send_bytes += op.bytes;
            if (op.category == Category::kCp) {
              t.cp_send_bytes += op.bytes;
              ++t.cp_sends;
            }
            break;
          case OpKind::kRecv: t.recv_bytes += op.bytes; break;
          case OpKind::kCollective: t.collective_bytes[static_cast<int>(op.category)] += op.bytes; break;
          default: break;
        }
      }
    }
  }
  return t;
}

}  // namespace hetsim::models
