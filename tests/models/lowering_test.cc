// The lowering (models/lowering.h): schedules written out by hand for small pipelines, the TP
// collectives of each layer kind counted by hand, and a property test over random plans that the
// operation lists conserve FLOPs and bytes against closed forms.
#include "models/lowering.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "tests/common/specs.h"
#include "tests/models/lowering_fixture.h"

namespace hetsim::models {
namespace {

// Two nodes of four GPUs (llama-tiny: layers 0 embedding, 1-4 blocks, 5 head).
using testing_util::TheWorld;
using lowering_fixture::Lower;
using lowering_fixture::TrainingFor;

// One pipeline of S single-device stages, one layer each except the last, which takes the rest.
proto::Plan Chain(uint32_t S, uint32_t m, proto::Plan::Schedule schedule) {
  proto::Plan plan;
  plan.set_schedule(schedule);
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(1);
  pipe->set_num_micro_batches(m);
  for (uint32_t s = 0; s < S; ++s) {
    auto* st = pipe->add_stages();
    st->add_devices(s);
    st->set_layer_begin(s);
    st->set_layer_end(s + 1 == S ? TheWorld().model.num_layers() : s + 1);
  }
  return plan;
}

// The passes of a rank's list: "F0 F1 B0 ..." (consecutive compute operations of one pass are one step).
std::string Steps(const RankOps& r) {
  std::string out;
  const Op* last = nullptr;
  for (const Op& op : r.ops) {
    if (op.kind != OpKind::kCompute || op.category == Category::kOptimizer) {
      if (op.kind != OpKind::kCollective) last = nullptr;
      continue;
    }
    if (last != nullptr && last->category == op.category && last->micro_batch == op.micro_batch) continue;
    last = &op;
    if (!out.empty()) out += ' ';
    out += (op.category == Category::kForward ? 'F' : 'B') + std::to_string(op.micro_batch);
  }
  return out;
}

std::string StageSteps(proto::Plan::Schedule sched, uint32_t stage, uint32_t stages, uint32_t m) {
  const auto plan = Chain(stages, m, sched);
  const Lowering l = Lower(plan, TrainingFor(plan));
  return Steps(l.ranks.at(l.device_slot.at(stage)));
}

TEST(LoweringSchedule, OneFOneBWarmUpSteadyCoolDown) {
  constexpr auto k1F1B = proto::Plan::SCHEDULE_1F1B;
  // 4 stages, 6 micro-batches: stage s warms up with min(3 − s, 6) forwards.
  EXPECT_EQ(StageSteps(k1F1B, 0, 4, 6), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(StageSteps(k1F1B, 1, 4, 6), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(StageSteps(k1F1B, 3, 4, 6), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the warm-up is capped at m.
  EXPECT_EQ(StageSteps(k1F1B, 0, 4, 2), "F0 F1 B0 B1");
  EXPECT_EQ(StageSteps(k1F1B, 0, 1, 3), "F0 B0 F1 B1 F2 B2");
}

TEST(LoweringSchedule, GPipeRunsAllForwardsFirst) {
  EXPECT_EQ(StageSteps(proto::Plan::SCHEDULE_GPIPE, 2, 4, 3), "F0 F1 F2 B0 B1 B2");
}

TEST(LoweringSchedule, EveryMicroBatchRunsForwardThenBackwardOnce) {
  for (auto sched : {proto::Plan::SCHEDULE_1F1B, proto::Plan::SCHEDULE_GPIPE}) {
    for (uint32_t stages = 1; stages <= 6; ++stages) {
      for (uint32_t m = 1; m <= 9; ++m) {
        const auto plan = Chain(stages, m, sched);
        const Lowering l = Lower(plan, TrainingFor(plan));
        for (uint32_t s = 0; s < stages; ++s) {
          const std::string steps = Steps(l.ranks.at(l.device_slot.at(s)));
          std::vector<int> seen(m, 0);
          int in_flight = 0, peak = 0, count = 0;
          for (size_t i = 0; i < steps.size(); i = steps.find(' ', i) == std::string::npos ? steps.size() : steps.find(' ', i) + 1) {
            const bool fwd = steps[i] == 'F';
            int& state = seen[static_cast<size_t>(std::stoi(steps.substr(i + 1)))];
            ASSERT_EQ(state, fwd ? 0 : 1) << steps;
            ++state;
            ++count;
            peak = std::max(peak, in_flight += fwd ? 1 : -1);
          }
          EXPECT_EQ(count, static_cast<int>(2 * m)) << steps;
          // 1F1B keeps at most min(S − s, m) micro-batches in flight (the memory model's assumption).
          if (sched == proto::Plan::SCHEDULE_1F1B) {
            EXPECT_EQ(static_cast<uint32_t>(peak), std::min(stages - s, m));
          }
        }
      }
    }
  }
}

// Interleaved 1F1B posts each pass's input receive ahead as Megatron-LM's overlap_p2p_comm does: right after
// the previous pass of the same direction (with its send), the first backward's at the end of the warm-up,
// and completes it where the pass starts. S = 2, v = 2, m = 4: 8 chunk passes each way per stage.
TEST(LoweringSchedule, InterleavedPostsReceivesAfterThePreviousPassOfTheirDirection) {
  auto plan = Chain(2, 4, proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
  plan.set_virtual_stages(2);
  plan.mutable_pipelines(0)->mutable_stages(0)->set_layer_end(3);
  plan.mutable_pipelines(0)->mutable_stages(1)->set_layer_begin(3);
  const Lowering l = Lower(plan, TrainingFor(plan));
  // Stage 0 receives the forward input of its second chunk (4 passes: none is its first forward, so all 4
  // are posted ahead) and every backward's gradient (8); its warm-up (2·1 + 1·2 = 4 of 8 passes) ends
  // before the steady state, so the first backward's is posted too: 12 posts. Stage 1 receives every
  // forward input (8; the first is not posted ahead) and the gradients of its first chunk (4, none of
  // them its first backward): 7 + 4 = 11.
  for (const auto& [stage, posts] : {std::pair{0u, 12}, std::pair{1u, 11}}) {
    const RankOps& r = l.ranks.at(l.device_slot.at(stage));
    int posted = 0, received = 0;
    for (size_t i = 0; i < r.ops.size(); ++i) {
      const Op& op = r.ops[i];
      if (op.kind == OpKind::kRecv) ++received;
      if (op.kind != OpKind::kPostRecv) continue;
      ++posted;
      // Posted right after a pass (its compute, or its send where it sends), or after the post of the
      // warm-up's last forward, and completed by a receive of the same message before the next pass of
      // its direction.
      ASSERT_GT(i, 0u);
      const OpKind before = r.ops[i - 1].kind;
      EXPECT_TRUE(before == OpKind::kSend || before == OpKind::kCompute || before == OpKind::kPostRecv)
          << "stage " << stage << " op " << i;
      size_t j = i + 1;
      while (j < r.ops.size() && !(r.ops[j].kind == OpKind::kRecv && r.ops[j].channel == op.channel)) ++j;
      ASSERT_LT(j, r.ops.size());
      EXPECT_EQ(r.ops[j].peer, op.peer);
      EXPECT_EQ(r.ops[j].micro_batch, op.micro_batch);
      EXPECT_EQ(r.ops[j].bytes, op.bytes);
      const Category dir = op.channel == kChanPpForward ? Category::kForward : Category::kBackward;
      for (size_t k = i + 1; k < j; ++k) {
        EXPECT_FALSE(r.ops[k].kind == OpKind::kCompute && r.ops[k].category == dir) << "stage " << stage;
      }
    }
    EXPECT_EQ(posted, posts) << "stage " << stage;
    EXPECT_EQ(received, 12) << "stage " << stage;
  }
  // The other schedules post nothing ahead (Megatron-LM turns overlap_p2p_comm off for them).
  const auto chain = Chain(2, 4, proto::Plan::SCHEDULE_1F1B);
  for (const RankOps& r : Lower(chain, TrainingFor(chain)).ranks) {
    EXPECT_EQ(std::count_if(r.ops.begin(), r.ops.end(), [](const Op& op) { return op.kind == OpKind::kPostRecv; }), 0);
  }
}

// One stage of TP 2 over all of llama-tiny, `m` micro-batches of 2 sequences.
proto::Plan OneTp2Stage(uint32_t m) {
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(2);
  pipe->set_num_micro_batches(m);
  auto* st = pipe->add_stages();
  st->add_devices(0);
  st->add_devices(1);
  st->set_tp_degree(2);
  st->set_layer_end(6);
  return plan;
}

TEST(LoweringTp, EachLayerKindIssuesMegatronsCollectives) {
  // One stage of TP 2 over all of llama-tiny, one micro-batch of 2 sequences of 16 tokens, bf16:
  // activations A = 2·16·256·2 bytes = 16,384. Forward: embedding 1 × A, 4 blocks × 2 × A, head a max of
  // 2·16·4 = 128 bytes and a sum of 256 bytes. Backward: head 1 × A, blocks 2 × A each, embedding none.
  const proto::Plan plan = OneTp2Stage(1);
  for (bool recompute : {false, true}) {
    const auto tr = TrainingFor(plan, recompute ? proto::RECOMPUTE_FULL : proto::RECOMPUTE_NONE);
    const Lowering l = Lower(plan, tr);
    std::vector<double> fwd, bwd;
    bool forward = true;  // the pass of the last compute operation
    for (const Op& op : l.ranks[0].ops) {
      if (op.kind == OpKind::kCompute) forward = op.category == Category::kForward;
      if (op.kind != OpKind::kCollective || op.category != Category::kTp) continue;
      EXPECT_TRUE(op.in_pass);
      EXPECT_EQ(l.groups[op.group], (std::vector<uint32_t>{0, 1}));
      (forward ? fwd : bwd).push_back(op.bytes);
    }
    const double A = 16384;
    std::vector<double> want_fwd = {A, A, A, A, A, A, A, A, A, 128, 256};
    std::vector<double> want_bwd = {A};  // head
    for (int b = 0; b < 4; ++b) {
      if (recompute) want_bwd.insert(want_bwd.end(), {A, A});  // the block's forward again
      want_bwd.insert(want_bwd.end(), {A, A});
    }
    EXPECT_EQ(fwd, want_fwd) << "recompute " << recompute;
    EXPECT_EQ(bwd, want_bwd) << "recompute " << recompute;
  }
}

// Device 0's TP collectives of `l` by pass: kind, bytes and whether they run behind the backward's GEMMs.
struct TpCall {
  CollectiveKind kind;
  double bytes;
  bool hidden;
  bool operator==(const TpCall& o) const { return kind == o.kind && bytes == o.bytes && hidden == o.hidden; }
};
struct TpCalls {
  std::vector<TpCall> fwd, bwd, after;
};
TpCalls CallsOf(const Lowering& l) {
  TpCalls out;
  bool forward = true, passes_done = false;
  for (const Op& op : l.ranks[0].ops) {
    if (op.kind == OpKind::kCompute) forward = op.category == Category::kForward;
    if (op.kind == OpKind::kWaitSends) passes_done = true;
    if (op.kind != OpKind::kCollective || op.category != Category::kTp) continue;
    EXPECT_EQ(op.in_pass, !passes_done);
    (passes_done ? out.after : forward ? out.fwd : out.bwd).push_back({op.collective, op.bytes, op.hide_share > 0});
  }
  return out;
}

TEST(LoweringTp, SequenceParallelismSplitsEachAllReduceIntoAGatherAndAScatter) {
  // The plan above with sequence parallelism (A = 16,384 bytes, llama-tiny's hidden 256, bf16). Forward:
  // embedding reduce-scatter; per block all-gather, reduce-scatter, all-gather, reduce-scatter; head
  // all-gather, then the max (128 bytes) and sum (256) all-reduces. Backward: the head's column-parallel
  // backward (its input gathered again, its dgrad reduce-scattered, both behind its GEMMs); per block, the MLP
  // down projection's gradient gathered (exposed), the up projection's input gathered and dgrad
  // reduce-scattered (hidden), the attention output's gradient gathered (exposed), QKV's input and dgrad
  // (hidden); embedding all-gather. Then one all-reduce of the norms' gradients: 4 blocks × 2 norms × 256 +
  // the final norm's 256 = 2,304 parameters × 2 bytes = 4,608 bytes.
  proto::Plan plan = OneTp2Stage(1);
  plan.set_sequence_parallel(true);
  const TpCalls calls = CallsOf(Lower(plan, TrainingFor(plan)));
  using K = CollectiveKind;
  const double A = 16384;
  std::vector<TpCall> want_fwd = {{K::kReduceScatter, A, false}};
  std::vector<TpCall> want_bwd = {{K::kAllGather, A, true}, {K::kReduceScatter, A, true}};
  for (int b = 0; b < 4; ++b) {
    want_fwd.insert(want_fwd.end(), {{K::kAllGather, A, false}, {K::kReduceScatter, A, false},
                                     {K::kAllGather, A, false}, {K::kReduceScatter, A, false}});
    want_bwd.insert(want_bwd.end(), {{K::kAllGather, A, false}, {K::kAllGather, A, true}, {K::kReduceScatter, A, true},
                                     {K::kAllGather, A, false}, {K::kAllGather, A, true}, {K::kReduceScatter, A, true}});
  }
  want_fwd.insert(want_fwd.end(), {{K::kAllGather, A, false}, {K::kAllReduce, 128, false}, {K::kAllReduce, 256, false}});
  want_bwd.push_back({K::kAllGather, A, false});
  EXPECT_EQ(calls.fwd, want_fwd);
  EXPECT_EQ(calls.bwd, want_bwd);
  EXPECT_EQ(calls.after, (std::vector<TpCall>{{K::kAllReduce, 4608, false}}));
}

TEST(LoweringTp, Fp8GathersTheBlocksTensorsInOneByteAndHidesTheBackwardsColumnParallelCalls) {
  // Transformer Engine's FP8: a block's all-gathers (forward inputs of QKV and the MLP, backward output
  // gradients and re-gathered inputs) move one byte an element, A/2 = 8,192; reduce-scatters stay at A; the
  // embedding's and the head's calls (Megatron's own layers) stay at A.
  proto::Plan plan = OneTp2Stage(1);
  plan.set_sequence_parallel(true);
  proto::Training tr = TrainingFor(plan);
  tr.set_dtype(proto::DTYPE_FP8);
  const TpCalls calls = CallsOf(Lower(plan, tr));
  using K = CollectiveKind;
  const double A = 16384, G = 8192;
  std::vector<TpCall> want_bwd = {{K::kAllGather, A, true}, {K::kReduceScatter, A, true}};
  for (int b = 0; b < 4; ++b) {
    want_bwd.insert(want_bwd.end(), {{K::kAllGather, G, false}, {K::kAllGather, G, true}, {K::kReduceScatter, A, true},
                                     {K::kAllGather, G, false}, {K::kAllGather, G, true}, {K::kReduceScatter, A, true}});
  }
  want_bwd.push_back({K::kAllGather, A, false});
  EXPECT_EQ(calls.bwd, want_bwd);
  ASSERT_EQ(calls.fwd.size(), 1u + 4 * 4 + 3);
  EXPECT_EQ(calls.fwd[1], (TpCall{K::kAllGather, G, false}));
  EXPECT_EQ(calls.fwd[2], (TpCall{K::kReduceScatter, A, false}));
  EXPECT_EQ(calls.fwd[17], (TpCall{K::kAllGather, A, false}));  // the head's
}

TEST(LoweringTp, WithoutSequenceParallelismTheDgradAllReducesHideUnlessTheStackBlocks) {
  // No SP: each block's two backward all-reduces (the MLP up projection's and QKV's dgrad) and the head's
  // run behind the wgrad GEMMs; comm.tp_backward_blocking (Megatron-DeepSpeed, Megatron-LM of 2021) keeps
  // them exposed. The share recorded is the GEMM's FLOPs over the block's backward compute: llama-tiny
  // (h 256, 4 KV heads of 32, SwiGLU FFN 688), 2 sequences of 16 tokens, TP 2: QKV 256·256 + 2·256·128 =
  // 131,072 weights, up projection 2·256·688 = 352,256; a GEMM 2·32·weights/2 FLOPs; the block's backward
  // 2·(2·32·724,992 + 4·2·16²·256)/2 FLOPs (BlockMatmulParams 724,992).
  proto::Plan plan = OneTp2Stage(1);
  for (bool blocking : {false, true}) {
    plan.mutable_comm()->set_tp_backward_blocking(blocking);
    const Lowering l = Lower(plan, TrainingFor(plan));
    const double block_bwd = 2 * (2 * 32 * 724992.0 + 4 * 2 * 16 * 16 * 256.0) / 2;
    std::vector<double> shares;
    bool forward = true;
    for (const Op& op : l.ranks[0].ops) {
      if (op.kind == OpKind::kCompute) forward = op.category == Category::kForward;
      if (op.kind == OpKind::kCollective && op.category == Category::kTp && op.in_pass && !forward &&
          op.layer_begin >= 1 && op.layer_begin <= 4) {
        shares.push_back(op.hide_share);
      }
    }
    ASSERT_EQ(shares.size(), 8u);
    for (size_t i = 0; i < shares.size(); ++i) {
      const double want = blocking ? 0 : 2 * 32 * (i % 2 == 0 ? 352256.0 : 131072.0) / 2 / block_bwd;
      EXPECT_NEAR(shares[i], want, 1e-6) << "blocking " << blocking << " call " << i;
    }
  }
}

TEST(LoweringTp, FusedPassesMoveTheSameBytesInOneCollective) {
  const proto::Plan plan = OneTp2Stage(3);
  const auto tr = TrainingFor(plan);
  LoweringOptions fused;
  fused.fuse_passes = true;
  const Lowering a = Lower(plan, tr), b = Lower(plan, tr, fused);
  const OpTotals ta = TotalOps(a), tb = TotalOps(b);
  EXPECT_DOUBLE_EQ(ta.flops, tb.flops);
  EXPECT_DOUBLE_EQ(ta.collective_bytes[static_cast<int>(Category::kTp)],
                   tb.collective_bytes[static_cast<int>(Category::kTp)]);
  // Fused: per micro-batch one forward and one backward compute, each followed by one TP all-reduce.
  size_t compute = 0, tp = 0;
  for (const Op& op : b.ranks[0].ops) {
    compute += op.kind == OpKind::kCompute && op.category != Category::kOptimizer;
    tp += op.kind == OpKind::kCollective && op.category == Category::kTp;
  }
  EXPECT_EQ(compute, 6u);
  EXPECT_EQ(tp, 6u);
  // Each fused all-reduce stands for the calls it replaced (their fixed costs are still paid): per micro-batch
  // forward: embedding 1 + 4 blocks × 2 + head 2 (max and sum) = 11; backward: 4 × 2 + head 1 = 9.
  uint32_t unfused_calls = 0, fused_calls = 0;
  for (const Op& op : a.ranks[0].ops) unfused_calls += op.kind == OpKind::kCollective && op.category == Category::kTp;
  for (const Op& op : b.ranks[0].ops) {
    if (op.kind == OpKind::kCollective && op.category == Category::kTp) fused_calls += op.calls;
  }
  EXPECT_EQ(unfused_calls, 3u * (11 + 9));
  EXPECT_EQ(fused_calls, unfused_calls);
}

TEST(LoweringPp, ScatterGatherSendsATpShareAndAllGathers) {
  // Two stages of TP 2 (devices 0,1 then 2,3). Without scatter-gather each receiving TP rank gets the whole
  // b·s·h boundary tensor from its peer; with it, 1/2 each, and the receiving pair all-gathers the halves.
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(2);
  pipe->set_num_micro_batches(1);
  for (uint32_t s = 0; s < 2; ++s) {
    auto* st = pipe->add_stages();
    st->add_devices(2 * s);
    st->add_devices(2 * s + 1);
    st->set_tp_degree(2);
    st->set_layer_begin(s == 0 ? 0 : 3);
    st->set_layer_end(s == 0 ? 3 : 6);
  }
  const auto tr = TrainingFor(plan);
  const double tensor = 2.0 * 16 * TheWorld().model.spec().hidden_size() * 2;  // b·s·h bf16
  auto pp_recv_bytes = [&](const Lowering& l, uint32_t rank, size_t* gathers) {
    double bytes = 0;
    *gathers = 0;
    for (const Op& op : l.ranks[rank].ops) {
      if (op.kind == OpKind::kRecv && op.category == Category::kPp) bytes += op.bytes;
      if (op.kind == OpKind::kCollective && op.category == Category::kPp) {
        EXPECT_EQ(op.collective, CollectiveKind::kAllGather);
        EXPECT_DOUBLE_EQ(op.bytes, tensor);
        ++*gathers;
      }
    }
    return bytes;
  };
  size_t gathers = 0;
  const Lowering whole = Lower(plan, tr);
  EXPECT_DOUBLE_EQ(pp_recv_bytes(whole, 2, &gathers), tensor);  // stage 1, TP rank 0: the forward tensor
  EXPECT_EQ(gathers, 0u);
  plan.mutable_comm()->set_pp_scatter_gather(true);
  const Lowering split = Lower(plan, tr);
  EXPECT_DOUBLE_EQ(pp_recv_bytes(split, 2, &gathers), tensor / 2);
  EXPECT_EQ(gathers, 1u);
  EXPECT_DOUBLE_EQ(pp_recv_bytes(split, 1, &gathers), tensor / 2);  // stage 0 receives the gradient
  EXPECT_EQ(gathers, 1u);
  // Sequence parallelism: the boundary tensor is already split by sequence, 1/2 each and no all-gather.
  plan.mutable_comm()->set_pp_scatter_gather(false);
  plan.set_sequence_parallel(true);
  const Lowering sp = Lower(plan, tr);
  EXPECT_DOUBLE_EQ(pp_recv_bytes(sp, 2, &gathers), tensor / 2);
  EXPECT_EQ(gathers, 0u);
}

// ---- conservation over random plans ----------------------------------------------------------------

// A random valid plan on the eight GPUs: 1-2 pipelines, 1-3 stages each, TP and intra-stage DP of 1 or
// 2, uneven layer splits and micro-batch splits, any schedule, ZeRO 0-2, buckets, overlap, algorithms.
proto::Plan RandomPlan(std::mt19937& gen) {
  auto pick = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(gen); };
  const uint32_t L = TheWorld().model.num_layers();
  proto::Plan plan;
  const uint32_t pipes = pick(1, 2);
  uint32_t next_device = 0;
  for (uint32_t p = 0; p < pipes; ++p) {
    auto* pipe = plan.add_pipelines();
    const uint32_t S = pick(1, 3);
    pipe->set_num_micro_batches(pick(1, 5));
    std::vector<uint32_t> cuts = {0};
    for (uint32_t s = 1; s < S; ++s) cuts.push_back(pick(cuts.back() + 1, L - (S - s)));
    cuts.push_back(L);
    uint32_t mbs = 0;
    std::vector<uint32_t> dps;
    for (uint32_t s = 0; s < S; ++s) dps.push_back(pick(1, 2));
    mbs = pick(*std::max_element(dps.begin(), dps.end()), 5);
    pipe->set_micro_batch_size(mbs);
    for (uint32_t s = 0; s < S; ++s) {
      auto* st = pipe->add_stages();
      const uint32_t t = pick(1, 2), dp = dps[s];
      if (next_device + t * dp > 8) return RandomPlan(gen);
      for (uint32_t i = 0; i < t * dp; ++i) st->add_devices(next_device++);
      st->set_tp_degree(t);
      st->set_layer_begin(cuts[s]);
      st->set_layer_end(cuts[s + 1]);
      if (dp == 2 && pick(0, 1)) {
        const uint32_t first = pick(1, mbs - 1);
        st->add_micro_batch_split(first);
        st->add_micro_batch_split(mbs - first);
      }
    }
  }
  const uint32_t sched = pick(0, 2);
  plan.set_schedule(sched == 0 ? proto::Plan::SCHEDULE_1F1B
                               : sched == 1 ? proto::Plan::SCHEDULE_GPIPE : proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
  if (sched == 2) plan.set_virtual_stages(2);
  plan.set_zero_stage(pick(0, 2));
  plan.mutable_comm()->set_dp_overlap(pick(0, 1));
  plan.mutable_comm()->set_dp_bucket_mib(pick(0, 1) ? 1 : 0);
  plan.mutable_comm()->set_dp_algorithm(pick(0, 1) ? proto::CommOptions::ALGORITHM_HIERARCHICAL
                                                   : proto::CommOptions::ALGORITHM_RING);
  plan.mutable_comm()->set_pp_leader_broadcast(pick(0, 3) == 0);
  return plan;
}

TEST(LoweringProperty, RandomPlansConserveFlopsAndBytes) {
  std::mt19937 gen(20261122);
  const auto& w = TheWorld();
  const uint32_t L = w.model.num_layers();
  int checked = 0;
  for (int trial = 0; trial < 400 && checked < 120; ++trial) {
    const proto::Plan plan = RandomPlan(gen);
    const auto recompute = gen() % 2 ? proto::RECOMPUTE_FULL : proto::RECOMPUTE_NONE;
    const proto::Training tr = TrainingFor(plan, recompute);
    const PlanContext ctx{w.cluster, w.model, tr};
    if (!ValidatePlanStructure(plan, ctx, "random").ok()) continue;
    auto lowered = LowerPlan(plan, ctx);
    ASSERT_TRUE(lowered.ok()) << lowered.status().message() << "\n" << MessageToYaml(plan);
    const OpTotals totals = TotalOps(*lowered);
    ++checked;
    const double seq = tr.seq_len(), h = w.model.spec().hidden_size(), dt = 2;  // bf16
    // FLOPs: every sequence of every pipeline runs every layer forward and backward once (FLOPs are linear
    // in the batch; TP ranks each do 1/t), and under full recomputation every block's forward again.
    double flops = 0, pp = 0, tp = 0;
    for (const auto& pipe : plan.pipelines()) {
      const double seqs = double(pipe.micro_batch_size()) * pipe.num_micro_batches();
      for (uint32_t l = 0; l < L; ++l) {
        flops += seqs * (w.model.ForwardFlops(l, 1, tr.seq_len()) + w.model.BackwardFlops(l, 1, tr.seq_len()));
        if (recompute == proto::RECOMPUTE_FULL && l > 0 && l + 1 < L) flops += seqs * w.model.ForwardFlops(l, 1, tr.seq_len());
      }
      // PP: across each boundary every sequence's activations reach every receiving TP rank (or only TP
      // rank 0 with leader broadcast) forward, and its gradients every sending TP rank backward. With the
      // interleaved schedule the last stage also hands chunks back to the first (v − 1 times per sequence).
      const int S = pipe.stages_size();
      const double v = plan.schedule() == proto::Plan::SCHEDULE_INTERLEAVED_1F1B ? 2 : 1;
      const bool leader = plan.comm().pp_leader_broadcast();
      for (int s = 0; s + 1 < S || (v > 1 && S > 1 && s + 1 == S); ++s) {
        const auto& a = pipe.stages(s);
        const auto& b = pipe.stages((s + 1) % S);
        const double times = s + 1 < S ? v : v - 1;
        pp += times * seqs * seq * h * dt * ((leader ? 1 : TpDegree(b)) + (leader ? 1 : TpDegree(a)));
      }
      // TP: per sequence and TP rank, forward 1 (embedding) + 2 per block, head 4 + 8 bytes per token;
      // backward 1 (head) + 2 per block; recomputation 2 more per block.
      for (const auto& st : pipe.stages()) {
        const uint32_t t = TpDegree(st);
        if (t < 2) continue;
        const double per_seq_rank = seq * h * dt;
        double per_seq = 0;
        for (uint32_t l = st.layer_begin(); l < st.layer_end(); ++l) {
          if (l == 0) per_seq += per_seq_rank;
          else if (l + 1 == L) per_seq += 12 * seq + per_seq_rank;
          else per_seq += (recompute == proto::RECOMPUTE_FULL ? 6 : 4) * per_seq_rank;
        }
        tp += seqs * t * per_seq;
      }
    }
    EXPECT_NEAR(totals.flops, flops, 1e-9 * flops) << MessageToYaml(plan);
    EXPECT_DOUBLE_EQ(totals.send_bytes, totals.recv_bytes) << MessageToYaml(plan);
    EXPECT_NEAR(totals.send_bytes, pp, 1e-9 * (pp + 1)) << MessageToYaml(plan);
    EXPECT_NEAR(totals.collective_bytes[static_cast<int>(Category::kTp)], tp, 1e-9 * (tp + 1)) << MessageToYaml(plan);
    // DP: every member of every gradient group syncs the group's parameters once (buckets split them,
    // hierarchical algorithms move them in three collectives: S + S/c + S within and across nodes).
    double dp = 0;
    for (const auto& g : lowered->sync_groups) {
      if (g.devices.size() < 2) continue;
      double params = 0;
      for (uint32_t l = g.layer_begin; l < g.layer_end; ++l) params += w.model.ParamsPerRank(l, g.num_chunks, g.layer_begin != 0);
      double per_member = params * dt;
      if (plan.zero_stage() == 0 && plan.comm().dp_algorithm() == proto::CommOptions::ALGORITHM_HIERARCHICAL) {
        std::map<uint32_t, uint32_t> per_node;
        for (uint32_t d : g.devices) per_node[w.cluster.device(d).node]++;
        const uint32_t c = per_node.begin()->second;
        bool uniform = per_node.size() > 1 && c > 1;
        for (const auto& [node, n] : per_node) uniform &= n == c;
        if (uniform) per_member *= 2 + 1.0 / c;
      }
      dp += per_member * g.devices.size();
    }
    EXPECT_NEAR(totals.collective_bytes[static_cast<int>(Category::kDp)], dp, 1e-9 * (dp + 1)) << MessageToYaml(plan);
    // Every rank ends with exactly one optimizer step, after one wait for its sends.
    for (const auto& r : lowered->ranks) {
      EXPECT_EQ(std::count_if(r.ops.begin(), r.ops.end(), [](const Op& op) { return op.category == Category::kOptimizer; }), 1);
      EXPECT_EQ(std::count_if(r.ops.begin(), r.ops.end(), [](const Op& op) { return op.kind == OpKind::kWaitSends; }), 1);
    }
  }
  EXPECT_GE(checked, 100);
}

// LoweringOptions::lower_devices and skeletons (sim folding): the ranks lowered get exactly the
// operations of a full lowering, the others none, and the collective groups come out the same and in the
// same order; a skeleton is one pass of each kind with the full list's gradient sync at its end.
// Two pipelines of two single-device stages (devices 0-1 and 2-3): [emb, b1, b2 | b3, b4, head], m = 2.
proto::Plan TwoReplicasOfTwoStages() {
  proto::Plan plan;
  for (uint32_t p = 0; p < 2; ++p) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(2);
    for (uint32_t s = 0; s < 2; ++s) {
      auto* st = pipe->add_stages();
      st->add_devices(2 * p + s);
      st->set_layer_begin(s == 0 ? 0 : 3);
      st->set_layer_end(s == 0 ? 3 : TheWorld().model.num_layers());
    }
  }
  return plan;
}

TEST(LoweringGroups, OverlappedGradientSyncHasGroupsOfItsOwn) {
  // Two single-device stages replicated twice, ZeRO-2: each stage's parameter gathers after the step (on the
  // passes' stream) and its gradient reduce-scatters (on the DP stream under dp_overlap) have the same
  // members. The two streams run side by side, so their collectives must not share a group id (consumers
  // match a group's calls in order); without dp_overlap both are on one stream and share it.
  for (const bool overlap : {false, true}) {
    proto::Plan plan = TwoReplicasOfTwoStages();
    plan.set_zero_stage(2);
    plan.mutable_comm()->set_dp_overlap(overlap);
    const Lowering l = Lower(plan, TrainingFor(plan));
    const RankOps& r = l.ranks.at(l.device_slot.at(0));
    std::set<uint32_t> gathers, syncs;
    for (const auto* list : {&r.ops, &r.dp_stream}) {
      for (const Op& op : *list) {
        if (op.kind != OpKind::kCollective) continue;
        if (op.category == Category::kZero) gathers.insert(op.group);
        if (op.category == Category::kDp) syncs.insert(op.group);
      }
    }
    ASSERT_FALSE(gathers.empty());
    ASSERT_FALSE(syncs.empty());
    for (uint32_t g : syncs) {
      EXPECT_EQ(l.groups.at(g), (std::vector<uint32_t>{0, 2}));
      EXPECT_EQ(gathers.count(g), overlap ? 0u : 1u) << "dp_overlap " << overlap;
    }
  }
}

// comm.param_gather_overlap (Megatron-LM's --overlap-param-gather): ZeRO-1's parameter all-gathers leave the
// end of the main stream and open the DP stream, one per dp_bucket_mib bucket cut at layer boundaries, each
// followed by a signal that the first forward over its layers awaits.
TEST(LoweringGroups, OverlappedParameterGathersOpenTheDpStreamAndGateTheFirstForward) {
  proto::Plan plan = TwoReplicasOfTwoStages();
  plan.set_zero_stage(1);
  plan.mutable_comm()->set_dp_overlap(true);
  plan.mutable_comm()->set_param_gather_overlap(true);
  plan.mutable_comm()->set_dp_bucket_mib(0.1);  // 104,858 bytes: more buckets than layers, so one per layer
  const Lowering l = Lower(plan, TrainingFor(plan));
  const RankOps& r = l.ranks.at(l.device_slot.at(0));  // stage 0: the embedding and blocks 1-2
  // DP stream: all-gathers of layer 0 (262,144 bf16 parameters), 1 and 2 (725,504 each), each signalled;
  // then the gradient sync as before (it starts with its await).
  const std::vector<std::pair<uint32_t, double>> pieces = {{0, 524288}, {1, 1451008}, {2, 1451008}};
  ASSERT_GE(r.dp_stream.size(), 2 * pieces.size() + 1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Op& ag = r.dp_stream[2 * i];
    EXPECT_EQ(ag.kind, OpKind::kCollective);
    EXPECT_EQ(ag.collective, CollectiveKind::kAllGather);
    EXPECT_EQ(ag.category, Category::kZero);
    EXPECT_EQ(ag.layer_begin, pieces[i].first);
    EXPECT_EQ(ag.layer_end, pieces[i].first + 1);
    EXPECT_DOUBLE_EQ(ag.bytes, pieces[i].second);
    EXPECT_EQ(l.groups.at(ag.group), (std::vector<uint32_t>{0, 2}));
    EXPECT_EQ(r.dp_stream[2 * i + 1].kind, OpKind::kSignal);
  }
  EXPECT_EQ(r.dp_stream[2 * pieces.size()].kind, OpKind::kAwait);
  // Main stream: no all-gather after the step; three awaits, each right before its layer's first forward
  // (micro-batch 0), none later.
  std::vector<uint32_t> awaited;
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const Op& op = r.ops[i];
    EXPECT_FALSE(op.kind == OpKind::kCollective && op.category == Category::kZero);
    if (op.kind != OpKind::kAwait) continue;
    ASSERT_LT(i + 1, r.ops.size());
    const Op& next = r.ops[i + 1];
    EXPECT_EQ(next.kind, OpKind::kCompute);
    EXPECT_EQ(next.category, Category::kForward);
    EXPECT_EQ(next.micro_batch, 0);
    awaited.push_back(next.layer_begin);
  }
  EXPECT_EQ(awaited, (std::vector<uint32_t>{0, 1, 2}));
}

TEST(LoweringPartial, LeftOutRanksGetNoOperationsAndTheSameGroups) {
  for (const auto schedule : {proto::Plan::SCHEDULE_1F1B, proto::Plan::SCHEDULE_INTERLEAVED_1F1B}) {
    proto::Plan plan;
    plan.set_schedule(schedule);
    if (schedule == proto::Plan::SCHEDULE_INTERLEAVED_1F1B) plan.set_virtual_stages(2);
    plan.mutable_comm()->set_dp_overlap(true);
    for (uint32_t p = 0; p < 2; ++p) {
      auto* pipe = plan.add_pipelines();
      pipe->set_micro_batch_size(1);
      pipe->set_num_micro_batches(4);
      for (uint32_t s = 0; s < 2; ++s) {
        auto* st = pipe->add_stages();
        st->add_devices(4 * p + 2 * s);
        st->add_devices(4 * p + 2 * s + 1);
        st->set_tp_degree(2);
        st->set_layer_begin(s == 0 ? 0 : 3);
        st->set_layer_end(s == 0 ? 3 : TheWorld().model.num_layers());
      }
    }
    const auto training = TrainingFor(plan);
    const Lowering full = Lower(plan, training);
    LoweringOptions lo;
    lo.lower_devices.assign(TheWorld().cluster.num_devices(), false);
    lo.lower_devices[0] = lo.lower_devices[2] = true;
    lo.skeletons = true;
    const Lowering part = Lower(plan, training, lo);
    EXPECT_TRUE(part.partial);
    EXPECT_FALSE(full.partial);
    EXPECT_EQ(part.groups, full.groups);
    ASSERT_EQ(part.ranks.size(), full.ranks.size());
    for (size_t i = 0; i < part.ranks.size(); ++i) {
      const auto& a = part.ranks[i];
      const auto& b = full.ranks[i];
      EXPECT_EQ(a.num_stages, 2u);
      EXPECT_EQ(a.num_micro_batches, 4u);
      if (a.device == 0 || a.device == 2) {
        ASSERT_EQ(a.ops.size(), b.ops.size()) << a.device;
        ASSERT_EQ(a.dp_stream.size(), b.dp_stream.size()) << a.device;
        for (size_t k = 0; k < a.ops.size(); ++k) {
          EXPECT_EQ(FormatOp(part, a.device, "main", k, a.ops[k]), FormatOp(full, b.device, "main", k, b.ops[k]));
        }
        for (size_t k = 0; k < a.dp_stream.size(); ++k) {
          EXPECT_EQ(FormatOp(part, a.device, "dp", k, a.dp_stream[k]), FormatOp(full, b.device, "dp", k, b.dp_stream[k]));
        }
      } else {
        EXPECT_TRUE(a.ops.empty() && a.dp_stream.empty()) << a.device;
      }
      EXPECT_TRUE(b.skeleton.empty());
      ASSERT_FALSE(a.skeleton.empty());
      EXPECT_LT(a.skeleton.size(), b.ops.size() + b.dp_stream.size());
      // The skeleton ends as the full lists do: the optimizer step after the (overlapped) gradient sync.
      EXPECT_EQ(a.skeleton.back().category, Category::kOptimizer);
      size_t dp_ops = 0;
      for (const Op& op : a.skeleton) dp_ops += op.category == Category::kDp ? 1 : 0;
      EXPECT_EQ(dp_ops, static_cast<size_t>(std::count_if(b.dp_stream.begin(), b.dp_stream.end(), [](const Op& op) {
                          return op.category == Category::kDp;
                        })));
    }
  }
}

}  // namespace
}  // namespace hetsim::models
