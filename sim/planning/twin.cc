#include "sim/planning/twin.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "planners/proto/twin.pb.h"
#include "sim/planning/cpu_clock.h"

namespace hetsim::planning {
namespace {


}  // namespace

Result<planners::PlannerResult> TwinOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                           const RefineOptions& options, RefineOutcome* outcome) {
  const auto* typed = dynamic_cast<const planners::PlannerWithOptions<proto::TwinOptions>*>(&planner);
  if (typed == nullptr) return Status::Internal("TwinOnTwin: the planner named twin is not the twin planner");
  const proto::TwinOptions& o = typed->typed_options();
  const double limit_s = o.time_limit_s() > 0 ? o.time_limit_s() : kDefaultTwinTimeLimitS;
  const uint32_t sims = options.polish > 0              ? options.polish
                        : o.polish_simulations() > 0 ? o.polish_simulations()
                                                     : kDefaultTwinPolishSimulations;
  const uint32_t starts = o.polish_starts() > 0 ? o.polish_starts() : kDefaultTwinPolishStarts;
  const double started = CpuSeconds();

  // 1 and 2: the pool, checked on the simulator.
  RefineOptions check = options;
  check.k = options.k == kAutoRefine ? kEveryPoolCandidate : options.k;
  check.polish = 0;
  // Half the limit for the simulations of the pool (most are ruled out by their bound); the local search
  // has what is left.
  check.check_time_limit_s = limit_s / 2;
  std::vector<proto::Plan> plans;
  check.candidate_plans = &plans;
  RefineOutcome local;
  RefineOutcome& out = outcome ? *outcome : local;
  HETSIM_ASSIGN_OR_RETURN(planners::PlannerResult result, CheckOnTwin(planner, problem, check, &out));
  const double pool_s = result.stats.wall_time_s;
  auto& notes = result.stats.notes;
  if (out.candidates.empty() || plans.size() != out.candidates.size()) return result;

  // 3. The local search from the fastest confirmed candidate, then from the next candidates by what is
  // known of them (a simulated time, else the lower bound that ruled it out): structures the pool ranked
  // lower may polish further than the fastest one.
  std::vector<size_t> order;
  const auto known_s = [&](const RefinedCandidate& c) {
    return !c.ruled_out && !c.not_reached ? c.simulated_s : std::max(c.lower_bound_s, c.cost_s);
  };
  for (size_t i = 0; i < out.candidates.size(); ++i) {
    const RefinedCandidate& c = out.candidates[i];
    if (c.error.empty() && !c.oom && known_s(c) > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return known_s(out.candidates[a]) < known_s(out.candidates[b]); });
  // Distinct structures only: a candidate that differs from an earlier start in its recomputation alone is
  // one the polish reaches from there (the recompute move), so it would spend the budget on the same neighbourhood.
  {
    std::set<std::string> seen;
    std::vector<size_t> distinct;
    for (size_t i : order) {
      proto::Plan shape = plans[i];
      shape.clear_recompute();
      shape.clear_name();
      shape.clear_planner();
      if (seen.insert(shape.SerializeAsString()).second) distinct.push_back(i);
    }
    order = std::move(distinct);
  }
  if (order.size() > starts) order.resize(starts);
  if (order.empty()) return result;
  const sim::SimOptions so = CandidateSimOptions(options.sim, problem);
  const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
  const double checked_s = out.candidates[out.chosen].simulated_s;
  double best_s = checked_s;
  proto::Plan best_plan = result.plan;
  PolishOutcome best_polish;
  bool improved = false, timed_out = false;
  uint32_t used = 0;
  std::vector<std::string> lines;
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const double left_s = limit_s - (CpuSeconds() - started);
    if (used >= sims || left_s <= 0) {
      timed_out = timed_out || left_s <= 0;
      break;
    }
    const RefinedCandidate& from = out.candidates[order[rank]];
    double from_s = from.simulated_s;
    if (from.ruled_out || from.not_reached) {  // a start not simulated by the check: simulated now
      auto r = sim::SimulateIteration(plans[order[rank]], ctx, so);
      ++used;
      if (!r.ok() || r->report.any_oom()) continue;
      from_s = r->report.iteration_time_s();
    }
    if (problem.progress) {
      problem.progress("twin: polishing start " + std::to_string(rank + 1) + " (" +
                       (from.found_by.empty() ? std::string("the pool's pick") : from.found_by) + ", " +
                       Seconds(from_s) + ")");
    }
    PolishOutcome po;
    proto::Plan polished = PolishOnTwin(plans[order[rank]], from_s, problem, so,
                                        {sims > used ? sims - used : 0, left_s}, &po);
    used += po.simulated;
    timed_out = timed_out || po.timed_out;
    char line[300];
    std::snprintf(line, sizeof line, "  start %zu (%s): %s -> %s, %u simulated, %zu changes kept%s", rank + 1,
                  from.found_by.empty() ? "the pool's pick" : from.found_by.c_str(), Seconds(from_s).c_str(),
                  Seconds(po.end_s).c_str(), po.simulated, po.kept.size(), po.timed_out ? ", time limit" : "");
    lines.push_back(line);
    if (po.end_s < best_s * (1 - 1e-6)) {
      best_s = po.end_s;
      best_plan = std::move(polished);
      best_polish = po;
      best_polish.start_s = checked_s;
      improved = true;
      for (auto& k : best_polish.kept) k = "from start " + std::to_string(rank + 1) + ": " + k;
    }
  }
  out.polished = true;
  out.polish_budget = sims;
  out.polish = best_polish;
  out.polish.end_s = best_s;
  out.polish.start_s = checked_s;
  out.polish.timed_out = timed_out;
  char head[400];
  std::snprintf(head, sizeof head,
                "twin's local search (beyond the papers): %zu start%s, %u of %u simulations, %s; %s -> %s (%.1f%% "
                "faster than the fastest confirmed candidate); planning took %s of CPU (pool %s), limit %s",
                lines.size(), lines.size() == 1 ? "" : "s", used, sims,
                timed_out ? "stopped by the time limit (a faster machine may search further)"
                : used >= sims ? "the simulations ran out"
                               : "every start reached a local optimum",
                Seconds(checked_s).c_str(), Seconds(best_s).c_str(), 100.0 * (checked_s - best_s) / checked_s,
                Seconds(CpuSeconds() - started).c_str(), Seconds(pool_s).c_str(), Seconds(limit_s).c_str());
  notes.push_back(head);
  for (auto& l : lines) notes.push_back(std::move(l));
  if (improved) {
    for (const auto& k : best_polish.kept) notes.push_back("    " + k);
    result.plan = std::move(best_plan);
    result.plan.set_planner("twin");
    result.cost_s = 0;
    result.estimate = planners::AnalyticCostModel(problem).Estimate(result.plan, /*with_memory=*/true);
  }
  return result;
}

}  // namespace hetsim::planning
