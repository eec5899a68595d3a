// Polishing a plan on the twin (sim/planning/polish.h): the changes tried, and a search that keeps only
// what the simulator says is faster.
#include "sim/planning/polish.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>
#include <string>

#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/cost_model.h"
#include "tests/tools/two_gpu_problem.h"
#include "sim/planning/refine.h"

namespace hetsim::planning {
namespace {

models::Cluster ClusterFrom(const char* yaml) {
  proto::Cluster spec;
  EXPECT_TRUE(models::ParseYaml(yaml, "c.yaml", &spec).ok());
  auto c = models::Cluster::Build(spec, "c.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

// Two machines: A (devices 0-1, A100) and B (devices 2-3, H100).
const char* kTwoMachines = R"(kind: cluster
name: a-and-b
nodes:
  - name: a
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 200}
  - name: b
    gpus: {type: h100, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 200}
network: {single_switch: {}}
)";

proto::Stage StageOf(uint32_t device, uint32_t begin, uint32_t end) {
  proto::Stage s;
  s.add_devices(device);
  s.set_layer_begin(begin);
  s.set_layer_end(end);
  return s;
}

// llama-tiny's 6 layers (embedding, 4 blocks, head) in two pipelines of two stages, A then B, 3 + 3 layers,
// 4 micro-batches of one sequence each.
proto::Plan TwoPipelines() {
  proto::Plan p;
  for (uint32_t r = 0; r < 2; ++r) {
    auto* pipe = p.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(4);
    *pipe->add_stages() = StageOf(r, 0, 3);      // machine A
    *pipe->add_stages() = StageOf(2 + r, 3, 6);  // machine B
  }
  return p;
}

// Counted by hand for TwoPipelines on A and B:
//   1. layer moves: per pipeline, a layer from stage 0 to 1 and from 1 to 0 (both hold 3)   4
//   2. swaps of stages on different GPU types: (p0s0, p0s1), (p0s0, p1s1), (p0s1, p1s0), (p1s0, p1s1)
//      — p0s0 and p1s0 are both A100s, p0s1 and p1s1 both H100s: not swapped               4
//   3. a micro-batch from pipeline 0 to 1 and from 1 to 0                                    2
//   4. micro-batches of 2 in each pipeline (4 is even; 1 cannot be halved)                  2
//   5. merges (0, 1) and (1, 0), each concatenated and grouped by machine                   4
//   6. each pipeline's two machine runs in the other order                                   2
//   7. ZeRO stage 1 (the plan has 0)                                                         1
//   8. one pipeline with a stage per machine                                                 1
//   9. no stage holds several replicas: no split                                             0
//  10. one pipeline with a stage per GPU (4 GPUs, 6 layers): in device order (A then B), which is also
//      the slowest-first order (A100 below H100 at FP16), and fastest first (B then A); no stages of
//      2 GPUs (g = 2 is not below the widest machine's 2)                                           2
//  11. per pipeline its two stages joined into one DP-2 stage (micro-batches of 2 × 2)             2
//  12. TP 1 cannot be halved, and single replicas cannot trade DP for TP                          0
//  13. recomputation selective and full (the plan runs with none: no policy of its own or given)  2
//  14. machine A left idle and machine B left idle (one machine per type; no type has two)      2
TEST(PlanNeighbours, EveryKindOfChangeCountedByHand) {
  const auto cluster = ClusterFrom(kTwoMachines);
  const auto n = PlanNeighbours(TwoPipelines(), cluster, 6);
  ASSERT_EQ(n.size(), 28u);
  std::multiset<std::string> kinds;
  for (const auto& [plan, change, layer_move] : n) {
    kinds.insert(change.substr(0, change.find(' ', change.find(' ') + 1)));
    // Every neighbour still covers the model once per pipeline, each stage at least one layer.
    for (const auto& pipe : plan.pipelines()) {
      uint32_t next = 0;
      for (const auto& st : pipe.stages()) {
        EXPECT_EQ(st.layer_begin(), next) << change;
        EXPECT_GT(st.layer_end(), st.layer_begin()) << change;
        next = st.layer_end();
      }
      EXPECT_EQ(next, 6u) << change;
    }
  }
  EXPECT_EQ(kinds.count("one layer"), 4u);
  EXPECT_EQ(kinds.count("devices of"), 4u);
  EXPECT_EQ(kinds.count("one micro-batch"), 2u);
  EXPECT_EQ(kinds.count("pipeline 0's") + kinds.count("pipeline 1's"), 4u);  // micro-batch sizes + machine orders
  EXPECT_EQ(kinds.count("pipelines 0") + kinds.count("pipelines 1"), 4u);
  EXPECT_EQ(kinds.count("ZeRO stage"), 1u);
  EXPECT_EQ(kinds.count("one pipeline,"), 3u);  // a stage per machine, a stage per GPU in two orders
  EXPECT_EQ(kinds.count("pipeline 0") + kinds.count("pipeline 1"), 2u);  // the joins
  EXPECT_EQ(kinds.count("recomputation none"), 0u);
  EXPECT_EQ(kinds.count("recomputation selective") + kinds.count("recomputation full"), 2u);
  EXPECT_EQ(kinds.count("machine 0") + kinds.count("machine 1"), 2u);
  for (const auto& c : n) {
    if (c.change != "machine 0 (a100-80gb) left idle") continue;
    // Each pipeline loses its A100 stage; its H100 stage takes all six layers.
    ASSERT_EQ(c.plan.pipelines_size(), 2);
    for (int p = 0; p < 2; ++p) {
      ASSERT_EQ(c.plan.pipelines(p).stages_size(), 1);
      EXPECT_EQ(c.plan.pipelines(p).stages(0).devices(0), 2u + static_cast<uint32_t>(p));
      EXPECT_EQ(c.plan.pipelines(p).stages(0).layer_begin(), 0u);
      EXPECT_EQ(c.plan.pipelines(p).stages(0).layer_end(), 6u);
      EXPECT_EQ(c.plan.pipelines(p).num_micro_batches(), 4u);
    }
  }
  for (const auto& c : n) {
    if (c.change != "pipeline 1 stage 0 and stage 1 joined into one data-parallel stage") continue;
    const auto& joined = c.plan.pipelines(1);
    EXPECT_EQ(joined.micro_batch_size(), 2u);  // one sequence per replica
    EXPECT_EQ(joined.num_micro_batches(), 2u);
    ASSERT_EQ(joined.stages_size(), 1);
    EXPECT_EQ(joined.stages(0).devices_size(), 2);
    EXPECT_EQ(joined.stages(0).devices(1), 3u);
    EXPECT_EQ(joined.stages(0).layer_end(), 6u);
    EXPECT_EQ(c.plan.pipelines(0).stages_size(), 2);  // the other pipeline as it was
  }
  const PlanChange* fastest = nullptr;
  for (const auto& c : n) {
    if (c.change == "one pipeline, a stage per GPU (4 stages, micro-batches of one sequence, fastest GPUs first)") {
      fastest = &c;
    }
  }
  ASSERT_NE(fastest, nullptr);
  ASSERT_EQ(fastest->plan.pipelines(0).stages_size(), 4);
  const uint32_t fast_order[] = {2, 3, 0, 1};  // B's H100s hold the embedding
  for (int k = 0; k < 4; ++k) EXPECT_EQ(fastest->plan.pipelines(0).stages(k).devices(0), fast_order[k]);
  // The stage per machine: A's devices 0-1 and B's 2-3 as two DP-2 stages, 3 layers each by device count,
  // micro-batches of 2 (the widest machine) × 4 for the 8 sequences.
  for (const auto& [plan, change, layer_move] : n) {
    if (change.rfind("one pipeline, a stage per machine", 0) != 0) continue;
    ASSERT_EQ(plan.pipelines_size(), 1);
    const auto& m = plan.pipelines(0);
    EXPECT_EQ(m.micro_batch_size(), 2u);
    EXPECT_EQ(m.num_micro_batches(), 4u);
    ASSERT_EQ(m.stages_size(), 2);
    EXPECT_EQ(m.stages(0).devices_size(), 2);
    EXPECT_EQ(m.stages(0).layer_end(), 3u);
    EXPECT_EQ(m.stages(1).devices(0), 2u);
  }
  // The grouped merge of (0, 1): A's stages (devices 0, 1) then B's (2, 3); each held 3 of 12 layer-shares,
  // so the boundaries fall at round(6 · 3/12) = 2, round(6 · 6/12) = 3, round(6 · 9/12) = 5; 8 micro-batches.
  // The stage per GPU lays out the same: devices 0-3 in order, 6 layers evenly at round(6 · 1/4) = 2 (1.5
  // rounds up), 3, round(4.5) = 5, 6; the 8 sequences as 8 micro-batches of one.
  for (const std::string name : {"pipelines 0 and 1 merged into one of 4 stages, grouped by machine",
                                 "one pipeline, a stage per GPU (4 stages, micro-batches of one sequence)"}) {
    const proto::Plan* found = nullptr;
    for (const auto& [plan, change, layer_move] : n) {
      if (change == name) found = &plan;
    }
    ASSERT_NE(found, nullptr) << name;
    ASSERT_EQ(found->pipelines_size(), 1);
    const auto& m = found->pipelines(0);
    EXPECT_EQ(m.micro_batch_size(), 1u) << name;
    EXPECT_EQ(m.num_micro_batches(), 8u) << name;
    ASSERT_EQ(m.stages_size(), 4) << name;
    const uint32_t devices[] = {0, 1, 2, 3}, ends[] = {2, 3, 5, 6};
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(m.stages(k).devices(0), devices[k]) << name;
      EXPECT_EQ(m.stages(k).layer_end(), ends[k]) << name;
    }
  }
  // Interleaved plans are left alone.
  proto::Plan interleaved = TwoPipelines();
  interleaved.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
  EXPECT_TRUE(PlanNeighbours(interleaved, cluster, 6).empty());
}

// Change 9 on a stage of four DP replicas, two on each machine: split by machine into two stages of two
// devices, the layers by device count (6 · 2/4 = 3 each); on one machine it would split in halves instead.
// Change 12 on the same stage: TP 2 × DP 2.
TEST(PlanNeighbours, AStageOfReplicasOnTwoMachinesSplitsByMachine) {
  const auto cluster = ClusterFrom(kTwoMachines);
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(4);
  pipe->set_num_micro_batches(2);
  auto* st = pipe->add_stages();
  for (uint32_t d = 0; d < 4; ++d) st->add_devices(d);
  st->set_layer_end(6);
  int splits = 0;
  for (const auto& [n, change, layer_move] : PlanNeighbours(plan, cluster, 6)) {
    if (change.find(" split ") == std::string::npos) continue;
    ++splits;
    EXPECT_EQ(change, "pipeline 0 stage 0 split by machine into 2 stages");
    const auto& m = n.pipelines(0);
    ASSERT_EQ(m.stages_size(), 2);
    EXPECT_EQ(m.stages(0).devices(0), 0u);
    EXPECT_EQ(m.stages(0).devices(1), 1u);
    EXPECT_EQ(m.stages(0).layer_end(), 3u);
    EXPECT_EQ(m.stages(1).devices(0), 2u);
    EXPECT_EQ(m.stages(1).layer_begin(), 3u);
  }
  EXPECT_EQ(splits, 1);
  // Change 12: four TP-1 replicas become two TP-2 replicas on the same devices (TP 1 cannot be halved); the
  // micro-batch of 4 already covers the replicas, so it stays.
  int traded = 0;
  for (const auto& [n, change, layer_move] : PlanNeighbours(plan, cluster, 6)) {
    if (change.find(" at TP ") == std::string::npos) continue;
    ++traded;
    EXPECT_EQ(change, "pipeline 0 stage 0 at TP 2 × DP 2");
    EXPECT_EQ(n.pipelines(0).stages(0).tp_degree(), 2u);
    EXPECT_EQ(n.pipelines(0).stages(0).devices_size(), 4);
    EXPECT_EQ(n.pipelines(0).micro_batch_size(), 4u);
  }
  EXPECT_EQ(traded, 1);
}

// Change 10's stages of g GPUs of a machine, on autohet-nonuniform-3a100-5h800's machines of 3 A100s
// (devices 0-2) and 5 H800s (3-7), 16 sequences: g = 2 and g = 4 (below the widest machine's 5; 8 is not),
// each in the listed order (A100s first, which is also the slowest first) and fastest first (H800s first):
// 4 neighbours. A machine's remainder leads it: for g = 2 the A100s are {0}, {1, 2} and the H800s {3},
// {4, 5}, {6, 7}; for g = 4 the A100s are one stage of 3 and the H800s {3}, {4, 5, 6, 7}. Micro-batches of g
// sequences (2 and 4 divide 16), layers (26 here) by device count before rebalancing.
TEST(PlanNeighbours, StagesOfGGpusPerMachineRemainderFirst) {
  auto loaded = models::LoadCluster("autohet-nonuniform-3a100-5h800");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const models::Cluster& cluster = *loaded;
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(1);
  pipe->set_num_micro_batches(16);
  auto* st = pipe->add_stages();
  for (uint32_t d = 0; d < 8; ++d) st->add_devices(d);
  st->set_layer_end(26);
  std::map<std::string, std::vector<std::vector<uint32_t>>> grouped;
  for (const auto& [n, change, layer_move] : PlanNeighbours(plan, cluster, 26)) {
    if (change.rfind("one pipeline, stages of ", 0) != 0) continue;
    ASSERT_EQ(n.pipelines_size(), 1) << change;
    const auto& m = n.pipelines(0);
    std::vector<std::vector<uint32_t>> stages;
    uint32_t next = 0;
    for (const auto& s : m.stages()) {
      stages.emplace_back(s.devices().begin(), s.devices().end());
      EXPECT_EQ(s.layer_begin(), next) << change;
      next = s.layer_end();
    }
    EXPECT_EQ(next, 26u) << change;
    EXPECT_EQ(m.micro_batch_size() * m.num_micro_batches(), 16u) << change;
    EXPECT_EQ(m.micro_batch_size(), change.find("stages of 2") != std::string::npos ? 2u : 4u) << change;
    grouped[change] = stages;
  }
  using G = std::vector<std::vector<uint32_t>>;
  ASSERT_EQ(grouped.size(), 4u);
  const std::string two = "one pipeline, stages of 2 GPUs of a machine (5 stages, micro-batches of 2 sequences";
  const std::string four = "one pipeline, stages of 4 GPUs of a machine (3 stages, micro-batches of 4 sequences";
  EXPECT_EQ(grouped[two + ")"], (G{{0}, {1, 2}, {3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(grouped[two + ", fastest GPUs first)"], (G{{3}, {4, 5}, {6, 7}, {0}, {1, 2}}));
  EXPECT_EQ(grouped[four + ")"], (G{{0, 1, 2}, {3}, {4, 5, 6, 7}}));
  EXPECT_EQ(grouped[four + ", fastest GPUs first)"], (G{{3}, {4, 5, 6, 7}, {0, 1, 2}}));
}

// Rebalancing from a rough split: eight single-GPU stages over hexiscale-mini-setting3's 2 A800s, 4 RTX
// 4090s and 2 RTX 3090s (machines joined by 0.7 GB/s Ethernet), gpt3-1.3b's 26 layers about evenly. Boundary
// moves alone climb from there to a split whose played estimate is 0.687 s; the balanced starts (the stages'
// closed-form compute, the PP hops weighed in) lead to one where the stages that send or receive over the
// Ethernet (1, 2, 5 and 6) hold fewer layers than the 4090s in the middle (3, 4), which wait on no slow
// hop, and the A800 that holds the embedding holds more than its neighbour across the Ethernet.
TEST(Polish, RebalancingLightensTheStagesOnASlowHop) {
  auto cluster = models::LoadCluster("hexiscale-mini-setting3");
  auto model = models::LoadModel("gpt3-1.3b");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(32);
  t.set_seq_len(1024);
  t.set_dtype(proto::DTYPE_FP16);
  auto training = models::ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok()) << training.status().message();
  const planners::PlanningProblem problem{*cluster, *model, *training, nullptr, {}};
  const models::PlanContext ctx{*cluster, *model, *training};
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(1);
  pipe->set_num_micro_batches(32);
  const uint32_t ends[] = {3, 6, 9, 12, 16, 20, 23, 26};
  for (uint32_t d = 0; d < 8; ++d) *pipe->add_stages() = StageOf(d, d == 0 ? 0 : ends[d - 1], ends[d]);
  ASSERT_TRUE(models::ValidatePlan(plan, ctx, "").ok());
  const planners::AnalyticCostModel cost(problem);
  const proto::Plan even = RebalanceLayers(plan, cost, ctx, 64);
  const auto& st = even.pipelines(0).stages();
  ASSERT_EQ(st.size(), 8);
  std::vector<uint32_t> layers;
  std::string split;
  for (const auto& s : st) {
    layers.push_back(s.layer_end() - s.layer_begin());
    split += std::to_string(layers.back()) + " ";
  }
  for (int hop : {1, 2, 5}) {
    for (int middle : {3, 4}) EXPECT_LT(layers[hop], layers[middle]) << split;
  }
  EXPECT_LT(layers[6], layers[3]) << split;
  EXPECT_GT(layers[0], layers[1]) << split;
  EXPECT_LT(cost.Estimate(even, false).iteration_s, 0.6) << split;
}

// A two-stage pipeline over two identical GPUs with 5 of llama-tiny's 6 layers on the first stage: its
// first stage does about four blocks' work to the second's one. Polishing keeps changes until none is
// faster: every change kept is faster than the one before, the result simulates at the time it reports.
// Rebalanced alone, the stages end within one block of each other (the embedding and head are lighter
// than a block).
TEST(Polish, KeepsOnlyFasterChangesAndBalancesAnUnevenPipeline) {
  const testing_refine::TwoGpuProblem p;
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(1);
  pipe->set_num_micro_batches(8);
  *pipe->add_stages() = StageOf(0, 0, 5);
  *pipe->add_stages() = StageOf(1, 5, 6);
  const models::PlanContext ctx{p.cluster, p.model, p.training};
  ASSERT_TRUE(models::ValidatePlan(plan, ctx, "").ok());
  sim::SimOptions so;
  auto start = sim::SimulateIteration(plan, ctx, so);
  ASSERT_TRUE(start.ok()) << start.status().message();
  const double start_s = start->report.iteration_time_s();

  PolishOutcome none;
  const proto::Plan same = PolishOnTwin(plan, start_s, p.get(), so, {0, 0}, &none);
  EXPECT_EQ(same.pipelines(0).stages(0).layer_end(), 5u);  // no budget: nothing tried
  EXPECT_EQ(none.simulated, 0u);

  PolishOutcome out;
  const proto::Plan polished = PolishOnTwin(plan, start_s, p.get(), so, {50, 0}, &out);
  ASSERT_FALSE(out.kept.empty());
  EXPECT_LT(out.end_s, start_s);
  EXPECT_TRUE(out.local_optimum);
  // Each change faster than the plan before it; a restart (a slower neighbour taken to leave a local optimum)
  // is slower than the plan it leaves, and the result beats every plan before the last restart.
  double previous = start_s, before_restart = start_s;
  for (const auto& k : out.kept) {
    const double t = std::stod(k.substr(k.rfind(": ") + 2));
    if (k.starts_with("restart")) {
      EXPECT_GE(t, previous * (1 - 1e-4)) << k;  // not faster by more than the 0.01% a change must gain
      before_restart = previous;
    } else {
      EXPECT_LT(t, previous) << k;
    }
    previous = t;
  }
  EXPECT_LT(out.end_s, before_restart);
  auto again = sim::SimulateIteration(polished, ctx, so);
  ASSERT_TRUE(again.ok());
  EXPECT_NEAR(again->report.iteration_time_s(), out.end_s, 1e-12);
  ASSERT_EQ(polished.pipelines_size(), 1);
  std::string path;
  for (const auto& k : out.kept) path += k + "\n";
  // On two NVLink-connected GPUs llama-tiny trains faster data-parallel than as a pipeline (no fill, and the
  // all-reduce of a tiny model over NVLink is short): the search ends with the two stages joined (change 11)
  // into one stage of both GPUs holding all 6 layers.
  const auto& st = polished.pipelines(0).stages();
  ASSERT_EQ(st.size(), 1) << path;
  EXPECT_EQ(st[0].devices_size(), 2) << path;
  EXPECT_EQ(st[0].layer_end(), 6u) << path;
  // Rebalancing alone (what every structural change gets before it is judged) evens the pipeline: its
  // played estimate falls and the stages end within one block of each other.
  const planners::AnalyticCostModel cost(p.get());
  const proto::Plan even = RebalanceLayers(plan, cost, ctx, 64);
  EXPECT_LT(cost.Estimate(even, false).iteration_s, cost.Estimate(plan, false).iteration_s);
  const auto& es = even.pipelines(0).stages();
  ASSERT_EQ(es.size(), 2);
  const int first = static_cast<int>(es[0].layer_end() - es[0].layer_begin());
  const int second = static_cast<int>(es[1].layer_end() - es[1].layer_begin());
  EXPECT_LE(std::abs(first - second), 2) << first << " / " << second;
}

}  // namespace
}  // namespace hetsim::planning
