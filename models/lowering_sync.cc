// What the lowering emits after a rank's passes: its parameters cut into segments (gradient sync groups and,
// under CPU offload, layers no other replica holds), each group's gradient sync in buckets (all-reduce,
// hierarchical or tree; reduce-scatter under ZeRO ≥ 1), ZeRO-3's gathers before each pass, the optimizer step
// over the rank's shard, the parameter all-gathers, and the CPU offload copies (ZeRO-Offload, ZeRO-Infinity).
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "models/cost.h"
#include "models/lowering_internal.h"

namespace hetsim::models {

void Lowerer::EmitSyncAndStep(uint32_t device, const proto::Stage& st, RankOps& rank, std::vector<Op>& ops,
                              bool overlap, bool skeleton) {
  const auto& segments = segments_[device];
  const bool offload = OffloadsOptimizer(plan_);
  // Sequence parallelism: the norms (and row-parallel biases) ran on the rank's sequence shard, so their
  // gradients are summed over the TP group (one all-reduce of the stage's such parameters, Megatron-LM's
  // finalize_model_grads), here before the data-parallel sync (the sums commute).
  if (plan_.sequence_parallel() && rank.tp > 1) {
    double params = 0;
    for (uint32_t l = st.layer_begin(); l < st.layer_end(); ++l) params += model_.SequenceParallelParams(l);
    if (params > 0) {
      AddCollective(ops, TpGroup(st, rank.replica, rank.shard_rank), device, params * DTypeBytes(tr_.dtype()),
                    CollectiveKind::kAllReduce, Category::kTp, 0);
    }
  }
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
    // ZeRO-3 by units reduce-scattered every gradient inside the backward passes.
    if (zero_units_) continue;
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
  // Optimizer step over the parameters this device updates (its ZeRO shard: MoE layers' routed experts
  // shard over their expert-DP group, the rest over the DP group).
  double params = 0, routed = 0;
  for (uint32_t l = st.layer_begin(); l < st.layer_end(); ++l) {
    params += model_.ParamsPerRank(l, TpDegree(st), st.layer_begin() != 0, rank.experts);
    routed += model_.ExpertParams(l) / (double(rank.experts.ep) * rank.experts.etp);
  }
  double shard = 1, expert_shard = 1;
  if (plan_.zero_stage() >= 1) {
    for (uint32_t g : device_groups_[device]) {
      const auto& sg = out_.sync_groups[g];
      const double n = static_cast<double>(sg.devices.size());
      if (sg.part == GradSyncGroup::Part::kExperts) {
        expert_shard = n;
      } else {
        shard = n;
        if (sg.part == GradSyncGroup::Part::kAll) expert_shard = n;
      }
    }
  }
  Op opt;
  opt.kind = OpKind::kCompute;
  opt.category = Category::kOptimizer;
  opt.layer_begin = st.layer_begin();
  opt.layer_end = st.layer_end();
  opt.params = (params - routed) / shard + routed / expert_shard;
  // CPU offload: the step runs on the node's CPU, whose cores the plan's ranks there share.
  if (offload) opt.host_ranks = node_ranks_[ctx_.cluster.device(device).node];
  ops.push_back(opt);
  if (offload && !OffloadsParams(plan_)) {
    // The updated fp16 shard back to the GPU (ZeRO-Offload §4.1), before the all-gathers.
    double bytes = 0;
    for (const Segment& seg : segments) bytes += SegmentShardBytes(seg, TpDegree(st), holds_embedding);
    AddHostCopy(ops, bytes, false, Category::kZero, 0, st.layer_begin(), st.layer_end());
  }
  if (plan_.comm().param_gather_overlap()) {
    // The all-gathers open the next iteration's DP stream (GatheredAhead); in a skeleton, where the DP stream
    // is inline, they stay here.
    std::vector<Op> ahead;
    for (const GatherPiece& piece : GatheredAhead(device)) {
      const auto& sg = out_.sync_groups[piece.group];
      Op& op = AddCollective(ahead, sg.devices, device, piece.bytes, CollectiveKind::kAllGather, Category::kZero, 0);
      op.group = GroupId(sg.devices, true);  // on the DP stream beside its reduce-scatters
      op.sync_group = piece.group;
      op.bucket = static_cast<uint16_t>(piece.index);
      op.num_buckets = static_cast<uint16_t>(piece.count);
      op.layer_begin = piece.layer_begin;
      op.layer_end = piece.layer_end;
      Signal(ahead);
    }
    std::vector<Op>& to = skeleton ? ops : rank.dp_stream;
    to.insert(skeleton ? to.end() : to.begin(), ahead.begin(), ahead.end());
  } else if (plan_.zero_stage() >= 1 && !zero_units_) {
    // (ZeRO-3 by units keeps its parameters sharded after the step: the next forward gathers them. The older
    // form keeps this gather, which the executor's TP completion of replicated rows relies on.)
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
}

std::vector<Lowerer::GatherPiece> Lowerer::GatheredAhead(uint32_t device) const {
  std::vector<GatherPiece> pieces;
  if (!plan_.comm().param_gather_overlap()) return pieces;
  std::vector<uint32_t> gs;
  for (uint32_t g : device_groups_[device]) {
    if (out_.sync_groups[g].devices.size() >= 2) gs.push_back(g);
  }
  std::sort(gs.begin(), gs.end(),
            [&](uint32_t x, uint32_t y) { return out_.sync_groups[x].layer_begin < out_.sync_groups[y].layer_begin; });
  const double bucket = plan_.comm().dp_bucket_mib() * 1024 * 1024;
  for (uint32_t g : gs) {
    const auto& sg = out_.sync_groups[g];
    const uint32_t layers = sg.layer_end - sg.layer_begin;
    const double bytes = GroupBytes(sg);
    const uint32_t buckets = bucket > 0 ? static_cast<uint32_t>(std::max(1.0, std::ceil(bytes / bucket))) : 1;
    const uint32_t n = std::min(buckets, layers);
    for (uint32_t i = 0; i < n; ++i) {
      // Layer counts as even as the cut allows (the first pieces take the remainder).
      GatherPiece p;
      p.group = g;
      p.index = i;
      p.count = n;
      p.layer_begin = sg.layer_begin + i * (layers / n) + std::min(i, layers % n);
      p.layer_end = p.layer_begin + layers / n + (i < layers % n ? 1 : 0);
      p.bytes = GroupBytes(sg, p.layer_begin, p.layer_end);
      pieces.push_back(p);
    }
  }
  return pieces;
}

void Lowerer::AddForward(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t r, uint32_t a,
                         uint32_t b, std::pair<uint32_t, uint32_t> seqs, uint16_t mb) {
  uint32_t x = a;
  if (mb == 0) {
    for (const GatherPiece& piece : GatheredAhead(device)) {
      if (piece.layer_end <= a || piece.layer_begin >= b) continue;  // (another chunk's)
      const uint32_t from = std::max(piece.layer_begin, a), to = std::min(piece.layer_end, b);
      if (from > x) AddLayers(ops, device, st, r, x, from, seqs, true, mb);
      Op aw;
      aw.kind = OpKind::kAwait;  // the group's parameters gathered (the DP stream's kSignal after its all-gather)
      ops.push_back(aw);
      AddLayers(ops, device, st, r, from, to, seqs, true, mb);
      x = to;
    }
  }
  if (x < b) AddLayers(ops, device, st, r, x, b, seqs, true, mb);
}

void Lowerer::MakeSegments() {
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

double Lowerer::SegmentShardBytes(const Segment& seg, uint32_t tp, bool holds_embedding) const {
  if (seg.group != kNone) {
    const auto& sg = out_.sync_groups[seg.group];
    return GroupBytes(sg) / static_cast<double>(sg.devices.size());
  }
  double params = 0;
  for (uint32_t l = seg.layer_begin; l < seg.layer_end; ++l) params += model_.ParamsPerRank(l, tp, !holds_embedding);
  return params * DTypeBytes(tr_.dtype());
}

void Lowerer::AddHostCopy(std::vector<Op>& ops, double bytes, bool to_host, Category cat, uint16_t mb, uint32_t a,
                          uint32_t b, uint32_t sync_group) {
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

void Lowerer::AddAllReduce(std::vector<Op>& ops, const std::vector<uint32_t>& members, uint32_t device,
                           const Op& proto_op) {
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

double Lowerer::GroupBytes(const GradSyncGroup& g, uint32_t a, uint32_t b) const {
  double params = 0;
  for (uint32_t l = a; l < b; ++l) params += GroupParamsPerRank(model_, g, l);
  return params * DTypeBytes(tr_.dtype());
}

void Lowerer::AddZeroGathers(std::vector<Op>& ops, uint32_t device, uint16_t mb) {
  if (plan_.zero_stage() < 3 || zero_units_) return;
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

Op& Lowerer::AddUnitCall(std::vector<Op>& ops, uint32_t device, uint32_t g, double bytes, bool gather, uint16_t mb) {
  const auto& sg = out_.sync_groups[g];
  Op& op = AddCollective(ops, sg.devices, device, bytes, gather ? CollectiveKind::kAllGather : CollectiveKind::kReduceScatter,
                         gather ? Category::kZero : Category::kDp, mb);
  op.group = GroupId(sg.devices);  // the main stream's, beside the gathers
  op.sync_group = g;
  return op;
}

void Lowerer::AddZeroUnit(std::vector<Op>& ops, uint32_t device, uint32_t l, bool gather, bool hidden, uint16_t mb,
                          FusedUnits* fused) {
  for (uint32_t g : device_groups_[device]) {
    const auto& sg = out_.sync_groups[g];
    if (sg.devices.size() < 2 || l < sg.layer_begin || l >= sg.layer_end) continue;
    const double bytes = GroupBytes(sg, l, l + 1);
    if (hidden && options_.fuse_passes) {
      auto& [sum, calls] = (gather ? fused->gathers : fused->reduces)[g];
      sum += bytes;
      ++calls;
      continue;
    }
    Op& op = AddUnitCall(ops, device, g, bytes, gather, mb);
    op.bucket = static_cast<uint16_t>(l - sg.layer_begin);
    op.num_buckets = static_cast<uint16_t>(sg.layer_end - sg.layer_begin);
    op.layer_begin = l;
    op.layer_end = l + 1;
    op.hide_share = hidden ? 1.0f : 0.0f;
  }
}

void Lowerer::EmitFusedUnits(std::vector<Op>& ops, uint32_t device, const FusedUnits& fused, float share, uint16_t mb,
                             uint32_t a, uint32_t b) {
  // The calls behind the pass split its share between them (HideBehindGemms adds the shares of the calls behind
  // one compute operation).
  const size_t calls = fused.gathers.size() + fused.reduces.size();
  if (calls == 0) return;
  const float each = std::max(share, 1e-6f) / static_cast<float>(calls);
  for (const bool gather : {true, false}) {
    for (const auto& [g, fused_call] : gather ? fused.gathers : fused.reduces) {
      const auto& sg = out_.sync_groups[g];
      Op& op = AddUnitCall(ops, device, g, fused_call.first, gather, mb);
      op.calls = fused_call.second;
      op.layer_begin = std::max(a, sg.layer_begin);
      op.layer_end = std::min(b, sg.layer_end);
      op.hide_share = each;
    }
  }
}

}  // namespace hetsim::models
