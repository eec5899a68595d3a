// The kernels Megatron-Core's MoE layer runs around its grouped GEMMs (models/kernels.cc MoeKernels), with
// their bytes and launches worked out by hand on a tiny model.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/kernels.h"
#include "models/plan.h"
#include "models/transformer.h"
#include "tests/common/specs.h"

namespace hetsim::models {
namespace moe_kernels_test {
namespace {

// One block of hidden 64, 8 SwiGLU experts of width 32, top-2; `extra` adds model keys.
TransformerModel Tiny(const std::string& extra = "", const std::string& moe_extra = "") {
  return testing_util::ModelFrom("name: tiny-moe\nnum_layers: 1\nhidden_size: 64\nffn_hidden_size: 128\n"
                                 "num_attention_heads: 4\nvocab_size: 128\nmax_seq_len: 64\nmlp: swiglu\n"
                                 "norm: rmsnorm\nposition: rope\n" + extra +
                                     "moe: {num_experts: 8, top_k: 2, expert_ffn_hidden_size: 32" + moe_extra + "}\n",
                                 "tiny-moe.yaml");
}

// 16 tokens on one rank, EP 2 (4 local experts), no imbalance: the rank's experts see 2 · 16 = 32 rows.
KernelShape Shape(proto::DType dtype = proto::DTYPE_BF16) {
  KernelShape s;
  s.seq_len = 16;
  s.dtype = dtype;
  s.experts.ep = 2;
  s.experts.imbalance = 1;
  return s;
}

// (Keep the vector alive while the pointer is used.)
const Kernel* Find(const std::vector<Kernel>& ks, const std::string& name) {
  for (const auto& k : ks) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

constexpr uint32_t kBlock = 1;  // layer 0 is the embedding

TEST(MoeKernels, ExpertOutputBiasesAsMegatronCoreAddsThem) {
  const TransformerModel m = Tiny("linear_bias: true\n");
  const auto fwd = LayerKernels(m, kBlock, Pass::kForward, Shape());
  const auto bwd = LayerKernels(m, kBlock, Pass::kBackward, Shape());
  // Rows R = 32, h = 64: forward 14·R·h per-expert (2 launches each of 4 experts) + 14·R·h to join and cast.
  const Kernel* k = Find(fwd, "experts-bias");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(k->bytes, 14.0 * 32 * 64);
  EXPECT_DOUBLE_EQ(k->launches, 8);
  ASSERT_NE(Find(fwd, "experts-bias-concat"), nullptr);
  EXPECT_DOUBLE_EQ(Find(fwd, "experts-bias-concat")->bytes, 14.0 * 32 * 64);
  // Backward: 30·R·h per expert (5 launches each), 10·R·h whole.
  k = Find(bwd, "experts-bias-grad");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(k->bytes, 30.0 * 32 * 64);
  EXPECT_DOUBLE_EQ(k->launches, 20);
  EXPECT_DOUBLE_EQ(Find(bwd, "experts-bias-concat-grad")->bytes, 10.0 * 32 * 64);
  // Without linear biases, none.
  EXPECT_EQ(Find(LayerKernels(Tiny(), kBlock, Pass::kForward, Shape()), "experts-bias"), nullptr);
}

TEST(MoeKernels, ClampedGluCopiesBothHalves) {
  const TransformerModel m = Tiny("", ", expert_glu_limit: 7");
  // R = 32 rows of fe = 32 bf16 elements per half: forward 8·R·fe·2 bytes in 3 launches, backward 10·R·fe·2
  // in 2.
  const auto fwd = LayerKernels(m, kBlock, Pass::kForward, Shape());
  const auto bwd = LayerKernels(m, kBlock, Pass::kBackward, Shape());
  const Kernel* f = Find(fwd, "experts-glu-clamp");
  const Kernel* b = Find(bwd, "experts-glu-clamp-grad");
  ASSERT_NE(f, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_DOUBLE_EQ(f->bytes, 8.0 * 32 * 32 * 2);
  EXPECT_DOUBLE_EQ(f->launches, 3);
  EXPECT_DOUBLE_EQ(b->bytes, 10.0 * 32 * 32 * 2);
  // The moe_act recomputation repeats it with the activation.
  const auto again = RecomputedModuleKernels(m, kBlock, Shape(), 1u << proto::RECOMPUTE_MODULE_MOE_ACT);
  EXPECT_NE(Find(again, "experts-glu-clamp"), nullptr);
  EXPECT_NE(Find(again, "experts-activation"), nullptr);
}

TEST(MoeKernels, AlltoallDispatcherSortsByLocalExpert) {
  const TransformerModel m = Tiny();
  // 4 local experts: sorted after the all-to-all and unsorted before the combine, 4·R·h·2 bytes a pass.
  const auto fwd = LayerKernels(m, kBlock, Pass::kForward, Shape());
  const Kernel* k = Find(fwd, "experts-sort");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(k->bytes, 4.0 * 32 * 64 * 2);
  EXPECT_NE(Find(LayerKernels(m, kBlock, Pass::kBackward, Shape()), "experts-sort-grad"), nullptr);
  // One local expert (EP 8): nothing to sort. The flex dispatchers: they permute once, on the expert side.
  KernelShape one = Shape();
  one.experts.ep = 8;
  EXPECT_EQ(Find(LayerKernels(m, kBlock, Pass::kForward, one), "experts-sort"), nullptr);
  KernelShape flex = Shape();
  flex.experts.alltoall = false;
  EXPECT_EQ(Find(LayerKernels(m, kBlock, Pass::kForward, flex), "experts-sort"), nullptr);
}

// The stage's expert layout takes the dispatcher from the plan's comm and droplessness from the training.
TEST(MoeKernels, TheLayoutKnowsTheDispatcherAndDropping) {
  const TransformerModel m = Tiny();
  proto::Stage st;
  st.set_ep_degree(1);
  proto::Training tr;
  proto::CommOptions comm;
  ExpertSharding x = StageExperts(st, m, tr, comm, 16);
  EXPECT_TRUE(x.alltoall);
  EXPECT_TRUE(x.dropless);
  comm.set_ep_dispatcher(proto::CommOptions::EP_DISPATCHER_NODE_DEDUP);
  tr.set_moe_capacity_factor(1);
  x = StageExperts(st, m, tr, comm, 16);
  EXPECT_FALSE(x.alltoall);
  EXPECT_FALSE(x.dropless);
}

TEST(MoeKernels, DroplessFp8PadsTheExpertsRows) {
  const TransformerModel m = Tiny();
  const auto fwd = LayerKernels(m, kBlock, Pass::kForward, Shape(proto::DTYPE_FP8));
  const Kernel* k = Find(fwd, "fp8-padding");
  ASSERT_NE(k, nullptr);
  EXPECT_DOUBLE_EQ(k->bytes, 4.0 * 32 * 64 * 2);  // pad before fc1, unpad after fc2: bf16 rows
  EXPECT_EQ(Find(LayerKernels(m, kBlock, Pass::kForward, Shape()), "fp8-padding"), nullptr);  // bf16
  KernelShape capped = Shape(proto::DTYPE_FP8);
  capped.experts.dropless = false;  // drop-and-pad's capacities
  EXPECT_EQ(Find(LayerKernels(m, kBlock, Pass::kForward, capped), "fp8-padding"), nullptr);
}

TEST(MoeKernels, CurrentScalingQuantisesEachExpertsRowsApart) {
  const TransformerModel m = Tiny();
  KernelShape s = Shape(proto::DTYPE_FP8);
  s.fp8_recipe = proto::FP8_RECIPE_CURRENT;
  // Four local experts: fc1's input split into 4 tensors, each quantised with an amax, a scale and a cast:
  // 4 + 8 launches; fc2's the same. A dense linear's input: 1 + 2.
  const auto fwd = LayerKernels(m, kBlock, Pass::kForward, s);
  double amax = 0, cast = 0;
  for (const auto& k : fwd) {
    if (std::string(k.name) == "fp8-amax") amax += k.launches;
    if (std::string(k.name) == "fp8-cast-transpose") cast += k.launches;
  }
  // Dense: qkv (its norm's output, quantised after the norm) and attention-out: 2 amax, 4 cast launches.
  EXPECT_DOUBLE_EQ(amax, 2 + 2 * 4);
  EXPECT_DOUBLE_EQ(cast, 4 + 2 * 8);
  // Delayed scaling quantises the split tensors in one fused multi-tensor kernel.
  s.fp8_recipe = proto::FP8_RECIPE_DELAYED;
  double delayed = 0;
  for (const auto& k : LayerKernels(m, kBlock, Pass::kForward, s)) {
    if (std::string(k.name) == "fp8-cast-transpose") delayed += k.launches;
  }
  EXPECT_DOUBLE_EQ(delayed, 1 + 2);  // attention-out's input, fc1's and fc2's (the norm writes qkv's)
}

TEST(MoeKernels, EveryLaunchCostsItsLatencyAndIssue) {
  const GpuSpec& gpu = *GpuCatalog::Bundled().Find("h100").value();
  const KernelParams& p = KernelParamsFor(gpu, "default");
  Kernel one;
  one.bytes = 1e6;
  Kernel five = one;
  five.launches = 5;
  const PassTime t = TimeKernels({one, five}, gpu, p, proto::DTYPE_BF16);
  EXPECT_EQ(t.kernels, 6u);
  EXPECT_DOUBLE_EQ(t.host_s, 6 * p.host_overhead_s);
  const double bw = gpu.hbm_bandwidth_gbyte_s * 1e9 * p.MemoryEfficiency(proto::DTYPE_BF16);
  EXPECT_NEAR(t.gpu_s, 2e6 / bw + 6 * p.kernel_latency_s, 1e-12);
}

}  // namespace
}  // namespace moe_kernels_test
}  // namespace hetsim::models
