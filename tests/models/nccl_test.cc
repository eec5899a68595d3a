// NCCL's choice of algorithm and protocol between nodes (models/nccl.h), against values derived by hand from
// NCCL's tuning model.
#include "models/nccl.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace hetsim::models {
namespace {

// N nodes of 8 NVLink GPUs, 4 NICs of 200 Gb/s each shared by the node's GPUs (100 GB/s a node).
NcclGroup Nodes(uint32_t nodes) {
  NcclGroup g;
  g.ranks = 8 * nodes;
  g.nodes = nodes;
  g.per_node = 8;
  g.nvlink = true;
  g.node_bandwidth_bytes_s = 4 * 200e9 / 8;
  g.nic = proto::Nic::KIND_INFINIBAND;
  return g;
}

TEST(Nccl, ASmallAllReduceOnManyNodesTakesTheTreeWithLL) {
  // 8 bytes over 32 nodes (256 ranks). Tree LL: 6.8 + 2 · (7 · 0.6 + ⌊log2 32⌋ · 5.0) = 65.2 us. Ring LL:
  // 6.6 + (510 − 62) · max(0.6, 1.0) + 62 · 2.7 = 622 us; tree LL128 116.5 us; tree Simple 204.4 us.
  // (NVIDIA/nccl#652 measured 62-71 us for 4-128 bytes on 32 such nodes.)
  const NcclCall c = ChooseNccl(CollectiveKind::kAllReduce, 8, Nodes(32), NetworkParamsFor(proto::Nic::KIND_INFINIBAND));
  EXPECT_EQ(c.algo, NcclAlgo::kTree);
  EXPECT_EQ(c.proto, NcclProto::kLL);
  EXPECT_NEAR(c.latency_s, 65.2e-6, 1e-12);
}

TEST(Nccl, ALargeAllReduceOnFourNodesTakesTheRingAtTheBusEfficiency) {
  // 1 GiB over 4 nodes (32 ranks). Ring Simple: latency (8.4 + (62 − 6) · 3.4 + 6 · 14) · 1.4 (the plateau)
  // = 395.92 us, bus bandwidth 0.96 · 100 = 96 GB/s, algorithm bandwidth 96 · 32/62 = 49.55 GB/s: 22.07 ms.
  // Ring LL128 (88.32 GB/s bus): 23.70 ms; tree Simple (44.16 GB/s algorithm): 24.43 ms.
  const NcclCall c =
      ChooseNccl(CollectiveKind::kAllReduce, 1 << 30, Nodes(4), NetworkParamsFor(proto::Nic::KIND_INFINIBAND));
  EXPECT_EQ(c.algo, NcclAlgo::kRing);
  EXPECT_EQ(c.proto, NcclProto::kSimple);
  EXPECT_NEAR(c.latency_s, 395.92e-6, 1e-12);
  EXPECT_NEAR(c.bandwidth_bytes_s, 96e9 * 32 / 62, 1e3);
  EXPECT_NEAR(c.efficiency, 0.96, 1e-12);  // the played ring at line rate over 0.96
}

TEST(Nccl, AMediumAllReduceOnSixtyFourNodesTakesTheTree) {
  // 64 MiB over 64 nodes (512 ranks): the ring's latency grows with the ranks, (8.4 + 896 · 3.4 + 126 · 14)
  // · 1.4 = 6.75 ms, the tree's with log2 of the nodes. Tree LL128: 14 + 2 · (7 · 1.25 + 6 · 8.5) = 133.5
  // us, bandwidth 96 · 0.92 · 120/128 · 0.5 · 0.9 (NCCL's correction at 2^20 · 64 B) = 37.26 GB/s: 1934.6 us;
  // tree Simple 232.4 us + 64 MiB / (96 · 0.92 · 0.5 · 0.8 GB/s) = 2131.9 us.
  const NcclCall c = ChooseNccl(CollectiveKind::kAllReduce, 64.0 * (1 << 20), Nodes(64),
                                NetworkParamsFor(proto::Nic::KIND_INFINIBAND));
  EXPECT_EQ(c.algo, NcclAlgo::kTree);
  EXPECT_EQ(c.proto, NcclProto::kLL128);
  EXPECT_NEAR(c.seconds, 133.5e-6 + 64.0 * (1 << 20) / 37.26e9, 1e-9);
  // The played ring moves 1022/512 of the buffer through 100 GB/s: its bytes over 1022/512 · 37.26/100.
  EXPECT_NEAR(c.efficiency, 1022.0 / 512 * 0.3726, 1e-9);
}

TEST(Nccl, ReduceScatterAndAllGatherRunRings) {
  const NcclCall c = ChooseNccl(CollectiveKind::kReduceScatter, 64.0 * (1 << 20), Nodes(64),
                                NetworkParamsFor(proto::Nic::KIND_INFINIBAND));
  EXPECT_EQ(c.algo, NcclAlgo::kRing);
}

TEST(Nccl, TcpSocketsReachLessAndRunNoLL128) {
  // NCCL's socket transport: 0.6 of line rate, no LL128 (default calibration).
  const NetworkParams& tcp = NetworkParamsFor(proto::Nic::KIND_ETHERNET);
  EXPECT_DOUBLE_EQ(tcp.bus_efficiency, 0.6);
  EXPECT_FALSE(tcp.ll128);
  NcclGroup g = Nodes(4);
  g.nic = proto::Nic::KIND_ETHERNET;
  const NcclCall c = ChooseNccl(CollectiveKind::kAllReduce, 1 << 30, g, tcp);
  EXPECT_NE(c.proto, NcclProto::kLL128);
  EXPECT_NEAR(c.efficiency, 0.6, 1e-12);
}

TEST(Nccl, ACalibrationFileLayersItsNetworkOverItsBase) {
  const std::string path = testing::TempDir() + "net-calibration.yaml";
  std::ofstream(path) << "kind: calibration\nname: my-net\nbase: default\n"
                         "network:\n  - nics: [ethernet]\n    source: measured\n    bus_efficiency: 0.5\n";
  EXPECT_DOUBLE_EQ(NetworkParamsFor(proto::Nic::KIND_ETHERNET, path).bus_efficiency, 0.5);
  EXPECT_EQ(NetworkParamsFor(proto::Nic::KIND_ETHERNET, path).source, "measured");
  EXPECT_DOUBLE_EQ(NetworkParamsFor(proto::Nic::KIND_INFINIBAND, path).bus_efficiency, 0.96);  // the base's
}

TEST(Nccl, AGroupsNodeBandwidthCountsTheDistinctNicsItsMembersReach) {
  proto::Cluster spec;
  spec.set_name("two");
  auto* n = spec.add_nodes();
  n->set_name("n");
  n->set_count(2);
  n->mutable_gpus()->set_type("a100-80gb");
  n->mutable_gpus()->set_count(8);
  n->mutable_nic()->set_kind(proto::Nic::KIND_INFINIBAND);
  n->mutable_nic()->set_bandwidth_gbps(200);
  n->mutable_nic()->set_attachment(proto::Nic::ATTACHMENT_PER_NODE);
  n->mutable_nic()->set_count(4);
  auto cluster = Cluster::Build(spec, "test");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  // GPU l uses NIC l % 4: GPUs 0 and 4 share NIC 0 (25 GB/s a node); GPUs 0 and 1 reach two (50 GB/s).
  const NcclGroup shared = NcclGroupOf(*cluster, {0, 4, 8, 12});
  EXPECT_EQ(shared.nodes, 2u);
  EXPECT_EQ(shared.per_node, 2u);
  EXPECT_DOUBLE_EQ(shared.node_bandwidth_bytes_s, 25e9);
  EXPECT_DOUBLE_EQ(NcclGroupOf(*cluster, {0, 1, 8, 9}).node_bandwidth_bytes_s, 50e9);
  EXPECT_EQ(NcclGroupOf(*cluster, {0, 1, 2}).nodes, 1u);
}

}  // namespace
}  // namespace hetsim::models
