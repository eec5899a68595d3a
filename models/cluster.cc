#include "models/cluster.h"

#include <map>
#include <set>

#include "models/engine_rules.h"
#include "models/suggest.h"

namespace hetsim::models {

double DefaultNicLatencyUs(proto::Nic::Kind kind) {
  switch (kind) {
    case proto::Nic::KIND_INFINIBAND: return 2.0;
    case proto::Nic::KIND_ROCE: return 3.0;
    default: return 25.0;  // kernel TCP stack
  }
}

namespace {

proto::IntraNodeFabric::Kind FabricKindOf(const GpuSpec& g) {
  if (g.scale_up == "nvswitch") return proto::IntraNodeFabric::KIND_NVSWITCH;
  if (g.scale_up == "nvlink") return proto::IntraNodeFabric::KIND_NVLINK;
  if (g.scale_up == "xgmi") return proto::IntraNodeFabric::KIND_XGMI;
  return proto::IntraNodeFabric::KIND_PCIE;
}

}  // namespace

Result<Cluster> Cluster::Build(proto::Cluster spec, const std::string& file, const GpuCatalog& catalog) {
  Cluster c;
  ErrorList errors;
  const std::string at = file + ": ";
  if (spec.nodes_size() == 0) errors.Add(at + "nodes: a cluster needs at least one node group");
  std::set<std::string> group_names;
  std::set<std::string> zones;
  uint64_t total_devices = 0;
  for (int g = 0; g < spec.nodes_size(); ++g) {
    const auto& ng = spec.nodes(g);
    const std::string path = "nodes[" + std::to_string(g) + "]";
    if (ng.name().empty()) errors.Add(at + path + ".name: must not be empty");
    if (!group_names.insert(ng.name()).second) {
      errors.Add(at + path + ".name: node group name '" + ng.name() + "' is used twice; names must be unique");
    }
    auto gpu = catalog.Find(ng.gpus().type());
    if (!gpu.ok()) {
      errors.Add(at + path + ".gpus.type: " + gpu.status().message());
      continue;
    }
    if (ng.gpus().count() == 0) {
      errors.Add(at + path + ".gpus.count: must be at least 1");
      continue;
    }
    const uint32_t count = ng.count() == 0 ? 1 : ng.count();
    total_devices += uint64_t{count} * ng.gpus().count();
    if (total_devices > kMaxClusterGpus) {
      errors.Add(at + path + ".count: the cluster has more than 131,072 GPUs; hetsim models clusters up to that "
                 "size (8× the largest published training runs)");
      break;
    }
    NodeInfo proto_node;
    proto_node.group = static_cast<uint32_t>(g);
    proto_node.num_gpus = ng.gpus().count();
    proto_node.gpu = *gpu;
    proto_node.zone = ng.zone();
    if (!ng.zone().empty()) zones.insert(ng.zone());
    proto_node.host_memory_gib = ng.host_memory_gib() > 0 ? ng.host_memory_gib() : 512.0;
    proto_node.host_memory_stated = ng.host_memory_gib() > 0;
    proto_node.host_memory_bytes_s =
        ng.host_memory_bandwidth_gbyte_s() > 0 ? ng.host_memory_bandwidth_gbyte_s() * 1e9 : kHostMemoryBytesS;
    proto_node.cpu_adam_params_per_s =
        ng.cpu_adam_gparams_per_s() > 0 ? ng.cpu_adam_gparams_per_s() * 1e9 : kDefaultCpuAdamParamsPerS;
    proto::IntraNodeFabric f = ng.fabric();
    if (f.kind() == proto::IntraNodeFabric::KIND_UNSPECIFIED) f.set_kind(FabricKindOf(**gpu));
    if (f.pcie_bandwidth_gbyte_s() <= 0) f.set_pcie_bandwidth_gbyte_s((*gpu)->pcie_bandwidth_gbyte_s);
    if (f.bandwidth_gbyte_s() <= 0) {
      if (f.kind() == proto::IntraNodeFabric::KIND_PCIE) {
        f.set_bandwidth_gbyte_s(f.pcie_bandwidth_gbyte_s());
      } else if ((*gpu)->scale_up_bandwidth_gbyte_s > 0) {
        f.set_bandwidth_gbyte_s((*gpu)->scale_up_bandwidth_gbyte_s);
      } else {
        errors.Add(at + path + ".fabric.bandwidth_gbyte_s: GPU type '" + (*gpu)->name +
                   "' has no scale-up link in the catalog; give the fabric bandwidth or use kind: pcie");
      }
    }
    if (f.latency_us() <= 0) {
      f.set_latency_us(f.kind() == proto::IntraNodeFabric::KIND_PCIE ? kDefaultPcieLatencyUs
                                                                      : kDefaultNvlinkLatencyUs);
    }
    if (f.pcie_latency_us() <= 0) f.set_pcie_latency_us(kDefaultPcieHopLatencyUs);
    proto_node.fabric = f;
    if (ng.has_nic()) {
      proto::Nic n = ng.nic();
      if (n.attachment() == proto::Nic::ATTACHMENT_UNSPECIFIED) n.set_attachment(proto::Nic::ATTACHMENT_PER_NODE);
      if (n.count() == 0) n.set_count(1);
      if (n.attachment() == proto::Nic::ATTACHMENT_PER_GPU && ng.nic().count() != 0 &&
          ng.nic().count() != ng.gpus().count()) {
        errors.Add(at + path + ".nic.count: a per_gpu NIC has one NIC per GPU (" +
                   std::to_string(ng.gpus().count()) + "); drop count or use attachment: per_node");
      }
      if (n.attachment() == proto::Nic::ATTACHMENT_PER_GPU) n.set_count(ng.gpus().count());
      if (n.latency_us() <= 0) n.set_latency_us(DefaultNicLatencyUs(n.kind()));
      proto_node.nic = n;
      proto_node.has_nic = true;
    }
    for (uint32_t i = 0; i < count; ++i) {
      NodeInfo node = proto_node;
      node.name = count == 1 ? ng.name() : ng.name() + "-" + std::to_string(i);
      node.first_device = static_cast<uint32_t>(c.devices_.size());
      for (uint32_t l = 0; l < node.num_gpus; ++l) {
        c.devices_.push_back(DeviceInfo{static_cast<uint32_t>(c.nodes_.size()), l, node.gpu});
      }
      c.nodes_.push_back(std::move(node));
    }
  }
  if (c.nodes_.size() > 1) {
    for (const auto& n : c.nodes_) {
      if (!n.has_nic) {
        errors.Add(at + "nodes[" + std::to_string(n.group) + "].nic: node '" + n.name +
                   "' has no NIC but the cluster has several nodes; add nic: {kind: roce, bandwidth_gbps: 200}");
        break;
      }
    }
  }
  // Multi-zone clusters need a link between every pair of zones that hold nodes.
  std::map<std::pair<std::string, std::string>, int> links;
  for (int i = 0; i < spec.zone_links_size(); ++i) {
    const auto& zl = spec.zone_links(i);
    const std::string path = "zone_links[" + std::to_string(i) + "]";
    std::vector<std::string> names(zones.begin(), zones.end());
    for (const auto* end : {&zl.from(), &zl.to()}) {
      if (!zones.count(*end)) {
        errors.Add(at + path + (end == &zl.from() ? ".from" : ".to") + ": no node is in zone '" + *end + "'" +
                   DidYouMean(*end, names));
      }
    }
    if (zl.from() == zl.to()) errors.Add(at + path + ": a zone link joins two different zones");
    links[{std::min(zl.from(), zl.to()), std::max(zl.from(), zl.to())}] = i;
  }
  for (auto a = zones.begin(); a != zones.end(); ++a) {
    for (auto b = std::next(a); b != zones.end(); ++b) {
      if (!links.count({*a, *b})) {
        errors.Add(at + "zone_links: no link between zones '" + *a + "' and '" + *b +
                   "'; add {from: " + *a + ", to: " + *b + ", bandwidth_gbps: ...}");
      }
    }
  }
  if (zones.size() > 0) {
    for (int g = 0; g < spec.nodes_size(); ++g) {
      if (spec.nodes(g).zone().empty()) {
        errors.Add(at + "nodes[" + std::to_string(g) + "].zone: some node groups name a zone, so every group must");
      }
    }
  }
  std::set<std::string> storage_names;
  for (int i = 0; i < spec.storage_size(); ++i) {
    if (!storage_names.insert(spec.storage(i).name()).second) {
      errors.Add(at + "storage[" + std::to_string(i) + "].name: '" + spec.storage(i).name() + "' is used twice");
    }
  }
  if (!errors.empty()) return errors.ToStatus();
  c.spec_ = std::move(spec);
  return c;
}

std::string Cluster::DeviceName(uint32_t d) const {
  const auto& dev = devices_[d];
  return nodes_[dev.node].name + ":" + std::to_string(dev.local);
}

std::string Cluster::Summary() const {
  std::string out;
  for (const auto& ng : spec_.nodes()) {
    if (!out.empty()) out += " + ";
    const uint32_t count = ng.count() == 0 ? 1 : ng.count();
    out += std::to_string(count) + (count == 1 ? " node" : " nodes") + " × " +
           std::to_string(ng.gpus().count()) + " " + ng.gpus().type();
  }
  return out + ", " + std::to_string(devices_.size()) + " GPUs";
}

}  // namespace hetsim::models
