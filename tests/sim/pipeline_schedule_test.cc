// Pipeline schedules and the gradient sync after them, simulated and checked against closed forms derived
// by hand (CONVENTIONS.md: expectations never come from the program's own output): 1F1B, GPipe and
// interleaved 1F1B iteration times and bubbles, pipelines of different speeds joined by their gradient sync,
// the hierarchical all-reduce. Every simulation runs in a child process (sim/simulator.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "models/training.h"
#include "sim/simulator.h"
#include "tests/common/specs.h"
#include "tests/sim/simulator_fixture.h"

namespace hetsim::sim {
namespace {

using fixture::BlockProfile;
using fixture::ExactProfile;
using fixture::kFreeNode;
using fixture::MakeSetting;
using fixture::Setting;
using fixture::Simulate;
using testing_util::PlanFrom;

TEST(PipelineSchedule, TwoStageOneFOneBMatchesClosedForm) {
  // Stages [emb, b1, b2] and [b3, b4, head]: f = 2 ms, b = 4 ms each; m = 8.
  // Uniform 1F1B: (m + S − 1)·(f + b) = 9 · 6 ms = 54 ms.
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 8
    stages: [{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]
)");
  EXPECT_NEAR(Simulate(run, plan, db), 0.054, 1e-6);
}

TEST(PipelineSchedule, FourStageOneFOneBMatchesClosedForm) {
  // One block per stage (the embedding and head cost nothing): f = 1 ms, b = 2 ms; m = 8.
  // (m + S − 1)·(f + b) = 11 · 3 ms = 33 ms.
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 8
    stages:
      - {devices: [0], layer_end: 2}
      - {devices: [1], layer_begin: 2, layer_end: 3}
      - {devices: [2], layer_begin: 3, layer_end: 4}
      - {devices: [3], layer_begin: 4, layer_end: 6}
)");
  EXPECT_NEAR(Simulate(run, plan, db), 0.033, 1e-6);
}

TEST(PipelineSchedule, GpipeWithUnevenStagesMatchesFlowShopClosedForm) {
  // Stages f = (2, 1, 1) ms, b = (4, 2, 2) ms, m = 4. GPipe is a permutation flow shop of identical
  // jobs forward then backward: Σf + (m − 1)·max f + Σb + (m − 1)·max b = 4 + 6 + 8 + 12 = 30 ms.
  const Setting run = MakeSetting(kFreeNode, 4);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
schedule: gpipe
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_end: 3}
      - {devices: [1], layer_begin: 3, layer_end: 4}
      - {devices: [2], layer_begin: 4, layer_end: 6}
)");
  EXPECT_NEAR(Simulate(run, plan, db), 0.030, 1e-6);
}

TEST(PipelineSchedule, BubbleFractionOfUniformOneFOneBIsTheClassicRatio) {
  // (S − 1)/(m + S − 1) = 3/11 for 4 uniform stages and 8 micro-batches.
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 8
    stages:
      - {devices: [0], layer_end: 2}
      - {devices: [1], layer_begin: 2, layer_end: 3}
      - {devices: [2], layer_begin: 3, layer_end: 4}
      - {devices: [3], layer_begin: 4, layer_end: 6}
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
  opt.profiles = &db;
  opt.compute.optimizer_bytes_per_param = 0;
  auto r = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->report.bubble_fraction(), 3.0 / 11.0, 1e-6);
  // Every device computes 8 · 3 ms = 24 ms of the 33 ms.
  for (const auto& d : r->report.devices()) EXPECT_NEAR(d.compute_s(), 0.024, 1e-9);
}

// Two nodes of two H100s, one 100 Gb/s InfiniBand NIC per GPU, 2 us NIC latency, PCIe 64 GB/s with
// the default 1 us hop latency.
const char* kTwoNodesPerGpuNic = R"(
name: two
nodes:
  - name: n
    count: 2
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1000000, latency_us: 0.000001}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_gpu, latency_us: 2}
)";

TEST(GradientSync, TwoPipelinesOfDifferentSpeedEndAtTheSlowerPlusTheSync) {
  // Pipeline A (node 0, m = 2) and pipeline B (node 1, m = 6), both [emb, b1, b2 | b3, b4, head] with
  // f = 2 ms, b = 4 ms per stage. B ends its backward at (6 + 1)·6 = 42 ms on stage 0 (stage 1 at 38 ms).
  // Stage 0's gradient group {0, 2} syncs P0 = 262,144 + 2·725,504 = 1,713,152 bf16 parameters over
  // one 12.5 GB/s NIC per GPU: a 2-member ring moves S = 3,426,304 bytes each way in 2 steps; in the
  // aggregate fidelity that is one transfer (latency α + S/B) plus one more step's latency α, with
  // α = PCIe 1 us (half at each end) + NIC 2 us = 3 us. Stage 1's group (262,400 + 2·725,504
  // parameters) starts 4 ms earlier and ends first. Iteration = 42 ms + 2·3 us + 3,426,304 / 12.5e9 s.
  const Setting run = MakeSetting(kTwoNodesPerGpuNic, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 2
    stages: [{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]
  - micro_batch_size: 1
    num_micro_batches: 6
    stages: [{devices: [2], layer_end: 3}, {devices: [3], layer_begin: 3, layer_end: 6}]
)");
  const double expected = 0.042 + 2 * 3e-6 + 3426304.0 / 12.5e9;
  EXPECT_NEAR(Simulate(run, plan, db), expected, 1e-7);
}

TEST(GradientSync, OverlappedParameterGathersHideBehindTheForward) {
  // Two replicas of llama-tiny on one GPU each (devices 0 and 2, on two nodes: one 12.5 GB/s NIC per GPU,
  // 3 us per hop), m = 1, ZeRO-1 with the overlapped gradient sync and 0.1 MiB buckets (one piece per
  // layer). After the step each replica all-gathers S = 6,853,120 bytes of bf16 parameters: each member
  // sends S/2 = 3,426,560 bytes, 274.1 us + one hop's latency α. With comm.param_gather_overlap the pieces
  // open the DP stream one after another at the start: the embedding's (262,144 bytes each way) and block
  // 1's (725,504) are waited for (the embedding's forward takes no time), and block 2's onwards arrive
  // during block 1's 1 ms forward. The gain is 3,426,560 − 262,144 − 725,504 = 2,438,912 bytes at 12.5 GB/s
  // = 195.1 us, less the second piece's latency α (about 3 us).
  const Setting run = MakeSetting(kTwoNodesPerGpuNic, 2);
  const auto db = ExactProfile();
  auto plan = PlanFrom(R"(
zero_stage: 1
comm: {dp_overlap: true, dp_bucket_mib: 0.1}
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [2], layer_end: 6}]}
)");
  const double after_step = Simulate(run, plan, db);
  plan.mutable_comm()->set_param_gather_overlap(true);
  const double ahead = Simulate(run, plan, db);
  EXPECT_NEAR(after_step - ahead, 195.1e-6 - 3e-6, 6e-6) << after_step << " vs " << ahead;
}

TEST(GradientSync, HierarchicalAllReduceMatchesItsClosedForm) {
  // Four single-stage pipelines on two nodes of two GPUs: NVSwitch at B1 = 100 GB/s, one 100 Gb/s NIC
  // per GPU (B2 = 12.5 GB/s), latencies ~0. One gradient group {0, 1, 2, 3} of all llama-tiny parameters,
  // P = 262,144 (embedding) + 4·725,504 (blocks) + 262,400 (head) = 3,426,560 bf16 values: S = 6,853,120
  // bytes. Hierarchical (lowering): reduce-scatter inside each node (2 members: each sends S/2 at B1),
  // then all-reduce of S/2 across the nodes by {0, 2} and {1, 3} on their own NICs (2 members: each
  // sends S/2 at B2), then all-gather inside each node (S/2 at B1): S/B1 + S/(2·B2) = 0.34266 ms.
  // A flat ring over 0-1-2-3 instead sends 2·(3/4)·S per member; the hops 1→2 and 3→0 cross between the
  // nodes, each striped over both members' NICs (NCCL's channels cross at different GPUs): 1.5·S/(2·B2) =
  // 0.41119 ms.
  const Setting run = MakeSetting(R"(
name: two-by-two
nodes:
  - name: n
    count: 2
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 100, latency_us: 0.000001, pcie_bandwidth_gbyte_s: 1000000, pcie_latency_us: 0.000001}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_gpu, latency_us: 0.000001}
network: {switch_latency_us: 0.000001}
)",
                                  4);
  const auto db = BlockProfile(0, 0);  // no compute: what remains is communication
  auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [1], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [2], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [3], layer_end: 6}]}
comm: {dp_algorithm: hierarchical}
)");
  const double S = 6853120;
  for (Fidelity fid : {Fidelity::Balanced(), Fidelity::Full()}) {
    EXPECT_NEAR(Simulate(run, plan, db, fid), S / 100e9 + S / 25e9, 1e-8);
  }
  plan.mutable_comm()->set_dp_algorithm(proto::CommOptions::ALGORITHM_RING);
  EXPECT_NEAR(Simulate(run, plan, db), 1.5 * S / (2 * 12.5e9), 1e-8);
}

TEST(PipelineSchedule, InterleavedOneFOneBMatchesClosedForm) {
  // Stages [emb, b1, b2] and [b3, b4, head] in v = 2 chunks of one block each: f = 1 ms, b = 2 ms per
  // chunk. Interleaved 1F1B with free communication: (m·v + S − 1)·(f + b) (Narayanan et al. 2021 §2.2:
  // the bubble shrinks from (S − 1)·(F + B) to (S − 1)·(F + B)/v for whole-stage times F = v·f, B = v·b).
  // m = 2: hand-played in sim/program.cc's schedule, 5 · 3 ms = 15 ms; m = 4: 9 · 3 ms = 27 ms, against
  // 1F1B's (m + S − 1)·(F + B) = 30 ms.
  const auto db = ExactProfile();
  for (const uint32_t m : {2u, 4u}) {
    const Setting run = MakeSetting(kFreeNode, m);
    const auto plan = PlanFrom("schedule: interleaved_1f1b\nvirtual_stages: 2\npipelines: [{micro_batch_size: 1, "
                               "num_micro_batches: " + std::to_string(m) +
                               ", stages: [{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]}]");
    EXPECT_NEAR(Simulate(run, plan, db), (m * 2 + 1) * 0.003, 1e-6) << "m = " << m;
  }
}

TEST(PipelineSchedule, InterleavedPostsEachReceiveAheadAsMegatronsOverlappedP2p) {
  // The closed-form setting above with m = 2 and every pipeline message taking d = 0.5 ms (65,536 bytes:
  // 128 tokens x 256 hidden x 2 bytes, at 131.072 MB/s). Virtual stages v0 = (0, c0), v1 = (1, c0),
  // v2 = (0, c1), v3 = (1, c1); stage 0 runs F(v0,0) F(v0,1) F(v2,0) F(v2,1) B(v2,0) B(v2,1) B(v0,0)
  // B(v0,1) (all warm-up), stage 1 F(v1,0) F(v1,1) F(v3,0) B(v3,0) F(v3,1) B(v3,1) B(v1,0) B(v1,1).
  // Played by hand (times in ms), with each receive posted where its pass starts, seven transfers lie on
  // the critical path: 15 + 7d. With the receives posted as Megatron-LM's overlap_p2p_comm posts them
  // (after the previous pass of the same direction), stage 1 posts F(v3,1)'s receive when F(v3,0) ends
  // at 4 + 3d, so that input arrives during B(v3,0) (4 + 3d .. 6 + 3d) and F(v3,1) starts at 6 + 3d
  // instead of 6 + 4d; B(v1,0)'s receive, posted when B(v3,1) ends at 9 + 3d, meets B(v2,0)'s gradient
  // sent at 8 + 4d; the rest follows as before, one d earlier: 15 + 6d = 18 ms.
  const Setting run = MakeSetting(R"(
name: slow-p2p
nodes:
  - name: n
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 0.131072, latency_us: 0.000001, pcie_bandwidth_gbyte_s: 1000000}
)",
                                  2);
  const auto db = ExactProfile();
  const auto plan = PlanFrom("schedule: interleaved_1f1b\nvirtual_stages: 2\npipelines: [{micro_batch_size: 1, "
                             "num_micro_batches: 2, stages: [{devices: [0], layer_end: 3}, {devices: [1], "
                             "layer_begin: 3, layer_end: 6}]}]");
  EXPECT_NEAR(Simulate(run, plan, db), 0.018, 2e-6);
}

TEST(PipelineSchedule, InterleavedWithOverlapAndIntraStageDpCompletes) {
  // Two pipelines of two stages, the first stage of each DP-2 with an uneven split, v = 2, overlapped DP:
  // every message and every gradient group must be matched (a mismatch deadlocks the simulation).
  const Setting run = MakeSetting(kFreeNode, 16);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
schedule: interleaved_1f1b
virtual_stages: 2
comm: {dp_overlap: true}
pipelines:
  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [0, 1], micro_batch_split: [1, 1], layer_end: 3}, {devices: [2], layer_begin: 3, layer_end: 6}]}
  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [3], layer_end: 3}, {devices: [4, 5], layer_begin: 3, layer_end: 6}]}
)");
  EXPECT_GT(Simulate(run, plan, db), 0.0);
}

}  // namespace
}  // namespace hetsim::sim
