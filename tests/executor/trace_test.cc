// Report and timeline built from hand-made timings.
#include "executor/trace.h"

#include <gtest/gtest.h>

#include "models/spec_io.h"
#include "models/training.h"

namespace hetsim::executor {
namespace {

TEST(TraceTest, TpTimeIsTakenOutOfTheComputeSliceItNestsIn) {
  const std::vector<TimedSlice> s = {{Category::kForward, 0, 0.0, 1.0},
                                     {Category::kTp, 0, 0.2, 0.3},
                                     {Category::kPp, 1, 1.0, 1.5},
                                     {Category::kBackward, 0, 2.0, 4.0},
                                     {Category::kTp, 0, 3.0, 3.5}};
  const auto incl = CategorySeconds(s, false), excl = CategorySeconds(s, true);
  EXPECT_DOUBLE_EQ(incl[static_cast<size_t>(Category::kForward)], 1.0);
  EXPECT_DOUBLE_EQ(excl[static_cast<size_t>(Category::kForward)], 0.9);
  EXPECT_DOUBLE_EQ(excl[static_cast<size_t>(Category::kBackward)], 1.5);
  EXPECT_DOUBLE_EQ(excl[static_cast<size_t>(Category::kTp)], 0.6);
  EXPECT_DOUBLE_EQ(excl[static_cast<size_t>(Category::kPp)], 0.5);
}

TEST(TraceTest, ReportFromTwoDevices) {
  auto plan = models::LoadPlan("cpu-4-pp2");
  auto cluster = models::LoadCluster("cpu-4");
  auto model = models::LoadModel("llama-tiny");
  ASSERT_TRUE(plan.ok() && cluster.ok() && model.ok());
  auto training = models::ResolveTraining(plan->training(), *model, "t");
  ASSERT_TRUE(training.ok());
  const models::PlanContext pctx{*cluster, *model, *training};
  auto ep = BuildExecPlan(*plan, pctx, "p");
  ASSERT_TRUE(ep.ok());
  // Two timed iterations. Rank 0: 2 s and 4 s long; rank 1: 3 s both times. Iteration times: 3 and 4,
  // mean 3.5 s.
  std::vector<DeviceTiming> d(2);
  d[0].rank = 0;
  d[0].iteration_s = {2.0, 4.0};
  d[0].slices = {{{Category::kForward, 0, 0.0, 1.0}, {Category::kDp, -1, 1.0, 1.5}},
                 {{Category::kForward, 0, 0.0, 1.0}, {Category::kDp, -1, 1.0, 1.5}}};
  d[0].peak_memory_bytes = 2.0 * 1024 * 1024 * 1024;
  d[1].rank = 1;
  d[1].iteration_s = {3.0, 3.0};
  d[1].slices = {{{Category::kPp, 0, 0.0, 0.5}, {Category::kBackward, 0, 1.0, 3.0}, {Category::kTp, 0, 2.0, 2.5}},
                 {{Category::kPp, 0, 0.0, 0.5}, {Category::kBackward, 0, 1.0, 3.0}, {Category::kTp, 0, 2.0, 2.5}}};
  const ReportContext ctx{*ep, *cluster, *model, *training, "cpu-4-pp2", 9.0};
  const auto r = BuildReport(ctx, d);
  EXPECT_EQ(r.source(), "executor");
  EXPECT_DOUBLE_EQ(r.iteration_time_s(), 3.5);
  EXPECT_DOUBLE_EQ(r.tokens_per_s(), 16.0 * 64 / 3.5);
  ASSERT_EQ(r.devices_size(), 2);
  // Rank 0: compute 1, communication 0.5 (DP), idle 3.5 − 1.5 = 2.
  EXPECT_DOUBLE_EQ(r.devices(0).compute_s(), 1.0);
  EXPECT_DOUBLE_EQ(r.devices(0).dp_communication_s(), 0.5);
  EXPECT_DOUBLE_EQ(r.devices(0).idle_s(), 2.0);
  EXPECT_DOUBLE_EQ(r.devices(0).peak_memory_gib(), 2.0);
  EXPECT_EQ(r.devices(0).stage(), 0u);
  // Rank 1: compute 2 − 0.5 (nested TP) = 1.5, communication 0.5 (TP) + 0.5 (PP), idle 3.5 − 2.5 = 1.
  EXPECT_DOUBLE_EQ(r.devices(1).compute_s(), 1.5);
  EXPECT_DOUBLE_EQ(r.devices(1).communication_s(), 1.0);
  EXPECT_DOUBLE_EQ(r.devices(1).idle_s(), 1.0);
  // Bubble: both ranks are pipeline 0, whose phase ends with rank 1's backward at 3 s. Idle inside it:
  // rank 0 3 − 1 (forward) = 2, rank 1 3 − 1.5 (backward) − 0.5 (TP) − 0.5 (PP) = 0.5.
  EXPECT_DOUBLE_EQ(r.bubble_fraction(), (2.0 + 0.5) / (2 * 3.0));
  // MFU: model FLOPs of 16 sequences over 3.5 s × 2 devices × 1 TFLOPS (the cpu row's fp32 peak).
  EXPECT_NEAR(r.mfu(), model->IterationModelFlops(16, 64) / (3.5 * 2e12), 1e-12);
  EXPECT_FALSE(r.any_oom());

  const std::string trace = BuildChromeTrace(ctx, d);
  EXPECT_NE(trace.find("\"thread_name\""), std::string::npos);
  EXPECT_NE(trace.find("GPU 1 (cpu) p0 s1"), std::string::npos);
  // Iteration 1 starts after iteration 0's 3 s: rank 0's second forward is at ts = 3e6 µs.
  EXPECT_NE(trace.find("\"name\": \"forward mb 0\", \"cat\": \"forward\", \"pid\": 0, \"tid\": 0, \"ts\": 3000000.000"),
            std::string::npos)
      << trace;
  size_t slices = 0;
  for (size_t p = trace.find("\"ph\": \"X\""); p != std::string::npos; p = trace.find("\"ph\": \"X\"", p + 1)) ++slices;
  EXPECT_EQ(slices, 10u);
}

TEST(TraceTest, PerLayerProfileAveragesOverMicroBatchesAndBlocks) {
  auto model = models::LoadModel("llama-tiny");  // layers 0 embedding, 1-4 blocks, 5 head
  ASSERT_TRUE(model.ok());
  // Two steps of two micro-batches on a stage holding layers 0-2 (embedding and blocks 1, 2).
  std::vector<std::vector<TimedSlice>> steps(2);
  for (auto& st : steps) {
    for (int mb = 0; mb < 2; ++mb) {
      st.push_back({Category::kForward, mb, 0.0, 0.001, 0});
      st.push_back({Category::kForward, mb, 0.0, 0.010, 1});
      st.push_back({Category::kForward, mb, 0.0, 0.030, 2});
      st.push_back({Category::kBackward, mb, 0.0, 0.040, 2});
      st.push_back({Category::kBackward, mb, 0.0, 0.020, 1});
    }
    st.push_back({Category::kOptimizer, -1, 0.0, 0.005, 1});
    st.push_back({Category::kOptimizer, -1, 0.0, 0.005, 2});
    st.push_back({Category::kForward, 0, 0.0, 9.0, -1});  // not a layer slice
  }
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const auto layers = MeasureLayers(steps, {0.0, gib, 3 * gib}, 0, 3, 2);
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_DOUBLE_EQ(layers[1].forward_s, 0.010);  // 4 slices of 10 ms over 2 steps x 2 micro-batches
  EXPECT_DOUBLE_EQ(layers[2].backward_s, 0.040);
  EXPECT_DOUBLE_EQ(layers[2].optimizer_s, 0.005);  // per step
  const auto timings = ProfileLayers(*model, layers, 1, 4);
  ASSERT_EQ(timings.size(), 2u);  // embedding and transformer; no head on this stage
  EXPECT_EQ(timings[0].layer(), proto::LayerTiming::LAYER_KIND_EMBEDDING);
  EXPECT_DOUBLE_EQ(timings[0].forward_s(), 0.001);
  EXPECT_EQ(timings[1].layer(), proto::LayerTiming::LAYER_KIND_TRANSFORMER);
  EXPECT_DOUBLE_EQ(timings[1].forward_s(), 0.020);   // mean of 10 and 30 ms
  EXPECT_DOUBLE_EQ(timings[1].backward_s(), 0.030);  // mean of 20 and 40 ms
  EXPECT_DOUBLE_EQ(timings[1].activation_gib(), 2.0);
  EXPECT_EQ(timings[1].micro_batch_size(), 4u);
}

}  // namespace
}  // namespace hetsim::executor
