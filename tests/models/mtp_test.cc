// Multi-token prediction (DeepSeek-V3 §2.2) on the stage that holds the output head: its parameters, kernels
// and expert exchanges, worked out by hand on a tiny model.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/kernels.h"
#include "models/lowering.h"
#include "models/training.h"
#include "models/transformer.h"
#include "tests/common/specs.h"

namespace hetsim::models {
namespace mtp_test {
namespace {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

// Two MoE blocks of hidden 64 (4 heads), 8 SwiGLU experts of width 32, top-2, vocab 128, `mtp` modules.
TransformerModel Tiny(uint32_t mtp) {
  return testing_util::ModelFrom("name: tiny-mtp\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 128\n"
                                 "num_attention_heads: 4\nvocab_size: 128\nmax_seq_len: 64\nmlp: swiglu\n"
                                 "norm: rmsnorm\nposition: rope\nmoe: {num_experts: 8, top_k: 2, "
                                 "expert_ffn_hidden_size: 32, mtp_modules: " + std::to_string(mtp) + "}\n",
                                 "tiny-mtp.yaml");
}

constexpr uint32_t kHead = 3;  // embedding 0, blocks 1 and 2, head 3

// A block: attention 4·64² = 16,384, two norms 128, experts 8·3·64·32 = 49,152, router 64·8 = 512: 66,176. The
// head: 128·64 + 64 = 8,256. A module adds a block, the 2h -> h projection (8,192) and two norms (128).
TEST(Mtp, TheHeadHoldsTheModulesParameters) {
  const TransformerModel m = Tiny(1), plain = Tiny(0);
  EXPECT_DOUBLE_EQ(m.Params(2), 66176.0);
  EXPECT_DOUBLE_EQ(m.MtpParams(), 66176.0 + 8192 + 128);
  EXPECT_DOUBLE_EQ(m.ParamsPerRank(kHead, 1, false), 8256.0 + 66176 + 8192 + 128);
  EXPECT_DOUBLE_EQ(m.TotalParams(), plain.TotalParams());  // the published count leaves the modules out
  EXPECT_TRUE(m.HasExperts(kHead));
  EXPECT_FALSE(plain.HasExperts(kHead));
  EXPECT_DOUBLE_EQ(m.ExpertParams(kHead), 49152.0);
  // EP 4 holds a quarter of the module's experts: 8,256 + 66,176 − 49,152 + 12,288 + 8,320.
  ExpertSharding ep4;
  ep4.ep = 4;
  EXPECT_DOUBLE_EQ(m.ParamsPerRank(kHead, 1, false, ep4), 8256.0 + 66176 - 49152 + 12288 + 8192 + 128);
}

TEST(Mtp, TheHeadRunsEachModuleAfterTheMainModel) {
  const TransformerModel m = Tiny(1);
  KernelShape s;
  s.seq_len = 16;
  s.experts.ep = 2;
  const auto head = LayerKernels(Tiny(0), kHead, Pass::kForward, s);
  const auto block = LayerKernels(m, 2, Pass::kForward, s);
  const auto with = LayerKernels(m, kHead, Pass::kForward, s);
  ASSERT_EQ(head.size(), 3u);  // final norm, logits, cross-entropy
  // The main head, then the module: embedding, norms, projection, its block, the head again.
  ASSERT_EQ(with.size(), 3 + 3 + block.size() + 3);
  EXPECT_EQ(std::string(with[3].name), "mtp-embedding");
  const Kernel& proj = with[5];
  EXPECT_EQ(std::string(proj.name), "mtp-proj");
  EXPECT_DOUBLE_EQ(proj.m, 16);
  EXPECT_DOUBLE_EQ(proj.n, 64);
  EXPECT_DOUBLE_EQ(proj.k, 128);
  for (size_t i = 0; i < block.size(); ++i) EXPECT_EQ(std::string(with[6 + i].name), block[i].name);
  EXPECT_EQ(std::string(with.back().name), "cross-entropy");
}

// 16 H100s on two nodes, one stage with EP 8: per micro-batch and pass each MoE block dispatches and combines
// once (2 all-to-alls), and so does the module's block on the head.
TEST(Mtp, TheModulesBlockExchangesItsTokens) {
  const Cluster cluster = ClusterFrom(R"(
name: two-nodes
nodes:
  - {name: n, count: 2, gpus: {type: h100, count: 8}, fabric: {kind: nvswitch}, nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}
)");
  std::string devices;
  for (int i = 0; i < 16; ++i) devices += (i ? "," : "") + std::to_string(i);
  const proto::Plan plan = PlanFrom("pipelines:\n  - micro_batch_size: 16\n    num_micro_batches: 2\n    stages:\n"
                                    "      - {devices: [" + devices + "], ep_degree: 8, layer_begin: 0, layer_end: 4}\n"
                                    "zero_stage: 1\n");
  for (uint32_t mtp : {0u, 1u}) {
    const TransformerModel m = Tiny(mtp);
    proto::Training t;
    t.set_global_batch_size(32);
    t.set_seq_len(16);
    auto tr = ResolveTraining(t, m, "t");
    ASSERT_TRUE(tr.ok()) << tr.status().message();
    auto l = LowerPlan(plan, {cluster, m, *tr});
    ASSERT_TRUE(l.ok()) << l.status().message();
    uint32_t a2a = 0;
    for (const Op& op : l->ranks[0].ops) a2a += op.category == Category::kEp ? 1 : 0;
    // 2 micro-batches × (2 blocks + mtp) × (dispatch + combine) × (forward + backward).
    EXPECT_EQ(a2a, 2u * (2 + mtp) * 2 * 2) << "mtp " << mtp;
  }
}

}  // namespace
}  // namespace mtp_test
}  // namespace hetsim::models
