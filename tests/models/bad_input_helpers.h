// What the bad-input tests (bad_input_test, bad_spec_test, bad_plan_test) share: a cluster or model parsed
// and built from inline text, the small valid inline specs each test changes one thing of, and the check that
// a message does not say something.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "models/cluster.h"
#include "models/proto/cluster.pb.h"
#include "models/proto/model.pb.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"

namespace hetsim::models::bad_input {

inline testing::AssertionResult HasNot(const std::string& text, const std::string& needle) {
  if (text.find(needle) == std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "did not expect\n  [" << needle << "]\nin\n  [" << text << "]";
}

// Parses (and, when the YAML is fine, builds) a cluster from inline text.
inline Status ClusterStatus(const std::string& yaml, const std::string& file = "inline-cluster.yaml") {
  proto::Cluster c;
  HETSIM_RETURN_IF_ERROR(ParseYaml(yaml, file, &c));
  return Cluster::Build(std::move(c), file).status();
}

inline Status ModelStatus(const std::string& yaml, const std::string& file = "inline-model.yaml") {
  proto::Model m;
  HETSIM_RETURN_IF_ERROR(ParseYaml(yaml, file, &m));
  return TransformerModel::Build(std::move(m), file).status();
}

// A small valid cluster; tests below change one thing each.
inline constexpr const char* kGoodCluster = R"(
kind: cluster
name: good
nodes:
  - name: a
    count: 2
    gpus: {type: a800, count: 2}
    nic: {kind: roce, bandwidth_gbps: 200}
)";

inline constexpr const char* kGoodModel = R"(
kind: model
name: good
num_layers: 2
hidden_size: 256
ffn_hidden_size: 1024
num_attention_heads: 8
vocab_size: 1000
max_seq_len: 512
mlp: gelu
norm: layernorm
position: learned
)";

}  // namespace hetsim::models::bad_input
