// HetHub §3.1's communicator paths (models/communicator.h) and the link the analytic model charges for them.
#include "models/communicator.h"

#include <gtest/gtest.h>

#include "models/topology.h"
#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

// Node groups: two NVIDIA nodes, one AMD node, one node of an anonymised vendor; `nic` for all.
Cluster Mixed(const std::string& nic, bool cross_vendor) {
  proto::Cluster spec;
  const std::string yaml = std::string("name: mixed\nnetwork: {cross_vendor_rdma: ") + (cross_vendor ? "true" : "false") +
                           "}\nnodes:\n"
                           "  - {name: nv, count: 2, gpus: {type: a100-80gb, count: 2}, nic: " + nic + "}\n"
                           "  - {name: amd, gpus: {type: mi250x, count: 2}, nic: " + nic + "}\n"
                           "  - {name: other, gpus: {type: a100-80gb-pcie, count: 2}, vendor: accel, nic: " + nic + "}\n";
  const Status s = ParseYaml(yaml, "mixed.yaml", &spec);
  EXPECT_TRUE(s.ok()) << s.message();
  auto c = Cluster::Build(spec, "mixed.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

TEST(Communicator, DifferentVendorsTakeTheCpuPathUnlessTheClusterBridgesThem) {
  // Nodes: 0, 1 = nv; 2 = amd; 3 = other (vendor "accel", a stand-in computing like an A100).
  const Cluster ib = Mixed("{kind: infiniband, bandwidth_gbps: 200}", false);
  const Communicator auto_paths(ib);
  EXPECT_EQ(auto_paths.Path(0, 0), CommPath::kIntraNode);
  EXPECT_EQ(auto_paths.Path(0, 1), CommPath::kGpuRdma);    // one vendor
  EXPECT_EQ(auto_paths.Path(0, 2), CommPath::kCpuStaged);  // nvidia - amd
  EXPECT_EQ(auto_paths.Path(2, 3), CommPath::kCpuStaged);  // amd - accel: the node's `vendor` counts
  EXPECT_NE(auto_paths.Reason(0, 1).find("different vendors"), std::string::npos) << auto_paths.Reason(0, 1);
  // HetHub's GPU-based communicator over InfiniBand: RDMA between vendors too.
  const Cluster bridged = Mixed("{kind: infiniband, bandwidth_gbps: 200}", true);
  EXPECT_EQ(Communicator(bridged).Path(0, 2), CommPath::kGpuRdma);
  // ... but not over plain Ethernet, which has no RDMA.
  const Cluster eth = Mixed("{kind: ethernet, bandwidth_gbps: 100}", true);
  EXPECT_EQ(Communicator(eth).Path(0, 2), CommPath::kCpuStaged);
  EXPECT_EQ(Communicator(eth).Path(0, 1), CommPath::kGpuRdma);  // one vendor's library over sockets
}

TEST(Communicator, ForcedModes) {
  const Cluster ib = Mixed("{kind: infiniband, bandwidth_gbps: 200}", false);
  proto::CommOptions staged;
  staged.set_cpu_staged(true);  // the legacy flag = communicator: cpu_staged
  EXPECT_EQ(Communicator(ib, staged).Path(0, 1), CommPath::kCpuStaged);
  EXPECT_EQ(Communicator(ib, staged).Path(1, 1), CommPath::kIntraNode);
  proto::CommOptions rdma;
  rdma.set_communicator(proto::CommOptions::COMMUNICATOR_GPU_RDMA);
  const Communicator forced(ib, rdma);
  EXPECT_EQ(forced.Path(0, 2), CommPath::kGpuRdma);
  const Status s = forced.Check("plan.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("plan.yaml: comm.communicator: gpu_rdma is impossible between node groups 'nv' and 'amd'"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(Communicator(ib).Check("plan.yaml").ok());
}

TEST(Communicator, TheAnalyticLinkOfAStagedPairIsStoreAndForward) {
  // A100 nodes: PCIe 32 GB/s each way between GPU and host (catalog, gen 4); InfiniBand 200 Gb/s per node
  // shared by 2 GPUs: 12.5 GB/s per GPU. Staged: 1 / (1/32 + 1/12.5 + 1/32) GB/s.
  const Cluster ib = Mixed("{kind: infiniband, bandwidth_gbps: 200}", false);
  const Topology topo(ib);
  const Link direct = topo.Between(0, 2);   // nv-0 GPU 0 - nv-1 GPU 0: one vendor
  const Link staged = topo.Between(0, 4);   // nv-0 GPU 0 - amd GPU 0
  EXPECT_NEAR(direct.bandwidth_bytes_s, 12.5e9, 1);
  // The AMD side: mi250x PCIe 32 GB/s, its NIC share 12.5 GB/s too.
  EXPECT_NEAR(staged.bandwidth_bytes_s, 1 / (1 / 32e9 + 1 / 12.5e9 + 1 / 32e9), 1);
  EXPECT_GT(staged.latency_s, direct.latency_s);
}

}  // namespace
}  // namespace hetsim::models
