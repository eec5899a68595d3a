// Mixed-length data (sim/mixed_length.h): sampling, packing, intervals, Hetu-B's balancer, the packed
// system's cost, switching transfers, config errors. Expectations are derived by hand in the comments.
#include "sim/mixed_length.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"

namespace hetsim::sim::mixed {
namespace {

namespace fs = std::filesystem;

proto::MixedLengthData LogNormalData(uint64_t seed) {
  proto::MixedLengthData d;
  d.mutable_lognormal()->set_median_tokens(1200);
  d.mutable_lognormal()->set_sigma(1.05);
  d.set_tokens_per_step(200000);
  d.set_steps(3);
  d.set_seed(seed);
  return d;
}

TEST(MixedLength, SamplingFillsTheBudgetExactlyAndIsDeterministicPerSeed) {
  LengthSampler a(LogNormalData(7), {}, 32768), b(LogNormalData(7), {}, 32768), c(LogNormalData(8), {}, 32768);
  for (int step = 0; step < 3; ++step) {
    const auto sa = a.NextStep(), sb = b.NextStep(), sc = c.NextStep();
    // The last sequence is cut to what is left of the budget, so every step holds exactly 200,000 tokens.
    EXPECT_EQ(std::accumulate(sa.begin(), sa.end(), uint64_t{0}), 200000u);
    EXPECT_EQ(std::accumulate(sc.begin(), sc.end(), uint64_t{0}), 200000u);
    EXPECT_EQ(sa, sb);  // same seed, same steps
    EXPECT_NE(sa, sc);  // another seed draws other lengths
    for (uint32_t l : sa) {
      EXPECT_GE(l, 1u);
      EXPECT_LE(l, 32768u);  // truncated to the context
    }
    // Median 1,200 tokens: mean length 1200·exp(1.05²/2) ≈ 2,080, so ~96 sequences per 200K; far from
    // both 10 and 1,000 whatever the draws.
    EXPECT_GT(sa.size(), 30u);
    EXPECT_LT(sa.size(), 300u);
  }
}

TEST(MixedLength, LengthsFileSamplingAndCut) {
  // Every draw is 300 from a one-line file; a budget of 1,000 tokens is 300 + 300 + 300 + 100 (cut).
  proto::MixedLengthData d;
  d.set_lengths_file("unused");
  d.set_tokens_per_step(1000);
  d.set_steps(1);
  LengthSampler s(d, {300}, 0);
  EXPECT_EQ(s.NextStep(), (std::vector<uint32_t>{300, 300, 300, 100}));
  // A cap of 256 truncates each draw: 256 × 3 = 768, then 232 are left.
  LengthSampler capped(d, {300}, 256);
  EXPECT_EQ(capped.NextStep(), (std::vector<uint32_t>{256, 256, 256, 232}));
  // A limit of 2 sequences stops after the third draw (the step is not whole: the caller refuses the run).
  LengthSampler limited(d, {300}, 0);
  EXPECT_EQ(limited.NextStep(2), (std::vector<uint32_t>{300, 300, 300}));
}

TEST(MixedLength, PackingAndIntervals) {
  // First-fit decreasing into windows of 6: 5 -> [5]; 3 -> [5][3]; 3 -> [5][6]; 2 -> [5][6][2];
  // 2 -> [5][6][4]; 1 -> [6][6][4].
  EXPECT_EQ(PackWindows({2, 3, 1, 5, 3, 2}, 6), (std::vector<uint32_t>{6, 6, 4}));
  // Upper bounds are inclusive: 4096 is in the first interval, 4097 in the second, 40000 in none.
  const std::vector<uint32_t> bounds = {4096, 16384, 32768};
  EXPECT_EQ(IntervalOf(1, bounds), 0u);
  EXPECT_EQ(IntervalOf(4096, bounds), 0u);
  EXPECT_EQ(IntervalOf(4097, bounds), 1u);
  EXPECT_EQ(IntervalOf(32768, bounds), 2u);
  EXPECT_EQ(IntervalOf(40000, bounds), 3u);
}

TEST(MixedLength, BalancerHandCase) {
  // Pipeline A: window 10, a window costs its fill (1 s per token); B: window 4, 2 s per token; no fill.
  PipelineModel a{10, [](uint32_t f) { return 1.0 * f; }, nullptr};
  PipelineModel b{4, [](uint32_t f) { return 2.0 * f; }, nullptr};
  // Longest first: 8 -> only A holds it: A [8] = 8 s.
  // 4 -> A would open [8][4] = 12 s, B [4] = 8 s: B.
  // 3 -> A [8][3] = 11 s, B [4][3] = 14 s: A.
  // 3 -> A [8][6] = 14 s (first fit in the second window), B [4][3] = 14 s: tie, the lower index: A.
  // 2 -> A [10][6] = 16 s, B [4][2] = 12 s: B.   Result: A 14 s (8, 3, 3), B 12 s (4, 2).
  auto loads = Balance({3, 8, 2, 4, 3}, {a, b});
  ASSERT_TRUE(loads.ok()) << loads.status().message();
  EXPECT_EQ((*loads)[0].sequences, (std::vector<uint32_t>{8, 3, 3}));
  EXPECT_EQ((*loads)[0].windows, (std::vector<uint32_t>{8, 6}));
  EXPECT_DOUBLE_EQ((*loads)[0].time_s, 14.0);
  EXPECT_EQ((*loads)[1].sequences, (std::vector<uint32_t>{4, 2}));
  EXPECT_EQ((*loads)[1].windows, (std::vector<uint32_t>{4, 2}));
  EXPECT_DOUBLE_EQ((*loads)[1].time_s, 12.0);
  // A sequence no window holds is an error that says what to raise.
  auto bad = Balance({11}, {a, b});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("pipeline_max_tokens"), std::string::npos);
}

// A folder with a tiny model's plan and a config, removed afterwards.
class MixedLengthFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hetsim-mixed-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // Two one-GPU pipelines of llama-tiny (4 blocks + embedding + head = layers [0, 6)).
    Write("plan.yaml",
          "kind: plan\nname: tiny-dp2\ntraining: {global_batch_size: 2, seq_len: 256}\npipelines:\n"
          "  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0], layer_begin: 0, layer_end: 6}]}\n"
          "  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [1], layer_begin: 0, layer_end: 6}]}\n");
    Write("lengths.txt", "# every sequence has 100 tokens\n100\n");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(MixedLengthFiles, PackedCostIsOneSimulationAtTheContext) {
  const std::string cfg = Write("c.yaml",
                                "kind: mixed_length\ncluster: hetu-h20x32\nmodel: llama-tiny\ncontext_tokens: 256\n"
                                "fidelity: balanced\n"
                                "data: {lengths_file: lengths.txt, tokens_per_step: 1000, steps: 2, seed: 1}\n"
                                "systems:\n  - name: packed\n    packed: {plan: plan.yaml}\n");
  auto config = LoadConfig(cfg);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto res = RunMixedLength(*config, cfg, {});
  ASSERT_TRUE(res.ok()) << res.status().message();
  ASSERT_EQ(res->rows.size(), 2u);
  // By hand: 10 sequences of 100 tokens per step; windows of 256 hold two (300 > 256): 5 windows; two
  // pipelines of micro-batch size 1: ceil(5 / 2) = 3 micro-batches each, at 256 tokens.
  auto cluster = models::LoadCluster("hetu-h20x32");
  auto model = models::LoadModel("llama-tiny");
  auto plan = models::LoadPlan((dir_ / "plan.yaml").string());
  ASSERT_TRUE(cluster.ok() && model.ok() && plan.ok());
  for (auto& p : *plan->mutable_pipelines()) p.set_num_micro_batches(3);
  proto::Training t;
  t.set_seq_len(256);
  t.set_global_batch_size(6);
  auto training = models::ResolveTraining(t, *model, "test");
  ASSERT_TRUE(training.ok());
  models::PlanContext ctx{*cluster, *model, *training};
  auto sim = SimulateIteration(*plan, ctx, SimOptions{});
  ASSERT_TRUE(sim.ok()) << sim.status().message();
  for (const auto& row : res->rows) {
    EXPECT_EQ(row.sequences, 10u);
    EXPECT_NEAR(row.time_s, sim->report.iteration_time_s(), 1e-12);
    EXPECT_NE(row.detail.find("5 windows; 3 micro-batches"), std::string::npos) << row.detail;
    EXPECT_NEAR(row.compute_s + row.sync_s, row.time_s, 1e-12);
  }
}

TEST_F(MixedLengthFiles, BadConfigsNameFileAndField) {
  auto check = [&](const std::string& name, const std::string& text, const std::string& want) {
    const std::string path = Write(name, text);
    auto c = LoadConfig(path);
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status().message();
  };
  const std::string head = "kind: mixed_length\ncluster: hetu-h20x32\nmodel: llama-tiny\ncontext_tokens: 256\n"
                           "data: {lengths_file: lengths.txt, tokens_per_step: 1000, steps: 1}\n";
  // Intervals out of order: the field path and both numbers.
  check("order.yaml",
        head + "systems:\n  - name: h\n    intervals:\n      intervals:\n        - {max_tokens: 200, plan: plan.yaml}\n"
               "        - {max_tokens: 100, plan: plan.yaml}\n",
        "systems[0].intervals.intervals[1].max_tokens");
  // The last interval must reach the context.
  check("short.yaml", head + "systems:\n  - name: h\n    intervals:\n      intervals:\n"
                             "        - {max_tokens: 128, plan: plan.yaml}\n",
        "the last interval must reach the context");
  // A misspelt key: the YAML loader's file:line error with a suggestion.
  check("typo.yaml", head + "systems:\n  - name: p\n    packd: {plan: plan.yaml}\n", "packed");
  // No strategy, and a name used twice.
  check("none.yaml", head + "systems:\n  - name: p\n  - name: p\n    packed: {plan: plan.yaml}\n",
        "systems[1].name");
  // The wrong kind.
  check("kind.yaml", "kind: plan\ncluster: c\nmodel: m\ncontext_tokens: 1\ndata: {tokens_per_step: 1, steps: 1}\n"
                     "systems: [{name: a, packed: {plan: p}}]\n",
        "kind");
  // A bad lengths file names its line.
  Write("bad-lengths.txt", "100\n\n-5\n");
  auto l = LoadLengthsFile((dir_ / "bad-lengths.txt").string());
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("bad-lengths.txt:3"), std::string::npos) << l.status().message();
  // A plan file that does not exist: named with the config's field.
  const std::string cfg = Write("noplan.yaml", head + "systems:\n  - name: p\n    packed: {plan: missing.yaml}\n");
  auto c = LoadConfig(cfg);
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto r = RunMixedLength(*c, cfg, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("systems[0].packed.plan"), std::string::npos) << r.status().message();
}

TEST(MixedLength, SwitchTransfersHandCase) {
  // llama-tiny on devices 0 and 1: from TP2 (device k holds half k of every layer) to two full replicas
  // (intra-stage DP 2, TP 1). Each device lacks the other half of every layer: device 0 receives half of
  // the model from device 1 and device 1 half from device 0, bytes_per_param bytes per parameter.
  auto cluster = models::LoadCluster("hetu-h20x32");
  auto model = models::LoadModel("llama-tiny");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Plan tp2, dp2;
  for (proto::Plan* p : {&tp2, &dp2}) {
    auto* st = p->add_pipelines()->add_stages();
    st->add_devices(0);
    st->add_devices(1);
    st->set_layer_end(model->num_layers());
  }
  tp2.mutable_pipelines(0)->mutable_stages(0)->set_tp_degree(2);
  double total = 0;
  for (uint32_t l = 0; l < model->num_layers(); ++l) total += model->Params(l);
  const auto t = SwitchTransfers(tp2, dp2, *model, *cluster, 6.0, proto::SwitchCost::SOURCES_BALANCED);
  ASSERT_EQ(t.size(), 2u);
  for (const auto& x : t) {
    EXPECT_NE(x.from.index, x.to.index);
    EXPECT_NEAR(x.bytes, total * 6.0 / 2, 1e-6 * total);
  }
  // The other way round each device already holds its TP half: nothing moves.
  EXPECT_TRUE(SwitchTransfers(dp2, tp2, *model, *cluster, 6.0, proto::SwitchCost::SOURCES_BALANCED).empty());
}

}  // namespace
}  // namespace hetsim::sim::mixed
