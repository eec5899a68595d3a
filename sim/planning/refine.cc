#include "sim/planning/refine.h"

#include "planners/exhaustive/exhaustive.h"
#include "sim/planning/cpu_clock.h"
#include "sim/planning/twin.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <string>
#include <cstdio>
#include <utility>

namespace hetsim::planning {
namespace {

constexpr double kTieTolerance = 1e-6;
// Candidates listed in the notes of a proof.
constexpr size_t kListedCandidates = 16;

std::string Name(uint32_t rank) { return rank == 0 ? "the planner's pick" : "runner-up " + std::to_string(rank); }

std::string Describe(const RefinedCandidate& c) {
  std::string s = Name(c.rank) + (c.found_by.empty() ? "" : " (from " + c.found_by + ")") + " (" +
                  (c.cost_s > 0           ? "its cost " + Seconds(c.cost_s)
                   : c.lower_bound_s > 0 ? "lower bound " + Seconds(c.lower_bound_s)
                                         : std::string("its cost not given")) +
                  "): ";
  if (!c.error.empty()) return s + "simulation failed: " + c.error.substr(0, 160);
  if (c.ruled_out) return s + "lower bound " + Seconds(c.lower_bound_s) + ", no faster than the best simulated: not simulated";
  s += "simulates " + Seconds(c.simulated_s);
  if (c.oom) s += ", out of memory in the simulator (skipped)";
  return s;
}

// exhaustive's proof is warm-started with every other planner's candidates (its pick and kSeedCandidates − 1
// runners-up, the plans its `--refine 4` would choose from), so that no planner's simulator-checked choice
// can beat the reference. A planner that finds no plan contributes nothing.
// With polishing on, each planner's polished plan (PlanOnTwin at its default K with the same polish budget) is a
// candidate too: the same inputs polish to the same plan, so none of them can beat the reference either.
std::string SeedWithOtherPlanners(const planners::PlanningProblem& problem, const RefineOptions& options,
                                  std::vector<proto::Plan>* seeds) {
  const auto start = std::chrono::steady_clock::now();
  planners::PlanningProblem asked = problem;
  asked.alternatives = kSeedCandidates - 1;
  asked.seeds.clear();
  asked.progress = nullptr;
  uint32_t planners_used = 0, polished = 0;
  for (const std::string& name : planners::PlannerNames()) {
    if (name == "exhaustive" || name == "twin") continue;
    auto p = planners::CreatePlanner(name);
    if (!p.ok()) continue;
    if (options.polish == 0) {
      auto r = planners::RunPlanner(**p, asked);
      if (!r.ok()) continue;
      ++planners_used;
      seeds->push_back(std::move(r->plan));
      for (auto& alt : r->alternatives) seeds->push_back(std::move(alt.plan));
      continue;
    }
    // One run gives the pick, its runners-up and the polished plan.
    if (problem.progress) problem.progress("exhaustive: polishing " + name + "'s plan for the proof's warm start");
    RefineOptions theirs;
    theirs.k = 1;
    theirs.polish = options.polish;
    theirs.polish_time_limit_s = options.polish_time_limit_s;
    theirs.sim = options.sim;
    theirs.candidate_plans = seeds;
    RefineOutcome out;
    const size_t before = seeds->size();
    auto q = PlanOnTwin(**p, asked, theirs, &out);
    if (seeds->size() > before) ++planners_used;
    if (!q.ok() || !out.polished || out.polish.kept.empty()) continue;
    ++polished;
    seeds->push_back(std::move(q->plan));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return "proof warm start: " + std::to_string(seeds->size()) + " candidates from " + std::to_string(planners_used) +
         " other planners (their picks and runners-up at --refine " + std::to_string(kSeedCandidates) +
         (options.polish > 0 ? ", and " + std::to_string(polished) + " polished plans" : std::string()) + ", " +
         Seconds(wall) + ")";
}

}  // namespace

Result<planners::PlannerResult> PlanOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                           const RefineOptions& options, RefineOutcome* outcome) {
  if (planner.name() == "twin") return TwinOnTwin(planner, problem, options, outcome);
  return CheckOnTwin(planner, problem, options, outcome);
}

sim::SimOptions CandidateSimOptions(const sim::SimOptions& sim, const planners::PlanningProblem& problem) {
  sim::SimOptions so = sim;
  so.record_timeline = false;
  so.timeline_devices.clear();
  so.progress = nullptr;
  so.compute = problem.compute;
  so.profiles = problem.profiles;
  return so;
}

Result<planners::PlannerResult> CheckOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                            const RefineOptions& options, RefineOutcome* outcome) {
  planners::PlanningProblem asked = problem;
  // The lower bound is a bound of the balanced fidelity's simulation (planners/lowering_cost.h).
  const sim::Fidelity balanced = sim::Fidelity::Balanced();
  const bool bounded = options.sim.fidelity.collectives == balanced.collectives &&
                       options.sim.fidelity.tp == balanced.tp && options.sim.compute_jitter_cv == 0;
  // exhaustive's default: the proof over its whole space (its candidates by lower bound, until the bound
  // rules the rest out).
  const bool prove = options.k == kAutoRefine && planner.name() == "exhaustive" && bounded;
  // A named planner's default is its own pick (0); asking for a polish simulates the pick once first.
  uint32_t k = options.k != kAutoRefine             ? options.k
               : planner.name() == "exhaustive" ? kDefaultExhaustiveRefine
               : options.polish > 0             ? 1
                                                : 0;
  asked.alternatives = prove ? planners::exhaustive::kEveryCandidate : k > 1 ? k - 1 : 0;
  const uint32_t polish = k == 0 ? 0 : options.polish;
  std::string seed_note;
  // The candidates are simulated with the compute model the planner was given, so that a plan the
  // planner ranked on measured profiles is judged on the same profiles.
  const sim::SimOptions so = CandidateSimOptions(options.sim, problem);
  const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
  // Simulations by plan (what the check reads of them): the proof's cut simulates its incumbent and best
  // seeds, which the check below then finds here instead of simulating them again.
  struct Simulated {
    std::string error;
    double iteration_s = 0;
    bool oom = false;
  };
  std::map<std::string, Simulated> simulated_plans;
  const auto simulate = [&](const proto::Plan& plan) -> const Simulated& {
    std::string key = plan.SerializeAsString();
    auto it = simulated_plans.find(key);
    if (it != simulated_plans.end()) return it->second;
    Simulated r;
    if (auto sim = sim::SimulateIteration(plan, ctx, so); !sim.ok()) {
      r.error = sim.status().message();
    } else {
      r.iteration_s = sim->report.iteration_time_s();
      r.oom = sim->report.any_oom();
    }
    return simulated_plans.emplace(std::move(key), std::move(r)).first->second;
  };
  if (prove) {
    RefineOptions seeding = options;
    seeding.polish = polish;
    seed_note = SeedWithOtherPlanners(problem, seeding, &asked.seeds);
    asked.simulate = [&](const proto::Plan& plan) -> Result<double> {
      const Simulated& r = simulate(plan);
      if (!r.error.empty()) return Status::Invalid(r.error);
      if (r.oom) return Status::Invalid("out of memory in the simulator");
      return r.iteration_s;
    };
  }
  HETSIM_ASSIGN_OR_RETURN(planners::PlannerResult result, planners::RunPlanner(planner, asked));
  if (!seed_note.empty()) result.stats.notes.insert(result.stats.notes.begin(), seed_note);
  if (prove || options.k == kEveryPoolCandidate) k = static_cast<uint32_t>(1 + result.alternatives.size());
  if (options.candidate_plans) {
    options.candidate_plans->push_back(result.plan);
    for (const auto& alt : result.alternatives) options.candidate_plans->push_back(alt.plan);
  }
  RefineOutcome local;
  RefineOutcome& out = outcome ? *outcome : local;
  out = RefineOutcome{};
  out.k = k;
  out.proof = prove;
  out.polish_budget = polish;
  if (k == 0) {
    result.alternatives.clear();
    return result;
  }

  const auto start = std::chrono::steady_clock::now();
  const size_t n = 1 + result.alternatives.size();
  const planners::AnalyticCostModel cost(problem);
  const uint32_t budget = options.max_proof_simulations > 0 ? options.max_proof_simulations : kDefaultProofSimulations;
  double fastest = std::numeric_limits<double>::infinity();
  uint32_t simulations = 0;
  const double cpu_start = CpuSeconds();
  const auto out_of_time = [&] {
    return options.check_time_limit_s > 0 && CpuSeconds() - cpu_start >= options.check_time_limit_s;
  };
  for (size_t i = 0; i < n; ++i) {
    const proto::Plan& plan = i == 0 ? result.plan : result.alternatives[i - 1].plan;
    RefinedCandidate c;
    c.rank = static_cast<uint32_t>(i);
    c.cost_s = i == 0 ? result.cost_s : result.alternatives[i - 1].cost_s;
    c.found_by = i == 0 ? result.found_by : result.alternatives[i - 1].found_by;
    if (bounded && i > 0) {
      // The proof list carries each plan's bound (the same LowerBoundSeconds), in increasing order.
      c.lower_bound_s = prove ? result.alternatives[i - 1].lower_bound_s : cost.LowerBoundSeconds(plan);
      if (c.lower_bound_s >= fastest * (1 - kTieTolerance)) {
        c.ruled_out = true;
        out.candidates.push_back(std::move(c));
        continue;
      }
    }
    if ((prove && simulations >= budget) || (i > 0 && out_of_time())) {
      c.not_reached = true;
      out.candidates.push_back(std::move(c));
      continue;
    }
    ++simulations;
    const Simulated& sim = simulate(plan);
    if (!sim.error.empty()) {
      c.error = sim.error;
    } else {
      c.simulated_s = sim.iteration_s;
      c.oom = sim.oom;
      if (!c.oom) fastest = std::min(fastest, c.simulated_s);
    }
    out.candidates.push_back(std::move(c));
  }
  out.sim_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The fastest that simulated and fits; ties keep the planner's order.
  int best = -1;
  for (size_t i = 0; i < n; ++i) {
    const RefinedCandidate& c = out.candidates[i];
    if (!c.error.empty() || c.oom || c.ruled_out || c.not_reached) continue;
    // A runner-up must be faster by more than rounding (equivalent plans simulate equal up to 1e-12).
    if (best < 0 || c.simulated_s < out.candidates[static_cast<size_t>(best)].simulated_s * (1 - kTieTolerance)) {
      best = static_cast<int>(i);
    }
  }
  size_t ruled_out = 0, not_reached = 0;
  double open_bound = std::numeric_limits<double>::infinity();  // the least bound not simulated
  for (const auto& c : out.candidates) {
    ruled_out += c.ruled_out ? 1 : 0;
    not_reached += c.not_reached ? 1 : 0;
    if (c.not_reached) open_bound = std::min(open_bound, c.lower_bound_s);
  }
  const size_t simulated = n - ruled_out - not_reached;
  out.simulated = static_cast<uint32_t>(simulated);
  out.ruled_out = static_cast<uint32_t>(ruled_out);
  std::string proof_note, gap_note;
  if (prove && best >= 0) {
    const double best_s = out.candidates[static_cast<size_t>(best)].simulated_s;
    // Every plan the search cut has a bound ≥ complete_below_s ≥ best_s (up to rounding): none simulates faster.
    out.proven = not_reached == 0 && result.complete_below_s > 0 &&
                 best_s <= result.complete_below_s * (1 + kTieTolerance);
    char buf[400];
    if (out.proven) {
      std::snprintf(buf, sizeof buf,
                    "proof: %zu plans simulated, %zu ruled out by their lower bound, every other plan of the space cut "
                    "below %.4g s by the search's bounds: the returned plan (%.4g s) is the simulated optimum over "
                    "exhaustive's space and the other planners' candidates",
                    simulated, ruled_out, result.complete_below_s, best_s);
    } else if (not_reached > 0) {
      std::snprintf(buf, sizeof buf,
                    "NOT proven: the budget of %u simulations stopped the check with %zu candidates left; the optimum "
                    "is at least %.4g s, so the returned plan (%.4g s) is within %.1f%% of it",
                    budget, not_reached, std::min(open_bound, best_s), best_s,
                    100.0 * (best_s - std::min(open_bound, best_s)) / best_s);
    } else if (result.complete_below_s <= 0) {
      std::snprintf(buf, sizeof buf,
                    "NOT proven: the planner's proof search did not cover the whole space (see its notes); the "
                    "returned plan (%.4g s) is the fastest of the %zu plans simulated",
                    best_s, simulated);
    } else {
      std::snprintf(buf, sizeof buf,
                    "NOT proven: the search cut plans that cannot simulate below %.4g s, but the fastest simulated "
                    "takes %.4g s (the played estimate under-priced the incumbent; raise proof_margin)",
                    result.complete_below_s, best_s);
    }
    proof_note = buf;
    if (!out.proven && result.space_lower_bound_s > 0) {
      // exhaustive's lower bound of its space: how far the returned plan can be from the space's optimum.
      std::snprintf(buf, sizeof buf,
                    "gap bound: no plan of exhaustive's space simulates faster than %.4g s, so the returned plan "
                    "(%.4g s) is within %.1f%% of the space's optimum",
                    result.space_lower_bound_s, best_s,
                    100.0 * (best_s - result.space_lower_bound_s) / result.space_lower_bound_s);
      gap_note = buf;
    }
  }
  const std::string check = prove                        ? std::string("proof over the space")
                            : options.k == kEveryPoolCandidate ? "every candidate of the pool"
                                                               : "--refine " + std::to_string(k);
  const std::string head = "twin check (" + check + "): " + std::to_string(simulated) +
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
    notes.push_back(head + Name(c.rank) + (c.found_by.empty() ? "" : " (from " + c.found_by + ")") + " simulates " + Seconds(c.simulated_s) + " and is returned instead of " +
                    "the planner's pick (" + (pick.error.empty() ? Seconds(pick.simulated_s) : std::string("failed")) +
                    (pick.oom ? ", out of memory" : "") + "): " + pct + " faster in the simulator");
  }
  if (!proof_note.empty()) notes.push_back(proof_note);
  if (!gap_note.empty()) notes.push_back(gap_note);
  // The proof list can hold thousands: the simulated candidates only, the first few.
  size_t listed = 0;
  const bool long_list = prove || n > kListedCandidates;
  for (const auto& c : out.candidates) {
    if (long_list && (c.ruled_out || c.not_reached)) continue;
    if (long_list && ++listed > kListedCandidates) {
      notes.push_back("  ... (" + std::to_string(simulated - kListedCandidates) + " more simulated)");
      break;
    }
    notes.push_back("  " + Describe(c));
  }
  if (best > 0) {
    out.chosen = static_cast<uint32_t>(best);
    planners::RankedPlan& alt = result.alternatives[static_cast<size_t>(best) - 1];
    std::swap(result.plan, alt.plan);
    result.cost_s = alt.cost_s;
    result.estimate = planners::AnalyticCostModel(problem).Estimate(result.plan, /*with_memory=*/true);
  }
  result.alternatives.clear();
  if (polish > 0 && best >= 0) {
    const auto polish_start = std::chrono::steady_clock::now();
    out.polished = true;
    const double from = out.candidates[static_cast<size_t>(best)].simulated_s;
    const double limit_s = options.polish_time_limit_s > 0 ? options.polish_time_limit_s : kDefaultPolishTimeLimitS;
    proto::Plan polished = PolishOnTwin(result.plan, from, problem, so, {polish, limit_s}, &out.polish);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - polish_start).count();
    out.sim_wall_s += wall;
    char buf[480];
    char limit[96];
    std::snprintf(limit, sizeof limit, "--polish %u, at most %.0f s", polish, limit_s);
    const std::string how = limit;
    std::snprintf(buf, sizeof buf,
                  "polish (%s; beyond the planner's paper): %u changes simulated, %u ruled out by their lower "
                  "bound, %u refused (invalid or out of memory), %u restarts in %s; %s",
                  how.c_str(), out.polish.simulated, out.polish.ruled_out, out.polish.refused, out.polish.restarts,
                  Seconds(wall).c_str(),
                  out.polish.local_optimum ? "no change left helps"
                  : out.polish.timed_out   ? "stopped by the time limit (a faster machine may polish further)"
                                           : "the budget of simulations ran out");
    notes.push_back(buf);
    if (out.polish.kept.empty()) {
      notes.push_back("  no change simulates faster than the checked choice (" + Seconds(from) + "): it is returned");
    } else {
      std::snprintf(buf, sizeof buf, "  %zu change%s kept: %s -> %s (%.1f%% faster than the checked choice)",
                    out.polish.kept.size(), out.polish.kept.size() == 1 ? "" : "s", Seconds(from).c_str(),
                    Seconds(out.polish.end_s).c_str(),
                    100.0 * (from - out.polish.end_s) / from);
      notes.push_back(buf);
      for (const auto& change : out.polish.kept) notes.push_back("    " + change);
      result.plan = std::move(polished);
      result.cost_s = 0;  // the planner's own model did not price the polished plan
      result.estimate = planners::AnalyticCostModel(problem).Estimate(result.plan, /*with_memory=*/true);
    }
  }
  return result;
}

}  // namespace hetsim::planning
