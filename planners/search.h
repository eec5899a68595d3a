// Building blocks the planners share: candidate degrees, the per-device memory arithmetic of
// models::EstimateMemory in closed form (for inner loops), layer and batch splitting, and the bookkeeping
// of the best infeasible attempts for "nothing fits" messages.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planners/planner.h"

namespace hetsim::planners {

// ---- candidates ----------------------------------------------------------------------------------

// Divisors of n in increasing order.
std::vector<uint32_t> Divisors(uint32_t n);
// TP degrees that keep TP groups inside nodes when devices are taken in node order (they divide
// `node_gcd`, the gcd of the GPU counts of the nodes used) and that the model allows (divide the heads;
// agree with the kv heads). `requested` (non-empty) restricts the list; each excluded requested degree is
// counted in `stats` with its reason.
std::vector<uint32_t> TpCandidates(const PlanningProblem& problem, const std::vector<uint32_t>& requested,
                                   uint32_t node_gcd, SearchStats* stats);
// Whether the model accepts TP degree tp (heads and kv heads).
bool ModelAllowsTp(const models::TransformerModel& model, uint32_t tp);
// Micro-batch sizes for `batch` sequences per replica: `requested` or 1..max_size, keeping those that
// divide `batch`.
std::vector<uint32_t> MicroBatchCandidates(uint32_t batch, const std::vector<uint32_t>& requested, uint32_t max_size);

// ---- mixtures of experts ------------------------------------------------------------------------

// Fits a candidate plan to an MoE model; for a planner that does not search expert parallelism, at EP 1:
// every rank holds every expert of its stage's MoE layers, split over its TP ranks like every other matrix
// (expert TP = TP, Megatron-Core's default). Turns sequence parallelism on where a stage runs MoE layers under TP
// (Megatron-Core's MoE layer refuses TP without it), and returns false when the stages holding one MoE
// layer have unlike TP degrees: a plan gives each MoE layer one expert layout (docs/moe.md "Plans"), so such
// a candidate is outside what hetsim's plans express. A dense model: true, and nothing changes.
bool FitMoePlan(proto::Plan* plan, const models::TransformerModel& model);
// The rejection reason for a candidate FitMoePlan refused.
inline constexpr const char* kUnlikeMoeTp =
    "unlike TP degrees for one MoE layer (a plan gives each MoE layer one expert layout; EP 1 here)";

// ---- memory (the arithmetic of models::EstimateMemory, per device) ---------------------------------

// Bytes are GiB throughout. Valid for a stage [begin, end) at TP tp whose every layer has the same number
// of DP replicas `shard` (ZeRO's sharding factor) — true of symmetric plans.
//
// Measured activations: where the problem's profiles give a layer's activation_gib at the training's
// sequence length (no recomputation, no sequence sharding), a layer's activations per sequence are the
// larger of the profiled value (the largest over the cluster's GPU types: Metis §4.3 "the required memory
// of executing layers is the same regardless of GPU types") and models::EstimateMemory's arithmetic. Not
// the profiled value alone: a plan must pass models::ValidatePlan, which uses the arithmetic, so a
// profile can make the planners' checks stricter but not looser (docs/profiles.md).
class MemoryModel {
 public:
  explicit MemoryModel(const PlanningProblem& problem);

  // Weights, gradients, optimizer states (and ZeRO-3's gathered layer) of one device. Under CPU offload
  // (`offload`, with the plan's comm.dp_bucket_mib) what stays on the GPU, as models::EstimateMemory
  // counts it (models/plan.h).
  double StaticGib(uint32_t begin, uint32_t end, uint32_t tp, uint32_t zero_stage, double shard,
                   proto::Plan::Offload offload = proto::Plan::OFFLOAD_NONE, double dp_bucket_mib = 0) const;
  // The same with each layer's own replica count (replicas[layer]), layer by layer.
  double StaticGibByLayer(uint32_t begin, uint32_t end, uint32_t tp, uint32_t zero_stage,
                          const std::vector<uint32_t>& replicas,
                          proto::Plan::Offload offload = proto::Plan::OFFLOAD_NONE, double dp_bucket_mib = 0) const;
  // CPU offload: one device's shards in its node's host memory (models::DeviceMemory::host_gib), each
  // layer sharded over replicas[layer]; 0 without offload.
  double HostGib(uint32_t begin, uint32_t end, uint32_t tp, proto::Plan::Offload offload,
                 const std::vector<uint32_t>& replicas) const;
  // Activations one device keeps per sequence of a micro-batch, per micro-batch in flight. Context
  // parallelism and Ulysses (`shard`) leave each device seq_len / (cp · ulysses) tokens of every sequence.
  double ActivationGibPerSequence(uint32_t begin, uint32_t end, uint32_t tp, bool sequence_parallel,
                                  proto::Recompute recompute, models::SequenceSharding shard = {}) const;
  // Transient memory of the one layer running, per sequence: with full recomputation the layer
  // re-materialised; with context parallelism ring attention's K/V receive buffers
  // (models::ContextParallelBufferBytes). 0 when neither applies.
  double PeakLayerGibPerSequence(uint32_t begin, uint32_t end, uint32_t tp, bool sequence_parallel,
                                 proto::Recompute recompute, models::SequenceSharding shard = {}) const;
  // training.workspace_gib plus the most runtime memory (CUDA context, NCCL buffers) a plan can need, on
  // any node of the cluster ...
  double WorkspaceGib() const;
  // ... and on a device of `node` (less on PCIe-only nodes: fewer NCCL channels).
  double WorkspaceGib(const models::NodeInfo& node) const;
  // Micro-batches in flight at stage `stage` of `stages` with m micro-batches.
  static double InFlight(proto::Plan::Schedule schedule, uint32_t stage, uint32_t stages, uint32_t m,
                         uint32_t virtual_stages);
  // The runtime memory of a rank on device `device` with these communicators (models::ContextGib +
  // models::NcclGib).
  double RuntimeGib(const models::NcclCommunicators& comms, uint32_t device) const;
  // Total of one device holding b sequences per micro-batch (with the most runtime memory).
  double TotalGib(double static_gib, double act_per_seq, double peak_per_seq, double b, double in_flight) const {
    return static_gib + act_per_seq * b * in_flight + peak_per_seq * b + WorkspaceGib();
  }
  // The same for device `device` of a known plan with these communicators (what models::EstimateMemory
  // charges).
  double TotalGib(double static_gib, double act_per_seq, double peak_per_seq, double b, double in_flight,
                  const models::NcclCommunicators& comms, uint32_t device) const {
    return static_gib + act_per_seq * b * in_flight + peak_per_seq * b + training_.workspace_gib() +
           RuntimeGib(comms, device);
  }

 private:
  const models::TransformerModel& model_;
  const proto::Training& training_;
  const models::Cluster& cluster_;
  BlockClasses classes_;            // blocks priced by class (one class for a dense model)
  models::NcclCommunicators most_;  // the most communicators a plan on the cluster can need
  double widest_channels_ = 0;      // the largest models::NcclChannelFraction of the cluster's nodes
  // Profiled activation bytes per sequence, [kind * (kMaxProfiledTp + 1) + tp]; < 0 = none. Empty
  // without profiles.
  static constexpr uint32_t kMaxProfiledTp = 128;
  std::vector<double> profiled_bytes_;
  double ProfiledBytes(models::LayerKind kind, uint32_t tp) const;
  // An MoE layer's expert layout at EP 1 and TP tp, as models::EstimateMemory lays a stage out without
  // ep_degree (default ExpertSharding for a dense model, which ignores it).
  models::ExpertSharding EpOneExperts(uint32_t tp) const;
};

// Planners keep this margin below capacity so that rounding never makes ValidatePlan disagree.
inline constexpr double kMemorySafety = 1e-6;
inline bool FitsIn(double need_gib, double capacity_gib) {
  return need_gib <= capacity_gib * (1 - kMemorySafety);
}

// The best attempts that did not fit in memory, for the Infeasible message.
class InfeasibleTracker {
 public:
  // `what` describes the candidate ("dp=4 tp=2 pp=1 b=2"); `device` is the worst device.
  void Offer(const std::string& what, double need_gib, double capacity_gib, const std::string& device);
  bool empty() const { return best_.empty(); }
  // "PLANNER: no plan fits in memory on CLUSTER for MODEL (…): best attempts: …".
  Status ToStatus(const std::string& planner, const PlanningProblem& problem, const SearchStats& stats) const;

 private:
  struct Attempt {
    std::string what, device;
    double need_gib, capacity_gib;
  };
  std::vector<Attempt> best_;  // sorted by shortfall, at most 3
};

// The Status of a search that found nothing at all (no memory attempt either): lists the rejections.
Status NothingFound(const std::string& planner, const PlanningProblem& problem, const SearchStats& stats,
                    const std::string& hint);

// ---- layers --------------------------------------------------------------------------------------

// Layer ranges [begin, end) of `stages` stages over `layers` layers, as even as possible (the first
// stages take one more when it does not divide).
std::vector<std::pair<uint32_t, uint32_t>> EvenLayerSplit(uint32_t layers, uint32_t stages);

// Balanced contiguous split of the model's L blocks over S stages whose time is linear in their blocks:
// stage s takes fixed_s + n_s·per_block_s (fixed_s holds the embedding on the first stage and the head on
// the last) and at most max_blocks_s blocks (memory). Middle stages take at least one block, the first and
// last at least zero (one when S = 1 … they hold the embedding/head). Minimises the largest stage time,
// then the sum. Returns the layer ranges (embedding and head included), or nullopt when the caps leave no
// split. The least largest stage time T is found fast for finite, non-negative times (HexiScale's phase two
// balances many stage orders): the greedy allocation (each next block to the stage that stays fastest with
// it) gives the min-max time T_g, and T is the least feasible time among the few within a 1e-12 tolerance
// below it; other inputs sort every (stage, block count) time (BalanceBlocksBySorting).
std::optional<std::vector<std::pair<uint32_t, uint32_t>>> BalanceBlocks(uint32_t blocks,
                                                                        const std::vector<double>& fixed_s,
                                                                        const std::vector<double>& per_block_s,
                                                                        const std::vector<uint32_t>& max_blocks);
// The same split, T found by sorting every (stage, block count) time and a binary search over them: the
// reference the fast search is tested against.
std::optional<std::vector<std::pair<uint32_t, uint32_t>>> BalanceBlocksBySorting(
    uint32_t blocks, const std::vector<double>& fixed_s, const std::vector<double>& per_block_s,
    const std::vector<uint32_t>& max_blocks);

// The most blocks n in [lo, hi] for which `fits(n)` holds, where fits is monotone (true up to some n,
// false after: more blocks never need less memory); −1 when not even `lo` fits. A binary search: about
// log2(hi − lo) calls of `fits`.
template <typename Fits>
int64_t MostBlocksThatFit(uint32_t lo, uint32_t hi, Fits&& fits) {
  if (lo > hi || !fits(lo)) return -1;
  uint32_t a = lo, z = hi;
  while (a < z) {
    const uint32_t mid = a + (z - a + 1) / 2;
    if (fits(mid)) {
      a = mid;
    } else {
      z = mid - 1;
    }
  }
  return a;
}

// ---- batch ---------------------------------------------------------------------------------------

// Splits `total` sequences over replicas in proportion to `weights`, each at least 1 and at most its cap
// (largest remainders first). nullopt when the caps (or total < replicas) make it impossible.
std::optional<std::vector<uint32_t>> ProportionalSplit(uint32_t total, const std::vector<double>& weights,
                                                       const std::vector<uint32_t>& caps);

// Splits `total` over replicas (each at least 1, at most caps[r]) minimising max_r value(r, x_r) for
// non-decreasing value functions: gives each next sequence to the replica whose value after taking it is
// smallest, which is optimal for non-decreasing functions. nullopt when infeasible.
std::optional<std::vector<uint32_t>> MinMaxSplit(uint32_t total, uint32_t replicas,
                                                 const std::function<double(uint32_t, uint32_t)>& value,
                                                 const std::vector<uint32_t>& caps);

}  // namespace hetsim::planners
