#include "planners/alpa/alpa.h"

#include <cmath>
#include <set>

#include "planners/proto/alpa.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::alpa {
namespace {

std::vector<uint32_t> List(const google::protobuf::RepeatedField<uint32_t>& f) {
  return {f.begin(), f.end()};
}

// Which averaged view ranked the candidates: measured per-layer costs averaged over the devices (AMP,
// Li et al. 2022, when profiles cover every GPU type of the cluster) or the averaged GPU specification.
std::string AveragedNote(const AnalyticCostModel& ranking) {
  if (ranking.AveragesProfiles(1, 1)) {
    return "ranked on per-layer times averaged over the devices' measured profiles (heterogeneity averaged "
           "away, Metis §3; AMP averages measured costs); layers or TP degrees without a profile on every GPU "
           "type use the average GPU";
  }
  return "ranked as if every GPU were the cluster's average GPU (Metis §3)";
}

// On a subset of the machines (SubsetSearch), AMP and Alpa average over the GPUs they run on.
ViewFor AveragedView(const PlanningProblem& problem) {
  return [&problem](const std::vector<uint32_t>& devices) {
    RankingView view;
    view.assume_gpu = AverageGpu(problem.cluster, devices);
    view.average_profiles = true;
    return view;
  };
}

class AmpPlanner : public PlannerWithOptions<proto::AveragedOptions> {
 public:
  std::string name() const override { return "amp"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    SymmetricSearch space;
    space.tp_degrees = List(o.tp_degrees());
    space.pp_degrees = List(o.pp_degrees());
    space.micro_batch_sizes = List(o.micro_batch_sizes());
    space.zero_stages = List(o.zero_stages());
    if (o.max_micro_batch_size() > 0) space.max_micro_batch_size = o.max_micro_batch_size();
    space.recompute = RecomputeCandidates(problem, RecomputeList(o.recompute()),
                                          {proto::RECOMPUTE_NONE, proto::RECOMPUTE_FULL}, nullptr);
    const models::GpuSpec average = AverageGpu(problem.cluster);
    const AnalyticCostModel ranking(problem, {&average, /*average_profiles=*/true});
    return SearchBalancedSymmetric(name(), problem, ranking, space, AveragedView(problem), AveragedNote);
  }
};

class AlpaPlanner : public PlannerWithOptions<proto::AveragedOptions> {
 public:
  std::string name() const override { return "alpa"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    const models::GpuSpec average = AverageGpu(problem.cluster);
    const AnalyticCostModel ranking(problem, {&average, /*average_profiles=*/true});
    SubsetSearch machines(problem, ranking, AveragedView(problem), [](BestPlan& b) { b.ReportMemoryKnobs(); });
    const auto& cluster = problem.cluster;
    const uint32_t G = problem.training.global_batch_size();
    const uint32_t L = problem.model.num_layers();
    // Alpa rematerialises whole layers (remat_layer=True in its layer option): full recomputation.
    const std::vector<proto::Recompute> policies = RecomputeCandidates(
        problem, RecomputeList(o.recompute()), {proto::RECOMPUTE_NONE, proto::RECOMPUTE_FULL},
        &machines.whole().stats());
    const std::vector<uint32_t> zeros = o.zero_stages().empty() ? std::vector<uint32_t>{1} : List(o.zero_stages());
    const uint32_t bmax = o.max_micro_batch_size() > 0 ? o.max_micro_batch_size() : 32;
    machines.Run([&](const std::vector<uint32_t>& order, BestPlan& best, const AnalyticCostModel& rank) {
      SearchStats& stats = best.stats();
      const MemoryModel& memory = best.memory();
      const uint32_t N = static_cast<uint32_t>(order.size());
      const std::vector<uint32_t> all_tps =
          TpCandidates(problem, List(o.tp_degrees()), NodeGcd(cluster, order), &stats);
      const std::vector<uint32_t> stage_counts = o.pp_degrees().empty() ? Divisors(N) : List(o.pp_degrees());
      for (uint32_t S : stage_counts) {
        if (N % S != 0) {
          stats.Reject("stage count does not divide the GPUs (Alpa slices the devices into equal submeshes)");
          continue;
        }
        if (S > L) {
          stats.Reject("more pipeline stages than layers");
          continue;
        }
        const uint32_t k = N / S;
        const LayerRanges even = EvenLayerSplit(L, S);
        // Micro-batch sizes: every divisor of the global batch with at most bmax sequences per replica.
        std::vector<uint32_t> sizes;
        if (!o.micro_batch_sizes().empty()) {
          sizes = MicroBatchCandidates(G, List(o.micro_batch_sizes()), G);
        } else {
          sizes = MicroBatchCandidates(G, {}, bmax * k);
        }
        for (uint32_t B : sizes) {
          const uint32_t m = G / B;
          for (uint32_t zero : zeros) {
            // Looser memory caps widen each stage's choice of DP × TP and the layer balance, so more
            // recomputation may still rank faster when it changes the plan.
            ConsiderPolicies(best, policies, [&](proto::Recompute rc) -> std::optional<PolicyCandidate> {
              bool memory_shaped = false;
              // Intra-operator pass: each stage's DP × TP, the fastest that fits (else the closest miss).
              std::vector<uint32_t> tps(S, 0);
              bool ok = true;
              for (uint32_t s = 0; s < S && ok; ++s) {
                double best_time = std::numeric_limits<double>::infinity(), best_gap = best_time;
                double fastest_time = best_time;  // of every DP × TP, fitting or not
                uint32_t chosen = 0, closest = 0, fastest = 0;
                const auto [begin, end] = even[s];
                for (uint32_t tp : all_tps) {
                  if (k % tp != 0) continue;
                  const uint32_t dp = k / tp;
                  if (B % dp != 0) continue;
                  const double b = double(B) / dp;
                  const double in_flight = MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, s, S, m, 1);
                  const double need =
                      memory.TotalGib(memory.StaticGib(begin, end, tp, zero, dp),
                                      memory.ActivationGibPerSequence(begin, end, tp, tp > 1, rc),
                                      memory.PeakLayerGibPerSequence(begin, end, tp, tp > 1, rc), b, in_flight);
                  double cap = std::numeric_limits<double>::infinity();
                  double time = 0;
                  // A TP group lies inside one node; groups at the same place in nodes of the same node
                  // group have the same GPUs and links, so each such place is timed once.
                  std::set<std::pair<uint32_t, uint32_t>> timed;
                  for (uint32_t r = 0; r < dp; ++r) {
                    const std::span<const uint32_t> g(order.data() + size_t{s} * k + size_t{r} * tp, tp);
                    for (uint32_t d : g) cap = std::min(cap, cluster.device(d).gpu->memory_gib);
                    const auto& first = cluster.device(g[0]);
                    if (!timed.insert({cluster.node(first.node).group, first.local}).second) continue;
                    time = std::max(time, rank.Replica(g, begin, end, b, {}, {}, rc).total_s());
                  }
                  if (time < fastest_time) {
                    fastest_time = time;
                    fastest = tp;
                  }
                  if (FitsIn(need, cap)) {
                    if (time < best_time) {
                      best_time = time;
                      chosen = tp;
                    }
                  } else if (need - cap < best_gap) {
                    best_gap = need - cap;
                    closest = tp;
                  }
                }
                tps[s] = chosen != 0 ? chosen : closest;
                memory_shaped |= tps[s] != fastest;
                ok = tps[s] != 0;
              }
              if (!ok) {
                stats.Reject("micro-batch not divisible by any DP degree of a stage's submesh");
                return std::nullopt;
              }
              proto::Plan plan = IntraStageLayout(order, std::vector<uint32_t>(S, k), tps, even, B, m, {});
              plan.set_zero_stage(zero);
              SetRecompute(&plan, rc, problem.training);
              bool any_tp = false;
              for (uint32_t tp : tps) any_tp |= tp > 1;
              if (any_tp) plan.set_sequence_parallel(true);
              // Inter-operator pass: layers balanced on the averaged costs.
              bool capped = false;
              if (auto layers = BalancedSplit(plan, problem, rank, memory, &capped)) {
                memory_shaped |= capped;
                ApplyLayers(&plan, *layers);
              } else {
                stats.Reject("no layer split fits in memory (tried the even split)");
              }
              std::string what = "stages=" + std::to_string(S) + " tp=[";
              for (uint32_t s = 0; s < S; ++s) what += (s ? "," : "") + std::to_string(tps[s]);
              what += "] B=" + std::to_string(B) + " m=" + std::to_string(m) + " zero=" + std::to_string(zero) +
                      " recompute=" + RecomputeName(rc);
              return PolicyCandidate{std::move(plan), what, memory_shaped};
            });
          }
        }
      }
    });
    auto r = machines.Finish(name(), "Alpa slices the devices into equal submeshes, one per stage");
    if (r.ok()) r->stats.notes.push_back(AveragedNote(machines.chosen_ranking()));
    return r;
  }
};

}  // namespace

std::unique_ptr<Planner> NewAlpaPlanner() {
  return std::make_unique<AlpaPlanner>();
}
std::unique_ptr<Planner> NewAmpPlanner() {
  return std::make_unique<AmpPlanner>();
}

}  // namespace hetsim::planners::alpa
