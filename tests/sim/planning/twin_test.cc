// `twin`, hetsim's own planner (sim/planning/twin.h, planners/twin/twin.h): its pool holds every other
// planner's pick, the check confirms them on the simulator, so the answer is never slower than any of them;
// its budgets stop it and say so.
#include "sim/planning/twin.h"

#include <gtest/gtest.h>

#include <string>

#include "models/plan.h"
#include "sim/simulator.h"
#include "tests/sim/planning/two_gpu_problem.h"

namespace hetsim::planning {
namespace {

using Problem = testing_refine::TwoGpuProblem;

std::string Notes(const planners::PlannerResult& r) {
  std::string s;
  for (const auto& n : r.stats.notes) s += n + "\n";
  return s;
}

// Two A100s, llama-tiny: every planner's own pick simulated beside the twin's answer; the twin's may be no
// slower than any (its pool holds each pick, and a pick is only left unsimulated when its lower bound, never
// above its simulated time, is no better than a plan already simulated).
TEST(Twin, NoPlannersPickSimulatesFaster) {
  const Problem p;
  auto twin = planners::CreatePlanner("twin", "polish_simulations: 4", "opts.yaml");
  ASSERT_TRUE(twin.ok()) << twin.status().message();
  RefineOutcome out;
  auto r = PlanOnTwin(**twin, p.get(), RefineOptions{}, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.planner(), "twin");
  const models::PlanContext ctx{p.cluster, p.model, p.training};
  auto mine = sim::SimulateIteration(r->plan, ctx, sim::SimOptions{});
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  const double twin_s = mine->report.iteration_time_s();
  const std::string notes = Notes(*r);
  EXPECT_NE(notes.find("pool: "), std::string::npos) << notes;
  EXPECT_NE(notes.find("twin check (every candidate of the pool)"), std::string::npos) << notes;
  uint32_t planners_compared = 0;
  for (const auto& name : planners::PlannerNames()) {
    if (name == "twin" || name == "exhaustive") continue;
    auto planner = planners::CreatePlanner(name);
    ASSERT_TRUE(planner.ok());
    auto pick = planners::RunPlanner(**planner, p.get());
    if (!pick.ok()) continue;
    auto s = sim::SimulateIteration(pick->plan, ctx, sim::SimOptions{});
    ASSERT_TRUE(s.ok()) << name << ": " << s.status().message();
    EXPECT_LE(twin_s, s->report.iteration_time_s() * (1 + 1e-9)) << name;
    ++planners_compared;
  }
  EXPECT_GE(planners_compared, 10u);
}

// A time limit too short for anything past the pool's first simulation: the rest is not reached, nothing is
// polished, and the notes say the clock stopped it.
TEST(Twin, TheTimeLimitStopsTheSearchAndSaysSo) {
  const Problem p;
  auto twin = planners::CreatePlanner("twin", "time_limit_s: 0.000001", "opts.yaml");
  ASSERT_TRUE(twin.ok()) << twin.status().message();
  RefineOutcome out;
  auto r = PlanOnTwin(**twin, p.get(), RefineOptions{}, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::string notes = Notes(*r);
  EXPECT_NE(notes.find("stopped by the time limit"), std::string::npos) << notes;
  uint32_t not_reached = 0;
  for (const auto& c : out.candidates) not_reached += c.not_reached ? 1 : 0;
  EXPECT_GT(not_reached + out.ruled_out, 0u);
  EXPECT_EQ(out.polish.simulated, 0u);
  const models::PlanContext ctx{p.cluster, p.model, p.training};
  EXPECT_TRUE(models::ValidatePlan(r->plan, ctx, "").ok());
}

// Options are checked like every planner's: the twin cannot start from itself, a planner name must exist.
TEST(Twin, RefusesItselfAndUnknownPlannersInItsPool) {
  const Problem p;
  auto self = planners::CreatePlanner("twin", "planners: [megatron, twin]", "opts.yaml");
  ASSERT_TRUE(self.ok());
  auto r = planners::RunPlanner(**self, p.get());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("twin cannot start from itself"), std::string::npos) << r.status().message();
  auto unknown = planners::CreatePlanner("twin", "planners: [megatorn]", "opts.yaml");
  ASSERT_TRUE(unknown.ok());
  auto u = planners::RunPlanner(**unknown, p.get());
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("did you mean 'megatron'"), std::string::npos) << u.status().message();
}

}  // namespace
}  // namespace hetsim::planning
