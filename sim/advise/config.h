// `hetsim advise` configs (models/proto/advise.proto, docs/advise.md): loaded and checked in full before
// anything runs (every problem at once, each as FILE:LINE:COL: key.path: what and the fix), then expanded
// into the candidate clusters to evaluate.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/profile_db.h"
#include "models/proto/advise.pb.h"
#include "models/transformer.h"
#include "sim/program.h"
#include "sim/advise/availability.h"
#include "sim/runner/manifest.h"

namespace hetsim::advise {

// One cluster to evaluate: a composition of the config's GPU types, or one of its fixed clusters.
struct Candidate {
  std::string label;  // "2x8 h100 + 4x8 a100-80gb spot"
  std::string name;   // the cluster's name ("advise-h100x2-a100-80gbx4s")
  std::shared_ptr<const models::Cluster> cluster;
  std::vector<GroupCost> groups;  // one per node group, in the cluster's order
  bool fixed = false;             // from `clusters`
  double on_demand_usd_per_h = 0;  // what its on-demand nodes cost per hour
};

// Checkpoint intervals as written ("young-daly" or seconds) and as the replay takes them (0 = Young/Daly).
struct Interval {
  std::string text;
  double seconds = 0;
};

struct Config {
  proto::AdviseConfig spec;
  std::string file;
  std::optional<models::TransformerModel> model;
  proto::Training training;  // resolved against the model
  std::string objective;     // "cheapest" or "soonest"
  std::vector<runner::PlannerChoice> planners;
  std::vector<proto::RecoveryPolicy> policies;
  // Per policy: the planner whose plans it applies to ("" = every plan). The default list adds AutoHet's and
  // Hetu's recovery for the plans of their own planners.
  std::vector<std::string> policy_planner;
  std::vector<Interval> intervals;
  std::vector<int64_t> spares;  // -1: the policy's default
  uint32_t seeds = 3;
  uint64_t seed = 1;
  double window_s = 14 * 86400.0;
  double spot_price_fraction = 0.35;
  std::string fidelity_name;
  sim::Fidelity fidelity = sim::Fidelity::Fast();
  std::string calibration;
  models::ProfileDb profiles;
  std::vector<std::unique_ptr<SpotSeries>> spot;  // per spec.gpus entry (null: no spot trace)
  std::vector<Candidate> candidates;
};

// The most candidate clusters one config expands to; more is refused before anything runs.
constexpr size_t kMaxCandidates = 2000;
// The most replays (configurations × seeds) one config asks for.
constexpr double kMaxReplays = 200000;

// Whether a recovery policy keeps hot spares (the `spares` axis applies to it).
bool TakesSpares(const std::string& policy);

// Loads and checks `path` and expands its candidates.
Result<Config> LoadConfig(const std::string& path);

}  // namespace hetsim::advise
