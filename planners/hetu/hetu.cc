// The `hetu` planner (planners/hetu/hetu.h): the search's driver — step 1 over every per-type TP
// combination, step 2 over the candidates in order of their bounds until a bound passes the played pool's
// worst — and the result with its notes, re-ranked by the played estimate.
#include "planners/hetu/hetu.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "planners/hetu/search_internal.h"

namespace hetsim::planners::hetu {
namespace {

std::string Fmt(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace

Search::Search(const PlanningProblem& problem, const Options& options)
    : problem_(problem), options_(options), cost_(problem), memory_(problem),
      blocks_(problem.model.num_blocks()), batch_(problem.training.global_batch_size()),
      rc_(problem.training.recompute()), zero_(options.has_zero_stage() ? options.zero_stage() : 1),
      sequence_parallel_(options.has_sequence_parallel() ? options.sequence_parallel() : true) {
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
        stats_.Reject("TP degree larger than the type's largest node");
      } else if (!ModelAllowsTp(problem.model, t)) {
        stats_.Reject("TP degree the model's heads do not allow");
      } else {
        ty.tp_choices.push_back(t);
      }
    }
  }
  // Two types of equal per-block time keep their dealing order inside a pipeline (the stage sort below
  // ties them), which the classes do not record.
  for (size_t a = 0; a < types_.size(); ++a) {
    for (size_t b = a + 1; b < types_.size(); ++b) equal_type_speeds_ |= types_[a].block_s == types_[b].block_s;
  }
}

Result<PlannerResult> Search::Run() {
  for (const auto& ty : types_) {
    if (ty.tp_choices.empty()) {
      return Status::Invalid("hetu: no TP degree in tp_degrees fits the " + ty.gpu->name + " nodes (largest " +
                             std::to_string(ty.largest_node) + " GPUs) and the model's heads; allow a smaller degree");
    }
  }
  static constexpr uint32_t kDefaultSizes[] = {1, 2, 4};
  const auto& requested = options_.micro_batch_sizes();
  bs_ = requested.empty() ? std::vector<uint32_t>(std::begin(kDefaultSizes), std::end(kDefaultSizes))
                          : std::vector<uint32_t>(requested.begin(), requested.end());
  // Step 1: every candidate of the enumeration with a lower bound of its iteration time (or rejected).
  std::vector<size_t> pick(types_.size(), 0);
  while (true) {
    std::vector<uint32_t> tps;
    for (size_t k = 0; k < types_.size(); ++k) tps.push_back(types_[k].tp_choices[pick[k]]);
    Enumerate(std::move(tps));
    size_t k = 0;
    while (k < types_.size() && ++pick[k] == types_[k].tp_choices.size()) pick[k++] = 0;
    if (k == types_.size()) break;
  }
  // Step 2: candidates in order of their bound, each built and costed, until the bound passes the best
  // plan's time. A skipped candidate is predicted slower than the best (its bound is), so the result is
  // the enumeration's best plan; ties go to the earlier candidate of the enumeration, as without bounds.
  std::stable_sort(pending_.begin(), pending_.end(),
                   [](const Pending& a, const Pending& b) { return a.bound < b.bound; });
  uint64_t pruned = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& c = pending_[i];
    // Past the played pool's worst (the best plan's time when it is one), no candidate can enter it.
    if (!options_.disable_bounds() && pool_.size() >= played_pool_ &&
        c.bound > pool_[played_pool_ - 1].t * (1 + 1e-9)) {
      pruned = pending_.size() - i;
      break;
    }
    Evaluate(c);
  }
  if (pool_.empty()) {
    if (!misses_.empty()) return misses_.ToStatus("hetu", problem_, stats_);
    return NothingFound("hetu", problem_, stats_,
                        "allow more TP degrees or pipeline counts, or a smaller micro-batch size");
  }
  PlannerResult result;
  const double closed_form_best_s = pool_.front().t;
  result.plan = std::move(pool_.front().plan);
  for (size_t i = 1; i < pool_.size(); ++i) result.alternatives.push_back({std::move(pool_[i].plan), pool_[i].t});
  result.stats = std::move(stats_);
  result.stats.notes.push_back(std::to_string(tp_combinations_) + " per-type TP combinations, " +
                               std::to_string(shapes_) + " pipeline layouts, " +
                               std::to_string(result.stats.candidates_evaluated) + " candidates costed");
  if (!options_.disable_bounds()) {
    result.stats.notes.push_back(std::to_string(pruned) + " of " + std::to_string(pending_.size()) +
                                 " candidates skipped: their lower bound exceeds the chosen plan's time");
  }
  // The pool re-ranked by the played estimate; the runners-up are the simulator-checked choice's.
  result.cost_s = closed_form_best_s;
  RerankByPlayedEstimate(cost_, static_cast<uint32_t>(played_pool_), problem_.alternatives, &result);
  result.stats.notes.push_back("chosen: " + Describe(result.plan) + " (predicted " + Fmt("%.4f", result.cost_s) +
                               " s per iteration; the closed form's best " + Fmt("%.4f", closed_form_best_s) +
                               " s)");
  return result;
}

namespace {

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
