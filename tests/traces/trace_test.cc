// Traces: checks against a cluster, the Llama 3 failure generator, spot trace conversion.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "models/yaml_proto.h"
#include "tests/common/specs.h"
#include "traces/llama3.h"
#include "traces/spot.h"
#include "traces/trace.h"

namespace hetsim::traces {
namespace {

using Event = proto::TraceEvent;
using testing_util::ClusterFrom;

// 16 nodes of 8 H100s = 128 GPUs.
using testing_util::Nodes16;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Llama3Table5, MatchesTheBundledCsvAndSumsTo419) {
  std::ifstream in(std::string(HETSIM_SOURCE_DIR) + "/traces/data/llama3_table5_unexpected_interruptions.csv");
  ASSERT_TRUE(in.good());
  std::string line;
  std::getline(in, line);  // header
  size_t i = 0;
  int total = 0;
  for (; std::getline(in, line); ++i) {
    std::stringstream ss(line);
    std::string component, category, count;
    std::getline(ss, component, ',');
    std::getline(ss, category, ',');
    std::getline(ss, count, ',');
    ASSERT_LT(i, Llama3Table5().size());
    EXPECT_EQ(component, Llama3Table5()[i].component);
    EXPECT_EQ(category, Llama3Table5()[i].category);
    EXPECT_EQ(std::stoi(count), Llama3Table5()[i].count);
    total += Llama3Table5()[i].count;
  }
  EXPECT_EQ(i, Llama3Table5().size());
  EXPECT_EQ(total, 419);
}

TEST(Llama3Failures, RatesScaleWithGpusAndDays) {
  // 128 GPUs for 6,912 days is 128 × 6,912 = 884,736 GPU-days = the snapshot's 16,384 × 54: expect 419
  // interruptions (Poisson: standard deviation √419 ≈ 20.5; ±4σ accepted), GPU components 270 of them.
  const auto cluster = Nodes16();
  FailureTraceOptions o;
  o.days = 6912;
  const proto::Trace t = GenerateLlama3Failures(cluster, "sixteen", o);
  EXPECT_TRUE(CheckTrace(t, cluster, "generated").ok()) << CheckTrace(t, cluster, "generated").message();
  EXPECT_NEAR(t.events_size(), 419, 82);
  std::map<int, int> by_kind;
  for (const auto& e : t.events()) ++by_kind[e.kind()];
  EXPECT_NEAR(by_kind[Event::KIND_GPU_FAILURE], 268, 66);   // 148+72+19+17+6+6 = 268, σ ≈ 16.4
  EXPECT_NEAR(by_kind[Event::KIND_SOFTWARE_FAILURE], 63, 32);  // 54 + 7 + 2
  EXPECT_NEAR(by_kind[Event::KIND_LINK_FAILURE], 35, 24);
  EXPECT_EQ(t.duration_s(), 6912 * 86400.0);
  for (const auto& e : t.events()) {
    if (e.kind() == Event::KIND_GPU_FAILURE) {
      EXPECT_EQ(e.repair_s(), 6 * 3600.0);
    }
  }
}

TEST(Llama3Failures, SameSeedSameTraceByteForByte) {
  const auto cluster = Nodes16();
  FailureTraceOptions o;
  o.days = 1000;
  const std::string a = models::MessageToYaml(GenerateLlama3Failures(cluster, "sixteen", o));
  const std::string b = models::MessageToYaml(GenerateLlama3Failures(cluster, "sixteen", o));
  o.seed = 2;
  const std::string c = models::MessageToYaml(GenerateLlama3Failures(cluster, "sixteen", o));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(CheckTrace, NamesTheEventTheFieldAndTheFix) {
  const auto cluster = Nodes16();
  proto::Trace t;
  auto* a = t.add_events();
  a->set_time_s(10), a->set_kind(Event::KIND_GPU_FAILURE), a->add_devices(128);
  auto* b = t.add_events();
  b->set_time_s(5), b->set_kind(Event::KIND_NODE_FAILURE), b->add_nodes(16);
  auto* c = t.add_events();
  c->set_time_s(20), c->set_kind(Event::KIND_STRAGGLER), c->add_devices(0), c->set_slowdown(0.5);
  const Status s = CheckTrace(t, cluster, "t.yaml");
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("t.yaml: events[0].devices[0]: GPU 128 does not exist in cluster sixteen (16 nodes, 128 GPUs); "
                   "devices are numbered 0..127"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("t.yaml: events[1].time_s: 5"), std::string::npos) << m;
  EXPECT_NE(m.find("t.yaml: events[1].nodes[0]: node 16 does not exist"), std::string::npos) << m;
  EXPECT_NE(m.find("t.yaml: events[2].slowdown: a straggler runs slower"), std::string::npos) << m;
}

TEST(SpotTraces, BambooNamesTakeTheLowestFreeNode) {
  // a and b join at 0 (nodes 0, 1), a leaves at 60 s (node 0 freed), c joins at 120 s (takes node 0).
  const auto cluster = Nodes16();
  const std::string f = WriteTemp("bamboo.csv", "0,add,a\n0,add,b\n60000,remove,a\n120000,add,c\n");
  auto t = ConvertSpotTrace(f, cluster, "sixteen", {"bamboo", 120});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->starts_empty());
  ASSERT_EQ(t->events_size(), 3);
  EXPECT_EQ(t->events(0).kind(), Event::KIND_CAPACITY_ADDED);
  EXPECT_EQ(t->events(0).nodes_size(), 2);
  EXPECT_EQ(t->events(1).kind(), Event::KIND_PREEMPTION);
  EXPECT_EQ(t->events(1).time_s(), 60);
  EXPECT_EQ(t->events(1).nodes(0), 0u);
  EXPECT_EQ(t->events(1).notice_s(), 120);
  EXPECT_EQ(t->events(2).nodes(0), 0u);
  EXPECT_EQ(t->duration_s(), 120);
}

TEST(SpotTraces, CountsAddLowestAndTakeHighest) {
  // SkyPilot: 300 s apart, 3 then 1 then 2 instances.
  const auto cluster = Nodes16();
  const std::string f = WriteTemp("sky.json", R"({"metadata": {"gap_seconds": 300}, "data": [3, 1, 2]})");
  auto t = ConvertSpotTrace(f, cluster, "sixteen", {"skypilot", 30});
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->events_size(), 3);
  EXPECT_EQ(t->events(1).kind(), Event::KIND_PREEMPTION);
  EXPECT_EQ(t->events(1).time_s(), 300);
  ASSERT_EQ(t->events(1).nodes_size(), 2);
  EXPECT_EQ(t->events(1).nodes(0), 1u);
  EXPECT_EQ(t->events(1).nodes(1), 2u);
  EXPECT_EQ(t->events(2).nodes(0), 1u);
  EXPECT_EQ(t->duration_s(), 900);
}

TEST(SpotTraces, MoreInstancesThanNodesAndBadLinesAreErrors) {
  const auto cluster = Nodes16();
  const std::string many = WriteTemp("many.csv", "0.0,3\n1.5,17\n");
  auto a = ConvertSpotTrace(many, cluster, "sixteen", {"hours-count", 120});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find(many + ":2: 17 instances alive at once but the cluster has 16 nodes"),
            std::string::npos)
      << a.status().message();
  const std::string bad = WriteTemp("bad.csv", "0,add,a\n5,leave,a\n");
  auto b = ConvertSpotTrace(bad, cluster, "sixteen", {"bamboo", 120});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find(bad + ":2: expected time_ms,add|remove,NAME"), std::string::npos);
  auto c = ConvertSpotTrace(bad, cluster, "sixteen", {"csv", 120});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("unknown spot trace format 'csv'"), std::string::npos);
}

TEST(SpotTraces, EveryBundledSpotTraceConverts) {
  // One node per instance: a cluster of 256 single-GPU nodes holds every bundled trace's peak.
  const auto cluster = ClusterFrom("name: spot\nnodes:\n  - {name: v, count: 256, gpus: {type: v100, count: 1}, nic: {kind: ethernet, bandwidth_gbps: 25}}\n");
  const std::string d = std::string(HETSIM_SOURCE_DIR) + "/traces/data/spot/";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"bamboo/p3-trace.csv", "bamboo"},
      {"bamboo/g4dn-trace.csv", "bamboo"},
      {"bamboo/aws-spot-instances-p2-xlarge-2020-11-20-to-2020-11-23.csv", "hours-count"},
      {"bamboo/a100x1-east1b.txt", "dated-count"},
      {"parcae/aws_traces_gpt-6.7b_trace_hh_55_65.txt", "parcae"},
      {"skypilot/us-east-2a_v100_1.json", "skypilot"}};
  for (const auto& [file, format] : files) {
    auto t = ConvertSpotTrace(d + file, cluster, "spot", {format, 120});
    ASSERT_TRUE(t.ok()) << file << ": " << t.status().message();
    EXPECT_GT(t->events_size(), 1) << file;
    EXPECT_TRUE(CheckTrace(*t, cluster, file).ok()) << file;
  }
}

}  // namespace
}  // namespace hetsim::traces
