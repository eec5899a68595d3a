// ZeRO-3 by units (models/lowering.h "ZeRO-3 and FSDP by units"): each layer's calls where FSDP and
// DeepSpeed's stage 3 issue them, written out by hand for llama-tiny; the fused passes' calls; the older
// whole-stage form where units are not lowered.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/lowering.h"
#include "tests/common/specs.h"
#include "tests/models/lowering_fixture.h"

namespace hetsim::models {
namespace {

using lowering_fixture::Lower;
using lowering_fixture::TrainingFor;
using testing_util::TheWorld;

// A rank's main stream as ZeRO-3 by units sees it: "F3" / "B3" a layer's forward / backward, "g3" / "r3" the
// all-gather of layer 3's parameters / the reduce-scatter of its gradients ("*": behind the compute before
// it), "opt" the step; other operations left out.
std::string UnitSteps(const RankOps& r) {
  std::string out;
  for (const Op& op : r.ops) {
    std::string step;
    if (op.kind == OpKind::kCompute && op.category == Category::kOptimizer) {
      step = "opt";
    } else if (op.kind == OpKind::kCompute) {
      step = (op.category == Category::kForward ? "F" : "B") + std::to_string(op.layer_begin);
    } else if (op.kind == OpKind::kCollective && (op.category == Category::kZero || op.category == Category::kDp)) {
      step = (op.category == Category::kZero ? "g" : "r") + std::to_string(op.layer_begin) + (op.hide_share > 0 ? "*" : "");
    } else {
      continue;
    }
    if (!out.empty()) out += ' ';
    out += step;
  }
  return out;
}

// Data parallelism over devices 0 and 1, each one stage of all six layers, two micro-batches.
proto::Plan ZeroThreeOverTwo() {
  proto::Plan plan;
  plan.set_zero_stage(3);
  for (uint32_t d = 0; d < 2; ++d) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(2);
    auto* st = pipe->add_stages();
    st->add_devices(d);
    st->set_layer_end(TheWorld().model.num_layers());
  }
  return plan;
}

TEST(LoweringZero, ThreeGathersEachLayerBeforeItsPassAndReduceScattersItAfterItsBackward) {
  // FSDP / DeepSpeed ZeRO-3 with one unit per layer (llama-tiny: 0 embedding, 1-4 blocks, 5 head): a
  // forward gathers layer 0 in the open and each next layer behind the compute of the one before; a
  // backward gathers the head in the open, then behind each layer's backward the next layer down and the
  // reduce-scatter of the layer above; the embedding's reduce-scatter closes it in the open. Every
  // micro-batch alike; nothing after the last backward but the step (no gradient sync, no gathers).
  const proto::Plan plan = ZeroThreeOverTwo();
  const Lowering l = Lower(plan, TrainingFor(plan));
  ASSERT_TRUE(l.zero_units);
  const std::string forward = "g0 F0 g1* F1 g2* F2 g3* F3 g4* F4 g5* F5";
  const std::string backward = "g5 B5 g4* B4 g3* r5* B3 g2* r4* B2 g1* r3* B1 g0* r2* B0 r1* r0";
  EXPECT_EQ(UnitSteps(l.ranks.at(l.device_slot.at(0))), forward + " " + backward + " " + forward + " " + backward + " opt");
  // Bytes (bf16): a block's 725,504 parameters, the embedding's 1,024 · 256, the head's 1,024 · 256 + 256
  // (the model card's counts); bucket = the layer's index among the group's six.
  for (const Op& op : l.ranks.at(l.device_slot.at(0)).ops) {
    if (op.kind != OpKind::kCollective) continue;
    const double params = op.layer_begin == 0 ? 262144 : op.layer_begin == 5 ? 262400 : 725504;
    EXPECT_DOUBLE_EQ(op.bytes, 2 * params) << FormatOp(l, 0, "main", 0, op);
    EXPECT_EQ(op.bucket, op.layer_begin);
    EXPECT_EQ(op.num_buckets, 6);
    EXPECT_EQ(l.groups.at(op.group), (std::vector<uint32_t>{0, 1}));
    EXPECT_EQ(op.hide_share == 0 || op.hide_share == 1, true);
  }
  EXPECT_TRUE(l.ranks.at(0).dp_stream.empty());
}

TEST(LoweringZero, FusedPassesGatherTheFirstLayerInTheOpenAndTheRestBehindTheCompute) {
  // The simulator's fused passes: per pass the first unit's gather in the open, then one call per kind for
  // the units behind the compute, with their count as calls and their bytes summed, sharing the pass's
  // FLOPs but the last unit's (forward: the head's; backward: the embedding's, none).
  proto::Plan plan = ZeroThreeOverTwo();
  plan.mutable_pipelines(0)->set_num_micro_batches(1);
  plan.mutable_pipelines(1)->set_num_micro_batches(1);
  const proto::Training tr = TrainingFor(plan);
  LoweringOptions fused;
  fused.fuse_passes = true;
  const Lowering l = Lower(plan, tr, fused);
  std::vector<const Op*> calls;
  for (const Op& op : l.ranks.at(l.device_slot.at(0)).ops) {
    if (op.kind == OpKind::kCollective) calls.push_back(&op);
  }
  ASSERT_EQ(calls.size(), 6u);  // forward: g0, G; backward: g5, G, R, r0
  const auto& m = TheWorld().model;
  double total_f = 0, total_b = 0;
  for (uint32_t x = 0; x < 6; ++x) total_f += m.ForwardFlops(x, 1, tr.seq_len()), total_b += m.BackwardFlops(x, 1, tr.seq_len());
  EXPECT_EQ(calls[0]->layer_begin, 0u);
  EXPECT_EQ(calls[0]->hide_share, 0.0f);
  EXPECT_EQ(calls[1]->calls, 5u);
  EXPECT_DOUBLE_EQ(calls[1]->bytes, 2 * (4 * 725504.0 + 262400));
  EXPECT_NEAR(calls[1]->hide_share, 1 - m.ForwardFlops(5, 1, tr.seq_len()) / total_f, 1e-6);
  EXPECT_EQ(calls[2]->layer_begin, 5u);
  EXPECT_EQ(calls[2]->hide_share, 0.0f);
  // Backward: the gathers of layers 4..0 and the reduce-scatters of 5..1 behind the pass, half its share each.
  EXPECT_EQ(calls[3]->collective, CollectiveKind::kAllGather);
  EXPECT_EQ(calls[3]->calls, 5u);
  EXPECT_DOUBLE_EQ(calls[3]->bytes, 2 * (4 * 725504.0 + 262144));
  EXPECT_EQ(calls[4]->collective, CollectiveKind::kReduceScatter);
  EXPECT_EQ(calls[4]->calls, 5u);
  EXPECT_DOUBLE_EQ(calls[4]->bytes, 2 * (4 * 725504.0 + 262400));
  const double share_b = 1 - m.BackwardFlops(0, 1, tr.seq_len()) / total_b;
  EXPECT_NEAR(calls[3]->hide_share + calls[4]->hide_share, share_b, 1e-6);
  EXPECT_EQ(calls[5]->layer_begin, 0u);
  EXPECT_EQ(calls[5]->collective, CollectiveKind::kReduceScatter);
  EXPECT_EQ(calls[5]->hide_share, 0.0f);
}

TEST(LoweringZero, ThreeKeepsTheWholeStageGathersUnderTensorParallelismOrUnevenReplicas) {
  // Replicas whose pipelines split the layers differently would issue a sync group's per-layer calls in
  // other orders: the older form, as under TP.
  proto::Plan uneven = ZeroThreeOverTwo();
  for (uint32_t p = 0; p < 2; ++p) {
    auto* pipe = uneven.mutable_pipelines(static_cast<int>(p));
    pipe->mutable_stages(0)->set_layer_end(p == 0 ? 3 : 2);
    auto* st = pipe->add_stages();
    st->add_devices(2 + p);
    st->set_layer_begin(p == 0 ? 3 : 2);
    st->set_layer_end(TheWorld().model.num_layers());
  }
  EXPECT_FALSE(Lower(uneven, TrainingFor(uneven)).zero_units);
  // A stage with TP > 1 keeps the older form (models/lowering.h): one gather of the stage's shard before
  // each pass, the reduce-scatter once after the last backward.
  proto::Plan plan;
  plan.set_zero_stage(3);
  for (uint32_t r = 0; r < 2; ++r) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(1);
    auto* st = pipe->add_stages();
    st->add_devices(2 * r);
    st->add_devices(2 * r + 1);
    st->set_tp_degree(2);
    st->set_layer_end(TheWorld().model.num_layers());
  }
  const Lowering l = Lower(plan, TrainingFor(plan));
  EXPECT_FALSE(l.zero_units);
  uint32_t gathers = 0, reduces = 0;
  for (const Op& op : l.ranks.at(0).ops) {
    if (op.kind != OpKind::kCollective || op.category == Category::kTp) continue;
    (op.collective == CollectiveKind::kAllGather ? gathers : reduces)++;
  }
  EXPECT_EQ(gathers, 3u);  // before the forward, before the backward, after the step
  EXPECT_EQ(reduces, 1u);
}

}  // namespace
}  // namespace hetsim::models
