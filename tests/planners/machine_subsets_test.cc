// The symmetric baselines on subsets of whole machines (planners/symmetric.h, SubsetSearch): when no layout
// of the whole cluster fits their framework, they run on the machines a user of that framework would pick.
// Expectations derived by hand below.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "planners/symmetric.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::BundledModel;
using testing::ClusterFromYaml;
using testing::Fixture;

// One machine of 2 L40S, two machines of 4 A10, PCIe inside, RoCE between them: devices 0-1 are the
// L40S, 2-5 and 6-9 the A10s.
const char* kL40sA10 = R"(
name: l40s2-a10x8
nodes:
  - {name: l40s, count: 1, gpus: {type: l40s, count: 2}, fabric: {kind: pcie}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 5}}
  - {name: a10, count: 2, gpus: {type: a10, count: 4}, fabric: {kind: pcie}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 5}}
network: {single_switch: {}}
)";

std::set<uint32_t> Devices(const proto::Plan& plan) {
  std::set<uint32_t> out;
  for (const auto& p : plan.pipelines()) {
    for (const auto& s : p.stages()) out.insert(s.devices().begin(), s.devices().end());
  }
  return out;
}

std::set<uint32_t> Range(uint32_t begin, uint32_t end) {
  std::set<uint32_t> out;
  for (uint32_t d = begin; d < end; ++d) out.insert(d);
  return out;
}

using testing::Notes;

// The subsets, by hand: each type alone ({L40S}, {A10, A10}); by speed (L40S 362 > A10 125 TFLOPS) the
// prefixes {L40S} (listed) and {L40S, A10#0}; the first A10 machine; node-order prefixes repeat
// {L40S, A10#0} and {L40S}. Four distinct sets, never the whole cluster.
TEST(MachineSubsets, ListsEachTypeSpeedAndTypePrefixesOnce) {
  const models::Cluster cluster = ClusterFromYaml(kL40sA10);
  const auto subsets = MachineSubsets(cluster, proto::DTYPE_BF16);
  ASSERT_EQ(subsets.size(), 4u);
  EXPECT_EQ(subsets[0].devices, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(subsets[0].why, "the l40s machines");
  EXPECT_EQ(subsets[1].devices, (std::vector<uint32_t>{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(subsets[1].why, "the a10 machines");
  EXPECT_EQ(subsets[2].devices, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(subsets[2].why, "the 2 fastest machines");
  EXPECT_EQ(subsets[3].devices, (std::vector<uint32_t>{2, 3, 4, 5}));
  EXPECT_EQ(subsets[3].why, "the first 1 a10 machine");
}

// Llama-2 7B (32 blocks, 34 layers; 6.74 B parameters), batch 1024 × 4096 tokens on the L40S + A10 cluster.
//   - All 10 GPUs: TP divides the machines' gcd 2, so dp·pp is 10 or 5, dp divides 1024 (1 or 2), so
//     pp is 5 or 10, which divides neither 32 blocks nor 34 layers: no Megatron layout.
//   - The two L40S: 16 bytes per parameter over tp·pp = 2 is 54 GB, over dp = 2 with ZeRO-1
//     (2 + 2 + 12/2 bytes) 67 GB, both over 48 GiB: nothing fits.
//   - L40S + the first A10 machine (6 GPUs): dp·pp is 6 or 3, pp a multiple of 3, which divides neither 32
//     nor 34: no layout.
//   - The first A10 machine (4 × 24 GiB): the least per GPU is dp = 1, tp·pp = 4: 16 / 4 = 4 bytes per
//     parameter = 25.1 GiB of states before any activation: nothing fits.
//   - The 8 A10s: e.g. tp = 2, pp = 4 (32 / 4 blocks): 2 bytes of states per parameter and GPU, 12.6 GiB.
// So the only plan is on the eight A10s, and the L40S idle.
TEST(MachineSubsets, MegatronRunsOnTheA10sWhenNoLayoutUsesEveryGpu) {
  const Fixture f(ClusterFromYaml(kL40sA10), BundledModel("llama2-7b"), "{global_batch_size: 1024, seq_len: 4096}");
  auto r = testing::Run("megatron", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Devices(r->plan), Range(2, 10));
  EXPECT_FALSE(r->estimate.oom);
  const std::string notes = Notes(*r);
  EXPECT_NE(notes.find("it runs on the a10 machines, 8 GPUs on 2 × a10 (4 × a10)"), std::string::npos) << notes;
  EXPECT_NE(notes.find("idle: 2 GPUs on 1 × l40s (2 × l40s)"), std::string::npos) << notes;
  EXPECT_NE(notes.find("no layout of all 10 GPUs meets its constraints"), std::string::npos) << notes;
  EXPECT_NE(notes.find("slowest GPU type of the machines it runs on (a10)"), std::string::npos) << notes;
}

// A cluster whose every GPU is usable keeps the whole-cluster search: GPT-3 1.3B (24 blocks) on the L40S
// and one A10 machine (6 GPUs, batch 96): dp = 2, pp = 3 (24 / 3 blocks) or dp = 6 use all six.
TEST(MachineSubsets, TheWholeClusterIsKeptWhenALayoutFits) {
  const char* cluster = R"(
name: l40s2-a10x4
nodes:
  - {name: l40s, count: 1, gpus: {type: l40s, count: 2}, fabric: {kind: pcie}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 5}}
  - {name: a10, count: 1, gpus: {type: a10, count: 4}, fabric: {kind: pcie}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 5}}
network: {single_switch: {}}
)";
  const Fixture f(ClusterFromYaml(cluster), BundledModel("gpt3-1.3b"), "{global_batch_size: 96, seq_len: 2048}");
  for (const char* planner : {"megatron", "deepspeed", "galvatron", "amp"}) {
    auto r = testing::Run(planner, f.problem());
    ASSERT_TRUE(r.ok()) << planner << ": " << r.status().message();
    EXPECT_EQ(Devices(r->plan), Range(0, 6)) << planner;
    EXPECT_EQ(Notes(*r).find("subsets of whole machines"), std::string::npos) << planner;
  }
}

// The fastest subset, not the largest: one machine of 8 H100 (989 FP16 TFLOPS) and three of 4 T4 (65),
// GPT-3 1.3B (24 blocks), batch 512 in FP16. 20 GPUs: TP divides 4, dp a power of two, so pp is a multiple
// of 5, which divides neither 24 nor 26: no layout. Subsets with a layout include the 8 H100 (dp = 8),
// H100 + one T4 machine (12: dp = 4, pp = 3), H100 + two (16: dp = 16) and the T4s (12, 8, 4). Symmetric
// layouts give every replica and stage the same work, so a set with T4s runs at the T4's pace: on 16 GPUs
// each holds 32 sequences at 65 TFLOPS (32 / 65 = 0.49) against 64 per H100 at 989 (0.065) on the H100
// alone, about 7× faster; the T4s alone are slower still. Megatron (ranking a set as its slowest GPU) and
// DeepSpeed and FSDP (the real GPUs, a uniform batch split) pick the H100, not the 16 GPUs.
TEST(MachineSubsets, PicksTheFastestSubsetNotTheLargest) {
  const char* cluster = R"(
name: h100x8-t4x12
nodes:
  - {name: h100, count: 1, gpus: {type: h100, count: 8}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 5}}
  - {name: t4, count: 3, gpus: {type: t4, count: 4}, fabric: {kind: pcie}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 5}}
network: {single_switch: {}}
)";
  const Fixture f(ClusterFromYaml(cluster), BundledModel("gpt3-1.3b"),
                  "{global_batch_size: 512, seq_len: 2048, dtype: fp16}");
  for (const char* planner : {"megatron", "deepspeed", "fsdp"}) {
    auto r = testing::Run(planner, f.problem());
    ASSERT_TRUE(r.ok()) << planner << ": " << r.status().message();
    EXPECT_EQ(Devices(r->plan), Range(0, 8)) << planner << "\n" << Notes(*r);
    EXPECT_NE(Notes(*r).find("it runs on the h100 machines"), std::string::npos) << planner << "\n" << Notes(*r);
  }
}

// Nothing fits anywhere: the whole cluster's closest attempts, and a line saying the subsets were tried.
TEST(MachineSubsets, NoPlanSaysTheSubsetsWereTried) {
  const Fixture f(ClusterFromYaml(kL40sA10), BundledModel("llama2-70b"), "{global_batch_size: 1024, seq_len: 4096}");
  auto r = testing::Run("megatron", f.problem());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInfeasible);
  EXPECT_NE(r.status().message().find("none of the 4 subsets of whole machines"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace hetsim::planners
