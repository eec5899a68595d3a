// Malformed and impossible inputs: every one must be rejected with a message that names the file, the
// key path of the offending field and, for misspellings, the nearest valid name — and none may crash
// (also under ASan/UBSan). Inputs are inline raw strings or files under tests/data/bad/.
#include <gtest/gtest.h>

#include <filesystem>

#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "models/cluster.h"
#include "models/gpu_catalog.h"
#include "models/plan.h"
#include "models/proto/cluster.pb.h"
#include "models/proto/model.pb.h"
#include "models/proto/plan.pb.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"
#include "tests/common/text_checks.h"

namespace hetsim::models {
namespace {

// ---- helpers ---------------------------------------------------------------------------------------

using testing_util::BadFile;
using testing_util::EveryLineNames;
using testing_util::Has;
using testing_util::Lines;

testing::AssertionResult HasNot(const std::string& text, const std::string& needle) {
  if (text.find(needle) == std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "did not expect\n  [" << needle << "]\nin\n  [" << text << "]";
}


// The name in "did you mean 'NAME'?" or "".
std::string Suggestion(const std::string& text) {
  const std::string key = "did you mean '";
  const auto at = text.find(key);
  if (at == std::string::npos) return "";
  const auto end = text.find('\'', at + key.size());
  return end == std::string::npos ? "" : text.substr(at + key.size(), end - at - key.size());
}

// Parses (and, when the YAML is fine, builds) a cluster from inline text.
Status ClusterStatus(const std::string& yaml, const std::string& file = "inline-cluster.yaml") {
  proto::Cluster c;
  HETSIM_RETURN_IF_ERROR(ParseYaml(yaml, file, &c));
  return Cluster::Build(std::move(c), file).status();
}

Status ModelStatus(const std::string& yaml, const std::string& file = "inline-model.yaml") {
  proto::Model m;
  HETSIM_RETURN_IF_ERROR(ParseYaml(yaml, file, &m));
  return TransformerModel::Build(std::move(m), file).status();
}


// A small valid cluster; tests below change one thing each.
constexpr const char* kGoodCluster = R"(
kind: cluster
name: good
nodes:
  - name: a
    count: 2
    gpus: {type: a800, count: 2}
    nic: {kind: roce, bandwidth_gbps: 200}
)";

constexpr const char* kGoodModel = R"(
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

TEST(BadInputBaseline, TheUnmodifiedInlineSpecsAreValid) {
  EXPECT_TRUE(ClusterStatus(kGoodCluster).ok()) << ClusterStatus(kGoodCluster).message();
  EXPECT_TRUE(ModelStatus(kGoodModel).ok()) << ModelStatus(kGoodModel).message();
}

// ---- keys and enum values ------------------------------------------------------------------------

TEST(BadClusterYaml, MisspelledNestedKeyNamesPathAndSuggests) {
  const std::string file = BadFile("cluster_misspelled_key.yaml");
  auto c = LoadCluster(file);
  ASSERT_FALSE(c.ok());
  const std::string& msg = c.status().message();
  EXPECT_TRUE(Has(msg, "nodes[0].gpus.tyep"));
  EXPECT_TRUE(Has(msg, "did you mean 'type'"));
  EXPECT_TRUE(Has(msg, file + ":6:"));  // the line of the misspelled key
  EXPECT_TRUE(EveryLineNames(msg, file));
}

TEST(BadModelYaml, MisspelledTopLevelKeySuggestsTheField) {
  const std::string file = BadFile("model_misspelled_key.yaml");
  auto m = LoadModel(file);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_TRUE(Has(msg, file + ":5:"));
  EXPECT_TRUE(Has(msg, "hiden_size: unknown key 'hiden_size'; did you mean 'hidden_size'?"));
  // … and, since the real key is then absent, that it is missing.
  EXPECT_TRUE(Has(msg, "missing required key 'hidden_size'"));
  EXPECT_TRUE(EveryLineNames(msg, file));
}

TEST(BadModelYaml, MisspelledEnumValueSuggestsTheValue) {
  const std::string file = BadFile("model_bad_enum.yaml");
  auto m = LoadModel(file);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_TRUE(Has(msg, file + ":10:"));
  EXPECT_TRUE(Has(msg, "mlp: unknown value 'swigul'"));
  EXPECT_TRUE(Has(msg, "gelu, swiglu, relu"));  // the valid values are listed
  EXPECT_TRUE(Has(msg, "did you mean 'swiglu'"));
}

TEST(BadModelYaml, MissingRequiredKeyIsNamed) {
  const std::string file = BadFile("model_missing_hidden_size.yaml");
  auto m = LoadModel(file);
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_TRUE(Has(msg, "missing required key 'hidden_size'"));
  EXPECT_TRUE(EveryLineNames(msg, file));
  EXPECT_EQ(Lines(msg).size(), 1u) << msg;
}

// ---- wrong types ---------------------------------------------------------------------------------

TEST(BadClusterYaml, StringWhereNumberExpected) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: {type: a800, count: two}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "inline-cluster.yaml:6:"));
  EXPECT_TRUE(Has(st.message(), "nodes[0].gpus.count: expected a non-negative integer, found 'two'"));
}

TEST(BadClusterYaml, StringWhereDoubleExpected) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: {type: a800, count: 2}
    nic: {kind: roce, bandwidth_gbps: fast}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].nic.bandwidth_gbps: expected a number, found 'fast'"));
}

TEST(BadClusterYaml, ListWhereMappingExpected) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: [a800, 2]
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].gpus: expected a mapping, found a list"));
}

TEST(BadClusterYaml, MappingWhereListExpected) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  name: a
  gpus: {type: a800, count: 2}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes: expected a list"));
  EXPECT_TRUE(Has(st.message(), "found a mapping"));
}

TEST(BadClusterYaml, FractionForIntegerField) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    count: 1.5
    gpus: {type: a800, count: 2}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].count: expected a non-negative integer, found '1.5'"));
}

TEST(BadClusterYaml, NegativeValueForUnsignedField) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: {type: a800, count: -2}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].gpus.count: expected a non-negative integer, found -2"));
}

TEST(BadClusterYaml, IntegerTooLargeFor32Bits) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    count: 4294967296
    gpus: {type: a800, count: 2}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].count: value 4294967296 does not fit in a 32-bit integer"));
}

// ---- ranges --------------------------------------------------------------------------------------

TEST(BadClusterYaml, NegativeBandwidthIsOutOfRange) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: {type: a800, count: 2}
    nic: {kind: roce, bandwidth_gbps: -10}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "inline-cluster.yaml:7:"));
  EXPECT_TRUE(Has(st.message(), "nodes[0].nic.bandwidth_gbps: value -10 is out of range (must be >= 0.001)"));
}

TEST(BadClusterYaml, ZeroBandwidthViolatesExclusiveMinimum) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: {type: a800, count: 2}
    nic: {kind: roce, bandwidth_gbps: 0}
storage:
  - {name: s, kind: object_store, read_bandwidth_gbyte_s: 0}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].nic.bandwidth_gbps: value 0 is out of range (must be >= 0.001)"));
  EXPECT_TRUE(Has(st.message(), "storage[0].read_bandwidth_gbyte_s: value 0 is out of range (must be >= 1e-06)"));
}

TEST(BadClusterYaml, NonFiniteAndAbsurdNumbersAreRefused) {
  // .inf would make every transfer instant (an iteration time of 0), 1e308 overflows sums to infinity.
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: {type: a800, count: 2}
    nic: {kind: roce, bandwidth_gbps: .inf, latency_us: 1e308}
    fabric: {kind: nvlink, bandwidth_gbyte_s: .nan}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].nic.bandwidth_gbps: expected a finite number, found '.inf'")) << st.message();
  EXPECT_TRUE(Has(st.message(), "nodes[0].nic.latency_us: value 1e308 is out of range (must be <= 1e+06)"))
      << st.message();
  EXPECT_TRUE(Has(st.message(), "nodes[0].fabric.bandwidth_gbyte_s: expected a finite number, found '.nan'"))
      << st.message();
}

TEST(BadYamlText, TabsNestingAndBytesThatAreNotUtf8) {
  proto::Cluster c;
  Status tab = models::ParseYaml("kind: cluster\nname: t\nnodes:\n\t- name: a\n", "tab.yaml", &c);
  ASSERT_FALSE(tab.ok());
  EXPECT_TRUE(Has(tab.message(), "tab.yaml:4:1: a tab in the indentation; YAML indents with spaces only"))
      << tab.message();
  const std::string deep = "kind: cluster\nname: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  Status nest = models::ParseYaml(deep, "deep.yaml", &c);
  ASSERT_FALSE(nest.ok());
  EXPECT_TRUE(Has(nest.message(), "deep.yaml:2:") && Has(nest.message(), "brackets deep")) << nest.message();
  const std::string indented = "kind: cluster\nname: t\n" + std::string(300, ' ') + "x: 1\n";
  Status ind = models::ParseYaml(indented, "indent.yaml", &c);
  ASSERT_FALSE(ind.ok());
  EXPECT_TRUE(Has(ind.message(), "indent.yaml:3:301: indented 300 spaces deep")) << ind.message();
  Status bytes = models::ParseYaml("kind: cluster\nname: t\xff\xfe\n", "latin1.yaml", &c);
  ASSERT_FALSE(bytes.ok());
  EXPECT_TRUE(Has(bytes.message(), "latin1.yaml:2:8: not UTF-8 text (byte 0xff); save the file as UTF-8"))
      << bytes.message();
  // UTF-8 names and tabs inside values are fine.
  EXPECT_TRUE(models::ParseYaml("kind: cluster\nname: \"gr\xc3\xbc\xc3\x9f" "e\tx\"\nnodes: [{name: a, gpus: {type: a800, count: 1}}]\n",
                                "ok.yaml", &c)
                  .ok());
}

TEST(BadOutputPath, FoldersAndMissingFoldersAreNamedAndNothingIsLeftBehind) {
  const std::string dir = testing::TempDir() + "hetsim-out-test";
  std::filesystem::create_directories(dir);
  Status into_dir = models::WriteFileAtomically(dir, "x");
  ASSERT_FALSE(into_dir.ok());
  EXPECT_TRUE(Has(into_dir.message(), "is a folder; give a file name")) << into_dir.message();
  Status missing = models::WriteFileAtomically(dir + "/no/such/folder/f.json", "x");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(Has(missing.message(), "No such file or directory")) << missing.message();
  EXPECT_FALSE(Has(missing.message(), "Success")) << missing.message();
  Status check = models::CheckWritable(dir + "/no/f.json", "--report-out");
  ASSERT_FALSE(check.ok());
  EXPECT_TRUE(Has(check.message(), "--report-out") && Has(check.message(), "does not exist; create it first"))
      << check.message();
  ASSERT_TRUE(models::WriteFileAtomically(dir + "/f.json", "{}").ok());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // no temporary file left
}

TEST(BadClusterYaml, GpuCountZeroIsOutOfRange) {
  const Status st = ClusterStatus(R"(
kind: cluster
name: t
nodes:
  - name: a
    gpus: {type: a800, count: 0}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nodes[0].gpus.count: value 0 is out of range (must be >= 1)"));
}

TEST(BadPlanYaml, ZeroStageFourIsOutOfRange) {
  proto::Plan p;
  const Status st = ParseYaml(R"(
kind: plan
zero_stage: 4
pipelines: []
)",
                              "plan.yaml", &p);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml:3:"));
  EXPECT_TRUE(Has(st.message(), "zero_stage: value 4 is out of range (must be <= 3)"));
}

// ---- syntax, kinds, names ------------------------------------------------------------------------

TEST(BadYamlSyntax, ReportsFileAndLine) {
  const std::string file = BadFile("syntax_error.yaml");
  auto c = LoadCluster(file);
  ASSERT_FALSE(c.ok());
  const std::string& msg = c.status().message();
  EXPECT_TRUE(Has(msg, "YAML syntax error"));
  // "FILE:LINE:COL: …" with the line of the unclosed flow mapping (6) or the line where the parser
  // noticed (7).
  EXPECT_TRUE(msg.rfind(file + ":6:", 0) == 0 || msg.rfind(file + ":7:", 0) == 0) << msg;
}

TEST(BadYamlSyntax, MalformedDocumentsNeverCrash) {
  const std::vector<std::string> inputs = {
      "",                                     // empty document
      "just a scalar",                        // not a mapping
      "- a\n- b\n",                           // a list at the top level
      "kind: cluster\n\tname: x\n",           // tab indentation
      "kind: cluster\nname: *undefined\n",    // unknown alias
      "kind: [unclosed\n",                    // unclosed flow sequence
      "{a: 1, a: 2}",                         // duplicate unknown keys
      "name: x\nname: y\nnodes: []\n",        // duplicate known key
      "? [complex, key]\n: value\n",          // a non-scalar key
      std::string(3000, '[') + std::string(3000, ']'),  // deep nesting
      "nodes:\n  - " + std::string(200, 'x') + ": 1\n",  // long unknown key
      "name: \"\\xff\\xfe\"\nnodes: [{name: a, gpus: {type: \"\\0\", count: 1}}]\n",
      "network: {single_switch: {}, fat_tree: {nodes_per_leaf: 4}}\nname: a\nnodes: []\n",
      "name: a\nnodes:\n  - name: b\n    gpus: {type: a800, count: 1}\n    host_memory_gib: .nan\n",
      "name: a\nnodes:\n  - name: b\n    gpus: {type: a800, count: 1}\n    host_memory_gib: 1e999\n",
      "name: a\nnodes:\n  - name: b\n    gpus: {type: a800, count: 99999999999999999999999}\n",
      "name: a\nnodes:\n  - name: b\n    gpus: {type: a800, count: 1}\n    fabric: {kind: [pcie]}\n",
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string file = "fuzz" + std::to_string(i) + ".yaml";
    const Status st = ClusterStatus(inputs[i], file);
    EXPECT_FALSE(st.ok()) << "input " << i << " was accepted:\n" << inputs[i];
    EXPECT_TRUE(EveryLineNames(st.message(), file)) << "input " << i;
  }
}

TEST(BadSpecName, UnknownGpuTypeSuggestsACatalogName) {
  const std::string file = BadFile("cluster_unknown_gpu.yaml");
  auto c = LoadCluster(file);
  ASSERT_FALSE(c.ok());
  const std::string& msg = c.status().message();
  EXPECT_TRUE(Has(msg, file + ": nodes[0].gpus.type: unknown GPU type 'a100x'"));
  const std::string s = Suggestion(msg);
  ASSERT_FALSE(s.empty()) << msg;
  EXPECT_TRUE(GpuCatalog::Bundled().Find(s).ok()) << "suggested '" << s << "', which is no GPU";
}

TEST(BadSpecName, UnknownBundledClusterSuggestsNearestName) {
  auto c = LoadCluster("hexiscale-24");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Has(c.status().message(), "no bundled cluster named 'hexiscale-24'"));
  EXPECT_TRUE(Has(c.status().message(), "did you mean 'hexiscale-240'"));
}

TEST(BadSpecName, UnknownBundledModelSuggestsNearestName) {
  auto m = LoadModel("llama2-7");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Status::Code::kNotFound);
  EXPECT_TRUE(Has(m.status().message(), "no bundled model named 'llama2-7'"));
  EXPECT_TRUE(Has(m.status().message(), "did you mean 'llama2-7b'"));
}

TEST(BadSpecName, MissingPathIsNamed) {
  const std::string path = BadFile("does-not-exist.yaml");
  auto c = LoadCluster(path);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Has(c.status().message(), path));
}

// A model file loaded where a cluster is expected. The message should say what is wrong (the `kind`)
// rather than listing every model key as unknown to a cluster.
TEST(BadSpecKind, ModelFileLoadedAsClusterNamesTheKind) {
  const std::string file = std::string(HETSIM_SOURCE_DIR) + "/models/catalog/models/llama2-7b.yaml";
  auto c = LoadCluster(file);
  ASSERT_FALSE(c.ok());
  const std::string& msg = c.status().message();
  EXPECT_TRUE(EveryLineNames(msg, file));
  EXPECT_TRUE(Has(msg, "kind"));
  EXPECT_TRUE(Has(msg, "'model'"));
  EXPECT_LE(Lines(msg).size(), 2u) << "one clear error expected, got:\n" << msg;
}

TEST(BadSpecKind, WrongKindWithCompatibleKeysNamesBothKinds) {
  proto::Cluster c;
  const SpecText src{"wrong-kind.yaml", "kind: model\nname: x\nnodes: [{name: a, gpus: {type: a800, count: 1}}]\n",
                     false};
  const Status st = ParseSpec(src, SpecKind::kCluster, &c);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "wrong-kind.yaml:1:7: kind: this is a 'model' file but a cluster was expected"));
}

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

// ---- plans ---------------------------------------------------------------------------------------

// hexiscale-case-study: devices 0-2 a800 (80 GiB), 3-5 rtx4090, 6-7 rtx3090 (24 GiB).
// llama2-7b: 34 plan layers (0 embedding, 1..32 blocks, 33 head), 32 heads.
struct CaseStudy {
  Cluster cluster;
  TransformerModel model;
  proto::Training training;  // global batch 8, seq 1024, resolved
};

const CaseStudy& Study() {
  static const CaseStudy study = [] {
    auto c = LoadCluster("hexiscale-case-study");
    auto m = LoadModel("llama2-7b");
    HETSIM_CHECK(c.ok() && m.ok(), "bundled specs must load");
    proto::Training t;
    t.set_global_batch_size(8);
    t.set_seq_len(1024);
    auto rt = ResolveTraining(t, *m, "test training");
    HETSIM_CHECK(rt.ok(), rt.status().message());
    return CaseStudy{std::move(c).value(), std::move(m).value(), std::move(rt).value()};
  }();
  return study;
}

// One pipeline of micro-batch 2 × 4 micro-batches (= the global batch 8) with the given stages.
std::string OnePipeline(const std::string& stages, const std::string& top = "") {
  return "kind: plan\n" + top +
         "pipelines:\n"
         "  - micro_batch_size: 2\n"
         "    num_micro_batches: 4\n"
         "    stages:\n" +
         stages;
}

constexpr const char* kGoodStages =
    "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
    "      - {devices: [1], layer_begin: 12, layer_end: 23}\n"
    "      - {devices: [2], layer_begin: 23, layer_end: 34}\n";

// Parses the plan and validates it (structure only unless `memory`).
Status PlanStatus(const std::string& yaml, bool memory = false) {
  proto::Plan p;
  HETSIM_RETURN_IF_ERROR(ParseYaml(yaml, "plan.yaml", &p));
  const auto& s = Study();
  const PlanContext ctx{s.cluster, s.model, s.training};
  return memory ? ValidatePlan(p, ctx, "plan.yaml") : ValidatePlanStructure(p, ctx, "plan.yaml");
}

TEST(BadPlan, BaselinePlanIsValid) {
  const Status st = PlanStatus(OnePipeline(kGoodStages), /*memory=*/true);
  EXPECT_TRUE(st.ok()) << st.message();
}

TEST(BadPlan, DeviceUsedTwiceNamesBothPlaces) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], tp_degree: 2, layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [2], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [1], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml: pipelines[0].stages[2].devices[0]: device 1 (a800:1) is already used by "
                                "pipelines[0].stages[0].devices[1]"));
  EXPECT_EQ(Lines(st.message()).size(), 1u) << st.message();
}

TEST(BadPlan, DeviceIndexBeyondCluster) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [8], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[2].devices[0]: device 8 does not exist; cluster "
                                "'hexiscale-case-study' has devices 0..7"));
}

TEST(BadPlan, MissingLayerBetweenStages) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 14, layer_end: 23}\n"
      "      - {devices: [2], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].layer_begin: is 14"));
  EXPECT_TRUE(Has(st.message(), "layers 12..13 would be missing"));
}

TEST(BadPlan, LayerCoveredTwice) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 10, layer_end: 23}\n"
      "      - {devices: [2], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].layer_begin: is 10 but the previous stage ends at 12"));
  EXPECT_TRUE(Has(st.message(), "covered twice"));
}

TEST(BadPlan, LastStageEndsBeforeTheModel) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [2], layer_begin: 23, layer_end: 33}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[2].layer_end: the last stage ends at 33"));
  EXPECT_TRUE(Has(st.message(), "model 'llama2-7b' has 34 layers"));
  EXPECT_TRUE(Has(st.message(), "it must end at 34"));
}

TEST(BadPlan, EmptyLayerRange) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 12, layer_end: 12}\n"
      "      - {devices: [2], layer_begin: 12, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].layer_end: 12 must be greater than layer_begin 12"));
}

TEST(BadPlan, TpDegreeNotDividingHeads) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1, 2], tp_degree: 3, layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].tp_degree: 3 does not divide the model's 32 attention heads"));
  EXPECT_EQ(Lines(st.message()).size(), 1u) << st.message();
}

TEST(BadPlan, TpDegreeNotDividingStageDevices) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1, 2], tp_degree: 2, layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].tp_degree: 2 does not divide the stage's 3 devices"));
}

TEST(BadPlan, MicroBatchSplitWithWrongNumberOfEntries) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], micro_batch_split: [2], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].micro_batch_split: has 1 entries but the stage has 2 DP "
                                "replicas"));
}

TEST(BadPlan, MicroBatchSplitNotSummingToMicroBatch) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], micro_batch_split: [1, 2], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].micro_batch_split: sums to 3 but the pipeline's "
                                "micro_batch_size is 2"));
}

TEST(BadPlan, MicroBatchSplitWithZeroEntry) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], micro_batch_split: [2, 0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].micro_batch_split[1]: every DP replica needs at least one"));
}

TEST(BadPlan, GlobalBatchMismatch) {
  std::string yaml = OnePipeline(kGoodStages);
  yaml.replace(yaml.find("num_micro_batches: 4"), 20, "num_micro_batches: 5");
  const Status st = PlanStatus(yaml);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml: pipelines: micro_batch_size × num_micro_batches summed over pipelines is "
                                "10 sequences but the global batch is 8"));
}

TEST(BadPlan, DoesNotFitInMemory) {
  auto cluster = LoadCluster("hexiscale-case-study");
  auto model = LoadModel("llama2-70b");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  t.set_seq_len(1024);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok()) << training.status().message();
  proto::Plan p;
  ASSERT_TRUE(ParseYaml(R"(
kind: plan
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [6], layer_begin: 0, layer_end: 82}
)",
                        "big.yaml", &p)
                  .ok());
  const PlanContext ctx{*cluster, *model, *training};
  EXPECT_TRUE(ValidatePlanStructure(p, ctx, "big.yaml").ok());
  const Status st = ValidatePlan(p, ctx, "big.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInfeasible);
  EXPECT_TRUE(Has(st.message(), "big.yaml: pipelines[0].stages[0]: device 6 (rtx3090:0, rtx3090) needs"));
  EXPECT_TRUE(Has(st.message(), "GiB"));
  // RTX 3090: 24 GiB (catalog). Llama-2 70B has ~69e9 parameters; mixed-precision Adam keeps
  // 2 + 2 + 12 = 16 bytes each, ~1.1e12 bytes ≈ 1000 GiB before any activation.
  EXPECT_TRUE(Has(st.message(), "but has 24.0 GiB"));
  const auto at = st.message().find(" needs ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(st.message().substr(at + 7)), 1000.0) << st.message();
}

TEST(BadPlan, Bf16OnGpusWithoutBf16SuggestsFp16) {
  auto cluster = LoadCluster("metis-uniform-t4-v100-4");  // devices 0-1 t4, 2-3 v100
  auto model = LoadModel("llama-tiny");                    // 6 plan layers, 8 heads
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  auto training = ResolveTraining(t, *model, "training");  // dtype defaults to bf16
  ASSERT_TRUE(training.ok());
  ASSERT_EQ(training->dtype(), proto::DTYPE_BF16);
  proto::Plan p;
  ASSERT_TRUE(ParseYaml(R"(
kind: plan
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 3}
      - {devices: [2], layer_begin: 3, layer_end: 6}
)",
                        "old.yaml", &p)
                  .ok());
  const PlanContext ctx{*cluster, *model, *training};
  const Status st = ValidatePlanStructure(p, ctx, "old.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "old.yaml: pipelines[0].stages[0].devices[0]: device 0 is a t4, which cannot train in bf16"));
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].devices[0]: device 2 is a v100"));
  EXPECT_TRUE(Has(st.message(), "dtype: fp16"));
  // In fp16 the same plan is fine.
  proto::Training fp16 = *training;
  fp16.set_dtype(proto::DTYPE_FP16);
  const PlanContext ctx16{*cluster, *model, fp16};
  EXPECT_TRUE(ValidatePlanStructure(p, ctx16, "old.yaml").ok());
}

// CPU workers have neither BF16 nor FP16 units: the advice must not be "set dtype: fp16" when the
// training spec already says fp16.
TEST(BadPlan, Fp16OnCpuWorkersDoesNotSuggestFp16Again) {
  auto cluster = LoadCluster("cpu-4");
  auto model = LoadModel("llama-tiny");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  t.set_dtype(proto::DTYPE_FP16);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok());
  proto::Plan p;
  ASSERT_TRUE(ParseYaml("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], "
                        "layer_end: 6}]}]\n",
                        "cpu.yaml", &p)
                  .ok());
  const PlanContext ctx{*cluster, *model, *training};
  const Status st = ValidatePlanStructure(p, ctx, "cpu.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "cpu.yaml: pipelines[0].stages[0].devices[0]: device 0 is a cpu"));
  EXPECT_TRUE(HasNot(st.message(), "dtype: fp16")) << "the training spec is already fp16";
  EXPECT_TRUE(Has(st.message(), "fp32"));
}

// FP8 needs FP8 tensor cores (Hopper, Ada, MI300): an A100 gets the advice to train in bf16.
TEST(BadPlan, Fp8OnGpusWithoutFp8SuggestsBf16) {
  auto a100 = LoadCluster("autohet-nonuniform-1a100-4h20");  // device 0: an A100; 1-4: H20 (FP8)
  auto model = LoadModel("llama-tiny");
  ASSERT_TRUE(a100.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  t.set_dtype(proto::DTYPE_FP8);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok());
  proto::Plan p;
  ASSERT_TRUE(ParseYaml("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], "
                        "layer_end: 6}]}]\n",
                        "fp8.yaml", &p)
                  .ok());
  const Status st = ValidatePlanStructure(p, PlanContext{*a100, *model, *training}, "fp8.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "fp8.yaml: pipelines[0].stages[0].devices[0]: device 0 is a a100-80gb, which "
                                "cannot train in fp8; set the training spec's dtype: bf16"))
      << st.message();
  // TF32 it has.
  proto::Training tf32 = *training;
  tf32.set_dtype(proto::DTYPE_TF32);
  EXPECT_TRUE(ValidatePlanStructure(p, PlanContext{*a100, *model, tf32}, "fp8.yaml").ok());
}

// NVLS reduces inside an NVSwitch: a TP group across nodes, or NVLS for the gradient sync, is an error.
TEST(BadPlan, NvlsNeedsTpGroupsInsideOneNvswitchNode) {
  auto cluster = LoadCluster("autohet-nonuniform-1a100-4h20");  // node a100: device 0; node h20: 1-4
  auto model = LoadModel("llama-tiny");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok());
  const PlanContext ctx{*cluster, *model, *training};
  const auto check = [&](const std::string& yaml) {
    proto::Plan p;
    EXPECT_TRUE(ParseYaml(yaml, "nvls.yaml", &p).ok());
    return ValidatePlanStructure(p, ctx, "nvls.yaml");
  };
  const std::string across = "comm: {tp_algorithm: nvls}\npipelines: [{micro_batch_size: 1, num_micro_batches: 4, "
                             "stages: [{devices: [0, 1], tp_degree: 2, layer_end: 6}]}]\n";
  const Status st = check(across);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nvls.yaml: comm.tp_algorithm: nvls needs every TP group inside one NVSwitch node, "
                                "but pipelines[0].stages[0]'s TP group of devices[0..1] spans nodes"))
      << st.message();
  EXPECT_TRUE(Has(st.message(), "use tp_algorithm: ring"));
  // Inside the H20 node (NVSwitch) it is fine.
  EXPECT_TRUE(check("comm: {tp_algorithm: nvls}\npipelines: [{micro_batch_size: 1, num_micro_batches: 4, "
                    "stages: [{devices: [1, 2, 3, 4], tp_degree: 4, layer_end: 6}]}]\n")
                  .ok());
  const Status dp = check("comm: {dp_algorithm: nvls}\npipelines: [{micro_batch_size: 1, num_micro_batches: 4, "
                          "stages: [{devices: [1, 2], layer_end: 6}]}]\n");
  ASSERT_FALSE(dp.ok());
  EXPECT_TRUE(Has(dp.message(), "nvls.yaml: comm.dp_algorithm: nvls is modelled for TP all-reduces inside a node only"));
}

TEST(BadPlan, VirtualStagesWithoutInterleavedSchedule) {
  const Status st = PlanStatus(OnePipeline(kGoodStages, "virtual_stages: 2\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml: virtual_stages: only the interleaved_1f1b schedule uses virtual stages"));
  EXPECT_EQ(Lines(st.message()).size(), 1u) << st.message();
}

TEST(BadPlan, InterleavedScheduleNeedsMicroBatchMultipleOfStages) {
  std::string yaml = OnePipeline(kGoodStages, "schedule: interleaved_1f1b\nvirtual_stages: 2\n");
  const Status st = PlanStatus(yaml);  // 4 micro-batches, 3 stages
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].num_micro_batches: interleaved 1F1B needs a multiple of the stage "
                                "count (3)"));
}

TEST(BadPlan, EmptyPipelines) {
  const Status empty_list = PlanStatus("kind: plan\npipelines: []\n");
  ASSERT_FALSE(empty_list.ok());
  EXPECT_TRUE(Has(empty_list.message(), "plan.yaml: pipelines: a plan needs at least one pipeline"));
  const Status absent = PlanStatus("kind: plan\nname: nothing\n");
  ASSERT_FALSE(absent.ok());
  EXPECT_TRUE(Has(absent.message(), "plan.yaml:1:1: missing required key 'pipelines'"));
}

TEST(BadPlan, EmptyStageListAndEmptyDeviceList) {
  const Status st = PlanStatus(R"(
kind: plan
pipelines:
  - {micro_batch_size: 2, num_micro_batches: 2, stages: []}
  - micro_batch_size: 2
    num_micro_batches: 2
    stages:
      - {devices: [], layer_begin: 0, layer_end: 34}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages: a pipeline needs at least one stage"));
  EXPECT_TRUE(Has(st.message(), "pipelines[1].stages[0].devices: a stage needs at least one device"));
}

TEST(BadPlan, ReportsSeveralIndependentErrorsAtOnce) {
  const std::string file = BadFile("plan_two_errors.yaml");
  auto plan = LoadPlan(file);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const auto& s = Study();
  const PlanContext ctx{s.cluster, s.model, s.training};
  const Status st = ValidatePlan(*plan, ctx, file);
  ASSERT_FALSE(st.ok());
  // Two problems, two lines: device 0 in two stages, and layer 23 in none.
  const auto lines = Lines(st.message());
  ASSERT_EQ(lines.size(), 2u) << st.message();
  EXPECT_TRUE(Has(lines[0], "pipelines[0].stages[1].devices[0]: device 0 (a800:0) is already used by "
                            "pipelines[0].stages[0].devices[0]"));
  EXPECT_TRUE(Has(lines[1], "pipelines[0].stages[2].layer_begin: is 24 but the previous stage ends at 23; "
                            "layers 23..23 would be missing"));
  EXPECT_TRUE(EveryLineNames(st.message(), file));
}

}  // namespace
}  // namespace hetsim::models
