// An xGMI node is a full mesh of Infinity Fabric links, not a switch (models/cost.h MeshFraction): a
// collective among k of the node's n GPUs can use only the k − 1 links between its members. Derived by hand
// for an 8-GPU MI300X node (7 links of 64 GB/s per direction, the catalog's 448 GB/s in all): a pair gets
// 1/7 of it (one link), four GPUs 3/7, all eight 7/7; an NVSwitch node's groups get their whole port.
#include <gtest/gtest.h>

#include <vector>

#include "models/cost.h"
#include "tests/common/specs.h"

namespace hetsim::models {
namespace {

std::vector<GroupComm> CommsOf(const Cluster& cluster, const std::vector<std::vector<uint32_t>>& groups) {
  static const TransformerModel model = std::move(LoadModel("llama-tiny")).value();
  proto::Training training;
  training.set_dtype(proto::DTYPE_BF16);
  training.set_seq_len(128);
  training.set_global_batch_size(8);
  const ComputeCost cost(model, training);
  return GroupComms(cluster, groups, [](uint32_t) { return 1.0; }, cost);
}

TEST(XgmiMesh, AGroupUsesTheLinksBetweenItsMembersOnly) {
  const Cluster mi300x = testing_util::ClusterFrom(R"(
name: mi300x-node
nodes: [{name: n, gpus: {type: mi300x, count: 8}, fabric: {kind: xgmi}}]
)");
  const auto comms = CommsOf(mi300x, {{0, 1}, {0, 1, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7}});
  EXPECT_DOUBLE_EQ(comms[0].efficiency, 1.0 / 7);
  EXPECT_DOUBLE_EQ(comms[1].efficiency, 3.0 / 7);
  EXPECT_DOUBLE_EQ(comms[2].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(MeshFraction(mi300x.node(0), 2), 1.0 / 7);
}

TEST(XgmiMesh, SwitchedAndMultiNodeGroupsAreUnchanged) {
  const Cluster h100 = testing_util::ClusterFrom(R"(
name: h100-node
nodes: [{name: n, gpus: {type: h100, count: 8}, fabric: {kind: nvswitch}}]
)");
  EXPECT_DOUBLE_EQ(CommsOf(h100, {{0, 1}})[0].efficiency, 1.0);
  // Two MI300X nodes: a group across them is priced by the network (models/nccl.h), not the mesh.
  const Cluster two = testing_util::ClusterFrom(R"(
name: mi300x-two
nodes: [{name: n, count: 2, gpus: {type: mi300x, count: 8}, fabric: {kind: xgmi},
         nic: {kind: roce, bandwidth_gbps: 400, attachment: per_gpu}}]
)");
  EXPECT_DOUBLE_EQ(CommsOf(two, {{0, 8}})[0].efficiency, 1.0);
}

}  // namespace
}  // namespace hetsim::models
