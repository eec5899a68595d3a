// Context parallelism (ring attention) and DeepSpeed-Ulysses in the plan format, the lowering, the kernel
// model and the memory estimate. Every expectation is derived by hand in the comment above it for
// llama-tiny (4 blocks, d_model 256, 8 query heads / 4 KV heads of dimension 32, vocabulary 1024; layers
// 0 embedding, 1-4 blocks, 5 head), bf16 (2 bytes per element), flash attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "models/kernels.h"
#include "models/lowering.h"
#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "tests/common/specs.h"
#include "tests/common/text_checks.h"

namespace hetsim::models {
namespace {

using testing_util::Has;

using testing_util::kGib;

using testing_util::TheWorld;

using testing_util::PlanFrom;

proto::Training Training(const proto::Plan& plan, uint32_t seq_len, proto::Recompute recompute = proto::RECOMPUTE_NONE,
                         proto::Attention attention = proto::ATTENTION_FLASH) {
  uint32_t batch = 0;
  for (const auto& p : plan.pipelines()) batch += p.micro_batch_size() * p.num_micro_batches();
  proto::Training t;
  t.set_global_batch_size(batch);
  t.set_seq_len(seq_len);
  t.set_recompute(recompute);
  t.set_attention(attention);
  auto r = ResolveTraining(t, TheWorld().model, "t");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

Lowering LowerCp(const proto::Plan& plan, const proto::Training& tr, bool fuse = false) {
  const PlanContext ctx{TheWorld().cluster, TheWorld().model, tr};
  const Status v = ValidatePlanStructure(plan, ctx, "cp-plan.yaml");
  EXPECT_TRUE(v.ok()) << v.message();
  LoweringOptions o;
  o.fuse_passes = fuse;
  auto l = LowerPlan(plan, ctx, o);
  EXPECT_TRUE(l.ok()) << l.status().message();
  return std::move(l).value();
}

const RankOps& RankOf(const Lowering& l, uint32_t device) { return l.ranks[l.device_slot[device]]; }

// One stage of `devices` devices over the whole model, one micro-batch of 2 sequences.
proto::Plan OneStage(uint32_t devices, uint32_t tp, uint32_t cp, uint32_t ulysses) {
  std::string list;
  for (uint32_t d = 0; d < devices; ++d) list += (d ? ", " : "") + std::to_string(d);
  return PlanFrom("pipelines:\n  - micro_batch_size: 2\n    num_micro_batches: 1\n    stages:\n      - {devices: [" +
                  list + "], tp_degree: " + std::to_string(tp) + ", cp_degree: " + std::to_string(cp) +
                  ", ulysses_degree: " + std::to_string(ulysses) + ", layer_end: 6}\n");
}

struct Ring {
  std::vector<double> fwd_sends, bwd_sends, recvs;
  std::vector<uint32_t> send_peers, recv_peers;
  size_t posted = 0;  // receives posted before the compute
};

// The ring-attention sends of one rank, split by the pass of the compute operation they surround.
Ring RingOf(const RankOps& r) {
  Ring out;
  for (size_t i = 0; i < r.ops.size(); ++i) {
    const Op& op = r.ops[i];
    if (op.category != Category::kCp) continue;
    if (op.kind == OpKind::kPostRecv) {
      ++out.posted;
      continue;
    }
    if (op.kind == OpKind::kRecv) {
      out.recvs.push_back(op.bytes);
      out.recv_peers.push_back(op.peer);
      continue;
    }
    EXPECT_EQ(op.kind, OpKind::kSend);
    EXPECT_EQ(op.channel, kChanCp);
    out.send_peers.push_back(op.peer);
    // The compute these sends precede.
    size_t j = i;
    while (j < r.ops.size() && r.ops[j].kind != OpKind::kCompute) ++j;
    EXPECT_LT(j, r.ops.size());
    if (j == r.ops.size()) continue;
    const bool forward = r.ops[j].category == Category::kForward || r.ops[j].recompute;
    (forward ? out.fwd_sends : out.bwd_sends).push_back(op.bytes);
  }
  return out;
}

// ---- lowering: the CP ring -------------------------------------------------------------------------

TEST(ContextParallelLowering, RingSendsPerBlockPassAtCp2AndCp4) {
  // seq 16, b = 2. A K/V block is K and V of b·(s/cp) tokens, 4 kv heads of 32, 2 bytes:
  //   cp = 2: 2 · 2 · 8 · 4 · 32 · 2 = 8,192 bytes;  cp = 4: 2 · 2 · 4 · 4 · 32 · 2 = 4,096 bytes.
  // Each block's forward sends cp − 1 blocks to the next CP rank; its backward cp − 1 K/V blocks and then
  // cp − 1 blocks of dK/dV contributions (2 · (cp − 1) blocks, TransformerEngine's bytes). The embedding
  // and head have no attention. 4 blocks per rank:
  //   cp = 2: forward 4 × 1 sends of 8,192, backward 4 × 2;
  //   cp = 4: forward 4 × 3 sends of 4,096, backward 4 × 6.
  for (const auto& [cp, block] : std::vector<std::pair<uint32_t, double>>{{2, 8192}, {4, 4096}}) {
    const auto plan = OneStage(cp, 1, cp, 1);
    const Lowering l = LowerCp(plan, Training(plan, 16));
    for (uint32_t c = 0; c < cp; ++c) {
      const Ring ring = RingOf(RankOf(l, c));
      EXPECT_EQ(ring.fwd_sends, std::vector<double>(4 * (cp - 1), block)) << "cp " << cp << " rank " << c;
      EXPECT_EQ(ring.bwd_sends, std::vector<double>(8 * (cp - 1), block)) << "cp " << cp << " rank " << c;
      EXPECT_EQ(ring.recvs.size(), 12u * (cp - 1));
      EXPECT_EQ(ring.posted, ring.recvs.size());
      // Devices 0..cp-1 are CP ranks 0..cp-1 (TP 1): send to c + 1, receive from c − 1, around the ring.
      for (uint32_t p : ring.send_peers) EXPECT_EQ(p, (c + 1) % cp);
      for (uint32_t p : ring.recv_peers) EXPECT_EQ(p, (c + cp - 1) % cp);
    }
    const OpTotals totals = TotalOps(l);
    EXPECT_EQ(totals.cp_sends, uint64_t{cp} * 12 * (cp - 1));
    EXPECT_DOUBLE_EQ(totals.cp_send_bytes, cp * 4.0 * (cp - 1) * 3 * block);
    EXPECT_DOUBLE_EQ(totals.send_bytes, totals.recv_bytes);
  }
}

TEST(ContextParallelLowering, FullRecomputationRunsTheForwardRingAgain) {
  // cp = 2, seq 16: the backward of each block first re-runs its forward (one more 8,192-byte send), so
  // per rank: 4 forward + 4 recomputed forward sends of 8,192 and 4 backward pairs of 8,192 (K/V, then dK/dV).
  const auto plan = OneStage(2, 1, 2, 1);
  const Lowering l = LowerCp(plan, Training(plan, 16, proto::RECOMPUTE_FULL));
  const Ring ring = RingOf(RankOf(l, 0));
  EXPECT_EQ(ring.fwd_sends, std::vector<double>(8, 8192));
  EXPECT_EQ(ring.bwd_sends, std::vector<double>(8, 8192));
}

TEST(ContextParallelLowering, FusedPassesSendTheSameBytes) {
  // Balanced fidelity: one send per ring step before each pass and one receive after it, carrying the
  // pass's blocks. cp = 2: forward 4 · 8,192 = 32,768 bytes; backward 4 · 16,384 = 65,536.
  const auto plan = OneStage(2, 1, 2, 1);
  const Lowering l = LowerCp(plan, Training(plan, 16), true);
  const Ring ring = RingOf(RankOf(l, 1));
  EXPECT_EQ(ring.fwd_sends, std::vector<double>{32768});
  EXPECT_EQ(ring.bwd_sends, std::vector<double>{65536});
  EXPECT_EQ(ring.send_peers, (std::vector<uint32_t>{0, 0}));
}

TEST(ContextParallelLowering, RanksOrderTpInnermostThenCpAndSyncGradientsOverDpTimesCp) {
  // 8 devices, tp 2, cp 2, dp 2 (Megatron-LM's order: TP innermost, then CP, then DP): device i is TP
  // rank i mod 2, CP rank (i / 2) mod 2, replica i / 4. TP groups {0,1} {2,3} {4,5} {6,7}; CP rings
  // {0,2} {1,3} {4,6} {5,7}. CP ranks hold the same weights, so TP rank 0's gradients are summed over
  // {0, 2, 4, 6} (DP × CP) and TP rank 1's over {1, 3, 5, 7}.
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 1
    stages:
      - {devices: [0, 1, 2, 3, 4, 5, 6, 7], tp_degree: 2, cp_degree: 2, layer_end: 6}
)");
  const Lowering l = LowerCp(plan, Training(plan, 16));
  const RankOps& r6 = RankOf(l, 6);
  EXPECT_EQ(r6.tp_rank, 0u);
  EXPECT_EQ(r6.shard_rank, 1u);
  EXPECT_EQ(r6.replica, 1u);
  // Replica 1 gets sequence 1 of the micro-batch.
  std::vector<std::vector<uint32_t>> tp_groups;
  for (const Op& op : r6.ops) {
    if (op.kind == OpKind::kCollective && op.category == Category::kTp) tp_groups.push_back(l.groups[op.group]);
    if (op.kind == OpKind::kSend && op.category == Category::kCp) {
      EXPECT_EQ(op.peer, 4u);
    }
    if (op.kind == OpKind::kCompute && op.category != Category::kOptimizer) {
      EXPECT_EQ(op.seq_begin, 1u);
    }
  }
  ASSERT_FALSE(tp_groups.empty());
  for (const auto& g : tp_groups) EXPECT_EQ(g, (std::vector<uint32_t>{6, 7}));
  std::vector<std::vector<uint32_t>> sync;
  for (const auto& g : l.sync_groups) sync.push_back(g.devices);
  std::sort(sync.begin(), sync.end());
  EXPECT_EQ(sync, (std::vector<std::vector<uint32_t>>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

TEST(ContextParallelLowering, TpCollectivesAndFlopsSeeTheLocalTokens) {
  // tp 2, cp 2, b 2, seq 16: every TP all-reduce of a block carries b · (s/cp) · h · 2 = 2 · 8 · 256 · 2
  // = 8,192 bytes (16,384 without CP). A rank computes 1/(tp · cp) of each layer's FLOPs, so the ranks
  // together compute the model's forward + backward FLOPs: 3 · Σ_l F_l, with F_l of the whole sequence.
  const auto plan = OneStage(4, 2, 2, 1);
  const auto tr = Training(plan, 16);
  const Lowering l = LowerCp(plan, tr);
  for (const Op& op : RankOf(l, 3).ops) {
    if (op.kind == OpKind::kCollective && op.category == Category::kTp && op.layer_begin >= 1 && op.layer_begin <= 4) {
      EXPECT_DOUBLE_EQ(op.bytes, 8192);
    }
  }
  double model_flops = 0;
  for (uint32_t layer = 0; layer < 6; ++layer) {
    model_flops += TheWorld().model.ForwardFlops(layer, 2, 16) + TheWorld().model.BackwardFlops(layer, 2, 16);
  }
  EXPECT_NEAR(TotalOps(l).flops, model_flops, 1e-6 * model_flops);
}

TEST(ContextParallelLowering, PipelineTransfersGoBetweenEqualCpRanks) {
  // Two stages of cp 2 (devices 0,1 then 2,3), b 2, seq 16: CP rank c of stage 0 sends its 8 tokens of
  // each sequence to CP rank c of stage 1: 2 · 8 · 256 · 2 = 8,192 bytes per micro-batch.
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 1
    stages:
      - {devices: [0, 1], cp_degree: 2, layer_end: 3}
      - {devices: [2, 3], cp_degree: 2, layer_begin: 3, layer_end: 6}
)");
  const Lowering l = LowerCp(plan, Training(plan, 16));
  for (uint32_t d : {0u, 1u}) {
    int sends = 0;
    for (const Op& op : RankOf(l, d).ops) {
      if (op.kind != OpKind::kSend || op.category != Category::kPp) continue;
      ++sends;
      EXPECT_EQ(op.peer, d + 2);
      EXPECT_DOUBLE_EQ(op.bytes, 8192);
    }
    EXPECT_EQ(sends, 1);
  }
}

// ---- lowering: Ulysses -----------------------------------------------------------------------------

TEST(UlyssesLowering, FourAllToAllsPerBlockPassOfTheLocalTensors) {
  // ulysses 2, b 2, seq 16: each rank holds b · s/u = 16 tokens. q (and the output) is 16 tokens · 8
  // heads · 32 · 2 bytes = 8,192; k and v are 16 · 4 · 32 · 2 = 4,096 each. Forward per block: q, k, v
  // before attention and the output after it; backward: d(output), then dq, dk, dv. In group {0, 1}.
  const auto plan = OneStage(2, 1, 1, 2);
  const Lowering l = LowerCp(plan, Training(plan, 16));
  std::vector<double> fwd, bwd;
  bool forward = true;
  for (const Op& op : RankOf(l, 1).ops) {
    if (op.kind == OpKind::kCompute) forward = op.category == Category::kForward;
    if (op.kind != OpKind::kCollective || op.category != Category::kCp) continue;
    EXPECT_EQ(op.collective, CollectiveKind::kAllToAll);
    EXPECT_EQ(l.groups[op.group], (std::vector<uint32_t>{0, 1}));
    EXPECT_EQ(op.rank, 1u);
    (forward ? fwd : bwd).push_back(op.bytes);
  }
  std::vector<double> want_fwd, want_bwd;
  for (int b = 0; b < 4; ++b) {
    want_fwd.insert(want_fwd.end(), {8192, 4096, 4096, 8192});
    want_bwd.insert(want_bwd.end(), {8192, 8192, 4096, 4096});
  }
  EXPECT_EQ(fwd, want_fwd);
  EXPECT_EQ(bwd, want_bwd);
  // No ring: Ulysses moves nothing point to point.
  EXPECT_EQ(TotalOps(l).cp_sends, 0u);
  // Fused: one all-to-all per pass of the same 4 · 24,576 = 98,304 bytes standing for 16 calls.
  const Lowering f = LowerCp(plan, Training(plan, 16), true);
  std::vector<std::pair<double, uint32_t>> fused;
  for (const Op& op : RankOf(f, 0).ops) {
    if (op.kind == OpKind::kCollective && op.category == Category::kCp) fused.emplace_back(op.bytes, op.calls);
  }
  EXPECT_EQ(fused, (std::vector<std::pair<double, uint32_t>>{{98304, 16}, {98304, 16}}));
}

// ---- kernel model ----------------------------------------------------------------------------------

double FlashFlops(const std::vector<Kernel>& ks, size_t* count = nullptr) {
  double f = 0;
  size_t n = 0;
  for (const auto& k : ks) {
    if (k.type == Kernel::Type::kFused) {
      f += k.flops;
      ++n;
    }
  }
  if (count) *count = n;
  return f;
}

TEST(ContextParallelKernels, RingAttentionComputesTheCausalShareAndGemmsSeeLocalTokens) {
  // b 1, seq 1024, tp 1. Whole causal attention forward: 4 · b · s² · heads · d · ½ = 4 · 1024² · 8 · 32
  // · ½ = 536,870,912 FLOPs. At cp 4 a rank runs 4 ring steps of 1/4 of its share 536,870,912 / 4 each
  // (33,554,432 FLOPs per kernel), and its QKV GEMM has m = b · s/cp = 256 rows.
  const auto& model = TheWorld().model;
  KernelShape shape;
  shape.seq_len = 1024;
  const double full = FlashFlops(LayerKernels(model, 1, Pass::kForward, shape));
  EXPECT_DOUBLE_EQ(full, 536870912.0);
  shape.shard.cp = 4;
  size_t steps = 0;
  const auto ks = LayerKernels(model, 1, Pass::kForward, shape);
  EXPECT_DOUBLE_EQ(FlashFlops(ks, &steps), 536870912.0 / 4);
  EXPECT_EQ(steps, 4u);
  for (const auto& k : ks) {
    if (std::string(k.name) == "qkv") {
      EXPECT_DOUBLE_EQ(k.m, 256);
    }
  }
  // Ulysses 2: attention over the whole sequence with 4 of the 8 heads (half the FLOPs), GEMMs on 512 rows.
  shape.shard = {1, 2};
  const auto us = LayerKernels(model, 1, Pass::kForward, shape);
  EXPECT_DOUBLE_EQ(FlashFlops(us, &steps), 536870912.0 / 2);
  EXPECT_EQ(steps, 1u);
  for (const auto& k : us) {
    if (std::string(k.name) == "mlp-out") {
      EXPECT_DOUBLE_EQ(k.m, 512);
    }
  }
}

// ---- memory ----------------------------------------------------------------------------------------

TEST(ContextParallelMemory, ActivationsHalveAtCp2PlusTheRingBuffers) {
  // With flash attention every stored activation is linear in the tokens, so cp 2 stores exactly half
  // of cp 1's activations, plus ring attention's two K/V blocks while a block runs:
  // 2 · (2 · b · s/cp · 4 · 32 · 2) = 2 · (2 · 2 · 64 · 256 · 2)... for b 2, seq 128:
  // one K/V block = 2 · 2 · 64 · 4 · 32 · 2 = 65,536 bytes, two = 131,072 bytes.
  // ZeRO-1 shards the optimizer states over DP × CP: 2 holders at cp 2 (1 at cp 1), so they halve too.
  auto one = OneStage(1, 1, 1, 1);
  auto two = OneStage(2, 1, 2, 1);
  one.set_zero_stage(1);
  two.set_zero_stage(1);
  const auto tr = Training(one, 128);
  const PlanContext ctx{TheWorld().cluster, TheWorld().model, tr};
  const auto m1 = EstimateMemory(one, ctx);
  const auto m2 = EstimateMemory(two, ctx);
  ASSERT_EQ(m1.size(), 1u);
  ASSERT_EQ(m2.size(), 2u);
  for (const auto& dm : m2) {
    EXPECT_NEAR(dm.activations_gib * kGib, m1[0].activations_gib * kGib / 2 + 131072, 1e-3);
    EXPECT_NEAR(dm.optimizer_gib, m1[0].optimizer_gib / 2, 1e-12);
    EXPECT_DOUBLE_EQ(dm.params_gib, m1[0].params_gib);  // weights are replicated across CP ranks
  }
  EXPECT_GT(m1[0].activations_gib, 0);
  EXPECT_DOUBLE_EQ(ContextParallelBufferBytes(TheWorld().model, 2, 128, 1, 2, proto::DTYPE_BF16), 131072);
  EXPECT_DOUBLE_EQ(ContextParallelBufferBytes(TheWorld().model, 2, 128, 1, 1, proto::DTYPE_BF16), 0);
}

TEST(UlyssesMemory, ActivationsHalveAtUlysses2WithoutRingBuffers) {
  auto one = OneStage(1, 1, 1, 1);
  auto two = OneStage(2, 1, 1, 2);
  const auto tr = Training(one, 128);
  const PlanContext ctx{TheWorld().cluster, TheWorld().model, tr};
  const auto m1 = EstimateMemory(one, ctx);
  const auto m2 = EstimateMemory(two, ctx);
  ASSERT_EQ(m2.size(), 2u);
  EXPECT_NEAR(m2[1].activations_gib * kGib, m1[0].activations_gib * kGib / 2, 1e-3);
}

// ---- validation ------------------------------------------------------------------------------------

Status Validate(const std::string& yaml, uint32_t seq_len,
                proto::Attention attention = proto::ATTENTION_FLASH) {
  const auto plan = PlanFrom(yaml);
  const auto tr = Training(plan, seq_len, proto::RECOMPUTE_NONE, attention);
  const PlanContext ctx{TheWorld().cluster, TheWorld().model, tr};
  return ValidatePlanStructure(plan, ctx, "cp-plan.yaml");
}

const char* kCp4 = R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 1
    stages:
      - {devices: [0, 1, 2, 3], cp_degree: 4, layer_end: 6}
)";

TEST(ContextParallelValidation, SeqLenMustSplitInto2CpChunks) {
  // 2 · cp = 8 does not divide 20 (but 4 does: 20 is a multiple of cp alone, not of 2·cp).
  const Status s = Validate(kCp4, 20);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "cp-plan.yaml: pipelines[0].stages[0].cp_degree: 4 needs seq_len divisible by "
                               "2 × cp_degree = 8"));
  EXPECT_TRUE(Has(s.message(), "seq_len is 20"));
  EXPECT_TRUE(Validate(kCp4, 24).ok());
}

TEST(ContextParallelValidation, WorldSizeMustBeAMultipleOfTpUlyssesCp) {
  // 6 devices with tp 2 and cp 2: a replica is 4 devices, 6 is not a multiple.
  const Status s = Validate(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 1
    stages:
      - {devices: [0, 1, 2, 3, 4, 5], tp_degree: 2, cp_degree: 2, layer_end: 6}
)",
                            16);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "cp-plan.yaml: pipelines[0].stages[0].devices: 6 devices are not a multiple of "
                               "tp_degree × ulysses_degree × cp_degree = 2 × 1 × 2 = 4"));
}

TEST(ContextParallelValidation, UlyssesDegreeMustDivideTheHeadsPerTpRank) {
  // tp 2 leaves 4 query heads and 2 KV heads per rank; Ulysses 4 cannot hand each rank whole KV heads.
  const Status s = Validate(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 1
    stages:
      - {devices: [0, 1, 2, 3, 4, 5, 6, 7], tp_degree: 2, ulysses_degree: 4, layer_end: 6}
)",
                            16);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "cp-plan.yaml: pipelines[0].stages[0].ulysses_degree: 4 must divide the attention "
                               "heads (4) and key/value heads (2) per TP rank"));
  EXPECT_TRUE(Has(s.message(), "use a divisor of 2"));
}

TEST(ContextParallelValidation, StandardAttentionMixedDegreesAndBothKindsAreRejected) {
  const Status standard = Validate(kCp4, 16, proto::ATTENTION_STANDARD);
  ASSERT_FALSE(standard.ok());
  EXPECT_TRUE(Has(standard.message(), "pipelines[0].stages[0].cp_degree: context parallelism and Ulysses are "
                                      "modelled with flash attention only"));
  EXPECT_TRUE(Has(standard.message(), "attention: flash"));
  const Status mixed = Validate(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 1
    stages:
      - {devices: [0, 1], cp_degree: 2, layer_end: 3}
      - {devices: [2], layer_begin: 3, layer_end: 6}
)",
                                16);
  ASSERT_FALSE(mixed.ok());
  EXPECT_TRUE(Has(mixed.message(), "pipelines[0].stages[1].cp_degree: every stage of a pipeline needs the same "
                                   "cp_degree and ulysses_degree"));
  const Status both = Validate(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 1
    stages:
      - {devices: [0, 1, 2, 3], cp_degree: 2, ulysses_degree: 2, layer_end: 6}
)",
                               16);
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(Has(both.message(), "cp_degree and ulysses_degree cannot both exceed 1"));
}

TEST(ContextParallelFormat, YamlRoundTripKeepsTheDegrees) {
  const auto plan = PlanFrom(kCp4);
  EXPECT_EQ(plan.pipelines(0).stages(0).cp_degree(), 4u);
  EXPECT_EQ(CpDegree(plan.pipelines(0).stages(0)), 4u);
  EXPECT_EQ(UlyssesDegree(plan.pipelines(0).stages(0)), 1u);
  EXPECT_EQ(DpDegree(plan.pipelines(0).stages(0)), 1u);
  const std::string yaml = MessageToYaml(plan);
  EXPECT_TRUE(Has(yaml, "cp_degree: 4"));
  proto::Plan again;
  ASSERT_TRUE(ParseYaml(yaml, "again.yaml", &again).ok());
  EXPECT_EQ(again.SerializeAsString(), plan.SerializeAsString());
  // A misspelt key gets the nearest name.
  proto::Plan bad;
  const Status s = ParseYaml("pipelines:\n  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0], "
                             "cp_degre: 2, layer_end: 6}]}\n",
                             "typo.yaml", &bad);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Has(s.message(), "cp_degree"));
}

}  // namespace
}  // namespace hetsim::models
