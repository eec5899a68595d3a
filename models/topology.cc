#include "models/topology.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace hetsim::models {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Keeps the minimum bandwidth and the maximum latency seen, and the "farthest" kind.
void Worsen(Link& acc, const Link& l) {
  acc.bandwidth_bytes_s = std::min(acc.bandwidth_bytes_s, l.bandwidth_bytes_s);
  acc.latency_s = std::max(acc.latency_s, l.latency_s);
  acc.kind = std::max(acc.kind, l.kind);
}

}  // namespace

const char* LinkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kSelf:
      return "self";
    case LinkKind::kIntraNode:
      return "intra-node";
    case LinkKind::kInterNode:
      return "inter-node";
    case LinkKind::kInterZone:
      return "inter-zone";
  }
  return "?";
}

double PointToPointSeconds(double bytes, const Link& link) {
  if (link.kind == LinkKind::kSelf || bytes <= 0) return 0;
  return link.latency_s + bytes / link.bandwidth_bytes_s;
}

double RingAllReduceSeconds(double bytes, uint32_t n, const Link& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / link.bandwidth_bytes_s + 2.0 * (n - 1) * link.latency_s;
}

double NvlsAllReduceSeconds(double bytes, uint32_t n, const Link& link) {
  if (n <= 1) return 0;
  return bytes / (kNvlsEfficiency * link.bandwidth_bytes_s) + 2.0 * link.latency_s;
}

double RingReduceScatterSeconds(double bytes, uint32_t n, const Link& link) {
  if (n <= 1) return 0;
  return double(n - 1) / n * bytes / link.bandwidth_bytes_s + double(n - 1) * link.latency_s;
}

double RingAllGatherSeconds(double bytes, uint32_t n, const Link& link) {
  return RingReduceScatterSeconds(bytes, n, link);
}

double TreeAllReduceSeconds(double bytes, uint32_t n, const Link& link) {
  if (n <= 1) return 0;
  const double depth = std::ceil(std::log2(static_cast<double>(n)));
  return 2.0 * depth * link.latency_s + 2.0 * bytes / link.bandwidth_bytes_s;
}

Topology::Topology(const Cluster& cluster, const proto::CommOptions& comm) : cluster_(&cluster), comm_(cluster, comm) {
  const auto& spec = cluster.spec();
  uint32_t per_group = 0;  // nodes per leaf switch or pod; 0 = one switch
  if (spec.network().has_fat_tree()) {
    per_group = spec.network().fat_tree().nodes_per_leaf();
    oversubscription_ = std::max(1.0, spec.network().fat_tree().oversubscription());
  } else if (spec.network().has_pods()) {
    per_group = spec.network().pods().nodes_per_pod();
    oversubscription_ = std::max(1.0, spec.network().pods().oversubscription());
  }
  switch_latency_s_ = spec.network().switch_latency_us() * 1e-6;
  std::map<std::string, uint32_t> zone_index;
  for (const auto& n : cluster.nodes()) zone_index.emplace(n.zone, 0);
  uint32_t z = 0;
  for (auto& [name, index] : zone_index) index = z++;
  num_zones_ = std::max<uint32_t>(1, z);
  zone_links_.assign(size_t{num_zones_} * num_zones_, Link{LinkKind::kInterZone, kInf, 0});
  for (const auto& zl : spec.zone_links()) {
    auto a = zone_index.find(zl.from()), b = zone_index.find(zl.to());
    if (a == zone_index.end() || b == zone_index.end()) continue;
    const Link l{LinkKind::kInterZone, zl.bandwidth_gbps() * 1e9 / 8, zl.latency_ms() * 1e-3};
    zone_links_[a->second * num_zones_ + b->second] = l;
    zone_links_[b->second * num_zones_ + a->second] = l;
  }
  nodes_.reserve(cluster.nodes().size());
  for (size_t i = 0; i < cluster.nodes().size(); ++i) {
    const NodeInfo& n = cluster.nodes()[i];
    NodeLinks nl;
    nl.fabric_bytes_s = n.fabric.bandwidth_gbyte_s() * 1e9;
    nl.fabric_latency_s = n.fabric.latency_us() * 1e-6;
    if (n.has_nic) {
      const double nic_bytes_s = n.nic.bandwidth_gbps() * 1e9 / 8;
      const double share = n.nic.attachment() == proto::Nic::ATTACHMENT_PER_GPU
                               ? nic_bytes_s
                               : nic_bytes_s * std::max<uint32_t>(1, n.nic.count()) / std::max<uint32_t>(1, n.num_gpus);
      nl.share_bytes_s = std::min(share, n.fabric.pcie_bandwidth_gbyte_s() * 1e9);
      nl.nic_latency_s = n.nic.latency_us() * 1e-6;
    }
    nl.pcie_bytes_s = n.fabric.pcie_bandwidth_gbyte_s() * 1e9;
    nl.pcie_latency_s = n.fabric.pcie_latency_us() * 1e-6;
    nl.switch_group = per_group == 0 ? 0 : static_cast<uint32_t>(i / per_group);
    nl.zone = zone_index.at(n.zone);
    nodes_.push_back(nl);
  }
}

Link Topology::NodePair(uint32_t na, uint32_t nb) const {
  const NodeLinks& a = nodes_[na];
  const NodeLinks& b = nodes_[nb];
  if (na == nb) return {LinkKind::kIntraNode, a.fabric_bytes_s, a.fabric_latency_s};
  Link l{LinkKind::kInterNode, std::min(a.share_bytes_s, b.share_bytes_s), std::max(a.nic_latency_s, b.nic_latency_s)};
  if (a.zone != b.zone) {
    const Link& zl = zone_links_[a.zone * num_zones_ + b.zone];
    l.kind = LinkKind::kInterZone;
    l.bandwidth_bytes_s = std::min(l.bandwidth_bytes_s, zl.bandwidth_bytes_s);
    l.latency_s += zl.latency_s + 2 * switch_latency_s_;
  } else if (a.switch_group != b.switch_group) {
    l.bandwidth_bytes_s /= oversubscription_;
    l.latency_s += 3 * switch_latency_s_;
  } else {
    l.latency_s += switch_latency_s_;
  }
  if (comm_.Staged(na, nb)) {
    l.bandwidth_bytes_s = 1 / (1 / a.pcie_bytes_s + 1 / l.bandwidth_bytes_s + 1 / b.pcie_bytes_s);
    l.latency_s += a.pcie_latency_s + b.pcie_latency_s;
  }
  return l;
}

Link Topology::Between(uint32_t a, uint32_t b) const {
  if (a == b) return Link{};
  return NodePair(cluster_->device(a).node, cluster_->device(b).node);
}

std::vector<std::pair<uint32_t, uint32_t>> Topology::NodeCounts(std::span<const uint32_t> devices) const {
  std::vector<uint32_t> nodes;
  nodes.reserve(devices.size());
  for (uint32_t d : devices) nodes.push_back(cluster_->device(d).node);
  std::sort(nodes.begin(), nodes.end());
  std::vector<std::pair<uint32_t, uint32_t>> counts;
  for (uint32_t n : nodes) {
    if (!counts.empty() && counts.back().first == n) {
      ++counts.back().second;
    } else {
      counts.emplace_back(n, 1);
    }
  }
  return counts;
}

Link Topology::Slowest(std::span<const uint32_t> devices) const {
  Link acc;
  if (devices.size() < 2) return acc;
  const auto counts = NodeCounts(devices);
  // Pairs inside one node.
  for (const auto& [n, c] : counts) {
    if (c >= 2) Worsen(acc, NodePair(n, n));
  }
  if (counts.size() < 2) return acc;
  if (counts.size() <= 16) {
    for (size_t i = 0; i < counts.size(); ++i) {
      for (size_t j = i + 1; j < counts.size(); ++j) Worsen(acc, NodePair(counts[i].first, counts[j].first));
    }
    return acc;
  }
  // Many nodes: per zone, the node with the smallest off-node share and the one with the largest NIC
  // latency bound every same-zone pair (each has a partner under another switch when the zone spans
  // several); across zones, the per-zone extremes and the zone link bound every cross pair.
  struct ZoneExtremes {
    uint32_t nodes = 0;
    double min_share = kInf;
    double max_latency = 0;
    uint32_t first_group = 0;
    bool several_groups = false;
  };
  std::vector<ZoneExtremes> zones(num_zones_);
  for (const auto& [n, c] : counts) {
    const NodeLinks& nl = nodes_[n];
    ZoneExtremes& z = zones[nl.zone];
    if (z.nodes == 0) z.first_group = nl.switch_group;
    if (nl.switch_group != z.first_group) z.several_groups = true;
    ++z.nodes;
    z.min_share = std::min(z.min_share, nl.share_bytes_s);
    z.max_latency = std::max(z.max_latency, nl.nic_latency_s);
  }
  for (uint32_t a = 0; a < num_zones_; ++a) {
    const ZoneExtremes& za = zones[a];
    if (za.nodes >= 2) {
      Link l{LinkKind::kInterNode, za.min_share, za.max_latency + switch_latency_s_};
      if (za.several_groups) {
        l.bandwidth_bytes_s /= oversubscription_;
        l.latency_s += 2 * switch_latency_s_;
      }
      Worsen(acc, l);
    }
    for (uint32_t b = a + 1; b < num_zones_; ++b) {
      const ZoneExtremes& zb = zones[b];
      if (za.nodes == 0 || zb.nodes == 0) continue;
      const Link& zl = zone_links_[a * num_zones_ + b];
      Worsen(acc, Link{LinkKind::kInterZone, std::min({za.min_share, zb.min_share, zl.bandwidth_bytes_s}),
                       std::max(za.max_latency, zb.max_latency) + zl.latency_s + 2 * switch_latency_s_});
    }
  }
  return acc;
}

Link Topology::SlowestBetween(std::span<const uint32_t> from, std::span<const uint32_t> to) const {
  Link acc;
  if (from.empty() || to.empty()) return acc;
  const auto a = NodeCounts(from), b = NodeCounts(to);
  bool any = false;
  for (const auto& [na, ca] : a) {
    for (const auto& [nb, cb] : b) {
      if (na == nb && ca == 1 && cb == 1) {
        // The only pair on this node might be one device with itself.
        bool distinct = false;
        for (uint32_t d : from) {
          if (cluster_->device(d).node != na) continue;
          for (uint32_t e : to) distinct |= cluster_->device(e).node == na && e != d;
        }
        if (!distinct) continue;
      }
      Worsen(acc, NodePair(na, nb));
      any = true;
    }
  }
  return any ? acc : Link{};
}

Link Topology::RingLink(std::span<const uint32_t> devices) const {
  const auto counts = NodeCounts(devices);
  if (counts.size() < 2) return Slowest(devices);
  uint32_t k = std::numeric_limits<uint32_t>::max();
  Link acc;
  std::vector<uint32_t> leaders;
  leaders.reserve(counts.size());
  for (const auto& [n, c] : counts) {
    k = std::min(k, c);
    if (c >= 2) Worsen(acc, NodePair(n, n));
    leaders.push_back(cluster_->node(n).first_device);
  }
  Link inter = Slowest(leaders);
  inter.bandwidth_bytes_s *= k;
  Worsen(acc, inter);
  return acc;
}

double Topology::HierarchicalAllReduceSeconds(double bytes, std::span<const uint32_t> devices) const {
  if (devices.size() < 2) return 0;
  const auto counts = NodeCounts(devices);
  if (counts.size() == 1) return RingAllReduceSeconds(bytes, static_cast<uint32_t>(devices.size()), Slowest(devices));
  uint32_t local = std::numeric_limits<uint32_t>::max();
  Link intra;
  for (const auto& [n, c] : counts) {
    local = std::min(local, c);
    if (c >= 2) Worsen(intra, NodePair(n, n));
  }
  // One representative per node carries each shard across nodes.
  std::vector<uint32_t> leaders;
  leaders.reserve(counts.size());
  for (const auto& [n, c] : counts) leaders.push_back(cluster_->node(n).first_device);
  const Link inter = Slowest(leaders);
  const uint32_t max_local =
      std::max_element(counts.begin(), counts.end(), [](auto& x, auto& y) { return x.second < y.second; })->second;
  return RingReduceScatterSeconds(bytes, max_local, intra) +
         RingAllReduceSeconds(bytes / local, static_cast<uint32_t>(counts.size()), inter) +
         RingAllGatherSeconds(bytes, max_local, intra);
}

}  // namespace hetsim::models
