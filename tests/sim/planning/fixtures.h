// Small plans and clusters for the planning tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/yaml_proto.h"

namespace hetsim::planning::fixtures {

// A stage of one device holding layers [begin, end).
inline proto::Stage StageOf(uint32_t device, uint32_t begin, uint32_t end) {
  proto::Stage s;
  s.add_devices(device);
  s.set_layer_begin(begin);
  s.set_layer_end(end);
  return s;
}

// The cluster a YAML text describes (the test fails when it does not build).
inline models::Cluster ClusterFrom(const char* yaml) {
  proto::Cluster spec;
  EXPECT_TRUE(models::ParseYaml(yaml, "c.yaml", &spec).ok());
  auto c = models::Cluster::Build(spec, "c.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

}  // namespace hetsim::planning::fixtures
