#include "executor/grad_sync.h"

#include <algorithm>
#include <set>

namespace hetsim::executor {

GradSync::GradSync(Backend* backend, const ExecPlan& plan, int rank, StageModel* model, Comm* tp_comm,
                   std::map<std::vector<int>, Comm*> group_comms, SliceRecorder* recorder)
    : be_(backend),
      plan_(plan),
      role_(plan.roles.at(static_cast<size_t>(rank))),
      model_(model),
      tp_comm_(tp_comm),
      recorder_(recorder) {
  auto& params = model_->params();
  std::set<uint32_t> synced_layers;
  for (size_t index = 0; index < plan.sync_groups.size(); ++index) {
    const auto& sg = plan.sync_groups[index];
    if (std::find(sg.ranks.begin(), sg.ranks.end(), rank) == sg.ranks.end()) continue;
    const auto& g = sg.group;
    Group grp;
    grp.comm = group_comms.at(sg.ranks);
    grp.sync_comm = grp.comm;
    // Tensors every TP rank holds whole (norms, MoE routers) go whole into each chunk's group when every member
    // holds the group's layers at TP num_chunks (one chunk per rank): they sit in every TP rank's gradient
    // buffer in Megatron-LM's DDP, and the lowering counts them so. Under mixed TP degrees a member in several
    // chunks' groups would add its copy more than once: there they go by their rows of the chunk.
    const bool whole_copies = std::all_of(sg.ranks.begin(), sg.ranks.end(), [&](int r) {
      return plan.roles.at(static_cast<size_t>(r)).tp == g.num_chunks;
    });
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSpec& spec = params[i].spec;
      if (spec.layer < g.layer_begin || spec.layer >= g.layer_end) continue;
      // An MoE layer's routed experts synchronise over their expert-DP group (all the rank's experts), the
      // rest over the dense group (models::GradSyncGroup::Part).
      if (spec.expert != (g.part == models::GradSyncGroup::Part::kExperts)) continue;
      if (spec.expert) {
        grp.pieces.push_back({i, {0, spec.held.size()}, grp.numel});
        grp.numel += spec.held.size() * spec.cols;
        synced_layers.insert(spec.layer);
        continue;
      }
      const bool whole = whole_copies && spec.tp_replicated;
      const RowRange chunk = whole ? spec.held : SplitRows(spec.global_rows, g.chunk, g.num_chunks);
      const RowRange mine = whole ? spec.held : spec.owned;
      HETSIM_CHECK(mine.begin <= chunk.begin && chunk.end <= mine.end,
                   "GradSync: chunk " + std::to_string(g.chunk) + "/" + std::to_string(g.num_chunks) + " of " +
                       spec.name() + " is outside this rank's shard");
      if (chunk.size() == 0) continue;
      grp.pieces.push_back({i, {chunk.begin - spec.held.begin, chunk.end - spec.held.begin}, grp.numel});
      grp.numel += chunk.size() * spec.cols;
      synced_layers.insert(spec.layer);
    }
    groups_.emplace(index, std::move(grp));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamSpec& spec = params[i].spec;
    if (spec.replication == Replication::kPartial) partial_params_.push_back(i);
    if (spec.replication != Replication::kSharded && synced_layers.count(spec.layer)) complete_params_.push_back(i);
  }
  zero_ = plan.zero_stage > 0;
  if (!zero_) return;
  // ZeRO: each group's buckets as the lowering cuts them (its reduce-scatters say how many), this rank's
  // segments of the initial parameters, and Adam's moments for those segments only.
  zero_layers_ = synced_layers;
  std::map<size_t, uint32_t> buckets_of;
  std::vector<models::Op> ops = plan.Ops(rank);
  ops.insert(ops.end(), plan.DpOps(rank).begin(), plan.DpOps(rank).end());
  for (const models::Op& op : ops) {
    if (op.kind == models::OpKind::kCollective && op.collective == models::CollectiveKind::kReduceScatter &&
        op.sync_group != models::kNone) {
      buckets_of[plan.SyncGroupOfLowering(op.sync_group)] = std::max<uint32_t>(1, op.num_buckets);
    }
  }
  units_ = plan.lowering.zero_units;
  for (auto& [index, g] : groups_) {
    const int64_t n = g.comm->size(), r = g.comm->rank();
    const uint32_t nb = units_ ? 0 : buckets_of.count(index) ? buckets_of[index] : 1;
    if (units_) UnitBuckets(g, plan.sync_groups[index].group);
    for (uint32_t b = 0; b < nb; ++b) {
      Group::Bucket bk;
      bk.begin = g.numel * b / nb;
      bk.end = g.numel * (b + 1) / nb;
      bk.seg = (bk.end - bk.begin + n - 1) / n;
      bk.at = g.seg_total;
      g.seg_total += bk.seg;
      g.buckets.push_back(bk);
    }
    if (g.seg_total == 0) continue;
    g.grad_seg = Buffer(be_, g.seg_total, 1, DType::kF32);
    g.param_seg = Buffer(be_, g.seg_total, 1, DType::kF32);
    g.m_seg = Buffer(be_, g.seg_total, 1, DType::kF32);
    g.v_seg = Buffer(be_, g.seg_total, 1, DType::kF32);
    for (Buffer* b : {&g.grad_seg, &g.param_seg, &g.m_seg, &g.v_seg}) be_->Fill(b->t(), 0);
    Buffer packed(be_, g.numel, 1, DType::kF32);
    Pack(g, packed.t(), true);
    for (const auto& bk : g.buckets) {
      const int64_t from = bk.begin + r * bk.seg, len = std::min(bk.seg, bk.end - from);
      if (len > 0) be_->Copy(g.param_seg.t().Flat(bk.at, len), packed.t().Flat(from, len));
    }
  }
  for (auto& p : params) {
    if (zero_layers_.count(p.spec.layer)) p.adam_m = Buffer(), p.adam_v = Buffer();
  }
}

void GradSync::UnitBuckets(Group& g, const models::GradSyncGroup& sg) {
  const auto& params = model_->params();
  const int64_t n = g.comm->size();
  size_t k = 0;
  for (uint32_t l = sg.layer_begin; l < sg.layer_end; ++l) {
    Group::Bucket bk;
    bk.begin = k < g.pieces.size() ? g.pieces[k].offset : g.numel;
    for (; k < g.pieces.size() && params[g.pieces[k].param].spec.layer == l; ++k) {}
    bk.end = k < g.pieces.size() ? g.pieces[k].offset : g.numel;
    bk.seg = (bk.end - bk.begin + n - 1) / n;
    bk.at = g.seg_total;
    g.seg_total += bk.seg;
    g.buckets.push_back(bk);
  }
  HETSIM_CHECK(k == g.pieces.size(), "GradSync: a sync group's parameters are not in layer order");
}

void GradSync::PackRange(const Group& g, Tensor packed, int64_t begin, int64_t end, bool masters) {
  auto& params = model_->params();
  for (const auto& pc : g.pieces) {
    if (pc.offset < begin || pc.offset >= end) continue;
    const Param& p = params[pc.param];
    const Tensor src = (masters ? p.master : p.grad).t().Rows(pc.rows.begin, pc.rows.end);
    be_->Copy(packed.Flat(pc.offset - begin, src.numel()), src);
  }
}

void GradSync::UnpackRange(const Group& g, Tensor packed, int64_t begin, int64_t end, bool masters) {
  auto& params = model_->params();
  for (const auto& pc : g.pieces) {
    if (pc.offset < begin || pc.offset >= end) continue;
    Param& p = params[pc.param];
    const Tensor dst = (masters ? p.master : p.grad).t().Rows(pc.rows.begin, pc.rows.end);
    be_->Copy(dst, packed.Flat(pc.offset - begin, dst.numel()));
    if (masters && !p.weight.empty()) be_->Copy(p.weight.t().Rows(pc.rows.begin, pc.rows.end), dst);
  }
}

GradSync::Group& GradSync::UnitGroup(size_t index, uint32_t bucket, const char* what) {
  auto it = groups_.find(index);
  HETSIM_CHECK(units_ && it != groups_.end() && bucket < it->second.buckets.size(),
               std::string("GradSync: a unit ") + what + " of sync group " + std::to_string(index) +
                   " this rank does not shard");
  return it->second;
}

double GradSync::GatherUnit(size_t index, uint32_t bucket) {
  Group& g = UnitGroup(index, bucket, "all-gather");
  const auto& bk = g.buckets[bucket];
  const int64_t len = bk.end - bk.begin, n = g.comm->size();
  if (len == 0) return 0;
  SliceRecorder::Scope scope(recorder_, Category::kZero, -1);
  Buffer segments(be_, bk.seg * n, 1, DType::kF32);
  g.comm->AllGather(g.param_seg.t().Flat(bk.at, bk.seg), segments.t());
  // Member q's segment holds the range's elements [q·seg, (q + 1)·seg): the first `len` are the layer's.
  UnpackRange(g, segments.t().Flat(0, len), bk.begin, bk.end, true);
  return static_cast<double>(len) * static_cast<double>(DTypeSize(DType::kF32));
}

double GradSync::ReduceUnit(size_t index, uint32_t bucket) {
  Group& g = UnitGroup(index, bucket, "reduce-scatter");
  const auto& bk = g.buckets[bucket];
  const int64_t len = bk.end - bk.begin;
  if (len == 0) return 0;
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  Buffer packed(be_, len, 1, DType::kF32);
  PackRange(g, packed.t(), bk.begin, bk.end, false);
  Buffer mine(be_, bk.seg, 1, DType::kF32);
  ReduceScatterPadded(g.comm, packed.t(), mine.t());
  be_->Add(g.grad_seg.t().Flat(bk.at, bk.seg), mine.t());
  auto& params = model_->params();
  for (const auto& pc : g.pieces) {
    if (pc.offset >= bk.begin && pc.offset < bk.end) be_->Fill(params[pc.param].grad.t().Rows(pc.rows.begin, pc.rows.end), 0);
  }
  return static_cast<double>(len) * static_cast<double>(DTypeSize(DType::kF32));
}

void GradSync::ClearGradSegments() {
  for (auto& [index, g] : groups_) {
    if (!g.grad_seg.empty()) be_->Fill(g.grad_seg.t(), 0);
  }
}

void GradSync::Pack(const Group& g, Tensor packed, bool masters) { PackRange(g, packed, 0, g.numel, masters); }

void GradSync::Unpack(const Group& g, Tensor packed, bool masters) { UnpackRange(g, packed, 0, g.numel, masters); }

void GradSync::GatherSegments(Group& g, Tensor segments, Tensor packed) {
  const int64_t n = g.comm->size();
  for (int64_t q = 0; q < n; ++q) {
    for (const auto& bk : g.buckets) {
      const int64_t from = bk.begin + q * bk.seg, len = std::min(bk.seg, bk.end - from);
      if (len > 0) be_->Copy(packed.Flat(from, len), segments.Flat(q * g.seg_total + bk.at, len));
    }
  }
}

double GradSync::AllGatherGroup(size_t index) {
  auto it = groups_.find(index);
  HETSIM_CHECK(zero_ && it != groups_.end(), "GradSync: an all-gather of sync group " + std::to_string(index) +
                                                 " this rank does not shard");
  Group& g = it->second;
  if (g.numel == 0) return 0;
  SliceRecorder::Scope scope(recorder_, Category::kZero, -1);
  Buffer segments(be_, g.seg_total * g.comm->size(), 1, DType::kF32);
  g.comm->AllGather(g.param_seg.t(), segments.t());
  Buffer packed(be_, g.numel, 1, DType::kF32);
  GatherSegments(g, segments.t(), packed.t());
  Unpack(g, packed.t(), true);
  return static_cast<double>(g.numel) * static_cast<double>(DTypeSize(DType::kF32));
}

void GradSync::ZeroStep(const AdamParams& adam) {
  for (auto& [index, g] : groups_) {
    if (g.seg_total > 0) be_->Adam(g.param_seg.t(), g.grad_seg.t(), g.m_seg.t(), g.v_seg.t(), Tensor{}, adam);
  }
}

void GradSync::FinishStep() {
  if (!zero_ || complete_params_.empty()) return;
  // 3. on the parameters: the rows a rank holds beyond its shard, from their owners' updated rows.
  SliceRecorder::Scope scope(recorder_, Category::kZero, -1);
  TpGlobalExchange(complete_params_, true, true);
}

void GradSync::GatherGradientsForCheck() {
  if (!zero_) return;
  for (auto& [index, g] : groups_) {
    if (g.numel == 0) continue;
    Buffer segments(be_, g.seg_total * g.comm->size(), 1, DType::kF32);
    g.comm->AllGather(g.grad_seg.t(), segments.t());
    Buffer packed(be_, g.numel, 1, DType::kF32);
    GatherSegments(g, segments.t(), packed.t());
    Unpack(g, packed.t(), false);
  }
  TpGlobalExchange(complete_params_, true);
}

void GradSync::TpGlobalExchange(const std::vector<size_t>& idx, bool owned_only, bool masters) {
  if (idx.empty() || tp_comm_ == nullptr) return;
  auto& params = model_->params();
  int64_t numel = 0;
  std::vector<int64_t> offsets;
  for (size_t i : idx) {
    offsets.push_back(numel);
    numel += params[i].spec.global_rows * params[i].spec.cols;
  }
  Buffer buf(be_, numel, 1, DType::kF32);
  be_->Fill(buf.t(), 0);
  for (size_t n = 0; n < idx.size(); ++n) {
    const Param& p = params[idx[n]];
    const RowRange src = owned_only ? p.spec.owned : p.spec.held;
    const Tensor from = (masters ? p.master : p.grad).t().Rows(src.begin - p.spec.held.begin, src.end - p.spec.held.begin);
    be_->Copy(buf.t().Flat(offsets[n] + src.begin * p.spec.cols, from.numel()), from);
  }
  tp_comm_->AllReduce(buf.t(), ReduceOp::kSum);
  for (size_t n = 0; n < idx.size(); ++n) {
    const Param& p = params[idx[n]];
    const Tensor to = (masters ? p.master : p.grad).t();
    be_->Copy(to, buf.t().Flat(offsets[n] + p.spec.held.begin * p.spec.cols, to.numel()));
    if (masters && !p.weight.empty()) be_->Copy(p.weight.t(), to);
  }
}

void GradSync::UseSideComms(const std::map<std::vector<int>, Comm*>& side_comms) {
  for (auto& [index, g] : groups_) g.sync_comm = side_comms.at(plan_.sync_groups[index].ranks);
}

double GradSync::SumSequenceParallel() {
  std::vector<size_t> norms;
  double bytes = 0;
  const auto& params = model_->params();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamKind kind = params[i].spec.kind;
    // The norms, and an MoE block's router: replicated over TP, they ran on the rank's sequence shard
    // (models::TransformerModel::SequenceParallelParams, Megatron-Core's sequence_parallel parameters).
    if (kind != ParamKind::kAttnNorm && kind != ParamKind::kMlpNorm && kind != ParamKind::kFinalNorm &&
        kind != ParamKind::kRouter) {
      continue;
    }
    norms.push_back(i);
    bytes += static_cast<double>(params[i].spec.global_rows * params[i].spec.cols) * sizeof(float);
  }
  SliceRecorder::Scope scope(recorder_, Category::kTp, -1);
  TpGlobalExchange(norms, false);
  return bytes;
}

void GradSync::Begin() {
  if (partial_params_.empty()) return;
  // 1. Shared key/value heads: every sharer computed part of the gradient.
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  TpGlobalExchange(partial_params_, false);
}

std::pair<int64_t, int64_t> GradSync::BucketRange(Group& g, uint32_t bucket, uint32_t num_buckets) {
  HETSIM_CHECK(bucket < num_buckets, "GradSync: bucket out of range");
  if (g.buffer.empty()) {
    g.buffer = Buffer(be_, g.numel, 1, DType::kF32);
    Pack(g, g.buffer.t(), false);
  }
  return {g.numel * bucket / num_buckets, g.numel * (bucket + 1) / num_buckets};
}

void GradSync::FinishBuckets(Group& g) {
  Unpack(g, g.buffer.t(), false);
  g.buffer = Buffer();
}

double GradSync::RunHierarchical(size_t index, uint32_t bucket, uint32_t num_buckets, models::CollectiveKind kind,
                                 Comm* comm) {
  auto it = groups_.find(index);
  HETSIM_CHECK(it != groups_.end() && !zero_, "GradSync: a hierarchical all-reduce of sync group " +
                                                  std::to_string(index) + " this rank cannot run");
  Group& g = it->second;
  if (g.numel == 0) return 0;
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  const auto [begin, end] = BucketRange(g, bucket, num_buckets);
  const int64_t len = end - begin;
  switch (kind) {
    case models::CollectiveKind::kReduceScatter: {
      // Equal segments per member of the node (the last padded with zeros).
      const int64_t seg = (len + comm->size() - 1) / comm->size();
      g.node_seg = Buffer(be_, seg, 1, DType::kF32);
      ReduceScatterPadded(comm, g.buffer.t().Flat(begin, len), g.node_seg.t());
      return static_cast<double>(len) * static_cast<double>(DTypeSize(DType::kF32));
    }
    case models::CollectiveKind::kAllReduce: {
      HETSIM_CHECK(!g.node_seg.empty(), "GradSync: the cross-node all-reduce before the node's reduce-scatter");
      if (g.node_seg.t().numel() > 0) comm->AllReduce(g.node_seg.t(), ReduceOp::kSum);
      return static_cast<double>(g.node_seg.t().numel()) * static_cast<double>(DTypeSize(DType::kF32));
    }
    case models::CollectiveKind::kAllGather: {
      HETSIM_CHECK(!g.node_seg.empty(), "GradSync: the node's all-gather before its reduce-scatter");
      const int64_t seg = g.node_seg.t().numel();
      Buffer out(be_, seg * comm->size(), 1, DType::kF32);
      if (seg > 0) comm->AllGather(g.node_seg.t(), out.t());
      if (len > 0) be_->Copy(g.buffer.t().Flat(begin, len), out.t().Flat(0, len));
      g.node_seg = Buffer();
      if (bucket + 1 == num_buckets) FinishBuckets(g);
      return static_cast<double>(len) * static_cast<double>(DTypeSize(DType::kF32));
    }
    default:
      HETSIM_CHECK(false, "GradSync: a hierarchical all-reduce has no " + std::string(models::CollectiveName(kind)));
  }
  return 0;
}

double GradSync::RunGroup(size_t index, uint32_t bucket, uint32_t num_buckets) {
  // 2. One bucket of one group's chunks across replicas.
  auto it = groups_.find(index);
  HETSIM_CHECK(it != groups_.end(), "GradSync: this rank is not in sync group " + std::to_string(index));
  Group& g = it->second;
  HETSIM_CHECK(bucket < num_buckets, "GradSync: bucket out of range");
  if (g.numel == 0) return 0;
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  const auto [begin, end] = BucketRange(g, bucket, num_buckets);
  if (zero_) {
    // ZeRO: this bucket reduce-scattered; the rank keeps the sum of its segment.
    HETSIM_CHECK(num_buckets == g.buckets.size(), "GradSync: the reduce-scatter's buckets changed");
    const auto& bk = g.buckets[bucket];
    ReduceScatterPadded(g.sync_comm, g.buffer.t().Flat(begin, end - begin), g.grad_seg.t().Flat(bk.at, bk.seg));
    if (bucket + 1 == num_buckets) g.buffer = Buffer();
  } else {
    if (end > begin) g.sync_comm->AllReduce(g.buffer.t().Flat(begin, end - begin), ReduceOp::kSum);
    if (bucket + 1 == num_buckets) FinishBuckets(g);
  }
  return static_cast<double>(end - begin) * static_cast<double>(DTypeSize(DType::kF32));
}

void GradSync::ReduceScatterPadded(Comm* comm, Tensor src, Tensor out) {
  if (out.numel() == 0) return;
  Buffer in(be_, out.numel() * comm->size(), 1, DType::kF32);
  be_->Fill(in.t(), 0);
  if (src.numel() > 0) be_->Copy(in.t().Flat(0, src.numel()), src);
  comm->ReduceScatter(in.t(), out);
}

void GradSync::End() {
  // ZeRO completes the parameters after the gathers instead (FinishStep).
  if (complete_params_.empty() || zero_) return;
  // 3. Complete the rows this rank holds but other TP ranks synchronised.
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  TpGlobalExchange(complete_params_, true);
}

void GradSync::Run() {
  Begin();
  for (auto& [index, g] : groups_) (void)RunGroup(index, 0, 1);
  End();
}

}  // namespace hetsim::executor
