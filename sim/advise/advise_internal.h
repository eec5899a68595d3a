// What the advisor's files share (sim/advise/advise.h): the enumerated space, planning one group and
// replaying one point (evaluate.cc), and the outputs (outputs.cc).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "models/proto/experiment.pb.h"
#include "models/proto/plan.pb.h"
#include "models/proto/replay.pb.h"
#include "sim/advise/advise.h"

namespace hetsim::advise::internal {

// One configuration of a group: a policy (with its spares) and a checkpoint interval.
struct ConfigSlot {
  uint32_t index = 0;   // global configuration id
  size_t policy = 0;    // into Config::policies
  int64_t spares = -1;  // -1: the policy's default
  size_t interval = 0;  // into Config::intervals
  uint32_t first_point = 0;  // its seeds' points are first_point .. first_point + seeds - 1
};

// A candidate cluster with one planner: planned once, then its configurations are replayed.
struct Group {
  uint32_t index = 0;
  size_t candidate = 0, planner = 0;
  std::string id;  // hash of what the plan depends on
  std::vector<ConfigSlot> configs;
};

struct Space {
  std::vector<Group> groups;
  uint32_t configs = 0, points = 0;
};
Space Enumerate(const Config& c);

// A group's plan: the planned (or fixed) plan and its simulated iteration.
struct PlannedGroup {
  bool ok = false;
  std::string reason;
  proto::Plan plan;
  double iteration_s = 0;
  double ideal_tokens_per_s = 0;
  double plan_wall_s = 0;
};

// Plans group `g` (or validates its fixed plan) and simulates the plan once.
PlannedGroup PlanGroup(const Config& c, const Group& g);

// Replays one point (configuration `slot` of group `g`, seed number `seed_index`); the result's metrics
// include time_to_train_s, cost_usd and rent_usd_per_h. `report` (optional) receives the replay report.
proto::PointResult ReplayPoint(const Config& c, const Group& g, const PlannedGroup& planned, const ConfigSlot& slot,
                               uint32_t seed_index, proto::ReplayReport* report = nullptr);

// The id of a point's result: a hash of everything its replay depends on (resumed points must match).
std::string PointId(const Config& c, const Group& g, const ConfigSlot& slot, uint32_t seed_index);
// The seed of seed number i.
uint64_t SeedOf(const Config& c, uint32_t seed_index);
// A configuration's label: "2x8 h100 + 4x8 a100-80gb spot | hetu | elastic | young-daly".
std::string PolicyLabel(const Config& c, const ConfigSlot& slot);
std::string ConfigLabel(const Config& c, const Group& g, const ConfigSlot& slot);
// The mean rent per hour of candidate `cand` over each seed's window (spot nodes while granted).
std::vector<double> RentPerSeed(const Config& c, size_t cand);

// One row of configurations.csv.
struct ConfigRow {
  uint32_t config = 0;
  const Group* group = nullptr;
  const ConfigSlot* slot = nullptr;
  std::string status;  // ok | failed | pruned
  std::string reason;
  uint32_t seeds_ok = 0;
  double time_mean = 0, time_min = 0, time_max = 0;  // seconds
  double cost_mean = 0, cost_min = 0, cost_max = 0;
  double time_lb = -1, cost_lb = -1;  // -1: not planned
  double goodput_fraction = 0, ettr = 0;
  bool pareto = false, feasible = false, recommended = false;
  bool missing = false;  // not planned or not replayed (a killed worker, the time limit): --resume computes it
};

// Writes configurations.csv, advice.json and recommendation.md into `dir`; prints the summary to `out`. A
// non-empty `caveat` (a run stopped at its time limit) heads the recommendation and the summary.
Status WriteOutputs(const Config& c, const std::string& dir, const std::vector<ConfigRow>& rows, int recommended,
                    const std::string& caveat, std::ostream& out);

}  // namespace hetsim::advise::internal
