// Polishing a plan on the twin (sim/planning/polish.h): rebalancing, and a search that keeps only what the
// simulator says is faster (the moves it tries: moves_test.cc).
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
#include "tests/sim/planning/two_gpu_problem.h"
#include "sim/planning/refine.h"
#include "tests/sim/planning/fixtures.h"

namespace hetsim::planning {
namespace {

using fixtures::StageOf;

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
  // all-reduce of a tiny model over NVLink is short): the search ends with the two stages joined (stage-join)
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
