#include "sim/platform.h"

#include <algorithm>
#include <map>
#include <string>

#include "models/cost.h"
#include "models/engine_rules.h"
#include "models/kernels.h"

namespace hetsim::sim {
namespace {

namespace s4u = simgrid::s4u;
using Dir = s4u::LinkInRoute::Direction;

constexpr double kGbyte = 1e9;
constexpr double kGbit = 1e9 / 8;
// Host memory bandwidth of a node (CPU-staged copies land there); a DDR5 server socket pair.
constexpr double kGpuSpeed = 1e12;  // hosts only sleep; the speed is nominal

// Latencies below SimGrid's timing precision (1e-9 s) are played as none: SimGrid 3.32's solver crashed on a
// route of a 5e-13 s link beside a 0 s one (a 1e-6 µs fabric between nodes with NICs).
s4u::Link* Duplex(s4u::NetZone* zone, const std::string& name, double bytes_per_s, double latency_s) {
  return zone->create_split_duplex_link(name, bytes_per_s)->set_latency(latency_s < 1e-9 ? 0 : latency_s)->seal();
}

// A storage endpoint's link: reads leave the storage host (UP), writes enter it (DOWN).
s4u::Link* StorageLink(s4u::NetZone* zone, const std::string& name, const proto::StorageEndpoint& s) {
  auto* l = zone->create_split_duplex_link(name, s.read_bandwidth_gbyte_s() * kGbyte);
  l->set_latency(s.latency_ms() * 1e-3);
  if (s.write_bandwidth_gbyte_s() > 0) l->get_link_down()->set_bandwidth(s.write_bandwidth_gbyte_s() * kGbyte);
  return l->seal();
}

// The node groups sharing one switch, in node order.
std::vector<std::vector<uint32_t>> NetworkGroups(const models::Cluster& c, const std::vector<uint32_t>& nodes) {
  const auto& net = c.spec().network();
  uint32_t per = static_cast<uint32_t>(nodes.size());
  if (net.has_fat_tree()) per = net.fat_tree().nodes_per_leaf();
  if (net.has_pods()) per = net.pods().nodes_per_pod();
  per = std::max<uint32_t>(1, per);
  std::vector<std::vector<uint32_t>> groups;
  for (size_t i = 0; i < nodes.size(); i += per) {
    groups.emplace_back(nodes.begin() + static_cast<long>(i),
                        nodes.begin() + static_cast<long>(std::min(nodes.size(), i + per)));
  }
  return groups;
}

double Oversubscription(const models::Cluster& c) {
  const auto& net = c.spec().network();
  if (net.has_fat_tree()) return std::max(1.0, net.fat_tree().oversubscription());
  if (net.has_pods()) return std::max(1.0, net.pods().oversubscription());
  return 1.0;
}

double NicBytesPerS(const models::NodeInfo& n) { return n.has_nic ? n.nic.bandwidth_gbps() * kGbit : 0; }

class Builder {
 public:
  Builder(const models::Cluster& c, const std::string& calibration, uint32_t shared_cores)
      : c_(c), calibration_(calibration) {
    p_.shared_cores = shared_cores;
    p_.gpus.resize(c.num_devices());
    for (uint32_t d = 0; d < c.num_devices(); ++d) p_.gpu_node.push_back(c.device(d).node);
    p_.cpus.resize(c.nodes().size());
    p_.private_fabric.assign(c.nodes().size(), 0);
    for (const auto& s : c.spec().storage()) {
      if (s.kind() == proto::StorageEndpoint::KIND_LOCAL_NVME) nvme_ = &s;
      if (s.kind() == proto::StorageEndpoint::KIND_OBJECT_STORE) object_store_ = &s;
    }
    if (nvme_ != nullptr) p_.nvmes.resize(c.nodes().size());
  }

  Platform Build() {
    std::map<std::string, std::vector<uint32_t>> regions;
    for (uint32_t n = 0; n < c_.nodes().size(); ++n) regions[c_.node(n).zone].push_back(n);
    if (regions.size() == 1) {
      s4u::NetZone* z = BuildRegion(regions.begin()->second, "region", nullptr, nullptr);
      AddObjectStore(z);
      z->seal();
        return p_;
    }
    s4u::NetZone* root = s4u::create_full_zone("world");
    std::map<std::string, std::pair<s4u::NetZone*, simgrid::kernel::routing::NetPoint*>> built;
    for (const auto& [zone, nodes] : regions) {
      simgrid::kernel::routing::NetPoint* gw = nullptr;
      s4u::NetZone* z = BuildRegion(nodes, "zone-" + zone, root, &gw);
      if (built.empty()) {
        AddObjectStore(z);
      }
      z->seal();
      built[zone] = {z, gw};
    }
    for (const auto& zl : c_.spec().zone_links()) {
      const auto& a = built.at(zl.from());
      const auto& b = built.at(zl.to());
      s4u::Link* l = Duplex(root, "zonelink-" + zl.from() + "-" + zl.to(), zl.bandwidth_gbps() * kGbit,
                            zl.latency_ms() * 1e-3);
      root->add_route(a.first->get_netpoint(), b.first->get_netpoint(), a.second, b.second,
                      {s4u::LinkInRoute(l, Dir::UP)}, true);
    }
    root->seal();
    return p_;
  }

 private:
  // A region: one star zone per network group, joined by a star zone when there are several groups.
  s4u::NetZone* BuildRegion(const std::vector<uint32_t>& nodes, const std::string& name, s4u::NetZone* parent,
                            simgrid::kernel::routing::NetPoint** gateway) {
    const auto groups = NetworkGroups(c_, nodes);
    if (groups.size() == 1) {
      region_has_groups_ = false;
      s4u::NetZone* z = s4u::create_star_zone(name);
      if (parent != nullptr) z->set_parent(parent);
      if (gateway != nullptr) *gateway = AddRouter(z, name + "-gw");
      BuildGroup(z, groups[0], name);
      return z;
    }
    region_has_groups_ = true;
    s4u::NetZone* region = s4u::create_star_zone(name);
    if (parent != nullptr) region->set_parent(parent);
    if (gateway != nullptr) *gateway = AddRouter(region, name + "-gw");
    const double oversub = Oversubscription(c_);
    const double switch_lat = c_.spec().network().switch_latency_us() * 1e-6;
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string gname = name + "-g" + std::to_string(g);
      s4u::NetZone* z = s4u::create_star_zone(gname);
      z->set_parent(region);
      auto* gw = AddRouter(z, gname + "-gw");
      BuildGroup(z, groups[g], gname);
      z->seal();
      double nic_total = 0;
      for (uint32_t n : groups[g]) nic_total += NicBytesPerS(c_.node(n)) * c_.node(n).nic.count();
      s4u::Link* up = Duplex(region, gname + "-uplink", std::max(nic_total / oversub, 1.0), switch_lat / 2);
      region->add_route(z->get_netpoint(), nullptr, gw, nullptr, {s4u::LinkInRoute(up, Dir::UP)}, true);
    }
    return region;
  }

  simgrid::kernel::routing::NetPoint* AddRouter(s4u::NetZone* z, const std::string& name) {
    auto* r = z->create_router(name);
    z->add_route(r, nullptr, nullptr, nullptr, {}, true);
    return r;
  }

  void BuildGroup(s4u::NetZone* z, const std::vector<uint32_t>& nodes, const std::string&) {
    const double switch_lat = c_.spec().network().switch_latency_us() * 1e-6;
    for (uint32_t n : nodes) {
      const auto& node = c_.node(n);
      const bool pcie_fabric = node.fabric.kind() == proto::IntraNodeFabric::KIND_PCIE;
      const proto::IntraNodeFabric f = CalibratedFabric(node);
      p_.private_fabric[n] = pcie_fabric ? 0 : 1;
      const std::string nn = node.name;
      // NICs of the node.
      std::vector<s4u::Link*> nics;
      if (node.has_nic) {
        for (uint32_t i = 0; i < node.nic.count(); ++i) {
          nics.push_back(Duplex(z, nn + "-nic" + std::to_string(i), NicBytesPerS(node),
                                (node.nic.latency_us() * 1e-6 + switch_lat) / 2));
        }
      }
      // Host memory of the node.
      s4u::Host* cpu = z->create_host(nn + "-cpu", kGpuSpeed)->seal();
      p_.cpus[n] = cpu;
      s4u::Link* mem = Duplex(z, nn + "-mem", node.host_memory_bytes_s, 0);
      std::vector<s4u::LinkInRoute> cpu_route = {s4u::LinkInRoute(mem, Dir::UP)};
      if (!nics.empty()) cpu_route.emplace_back(nics[0], Dir::UP);
      z->add_route(cpu->get_netpoint(), nullptr, nullptr, nullptr, cpu_route, true);
      s4u::Link* nvme_link = nullptr;
      if (nvme_ != nullptr) {
        s4u::Host* nvme = z->create_host(nn + "-nvme", kGpuSpeed)->seal();
        p_.nvmes[n] = nvme;
        nvme_link = StorageLink(z, nn + "-nvme-link", *nvme_);
        std::vector<s4u::LinkInRoute> r = {s4u::LinkInRoute(nvme_link, Dir::UP)};
        if (!nics.empty()) r.emplace_back(nics[0], Dir::UP);
        z->add_route(nvme->get_netpoint(), nullptr, nullptr, nullptr, r, true);
      }
      // GPUs: PCIe link to the host / NIC side, fabric port for intra-node traffic.
      // GPU-to-GPU routes: over the fabric ports, or on a PCIe fabric over both GPUs' PCIe links (and their
      // P2P caps when the fabric is slower than PCIe).
      std::vector<s4u::Link*> pcie(node.num_gpus), port(node.num_gpus, nullptr), p2p(node.num_gpus, nullptr);
      for (uint32_t l = 0; l < node.num_gpus; ++l) {
        const uint32_t d = node.first_device + l;
        const std::string gn = nn + "-gpu" + std::to_string(l);
        s4u::Host* h = z->create_host(gn, kGpuSpeed)->seal();
        p_.gpus[d] = h;
        pcie[l] = Duplex(z, gn + "-pcie", f.pcie_bandwidth_gbyte_s() * kGbyte, PcieLatency(f));
        if (!pcie_fabric) {
          port[l] = Duplex(z, gn + "-port", f.bandwidth_gbyte_s() * kGbyte, f.latency_us() * 1e-6 / 2);
        } else if (f.bandwidth_gbyte_s() < f.pcie_bandwidth_gbyte_s()) {
          // Peer-to-peer over PCIe slower than the GPU's link (through the host bridge, or no P2P at all):
          // the fabric bandwidth caps GPU-to-GPU traffic, which still shares the GPU's PCIe link.
          p2p[l] = Duplex(z, gn + "-p2p", f.bandwidth_gbyte_s() * kGbyte, 0);
        }
        std::vector<s4u::LinkInRoute> route = {s4u::LinkInRoute(pcie[l], Dir::UP)};
        if (!nics.empty()) route.emplace_back(nics[l % nics.size()], Dir::UP);
        z->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, route, true);
        // GPU <-> its node's host memory and NVMe.
        z->add_bypass_route(h->get_netpoint(), cpu->get_netpoint(), nullptr, nullptr,
                            {s4u::LinkInRoute(pcie[l], Dir::UP), s4u::LinkInRoute(mem, Dir::DOWN)});
        z->add_bypass_route(cpu->get_netpoint(), h->get_netpoint(), nullptr, nullptr,
                            {s4u::LinkInRoute(mem, Dir::UP), s4u::LinkInRoute(pcie[l], Dir::DOWN)});
        if (nvme_link != nullptr) {
          auto* nv = p_.nvmes[n]->get_netpoint();
          z->add_bypass_route(h->get_netpoint(), nv, nullptr, nullptr,
                              {s4u::LinkInRoute(pcie[l], Dir::UP), s4u::LinkInRoute(nvme_link, Dir::DOWN)});
          z->add_bypass_route(nv, h->get_netpoint(), nullptr, nullptr,
                              {s4u::LinkInRoute(nvme_link, Dir::UP), s4u::LinkInRoute(pcie[l], Dir::DOWN)});
        }
      }
      for (uint32_t a = 0; a < node.num_gpus; ++a) {
        for (uint32_t b = 0; b < node.num_gpus; ++b) {
          if (a == b) continue;
          std::vector<s4u::LinkInRoute> route;
          if (!pcie_fabric) {
            route = {s4u::LinkInRoute(port[a], Dir::UP), s4u::LinkInRoute(port[b], Dir::DOWN)};
          } else {
            route.emplace_back(pcie[a], Dir::UP);
            if (p2p[a] != nullptr) route.emplace_back(p2p[a], Dir::UP);
            if (p2p[b] != nullptr) route.emplace_back(p2p[b], Dir::DOWN);
            route.emplace_back(pcie[b], Dir::DOWN);
          }
          z->add_bypass_route(p_.gpus[node.first_device + a]->get_netpoint(),
                              p_.gpus[node.first_device + b]->get_netpoint(), nullptr, nullptr, route);
        }
      }
    }
  }

  // The node's fabric with the calibration's measured link of its GPU type, when it has one
  // (models::CalibratedFabric: on a PCIe fabric the measured bandwidth is the GPUs' PCIe links').
  proto::IntraNodeFabric CalibratedFabric(const models::NodeInfo& node) const {
    return models::CalibratedFabric(node, models::KernelParamsFor(*node.gpu, calibration_));
  }

  // Half of the hop latency on the GPU's PCIe link (a route crosses it once per end).
  static double PcieLatency(const proto::IntraNodeFabric& f) {
    return (f.kind() == proto::IntraNodeFabric::KIND_PCIE ? f.latency_us() : f.pcie_latency_us()) * 1e-6 / 2;
  }

  // The object store hangs off the region's switch. A region of several network groups holds only zones
  // (SimGrid's star zones do not route between a host and a sub-zone), so there the store gets its own zone.
  void AddObjectStore(s4u::NetZone* z) {
    if (object_store_ == nullptr) return;
    if (!region_has_groups_) {
      p_.object_store = z->create_host("object-store", kGpuSpeed)->seal();
      s4u::Link* l = StorageLink(z, "object-store-link", *object_store_);
      z->add_route(p_.object_store->get_netpoint(), nullptr, nullptr, nullptr, {s4u::LinkInRoute(l, Dir::UP)}, true);
      return;
    }
    s4u::NetZone* sz = s4u::create_star_zone("object-store-zone");
    sz->set_parent(z);
    auto* gw = AddRouter(sz, "object-store-gw");
    p_.object_store = sz->create_host("object-store", kGpuSpeed)->seal();
    sz->add_route(p_.object_store->get_netpoint(), nullptr, nullptr, nullptr, {}, true);
    sz->seal();
    s4u::Link* l = StorageLink(z, "object-store-link", *object_store_);
    z->add_route(sz->get_netpoint(), nullptr, gw, nullptr, {s4u::LinkInRoute(l, Dir::UP)}, true);
  }

  const models::Cluster& c_;
  const std::string& calibration_;
  Platform p_;
  const proto::StorageEndpoint* nvme_ = nullptr;
  const proto::StorageEndpoint* object_store_ = nullptr;
  bool region_has_groups_ = false;  // the region last built holds network-group zones
};

}  // namespace

Platform BuildPlatform(const models::Cluster& cluster, const std::string& calibration, uint32_t shared_cores) {
  return Builder(cluster, calibration, shared_cores).Build();
}

}  // namespace hetsim::sim
