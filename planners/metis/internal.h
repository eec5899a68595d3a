// The pieces of the Metis planner (planners/metis/metis.h), exposed for tests and the benchmark:
//   - §4.1 device groups and §4.2.2 1) the enumeration of stage-device assignments with its pruning
//     (device_groups.cc);
//   - §4.3 the profiler and the estimates composed from its profiles (profiler.cc);
//   - §4.2.2 2)–3) and §4.2.1 the DP-first DFS, the load balancers and the cost of eq. 1 (search.cc).
// Not a public interface: the planner is used through the registry.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/topology.h"
#include "planners/planner.h"
#include "planners/search.h"

namespace hetsim::proto {
class MetisOptions;
}

namespace hetsim::planners::metis {

// The options with their defaults filled in (planners/proto/metis.proto documents each).
struct Knobs {
  double var = 0.5;                     // §4.2.2 1), Table 4
  bool released_var = false;            // var read as the released planner does (MetisOptions::VarBound)
  uint32_t max_permutation_length = 10;  // §4.2.2 1), Table 4
  uint32_t max_profiled_tp = 8;         // §4.3: tp = 1, 2, 4, 8
  uint32_t max_profiled_batch = 16;     // §4.3: mbs = 1, 2, 4, 8, 16
  uint32_t memory_k = 4;                // §4.3: compositions of up to k layers
  uint32_t zero_stage = 1;
  uint32_t max_stages = 0;  // 0: min(GPUs, layers)
  bool any_group_size = false;
  uint64_t max_full_assignments = 20000;
  uint64_t max_dfs_nodes = 256;
  // Most stage-size orders the whole search explores (not in the paper; MetisOptions::max_orders): 0 =
  // kOrderWork / GPUs. Under it nothing changes; over it the units with the most orders merge their
  // smallest groups further (§4.2.2 1)'s rule) until the total fits.
  uint64_t max_orders = 0;
  uint32_t threads = 1;
  double time_limit_s = 0;  // 0: none
  // The clock of time_limit_s, in seconds since any fixed point; empty: the steady clock. Tests inject one
  // that advances per reading, which makes where the limit cuts the search deterministic.
  std::function<double()> clock_s;
  // Cut (assignment, B) pairs whose lower bound exceeds the best plan so far (exact: never changes the
  // plan; not in the paper). Tests turn it off to check that.
  bool use_bound = true;
};
Knobs KnobsFrom(const proto::MetisOptions& options);

// ---- §4.1 device groups ------------------------------------------------------------------------------

// Node classes: nodes with the same GPU type and count, fabric, NIC, zone and switch are interchangeable
// (a device group's compute, memory and network do not change when one is swapped for the other).
// Returns the class of every node; classes are numbered in order of first appearance.
std::vector<uint32_t> NodeClasses(const models::Cluster& cluster);

// A device group: how many GPUs it takes from each node (k_n, 0 ≤ k_n ≤ the node's GPUs).
using Take = std::vector<uint32_t>;

// "4 GPUs: 1×v100 + 3×t4 on v100-1gpu:1 + t4:3" — size, per-type counts, node placement.
std::string DescribeGroup(const models::Cluster& cluster, const Take& take);

// §4.1: every combination of k GPUs per node whose size is in `sizes` (every size when empty), made
// unique by size, then by the count of each GPU type, then by the nodes of each type (up to swapping
// interchangeable nodes). Sorted by size, then as generated.
std::vector<Take> UniqueDeviceGroups(const models::Cluster& cluster, const std::vector<uint32_t>& sizes);

// ---- §4.2.2 1) pruning combinations of stage-device group mapping --------------------------------------

// Non-increasing lists of `stages` device-group sizes that sum to `gpus`, each at least
// gpus/stages·(1 − var) (the paper), or max(⌊gpus/stages⌋, ⌊stages/gpus⌋)·var with `released_var` (the
// authors' released planner); powers of two unless !power_of_two.
std::vector<std::vector<uint32_t>> StageSizeMultisets(uint32_t gpus, uint32_t stages, double var, bool power_of_two,
                                                      bool released_var = false);

// The permutation units of a size multiset: the groups of the smallest size are merged into pairs (two at
// a time, as many pairs as there are) until at most `max_len` units remain; a smallest group without a
// partner of its size is merged with the next smallest unit. Units keep their merged groups adjacent.
std::vector<std::vector<uint32_t>> MergeSmallest(const std::vector<uint32_t>& sizes, uint32_t max_len);

// How many distinct orders the units of MergeSmallest(sizes, max_len) have (saturating at UINT64_MAX).
uint64_t OrderCount(const std::vector<uint32_t>& sizes, uint32_t max_len);

// The order budget's default: kOrderWork / GPUs orders in all (an order's assignments cost about the
// same per GPU, so the budget is about the same work at every size: 7.8M orders at 64 GPUs, 122k at 4,096).
inline constexpr double kOrderWork = 5e8;

// The permutation length each work unit (a stage-size multiset, `unit_sizes[u]`) is searched with under a
// budget of `max_orders` orders in all: `max_len` for every unit when the units' orders at max_len fit;
// otherwise the largest count c with Σ_u min(orders_u, c) ≤ max_orders, and for each unit the largest
// length ≤ max_len whose orders are at most c (length 1: one order).
std::vector<uint32_t> PermutationLengths(const std::vector<std::vector<uint32_t>>& unit_sizes, uint32_t max_len,
                                         uint64_t max_orders);

// The distinct orders of the units of MergeSmallest(sizes, max_len), each flattened into the sizes of
// stages 0..S−1 (the paper's example: sizes {1, 1, 1, 1, 2}, max_len 3 → 3 orders).
std::vector<std::vector<uint32_t>> StageSizeOrders(const std::vector<uint32_t>& sizes, uint32_t max_len);
// The same, one order at a time (`visit` returns false to stop).
void ForEachStageSizeOrder(const std::vector<uint32_t>& sizes, uint32_t max_len,
                           const std::function<bool(const std::vector<uint32_t>&)>& visit);
// The same, for a search that can rule out every order beginning with some stages: `visit` gets each
// order with its rank (its position among the distinct orders in lexicographic order of the units, which
// skipping does not change) and returns nullopt to stop, or p: skip the orders whose first p stages are
// this order's (0: skip none). Orders are skipped a whole unit at a time (the units covering stages
// 0..p−1), so every order skipped does begin with those p stages.
void ForEachStageSizeOrderSkipping(
    const std::vector<uint32_t>& sizes, uint32_t max_len,
    const std::function<std::optional<uint32_t>(const std::vector<uint32_t>&, uint64_t)>& visit);

// A stage-device assignment: per stage, its device group.
using Assignment = std::vector<Take>;

// The same, flat: stage s takes parts[stage_begin[s] .. stage_begin[s + 1]) = (node, GPUs), by node.
struct Placement {
  std::vector<uint32_t> stage_begin;
  std::vector<std::pair<uint32_t, uint32_t>> parts;
};
Placement ToPlacement(const Assignment& assignment);

// The assignments of one stage-size order (sizes[i] GPUs to stage i, every GPU used once):
//   - full: every sequence of device groups (§4.1) of those sizes, up to swapping interchangeable nodes
//     that no earlier stage touched;
//   - otherwise: for each node order in `node_orders`, the stages take consecutive GPUs of that order.
// Duplicates are skipped. `visit` returns false to stop.
void ForEachAssignment(const models::Cluster& cluster, const std::vector<uint32_t>& classes,
                       const std::vector<uint32_t>& sizes, bool full,
                       const std::vector<std::vector<uint32_t>>& node_orders,
                       const std::function<bool(const Assignment&)>& visit);
// The same as placements (the search's form; no allocation per assignment on the consecutive path).
void ForEachPlacement(const models::Cluster& cluster, const std::vector<uint32_t>& classes,
                      const std::vector<uint32_t>& sizes, bool full,
                      const std::vector<std::vector<uint32_t>>& node_orders,
                      const std::function<bool(const Placement&)>& visit);

// The consecutive placements of one stage-size order (ForEachPlacement with full = false), each with the
// index of its node order; `built` keeps one placement per node order between calls (no allocation once
// warm).
void ForEachConsecutivePlacement(const models::Cluster& cluster, const std::vector<uint32_t>& sizes,
                                 const std::vector<std::vector<uint32_t>>& node_orders, std::vector<Placement>& built,
                                 const std::function<bool(const Placement&, uint32_t)>& visit);

// The node orders of the consecutive placement: every order of the node classes (nodes of a class in
// index order); with more than 6 classes, every order of the GPU types; with more than 6 types, one order.
std::vector<std::vector<uint32_t>> NodeOrders(const models::Cluster& cluster, const std::vector<uint32_t>& classes);

// The number of full assignments over every stage count and size order the knobs allow, counting at most
// to limit + 1.
uint64_t CountFullAssignments(const models::Cluster& cluster, const std::vector<uint32_t>& classes,
                              const Knobs& knobs, uint32_t max_stages, uint64_t limit);

// ---- §4.3 cost estimation with profiling ---------------------------------------------------------------

// The profiles Metis measures before it searches, and the estimates composed from them. "Measuring" asks
// models::ComputeCost (a measured hetsim profile where one covers the GPU, model, TP degree and sequence
// length, the analytic model otherwise) at the profiled TP degrees and micro-batch sizes (powers of two up
// to the knobs), one layer of each kind (repetitive blocks are profiled once; an MoE model's blocks once per
// block class, planners::BlockClasses: DeepSeek-V3's dense and MoE blocks, gpt-oss's sliding-window and full
// attention ones — every rank holding every expert, EP 1, which Metis cannot change). Times of other sizes are
// composed from the binary decomposition (7 = 4 + 2 + 1). TP communication is profiled per node class (an
// α–β ring all-reduce over the node's fabric, or nothing when the measured profile already includes it).
// Memory: activations of compositions of up to k consecutive layers are measured (models::TransformerModel's
// activation bytes, or a profile's activation_gib where larger: planners::MemoryModel) and per-layer
// memory estimated with §4.3's formula; weights, gradients and optimizer
// states come from the parameter counts (planners::MemoryModel).
class Profiler {
 public:
  Profiler(const PlanningProblem& problem, const Knobs& knobs);

  uint32_t num_types() const { return static_cast<uint32_t>(types_.size()); }
  uint32_t type_of_node(uint32_t node) const { return node_type_[node]; }
  uint32_t class_of_node(uint32_t node) const { return node_class_[node]; }
  const models::GpuSpec& gpu(uint32_t type) const { return *types_[type]; }
  const std::vector<uint32_t>& classes() const { return node_class_; }
  // The profiled TP degrees (powers of two up to the knob that the model allows); index = position.
  const std::vector<uint32_t>& tp_degrees() const { return tps_; }
  int TpIndex(uint32_t tp) const;
  // Whether TP of degree tps[tpi] was profiled on nodes of `cls` (the node has that many GPUs).
  bool TpProfiled(uint32_t cls, int tpi) const { return tp_link_ok_[cls * tps_.size() + tpi] != 0; }
  uint32_t max_batch() const { return max_batch_; }

  // The "measured" forward + backward seconds of one layer of `kind` at profiled size p (a power of two).
  double ProfiledLayerSeconds(uint32_t type, int tpi, models::LayerKind kind, uint32_t p) const;
  // Composed forward + backward seconds of one layer of `kind` for n ≤ max_batch() sequences.
  double LayerSeconds(uint32_t type, int tpi, models::LayerKind kind, uint32_t n) const {
    return time_[((size_t{type} * tps_.size() + tpi) * slot_layer_.size() + static_cast<int>(kind)) * (max_batch_ + 1) +
                 n];
  }
  // Compute seconds of layers [begin, end) for n sequences (sum of the layers, §4.3).
  double RangeSeconds(uint32_t type, int tpi, uint32_t n, uint32_t begin, uint32_t end) const;
  // TP communication seconds of layers [begin, end) for n sequences on a node of `cls` (0 at tp 1).
  double RangeTpSeconds(uint32_t cls, int tpi, uint32_t n, uint32_t begin, uint32_t end) const;
  // The profile's per-micro-batch overheads (Metis's released estimator: fb_sync on the last stage, batch
  // generation) of a replica of `type` at TP tps[tpi] processing n ≤ max_batch() sequences; 0 unprofiled.
  // RangeSeconds leaves them out; eq. 1 adds B times the largest of each (PlanCost).
  double FbSyncSeconds(uint32_t type, int tpi, uint32_t n) const {
    return fb_sync_[(size_t{type} * tps_.size() + tpi) * (max_batch_ + 1) + n];
  }
  double BatchGenerationSeconds(uint32_t type, int tpi, uint32_t n) const {
    return batch_gen_[(size_t{type} * tps_.size() + tpi) * (max_batch_ + 1) + n];
  }
  // Whole-model seconds (compute + TP) of one replica: the capacity of §4.2.2 3).
  double ModelSeconds(uint32_t type, uint32_t cls, int tpi, uint32_t n) const {
    return RangeSeconds(type, tpi, n, 0, layers_) + RangeTpSeconds(cls, tpi, n, 0, layers_);
  }

  // §4.3 memory. The measured activation GiB of one micro-batch of p sequences through layers i..j
  // (inclusive, j − i ≤ k) at TP tps[tpi].
  double MeasuredActivationGib(int tpi, uint32_t p, uint32_t i, uint32_t j) const;
  // The per-layer estimate Mem(L(m)) = Σ_{n=m−k}^{m−1} (Mem(L(n, m)) − Mem(L(n, m−1))) / k.
  double LayerActivationGib(int tpi, uint32_t p, uint32_t m) const;
  // Estimated activation GiB of layers [begin, end) for one micro-batch of n sequences:
  // Mem(L(i, j)) = Mem(L(i, j − 1)) + Mem(L(j)), n composed from profiled sizes.
  double ActivationGib(int tpi, uint32_t n, uint32_t begin, uint32_t end) const;
  // Weights, gradients and optimizer states of layers [begin, end) at TP tps[tpi], sharded over `dp`
  // replicas per the ZeRO stage (the arithmetic of planners::MemoryModel::StaticGib, O(1)).
  double StaticGib(int tpi, uint32_t begin, uint32_t end, uint32_t dp) const;
  // A device's memory: static + activations × micro-batches in flight + the recomputed layer + workspace.
  double DeviceGib(int tpi, uint32_t begin, uint32_t end, uint32_t dp, uint32_t n, double in_flight) const;
  // Parameters one rank of TP tps[tpi] holds of layers [begin, end).
  double RangeParams(int tpi, uint32_t begin, uint32_t end) const;

  uint32_t layers() const { return layers_; }
  const models::Topology& topology() const { return topology_; }
  const AnalyticCostModel& cost() const { return cost_; }
  const MemoryModel& memory() const { return memory_; }

 private:
  // The constructor's steps, in order: layer times, per-micro-batch overheads, TP communication per node
  // class, activation memory (k: the layers a memory profile composes).
  void ProfileTime();
  void ProfileOverheads();
  void ProfileTp();
  void ProfileMemory(uint32_t k);

  const PlanningProblem& problem_;
  Knobs knobs_;
  AnalyticCostModel cost_;
  MemoryModel memory_;
  models::Topology topology_;
  uint32_t layers_ = 0;
  uint32_t max_batch_ = 1;
  BlockClasses block_classes_;
  // The layer profiled for each slot: embedding, the first block class, head, then each further block class.
  std::vector<uint32_t> slot_layer_;
  std::vector<uint32_t> tps_;
  std::vector<uint32_t> profiled_sizes_;  // powers of two ≤ max_batch_
  std::vector<const models::GpuSpec*> types_;
  std::vector<uint32_t> node_type_, node_class_;
  std::vector<char> tp_link_ok_;   // [class][tpi]
  std::vector<double> time_;       // [type][tpi][slot][n], n = 0..max_batch
  std::vector<double> tp_time_;    // [class][tpi][kind][n]
  std::vector<double> profiled_;   // [type][tpi][slot][log2 p]
  std::vector<double> fb_sync_, batch_gen_;  // [type][tpi][n], n = 0..max_batch
  // Memory: per (tpi, log2 p): measured[i * (k + 1) + (j − i)], per-layer estimates and their prefix sums.
  struct MemoryProfile {
    std::vector<double> measured, per_layer, prefix;
  };
  std::vector<MemoryProfile> mem_;  // [tpi][log2 p]
  std::vector<double> peak_;        // [tpi][kinds present: emb | block << 1 | head << 2], GiB per sequence
  std::vector<double> class_peak_;  // [tpi][further block class], GiB per sequence
  // Parameters per rank: [tpi][0 embedding, 1 block (first class), 2 head next to the embedding, 3 head on
  // its own, 4.. each further block class].
  std::vector<double> params_;
};

// ---- §4.2.2 3) load balancing --------------------------------------------------------------------------

// Layer load balancing: the model's blocks over stages 0..S−1 in proportion to their capacities
// (throughput per sequence), with the embedding on stage 0 and the head on stage S−1; stage s's load is
// fixed_load[s] + blocks_s · block_load. Middle stages take at least one block (all blocks when S = 1);
// stage s takes at most max_blocks[s]. The continuous proportional allocation (water-filling under the
// bounds) is rounded by largest remainders. Returns the blocks per stage, or nullopt when the bounds
// leave no allocation.
std::optional<std::vector<uint32_t>> ProportionalBlocks(uint32_t blocks, const std::vector<double>& capacity,
                                                        const std::vector<double>& fixed_load, double block_load,
                                                        const std::vector<uint32_t>& max_blocks);

// Data load balancing: `total` sequences over replicas in proportion to their throughput, each at least
// one and at most caps[r] (planners::ProportionalSplit).
std::optional<std::vector<uint32_t>> DataSplit(uint32_t total, const std::vector<double>& throughput,
                                               const std::vector<uint32_t>& caps);

// ---- Algorithm 1 -----------------------------------------------------------------------------------------

struct SearchResult {
  std::optional<proto::Plan> plan;
  double cost_s = 0;            // eq. 1 of the best plan
  uint64_t assignments = 0;     // stage-device assignments visited
  uint64_t size_orders = 0;     // stage-size orders after pruning
  bool full_space = false;      // §4.1's full space (else consecutive placement)
  bool cut_by_time_limit = false;  // knobs.time_limit_s passed: `plan` is the best found so far
  // Runners-up (PlanningProblem::alternatives): at most that many plans, best first by eq. 1 (ties: the
  // canonical order of the search, then DFS order), each passing hetsim's memory check, distinct from the
  // pick and from each other; the exact next-best plans of everything the search costs (its cut then
  // compares against the (alternatives + 1)-th best plan instead of the best).
  std::vector<RankedPlan> alternatives;
};

// Runs Algorithm 1 (lines 4–22) over every stage count, micro-batch count and stage-device assignment the
// knobs allow, filling `stats`. With knobs.time_limit_s > 0 the search stops once that many seconds have
// passed and returns the best plan found so far (a note in `stats` says how much of the space it covered),
// or an Infeasible status naming the limit when it had found none.
Result<SearchResult> Search(const PlanningProblem& problem, const Knobs& knobs, SearchStats& stats);

// Lines 5–22 for one stage-device assignment and one micro-batch count B: the initial DP-only intra-stage
// plans, data and layer load balancing, the DFS and the cost of every complete plan; the best plan and its
// eq. 1 cost, or nullopt. For tests.
std::optional<std::pair<proto::Plan, double>> PlanAssignment(const PlanningProblem& problem, const Knobs& knobs,
                                                             const Assignment& assignment, uint32_t micro_batches);

// Eq. 1 of a one-pipeline plan under Metis's estimates (the profiled, composed times). For tests.
double PlanCost(const PlanningProblem& problem, const Knobs& knobs, const proto::Plan& plan);

}  // namespace hetsim::planners::metis
