// Specs built from inline YAML for tests (clusters, plans) and the small world the lowering tests share:
// two nodes of four H100s with a 400 Gb/s NIC per GPU, and llama-tiny (layers 0 embedding, 1-4 blocks,
// 5 head).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/spec_io.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"

namespace hetsim::testing_util {

inline constexpr double kGib = 1024.0 * 1024.0 * 1024.0;

// `Built::Build` of the `Spec` parsed from `yaml` (a test failure on a parse or build error).
template <typename Spec, typename Built>
Built BuiltFrom(const std::string& yaml, const std::string& file) {
  Spec spec;
  const Status s = models::ParseYaml(yaml, file, &spec);
  EXPECT_TRUE(s.ok()) << s.message();
  auto r = Built::Build(spec, file);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

inline models::Cluster ClusterFrom(const std::string& yaml, const std::string& file = "test-cluster") {
  return BuiltFrom<proto::Cluster, models::Cluster>(yaml, file);
}

inline models::TransformerModel ModelFrom(const std::string& yaml, const std::string& file = "test-model") {
  return BuiltFrom<proto::Model, models::TransformerModel>(yaml, file);
}

inline proto::Plan PlanFrom(const std::string& yaml, const std::string& file = "test-plan") {
  proto::Plan p;
  const Status s = models::ParseYaml(yaml, file, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

inline models::Cluster EightGpus() {
  return ClusterFrom(R"(
name: eight
nodes:
  - {name: n, count: 2, gpus: {type: h100, count: 4}, nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}
)",
                     "eight.yaml");
}

// Sixteen nodes of eight H100s, a 400 Gb/s InfiniBand NIC per GPU (the trace tests' cluster).
inline models::Cluster Nodes16() {
  return ClusterFrom(R"(
name: sixteen
nodes:
  - {name: n, count: 16, gpus: {type: h100, count: 8}, nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}
)");
}

struct TinyWorld {
  models::Cluster cluster = EightGpus();
  models::TransformerModel model = std::move(models::LoadModel("llama-tiny")).value();
};

inline TinyWorld& TheWorld() {
  static TinyWorld w;
  return w;
}

}  // namespace hetsim::testing_util
