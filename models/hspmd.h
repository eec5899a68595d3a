// Hetu v2's HSPMD (papers/003; docs/hspmd.md): sharding annotations (§3), hierarchical communication
// resolution (§4, Fig. 4), the batched-send-receive mechanism with its three heuristics (BSR, §4.3) and the
// fused BSR that switches a whole model from one plan to another (§6.2).
//
// Pure bookkeeping over devices and bytes: the result is a list of collectives, sends and local copies.
// Timing them on a cluster is sim/'s job (sim/hetu_switching.h plays them on the SimGrid platform).
//
// Geometry. A tensor has `rank` physical dimensions; a device's shard is a box of fractions [lo, hi) of each
// dimension, plus whether its values are partial sums. Finest-grained slices (§4.2, §4.3) are the cells of
// the grid that every boundary of the source and destination boxes cuts, so the bytes of a slice are the
// tensor's bytes times the product of the cell's widths.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/proto/plan.pb.h"
#include "models/status.h"
#include "models/topology.h"
#include "models/transformer.h"

namespace hetsim::models::hspmd {

// Keys of a DS other than a physical dimension (>= 0, Split(dim)).
inline constexpr int kDuplicate = -1;  // Duplicate: every device of the entry holds the same values
inline constexpr int kPartial = -2;    // Partial: the devices hold addends of the values

// Distributed States (§3.1): an ordered dictionary from a logical distributed dimension to its number of
// shards. The device at position p of the DG has coordinates given by p written in mixed radix over the
// entries, the first entry the most significant (so the last entry varies fastest: TP innermost, as
// plan.proto numbers a stage's devices).
class DistState {
 public:
  DistState() = default;  // one device holding the whole tensor
  DistState(std::initializer_list<std::pair<int, uint32_t>> entries);
  static DistState Split(int dim, uint32_t n) { return DistState({{dim, n}}); }
  static DistState Duplicate(uint32_t n) { return DistState({{kDuplicate, n}}); }
  static DistState Partial(uint32_t n) { return DistState({{kPartial, n}}); }

  const std::vector<std::pair<int, uint32_t>>& entries() const { return entries_; }
  uint32_t num_devices() const;     // the product of the shard counts
  uint32_t shards(int dim) const;   // 1 if the key is absent
  bool operator==(const DistState& o) const;  // entries with one shard do not count
  std::string ToString() const;     // "{S0:4}", "{D:2,S0:4}", "{P:2}"

 private:
  std::vector<std::pair<int, uint32_t>> entries_;
};

using DeviceGroup = std::vector<uint32_t>;  // DG (§3.1): an ordered list of devices

// An HSPMD annotation (§3.2): a DG Union and a DS Union of HSize sharding subgroups, and HDim, the dimension
// along which the subgroups split the tensor (kDuplicate: each holds all of it; kPartial: each holds
// addends). A plain SPMD annotation is the union of one subgroup.
struct Annotation {
  std::vector<DeviceGroup> dg_union;
  std::vector<DistState> ds_union;
  int hdim = kDuplicate;
  // Optional non-uniform split along HDim (§3.2 footnote 2): one weight per subgroup; empty = uniform.
  std::vector<double> hsplit;

  uint32_t hsize() const { return static_cast<uint32_t>(dg_union.size()); }
  std::string ToString() const;
};
// One subgroup: an SPMD annotation.
Annotation Spmd(DeviceGroup dg, DistState ds);

// Checks an annotation of a tensor with `rank` dimensions: as many DS as DGs, each DS's device count equal
// to its DG's size, Split dimensions below `rank` and not repeated, subgroups mutually exclusive (§3.2
// footnote 1), HDim a dimension below `rank` or kDuplicate/kPartial, hsplit one positive weight per subgroup.
Status CheckAnnotation(const Annotation& a, uint32_t rank);

// A box of fractions [lo, hi) per physical dimension.
using Box = std::vector<std::pair<double, double>>;

// What one device holds.
struct Shard {
  uint32_t device = 0;
  Box box;
  bool partial = false;  // partial sums (a Partial entry in the DS, or HDim kPartial)
};
// Every device's shard, subgroup by subgroup in DG order. Requires CheckAnnotation.
std::vector<Shard> Shards(const Annotation& a, uint32_t rank);

// ---- communication (§4) -------------------------------------------------------------------------------

enum class CommKind : uint8_t {
  kIdentity,            // §4.1 (I): same DS, same DG
  kSendRecv,            // §4.1 (I): same DS, another device at some position of the DG
  kAllReduce,           // §4.1 (II), Fig. 5: Partial -> Duplicate
  kReduceScatter,       // Partial -> Split(d)
  kAllGather,           // Split(d) -> Duplicate
  kSplitAllReduce,      // §4.2 (I), Fig. 6: HDim Partial -> Duplicate, per finest slice across subgroups
  kSplitReduceScatter,  // HDim Partial -> Split(d)
  kSplitAllGather,      // HDim Split(d) -> Duplicate
  kBsr,                 // §4.3: batched send-receive
};
const char* CommKindName(CommKind k);  // "identity", "SR", "AR", "RS", "AG", "SplitAR", "SplitRS", "SplitAG", "BSR"

// A collective over `devices`; `bytes` is the size of the data it reduces or gathers (the slice).
struct Collective {
  std::vector<uint32_t> devices;
  double bytes = 0;
};
struct Send {
  uint32_t from = 0, to = 0;
  double bytes = 0;
};

// One operator of a resolution. `subgroup` is the sharding subgroup of a bottom-tier step, -1 for a
// top-tier one (Split*, or a BSR over the whole union).
struct CommStep {
  CommKind kind = CommKind::kIdentity;
  int subgroup = -1;
  std::vector<Collective> collectives;  // AR/RS/AG/Split*: one per group of devices
  std::vector<Send> sends;              // SR, BSR
  std::vector<Send> local_copies;       // BSR heuristic (I): a slice the receiver already owns
};

// How BSR picks senders (§4.3).
struct BsrOptions {
  // true: heuristics (II) and (III); false: the lowest device id that owns a slice sends it (§8's baseline
  // "without heuristics"). Heuristic (I), the local copy, applies in both.
  bool heuristics = true;
  // Bandwidth between two devices for heuristic (II); null: every pair equal (only (III) decides).
  const Topology* topology = nullptr;
  // Devices whose copies are gone (a failed GPU): they own nothing.
  std::set<uint32_t> lost;
};

struct Resolution {
  std::vector<CommStep> steps;  // in order
  std::vector<CommKind> kinds() const;
  double sent_bytes() const;  // bytes of every send (collectives not counted)
};

// Fig. 4: from `src` to `dst` annotations of a tensor of `rank` dimensions and `tensor_bytes` bytes.
//   same HSize and HDim -> bottom tier, each subgroup alone (§4.1): identity / SR when the DS is the same,
//     AR / RS / AG when only the DS changes and one entry turns Partial->Duplicate, Partial->Split(d) or
//     Split(d)->Duplicate, else BSR (over the subgroup's devices);
//   same HSize, another HDim, same DG Union -> top tier (§4.2): bottom-tier steps bring the DS Union to the
//     destination's (II), then SplitAR / SplitRS / SplitAG per finest slice (I); another HDim change -> BSR;
//   otherwise (another HSize or DG Union) -> BSR over the whole union.
// BSR cannot move Partial values (§4.3 "Discussions"): an error naming both annotations.
Result<Resolution> Resolve(const Annotation& src, const Annotation& dst, double tensor_bytes, uint32_t rank,
                           const BsrOptions& options = {});

// ---- BSR (§4.3) ------------------------------------------------------------------------------------------

// One row of the BSR table: a finest-grained slice, its owners in the source, its requirers in the
// destination (both ascending).
struct BsrSlice {
  Box box;
  double bytes = 0;
  std::vector<uint32_t> owners, requirers;
};
// The BSR table of one tensor, slices in grid order (dimension 0 slowest). Partial shards are an error.
Result<std::vector<BsrSlice>> BsrTable(const Annotation& src, const Annotation& dst, double tensor_bytes,
                                       uint32_t rank);

// Builds BSR plans. One planner keeps the cumulative send load across every table added to it: adding every
// tensor's table to one planner is the fused BSR of §6.2 (one global, load-balanced plan); one planner per
// tensor is the unfused baseline.
class BsrPlanner {
 public:
  explicit BsrPlanner(BsrOptions options) : options_(std::move(options)) {}
  // Scans the table in order, each slice's requirers in order (§4.3).
  void Add(const std::vector<BsrSlice>& table);

  const std::vector<Send>& sends() const { return sends_; }  // one per (slice, receiver)
  const std::vector<Send>& local_copies() const { return copies_; }
  // Bytes required by a device while no live device owns them (e.g. every replica lost).
  double missing_bytes() const { return missing_bytes_; }

 private:
  BsrOptions options_;
  std::vector<Send> sends_, copies_;
  std::vector<double> load_;  // cumulative bytes sent, by device
  double missing_bytes_ = 0;
};

// One send per (from, to) pair with the bytes summed, ordered by (from, to): §6.2's fusion of the
// send-receives between the same GPU pair.
std::vector<Send> FuseSends(const std::vector<Send>& sends);

// ---- a Plan's tensors (§3.2, §5, Fig. 17) ------------------------------------------------------------------

// The weights of one plan layer as one tensor of rank 1 (the layer's matrices stacked along the dimension
// TP splits: its bytes are what matters here). Per pipeline, the stage holding the layer is one sharding
// subgroup with DS {D: replicas, S0: tp} (intra-stage DP/CP/Ulysses ranks duplicate, TP splits; TP
// innermost as plan.proto numbers the devices); the pipelines duplicate it: HDim kDuplicate. Its gradient
// before the sync is the same with HDim kPartial (and Partial instead of Duplicate inside a subgroup).
struct PlanTensor {
  uint32_t layer = 0;
  Annotation annotation;
  double bytes = 0;
};
// Devices are mapped through `place` (plan device -> another numbering, e.g. the trace cluster's) when it
// is not empty. `bytes_per_param` converts the layer's parameters (TransformerModel::Params) to bytes.
std::vector<PlanTensor> WeightTensors(const proto::Plan& plan, const TransformerModel& model, double bytes_per_param,
                                      const std::vector<uint32_t>& place = {});
// The gradient of WeightTensors' tensor for `layer`: HDim kPartial and intra-stage replicas Partial.
Annotation GradientAnnotation(const proto::Plan& plan, uint32_t layer);
// The activation between stage `stage` and `stage + 1` of pipeline `pipeline` (§8: SR or BSR): each
// stage's devices hold it in full after its TP all-reduce ({D: devices}).
std::pair<Annotation, Annotation> StageBoundary(const proto::Plan& plan, uint32_t pipeline, uint32_t stage);

// The reverse direction, annotations lowered to a Plan (§3 -> hetsim's currency): the weights' annotations of
// every layer (as WeightTensors gives them: one subgroup per pipeline, DS {D: replicas, S0: tp}, HDim
// kDuplicate across pipelines) and each pipeline's share of the data (§5.5: its micro-batch size and count,
// the input's non-uniform HDim split). Subgroup k of every layer is pipeline k's stage holding that layer;
// consecutive layers with the same DG and DS are one stage. Errors name the layer and what is wrong (layers
// missing or out of order, subgroup counts that differ, HDim not Duplicate, a DS other than {D, S0}, a
// subgroup that comes back to a device group it left). Intra-stage replicas come back as DP: the weights
// cannot tell DP from CP or Ulysses ranks (they all duplicate the weights).
struct PipelineData {
  uint32_t micro_batch_size = 1;
  uint32_t num_micro_batches = 1;
};
Result<proto::Plan> LowerToPlan(const std::vector<PlanTensor>& weights, const std::vector<PipelineData>& data,
                                uint32_t num_layers);

// A plan's HSPMD annotations as text (`hetsim describe --plan P --hspmd`): per run of layers whose weights
// share one annotation, the weights' DG Union / DS Union / HDim, and the communication that synchronises
// their gradients (Resolve from GradientAnnotation to the weights: AR, SplitAR, ... ).
std::string DescribeAnnotations(const proto::Plan& plan, const TransformerModel& model);

// The fused (or unfused) BSR of §6.2 from the weights of one plan to another's, matched by layer (layers
// only in `to` must come from somewhere: with no owner they count as missing).
struct SwitchPlan {
  // fused: one round, one send per GPU pair; unfused: one round per tensor (played one after another),
  // each with its per-slice sends.
  std::vector<std::vector<Send>> rounds;
  double sent_bytes = 0, local_bytes = 0, missing_bytes = 0;
};
SwitchPlan PlanSwitch(const std::vector<PlanTensor>& from, const std::vector<PlanTensor>& to, bool fused,
                      const BsrOptions& options);

}  // namespace hetsim::models::hspmd
