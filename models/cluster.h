// A cluster resolved for use: every node and device numbered, GPU specs looked up in the catalog,
// defaults of the fabric and NIC filled in from the GPU type. Built from a proto::Cluster.
#pragma once

#include <string>
#include <vector>

#include "models/gpu_catalog.h"
#include "models/proto/cluster.pb.h"
#include "models/status.h"

namespace hetsim::models {

struct NodeInfo {
  std::string name;
  uint32_t group = 0;         // index into spec().nodes()
  uint32_t first_device = 0;  // global index of the node's first GPU
  uint32_t num_gpus = 0;
  const GpuSpec* gpu = nullptr;
  proto::IntraNodeFabric fabric;  // kind, bandwidth, latency and PCIe bandwidth all filled in
  proto::Nic nic;                 // attachment and count filled in; kind/bandwidth 0 when absent
  bool has_nic = false;
  std::string zone;  // "" when the cluster has one zone
  double host_memory_gib = 0;  // the spec's, or 512 when it gives none (host_memory_stated says which)
  bool host_memory_stated = false;
  // Adam updates per second of the node's host CPUs under CPU offload (the spec's cpu_adam_gparams_per_s,
  // default kDefaultCpuAdamParamsPerS).
  double cpu_adam_params_per_s = 0;
  // The host memory's bandwidth, bytes/s (the spec's host_memory_bandwidth_gbyte_s, default kHostMemoryBytesS).
  double host_memory_bytes_s = 0;
};

// DeepSpeed's CPU-Adam on a DGX-2 host: 10 B parameters in 2.57 s (Ren et al., "ZeRO-Offload", ATC'21,
// the CPU-Adam latency table of the evaluation; 2 × 24-core Xeon Platinum 8168).
inline constexpr double kDefaultCpuAdamParamsPerS = 3.9e9;

struct DeviceInfo {
  uint32_t node = 0;   // index into nodes()
  uint32_t local = 0;  // index inside the node
  const GpuSpec* gpu = nullptr;
};

class Cluster {
 public:
  // Resolves and validates `spec`; errors name `file` and the key path.
  static Result<Cluster> Build(proto::Cluster spec, const std::string& file,
                               const GpuCatalog& catalog = GpuCatalog::Bundled());

  const proto::Cluster& spec() const { return spec_; }
  const std::string& name() const { return spec_.name(); }
  uint32_t num_devices() const { return static_cast<uint32_t>(devices_.size()); }
  const DeviceInfo& device(uint32_t d) const { return devices_[d]; }
  const NodeInfo& node(uint32_t n) const { return nodes_[n]; }
  const std::vector<NodeInfo>& nodes() const { return nodes_; }
  // "a800-1:3" — node name and local GPU index.
  std::string DeviceName(uint32_t d) const;
  // "3×a800 (8 per node) + 3×rtx4090 (8 per node)" — one term per node group.
  std::string Summary() const;

 private:
  proto::Cluster spec_;
  std::vector<NodeInfo> nodes_;
  std::vector<DeviceInfo> devices_;
};

// Default latencies where a cluster file gives none.
inline constexpr double kDefaultNvlinkLatencyUs = 2.0;
inline constexpr double kDefaultPcieLatencyUs = 5.0;     // GPU-to-GPU over a PCIe fabric
inline constexpr double kDefaultPcieHopLatencyUs = 1.0;  // GPU to NIC / host memory
double DefaultNicLatencyUs(proto::Nic::Kind kind);

// The largest cluster hetsim builds (Cluster::Build refuses more GPUs).
constexpr uint64_t kMaxClusterGpus = 131072;

}  // namespace hetsim::models
