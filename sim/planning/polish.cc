#include "sim/planning/polish.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "models/plan.h"
#include "models/training.h"
#include "planners/cost_model.h"
#include "sim/planning/cpu_clock.h"

namespace hetsim::planning {
namespace {

// A change is kept when it simulates faster by more than this fraction (so the search cannot cycle).
constexpr double kGain = 1e-4;
// Rounds of boundary moves on the played estimate after a structural change.
constexpr uint32_t kRebalanceRounds = 64;
// Restarts from a local optimum's slower neighbours (iterated local search).
constexpr uint32_t kMaxRestarts = 8;

// A pipeline's stages priced on the closed form (AnalyticCostModel::Replica, the building blocks of the
// header comment in planners/cost_model.h), for PipelineTimeSplit: cum[k][r][l] is replica r of stage k's
// forward, backward and TP time of layers [0, l) on its share of a micro-batch, hops[k] its PP hops (which
// do not depend on the split).
struct StageTables {
  std::vector<std::vector<std::vector<double>>> cum;
  std::vector<double> hops;
};

// Pipeline `p`'s tables; empty for pipelines PipelineTimeSplit does not price: interleaved plans, context or
// Ulysses parallelism, more stages than layers.
std::optional<StageTables> PriceStages(const proto::Plan& plan, int p, const planners::AnalyticCostModel& cost,
                                       uint32_t layers) {
  const auto& pipe = plan.pipelines(p);
  const auto n = static_cast<size_t>(pipe.stages_size());
  if (plan.virtual_stages() > 1 || n < 2 || n > layers) return std::nullopt;
  const models::Cluster& cluster = cost.cluster();
  StageTables out;
  out.cum.resize(n);
  out.hops.assign(n, 0.0);
  const auto devices = [&](size_t k) {
    const auto& s = pipe.stages(static_cast<int>(k));
    return std::vector<uint32_t>(s.devices().begin(), s.devices().end());
  };
  for (size_t k = 0; k < n; ++k) {
    const proto::Stage& st = pipe.stages(static_cast<int>(k));
    if (std::max(1u, st.cp_degree()) > 1 || std::max(1u, st.ulysses_degree()) > 1) return std::nullopt;
    const uint32_t tp = std::max(1u, st.tp_degree());
    const auto replicas = static_cast<uint32_t>(st.devices_size()) / tp;
    if (replicas == 0) return std::nullopt;
    for (uint32_t d : st.devices()) {
      if (d >= cluster.num_devices()) return std::nullopt;
    }
    const std::vector<uint32_t> next = k + 1 < n ? devices(k + 1) : std::vector<uint32_t>{};
    const std::vector<uint32_t> prev = k > 0 ? devices(k - 1) : std::vector<uint32_t>{};
    const std::vector<uint32_t> split = models::MicroBatchSplit(st, pipe.micro_batch_size());
    if (split.size() != replicas) return std::nullopt;
    out.cum[k].assign(replicas, std::vector<double>(layers + 1, 0.0));
    for (uint32_t r = 0; r < replicas; ++r) {
      const std::vector<uint32_t> group(st.devices().begin() + r * tp, st.devices().begin() + (r + 1) * tp);
      const planners::ReplicaLinks links = cost.Links(group, next, prev);
      const models::GpuSpec& gpu = cost.SlowestGpu(group);
      for (uint32_t l = 0; l < layers; ++l) {
        const planners::ReplicaTime t = cost.Replica(gpu, tp, l, l + 1, split[r], links, cost.training().recompute());
        out.cum[k][r][l + 1] = out.cum[k][r][l] + t.forward_s + t.backward_s + t.tp_s;
        out.hops[k] = std::max(out.hops[k], t.pp_s);
      }
    }
  }
  return out;
}

// Pipeline `p`'s layers laid out to balance its stages' times from PriceStages, each stage's PP hops weighed
// by `hop_weight`: the boundaries minimise 1F1B's (m − 1)·max + Σ of those times (see below).
std::optional<proto::Plan> PipelineTimeSplit(const proto::Plan& plan, int p, const StageTables& tables, double hop_weight) {
  const auto& pipe = plan.pipelines(p);
  const size_t n = tables.cum.size();
  const auto layers = static_cast<uint32_t>(tables.cum[0][0].size() - 1);
  const auto& cum = tables.cum;
  const auto& hops = tables.hops;
  const auto stage_s = [&](size_t k, uint32_t b, uint32_t e) {
    double worst = 0;
    for (const auto& c : cum[k]) worst = std::max(worst, c[e] - c[b]);
    return worst + hop_weight * hops[k];
  };
  // 1F1B's time for m micro-batches, (m − 1)·max_k t_k + Σ_k t_k (the header comment of
  // planners/cost_model.h), is not separable over stages; so for each cap on the slowest stage (the stage
  // times that can occur, at most kCaps of them spread over their range) a dynamic programme finds the least
  // sum with every stage within the cap, and the cap with the least time wins.
  std::vector<double> caps;
  for (size_t k = 0; k < n; ++k) {
    for (uint32_t b = 0; b < layers; ++b) {
      for (uint32_t e = b + 1; e <= layers; ++e) caps.push_back(stage_s(k, b, e));
    }
  }
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  constexpr size_t kCaps = 256;
  if (caps.size() > kCaps) {
    std::vector<double> spread;
    for (size_t i = 0; i < kCaps; ++i) spread.push_back(caps[i * (caps.size() - 1) / (kCaps - 1)]);
    caps = std::move(spread);
  }
  const double m = pipe.num_micro_batches();
  const double inf = std::numeric_limits<double>::infinity();
  double best_time = inf;
  std::vector<uint32_t> best_starts;
  // sum[k][e]: least Σ of stages 0..k over layers [0, e) within the cap; from[k][e] where stage k starts.
  std::vector<std::vector<double>> sum(n, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<double>> top(n, std::vector<double>(layers + 1, 0.0));
  std::vector<std::vector<uint32_t>> from(n, std::vector<uint32_t>(layers + 1, 0));
  for (double cap : caps) {
    for (auto& row : sum) std::fill(row.begin(), row.end(), inf);
    for (uint32_t e = 1; e <= layers; ++e) {
      const double t = stage_s(0, 0, e);
      if (t <= cap) sum[0][e] = t, top[0][e] = t;
    }
    for (size_t k = 1; k < n; ++k) {
      for (uint32_t e = static_cast<uint32_t>(k + 1); e <= layers; ++e) {
        for (uint32_t b = static_cast<uint32_t>(k); b < e; ++b) {
          if (sum[k - 1][b] == inf) continue;
          const double t = stage_s(k, b, e);
          if (t > cap || sum[k - 1][b] + t >= sum[k][e]) continue;
          sum[k][e] = sum[k - 1][b] + t;
          top[k][e] = std::max(top[k - 1][b], t);
          from[k][e] = b;
        }
      }
    }
    if (sum[n - 1][layers] == inf) continue;
    const double time = (m - 1) * top[n - 1][layers] + sum[n - 1][layers];
    if (time >= best_time) continue;
    best_time = time;
    best_starts.assign(n, 0);
    uint32_t e = layers;
    for (size_t k = n; k-- > 1;) e = best_starts[k] = from[k][e];
  }
  if (best_starts.empty()) return std::nullopt;
  proto::Plan out = plan;
  auto* stages = out.mutable_pipelines(p)->mutable_stages();
  for (size_t k = 0; k < n; ++k) {
    stages->Mutable(static_cast<int>(k))->set_layer_begin(best_starts[k]);
    stages->Mutable(static_cast<int>(k))->set_layer_end(k + 1 < n ? best_starts[k + 1] : layers);
  }
  return out;
}

// Boundary moves on the played estimate from `current` (at `current_s`), at most `max_rounds`: moves between
// neighbouring stages first; when none helps, a layer moved further (every boundary between shifted by
// one), which leaves a plateau where two stages tie for the slowest.
std::pair<proto::Plan, double> ClimbLayers(proto::Plan current, double current_s,
                                           const planners::AnalyticCostModel& cost, const models::PlanContext& ctx,
                                           uint32_t max_rounds, const std::function<bool()>& stop) {
  for (uint32_t round = 0; round < max_rounds; ++round) {
    bool moved = false;
    for (bool adjacent : {true, false}) {
      for (auto& move : BoundaryMoves(current, adjacent)) {
        if (stop && stop()) return {std::move(current), current_s};
        const double t = cost.Estimate(move.plan, /*with_memory=*/false).iteration_s;
        if (t < current_s * (1 - kGain) && models::ValidatePlan(move.plan, ctx, "").ok()) {
          current = std::move(move.plan);
          current_s = t;
          moved = true;
          break;
        }
      }
      if (moved) break;
    }
    if (!moved) break;
  }
  return {std::move(current), current_s};
}

}  // namespace

proto::Plan RebalanceLayers(const proto::Plan& plan, const planners::AnalyticCostModel& cost,
                            const models::PlanContext& ctx, uint32_t max_rounds, const std::function<bool()>& stop) {
  // The start: the plan's own split, or every pipeline laid out on its stages' closed-form compute
  // (PipelineTimeSplit), whichever the played estimate prefers and the plan checks accept. From a structure's
  // first rough split (layers by device count, or halves of a stage) the moves alone stop at the first local
  // optimum, often far from a balance. The PP hops weigh on a stage by how much of them the schedule's slack
  // hides, which the closed form does not know: the balanced splits weigh them at 0, 1/4, 1/2 and 1.
  proto::Plan start = plan;
  double start_s = cost.Estimate(plan, /*with_memory=*/false).iteration_s;
  if (max_rounds == 0) return start;
  const std::string own = plan.SerializeAsString();
  std::vector<std::optional<StageTables>> tables;  // per pipeline, priced once for every weight
  for (int p = 0; p < plan.pipelines_size(); ++p) tables.push_back(PriceStages(plan, p, cost, ctx.model.num_layers()));
  for (double hop_weight : {0.0, 0.25, 0.5, 1.0}) {
    proto::Plan balanced = plan;
    for (int p = 0; p < balanced.pipelines_size(); ++p) {
      if (!tables[static_cast<size_t>(p)]) continue;
      if (auto b = PipelineTimeSplit(balanced, p, *tables[static_cast<size_t>(p)], hop_weight)) balanced = std::move(*b);
    }
    if (balanced.SerializeAsString() == own) continue;
    const double t = cost.Estimate(balanced, /*with_memory=*/false).iteration_s;
    if (t < start_s * (1 - kGain) && models::ValidatePlan(balanced, ctx, "").ok()) {
      start = std::move(balanced);
      start_s = t;
    }
  }
  return ClimbLayers(std::move(start), start_s, cost, ctx, max_rounds, stop).first;
}

proto::Plan PolishOnTwin(const proto::Plan& plan, double plan_s, const planners::PlanningProblem& problem,
                         const sim::SimOptions& sim, PolishBudget budget, PolishOutcome* outcome) {
  const double started = CpuSeconds();
  const auto out_of_time = [&] { return budget.time_limit_s > 0 && CpuSeconds() - started >= budget.time_limit_s; };
  PolishOutcome local;
  PolishOutcome& out = outcome ? *outcome : local;
  out = PolishOutcome{};
  out.start_s = out.end_s = plan_s;
  const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
  const uint32_t layers = problem.model.num_layers();
  // The lower bound bounds the balanced fidelity's simulation without jitter (planners/lowering_cost.h).
  const sim::Fidelity balanced = sim::Fidelity::Balanced();
  const bool bounded = sim.fidelity.collectives == balanced.collectives && sim.fidelity.tp == balanced.tp &&
                       sim.compute_jitter_cv == 0;
  const planners::AnalyticCostModel cost(problem);
  // Every plan simulated (or refused by the simulator), by its bytes: a plan is simulated once, and a restart
  // cannot walk back into a plan already seen.
  std::unordered_set<std::string> seen;
  const auto key = [](const proto::Plan& p) {
    std::string k;
    p.SerializeToString(&k);
    return k;
  };
  seen.insert(key(plan));
  // Each structural change's rebalanced plan, by the change's bytes.
  std::unordered_map<std::string, proto::Plan> rebalanced;
  // The neighbours that pass the plan checks, most promising first: by their played estimate (stable, so
  // ties keep the order of the list above).
  struct Neighbour {
    PlanChange c;
    double estimate_s = 0;
  };
  const auto ranked = [&](const proto::Plan& from) {
    std::vector<Neighbour> list;
    for (auto& n : PlanNeighbours(from, problem.cluster, layers, problem.training.recompute())) {
      if (out_of_time()) break;  // at thousands of GPUs each estimate takes a while
      if (!models::ValidatePlan(n.plan, ctx, "").ok()) {
        ++out.refused;
        continue;
      }
      const double e = cost.Estimate(n.plan, /*with_memory=*/false).iteration_s;
      list.push_back({std::move(n), e});
    }
    std::stable_sort(list.begin(), list.end(),
                     [](const Neighbour& a, const Neighbour& b) { return a.estimate_s < b.estimate_s; });
    return list;
  };
  // A neighbour that simulated but was not faster (a restart's candidate).
  struct Tried {
    double t = 0;
    proto::Plan plan;
    std::string change;
  };
  struct Search {
    proto::Plan plan;
    double t = 0;
    std::vector<std::string> path;  // the changes from the input plan, each with its simulated time
    std::vector<Tried> tried;       // the final plan's neighbours simulated and not faster
  };
  bool spent = false;
  // First-improvement descent from `from` until no neighbour is faster or the budget is spent.
  const auto descend = [&](proto::Plan from, double from_s, std::vector<std::string> path) {
    Search s{std::move(from), from_s, std::move(path), {}};
    std::vector<Neighbour> neighbours = ranked(s.plan);
    size_t next = 0;
    while (next < neighbours.size()) {
      if (out.simulated >= budget.simulations) {
        spent = true;
        break;
      }
      if (out_of_time()) {
        spent = true;
        out.timed_out = true;
        break;
      }
      const Neighbour& candidate = neighbours[next++];
      // A structural change comes with its layers rebalanced on the played estimate, so that a better
      // structure is not judged on a split made for the old one.
      // (Remembered: the whole-cluster structures, 8 and 10, come back from every plan.)
      proto::Plan candidate_plan;
      if (candidate.c.layer_move) {
        candidate_plan = candidate.c.plan;
      } else {
        std::string raw = key(candidate.c.plan);
        auto it = rebalanced.find(raw);
        if (it == rebalanced.end()) {
          it = rebalanced.emplace(std::move(raw), RebalanceLayers(candidate.c.plan, cost, ctx, kRebalanceRounds,
                                                                 out_of_time))
                   .first;
        }
        candidate_plan = it->second;
      }
      if (out_of_time()) {  // the rebalance used the time left: not simulated
        spent = true;
        out.timed_out = true;
        break;
      }
      std::string k = key(candidate_plan);
      if (seen.count(k)) continue;  // simulated before: on the way here, or no faster than a plan before
      if (bounded && cost.LowerBoundSeconds(candidate_plan) >= s.t * (1 - kGain)) {
        ++out.ruled_out;
        continue;
      }
      ++out.simulated;
      seen.insert(std::move(k));
      auto r = sim::SimulateIteration(candidate_plan, ctx, sim);
      if (!r.ok() || r->report.any_oom()) {
        ++out.refused;
        continue;
      }
      const double t = r->report.iteration_time_s();
      if (t >= s.t * (1 - kGain)) {
        s.tried.push_back({t, std::move(candidate_plan), candidate.c.change});
        continue;
      }
      s.path.push_back(candidate.c.change + ": " + Seconds(t));
      s.plan = std::move(candidate_plan);
      s.t = t;
      s.tried.clear();
      neighbours = ranked(s.plan);
      next = 0;
    }
    std::stable_sort(s.tried.begin(), s.tried.end(), [](const Tried& a, const Tried& b) { return a.t < b.t; });
    return s;
  };
  Search best = descend(plan, plan_s, {});
  // Restarts (iterated local search): from the best local optimum, its fastest neighbour that simulated and
  // was not faster is taken anyway and descended from, the plans already seen excluded; a descent that ends faster than
  // the best becomes the best. At most kMaxRestarts, each from the next such neighbour of the best.
  size_t used = 0;
  for (uint32_t restart = 0; restart < kMaxRestarts && !spent && used < best.tried.size(); ++restart) {
    const Tried& from = best.tried[used++];
    auto path = best.path;
    path.push_back("restart (" + from.change + ", slower): " + Seconds(from.t));
    Search s = descend(from.plan, from.t, std::move(path));
    ++out.restarts;
    if (s.t < best.t * (1 - kGain)) {
      best = std::move(s);
      used = 0;
    }
  }
  out.local_optimum = !spent;
  // The path to the best plan: restarts that led nowhere are not listed.
  out.kept = std::move(best.path);
  out.end_s = best.t;
  return best.plan;
}

}  // namespace hetsim::planning
