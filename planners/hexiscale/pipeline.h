// Phase two of HexiScale's scheduling (§4.3): one GPU group (a phase-one part) becomes one pipeline.
//   (i)   secondary partition: METIS cuts the group's graph into k parts of well-connected GPUs (min cut);
//   (ii)  intra-group strategy: inside each part, the GPUs of each machine form stages of one TP degree t
//         (t | GPUs there, t allowed by the model); t is chosen per machine by the Appendix A cost of the
//         machine's stages running its compute-proportional share of the blocks (the locally optimal
//         strategy), memory permitting;
//   (iii) stage order: the parts are ordered by a top-τ greedy search over the inter-part bandwidths
//         (every part as the start, then recursively the τ best-connected unvisited parts), the parts'
//         own stage order kept; each order's blocks are balanced over its stages under memory caps
//         (planners/search.h BalanceBlocks) and the order with the smallest eq. 9 time is kept.
// Memory of a stage is hetsim's (models::EstimateMemory in closed form, planners/search.h MemoryModel)
// with 1F1B's in-flight micro-batches min(m, S − j) for the largest m the pipeline could get; if no
// order fits, the machines move to their next larger TP degree and the search repeats.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "planners/hexiscale/cost.h"
#include "planners/search.h"

namespace hetsim::planners::hexiscale {

struct Phase2Params {
  uint32_t micro_batch = 1;        // b
  uint32_t micro_batches = 1;      // m the pipeline is ranked with (eq. 9)
  uint32_t in_flight_cap = 1;      // the most micro-batches it could get (memory)
  uint32_t shard = 1;              // DP replicas of every layer (= D_dp): ZeRO's sharding factor
  uint32_t zero_stage = 1;
  bool sequence_parallel = false;
  bool leader_broadcast = true;
  uint32_t tau = 2;
  uint32_t max_orders = 48;
  uint32_t max_parts = 12;         // k_i tried: 1..min(max_parts, max(2, machines), GPUs)
  double secondary_balance = 2.0;
  int seed = 0;
  uint32_t max_graph_vertices = 512;  // bundle machines' GPUs above this many (graph.h)
  std::vector<uint32_t> tp_degrees;  // allowed TP degrees (model-valid), ascending
};

struct StagePlan {
  std::vector<uint32_t> devices;  // one TP group
  uint32_t tp = 1;
  uint32_t layer_begin = 0, layer_end = 0;
  double time_s = 0;  // eq. 8 + the eq. 5 hop to the next stage, per micro-batch
};

struct PipelineTemplate {
  std::vector<StagePlan> stages;
  uint32_t parts = 1;  // k_i
  double sum_s = 0, max_s = 0;
  // Eq. 9 with m micro-batches.
  double Seconds(uint32_t m) const { return sum_s + (std::max<uint32_t>(1, m) - 1.0) * max_s; }
};

struct Phase2Counters {
  uint64_t templates = 0;      // (group, k) pipelines built
  uint64_t orders = 0;         // stage orders costed
  uint64_t cache_hits = 0;     // groups answered from the cache of isomorphic groups
  uint64_t no_fit = 0;         // (group, k) with no order fitting in memory
};

class PipelineBuilder {
 public:
  PipelineBuilder(const PlanningProblem& problem, const AppendixACost& cost, const MemoryModel& memory);

  // Phase two for `devices` with k parts; nullopt when no stage layout fits in memory. `signature` (optional:
  // BuildBest's, for `devices` in canonical order) names the group up to isomorphism: its secondary
  // partition is then shared with every isomorphic group (the same graph position by position).
  std::optional<PipelineTemplate> Build(const std::vector<uint32_t>& devices, uint32_t k, const Phase2Params& params,
                                        Phase2Counters* counters, const std::string& signature = "") const;
  // The best over k = 1..max_k (§4.4's variation of k_i) — cached for groups that are isomorphic
  // (the same number of GPUs on nodes of the same kind, switch and zone) under the same parameters.
  std::optional<PipelineTemplate> BuildBest(const std::vector<uint32_t>& devices, const Phase2Params& params,
                                            Phase2Counters* counters);

  // Node classes: nodes with equal class are interchangeable (same spec group, leaf switch/pod, zone).
  const std::vector<uint32_t>& node_class() const { return node_class_; }
  // β between two GPUs (the DP link, cost.h), a ≠ b: it depends on their machines only, so it is read from
  // a machine × machine table.
  double Bandwidth(uint32_t a, uint32_t b) const {
    const auto& cluster = problem_.cluster;
    return node_bandwidth_[size_t{cluster.device(a).node} * cluster.nodes().size() + cluster.device(b).node];
  }

 private:
  struct Chunk;
  struct Part;
  std::vector<uint32_t> Canonical(const std::vector<uint32_t>& devices, std::string* signature) const;

  const PlanningProblem& problem_;
  const AppendixACost& cost_;
  const MemoryModel& memory_;
  std::vector<uint32_t> node_class_;
  std::vector<double> node_bandwidth_;  // machine × machine (a machine with itself: its fabric)
  // Phase two's secondary partitions by (group, k): they depend on neither the micro-batch nor D_dp.
  // Keyed by the group's signature (isomorphic groups share it) or, without one, by its devices.
  mutable std::map<std::pair<std::vector<uint32_t>, uint32_t>, std::optional<std::vector<uint32_t>>> partitions_;
  mutable std::map<std::pair<std::string, uint32_t>, std::optional<std::vector<uint32_t>>> partitions_by_signature_;
  // Build's memory caps: the most blocks a stage holds, by (capacity, TP degree, position kind — first,
  // middle, last or only —, in-flight micro-batches, micro-batch size, ZeRO stage, sharding, sequence
  // parallelism); the model and the recomputation are the problem's.
  using CapKey = std::tuple<double, uint32_t, int, double, uint32_t, uint32_t, uint32_t, bool>;
  mutable std::map<CapKey, int64_t> cap_memo_;
  // Cache: (signature, parameters) -> template over canonical positions (devices = indices).
  std::map<std::string, std::optional<PipelineTemplate>> cache_;
};

}  // namespace hetsim::planners::hexiscale
