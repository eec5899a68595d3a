// The SimGrid platform of a cluster (docs/simulator.md, "Platform").
//
// One SimGrid host per GPU, one per node for the CPU / host memory, one per node for local NVMe (when the
// cluster has such storage) and one object store. Zones:
//   region (one per `zone`; a full zone of zone_links joins several)
//     └─ network group: the nodes under one leaf switch (fat_tree) or in one pod (pods), or all nodes
//        (single_switch) — a star zone whose uplink to the region is a split-duplex link carrying
//        Σ NIC bandwidth / oversubscription.
// Inside a group every GPU's route to the switch is [its PCIe link, its NIC] (a per-node NIC is shared
// by the node's GPUs); GPUs of one node talk over bypass routes [NVLink/NVSwitch port of a, port of b]
// (or their PCIe links for PCIe fabrics), and a GPU reaches its node's host memory over its PCIe link.
// Links are split-duplex (each direction has the full bandwidth). Latencies: half of a link kind's
// latency on each of the two links a route crosses.
#pragma once

#include <simgrid/s4u.hpp>

#include <string>
#include <vector>

#include "models/cluster.h"

namespace hetsim::sim {

struct Platform {
  std::vector<simgrid::s4u::Host*> gpus;   // by device index
  std::vector<uint32_t> gpu_node;          // by device index: the node it sits in
  // By node index: 1 when its GPU-to-GPU routes cross only the GPUs' own fabric ports (NVLink/NVSwitch,
  // one duplex link per GPU), which no route leaving the node or reaching host memory uses; 0 on a PCIe
  // fabric, whose GPU-to-GPU routes share the GPUs' PCIe links with the NIC traffic.
  std::vector<uint8_t> private_fabric;
  std::vector<simgrid::s4u::Host*> cpus;   // by node index
  std::vector<simgrid::s4u::Host*> nvmes;  // by node index (empty without local NVMe storage)
  simgrid::s4u::Host* object_store = nullptr;
  // BuildPlatform's shared_cores: the size of the pool of cores the devices' compute queues for (0: each
  // device computes whenever it is ready; SimOptions::shared_cores).
  uint32_t shared_cores = 0;
};

// Builds the platform into the current SimGrid engine (which must exist and have no platform yet).
// `calibration` (models/kernels.h): a GPU type's measured intra-node link (link_bandwidth_gbyte_s,
// link_latency_us) replaces the fabric's of the nodes of that type. `shared_cores` > 0: the devices' compute
// queues for a pool of that many cores (SimOptions::shared_cores).
Platform BuildPlatform(const models::Cluster& cluster, const std::string& calibration = "", uint32_t shared_cores = 0);

}  // namespace hetsim::sim
