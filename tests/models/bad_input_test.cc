// Malformed and impossible inputs: every one must be rejected with a message that names the file, the
// key path of the offending field and, for misspellings, the nearest valid name — and none may crash
// (also under ASan/UBSan). Inputs are inline raw strings or files under tests/data/bad/. Here the text of
// spec files: unknown keys and enum values, wrong types, out-of-range numbers, YAML syntax, unknown names,
// the wrong kind of file, output paths. Impossible clusters, models and trainings: bad_spec_test.cc; plans:
// bad_plan_test.cc.
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
#include "tests/models/bad_input_helpers.h"

namespace hetsim::models {
namespace {

using bad_input::ClusterStatus;
using bad_input::kGoodCluster;
using bad_input::kGoodModel;
using bad_input::ModelStatus;
using testing_util::BadFile;
using testing_util::EveryLineNames;
using testing_util::Has;
using testing_util::Lines;

// The name in "did you mean 'NAME'?" or "".
std::string Suggestion(const std::string& text) {
  const std::string key = "did you mean '";
  const auto at = text.find(key);
  if (at == std::string::npos) return "";
  const auto end = text.find('\'', at + key.size());
  return end == std::string::npos ? "" : text.substr(at + key.size(), end - at - key.size());
}


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

}  // namespace
}  // namespace hetsim::models
