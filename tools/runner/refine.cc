#include "tools/runner/refine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <cstdio>
#include <utility>

namespace hetsim::runner {
namespace {

constexpr double kTieTolerance = 1e-6;

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g s", s);
  return buf;
}

std::string Name(uint32_t rank) { return rank == 0 ? "the planner's pick" : "runner-up " + std::to_string(rank); }

std::string Describe(const RefinedCandidate& c) {
  std::string s = Name(c.rank) + " (its cost " + (c.cost_s > 0 ? Seconds(c.cost_s) : std::string("not given")) + "): ";
  if (!c.error.empty()) return s + "simulation failed: " + c.error.substr(0, 160);
  if (c.ruled_out) return s + "lower bound " + Seconds(c.lower_bound_s) + ", no faster than the best simulated: not simulated";
  s += "simulates " + Seconds(c.simulated_s);
  if (c.oom) s += ", out of memory in the simulator (skipped)";
  return s;
}

}  // namespace

Result<planners::PlannerResult> PlanOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                           const RefineOptions& options, RefineOutcome* outcome) {
  planners::PlanningProblem asked = problem;
  const uint32_t k = options.k != kAutoRefine             ? options.k
                     : planner.name() == "exhaustive" ? kDefaultExhaustiveRefine
                                                      : kDefaultRefine;
  asked.alternatives = k > 1 ? k - 1 : 0;
  HETSIM_ASSIGN_OR_RETURN(planners::PlannerResult result, planners::RunPlanner(planner, asked));
  RefineOutcome local;
  RefineOutcome& out = outcome ? *outcome : local;
  out = RefineOutcome{};
  out.k = k;
  if (k == 0) {
    result.alternatives.clear();
    return result;
  }

  // The candidates are simulated with the compute model the planner was given, so that a plan the
  // planner ranked on measured profiles is judged on the same profiles.
  sim::SimOptions so = options.sim;
  so.record_timeline = false;
  so.timeline_devices.clear();
  so.progress = nullptr;
  so.compute = problem.compute;
  so.profiles = problem.profiles;
  const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
  const auto start = std::chrono::steady_clock::now();
  const size_t n = 1 + result.alternatives.size();
  // The lower bound is a bound of the balanced fidelity's simulation (planners/lowering_cost.h).
  const sim::Fidelity balanced = sim::Fidelity::Balanced();
  const bool bounded = so.fidelity.collectives == balanced.collectives && so.fidelity.tp == balanced.tp &&
                       so.compute_jitter_cv == 0;
  const planners::AnalyticCostModel cost(problem);
  double fastest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) {
    const proto::Plan& plan = i == 0 ? result.plan : result.alternatives[i - 1].plan;
    RefinedCandidate c;
    c.rank = static_cast<uint32_t>(i);
    c.cost_s = i == 0 ? result.cost_s : result.alternatives[i - 1].cost_s;
    if (bounded && i > 0) {
      c.lower_bound_s = cost.LowerBoundSeconds(plan);
      if (c.lower_bound_s >= fastest * (1 - kTieTolerance)) {
        c.ruled_out = true;
        out.candidates.push_back(std::move(c));
        continue;
      }
    }
    auto sim = sim::SimulateIteration(plan, ctx, so);
    if (!sim.ok()) {
      c.error = sim.status().message();
    } else {
      c.simulated_s = sim->report.iteration_time_s();
      c.oom = sim->report.any_oom();
      if (!c.oom) fastest = std::min(fastest, c.simulated_s);
    }
    out.candidates.push_back(std::move(c));
  }
  out.sim_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The fastest that simulated and fits; ties keep the planner's order.
  int best = -1;
  for (size_t i = 0; i < n; ++i) {
    const RefinedCandidate& c = out.candidates[i];
    if (!c.error.empty() || c.oom || c.ruled_out) continue;
    // A runner-up must be faster by more than rounding (equivalent plans simulate equal up to 1e-12).
    if (best < 0 || c.simulated_s < out.candidates[static_cast<size_t>(best)].simulated_s * (1 - kTieTolerance)) {
      best = static_cast<int>(i);
    }
  }
  size_t ruled_out = 0;
  for (const auto& c : out.candidates) ruled_out += c.ruled_out ? 1 : 0;
  const size_t simulated = n - ruled_out;
  const std::string head = "twin check (--refine " + std::to_string(k) + "): " + std::to_string(simulated) +
                           " candidate" + (simulated == 1 ? "" : "s") + " simulated in " + Seconds(out.sim_wall_s) +
                           (ruled_out > 0 ? ", " + std::to_string(ruled_out) + " ruled out by the lower bound" : "") +
                           "; ";
  auto& notes = result.stats.notes;
  const RefinedCandidate& pick = out.candidates[0];
  if (best < 0) {
    notes.push_back(head + "none simulated without running out of memory or failing; the planner's pick is returned");
  } else if (best == 0) {
    notes.push_back(head + "the planner's pick is the fastest (" + Seconds(pick.simulated_s) + ")");
  } else {
    const RefinedCandidate& c = out.candidates[static_cast<size_t>(best)];
    char pct[64];
    std::snprintf(pct, sizeof pct, "%.1f%%", pick.error.empty() && !pick.oom && pick.simulated_s > 0
                                                 ? 100.0 * (pick.simulated_s - c.simulated_s) / pick.simulated_s
                                                 : 0.0);
    notes.push_back(head + Name(c.rank) + " simulates " + Seconds(c.simulated_s) + " and is returned instead of " +
                    "the planner's pick (" + (pick.error.empty() ? Seconds(pick.simulated_s) : std::string("failed")) +
                    (pick.oom ? ", out of memory" : "") + "): " + pct + " faster in the simulator");
  }
  for (const auto& c : out.candidates) notes.push_back("  " + Describe(c));
  if (best > 0) {
    out.chosen = static_cast<uint32_t>(best);
    planners::RankedPlan& alt = result.alternatives[static_cast<size_t>(best) - 1];
    std::swap(result.plan, alt.plan);
    result.cost_s = alt.cost_s;
    result.estimate = planners::AnalyticCostModel(problem).Estimate(result.plan, /*with_memory=*/true);
  }
  result.alternatives.clear();
  return result;
}

}  // namespace hetsim::runner
