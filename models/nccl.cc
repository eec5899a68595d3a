#include "models/nccl.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace hetsim::models {
namespace {

// NCCL's tuning constants (src/graph/tuning.cc, default tuner constants), in microseconds, indexed
// [protocol] with LL, LL128, Simple.
constexpr double kBaseLatencyTree[3] = {6.8, 14.0, 8.4};
constexpr double kBaseLatencyRing[3] = {6.6, 14.0, 8.4};
// Hardware latency of one step inside a node (NVLink or PCIe) and between nodes (NET).
constexpr double kNvlinkTree[3] = {0.6, 1.25, 4.0};
constexpr double kNvlinkRing[3] = {0.6, 1.9, 3.4};
constexpr double kPciTree[3] = {1.0, 1.9, 4.0};
constexpr double kPciRing[3] = {1.0, 2.5, 5.7};
constexpr double kNetTree[3] = {5.0, 8.5, 14.0};
constexpr double kNetRing[3] = {2.7, 4.0, 14.0};
// NCCL's ceiling of the LL protocol's bandwidth between nodes on Intel hosts (GB/s): 2 nodes, more.
constexpr double kLlMaxTwoNodes = 39.0;
constexpr double kLlMaxMoreNodes = 20.4;
// NCCL's tree correction factors by log2(bytes / 64) for medium all-reduces (64 B to 256 MiB), per
// protocol: "trees are not perfectly sticking to the model for medium sizes".
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

int Log2Floor(double x) { return x >= 1 ? static_cast<int>(std::floor(std::log2(x))) : -1; }

// Compute capability below 8.0 (Pascal, Volta, Turing), by catalog name.
bool PreAmpere(const std::string& gpu) {
  static const std::set<std::string> kOld = {"p100",    "v100",      "v100-32gb", "v100-pcie",
                                             "t4",      "rtx2080",   "titan-rtx"};
  return kOld.count(gpu) > 0;
}

}  // namespace

const char* NcclAlgoName(NcclAlgo a) { return a == NcclAlgo::kTree ? "tree" : "ring"; }
const char* NcclProtoName(NcclProto p) {
  switch (p) {
    case NcclProto::kLL: return "LL";
    case NcclProto::kLL128: return "LL128";
    case NcclProto::kSimple: return "Simple";
  }
  return "Simple";
}

NcclGroup NcclGroupOf(const Cluster& cluster, const std::vector<uint32_t>& members) {
  NcclGroup g;
  g.ranks = static_cast<uint32_t>(members.size());
  // Per node: its members and the distinct NICs they reach (shared NICs serve local GPU l % count, as
  // the platform wires them).
  std::map<uint32_t, std::pair<uint32_t, std::set<uint32_t>>> by_node;
  for (uint32_t d : members) {
    const DeviceInfo& dev = cluster.device(d);
    auto& [count, nics] = by_node[dev.node];
    ++count;
    const NodeInfo& node = cluster.node(dev.node);
    if (node.has_nic) nics.insert(dev.local % std::max(1u, node.nic.count()));
    if (PreAmpere(dev.gpu->name)) g.pre_ampere = true;
  }
  g.nodes = static_cast<uint32_t>(by_node.size());
  g.node_bandwidth_bytes_s = std::numeric_limits<double>::infinity();
  for (const auto& [n, v] : by_node) {
    const NodeInfo& node = cluster.node(n);
    g.per_node = std::max(g.per_node, v.first);
    if (node.fabric.kind() == proto::IntraNodeFabric::KIND_PCIE) g.nvlink = false;
    const double bw = node.has_nic ? static_cast<double>(v.second.size()) * node.nic.bandwidth_gbps() * 1e9 / 8 : 0;
    if (bw < g.node_bandwidth_bytes_s) {
      g.node_bandwidth_bytes_s = bw;
      g.nic = node.nic.kind();
    }
  }
  return g;
}

NcclCall ChooseNccl(CollectiveKind kind, double bytes, const NcclGroup& g, const NetworkParams& net) {
  const double n = g.ranks, nodes = g.nodes, ppn = g.per_node;
  const bool all_reduce = kind == CollectiveKind::kAllReduce;
  const double steps = all_reduce ? 2 * (n - 1) : n - 1;
  const double inter_steps = all_reduce ? 2 * (nodes - 1) : nodes - 1;
  // GB/s, as NCCL's model counts: the NICs' line rate reached between nodes.
  const double line_gbs = g.node_bandwidth_bytes_s * 1e-9;
  const double bus_gbs = line_gbs * net.bus_efficiency;
  const double ll_max = nodes <= 2 ? kLlMaxTwoNodes : kLlMaxMoreNodes;
  const double net_lat_us = net.net_latency_s * 1e6, overhead_us = net.net_overhead_s * 1e6;
  NcclCall best;
  best.seconds = std::numeric_limits<double>::infinity();
  for (NcclAlgo algo : {NcclAlgo::kRing, NcclAlgo::kTree}) {
    if (algo == NcclAlgo::kTree && !all_reduce) continue;
    for (NcclProto proto : {NcclProto::kLL, NcclProto::kLL128, NcclProto::kSimple}) {
      const int p = static_cast<int>(proto);
      // LL128 needs NVLink inside the nodes and GPU Direct RDMA between them.
      if (proto == NcclProto::kLL128 && (!net.ll128 || !g.nvlink)) continue;
      const bool tree = algo == NcclAlgo::kTree;
      double bus = bus_gbs;
      if (!tree && proto == NcclProto::kLL) bus = std::min(ll_max, bus * 0.5);
      if (!tree && proto == NcclProto::kLL128) bus *= 0.92;  // 120 of every 128 bytes are data
      if (tree) bus *= 0.92;
      if (tree && proto == NcclProto::kLL) bus = std::min(bus / 3.8, ll_max);
      if (tree && proto == NcclProto::kLL128) bus *= 120.0 / 128.0;
      double algbw = bus * (tree ? 0.5 : n / steps);
      // Latency (us).
      const double* intra_hw = tree ? (g.nvlink ? kNvlinkTree : kPciTree) : (g.nvlink ? kNvlinkRing : kPciRing);
      double intra = intra_hw[p];
      // With one rank per node every step crosses the network at the tree's latency.
      double inter = (ppn <= 1 ? kNetTree[p] : (tree ? kNetTree[p] : kNetRing[p])) + net_lat_us;
      if (proto == NcclProto::kSimple) inter += net_lat_us;  // the flush
      double lat = tree ? kBaseLatencyTree[p] : kBaseLatencyRing[p];
      if (tree) {
        lat += 2 * ((ppn - 1) * intra + Log2Floor(nodes) * inter);
      } else {
        // Inter-node rings still post every step to the network proxy.
        intra = std::max(intra, proto == NcclProto::kSimple ? 3 * overhead_us : overhead_us);
        lat += (steps - inter_steps) * intra + inter_steps * inter;
      }
      // ncclTopoGetAlgoTime's corrections.
      const int log_size = Log2Floor(bytes / 64);
      if (tree && log_size >= 0 && log_size < 23) algbw *= kTreeCorrection[p][log_size];
      // The ring's plateau, where a call gives each of NCCL's channels (8 assumed) at least 64 bytes per rank.
      if (!tree && proto == NcclProto::kSimple && all_reduce && bytes / (8 * n) >= 64) lat *= g.pre_ampere ? 1.9 : 1.4;
      const double us = lat + bytes / (1e3 * algbw);
      if (us * 1e-6 < best.seconds) {
        best.algo = algo;
        best.proto = proto;
        best.latency_s = lat * 1e-6;
        best.bandwidth_bytes_s = algbw * 1e9;
        best.seconds = us * 1e-6;
      }
    }
  }
  // The ring at line rate moves (steps / n) · S per member through the bottleneck NICs.
  const double ring_line_s = (steps / n) * bytes / g.node_bandwidth_bytes_s;
  const double chosen_s = bytes / best.bandwidth_bytes_s;
  best.efficiency = chosen_s > 0 ? ring_line_s / chosen_s : 1;
  return best;
}

}  // namespace hetsim::models
