// Simulator-checked choice (DESIGN "One cost truth"): a planner searches with its own cost model (its
// paper's, which keeps it faithful), then its best K candidates — its pick and the K − 1 runners-up it
// ranked next — are simulated on the twin and the fastest one that fits in memory is returned.
//
//   K = 0  the planner's pick, nothing simulated (the paper's choice; `--refine 0`)
//   K = 1  the pick, simulated once (the notes give its simulated time)
//   K ≥ 2  the fastest of the pick and up to K − 1 runners-up in the simulator; ties keep the planner's
//          order. Candidates whose simulation reports a device out of memory, or fails, are skipped. At the
//          balanced fidelity a runner-up whose lower bound (AnalyticCostModel::LowerBoundSeconds, never
//          above its simulated time) is no better than the fastest simulated so far is ruled out unsimulated.
//
// The plan's search notes say both picks and both times. Everything is deterministic: the simulations are
// the simulator's (seeded, no compute jitter unless the options ask for it), so the same inputs give the
// same plan.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "planners/planner.h"
#include "sim/simulator.h"
#include "sim/planning/polish.h"

namespace hetsim::planning {

// A planner's name means its plan (DESIGN "Choosing plans on the twin"): by default every named planner
// returns its own pick, nothing simulated and nothing polished, so that comparisons between planners stay
// what the papers compared. The twin check (`--refine K`), polishing (`--polish N`) and hetsim's own planner
// (`twin`, sim/planning/twin.h) are asked for by name.
//
// kAutoRefine, "the planner's default", resolves to:
//   - 0 (the pick) for every named planner; 1 when polishing is asked for (the pick is simulated once, then
//     polished);
//   - exhaustive: the proof of the simulator's optimum over its space: the planner returns its pick and every
//     plan whose lower bound of the simulated iteration is below a threshold (planners/exhaustive/exhaustive.h,
//     kEveryCandidate), by increasing bound; they are simulated in that order until the next bound is no better
//     than the fastest simulated (docs/planners.md, "exhaustive"). At other fidelities than the balanced one,
//     or with jitter, exhaustive falls back to kDefaultExhaustiveRefine;
//   - twin: every candidate of its pool, by increasing played estimate, each simulated unless its lower bound
//     rules it out (sim/planning/twin.h).
inline constexpr uint32_t kAutoRefine = UINT32_MAX;

// How many candidates each other planner gives exhaustive's warm start and the twin's pool: its pick and
// three runners-up (the plans `--refine 4` would choose from).
inline constexpr uint32_t kSeedCandidates = 4;

// The reference optimum (`exhaustive`) off its proof (another fidelity, jitter): its pool re-ranked by the
// played estimate, simulated unless the lower bound rules a candidate out.
inline constexpr uint32_t kDefaultExhaustiveRefine = 16;

// `twin`'s check: every candidate of its pool (RefineOptions::k).
inline constexpr uint32_t kEveryPoolCandidate = 1000000;

// The proof's default budget of simulations (a few tens of seconds on 8-GPU plans).
inline constexpr uint32_t kDefaultProofSimulations = 2000;

// Polishing (sim/planning/polish.h) is off unless asked for: `--polish N` (N simulations at most), manifests'
// `planners[].polish`. A polish also stops at its CPU-time limit (kDefaultPolishTimeLimitS unless
// RefineOptions::polish_time_limit_s says otherwise; sim/planning/cpu_clock.h), and says so: the counted
// budget keeps results the same on every machine, the clock keeps a large cluster's polish from running away.
inline constexpr double kDefaultPolishTimeLimitS = 120;

struct RefineOptions {
  uint32_t k = kAutoRefine;
  uint32_t max_proof_simulations = 0;  // the proof's budget; 0 = kDefaultProofSimulations
  // After the check, polish the chosen plan on the twin with at most this many simulations
  // (sim/planning/polish.h; beyond the planner's paper). 0 = off. exhaustive's proof with polishing on is
  // warm-started with every other planner's polished plan, so no planner's polished plan beats the reference.
  uint32_t polish = 0;
  // The polish's CPU-time limit (seconds; 0 = kDefaultPolishTimeLimitS).
  double polish_time_limit_s = 0;
  sim::SimOptions sim;  // how candidates are simulated (fidelity, calibration, profiles); no timeline
  // When set, receives the planner's pick and its runners-up (the candidates checked), in its order.
  std::vector<proto::Plan>* candidate_plans = nullptr;
  // The check's CPU-time limit (seconds; 0 = none): runners-up not reached by then are not simulated
  // (RefinedCandidate::not_reached). The twin's search sets it; named planners' checks have none.
  double check_time_limit_s = 0;
};

// One simulated candidate.
struct RefinedCandidate {
  uint32_t rank = 0;         // 0 = the planner's pick, i = its i-th runner-up
  double cost_s = 0;         // under the planner's own model (0 when it does not say)
  double simulated_s = 0;    // the simulated iteration (0 when the simulation failed)
  bool oom = false;          // the simulation flagged a device out of memory
  std::string error;         // the simulation failed (message)
  double lower_bound_s = 0;  // AnalyticCostModel::LowerBoundSeconds (never above the simulated time)
  bool ruled_out = false;    // not simulated: its lower bound is no better than a simulated candidate
  bool not_reached = false;  // not simulated: the proof's budget of simulations ran out before it
  std::string found_by = {};  // exhaustive's proof: the other planner whose candidate this is (else empty)
};

struct RefineOutcome {
  std::vector<RefinedCandidate> candidates;  // in the planner's order; empty with K = 0
  uint32_t chosen = 0;                       // index into candidates of the returned plan
  uint32_t k = 0;                            // the K used (kAutoRefine resolved)
  double sim_wall_s = 0;                     // wall time of the simulations
  bool proof = false;                        // exhaustive's proof over its space was run
  bool proven = false;                       // ... and proved the returned plan the simulated optimum
  uint32_t simulated = 0, ruled_out = 0;     // candidates simulated; ruled out by their lower bound
  uint32_t polish_budget = 0;                // the polish budget used (kAutoPolish resolved)
  bool polished = false;                     // polishing ran (its outcome below)
  PolishOutcome polish;
  bool changed() const { return chosen != 0; }
};

// Runs the planner (planners::RunPlanner, asking for K − 1 runners-up) and checks its candidates on the
// twin; for `twin`, its search (sim/planning/twin.h). The result's plan is the chosen one, its estimate re-computed, its notes extended; `alternatives`
// are cleared. When no candidate simulates (all OOM or failed), the planner's pick is returned with a note.
Result<planners::PlannerResult> PlanOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                           const RefineOptions& options, RefineOutcome* outcome = nullptr);

// How the twin simulates a planner's candidates: `sim` without timeline or progress, with the compute model
// (calibration, profiles) the planner was given, so a plan ranked on measured profiles is judged on them.
sim::SimOptions CandidateSimOptions(const sim::SimOptions& sim, const planners::PlanningProblem& problem);

// The check and polish above for any planner, `twin` included as a plain planner (its pool ranked by the played
// estimate, no multi-start polish): what PlanOnTwin does for every planner but `twin`.
Result<planners::PlannerResult> CheckOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                            const RefineOptions& options, RefineOutcome* outcome = nullptr);

}  // namespace hetsim::planning
