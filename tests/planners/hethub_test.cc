// HetHub (papers/001 §3.3) against behaviours the paper states and expectations derived by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "models/communicator.h"
#include "planners/cost_model.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::BundledCluster;
using testing::BundledModel;
using testing::Fixture;

const char* kHethubTraining = "{global_batch_size: 1024, seq_len: 1024, dtype: fp16}";

// Blocks per stage of pipeline 0, and each stage's GPU.
std::vector<std::pair<std::string, uint32_t>> Stages(const proto::Plan& plan, const models::Cluster& cluster,
                                                     const models::TransformerModel& model) {
  std::vector<std::pair<std::string, uint32_t>> out;
  for (const auto& st : plan.pipelines(0).stages()) {
    uint32_t blocks = st.layer_end() - st.layer_begin();
    if (st.layer_begin() == 0) --blocks;                        // the embedding
    if (st.layer_end() == model.num_layers()) --blocks;         // the head
    out.push_back({cluster.device(st.devices(0)).gpu->name, blocks});
  }
  return out;
}

// §3.3.1-3.3.2 on the AMD + accelerator #3 pair (MI250X and H20 stand-ins, 383 vs 148 TFLOPS): the
// faster type gets more blocks; stages of one type differ by at most one block (rule 1); uniform DP and
// TP: every pipeline has the same shape, one TP degree; the slowest stage runs first (rule 3).
TEST(HetHub, NonUniformSplitFollowsTheRules) {
  const Fixture f(BundledCluster("hethub-amd-accel3-16"), BundledModel("llama2-7b"), kHethubTraining);
  auto r = testing::Run("hethub", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto stages = Stages(r->plan, *f.cluster, *f.model);
  std::map<std::string, std::vector<uint32_t>> by_type;
  uint32_t total = 0;
  for (const auto& [gpu, blocks] : stages) {
    by_type[gpu].push_back(blocks);
    total += blocks;
  }
  EXPECT_EQ(total, 32u);
  ASSERT_EQ(by_type.size(), 2u);
  uint32_t amd = 0, h20 = 0;
  for (uint32_t b : by_type["mi250x"]) amd += b;
  for (uint32_t b : by_type["h20"]) h20 += b;
  EXPECT_GT(amd, h20) << "the faster accelerator takes more blocks";
  for (const auto& [gpu, blocks] : by_type) {
    const auto [lo, hi] = std::minmax_element(blocks.begin(), blocks.end());
    EXPECT_LE(*hi - *lo, 1u) << gpu << ": rule 1";
  }
  const uint32_t tp = r->plan.pipelines(0).stages(0).tp_degree();
  for (const auto& p : r->plan.pipelines()) {
    ASSERT_EQ(p.stages_size(), r->plan.pipelines(0).stages_size());
    for (int s = 0; s < p.stages_size(); ++s) {
      EXPECT_EQ(p.stages(s).tp_degree(), tp);
      EXPECT_EQ(p.stages(s).layer_begin(), r->plan.pipelines(0).stages(s).layer_begin());
      EXPECT_EQ(f.cluster->device(p.stages(s).devices(0)).gpu->name,
                f.cluster->device(r->plan.pipelines(0).stages(s).devices(0)).gpu->name);
    }
  }
  // Rule 3: each stage's blocks take at least as long on its GPUs as the next stage's (compute + TP).
  const AnalyticCostModel cost(f.problem());
  double previous = 1e30;
  for (size_t i = 0; i < stages.size(); ++i) {
    const auto& st = r->plan.pipelines(0).stages(static_cast<int>(i));
    const std::vector<uint32_t> group(st.devices().begin(), st.devices().end());
    const double t = cost.Replica(group, 1, 1 + stages[i].second, 1, {}, {}, proto::RECOMPUTE_NONE).total_s();
    EXPECT_LE(t, previous * (1 + 1e-12)) << "stage " << i;
    previous = t;
  }
}

// The uniform-slicing baseline: blocks even over the stages, in node order; HetHub's search never costs
// more under the same predictor (rule 2's bound starts from it).
TEST(HetHub, NonUniformBeatsUniformSlicing) {
  const Fixture f(BundledCluster("hethub-amd-accel3-16"), BundledModel("llama2-7b"), kHethubTraining);
  auto uniform = testing::Run("hethub", f.problem(), "uniform_split: true\ntp_degrees: [2]\ndp_degrees: [4]");
  auto searched = testing::Run("hethub", f.problem(), "tp_degrees: [2]\ndp_degrees: [4]");
  ASSERT_TRUE(uniform.ok()) << uniform.status().message();
  ASSERT_TRUE(searched.ok()) << searched.status().message();
  const auto even = Stages(uniform->plan, *f.cluster, *f.model);
  ASSERT_EQ(even.size(), 2u);  // the paper's setting: DP 4, TP 2, PP 2 on 8 + 8
  EXPECT_EQ(even[0], (std::pair<std::string, uint32_t>{"mi250x", 16}));
  EXPECT_EQ(even[1], (std::pair<std::string, uint32_t>{"h20", 16}));
  EXPECT_LT(searched->estimate.iteration_s, uniform->estimate.iteration_s);
}

// §3.1: across vendors the plan's transfers take the CPU path on their own (communicator: auto).
TEST(HetHub, PlansCrossVendorsThroughTheCpuPath) {
  const Fixture f(BundledCluster("hethub-nv-accel1-16"), BundledModel("llama2-7b"), kHethubTraining);
  auto r = testing::Run("hethub", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const models::Communicator comm(*f.cluster, r->plan.comm());
  EXPECT_TRUE(comm.Staged(0, 1));
}

TEST(HetHub, ReportsItsSearchAndItsErrors) {
  const Fixture f(BundledCluster("hethub-amd-accel2-16"), BundledModel("llama2-7b"), kHethubTraining);
  auto r = testing::Run("hethub", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::string notes;
  for (const auto& n : r->stats.notes) notes += n + "\n";
  EXPECT_NE(notes.find("DFS:"), std::string::npos) << notes;
  EXPECT_NE(notes.find("chosen:"), std::string::npos) << notes;
  // DP 3 does not divide 8 GPUs of a type.
  auto bad = testing::Run("hethub", f.problem(), "dp_degrees: [3]");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("d × t does not divide"), std::string::npos) << bad.status().message();
  auto slack = testing::Run("hethub", f.problem(), "bottleneck_slack: 0.5");
  ASSERT_FALSE(slack.ok());
  EXPECT_NE(slack.status().message().find("bottleneck_slack"), std::string::npos) << slack.status().message();
}

// HexiScale's case study (3 A800 + 3 RTX 4090 + 2 RTX 3090), Llama-2 13B at its default batch (1024 × 4096
// tokens). The GPU types' counts 3, 3 and 2 have gcd 1, so HetHub's uniform DP and TP are 1: eight one-GPU
// stages share 40 blocks. A block holds 16 bytes × 317 M parameters = 4.7 GiB of states and, without
// recomputation, about 0.66 GiB of activations per micro-batch in flight (1F1B: 8 − j at stage j). An A800
// (80 GB) at stage j ≤ 2 then holds at most 7, 8 and 8 blocks, so the five 24 GB cards take at least 17
// blocks, 4 on some card: 18.9 GiB of states before its activations, runtime and workspace. HetHub's own
// search (recompute: [none]) finds no leaf that fits; with full recomputation a block keeps only its input
// (2·s·h bytes per sequence) and the plan fits.
TEST(HetHub, PlansTheCaseStudyWithRecomputation) {
  const Fixture f(BundledCluster("hexiscale-case-study"), BundledModel("llama2-13b"), "{}");
  auto none = testing::Run("hethub", f.problem(), "recompute: [none]");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Status::Code::kInfeasible) << none.status().message();
  auto r = testing::Run("hethub", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(models::EffectiveRecompute(r->plan, *f.training), proto::RECOMPUTE_FULL);
  EXPECT_FALSE(r->estimate.oom);
  for (const auto& dm : models::EstimateMemory(r->plan, f.context())) {
    EXPECT_LE(dm.total_gib, dm.capacity_gib) << "pipeline " << dm.pipeline << " stage " << dm.stage;
  }
  const auto stages = Stages(r->plan, *f.cluster, *f.model);
  ASSERT_EQ(stages.size(), 8u);
  uint32_t total = 0;
  for (const auto& [gpu, blocks] : stages) total += blocks;
  EXPECT_EQ(total, 40u);
  std::string notes;
  for (const auto& n : r->stats.notes) notes += n + "\n";
  EXPECT_NE(notes.find("recompute=full needed to fit"), std::string::npos) << notes;
}

// Gap to `exhaustive` on 8 GPUs (4 MI250X + 4 A100 PCIe of an anonymised vendor, Ethernet): HetHub's space
// (uniform DP and TP, one shape for every pipeline) is a subset, so it never beats the optimum.
TEST(HetHub, GapToExhaustive) {
  const char* cluster = R"(
name: hethub-small
nodes:
  - {name: amd, gpus: {type: mi250x, count: 4}, nic: {kind: ethernet, bandwidth_gbps: 19.3, latency_us: 30}}
  - {name: accel, gpus: {type: a100-80gb-pcie, count: 4}, vendor: accelerator-2, fabric: {kind: pcie}, nic: {kind: ethernet, bandwidth_gbps: 19.3, latency_us: 30}}
)";
  for (const char* model : {"llama2-7b", "gpt3-1.3b"}) {
    const Fixture f(testing::ClusterFromYaml(cluster), BundledModel(model), "{global_batch_size: 64, seq_len: 1024, dtype: fp16}");
    auto exact = testing::Run("exhaustive", f.problem());
    ASSERT_TRUE(exact.ok()) << exact.status().message();
    auto mine = testing::Run("hethub", f.problem());
    ASSERT_TRUE(mine.ok()) << mine.status().message();
    const double mine_s = testing::ClosedForm(f.problem(), mine->plan), exact_s = testing::ClosedForm(f.problem(), exact->plan);
    const double gap = mine_s / exact_s - 1;
    std::printf("[gap] hethub-small %s: hethub %.4f s, exhaustive %.4f s (%s), gap %.2f%%\n", model,
                mine_s, exact_s,
                exact->stats.proven_optimal ? "proven" : "best found", 100 * gap);
    if (exact->stats.proven_optimal) {
      EXPECT_GE(gap, -1e-9);
    }
    EXPECT_LT(gap, 0.5);
  }
}

}  // namespace
}  // namespace hetsim::planners
