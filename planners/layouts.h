// Plan layouts the baseline planners share, and the memory checks and layer splits that fill them in.
//
// Two layouts of a dp × tp × pp plan over an ordered device list:
//   - Megatron's (MegatronLayout): dp pipelines; rank r = order[r] has TP index r mod tp, DP index
//     (r / tp) mod dp, PP index r / (tp·dp) — TP fastest, then DP, then PP, as Megatron-LM orders ranks.
//   - one pipeline with intra-stage data parallelism (IntraStageLayout): stage s holds the dp TP groups
//     order[s·dp·tp, (s+1)·dp·tp); each micro-batch is split over them (Whale's replicated TaskGraphs,
//     Alpa's per-stage meshes).
// MoeLayout is the intra-stage layout with each stage's experts laid out (expert parallelism).
// The candidate loop that ranks such plans is BestPlan (planners/symmetric.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/transformer.h"
#include "planners/search.h"

namespace hetsim::planners {

using LayerRanges = std::vector<std::pair<uint32_t, uint32_t>>;

proto::Plan MegatronLayout(const std::vector<uint32_t>& order, uint32_t dp, uint32_t tp, uint32_t pp,
                           const LayerRanges& layers, uint32_t micro_batch_size, uint32_t micro_batches);
// `tps[s]` is stage s's TP degree and `sizes[s]` its device count; `splits[s]` its micro-batch split
// (empty = even).
proto::Plan IntraStageLayout(const std::vector<uint32_t>& order, const std::vector<uint32_t>& sizes,
                             const std::vector<uint32_t>& tps, const LayerRanges& layers, uint32_t micro_batch_size,
                             uint32_t micro_batches, const std::vector<std::vector<uint32_t>>& splits);
// Megatron's layout for an MoE model: the same devices in the same order as MegatronLayout, but one
// pipeline whose stages list their dp TP groups (intra-stage DP, `micro_batch_size` · dp sequences per
// micro-batch), so that each stage's MoE layers lay EP groups of `ep` with expert TP `etp` over its TP and
// DP ranks (Megatron-Core's parallel folding, docs/moe.md "Plans"; DeepSpeed-MoE's expert groups when tp = 1).
proto::Plan MoeLayout(const std::vector<uint32_t>& order, uint32_t dp, uint32_t tp, uint32_t pp, const LayerRanges& split,
                      uint32_t micro_batch_size, uint32_t micro_batches, uint32_t ep, uint32_t etp);

// Every device in node order.
std::vector<uint32_t> NodeOrder(const models::Cluster& cluster);
// The gcd of the GPU counts of the nodes `devices` touch (TP groups of a degree dividing it stay inside
// nodes when `devices` are whole nodes in node order).
uint32_t NodeGcd(const models::Cluster& cluster, const std::vector<uint32_t>& devices);

// Megatron-LM's uniform splits: the blocks evenly (models/transformer.h), or all L + 2 layers evenly
// ((L + 2) % pp == 0; nullopt when pp does not divide).
using models::UniformBlocksSplit;
std::optional<LayerRanges> UniformLayersSplit(const models::TransformerModel& model, uint32_t pp);

// The worst device of a plan for memory (largest need − capacity), and under CPU offload the worst node
// for host memory (checked where the cluster spec gives the node's host_memory_gib).
struct MemoryCheck {
  bool fits = true;  // every device, and every node's host memory
  double need_gib = 0;
  double capacity_gib = 0;
  uint32_t device = 0;
  bool host_fits = true;
  double host_need_gib = 0;
  double host_capacity_gib = 0;
  uint32_t host_node = 0;
};
// Memory of every device of a structurally valid plan, in closed form (equal to models::EstimateMemory
// up to rounding; tests/planners check that), and the host memory of every node under CPU offload
// (models::HostMemoryByNode).
MemoryCheck CheckMemory(const proto::Plan& plan, const PlanningProblem& problem, const MemoryModel& memory);
// The same from models::EstimateMemory itself, device by device (no host memory): MoE models, whose expert
// shards and routed activations the closed form does not know.
MemoryCheck ExactMemoryCheck(const proto::Plan& plan, const PlanningProblem& problem);

// Layer ranges balanced on stage speed (BalanceBlocks) for `skeleton`, a plan whose pipelines all have the
// same number of stages (their layer ranges are ignored; the result applies to every pipeline): stage s's
// time per block and fixed time (embedding, head, PP hops) are the worst over its replicas in every
// pipeline under `ranking`; its block cap comes from memory on the real devices. nullopt when no split
// fits in memory. `capped` (optional) is set to whether memory changed the split (the balance without the
// memory caps differs).
std::optional<LayerRanges> BalancedSplit(const proto::Plan& skeleton, const PlanningProblem& problem,
                                         const AnalyticCostModel& ranking, const MemoryModel& memory,
                                         bool* capped = nullptr);
// Sets every pipeline's stage ranges to `layers`.
void ApplyLayers(proto::Plan* plan, const LayerRanges& layers);

}  // namespace hetsim::planners
