// HexiScale planner (planners/hexiscale): the Appendix A equations against hand-derived values, the METIS
// partitioning's weight scaling and cut objectives, and behaviours the paper states (§3.2-3.3, §4.4).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/hexiscale/cost.h"
#include "planners/hexiscale/graph.h"
#include "planners/hexiscale/pipeline.h"
#include "planners/search.h"
#include "planners/planner.h"

namespace hetsim::planners::hexiscale {
namespace {

// Two machines: A = 2 A800 on NVSwitch (100 GB/s, 2 us), B = 2 RTX 4090 on PCIe (10 GB/s, 5 us); one
// 8 Gb/s (1 GB/s) Ethernet NIC per machine, 30 us, behind a 1 us switch. Across machines a GPU's share
// of its NIC is 0.5 GB/s and the latency 30 + 1 = 31 us. Collectives between the machines (eqs. 3-4) reach
// the `default` calibration's bus efficiency of TCP Ethernet, 0.6 of that share (NCCL's socket transport, as
// the simulator prices them); pipeline sends (eq. 5) get the whole line.
constexpr const char* kTwoMachines = R"(
kind: cluster
name: two-machines
nodes:
  - name: a
    gpus: {type: a800, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 100, latency_us: 2, pcie_bandwidth_gbyte_s: 32}
    nic: {kind: ethernet, bandwidth_gbps: 8, latency_us: 30}
  - name: b
    gpus: {type: rtx4090, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 10, latency_us: 5, pcie_bandwidth_gbyte_s: 32}
    nic: {kind: ethernet, bandwidth_gbps: 8, latency_us: 30}
network: {single_switch: {}, switch_latency_us: 1}
)";
constexpr double kNvAlpha = 2e-6, kNvBeta = 100e9, kPcieAlpha = 5e-6, kPcieBeta = 10e9;
constexpr double kEthAlpha = 31e-6, kEthShare = 0.5e9 * 0.6, kNic = 1e9;

struct Problem {
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
  PlanningProblem get() const { return {cluster, model, training}; }
};

Problem MakeProblem(const std::string& cluster_yaml_or_name, const std::string& model, const std::string& training) {
  Result<models::Cluster> c = Status::Internal("unset");
  if (cluster_yaml_or_name.find("kind:") != std::string::npos) {
    proto::Cluster spec;
    const Status s = models::ParseYaml(cluster_yaml_or_name, "cluster.yaml", &spec);
    EXPECT_TRUE(s.ok()) << s.message();
    c = models::Cluster::Build(spec, "cluster.yaml");
  } else {
    c = models::LoadCluster(cluster_yaml_or_name);
  }
  auto m = models::LoadModel(model);
  EXPECT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(m.ok()) << m.status().message();
  proto::Training t;
  EXPECT_TRUE(models::ParseYaml(training, "training", &t).ok());
  auto r = models::ResolveTraining(t, *m, "training");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return {std::move(c).value(), std::move(m).value(), std::move(r).value()};
}

// llama-tiny (h = 256) at 128 tokens in bf16: one micro-batch's hidden states are 128·256·2 bytes.
constexpr double kX = 128.0 * 256 * 2;

TEST(HexiScaleCost, Equation3TensorParallelBlock) {
  const Problem full = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128, recompute: full}");
  const Problem none = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128, recompute: none}");
  const std::vector<uint32_t> a = {0, 1}, b = {2, 3};
  // 12 · Σ_{d'≠d} (α + X/(|d|β)) with full recomputation (6 all-reduces of 2 ring phases), 8 without.
  EXPECT_NEAR(AppendixACost(full.get()).TpBlockSeconds(a, 1), 12 * (kNvAlpha + kX / (2 * kNvBeta)), 1e-15);
  EXPECT_NEAR(AppendixACost(none.get()).TpBlockSeconds(a, 1), 8 * (kNvAlpha + kX / (2 * kNvBeta)), 1e-15);
  EXPECT_NEAR(AppendixACost(full.get()).TpBlockSeconds(b, 2), 12 * (kPcieAlpha + 2 * kX / (2 * kPcieBeta)), 1e-15);
  // One GPU: no TP communication.
  EXPECT_EQ(AppendixACost(full.get()).TpBlockSeconds(std::vector<uint32_t>{0}, 1), 0);
}

TEST(HexiScaleCost, Equation4DataParallelTakesTheWorstMember) {
  const Problem p = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128}");
  const AppendixACost cost(p.get());
  const double S = 3e6;
  // Holders 0, 1 (machine A) and 2 (machine B). A member of A: one NVSwitch peer and one Ethernet peer;
  // the member on B: two Ethernet peers, which is the maximum.
  const double on_a = (kNvAlpha + S / (3 * kNvBeta)) + (kEthAlpha + S / (3 * kEthShare));
  const double on_b = 2 * (kEthAlpha + S / (3 * kEthShare));
  ASSERT_GT(on_b, on_a);
  EXPECT_NEAR(cost.DpSeconds(std::vector<uint32_t>{0, 1, 2}, S), 2 * on_b, 1e-12);
  // Two holders on one machine: 2 (α + S/(2β)), the ring all-reduce.
  EXPECT_NEAR(cost.DpSeconds(std::vector<uint32_t>{2, 3}, S), 2 * (kPcieAlpha + S / (2 * kPcieBeta)), 1e-12);
}

TEST(HexiScaleCost, Equation4BetweenMachinesAtNcclsBusEfficiency) {
  // The same two machines with InfiniBand NICs: a GPU's 0.5 GB/s share at `default`'s 0.96 for IB verbs
  // instead of TCP Ethernet's 0.6. One holder on each machine: each has one peer across, 2 (α + S/(2β)).
  std::string ib = kTwoMachines;
  for (size_t at; (at = ib.find("kind: ethernet")) != std::string::npos;) ib.replace(at, 14, "kind: infiniband");
  const Problem eth = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128}");
  const Problem inf = MakeProblem(ib, "llama-tiny", "{seq_len: 128}");
  const double S = 3e6;
  const std::vector<uint32_t> across = {0, 2};
  EXPECT_NEAR(AppendixACost(eth.get()).DpSeconds(across, S), 2 * (kEthAlpha + S / (2 * 0.5e9 * 0.6)), 1e-12);
  EXPECT_NEAR(AppendixACost(inf.get()).DpSeconds(across, S), 2 * (kEthAlpha + S / (2 * 0.5e9 * 0.96)), 1e-12);
  // Pipeline sends are point to point: the whole line either way (eq. 5 below).
  EXPECT_NEAR(AppendixACost(inf.get()).PpHopSeconds(std::vector<uint32_t>{0}, std::vector<uint32_t>{2}, 1, true),
              AppendixACost(eth.get()).PpHopSeconds(std::vector<uint32_t>{0}, std::vector<uint32_t>{2}, 1, true),
              1e-15);
}

TEST(HexiScaleCost, Equation5LeaderSendsThenBroadcasts) {
  const Problem p = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128}");
  const AppendixACost cost(p.get());
  // One A800 to the TP-2 stage on B: the leaders' link is the pairwise one, the whole 1 GB/s NIC (one
  // flow; eq. 4's DP gets 0.6 of a GPU's 0.5 GB/s share instead); B's leader then broadcasts over PCIe, X/(2β)
  // to its one peer.
  const double to_tp2 = (kEthAlpha + kX / kNic) + (kPcieAlpha + kX / (2 * kPcieBeta));
  EXPECT_NEAR(cost.PpHopSeconds(std::vector<uint32_t>{0}, std::vector<uint32_t>{2, 3}, 1, true), 2 * to_tp2, 1e-12);
  // Without the broadcast, each receiving rank gets the activations over the network.
  EXPECT_NEAR(cost.PpHopSeconds(std::vector<uint32_t>{0}, std::vector<uint32_t>{2, 3}, 1, false),
              2 * (kEthAlpha + kX / kNic), 1e-12);
  // Inside a machine: the fabric.
  EXPECT_NEAR(cost.PpHopSeconds(std::vector<uint32_t>{2}, std::vector<uint32_t>{3}, 1, true),
              2 * (kPcieAlpha + kX / kPcieBeta), 1e-15);
}

TEST(HexiScaleCost, SharedNicsSlowHopsAndBoundTheSteadyState) {
  const Problem p = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128}");
  const AppendixACost cost(p.get());
  // Two pipelines laid out alike cross both NICs: each leader gets half of the 1 GB/s.
  const std::vector<uint32_t> sharing = {2, 2};
  const double shared = (kEthAlpha + kX / (kNic / 2)) + (kPcieAlpha + kX / (2 * kPcieBeta));
  EXPECT_NEAR(cost.PpHopSeconds(std::vector<uint32_t>{0}, std::vector<uint32_t>{2, 3}, 1, true, &sharing),
              2 * shared, 1e-12);
  // A NIC carries 3 MB in 3 ms at 1 GB/s (one direction).
  EXPECT_NEAR(cost.NicSeconds(0, 3e6), 3e-3, 1e-15);
}

TEST(HexiScaleCost, Equation9PipelineTime) {
  const std::vector<double> stages = {1.0, 3.0, 2.0};
  EXPECT_DOUBLE_EQ(AppendixACost::PipelineSeconds(stages, 1), 6.0);
  EXPECT_DOUBLE_EQ(AppendixACost::PipelineSeconds(stages, 4), 6.0 + 3 * 3.0);
  // A NIC that needs 5 s per micro-batch sets the steady state instead of the 3 s stage.
  EXPECT_DOUBLE_EQ(AppendixACost::PipelineSeconds(stages, 4, 5.0), 6.0 + 3 * 5.0);
}

TEST(HexiScaleCost, Equation7ChunksGradientsToTheSmallestTpShard) {
  const Problem p = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128, global_batch_size: 4}");
  const AppendixACost cost(p.get());
  proto::Plan plan;
  ASSERT_TRUE(models::ParseYaml(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 2
    stages: [{devices: [0, 1], tp_degree: 2, layer_begin: 0, layer_end: 6}]
  - micro_batch_size: 1
    num_micro_batches: 2
    stages: [{devices: [2], layer_begin: 0, layer_end: 6}]
)",
                                "plan", &plan)
                  .ok());
  // TP 2 and TP 1 hold every layer: each layer is cut into 2 chunks; chunk c is synchronised between
  // device c (A) and device 2 (B), which therefore synchronises both chunks, one after the other.
  double chunk_params = 0;
  for (uint32_t l = 0; l < p.model.num_layers(); ++l) chunk_params += p.model.ParamsPerRank(l, 2, false);
  const double one_group = 2 * (kEthAlpha + 2 * chunk_params / (2 * kEthShare));  // eq. 4, two holders, bf16
  const auto e = cost.Evaluate(plan);
  EXPECT_NEAR(e.dp_s, 2 * one_group, 1e-12);
  EXPECT_NEAR(e.iteration_s, e.pipeline_s + e.dp_s, 1e-12);  // eq. 10
  ASSERT_EQ(e.pipelines_s.size(), 2u);
  // One stage, two micro-batches: eq. 9 is 2 × the stage time (eq. 8), no hops, no NIC.
  EXPECT_NEAR(e.pipelines_s[1], 2 * cost.StageSeconds(std::vector<uint32_t>{2}, 0, 6, 1), 1e-12);
}

TEST(HexiScaleCost, Equation11PaperMemory) {
  const Problem p = MakeProblem(kTwoMachines, "llama-tiny", "{seq_len: 128}");
  // 48 H² B / t + b S H B per block: 3 blocks at TP 2, b = 2.
  const double h = 256, bytes = 2;
  EXPECT_DOUBLE_EQ(AppendixACost(p.get()).PaperMemoryBytes(3, 2, 2),
                   3 * (48 * h * h * bytes / 2 + 2 * 128 * h * bytes));
}

// ---- METIS ----------------------------------------------------------------------------------------

// `machines` machines of `per` GPUs: bandwidth `intra` inside a machine, `inter` across.
PartitionRequest Machines(uint32_t machines, uint32_t per, double intra, double inter) {
  PartitionRequest r;
  r.vertex_weight.assign(machines * per, 1.0);
  r.bandwidth = [=](uint32_t i, uint32_t j) { return i / per == j / per ? intra : inter; };
  return r;
}

TEST(HexiScaleGraph, WeightsFitMetisThirtyTwoBitSums) {
  PartitionRequest r = Machines(40, 8, 200e9, 0.0875e9);  // 320 GPUs, NVLink vs a GPU's NIC share
  const MetisWeights w = ScaleWeights(r);
  ASSERT_EQ(w.edge.size(), 320u * 319u);
  const int64_t sum = std::accumulate(w.edge.begin(), w.edge.end(), int64_t{0});
  EXPECT_LE(sum, int64_t{std::numeric_limits<int32_t>::max()});
  EXPECT_GT(sum, int64_t{std::numeric_limits<int32_t>::max()} * 99 / 100);  // the range is used
  const int32_t mx = *std::max_element(w.edge.begin(), w.edge.end());
  const int32_t mn = *std::min_element(w.edge.begin(), w.edge.end());
  EXPECT_NEAR(double(mx) / mn, 200 / 0.0875, 200 / 0.0875 * 0.01);  // linear scaling keeps the ratio
  // Max cut: inverse bandwidth, so the slow edges weigh the most.
  r.objective = CutObjective::kMaxCut;
  const MetisWeights inv = ScaleWeights(r);
  EXPECT_GT(inv.edge[8], inv.edge[0]);  // vertex 0's edge to vertex 9 (another machine) vs to vertex 1
}

TEST(HexiScaleGraph, MinCutKeepsMachinesWholeMaxCutSplitsThem) {
  PartitionRequest r = Machines(4, 2, 100, 1);
  r.parts = 2;
  r.max_balance = 1.01;
  const auto min_cut = Partition(r);
  ASSERT_TRUE(min_cut.has_value());
  for (uint32_t m = 0; m < 4; ++m) EXPECT_EQ((*min_cut)[2 * m], (*min_cut)[2 * m + 1]) << "machine " << m;
  EXPECT_DOUBLE_EQ(CutBandwidth(r, *min_cut), 4 * 4 * 1.0);  // 4 GPUs on each side, every pair at 1
  r.objective = CutObjective::kMaxCut;
  const auto max_cut = Partition(r);
  ASSERT_TRUE(max_cut.has_value());
  for (uint32_t m = 0; m < 4; ++m) EXPECT_NE((*max_cut)[2 * m], (*max_cut)[2 * m + 1]) << "machine " << m;
  EXPECT_GT(CutBandwidth(r, *max_cut), CutBandwidth(r, *min_cut));
}

TEST(HexiScaleGraph, BalancesComputeNotGpuCounts) {
  // One GPU of weight 3 and seven of weight 1 on one fabric: two parts of weight 5 (± 10%).
  PartitionRequest r;
  r.vertex_weight = {3, 1, 1, 1, 1, 1, 1, 1};
  r.bandwidth = [](uint32_t, uint32_t) { return 1.0; };
  r.parts = 2;
  r.max_balance = 1.1;
  const auto part = Partition(r);
  ASSERT_TRUE(part.has_value());
  EXPECT_LE(BalanceFactor(r, *part), 1.1 + 1e-9);
  const uint32_t with_big = (*part)[0];
  EXPECT_EQ(std::count(part->begin(), part->end(), with_big), 3);  // the fast GPU's part: 3 + 1 + 1
}

TEST(HexiScaleGraph, RefusesMorePartsThanVertices) {
  PartitionRequest r = Machines(1, 2, 1, 1);
  r.parts = 3;
  EXPECT_FALSE(Partition(r).has_value());
}

// Machine bundles (graph.h): 6 machines of 8 GPUs with max_vertices 16 → bundles of 4 (12 ≤ 16; bundles of
// 2 would give 24), consecutive GPUs of one machine; a request at or under the limit, or without machines,
// keeps one vertex per GPU.
TEST(HexiScaleGraph, BundlesMachinesAboveTheVertexLimit) {
  PartitionRequest r = Machines(6, 8, 100, 1);
  for (uint32_t i = 0; i < 48; ++i) r.machine.push_back(i / 8);
  r.parts = 2;
  r.max_vertices = 16;
  const auto bundles = Bundles(r);
  ASSERT_EQ(bundles.size(), 12u);
  EXPECT_EQ(bundles[0], (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(bundles[11], (std::vector<uint32_t>{44, 45, 46, 47}));
  r.max_vertices = 48;
  EXPECT_EQ(Bundles(r).size(), 48u);
  r.max_vertices = 16;
  r.machine.clear();
  EXPECT_EQ(Bundles(r).size(), 48u);
  // Never fewer bundles than parts: 2 machines at a limit of 2 vertices, 3 parts → bundles of 4 (4 ≥ 3).
  PartitionRequest two = Machines(2, 8, 100, 1);
  for (uint32_t i = 0; i < 16; ++i) two.machine.push_back(i / 8);
  two.max_vertices = 2;
  two.parts = 3;
  EXPECT_EQ(Bundles(two).size(), 4u);
}

// A bundled min cut keeps bundles (and so machines) whole and balanced; the max cut spreads machines over
// the parts a bundle at a time, and its parts keep equal GPU counts (a bundle counts its GPUs).
TEST(HexiScaleGraph, BundledPartitionKeepsBundlesWhole) {
  PartitionRequest r = Machines(8, 8, 100, 1);
  for (uint32_t i = 0; i < 64; ++i) r.machine.push_back(i / 8);
  r.max_vertices = 16;  // bundles of 4
  r.parts = 4;
  r.max_balance = 1.01;
  const auto min_cut = Partition(r);
  ASSERT_TRUE(min_cut.has_value());
  for (uint32_t m = 0; m < 8; ++m) {
    for (uint32_t g = 1; g < 8; ++g) EXPECT_EQ((*min_cut)[8 * m + g], (*min_cut)[8 * m]) << "machine " << m;
  }
  EXPECT_LE(BalanceFactor(r, *min_cut), 1.01 + 1e-9);
  r.objective = CutObjective::kMaxCut;
  r.parts = 2;
  const auto max_cut = Partition(r);
  ASSERT_TRUE(max_cut.has_value());
  std::vector<uint32_t> gpus(2, 0);
  for (uint32_t i = 0; i < 64; ++i) {
    ++gpus[(*max_cut)[i]];
    EXPECT_EQ((*max_cut)[i], (*max_cut)[i / 4 * 4]) << "GPU " << i << " left its bundle";
  }
  EXPECT_EQ(gpus[0], 32u);
  for (uint32_t m = 0; m < 8; ++m) EXPECT_NE((*max_cut)[8 * m], (*max_cut)[8 * m + 4]) << "machine " << m;
}

// ---- the planner ------------------------------------------------------------------------------------

Result<PlannerResult> Plan(const Problem& p, const std::string& options) {
  auto planner = CreatePlanner("hexiscale", options, "options.yaml");
  if (!planner.ok()) return planner.status();
  return RunPlanner(**planner, p.get());
}

// Machine A: 4 A800 (312 TFLOPS each), machine B: 4 RTX 3090 (71), 10 Gb/s Ethernet.
constexpr const char* kFastSlow = R"(
kind: cluster
name: fast-slow
nodes:
  - name: a
    gpus: {type: a800, count: 4}
    nic: {kind: ethernet, bandwidth_gbps: 10, latency_us: 30}
  - name: b
    gpus: {type: rtx3090, count: 4}
    nic: {kind: ethernet, bandwidth_gbps: 10, latency_us: 30}
)";

uint32_t NodeOf(const Problem& p, uint32_t d) { return p.cluster.device(d).node; }

TEST(HexiScalePlanner, FasterPipelineGetsMoreOfTheBatch) {
  // §3.3: "we assign larger batch sizes on pipeline-1" (the one on the strong GPUs). With the balance
  // loose enough for whole machines, the min cut makes each machine one pipeline.
  const Problem p = MakeProblem(kFastSlow, "llama-tiny", "{seq_len: 128, global_batch_size: 32}");
  auto r = Plan(p, "{dp_degrees: [2], partition: min_cut, max_balance: 2.0, micro_batch_sizes: [1]}");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->plan.pipelines_size(), 2);
  std::map<uint32_t, uint32_t> micro_batches;  // node -> micro-batches of its pipeline
  for (const auto& pipe : r->plan.pipelines()) {
    std::set<uint32_t> nodes;
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) nodes.insert(NodeOf(p, d));
    }
    ASSERT_EQ(nodes.size(), 1u) << "a min-cut pipeline spans machines";
    micro_batches[*nodes.begin()] = pipe.num_micro_batches();
  }
  EXPECT_GT(micro_batches[0], micro_batches[1]);
  EXPECT_EQ(micro_batches[0] + micro_batches[1], 32u);
  EXPECT_TRUE(r->plan.comm().pp_leader_broadcast());  // §3.2
}

// Gradient-sync groups of a plan whose devices all sit on one machine.
int IntraMachineSyncGroups(const Problem& p, const proto::Plan& plan) {
  int n = 0;
  for (const auto& g : models::DeriveGradSyncGroups(plan, p.model)) {
    std::set<uint32_t> nodes;
    for (uint32_t d : g.devices) nodes.insert(NodeOf(p, d));
    n += nodes.size() == 1 ? 1 : 0;
  }
  return n;
}

TEST(HexiScalePlanner, MaxCutGivesTheFastLinksToDataParallelism) {
  // §4.4: minimising the inter-group cut keeps each pipeline on one machine, so every layer's gradients
  // cross the slow network; maximising it spreads the pipelines over the machines, and DP groups find
  // peers on their own machine.
  const Problem p = MakeProblem(kFastSlow, "llama-tiny", "{seq_len: 128, global_batch_size: 32}");
  auto min_cut = Plan(p, "{dp_degrees: [2], partition: min_cut, max_balance: 2.0, micro_batch_sizes: [1]}");
  auto max_cut = Plan(p, "{dp_degrees: [2], partition: max_cut, max_balance: 1.2, micro_batch_sizes: [1]}");
  ASSERT_TRUE(min_cut.ok()) << min_cut.status().message();
  ASSERT_TRUE(max_cut.ok()) << max_cut.status().message();
  EXPECT_EQ(IntraMachineSyncGroups(p, min_cut->plan), 0);
  EXPECT_GT(IntraMachineSyncGroups(p, max_cut->plan), 0);
}

// Two identical machines of 4 RTX 4090 (PCIe) joined by `gbps` Ethernet.
std::string Twins(const std::string& gbps) {
  return R"(
kind: cluster
name: twins
nodes:
  - name: m
    count: 2
    gpus: {type: rtx4090, count: 4}
    nic: {kind: ethernet, bandwidth_gbps: )" +
         gbps + ", latency_us: 30}\n";
}

TEST(HexiScalePlanner, NetworkDecidesWhichTrafficGetsTheFastLinks) {
  // Appendix E: on a slow network, pipeline parallelism takes the inter-machine links and data
  // parallelism the intra-machine ones (the max-cut option); on a fast one the inter-machine bandwidth
  // goes to data parallelism, which has the larger volume, and each pipeline stays on one machine.
  const std::string training = "{seq_len: 128, global_batch_size: 32}";
  const std::string options = "{micro_batch_sizes: [1]}";
  const Problem slow = MakeProblem(Twins("1"), "llama-tiny", training);
  auto rs = Plan(slow, options);
  ASSERT_TRUE(rs.ok()) << rs.status().message();
  const auto groups = models::DeriveGradSyncGroups(rs->plan, slow.model);
  ASSERT_FALSE(groups.empty());
  EXPECT_EQ(IntraMachineSyncGroups(slow, rs->plan), static_cast<int>(groups.size()));
  const Problem fast = MakeProblem(Twins("800"), "llama-tiny", training);
  auto rf = Plan(fast, options);
  ASSERT_TRUE(rf.ok()) << rf.status().message();
  ASSERT_GT(rf->plan.pipelines_size(), 1);
  for (const auto& pipe : rf->plan.pipelines()) {
    std::set<uint32_t> nodes;
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) nodes.insert(NodeOf(fast, d));
    }
    EXPECT_EQ(nodes.size(), 1u);
  }
}

TEST(HexiScalePlanner, UsesEveryGpuAndIsDeterministic) {
  const Problem p = MakeProblem("hexiscale-case-study", "llama2-7b", "{global_batch_size: 24, recompute: full}");
  auto a = Plan(p, "");
  ASSERT_TRUE(a.ok()) << a.status().message();
  std::set<uint32_t> used;
  for (const auto& pipe : a->plan.pipelines()) {
    for (const auto& st : pipe.stages()) used.insert(st.devices().begin(), st.devices().end());
  }
  EXPECT_EQ(used.size(), p.cluster.num_devices());
  auto b = Plan(p, "");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->plan.SerializeAsString(), b->plan.SerializeAsString());
}

TEST(HexiScalePlanner, NothingFitsIsInfeasible) {
  const Problem p = MakeProblem(kTwoMachines, "llama2-70b", "{global_batch_size: 8}");
  auto r = Plan(p, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInfeasible) << r.status().message();
}

// The number in a search note "... N <what> ..." (the first match), or -1.
long NoteNumber(const SearchStats& stats, const std::string& what) {
  for (const std::string& note : stats.notes) {
    const size_t at = note.find(what);
    if (at == std::string::npos) continue;
    size_t begin = at;
    while (begin > 0 && note[begin - 1] == ' ') --begin;
    size_t digits = begin;
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(note[digits - 1]))) --digits;
    if (digits < begin) return std::stol(note.substr(digits, begin - digits));
  }
  return -1;
}

// §4.4 / §5.4's 50 iterations: in paper mode every round is an iteration with its own METIS partition (a
// repeated option gets the next seed); without it a repeated (option, seed) is the cached partition. One
// D_dp (2) and one micro-batch size: 5 rounds = 5 iterations; 5 METIS calls in paper mode, at most 2 (one
// per option) without.
TEST(HexiScalePlanner, PaperModeRunsEveryRoundWithItsOwnPartition) {
  const Problem p = MakeProblem(kFastSlow, "llama-tiny", "{seq_len: 128, global_batch_size: 32}");
  auto paper = Plan(p, "{dp_degrees: [2], micro_batch_sizes: [1], rounds_per_dp: 5, paper_mode: true}");
  ASSERT_TRUE(paper.ok()) << paper.status().message();
  EXPECT_EQ(NoteNumber(paper->stats, "iterations ("), 5);
  EXPECT_EQ(NoteNumber(paper->stats, "METIS phase-one partitions"), 5);
  bool noted = false;
  for (const std::string& n : paper->stats.notes) noted |= n.find("paper mode") != std::string::npos;
  EXPECT_TRUE(noted);
  auto plain = Plan(p, "{dp_degrees: [2], micro_batch_sizes: [1], rounds_per_dp: 5}");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(NoteNumber(plain->stats, "iterations ("), 5);
  EXPECT_LE(NoteNumber(plain->stats, "METIS phase-one partitions"), 2);
  // Paper mode's default is 50 rounds: 50 iterations for the one D_dp.
  auto fifty = Plan(p, "{dp_degrees: [2], micro_batch_sizes: [1], paper_mode: true}");
  ASSERT_TRUE(fifty.ok()) << fifty.status().message();
  EXPECT_EQ(NoteNumber(fifty->stats, "iterations ("), 50);
  // Deterministic.
  auto again = Plan(p, "{dp_degrees: [2], micro_batch_sizes: [1], rounds_per_dp: 5, paper_mode: true}");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(paper->plan.SerializeAsString(), again->plan.SerializeAsString());
}

TEST(HexiScalePlanner, UnknownOptionIsAnError) {
  auto planner = CreatePlanner("hexiscale", "{tua: 3}", "options.yaml");
  ASSERT_FALSE(planner.ok());
  EXPECT_NE(planner.status().message().find("tau"), std::string::npos) << planner.status().message();
}

}  // namespace
}  // namespace hetsim::planners::hexiscale
