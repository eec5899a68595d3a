// Collectives and transfers in the simulator against alpha-beta closed forms derived by hand: ring, tree,
// NVLS and hierarchical all-reduces on hand-built programs, contention on a shared NIC, rail striping, pod
// oversubscription, PCIe peer-to-peer caps, CPU-staged transfers (HetHub §3.1) and the communicator's own
// choice of them, gradient buckets, calibrated links. Every simulation runs in a child process
// (sim/simulator.h).
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "models/communicator.h"
#include "models/kernels.h"
#include "models/spec_io.h"
#include "sim/simulator.h"
#include "tests/common/specs.h"
#include "tests/sim/simulator_fixture.h"

namespace hetsim::sim {
namespace {

using fixture::ExactProfile;
using fixture::kFreeNode;
using fixture::MakeSetting;
using fixture::Setting;
using fixture::Simulate;
using fixture::WriteCalibration;
using testing_util::ClusterFrom;
using testing_util::PlanFrom;

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
