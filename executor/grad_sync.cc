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
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSpec& spec = params[i].spec;
      if (spec.layer < g.layer_begin || spec.layer >= g.layer_end) continue;
      const RowRange chunk = SplitRows(spec.global_rows, g.chunk, g.num_chunks);
      HETSIM_CHECK(spec.owned.begin <= chunk.begin && chunk.end <= spec.owned.end,
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
}

void GradSync::TpGlobalExchange(const std::vector<size_t>& idx, bool owned_only) {
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
    const Tensor from = p.grad.t().Rows(src.begin - p.spec.held.begin, src.end - p.spec.held.begin);
    be_->Copy(buf.t().Flat(offsets[n] + src.begin * p.spec.cols, from.numel()), from);
  }
  tp_comm_->AllReduce(buf.t(), ReduceOp::kSum);
  for (size_t n = 0; n < idx.size(); ++n) {
    const Param& p = params[idx[n]];
    const Tensor to = p.grad.t();
    be_->Copy(to, buf.t().Flat(offsets[n] + p.spec.held.begin * p.spec.cols, to.numel()));
  }
}

void GradSync::Begin() {
  if (partial_params_.empty()) return;
  // 1. Shared key/value heads: every sharer computed part of the gradient.
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  TpGlobalExchange(partial_params_, false);
}

double GradSync::RunGroup(size_t index, uint32_t bucket, uint32_t num_buckets) {
  // 2. One bucket of one group's chunks across replicas.
  auto it = groups_.find(index);
  HETSIM_CHECK(it != groups_.end(), "GradSync: this rank is not in sync group " + std::to_string(index));
  Group& g = it->second;
  HETSIM_CHECK(bucket < num_buckets, "GradSync: bucket out of range");
  if (g.numel == 0) return 0;
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  auto& params = model_->params();
  if (bucket == 0) {
    g.buffer = Buffer(be_, g.numel, 1, DType::kF32);
    for (const auto& pc : g.pieces) {
      const Tensor src = params[pc.param].grad.t().Rows(pc.rows.begin, pc.rows.end);
      be_->Copy(g.buffer.t().Flat(pc.offset, src.numel()), src);
    }
  }
  const int64_t begin = g.numel * bucket / num_buckets, end = g.numel * (bucket + 1) / num_buckets;
  if (end > begin) g.comm->AllReduce(g.buffer.t().Flat(begin, end - begin), ReduceOp::kSum);
  if (bucket + 1 == num_buckets) {
    for (const auto& pc : g.pieces) {
      const Tensor dst = params[pc.param].grad.t().Rows(pc.rows.begin, pc.rows.end);
      be_->Copy(dst, g.buffer.t().Flat(pc.offset, dst.numel()));
    }
    g.buffer = Buffer();
  }
  return static_cast<double>(end - begin) * static_cast<double>(DTypeSize(DType::kF32));
}

void GradSync::End() {
  if (complete_params_.empty()) return;
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
