#include "planners/megatron/megatron.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "planners/proto/megatron.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::megatron {
namespace {

// The expert layouts to try for a stage of tp × dp ranks, as (ep, expert TP) pairs; {(0, 0)}: a dense model,
// laid out as before. ZeRO-3 is not lowered for MoE layers.
std::vector<std::pair<uint32_t, uint32_t>> ExpertLayouts(const models::TransformerModel& model,
                                                         const proto::MegatronOptions& o, uint32_t tp, uint32_t dp,
                                                         uint32_t zero, SearchStats* stats) {
  if (!model.HasMoe()) return {{0, 0}};
  if (zero >= 3) {
    stats->Reject("ZeRO-3 with MoE layers (not lowered; Megatron-Core's distributed optimizer is ZeRO-1)");
    return {};
  }
  const uint32_t experts = model.spec().moe().num_experts(), ranks = tp * dp;
  const uint32_t width = model.spec().moe().expert_ffn_hidden_size();
  std::vector<uint32_t> etps(o.expert_tp_degrees().begin(), o.expert_tp_degrees().end());
  if (etps.empty()) etps = tp > 1 ? std::vector<uint32_t>{1, tp} : std::vector<uint32_t>{1};
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (uint32_t etp : etps) {
    if (ranks % etp != 0 || width % etp != 0) continue;
    for (uint32_t ep = 1; ep <= ranks / etp; ++ep) {
      const bool listed = o.ep_degrees().empty() ||
                          std::find(o.ep_degrees().begin(), o.ep_degrees().end(), ep) != o.ep_degrees().end();
      if (listed && experts % ep == 0 && (ranks / etp) % ep == 0) out.emplace_back(ep, etp);
    }
  }
  if (out.empty()) stats->Reject("no expert-parallel degree divides both the experts and a stage's TP × DP ranks");
  return out;
}

class MegatronPlanner : public PlannerWithOptions<proto::MegatronOptions> {
 public:
  std::string name() const override { return "megatron"; }
  bool SearchesExpertParallelism() const override { return true; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    CostModelOptions view;
    if (!o.hetero_aware()) view.assume_gpu = problem.cluster.device(0).gpu;
    const AnalyticCostModel ranking(problem, view);
    // On a subset of the machines (when no layout of the whole cluster fits), every GPU is ranked as the
    // slowest GPU type of the subset: Megatron-LM gives every stage the same layers and every replica the
    // same batch, so a run on a set of machines goes at the pace of its slowest GPU, which is how a user
    // choosing the machines would size it (on a subset of one GPU type, that type: Megatron's own view).
    ViewFor subset_view;
    if (!o.hetero_aware()) {
      subset_view = [&problem](const std::vector<uint32_t>& devices) {
        const proto::DType dtype = problem.training.dtype();
        const models::GpuSpec* slowest = problem.cluster.device(devices[0]).gpu;
        for (uint32_t d : devices) {
          const models::GpuSpec* g = problem.cluster.device(d).gpu;
          if (g->PeakTflops(dtype) < slowest->PeakTflops(dtype)) slowest = g;
        }
        RankingView v;
        v.assume_gpu = *slowest;
        return v;
      };
    }
    SubsetSearch machines(problem, ranking, subset_view, [](BestPlan& b) { b.ReportMemoryKnobs(); });

    const uint32_t G = problem.training.global_batch_size();
    const std::vector<uint32_t> zeros = o.zero_stages().empty()
                                            ? std::vector<uint32_t>{1}
                                            : std::vector<uint32_t>(o.zero_stages().begin(), o.zero_stages().end());
    const bool sp = o.has_sequence_parallel() ? o.sequence_parallel() : true;
    const uint32_t v = std::max<uint32_t>(1, o.virtual_stages());
    const uint32_t bmax = o.max_micro_batch_size() > 0 ? o.max_micro_batch_size() : 32;
    const std::vector<uint32_t> requested_b(o.micro_batch_sizes().begin(), o.micro_batch_sizes().end());
    // Megatron-LM's --recompute-granularity: none, selective, full.
    const std::vector<proto::Recompute> policies = RecomputeCandidates(
        problem, RecomputeList(o.recompute()),
        {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL}, &machines.whole().stats());

    machines.Run([&](const std::vector<uint32_t>& order, BestPlan& best, const AnalyticCostModel&) {
      SearchStats& stats = best.stats();
      const uint32_t N = static_cast<uint32_t>(order.size());
      ForEachSymmetricShape(problem, N, NodeGcd(problem.cluster, order), {o.tp_degrees().begin(), o.tp_degrees().end()},
                            {o.pp_degrees().begin(), o.pp_degrees().end()}, &stats,
                            [&](uint32_t dp, uint32_t tp, uint32_t pp) {
          // Megatron-LM's uniform layer splits.
          std::vector<LayerRanges> splits;
          const bool blocks = o.layer_split() != proto::MegatronOptions::LAYER_SPLIT_WITH_EMBEDDING_AND_LOSS;
          const bool layers = o.layer_split() != proto::MegatronOptions::LAYER_SPLIT_BLOCKS;
          if (blocks) {
            if (auto s = UniformBlocksSplit(problem.model, pp)) splits.push_back(*s);
          }
          if (layers) {
            if (auto s = UniformLayersSplit(problem.model, pp); s && (splits.empty() || *s != splits[0])) {
              splits.push_back(*s);
            }
          }
          if (splits.empty()) {
            stats.Reject("layers not divisible by the PP degree (Megatron-LM splits layers uniformly)");
            return;
          }
          for (uint32_t b : MicroBatchCandidates(G / dp, requested_b, bmax)) {
            const uint32_t m = G / (dp * b);
            if (v > 1 && m % pp != 0) {
              stats.Reject("interleaved 1F1B needs the micro-batch count to be a multiple of the stage count");
              continue;
            }
            for (const auto& split : splits) {
              bool too_few = false;
              for (const auto& [begin, end] : split) too_few |= v > 1 && end - begin < v;
              if (too_few) {
                stats.Reject("fewer layers per stage than virtual stages");
                continue;
              }
              for (uint32_t zero : zeros) {
               for (const auto& [ep, etp] : ExpertLayouts(problem.model, o, tp, dp, zero, &stats)) {
                // The cheapest recomputation that fits: with the layout fixed, more recomputation only
                // adds time, so the heavier policies cannot rank faster once one fits.
                for (proto::Recompute rc : policies) {
                  proto::Plan plan = ep == 0 ? MegatronLayout(order, dp, tp, pp, split, b, m)
                                             : MoeLayout(order, dp, tp, pp, split, b, m, ep, etp);
                  plan.set_zero_stage(zero);
                  SetRecompute(&plan, rc, problem.training);
                  // (Megatron-Core's MoE layer needs sequence parallelism under TP.)
                  if ((sp || ep > 0) && tp > 1) plan.set_sequence_parallel(true);
                  // Megatron-LM's --scatter-gather-tensors-in-pipeline (on by default): without sequence
                  // parallelism each TP rank sends 1/t of the activations and the receivers all-gather.
                  if (tp > 1) plan.mutable_comm()->set_pp_scatter_gather(true);
                  if (v > 1) {
                    plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
                    plan.set_virtual_stages(v);
                  }
                  std::string what = CandidateName(dp, tp, pp, b, m, zero, rc);
                  if (ep > 0) what += " ep=" + std::to_string(ep) + " etp=" + std::to_string(etp);
                  if (std::isfinite(best.Consider(std::move(plan), what))) break;
                }
               }
              }
            }
          }
      });
    });
    auto r = machines.Finish(
        name(),
        "Megatron-LM needs dp × tp × pp = the GPUs of whole nodes, TP inside a node and layers that divide evenly");
    if (r.ok() && !o.hetero_aware()) {
      std::string note =
          machines.chose_subset()
              ? "ranked as if every GPU were the slowest GPU type of the machines it runs on (" +
                    machines.chosen_ranking().ComputeGpu(r->plan.pipelines(0).stages(0).devices(0)).name +
                    "), as Megatron-LM ignores heterogeneity; option hetero_aware: true ranks on the real GPUs"
              : "ranked as if every GPU were the cluster's first GPU type (" + problem.cluster.device(0).gpu->name +
                    "), as Megatron-LM ignores heterogeneity; option hetero_aware: true ranks on the real GPUs";
      r->stats.notes.push_back(std::move(note));
    }
    return r;
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<MegatronPlanner>();
}

}  // namespace hetsim::planners::megatron
