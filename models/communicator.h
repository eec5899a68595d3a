// HetHub §3.1's distributed unified communicator: for every pair of nodes, which path their GPUs' transfers
// take. GPUs of one node talk over the node's fabric; between nodes either
//   - GPU RDMA (GPU-direct over InfiniBand or RoCE, or NCCL-style sockets over Ethernet for one vendor), or
//   - the CPU-based path: GPU -> host memory -> network (Ethernet or IPoIB) -> host memory -> GPU, each copy
//     whole before the next starts (the paper's "deep copies"), which works between any two vendors.
// Vendors' collective libraries do not talk to each other, so a pair of nodes whose GPUs come from different
// vendors uses the CPU path unless the cluster runs HetHub's GPU-based communicator
// (`network.cross_vendor_rdma: true`) and both NICs do RDMA. A plan may force one path
// (CommOptions.communicator); forcing GPU RDMA where a pair cannot is an error naming the pair.
// The simulator plays the chosen path (sim/engine.cc); the analytic link model (models/topology.h) charges it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/status.h"

namespace hetsim::models {

enum class CommPath : uint8_t { kIntraNode, kGpuRdma, kCpuStaged };

// "intra_node", "gpu_rdma", "cpu_staged".
const char* CommPathName(CommPath path);

class Communicator {
 public:
  // The paths of `cluster` under `comm` (the plan's CommOptions; default: auto).
  Communicator(const Cluster& cluster, const proto::CommOptions& comm = {});

  CommPath Path(uint32_t node_a, uint32_t node_b) const {
    if (node_a == node_b) return CommPath::kIntraNode;
    return GroupsStaged(cluster_->node(node_a).group, cluster_->node(node_b).group) ? CommPath::kCpuStaged
                                                                                    : CommPath::kGpuRdma;
  }
  bool Staged(uint32_t node_a, uint32_t node_b) const { return Path(node_a, node_b) == CommPath::kCpuStaged; }
  // Whether transfers between nodes of two node groups (indices into cluster.spec().nodes()) are staged.
  bool GroupsStaged(uint32_t group_a, uint32_t group_b) const { return staged_[Index(group_a, group_b)] != 0; }
  // Why a pair of node groups (indices into cluster.spec().nodes()) uses its path, in words.
  const std::string& Reason(uint32_t group_a, uint32_t group_b) const { return reason_[Index(group_a, group_b)]; }
  bool any_staged() const;
  // Per node group (cluster.spec().nodes() index): the matrix of staged pairs, row-major, for the simulator.
  const std::vector<uint8_t>& staged_groups() const { return staged_; }

  // Ok, or (communicator: gpu_rdma) an error naming the first pair of node groups that cannot do RDMA.
  Status Check(const std::string& file) const;

 private:
  size_t Index(uint32_t a, uint32_t b) const { return size_t{a} * groups_ + b; }
  const Cluster* cluster_;
  uint32_t groups_ = 0;
  std::vector<uint8_t> staged_;
  std::vector<uint8_t> impossible_;  // forced RDMA on a pair that cannot
  std::vector<std::string> reason_;
};

// The CommOptions' mode, with the legacy `cpu_staged: true` read as cpu_staged.
proto::CommOptions::Communicator CommunicatorMode(const proto::CommOptions& comm);

}  // namespace hetsim::models
