// Fixtures for the planner tests: clusters and models from inline YAML or bundled names, resolved
// training specs, and a problem that owns all three.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/planner.h"

namespace hetsim::planners::testing {

inline models::Cluster ClusterFromYaml(const std::string& yaml) {
  proto::Cluster spec;
  const Status parsed = models::ParseYaml(yaml, "test-cluster.yaml", &spec);
  EXPECT_TRUE(parsed.ok()) << parsed.message();
  auto built = models::Cluster::Build(spec, "test-cluster.yaml");
  EXPECT_TRUE(built.ok()) << built.status().message();
  return std::move(built).value();
}

inline models::Cluster BundledCluster(const std::string& name) {
  auto c = models::LoadCluster(name);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

inline models::TransformerModel BundledModel(const std::string& name) {
  auto m = models::LoadModel(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

inline proto::Training Training(const models::TransformerModel& model, const std::string& yaml) {
  proto::Training t;
  const Status parsed = models::ParseYaml(yaml, "training", &t);
  EXPECT_TRUE(parsed.ok()) << parsed.message();
  auto r = models::ResolveTraining(t, model, "training");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

inline proto::Plan PlanFromYaml(const std::string& yaml) {
  proto::Plan p;
  const Status s = models::ParseYaml(yaml, "plan", &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

// Owns what a PlanningProblem refers to.
struct Fixture {
  Fixture(models::Cluster c, models::TransformerModel m, const std::string& training_yaml)
      : cluster(std::make_unique<models::Cluster>(std::move(c))),
        model(std::make_unique<models::TransformerModel>(std::move(m))),
        training(std::make_unique<proto::Training>(Training(*model, training_yaml))) {}
  PlanningProblem problem(const models::ProfileDb* profiles = nullptr) const {
    return PlanningProblem{*cluster, *model, *training, profiles};
  }
  models::PlanContext context() const { return {*cluster, *model, *training}; }
  std::unique_ptr<models::Cluster> cluster;
  std::unique_ptr<models::TransformerModel> model;
  std::unique_ptr<proto::Training> training;
};

// The closed form (AnalyticCostModel::ClosedFormEstimate): the objective exhaustive proves its optimum under,
// so the measure of every gap to it.
inline double ClosedForm(const PlanningProblem& problem, const proto::Plan& plan) {
  return AnalyticCostModel(problem).ClosedFormEstimate(plan, /*with_memory=*/false).iteration_s;
}

// Runs planner `name` (default options unless `options` YAML is given).
inline Result<PlannerResult> Run(const std::string& name, const PlanningProblem& problem,
                                 const std::string& options = "") {
  auto planner = CreatePlanner(name, options, name + "-options.yaml");
  if (!planner.ok()) return planner.status();
  return RunPlanner(**planner, problem);
}

// The classic baselines, as registered.
inline const std::vector<std::string> kBaselines = {"megatron", "deepspeed", "fsdp", "galvatron", "whale", "alpa", "amp"};

// A planner result's notes, one a line.
inline std::string Notes(const PlannerResult& r) {
  std::string out;
  for (const auto& n : r.stats.notes) out += n + "\n";
  return out;
}

}  // namespace hetsim::planners::testing
