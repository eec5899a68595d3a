// `galvatron` balances a pipeline's layers with Galvatron's own cost model, which profiles one GPU and sees
// every GPU as that one (HexiScale §5.2: "imbalanced computation across pipeline stages"), and ranks the
// degrees on the real GPUs. Derived without arithmetic: on an H100 + T4 pair its split must be the split it
// makes on two H100s (where the view is true), while `hetero_aware` moves blocks off the T4.
#include <gtest/gtest.h>

#include <string>

#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::Fixture;

std::string Pair(const std::string& second_gpu) {
  return "kind: cluster\nname: pair\nnodes:\n"
         "  - name: a\n    gpus: {type: h100, count: 1}\n    nic: {kind: infiniband, bandwidth_gbps: 100}\n"
         "  - name: b\n    gpus: {type: " + second_gpu + ", count: 1}\n"
         "    nic: {kind: infiniband, bandwidth_gbps: 100}\n"
         "network: {single_switch: {}}\n";
}

// The first stage's last layer (exclusive) of galvatron's two-stage plan.
uint32_t SplitPoint(const std::string& second_gpu, const std::string& options) {
  const Fixture f(testing::ClusterFromYaml(Pair(second_gpu)), testing::BundledModel("gpt3-350m"),
                  "global_batch_size: 8\nseq_len: 1024\nrecompute: full\ndtype: fp16\n");
  auto r = testing::Run("galvatron", f.problem(), "pp_degrees: [2]\ntp_degrees: [1]\nmicro_batch_sizes: [1]\nzero_stages: [1]\nrecompute: [full]\n" + options);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return 0;
  EXPECT_EQ(r->plan.pipelines(0).stages_size(), 2);
  EXPECT_EQ(r->plan.pipelines(0).stages(0).devices(0), 0u);  // the H100 holds the first stage
  return r->plan.pipelines(0).stages(0).layer_end();
}

TEST(Galvatron, BalancesTheLayersAsIfEveryGpuWereTheFirst) {
  const uint32_t on_two_h100 = SplitPoint("h100", "");
  const uint32_t on_h100_t4 = SplitPoint("t4", "");
  EXPECT_EQ(on_h100_t4, on_two_h100);  // the T4 gets the blocks an H100 would
  // Balanced on the real GPUs, the much slower T4 takes fewer blocks.
  EXPECT_GT(SplitPoint("t4", "hetero_aware: true\n"), on_h100_t4);
}

}  // namespace
}  // namespace hetsim::planners
