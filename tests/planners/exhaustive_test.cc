// The `exhaustive` planner, the exact reference: it beats or ties every other planner on small clusters
// (its space contains theirs), its bounds never change the answer, and its limits are reported.
#include <gtest/gtest.h>

#include <random>

#include "models/plan.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::Fixture;

using testing::kBaselines;

uint32_t DevicesUsed(const proto::Plan& plan) {
  uint32_t n = 0;
  for (const auto& p : plan.pipelines()) {
    for (const auto& s : p.stages()) n += static_cast<uint32_t>(s.devices_size());
  }
  return n;
}

// A random cluster of at most 8 GPUs: 1–3 node groups of 1–4 GPUs of assorted types, one or two nodes
// each, with RoCE or Ethernet NICs.
std::string RandomCluster(std::mt19937& rng, int index) {
  const char* types[] = {"a100-80gb", "h100", "rtx4090", "rtx3090", "v100", "t4", "a10", "h20"};
  std::string yaml = "name: random-" + std::to_string(index) + "\nnodes:\n";
  uint32_t total = 0;
  const uint32_t groups = 1 + rng() % 3;
  for (uint32_t g = 0; g < groups && total < 8; ++g) {
    const uint32_t per_node = 1 + rng() % 4;
    uint32_t count = 1 + rng() % 2;
    while (count > 1 && total + count * per_node > 8) --count;
    if (total + per_node > 8) break;
    total += count * per_node;
    const bool roce = rng() % 2 == 0;
    yaml += "  - {name: g" + std::to_string(g) + ", count: " + std::to_string(count) + ", gpus: {type: " +
            types[rng() % 8] + ", count: " + std::to_string(per_node) + "}, nic: {kind: " +
            (roce ? "roce, bandwidth_gbps: 100" : "ethernet, bandwidth_gbps: 10") + "}}\n";
  }
  return yaml;
}

// On random clusters of up to 8 GPUs (fixed seed) with a small model, the exhaustive search's plan is at
// least as fast under the analytic model as every baseline's: their spaces are inside its space (baselines
// that leave whole nodes idle are compared with `allow_unused_devices`).
TEST(Exhaustive, BeatsOrTiesEveryBaselineOnRandomSmallClusters) {
  std::mt19937 rng(2024);
  int compared = 0;
  for (int i = 0; i < 10; ++i) {
    const std::string yaml = RandomCluster(rng, i);
    const Fixture f(testing::ClusterFromYaml(yaml), testing::BundledModel("llama-tiny"),
                    "{global_batch_size: 16, dtype: fp16}");
    auto exact = testing::Run("exhaustive", f.problem());
    ASSERT_TRUE(exact.ok()) << yaml << exact.status().message();
    EXPECT_TRUE(exact->stats.proven_optimal) << yaml;
    std::optional<Result<PlannerResult>> exact_subset;
    for (const auto& name : kBaselines) {
      auto r = testing::Run(name, f.problem());
      if (!r.ok()) continue;
      const PlannerResult* reference = &*exact;
      if (DevicesUsed(r->plan) < f.cluster->num_devices()) {
        if (!exact_subset) exact_subset = testing::Run("exhaustive", f.problem(), "allow_unused_devices: true");
        ASSERT_TRUE(exact_subset->ok()) << exact_subset->status().message();
        reference = &exact_subset->value();
      }
      EXPECT_LE(testing::ClosedForm(f.problem(), reference->plan), testing::ClosedForm(f.problem(), r->plan) * (1 + 1e-9))
          << name << " beats the exhaustive search on\n"
          << yaml << "exhaustive: " << models::MessageToYaml(reference->plan) << name << ": "
          << models::MessageToYaml(r->plan);
      ++compared;
    }
  }
  EXPECT_GT(compared, 40);
}

// The bounds only cut subtrees that cannot win: with them off the search finds a plan as good.
TEST(Exhaustive, BoundingNeverChangesTheOptimum) {
  for (const char* cluster : {"metis-uniform-t4-v100-4", "autohet-uniform-a100-h800-4"}) {
    const Fixture f(testing::BundledCluster(cluster), testing::BundledModel("llama-tiny"),
                    "{global_batch_size: 8, dtype: fp16}");
    auto bounded = testing::Run("exhaustive", f.problem());
    auto plain = testing::Run("exhaustive", f.problem(), "disable_bounds: true");
    ASSERT_TRUE(bounded.ok() && plain.ok());
    EXPECT_TRUE(plain->stats.proven_optimal);
    EXPECT_DOUBLE_EQ(bounded->estimate.iteration_s, plain->estimate.iteration_s) << cluster;
    EXPECT_LT(bounded->stats.candidates_evaluated, plain->stats.candidates_evaluated);
  }
}

TEST(Exhaustive, AnExactEstimateOfItsOwnPlan) {
  // The search's objective is the analytic estimate of the plan it returns, which must fit in memory.
  const Fixture f(testing::BundledCluster("hexiscale-case-study"), testing::BundledModel("llama-tiny"), "{}");
  auto r = testing::Run("exhaustive", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->stats.claims_optimal);
  EXPECT_TRUE(r->stats.proven_optimal);
  EXPECT_FALSE(r->estimate.oom);
  // Its space holds every plan on all 8 GPUs, and the plans that leave whole machines idle besides.
  auto every = testing::Run("exhaustive", f.problem(), "use_every_device: true");
  ASSERT_TRUE(every.ok()) << every.status().message();
  EXPECT_EQ(DevicesUsed(every->plan), 8u);
  EXPECT_LE(testing::ClosedForm(f.problem(), r->plan), testing::ClosedForm(f.problem(), every->plan) * (1 + 1e-9));
  // Every baseline on this heterogeneous cluster is at best as fast.
  for (const auto& name : kBaselines) {
    auto b = testing::Run(name, f.problem());
    if (b.ok() && DevicesUsed(b->plan) == 8) {
      EXPECT_LE(testing::ClosedForm(f.problem(), r->plan), testing::ClosedForm(f.problem(), b->plan) * (1 + 1e-9)) << name;
    }
  }
}

TEST(Exhaustive, StopsAtItsTimeLimitWithTheBestPlanSoFar) {
  const Fixture f(testing::BundledCluster("hexiscale-case-study"), testing::BundledModel("llama-tiny"), "{}");
  auto r = testing::Run("exhaustive", f.problem(), "time_limit_s: 0.000001");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->stats.claims_optimal);
  EXPECT_FALSE(r->stats.proven_optimal);
  bool noted = false;
  for (const auto& n : r->stats.notes) noted |= n.find("not proven optimal") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(Exhaustive, RefusesLargeClusters) {
  const Fixture f(testing::BundledCluster("hexiscale-240"), testing::BundledModel("llama-tiny"), "{}");
  auto r = testing::Run("exhaustive", f.problem());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("up to 16"), std::string::npos) << r.status().message();
}

TEST(Exhaustive, SaysWhenNothingFits) {
  // Llama-2 70B cannot fit in four 16 GiB GPUs in any layout.
  const Fixture f(testing::BundledCluster("metis-uniform-t4-v100-4"), testing::BundledModel("llama2-70b"),
                  "{global_batch_size: 8, seq_len: 1024, dtype: fp16, recompute: full}");
  auto r = testing::Run("exhaustive", f.problem());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInfeasible);
  EXPECT_NE(r.status().message().find("metis-uniform-t4-v100-4"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace hetsim::planners
