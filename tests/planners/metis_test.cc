// The `metis` planner (planners/metis): the behaviours Metis (ATC'24) states, checked against hand-derived
// expectations — §4.1's device groups, §4.2.2's pruning, §4.3's profiles and their composition, the
// DP-first DFS, capacity-aware layer and data load balancing, eq. 1 — and its gap to `exhaustive`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "models/plan.h"
#include "models/profile_db.h"
#include "models/topology.h"
#include "planners/metis/internal.h"
#include "planners/proto/metis.pb.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners::metis {
namespace {

using planners::testing::Fixture;

const char* kFp16 = "{global_batch_size: 16, seq_len: 1024, dtype: fp16}";

// Nodes named by GPU type; 16 Gbps Ethernet between them (Metis §5.1).
std::string Nodes(const std::vector<std::pair<std::string, uint32_t>>& nodes) {
  std::string yaml = "name: test\nnodes:\n";
  int i = 0;
  for (const auto& [type, count] : nodes) {
    yaml += "  - {name: n" + std::to_string(i++) + "-" + type + ", gpus: {type: " + type + ", count: " +
            std::to_string(count) + "}, nic: {kind: ethernet, bandwidth_gbps: 16, latency_us: 30}}\n";
  }
  return yaml + "network: {single_switch: {}, switch_latency_us: 5}\n";
}

std::vector<std::string> Describe(const models::Cluster& cluster, const std::vector<Take>& groups) {
  std::vector<std::string> out;
  for (const Take& t : groups) out.push_back(DescribeGroup(cluster, t));
  return out;
}

// ---- §4.1 device groups ----------------------------------------------------------------------------------

// §2.2: "two GPU nodes: one with 2 × V GPUs and the other with 2 × T GPUs ... Assuming the number of GPUs
// is in powers of 2, this cluster allows for the formation of six distinct device groups: (V), (T),
// (V, V), (T, T), (V, T), and (V, V, T, T)".
TEST(MetisDeviceGroups, PaperSection22ExampleHasSixGroups) {
  const auto cluster = planners::testing::ClusterFromYaml(Nodes({{"v100", 2}, {"t4", 2}}));
  const auto groups = UniqueDeviceGroups(cluster, {1, 2, 4});
  EXPECT_EQ(Describe(cluster, groups),
            (std::vector<std::string>{"1 GPU: 1×v100 on n0-v100:1", "1 GPU: 1×t4 on n1-t4:1",
                                      "2 GPUs: 2×v100 on n0-v100:2", "2 GPUs: 1×t4 + 1×v100 on n0-v100:1 + n1-t4:1",
                                      "2 GPUs: 2×t4 on n1-t4:2", "4 GPUs: 2×t4 + 2×v100 on n0-v100:2 + n1-t4:2"}));
}

// §4.1: "even if there is one V GPU in a node and three T GPUs in another node ... Metis can compose a
// device group with (V, T, T, T)".
TEST(MetisDeviceGroups, OneVAndThreeTAcrossTwoNodes) {
  const auto cluster = planners::testing::ClusterFromYaml(Nodes({{"v100", 1}, {"t4", 3}}));
  EXPECT_EQ(Describe(cluster, UniqueDeviceGroups(cluster, {4})),
            (std::vector<std::string>{"4 GPUs: 3×t4 + 1×v100 on n0-v100:1 + n1-t4:3"}));
  // Size 3: (V, T, T) and (T, T, T); groups of unequal size and mixed type.
  EXPECT_EQ(UniqueDeviceGroups(cluster, {3}).size(), 2u);
}

// Groups are unique by size, then per-type counts, then node placement: two identical single-GPU T4 nodes
// give one (T) group, while a P100 alone on a node differs from a P100 of a two-GPU node.
TEST(MetisDeviceGroups, UniqueBySizeTypesAndNodePlacement) {
  const auto bench = planners::testing::BundledCluster("metis-microbench-v100-t4-t4-p100");
  // Size 1: (V), (T), (P). Size 2: (V,T), (V,P), (T,T), (T,P) — not the 6 pairs of 4 single GPUs.
  EXPECT_EQ(UniqueDeviceGroups(bench, {1}).size(), 3u);
  EXPECT_EQ(UniqueDeviceGroups(bench, {2}).size(), 4u);
  // 1x1 V100 + 1x1 P100 + 1x2 P100 (Fig. 5(a)): (V), (P on the 1-GPU node), (P on the 2-GPU node).
  const auto nonuniform = planners::testing::BundledCluster("metis-nonuniform-p100-dominant-4");
  EXPECT_EQ(UniqueDeviceGroups(nonuniform, {1}).size(), 3u);
  // Size 2: (V,P₁), (V,P₂), (P₁,P₂), (P₂,P₂).
  EXPECT_EQ(UniqueDeviceGroups(nonuniform, {2}).size(), 4u);
}

// The stage-device assignments of the full space cross non-uniform nodes: on 1x1 V + 1x1 P + 1x2 P, one
// stage of 4 GPUs spans all three nodes; two stages of 2 take (V,P₁)|(P₂,P₂), (V,P₂)|(P₁,P₂),
// (P₁,P₂)|(V,P₂), (P₂,P₂)|(V,P₁).
TEST(MetisDeviceGroups, AssignmentsCrossNonUniformNodes) {
  const auto cluster = planners::testing::BundledCluster("metis-nonuniform-p100-dominant-4");
  const auto classes = NodeClasses(cluster);
  std::vector<Assignment> one, two;
  ForEachAssignment(cluster, classes, {4}, true, {}, [&](const Assignment& a) {
    one.push_back(a);
    return true;
  });
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0][0], (Take{1, 1, 2}));
  ForEachAssignment(cluster, classes, {2, 2}, true, {}, [&](const Assignment& a) {
    two.push_back(a);
    return true;
  });
  ASSERT_EQ(two.size(), 4u);
  EXPECT_EQ(two[0], (Assignment{{1, 1, 0}, {0, 0, 2}}));
  EXPECT_EQ(two[1], (Assignment{{1, 0, 1}, {0, 1, 1}}));
  EXPECT_EQ(two[2], (Assignment{{0, 1, 1}, {1, 0, 1}}));
  EXPECT_EQ(two[3], (Assignment{{0, 0, 2}, {1, 1, 0}}));
  // The consecutive placement (larger clusters) puts stages on consecutive GPUs of each node-class order.
  std::vector<Assignment> consecutive;
  ForEachAssignment(cluster, classes, {2, 2}, false, NodeOrders(cluster, classes), [&](const Assignment& a) {
    consecutive.push_back(a);
    return true;
  });
  // 3! orders of the three node classes; (V,P₁,P₂) and (P₁,V,P₂) both give (V,P₁)|(P₂,P₂), and (P₂,V,P₁) and
  // (P₂,P₁,V) both give (P₂,P₂)|(V,P₁): 4 distinct assignments.
  EXPECT_EQ(consecutive.size(), 4u);
}

// ---- §4.2.2 1) pruning -----------------------------------------------------------------------------------

TEST(MetisPruning, StageSizesAtLeastNOverSTimesOneMinusVar) {
  // 8 GPUs, 4 stages, var 0.5: sizes ≥ 8/4·0.5 = 1 → {2,2,2,2} and {4,2,1,1}; var 0: sizes ≥ 2.
  EXPECT_EQ(StageSizeMultisets(8, 4, 0.5, true), (std::vector<std::vector<uint32_t>>{{4, 2, 1, 1}, {2, 2, 2, 2}}));
  EXPECT_EQ(StageSizeMultisets(8, 4, 0.0, true), (std::vector<std::vector<uint32_t>>{{2, 2, 2, 2}}));
  // Without the power-of-two rule {3,3,1,1}, {3,2,2,1}, {4,2,1,1}, {5,1,1,1}, ... appear.
  EXPECT_EQ(StageSizeMultisets(8, 4, 1.0, false).size(), 5u);  // 5111 4211 3311 3221 2222
}

// The released planner reads var the other way round (search_space/device_group.py: sizes of at least
// max(N // S, S // N) · var); `var_bound: released` selects it.
TEST(MetisPruning, ReleasedVarBoundIsMaxOfFloorsTimesVar) {
  // 8 GPUs, 4 stages, any size: released var 0 → every size (5 multisets), the paper's var 0 → only 2s;
  // released var 1 → sizes ≥ 2, the paper's var 1 → every size.
  EXPECT_EQ(StageSizeMultisets(8, 4, 0.0, false, /*released_var=*/true).size(), 5u);
  EXPECT_EQ(StageSizeMultisets(8, 4, 0.0, false), (std::vector<std::vector<uint32_t>>{{2, 2, 2, 2}}));
  EXPECT_EQ(StageSizeMultisets(8, 4, 1.0, false, true), (std::vector<std::vector<uint32_t>>{{2, 2, 2, 2}}));
  EXPECT_EQ(StageSizeMultisets(8, 4, 1.0, false).size(), 5u);
  // At var 0.5 (Table 4) both give sizes ≥ 1 here.
  EXPECT_EQ(StageSizeMultisets(8, 4, 0.5, true, true), StageSizeMultisets(8, 4, 0.5, true));
  // The floor: 16 GPUs in 3 stages, var 1: released ≥ ⌊16/3⌋ = 5 → {6, 5, 5}; the paper's var 0 needs
  // ≥ 5.33 and no three such sizes sum to 16.
  EXPECT_EQ(StageSizeMultisets(16, 3, 1.0, false, true), (std::vector<std::vector<uint32_t>>{{6, 5, 5}}));
  EXPECT_TRUE(StageSizeMultisets(16, 3, 0.0, false).empty());
  // Through the options.
  auto released = CreatePlanner("metis", "var_bound: released\nvar: 1\n", "o.yaml");
  ASSERT_TRUE(released.ok()) << released.status().message();
  EXPECT_TRUE(KnobsFrom(static_cast<const proto::MetisOptions&>((*released)->options())).released_var);
  auto paper = CreatePlanner("metis", "var_bound: paper\n", "o.yaml");
  ASSERT_TRUE(paper.ok()) << paper.status().message();
  EXPECT_FALSE(KnobsFrom(static_cast<const proto::MetisOptions&>((*paper)->options())).released_var);
  auto typo = CreatePlanner("metis", "var_bound: relased\n", "o.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("var_bound"), std::string::npos) << typo.status().message();
}

TEST(MetisPruning, PaperPermutationExample) {
  // §4.2.2 1): g1..g4 of one GPU and g5 of two: binom(5, 1) = 5 orders; reduced to a permutation length
  // of 3 by pairing (g1, g2) and (g3, g4): binom(3, 1) = 3 orders.
  EXPECT_EQ(StageSizeOrders({2, 1, 1, 1, 1}, 10).size(), 5u);
  EXPECT_EQ(StageSizeOrders({2, 1, 1, 1, 1}, 3),
            (std::vector<std::vector<uint32_t>>{{1, 1, 1, 1, 2}, {1, 1, 2, 1, 1}, {2, 1, 1, 1, 1}}));
  // The authors' example: (1)×6, (2) with length 6 → (1,1), (1,1), (1,1), (2).
  EXPECT_EQ(MergeSmallest({1, 1, 1, 1, 1, 1, 2}, 6),
            (std::vector<std::vector<uint32_t>>{{1, 1}, {1, 1}, {1, 1}, {2}}));
}

TEST(MetisPruning, OrderBudgetMergesTheUnitsWithTheMostOrdersFurther) {
  // Orders of a unit: n! / Π c! over its (merged) units. {2, 1, 1, 1, 1}: 5!/4! = 5, at length 3: 3 (the
  // paper's example); {4, 4, 8, 8}: 4!/(2!·2!) = 6; {16}: 1.
  EXPECT_EQ(OrderCount({2, 1, 1, 1, 1}, 10), 5u);
  EXPECT_EQ(OrderCount({2, 1, 1, 1, 1}, 3), 3u);
  EXPECT_EQ(OrderCount({4, 4, 8, 8}, 10), 6u);
  EXPECT_EQ(OrderCount({16}, 10), 1u);
  EXPECT_EQ(OrderCount({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 10), 3628800u);
  const std::vector<std::vector<uint32_t>> units = {{2, 1, 1, 1, 1}, {4, 4, 8, 8}, {16}};
  // 5 + 6 + 1 = 12 orders fit a budget of 12: every unit keeps the paper's length.
  EXPECT_EQ(PermutationLengths(units, 10, 12), (std::vector<uint32_t>{10, 10, 10}));
  // A budget of 8: the largest c with min(5, c) + min(6, c) + min(1, c) ≤ 8 is 3 (c = 4 needs 9). The
  // first unit reaches 3 orders at length 4 (lengths 5-9 leave its 5 groups as they are; at 4 the four
  // 1s pair up: (1,1), (1,1), (2)); the second at length 3 ((4,4), (8), (8): 3 orders); {16} keeps 10.
  EXPECT_EQ(PermutationLengths(units, 10, 8), (std::vector<uint32_t>{4, 3, 10}));
  // A budget below one order per unit still keeps one order each (length 1).
  EXPECT_EQ(PermutationLengths(units, 10, 1), (std::vector<uint32_t>{1, 1, 10}));
}

TEST(MetisPruning, SkippingOrdersKeepsRanksAndSkipsExactlyTheSharedPrefix) {
  // Sizes {1, 1, 2, 3}: 4!/2! = 12 distinct orders. Visited in full, each order's rank is its index.
  const auto all = StageSizeOrders({1, 1, 2, 3}, 10);
  ASSERT_EQ(all.size(), 12u);
  std::vector<uint64_t> ranks;
  ForEachStageSizeOrderSkipping({1, 1, 2, 3}, 10, [&](const std::vector<uint32_t>& order, uint64_t rank) {
    EXPECT_EQ(order, all[ranks.size()]);
    ranks.push_back(rank);
    return std::optional<uint32_t>(0);
  });
  EXPECT_EQ(ranks, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  // Ruling out every order that begins with (1, 2) when it is first seen: of the orders starting 1, 2
  // ((1, 2, 1, 3) and (1, 2, 3, 1), ranks 2 and 3) only the first is visited; the rest keep their ranks.
  std::vector<std::vector<uint32_t>> seen;
  ranks.clear();
  ForEachStageSizeOrderSkipping({1, 1, 2, 3}, 10, [&](const std::vector<uint32_t>& order, uint64_t rank) {
    seen.push_back(order);
    ranks.push_back(rank);
    return std::optional<uint32_t>(order[0] == 1 && order[1] == 2 ? 2 : 0);
  });
  EXPECT_EQ(ranks, (std::vector<uint64_t>{0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(seen[2], (std::vector<uint32_t>{1, 2, 1, 3}));
  EXPECT_EQ(seen[3], (std::vector<uint32_t>{1, 3, 1, 2}));
  // Ruling out all orders beginning with 2 skips the five after (2, 1, 1, 3); nullopt stops.
  ranks.clear();
  ForEachStageSizeOrderSkipping({1, 1, 2, 3}, 10, [&](const std::vector<uint32_t>& order, uint64_t rank) {
    ranks.push_back(rank);
    if (order[0] == 3) return std::optional<uint32_t>();
    return std::optional<uint32_t>(order[0] == 2 ? 1 : 0);
  });
  EXPECT_EQ(ranks, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 9}));
}

// ---- §4.3 profiling ------------------------------------------------------------------------------------

TEST(MetisProfiler, ComposesUnprofiledMicroBatchSizes) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 2}})), planners::testing::BundledModel("gpt3-350m"),
                  kFp16);
  const auto problem = f.problem();
  const Profiler prof(problem, Knobs{});
  const models::ComputeCost cost(*f.model, *f.training);
  const auto& v100 = *f.cluster->device(0).gpu;
  for (uint32_t p : {1u, 2u, 4u, 8u, 16u}) {  // the profiled sizes: what ComputeCost says
    EXPECT_DOUBLE_EQ(prof.ProfiledLayerSeconds(0, 0, models::LayerKind::kTransformer, p),
                     cost.ForwardSeconds(v100, 1, 1, p) + cost.BackwardSeconds(v100, 1, 1, p));
  }
  // "for mbs = 7, Metis sums the profiled results of mbs = 1, mbs = 2, and mbs = 4".
  const auto block = models::LayerKind::kTransformer;
  EXPECT_DOUBLE_EQ(prof.LayerSeconds(0, 0, block, 7), prof.ProfiledLayerSeconds(0, 0, block, 1) +
                                                          prof.ProfiledLayerSeconds(0, 0, block, 2) +
                                                          prof.ProfiledLayerSeconds(0, 0, block, 4));
  // Layers sum up: Time(L(i, j)) = Σ Time(L(i)).
  const uint32_t L = f.model->num_layers();
  EXPECT_DOUBLE_EQ(prof.RangeSeconds(0, 0, 3, 0, L),
                   prof.LayerSeconds(0, 0, models::LayerKind::kEmbedding, 3) + 24 * prof.LayerSeconds(0, 0, block, 3) +
                       prof.LayerSeconds(0, 0, models::LayerKind::kHead, 3));
}

TEST(MetisProfiler, ReadsMeasuredProfiles) {
  // Sailor's OPT-350M on V100 (bundled, sequences of 2,048 tokens): a block at tp 1 takes
  // 0.007321 + 0.017195 s for 1 sequence, 0.014086 + 0.033946 s for 2, 0.028839 + 0.071714 s for 4
  // (models/catalog/profiles/sailor-opt-350m-v100.yaml), TP communication included.
  auto db = models::ProfileDb::Load({"sailor-opt-350m-v100"});
  ASSERT_TRUE(db.ok()) << db.status().message();
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 2}})), planners::testing::BundledModel("opt-350m"),
                  "{global_batch_size: 16, seq_len: 2048, dtype: fp16}");
  const auto problem = f.problem(&*db);
  const Profiler prof(problem, Knobs{});
  const auto block = models::LayerKind::kTransformer;
  EXPECT_NEAR(prof.ProfiledLayerSeconds(0, 0, block, 4), 0.028839 + 0.071714, 1e-12);
  EXPECT_NEAR(prof.LayerSeconds(0, 0, block, 3), 0.007321 + 0.017195 + 0.014086 + 0.033946, 1e-12);
  // Sailor's times include the TP all-reduces: nothing is added for them.
  EXPECT_EQ(prof.RangeTpSeconds(prof.class_of_node(0), prof.TpIndex(2), 4, 1, 10), 0.0);
}

TEST(MetisProfiler, MemoryFromCompositionsOfUpToKLayers) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 2}})), planners::testing::BundledModel("gpt3-350m"),
                  kFp16);
  const auto problem = f.problem();
  const MemoryModel memory(problem);
  const uint32_t L = f.model->num_layers();
  for (uint32_t k : {1u, 2u, 4u}) {
    Knobs knobs;
    knobs.memory_k = k;
    const Profiler prof(problem, knobs);
    const int tp2 = prof.TpIndex(2);
    // What is measured: Mem(L(i, j)) for j ≤ i + k.
    EXPECT_DOUBLE_EQ(prof.MeasuredActivationGib(tp2, 2, 3, 3 + k),
                     2 * memory.ActivationGibPerSequence(3, 4 + k, 2, true, proto::RECOMPUTE_NONE));
    // Mem(L(m)) = Σ_{n=m−k}^{m−1} (Mem(L(n, m)) − Mem(L(n, m−1)))/k: a block's own activations.
    EXPECT_NEAR(prof.LayerActivationGib(tp2, 1, 10),
                memory.ActivationGibPerSequence(10, 11, 2, true, proto::RECOMPUTE_NONE), 1e-12);
    // Mem(L(i, j)) = Mem(L(i, j − 1)) + Mem(L(j)), and 6 sequences = 2 + 4: the whole model.
    EXPECT_NEAR(prof.ActivationGib(tp2, 6, 0, L),
                6 * memory.ActivationGibPerSequence(0, L, 2, true, proto::RECOMPUTE_NONE), 1e-9);
  }
}

TEST(MetisProfiler, StaticMemoryIsHetsimsArithmetic) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 4}})), planners::testing::BundledModel("gpt3-350m"),
                  kFp16);
  const auto problem = f.problem();
  const MemoryModel memory(problem);
  for (uint32_t zero : {0u, 1u, 2u, 3u}) {
    Knobs knobs;
    knobs.zero_stage = zero;
    const Profiler prof(problem, knobs);
    for (auto [b, e] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 5}, {3, 9}, {20, 26}, {0, 26}}) {
      for (uint32_t tp : {1u, 2u, 4u}) {
        EXPECT_NEAR(prof.StaticGib(prof.TpIndex(tp), b, e, 3), memory.StaticGib(b, e, tp, zero, 3), 1e-12);
      }
    }
  }
}

// ---- §4.2.2 3) load balancing ----------------------------------------------------------------------------

TEST(MetisLoadBalance, BlocksInProportionToCapacity) {
  // Capacities 2 : 1, no embedding or head load: 30 blocks → 20 and 10.
  EXPECT_EQ(ProportionalBlocks(30, {2, 1}, {0, 0}, 1, {30, 30}), (std::vector<uint32_t>{20, 10}));
  // Equal capacities; the embedding (0.5) on stage 0 and the head (1.5) on stage 1 count: each stage's
  // load is 11 of 22, so stage 0 takes 10.5 blocks, rounded to 11, and stage 1 the other 9.
  EXPECT_EQ(ProportionalBlocks(20, {1, 1}, {0.5, 1.5}, 1, {20, 20}), (std::vector<uint32_t>{11, 9}));
  // Memory caps stage 0 at 5 blocks: the rest goes to the others in proportion to their capacity.
  EXPECT_EQ(ProportionalBlocks(30, {2, 1, 1}, {0, 0, 0}, 1, {5, 30, 30}), (std::vector<uint32_t>{5, 13, 12}));
  // Middle stages hold at least one block; caps below the blocks leave no split.
  EXPECT_EQ(ProportionalBlocks(4, {1, 0.001, 1}, {0, 0, 0}, 1, {4, 4, 4}), (std::vector<uint32_t>{2, 1, 1}));
  EXPECT_FALSE(ProportionalBlocks(10, {1, 1}, {0, 0}, 1, {4, 4}).has_value());
}

TEST(MetisLoadBalance, DataSplitByThroughput) {
  // A V100 (125 TFLOPS fp16) and a P100 (21.2): 8 sequences split 6.84 : 1.16 → 7 and 1.
  EXPECT_EQ(DataSplit(8, {125, 21.2}, {16, 16}), (std::vector<uint32_t>{7, 1}));
  // Capped by memory at 5 sequences, the V100 keeps 5.
  EXPECT_EQ(DataSplit(8, {125, 21.2}, {5, 16}), (std::vector<uint32_t>{5, 3}));
}

// ---- Algorithm 1 ---------------------------------------------------------------------------------------

// §4.2.2 2): DP first; TP only when the stage runs out of memory, and only as far as needed. One stage on
// a node of 4 V100s (16 GiB) with GPT-3 1.3B (P = 1.32 B parameters, fp16, ZeRO-1):
//   - micro-batch 4 (B = 16 of a global batch of 64): DP 4 takes one sequence per GPU: weights and
//     gradients 4P + optimizer states 12P/4 = 7P ≈ 8.6 GiB, activations ≈ 1.7 GiB per sequence, 1 GiB of
//     workspace: ≈ 11.3 GiB fits → TP 1;
//   - micro-batch 16 (B = 4): DP 4 keeps 4 sequences per GPU: 8.6 + 6.8 + 1 ≈ 16.4 GiB does not fit;
//     TP 2 × DP 2: ≈ 2P + 3P (per rank, halved) ≈ 6.2 GiB + 8 × 0.85 GiB + 1 ≈ 14 GiB fits → TP 2, not 4.
// The tensors alone (tensors_only_memory): the CUDA context and NCCL's buffers (~2 GiB more on this
// NVLink node) would make TP 2 miss 16 GiB, and this test is about the order of Metis's search.
TEST(Metis, PrefersDpOverTpUntilMemoryForcesTp) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 4}})), planners::testing::BundledModel("gpt3-1.3b"),
                  "{global_batch_size: 64, seq_len: 1024, dtype: fp16, tensors_only_memory: true}");
  const auto problem = f.problem();
  auto small = PlanAssignment(problem, Knobs{}, {{4}}, 16);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(models::TpDegree(small->first.pipelines(0).stages(0)), 1u);
  EXPECT_EQ(models::DpDegree(small->first.pipelines(0).stages(0)), 4u);
  auto large = PlanAssignment(problem, Knobs{}, {{4}}, 4);
  ASSERT_TRUE(large.has_value());
  EXPECT_EQ(models::TpDegree(large->first.pipelines(0).stages(0)), 2u);
  EXPECT_TRUE(models::ValidatePlan(large->first, f.context(), "metis").ok());
}

// §4.2.2 3) and Fig. 2: more layers to the stage with more capacity. A T4 stage then a V100 (32 GB) stage,
// GPT-3 1.3B, one sequence per micro-batch. A stage's capacity is 1 / the time its GPU takes for the whole model
// (ComputeCost: the T4 at its power-capped FP16 GEMM efficiency, 0.369 of its 65-TFLOPS peak, the V100 at the
// generic 0.87 of 125). Loads in block units: the head is h = 2·s·V·d / (24·s·d² + 4·s²·d) ≈ 1.88 blocks,
// the embedding 0; the T4 stage takes its capacity's share of 24 + h blocks, rounded to a whole block (with
// the peaks alone, 65 : 125, that share was 8.85 → 9 blocks; the power cap leaves it fewer).
// The tensors alone (tensors_only_memory) on a 32 GB V100, so that memory does not cap the V100 stage (a 16 GB
// one holds 16 blocks and would take 16).
TEST(Metis, GivesMoreLayersToTheStageWithMoreCapacity) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"t4", 1}, {"v100-32gb", 1}})),
                  planners::testing::BundledModel("gpt3-1.3b"),
                  "{global_batch_size: 8, seq_len: 1024, dtype: fp16, tensors_only_memory: true}");
  auto r = PlanAssignment(f.problem(), Knobs{}, {{1, 0}, {0, 1}}, 8);
  ASSERT_TRUE(r.has_value());
  const auto& pipe = r->first.pipelines(0);
  const uint32_t t4_blocks = pipe.stages(0).layer_end() - 1, v100_blocks = 24 - t4_blocks;
  const models::ComputeCost cost(*f.model, *f.training);
  const auto model_seconds = [&](const models::GpuSpec& g) {
    double t = 0;
    for (uint32_t l = 0; l < 26; ++l) t += cost.ForwardSeconds(g, l, 1, 1) + cost.BackwardSeconds(g, l, 1, 1);
    return t;
  };
  const double t4 = model_seconds(*f.cluster->device(0).gpu), v100 = model_seconds(*f.cluster->device(1).gpu);
  const double s = 1024, d = 2048, V = f.model->spec().vocab_size();
  const double head = 2 * s * V * d / (24 * s * d * d + 4 * s * s * d);
  const double share = (1 / t4) / (1 / t4 + 1 / v100) * (24 + head);
  EXPECT_LT(std::abs(t4_blocks - share), 1.0) << t4_blocks << " blocks on the T4, its share " << share;
  EXPECT_LT(t4_blocks, 8u);  // the peaks' share was 9: the T4's power cap gives it fewer
  EXPECT_GT(v100_blocks, 16u);
}

// §4.1 data load balancing (Fig. 6's HA-DP): a mixed stage of a V100 and a P100 splits a micro-batch of 8
// in proportion to their speed, 125 : 21.2 → 7 and 1.
TEST(Metis, GivesTheFasterGpuALargerMicroBatchShare) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 1}, {"p100", 1}})),
                  planners::testing::BundledModel("gpt3-350m"), kFp16);
  auto r = PlanAssignment(f.problem(), Knobs{}, {{1, 1}}, 2);
  ASSERT_TRUE(r.has_value());
  const auto& stage = r->first.pipelines(0).stages(0);
  ASSERT_EQ(stage.devices_size(), 2);
  EXPECT_EQ(f.cluster->device(stage.devices(0)).gpu->name, "v100");
  EXPECT_EQ(std::vector<uint32_t>(stage.micro_batch_split().begin(), stage.micro_batch_split().end()),
            (std::vector<uint32_t>{7, 1}));
}

// Eq. 1 by hand for two single-GPU stages (V100 then T4, GPT-3 350M, micro-batch 2, B = 4):
// t_i = Σ forward + backward of its layers (ComputeCost at the profiled size 2) + its PP hop
// (α + 2·s·h·2 bytes / β over the link between the nodes); no DP; the optimizer step of the larger stage.
TEST(Metis, CostIsEquationOne) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 1}, {"t4", 1}})),
                  planners::testing::BundledModel("gpt3-350m"), "{global_batch_size: 8, seq_len: 1024, dtype: fp16}");
  const auto plan = planners::testing::PlanFromYaml(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 14}
      - {devices: [1], layer_begin: 14, layer_end: 26}
)");
  const models::ComputeCost cost(*f.model, *f.training);
  const models::Link link = models::Topology(*f.cluster).Between(0, 1);
  const double hop = link.latency_s + 2.0 * 1024 * 1024 * 2 / link.bandwidth_bytes_s;
  double t[2] = {hop, hop}, params[2] = {0, 0};
  for (uint32_t l = 0; l < 26; ++l) {
    const int s = l < 14 ? 0 : 1;
    const auto& gpu = *f.cluster->device(s).gpu;
    t[s] += cost.ForwardSeconds(gpu, l, 1, 2) + cost.BackwardSeconds(gpu, l, 1, 2);
    params[s] += f.model->ParamsPerRank(l, 1, s == 1);
  }
  const double opt = std::max(cost.OptimizerSeconds(*f.cluster->device(0).gpu, params[0]),
                              cost.OptimizerSeconds(*f.cluster->device(1).gpu, params[1]));
  EXPECT_NEAR(PlanCost(f.problem(), Knobs{}, plan), t[0] + t[1] + 3 * std::max(t[0], t[1]) + opt, 1e-12);
}

// The released estimator adds B × the last stage's fb_sync (the largest over its GPU types) and B × the
// batch generator's time to eq. 1. A profile with only those: fb_sync 5 ms (V100) and 7 ms (T4), batch
// generation 1 ms (V100) and 2 ms (T4), at TP 1 and micro-batch 2; the V100 runs the first stage and the
// T4 the last, 4 micro-batches: + 4 × (7 + 1) ms.
TEST(Metis, CostAddsPerMicroBatchOverheads) {
  const Fixture f(planners::testing::ClusterFromYaml(Nodes({{"v100", 1}, {"t4", 1}})),
                  planners::testing::BundledModel("gpt3-350m"), "{global_batch_size: 8, seq_len: 1024, dtype: fp16}");
  models::ProfileDb db;
  for (const auto& [gpu, fb, gen] : {std::tuple<const char*, double, double>{"v100", 5e-3, 1e-3}, {"t4", 7e-3, 2e-3}}) {
    proto::Profile p;
    p.set_gpu(gpu);
    p.set_model("gpt3-350m");
    p.set_seq_len(1024);
    auto* o = p.add_micro_batch_overheads();
    o->set_tp_degree(1);
    o->set_micro_batch_size(2);
    o->set_fb_sync_s(fb);
    o->set_batch_generation_s(gen);
    ASSERT_TRUE(db.Add(p, std::string(gpu) + ".yaml").ok());
  }
  const auto plan = planners::testing::PlanFromYaml(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 14}
      - {devices: [1], layer_begin: 14, layer_end: 26}
)");
  EXPECT_NEAR(PlanCost(f.problem(&db), Knobs{}, plan), PlanCost(f.problem(), Knobs{}, plan) + 4 * (7e-3 + 1e-3),
              1e-12);
  // The simulator's compute cost (models::ComputeCost) charges the same once per micro-batch: fb_sync with
  // the head's backward pass, batch generation with the embedding's forward pass.
  const models::ComputeCost with(*f.model, *f.training, &db), without(*f.model, *f.training);
  const auto& t4 = *f.cluster->device(1).gpu;
  const auto& v100 = *f.cluster->device(0).gpu;
  EXPECT_NEAR(with.BackwardSeconds(t4, 25, 1, 2) - without.BackwardSeconds(t4, 25, 1, 2), 7e-3, 1e-12);
  EXPECT_NEAR(with.ForwardSeconds(v100, 0, 1, 2) - without.ForwardSeconds(v100, 0, 1, 2), 1e-3, 1e-12);
}

// ---- the search ------------------------------------------------------------------------------------------

// Small cases `exhaustive` solves (docs/planners-metis.md's table): the paper's pruning (var 0.5,
// permutation length 10) and hetsim's cut never remove Metis's best plan (the unpruned search finds the
// same cost), and Metis's plan is never better than the proven optimum; the gaps are printed.
TEST(Metis, PruningKeepsTheBestPlanAndGapToExhaustive) {
  struct Case {
    const char* cluster;
    const char* model;
    uint32_t batch, seq;
    bool guarded = true;  // the gap regression guard applies
  };
  std::vector<Case> cases;
  for (const char* cluster : {"metis-uniform-t4-v100-4", "metis-uniform-p100-t4-4", "metis-uniform-p100-v100-4",
                              "metis-nonuniform-p100-dominant-4", "metis-nonuniform-v100-dominant-4",
                              "metis-microbench-v100-t4-t4-p100"}) {
    cases.push_back({cluster, "gpt3-350m", 16, 1024});
    cases.push_back({cluster, "gpt3-1.3b", 32, 1024});
    cases.push_back({cluster, "gpt3-1.3b", 128, 1024});
  }
  // A toy model: `exhaustive` wins 47% with two pipelines of different micro-batch sizes (26 and 6
  // sequences), outside Metis's one-pipeline space.
  cases.push_back({"metis-uniform-t4-v100-4", "llama-tiny", 32, 256, false});
  double worst = 0;
  for (const Case& c : cases) {
    const Fixture f(planners::testing::BundledCluster(c.cluster), planners::testing::BundledModel(c.model),
                    "{global_batch_size: " + std::to_string(c.batch) + ", seq_len: " + std::to_string(c.seq) +
                        ", dtype: fp16}");
    const auto problem = f.problem();
    SearchStats stats;
    auto pruned = Search(problem, Knobs{}, stats);
    ASSERT_TRUE(pruned.ok()) << c.cluster << ": " << pruned.status().message();
    Knobs all;
    all.var = 1;
    all.max_permutation_length = 64;
    all.use_bound = false;
    all.max_dfs_nodes = 1 << 16;
    auto unpruned = Search(problem, all, stats);
    ASSERT_TRUE(unpruned.ok());
    EXPECT_DOUBLE_EQ(pruned->cost_s, unpruned->cost_s) << c.cluster << " " << c.model;
    // Metis plans on every GPU (§4.1): its gap is measured against exhaustive's optimum over plans that use
    // every GPU too (exhaustive's default space also leaves machines idle, up to 17% faster on these clusters).
    auto exact = planners::testing::Run("exhaustive", problem, "use_every_device: true");
    ASSERT_TRUE(exact.ok()) << exact.status().message();
    ASSERT_TRUE(exact->stats.proven_optimal);
    auto metis = planners::testing::Run("metis", problem);
    ASSERT_TRUE(metis.ok()) << metis.status().message();
    const double metis_s = planners::testing::ClosedForm(problem, metis->plan);
    const double exact_s = planners::testing::ClosedForm(problem, exact->plan);
    const double gap = metis_s / exact_s - 1;
    EXPECT_GE(gap, -1e-9) << c.cluster << ": Metis beat the proven optimum";
    if (c.guarded) worst = std::max(worst, gap);
    std::printf("[gap] %s %s gbs %u: metis %.4f s, exhaustive %.4f s, gap %.2f%%\n", c.cluster, c.model, c.batch,
                metis_s, exact_s, 100 * gap);
  }
  // Measured gaps on GPT-3 are 0–9% (docs/planners-metis.md); a regression past 15% fails.
  EXPECT_LT(worst, 0.15);
}

// The cut of (assignment, B) pairs by a lower bound and the threads never change the plan.
TEST(Metis, BoundAndThreadsDoNotChangeThePlan) {
  const Fixture f(planners::testing::BundledCluster("metis-uniform-t4-v100-16"),
                  planners::testing::BundledModel("gpt3-6.7b"), "{global_batch_size: 128, seq_len: 1024, dtype: fp16}");
  const auto problem = f.problem();
  SearchStats stats;
  auto with = Search(problem, Knobs{}, stats);
  ASSERT_TRUE(with.ok()) << with.status().message();
  Knobs no_bound;
  no_bound.use_bound = false;
  auto without = Search(problem, no_bound, stats);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(with->plan->SerializeAsString(), without->plan->SerializeAsString());
  Knobs two;
  two.threads = 2;
  auto threaded = Search(problem, two, stats);
  ASSERT_TRUE(threaded.ok());
  EXPECT_EQ(with->plan->SerializeAsString(), threaded->plan->SerializeAsString());
}

TEST(Metis, SkippedStageSizeOrdersDoNotChangeThePlan) {
  // With 2,048-token sequences some stage-size orders of 16 GPUs begin with a stage that cannot hold its
  // fewest blocks (a small first stage holds the most micro-batches in flight): the bounded search skips
  // every order that begins the same way, the search without the bound visits them all, and both find
  // one plan.
  const Fixture f(planners::testing::BundledCluster("metis-uniform-t4-v100-16"),
                  planners::testing::BundledModel("gpt3-6.7b"), "{global_batch_size: 128, seq_len: 2048, dtype: fp16}");
  const auto problem = f.problem();
  SearchStats with_stats, without_stats;
  auto with = Search(problem, Knobs{}, with_stats);
  ASSERT_TRUE(with.ok()) << with.status().message();
  Knobs no_bound;
  no_bound.use_bound = false;
  auto without = Search(problem, no_bound, without_stats);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(with->plan->SerializeAsString(), without->plan->SerializeAsString());
  bool skipped = false;
  for (const auto& note : with_stats.notes) skipped |= note.find("more skipped") != std::string::npos;
  EXPECT_TRUE(skipped);
  EXPECT_LT(with->size_orders, without->size_orders);
}

// The order budget changes nothing while the search's orders fit in it (the default 5e8 / GPUs is 31M
// orders at 16 GPUs; this search has far fewer), and a budget of one order per unit still finds a valid
// plan, no better than the full search's, and says that the budget cut the permutations.
TEST(Metis, OrderBudgetKeepsThePlanUntilItBinds) {
  const Fixture f(planners::testing::BundledCluster("metis-uniform-t4-v100-16"),
                  planners::testing::BundledModel("gpt3-6.7b"), "{global_batch_size: 128, seq_len: 1024, dtype: fp16}");
  const auto problem = f.problem();
  SearchStats stats, unlimited_stats, tight_stats;
  auto by_default = Search(problem, Knobs{}, stats);
  ASSERT_TRUE(by_default.ok()) << by_default.status().message();
  Knobs unlimited;
  unlimited.max_orders = UINT64_MAX;
  auto full = Search(problem, unlimited, unlimited_stats);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(by_default->plan->SerializeAsString(), full->plan->SerializeAsString());
  EXPECT_EQ(by_default->size_orders, full->size_orders);
  Knobs tight;
  tight.max_orders = 1;
  auto cut = Search(problem, tight, tight_stats);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  EXPECT_LT(cut->size_orders, full->size_orders);
  EXPECT_GE(cut->cost_s, full->cost_s);
  bool noted = false;
  for (const auto& note : tight_stats.notes) noted |= note.find("order budget (max_orders: 1;") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_TRUE(models::ValidatePlan(*cut->plan, f.context(), "metis").ok());
}

// ---- the time limit (time_limit_s; not in the paper) ------------------------------------------------------

// Whether any note of `stats` contains `text`.
bool NoteMentions(const SearchStats& stats, const std::string& text) {
  for (const auto& note : stats.notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

// A clock for Knobs::clock_s that advances one second per reading and counts its readings: the limit then
// cuts the search after a fixed amount of work, whatever the machine's speed.
struct CountingClock {
  std::shared_ptr<uint64_t> readings = std::make_shared<uint64_t>(0);
  std::function<double()> clock() const {
    auto r = readings;
    return [r] { return static_cast<double>((*r)++); };
  }
};

// A limit that passes halfway through the search (by clock readings) stops it there: the best plan found
// so far comes back, valid, with a note that the limit cut the search and what it covered; it is never
// better than the complete search's plan, and fewer candidates were costed. 16 P100 + T4 GPUs (Metis Table 3), GPT-3 6.7B.
TEST(MetisTimeLimit, ReturnsTheBestPlanFoundSoFar) {
  const Fixture f(planners::testing::BundledCluster("metis-uniform-p100-t4-16"),
                  planners::testing::BundledModel("gpt3-6.7b"), "{global_batch_size: 128, seq_len: 1024, dtype: fp16}");
  const auto problem = f.problem();
  // The complete search, timed by the counting clock under a limit it never reaches.
  CountingClock full_clock;
  Knobs full_knobs;
  full_knobs.time_limit_s = 1e12;
  full_knobs.clock_s = full_clock.clock();
  SearchStats full_stats;
  auto full = Search(problem, full_knobs, full_stats);
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_FALSE(full->cut_by_time_limit);
  EXPECT_FALSE(NoteMentions(full_stats, "time limit"));
  const uint64_t readings = *full_clock.readings;
  ASSERT_GT(readings, 8u);  // enough for a limit halfway through

  CountingClock half_clock;
  Knobs half;
  half.time_limit_s = static_cast<double>(readings / 2);
  half.clock_s = half_clock.clock();
  SearchStats stats;
  auto cut = Search(problem, half, stats);
  ASSERT_TRUE(cut.ok()) << cut.status().message();
  EXPECT_TRUE(cut->cut_by_time_limit);
  ASSERT_TRUE(cut->plan.has_value());
  EXPECT_TRUE(models::ValidatePlan(*cut->plan, f.context(), "metis").ok());
  EXPECT_GE(cut->cost_s, full->cost_s * (1 - 1e-12));
  EXPECT_LT(stats.candidates_evaluated, full_stats.candidates_evaluated);
  EXPECT_TRUE(NoteMentions(stats, "search cut by the time limit (time_limit_s: ")) << DescribeStats(stats);
  EXPECT_TRUE(NoteMentions(stats, "the plan is the best found so far")) << DescribeStats(stats);
  EXPECT_TRUE(NoteMentions(stats, "stage counts searched completely")) << DescribeStats(stats);
  EXPECT_TRUE(NoteMentions(stats, "micro-batch counts B tried")) << DescribeStats(stats);
}

// A limit that passes before any plan is found is an error that names the limit and says to raise it.
TEST(MetisTimeLimit, NoPlanBeforeTheLimitIsAClearError) {
  const Fixture f(planners::testing::BundledCluster("metis-uniform-t4-v100-16"),
                  planners::testing::BundledModel("gpt3-6.7b"), "{global_batch_size: 128, seq_len: 1024, dtype: fp16}");
  CountingClock clock;
  Knobs knobs;
  knobs.time_limit_s = 0.5;  // the first check reads the clock a second after the start
  knobs.clock_s = clock.clock();
  SearchStats stats;
  auto r = Search(f.problem(), knobs, stats);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInfeasible);
  EXPECT_NE(r.status().message().find("no plan found before the time limit (time_limit_s: 0.5)"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("raise time_limit_s"), std::string::npos) << r.status().message();
}

// Through the registry with the real clock: a limit the search does not reach changes nothing (the same
// plan, no note); the option is range-checked.
TEST(MetisTimeLimit, UnreachedLimitKeepsThePlan) {
  const Fixture f(planners::testing::BundledCluster("metis-uniform-t4-v100-16"),
                  planners::testing::BundledModel("gpt3-6.7b"), "{global_batch_size: 128, seq_len: 1024, dtype: fp16}");
  auto none = planners::testing::Run("metis", f.problem());
  ASSERT_TRUE(none.ok()) << none.status().message();
  auto limited = planners::testing::Run("metis", f.problem(), "time_limit_s: 3600\n");
  ASSERT_TRUE(limited.ok()) << limited.status().message();
  EXPECT_EQ(none->plan.SerializeAsString(), limited->plan.SerializeAsString());
  EXPECT_FALSE(NoteMentions(limited->stats, "time limit"));
  EXPECT_FALSE(CreatePlanner("metis", "time_limit_s: -1\n", "o.yaml").ok());
}

// Through the registry: options are the paper's knobs, checked like every hetsim file; the plan validates
// on a non-uniform cluster of Fig. 5.
TEST(Metis, PlansNonUniformClustersThroughTheRegistry) {
  const Fixture f(planners::testing::BundledCluster("metis-nonuniform-v100-dominant-8"),
                  planners::testing::BundledModel("gpt3-2.6b"), "{global_batch_size: 128, seq_len: 1024, dtype: fp16}");
  auto r = planners::testing::Run("metis", f.problem(), "var: 0.5\nmax_permutation_length: 10\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(models::ValidatePlan(r->plan, f.context(), "metis").ok());
  EXPECT_EQ(r->plan.pipelines_size(), 1);
  EXPECT_GT(r->stats.candidates_evaluated, 0u);

  auto bad = CreatePlanner("metis", "var: -0.5\n", "o.yaml");
  EXPECT_FALSE(bad.ok());
  auto typo = CreatePlanner("metis", "max_permutation_lenght: 4\n", "o.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("max_permutation_length"), std::string::npos) << typo.status().message();
}

}  // namespace
}  // namespace hetsim::planners::metis
