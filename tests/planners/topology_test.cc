// models/topology.h: links between devices and the α–β collective formulas, against hand-derived numbers;
// the group shortcuts (Slowest, SlowestBetween) against the pairwise definition on bundled clusters.
#include "models/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tests/planners/test_util.h"

namespace hetsim::models {
namespace {

using planners::testing::BundledCluster;
using planners::testing::ClusterFromYaml;

TEST(Collectives, AlphaBetaFormulas) {
  const Link link{LinkKind::kInterNode, 10e9, 5e-6};
  // Ring all-reduce of S = 1 GB over n = 4: 2(n−1)/n·S/β + 2(n−1)·α = 1.5·0.1 s + 6·5 µs.
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(1e9, 4, link), 0.15 + 30e-6);
  // Reduce-scatter and all-gather: half of it: 0.75·0.1 s + 3·5 µs.
  EXPECT_DOUBLE_EQ(RingReduceScatterSeconds(1e9, 4, link), 0.075 + 15e-6);
  EXPECT_DOUBLE_EQ(RingAllGatherSeconds(1e9, 4, link), 0.075 + 15e-6);
  // Tree: 2·⌈log2 4⌉·α + 2·S/β.
  EXPECT_DOUBLE_EQ(TreeAllReduceSeconds(1e9, 4, link), 4 * 5e-6 + 0.2);
  // One message: α + S/β.
  EXPECT_DOUBLE_EQ(PointToPointSeconds(1e6, link), 5e-6 + 1e-4);
  // Nothing to do alone.
  EXPECT_EQ(RingAllReduceSeconds(1e9, 1, link), 0);
  EXPECT_EQ(PointToPointSeconds(1e6, Link{}), 0);
}

TEST(Topology, CaseStudyLinksFromTheClusterSpec) {
  // hexiscale-case-study: A800 ×3 (NVSwitch 200 GB/s), RTX 4090 ×3 (PCIe 32 GB/s), RTX 3090 ×2 (PCIe
  // 16 GB/s); each machine one 8 Gb/s Ethernet NIC (30 µs), one switch (1 µs).
  const Cluster c = BundledCluster("hexiscale-case-study");
  const Topology t(c);
  const Link nv = t.Between(0, 1);
  EXPECT_EQ(nv.kind, LinkKind::kIntraNode);
  EXPECT_DOUBLE_EQ(nv.bandwidth_bytes_s, 200e9);
  EXPECT_DOUBLE_EQ(nv.latency_s, kDefaultNvlinkLatencyUs * 1e-6);
  // A800 ↔ RTX 4090: each end gets a third of its machine's 1 GB/s NIC; 30 µs NIC + 1 µs switch.
  const Link eth = t.Between(0, 3);
  EXPECT_EQ(eth.kind, LinkKind::kInterNode);
  EXPECT_DOUBLE_EQ(eth.bandwidth_bytes_s, 1e9 / 3);
  EXPECT_NEAR(eth.latency_s, 31e-6, 1e-15);
  // RTX 4090 (1/3 GB/s) ↔ RTX 3090 (1/2 GB/s): the smaller share.
  EXPECT_DOUBLE_EQ(t.Between(3, 6).bandwidth_bytes_s, 1e9 / 3);
  EXPECT_DOUBLE_EQ(t.OffNodeBandwidth(2), 0.5e9);
  // The two 3090s over their 16 GB/s PCIe fabric, default PCIe latency.
  const Link pcie = t.Between(6, 7);
  EXPECT_DOUBLE_EQ(pcie.bandwidth_bytes_s, 16e9);
  EXPECT_DOUBLE_EQ(pcie.latency_s, kDefaultPcieLatencyUs * 1e-6);
  EXPECT_EQ(t.Between(5, 5).kind, LinkKind::kSelf);
  // Groups: the slowest pair of {0, 1, 3} is an Ethernet one; of {0, 1} the NVSwitch.
  const std::vector<uint32_t> group = {0, 1, 3};
  EXPECT_DOUBLE_EQ(t.Slowest(group).bandwidth_bytes_s, 1e9 / 3);
  const std::vector<uint32_t> pair = {0, 1};
  EXPECT_DOUBLE_EQ(t.Slowest(pair).bandwidth_bytes_s, 200e9);
}

TEST(Topology, FatTreeOversubscriptionAndZones) {
  const Cluster tree = ClusterFromYaml(R"(
name: tree
nodes:
  - name: n
    count: 4
    gpus: {type: a100-80gb, count: 2}
    nic: {kind: roce, bandwidth_gbps: 100, attachment: per_gpu, latency_us: 3}
network:
  fat_tree: {nodes_per_leaf: 2, oversubscription: 4}
  switch_latency_us: 1
)");
  const Topology t(tree);
  // Nodes 0 and 1 share a leaf: 100 Gb/s = 12.5 GB/s per GPU, 3 µs + one hop.
  EXPECT_DOUBLE_EQ(t.Between(0, 2).bandwidth_bytes_s, 12.5e9);
  EXPECT_NEAR(t.Between(0, 2).latency_s, 4e-6, 1e-15);
  // Nodes 0 and 2 sit under different leaves: 1:4 oversubscribed, three hops.
  EXPECT_DOUBLE_EQ(t.Between(0, 4).bandwidth_bytes_s, 12.5e9 / 4);
  EXPECT_NEAR(t.Between(0, 4).latency_s, 6e-6, 1e-15);

  const Cluster zones = ClusterFromYaml(R"(
name: zones
nodes:
  - {name: east, gpus: {type: h100, count: 4}, zone: east, nic: {kind: infiniband, bandwidth_gbps: 400, latency_us: 2}}
  - {name: west, gpus: {type: h100, count: 4}, zone: west, nic: {kind: infiniband, bandwidth_gbps: 400, latency_us: 2}}
zone_links:
  - {from: east, to: west, bandwidth_gbps: 10, latency_ms: 5}
network: {switch_latency_us: 1}
)");
  const Topology z(zones);
  const Link cross = z.Between(0, 4);
  EXPECT_EQ(cross.kind, LinkKind::kInterZone);
  // A per-node 400 Gb/s NIC gives each of 4 GPUs 12.5 GB/s; the 10 Gb/s zone link caps it at 1.25 GB/s.
  EXPECT_DOUBLE_EQ(cross.bandwidth_bytes_s, 1.25e9);
  EXPECT_NEAR(cross.latency_s, 2e-6 + 5e-3 + 2e-6, 1e-12);
}

// A ring's hop between nodes is striped over the members' NICs: k = the fewest members on one node.
TEST(Topology, RingLinkStripesTheHopBetweenNodesOverTheMembersNics) {
  const Cluster c = ClusterFromYaml(R"(
name: rails
nodes:
  - name: n
    count: 2
    gpus: {type: h100, count: 4}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 100}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_gpu}
)");
  const Topology t(c);
  // 4 members per node: 4 × 12.5 GB/s = 50 GB/s, below the 100 GB/s NVSwitch.
  const std::vector<uint32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_DOUBLE_EQ(t.RingLink(all).bandwidth_bytes_s, 50e9);
  EXPECT_DOUBLE_EQ(t.Slowest(all).bandwidth_bytes_s, 12.5e9);  // the pairwise view is unchanged
  // 2 members on one node, 1 on the other: k = 1, one NIC.
  const std::vector<uint32_t> uneven = {0, 1, 4};
  EXPECT_DOUBLE_EQ(t.RingLink(uneven).bandwidth_bytes_s, 12.5e9);
  // One node: the fabric.
  const std::vector<uint32_t> node = {0, 1, 2, 3};
  EXPECT_DOUBLE_EQ(t.RingLink(node).bandwidth_bytes_s, 100e9);
}

// Slowest() and SlowestBetween() must equal the pairwise minimum bandwidth / maximum latency.
TEST(Topology, GroupShortcutsEqualThePairwiseDefinition) {
  const Cluster tree = ClusterFromYaml(R"(
name: tree
nodes:
  - {name: a, count: 6, gpus: {type: a100-80gb, count: 2}, nic: {kind: roce, bandwidth_gbps: 100, attachment: per_gpu}}
  - {name: b, count: 20, gpus: {type: rtx4090, count: 4}, nic: {kind: ethernet, bandwidth_gbps: 25, count: 2}}
network: {fat_tree: {nodes_per_leaf: 5, oversubscription: 3}, switch_latency_us: 2}
)");
  std::mt19937 rng(7);
  std::vector<Cluster> clusters;
  clusters.push_back(BundledCluster("hexiscale-240"));
  clusters.push_back(BundledCluster("llama3-16384"));
  clusters.push_back(BundledCluster("hexiscale-case-study"));
  clusters.push_back(BundledCluster("metis-nonuniform-v100-dominant-8"));
  clusters.push_back(tree);
  for (const Cluster& c : clusters) {
    const Topology t(c);
    std::uniform_int_distribution<uint32_t> device(0, c.num_devices() - 1);
    for (int trial = 0; trial < 40; ++trial) {
      const size_t n = 2 + trial % 60;
      std::vector<uint32_t> group;
      while (group.size() < std::min<size_t>(n, c.num_devices())) {
        const uint32_t d = device(rng);
        if (std::find(group.begin(), group.end(), d) == group.end()) group.push_back(d);
      }
      Link pairwise;
      for (size_t i = 0; i < group.size(); ++i) {
        for (size_t j = i + 1; j < group.size(); ++j) {
          const Link l = t.Between(group[i], group[j]);
          pairwise.bandwidth_bytes_s = std::min(pairwise.bandwidth_bytes_s, l.bandwidth_bytes_s);
          pairwise.latency_s = std::max(pairwise.latency_s, l.latency_s);
        }
      }
      const Link fast = t.Slowest(group);
      EXPECT_DOUBLE_EQ(fast.bandwidth_bytes_s, pairwise.bandwidth_bytes_s) << c.name() << " trial " << trial;
      EXPECT_DOUBLE_EQ(fast.latency_s, pairwise.latency_s) << c.name() << " trial " << trial;
      // Between two halves.
      const std::span<const uint32_t> all(group);
      const auto from = all.subspan(0, group.size() / 2), to = all.subspan(group.size() / 2);
      Link across;
      for (uint32_t a : from) {
        for (uint32_t b : to) {
          const Link l = t.Between(a, b);
          across.bandwidth_bytes_s = std::min(across.bandwidth_bytes_s, l.bandwidth_bytes_s);
          across.latency_s = std::max(across.latency_s, l.latency_s);
        }
      }
      const Link between = t.SlowestBetween(from, to);
      EXPECT_DOUBLE_EQ(between.bandwidth_bytes_s, across.bandwidth_bytes_s) << c.name();
      EXPECT_DOUBLE_EQ(between.latency_s, across.latency_s) << c.name();
    }
  }
}

TEST(Topology, HierarchicalAllReduceOnOneNodeIsTheRing) {
  const Cluster c = BundledCluster("hexiscale-case-study");
  const Topology t(c);
  const std::vector<uint32_t> node = {0, 1, 2};
  EXPECT_DOUBLE_EQ(t.HierarchicalAllReduceSeconds(1e9, node), RingAllReduceSeconds(1e9, 3, t.Slowest(node)));
  // Across nodes it beats the flat ring over the slow Ethernet (only S/3 crosses it).
  const std::vector<uint32_t> two_nodes = {0, 1, 2, 3, 4, 5};
  EXPECT_LT(t.HierarchicalAllReduceSeconds(1e9, two_nodes), RingAllReduceSeconds(1e9, 6, t.Slowest(two_nodes)));
}

}  // namespace
}  // namespace hetsim::models
