// Step 2 of the Hetu planner's search (Search::Run; hetu.h, items 4-5): a candidate built into a plan — the groups
// dealt and ordered, each pipeline shape's layers balanced on its stages under memory (BalancedSplit), the
// micro-batches split over the pipelines (MinMaxSplit) — its memory checked on the real devices, costed by the closed
// form and kept in the pool of the best; and the short description of a plan in the search's notes.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/plan.h"
#include "planners/hetu/search_internal.h"

namespace hetsim::planners::hetu {

void Search::Evaluate(const Pending& p) {
  const Combination& c = combinations_[p.combination];
  auto pipes = Deal(c, p.pipelines);
  for (auto& pipe : pipes) OrderStages(c, p.slowest_first, &pipe);
  std::optional<proto::Plan> plan = Candidate(c.groups, pipes, p.micro_batch);
  if (!plan) return;
  std::string what = Describe(*plan);
  Consider(std::move(*plan), what, p.seq);
}

std::optional<proto::Plan> Search::Candidate(const std::vector<Group>& groups,
                                             const std::vector<std::vector<size_t>>& pipes, uint32_t b) {
  const uint32_t M = static_cast<uint32_t>(batch_ / b);
  const uint32_t P = static_cast<uint32_t>(pipes.size());
  const uint32_t L = problem_.model.num_layers();
  proto::Plan plan;
  plan.set_zero_stage(zero_);
  plan.set_sequence_parallel(sequence_parallel_);
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
      const auto layers = BalancedSplit(skeleton, problem_, cost_, memory_);
      if (!layers) {
        stats_.Reject("no layer split fits in memory");
        return std::nullopt;
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
  if (!FitMoePlan(&plan, problem_.model)) {
    stats_.Reject(kUnlikeMoeTp);
    return std::nullopt;
  }
  if (!options_.even_micro_batches() && P > 1) {
    // T_p(m) = (m − 1)·max_s t_s + Σ_s t_s, from the closed form's stage times at this layer split (the
    // same formula; see Consider for why the closed form).
    const PlanEstimate e = cost_.ClosedFormEstimate(plan, /*with_memory=*/false);
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
  return plan;
}

void Search::Consider(proto::Plan plan, const std::string& what, uint64_t seq) {
  const MemoryCheck mem = CheckMemory(plan, problem_, memory_);
  if (!mem.fits) {
    stats_.Reject("out of memory");
    misses_.Offer(what, mem.need_gib, mem.capacity_gib,
                  std::to_string(mem.device) + " (" + problem_.cluster.device(mem.device).gpu->name + ")");
    return;
  }
  ++stats_.candidates_evaluated;
  // Every candidate is ranked by hetsim's closed form (AnalyticCostModel::ClosedFormEstimate; §A.3's
  // "cost model"), the model the search's lower bound (Bound) bounds, so skipping by the bound keeps the
  // enumeration's best plans. The pool of the closed form's best is re-ranked by the played estimate in
  // Run (Estimate, the lowering played: milliseconds per candidate at 1,024 GPUs, too slow for the
  // thousands costed there; docs/planner-scaling.md, "Played or closed form").
  const double t = cost_.ClosedFormEstimate(plan, /*with_memory=*/false).iteration_s;
  // The pool: the best by (time, enumeration order), distinct plans (an equal plan keeps the earlier).
  auto before = [](double ta, uint64_t sa, double tb, uint64_t sb) { return ta < tb || (ta == tb && sa < sb); };
  if (pool_.size() == pool_size_ && !before(t, seq, pool_.back().t, pool_.back().seq)) return;
  std::string key;
  plan.SerializeToString(&key);
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (it->key != key) continue;
    if (!before(t, seq, it->t, it->seq)) return;
    pool_.erase(it);
    break;
  }
  const auto at = std::find_if(pool_.begin(), pool_.end(), [&](const Kept& k) { return before(t, seq, k.t, k.seq); });
  pool_.insert(at, Kept{t, seq, std::move(plan), std::move(key)});
  if (pool_.size() > pool_size_) pool_.pop_back();
}

std::string Search::Describe(const proto::Plan& plan) const {
  std::string out = std::to_string(plan.pipelines_size()) + " pipeline(s), ZeRO-" + std::to_string(plan.zero_stage()) + ":";
  std::string last;
  uint32_t repeat = 0;
  auto flush = [&]() {
    if (repeat == 0) return;
    out += " " + last + (repeat > 1 ? " ×" + std::to_string(repeat) : "");
  };
  for (const auto& pipe : plan.pipelines()) {
    std::string one = "[";
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      one += (s ? " → " : "") + problem_.cluster.device(st.devices(0)).gpu->name + " TP" +
             std::to_string(models::TpDegree(st)) + " L" + std::to_string(st.layer_begin()) + "-" +
             std::to_string(st.layer_end() - 1);
    }
    one += "] " + std::to_string(pipe.num_micro_batches()) + "×bs" + std::to_string(pipe.micro_batch_size());
    if (one == last) {
      ++repeat;
      continue;
    }
    flush();
    last = std::move(one);
    repeat = 1;
  }
  flush();
  return out;
}

}  // namespace hetsim::planners::hetu
