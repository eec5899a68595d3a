// The routes of the simulator's platform without SimGrid: which directed links a transfer between two
// endpoints crosses, each link's bandwidth, and the route's latency, exactly as sim/platform.cc builds them
// (docs/simulator.md, "Platform"). The planners' lowering-based cost model (planners/lowering_cost.h) prices
// every transfer over these routes, so that an uncontended transfer costs what the simulator charges it:
// latency + bytes / the route's slowest link (SimGrid's CM02 model without factors, as sim/simulator.cc
// configures it).
//
// The links (each split-duplex: one directed link per direction, every direction at the full bandwidth):
//   - per GPU: its PCIe link to the host side (latency: half of the PCIe hop; on a PCIe fabric half of the
//     fabric's latency), its fabric port on NVLink/NVSwitch/xGMI nodes (half of the fabric latency), and on
//     PCIe fabrics slower than the GPU's PCIe link a peer-to-peer cap (no latency);
//   - per node: its NICs (per-GPU NICs, or `count` shared ones used round-robin by local index; latency half of
//     NIC + switch) and its host memory (200 GB/s, no latency);
//   - per network group (the nodes under one leaf switch or in one pod, when the region has several): an
//     uplink of Σ NIC bandwidth / oversubscription (half a switch latency);
//   - per zone link: one duplex link between two regions.
// A GPU-to-GPU route inside a node is [port a, port b] (or [PCIe a, P2P a, P2P b, PCIe b] on a PCIe fabric);
// between nodes [PCIe a, NIC a, (uplink a, (zone link,) uplink b,) NIC b, PCIe b], the uplinks only where
// the nodes sit in different network groups of regions that have several. A calibration whose GPU type
// measured its intra-node link (models/kernels.h) replaces the fabric's bandwidth and latency, as the
// simulator's platform does.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "models/cluster.h"

namespace hetsim::models {

// One route: at most eight directed links (the longest, between zones, has seven).
struct Route {
  double bandwidth_bytes_s = 0;  // the slowest link's (infinite for an empty route)
  double latency_s = 0;          // the sum of the links' latencies
  uint8_t num_links = 0;
  std::array<uint32_t, 8> links{};  // directed link ids (PlatformRoutes::LinkBandwidth)

  // latency + bytes / bandwidth (the simulator rounds a transfer's bytes to a whole number).
  double Seconds(double bytes) const;
  // Whether a transfer alone takes as long on both (same bottleneck bandwidth and latency): what folding
  // asks of a folded pipeline copy's route against its representative's.
  bool PricesAs(const Route& o) const {
    const auto near = [](double x, double y) { return x == y || std::abs(x - y) <= 1e-12 * std::max(std::abs(x), std::abs(y)); };
    return near(bandwidth_bytes_s, o.bandwidth_bytes_s) && near(latency_s, o.latency_s);
  }
};

class PlatformRoutes {
 public:
  // `calibration`: the bundled calibration the simulator is given (ComputeOptions::calibration).
  explicit PlatformRoutes(const Cluster& cluster, const std::string& calibration = "");

  // GPU a to GPU b (a != b).
  Route GpuToGpu(uint32_t a, uint32_t b) const;
  // A GPU to its node's host memory and back (CPU-staged transfers).
  Route GpuToHost(uint32_t gpu) const;
  Route HostToGpu(uint32_t gpu) const;
  // Host memory of node a to that of node b (a != b), and host memory of a node to a GPU of another node.
  Route HostToHost(uint32_t node_a, uint32_t node_b) const;
  Route HostToGpu(uint32_t node, uint32_t gpu) const;

  uint32_t num_links() const { return static_cast<uint32_t>(bandwidth_.size()); }
  double LinkBandwidth(uint32_t link) const { return bandwidth_[link]; }
  uint32_t NodeOf(uint32_t device) const { return gpu_node_[device]; }
  // Whether a node's GPU-to-GPU routes cross only the GPUs' own fabric ports (sim::Platform::private_fabric).
  bool PrivateFabric(uint32_t node) const { return nodes_[node].private_fabric; }

 private:
  // A duplex link: ids 2k (up, away from the endpoint that owns it) and 2k + 1 (down).
  uint32_t AddDuplex(double bandwidth_bytes_s, double latency_s);
  struct Chain {  // an endpoint's links up to its network group's switch
    uint32_t num = 0;
    std::array<uint32_t, 2> duplex{};
  };
  struct NodeLinks {
    uint32_t region = 0;
    uint32_t group = 0;          // network group inside the region
    bool grouped = false;        // the region has several network groups (routes between them cross uplinks)
    uint32_t uplink = UINT32_MAX;  // duplex id of the group's uplink (grouped only)
    uint32_t mem = 0;            // duplex id of the host memory link
    std::vector<uint32_t> nics;  // duplex ids
    bool private_fabric = false;
    bool pcie_fabric = false;
  };
  struct GpuLinks {
    uint32_t pcie = 0;
    uint32_t port = UINT32_MAX;  // fabric port (non-PCIe fabrics)
    uint32_t p2p = UINT32_MAX;   // peer-to-peer cap (slow PCIe fabrics)
  };
  Chain GpuChain(uint32_t gpu) const;
  Chain HostChain(uint32_t node) const;
  // From an endpoint (chain, node) up and across to another (chain, node) on a different node.
  Route Across(const Chain& from, uint32_t node_from, const Chain& to, uint32_t node_to) const;
  void Up(Route& r, uint32_t duplex) const;
  void Down(Route& r, uint32_t duplex) const;

  std::vector<double> bandwidth_;  // per directed link
  std::vector<double> latency_;    // per directed link
  std::vector<NodeLinks> nodes_;
  std::vector<GpuLinks> gpus_;
  std::vector<uint32_t> gpu_node_;
  std::vector<uint32_t> gpu_local_;
  // Zone links: per (region a, region b) the duplex id and whether a → b is its up direction; UINT32_MAX none.
  uint32_t num_regions_ = 1;
  std::vector<std::pair<uint32_t, bool>> zone_links_;
};

}  // namespace hetsim::models
