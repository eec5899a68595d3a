// The planning problem the twin-check and polishing tests share: llama-tiny (6 layers), global batch 8 of
// 128-token sequences, on two identical A100s in one node.
#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/planner.h"
#include "tests/sim/planning/fixtures.h"

namespace hetsim::testing_refine {

inline constexpr const char* kTwoGpus = R"(kind: cluster
name: two-gpus
nodes:
  - name: n
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 200}
network: {single_switch: {}}
)";

struct TwoGpuProblem {
  TwoGpuProblem() : cluster(Cluster()), model(Model()), training(Training(model)) {}
  static models::Cluster Cluster() { return hetsim::planning::fixtures::ClusterFrom(kTwoGpus); }
  static models::TransformerModel Model() { return hetsim::planning::fixtures::LlamaTiny(); }
  static proto::Training Training(const models::TransformerModel& m) {
    return hetsim::planning::fixtures::Resolved(m, 8, 128);
  }
  planners::PlanningProblem get() const { return {cluster, model, training, nullptr, {}}; }
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
};

}  // namespace hetsim::testing_refine
