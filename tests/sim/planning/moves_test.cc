// Polishing's moves (sim/planning/moves.h): the table, and each move's neighbours counted by hand.
#include "sim/planning/moves.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "tests/sim/planning/fixtures.h"

namespace hetsim::planning {
namespace {

using fixtures::ClusterFrom;
using fixtures::OneStage;
using fixtures::StageOf;

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

// stage-split on a stage of four DP replicas, two on each machine: split by machine into two stages of two
// devices, the layers by device count (6 · 2/4 = 3 each); on one machine it would split in halves instead.
// tp-dp-trade on the same stage: TP 2 × DP 2.
TEST(PlanNeighbours, AStageOfReplicasOnTwoMachinesSplitsByMachine) {
  const auto cluster = ClusterFrom(kTwoMachines);
  const proto::Plan plan = OneStage(4, 6, 4, 2);
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
  // tp-dp-trade: four TP-1 replicas become two TP-2 replicas on the same devices (TP 1 cannot be halved); the
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

// deep-pipeline's stages of g GPUs of a machine, on autohet-nonuniform-3a100-5h800's machines of 3 A100s
// (devices 0-2) and 5 H800s (3-7), 16 sequences: g = 2 and g = 4 (below the widest machine's 5; 8 is not),
// each in the listed order (A100s first, which is also the slowest first) and fastest first (H800s first):
// 4 neighbours. A machine's remainder leads it: for g = 2 the A100s are {0}, {1, 2} and the H800s {3},
// {4, 5}, {6, 7}; for g = 4 the A100s are one stage of 3 and the H800s {3}, {4, 5, 6, 7}. Micro-batches of g
// sequences (2 and 4 divide 16), layers (26 here) by device count before rebalancing.
TEST(PlanNeighbours, StagesOfGGpusPerMachineRemainderFirst) {
  auto loaded = models::LoadCluster("autohet-nonuniform-3a100-5h800");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const models::Cluster& cluster = *loaded;
  const proto::Plan plan = OneStage(8, 26, 1, 16);
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


// The changes one move makes to `plan`, by description.
std::map<std::string, proto::Plan> By(const char* move, const proto::Plan& plan, const models::Cluster& cluster,
                                      uint32_t layers = 6,
                                      proto::Recompute training_recompute = proto::RECOMPUTE_UNSPECIFIED) {
  const Move* m = FindMove(move);
  EXPECT_NE(m, nullptr) << move;
  std::map<std::string, proto::Plan> out;
  if (m == nullptr) return out;
  for (auto& c : NeighboursBy(*m, {plan, cluster, layers, training_recompute})) {
    EXPECT_EQ(c.layer_move, std::string(move) == "layer-boundary") << c.change;
    EXPECT_TRUE(out.emplace(c.change, std::move(c.plan)).second) << "listed twice: " << c.change;
  }
  return out;
}

// The layer ranges of a pipeline's stages, as [begin, end) pairs.
std::vector<std::pair<uint32_t, uint32_t>> Ranges(const proto::Pipeline& p) {
  std::vector<std::pair<uint32_t, uint32_t>> r;
  for (const auto& s : p.stages()) r.emplace_back(s.layer_begin(), s.layer_end());
  return r;
}

using Ranges_ = std::vector<std::pair<uint32_t, uint32_t>>;

TEST(PolishMoves, FourteenNamedMovesInPolishingsOrder) {
  const char* names[] = {"layer-boundary", "device-swap",    "micro-batch-transfer", "micro-batch-size",
                         "pipeline-merge", "machine-order",  "zero-stage",           "stage-per-machine",
                         "stage-split",    "deep-pipeline",  "stage-join",           "tp-dp-trade",
                         "recompute",      "machine-idle"};
  ASSERT_EQ(PolishMoves().size(), 14u);
  for (size_t i = 0; i < 14; ++i) {
    EXPECT_STREQ(PolishMoves()[i].name, names[i]);
    EXPECT_EQ(FindMove(names[i]), &PolishMoves()[i]);
  }
  EXPECT_EQ(FindMove("no-such-move"), nullptr);
  // PlanNeighbours is the moves' lists one after the other.
  const auto cluster = ClusterFrom(kTwoMachines);
  std::vector<std::string> joined;
  for (const Move& m : PolishMoves()) {
    for (const auto& c : NeighboursBy(m, {TwoPipelines(), cluster, 6})) joined.push_back(c.change);
  }
  std::vector<std::string> all;
  for (const auto& c : PlanNeighbours(TwoPipelines(), cluster, 6)) all.push_back(c.change);
  EXPECT_EQ(all, joined);
}

// On TwoPipelines each pipeline's stages hold 3 + 3 layers: a layer either way, per pipeline. Moving one from
// stage 0 to stage 1 shifts their boundary from 3 to 2.
TEST(PolishMoves, LayerBoundary) {
  const auto n = By("layer-boundary", TwoPipelines(), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 4u);
  const auto& p = n.at("one layer from pipeline 0 stage 0 to pipeline 0 stage 1");
  EXPECT_EQ(Ranges(p.pipelines(0)), (Ranges_{{0, 2}, {2, 6}}));
  EXPECT_EQ(Ranges(p.pipelines(1)), (Ranges_{{0, 3}, {3, 6}}));
  // A stage of one layer gives none away; with three stages a layer crosses the middle one (both boundaries
  // shift). Stages 1-1-4: from stage 2 to 0 and to 1 only (stages 0 and 1 hold one layer each).
  proto::Plan three;
  auto* pipe = three.add_pipelines();
  pipe->set_micro_batch_size(1);
  pipe->set_num_micro_batches(4);
  *pipe->add_stages() = StageOf(0, 0, 1);
  *pipe->add_stages() = StageOf(1, 1, 2);
  *pipe->add_stages() = StageOf(2, 2, 6);
  const auto t = By("layer-boundary", three, ClusterFrom(kTwoMachines));
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(Ranges(t.at("one layer from pipeline 0 stage 2 to pipeline 0 stage 0").pipelines(0)),
            (Ranges_{{0, 2}, {2, 3}, {3, 6}}));
  EXPECT_EQ(Ranges(t.at("one layer from pipeline 0 stage 2 to pipeline 0 stage 1").pipelines(0)),
            (Ranges_{{0, 1}, {1, 3}, {3, 6}}));
}

// Stages on A100s (p0s0, p1s0) and on H100s (p0s1, p1s1): the four pairs across types swap, the two pairs
// of one type do not; a swap moves the devices, not the layers.
TEST(PolishMoves, DeviceSwap) {
  const auto n = By("device-swap", TwoPipelines(), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 4u);
  EXPECT_EQ(n.count("devices of pipeline 0 stage 0 and pipeline 1 stage 0 swapped"), 0u);
  const auto& p = n.at("devices of pipeline 0 stage 0 and pipeline 1 stage 1 swapped");
  EXPECT_EQ(p.pipelines(0).stages(0).devices(0), 3u);
  EXPECT_EQ(p.pipelines(1).stages(1).devices(0), 0u);
  EXPECT_EQ(Ranges(p.pipelines(0)), (Ranges_{{0, 3}, {3, 6}}));
}

// Two pipelines of 4 micro-batches: one from 0 to 1 (3 and 5) and one from 1 to 0.
TEST(PolishMoves, MicroBatchTransfer) {
  const auto n = By("micro-batch-transfer", TwoPipelines(), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 2u);
  const auto& p = n.at("one micro-batch from pipeline 0 to pipeline 1");
  EXPECT_EQ(p.pipelines(0).num_micro_batches(), 3u);
  EXPECT_EQ(p.pipelines(1).num_micro_batches(), 5u);
}

// Micro-batches of 1 × 4: doubled to 2 × 2 per pipeline (1 cannot be halved); of 2 × 3: halved to 1 × 6 only
// (3 micro-batches cannot be halved).
TEST(PolishMoves, MicroBatchSize) {
  const auto cluster = ClusterFrom(kTwoMachines);
  const auto n = By("micro-batch-size", TwoPipelines(), cluster);
  ASSERT_EQ(n.size(), 2u);
  const auto& p = n.at("pipeline 1's micro-batches of 2 sequences");
  EXPECT_EQ(p.pipelines(1).micro_batch_size(), 2u);
  EXPECT_EQ(p.pipelines(1).num_micro_batches(), 2u);
  EXPECT_EQ(p.pipelines(0).micro_batch_size(), 1u);
  proto::Plan odd = TwoPipelines();
  odd.mutable_pipelines(0)->set_micro_batch_size(2);
  odd.mutable_pipelines(0)->set_num_micro_batches(3);
  odd.mutable_pipelines()->DeleteSubrange(1, 1);
  const auto o = By("micro-batch-size", odd, cluster);
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o.begin()->second.pipelines(0).num_micro_batches(), 6u);
}

// (0, 1) and (1, 0), each concatenated and grouped by machine. Concatenated (0, 1): devices 0, 2, 1, 3,
// each stage's 3 of 12 layer-shares placing the boundaries at 2, 3, 5; 8 micro-batches of one.
TEST(PolishMoves, PipelineMerge) {
  const auto n = By("pipeline-merge", TwoPipelines(), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 4u);
  const auto& p = n.at("pipelines 0 and 1 merged into one of 4 stages");
  ASSERT_EQ(p.pipelines_size(), 1);
  const uint32_t devices[] = {0, 2, 1, 3};
  for (int k = 0; k < 4; ++k) EXPECT_EQ(p.pipelines(0).stages(k).devices(0), devices[k]);
  EXPECT_EQ(Ranges(p.pipelines(0)), (Ranges_{{0, 2}, {2, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(p.pipelines(0).num_micro_batches(), 8u);
  // A merged pipeline of 4 stages needs 4 layers: over 3 there is no merge.
  EXPECT_TRUE(By("pipeline-merge", TwoPipelines(), ClusterFrom(kTwoMachines), 3).empty());
}

// Each pipeline runs over machines 0 then 1: the other order puts machine 1 (H100) first, each stage keeping
// its 3 layers.
TEST(PolishMoves, MachineOrder) {
  const auto n = By("machine-order", TwoPipelines(), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 2u);
  const auto& p = n.at("pipeline 0's machines in the order 1, 0");
  EXPECT_EQ(p.pipelines(0).stages(0).devices(0), 2u);
  EXPECT_EQ(p.pipelines(0).stages(1).devices(0), 0u);
  EXPECT_EQ(Ranges(p.pipelines(0)), (Ranges_{{0, 3}, {3, 6}}));
}

// ZeRO 0 → 1 only; 1 → 0 and 2; 3 → 2 only.
TEST(PolishMoves, ZeroStage) {
  const auto cluster = ClusterFrom(kTwoMachines);
  const std::map<uint32_t, std::set<std::string>> expected = {
      {0, {"ZeRO stage 1"}}, {1, {"ZeRO stage 0", "ZeRO stage 2"}}, {3, {"ZeRO stage 2"}}};
  for (const auto& [zero, names] : expected) {
    proto::Plan plan = TwoPipelines();
    plan.set_zero_stage(zero);
    std::set<std::string> got;
    for (const auto& [change, p] : By("zero-stage", plan, cluster)) {
      got.insert(change);
      EXPECT_EQ(p.zero_stage(), static_cast<uint32_t>(change.back() - '0'));
    }
    EXPECT_EQ(got, names) << "from ZeRO " << zero;
  }
}

// A's devices 0-1 and B's 2-3 as two DP-2 stages, 3 layers each by device count, micro-batches of 2 (the
// widest machine) × 4 for the 8 sequences.
TEST(PolishMoves, StagePerMachine) {
  const auto n = By("stage-per-machine", TwoPipelines(), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 1u);
  const auto& [change, plan] = *n.begin();
  EXPECT_EQ(change, "one pipeline, a stage per machine (2 stages, data parallelism inside each)");
  ASSERT_EQ(plan.pipelines_size(), 1);
  const auto& m = plan.pipelines(0);
  EXPECT_EQ(m.micro_batch_size(), 2u);
  EXPECT_EQ(m.num_micro_batches(), 4u);
  ASSERT_EQ(m.stages_size(), 2);
  EXPECT_EQ(m.stages(0).devices_size(), 2);
  EXPECT_EQ(Ranges(m), (Ranges_{{0, 3}, {3, 6}}));
  EXPECT_EQ(m.stages(1).devices(0), 2u);
}

// Two replicas on one machine split in halves: device 0 with layers 0-3, device 1 with 3-6. Single-replica
// stages (TwoPipelines) have nothing to split.
TEST(PolishMoves, StageSplitInHalvesOnOneMachine) {
  const auto cluster = ClusterFrom(kTwoMachines);
  EXPECT_TRUE(By("stage-split", TwoPipelines(), cluster).empty());
  const auto n = By("stage-split", OneStage(2, 6, 2, 2), cluster);
  ASSERT_EQ(n.size(), 1u);
  const auto& p = n.at("pipeline 0 stage 0 split in halves into 2 stages");
  ASSERT_EQ(p.pipelines(0).stages_size(), 2);
  EXPECT_EQ(p.pipelines(0).stages(0).devices(0), 0u);
  EXPECT_EQ(p.pipelines(0).stages(1).devices(0), 1u);
  EXPECT_EQ(Ranges(p.pipelines(0)), (Ranges_{{0, 3}, {3, 6}}));
}

// One pipeline's stages 0 and 1 (TP 1 each) joined into one DP-2 stage of all 6 layers; its micro-batch of 1
// doubles to 2 (a sequence per replica), its 4 micro-batches halve.
TEST(PolishMoves, StageJoin) {
  const auto n = By("stage-join", TwoPipelines(), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 2u);
  const auto& p = n.at("pipeline 0 stage 0 and stage 1 joined into one data-parallel stage");
  ASSERT_EQ(p.pipelines(0).stages_size(), 1);
  EXPECT_EQ(p.pipelines(0).stages(0).devices_size(), 2);
  EXPECT_EQ(p.pipelines(0).stages(0).devices(1), 2u);
  EXPECT_EQ(Ranges(p.pipelines(0)), (Ranges_{{0, 6}}));
  EXPECT_EQ(p.pipelines(0).micro_batch_size(), 2u);
  EXPECT_EQ(p.pipelines(0).num_micro_batches(), 2u);
  // With a single micro-batch of one sequence there is no count to halve: no join.
  proto::Plan single = TwoPipelines();
  for (auto& pipe : *single.mutable_pipelines()) pipe.set_num_micro_batches(1);
  EXPECT_TRUE(By("stage-join", single, ClusterFrom(kTwoMachines)).empty());
}

// A stage of four devices at TP 2 (two replicas): TP 1 × DP 4, and TP 4 × DP 1 (two replicas pair up); the
// micro-batch of 4 already gives each of four replicas a sequence.
TEST(PolishMoves, TpDpTradeBothWays) {
  const auto n = By("tp-dp-trade", OneStage(4, 6, 4, 2, /*tp=*/2), ClusterFrom(kTwoMachines));
  ASSERT_EQ(n.size(), 2u);
  EXPECT_EQ(n.at("pipeline 0 stage 0 at TP 1 × DP 4").pipelines(0).stages(0).tp_degree(), 1u);
  EXPECT_EQ(n.at("pipeline 0 stage 0 at TP 4 × DP 1").pipelines(0).stages(0).tp_degree(), 4u);
  EXPECT_EQ(n.at("pipeline 0 stage 0 at TP 1 × DP 4").pipelines(0).micro_batch_size(), 4u);
}

// The policy the plan runs with (its own, else the training's, else none) is left out of the three.
TEST(PolishMoves, Recompute) {
  const auto cluster = ClusterFrom(kTwoMachines);
  const auto names = [&](const proto::Plan& plan, proto::Recompute training) {
    std::set<std::string> s;
    for (const auto& [change, p] : By("recompute", plan, cluster, 6, training)) s.insert(change);
    return s;
  };
  using S = std::set<std::string>;
  EXPECT_EQ(names(TwoPipelines(), proto::RECOMPUTE_UNSPECIFIED),
            (S{"recomputation selective", "recomputation full"}));
  EXPECT_EQ(names(TwoPipelines(), proto::RECOMPUTE_SELECTIVE), (S{"recomputation none", "recomputation full"}));
  proto::Plan full = TwoPipelines();
  full.set_recompute(proto::RECOMPUTE_FULL);
  EXPECT_EQ(names(full, proto::RECOMPUTE_SELECTIVE), (S{"recomputation none", "recomputation selective"}));
}

// Three machines: two of A100s (devices 0-1, 2-3) and one of H100s (4-5); one pipeline of a stage per machine
// (devices 0, 2, 4; 2 + 2 + 2 layers). Left idle: machine 1 (the last A100 machine used), machine 2 (the
// only H100 one), and every A100 (the slower type, two machines): then the H100 stage holds all six layers.
TEST(PolishMoves, MachineIdleLeavesTheLastOfATypeAndTheSlowestTypeIdle) {
  const auto cluster = ClusterFrom(R"(kind: cluster
name: three
nodes:
  - name: a
    count: 2
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 200}
  - name: b
    gpus: {type: h100, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 200}
network: {single_switch: {}}
)");
  ASSERT_EQ(cluster.num_devices(), 6u);
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(1);
  pipe->set_num_micro_batches(4);
  *pipe->add_stages() = StageOf(0, 0, 2);
  *pipe->add_stages() = StageOf(2, 2, 4);
  *pipe->add_stages() = StageOf(4, 4, 6);
  const auto n = By("machine-idle", plan, cluster);
  ASSERT_EQ(n.size(), 3u);
  // Machine 1's stage dropped: its layers go to the stage before it.
  EXPECT_EQ(Ranges(n.at("machine 1 (a100-80gb) left idle").pipelines(0)), (Ranges_{{0, 4}, {4, 6}}));
  // Machine 2's (the last stage) dropped: its layers go to machine 1's stage.
  EXPECT_EQ(Ranges(n.at("machine 2 (h100) left idle").pipelines(0)), (Ranges_{{0, 2}, {2, 6}}));
  const auto& h100 = n.at("every a100-80gb left idle").pipelines(0);
  ASSERT_EQ(h100.stages_size(), 1);
  EXPECT_EQ(h100.stages(0).devices(0), 4u);
  EXPECT_EQ(Ranges(h100), (Ranges_{{0, 6}}));
}


}  // namespace
}  // namespace hetsim::planning
