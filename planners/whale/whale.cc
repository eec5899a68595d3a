#include "planners/whale/whale.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "planners/proto/whale.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::whale {
namespace {

class WhalePlanner : public PlannerWithOptions<proto::WhaleOptions> {
 public:
  std::string name() const override { return "whale"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    const AnalyticCostModel ranking(problem);
    SubsetSearch machines(problem, ranking, nullptr, [](BestPlan& b) { b.ReportMemoryKnobs(); });
    const auto& cluster = problem.cluster;
    const uint32_t G = problem.training.global_batch_size();
    const uint32_t L = problem.model.num_layers();
    const proto::DType dtype = problem.training.dtype();
    const std::vector<uint32_t> zeros = o.zero_stages().empty()
                                            ? std::vector<uint32_t>{1}
                                            : std::vector<uint32_t>(o.zero_stages().begin(), o.zero_stages().end());
    const uint32_t bmax = o.max_micro_batch_size() > 0 ? o.max_micro_batch_size() : 32;
    const std::vector<uint32_t> requested_b(o.micro_batch_sizes().begin(), o.micro_batch_sizes().end());
    // EPL's gradient checkpointing (gradient_checkpoint.type: auto) keeps layer inputs: full recomputation.
    const std::vector<proto::Recompute> policies = RecomputeCandidates(
        problem, RecomputeList(o.recompute()), {proto::RECOMPUTE_NONE, proto::RECOMPUTE_FULL},
        &machines.whole().stats());
    machines.Run([&](const std::vector<uint32_t>& node_order, BestPlan& best, const AnalyticCostModel&) {
      SearchStats& stats = best.stats();
      const MemoryModel& memory = best.memory();
      const uint32_t N = static_cast<uint32_t>(node_order.size());
      ForEachSymmetricShape(problem, N, NodeGcd(cluster, node_order), {o.tp_degrees().begin(), o.tp_degrees().end()},
                            {o.pp_degrees().begin(), o.pp_degrees().end()}, &stats,
                            [&](uint32_t dp, uint32_t tp, uint32_t pp) {
          const uint32_t block = dp * tp;
          const LayerRanges layers = EvenLayerSplit(L, pp);
          // Device blocks in node order and the memory of their smallest device.
          std::vector<double> block_capacity(pp, std::numeric_limits<double>::infinity());
          for (uint32_t k = 0; k < pp; ++k) {
            for (uint32_t i = 0; i < block; ++i) {
              block_capacity[k] =
                  std::min(block_capacity[k], cluster.device(node_order[k * block + i]).gpu->memory_gib);
            }
          }
          const bool equal_capacities = std::all_of(block_capacity.begin(), block_capacity.end(),
                                                    [&](double c) { return c == block_capacity[0]; });
          for (uint32_t b : MicroBatchCandidates(G / dp, requested_b, bmax)) {
            const uint32_t B = dp * b, m = G / B;
            for (uint32_t zero : zeros) {
              // Looser memory caps let the batch split follow the GPUs' speed more closely, and blocks of
              // unequal memory may take the stages in another order, so more recomputation may still rank
              // faster when it changes the plan.
              ConsiderPolicies(best, policies, [&](proto::Recompute rc) {
                bool memory_shaped = !equal_capacities;
                // Inter-TaskGraph placement: stages by memory demand onto blocks by capacity (equal capacities
                // keep node order).
                std::vector<double> demand(pp);
                std::vector<double> static_gib(pp), act(pp), peak(pp), in_flight(pp);
                for (uint32_t s = 0; s < pp; ++s) {
                  const auto [begin, end] = layers[s];
                  static_gib[s] = memory.StaticGib(begin, end, tp, zero, dp);
                  act[s] =
                      memory.ActivationGibPerSequence(begin, end, tp, false, rc);  // Whale has no sequence parallelism
                  peak[s] = memory.PeakLayerGibPerSequence(begin, end, tp, false, rc);
                  in_flight[s] = MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, s, pp, m, 1);
                  demand[s] = memory.TotalGib(static_gib[s], act[s], peak[s], b, in_flight[s]);
                }
                std::vector<uint32_t> stages_by_demand(pp), blocks_by_capacity(pp);
                std::iota(stages_by_demand.begin(), stages_by_demand.end(), 0);
                std::iota(blocks_by_capacity.begin(), blocks_by_capacity.end(), 0);
                std::stable_sort(stages_by_demand.begin(), stages_by_demand.end(),
                                 [&](uint32_t x, uint32_t y) { return demand[x] > demand[y]; });
                std::stable_sort(blocks_by_capacity.begin(), blocks_by_capacity.end(),
                                 [&](uint32_t x, uint32_t y) { return block_capacity[x] > block_capacity[y]; });
                std::vector<uint32_t> block_of(pp);
                for (uint32_t i = 0; i < pp;) {
                  uint32_t j = i;
                  while (j + 1 < pp &&
                         block_capacity[blocks_by_capacity[j + 1]] == block_capacity[blocks_by_capacity[i]]) {
                    ++j;
                  }
                  std::vector<uint32_t> st(stages_by_demand.begin() + i, stages_by_demand.begin() + j + 1);
                  std::vector<uint32_t> bl(blocks_by_capacity.begin() + i, blocks_by_capacity.begin() + j + 1);
                  std::sort(st.begin(), st.end());
                  std::sort(bl.begin(), bl.end());
                  for (size_t k = 0; k < st.size(); ++k) block_of[st[k]] = bl[k];
                  i = j + 1;
                }
                std::vector<uint32_t> order;
                order.reserve(N);
                for (uint32_t s = 0; s < pp; ++s) {
                  for (uint32_t i = 0; i < block; ++i) order.push_back(node_order[block_of[s] * block + i]);
                }
                // Intra-TaskGraph load balance: the micro-batch split by GPU speed under memory caps.
                std::vector<std::vector<uint32_t>> splits(pp);
                for (uint32_t s = 0; s < pp && dp > 1; ++s) {
                  std::vector<double> weights(dp);
                  std::vector<uint32_t> caps(dp);
                  for (uint32_t r = 0; r < dp; ++r) {
                    double speed = std::numeric_limits<double>::infinity(), cap = speed;
                    for (uint32_t k = 0; k < tp; ++k) {
                      const auto& dev = cluster.device(order[s * block + r * tp + k]);
                      speed = std::min(speed, dev.gpu->PeakTflops(dtype));
                      // Capacity less the runtime memory beyond the cluster-wide most (RuntimeSlack below).
                      cap = std::min(cap, dev.gpu->memory_gib + memory.WorkspaceGib() -
                                              memory.WorkspaceGib(cluster.node(dev.node)));
                    }
                    weights[r] = speed;
                    const double per_seq = act[s] * in_flight[s] + peak[s];
                    const double room = cap * (1 - kMemorySafety) - static_gib[s] - memory.WorkspaceGib();
                    const double fit = std::clamp(std::floor(room / per_seq), 0.0, double(B));
                    caps[r] = per_seq <= 0 ? B : static_cast<uint32_t>(fit);
                  }
                  if (auto split = ProportionalSplit(B, weights, caps)) {
                    memory_shaped |= split != ProportionalSplit(B, weights, std::vector<uint32_t>(dp, B));
                    splits[s] = *split;
                  } else {
                    stats.Reject("no speed-proportional split fits in memory (tried the even split)");
                  }
                }
                proto::Plan plan = IntraStageLayout(order, std::vector<uint32_t>(pp, block),
                                                    std::vector<uint32_t>(pp, tp), layers, B, m, splits);
                plan.set_zero_stage(zero);
                SetRecompute(&plan, rc, problem.training);
                return std::make_optional(
                    PolicyCandidate{std::move(plan), CandidateName(dp, tp, pp, b, m, zero, rc), memory_shaped});
              });
            }
          }
      });
    });
    return machines.Finish(name(), "Whale needs every stage of the same dp × tp shape, TP inside a node");
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<WhalePlanner>();
}

}  // namespace hetsim::planners::whale
