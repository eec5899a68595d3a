// Timelines of chosen devices (SimOptions::timeline_devices, DefaultTimelineDevices): a large plan's timeline
// keeps the slices of a few devices only, those slices are the ones a full recording gives the same devices,
// and the report does not change.
#include <gtest/gtest.h>

#include <string>

#include "models/spec_io.h"
#include "models/training.h"
#include "sim/simulator.h"
#include "tests/common/specs.h"

namespace hetsim::sim {
namespace {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

// DP `dp` × PP 2 × TP 2 of llama-tiny: pipeline p's stage s on devices 2·(s·dp + p) and 2·(s·dp + p) + 1.
std::string Plan(uint32_t dp) {
  std::string y = "name: sym\nschedule: 1f1b\npipelines:\n";
  for (uint32_t p = 0; p < dp; ++p) {
    y += "  - micro_batch_size: 2\n    num_micro_batches: 4\n    stages:\n";
    for (uint32_t s = 0; s < 2; ++s) {
      const uint32_t node = s * dp + p;
      y += "      - {devices: [" + std::to_string(2 * node) + ", " + std::to_string(2 * node + 1) +
           "], tp_degree: 2, layer_begin: " + std::to_string(3 * s) + ", layer_end: " + std::to_string(3 * s + 3) +
           "}\n";
    }
  }
  return y;
}

models::Cluster Nodes(uint32_t nodes, const std::string& gpu = "h100") {
  return ClusterFrom("name: c\nnodes:\n  - name: n\n    count: " + std::to_string(nodes) + "\n    gpus: {type: " + gpu +
                     ", count: 2}\n    nic: {kind: roce, bandwidth_gbps: 100, count: 1}\n");
}

SimResult Run(const models::Cluster& cluster, const proto::Plan& plan, std::vector<uint32_t> keep, bool fold) {
  auto model = models::LoadModel("llama-tiny");
  EXPECT_TRUE(model.ok());
  proto::Training t;
  uint32_t batch = 0;
  for (const auto& p : plan.pipelines()) batch += p.micro_batch_size() * p.num_micro_batches();
  t.set_global_batch_size(batch);
  t.set_seq_len(256);
  auto tr = models::ResolveTraining(t, *model, "t");
  EXPECT_TRUE(tr.ok());
  models::PlanContext ctx{cluster, *model, *tr};
  SimOptions opt;
  opt.record_timeline = true;
  opt.timeline_devices = std::move(keep);
  opt.fold = fold;
  auto r = SimulateIteration(plan, ctx, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(*r) : SimResult{};
}

int IndexOf(const SimResult& r, uint32_t device) {
  for (int i = 0; i < r.report.devices_size(); ++i) {
    if (r.report.devices(i).device() == device) return i;
  }
  return -1;
}

void ExpectKeepsOnly(bool fold) {
  // DP 3: 12 devices. Keep device 9 (pipeline 1, stage 1, TP rank 1: folded onto pipeline 0's stage 1 when
  // folding) and device 0 (a played representative).
  const auto cluster = Nodes(6);
  const auto plan = PlanFrom(Plan(3));
  const SimResult all = Run(cluster, plan, {}, fold);
  const SimResult some = Run(cluster, plan, {9, 0}, fold);
  EXPECT_EQ(some.played_devices, fold ? 2u : 12u);  // folded: one actor per stage
  EXPECT_FALSE(all.timeline_partial);
  EXPECT_TRUE(some.timeline_partial);
  EXPECT_EQ(all.report.iteration_time_s(), some.report.iteration_time_s());
  ASSERT_EQ(all.timeline.size(), 12u);
  ASSERT_EQ(some.timeline.size(), 12u);
  for (uint32_t d = 0; d < 12; ++d) {
    const int i = IndexOf(all, d);
    ASSERT_GE(i, 0);
    ASSERT_EQ(IndexOf(some, d), i);
    const auto& a = all.timeline[static_cast<size_t>(i)];
    const auto& b = some.timeline[static_cast<size_t>(i)];
    EXPECT_FALSE(a.empty()) << d;
    if (d == 9 || d == 0) {
      ASSERT_EQ(a.size(), b.size()) << d;
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_EQ(a[k].start_s, b[k].start_s);
        EXPECT_EQ(a[k].end_s, b[k].end_s);
        EXPECT_EQ(a[k].category, b[k].category);
      }
    } else {
      EXPECT_TRUE(b.empty()) << d;
    }
  }
  // The trace names only the kept devices' threads.
  const std::string json = ChromeTraceJson(some, cluster);
  EXPECT_NE(json.find("\"GPU 9 (h100) p1 s1\""), std::string::npos);
  EXPECT_NE(json.find("\"GPU 0 (h100) p0 s0\""), std::string::npos);
  EXPECT_EQ(json.find("\"GPU 1 (h100)"), std::string::npos);
  EXPECT_EQ(json.find("\"GPU 8 (h100)"), std::string::npos);
}

TEST(TimelineDevices, KeepsTheChosenDevicesSlicesExactlyWhenFolded) { ExpectKeepsOnly(true); }
TEST(TimelineDevices, KeepsTheChosenDevicesSlicesExactlyUnfolded) { ExpectKeepsOnly(false); }

TEST(TimelineDevices, DefaultShowsEveryDeviceOfSmallPlansAndOneRowPerStageOfLargeOnes) {
  // 12 devices: under any limit of 12 or more, every device (empty = all).
  const auto cluster = Nodes(6);
  const auto plan = PlanFrom(Plan(3));
  EXPECT_TRUE(DefaultTimelineDevices(plan, cluster, 12).empty());
  // Over the limit: the three pipelines have one shape, so pipeline 0's two stages, first device each:
  // devices 0 (stage 0 on node 0) and 6 (stage 1 on node 3).
  EXPECT_EQ(DefaultTimelineDevices(plan, cluster, 11), (std::vector<uint32_t>{0, 6}));
  EXPECT_EQ(StageTimelineDevices(plan), (std::vector<uint32_t>{0, 6, 2, 8, 4, 10}));
}

TEST(TimelineDevices, DefaultKeepsPipelinesOnOtherGpuTypes) {
  // Devices 0-5 are A100s (nodes a-0..a-2), 6-11 H100s (nodes h-0..h-2). In Plan(3) every pipeline has its
  // stage 0 on A100s and its stage 1 on H100s: one shape, so pipeline 0's rows 0 and 6.
  const auto cluster = ClusterFrom(
      "name: mixed\nnodes:\n  - {name: a, count: 3, gpus: {type: a100-80gb, count: 2}, nic: {kind: roce, "
      "bandwidth_gbps: 100}}\n  - {name: h, count: 3, gpus: {type: h100, count: 2}, nic: {kind: roce, "
      "bandwidth_gbps: 100}}\n");
  EXPECT_EQ(DefaultTimelineDevices(PlanFrom(Plan(3)), cluster, 6), (std::vector<uint32_t>{0, 6}));
  // Pipeline 0 on A100 then H100, pipeline 1 on H100s only, pipeline 2 on A100s only: three shapes, every
  // pipeline's stages appear (6 rows, the limit).
  const auto mixed = PlanFrom(
      "name: mixed\nschedule: 1f1b\npipelines:\n"
      "  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [0, 1], tp_degree: 2, layer_end: 3}, "
      "{devices: [6, 7], tp_degree: 2, layer_begin: 3, layer_end: 6}]}\n"
      "  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [8, 9], tp_degree: 2, layer_end: 3}, "
      "{devices: [10, 11], tp_degree: 2, layer_begin: 3, layer_end: 6}]}\n"
      "  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [2, 3], tp_degree: 2, layer_end: 3}, "
      "{devices: [4, 5], tp_degree: 2, layer_begin: 3, layer_end: 6}]}\n");
  EXPECT_EQ(DefaultTimelineDevices(mixed, cluster, 6), (std::vector<uint32_t>{0, 6, 8, 10, 2, 4}));
  // With room for four rows only, the third shape is left out.
  EXPECT_EQ(DefaultTimelineDevices(mixed, cluster, 4), (std::vector<uint32_t>{0, 6, 8, 10}));
}

}  // namespace
}  // namespace hetsim::sim
