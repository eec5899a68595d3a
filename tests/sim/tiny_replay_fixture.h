// The setting of the recovery-policy tests (autohet_recovery_test, hetu_switching_test,
// recovery_policies_test, replay_scale_test; replay_test takes Train): a tiny GPT on a small cluster given as YAML, trained in fp16 on 8
// sequences of 128 tokens.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "models/cluster.h"
#include "models/training.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"

namespace hetsim::testing {

// h = 64, 4 blocks, vocabulary 1000, 128 learned positions, tied embeddings, biases. A block has attention
// 4h² + 4h, MLP 2·h·4h + 4h + h and two LayerNorms 2·2h parameters: 12h² + 13h = 49,984.
inline constexpr const char* kTinyGpt = R"(
name: tiny-gpt
num_layers: 4
hidden_size: 64
ffn_hidden_size: 256
num_attention_heads: 4
num_kv_heads: 4
vocab_size: 1000
max_seq_len: 128
mlp: gelu
norm: layernorm
position: learned
tied_embeddings: true
linear_bias: true
)";

class TinyReplayFixture : public ::testing::Test {
 protected:
  // Builds cluster_ from `cluster_yaml`, model_ (kTinyGpt) and training_.
  void Build(const char* cluster_yaml) {
    proto::Cluster cp;
    ASSERT_TRUE(models::ParseYaml(cluster_yaml, "cluster", &cp).ok());
    auto c = models::Cluster::Build(cp, "cluster");
    ASSERT_TRUE(c.ok()) << c.status().message();
    cluster_.emplace(std::move(c).value());
    proto::Model mp;
    ASSERT_TRUE(models::ParseYaml(kTinyGpt, "model", &mp).ok());
    auto m = models::TransformerModel::Build(mp, "model");
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_.emplace(std::move(m).value());
    proto::Training t;
    t.set_global_batch_size(8);
    t.set_seq_len(128);
    t.set_dtype(proto::DTYPE_FP16);
    auto tr = models::ResolveTraining(t, *model_, "training");
    ASSERT_TRUE(tr.ok()) << tr.status().message();
    training_ = *tr;
  }

  std::optional<models::Cluster> cluster_;
  std::optional<models::TransformerModel> model_;
  proto::Training training_;
};

// Training for `span` seconds from a fresh start: checkpoints every k iterations of T seconds, each save C.
struct Progress {
  uint64_t committed = 0;    // iterations in a checkpoint
  uint64_t uncommitted = 0;  // whole iterations after the last one
  double since_commit = 0;   // seconds since the last checkpoint ended
  uint64_t checkpoints = 0;
};
inline Progress Train(double span, double T, double C, uint64_t k) {
  Progress p;
  const double cycle = static_cast<double>(k) * T + C;
  p.checkpoints = static_cast<uint64_t>(std::floor(span / cycle + 1e-12));
  p.committed = p.checkpoints * k;
  p.since_commit = span - static_cast<double>(p.checkpoints) * cycle;
  p.uncommitted = std::min<uint64_t>(k, static_cast<uint64_t>(std::floor(p.since_commit / T + 1e-12)));
  return p;
}

}  // namespace hetsim::testing
