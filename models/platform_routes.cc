#include "models/platform_routes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "models/engine_rules.h"
#include "models/kernels.h"

namespace hetsim::models {
namespace {

constexpr double kGbyte = 1e9;
constexpr double kGbit = 1e9 / 8;
constexpr uint32_t kNoLink = UINT32_MAX;

}  // namespace

double Route::Seconds(double bytes) const {
  const double b = std::llround(std::max(0.0, bytes));
  if (b <= 0) return latency_s;
  return latency_s + b / bandwidth_bytes_s;
}

uint32_t PlatformRoutes::AddDuplex(double bandwidth_bytes_s, double latency_s) {
  const uint32_t id = static_cast<uint32_t>(bandwidth_.size() / 2);
  for (int dir = 0; dir < 2; ++dir) {
    bandwidth_.push_back(bandwidth_bytes_s);
    latency_.push_back(latency_s);
  }
  return id;
}

PlatformRoutes::PlatformRoutes(const Cluster& cluster, const std::string& calibration) {
  const auto& spec = cluster.spec();
  const double switch_latency_s = spec.network().switch_latency_us() * 1e-6;
  uint32_t per_group = 0;  // nodes per leaf or pod; 0 = one switch
  double oversubscription = 1;
  if (spec.network().has_fat_tree()) {
    per_group = spec.network().fat_tree().nodes_per_leaf();
    oversubscription = std::max(1.0, spec.network().fat_tree().oversubscription());
  } else if (spec.network().has_pods()) {
    per_group = spec.network().pods().nodes_per_pod();
    oversubscription = std::max(1.0, spec.network().pods().oversubscription());
  }
  const uint32_t num_nodes = static_cast<uint32_t>(cluster.nodes().size());
  nodes_.resize(num_nodes);
  gpus_.resize(cluster.num_devices());
  gpu_node_.resize(cluster.num_devices());
  gpu_local_.resize(cluster.num_devices());
  // Regions by zone name, in name order (the platform's std::map), nodes in node order inside each.
  std::map<std::string, std::vector<uint32_t>> regions;
  for (uint32_t n = 0; n < num_nodes; ++n) regions[cluster.node(n).zone].push_back(n);
  std::map<std::string, uint32_t> region_index;
  for (const auto& [zone, nodes] : regions) {
    const uint32_t region = static_cast<uint32_t>(region_index.size());
    region_index[zone] = region;
    const uint32_t per = per_group == 0 ? static_cast<uint32_t>(nodes.size()) : std::max<uint32_t>(1, per_group);
    const bool grouped = nodes.size() > per;
    for (size_t i = 0; i < nodes.size(); ++i) {
      NodeLinks& nl = nodes_[nodes[i]];
      nl.region = region;
      nl.group = static_cast<uint32_t>(i / per);
      nl.grouped = grouped;
    }
  }
  num_regions_ = static_cast<uint32_t>(regions.size());
  // Per node: NICs, host memory, GPUs (links in the platform's order does not matter: ids are private).
  for (uint32_t n = 0; n < num_nodes; ++n) {
    const NodeInfo& node = cluster.node(n);
    NodeLinks& nl = nodes_[n];
    proto::IntraNodeFabric f = node.fabric;
    nl.pcie_fabric = f.kind() == proto::IntraNodeFabric::KIND_PCIE;
    nl.private_fabric = !nl.pcie_fabric;
    const KernelParams& k = KernelParamsFor(*node.gpu, calibration);
    if (k.link_bandwidth_bytes_s > 0) {
      f.set_bandwidth_gbyte_s(k.link_bandwidth_bytes_s / kGbyte);
      if (nl.pcie_fabric) f.set_pcie_bandwidth_gbyte_s(k.link_bandwidth_bytes_s / kGbyte);
    }
    if (k.link_latency_s >= 0) f.set_latency_us(k.link_latency_s * 1e6);
    if (node.has_nic) {
      for (uint32_t i = 0; i < node.nic.count(); ++i) {
        nl.nics.push_back(AddDuplex(node.nic.bandwidth_gbps() * kGbit, (node.nic.latency_us() * 1e-6 + switch_latency_s) / 2));
      }
    }
    nl.mem = AddDuplex(node.host_memory_bytes_s, 0);
    const double pcie_latency_s = (nl.pcie_fabric ? f.latency_us() : f.pcie_latency_us()) * 1e-6 / 2;
    for (uint32_t l = 0; l < node.num_gpus; ++l) {
      const uint32_t d = node.first_device + l;
      gpu_node_[d] = n;
      gpu_local_[d] = l;
      GpuLinks& g = gpus_[d];
      g.pcie = AddDuplex(f.pcie_bandwidth_gbyte_s() * kGbyte, pcie_latency_s);
      if (!nl.pcie_fabric) {
        g.port = AddDuplex(f.bandwidth_gbyte_s() * kGbyte, f.latency_us() * 1e-6 / 2);
      } else if (f.bandwidth_gbyte_s() < f.pcie_bandwidth_gbyte_s()) {
        g.p2p = AddDuplex(f.bandwidth_gbyte_s() * kGbyte, 0);
      }
    }
  }
  // Uplinks of the network groups of regions that have several.
  std::map<std::pair<uint32_t, uint32_t>, double> nic_total;  // (region, group) -> Σ NIC bandwidth
  for (uint32_t n = 0; n < num_nodes; ++n) {
    const NodeInfo& node = cluster.node(n);
    if (!nodes_[n].grouped) continue;
    const double nic = node.has_nic ? node.nic.bandwidth_gbps() * kGbit * node.nic.count() : 0;
    nic_total[{nodes_[n].region, nodes_[n].group}] += nic;
  }
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> uplink;
  for (const auto& [key, total] : nic_total) {
    uplink[key] = AddDuplex(std::max(total / oversubscription, 1.0), switch_latency_s / 2);
  }
  for (auto& nl : nodes_) {
    if (nl.grouped) nl.uplink = uplink.at({nl.region, nl.group});
  }
  // Zone links: the first entry for a pair of regions; from -> to is its up direction.
  zone_links_.assign(size_t{num_regions_} * num_regions_, {kNoLink, true});
  for (const auto& zl : spec.zone_links()) {
    auto a = region_index.find(zl.from()), b = region_index.find(zl.to());
    if (a == region_index.end() || b == region_index.end() || a->second == b->second) continue;
    auto& ab = zone_links_[size_t{a->second} * num_regions_ + b->second];
    if (ab.first != kNoLink) continue;
    const uint32_t id = AddDuplex(zl.bandwidth_gbps() * kGbit, zl.latency_ms() * 1e-3);
    ab = {id, true};
    zone_links_[size_t{b->second} * num_regions_ + a->second] = {id, false};
  }
}

void PlatformRoutes::Up(Route& r, uint32_t duplex) const {
  const uint32_t id = 2 * duplex;
  r.links[r.num_links++] = id;
  r.bandwidth_bytes_s = std::min(r.bandwidth_bytes_s, bandwidth_[id]);
  r.latency_s += latency_[id];
}

void PlatformRoutes::Down(Route& r, uint32_t duplex) const {
  const uint32_t id = 2 * duplex + 1;
  r.links[r.num_links++] = id;
  r.bandwidth_bytes_s = std::min(r.bandwidth_bytes_s, bandwidth_[id]);
  r.latency_s += latency_[id];
}

PlatformRoutes::Chain PlatformRoutes::GpuChain(uint32_t gpu) const {
  Chain c;
  c.duplex[c.num++] = gpus_[gpu].pcie;
  const auto& nics = nodes_[gpu_node_[gpu]].nics;
  if (!nics.empty()) c.duplex[c.num++] = nics[gpu_local_[gpu] % nics.size()];
  return c;
}

PlatformRoutes::Chain PlatformRoutes::HostChain(uint32_t node) const {
  Chain c;
  c.duplex[c.num++] = nodes_[node].mem;
  if (!nodes_[node].nics.empty()) c.duplex[c.num++] = nodes_[node].nics[0];
  return c;
}

Route PlatformRoutes::Across(const Chain& from, uint32_t node_from, const Chain& to, uint32_t node_to) const {
  Route r;
  r.bandwidth_bytes_s = std::numeric_limits<double>::infinity();
  for (uint32_t i = 0; i < from.num; ++i) Up(r, from.duplex[i]);
  const NodeLinks& a = nodes_[node_from];
  const NodeLinks& b = nodes_[node_to];
  if (a.region != b.region) {
    if (a.grouped) Up(r, a.uplink);
    const auto& zl = zone_links_[size_t{a.region} * num_regions_ + b.region];
    if (zl.first != kNoLink) {
      if (zl.second) {
        Up(r, zl.first);
      } else {
        Down(r, zl.first);
      }
    }
    if (b.grouped) Down(r, b.uplink);
  } else if (a.group != b.group) {
    Up(r, a.uplink);
    Down(r, b.uplink);
  }
  for (uint32_t i = to.num; i-- > 0;) Down(r, to.duplex[i]);
  return r;
}

Route PlatformRoutes::GpuToGpu(uint32_t a, uint32_t b) const {
  const uint32_t na = gpu_node_[a], nb = gpu_node_[b];
  if (na != nb) return Across(GpuChain(a), na, GpuChain(b), nb);
  Route r;
  r.bandwidth_bytes_s = std::numeric_limits<double>::infinity();
  if (a == b) return r;
  if (!nodes_[na].pcie_fabric) {
    Up(r, gpus_[a].port);
    Down(r, gpus_[b].port);
    return r;
  }
  Up(r, gpus_[a].pcie);
  if (gpus_[a].p2p != kNoLink) Up(r, gpus_[a].p2p);
  if (gpus_[b].p2p != kNoLink) Down(r, gpus_[b].p2p);
  Down(r, gpus_[b].pcie);
  return r;
}

Route PlatformRoutes::GpuToHost(uint32_t gpu) const {
  Route r;
  r.bandwidth_bytes_s = std::numeric_limits<double>::infinity();
  Up(r, gpus_[gpu].pcie);
  Down(r, nodes_[gpu_node_[gpu]].mem);
  return r;
}

Route PlatformRoutes::HostToGpu(uint32_t gpu) const {
  Route r;
  r.bandwidth_bytes_s = std::numeric_limits<double>::infinity();
  Up(r, nodes_[gpu_node_[gpu]].mem);
  Down(r, gpus_[gpu].pcie);
  return r;
}

Route PlatformRoutes::HostToHost(uint32_t node_a, uint32_t node_b) const {
  return Across(HostChain(node_a), node_a, HostChain(node_b), node_b);
}

Route PlatformRoutes::HostToGpu(uint32_t node, uint32_t gpu) const {
  if (node == gpu_node_[gpu]) return HostToGpu(gpu);
  return Across(HostChain(node), node, GpuChain(gpu), gpu_node_[gpu]);
}

}  // namespace hetsim::models
