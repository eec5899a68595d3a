// The network fit (calibration/network_fit.h) on synthetic measurements: calls timed by NCCL's model under
// known values are fitted back to those values.
#include "calibration/network_fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace hetsim::calibration {
namespace {

TEST(NetworkFit, RecoversTheValuesThatTimedTheCalls) {
  // InfiniBand at 0.83 of line rate with 20 us of the network's own latency per step; all-reduces of 8 B to
  // 1 GiB over 2 to 32 nodes of 8 GPUs, each with its own 200 Gb/s NIC.
  models::NetworkParams truth = models::NetworkParamsFor(proto::Nic::KIND_INFINIBAND);
  truth.bus_efficiency = 0.83;
  truth.net_latency_s = 20e-6;
  std::vector<NetworkRow> rows;
  for (uint32_t nodes : {2u, 4u, 8u, 32u}) {
    for (double bytes = 8; bytes <= 1 << 30; bytes *= 16) {
      NetworkRow r;
      r.group.nodes = nodes;
      r.group.per_node = 8;
      r.group.ranks = 8 * nodes;
      r.group.node_bandwidth_bytes_s = 8 * 200e9 / 8;
      r.bytes = bytes;
      r.time_s = NetworkModelSeconds(r, truth);
      rows.push_back(r);
    }
  }
  const auto fits = FitNetwork(rows, "default");
  ASSERT_EQ(fits.size(), 1u);
  EXPECT_NEAR(fits[0].entry.bus_efficiency(), 0.83, 0.002);
  EXPECT_NEAR(fits[0].entry.net_latency_us(), 20, 0.2);
  EXPECT_LT(fits[0].mape, 0.002);
  EXPECT_GT(fits[0].base_mape, 0.05);  // the default's values (0.96, 0 us) do not time these calls
  ASSERT_EQ(fits[0].entry.nics_size(), 1);
  EXPECT_EQ(fits[0].entry.nics(0), proto::Nic::KIND_INFINIBAND);
}

TEST(NetworkFit, ReadsNcclTestsRowsWithTheirDefaults) {
  const std::string path = testing::TempDir() + "network.csv";
  std::ofstream(path) << "# comment\nnodes,gpus_per_node,nic,nic_gbps,bytes,time_us,extra\n4,8,roce,400,1048576,380,x\n"
                         "2,4,ethernet,100,64,90,y\n";
  auto rows = ReadNetworkBench(path);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  const NetworkRow& a = (*rows)[0];
  EXPECT_EQ(a.group.ranks, 32u);
  EXPECT_DOUBLE_EQ(a.group.node_bandwidth_bytes_s, 8 * 400e9 / 8);  // one NIC per GPU by default
  EXPECT_EQ(a.group.nic, proto::Nic::KIND_ROCE);
  EXPECT_TRUE(a.group.nvlink);
  EXPECT_DOUBLE_EQ(a.time_s, 380e-6);
  EXPECT_EQ(a.collective, models::CollectiveKind::kAllReduce);
  EXPECT_EQ((*rows)[1].group.nic, proto::Nic::KIND_ETHERNET);
}

}  // namespace
}  // namespace hetsim::calibration
