// The planners' shared building blocks (planners/search.h, planners/symmetric.h): hand cases for the
// splitting helpers, optimality of MinMaxSplit against brute force, and the closed-form memory of
// CheckMemory against models::EstimateMemory on random plans.
#include "planners/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <random>

#include "planners/symmetric.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::Fixture;

TEST(Search, Divisors) {
  EXPECT_EQ(Divisors(12), (std::vector<uint32_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(Divisors(1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(Divisors(49), (std::vector<uint32_t>{1, 7, 49}));
}

TEST(Search, EvenLayerSplitGivesTheFirstStagesTheRemainder) {
  using R = std::vector<std::pair<uint32_t, uint32_t>>;
  EXPECT_EQ(EvenLayerSplit(10, 3), (R{{0, 4}, {4, 7}, {7, 10}}));
  EXPECT_EQ(EvenLayerSplit(6, 6), (R{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}));
}

TEST(Search, BalanceBlocksMinimisesTheLargestStageThenTheSum) {
  using R = std::vector<std::pair<uint32_t, uint32_t>>;
  // 6 blocks over 3 stages taking fixed + n·per_block = 1 + n, 0 + 2n, 2 + n. The largest stage time is at
  // least 4 (T = 3 holds 2 + 1 + 1 = 4 < 6 blocks; T = 4 holds 3 + 2 + 2 = 7); at T = 4 the cheap stages 0
  // and 2 fill first: n = (3, 1, 2), stage times 4, 2, 4. Ranges add the embedding and the head.
  const auto a = BalanceBlocks(6, {1, 0, 2}, {1, 2, 1}, {6, 6, 6});
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (R{{0, 4}, {4, 5}, {5, 8}}));
  // Memory caps stage 0 at one block: T = 5 (1 + 2 + 3 = 6 blocks); n = (1, 2, 3), times 2, 4, 5.
  const auto b = BalanceBlocks(6, {1, 0, 2}, {1, 2, 1}, {1, 6, 6});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(*b, (R{{0, 2}, {2, 4}, {4, 8}}));
  // Caps that cannot hold the model.
  EXPECT_FALSE(BalanceBlocks(6, {1, 0, 2}, {1, 2, 1}, {1, 2, 2}).has_value());
  // More middle stages than blocks.
  EXPECT_FALSE(BalanceBlocks(1, {0, 0, 0, 0}, {1, 1, 1, 1}, {1, 1, 1, 1}).has_value());
  // One stage holds everything.
  EXPECT_EQ(*BalanceBlocks(4, {0}, {1}, {4}), (R{{0, 6}}));
}

// BalanceBlocks's fast search of the largest stage time gives the sorting search's ranges (or none) on random
// inputs, including equal stage times, free stages, tight memory caps and times within the tolerance.
TEST(Search, BalanceBlocksFastSearchIsTheSortingOne) {
  uint64_t state = 12345;
  auto next = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  int compared = 0, found = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const uint32_t S = 1 + next() % 12;
    const uint32_t blocks = next() % 40 + (S > 2 ? S - 2 : 0);
    std::vector<double> fixed(S), per_block(S);
    std::vector<uint32_t> caps(S);
    const double base = 0.001 * (1 + next() % 7);
    for (uint32_t s = 0; s < S; ++s) {
      switch (next() % 5) {
        case 0: per_block[s] = base; break;                                      // equal times
        case 1: per_block[s] = 0; break;                                         // free
        case 2: per_block[s] = base * (1 + 1e-13 * (next() % 5)); break;        // within tolerance
        default: per_block[s] = 0.0001 * (1 + next() % 50); break;
      }
      fixed[s] = next() % 3 == 0 ? 0.0 : 0.0001 * (next() % 40);
      caps[s] = next() % 4 == 0 ? next() % 4 : next() % (blocks + 2);
    }
    const auto fast = BalanceBlocks(blocks, fixed, per_block, caps);
    const auto reference = BalanceBlocksBySorting(blocks, fixed, per_block, caps);
    ASSERT_EQ(fast.has_value(), reference.has_value()) << "trial " << trial;
    if (fast) {
      EXPECT_EQ(*fast, *reference) << "trial " << trial;
      ++found;
    }
    ++compared;
  }
  EXPECT_GT(found, compared / 4);  // the cases are not all infeasible
}

TEST(Search, ProportionalSplitFollowsTheWeightsWithinCaps) {
  const auto x = ProportionalSplit(10, {3, 1}, {10, 10});
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(std::accumulate(x->begin(), x->end(), 0u), 10u);
  EXPECT_NEAR((*x)[0], 7.5, 1.0);  // within one sequence of the 3:1 share
  EXPECT_EQ(*ProportionalSplit(10, {3, 1}, {5, 10}), (std::vector<uint32_t>{5, 5}));
  EXPECT_FALSE(ProportionalSplit(10, {3, 1}, {5, 4}).has_value());
  EXPECT_FALSE(ProportionalSplit(1, {1, 1}, {1, 1}).has_value());  // every replica needs a sequence
}

TEST(Search, MinMaxSplitIsOptimalForNonDecreasingTimes) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const uint32_t R = 2 + trial % 3, total = R + trial % 7;
    // Per replica: a non-decreasing time per sequence count (random increments).
    std::vector<std::vector<double>> t(R, std::vector<double>(total + 1, 0));
    std::vector<uint32_t> caps(R);
    for (uint32_t r = 0; r < R; ++r) {
      for (uint32_t x = 1; x <= total; ++x) t[r][x] = t[r][x - 1] + std::uniform_real_distribution<>(0, 3)(rng);
      caps[r] = 1 + rng() % total;
    }
    auto value = [&](uint32_t r, uint32_t x) { return t[r][x]; };
    // Brute force over every split with each replica in [1, cap].
    double best = std::numeric_limits<double>::infinity();
    std::vector<uint32_t> x(R, 1);
    std::function<void(uint32_t, uint32_t)> rec = [&](uint32_t r, uint32_t left) {
      if (r + 1 == R) {
        if (left < 1 || left > caps[r]) return;
        x[r] = left;
        double m = 0;
        for (uint32_t i = 0; i < R; ++i) m = std::max(m, t[i][x[i]]);
        best = std::min(best, m);
        return;
      }
      for (uint32_t v = 1; v <= std::min(caps[r], left); ++v) {
        x[r] = v;
        rec(r + 1, left - v);
      }
    };
    rec(0, total);
    const auto split = MinMaxSplit(total, R, value, caps);
    if (best == std::numeric_limits<double>::infinity()) {
      EXPECT_FALSE(split.has_value()) << "trial " << trial;
      continue;
    }
    ASSERT_TRUE(split.has_value()) << "trial " << trial;
    double got = 0;
    for (uint32_t r = 0; r < R; ++r) {
      EXPECT_LE((*split)[r], caps[r]);
      got = std::max(got, t[r][(*split)[r]]);
    }
    EXPECT_EQ(std::accumulate(split->begin(), split->end(), 0u), total);
    EXPECT_DOUBLE_EQ(got, best) << "trial " << trial;
  }
}

TEST(Search, UniformSplitsFollowMegatronLm) {
  const models::TransformerModel model = testing::BundledModel("llama3-405b");  // 126 blocks, 128 layers
  EXPECT_FALSE(UniformBlocksSplit(model, 16).has_value());  // 126 % 16 != 0
  const auto l = UniformLayersSplit(model, 16);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ((*l)[0], (std::pair<uint32_t, uint32_t>{0, 8}));  // embedding + 7 blocks, as in Llama 3
  const auto b = UniformBlocksSplit(model, 2);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ((*b)[0], (std::pair<uint32_t, uint32_t>{0, 64}));  // embedding + 63 blocks
  EXPECT_EQ((*b)[1], (std::pair<uint32_t, uint32_t>{64, 128}));
}

TEST(Search, MostBlocksThatFitFindsTheLastTrueOfAMonotonePredicate) {
  int calls = 0;
  auto upto = [&](uint32_t limit) {
    return [&calls, limit](uint32_t n) {
      ++calls;
      return n <= limit;
    };
  };
  EXPECT_EQ(MostBlocksThatFit(0, 80, upto(37)), 37);
  EXPECT_LE(calls, 8);  // 1 + ceil(log2(81))
  EXPECT_EQ(MostBlocksThatFit(1, 80, upto(80)), 80);
  EXPECT_EQ(MostBlocksThatFit(1, 80, upto(1)), 1);
  EXPECT_EQ(MostBlocksThatFit(2, 80, upto(1)), -1);  // not even the fewest
  EXPECT_EQ(MostBlocksThatFit(5, 5, upto(9)), 5);
  EXPECT_EQ(MostBlocksThatFit(6, 5, upto(9)), -1);   // an empty range
}

TEST(Search, SymmetricShapesOfEightGpusOnTwoNodes) {
  // 8 GPUs (2 nodes of 4: TP divides 4), llama-tiny (8 heads, 4 kv heads, 6 layers), global batch 8.
  // tp ∈ {1, 2, 4}; pp divides 8/tp and is at most 6; dp = 8/(tp·pp) divides 8: tp 1: pp 1, 2, 4
  // (pp 8 > 6 layers); tp 2: pp 1, 2, 4; tp 4: pp 1, 2.
  const testing::Fixture f(testing::ClusterFromYaml(R"(
name: two-by-four
nodes:
  - {name: n, count: 2, gpus: {type: h100, count: 4}, nic: {kind: roce, bandwidth_gbps: 200}}
)"),
                           testing::BundledModel("llama-tiny"), "global_batch_size: 8\nseq_len: 64\n");
  const auto problem = f.problem();
  SearchStats stats;
  std::vector<std::array<uint32_t, 3>> shapes;
  ForEachSymmetricShape(problem, 8, 4, {}, {}, &stats,
                        [&](uint32_t dp, uint32_t tp, uint32_t pp) { shapes.push_back({dp, tp, pp}); });
  const std::vector<std::array<uint32_t, 3>> want = {{8, 1, 1}, {4, 1, 2}, {2, 1, 4}, {4, 2, 1},
                                                     {2, 2, 2}, {1, 2, 4}, {2, 4, 1}, {1, 4, 2}};
  EXPECT_EQ(shapes, want);
  // Requested degrees are kept to the valid ones: pp 3 does not divide 8.
  shapes.clear();
  ForEachSymmetricShape(problem, 8, 4, {2}, {3, 4}, &stats,
                        [&](uint32_t dp, uint32_t tp, uint32_t pp) { shapes.push_back({dp, tp, pp}); });
  EXPECT_EQ(shapes, (std::vector<std::array<uint32_t, 3>>{{1, 2, 4}}));
}

// A random plan on `cluster` for `model` (structurally valid up to the global batch, which the caller sets
// to the plan's total).
proto::Plan RandomPlan(std::mt19937& rng, const models::Cluster& cluster, const models::TransformerModel& model) {
  proto::Plan plan;
  std::vector<uint32_t> devices(cluster.num_devices());
  std::iota(devices.begin(), devices.end(), 0);
  std::shuffle(devices.begin(), devices.end(), rng);
  const uint32_t used = 1 + rng() % cluster.num_devices();
  const uint32_t pipelines = 1 + rng() % std::min<uint32_t>(used, 3);
  // Devices per pipeline: one each, the rest at random.
  std::vector<uint32_t> per_pipeline(pipelines, 1);
  for (uint32_t k = pipelines; k < used; ++k) ++per_pipeline[rng() % pipelines];
  size_t next = 0;
  for (uint32_t p = 0; p < pipelines; ++p) {
    const uint32_t mine = per_pipeline[p];
    const uint32_t stages = 1 + rng() % std::min<uint32_t>({mine, 4, model.num_layers()});
    std::vector<uint32_t> count(stages, 1), layers(stages, 1);
    for (uint32_t k = stages; k < mine; ++k) ++count[rng() % stages];
    for (uint32_t k = stages; k < model.num_layers(); ++k) ++layers[rng() % stages];
    const uint32_t b = *std::max_element(count.begin(), count.end()) + rng() % 3;
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(b);
    pipe->set_num_micro_batches(1 + rng() % 6);
    uint32_t begin = 0;
    for (uint32_t s = 0; s < stages; ++s) {
      auto* st = pipe->add_stages();
      const uint32_t tp = count[s] % 2 == 0 && rng() % 2 == 0 ? 2 : 1;
      for (uint32_t k = 0; k < count[s]; ++k) st->add_devices(devices[next++]);
      if (tp > 1) st->set_tp_degree(tp);
      const uint32_t dp = count[s] / tp;
      if (dp > 1 && rng() % 2 == 0) {
        std::vector<uint32_t> split(dp, 1);
        for (uint32_t k = dp; k < b; ++k) ++split[rng() % dp];
        for (uint32_t x : split) st->add_micro_batch_split(x);
      }
      st->set_layer_begin(begin);
      st->set_layer_end(begin + layers[s]);
      begin += layers[s];
    }
  }
  plan.set_zero_stage(rng() % 4);
  plan.set_sequence_parallel(rng() % 2 == 0);
  plan.set_schedule(rng() % 2 == 0 ? proto::Plan::SCHEDULE_1F1B : proto::Plan::SCHEDULE_GPIPE);
  const proto::Recompute rc[] = {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL};
  plan.set_recompute(rc[rng() % 3]);
  // CPU offload where the ZeRO stage allows it (optimizer: ZeRO-2/3, with the parameters: ZeRO-3), and
  // gradient buckets smaller or larger than a layer.
  const uint32_t levels = plan.zero_stage() >= 3 ? 3 : plan.zero_stage() == 2 ? 2 : 1;
  const proto::Plan::Offload offloads[] = {proto::Plan::OFFLOAD_NONE, proto::Plan::OFFLOAD_OPTIMIZER,
                                           proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS};
  plan.set_offload(offloads[rng() % levels]);
  const double buckets_mib[] = {0, 0.5, 64};
  plan.mutable_comm()->set_dp_bucket_mib(buckets_mib[rng() % 3]);
  return plan;
}

// The runtime memory planners charge before a plan's groups are known (MemoryModel::WorkspaceGib) is never
// below what models::EstimateMemory charges a rank of a finished plan, on any node kind, so a planner's
// memory check is never looser than ValidatePlan's.
TEST(Memory, PlannersRuntimeBoundCoversEveryRanksCommunicators) {
  std::mt19937 rng(11);
  int checked = 0;
  for (const char* name : {"hexiscale-case-study", "metis-nonuniform-v100-dominant-8", "autohet-4node", "cpu-4"}) {
    const models::Cluster cluster = testing::BundledCluster(name);
    const models::TransformerModel model = testing::BundledModel("gpt3-1.3b");  // tied embeddings
    for (int trial = 0; trial < 20; ++trial) {
      const proto::Plan plan = RandomPlan(rng, cluster, model);
      uint64_t total = 0;
      for (const auto& p : plan.pipelines()) total += uint64_t{p.micro_batch_size()} * p.num_micro_batches();
      const Fixture f(cluster, model, "{global_batch_size: " + std::to_string(total) + ", seq_len: 256}");
      const MemoryModel memory(f.problem());
      for (const auto& dm : models::EstimateMemory(plan, f.context())) {
        const auto& node = cluster.node(cluster.device(dm.device).node);
        EXPECT_GE(memory.WorkspaceGib(node) + 1e-12, dm.workspace_gib + dm.context_gib + dm.nccl_gib)
            << name << " trial " << trial << " device " << dm.device << " (" << dm.nccl_communicators
            << " communicators)";
        EXPECT_GE(memory.WorkspaceGib() + 1e-12, memory.WorkspaceGib(node));
        EXPECT_GT(dm.context_gib, 0);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// CheckMemory's closed forms must agree with models::EstimateMemory (what ValidatePlan uses) on the worst
// device of any plan.
TEST(Memory, ClosedFormsAgreeWithEstimateMemoryOnRandomPlans) {
  std::mt19937 rng(5);
  int checked = 0, host_checked = 0;
  for (const char* name : {"hexiscale-case-study", "metis-nonuniform-v100-dominant-8", "autohet-4node"}) {
    for (const char* model_name : {"llama2-7b", "gpt3-1.3b", "llama-tiny"}) {
      const models::Cluster cluster = testing::BundledCluster(name);
      const models::TransformerModel model = testing::BundledModel(model_name);
      for (int trial = 0; trial < 20; ++trial) {
        const proto::Plan plan = RandomPlan(rng, cluster, model);
        uint64_t total = 0;
        for (const auto& p : plan.pipelines()) total += uint64_t{p.micro_batch_size()} * p.num_micro_batches();
        const Fixture f(cluster, model,
                        "{global_batch_size: " + std::to_string(total) + ", seq_len: 256, dtype: fp16}");
        const Status valid = models::ValidatePlanStructure(plan, f.context(), "random");
        ASSERT_TRUE(valid.ok()) << valid.message();
        const MemoryCheck fast = CheckMemory(plan, f.problem(), MemoryModel(f.problem()));
        double worst = -1e300;
        for (const auto& dm : models::EstimateMemory(plan, f.context())) {
          worst = std::max(worst, dm.total_gib - dm.capacity_gib);
        }
        EXPECT_NEAR(fast.need_gib - fast.capacity_gib, worst, 1e-9 * std::max(1.0, std::abs(worst)))
            << name << " " << model_name << " trial " << trial;
        // Host memory under CPU offload, on the nodes whose spec states it (the metis clusters do).
        double worst_host = -1e300;
        for (const auto& hm : models::HostMemoryByNode(models::EstimateMemory(plan, f.context()), cluster)) {
          if (hm.capacity_gib > 0) worst_host = std::max(worst_host, hm.need_gib - hm.capacity_gib);
        }
        if (worst_host > -1e300) {
          ++host_checked;
          EXPECT_NEAR(fast.host_need_gib - fast.host_capacity_gib, worst_host,
                      1e-9 * std::max(1.0, std::abs(worst_host)))
              << name << " " << model_name << " trial " << trial;
        }
        if (std::abs(worst) > 1e-6 && std::abs(worst_host) > 1e-6) {
          EXPECT_EQ(fast.fits, worst < 0 && worst_host < 0) << name << " trial " << trial;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 180);
  EXPECT_GT(host_checked, 5);  // some random plans offload on a cluster that states its host memory
}

// The same agreement for context-parallel plans: two stages of 4 devices with (tp, cp) = (1, 2), (2, 2)
// and (1, 4), every ZeRO stage and recomputation policy. Also checks by hand that the planners' memory
// model halves the activations per sequence at cp 2 (flash attention stores nothing quadratic) and adds
// ring attention's two K/V blocks per sequence (2 · 2 · 256/2 tokens · 4096 · 2 bytes = 4 MiB for
// llama2-7b at seq 256, tp 1) to the transient peak.
TEST(Memory, ClosedFormsAgreeWithEstimateMemoryUnderContextParallelism) {
  const models::Cluster cluster = testing::BundledCluster("autohet-4node");
  const models::TransformerModel model = testing::BundledModel("llama2-7b");
  ASSERT_GE(cluster.num_devices(), 8u);
  int checked = 0;
  for (const auto& [tp, cp] : std::vector<std::pair<uint32_t, uint32_t>>{{1, 2}, {2, 2}, {1, 4}}) {
    for (uint32_t zero = 0; zero <= 3; ++zero) {
      for (proto::Recompute rc : {proto::RECOMPUTE_NONE, proto::RECOMPUTE_FULL}) {
        proto::Plan plan;
        plan.set_zero_stage(zero);
        plan.set_recompute(rc);
        auto* pipe = plan.add_pipelines();
        pipe->set_micro_batch_size(2);
        pipe->set_num_micro_batches(3);
        for (uint32_t s = 0; s < 2; ++s) {
          auto* st = pipe->add_stages();
          for (uint32_t d = 0; d < 4; ++d) st->add_devices(4 * s + d);
          st->set_tp_degree(tp);
          st->set_cp_degree(cp);
          st->set_layer_begin(s == 0 ? 0 : 10);
          st->set_layer_end(s == 0 ? 10 : model.num_layers());
        }
        const Fixture f(cluster, model, "{global_batch_size: 6, seq_len: 256, dtype: fp16}");
        const Status valid = models::ValidatePlanStructure(plan, f.context(), "cp");
        ASSERT_TRUE(valid.ok()) << valid.message();
        const MemoryCheck fast = CheckMemory(plan, f.problem(), MemoryModel(f.problem()));
        double worst = -1e300;
        for (const auto& dm : models::EstimateMemory(plan, f.context())) {
          worst = std::max(worst, dm.total_gib - dm.capacity_gib);
        }
        EXPECT_NEAR(fast.need_gib - fast.capacity_gib, worst, 1e-9 * std::max(1.0, std::abs(worst)))
            << "tp " << tp << " cp " << cp << " zero " << zero;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 24);
  const Fixture f(cluster, model, "{global_batch_size: 6, seq_len: 256, dtype: fp16}");
  const MemoryModel memory(f.problem());
  const double one = memory.ActivationGibPerSequence(1, 10, 1, false, proto::RECOMPUTE_NONE);
  const double two = memory.ActivationGibPerSequence(1, 10, 1, false, proto::RECOMPUTE_NONE, {2, 1});
  EXPECT_NEAR(two, one / 2, 1e-12);
  EXPECT_DOUBLE_EQ(memory.PeakLayerGibPerSequence(1, 10, 1, false, proto::RECOMPUTE_NONE), 0);
  EXPECT_DOUBLE_EQ(memory.PeakLayerGibPerSequence(1, 10, 1, false, proto::RECOMPUTE_NONE, {2, 1}), 4.0 / 1024);
}

}  // namespace
}  // namespace hetsim::planners
