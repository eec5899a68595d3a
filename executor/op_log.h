// The executor's record of what a rank executed (`hetsim-exec --ops-out`), compared line by line with the
// plan's lowering (`hetsim lower`, tests/executor/check_ops.sh).
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "executor/exec_plan.h"
#include "executor/stage_model.h"
#include "models/lowering.h"
#include "models/transformer.h"

namespace hetsim::executor {

// What this rank executed in the first step, one models::FormatOp line per operation, in the order it
// ran them (layer passes and TP collectives as the model reports them): hetsim-exec --ops-out writes it
// for comparison with the plan's lowering.
class OpLog : public OpObserver {
 public:
  OpLog(const ExecPlan& plan, const RankRole& role, const models::TransformerModel& model, uint32_t seq_len)
      : plan_(plan), role_(role), model_(model), seq_len_(seq_len) {}

  bool active = false;
  std::string text;     // the main stream's lines
  std::string dp_text;  // the DP stream's (comm.dp_overlap), written by the side stream only

  void LayerPass(bool forward, bool recompute, uint32_t mb, uint32_t layer, int64_t sequences) override {
    models::Op op;
    op.kind = models::OpKind::kCompute;
    op.category = forward ? models::Category::kForward : models::Category::kBackward;
    op.micro_batch = static_cast<uint16_t>(mb);
    op.layer_begin = layer;
    op.layer_end = layer + 1;
    op.seq_begin = role_.share.begin;
    op.seq_end = role_.share.begin + static_cast<uint32_t>(sequences);
    op.recompute = recompute;
    const double n = static_cast<double>(sequences);
    // Ulysses and CP: the rank computes 1/(u·cp) of the layer (its tokens; Ulysses 1/u of the heads for
    // attention, CP's load-balanced chunks 1/cp of the causal attention).
    op.flops = (forward || recompute ? model_.ForwardFlops(layer, n, seq_len_) : model_.BackwardFlops(layer, n, seq_len_)) /
               (double(role_.tp) * role_.ulysses * role_.cp);
    Add(op);
    if (after_compute) after_compute(op);
  }
  // Called after each reported layer pass, whether or not the log is active (the runner's ZeRO-3 unit calls
  // behind that compute; executor/runner.cc RunPass).
  std::function<void(const models::Op&)> after_compute;
  void TpCollective(uint32_t mb, uint32_t layer, double bytes, bool max, models::CollectiveKind kind,
                    bool behind_gemms) override {
    models::Op op = InPass(models::Category::kTp, role_.tp_group, role_.tp_rank, mb, layer, bytes);
    op.reduce = max ? models::ReduceOp::kMax : models::ReduceOp::kSum;
    op.collective = kind;
    op.hide_share = behind_gemms ? 1.0f : 0.0f;  // FormatOp prints whether, not how much
    Add(op);
  }
  void UlyssesAllToAll(uint32_t mb, uint32_t layer, double bytes) override {
    models::Op op = InPass(models::Category::kCp, role_.uly_group, role_.shard, mb, layer, bytes);
    op.collective = models::CollectiveKind::kAllToAll;
    Add(op);
  }
  void ExpertCollective(uint32_t mb, uint32_t layer, models::CollectiveKind kind, double bytes) override {
    const bool a2a = kind == models::CollectiveKind::kAllToAll;
    models::Op op = InPass(models::Category::kEp, a2a ? role_.ep_group : role_.etp_group,
                           a2a ? role_.ep_rank : role_.etp_rank, mb, layer, bytes);
    op.collective = kind;
    Add(op);
  }
  void CpRing(uint32_t mb, uint32_t layer, const std::vector<double>& bytes, bool before) override {
    const size_t n = role_.cp_group.size(), me = role_.shard;
    const auto ring_op = [&](models::OpKind kind, double b) {
      models::Op op;
      op.kind = kind;
      op.category = models::Category::kCp;
      op.channel = models::kChanCp;
      op.peer = plan_.devices.at(static_cast<size_t>(
          role_.cp_group[kind == models::OpKind::kSend ? (me + 1) % n : (me + n - 1) % n]));
      op.micro_batch = static_cast<uint16_t>(mb);
      op.layer_begin = layer;
      op.layer_end = layer + 1;
      op.seq_end = role_.share.size();
      op.bytes = b;
      Add(op);
    };
    if (before) {
      for (double b : bytes) ring_op(models::OpKind::kSend, b);
      for (double b : bytes) ring_op(models::OpKind::kPostRecv, b);
    } else {
      for (double b : bytes) ring_op(models::OpKind::kRecv, b);
    }
  }
  // A collective of layer `layer`'s pass over the world ranks `group`, in which this rank is `rank`.
  models::Op InPass(models::Category category, const std::vector<int>& group, uint32_t rank, uint32_t mb,
                    uint32_t layer, double bytes) const {
    models::Op op;
    op.kind = models::OpKind::kCollective;
    op.category = category;
    op.micro_batch = static_cast<uint16_t>(mb);
    op.group = GroupOf(group);
    op.rank = rank;
    op.layer_begin = layer;
    op.layer_end = layer + 1;
    op.bytes = bytes;
    return op;
  }
  // A point-to-point transfer, a wait, a gradient-sync collective or the optimizer step, as executed.
  void Add(models::Op op) {
    if (!active) return;
    text += models::FormatOp(plan_.lowering, role_.device, "main", index_++, op) + "\n";
  }
  // An operation of the DP stream, as the side stream executed it.
  void AddDp(const models::Op& op) {
    if (!active) return;
    dp_text += models::FormatOp(plan_.lowering, role_.device, "dp", dp_index_++, op) + "\n";
  }
  // Both streams' lines, as `hetsim lower` prints a rank (main, then DP); clears them.
  std::string Take() {
    std::string all = std::move(text) + std::move(dp_text);
    text.clear();
    dp_text.clear();
    index_ = dp_index_ = 0;
    return all;
  }
  // The lowering's index of the group of these world ranks (or kNone when it has none).
  uint32_t GroupOf(const std::vector<int>& ranks) const {
    std::vector<uint32_t> devices;
    for (int r : ranks) devices.push_back(plan_.devices.at(static_cast<size_t>(r)));
    const auto& gs = plan_.lowering.groups;
    const auto it = std::find(gs.begin(), gs.end(), devices);
    return it == gs.end() ? models::kNone : static_cast<uint32_t>(it - gs.begin());
  }

 private:
  const ExecPlan& plan_;
  const RankRole& role_;
  const models::TransformerModel& model_;
  uint32_t seq_len_;
  size_t index_ = 0, dp_index_ = 0;
};


}  // namespace hetsim::executor
