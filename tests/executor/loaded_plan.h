// A bundled (or file) plan with its cluster, model and resolved training, as the executor's tests load them.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "models/spec_io.h"
#include "models/training.h"

namespace hetsim::executor::test_plans {

struct Loaded {
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
  proto::Plan plan;
};

inline Loaded Load(const std::string& plan_name) {
  auto plan = models::LoadPlan(plan_name);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  auto cluster = models::LoadCluster(plan->cluster());
  auto model = models::LoadModel(plan->model());
  EXPECT_TRUE(cluster.ok() && model.ok());
  auto training = models::ResolveTraining(plan->training(), *model, "test");
  EXPECT_TRUE(training.ok()) << training.status().message();
  return {*cluster, *model, *training, *plan};
}

}  // namespace hetsim::executor::test_plans
