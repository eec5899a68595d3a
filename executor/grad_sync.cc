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
  for (const auto& sg : plan.sync_groups) {
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
    groups_.push_back(std::move(grp));
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

void GradSync::Run() {
  if (groups_.empty() && partial_params_.empty() && complete_params_.empty()) return;
  auto& params = model_->params();
  SliceRecorder::Scope scope(recorder_, Category::kDp, -1);
  // 1. Shared key/value heads: every sharer computed part of the gradient.
  TpGlobalExchange(partial_params_, false);
  // 2. Chunks across replicas.
  for (auto& g : groups_) {
    if (g.numel == 0) continue;
    Buffer buf(be_, g.numel, 1, DType::kF32);
    for (const auto& pc : g.pieces) {
      const Tensor src = params[pc.param].grad.t().Rows(pc.rows.begin, pc.rows.end);
      be_->Copy(buf.t().Flat(pc.offset, src.numel()), src);
    }
    g.comm->AllReduce(buf.t(), ReduceOp::kSum);
    for (const auto& pc : g.pieces) {
      const Tensor dst = params[pc.param].grad.t().Rows(pc.rows.begin, pc.rows.end);
      be_->Copy(dst, buf.t().Flat(pc.offset, dst.numel()));
    }
  }
  // 3. Complete the rows this rank holds but other TP ranks synchronised.
  TpGlobalExchange(complete_params_, true);
}

}  // namespace hetsim::executor
