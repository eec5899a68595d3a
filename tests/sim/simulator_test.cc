// The simulator against closed forms derived by hand (CONVENTIONS.md: expectations never come from the
// program's own output). Every simulation runs in a child process (sim/simulator.h), so these tests can
// share one test process.
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "models/communicator.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "tests/common/specs.h"

namespace hetsim::sim {
namespace {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

// One node of 8 H100s whose fabric is so fast that communication is free (1e6 GB/s, ~0 latency).
const char* kFreeNode = R"(
name: free
nodes:
  - name: n
    gpus: {type: h100, count: 8}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1000000, latency_us: 0.000001, pcie_bandwidth_gbyte_s: 1000000}
)";

// llama-tiny with exact layer costs: every block takes `forward_s` forward and `backward_s` backward, the
// embedding and the head take no time.
models::ProfileDb BlockProfile(double forward_s, double backward_s) {
  proto::Profile p;
  const std::string yaml = "gpu: h100\nmodel: llama-tiny\nseq_len: 128\nlayers:\n"
                           "  - {layer: transformer, tp_degree: 1, micro_batch_size: 1, forward_s: " +
                           std::to_string(forward_s) + ", backward_s: " + std::to_string(backward_s) +
                           "}\n"
                           "  - {layer: embedding, tp_degree: 1, micro_batch_size: 1, forward_s: 0, backward_s: 0}\n"
                           "  - {layer: head, tp_degree: 1, micro_batch_size: 1, forward_s: 0, backward_s: 0}\n";
  const Status s = models::ParseYaml(yaml, "block-profile", &p);
  EXPECT_TRUE(s.ok()) << s.message();
  models::ProfileDb db;
  const Status a = db.Add(p, "block-profile");
  EXPECT_TRUE(a.ok()) << a.message();
  return db;
}

// Blocks of 1 ms forward and 2 ms backward.
models::ProfileDb ExactProfile() { return BlockProfile(0.001, 0.002); }

struct Setting {
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
};

Setting MakeSetting(const std::string& cluster_yaml, uint32_t global_batch) {
  auto m = models::LoadModel("llama-tiny");
  EXPECT_TRUE(m.ok());
  proto::Training t;
  t.set_global_batch_size(global_batch);
  t.set_seq_len(128);
  auto tr = models::ResolveTraining(t, *m, "t");
  EXPECT_TRUE(tr.ok());
  return {ClusterFrom(cluster_yaml), std::move(m).value(), std::move(tr).value()};
}

double Simulate(const Setting& run, const proto::Plan& plan, const models::ProfileDb& db, Fidelity fid = Fidelity::Balanced()) {
  models::PlanContext ctx{run.cluster, run.model, run.training};
  const Status v = models::ValidatePlanStructure(plan, ctx, "plan");
  EXPECT_TRUE(v.ok()) << v.message();
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
  opt.fidelity = fid;
  opt.profiles = &db;
  opt.compute.optimizer_bytes_per_param = 0;  // no optimizer step: the pipeline alone
  auto r = SimulateIteration(plan, ctx, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->report.iteration_time_s() : -1;
}

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

// ---- collectives on hand-built programs -----------------------------------------------------------

Programs CollectivePrograms(const std::vector<std::vector<uint32_t>>& groups, double bytes, uint32_t num_devices,
                            Fidelity fid) {
  Programs p;
  p.fidelity = fid;
  p.device_slot.assign(num_devices, UINT32_MAX);
  for (uint32_t g = 0; g < groups.size(); ++g) {
    p.groups.push_back(groups[g]);
    for (uint32_t r = 0; r < groups[g].size(); ++r) {
      const uint32_t d = groups[g][r];
      p.device_slot[d] = static_cast<uint32_t>(p.devices.size());
      p.devices.push_back(d);
      DeviceProgram prog;
      Op op;
      op.kind = OpKind::kCollective;
      op.category = Category::kDp;
      op.collective = CollectiveKind::kAllReduce;
      op.group = g;
      op.rank = r;
      op.bytes = bytes;
      prog.ops.push_back(op);
      p.programs.push_back(prog);
    }
  }
  return p;
}

TEST(Collectives, UncontendedRingAllReduceMatchesAlphaBeta) {
  // 4 GPUs on one NVSwitch node of 100 GB/s per GPU and 2 us latency (1 us on each of the two ports a
  // route crosses): α = 2 us, B = 100e9 B/s. Ring all-reduce of S = 400 MB:
  // 2(n−1)/n · S/B + 2(n−1)·α = 1.5 · 4e-3 s + 6 · 2e-6 s = 6.012 ms, at both fidelities.
  const auto cluster = ClusterFrom(R"(
name: nv
nodes:
  - {name: n, gpus: {type: h100, count: 4}, fabric: {kind: nvswitch, bandwidth_gbyte_s: 100, latency_us: 2}}
)");
  const double expected = 1.5 * 400e6 / 100e9 + 6 * 2e-6;
  for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced()}) {
    auto r = SimulatePrograms(CollectivePrograms({{0, 1, 2, 3}}, 400e6, 4, fid), cluster, false);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->iteration_s, expected, 1e-9);
  }
}

TEST(Collectives, TwoAllReducesThroughOneNicTakeTwiceAsLong) {
  // Two nodes of two GPUs sharing one 100 Gb/s NIC per node. A 2-member ring across the nodes moves S
  // each way through the NICs; two such rings at once share both NICs, so each gets half the bandwidth.
  const auto cluster = ClusterFrom(R"(
name: shared-nic
nodes:
  - name: n
    count: 2
    gpus: {type: h100, count: 2}
    nic: {kind: roce, bandwidth_gbps: 100, count: 1}
)");
  auto one = SimulatePrograms(CollectivePrograms({{0, 2}}, 1e9, 4, Fidelity::Balanced()), cluster, false);
  auto two = SimulatePrograms(CollectivePrograms({{0, 2}, {1, 3}}, 1e9, 4, Fidelity::Balanced()), cluster, false);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_NEAR(one->iteration_s, 1e9 / 12.5e9, 1e-3);  // S / B (latencies are microseconds)
  EXPECT_NEAR(two->iteration_s / one->iteration_s, 2.0, 0.01);
}

TEST(Collectives, NvlsAllReduceSendsTheBufferOnceAtTheSwitchsReductionRate) {
  // 8 GPUs on one NVSwitch node, 100 GB/s per GPU, α = 2 µs. NVLS all-reduce of S = 400 MB: each GPU sends
  // S into the switch and receives S back at kNvlsEfficiency = 0.6 of its port: S / 60e9 + 2α = 6.6707 ms;
  // a ring would take 2·7/8 · S / 100e9 + 14α = 7.028 ms.
  const auto cluster = ClusterFrom(R"(
name: nvls
nodes:
  - {name: n, gpus: {type: h100, count: 8}, fabric: {kind: nvswitch, bandwidth_gbyte_s: 100, latency_us: 2}}
)");
  for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced()}) {
    Programs p = CollectivePrograms({{0, 1, 2, 3, 4, 5, 6, 7}}, 400e6, 8, fid);
    for (auto& prog : p.programs) prog.ops[0].algorithm = Algorithm::kNvls;
    auto nvls = SimulatePrograms(p, cluster, false);
    ASSERT_TRUE(nvls.ok()) << nvls.status().message();
    EXPECT_NEAR(nvls->iteration_s, 400e6 / 60e9 + 2 * 2e-6, 1e-7);
    // The analytic TP path (fast fidelity) charges the same.
    for (auto& prog : p.programs) prog.ops[0].kind = OpKind::kTpAnalytic;
    auto analytic = SimulatePrograms(p, cluster, false);
    ASSERT_TRUE(analytic.ok());
    EXPECT_NEAR(analytic->iteration_s, 400e6 / 60e9 + 2 * 2e-6, 1e-7);
  }
  auto ring = SimulatePrograms(CollectivePrograms({{0, 1, 2, 3, 4, 5, 6, 7}}, 400e6, 8, Fidelity::Balanced()), cluster,
                               false);
  ASSERT_TRUE(ring.ok());
  EXPECT_NEAR(ring->iteration_s, 1.75 * 400e6 / 100e9 + 14 * 2e-6, 1e-7);
}

TEST(Collectives, ARingBetweenNodesStripesItsHopOverTheMembersNics) {
  // Two nodes of 4 GPUs, NVSwitch at 100 GB/s per GPU, one 100 Gb/s (12.5 GB/s) NIC per GPU. One ring
  // all-reduce over all 8 GPUs of S = 1 GB: every link carries 2(n−1)/n · S = 1.75 GB. Inside a node that
  // takes 1.75e9 / 100e9 = 17.5 ms. The hop between the nodes is striped over the 4 members' NICs (NCCL's
  // channels cross at different GPUs), 1.75e9 / 4 / 12.5e9 = 35 ms, which bounds the collective; one NIC
  // alone would take 140 ms. Latencies add microseconds.
  const auto cluster = ClusterFrom(R"(
name: rails
nodes:
  - name: n
    count: 2
    gpus: {type: h100, count: 4}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 100, latency_us: 2}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_gpu}
)");
  for (Fidelity fid : {Fidelity::Balanced(), Fidelity::Full()}) {
    auto r = SimulatePrograms(CollectivePrograms({{0, 1, 2, 3, 4, 5, 6, 7}}, 1e9, 8, fid), cluster, false);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->iteration_s, 1.75e9 / 4 / 12.5e9, 0.5e-3);
  }
  // Two rings of one GPU per node ({0, 4} and {1, 5}) have no other members to stripe over: each keeps its
  // own NIC, 2(2−1)/2 · S / 12.5e9 = 80 ms.
  auto pairs = SimulatePrograms(CollectivePrograms({{0, 4}, {1, 5}}, 1e9, 8, Fidelity::Balanced()), cluster, false);
  ASSERT_TRUE(pairs.ok());
  EXPECT_NEAR(pairs->iteration_s, 1e9 / 12.5e9, 0.5e-3);
}

TEST(Collectives, PodOversubscriptionThrottlesCrossPodTraffic) {
  // Two pods of one node each, two GPUs with their own 100 Gb/s NIC, 1:2 oversubscription above the pod:
  // the pod uplink carries (2 × 100 Gb/s) / 2 = 100 Gb/s, so two concurrent cross-pod rings each get
  // 50 Gb/s instead of 100: twice the time of the same rings inside a non-blocking switch.
  const std::string nodes = R"(
nodes:
  - name: n
    count: 2
    gpus: {type: h100, count: 2}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_gpu}
)";
  const auto flat = ClusterFrom("name: flat\n" + nodes);
  const auto pods = ClusterFrom("name: pods\n" + nodes + "network: {pods: {nodes_per_pod: 1, oversubscription: 2}}\n");
  const auto progs = CollectivePrograms({{0, 2}, {1, 3}}, 1e9, 4, Fidelity::Balanced());
  auto a = SimulatePrograms(progs, flat, false);
  auto b = SimulatePrograms(progs, pods, false);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->iteration_s, 1e9 / 12.5e9, 1e-3);
  EXPECT_NEAR(b->iteration_s / a->iteration_s, 2.0, 0.01);
}

// Two H100s behind PCIe links of 32 GB/s whose peer-to-peer path reaches 10 GB/s.
const char* kPcieP2pPair = R"(
name: pcie-p2p
nodes:
  - name: n
    gpus: {type: h100, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 10, pcie_bandwidth_gbyte_s: 32, latency_us: 0.000001}
)";

TEST(Collectives, PcieFabricBandwidthCapsPeerToPeerTraffic) {
  // Two GPUs behind PCIe links of 32 GB/s whose peer-to-peer path only reaches 10 GB/s (fabric.bandwidth):
  // a 2-member ring all-reduce of S = 1 GB moves S each way, S / 10 GB/s = 0.1 s (not S / 32 GB/s).
  const auto cluster = ClusterFrom(kPcieP2pPair);
  for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced()}) {
    auto r = SimulatePrograms(CollectivePrograms({{0, 1}}, 1e9, 2, fid), cluster, false);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->iteration_s, 0.1, 1e-6);
  }
}

TEST(Collectives, TreeAndHierarchicalAllReducesComplete) {
  // Not a timing claim: every algorithm must terminate with all members (no mismatched messages).
  const auto cluster = ClusterFrom(R"(
name: two-by-four
nodes:
  - {name: n, count: 2, gpus: {type: h100, count: 4}, nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}
)");
  Programs p = CollectivePrograms({{0, 1, 2, 3, 4, 5, 6, 7}}, 1e8, 8, Fidelity::Full());
  for (auto& prog : p.programs) prog.ops[0].algorithm = Algorithm::kTree;
  auto r = SimulatePrograms(p, cluster, false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->iteration_s, 0);
}

TEST(Simulator, ReportsEveryDeviceAndAChromeTrace) {
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 4
    stages: [{devices: [0, 1], tp_degree: 2, layer_end: 3}, {devices: [2, 3], micro_batch_split: [1, 1], layer_begin: 3, layer_end: 6}]
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
  opt.record_timeline = true;
  auto r = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->report.devices_size(), 4);
  ASSERT_EQ(r->timeline.size(), 4u);
  EXPECT_GT(r->report.tokens_per_s(), 0);
  EXPECT_GT(r->report.mfu(), 0);
  EXPECT_LT(r->report.mfu(), 1);
  const std::string trace = ChromeTraceJson(*r, run.cluster);
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\": \"forward mb 0\""), std::string::npos);
  EXPECT_NE(trace.find("\"cat\": \"tp\""), std::string::npos);
}

// Progress of a simulation comes back to the caller: one kBuilt record with the operation count, then,
// with a zero interval, a kPlaying record at every 4,096th operation played (the engine looks at the
// clock that often), in order, the simulated clock never going back and never past the iteration's end.
TEST(Simulator, ReportsProgressWhileItPlays) {
  const Setting run = MakeSetting(kFreeNode, 256);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 128
    stages: [{devices: [0, 1], tp_degree: 2, layer_end: 3}, {devices: [2, 3], tp_degree: 2, layer_begin: 3, layer_end: 6}]
  - micro_batch_size: 1
    num_micro_batches: 128
    stages: [{devices: [4, 5], tp_degree: 2, layer_end: 3}, {devices: [6, 7], tp_degree: 2, layer_begin: 3, layer_end: 6}]
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.profiles = &db;
  opt.fidelity = Fidelity::Full();
  opt.progress_interval_s = 0;
  std::vector<SimProgress> seen;
  opt.progress = [&seen](const SimProgress& p) { seen.push_back(p); };
  auto r = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].phase, SimProgress::kBuilt);
  const uint64_t total = seen[0].total;
  ASSERT_GE(total, 3u * 4096) << "the plan should be large enough for several reports";
  ASSERT_EQ(seen.size(), 1 + total / 4096);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].phase, SimProgress::kPlaying);
    EXPECT_EQ(seen[i].done, 4096 * i);
    EXPECT_EQ(seen[i].total, total);
    EXPECT_GE(seen[i].simulated_s, seen[i - 1].simulated_s);
    EXPECT_LE(seen[i].simulated_s, r->report.iteration_time_s());
    EXPECT_GE(seen[i].wall_s, seen[i - 1].wall_s);
  }
  EXPECT_EQ(DescribeProgress(seen[0]), "") << "under a million operations: nothing to announce";
  SimProgress big{SimProgress::kPlaying, 1290000, 3145728, 3.9124, 10.2};
  EXPECT_EQ(DescribeProgress(big), "41% of 3,145,728 operations played, simulated clock 3.912 s, 10 s elapsed");
  big.phase = SimProgress::kBuilt;
  big.wall_s = 4.06;
  EXPECT_EQ(DescribeProgress(big), "playing 3,145,728 operations (programs built in 4.1 s)");
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

TEST(Simulator, ComputeTimeIsTheSameAtEveryFidelityForEveryRecomputation) {
  // The fidelities differ in how communication is played, never in what compute costs: per layer (full)
  // or per pass (balanced, fast), with recomputation as its own operations (full) or inside the backward
  // pass, every device computes for the same time (analytic cost model, TP 2, two stages).
  for (auto recompute : {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL}) {
    Setting run = MakeSetting(kFreeNode, 8);
    run.training.set_recompute(recompute);
    const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 4
    stages: [{devices: [0, 1], tp_degree: 2, layer_end: 3}, {devices: [2, 3], tp_degree: 2, layer_begin: 3, layer_end: 6}]
)");
    models::PlanContext ctx{run.cluster, run.model, run.training};
    std::vector<std::vector<double>> compute;
    for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced(), Fidelity::Fast()}) {
      SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
      opt.fidelity = fid;
      auto r = SimulateIteration(plan, ctx, opt);
      ASSERT_TRUE(r.ok()) << r.status().message();
      compute.emplace_back();
      for (const auto& d : r->report.devices()) compute.back().push_back(d.compute_s());
    }
    for (size_t i = 0; i < compute[0].size(); ++i) {
      EXPECT_NEAR(compute[1][i], compute[0][i], 1e-12 * compute[0][i]) << "recompute " << recompute;
      EXPECT_NEAR(compute[2][i], compute[0][i], 1e-12 * compute[0][i]) << "recompute " << recompute;
    }
  }
}

TEST(Simulator, WaitingForASlowerReplicaIsNotAPipelineBubble) {
  // Two single-stage pipelines, one on an H100 and one on an A100 (3.2x slower at the analytic cost), in
  // one ZeRO-3 group: before every forward and backward pass both all-gather the weights, so the H100
  // waits for the A100 inside each all-gather. Without pipeline parallelism there is no bubble: the
  // waiting is idle time (the H100's idle_s > 0), and it and the all-gathers are not bubble.
  const Setting run = MakeSetting(R"(
name: mixed
nodes:
  - {name: fast, gpus: {type: h100, count: 1}, nic: {kind: roce, bandwidth_gbps: 400}}
  - {name: slow, gpus: {type: a100-80gb, count: 1}, nic: {kind: roce, bandwidth_gbps: 400}}
)",
                                  8);
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [1], layer_end: 6}]}
zero_stage: 3
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // the 3.2x of the closed form
  auto r = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->report.devices(0).idle_s(), 0.05 * r->report.iteration_time_s());
  EXPECT_NEAR(r->report.bubble_fraction(), 0.0, 1e-9);
}

TEST(Simulator, InterleavedWithZeroThreeIsAClearError) {
  const Setting run = MakeSetting(kFreeNode, 8);
  auto plan = PlanFrom(R"(
schedule: interleaved_1f1b
virtual_stages: 2
zero_stage: 3
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0, 1], layer_end: 3}, {devices: [2, 3], layer_begin: 3, layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [4, 5], layer_end: 3}, {devices: [6, 7], layer_begin: 3, layer_end: 6}]}
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  auto r = SimulateIteration(plan, ctx, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("zero_stage"), std::string::npos) << r.status().message();
}


TEST(Simulator, ProfilesThatIncludeTpCommunicationAreNotChargedTwice) {
  // Sailor-style profiles time whole layers, TP all-reduces included: a TP-2 stage timed by such a
  // profile gets no simulated TP collectives; the same numbers without the flag get them.
  for (const bool included : {true, false}) {
    proto::Profile p;
    ASSERT_TRUE(models::ParseYaml(std::string("gpu: h100\nmodel: llama-tiny\nseq_len: 128\nincludes_tp_communication: ") +
                                      (included ? "true" : "false") + R"(
layers:
  - {layer: transformer, tp_degree: 2, micro_batch_size: 1, forward_s: 0.001, backward_s: 0.002}
  - {layer: embedding, tp_degree: 2, micro_batch_size: 1}
  - {layer: head, tp_degree: 2, micro_batch_size: 1}
)",
                                  "p", &p)
                    .ok());
    models::ProfileDb db;
    ASSERT_TRUE(db.Add(p, "p").ok());
    const Setting run = MakeSetting(kFreeNode, 4);
    const auto plan = PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0, 1], tp_degree: 2, layer_end: 6}]}]");
    models::PlanContext ctx{run.cluster, run.model, run.training};
    SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
    opt.profiles = &db;
    auto r = SimulateIteration(plan, ctx, opt);
    ASSERT_TRUE(r.ok()) << r.status().message();
    if (included) {
      EXPECT_EQ(r->report.devices(0).tp_communication_s(), 0.0);
    } else {
      EXPECT_GT(r->report.devices(0).tp_communication_s(), 0.0);
    }
  }
}


TEST(Simulator, TpOverlapHidesAllButTheLastChunkOfEachPasssTpCommunication) {
  // A TP-2 stage on one node (1 GB/s NVSwitch, ~0 latency), blocks of 1 ms forward and 2 ms backward, one
  // micro-batch. Without overlap a pass takes C + M (compute, then its fused TP all-reduces). With
  // comm.tp_overlap and k = 4 chunks it takes C/4 + max(3C/4, 3M/4) + M/4 = C + M/4 when M <= C (here M is
  // about 10 all-reduces of 64 KiB at 1 GB/s, under 1 ms, against C = 4 or 8 ms): 3/4 of the TP time is
  // hidden and 1/4 stays exposed.
  proto::Profile prof;
  ASSERT_TRUE(models::ParseYaml(R"(gpu: h100
model: llama-tiny
seq_len: 128
layers:
  - {layer: transformer, tp_degree: 2, micro_batch_size: 1, forward_s: 0.001, backward_s: 0.002}
  - {layer: embedding, tp_degree: 2, micro_batch_size: 1}
  - {layer: head, tp_degree: 2, micro_batch_size: 1}
)",
                                "p", &prof)
                  .ok());
  models::ProfileDb db;
  ASSERT_TRUE(db.Add(prof, "p").ok());
  const Setting run = MakeSetting(R"(
name: slow-nvswitch
nodes:
  - name: n
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1, latency_us: 0.000001, pcie_bandwidth_gbyte_s: 1000000}
)",
                                  1);
  auto plan = PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0, 1], "
                       "tp_degree: 2, layer_end: 6}]}]");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;
  opt.compute.optimizer_bytes_per_param = 0;
  opt.profiles = &db;
  // Full fidelity overlaps each layer's collectives with that layer's compute: the embedding's and the
  // head's take no time here, so their all-reduces stay exposed; only the fused fidelities give the closed
  // form exactly.
  for (Fidelity fid : {Fidelity::Balanced(), Fidelity::Fast(), Fidelity::Full()}) {
    const bool fused = fid.tp != TpDetail::kPerLayer;
    opt.fidelity = fid;
    auto plain = SimulateIteration(plan, ctx, opt);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    proto::Plan overlapped = plan;
    overlapped.mutable_comm()->set_tp_overlap(true);
    auto over = SimulateIteration(overlapped, ctx, opt);
    ASSERT_TRUE(over.ok()) << over.status().message();
    const double tp = plain->report.devices(0).tp_communication_s();
    ASSERT_GT(tp, 0.0);
    ASSERT_LT(tp, 0.004);  // M <= C in both passes
    if (fused) {
      EXPECT_NEAR(over->report.iteration_time_s(), plain->report.iteration_time_s() - 0.75 * tp, 1e-6);
      EXPECT_NEAR(over->report.devices(0).tp_communication_s(), 0.25 * tp, 1e-6);
    } else {
      EXPECT_LT(over->report.iteration_time_s(), plain->report.iteration_time_s() - 0.5 * tp);
      EXPECT_LT(over->report.devices(0).tp_communication_s(), 0.5 * tp);
    }
    EXPECT_NEAR(over->report.devices(0).compute_s(), plain->report.devices(0).compute_s(), 1e-9);
  }
}

// Two nodes of one H100: PCIe 16 GB/s between each GPU and its host memory, a 100 Gb/s (12.5 GB/s) NIC,
// ~0 latencies. Simulates `programs` with GPU-direct transfers and staged through host memory; returns
// both iteration times.
std::pair<double, double> DirectAndStaged(const Programs& programs) {
  const auto cluster = ClusterFrom(R"(
name: two
nodes:
  - {name: n, count: 2, gpus: {type: h100, count: 1}, fabric: {pcie_bandwidth_gbyte_s: 16, pcie_latency_us: 0.000001}, nic: {kind: ethernet, bandwidth_gbps: 100, latency_us: 0.000001}}
)");
  Programs staged = programs;
  staged.cpu_staged = true;
  auto a = SimulatePrograms(programs, cluster, false);
  auto b = SimulatePrograms(staged, cluster, false);
  EXPECT_TRUE(a.ok() && b.ok()) << (a.ok() ? b.status().message() : a.status().message());
  return {a.ok() ? a->iteration_s : -1, b.ok() ? b->iteration_s : -1};
}

TEST(Collectives, CpuStagedTransfersGoThroughHostMemory) {
  // Two nodes of one GPU: PCIe 16 GB/s (GPU <-> host), a 100 Gb/s (12.5 GB/s) NIC. A 2-member ring
  // all-reduce of S moves S each way. Direct (GPU-direct RDMA): S / 12.5 GB/s (the NIC is the bottleneck
  // of the GPU -> PCIe -> NIC route). Staged through host memory (HetHub §3.1), store-and-forward:
  // S/16 + S/12.5 + S/16 (GPU -> CPU, CPU -> CPU over the NIC, CPU -> GPU): 2.5625 times longer.
  const auto [direct, staged] = DirectAndStaged(CollectivePrograms({{0, 1}}, 4e9, 2, Fidelity::Balanced()));
  EXPECT_NEAR(direct, 4e9 / 12.5e9, 1e-3);
  EXPECT_NEAR(staged, 4e9 / 16e9 + 4e9 / 12.5e9 + 4e9 / 16e9, 2e-3);
}


TEST(Collectives, GradientBucketsPayTheLatencyOncePerBucket) {
  // Two nodes of one GPU, one stage replicated on both (DP 2), a 500 us NIC latency and nothing else of
  // note: the route's α is the NIC latency (half on each NIC link) plus ~0 of PCIe and switch. One sync
  // group of S bytes: a ring all-reduce of n = 2 takes S/B + 2α. In k equal buckets it takes
  // k·(S/(kB) + 2α) = S/B + 2kα, i.e. 2(k − 1)α longer; the analytic model charges the same.
  const std::string cluster = R"(
name: two
network: {switch_latency_us: 0}
nodes:
  - {name: n, count: 2, gpus: {type: h100, count: 1}, fabric: {pcie_bandwidth_gbyte_s: 64, pcie_latency_us: 0.000001}, nic: {kind: ethernet, bandwidth_gbps: 100, latency_us: 500}}
)";
  const Setting run = MakeSetting(cluster, 2);
  const auto db = ExactProfile();
  const std::string stages = "pipelines: [{micro_batch_size: 2, num_micro_batches: 1, stages: [{devices: [0, 1], layer_end: 6}]}]\n";
  const auto whole = PlanFrom(stages);
  auto bucketed = PlanFrom(stages + "comm: {dp_bucket_mib: 0.5}\n");
  const auto groups = models::DeriveGradSyncGroups(whole, run.model);
  ASSERT_EQ(groups.size(), 1u);
  const double bytes = run.model.TotalParams() * models::DTypeBytes(run.training.dtype());
  const double k = std::ceil(bytes / (0.5 * 1024 * 1024));
  ASSERT_GE(k, 3);  // llama-tiny's gradients fill several buckets
  const double alpha = 500e-6;
  const double t1 = Simulate(run, whole, db), tk = Simulate(run, bucketed, db);
  EXPECT_NEAR(tk - t1, 2 * (k - 1) * alpha, 1e-6);
}


TEST(Collectives, CpuStagedPipelineSendCrossesPcieTwice) {
  // A pipeline hand-off of S = 2 GB from GPU 0 (node 0) to GPU 1 (node 1), then GPU 1 sends S back.
  // Direct: 2 · S / 12.5 GB/s. Staged (GPU -> host -> NIC -> host -> GPU, store-and-forward):
  // 2 · (S/16 + S/12.5 + S/16) GB/s; the receive side's host -> GPU copy is part of its wait.
  Programs direct;
  direct.fidelity = Fidelity::Balanced();
  direct.devices = {0, 1};
  direct.device_slot = {0, 1};
  auto op = [](OpKind kind, uint32_t peer, uint8_t channel) {
    Op o;
    o.kind = kind;
    o.category = Category::kPp;
    o.peer = peer;
    o.channel = channel;
    o.bytes = 2e9;
    return o;
  };
  DeviceProgram first, second;
  first.ops = {op(OpKind::kSend, 1, kChanPpForward), op(OpKind::kRecv, 1, kChanPpBackward)};
  second.ops = {op(OpKind::kRecv, 0, kChanPpForward), op(OpKind::kSend, 0, kChanPpBackward), op(OpKind::kWaitSends, 0, 0)};
  direct.programs = {first, second};
  const auto [direct_s, staged_s] = DirectAndStaged(direct);
  EXPECT_NEAR(direct_s, 2 * 2e9 / 12.5e9, 1e-3);
  EXPECT_NEAR(staged_s, 2 * (2e9 / 16e9 + 2e9 / 12.5e9 + 2e9 / 16e9), 2e-3);
}

}  // namespace
}  // namespace hetsim::sim

namespace hetsim::sim {
namespace {

std::string WriteCalibration(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/" + name + ".yaml";
  std::ofstream(path) << "kind: calibration\nname: " << name << "\n" << body;
  return path;
}

TEST(Collectives, ACalibratedLinkReplacesTheFabricOfItsGpuType) {
  // The PCIe pair above (peer-to-peer 10 GB/s): a calibration that measured 5 GB/s between two H100s makes
  // the 2-member all-reduce of 1 GB take 1 GB / 5 GB/s = 0.2 s; one that measured A100s leaves 0.1 s.
  const auto cluster = ClusterFrom(kPcieP2pPair);
  const std::string h100 = WriteCalibration(
      "link-h100", "gpus:\n  - {gpus: [h100], link_bandwidth_gbyte_s: 5, link_latency_us: 0.000001}\n");
  const std::string a100 = WriteCalibration(
      "link-a100", "gpus:\n  - {gpus: [a100-80gb], link_bandwidth_gbyte_s: 5, link_latency_us: 0.000001}\n");
  ASSERT_TRUE(models::CheckKernelCalibration(h100).ok());
  ASSERT_TRUE(models::CheckKernelCalibration(a100).ok());
  const auto progs = CollectivePrograms({{0, 1}}, 1e9, 2, Fidelity::Balanced());
  auto slow = SimulatePrograms(progs, cluster, false, h100);
  auto same = SimulatePrograms(progs, cluster, false, a100);
  ASSERT_TRUE(slow.ok() && same.ok());
  EXPECT_NEAR(slow->iteration_s, 0.2, 1e-6);
  EXPECT_NEAR(same->iteration_s, 0.1, 1e-6);
}

TEST(Simulator, CollectiveEfficiencyStretchesTheGradientAllReduce) {
  // Data parallelism over two H100s joined at 1 GB/s, layer costs from an exact profile: with a calibrated
  // collective efficiency of 0.5 (and no per-call latency) the gradient all-reduce moves its bytes at half
  // the link's bandwidth, so its time doubles.
  const Setting run = MakeSetting(R"(
name: slow-pair
nodes:
  - name: n
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1, latency_us: 0.000001}
)", 4);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
comm: {dp_overlap: false}
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 2
    stages: [{devices: [0, 1], layer_end: 6}]
)");
  const std::string full = WriteCalibration("eff-1", "gpus:\n  - gpus: [h100]\n    collective_latency: [{group_size: 2, latency_us: 0}]\n");
  const std::string half = WriteCalibration(
      "eff-half", "gpus:\n  - gpus: [h100]\n    collective_efficiency: 0.5\n    collective_latency: [{group_size: 2, latency_us: 0}]\n");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  auto dp_seconds = [&](const std::string& calibration) {
    SimOptions opt;
    opt.profiles = &db;
    opt.compute.calibration = calibration;
    auto r = SimulateIteration(plan, ctx, opt);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r->report.devices(0).dp_communication_s() : -1;
  };
  const double a = dp_seconds(full), b = dp_seconds(half);
  ASSERT_GT(a, 1e-3);
  EXPECT_NEAR(b / a, 2.0, 0.02);
}

}  // namespace
}  // namespace hetsim::sim

namespace hetsim::sim {
namespace {

// The communicator's automatic choice (models/communicator.h) reaches the engine: an H100 node and an
// MI250X node (different vendors, no cross-vendor RDMA) take the CPU path on their own, with the closed
// form of Collectives.CpuStagedTransfersGoThroughHostMemory; two H100 nodes do not.
TEST(Collectives, DifferentVendorsAreStagedWithoutBeingAsked) {
  const std::string node = "fabric: {pcie_bandwidth_gbyte_s: 16, pcie_latency_us: 0.000001}, "
                           "nic: {kind: ethernet, bandwidth_gbps: 100, latency_us: 0.000001}}\n";
  const auto mixed = ClusterFrom("name: mixed\nnodes:\n  - {name: nv, gpus: {type: h100, count: 1}, " + node +
                                 "  - {name: amd, gpus: {type: mi250x, count: 1}, " + node);
  const auto same = ClusterFrom("name: same\nnodes:\n  - {name: nv, count: 2, gpus: {type: h100, count: 1}, " + node);
  const Programs ring = CollectivePrograms({{0, 1}}, 4e9, 2, Fidelity::Balanced());
  Programs auto_mixed = ring;
  const models::Communicator comm(mixed);
  auto_mixed.staged_groups = comm.staged_groups();
  auto_mixed.num_groups = 2;
  auto_mixed.node_group = {0, 1};
  auto a = SimulatePrograms(auto_mixed, mixed, false);
  auto b = SimulatePrograms(ring, same, false);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->iteration_s, 4e9 / 16e9 + 4e9 / 12.5e9 + 4e9 / 16e9, 2e-3);
  EXPECT_NEAR(b->iteration_s, 4e9 / 12.5e9, 1e-3);
  // End to end: a two-stage pipeline across the two vendors reports the path it took and why.
  const Setting run{mixed, MakeSetting(kFreeNode, 4).model, MakeSetting(kFreeNode, 4).training};
  const auto plan = PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: "
                             "[{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]}]\n");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  auto r = SimulateIteration(plan, ctx, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->report.comm_paths_size(), 1);
  EXPECT_EQ(r->report.comm_paths(0).from(), "nv");
  EXPECT_EQ(r->report.comm_paths(0).to(), "amd");
  EXPECT_EQ(r->report.comm_paths(0).path(), "cpu_staged");
  EXPECT_NE(r->report.comm_paths(0).reason().find("different vendors"), std::string::npos);
}

// Every report says what each GPU type's compute rests on: the H100's entry of the default calibration is
// measured (hetsim-kernel-bench); the MI250X has only generic values.
TEST(ComputeBasis, EachGpuTypeSaysWhetherAMeasurementIsBehindIt) {
  const std::string node = "fabric: {pcie_bandwidth_gbyte_s: 16}, nic: {kind: ethernet, bandwidth_gbps: 100}}\n";
  const auto mixed = ClusterFrom("name: mixed\nnodes:\n  - {name: nv, gpus: {type: h100, count: 1}, " + node +
                                 "  - {name: amd, gpus: {type: mi250x, count: 1}, " + node);
  const Setting run{mixed, MakeSetting(kFreeNode, 4).model, MakeSetting(kFreeNode, 4).training};
  const auto plan = PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: "
                             "[{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]}]\n");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  auto r = SimulateIteration(plan, ctx, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->report.compute_basis_size(), 2);
  std::map<std::string, proto::ComputeBasisReport> by_gpu;
  for (const auto& b : r->report.compute_basis()) by_gpu[b.gpu()] = b;
  ASSERT_TRUE(by_gpu.count("h100") && by_gpu.count("mi250x"));
  EXPECT_TRUE(by_gpu["h100"].measured());
  EXPECT_EQ(by_gpu["h100"].calibration(), "default");
  EXPECT_NE(by_gpu["h100"].source().find("hetsim-kernel-bench"), std::string::npos);
  EXPECT_FALSE(by_gpu["mi250x"].measured());
  EXPECT_FALSE(by_gpu["mi250x"].profiled());
}

}  // namespace
}  // namespace hetsim::sim

namespace hetsim::sim {
namespace {

// HetHub §4.2.1: the CPU-based communicator moved 2.1 GB/s between nodes. The bundled pair cluster's
// network (19.3 Gb/s) and PCIe (32 GB/s) were chosen so that the staged path reproduces it: Llama2-7B's
// point-to-point tensor b·s·h·2 bytes (eq. 1: 1 × 1,024 × 4,096 × 2 = 8.39 MB) exchanged both ways between
// the AMD and accelerator-#2 nodes (a 2-member ring all-reduce moves S each way) takes S / 2.1 GB/s = 4.0 ms
// (plus ~0.1 ms of latencies).
TEST(Collectives, HetHubCpuPathRunsAtThePapersBandwidth) {
  auto cluster = models::LoadCluster("hethub-amd-accel2-16");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  Programs ring = CollectivePrograms({{0, 8}}, 8.39e6, 16, Fidelity::Full());
  const models::Communicator comm(*cluster);
  ring.staged_groups = comm.staged_groups();
  ring.num_groups = 2;
  ring.node_group = {0, 1};
  auto r = SimulatePrograms(ring, *cluster, false);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->iteration_s, 8.39e6 / 2.1e9, 0.15e-3);
}

}  // namespace
}  // namespace hetsim::sim
