// The expert layout of a plan's MoE layers (models/plan.h, docs/moe.md): Megatron-Core's parallel folding of a
// stage's ranks into expert TP × EP × expert DP, the routing statistics the lowering and memory charge, and the
// parameters an expert or dense gradient group carries.
#include <algorithm>
#include <cmath>

#include "models/plan.h"
#include "models/stragglers.h"

namespace hetsim::models {

uint32_t EpDegree(const proto::Stage& stage) { return std::max(1u, stage.ep_degree()); }

uint32_t ExpertTpDegree(const proto::Stage& stage) {
  return stage.expert_tp_degree() > 0 ? stage.expert_tp_degree() : TpDegree(stage);
}

uint32_t ExpertDpDegree(const proto::Stage& stage) {
  return static_cast<uint32_t>(stage.devices_size()) / (EpDegree(stage) * ExpertTpDegree(stage));
}

std::vector<uint32_t> EpGroupOf(const proto::Stage& stage, uint32_t index) {
  const uint32_t etp = ExpertTpDegree(stage), ep = EpDegree(stage);
  const uint32_t k = index % etp, base = index - index % (etp * ep);
  std::vector<uint32_t> out;
  for (uint32_t e = 0; e < ep; ++e) out.push_back(stage.devices(static_cast<int>(base + e * etp + k)));
  return out;
}

std::vector<uint32_t> ExpertTpGroupOf(const proto::Stage& stage, uint32_t index) {
  const uint32_t etp = ExpertTpDegree(stage), base = index - index % etp;
  std::vector<uint32_t> out;
  for (uint32_t k = 0; k < etp; ++k) out.push_back(stage.devices(static_cast<int>(base + k)));
  return out;
}

double UniformRoutingImbalance(double tokens, uint32_t top_k, uint32_t ep) {
  const double mean = tokens * top_k;
  if (ep < 2 || mean <= 0) return 1.0;
  const double sd = std::sqrt(mean * (1.0 - 1.0 / ep));
  return 1.0 + ExpectedMaxOfStandardNormals(ep) * sd / mean;
}

double NodeHitProbability(uint32_t experts, uint32_t top_k, uint32_t nodes) {
  if (nodes < 2) return 1.0;
  const double e = experts, others = e - e / nodes;
  if (others < top_k) return 1.0;
  // C(others, k) / C(e, k) = Π_{i<k} (others − i) / (e − i).
  double miss = 1.0;
  for (uint32_t i = 0; i < top_k; ++i) miss *= (others - i) / (e - i);
  return 1.0 - miss;
}

ExpertSharding StageExperts(const proto::Stage& stage, const TransformerModel& model, const proto::Training& training,
                            const proto::CommOptions& comm, double tokens) {
  ExpertSharding x;
  x.ep = EpDegree(stage);
  x.etp = ExpertTpDegree(stage);
  if (!model.HasMoe()) return x;
  x.alltoall = comm.ep_dispatcher() != proto::CommOptions::EP_DISPATCHER_NODE_DEDUP;
  x.dropless = training.moe_capacity_factor() <= 0;
  x.imbalance = training.moe_load_imbalance() > 0 ? training.moe_load_imbalance()
                                                  : UniformRoutingImbalance(tokens, model.spec().moe().top_k(), x.ep);
  // Megatron-Core's drop-and-pad: every expert computes exactly its capacity, so every rank the same.
  if (training.moe_capacity_factor() > 0) x.imbalance = training.moe_capacity_factor();
  return x;
}

double GroupParamsPerRank(const TransformerModel& model, const GradSyncGroup& g, uint32_t layer) {
  switch (g.part) {
    case GradSyncGroup::Part::kExperts: return model.ExpertParams(layer) / g.expert_shards;
    case GradSyncGroup::Part::kDense:
      return model.ParamsPerRank(layer, g.num_chunks, g.layer_begin != 0) - model.ExpertParams(layer) / g.num_chunks;
    case GradSyncGroup::Part::kAll: break;
  }
  return model.ParamsPerRank(layer, g.num_chunks, g.layer_begin != 0);
}

}  // namespace hetsim::models
