// The seed planners on today's mixed fleets (docs/fleets.md, issue 59): H100 nodes beside GB200 NVL72 racks
// (h100-gb200-mix-400: 32 DGX H100 nodes and two 72-GPU NVLink domains on one InfiniBand fabric). Each of the
// five papers' planners is heterogeneity-aware, so each must return a valid plan of its own that fits in
// memory and puts both GPU types to work (a plan on the H100s alone, or the racks alone, would leave 144 or
// 256 GPUs idle: nothing in these planners prefers that on a cluster this size).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "models/plan.h"
#include "tests/planners/test_util.h"

// (A namespace of its own: the tests build as one unity translation unit.)
namespace hetsim::planners::fleet_planners_test {
namespace {

// The GPU types a plan's stages use.
std::set<std::string> TypesUsed(const proto::Plan& plan, const models::Cluster& cluster) {
  std::set<std::string> types;
  for (const auto& p : plan.pipelines()) {
    for (const auto& s : p.stages()) {
      for (uint32_t d : s.devices()) types.insert(cluster.device(d).gpu->name);
    }
  }
  return types;
}

// Under the sanitizers (10-20x slower) two of the five planners plan Llama 2 7B; the release pass (the slow
// tier) runs all five on Llama 3 70B.
TEST(FleetPlanners, EverySeedPlannerPlansTheH100AndGb200Fleet) {
#ifdef HETSIM_SANITIZED
  const std::vector<std::string> planners = {"hethub", "autohet"};
  const char* model = "llama2-7b";
  const char* training = "{global_batch_size: 512, seq_len: 4096, dtype: bf16}";
#else
  const std::vector<std::string> planners = {"metis", "hexiscale", "autohet", "hethub", "hetu"};
  const char* model = "llama3-70b";
  const char* training = "{global_batch_size: 1152, seq_len: 8192, dtype: bf16}";
#endif
  const models::Cluster cluster = testing::BundledCluster("h100-gb200-mix-400");
  ASSERT_EQ(cluster.num_devices(), 400u);
  const testing::Fixture f(cluster, testing::BundledModel(model), training);
  for (const auto& planner : planners) {
    auto r = testing::Run(planner, f.problem());
    ASSERT_TRUE(r.ok()) << planner << ": " << r.status().message();
    const Status valid = models::ValidatePlan(r->plan, f.context(), planner + " on h100-gb200-mix-400");
    EXPECT_TRUE(valid.ok()) << valid.message();
    EXPECT_EQ(r->plan.planner(), planner);
    EXPECT_FALSE(r->estimate.oom) << planner;
    EXPECT_GT(r->estimate.iteration_s, 0) << planner;
    EXPECT_EQ(TypesUsed(r->plan, cluster), (std::set<std::string>{"gb200", "h100"})) << planner;
  }
}

}  // namespace
}  // namespace hetsim::planners::fleet_planners_test
