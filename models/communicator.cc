#include "models/communicator.h"

namespace hetsim::models {
namespace {

bool Rdma(const NodeInfo& n) {
  return n.has_nic && (n.nic.kind() == proto::Nic::KIND_INFINIBAND || n.nic.kind() == proto::Nic::KIND_ROCE);
}

// The node group's vendor: its own `vendor:` (a stand-in part), else the catalog's.
std::string Vendor(const Cluster& cluster, uint32_t group, const NodeInfo& node) {
  const std::string& own = cluster.spec().nodes(static_cast<int>(group)).vendor();
  return own.empty() ? node.gpu->vendor : own;
}

}  // namespace

const char* CommPathName(CommPath path) {
  switch (path) {
    case CommPath::kIntraNode: return "intra_node";
    case CommPath::kGpuRdma: return "gpu_rdma";
    case CommPath::kCpuStaged: return "cpu_staged";
  }
  return "?";
}

proto::CommOptions::Communicator CommunicatorMode(const proto::CommOptions& comm) {
  if (comm.cpu_staged()) return proto::CommOptions::COMMUNICATOR_CPU_STAGED;
  if (comm.communicator() == proto::CommOptions::COMMUNICATOR_UNSPECIFIED) return proto::CommOptions::COMMUNICATOR_AUTO;
  return comm.communicator();
}

Communicator::Communicator(const Cluster& cluster, const proto::CommOptions& comm) : cluster_(&cluster) {
  groups_ = static_cast<uint32_t>(cluster.spec().nodes_size());
  staged_.assign(size_t{groups_} * groups_, 0);
  impossible_.assign(staged_.size(), 0);
  reason_.assign(staged_.size(), "");
  // One representative node per group (a group's nodes share GPU type and NIC).
  std::vector<const NodeInfo*> rep(groups_, nullptr);
  for (const auto& n : cluster.nodes()) {
    if (rep[n.group] == nullptr) rep[n.group] = &n;
  }
  const auto mode = CommunicatorMode(comm);
  const bool cross = cluster.spec().network().cross_vendor_rdma();
  for (uint32_t a = 0; a < groups_; ++a) {
    for (uint32_t b = 0; b < groups_; ++b) {
      if (rep[a] == nullptr || rep[b] == nullptr) continue;
      const std::string va = Vendor(cluster, a, *rep[a]);
      const std::string vb = Vendor(cluster, b, *rep[b]);
      const bool rdma_nics = Rdma(*rep[a]) && Rdma(*rep[b]);
      // Whether GPU-direct transfers can work at all between the two groups.
      bool can = true;
      std::string why;
      if (va != vb && !cross) {
        can = false;
        why = "GPUs of different vendors (" + va + ", " + vb +
              ") and no cross-vendor RDMA in the cluster (network.cross_vendor_rdma)";
      } else if (va != vb && !rdma_nics) {
        can = false;
        why = "GPUs of different vendors (" + va + ", " + vb + ") need RDMA NICs (InfiniBand or RoCE) on both nodes";
      } else if (va != vb) {
        why = "GPUs of different vendors over the cross-vendor GPU communicator (network.cross_vendor_rdma)";
      } else {
        why = rdma_nics ? "GPUs of one vendor (" + va + "), RDMA NICs"
                        : "GPUs of one vendor (" + va + "), the vendor's library over the NIC";
      }
      const size_t i = Index(a, b);
      switch (mode) {
        case proto::CommOptions::COMMUNICATOR_CPU_STAGED:
          staged_[i] = 1;
          reason_[i] = "the plan asks for the CPU path (communicator: cpu_staged)";
          break;
        case proto::CommOptions::COMMUNICATOR_GPU_RDMA:
          impossible_[i] = can ? 0 : 1;
          reason_[i] = can ? "the plan asks for GPU RDMA; " + why : why;
          break;
        default:
          staged_[i] = can ? 0 : 1;
          reason_[i] = why;
          break;
      }
    }
  }
}

bool Communicator::any_staged() const {
  for (uint8_t s : staged_) {
    if (s) return true;
  }
  return false;
}

Status Communicator::Check(const std::string& file) const {
  for (uint32_t a = 0; a < groups_; ++a) {
    for (uint32_t b = 0; b < groups_; ++b) {
      if (!impossible_[Index(a, b)]) continue;
      return Status::Invalid(file + ": comm.communicator: gpu_rdma is impossible between node groups '" +
                             cluster_->spec().nodes(static_cast<int>(a)).name() + "' and '" +
                             cluster_->spec().nodes(static_cast<int>(b)).name() + "': " + reason_[Index(a, b)] +
                             "; use communicator: auto (the CPU path where needed) or set network.cross_vendor_rdma "
                             "with RDMA NICs in the cluster");
    }
  }
  return Status::Ok();
}

}  // namespace hetsim::models
