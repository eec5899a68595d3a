// Experiment manifests (models/proto/experiment.proto): loaded, checked in full before anything runs,
// and expanded into sweep points (docs/manifest.md).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/proto/experiment.pb.h"
#include "models/proto/plan.pb.h"
#include "models/transformer.h"
#include "sim/program.h"

namespace hetsim::runner {

struct PlannerChoice {
  std::string label;        // how results name it
  std::string name;         // registered planner, or "plan" for a fixed plan file
  std::string options;      // its options as YAML text
  std::optional<proto::Plan> plan;  // name == "plan": the plan to simulate
  uint32_t refine = 0;      // candidates simulated to pick the plan (sim/planning/refine.h: planning::kAutoRefine = the
                            // planner's default; 0 = the planner's own pick)
  uint32_t polish = 0;      // simulations to polish the checked choice (sim/planning/polish.h; 0 = none, so
                            // that experiments comparing planners compare the papers' plans)
};

// One sweep point: which cluster, model and planner, the value of every other axis, the repeat.
struct Point {
  uint32_t index = 0;
  std::string id;  // stable hash of the point's inputs
  uint32_t cluster = 0, model = 0, planner = 0, repeat = 0;
  uint64_t seed = 0;
  std::vector<std::pair<std::string, std::string>> axes;  // the other axes, in manifest order
};

struct Manifest {
  proto::Experiment spec;
  std::string file;  // as given
  std::vector<std::string> cluster_names;
  std::vector<proto::Cluster> clusters;  // unbuilt: axes may override them per point
  std::vector<std::string> cluster_files;
  std::vector<models::TransformerModel> models;
  std::vector<PlannerChoice> planners;
  models::ProfileDb profiles;
  std::string calibration;  // simulation.calibration resolved against the manifest ("" = default)
  std::string fidelity_name;
  sim::Fidelity fidelity;
  std::vector<Point> points;
  std::vector<std::string> policy_labels;  // replay: the policies' labels (the `policy` axis)
};

// The most points one manifest expands to (docs/manifest.md); more is refused before anything runs.
constexpr double kMaxPoints = 100000;

// Axis names a sweep may use besides cluster, model and planner (docs/manifest.md).
const std::vector<std::string>& SweepAxisNames();

// 64-bit FNV-1a of `s`: the stable hash of a point's inputs (its id), shared with `hetsim advise`.
uint64_t Fnv(const std::string& s);

// Loads and checks `path`, every cluster, model, planner (and its options), axis and figure it names,
// and expands the sweep. All problems are reported at once, each naming the file and key path.
Result<Manifest> LoadManifest(const std::string& path);
// The same from a manifest's text (the Python package's manifests given as dicts). References in it are taken
// beside src.file when that is a file on disk, else as written (bundled names, paths from the current folder).
Result<Manifest> LoadManifest(const models::SpecText& src);

// The planner a manifest's or an advise config's entry names: its `name`, or "python:module:Class" for a
// `python` entry (planners/planner.h RegisterPlannerScheme); an error when it has both keys or neither (the
// key to name in it: `python` when given, else `name`).
Result<std::string> PlannerEntryName(const proto::PlannerEntry& pe);

// The cluster, training spec and fidelity of one point, with its axes applied.
struct PointSetup {
  std::optional<models::Cluster> cluster;
  proto::Training training;
  sim::Fidelity fidelity;
  // With a `replay:` section: the replay settings with the point's axes applied, and its policy.
  std::optional<proto::Replay> replay;
  proto::RecoveryPolicy policy;
};
Result<PointSetup> SetupPoint(const Manifest& m, const Point& p);

}  // namespace hetsim::runner
