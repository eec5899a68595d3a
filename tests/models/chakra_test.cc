// Chakra execution traces (models/chakra.h): Chakra's own feeder facts about its test trace, the file encoding,
// a lowering exported and imported back operation for operation, and the errors bad traces get.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "models/chakra.h"
#include "models/spec_io.h"
#include "models/training.h"

namespace hetsim::models {
namespace {

namespace fs = std::filesystem;

const std::string kSource = HETSIM_SOURCE_DIR;
// Chakra's tests/data/chakra.0.et, gzip-compressed (tests/data/chakra/README.md).
const std::string kBundledTrace = kSource + "/tests/data/chakra/chakra.0.et.gz";

const ChakraProtoMsg::Node& NodeWithId(const ChakraTrace& t, uint64_t id) {
  for (const auto& n : t.nodes) {
    if (n.id() == id) return n;
  }
  ADD_FAILURE() << "no node " << id;
  return t.nodes.front();
}

// Chakra's tests/feeder/tests.cpp: ConstructorNodeIDTest, ConstructorNodeValuesTest, ConstructorETFeederTest.
TEST(ChakraFeeder, FirstIssuableNodesAreThoseChakrasFeederTestNames) {
  auto t = ReadChakraTrace(kBundledTrace);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->rank, 0u);
  const auto first = IssuableNodes(*t, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], 216u);
  EXPECT_EQ(first[1], 432u);
  const auto& a = NodeWithId(*t, 216);
  EXPECT_EQ(a.type(), ChakraProtoMsg::COMP_NODE);
  ASSERT_NE(FindAttr(a, "is_cpu_op"), nullptr);
  EXPECT_TRUE(FindAttr(a, "is_cpu_op")->bool_val());
  ASSERT_NE(FindAttr(a, "rf_id"), nullptr);
  EXPECT_EQ(FindAttr(a, "rf_id")->value_case(), ChakraProtoMsg::AttributeProto::kInt64Val);
  EXPECT_EQ(FindAttr(a, "rf_id")->int64_val(), 2);
  const auto& b = NodeWithId(*t, 432);
  EXPECT_EQ(b.type(), ChakraProtoMsg::COMM_COLL_NODE);
  EXPECT_TRUE(FindAttr(b, "is_cpu_op")->bool_val());
  EXPECT_EQ(FindAttr(b, "rf_id")->int64_val(), 110);
  // The children of node 216 in the order the feeder meets them: 217, 430, 435.
  std::vector<uint64_t> children;
  for (const auto& n : t->nodes) {
    for (uint64_t d : n.data_deps()) {
      if (d == 216) children.push_back(n.id());
    }
  }
  ASSERT_GE(children.size(), 3u);
  EXPECT_EQ(children[0], 217u);
  EXPECT_EQ(children[1], 430u);
  EXPECT_EQ(children[2], 435u);
  const std::string text = DescribeChakraTrace(*t, 2);
  EXPECT_NE(text.find("id 216  COMP_NODE"), std::string::npos) << text;
  EXPECT_NE(text.find("id 432  COMM_COLL_NODE"), std::string::npos) << text;
}

// Chakra's trace written out uncompressed (as Chakra's tools leave it, 2,978,371 bytes in Chakra's test data)
// reads back as the bundled compressed copy: the plain and the gzip paths of the reader agree.
TEST(ChakraFeeder, PlainFileEqualsTheBundledCompressedOne) {
  auto b = ReadChakraTrace(kBundledTrace);
  ASSERT_TRUE(b.ok()) << b.status().message();
  const std::string plain = (fs::temp_directory_path() / "hetsim-chakra-plain.0.et").string();
  ASSERT_TRUE(WriteChakraTrace(plain, *b).ok());
  auto a = ReadChakraTrace(plain);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(fs::file_size(plain), 2978371u);
  EXPECT_EQ(EncodeChakraTrace(*a), EncodeChakraTrace(*b));
  fs::remove(plain);
}

TEST(ChakraFiles, EncodingReadsBackAndNamesFollowChakra) {
  ChakraTrace t;
  t.metadata.set_version("1.0.0");
  for (uint64_t i = 0; i < 3; ++i) {
    auto& n = t.nodes.emplace_back();
    n.set_id(10 + i);
    n.set_type(ChakraProtoMsg::COMP_NODE);
    if (i > 0) n.add_data_deps(10 + i - 1);
  }
  const std::string path = ::testing::TempDir() + "/enc.3.et";
  ASSERT_TRUE(WriteChakraTrace(path, t).ok());
  auto back = ReadChakraTrace(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rank, 3u);
  EXPECT_EQ(back->nodes.size(), 3u);
  EXPECT_EQ(EncodeChakraTrace(*back), EncodeChakraTrace(t));
  EXPECT_EQ(ChakraFileName("llama", 7), "llama.7.et");
  EXPECT_EQ(ChakraRankOfFileName("/x/a.b.12.et"), 12);
  EXPECT_EQ(ChakraRankOfFileName("chakra.0.et.gz"), 0);
  EXPECT_EQ(ChakraRankOfFileName("trace.et"), -1);
  // The varint size prefix of a 3-byte GlobalMetadata is one byte: 0x03 then the message.
  ChakraTrace small;
  small.metadata.set_version("a");
  EXPECT_EQ(EncodeChakraTrace(small), std::string("\x03\x0a\x01\x61", 4));
}

TEST(ChakraFiles, DamagedFilesAreNamedWithThePlaceTheyBreak) {
  ChakraTrace t;
  for (uint64_t i = 0; i < 4; ++i) t.nodes.emplace_back().set_id(i);
  std::string bytes = EncodeChakraTrace(t);
  const std::string cut = ::testing::TempDir() + "/cut.0.et";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  auto r = ReadChakraTrace(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(cut), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("after node id 2"), std::string::npos) << r.status().message();
  const std::string empty = ::testing::TempDir() + "/empty.0.et";
  std::ofstream(empty, std::ios::binary).flush();
  EXPECT_NE(ReadChakraTrace(empty).status().message().find("empty file"), std::string::npos);
  const std::string text = ::testing::TempDir() + "/text.0.et";
  std::ofstream(text, std::ios::binary) << "kind: plan\nname: not a trace\n";
  EXPECT_FALSE(ReadChakraTrace(text).ok());
}

TEST(ChakraFiles, TensorBytesCountElementsTimesElementBytes) {
  ChakraProtoMsg::IOInfo io;
  io.set_values("[[[4, 5, 0, 64, 4, 'cuda:0'], [6, 7, 0, 256, 2, 'cuda:0']], '<Object>', 0, [1, 2]]");
  EXPECT_DOUBLE_EQ(TensorBytes(io), 64 * 4 + 256 * 2);
}

// ---- export and import of a lowering ------------------------------------------------------------------

struct Lowered {
  Cluster cluster;
  TransformerModel model;
  proto::Training training;
  proto::Plan plan;
  Lowering lowering;
};

Lowered Lower(const std::string& plan_name, bool fused) {
  auto plan = LoadPlan(kSource + "/models/catalog/plans/" + plan_name + ".yaml");
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  auto cluster = LoadCluster(plan->cluster());
  auto model = LoadModel(plan->model());
  EXPECT_TRUE(cluster.ok() && model.ok());
  auto training = ResolveTraining(plan->training(), *model, plan_name);
  EXPECT_TRUE(training.ok()) << training.status().message();
  Lowered out{std::move(*cluster), std::move(*model), std::move(*training), std::move(*plan), {}};
  LoweringOptions lo;
  lo.fuse_passes = fused;
  auto lowering = LowerPlan(out.plan, PlanContext{out.cluster, out.model, out.training}, lo);
  EXPECT_TRUE(lowering.ok()) << lowering.status().message();
  out.lowering = std::move(*lowering);
  return out;
}

// Every file written and read back, then imported: the same operations, rank by rank (FormatLowering prints
// every field the simulator uses, groups as device lists).
void ExpectRoundTrip(const std::string& plan_name, bool fused) {
  const Lowered l = Lower(plan_name, fused);
  ChakraExportOptions eo;
  eo.compute_seconds = [](uint32_t slot, bool dp, size_t i) { return 1e-3 * slot + (dp ? 0.5 : 0) + 1e-6 * i; };
  const auto traces = ExportChakra(l.lowering, eo);
  ASSERT_EQ(traces.size(), l.lowering.ranks.size());
  std::vector<ChakraTrace> read;
  for (const auto& t : traces) {
    const std::string path = ::testing::TempDir() + "/" + ChakraFileName(plan_name, t.rank);
    ASSERT_TRUE(WriteChakraTrace(path, t).ok());
    auto back = ReadChakraTrace(path);
    ASSERT_TRUE(back.ok()) << back.status().message();
    read.push_back(std::move(*back));
  }
  ChakraImportOptions io;
  io.durations = true;
  auto imported = ImportChakra(read, l.cluster, io);
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  EXPECT_TRUE(imported->from_hetsim);
  EXPECT_EQ(FormatLowering(imported->lowering), FormatLowering(l.lowering)) << plan_name;
  EXPECT_EQ(imported->lowering.devices, l.lowering.devices);
  // The compute seconds come back exactly.
  for (uint32_t s = 0; s < imported->seconds.size(); ++s) {
    for (size_t i = 0; i < l.lowering.ranks[s].ops.size(); ++i) {
      if (l.lowering.ranks[s].ops[i].kind != OpKind::kCompute) continue;
      EXPECT_EQ(imported->seconds[s][0][i], 1e-3 * s + 1e-6 * static_cast<double>(i));
    }
  }
}

TEST(ChakraExport, LoweringsComeBackOperationForOperation) {
  ExpectRoundTrip("cpu-4-hetero", false);
  ExpectRoundTrip("cpu-4-hetero", true);
  ExpectRoundTrip("cpu-4-pp4-gpipe", false);
  ExpectRoundTrip("metis-mixed-stage", true);
}

// What Chakra's tools read: types, sizes, ranks, tags and process groups, and dependencies that resolve.
TEST(ChakraExport, NodesCarryChakrasAttributesAndResolvableDependencies) {
  const Lowered l = Lower("cpu-4-hetero", false);
  const auto traces = ExportChakra(l.lowering, {});
  const OpTotals totals = TotalOps(l.lowering);
  double num_ops = 0, send_bytes = 0, recv_bytes = 0;
  std::map<std::pair<int64_t, int64_t>, int> sends, recvs;  // (src, dst) -> messages
  for (const auto& t : traces) {
    std::set<uint64_t> ids;
    for (const auto& n : t.nodes) ids.insert(n.id());
    EXPECT_EQ(ids.size(), t.nodes.size());
    for (const auto& n : t.nodes) {
      for (uint64_t d : n.data_deps()) EXPECT_TRUE(ids.count(d)) << "rank " << t.rank << " node " << n.id();
      if (const auto* a = FindAttr(n, "num_ops")) num_ops += static_cast<double>(a->int64_val());
      if (n.type() == ChakraProtoMsg::COMM_COLL_NODE) {
        EXPECT_NE(FindAttr(n, "comm_type"), nullptr);
        EXPECT_NE(FindAttr(n, "comm_size"), nullptr);
        EXPECT_NE(FindAttr(n, "pg_name"), nullptr);
      }
      if (n.type() == ChakraProtoMsg::COMM_SEND_NODE || n.type() == ChakraProtoMsg::COMM_RECV_NODE) {
        const bool send = n.type() == ChakraProtoMsg::COMM_SEND_NODE;
        const int64_t src = FindAttr(n, "comm_src")->int32_val(), dst = FindAttr(n, "comm_dst")->int32_val();
        EXPECT_EQ(send ? src : dst, static_cast<int64_t>(t.rank));
        ++(send ? sends : recvs)[{src, dst}];
        (send ? send_bytes : recv_bytes) += static_cast<double>(FindAttr(n, "comm_size")->int64_val());
      }
    }
    // The first node of the main stream has nothing to wait for.
    EXPECT_EQ(IssuableNodes(t, 1).at(0), 0u);
  }
  EXPECT_NEAR(num_ops, totals.flops, 1.0 * static_cast<double>(l.lowering.ranks.size()) * 1000);
  EXPECT_NEAR(send_bytes, totals.send_bytes, 1000);
  EXPECT_EQ(sends, recvs);  // every send has its receive on the peer
  EXPECT_NEAR(recv_bytes, totals.recv_bytes, 1000);
}

// ---- errors ---------------------------------------------------------------------------------------------

ChakraTrace OneRank(const std::vector<ChakraProtoMsg::Node>& nodes) {
  ChakraTrace t;
  t.path = "bad.0.et";
  t.nodes = nodes;
  return t;
}

ChakraProtoMsg::Node Coll(uint64_t id, int64_t comm_type) {
  ChakraProtoMsg::Node n;
  n.set_id(id);
  n.set_type(ChakraProtoMsg::COMM_COLL_NODE);
  auto* a = n.add_attr();
  a->set_name("comm_type");
  a->set_int64_val(comm_type);
  auto* s = n.add_attr();
  s->set_name("comm_size");
  s->set_int64_val(1024);
  return n;
}

std::string ImportError(const std::vector<ChakraTrace>& traces, const std::string& cluster = "cpu-4") {
  auto c = LoadCluster(cluster);
  EXPECT_TRUE(c.ok());
  auto r = ImportChakra(traces, *c, {});
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(ChakraImport, BadTracesGetOneClearMessage) {
  std::string e = ImportError({OneRank({Coll(7, 42)})});
  EXPECT_NE(e.find("bad.0.et: node id 7"), std::string::npos) << e;
  EXPECT_NE(e.find("comm_type is 42"), std::string::npos) << e;
  e = ImportError({OneRank({Coll(8, ChakraProtoMsg::GATHER)})});
  EXPECT_NE(e.find("GATHER"), std::string::npos) << e;
  auto dep = Coll(9, ChakraProtoMsg::ALL_REDUCE);
  dep.add_data_deps(99);
  e = ImportError({OneRank({dep})});
  EXPECT_NE(e.find("node id 9"), std::string::npos) << e;
  EXPECT_NE(e.find("data_deps names node 99"), std::string::npos) << e;
  auto a = Coll(1, 0), b = Coll(2, 0);
  a.add_data_deps(2);
  b.add_data_deps(1);
  e = ImportError({OneRank({a, b})});
  EXPECT_NE(e.find("cycle"), std::string::npos) << e;
  e = ImportError({OneRank({Coll(3, 0), Coll(3, 0)})});
  EXPECT_NE(e.find("field id repeats"), std::string::npos) << e;
  ChakraProtoMsg::Node no_type;
  no_type.set_id(5);
  no_type.set_type(ChakraProtoMsg::COMM_COLL_NODE);
  e = ImportError({OneRank({no_type})});
  EXPECT_NE(e.find("without field attr comm_type"), std::string::npos) << e;
}

TEST(ChakraImport, MoreRanksThanDevicesNamesTheCluster) {
  std::vector<ChakraTrace> five;
  for (uint32_t r = 0; r < 5; ++r) {
    five.push_back(OneRank({Coll(1, 0)}));
    five.back().rank = r;
  }
  const std::string e = ImportError(five);
  EXPECT_NE(e.find("cluster 'cpu-4' has 4 devices"), std::string::npos) << e;
  EXPECT_NE(e.find("5 ranks"), std::string::npos) << e;
}

}  // namespace
}  // namespace hetsim::models
