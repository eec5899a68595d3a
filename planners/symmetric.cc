#include "planners/symmetric.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hetsim::planners {

std::vector<uint32_t> NodeOrder(const models::Cluster& cluster) {
  std::vector<uint32_t> order(cluster.num_devices());
  for (uint32_t d = 0; d < cluster.num_devices(); ++d) order[d] = d;
  return order;
}

uint32_t NodeGcd(const models::Cluster& cluster, const std::vector<uint32_t>& devices) {
  uint32_t g = 0, last = std::numeric_limits<uint32_t>::max();
  for (uint32_t d : devices) {
    const uint32_t n = cluster.device(d).node;
    if (n == last) continue;
    last = n;
    g = std::gcd(g, cluster.node(n).num_gpus);
  }
  return std::max<uint32_t>(1, g);
}

void SearchWholeNodePrefixes(const PlanningProblem& problem, BestPlan& best,
                             const std::function<void(const std::vector<uint32_t>& order)>& search) {
  const std::vector<uint32_t> all = NodeOrder(problem.cluster);
  search(all);
  const auto& nodes = problem.cluster.nodes();
  for (size_t k = nodes.size() - 1; k >= 1 && !best.found(); --k) {
    const uint32_t n = nodes[k].first_device;
    search(std::vector<uint32_t>(all.begin(), all.begin() + n));
    if (best.found()) {
      best.stats().notes.push_back("no layout of all " + std::to_string(all.size()) +
                                   " GPUs fits the planner's constraints; it uses the first " + std::to_string(n) +
                                   " (whole nodes in node order) and leaves the rest idle");
    }
  }
}

proto::Plan MegatronLayout(const std::vector<uint32_t>& order, uint32_t dp, uint32_t tp, uint32_t pp,
                           const LayerRanges& layers, uint32_t micro_batch_size, uint32_t micro_batches) {
  proto::Plan plan;
  for (uint32_t d = 0; d < dp; ++d) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(micro_batch_size);
    pipe->set_num_micro_batches(micro_batches);
    for (uint32_t s = 0; s < pp; ++s) {
      auto* st = pipe->add_stages();
      for (uint32_t k = 0; k < tp; ++k) st->add_devices(order[size_t{s} * tp * dp + size_t{d} * tp + k]);
      if (tp > 1) st->set_tp_degree(tp);
      st->set_layer_begin(layers[s].first);
      st->set_layer_end(layers[s].second);
    }
  }
  return plan;
}

proto::Plan IntraStageLayout(const std::vector<uint32_t>& order, const std::vector<uint32_t>& sizes,
                             const std::vector<uint32_t>& tps, const LayerRanges& layers, uint32_t micro_batch_size,
                             uint32_t micro_batches, const std::vector<std::vector<uint32_t>>& splits) {
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(micro_batch_size);
  pipe->set_num_micro_batches(micro_batches);
  size_t next = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    auto* st = pipe->add_stages();
    for (uint32_t k = 0; k < sizes[s]; ++k) st->add_devices(order[next++]);
    if (tps[s] > 1) st->set_tp_degree(tps[s]);
    if (s < splits.size() && !splits[s].empty() && sizes[s] / tps[s] > 1) {
      for (uint32_t x : splits[s]) st->add_micro_batch_split(x);
    }
    st->set_layer_begin(layers[s].first);
    st->set_layer_end(layers[s].second);
  }
  return plan;
}

std::optional<LayerRanges> UniformBlocksSplit(const models::TransformerModel& model, uint32_t pp) {
  const uint32_t L = model.num_blocks();
  if (pp == 0 || L % pp != 0) return std::nullopt;
  LayerRanges out;
  const uint32_t k = L / pp;
  for (uint32_t s = 0; s < pp; ++s) {
    const uint32_t begin = s == 0 ? 0 : 1 + s * k;
    const uint32_t end = s + 1 == pp ? model.num_layers() : 1 + (s + 1) * k;
    out.emplace_back(begin, end);
  }
  return out;
}

std::optional<LayerRanges> UniformLayersSplit(const models::TransformerModel& model, uint32_t pp) {
  if (pp == 0 || model.num_layers() % pp != 0) return std::nullopt;
  return EvenLayerSplit(model.num_layers(), pp);
}

MemoryCheck CheckMemory(const proto::Plan& plan, const PlanningProblem& problem, const MemoryModel& memory) {
  const auto& model = problem.model;
  const uint32_t L = model.num_layers();
  std::vector<uint32_t> replicas(L, 0);
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < L; ++l) {
        replicas[l] += models::DpDegree(st) * models::StageSharding(st).ways();  // ZeRO over DP × CP
      }
    }
  }
  const proto::Recompute rc = models::EffectiveRecompute(plan, problem.training);
  const proto::Plan::Schedule schedule = models::EffectiveSchedule(plan);
  MemoryCheck worst;
  double worst_gap = -std::numeric_limits<double>::infinity();
  for (const auto& pipe : plan.pipelines()) {
    const uint32_t S = static_cast<uint32_t>(pipe.stages_size());
    for (uint32_t s = 0; s < S; ++s) {
      const auto& st = pipe.stages(static_cast<int>(s));
      const uint32_t tp = models::TpDegree(st);
      const uint32_t b0 = st.layer_begin(), e0 = std::min(st.layer_end(), L);
      double static_gib = 0;
      bool uniform = true;
      for (uint32_t l = b0; l < e0; ++l) uniform &= replicas[l] == replicas[b0];
      if (uniform) {
        static_gib = memory.StaticGib(b0, e0, tp, plan.zero_stage(), replicas[b0]);
      } else {
        static_gib = memory.StaticGibByLayer(b0, e0, tp, plan.zero_stage(), replicas);
      }
      const auto shard = models::StageSharding(st);
      const double act = memory.ActivationGibPerSequence(b0, e0, tp, plan.sequence_parallel(), rc, shard);
      const double peak = memory.PeakLayerGibPerSequence(b0, e0, tp, plan.sequence_parallel(), rc, shard);
      const double in_flight = MemoryModel::InFlight(schedule, s, S, pipe.num_micro_batches(), plan.virtual_stages());
      const auto split = models::MicroBatchSplit(st, pipe.micro_batch_size());
      for (uint32_t r = 0; r < models::DpDegree(st); ++r) {
        const double b = r < split.size() ? split[r] : 0;
        const double need = memory.TotalGib(static_gib, act, peak, b, in_flight);
        const uint32_t width = models::ReplicaWidth(st);
        for (uint32_t k = 0; k < width; ++k) {
          const uint32_t d = st.devices(static_cast<int>(r * width + k));
          const double cap = problem.cluster.device(d).gpu->memory_gib;
          if (!FitsIn(need, cap)) worst.fits = false;
          if (need - cap > worst_gap) {
            worst_gap = need - cap;
            worst.need_gib = need;
            worst.capacity_gib = cap;
            worst.device = d;
          }
        }
      }
    }
  }
  return worst;
}

std::optional<LayerRanges> BalancedSplit(const proto::Plan& skeleton, const PlanningProblem& problem,
                                         const AnalyticCostModel& ranking, const MemoryModel& memory) {
  const auto& model = problem.model;
  const uint32_t L = model.num_layers(), blocks = model.num_blocks();
  if (skeleton.pipelines_size() == 0) return std::nullopt;
  const uint32_t S = static_cast<uint32_t>(skeleton.pipelines(0).stages_size());
  for (const auto& pipe : skeleton.pipelines()) {
    if (static_cast<uint32_t>(pipe.stages_size()) != S) return std::nullopt;
  }
  if (S == 0 || S > blocks + 2) return std::nullopt;
  const proto::Recompute rc = models::EffectiveRecompute(skeleton, problem.training);
  const proto::Plan::Schedule schedule = models::EffectiveSchedule(skeleton);
  const uint32_t zero = skeleton.zero_stage();
  const bool sp = skeleton.sequence_parallel();
  std::vector<double> fixed(S, 0), per_block(S, 0);
  std::vector<uint32_t> max_blocks(S, blocks);
  auto span_of = [](const proto::Stage& st) {
    return std::span<const uint32_t>(st.devices().data(), st.devices_size());
  };
  // The layer range stage s would hold with n blocks (only the kinds matter for memory).
  auto range = [&](uint32_t s, uint32_t n) -> std::pair<uint32_t, uint32_t> {
    if (S == 1) return {0, L};
    if (s == 0) return {0, 1 + n};
    if (s + 1 == S) return {L - 1 - n, L};
    return {1, 1 + n};
  };
  for (uint32_t s = 0; s < S; ++s) {
    uint32_t shard = 0;
    for (const auto& pipe : skeleton.pipelines()) shard += models::DpDegree(pipe.stages(static_cast<int>(s)));
    for (const auto& pipe : skeleton.pipelines()) {
      const auto& st = pipe.stages(static_cast<int>(s));
      const uint32_t tp = models::TpDegree(st);
      const auto devices = span_of(st);
      const auto next = s + 1 < S ? span_of(pipe.stages(static_cast<int>(s + 1))) : std::span<const uint32_t>();
      const auto prev = s > 0 ? span_of(pipe.stages(static_cast<int>(s - 1))) : std::span<const uint32_t>();
      const auto split = models::MicroBatchSplit(st, pipe.micro_batch_size());
      const double in_flight =
          MemoryModel::InFlight(schedule, s, S, pipe.num_micro_batches(), skeleton.virtual_stages());
      for (uint32_t r = 0; r < models::DpDegree(st); ++r) {
        const auto g = devices.subspan(size_t{r} * tp, tp);
        const double b = r < split.size() ? split[r] : 0;
        double f = ranking.Replica(g, 1, 1, b, next, prev, rc).total_s();  // PP hops only
        if (s == 0) f += ranking.Replica(g, 0, 1, b, {}, {}, rc).total_s();
        if (s + 1 == S) f += ranking.Replica(g, L - 1, L, b, {}, {}, rc).total_s();
        fixed[s] = std::max(fixed[s], f);
        per_block[s] = std::max(per_block[s], ranking.Replica(g, 1, 2, b, {}, {}, rc).total_s());
        double cap = std::numeric_limits<double>::infinity();
        for (uint32_t d : g) cap = std::min(cap, problem.cluster.device(d).gpu->memory_gib);
        auto fits = [&](uint32_t n) {
          const auto [begin, end] = range(s, n);
          const double need = memory.TotalGib(memory.StaticGib(begin, end, tp, zero, shard),
                                              memory.ActivationGibPerSequence(begin, end, tp, sp, rc),
                                              memory.PeakLayerGibPerSequence(begin, end, tp, sp, rc), b, in_flight);
          return FitsIn(need, cap);
        };
        const uint32_t lo_n = S == 1 ? blocks : (s == 0 || s + 1 == S) ? 0 : 1;
        if (!fits(lo_n)) return std::nullopt;
        uint32_t lo = lo_n, hi = std::min(max_blocks[s], blocks);
        if (S == 1) hi = blocks;
        while (lo < hi) {  // the largest block count that fits
          const uint32_t mid = (lo + hi + 1) / 2;
          if (fits(mid)) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        max_blocks[s] = std::min(max_blocks[s], lo);
      }
    }
  }
  return BalanceBlocks(blocks, fixed, per_block, max_blocks);
}

void ApplyLayers(proto::Plan* plan, const LayerRanges& layers) {
  for (auto& pipe : *plan->mutable_pipelines()) {
    for (int s = 0; s < pipe.stages_size() && s < static_cast<int>(layers.size()); ++s) {
      pipe.mutable_stages(s)->set_layer_begin(layers[static_cast<size_t>(s)].first);
      pipe.mutable_stages(s)->set_layer_end(layers[static_cast<size_t>(s)].second);
    }
  }
}

BestPlan::BestPlan(const PlanningProblem& problem, const AnalyticCostModel& ranking)
    : problem_(problem), ranking_(ranking), memory_(problem), kept_(problem.alternatives) {}

double BestPlan::Consider(proto::Plan plan, const std::string& what) {
  const MemoryCheck mem = CheckMemory(plan, problem_, memory_);
  if (!mem.fits) {
    stats_.Reject("out of memory");
    misses_.Offer(what, mem.need_gib, mem.capacity_gib,
                  std::to_string(mem.device) + " (" + problem_.cluster.device(mem.device).gpu->name + ")");
    return std::numeric_limits<double>::infinity();
  }
  ++stats_.candidates_evaluated;
  const double t = ranking_.Estimate(plan, /*with_memory=*/false).iteration_s;
  kept_.Offer(t, plan);
  return t;
}

Result<PlannerResult> BestPlan::Finish(const std::string& planner, const std::string& hint) {
  if (kept_.empty()) {
    if (!misses_.empty()) return misses_.ToStatus(planner, problem_, stats_);
    return NothingFound(planner, problem_, stats_, hint);
  }
  PlannerResult r;
  kept_.MoveInto(&r);
  r.stats = std::move(stats_);
  return r;
}

void ForEachSymmetricShape(const PlanningProblem& problem, uint32_t devices, uint32_t node_gcd,
                           const std::vector<uint32_t>& tp_degrees, const std::vector<uint32_t>& pp_degrees,
                           SearchStats* stats, const std::function<void(uint32_t dp, uint32_t tp, uint32_t pp)>& shape) {
  const uint32_t G = problem.training.global_batch_size();
  const uint32_t L = problem.model.num_layers();
  for (uint32_t tp : TpCandidates(problem, tp_degrees, node_gcd, stats)) {
    for (uint32_t pp : pp_degrees.empty() ? Divisors(devices / tp) : pp_degrees) {
      if ((devices / tp) % pp != 0) {
        stats->Reject("PP degree does not divide the GPUs left after TP");
        continue;
      }
      if (pp > L) {
        stats->Reject("more pipeline stages than layers");
        continue;
      }
      const uint32_t dp = devices / (tp * pp);
      if (G % dp != 0) {
        stats->Reject("global batch not divisible by the DP degree");
        continue;
      }
      shape(dp, tp, pp);
    }
  }
}

Result<PlannerResult> SearchBalancedSymmetric(const std::string& planner, const PlanningProblem& problem,
                                              const AnalyticCostModel& ranking, const SymmetricSearch& space) {
  BestPlan best(problem, ranking);
  SearchStats& stats = best.stats();
  const uint32_t G = problem.training.global_batch_size();
  const uint32_t L = problem.model.num_layers();
  const std::vector<uint32_t> zeros = space.zero_stages.empty() ? std::vector<uint32_t>{1} : space.zero_stages;
  SearchWholeNodePrefixes(problem, best, [&](const std::vector<uint32_t>& order) {
    const uint32_t N = static_cast<uint32_t>(order.size());
    ForEachSymmetricShape(problem, N, NodeGcd(problem.cluster, order), space.tp_degrees, space.pp_degrees, &stats,
                          [&](uint32_t dp, uint32_t tp, uint32_t pp) {
      for (uint32_t b : MicroBatchCandidates(G / dp, space.micro_batch_sizes, space.max_micro_batch_size)) {
        const uint32_t m = G / (dp * b);
        for (uint32_t zero : zeros) {
          proto::Plan plan = MegatronLayout(order, dp, tp, pp, EvenLayerSplit(L, pp), b, m);
          plan.set_zero_stage(zero);
          if (space.sequence_parallel && tp > 1) plan.set_sequence_parallel(true);
          if (auto layers = BalancedSplit(plan, problem, ranking, best.memory())) {
            ApplyLayers(&plan, *layers);
          } else {
            stats.Reject("no layer split fits in memory (tried the even split)");
          }
          best.Consider(std::move(plan), CandidateName(dp, tp, pp, b, m, zero));
        }
      }
    });
  });
  return best.Finish(planner, "needs dp × tp × pp = the GPUs of whole nodes, with TP inside a node");
}

std::string CandidateName(uint32_t dp, uint32_t tp, uint32_t pp, uint32_t b, uint32_t m, uint32_t zero) {
  return "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
         " b=" + std::to_string(b) + " m=" + std::to_string(m) + " zero=" + std::to_string(zero);
}

}  // namespace hetsim::planners
