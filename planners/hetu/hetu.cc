#include "planners/hetu/hetu.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/plan.h"
#include "planners/cost_model.h"
#include "planners/proto/hetu.pb.h"
#include "planners/search.h"
#include "planners/symmetric.h"

namespace hetsim::planners::hetu {
namespace {

using Options = proto::HetuOptions;

// The GPUs of one catalog type, in node order.
struct GpuType {
  const models::GpuSpec* gpu = nullptr;
  std::vector<uint32_t> nodes;     // indices into cluster.nodes()
  std::vector<uint32_t> tp_choices;
  uint32_t largest_node = 0;
  double block_s = 0;  // one block, one sequence, forward + backward on one GPU of the type (speed rank)
};

// One TP group: a stage of some pipeline.
struct Group {
  std::vector<uint32_t> devices;
  uint32_t tp = 1;
  size_t type = 0;
  double speed = 0;  // blocks per second at one sequence (1 / the group's per-block time)
};

std::string Fmt(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

class Search {
 public:
  Search(const PlanningProblem& problem, const Options& options)
      : problem_(problem), options_(options), cost_(problem), best_(problem, cost_),
        blocks_(problem.model.num_blocks()), batch_(problem.training.global_batch_size()),
        rc_(problem.training.recompute()) {
    const auto& nodes = problem.cluster.nodes();
    for (uint32_t n = 0; n < nodes.size(); ++n) {
      auto it = std::find_if(types_.begin(), types_.end(), [&](const GpuType& t) { return t.gpu == nodes[n].gpu; });
      if (it == types_.end()) {
        types_.push_back(GpuType{nodes[n].gpu, {}, {}, 0, 0});
        it = types_.end() - 1;
      }
      it->nodes.push_back(n);
      it->largest_node = std::max(it->largest_node, nodes[n].num_gpus);
    }
    for (auto& ty : types_) {
      const uint32_t first = nodes[ty.nodes.front()].first_device;
      const std::vector<uint32_t> one = {first};
      ty.block_s = cost_.Replica(one, 1, 2, 1, {}, {}, rc_).total_s();
      std::vector<uint32_t> requested(options_.tp_degrees().begin(), options_.tp_degrees().end());
      if (requested.empty()) {
        for (uint32_t t = 1; t <= ty.largest_node; t *= 2) requested.push_back(t);
      }
      for (uint32_t t : requested) {
        if (t > ty.largest_node) {
          best_.stats().Reject("TP degree larger than the type's largest node");
        } else if (!ModelAllowsTp(problem.model, t)) {
          best_.stats().Reject("TP degree the model's heads do not allow");
        } else {
          ty.tp_choices.push_back(t);
        }
      }
    }
  }

  Result<PlannerResult> Run() {
    for (const auto& ty : types_) {
      if (ty.tp_choices.empty()) {
        return Status::Invalid("hetu: no TP degree in tp_degrees fits the " + ty.gpu->name + " nodes (largest " +
                               std::to_string(ty.largest_node) + " GPUs) and the model's heads; allow a smaller degree");
      }
    }
    static constexpr uint32_t kDefaultSizes[] = {1, 2, 4};
    const auto& requested = options_.micro_batch_sizes();
    const std::vector<uint32_t> bs = requested.empty() ? std::vector<uint32_t>(std::begin(kDefaultSizes), std::end(kDefaultSizes))
                                                       : std::vector<uint32_t>(requested.begin(), requested.end());
    std::vector<size_t> pick(types_.size(), 0);
    while (true) {
      std::vector<uint32_t> tps;
      for (size_t k = 0; k < types_.size(); ++k) tps.push_back(types_[k].tp_choices[pick[k]]);
      TpCombination(tps, bs);
      size_t k = 0;
      while (k < types_.size() && ++pick[k] == types_[k].tp_choices.size()) pick[k++] = 0;
      if (k == types_.size()) break;
    }
    const uint64_t evaluated = best_.stats().candidates_evaluated;
    auto result = best_.Finish("hetu", "allow more TP degrees or pipeline counts, or a smaller micro-batch size");
    if (!result.ok()) return result;
    result->stats.notes.push_back(std::to_string(tp_combinations_) + " per-type TP combinations, " +
                                  std::to_string(shapes_) + " pipeline layouts, " + std::to_string(evaluated) +
                                  " candidates costed");
    result->stats.notes.push_back("chosen: " + Describe(result->plan) + " (predicted " +
                                  Fmt("%.4f", best_.best_time()) + " s per iteration)");
    return result;
  }

 private:
  // The TP groups of the cluster when type k uses degree tps[k]: each node cut into groups of that degree,
  // the rest into the largest powers of two that fit (7 at TP 4: 4 + 2 + 1).
  std::vector<Group> Groups(const std::vector<uint32_t>& tps) const {
    std::vector<Group> groups;
    const auto& nodes = problem_.cluster.nodes();
    for (size_t k = 0; k < types_.size(); ++k) {
      for (uint32_t n : types_[k].nodes) {
        uint32_t at = 0;
        while (at < nodes[n].num_gpus) {
          uint32_t t = tps[k];
          while (t > nodes[n].num_gpus - at || !ModelAllowsTp(problem_.model, t)) t /= 2;
          Group g;
          for (uint32_t i = 0; i < t; ++i) g.devices.push_back(nodes[n].first_device + at + i);
          g.tp = t;
          g.type = k;
          g.speed = 1.0 / cost_.Replica(g.devices, 1, 2, 1, {}, {}, rc_).total_s();
          groups.push_back(std::move(g));
          at += t;
        }
      }
    }
    return groups;
  }

  void TpCombination(const std::vector<uint32_t>& tps, const std::vector<uint32_t>& bs) {
    ++tp_combinations_;
    const std::vector<Group> groups = Groups(tps);
    std::vector<uint32_t> counts(options_.pipelines().begin(), options_.pipelines().end());
    if (counts.empty()) {
      for (uint32_t p = 1; p <= groups.size(); ++p) counts.push_back(p);
    }
    // Longest processing time first: the fastest groups first (ties: device order).
    std::vector<size_t> by_speed(groups.size());
    std::iota(by_speed.begin(), by_speed.end(), 0);
    std::stable_sort(by_speed.begin(), by_speed.end(),
                     [&](size_t a, size_t b) { return groups[a].speed > groups[b].speed * (1 + 1e-12); });
    for (uint32_t P : counts) {
      if (P > groups.size()) {
        best_.stats().Reject("more pipelines than TP groups");
        continue;
      }
      std::vector<std::vector<size_t>> pipes(P);
      std::vector<double> speed(P, 0);
      for (size_t g : by_speed) {
        const size_t p = static_cast<size_t>(std::min_element(speed.begin(), speed.end()) - speed.begin());
        pipes[p].push_back(g);
        speed[p] += groups[g].speed;
      }
      bool too_long = false;
      for (const auto& p : pipes) too_long |= p.size() > blocks_ + 2 || (p.size() == 2 && blocks_ == 0);
      if (too_long) {
        best_.stats().Reject("a pipeline with more stages than layers");
        continue;
      }
      std::vector<bool> orders;  // slowest type first?
      switch (options_.stage_order()) {
        case Options::STAGE_ORDER_SLOWEST_FIRST: orders = {true}; break;
        case Options::STAGE_ORDER_FASTEST_FIRST: orders = {false}; break;
        default: orders = types_.size() > 1 ? std::vector<bool>{true, false} : std::vector<bool>{true};
      }
      for (bool slowest_first : orders) {
        auto ordered = pipes;
        for (auto& p : ordered) {
          std::stable_sort(p.begin(), p.end(), [&](size_t a, size_t b) {
            const double sa = types_[groups[a].type].block_s, sb = types_[groups[b].type].block_s;
            if (groups[a].type != groups[b].type) return slowest_first ? sa > sb : sa < sb;
            if (groups[a].tp != groups[b].tp) return groups[a].tp > groups[b].tp;
            return groups[a].devices.front() < groups[b].devices.front();
          });
        }
        ++shapes_;
        for (uint32_t b : bs) Candidate(groups, ordered, b);
      }
    }
  }

  // One layout at micro-batch size b: layers balanced per pipeline shape, micro-batches over pipelines.
  void Candidate(const std::vector<Group>& groups, const std::vector<std::vector<size_t>>& pipes, uint32_t b) {
    if (batch_ % b != 0) {
      best_.stats().Reject("micro-batch size does not divide the global batch");
      return;
    }
    const uint32_t M = static_cast<uint32_t>(batch_ / b);
    const uint32_t P = static_cast<uint32_t>(pipes.size());
    if (M < P) {
      best_.stats().Reject("fewer micro-batches than pipelines");
      return;
    }
    const uint32_t L = problem_.model.num_layers();
    proto::Plan plan;
    plan.set_zero_stage(options_.has_zero_stage() ? options_.zero_stage() : 1);
    plan.set_sequence_parallel(options_.has_sequence_parallel() ? options_.sequence_parallel() : true);
    for (uint32_t p = 0; p < P; ++p) {
      auto* pipe = plan.add_pipelines();
      pipe->set_micro_batch_size(b);
      pipe->set_num_micro_batches(M / P + (p < M % P ? 1 : 0));
      const auto ranges = EvenLayerSplit(L, static_cast<uint32_t>(pipes[p].size()));
      for (size_t s = 0; s < pipes[p].size(); ++s) {
        const Group& g = groups[pipes[p][s]];
        auto* st = pipe->add_stages();
        for (uint32_t d : g.devices) st->add_devices(d);
        st->set_tp_degree(g.tp);
        st->set_layer_begin(ranges[s].first);
        st->set_layer_end(ranges[s].second);
      }
    }
    if (!options_.even_layers()) {
      // Pipelines of one shape (the same GPU type and TP degree at every stage) share a balanced split.
      std::map<std::vector<std::pair<size_t, uint32_t>>, std::vector<uint32_t>> shapes;
      for (uint32_t p = 0; p < P; ++p) {
        std::vector<std::pair<size_t, uint32_t>> key;
        for (size_t g : pipes[p]) key.emplace_back(groups[g].type, groups[g].tp);
        shapes[key].push_back(p);
      }
      for (const auto& [key, members] : shapes) {
        proto::Plan skeleton;
        skeleton.set_zero_stage(plan.zero_stage());
        skeleton.set_sequence_parallel(plan.sequence_parallel());
        for (uint32_t p : members) *skeleton.add_pipelines() = plan.pipelines(static_cast<int>(p));
        const auto layers = BalancedSplit(skeleton, problem_, cost_, best_.memory());
        if (!layers) {
          best_.stats().Reject("no layer split fits in memory");
          return;
        }
        for (uint32_t p : members) {
          auto* pipe = plan.mutable_pipelines(static_cast<int>(p));
          for (int s = 0; s < pipe->stages_size(); ++s) {
            pipe->mutable_stages(s)->set_layer_begin((*layers)[static_cast<size_t>(s)].first);
            pipe->mutable_stages(s)->set_layer_end((*layers)[static_cast<size_t>(s)].second);
          }
        }
      }
    }
    if (!options_.even_micro_batches() && P > 1) {
      // T_p(m) = (m − 1)·max_s t_s + Σ_s t_s, from the stage times at this layer split.
      const PlanEstimate e = cost_.Estimate(plan, /*with_memory=*/false);
      std::vector<double> slowest(P, 0), sum(P, 0);
      for (uint32_t p = 0; p < P; ++p) {
        for (const auto& st : e.pipelines[p].stages) {
          slowest[p] = std::max(slowest[p], st.time_s);
          sum[p] += st.time_s;
        }
      }
      const auto split = MinMaxSplit(
          M, P, [&](uint32_t p, uint32_t m) { return (m - 1.0) * slowest[p] + sum[p]; }, std::vector<uint32_t>(P, M));
      if (split) {
        for (uint32_t p = 0; p < P; ++p) plan.mutable_pipelines(static_cast<int>(p))->set_num_micro_batches((*split)[p]);
      }
    }
    std::string what = Describe(plan);
    best_.Consider(std::move(plan), what);
  }

  // "2 pipelines: [h20 TP4 ×2 (7+7), a100 TP4 ×2 (23+23)] × 32 micro-batches of 1, ..." in short form.
  std::string Describe(const proto::Plan& plan) const {
    std::string out = std::to_string(plan.pipelines_size()) + " pipeline(s), ZeRO-" + std::to_string(plan.zero_stage()) + ":";
    for (const auto& pipe : plan.pipelines()) {
      out += " [";
      for (int s = 0; s < pipe.stages_size(); ++s) {
        const auto& st = pipe.stages(s);
        out += (s ? " → " : "") + problem_.cluster.device(st.devices(0)).gpu->name + " TP" +
               std::to_string(models::TpDegree(st)) + " L" + std::to_string(st.layer_begin()) + "-" +
               std::to_string(st.layer_end() - 1);
      }
      out += "] " + std::to_string(pipe.num_micro_batches()) + "×bs" + std::to_string(pipe.micro_batch_size());
    }
    return out;
  }

  const PlanningProblem& problem_;
  const Options& options_;
  AnalyticCostModel cost_;
  BestPlan best_;
  const uint32_t blocks_;
  const uint64_t batch_;
  const proto::Recompute rc_;
  std::vector<GpuType> types_;
  uint64_t tp_combinations_ = 0, shapes_ = 0;
};

class HetuPlanner : public PlannerWithOptions<Options> {
 public:
  std::string name() const override { return "hetu"; }
  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    Search search(problem, options_);
    return search.Run();
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<HetuPlanner>();
}

}  // namespace hetsim::planners::hetu
