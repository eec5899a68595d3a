// One pass of the lowering: a micro-batch's forward or backward over a rank's layers — each layer's compute
// (fused per pass when asked), its Megatron-LM TP collectives, the ring-attention K/V exchanges of context
// parallelism and the DeepSpeed-Ulysses all-to-alls — and the PP transfers between stages of different DP or
// TP degrees (models/lowering.h says what each moves).
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "models/cost.h"
#include "models/lowering_internal.h"

namespace hetsim::models {

std::vector<TpCollective> LayerTpCollectives(const TransformerModel& model, uint32_t layer, bool forward, double batch,
                                             uint32_t seq_len, proto::DType dtype, bool sequence_parallel, uint32_t tp,
                                             bool blocking) {
  const double tokens = batch * seq_len, h = model.spec().hidden_size();
  const double activations = DTypeBytes(dtype) * tokens * h;
  // Transformer Engine casts a block linear's input (and, backward, its output gradient) to FP8 before
  // gathering it.
  const double block_gather = dtype == proto::DTYPE_FP8 ? tokens * h : activations;
  const TpCollective reduce{activations, ReduceOp::kSum,
                            sequence_parallel ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce};
  const TpCollective gather{activations, ReduceOp::kSum, CollectiveKind::kAllGather};
  const TpCollective block_gathered{block_gather, ReduceOp::kSum, CollectiveKind::kAllGather};
  // A column-parallel linear's backward with `params` weights (whole layer): one GEMM (dgrad or wgrad)
  // takes 2 · tokens · params / tp FLOPs on a rank. Under SP the input's re-gather runs behind the dgrad
  // GEMM and the dgrad's reduce-scatter behind the wgrad GEMM; without SP the dgrad's all-reduce runs
  // behind the wgrad GEMM.
  const auto column_backward = [&](double params, const TpCollective& regather, std::vector<TpCollective>* out) {
    const double gemm = 2 * tokens * params / std::max(1u, tp);
    if (sequence_parallel) {
      TpCollective g = regather;
      g.hidden_flops = gemm;
      out->push_back(g);
    }
    TpCollective r = reduce;
    if (sequence_parallel || !blocking) r.hidden_flops = gemm;
    out->push_back(r);
  };
  switch (model.kind(layer)) {
    case LayerKind::kEmbedding:
      // Vocabulary-parallel lookup: partial embeddings summed; the input gradient is the token ids' (none),
      // but under SP the output's gradient arrives sequence-sharded and is gathered.
      if (forward) return {reduce};
      if (sequence_parallel) return {gather};
      return {};
    case LayerKind::kTransformer: {
      // Forward: after the row-parallel attention output and MLP down projections; under SP each preceded
      // by the all-gather of the sequence-sharded input of the column-parallel QKV and MLP up projections.
      // An MoE layer's MLP part has TP collectives only for its shared experts (a TP-split MLP); the routed
      // experts exchange their tokens through the EP group (AddExpertExchange), the router reads the
      // rank's sequence shard.
      const bool moe = model.IsMoe(layer);
      const double ffn = moe ? model.SharedExpertWidth() : model.spec().ffn_hidden_size();
      const bool mlp = ffn > 0;
      if (forward) {
        if (sequence_parallel) {
          if (!mlp) return {block_gathered, reduce};
          return {block_gathered, reduce, block_gathered, reduce};
        }
        if (!mlp) return {reduce};
        return {reduce, reduce};
      }
      // Backward, the MLP first: the down projection's output gradient gathered (SP), the up projection's
      // column-parallel backward; then the attention output's and QKV's alike.
      const double kvd = static_cast<double>(model.kv_heads()) * model.head_dim();
      const double qkv = model.spec().has_mla() ? model.AttentionMatmulParams() - model.ValueWidth() * h
                                                : h * model.QueryWidth() + 2 * h * kvd;
      const double up = (model.spec().mlp() == proto::Model::MLP_SWIGLU ? 2.0 : 1.0) * h * ffn;
      std::vector<TpCollective> out;
      if (mlp) {
        if (sequence_parallel) out.push_back(block_gathered);
        column_backward(up, block_gathered, &out);
      }
      if (sequence_parallel) out.push_back(block_gathered);
      column_backward(qkv, block_gathered, &out);
      return out;
    }
    case LayerKind::kHead: {
      // Vocabulary-parallel cross-entropy: the row maxima (one fp32 per token), then the softmax
      // denominators and the target logits (two fp32 per token); backward: the column-parallel output
      // projection's. Under SP the final norm's output is gathered first.
      // Each multi-token-prediction module adds its block's collectives and the head's again (its projection's
      // are not priced).
      std::vector<TpCollective> out;
      const auto head = [&] {
        if (forward) {
          if (sequence_parallel) out.push_back(gather);
          out.push_back({4.0 * tokens, ReduceOp::kMax});
          out.push_back({8.0 * tokens, ReduceOp::kSum});
        } else {
          column_backward(static_cast<double>(model.spec().vocab_size()) * h, gather, &out);
        }
      };
      head();
      for (uint32_t i = 0; i < model.MtpModules(); ++i) {
        for (const auto& c : LayerTpCollectives(model, model.MtpBlock(), forward, batch, seq_len, dtype, sequence_parallel,
                                                tp, blocking)) {
          out.push_back(c);
        }
        head();
      }
      return out;
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

uint32_t Lowerer::GroupId(std::vector<uint32_t> members, bool dp_stream) {
  auto& ids = dp_stream ? dp_group_ids_ : group_ids_;
  auto [it, inserted] = ids.emplace(members, static_cast<uint32_t>(out_.groups.size()));
  if (inserted) out_.groups.push_back(std::move(members));
  return it->second;
}

Op& Lowerer::AddCollective(std::vector<Op>& ops, const std::vector<uint32_t>& members, uint32_t device, double bytes,
                           CollectiveKind kind, Category cat, uint16_t mb, Algorithm algo) {
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

Algorithm Lowerer::TpAlgorithm() const {
  return plan_.comm().tp_algorithm() == proto::CommOptions::ALGORITHM_NVLS ? Algorithm::kNvls : Algorithm::kRing;
}

void Lowerer::AddCompute(std::vector<Op>& ops, uint32_t layer, double flops, Category cat, uint16_t mb,
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

namespace {

// The share of the last compute operation in `ops` that `hidden_flops` are (at most all of it).
float HideShare(const std::vector<Op>& ops, double hidden_flops) {
  if (hidden_flops <= 0) return 0;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
    if (it->kind != OpKind::kCompute) continue;
    return it->flops > 0 ? static_cast<float>(std::min(1.0, hidden_flops / it->flops)) : 0.0f;
  }
  return 0;
}

}  // namespace

void Lowerer::AddLayerTp(std::vector<Op>& ops, uint32_t device, const std::vector<uint32_t>& tp_group, uint32_t layer,
                         double batch, uint32_t local_seq, bool forward, uint16_t mb, FusedTp* fused) {
  if (tp_group.size() < 2) return;
  const auto t = static_cast<uint32_t>(tp_group.size());
  if (options_.tp_in_compute && options_.tp_in_compute(device, layer, t, batch)) return;
  const bool sp = plan_.sequence_parallel();
  for (const auto& c : LayerTpCollectives(model_, layer, forward, batch, local_seq, tr_.dtype(), sp, t,
                                                   plan_.comm().tp_backward_blocking())) {
    if (options_.fuse_passes) {
      // A pass's TP traffic as one all-reduce: an all-gather and a reduce-scatter of a tensor move what
      // an all-reduce of it does.
      const int k = c.hidden_flops > 0 ? 1 : 0;
      fused->bytes[k] += c.kind == CollectiveKind::kAllReduce ? c.bytes : c.bytes / 2;
      ++(c.kind == CollectiveKind::kAllGather ? fused->gathers : fused->others)[k];
      fused->hidden_flops += c.hidden_flops;
      continue;
    }
    Op& op = AddCollective(ops, tp_group, device, c.bytes, c.kind, Category::kTp, mb,
                           c.kind == CollectiveKind::kAllReduce ? TpAlgorithm() : Algorithm::kRing);
    op.reduce = c.reduce;
    op.in_pass = true;
    op.layer_begin = layer;
    op.layer_end = layer + 1;
    op.hide_share = HideShare(ops, c.hidden_flops);
  }
}

void Lowerer::AddRing(std::vector<Op>& ops, const std::vector<uint32_t>& ring, uint32_t device, bool before,
                      const std::vector<double>& bytes, uint16_t mb, uint32_t a, uint32_t b, double batch) {
  const uint32_t n = static_cast<uint32_t>(ring.size()), c = RankIn(ring, device);
  const auto add = [&](OpKind kind) {
    for (double step_bytes : bytes) {
      Op op;
      op.kind = kind;
      op.category = Category::kCp;
      op.channel = kChanCp;
      op.peer = kind == OpKind::kSend ? ring[(c + 1) % n] : ring[(c + n - 1) % n];
      op.micro_batch = mb;
      op.layer_begin = a;
      op.layer_end = b;
      op.seq_end = static_cast<uint32_t>(batch);
      op.bytes = step_bytes;
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

const Lowerer::EpRoute& Lowerer::RouteOf(uint32_t device, const proto::Stage& st) {
  auto [it, fresh] = routes_.try_emplace(device);
  EpRoute& route = it->second;
  if (!fresh) return route;
  const uint32_t index = out_.ranks[out_.device_slot[device]].stage_index;
  route.ep_group = EpGroupOf(st, index);
  route.etp_group = ExpertTpGroupOf(st, index);
  if (plan_.comm().ep_dispatcher() != proto::CommOptions::EP_DISPATCHER_NODE_DEDUP) return route;
  const uint32_t my_node = ctx_.cluster.device(device).node;
  std::map<uint32_t, std::vector<uint32_t>> by_node;
  for (uint32_t d : route.ep_group) by_node[ctx_.cluster.device(d).node].push_back(d);
  const size_t per_node = by_node[my_node].size();
  bool uniform = by_node.size() > 1;
  for (const auto& [node, ds] : by_node) uniform &= ds.size() == per_node;
  if (!uniform) return route;  // one node (NVLink only), or uneven nodes: the plain all-to-all
  route.local = by_node[my_node];
  const size_t idx = RankIn(route.local, device);
  for (const auto& [node, ds] : by_node) route.rail.push_back(ds[idx]);
  const auto& moe = model_.spec().moe();
  const auto n = static_cast<uint32_t>(route.rail.size());
  // An all-to-all's buffer: n shares of what goes to each node, each token once per node it hits.
  route.rail_bytes_per_token = n * model_.spec().hidden_size() * DTypeBytes(tr_.dtype()) *
                               NodeHitProbability(moe.num_experts(), moe.top_k(), n);
  return route;
}

// SMs held by the EP exchange's kernels (the SM is the unit: each NCCL channel, and each DeepEP / HybridEP
// block, runs on one SM). NCCL's defaults are the channel counts it chose on 8-GPU H100 nodes with a 400 Gb/s
// NIC per GPU (NCCL INFO lines of nccl-tests on AWS p5.48xlarge: "24 coll channels, 16 nvls channels, 32 p2p
// channels" on one node, "16 coll channels, 16 nvls channels, 16 p2p channels, 2 p2p channels per peer" on
// two; aws-samples/aws-do-eks@701c554a Container-Root/eks/deployment/nccl-test/README.md); node_dedup's is
// DeepEP's 20 SMs, Megatron-Core's historical --moe-deepep-num-sms default (transformer_config.py).
float Lowerer::EpSmShare(uint32_t device, const std::vector<uint32_t>& group, bool all_to_all) const {
  if (!plan_.comm().ep_overlap()) return 0;
  const int sms = ctx_.cluster.device(device).gpu->sm_count;
  if (sms <= 0) return 0;
  uint32_t held = plan_.comm().ep_sms();
  if (held == 0) {
    bool across = false;
    for (uint32_t d : group) across |= ctx_.cluster.device(d).node != ctx_.cluster.device(device).node;
    if (plan_.comm().ep_dispatcher() == proto::CommOptions::EP_DISPATCHER_NODE_DEDUP && all_to_all) {
      held = 20;
    } else {
      held = across ? 16 : all_to_all ? 32 : 24;
    }
  }
  return static_cast<float>(std::min(1.0, static_cast<double>(held) / sms));
}

void Lowerer::AddExpertExchange(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t layer,
                                double batch, uint32_t local_seq, uint16_t mb, FusedEp* fused) {
  const RankOps& me = out_.ranks[out_.device_slot[device]];
  const uint32_t ep = me.experts.ep, etp = me.experts.etp;
  // The rank routes its sequence-parallel share of the micro-batch's tokens (Megatron-Core's MoE layer under
  // TP needs sequence parallelism), each to top_k experts: top_k copies of h elements in the training's
  // 2-byte type (the alltoall dispatcher sends bf16 under FP8 too). An all-to-all's buffer is what the rank
  // sends; with even routing it keeps 1/ep and sends 1/ep to each other member. Forward: dispatch, then
  // combine; backward: the combine's gradient, then the dispatch's. Expert TP gathers the etp ranks'
  // received tokens before the experts (all-gather of etp·S) and reduce-scatters their outputs after them
  // (etp·S), the mirror image in the backward: one all-reduce's worth of bytes per pass.
  // Under drop-and-pad (training.moe_capacity_factor, Megatron-Core's --moe-pad-expert-input-to-capacity) every
  // expert receives exactly its capacity of the rank's copies, ceil(cf · tokens · top_k / E), padded: the
  // buffer holds E capacities.
  const double tokens = batch * local_seq / TpDegree(st);
  const double experts = model_.spec().moe().num_experts(), cf = tr_.moe_capacity_factor();
  double copies = tokens * model_.spec().moe().top_k();
  if (cf > 0) copies = experts * std::ceil(cf * copies / experts - 1e-9);
  const double bytes = copies * model_.spec().hidden_size() * DTypeBytes(tr_.dtype());
  const EpRoute& route = RouteOf(device, st);
  const auto& rail = route.rail;
  const auto& local = route.local;
  const double rail_bytes = tokens * route.rail_bytes_per_token;
  if (fused != nullptr) {
    if (ep > 1 && (rail.empty() || local.size() > 1)) fused->bytes[0] += 2 * bytes, fused->calls[0] += 2;
    if (etp > 1) fused->bytes[1] += etp * bytes, fused->calls[1] += 1;
    if (ep > 1 && !rail.empty()) fused->bytes[2] += 2 * rail_bytes, fused->calls[2] += 2;
    return;
  }
  // comm.ep_overlap: the calls share the layer's pass (HideBehindGemms), so the pair takes max of the two.
  const bool dedup = plan_.comm().ep_dispatcher() == proto::CommOptions::EP_DISPATCHER_NODE_DEDUP;
  const float share = plan_.comm().ep_overlap()
                          ? 1.0f / static_cast<float>((ep > 1 ? (dedup ? 4 : 2) : 0) + (etp > 1 ? 2 : 0))
                          : 0.0f;
  const auto add = [&](const std::vector<uint32_t>& group, double b, CollectiveKind kind) {
    const float sm_share = EpSmShare(device, group, kind == CollectiveKind::kAllToAll);
    Op& op = AddCollective(ops, group, device, b, kind, Category::kEp, mb);
    op.in_pass = true;
    op.layer_begin = layer;
    op.layer_end = layer + 1;
    op.hide_share = share;
    op.sm_share = sm_share;
  };
  const auto& ep_group = route.ep_group;
  const auto& etp_group = route.etp_group;
  // node_dedup: the rail all-to-all carries each token once per other node its experts are on, then the node's
  // all-to-all forwards its copies (the combine: the mirror image).
  const auto exchange = [&](bool dispatch) {
    if (ep < 2) return;
    if (rail.empty()) return add(ep_group, bytes, CollectiveKind::kAllToAll);
    if (!dispatch && local.size() > 1) add(local, bytes, CollectiveKind::kAllToAll);
    add(rail, rail_bytes, CollectiveKind::kAllToAll);
    if (dispatch && local.size() > 1) add(local, bytes, CollectiveKind::kAllToAll);
  };
  exchange(true);
  if (etp > 1) add(etp_group, etp * bytes, CollectiveKind::kAllGather);
  if (etp > 1) add(etp_group, etp * bytes, CollectiveKind::kReduceScatter);
  exchange(false);
}

void Lowerer::AddActivationOffload(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t a,
                                   uint32_t b, double batch, uint32_t local_seq, bool forward, uint16_t mb) {
  const uint32_t n = tr_.activation_offload_layers();
  if (n == 0) return;
  const RankOps& me = out_.ranks[out_.device_slot[device]];
  const proto::Recompute recompute = EffectiveRecompute(plan_, tr_);
  uint32_t block = 0;
  double bytes = 0;
  for (uint32_t l = st.layer_begin(); l < b && l < model_.num_layers(); ++l) {
    if (model_.kind(l) != LayerKind::kTransformer || block++ >= n || l < a) continue;
    bytes += model_.ActivationBytes(l, batch, local_seq, TpDegree(st), plan_.sequence_parallel(), recompute, tr_.dtype(),
                                    tr_.attention(), tr_.dropout(), me.experts, ModulesOf(tr_));
  }
  if (bytes <= 0) return;
  AddHostCopy(ops, bytes, forward, forward ? Category::kForward : Category::kBackward, mb, a, b);
  ops.back().hide_share = 1;
}

void Lowerer::AddLayers(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t r, uint32_t a,
                        uint32_t b, std::pair<uint32_t, uint32_t> seqs, bool forward, uint16_t mb) {
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
  // The ring (docs/lowering.md "Context parallelism and Ulysses"): a forward (or recomputed forward) sends
  // one K/V block in each of its cp − 1 steps; a backward circulates the K/V blocks again (cp − 1 steps)
  // and then sends every block's dK/dV contributions home (cp − 1 steps of one block each), the bytes of
  // TransformerEngine's backward, which packs the two rounds' middle steps in pairs.
  const uint32_t steps = sh.cp - 1;
  const double kv_block = sh.cp > 1 ? RingKvBlockBytes(model_, batch, tr_.seq_len(), t, sh.cp, tr_.dtype()) : 0;
  const auto is_block = [&](uint32_t l) { return model_.kind(l) == LayerKind::kTransformer; };
  const auto ring_bytes = [&](bool fwd_pass) { return std::vector<double>((fwd_pass ? 1 : 2) * steps, kv_block); };
  const auto pass_total = [&](bool fwd_pass) { return (fwd_pass ? 1 : 2) * steps * kv_block; };
  double fused_ring = 0;
  if (fuse && steps > 0) {
    // The pass's ring traffic (the same bytes) as cp − 1 equal sends before it and receives after it.
    for (uint32_t l = a; l < b; ++l) {
      if (!is_block(l)) continue;
      fused_ring += pass_total(forward);
      if (!forward && full_recompute_) fused_ring += pass_total(true);
    }
    if (fused_ring > 0) {
      AddRing(ops, ring, device, true, std::vector<double>(steps, fused_ring / steps), mb, a, b, batch);
    }
  }
  // ZeRO-3 by units: the pass's first unit gathered in the open; the others' calls behind the compute.
  FusedUnits fused_units;
  double pass_flops = 0, last_unit_flops = 0;
  uint32_t last_unit = kNone;
  if (zero_units_) AddZeroUnit(ops, device, forward ? a : b - 1, true, false, mb, nullptr);
  FusedTp fused_tp;
  FusedEp fused_ep;
  double fused_a2a = 0;
  uint32_t fused_a2a_calls = 0;
  // One block pass (forward, recomputed forward or backward): ring sends, compute, ring receives, TP
  // collectives, Ulysses all-to-alls.
  const auto pass = [&](uint32_t l, bool fwd_pass, bool recompute) {
    const bool ring_here = !fuse && steps > 0 && is_block(l);
    if (ring_here) AddRing(ops, ring, device, true, ring_bytes(fwd_pass), mb, l, l + 1, batch);
    const double flops = (fwd_pass ? model_.ForwardFlops(l, batch, tr_.seq_len())
                                   : model_.BackwardFlops(l, batch, tr_.seq_len())) /
                         (t * ways);
    AddCompute(ops, l, flops, cat, mb, seqs, recompute);
    if (zero_units_) {
      if (l != last_unit) last_unit = l, last_unit_flops = 0;
      last_unit_flops += flops;
      pass_flops += flops;
      if (fwd_pass && !recompute && l + 1 < b) AddZeroUnit(ops, device, l + 1, true, true, mb, &fused_units);
      if (!fwd_pass) {
        if (l > a) AddZeroUnit(ops, device, l - 1, true, true, mb, &fused_units);
        if (l + 1 < b) AddZeroUnit(ops, device, l + 1, false, true, mb, &fused_units);
      }
    }
    if (ring_here) AddRing(ops, ring, device, false, ring_bytes(fwd_pass), mb, l, l + 1, batch);
    AddLayerTp(ops, device, tp_group, l, batch, local_seq, fwd_pass, mb, &fused_tp);
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
    // Each MoE block the layer runs (the head's multi-token-prediction blocks included) exchanges its tokens.
    for (uint32_t i = 0; i < model_.ExpertBlocks(l); ++i) {
      AddExpertExchange(ops, device, st, l, batch, local_seq, mb, fuse ? &fused_ep : nullptr);
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
  if (fused_ring > 0) {
    AddRing(ops, ring, device, false, std::vector<double>(steps, fused_ring / steps), mb, a, b, batch);
  }
  for (int k = 0; k < 2; ++k) {
    if (fused_tp.bytes[k] <= 0) continue;
    Op& op = AddCollective(ops, tp_group, device, fused_tp.bytes[k], CollectiveKind::kAllReduce, Category::kTp, mb,
                           TpAlgorithm());
    op.in_pass = true;
    const uint32_t g = fused_tp.gathers[k], o = fused_tp.others[k];
    op.calls = o + (g > o ? (g - o + 1) / 2 : 0);
    op.layer_begin = a;
    op.layer_end = b;
    if (k == 1) op.hide_share = HideShare(ops, fused_tp.hidden_flops);
  }
  if (fused_a2a > 0) {
    Op& op = AddCollective(ops, uly_group, device, fused_a2a, CollectiveKind::kAllToAll, Category::kCp, mb);
    op.in_pass = true;
    op.calls = fused_a2a_calls;
    op.layer_begin = a;
    op.layer_end = b;
  }
  int fused_ep_ops = 0;
  for (double x : fused_ep.bytes) fused_ep_ops += x > 0 ? 1 : 0;
  for (int k = 0; k < 3; ++k) {
    if (fused_ep.bytes[k] <= 0) continue;
    const EpRoute& route = RouteOf(device, st);
    const std::vector<uint32_t>& group = k == 1 ? route.etp_group
                                         : k == 2 ? route.rail
                                                  : (route.rail.empty() ? route.ep_group : route.local);
    const float sm_share = EpSmShare(device, group, k != 1);
    Op& op = AddCollective(ops, group, device, fused_ep.bytes[k],
                           k == 1 ? CollectiveKind::kAllReduce : CollectiveKind::kAllToAll, Category::kEp, mb);
    op.in_pass = true;
    op.calls = fused_ep.calls[k];
    op.layer_begin = a;
    op.layer_end = b;
    if (plan_.comm().ep_overlap()) op.hide_share = 1.0f / static_cast<float>(fused_ep_ops);
    op.sm_share = sm_share;
  }
  AddActivationOffload(ops, device, st, a, b, batch, local_seq, forward, mb);
  if (zero_units_) {
    if (fuse) EmitFusedUnits(ops, device, fused_units, HideShare(ops, pass_flops - last_unit_flops), mb, a, b);
    if (!forward) AddZeroUnit(ops, device, a, false, false, mb, nullptr);
  }
}

void Lowerer::AddPp(std::vector<Op>& ops, int p, int from, int to, uint32_t device, bool sending, uint32_t r,
                    uint32_t k, bool forward, uint16_t mb) {
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

}  // namespace hetsim::models
