// Links between the devices of a cluster and the α–β (latency–bandwidth) times of the collectives that run
// over them. Shared by the planners' analytic cost models and the simulator's fast path, so that both read
// the cluster the same way.
//
// The link between two devices (one direction, one flow, no contention with other traffic):
//   - the same device: infinite bandwidth, no latency (LinkKind::kSelf);
//   - the same node: the node's fabric (NVSwitch/NVLink/xGMI per-GPU bandwidth, or the PCIe fabric) and
//     its latency;
//   - different nodes: each end's share of its NIC bandwidth, capped by its GPU↔host PCIe link — a per-GPU
//     NIC is the GPU's own, a per-node NIC (count × bandwidth) is shared fairly by the node's GPUs, as when
//     every GPU of the node synchronises gradients at once; divided by the oversubscription when the two
//     nodes sit under different leaf switches (fat_tree) or in different pods (pods). Latency: the larger
//     of the two NIC latencies plus one switch hop (three across leaves or pods);
//   - different zones: as different nodes, capped by the zone link, plus its latency and two switch hops;
//   - a pair the communicator stages through host memory (models/communicator.h, HetHub §3.1): the copy to
//     host memory, the network link above and the copy back, one after the other (store and forward):
//     1/β = 1/β_pcie,a + 1/β_net + 1/β_pcie,b, α = the sum of the three latencies.
// Collectives over a group of devices are bounded by the group's slowest link (the bandwidth of the
// slowest pair and the latency of the worst pair), the way Metis §4.2.1 and HexiScale Appendix A cost
// them. Contention between concurrent transfers is the simulator's job (SimGrid's max-min sharing).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "models/cluster.h"
#include "models/communicator.h"

namespace hetsim::models {

enum class LinkKind { kSelf, kIntraNode, kInterNode, kInterZone };

// "self", "intra-node", "inter-node", "inter-zone".
const char* LinkKindName(LinkKind kind);

struct Link {
  LinkKind kind = LinkKind::kSelf;
  double bandwidth_bytes_s = std::numeric_limits<double>::infinity();  // one direction
  double latency_s = 0;
};

// NVLink SHARP (NVLS) all-reduce: every GPU sends and receives S once through the NVSwitch, which reduces;
// the switch's reduction rate holds it to this fraction of the GPU's NVLink bandwidth. Fitted on the
// measured NCCL curves in calibration/data/nccl (their sources: its README.md): an 8-GPU H100 DGX
// reaches 274 GB/s algorithm bandwidth at 8 GiB and H200 HGX 259-268 GB/s at 5-8 GPUs, over 450 GB/s ports
// (0.58-0.61); NCCL's ring on the same H200s reaches 364-366 GB/s bus bandwidth.
inline constexpr double kNvlsEfficiency = 0.6;

// ---- α–β formulas (α = link.latency_s, β = link.bandwidth_bytes_s; `bytes` is S) ---------------------

// One message: α + S/β.
double PointToPointSeconds(double bytes, const Link& link);
// Ring all-reduce of S bytes over n ranks: 2(n−1)/n · S/β + 2(n−1)·α (NCCL ring: reduce-scatter then
// all-gather, 2(n−1) steps of S/n). 0 when n ≤ 1.
double RingAllReduceSeconds(double bytes, uint32_t n, const Link& link);
// Ring reduce-scatter (or all-gather) of S bytes in total over n ranks: (n−1)/n · S/β + (n−1)·α.
double RingReduceScatterSeconds(double bytes, uint32_t n, const Link& link);
double RingAllGatherSeconds(double bytes, uint32_t n, const Link& link);
// NVLS all-reduce inside one NVSwitch node: S/(kNvlsEfficiency·β) + 2α (to the switch, back from it).
double NvlsAllReduceSeconds(double bytes, uint32_t n, const Link& link);
// Tree all-reduce (reduce to the root, broadcast back, pipelined): 2·⌈log₂ n⌉·α + 2·S/β.
double TreeAllReduceSeconds(double bytes, uint32_t n, const Link& link);

class Topology {
 public:
  // `comm`: the plan's communication options, which decide the communicator's paths (default: auto).
  explicit Topology(const Cluster& cluster, const proto::CommOptions& comm = {});

  const Cluster& cluster() const { return *cluster_; }
  // The link from device a to device b (symmetric).
  Link Between(uint32_t a, uint32_t b) const;
  // The slowest link among all pairs of `devices`: minimum bandwidth and maximum latency over the pairs
  // (they may come from different pairs). kSelf for fewer than two devices. O(n log n).
  Link Slowest(std::span<const uint32_t> devices) const;
  // The link a ring collective over `devices` runs at: Slowest, except that the hop between two nodes is
  // striped over k flows, k = the fewest members the group has on one node (NCCL's channels cross between
  // nodes at different member GPUs, each through its own NIC), as the simulator plays it.
  Link RingLink(std::span<const uint32_t> devices) const;
  // The slowest link over pairs (a in `from`, b in `to`).
  Link SlowestBetween(std::span<const uint32_t> from, std::span<const uint32_t> to) const;
  // Bandwidth one GPU of `node` gets off the node (bytes/s): its NIC share capped by its PCIe link;
  // 0 when the node has no NIC.
  double OffNodeBandwidth(uint32_t node) const { return nodes_[node].share_bytes_s; }
  // Hierarchical all-reduce of S bytes over `devices` (HexiScale/NCCL style): reduce-scatter inside each
  // node, ring all-reduce of the S/k shards across nodes (k = devices of the group on the node with the
  // fewest), all-gather inside each node. Equals RingAllReduceSeconds on one node.
  double HierarchicalAllReduceSeconds(double bytes, std::span<const uint32_t> devices) const;

 private:
  struct NodeLinks {
    double fabric_bytes_s = 0;
    double fabric_latency_s = 0;
    double share_bytes_s = 0;  // off-node bandwidth per GPU
    double nic_latency_s = 0;
    uint32_t switch_group = 0;  // leaf switch (fat_tree) or pod; 0 for a single switch
    uint32_t zone = 0;
    double pcie_bytes_s = 0;   // GPU <-> host memory (the CPU path's copies)
    double pcie_latency_s = 0;
  };
  Link NodePair(uint32_t na, uint32_t nb) const;
  // (node, devices of the group on it), sorted by node.
  std::vector<std::pair<uint32_t, uint32_t>> NodeCounts(std::span<const uint32_t> devices) const;

  const Cluster* cluster_;
  Communicator comm_;
  std::vector<NodeLinks> nodes_;
  uint32_t num_zones_ = 1;
  std::vector<Link> zone_links_;  // num_zones × num_zones; kInterZone links
  double oversubscription_ = 1;
  double switch_latency_s_ = 0;
};

}  // namespace hetsim::models
