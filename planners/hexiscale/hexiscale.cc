#include "planners/hexiscale/hexiscale.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "planners/hexiscale/cost.h"
#include "planners/hexiscale/graph.h"
#include "planners/hexiscale/pipeline.h"
#include "planners/proto/hexiscale.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::hexiscale {
namespace {

constexpr double kGib = 1024.0 * 1024.0 * 1024.0;

using Options = proto::HexiScaleOptions;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

const char* CutName(CutObjective c) { return c == CutObjective::kMinCut ? "min cut" : "max cut"; }

// One evaluated iteration of §4.4.
struct Outcome {
  double iteration_s = kInf;
  double pipeline_s = 0;
  double dp_s = 0;
};

class Search {
 public:
  Search(const PlanningProblem& problem, const Options& options)
      : problem_(problem),
        options_(options),
        cost_(problem),
        memory_(problem),
        builder_(problem, cost_, memory_),
        G_(problem.training.global_batch_size()),
        N_(problem.cluster.num_devices()) {
    if (options.cost_model() == Options::COST_MODEL_HETSIM) hetsim_.emplace(problem);
  }

  Result<PlannerResult> Run() {
    const auto& model = problem_.model;
    // TP degrees a machine may use: the model's heads allow them, the options list them.
    uint32_t max_node = 1;
    for (const auto& n : problem_.cluster.nodes()) max_node = std::max(max_node, n.num_gpus);
    for (uint32_t t = 1; t <= max_node; ++t) {
      if (!ModelAllowsTp(model, t)) continue;
      if (!options_.tp_degrees().empty() &&
          std::find(options_.tp_degrees().begin(), options_.tp_degrees().end(), t) == options_.tp_degrees().end()) {
        continue;
      }
      tps_.push_back(t);
    }
    if (tps_.empty()) return NothingFound("hexiscale", problem_, stats_, "no TP degree is allowed by the options");
    std::vector<uint32_t> bs = options_.micro_batch_sizes().empty()
                                   ? std::vector<uint32_t>{1, 2, 4}
                                   : std::vector<uint32_t>(options_.micro_batch_sizes().begin(),
                                                           options_.micro_batch_sizes().end());
    std::sort(bs.begin(), bs.end());
    bs.erase(std::unique(bs.begin(), bs.end()), bs.end());
    std::erase_if(bs, [&](uint32_t b) {
      if (G_ % b == 0) return false;
      stats_.Reject("micro-batch size does not divide the global batch");
      return true;
    });
    zeros_ = options_.zero_stages().empty()
                 ? std::vector<uint32_t>{1}
                 : std::vector<uint32_t>(options_.zero_stages().begin(), options_.zero_stages().end());
    const std::vector<uint32_t> dps = DpCandidates();
    const bool paper = options_.paper_mode();
    const uint32_t rounds = options_.rounds_per_dp() > 0 ? options_.rounds_per_dp() : paper ? 50 : 2;

    for (uint32_t b : bs) {
      for (uint32_t D : dps) {
        if (D > G_ / b) {
          stats_.Reject("more pipelines than micro-batches");
          continue;
        }
        last_ = std::nullopt;
        std::array<int, 2> rounds_of_cut{};  // paper_mode: earlier rounds of each option for this (b, D)
        for (uint32_t r = 0; r < (D == 1 ? 1 : rounds); ++r) {
          std::vector<CutObjective> cuts;
          switch (options_.partition()) {
            case Options::PARTITION_MIN_CUT:
              cuts = {CutObjective::kMinCut};
              break;
            case Options::PARTITION_MAX_CUT:
              cuts = {CutObjective::kMaxCut};
              break;
            case Options::PARTITION_BOTH:
              cuts = {CutObjective::kMinCut, CutObjective::kMaxCut};
              break;
            default:
              cuts = {AdaptiveCut()};
          }
          for (CutObjective cut : cuts) {
            // Paper mode: a repeated option gets a fresh METIS seed, so the round can find other groups
            // (the paper's rounds differ: Fig. 8); otherwise it is the cached partition, not re-run.
            const int extra = paper ? rounds_of_cut[static_cast<int>(cut)]++ : 0;
            Iterate(b, D, cut, static_cast<int>(options_.seed()) + extra);
          }
        }
      }
    }
    if (!best_) {
      if (!misses_.empty()) return misses_.ToStatus("hexiscale", problem_, stats_);
      return NothingFound("hexiscale", problem_, stats_,
                          "every D_dp left a pipeline whose GPUs cannot hold the model; try ZeRO stages 2-3 or "
                          "full recomputation");
    }
    Notes();
    PlannerResult result;
    runners_.MoveInto(&result);  // the same pick as best_ (both keep the first of equal costs)
    result.plan = std::move(*best_);
    result.cost_s = best_time_;
    result.stats = std::move(stats_);
    return result;
  }

 private:
  // D_dp candidates: the options', or 1..the largest D whose replicas' weights, gradients and optimizer
  // states fit in the cluster's memory at all (under the most sharding among the ZeRO stages allowed).
  std::vector<uint32_t> DpCandidates() {
    if (!options_.dp_degrees().empty()) {
      std::vector<uint32_t> out(options_.dp_degrees().begin(), options_.dp_degrees().end());
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      std::erase_if(out, [&](uint32_t d) { return d > N_; });
      return out;
    }
    const uint32_t cap = std::min(N_, options_.max_dp_degree() > 0 ? options_.max_dp_degree() : 64u);
    double total = 0;
    for (uint32_t d = 0; d < N_; ++d) {
      const auto& dev = problem_.cluster.device(d);
      total += dev.gpu->memory_gib - memory_.WorkspaceGib(problem_.cluster.node(dev.node));
    }
    const uint32_t L = problem_.model.num_layers();
    std::vector<uint32_t> out;
    for (uint32_t D = 1; D <= cap; ++D) {
      bool fits = false;
      for (uint32_t z : zeros_) fits |= D * memory_.StaticGib(0, L, 1, z, D) <= total;
      if (fits) {
        out.push_back(D);
      } else {
        stats_.Reject("D_dp replicas of the model's states exceed the cluster's memory");
      }
    }
    return out;
  }

  uint32_t max_graph_vertices() const {
    return options_.max_graph_vertices() > 0 ? options_.max_graph_vertices() : 512;
  }

  // §4.4's adaptive choice of the partition option for the next iteration.
  //   - The first iteration for a D_dp picks the option whose moving average of simulated costs (DP +
  //     pipeline, over its last `history_window` feasible iterations) is lower; an option not tried yet
  //     goes first (min cut before max cut).
  //   - A further iteration for the same D_dp follows the previous one's cost breakdown: when it spent
  //     more time synchronising gradients than running its pipelines, maximise the inter-group cut (give
  //     DP the fast links), else minimise it; after an out-of-memory iteration, the other option.
  CutObjective AdaptiveCut() const {
    if (last_) {
      const auto& [cut, o] = *last_;
      if (!std::isfinite(o.iteration_s)) {
        return cut == CutObjective::kMinCut ? CutObjective::kMaxCut : CutObjective::kMinCut;
      }
      return o.dp_s > o.pipeline_s ? CutObjective::kMaxCut : CutObjective::kMinCut;
    }
    const auto& mn = history_[static_cast<int>(CutObjective::kMinCut)];
    const auto& mx = history_[static_cast<int>(CutObjective::kMaxCut)];
    if (mn.empty()) return CutObjective::kMinCut;
    if (mx.empty()) return CutObjective::kMaxCut;
    auto average = [](const std::deque<Outcome>& h) {
      double sum = 0;
      for (const Outcome& o : h) sum += o.dp_s + o.pipeline_s;
      return sum / h.size();
    };
    return average(mx) < average(mn) ? CutObjective::kMaxCut : CutObjective::kMinCut;
  }

  const std::vector<std::vector<uint32_t>>* GlobalPartition(uint32_t D, CutObjective cut, int seed) {
    const auto key = std::make_tuple(D, static_cast<int>(cut), seed);
    if (auto it = partitions_.find(key); it != partitions_.end()) return it->second ? &*it->second : nullptr;
    std::optional<std::vector<std::vector<uint32_t>>> groups;
    if (D == 1) {
      groups.emplace(1, NodeOrder(problem_.cluster));
    } else {
      PartitionRequest req;
      const proto::DType dtype = problem_.training.dtype();
      for (uint32_t d = 0; d < N_; ++d) req.vertex_weight.push_back(problem_.cluster.device(d).gpu->PeakTflops(dtype));
      // Links depend on the two nodes only: look them up in a node × node table.
      if (node_bandwidth_.empty()) {
        const auto& nodes = problem_.cluster.nodes();
        node_bandwidth_.assign(nodes.size() * nodes.size(), 0);
        for (uint32_t a = 0; a < nodes.size(); ++a) {
          for (uint32_t b = 0; b < nodes.size(); ++b) {
            const uint32_t x = nodes[a].first_device, y = a == b ? x + 1 : nodes[b].first_device;
            if (y < N_) node_bandwidth_[a * nodes.size() + b] = cost_.DpLink(x, y).bandwidth_bytes_s;
          }
        }
      }
      req.bandwidth = [&](uint32_t i, uint32_t j) {
        return node_bandwidth_[problem_.cluster.device(i).node * problem_.cluster.nodes().size() +
                               problem_.cluster.device(j).node];
      };
      req.parts = D;
      req.max_balance = options_.max_balance() > 0 ? options_.max_balance() : 1.1;
      req.objective = cut;
      req.seed = seed;
      for (uint32_t d = 0; d < N_; ++d) req.machine.push_back(problem_.cluster.device(d).node);
      req.max_vertices = max_graph_vertices();
      ++metis_calls_;
      const auto start = std::chrono::steady_clock::now();
      const auto part = Partition(req);
      phase1_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (part) {
        groups.emplace(D);
        for (uint32_t d = 0; d < N_; ++d) (*groups)[(*part)[d]].push_back(d);
        std::sort(groups->begin(), groups->end());
        balance_[key] = BalanceFactor(req, *part);
      } else {
        stats_.Reject("METIS could not cut the graph into D_dp non-empty groups");
      }
    }
    auto it = partitions_.emplace(key, std::move(groups)).first;
    return it->second ? &*it->second : nullptr;
  }

  void Iterate(uint32_t b, uint32_t D, CutObjective cut, int seed) {
    ++iterations_;
    ++iterations_by_cut_[static_cast<int>(cut)];
    const auto* groups = GlobalPartition(D, cut, seed);
    if (groups == nullptr) return;
    // The same groups (another seed or option gave them) cost the same: evaluate once.
    std::string gkey = std::to_string(b) + ":";
    for (const auto& g : *groups) {
      for (uint32_t d : g) gkey += std::to_string(d) + ",";
      gkey += "|";
    }
    if (!evaluated_.insert(gkey).second) {
      stats_.Reject("partition already evaluated (same groups from another seed or cut option)");
      last_.emplace(cut, evaluated_outcome_[gkey]);
      return;
    }
    Outcome best_zero;
    for (uint32_t z : zeros_) {
      const Outcome o = Evaluate(*groups, b, D, z, cut, seed);
      if (o.iteration_s < best_zero.iteration_s) best_zero = o;
    }
    evaluated_outcome_[gkey] = best_zero;
    last_.emplace(cut, best_zero);
    if (std::isfinite(best_zero.iteration_s)) {
      auto& h = history_[static_cast<int>(cut)];
      h.push_back(best_zero);
      const uint32_t window = options_.history_window() > 0 ? options_.history_window() : 4;
      while (h.size() > window) h.pop_front();
    }
  }

  Outcome Evaluate(const std::vector<std::vector<uint32_t>>& groups, uint32_t b, uint32_t D, uint32_t zero,
                   CutObjective cut, int seed) {
    Outcome out;
    const uint32_t total_mb = G_ / b;
    Phase2Params params;
    params.micro_batch = b;
    params.micro_batches = std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(double(total_mb) / D)));
    params.in_flight_cap = total_mb - (D - 1);
    params.shard = D;
    params.zero_stage = zero;
    params.sequence_parallel = options_.has_sequence_parallel() && options_.sequence_parallel();
    params.leader_broadcast = !options_.has_leader_broadcast() || options_.leader_broadcast();
    params.tau = options_.tau() > 0 ? options_.tau() : 2;
    params.max_orders = options_.max_orders() > 0 ? options_.max_orders() : 48;
    params.max_parts = options_.max_parts() > 0 ? options_.max_parts() : 12;
    params.secondary_balance = options_.secondary_balance() > 0 ? options_.secondary_balance() : 2.0;
    params.seed = static_cast<int>(options_.seed());
    params.tp_degrees = tps_;
    params.max_graph_vertices = max_graph_vertices();
    std::vector<PipelineTemplate> templates;
    for (const auto& g : groups) {
      const auto start = std::chrono::steady_clock::now();
      auto tpl = builder_.BuildBest(g, params, &counters_);
      phase2_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!tpl) {
        stats_.Reject("a group's GPUs cannot hold the model (no stage layout fits in memory)");
        return out;
      }
      templates.push_back(std::move(*tpl));
    }
    // Asymmetric batch split (§3.3): micro-batches per pipeline that equalise their eq. 9 times.
    const auto split = MinMaxSplit(
        total_mb, D, [&](uint32_t r, uint32_t x) { return templates[r].Seconds(x); },
        std::vector<uint32_t>(D, params.in_flight_cap));
    if (!split) {
      stats_.Reject("more pipelines than micro-batches");
      return out;
    }
    proto::Plan plan;
    plan.set_zero_stage(zero);
    plan.mutable_comm()->set_pp_leader_broadcast(params.leader_broadcast);
    bool any_tp = false;
    for (uint32_t i = 0; i < D; ++i) {
      auto* pipe = plan.add_pipelines();
      pipe->set_micro_batch_size(b);
      pipe->set_num_micro_batches((*split)[i]);
      for (const auto& sp : templates[i].stages) {
        auto* st = pipe->add_stages();
        for (uint32_t d : sp.devices) st->add_devices(d);
        if (sp.tp > 1) {
          st->set_tp_degree(sp.tp);
          any_tp = true;
        }
        st->set_layer_begin(sp.layer_begin);
        st->set_layer_end(sp.layer_end);
      }
    }
    if (params.sequence_parallel && any_tp) plan.set_sequence_parallel(true);
    // An MoE model at EP 1: asymmetric pipelines whose stages give one MoE layer unlike TP degrees have no
    // expert layout in hetsim's plans.
    if (!FitMoePlan(&plan, problem_.model)) {
      stats_.Reject(kUnlikeMoeTp);
      return out;
    }
    const std::string what = "D_dp=" + std::to_string(D) + " b=" + std::to_string(b) + " zero=" + std::to_string(zero) +
                             " (" + CutName(cut) + ")";
    const MemoryCheck mem = CheckMemory(plan, problem_, memory_);
    if (!mem.fits) {
      stats_.Reject("out of memory (cost = infinity, §4.4)");
      misses_.Offer(what, mem.need_gib, mem.capacity_gib,
                    std::to_string(mem.device) + " (" + problem_.cluster.device(mem.device).gpu->name + ")");
      return out;
    }
    ++stats_.candidates_evaluated;
    if (hetsim_) {
      const PlanEstimate e = hetsim_->Estimate(plan, /*with_memory=*/false);
      out.iteration_s = e.iteration_s;
      out.pipeline_s = e.pipeline_s;
      out.dp_s = e.dp_sync_s;
    } else {
      const AppendixACost::Breakdown e = cost_.Evaluate(plan);
      out.iteration_s = e.iteration_s;
      out.pipeline_s = e.pipeline_s;
      out.dp_s = e.dp_s;
    }
    runners_.Offer(out.iteration_s, plan);  // the simulator-checked choice's candidates (planner.h)
    if (out.iteration_s < best_time_) {
      best_time_ = out.iteration_s;
      best_ = std::move(plan);
      best_outcome_ = out;
      best_cut_ = cut;
      best_seed_ = seed;
      best_parts_.clear();
      for (const auto& t : templates) best_parts_.push_back(t.parts);
      const auto key = std::make_tuple(D, static_cast<int>(cut), seed);
      best_balance_ = balance_.count(key) ? balance_.at(key) : 1.0;
    }
    return out;
  }

  void Notes() {
    const proto::Plan& plan = *best_;
    const uint32_t D = static_cast<uint32_t>(plan.pipelines_size());
    std::string parts, mbs;
    for (uint32_t i = 0; i < D; ++i) {
      parts += (i ? "," : "") + std::to_string(best_parts_[i]);
      mbs += (i ? "," : "") + std::to_string(plan.pipelines(static_cast<int>(i)).num_micro_batches());
    }
    auto& notes = stats_.notes;
    notes.push_back("chosen: D_dp=" + std::to_string(D) + (D > 1 ? std::string(" by METIS ") + CutName(best_cut_) +
                                                                       " (seed " + std::to_string(best_seed_) +
                                                                       ", balance " + Fmt("%.3f", best_balance_) + ")"
                                                                 : std::string()) +
                    ", micro-batch " + std::to_string(plan.pipelines(0).micro_batch_size()) + ", k_i = [" + parts +
                    "], micro-batches per pipeline [" + mbs + "], ZeRO-" + std::to_string(plan.zero_stage()));
    notes.push_back(std::string(hetsim_ ? "hetsim analytic" : "Appendix A") + " cost: pipelines " +
                    Fmt("%.3f s", best_outcome_.pipeline_s) + " + DP " + Fmt("%.3f s", best_outcome_.dp_s) + " = " +
                    Fmt("%.3f s", best_outcome_.iteration_s));
    notes.push_back(std::to_string(iterations_) + " iterations (" +
                    std::to_string(iterations_by_cut_[static_cast<int>(CutObjective::kMinCut)]) + " min cut, " +
                    std::to_string(iterations_by_cut_[static_cast<int>(CutObjective::kMaxCut)]) + " max cut), " +
                    std::to_string(metis_calls_) + " METIS phase-one partitions (" + Fmt("%.2f s", phase1_s_) +
                    "); phase two (" + Fmt("%.2f s", phase2_s_) + "): " +
                    std::to_string(counters_.templates) + " (group, k_i) pipelines, " +
                    std::to_string(counters_.orders) + " stage orders, " + std::to_string(counters_.cache_hits) +
                    " groups reused from isomorphic ones");
    if (options_.paper_mode()) {
      notes.push_back("paper mode (§4.4, §5.4's 50 iterations): " +
                      std::to_string(options_.rounds_per_dp() > 0 ? options_.rounds_per_dp() : 50) +
                      " rounds per (D_dp, micro-batch size); a repeated option asks METIS again with the next seed");
    }
    // Eq. 11 against hetsim's memory model on the fullest stage (the planner checks the latter).
    double worst_frac = 0, paper_gib = 0, real_gib = 0;
    const models::PlanContext ctx{problem_.cluster, problem_.model, problem_.training};
    const auto mem = models::EstimateMemory(plan, ctx);
    for (const auto& dm : mem) {
      const auto& st = plan.pipelines(static_cast<int>(dm.pipeline)).stages(static_cast<int>(dm.stage));
      const uint32_t L = problem_.model.num_layers();
      const uint32_t nb =
          (st.layer_end() - st.layer_begin()) - (st.layer_begin() == 0 ? 1 : 0) - (st.layer_end() == L ? 1 : 0);
      const double frac = dm.total_gib / dm.capacity_gib;
      if (frac > worst_frac) {
        worst_frac = frac;
        real_gib = dm.total_gib;
        paper_gib = cost_.PaperMemoryBytes(nb, models::TpDegree(st),
                                           plan.pipelines(static_cast<int>(dm.pipeline)).micro_batch_size()) /
                    kGib;
      }
    }
    notes.push_back("fullest device: " + Fmt("%.1f GiB", real_gib) + " (" + Fmt("%.0f%%", 100 * worst_frac) +
                    " of capacity; eq. 11, which leaves out optimizer states and in-flight micro-batches, says " +
                    Fmt("%.1f GiB", paper_gib) + ")");
  }

  const PlanningProblem& problem_;
  const Options& options_;
  AppendixACost cost_;
  MemoryModel memory_;
  PipelineBuilder builder_;
  std::optional<AnalyticCostModel> hetsim_;
  const uint32_t G_, N_;
  std::vector<uint32_t> tps_, zeros_;
  SearchStats stats_;
  InfeasibleTracker misses_;
  Phase2Counters counters_;
  std::array<std::deque<Outcome>, 2> history_;  // per option: its recent feasible iterations' costs
  std::optional<std::pair<CutObjective, Outcome>> last_;  // the previous iteration for this D_dp
  std::map<std::string, Outcome> evaluated_outcome_;
  std::map<std::tuple<uint32_t, int, int>, std::optional<std::vector<std::vector<uint32_t>>>> partitions_;
  std::map<std::tuple<uint32_t, int, int>, double> balance_;
  std::set<std::string> evaluated_;
  uint64_t iterations_ = 0, metis_calls_ = 0;
  double phase1_s_ = 0, phase2_s_ = 0;  // wall time in each phase
  std::vector<double> node_bandwidth_;     // β between nodes (a node with itself: its fabric)
  std::map<int, uint64_t> iterations_by_cut_;
  std::optional<proto::Plan> best_;
  double best_time_ = kInf;
  RankedPlans runners_{problem_.alternatives};
  Outcome best_outcome_;
  CutObjective best_cut_ = CutObjective::kMinCut;
  int best_seed_ = 0;
  double best_balance_ = 1;
  std::vector<uint32_t> best_parts_;
};

class HexiScalePlanner : public PlannerWithOptions<Options> {
 public:
  std::string name() const override { return "hexiscale"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    Search search(problem, options_);
    return search.Run();
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<HexiScalePlanner>();
}

}  // namespace hetsim::planners::hexiscale
