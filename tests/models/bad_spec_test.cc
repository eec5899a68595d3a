// Clusters, models and trainings that parse but cannot exist (duplicate node groups, zones without links,
// NICs of the wrong count, heads that do not divide the hidden size, sequences over the model's maximum):
// each rejected with a message that names the file, the key path and what was expected — and none may crash.
#include <gtest/gtest.h>

#include <string>

#include "models/cluster.h"
#include "models/proto/cluster.pb.h"
#include "models/proto/model.pb.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"
#include "tests/common/text_checks.h"
#include "tests/models/bad_input_helpers.h"

namespace hetsim::models {
namespace {

using bad_input::ClusterStatus;
using bad_input::HasNot;
using bad_input::kGoodModel;
using bad_input::ModelStatus;
using testing_util::Has;
using testing_util::Lines;

// ---- cluster semantics ---------------------------------------------------------------------------

TEST(BadCluster, DuplicateNodeGroupNames) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - {name: a, gpus: {type: a800, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
  - {name: a, gpus: {type: rtx4090, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "inline-cluster.yaml: nodes[1].name: node group name 'a' is used twice"));
}

TEST(BadCluster, ZoneLinkToZoneWithoutNodes) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - {name: a, zone: east, gpus: {type: a800, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
  - {name: b, zone: west, gpus: {type: a800, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
zone_links:
  - {from: east, to: wets, bandwidth_gbps: 10}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "zone_links[0].to: no node is in zone 'wets'; did you mean 'west'?"));
}

TEST(BadCluster, MultiZoneClusterMissingAZoneLink) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - {name: a, zone: east, gpus: {type: a800, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
  - {name: b, zone: west, gpus: {type: a800, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
  - {name: c, zone: north, gpus: {type: a800, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
zone_links:
  - {from: east, to: west, bandwidth_gbps: 10}
  - {from: north, to: east, bandwidth_gbps: 10}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "zone_links: no link between zones 'north' and 'west'"));
  EXPECT_EQ(Lines(st.message()).size(), 1u) << st.message();
}

TEST(BadCluster, PerGpuNicWithWrongCount) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    count: 2
    gpus: {type: a800, count: 8}
    nic: {kind: infiniband, bandwidth_gbps: 200, attachment: per_gpu, count: 4}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].nic.count: a per_gpu NIC has one NIC per GPU (8)"));
}

TEST(BadCluster, MultiNodeClusterWithoutNic) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - {name: a, gpus: {type: a800, count: 2}, nic: {kind: roce, bandwidth_gbps: 100}}
  - {name: b, count: 3, gpus: {type: a800, count: 2}}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[1].nic: node 'b-0' has no NIC but the cluster has several nodes"));
}

// `nic:` with nothing after it: the NIC's required kind and bandwidth are absent, so it must be rejected
// just like `nic: {}` is, instead of giving the nodes a NIC of bandwidth 0.
TEST(BadCluster, EmptyNicIsRejectedLikeAnEmptyMapping) {
  const std::string with_braces = R"(
kind: cluster
name: t
nodes:
  - {name: a, count: 2, gpus: {type: a800, count: 2}, nic: {}}
)";
  const std::string with_null = R"(
kind: cluster
name: t
nodes:
  - name: a
    count: 2
    gpus: {type: a800, count: 2}
    nic:
)";
  const Status braces = ClusterStatus(with_braces);
  ASSERT_FALSE(braces.ok());
  EXPECT_TRUE(Has(braces.message(), "nodes[0].nic: missing required key 'kind'"));
  const Status null = ClusterStatus(with_null);
  ASSERT_FALSE(null.ok()) << "`nic:` (null) was accepted as a NIC of 0 Gb/s";
  EXPECT_TRUE(Has(null.message(), "nodes[0].nic"));
  EXPECT_TRUE(Has(null.message(), "bandwidth_gbps"));
}

// `gpus:` with nothing after it is a node group without GPU type and count: say so, rather than
// "unknown GPU type ''" with a guess.
TEST(BadCluster, EmptyGpusReportsTheMissingKeys) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus:
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].gpus"));
  EXPECT_TRUE(Has(st.message(), "missing required key 'type'"));
  EXPECT_TRUE(HasNot(st.message(), "did you mean")) << "nothing was misspelled";
}

// `fat_tree:` with nothing after it lacks the required nodes_per_leaf (min 1).
TEST(BadCluster, EmptyFatTreeIsRejected) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - {name: a, gpus: {type: a800, count: 2}}
network:
  fat_tree:
)");
  ASSERT_FALSE(st.ok()) << "a fat tree with 0 nodes per leaf was accepted";
  EXPECT_TRUE(Has(st.message(), "network.fat_tree"));
  EXPECT_TRUE(Has(st.message(), "nodes_per_leaf"));
}

// ---- model and training semantics ----------------------------------------------------------------

TEST(BadModel, HeadsNotDividingHiddenSize) {
  std::string yaml = kGoodModel;
  yaml.replace(yaml.find("num_attention_heads: 8"), 22, "num_attention_heads: 6");
  const Status st = ModelStatus(yaml);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "inline-model.yaml: num_attention_heads: 6 does not divide hidden_size 256"));
}

TEST(BadModel, KvHeadsNotDividingHeads) {
  const Status st = ModelStatus(std::string(kGoodModel) + "num_kv_heads: 3\n");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "inline-model.yaml: num_kv_heads: 3 must divide num_attention_heads 8"));
}

TEST(BadModel, DefaultSeqLenOverMax) {
  const Status st = ModelStatus(std::string(kGoodModel) + "defaults: {seq_len: 1024}\n");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "defaults.seq_len: 1024 exceeds max_seq_len 512"));
}

TEST(BadTraining, SeqLenOverModelMaximum) {
  auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok()) << model.status().message();
  proto::Training t;
  ASSERT_TRUE(ParseYaml("kind: training\nglobal_batch_size: 64\nseq_len: 8192\n", "long.yaml", &t).ok());
  auto r = ResolveTraining(t, *model, "long.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Has(r.status().message(), "long.yaml: seq_len: 8192 exceeds the model's max_seq_len 4096"));
}

TEST(BadTraining, MisspelledDtypeSuggests) {
  proto::Training t;
  const Status st = ParseYaml("kind: training\ndtype: bf61\n", "t.yaml", &t);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "t.yaml:2:"));
  EXPECT_TRUE(Has(st.message(), "dtype: unknown value 'bf61'"));
  EXPECT_TRUE(Has(st.message(), "did you mean 'bf16'"));
}

}  // namespace
}  // namespace hetsim::models
