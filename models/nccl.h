// Collectives between nodes as NCCL runs them: which algorithm (ring or tree) and protocol (LL, LL128,
// Simple) NCCL picks for a call of a given size over a group spanning several nodes, and what the call
// costs. This is NCCL's own tuning model (src/graph/tuning.cc, ncclTopoTuneModel and
// ncclTopoGetAlgoTime, NCCL 2.x): per algorithm and protocol a latency
//   ring:  base + (steps − inter steps) · intra-node step latency + inter steps · inter-node step latency,
//          steps = 2(n − 1) for an all-reduce (n − 1 for reduce-scatter / all-gather), inter steps
//          = 2(N − 1) (N − 1) over N nodes;
//   tree (all-reduce only): base + 2 · ((ppn − 1) · intra latency + ⌊log₂ N⌋ · inter latency), ppn the
//          ranks per node;
// and a bus bandwidth (the NICs' line rate × the network's bus efficiency, × 0.92 for trees and LL128,
// × 0.5 and at most NCCL's LL ceiling for LL, ÷ 3.8 for tree LL), converted to algorithm bandwidth (ring
// n / steps, tree 1/2), with NCCL's ring "plateau" (the Simple ring all-reduce's latency × 1.4, × 1.9
// before Ampere) and its tree correction factors for medium sizes; NCCL runs the fastest. The constants are
// NCCL's (cited where they are used, nccl.cc); the network's own values (bus efficiency, latency, per-call
// overhead, whether LL128 crosses it) come from the calibration's `network` entries per NIC kind
// (models/proto/calibration.proto), bundled in `default` with their sources and refitted by
// `hetsim calibrate --from-data` on a multi-node machine's nccl-tests results.
//
// The simulator still plays the call as its ring's transfers on the platform (so that it shares links with
// everything else in flight); NcclCall::efficiency scales those transfers so that, uncontended, they take
// the chosen algorithm's bandwidth time. Groups inside one node keep the GPU calibration's collective
// latency and efficiency (fitted on measured single-node runs).
//
// Choices where NCCL depends on what hetsim does not model: the channel count (the bus bandwidth is the
// NICs' line rate times the efficiency, NCCL's per-channel ceilings are not applied except LL's), Intel
// hosts (NCCL's LL ceiling between nodes is 39.0 GB/s at 2 nodes and 20.4 beyond on Intel, 22.5 / 19.0
// on AMD), and two-node trees (NCCL can move half the bytes over the network there; priced as beyond).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/lowering.h"
#include "models/proto/cluster.pb.h"

namespace hetsim::models {

// A network's values under a calibration (calibration.proto NetworkCalibration).
struct NetworkParams {
  std::string source;
  double bus_efficiency = 0.96;
  double net_latency_s = 0;
  double net_overhead_s = 1e-6;
  bool ll128 = true;
};
// The values for `kind` under a calibration (bundled name or checked file; "" = default): the built-in
// ones, then the base's entries, then the calibration's, each entry naming the kind (or none).
const NetworkParams& NetworkParamsFor(proto::Nic::Kind kind, const std::string& calibration = "");

enum class NcclAlgo : uint8_t { kRing, kTree };
enum class NcclProto : uint8_t { kLL, kLL128, kSimple };
const char* NcclAlgoName(NcclAlgo a);
const char* NcclProtoName(NcclProto p);

// The shape of a communicator spanning nodes, as NCCL's tuning model sees it.
struct NcclGroup {
  uint32_t ranks = 0;
  uint32_t nodes = 0;
  uint32_t per_node = 0;   // the most members on one node
  bool nvlink = true;      // the members' nodes link their GPUs by NVLink / NVSwitch / xGMI (else PCIe)
  bool pre_ampere = false;  // some member is older than compute capability 8.0 (ring plateau × 1.9)
  // The line rate of the NICs the members of a node use (distinct NICs × bandwidth), least over the
  // nodes: what the ring's hop between two nodes, striped over the members' NICs, moves per second.
  double node_bandwidth_bytes_s = 0;
  proto::Nic::Kind nic = proto::Nic::KIND_INFINIBAND;  // that node's NIC kind
};
// The group's shape on `cluster` (members: device indices); nodes = 1 when they share one node.
NcclGroup NcclGroupOf(const Cluster& cluster, const std::vector<uint32_t>& members);

struct NcclCall {
  NcclAlgo algo = NcclAlgo::kRing;
  NcclProto proto = NcclProto::kSimple;
  double latency_s = 0;            // the call's fixed cost
  double bandwidth_bytes_s = 0;    // NCCL's algorithm bandwidth: bytes / (seconds − latency)
  double seconds = 0;              // latency + bytes / bandwidth
  // The divisor of the bytes a ring over the group's NICs at line rate carries so that, uncontended, it
  // takes seconds − latency (ring Simple: the bus efficiency).
  double efficiency = 1;
};
// NCCL's choice for one call of `bytes` (the whole buffer S) of `kind` over `group` (nodes ≥ 2). All-reduce
// considers ring and tree, reduce-scatter and all-gather the ring; other kinds are priced as a ring
// all-gather's steps (n − 1).
NcclCall ChooseNccl(CollectiveKind kind, double bytes, const NcclGroup& group, const NetworkParams& net);

}  // namespace hetsim::models
