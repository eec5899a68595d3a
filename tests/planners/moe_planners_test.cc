// Planners other than megatron with mixture-of-experts models (docs/planners.md "Mixtures of experts"):
// deepspeed's expert-parallel search derived by hand, fsdp's and the seed planners' EP 1 and what they say
// when it cannot fit, and the cost models pricing each block by its class (an MoE model whose first blocks
// are dense) instead of every block like block 1.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/plan.h"
#include "planners/hexiscale/cost.h"
#include "planners/metis/internal.h"
#include "tests/planners/test_util.h"

// (A namespace of its own: the tests build as one unity translation unit.)
namespace hetsim::planners::moe_planners_test {
namespace {

using testing::Fixture;

constexpr const char* kDgxH100 = R"(
name: dgx-h100
nodes: [{name: dgx, gpus: {type: h100, count: 8}, fabric: {kind: nvswitch}}]
)";

// Two machines of unlike GPUs: 4 A100-80GB and 4 H100 on NVSwitch, 200 Gb/s InfiniBand between them.
constexpr const char* kTwoTypes = R"(
name: a100-h100
nodes:
  - {name: a, gpus: {type: a100-80gb, count: 4}, fabric: {kind: nvswitch}, nic: {kind: infiniband, bandwidth_gbps: 200}}
  - {name: h, gpus: {type: h100, count: 4}, fabric: {kind: nvswitch}, nic: {kind: infiniband, bandwidth_gbps: 200}}
)";

// Qwen3-30B-A3B cut to 8 blocks whose first two are dense with a narrow MLP (512 hidden units): a dense block
// costs a fraction of an MoE one (8 of 128 experts of width 768 per token, a router, the permutation), so
// pricing every block like block 1 — a dense one — underestimates every range that holds MoE blocks.
models::TransformerModel DenseFirstMoe() {
  proto::Model spec = testing::BundledModel("qwen3-30b-a3b").spec();
  spec.set_name("qwen3-8-blocks-2-dense");
  spec.set_num_layers(8);
  spec.set_ffn_hidden_size(512);
  spec.mutable_moe()->set_first_dense_layers(2);
  auto m = models::TransformerModel::Build(spec, "dense-first-moe.yaml");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

// Qwen3-30B-A3B (30.5 B parameters, 29.0 B in the routed experts, 1.5 B dense) on one 8×H100 node, global
// batch 64 × 4096 tokens, bf16 Adam (2 bytes of weights, 2 of gradients, 12 of fp32 master and moments per
// parameter). DeepSpeed offers ZeRO 0-2 with MoE (its engine refuses stage 3) and ep_size dividing the 128
// experts and the 8 data-parallel ranks: 1, 2, 4, 8. With EP e each rank holds 29.0/e B of experts, whose
// gradients and optimizer states ZeRO shards over the expert-data-parallel group of 8/e ranks, and the
// dense 1.5 B sharded over all 8. At ZeRO-2, the most sharding DeepSpeed allows:
//   - e = 1: 29.0 B × (2 + 14/8) + 1.5 B × 3.75 = 114 GB > 80 GiB before any activation: no EP-1 plan;
//   - e = 2: 14.5 B × (2 + 14/4) = 79.8 GB + 5.6 GB = 85.4 GB = 79.5 GiB, plus 1 GiB of workspace: none;
//   - e = 4: 7.25 B × (2 + 14/2) = 65.3 GB + 5.6 GB = 66.0 GiB: fits with recomputation;
//   - e = 8: 3.63 B × 16 = 58.0 GB + 1.5 B × (4 + 1.5) = 8.3 GB = 61.7 GiB even at ZeRO-1.
// So DeepSpeed's search must take EP 4 or 8, with ZeRO 1 or 2.
TEST(DeepSpeedMoe, SearchesExpertParallelismWhereOnlyItFits) {
  const Fixture f(testing::ClusterFromYaml(kDgxH100), testing::BundledModel("qwen3-30b-a3b"),
                  "{global_batch_size: 64, seq_len: 4096}");
  auto r = testing::Run("deepspeed", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const proto::Plan& plan = r->plan;
  ASSERT_EQ(plan.pipelines_size(), 1);  // the data-parallel ranks in one stage, so EP groups lie over them
  const auto& st = plan.pipelines(0).stages(0);
  EXPECT_EQ(st.devices_size(), 8);
  EXPECT_GE(st.ep_degree(), 4u);
  EXPECT_EQ(models::ExpertTpDegree(st), 1u);  // enable_expert_tensor_parallelism is off by default
  EXPECT_LE(plan.zero_stage(), 2u);
  EXPECT_EQ(plan.pipelines(0).micro_batch_size() * plan.pipelines(0).num_micro_batches(), 64u);
  EXPECT_TRUE(models::ValidatePlan(plan, f.context(), "plan").ok());
  // The same plan with fewer expert-parallel ranks does not fit, even at ZeRO-2 with full recomputation.
  for (uint32_t ep : {1u, 2u}) {
    proto::Plan fewer = plan;
    fewer.set_zero_stage(2);
    fewer.set_recompute(proto::RECOMPUTE_FULL);
    fewer.mutable_pipelines(0)->mutable_stages(0)->set_ep_degree(ep);
    EXPECT_EQ(models::ValidatePlan(fewer, f.context(), "fewer").code(), Status::Code::kInfeasible) << "ep " << ep;
  }
  // Pinned to EP 1, nothing fits, and the search says what it tried.
  auto pinned = testing::Run("deepspeed", f.problem(), "{ep_degrees: [1]}");
  ASSERT_FALSE(pinned.ok());
  EXPECT_EQ(pinned.status().code(), Status::Code::kInfeasible);
}

// FSDP has no expert parallelism: the same problem has no plan, and the error says why and what does.
TEST(DeepSpeedMoe, FsdpSaysItCannotShardExperts) {
  const Fixture f(testing::ClusterFromYaml(kDgxH100), testing::BundledModel("qwen3-30b-a3b"),
                  "{global_batch_size: 64, seq_len: 4096}");
  auto r = testing::Run("fsdp", f.problem());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInfeasible);
  EXPECT_NE(r.status().message().find("expert parallelism 1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--planner megatron or deepspeed"), std::string::npos);
}

// The analytic model (the baselines', hethub's, hetu's and autohet's closed forms): a range's compute is the
// sum of its layers', each block at its class's price; pricing every block like block 1 (dense) is lower.
TEST(MoeBlockClassPricing, AnalyticRangeComputeSumsEachLayer) {
  const Fixture f(testing::ClusterFromYaml(kDgxH100), DenseFirstMoe(), "{global_batch_size: 8, seq_len: 2048}");
  const PlanningProblem problem = f.problem();
  const AnalyticCostModel cost(problem);
  const BlockClasses& classes = cost.block_classes();
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes.first(0), 1u);
  EXPECT_EQ(classes.first(1), 3u);
  EXPECT_EQ(classes.Count(0, 0, 10), 2u);
  EXPECT_EQ(classes.Count(1, 0, 10), 6u);
  EXPECT_EQ(classes.Count(1, 2, 4), 1u);
  const models::GpuSpec& gpu = *problem.cluster.device(0).gpu;
  const auto& compute = cost.compute();
  const uint32_t L = problem.model.num_layers();
  double per_layer = 0, like_block_1 = 0;
  for (uint32_t l = 0; l < L; ++l) {
    const uint32_t priced = problem.model.kind(l) == models::LayerKind::kTransformer ? 1 : l;
    per_layer += compute.ForwardSeconds(gpu, l, 1, 2) + compute.BackwardSeconds(gpu, l, 1, 2, proto::RECOMPUTE_NONE);
    like_block_1 +=
        compute.ForwardSeconds(gpu, priced, 1, 2) + compute.BackwardSeconds(gpu, priced, 1, 2, proto::RECOMPUTE_NONE);
  }
  const auto [fwd, bwd] = cost.RangeCompute(gpu, 0, L, 1, 2, proto::RECOMPUTE_NONE);
  const double overheads = 2 * compute.PassOverheadSeconds(gpu);
  EXPECT_NEAR(fwd + bwd, per_layer + overheads, 1e-9 * per_layer);
  EXPECT_GT(per_layer, 1.2 * like_block_1);  // six of the eight blocks are far dearer than block 1
  // Gradient bytes: each block's own parameters (the MoE blocks hold every expert at EP 1).
  double params = 0;
  for (uint32_t l = 1; l + 1 < L; ++l) params += problem.model.ParamsPerRank(l, 1, false);
  EXPECT_NEAR(cost.GradientChunkBytes(1, L - 1, 1, true), 2 * params, 1e-9 * params);
}

// Metis §4.3 profiles one layer of each kind of block: its range time sums the layers' profiles.
TEST(MoeBlockClassPricing, MetisProfilesEachBlockClass) {
  const Fixture f(testing::ClusterFromYaml(kDgxH100), DenseFirstMoe(), "{global_batch_size: 8, seq_len: 2048}");
  const PlanningProblem problem = f.problem();
  const metis::Profiler prof(problem, metis::Knobs{});
  const auto& compute = prof.cost().compute();
  const models::GpuSpec& gpu = prof.gpu(0);
  const uint32_t L = problem.model.num_layers();
  auto layer = [&](uint32_t l) {
    return compute.ForwardSeconds(gpu, l, 1, 1) + compute.BackwardSeconds(gpu, l, 1, 1, proto::RECOMPUTE_NONE) -
           compute.OverheadSeconds(gpu, l, 1, 1, false) - compute.OverheadSeconds(gpu, l, 1, 1, true);
  };
  double per_layer = 0;
  for (uint32_t l = 0; l < L; ++l) per_layer += layer(l);
  const double like_block_1 = layer(0) + (L - 2) * layer(1) + layer(L - 1);
  EXPECT_NEAR(prof.RangeSeconds(0, 0, 1, 0, L), per_layer, 1e-9 * per_layer);
  EXPECT_GT(prof.RangeSeconds(0, 0, 1, 0, L), 1.5 * like_block_1);
  // A stage of MoE blocks only (layers 3-6) against one of the dense blocks and an MoE one (layers 1-4).
  EXPECT_NEAR(prof.RangeSeconds(0, 0, 1, 3, 7), 4 * layer(3), 1e-9 * layer(3));
  EXPECT_NEAR(prof.RangeSeconds(0, 0, 1, 1, 4), 2 * layer(1) + layer(3), 1e-9 * layer(3));
  // Parameters: the MoE blocks hold every expert (EP 1).
  const int tpi = prof.TpIndex(1);
  EXPECT_NEAR(prof.RangeParams(tpi, 1, 4),
              2 * problem.model.ParamsPerRank(1, 1, false) + problem.model.ParamsPerRank(3, 1, false), 1.0);
}

// HexiScale's eq. 8: a stage's time is the sum of its layers' (eq. 6 + eq. 3), each block by its class.
TEST(MoeBlockClassPricing, HexiScaleStageSumsEachLayer) {
  const Fixture f(testing::ClusterFromYaml(kDgxH100), DenseFirstMoe(), "{global_batch_size: 8, seq_len: 2048}");
  const PlanningProblem problem = f.problem();
  const hexiscale::AppendixACost cost(problem);
  const std::vector<uint32_t> group = {0, 1};
  const models::GpuSpec& gpu = *problem.cluster.device(0).gpu;
  const uint32_t L = problem.model.num_layers();
  double per_layer = 0;
  for (uint32_t l = 0; l < L; ++l) per_layer += cost.LayerSeconds(group, gpu, l, 2);
  const double like_block_1 =
      cost.LayerSeconds(group, gpu, 0, 2) + (L - 2) * cost.LayerSeconds(group, gpu, 1, 2) +
      cost.LayerSeconds(group, gpu, L - 1, 2);
  EXPECT_NEAR(cost.StageSeconds(group, 0, L, 2), per_layer, 1e-9 * per_layer);
  EXPECT_GT(cost.StageSeconds(group, 0, L, 2), 1.5 * like_block_1);
}

// A dense model has one block class, block 1: every cost above is the papers' "blocks × block 1", to the bit.
TEST(MoeBlockClassPricing, DenseModelsPriceEveryBlockLikeBlockOne) {
  const Fixture f(testing::ClusterFromYaml(kDgxH100), testing::BundledModel("llama2-7b"),
                  "{global_batch_size: 8, seq_len: 2048}");
  const PlanningProblem problem = f.problem();
  const uint32_t L = problem.model.num_layers(), blocks = L - 2;
  const AnalyticCostModel cost(problem);
  ASSERT_EQ(cost.block_classes().size(), 1u);
  EXPECT_EQ(cost.block_classes().Count(0, 5, 9), 4u);
  const models::GpuSpec& gpu = *problem.cluster.device(0).gpu;
  const auto& compute = cost.compute();
  const auto [fwd, bwd] = cost.RangeCompute(gpu, 1, L - 1, 2, 4, proto::RECOMPUTE_NONE);
  EXPECT_EQ(fwd, 0.0 + blocks * compute.ForwardSeconds(gpu, 1, 2, 4) + compute.PassOverheadSeconds(gpu));
  EXPECT_EQ(bwd, 0.0 + blocks * compute.BackwardSeconds(gpu, 1, 2, 4, proto::RECOMPUTE_NONE) +
                     compute.PassOverheadSeconds(gpu));
  const metis::Profiler prof(problem, metis::Knobs{});
  const auto kind = models::LayerKind::kTransformer;
  EXPECT_EQ(prof.RangeSeconds(0, 0, 3, 1, L - 1), 0.0 + blocks * prof.LayerSeconds(0, 0, kind, 3) + 0.0);
  const hexiscale::AppendixACost hexi(problem);
  const std::vector<uint32_t> group = {0, 1};
  EXPECT_EQ(hexi.StageSeconds(group, 1, L - 1, 2), blocks * hexi.LayerSeconds(group, gpu, 1, 2));
}

// Every planner other than megatron and deepspeed plans the small MoE model on two machines of unlike GPUs
// with EP 1 (a plan that validates, memory included) or says clearly why not.
TEST(SeedPlannersMoe, PlanASmallMoeModelOrSayWhy) {
  const Fixture f(testing::ClusterFromYaml(kTwoTypes), DenseFirstMoe(), "{global_batch_size: 16, seq_len: 2048}");
  // (exhaustive over TP 2 groups only: its whole space takes 20 s and more under the sanitizers.)
  const std::vector<std::pair<std::string, std::string>> planners = {
      {"metis", ""}, {"hexiscale", ""}, {"autohet", ""}, {"hethub", ""}, {"hetu", ""}, {"galvatron", ""},
      {"whale", ""}, {"alpa", ""}, {"amp", ""}, {"fsdp", ""}, {"exhaustive", "{zero_stages: [1], tp_degrees: [2]}"}};
  for (const auto& [name, options] : planners) {
    SCOPED_TRACE(name);
    auto r = testing::Run(name, f.problem(), options);
    if (!r.ok()) {
      // Only "nothing fits" is acceptable, and it must say EP is what the planner lacks.
      EXPECT_EQ(r.status().code(), Status::Code::kInfeasible) << r.status().message();
      EXPECT_NE(r.status().message().find("expert parallelism 1"), std::string::npos) << r.status().message();
      continue;
    }
    EXPECT_TRUE(models::ValidatePlan(r->plan, f.context(), name).ok());
    for (const auto& pipe : r->plan.pipelines()) {
      for (const auto& st : pipe.stages()) EXPECT_EQ(models::EpDegree(st), 1u);
    }
  }
}

// Where nothing fits at EP 1 (Qwen3-235B-A22B on one 8×H100 node: 235 B parameters × 16 bytes of weights,
// gradients and Adam states over 8 GPUs is 470 GB a GPU), a seed planner says what it cannot express.
TEST(SeedPlannersMoe, SayWhatTheyCannotExpressWhenNothingFits) {
  const Fixture f(testing::ClusterFromYaml(kDgxH100), testing::BundledModel("qwen3-235b-a22b"),
                  "{global_batch_size: 64, seq_len: 4096}");
  for (const std::string name : {"hexiscale", "hethub"}) {
    SCOPED_TRACE(name);
    auto r = testing::Run(name, f.problem());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kInfeasible) << r.status().message();
    EXPECT_NE(r.status().message().find("sharding the experts over ranks is outside what it can express"),
              std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace hetsim::planners::moe_planners_test
