// AutoHet's elastic recovery (AutoHet §IV "Elastic Training Recovery"): layer-wise checkpoints, the layer
// bitmap that records where every piece of them lives, and adaptive, local-first loading after a re-plan.
//
// This is bookkeeping over plans and bytes, with no SimGrid: the policy `autohet` (sim/recovery/autohet.cc)
// keeps the bitmap and has a RecoveryLoad's transfers played on the cluster's platform (SimulateTransfers).
//
// The unit is a *layer part*: the weights or the optimizer state of one layer of the plan (embedding, a
// transformer block, the head). A device holds a fraction [begin, end) of each layer part it runs: TP rank k
// of t holds [k/t, (k+1)/t) (§IV-B2: a TP shard), and ZeRO cuts that range further over the layer's data-
// parallel replicas (the optimizer state from ZeRO-1, the weights from ZeRO-3). Re-partitioning between two
// plans is then the overlap of ranges: an unchanged TP degree reads the same shards, a larger one reads a
// part of one old shard (a split), a smaller one reads several old shards (a concatenation).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "models/cluster.h"
#include "models/plan.h"
#include "models/proto/plan.pb.h"
#include "sim/simulator.h"

namespace hetsim::sim::recovery {

// AutoHet §IV-B1 saves a layer_dict (parameters) and an optimizer_dict (momentum, variance) per layer.
enum class StatePart : uint8_t { kWeights, kOptimizer };

// One device's piece of one layer part, placed on the trace's cluster.
struct LayerPiece {
  uint32_t device = 0;  // a device of the trace's cluster
  uint32_t node = 0;    // its node
  uint32_t layer = 0;
  StatePart part = StatePart::kWeights;
  double begin = 0, end = 0;  // the fraction of the layer part, 0 <= begin < end <= 1
  double part_bytes = 0;      // bytes of the whole layer part (every TP rank's together)
  double bytes() const { return (end - begin) * part_bytes; }
};

// Where the devices of a plan's cluster sit on the trace's cluster, indexed by the plan's device.
struct DevicePlace {
  uint32_t device = 0;
  uint32_t node = 0;
};
// The identity: a plan written for `cluster` itself.
std::vector<DevicePlace> PlacesOn(const models::Cluster& cluster);

// The pieces every device of `plan` holds, in plan order (pipelines, stages, replicas, TP ranks), layer by
// layer, weights before optimizer state. Bytes per parameter as models::EstimateMemory counts them: the
// training dtype's for the weights, fp32 master weights (mixed precision) and Adam's two moments (or SGD's
// momentum) plus optimizer_extra_bytes_per_param for the optimizer state; gradients are not checkpointed.
// A tied head that lives apart from the embedding holds its own copy of the embedding matrix (as Megatron-LM
// saves it). `plan` must pass models::ValidatePlanStructure on ctx.cluster; places.size() must be
// ctx.cluster's device count.
std::vector<LayerPiece> LayerPieces(const proto::Plan& plan, const models::PlanContext& ctx,
                                    const std::vector<DevicePlace>& places);

// AutoHet §IV-C's layer bitmap: for every layer part, which ranges each node holds in host memory and on
// its local NVMe (saved together, §IV-B1). The object store holds every piece (§IV-B1 replicates every
// checkpoint to cloud storage), so it is not recorded here.
class LayerBitmap {
 public:
  using Ranges = std::vector<std::pair<double, double>>;  // sorted, disjoint [begin, end)

  LayerBitmap() = default;  // nothing saved on any node
  // A checkpoint saved by the devices holding `saved`: each one's node keeps its pieces.
  explicit LayerBitmap(const std::vector<LayerPiece>& saved);

  // The node left (failed, preempted): its copies are gone.
  void Forget(uint32_t node);

  // The ranges of (layer, part) that `node` holds (empty if none).
  const Ranges& Held(uint32_t node, uint32_t layer, StatePart part) const;
  // The nodes holding some range of (layer, part), ascending.
  std::vector<uint32_t> Holders(uint32_t layer, StatePart part) const;

 private:
  std::map<std::pair<uint32_t, StatePart>, std::map<uint32_t, Ranges>> held_;
};

// Where the pieces a new configuration needs come from (AutoHet §IV-C, accelerated recovery), every
// device loading at once after the restart (GPU memory does not survive it):
//   1. its own node's copy (`local_tier`: local NVMe, or host memory when it survives the restart),
//   2. the copies of other nodes, over the network (RDMA), the holders of a range taken in turn from the
//      device's index so that replicas share the reads,
//   3. the object store for what no live node holds.
// Transfers are merged per (source, destination device) and ordered, so equal inputs give equal lists.
struct RecoveryLoad {
  std::vector<Transfer> transfers;
  double local_bytes = 0;  // read from the device's own node
  double peer_bytes = 0;   // from other nodes
  double cloud_bytes = 0;  // from the object store
};
RecoveryLoad PlanRecoveryLoad(const LayerBitmap& bitmap, const std::vector<LayerPiece>& needed,
                              Endpoint::Kind local_tier);

}  // namespace hetsim::sim::recovery
