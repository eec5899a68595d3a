// `twin`: hetsim's own planner, beyond every paper (DESIGN "Choosing plans on the twin"). It is asked for by
// its name; no named planner returns its plans.
//
// This half (the planners room: no simulator) builds the search's pool on the played estimate: every other
// planner's pick and runners-up (TwinOptions.candidates_per_planner, by each planner's own cost model), each
// also with every other recomputation policy, distinct plans only, those that fit in memory, ordered by
// the played estimate (AnalyticCostModel::Estimate, the simulator's operations with its prices). MakePlan
// returns the best by that estimate as the pick and the rest as runners-up (as many as the problem asks).
// The other half, sim/planning/twin.h, confirms the pool on the simulator (every candidate simulated unless its
// lower bound rules it out, so the answer is at least as fast as every planner's pick) and polishes the
// fastest on the twin. Options: planners/proto/twin.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::twin {

std::unique_ptr<Planner> NewPlanner();

}  // namespace hetsim::planners::twin
