// Mixture of experts: the model format's parameter counts, expert parallelism in plans (validation, the expert
// layout, gradient groups, memory) and the lowering's dispatch and combine. Expected values are derived by hand
// in the comments.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/lowering.h"
#include "models/plan.h"
#include "models/spec_io.h"
#include "models/stragglers.h"
#include "models/training.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"
#include "tests/common/specs.h"

namespace hetsim::models {
namespace {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

TransformerModel Bundled(const std::string& name) {
  auto m = LoadModel(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

// Two blocks of hidden 64, 4 heads, SwiGLU experts: 8 of width 32, top-2 (block 1 dense with ffn 128 when
// first_dense_layers is 1).
TransformerModel TinyMoe(uint32_t first_dense = 0, uint32_t shared = 0) {
  proto::Model m;
  const std::string yaml = "name: tiny-moe\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 128\n"
                           "num_attention_heads: 4\nvocab_size: 128\nmax_seq_len: 64\nmlp: swiglu\nnorm: rmsnorm\n"
                           "position: rope\nmoe: {num_experts: 8, top_k: 2, expert_ffn_hidden_size: 32, "
                           "first_dense_layers: " + std::to_string(first_dense) +
                           ", num_shared_experts: " + std::to_string(shared) + "}\n";
  const Status s = ParseYaml(yaml, "tiny-moe.yaml", &m);
  EXPECT_TRUE(s.ok()) << s.message();
  auto r = TransformerModel::Build(m, "tiny-moe.yaml");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

TEST(MoeModel, MixtralBlockByHand) {
  const TransformerModel m = Bundled("mixtral-8x7b");
  // Attention 2·4096² + 2·4096·1024 = 41,943,040; two RMSNorms 8,192; experts 8·3·4096·14336 =
  // 1,409,286,144; router 4096·8 = 32,768.
  EXPECT_DOUBLE_EQ(m.Params(1), 41943040.0 + 8192 + 1409286144.0 + 32768);
  EXPECT_DOUBLE_EQ(m.ExpertParams(1), 1409286144.0);
  // A token uses 2 of the 8 experts: 6 · 3·4096·14336 = 1,056,964,608 fewer.
  EXPECT_DOUBLE_EQ(m.ActiveParams(1), m.Params(1) - 1056964608.0);
  EXPECT_TRUE(m.IsMoe(1));
  EXPECT_FALSE(m.IsMoe(0));
  EXPECT_FALSE(m.IsMoe(m.num_layers() - 1));
}

TEST(MoeModel, ActiveParametersAsTheVendorsCountThem) {
  for (const char* name : {"mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "deepseek-v3"}) {
    const TransformerModel m = Bundled(name);
    const auto& s = m.spec();
    ASSERT_GT(s.published_active_params_billion(), 0) << name;
    const double ours = m.TotalActiveParams(!s.published_active_excludes_embedding()) / 1e9;
    EXPECT_NEAR(ours / s.published_active_params_billion(), 1.0, 0.02) << name << ": " << ours << " B";
    EXPECT_NEAR(m.TotalParams() / 1e9 / s.published_params_billion(), 1.0, 0.01) << name;
  }
}

TEST(MoeModel, DeepSeekLayersAndLatentAttention) {
  const TransformerModel m = Bundled("deepseek-v3");
  // first_k_dense_replace 3: blocks 1-3 (layers 1-3) dense, 4-61 MoE.
  for (uint32_t l = 1; l <= 3; ++l) EXPECT_FALSE(m.IsMoe(l)) << l;
  for (uint32_t l = 4; l <= 61; ++l) EXPECT_TRUE(m.IsMoe(l)) << l;
  EXPECT_EQ(m.BlockClass(3), 0u);
  EXPECT_EQ(m.BlockClass(4), 1u);
  // 256 experts of 3·7168·2048 = 44,040,192.
  EXPECT_DOUBLE_EQ(m.ExpertParams(4), 256 * 44040192.0);
  // MLA: q 7168·1536 + 1536·128·192; kv 7168·576 + 512·128·256; out 128·128·7168.
  const double attention = 7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512.0 * 128 * 256 + 128.0 * 128 * 7168;
  EXPECT_DOUBLE_EQ(m.AttentionMatmulParams(), attention);
  EXPECT_DOUBLE_EQ(m.QueryWidth(), 128.0 * 192);
  EXPECT_DOUBLE_EQ(m.ValueWidth(), 128.0 * 128);
  // One MTP module: a last-block copy + the 2h x h projection + two norms.
  EXPECT_DOUBLE_EQ(m.MtpParams(), m.Params(61) + 2.0 * 7168 * 7168 + 2 * 7168);
}

TEST(MoeModel, GptOssWindowsEveryOtherBlock) {
  const TransformerModel m = Bundled("gpt-oss-120b");
  // layer_types start with sliding_attention: blocks 0, 2, ... (layers 1, 3, ...) attend over 128 tokens.
  EXPECT_DOUBLE_EQ(m.AttentionKeys(1, 4096), 128);
  EXPECT_DOUBLE_EQ(m.AttentionKeys(2, 4096), 4096);
  EXPECT_EQ(m.BlockClass(1), 3u);
  EXPECT_EQ(m.BlockClass(2), 1u);
  EXPECT_EQ(m.head_dim(), 64u);
}

TEST(MoeModel, RejectsImpossibleRouting) {
  proto::Model m = TinyMoe().spec();
  m.mutable_moe()->set_top_k(9);
  auto r = TransformerModel::Build(m, "m.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("moe.top_k"), std::string::npos) << r.status().message();
  m = TinyMoe().spec();
  m.mutable_moe()->set_first_dense_layers(2);
  r = TransformerModel::Build(m, "m.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("first_dense_layers"), std::string::npos);
}

// `moe_act` (Megatron-Core's recompute module): the routed experts' activation output is not kept. TinyMoe's
// MoE block at 16 tokens, bf16, TP 1: 16 x top-2 = 32 routed copies, each losing the activation's output of
// f_e = 32 elements (2 bytes each): 2,048 bytes. Under recompute: none the module list is ignored.
TEST(MoeModel, RecomputedExpertActivationIsNotKept) {
  const TransformerModel m = TinyMoe();
  const auto bytes = [&](proto::Recompute r, RecomputeModules modules) {
    return m.ActivationBytes(1, 1, 16, 1, false, r, proto::DTYPE_BF16, proto::ATTENTION_FLASH, 0, {}, modules);
  };
  const RecomputeModules act = 1u << proto::RECOMPUTE_MODULE_MOE_ACT;
  EXPECT_DOUBLE_EQ(bytes(proto::RECOMPUTE_SELECTIVE, kCoreAttentionOnly) - bytes(proto::RECOMPUTE_SELECTIVE, act),
                   32 * 32 * 2.0);
  EXPECT_DOUBLE_EQ(bytes(proto::RECOMPUTE_NONE, act), bytes(proto::RECOMPUTE_NONE, kCoreAttentionOnly));
}

TEST(MoeRouting, UniformImbalanceByHand) {
  // 4096 tokens x top-8 over 16 ranks: mean 32768, sd sqrt(32768 · 15/16) = 175.27; the busiest of 16 is
  // E[max of 16 normals] sd above: 1 + 1.766 · 175.27 / 32768 = 1.00945.
  EXPECT_NEAR(UniformRoutingImbalance(4096, 8, 16), 1.00945, 2e-4);
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(16), 1.766, 2e-3);
  EXPECT_DOUBLE_EQ(UniformRoutingImbalance(4096, 8, 1), 1.0);
  EXPECT_GT(UniformRoutingImbalance(64, 2, 64), UniformRoutingImbalance(4096, 2, 64));
}

struct MoeWorld {
  Cluster cluster = ClusterFrom(R"(
name: two-nodes
nodes:
  - {name: n, count: 2, gpus: {type: h100, count: 8}, fabric: {kind: nvswitch}, nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}
)");
  TransformerModel model = TinyMoe();
  proto::Training training;
  MoeWorld() {
    training.set_global_batch_size(32);
    training.set_seq_len(16);
    auto r = ResolveTraining(training, model, "t");
    EXPECT_TRUE(r.ok()) << r.status().message();
    training = *r;
  }
  PlanContext ctx() const { return {cluster, model, training}; }
};

// One stage of 16 devices (DP 16 inside the stage), TP `tp`, EP `ep`, expert TP `etp`.
proto::Plan OneStage(uint32_t tp, uint32_t ep, uint32_t etp, bool sp = true) {
  std::string devices;
  for (int i = 0; i < 16; ++i) devices += (i ? "," : "") + std::to_string(i);
  return PlanFrom("pipelines:\n  - micro_batch_size: " + std::to_string(16 / tp) +
                  "\n    num_micro_batches: " + std::to_string(32 / (16 / tp)) +
                  "\n    stages:\n      - {devices: [" + devices + "], tp_degree: " + std::to_string(tp) +
                  ", ep_degree: " + std::to_string(ep) + ", expert_tp_degree: " + std::to_string(etp) +
                  ", layer_begin: 0, layer_end: 4}\nzero_stage: 1\nsequence_parallel: " + (sp ? "true" : "false") + "\n");
}

TEST(MoePlan, ValidationNamesTheField) {
  MoeWorld w;
  EXPECT_TRUE(ValidatePlanStructure(OneStage(1, 8, 1), w.ctx(), "p").ok());
  const auto fails = [&](const proto::Plan& p, const std::string& what) {
    const Status s = ValidatePlanStructure(p, w.ctx(), "p.yaml");
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  fails(OneStage(1, 16, 1), "ep_degree: 16 does not divide the model's 8 experts");
  fails(OneStage(1, 4, 3), "expert_tp_degree × ep_degree = 3 × 4 does not divide");
  fails(OneStage(2, 8, 1, false), "sequence_parallel: ");
  // EP on a dense model.
  const PlanContext dense{w.cluster, testing_util::TheWorld().model, w.training};
  const Status s = ValidatePlanStructure(OneStage(1, 8, 1), dense, "p.yaml");
  EXPECT_NE(s.message().find("has no experts"), std::string::npos) << s.message();
}

TEST(MoePlan, ExpertLayoutFoldsOverTheStage) {
  const proto::Plan p = OneStage(1, 4, 2);
  const auto& st = p.pipelines(0).stages(0);
  // Position i = etp_rank + 2·(ep_rank + 4·edp_rank): position 5 is expert-TP rank 1 of the first block of 8.
  EXPECT_EQ(EpGroupOf(st, 5), (std::vector<uint32_t>{1, 3, 5, 7}));
  EXPECT_EQ(EpGroupOf(st, 9), (std::vector<uint32_t>{9, 11, 13, 15}));
  EXPECT_EQ(ExpertTpGroupOf(st, 9), (std::vector<uint32_t>{8, 9}));
  EXPECT_EQ(ExpertDpDegree(st), 2u);
}

TEST(MoePlan, ExpertGradientsSyncOverExpertDp) {
  MoeWorld w;
  const proto::Plan p = OneStage(1, 8, 1);
  const auto groups = DeriveGradSyncGroups(p, w.model);
  uint32_t dense = 0, experts = 0;
  for (const auto& g : groups) {
    if (g.part == GradSyncGroup::Part::kExperts) {
      ++experts;
      // Expert DP 2: the devices at the same place of the two blocks of 8.
      ASSERT_EQ(g.devices.size(), 2u);
      EXPECT_EQ(g.devices[1], g.devices[0] + 8);
      EXPECT_EQ(g.expert_shards, 8u);
      // A rank holds 1 of the 8 experts of each MoE layer: 3·64·32 = 6,144 parameters.
      EXPECT_DOUBLE_EQ(GroupParamsPerRank(w.model, g, 1), 6144.0);
    } else if (g.part == GradSyncGroup::Part::kDense) {
      ++dense;
      EXPECT_EQ(g.devices.size(), 16u);
      EXPECT_DOUBLE_EQ(GroupParamsPerRank(w.model, g, 1), w.model.Params(1) - w.model.ExpertParams(1));
    }
  }
  EXPECT_EQ(experts, 8u);
  EXPECT_EQ(dense, 1u);
}

TEST(MoePlan, MemoryHoldsOneEpShareOfTheExperts) {
  MoeWorld w;
  const auto with = EstimateMemory(OneStage(1, 8, 1), w.ctx());
  const auto without = EstimateMemory(OneStage(1, 1, 1), w.ctx());
  ASSERT_EQ(with.size(), 16u);
  // Two MoE blocks hold 7/8 fewer expert weights at EP 8: 2 · 7/8 · 8·6144 bf16 parameters.
  const double saved = 2 * 7.0 / 8.0 * 8 * 6144 * 2 / testing_util::kGib;
  EXPECT_NEAR(without[0].params_gib - with[0].params_gib, saved, 1e-12);
}

TEST(MoeLowering, DispatchAndCombinePerLayerAndPass) {
  MoeWorld w;
  const proto::Plan p = OneStage(1, 8, 1);
  auto l = LowerPlan(p, w.ctx());
  ASSERT_TRUE(l.ok()) << l.status().message();
  const RankOps& r = l->ranks[0];
  uint32_t a2a = 0;
  for (const Op& op : r.ops) {
    if (op.category != Category::kEp) continue;
    ++a2a;
    EXPECT_EQ(op.collective, CollectiveKind::kAllToAll);
    // One sequence of 16 tokens per rank, top-2 copies of 64 bf16 elements: 16·2·64·2 = 4096 bytes.
    EXPECT_DOUBLE_EQ(op.bytes, 4096.0);
    EXPECT_EQ(l->groups[op.group], (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  }
  // 2 micro-batches × 2 MoE blocks × (dispatch + combine) forward and backward.
  EXPECT_EQ(a2a, 2u * 2 * 4);
}

TEST(MoeLowering, ExpertTpGathersAroundTheExperts) {
  MoeWorld w;
  auto l = LowerPlan(OneStage(1, 4, 2), w.ctx());
  ASSERT_TRUE(l.ok()) << l.status().message();
  uint32_t gathers = 0, scatters = 0;
  for (const Op& op : l->ranks[0].ops) {
    if (op.category != Category::kEp || op.collective == CollectiveKind::kAllToAll) continue;
    gathers += op.collective == CollectiveKind::kAllGather ? 1 : 0;
    scatters += op.collective == CollectiveKind::kReduceScatter ? 1 : 0;
    // The expert-TP group gathers both ranks' 4096-byte buffers.
    EXPECT_DOUBLE_EQ(op.bytes, 2 * 4096.0);
  }
  EXPECT_EQ(gathers, 2u * 2 * 2);
  EXPECT_EQ(scatters, 2u * 2 * 2);
}

TEST(MoeRouting, TrainingRefusesImpossibleRoutingSettings) {
  const TransformerModel moe = TinyMoe();
  proto::Training t;
  t.set_global_batch_size(8);
  t.set_seq_len(16);
  t.set_moe_load_imbalance(0.5);
  auto r = ResolveTraining(t, moe, "t.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("t.yaml: moe_load_imbalance: "), std::string::npos) << r.status().message();
  t.set_moe_load_imbalance(1.2);
  EXPECT_TRUE(ResolveTraining(t, moe, "t.yaml").ok());
  t.set_moe_capacity_factor(0.5);
  EXPECT_FALSE(ResolveTraining(t, moe, "t.yaml").ok());
  t.set_moe_capacity_factor(0);
  const auto dense = ResolveTraining(t, testing_util::TheWorld().model, "t.yaml");
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.status().message().find("has no experts"), std::string::npos);
}

TEST(MoeRouting, NodeHitByHand) {
  // One expert per node, top-2: a token's two experts sit on two of the 8 nodes, so a given node is hit with
  // probability 2/8 (1 − (7/8)(6/7)).
  EXPECT_NEAR(NodeHitProbability(8, 2, 8), 0.25, 1e-12);
  // 8 experts on 2 nodes, top-2: missed when both are among the other node's 4: C(4,2)/C(8,2) = 6/28.
  EXPECT_NEAR(NodeHitProbability(8, 2, 2), 22.0 / 28.0, 1e-12);
  EXPECT_DOUBLE_EQ(NodeHitProbability(8, 2, 1), 1.0);
}

TEST(MoeLowering, NodeDedupCrossesTheNetworkOncePerNode) {
  MoeWorld w;
  // Four nodes of four GPUs: EP 8 groups span two nodes.
  const Cluster four = ClusterFrom(R"(
name: four-by-four
nodes:
  - {name: n, count: 4, gpus: {type: h100, count: 4}, fabric: {kind: nvswitch}, nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}
)");
  proto::Plan p = OneStage(1, 8, 1);
  p.mutable_comm()->set_ep_dispatcher(proto::CommOptions::EP_DISPATCHER_NODE_DEDUP);
  auto l = LowerPlan(p, PlanContext{four, w.model, w.training});
  ASSERT_TRUE(l.ok()) << l.status().message();
  uint32_t rail = 0, local = 0;
  for (const Op& op : l->ranks[0].ops) {
    if (op.category != Category::kEp) continue;
    const auto& g = l->groups[op.group];
    if (g == std::vector<uint32_t>{0, 4}) {
      // The same-rail ranks of the group's two nodes: each of the rank's 16 tokens once per node it hits,
      // a buffer of 2 node shares: 2 · 16 · 64 · 2 bytes · 22/28.
      ++rail;
      EXPECT_NEAR(op.bytes, 2 * 16 * 64 * 2 * 22.0 / 28.0, 1e-9);
    } else {
      // Inside the node: the token copies forwarded to the experts' ranks (16 · 2 · 64 · 2 bytes).
      EXPECT_EQ(g, (std::vector<uint32_t>{0, 1, 2, 3}));
      ++local;
      EXPECT_DOUBLE_EQ(op.bytes, 4096.0);
    }
  }
  // 2 micro-batches × 2 MoE blocks × (dispatch + combine) × (forward + backward), one of each kind.
  EXPECT_EQ(rail, 16u);
  EXPECT_EQ(local, 16u);
}

}  // namespace
}  // namespace hetsim::models
