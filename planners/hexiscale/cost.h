// HexiScale's cost model (Appendix A, equations 3-11): what the planner's search ranks plans with.
//
// The paper writes it for GPT-style blocks with full recomputation; this is the same model with hetsim's
// layer costs plugged in (docs/planners-hexiscale.md derives each term):
//   eq. 3  TP communication of one block and micro-batch of b sequences on TP group d (|d| = t):
//            2·a · max_{x∈d} Σ_{y∈d−x} (α_xy + b·s·h·B/(t·β_xy))
//          with a the all-reduces per block (2 forward + 2 backward, + 2 recomputed under full
//          recomputation: 2·a = 12, the paper's factor); embedding and head have one per pass.
//   eq. 4  DP synchronisation of S gradient bytes among the holders D of one gradient chunk:
//            2 · max_{x∈D} Σ_{y∈D−x} (α_xy + S/(|D|·β_xy))
//          (the paper's S = 12H²·B for a whole block; here the chunk's real bytes, HexiScale §3.2 chunking).
//   eq. 5  PP hop between consecutive stages, both directions: 2 · min over leader pairs (x, x') of
//            [α + b·s·h·B/β_xx' + Σ_{y∈next−x'} (α_x'y + b·s·h·B/(|next|·β_x'y))]
//          (the leader receives, then broadcasts in its TP group, §3.2); without leader broadcast every
//          receiving rank gets the activations from the sender ranks: 2·max (α + b·s·h·B/β).
//   eq. 6  compute of a block: the paper's 96·b·s·H²(1 + s/6H)/(c_d·t) is the FLOP count of a GPT block
//          with full recomputation over peak; here models::ComputeCost (the simulator's own: the real
//          architecture's FLOPs over peak × efficiency, or a measured profile).
//   eq. 8  stage time per micro-batch: its blocks × (eq. 6 + eq. 3), plus embedding/head.
//   eq. 9  pipeline time: Σ_j (stage_j + hop_j) + (m − 1) · max_j (stage_j + hop_j), where the paper's
//          hop_j is eq. 5 between stages j and j+1; here each stage pays for the transfers it sends (half
//          of eq. 5 for the forward hop to j+1, half for the backward hop to j−1), as 1F1B runs them.
//   eq. 7  DP cost: the largest per-device sum of eq. 4 over the chunks the device holds.
//   eq. 10 iteration: max over pipelines of eq. 9, plus eq. 7.
//   eq. 11 memory (full recomputation, no sharding) per block: 48H²·B/t + b·s·H·B.
// Links (β, α): the topology's (models/topology.h), with one reading of β for machines whose GPUs share
// a NIC (the paper's settings have one Ethernet link per machine; its formulas see no sharing):
//   - eq. 4 uses a GPU's share of its machine's NIC: every GPU of a machine synchronises gradients at the
//     same time, so they split it;
//   - eq. 5 uses the pairwise link the paper measures (β_{d,d'}: the whole NIC, capped by the GPU's PCIe
//     link) divided by the pipelines whose hops cross that NIC: pipelines laid out alike send their
//     activations at the same moments (`sharing`; nullptr = one pipeline);
//   - eq. 9's max term is at least the time the busiest NIC a pipeline crosses needs for the bytes all
//     pipelines send through it per micro-batch (one direction), the steady-state link bound.
// docs/planners-hexiscale.md shows on the simulator why the plain pairwise reading misleads the search.
#pragma once

#include <limits>

#include <span>
#include <vector>

#include "models/topology.h"
#include "planners/planner.h"

namespace hetsim::planners::hexiscale {

// A cost or time no candidate reaches.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

class AppendixACost {
 public:
  explicit AppendixACost(const PlanningProblem& problem);

  // ---- layer-wise (Appendix A, "Modeling cost layer-wisely") ----

  // Eq. 3: TP communication of one transformer block for one micro-batch of b sequences.
  double TpBlockSeconds(std::span<const uint32_t> group, double b) const;
  // The same for the embedding or the head (one all-reduce per pass).
  double TpEdgeSeconds(std::span<const uint32_t> group, double b) const;
  // Eq. 4: synchronising `bytes` of gradients among `holders` (all-reduce).
  double DpSeconds(std::span<const uint32_t> holders, double bytes) const;
  // Eq. 5: the hop from stage `from` to stage `to` (TP groups) and back, for b sequences. `sharing`
  // (per node; nullptr = none) divides a NIC among the pipelines whose hops cross it at the same time.
  double PpHopSeconds(std::span<const uint32_t> from, std::span<const uint32_t> to, double b,
                      bool leader_broadcast, const std::vector<uint32_t>* sharing = nullptr) const;
  // Seconds `bytes` occupy the NIC of `node` in one direction (the whole NIC, capped by PCIe; 0 for a
  // node without one): the steady-state floor of eq. 9 below.
  double NicSeconds(uint32_t node, double bytes) const;
  // Eq. 6 (generalised): forward + backward (recomputation included) of `layer` on `gpu` at TP t.
  double ComputeSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double b) const;
  // Eq. 6 + eq. 3 for one layer on TP group `group` of `gpu`s: compute and the layer's TP all-reduces
  // (TpBlockSeconds or TpEdgeSeconds), the latter left out when a measured profile already times them.
  double LayerSeconds(std::span<const uint32_t> group, const models::GpuSpec& gpu, uint32_t layer, double b) const;

  // ---- per strategy ----

  // Eq. 8: a stage holding layers [begin, end) on TP group `group`, per micro-batch (no hop); each block
  // by its class (an MoE model's dense and MoE blocks; EP 1, every rank holding every expert).
  double StageSeconds(std::span<const uint32_t> group, uint32_t begin, uint32_t end, double b) const;
  // Eq. 9 from per-stage (stage + hop) times: Σ_j t_j + (m − 1)·max(max_j t_j, nic_floor_s).
  static double PipelineSeconds(std::span<const double> stage_plus_hop_s, uint32_t micro_batches,
                                double nic_floor_s = 0);

  struct Breakdown {
    double iteration_s = 0;             // eq. 10
    double pipeline_s = 0;              // max over pipelines of eq. 9
    double dp_s = 0;                    // eq. 7
    std::vector<double> pipelines_s;    // eq. 9 per pipeline
  };
  // Eqs. 7-10 of a structurally valid plan without intra-stage DP (HexiScale's stages are TP groups).
  Breakdown Evaluate(const proto::Plan& plan) const;

  // Eq. 11: bytes one device of a TP-t stage holding `blocks` blocks needs under the paper's assumptions.
  double PaperMemoryBytes(uint32_t blocks, uint32_t tp, double b) const;

  // β and α of the terms above (exposed for the graph and the tests).
  models::Link DpLink(uint32_t a, uint32_t b) const { return topology_.Between(a, b); }
  // The leaders' link: across machines the whole NIC (capped by PCIe), over the flows sharing each end.
  models::Link PpLink(uint32_t a, uint32_t b, uint32_t flows_a = 1, uint32_t flows_b = 1) const;

  const models::Topology& topology() const { return topology_; }
  const models::ComputeCost& compute() const { return compute_; }

 private:
  // 2·max_x Σ_y (α + bytes/(n·β)) over `devices` with the DP links.
  double PairSum(std::span<const uint32_t> devices, double bytes_over_n) const;

  // The problem's parts (a PlanningProblem is a bundle of references and may be a temporary).
  const models::Cluster& cluster_;
  const models::TransformerModel& model_;
  const proto::Training& training_;
  models::ComputeCost compute_;
  models::Topology topology_;
  proto::Recompute recompute_;
  BlockClasses blocks_;  // eq. 8 prices each block by its class (one class for a dense model)
  // The DP link between two machines (with itself: between its first two GPUs), node × node, for clusters of
  // at most kLinkTableNodes machines (PairSum's inner loop; larger clusters ask the topology each time).
  static constexpr size_t kLinkTableNodes = 1024;
  std::vector<models::Link> node_links_;
  const models::Link& NodeLink(uint32_t a, uint32_t b) const;
  // The share of line rate NCCL's collectives reach between machines a and b (the calibration's network
  // bus efficiency for their NIC kinds, as models/nccl.h prices them; 1 off the kernel compute model).
  double CollectiveNetEfficiency(uint32_t a, uint32_t b) const;
  mutable models::Link node_link_scratch_;         // NodeLink's answer without a table
  mutable std::vector<uint32_t> pair_sum_slot_;    // PairSum's node -> position (all 0 between calls)
  // (AppendixACost is used by one thread: the planner's search is single-threaded.)
};

}  // namespace hetsim::planners::hexiscale
