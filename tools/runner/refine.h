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
#include "tools/runner/polish.h"

namespace hetsim::runner {

// The default K: the pick and three runners-up. Simulating a candidate of a ≤ 64-GPU plan takes tens of
// milliseconds, so planning stays within about 2× of the search alone for the searches that take a second
// or more (docs/planners.md "Simulator-checked choice" has the measured ratios).
inline constexpr uint32_t kDefaultRefine = 4;

// The default K for a cluster: a simulation of a plan grows with the GPUs it cannot fold (23 s for
// hexiscale's 64 unlike pipelines at 4,096 GPUs, about its search's time), so past 256 GPUs the pick and one
// runner-up are simulated, past 1,024 the pick alone (its simulated time is reported; an explicit --refine K
// asks for more). Deterministic: it depends on the cluster only, never on measured time.
constexpr uint32_t DefaultRefine(uint32_t gpus) {
  return gpus <= 256 ? kDefaultRefine : gpus <= 1024 ? 2 : 1;
}

// The reference optimum (`exhaustive`) is checked on more candidates by default: its pool re-ranked by the
// played estimate, simulated unless the lower bound rules a candidate out.
inline constexpr uint32_t kDefaultExhaustiveRefine = 16;

// "The planner's default": DefaultRefine(GPUs) for every planner but exhaustive, whose default is the proof of
// the simulator's optimum over its space: the planner returns its pick and every plan whose lower bound
// of the simulated iteration is below a threshold (planners/exhaustive/exhaustive.h, kEveryCandidate), by
// increasing bound; they are simulated in that order until the next bound is no better than the fastest
// simulated (docs/planners.md, "exhaustive"). At other fidelities than the balanced one, or with jitter,
// exhaustive falls back to kDefaultExhaustiveRefine.
inline constexpr uint32_t kAutoRefine = UINT32_MAX;

// The proof's default budget of simulations (a few tens of seconds on 8-GPU plans).
inline constexpr uint32_t kDefaultProofSimulations = 2000;

// Polishing by default (tools/runner/polish.h): `hetsim plan` and `hetsim simulate --planner` ask for
// kAutoPolish, which polishes the checked choice with DefaultPolish(GPUs) simulations. Up to 8 GPUs (the
// clusters `exhaustive` is the reference on) polishing takes seconds: a simulation takes milliseconds, and
// every structural change is rebalanced on the played estimate first, hundreds of estimates each. Past that
// it is off by default (a 16-GPU Llama 2 7B plan spends over a minute on 10 changes) and `--polish N`
// asks for it. `--refine 0` (the paper's pick) and
// `--polish 0` (the checked choice) turn it off. Library callers (manifests, advise) default to no polish,
// so experiments that compare planners compare the papers' plans. Deterministic: the cluster only.
inline constexpr uint32_t kAutoPolish = UINT32_MAX;
inline constexpr uint32_t kDefaultPolish = 200;
inline constexpr uint32_t kDefaultPolishMaxGpus = 8;
constexpr uint32_t DefaultPolish(uint32_t gpus) { return gpus <= kDefaultPolishMaxGpus ? kDefaultPolish : 0; }

struct RefineOptions {
  uint32_t k = kAutoRefine;
  uint32_t max_proof_simulations = 0;  // the proof's budget; 0 = kDefaultProofSimulations
  // After the check, polish the chosen plan on the twin with at most this many simulations
  // (tools/runner/polish.h; beyond the planner's paper). 0 = off; kAutoPolish = DefaultPolish(GPUs) (0 when
  // K = 0). exhaustive's proof with polishing on is warm-started with every other planner's polished plan,
  // so no planner's polished plan beats the reference.
  uint32_t polish = 0;
  sim::SimOptions sim;  // how candidates are simulated (fidelity, calibration, profiles); no timeline
  // When set, receives the planner's pick and its runners-up (the candidates checked), in its order.
  std::vector<proto::Plan>* candidate_plans = nullptr;
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
// twin. The result's plan is the chosen one, its estimate re-computed, its notes extended; `alternatives`
// are cleared. When no candidate simulates (all OOM or failed), the planner's pick is returned with a note.
Result<planners::PlannerResult> PlanOnTwin(const planners::Planner& planner, const planners::PlanningProblem& problem,
                                           const RefineOptions& options, RefineOutcome* outcome = nullptr);

}  // namespace hetsim::runner
