// The `exhaustive` planner: runs the exact search (search_internal.h) under the closed form, re-ranks its
// best plans by the played estimate, and for the proof of the simulator's optimum (kEveryCandidate) runs it
// again in the simulator-bound mode and assembles the proof list.
#include "planners/exhaustive/exhaustive.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "models/plan.h"
#include "planners/exhaustive/search_internal.h"
#include "planners/proto/exhaustive.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::exhaustive {
namespace {

// Runners-up of the top list kept first when the proof search stops unproven (PlanOnTwin's K − 1 for an
// explicit K of 16).
constexpr size_t kUnprovenTopList = 15;

std::string Seconds(std::chrono::steady_clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", std::chrono::duration<double>(d).count());
  return buf;
}

// How many of the closed form's best plans are re-ranked by the played estimate when runners-up are asked for.
constexpr uint32_t kRerankPool = 64;

// Orders the pick and its runners-up by the played estimate (stable: the closed form's order breaks ties),
// keeps problem.alternatives runners-up, and says where the closed form's optimum went.
void Rerank(const PlanningProblem& problem, PlannerResult* result) {
  const AnalyticCostModel cost(problem);
  std::vector<RankedPlan> all;
  all.push_back({std::move(result->plan), 0});
  for (auto& alt : result->alternatives) all.push_back({std::move(alt.plan), 0});
  const size_t pool = all.size();
  // A plan whose lowering cannot be played (its operations wait on each other in a cycle: ZeRO-3 gathers of
  // pipelines of unlike shapes) would not run in the simulator either: it goes last.
  std::vector<char> playable(pool);
  for (size_t i = 0; i < pool; ++i) {
    const PlanEstimate e = cost.Estimate(all[i].plan, /*with_memory=*/false);
    all[i].cost_s = e.iteration_s;
    playable[i] = e.played;
  }
  std::vector<size_t> order(pool);
  for (size_t i = 0; i < pool; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (playable[a] != playable[b]) return playable[a] > playable[b];
    return all[a].cost_s < all[b].cost_s;
  });
  const size_t closed_form_best_at = static_cast<size_t>(std::find(order.begin(), order.end(), 0) - order.begin());
  result->plan = std::move(all[order[0]].plan);
  result->cost_s = all[order[0]].cost_s;
  result->alternatives.clear();
  for (size_t i = 1; i < pool && result->alternatives.size() < problem.alternatives; ++i) {
    result->alternatives.push_back(std::move(all[order[i]]));
  }
  result->stats.notes.push_back(
      "the closed form's " + std::to_string(pool) + " best plans re-ranked by the played lowering (the estimate "
      "that prices what the simulator plays); the closed form's optimum ranks " +
      std::to_string(closed_form_best_at + 1) + " there");
}

class ExhaustivePlanner : public PlannerWithOptions<proto::ExhaustiveOptions> {
 public:
  std::string name() const override { return "exhaustive"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const uint32_t limit = options_.max_devices() > 0 ? options_.max_devices() : kDefaultMaxDevices;
    if (problem.cluster.num_devices() > limit) {
      // Asked for the proof with other planners' candidates (`hetsim plan --planner exhaustive`), beyond the
      // exact range it returns the best of them and bounds the space from below.
      if (problem.alternatives == kEveryCandidate && !problem.seeds.empty()) return BeyondRange(problem, limit);
      return Status::Invalid("exhaustive: cluster '" + problem.cluster.name() + "' has " +
                             std::to_string(problem.cluster.num_devices()) + " GPUs; the exact search handles up to " +
                             std::to_string(limit) + " (option max_devices raises the limit, at your own peril; "
                             "`hetsim plan --planner exhaustive` bounds the space from below beyond it)");
    }
    PlannerResult result;
    // Asked for runners-up (the simulator-checked choice), the search keeps a pool of the closed form's
    // best plans and the pool is re-ranked by the played lowering (Estimate), the estimate that prices
    // what the simulator plays: the closed form's bounds make the search exact and fast, the played
    // estimate orders what the simulator will then check.
    const uint32_t pool = problem.alternatives == 0 ? 0 : std::max(std::min(problem.alternatives, kRerankPool - 1),
                                                                    kRerankPool - 1);
    const auto start = std::chrono::steady_clock::now();
    Search search(problem, options_, result.stats, pool);
    const bool proving = problem.alternatives == kEveryCandidate;
    const double warm_bar = proving ? WarmBar(problem) : kInf;
    if (warm_bar < kInf) {
      search.SetWarmBar(warm_bar);
      char line[200];
      std::snprintf(line, sizeof line,
                    "closed form warm-started by the other planners' candidates: only plans under %.4g s (the best "
                    "candidate's closed form) are searched for",
                    warm_bar);
      result.stats.notes.push_back(line);
    }
    search.Run();
    result.stats.notes.push_back("wall time of the search under the closed form: " +
                                 Seconds(std::chrono::steady_clock::now() - start));
    if (search.found()) {
      search.MoveInto(&result);
      if (problem.alternatives > 0) Rerank(problem, &result);
    } else if (warm_bar < kInf) {
      // No plan of the space beats the best candidate under the closed form: the proof starts from the
      // candidates (Prove makes the best by the played estimate the incumbent).
      result.stats.notes.push_back("no plan of the space beats the other planners' best candidate under the closed "
                                   "form; the proof starts from the candidates");
    } else {
      if (!search.misses().empty()) return search.misses().ToStatus(name(), problem, result.stats);
      return NothingFound(name(), problem, result.stats, "");
    }
    if (proving) Prove(problem, &result);
    return result;
  }

 private:
  // The proof list of the simulator's optimum (docs/planners.md, "exhaustive"): the closed form's best
  // by the played estimate is the incumbent; a second search with bounds of the simulated iteration keeps
  // every plan that could simulate below the threshold U, each with its lower bound, for PlanOnTwin to
  // simulate in that order.
  // The threshold of a plan: the sound upper bound of its (unfolded) simulation where it is the smaller; else
  // its played estimate with the proof margin, which PlanOnTwin checks against the simulated times.
  double ThresholdOf(const AnalyticCostModel& cost, const proto::Plan& plan, double estimate_s) const {
    const double margin = options_.proof_margin() > 0 ? options_.proof_margin() : 0.05;
    PlayOptions upper;
    upper.pricing = Pricing::kUpperBound;
    upper.fold = false;
    double t = estimate_s * (1 + margin);
    if (auto ub = cost.Play(plan, upper); ub.ok()) t = std::min(t, ub->iteration_s);
    return t;
  }

  // Other planners' candidates (PlanningProblem::seeds) that validate, play and fit, each with its played
  // estimate and lower bound, by increasing estimate; *threshold lowered to the least of theirs.
  std::vector<RankedPlan> Seeds(const PlanningProblem& problem, const AnalyticCostModel& cost,
                                double* threshold) const {
    std::vector<RankedPlan> seeds;
    const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
    for (const proto::Plan& s : problem.seeds) {
      if (!models::ValidatePlan(s, ctx, "seed").ok()) continue;
      const PlanEstimate e = cost.Estimate(s, /*with_memory=*/true);
      if (!e.played || e.oom) continue;
      *threshold = std::min(*threshold, ThresholdOf(cost, s, e.iteration_s));
      seeds.push_back({s, e.iteration_s, cost.LowerBoundSeconds(s), s.planner().empty() ? "a seed" : s.planner()});
    }
    std::stable_sort(seeds.begin(), seeds.end(),
                     [](const RankedPlan& a, const RankedPlan& b) { return a.cost_s < b.cost_s; });
    return seeds;
  }

  // The space's lower bound where the proof search did not cover it: probe searches in the simulator-bound
  // mode with a fixed cut T, bisecting between `floor_s` (a bound of every plan) and `upper_s` (a cut the
  // proof could not clear). A probe that covers the space proves every plan's bound ≥ T, or finds the least
  // bound (the least it kept, when it kept any). Each probe has a tenth of the proof's counted budgets.
  double ProbeSpace(const PlanningProblem& problem, double floor_s, double upper_s,
                    std::vector<std::string>* notes) const {
    const uint32_t probes = options_.bound_probes() > 0 ? options_.bound_probes() : 4;
    proto::ExhaustiveOptions probe = options_;
    probe.set_max_proof_nodes((options_.max_proof_nodes() > 0 ? options_.max_proof_nodes() : 20000000) / 10);
    probe.set_proof_time_limit_s((options_.proof_time_limit_s() > 0 ? options_.proof_time_limit_s() : 300) / 10);
    if (probe.max_proof_structures() == 0) probe.set_max_proof_structures(100000);
    const uint64_t plays = (options_.max_bound_plays() > 0 ? options_.max_bound_plays() : 200000) / 10;
    double lo = floor_s, hi = upper_s;
    std::string tried;
    bool exact = false;
    for (uint32_t run = 0; run < probes && hi > lo * (1 + 1e-3); ++run) {
      SimBoundMode mode;
      mode.threshold_s = (lo + hi) / 2;
      mode.max_leaves = plays;
      const ProofOutcome o = RunProofSearch(problem, probe, mode);
      char line[96];
      const bool covered = !o.stopped && o.floor_above_bound == 0;
      std::snprintf(line, sizeof line, "%s%.4g s %s", tried.empty() ? "" : ", ", mode.threshold_s,
                    covered ? "covered" : "stopped");
      tried += line;
      if (!covered) {
        hi = mode.threshold_s;
        continue;
      }
      double least = mode.threshold_s;
      for (const BoundedPlan& k : o.kept) least = std::min(least, k.lower_bound_s);
      lo = std::max(lo, least);
      if (!o.kept.empty()) {
        exact = true;  // every plan not kept has a bound ≥ T: the least kept is the least over the space
        break;
      }
    }
    char line[400];
    std::snprintf(line, sizeof line,
                  "space bound: no plan of exhaustive's space simulates faster than %.4g s (%s; compute floor "
                  "%.4g s; probe cuts: %s)",
                  lo, exact ? "the least lower bound over the space" : "the highest cut a probe search covered",
                  floor_s, tried.empty() ? "none" : tried.c_str());
    notes->push_back(line);
    return lo;
  }

  // The closed form's warm start: the least closed-form time of the other planners' candidates that validate
  // and fit (+inf without any).
  double WarmBar(const PlanningProblem& problem) const {
    double bar = kInf;
    const AnalyticCostModel cost(problem);
    const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
    for (const proto::Plan& s : problem.seeds) {
      if (!models::ValidatePlan(s, ctx, "seed").ok()) continue;
      const PlanEstimate e = cost.ClosedFormEstimate(s, /*with_memory=*/true);
      if (e.oom || !(e.iteration_s > 0)) continue;
      bar = std::min(bar, e.iteration_s);
    }
    return bar;
  }

  double ComputeFloor(const PlanningProblem& problem) const {
    SearchStats stats;
    SimBoundMode mode;
    const Search search(problem, options_, stats, 0, &mode);
    return search.RateFloor();
  }

  // Beyond max_devices: the best of the other planners' candidates by the played estimate, the rest as
  // runners-up (PlanOnTwin simulates them by their lower bounds), and the space's lower bound.
  Result<PlannerResult> BeyondRange(const PlanningProblem& problem, uint32_t limit) const {
    PlannerResult result;
    const AnalyticCostModel cost(problem);
    double threshold = kInf;
    std::vector<RankedPlan> seeds = Seeds(problem, cost, &threshold);
    if (seeds.empty()) {
      return Status::Invalid("exhaustive: cluster '" + problem.cluster.name() + "' has " +
                             std::to_string(problem.cluster.num_devices()) + " GPUs, beyond the exact search's " +
                             std::to_string(limit) + ", and no other planner's candidate fits to start from");
    }
    result.plan = std::move(seeds.front().plan);
    result.cost_s = seeds.front().cost_s;
    result.found_by = seeds.front().found_by;
    for (size_t i = 1; i < seeds.size(); ++i) result.alternatives.push_back(std::move(seeds[i]));
    result.stats.claims_optimal = false;
    result.stats.notes.push_back("beyond the exact search's " + std::to_string(limit) +
                                 " GPUs: the other planners' candidates are checked on the twin, and the space is "
                                 "bounded from below");
    const auto start = std::chrono::steady_clock::now();
    result.space_lower_bound_s = ProbeSpace(problem, ComputeFloor(problem), threshold, &result.stats.notes);
    result.stats.notes.push_back("wall time of the probe searches: " + Seconds(std::chrono::steady_clock::now() - start));
    return result;
  }

  // The fastest simulated time of the incumbent and the best few seeds by the played estimate: no plan that
  // cannot simulate below it can be the optimum, a cut usually tighter than the estimate with its margin.
  double SimulatedCut(const PlanningProblem& problem, PlannerResult& result,
                      const std::vector<RankedPlan>& seeds) const {
    constexpr size_t kSimulatedSeeds = 3;
    double cut = kInf;
    std::string from;
    auto consider = [&](const proto::Plan& plan, const std::string& who) {
      const Result<double> t = problem.simulate(plan);
      if (t.ok() && *t > 0 && *t < cut) {
        cut = *t;
        from = who;
      }
    };
    consider(result.plan, result.found_by.empty() ? "the incumbent" : result.found_by + "'s candidate");
    for (size_t i = 0; i < seeds.size() && i < kSimulatedSeeds; ++i) consider(seeds[i].plan, seeds[i].found_by);
    if (cut < kInf) {
      char line[200];
      std::snprintf(line, sizeof line, "proof: cut at %.4g s, the simulated time of %s (the fastest of the incumbent "
                    "and the %zu best candidates simulated first)", cut, from.c_str(),
                    std::min(seeds.size(), kSimulatedSeeds));
      result.stats.notes.push_back(line);
    }
    return cut;
  }

  void Prove(const PlanningProblem& problem, PlannerResult* result) const {
    const AnalyticCostModel cost(problem);
    // The closed form's own plan sets the first threshold; when it found nothing better than the other
    // planners' candidates (no plan), they alone do. (An empty plan's "threshold" was 0, which cut the whole
    // space and claimed a proof: "no plan simulates faster than 0 s".)
    double threshold = result->plan.pipelines_size() > 0 ? ThresholdOf(cost, result->plan, result->cost_s) : kInf;
    // Other planners' candidates (PlanningProblem::seeds), a warm start: any plan's threshold is one the
    // optimum is below, so the least over them all cuts the most. The best seed by the played estimate
    // becomes the incumbent (simulated first) when it beats the search's own.
    std::vector<RankedPlan> seeds = Seeds(problem, cost, &threshold);
    if (result->plan.pipelines_size() == 0) {
      // The closed form found nothing better than the candidates (MakePlan): the best of them is the incumbent.
      if (seeds.empty()) return;
      result->plan = std::move(seeds.front().plan);
      result->cost_s = seeds.front().cost_s;
      result->found_by = seeds.front().found_by;
      seeds.erase(seeds.begin());
      result->stats.notes.push_back("proof: the incumbent is " + result->found_by + "'s candidate (played estimate " +
                                    std::to_string(result->cost_s) + " s)");
    } else if (!seeds.empty() && seeds.front().cost_s < result->cost_s) {
      RankedPlan own{std::move(result->plan), result->cost_s, cost.LowerBoundSeconds(result->plan)};
      result->plan = std::move(seeds.front().plan);
      result->cost_s = seeds.front().cost_s;
      result->found_by = seeds.front().found_by;
      result->stats.notes.push_back("proof: the incumbent is " + seeds.front().found_by +
                                    "'s candidate (played estimate " + std::to_string(result->cost_s) +
                                    " s), faster than the search's own");
      seeds.front() = std::move(own);
    }
    if (problem.simulate) threshold = std::min(threshold, SimulatedCut(problem, *result, seeds));
    // Without bounds (testing), nothing is cut: every plan of the space is returned.
    if (options_.disable_bounds()) threshold = kInf;
    SimBoundMode mode;
    mode.threshold_s = threshold;
    mode.max_leaves = options_.max_bound_plays() > 0 ? options_.max_bound_plays() : 200000;
    const auto start = std::chrono::steady_clock::now();
    ProofOutcome search = RunProofSearch(problem, options_, mode);
    result->stats.notes.push_back("wall time of the search over the bounds of the simulated iteration: " +
                                 Seconds(std::chrono::steady_clock::now() - start));
    std::vector<BoundedPlan>& kept = search.kept;
    std::stable_sort(kept.begin(), kept.end(),
                     [](const BoundedPlan& a, const BoundedPlan& b) { return a.lower_bound_s < b.lower_bound_s; });
    const std::string pick = result->plan.SerializeAsString();
    const bool complete = !search.stopped && search.floor_above_bound == 0;
    const double least_kept = kept.empty() ? kInf : kept.front().lower_bound_s;
    // Unproven, the top list's runners-up (by the played estimate) come first, as with an explicit K.
    std::vector<RankedPlan> top = std::move(result->alternatives);
    if (complete) top.clear();
    if (top.size() > kUnprovenTopList) top.resize(kUnprovenTopList);
    for (RankedPlan& t : top) t.lower_bound_s = cost.LowerBoundSeconds(t.plan);
    result->alternatives = std::move(top);
    // Seeds come right after the top list; proven, everything is ordered by its bound.
    const size_t seeded = seeds.size();
    for (RankedPlan& s : seeds) result->alternatives.push_back(std::move(s));
    for (BoundedPlan& b : kept) {
      if (b.plan.SerializeAsString() == pick) continue;
      result->alternatives.push_back({std::move(b.plan), 0, b.lower_bound_s});
    }
    if (complete) {
      std::stable_sort(result->alternatives.begin(), result->alternatives.end(),
                       [](const RankedPlan& a, const RankedPlan& b) { return a.lower_bound_s < b.lower_bound_s; });
    }
    result->complete_below_s = complete ? threshold : 0;
    char line[320];
    std::snprintf(line, sizeof line,
                  "proof search (bounds of the simulated iteration, cut at %.4g s): %llu plans played at the "
                  "lower-bound pricing, %zu below the cut (and %zu other planners' candidates)%s",
                  threshold, static_cast<unsigned long long>(search.plays),
                  result->alternatives.size() - seeded, seeded,
                  complete ? "; every other plan of the space is ruled out" : "");
    result->stats.notes.push_back(line);
    if (search.stopped) result->stats.notes.push_back("proof search: " + search.stop_reason);
    std::snprintf(line, sizeof line,
                  "proof search: %llu structures (pipelines × stages × device groups) covered, %llu layer-split "
                  "nodes explored (%u threads; the result does not depend on them)",
                  static_cast<unsigned long long>(search.structures), static_cast<unsigned long long>(search.nodes),
                  search.threads);
    result->stats.notes.push_back(line);
    const auto count = [&](uint64_t n, const char* what) {
      if (n > 0) result->stats.notes.push_back("proof search: " + std::to_string(n) + what);
    };
    count(search.out_of_memory, " layer choices out of memory");
    count(search.network_pruned, " plans cut by the traffic through a node's NICs");
    count(search.schedule_pruned, " pipeline layer splits cut by their 1F1B schedule played at the stage level");
    count(search.floor_above_bound, " plans whose stage floor exceeds their played lower bound (a bug): not proven");
    // The space's lower bound: covered, every plan was kept with its bound or cut at a bound ≥ the threshold.
    if (complete) {
      result->space_lower_bound_s = std::min(threshold, least_kept);
      std::snprintf(line, sizeof line, "space bound: no plan of exhaustive's space simulates faster than %.4g s (%s)",
                    result->space_lower_bound_s,
                    least_kept < threshold ? "the least lower bound over the space"
                                           : "every plan's lower bound is at least the proof's cut");
      result->stats.notes.push_back(line);
    } else if (search.floor_above_bound == 0) {
      const auto probes_start = std::chrono::steady_clock::now();
      result->space_lower_bound_s = ProbeSpace(problem, ComputeFloor(problem), threshold, &result->stats.notes);
      result->stats.notes.push_back("wall time of the probe searches: " +
                                    Seconds(std::chrono::steady_clock::now() - probes_start));
    }
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<ExhaustivePlanner>();
}

}  // namespace hetsim::planners::exhaustive
