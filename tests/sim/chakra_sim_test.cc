// Chakra traces on the simulator (sim/chakra.h): an exported plan plays to the simulated time of the plan
// itself; hand-made traces to their closed forms; Chakra's test trace plays.
#include <gtest/gtest.h>

#include "models/chakra.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "sim/chakra.h"
#include "sim/simulator.h"
#include "tests/sim/simulator_fixture.h"

namespace hetsim::sim {
namespace {

const std::string kSource = HETSIM_SOURCE_DIR;

// simulate (every device played) against export -> files -> import -> simulate, at one fidelity.
void ExpectSameTime(const std::string& plan_name, const std::string& fidelity) {
  auto plan = models::LoadPlan(kSource + "/models/catalog/plans/" + plan_name + ".yaml");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto cluster = models::LoadCluster(plan->cluster());
  auto model = models::LoadModel(plan->model());
  ASSERT_TRUE(cluster.ok() && model.ok());
  auto training = models::ResolveTraining(plan->training(), *model, plan_name);
  ASSERT_TRUE(training.ok()) << training.status().message();
  const models::PlanContext ctx{*cluster, *model, *training};
  SimOptions so;
  so.fidelity = *ParseFidelity(fidelity);
  so.fold = false;
  auto simulated = SimulateIteration(*plan, ctx, so);
  ASSERT_TRUE(simulated.ok()) << simulated.status().message();
  const double expected = simulated->report.iteration_time_s() - simulated->report.straggler_wait_s();

  ChakraExportRequest request;
  request.fidelity = so.fidelity;
  auto traces = ExportPlanChakra(*plan, ctx, request);
  ASSERT_TRUE(traces.ok()) << traces.status().message();
  std::vector<models::ChakraTrace> read;
  for (const auto& t : *traces) {
    const std::string path = ::testing::TempDir() + "/" + models::ChakraFileName(plan_name + "-" + fidelity, t.rank);
    ASSERT_TRUE(models::WriteChakraTrace(path, t).ok());
    auto back = models::ReadChakraTrace(path);
    ASSERT_TRUE(back.ok()) << back.status().message();
    read.push_back(std::move(*back));
  }
  models::ChakraImportOptions io;
  io.durations = true;
  auto imported = models::ImportChakra(read, *cluster, io);
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  ChakraSimOptions cs;
  cs.fidelity = so.fidelity;
  auto played = SimulateChakra(std::move(*imported), *cluster, cs);
  ASSERT_TRUE(played.ok()) << played.status().message();
  EXPECT_GT(expected, 0);
  EXPECT_NEAR(played->engine.iteration_s, expected, 1e-12 * expected) << plan_name << " at " << fidelity;
}

TEST(ChakraRoundTrip, ExportedPlansPlayToThePlansSimulatedTime) {
  ExpectSameTime("cpu-4-hetero", "balanced");  // TP 2 + PP 2 + DP over two uneven pipelines, CPU workers
  ExpectSameTime("cpu-4-hetero", "full");      // per layer, every collective step
  ExpectSameTime("metis-mixed-stage", "balanced");  // GPUs: TP, PP, intra-stage DP, ZeRO-1
  ExpectSameTime("cpu-4-pp4-gpipe", "fast");
}

// Hand-made traces on one node whose links are free: closed forms from the durations.
ChakraProtoMsg::Node Node(uint64_t id, ChakraProtoMsg::NodeType type, uint64_t micros, std::vector<uint64_t> deps = {}) {
  ChakraProtoMsg::Node n;
  n.set_id(id);
  n.set_type(type);
  n.set_duration_micros(micros);
  for (uint64_t d : deps) n.add_data_deps(d);
  return n;
}

void AddInt(ChakraProtoMsg::Node* n, const char* name, int64_t v, bool int32 = false) {
  auto* a = n->add_attr();
  a->set_name(name);
  if (int32) {
    a->set_int32_val(static_cast<int32_t>(v));
  } else {
    a->set_int64_val(v);
  }
}

double Play(std::vector<models::ChakraTrace> traces) {
  const models::Cluster cluster = fixture::ClusterFrom(fixture::kFreeNode);
  models::ChakraImportOptions io;
  io.durations = true;
  auto imported = models::ImportChakra(traces, cluster, io);
  EXPECT_TRUE(imported.ok()) << imported.status().message();
  if (!imported.ok()) return -1;
  auto played = SimulateChakra(std::move(*imported), cluster, {});
  EXPECT_TRUE(played.ok()) << played.status().message();
  return played.ok() ? played->engine.iteration_s : -1;
}

models::ChakraTrace Trace(uint32_t rank, std::vector<ChakraProtoMsg::Node> nodes) {
  models::ChakraTrace t;
  t.path = "hand." + std::to_string(rank) + ".et";
  t.rank = rank;
  t.nodes = std::move(nodes);
  return t;
}

// Rank 0 computes 1 ms and sends to rank 1, which then computes 0.5 ms: 1.5 ms.
TEST(ChakraHandMade, ASendBetweenTwoComputesChainsThem) {
  auto send = Node(2, ChakraProtoMsg::COMM_SEND_NODE, 0, {1});
  AddInt(&send, "comm_src", 0, true);
  AddInt(&send, "comm_dst", 1, true);
  AddInt(&send, "comm_size", 1 << 20);
  auto recv = Node(1, ChakraProtoMsg::COMM_RECV_NODE, 0);
  AddInt(&recv, "comm_src", 0, true);
  AddInt(&recv, "comm_dst", 1, true);
  AddInt(&recv, "comm_size", 1 << 20);
  const double t = Play({Trace(0, {Node(1, ChakraProtoMsg::COMP_NODE, 1000), send}),
                         Trace(1, {recv, Node(2, ChakraProtoMsg::COMP_NODE, 500, {1})})});
  EXPECT_NEAR(t, 1.5e-3, 1e-6);
}

// A collective with no dependency on the compute runs beside it (the second stream): the iteration is the
// compute's 2 ms. Made dependent on it, it follows: 2 ms + the call's fixed cost (tens of microseconds).
TEST(ChakraHandMade, IndependentCommunicationOverlapsTheCompute) {
  auto coll = [](uint64_t id, std::vector<uint64_t> deps) {
    auto n = Node(id, ChakraProtoMsg::COMM_COLL_NODE, 0, std::move(deps));
    AddInt(&n, "comm_type", ChakraProtoMsg::ALL_REDUCE);
    AddInt(&n, "comm_size", 1 << 20);
    return n;
  };
  auto rank = [&](uint32_t r, bool dependent) {
    return Trace(r, {Node(1, ChakraProtoMsg::COMP_NODE, 2000),
                     coll(2, dependent ? std::vector<uint64_t>{1} : std::vector<uint64_t>{})});
  };
  const double free = Play({rank(0, false), rank(1, false)});
  EXPECT_NEAR(free, 2e-3, 1e-9);
  const double chained = Play({rank(0, true), rank(1, true)});
  EXPECT_GT(chained, 2e-3 + 1e-6);
  EXPECT_LT(chained, 2e-3 + 200e-6);
}

// Chakra's test trace, one rank played on two GPUs: its device kernels run one after another on the main
// stream, so the iteration is at least the sum of their recorded durations; its seven collectives (five
// all-reduces, two broadcasts) on free links add little.
TEST(ChakraHandMade, ChakrasTestTracePlaysOnTwoDevices) {
  auto t = models::ReadChakraTrace(kSource + "/tests/data/chakra/chakra.0.et.gz");
  ASSERT_TRUE(t.ok()) << t.status().message();
  double kernels_s = 0;
  for (const auto& n : t->nodes) {
    const auto* cpu = models::FindAttr(n, "is_cpu_op");
    if (n.type() == ChakraProtoMsg::COMP_NODE && cpu != nullptr && !cpu->bool_val()) {
      kernels_s += static_cast<double>(n.duration_micros()) * 1e-6;
    }
  }
  const models::Cluster cluster = fixture::ClusterFrom(fixture::kFreeNode);
  models::ChakraImportOptions io;
  io.durations = true;
  io.replicate = 2;
  auto imported = models::ImportChakra({*t}, cluster, io);
  ASSERT_TRUE(imported.ok()) << imported.status().message();
  auto played = SimulateChakra(std::move(*imported), cluster, {});
  ASSERT_TRUE(played.ok()) << played.status().message();
  EXPECT_GT(kernels_s, 0);
  EXPECT_GE(played->engine.iteration_s, kernels_s * (1 - 1e-12));
  EXPECT_LT(played->engine.iteration_s, kernels_s + 7 * 1e-3);
}

}  // namespace
}  // namespace hetsim::sim
