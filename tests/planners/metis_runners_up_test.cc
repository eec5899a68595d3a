// The `metis` planner's runners-up (PlanningProblem::alternatives, for the simulator-checked choice): the
// pick does not change when they are asked for; they are distinct, valid plans in non-decreasing eq. 1 cost
// that follow the pick; and they are the true next-best plans of Metis's search — the top of the ranking
// of every plan the search costs with the cut turned off, and never behind a plan that Algorithm 1 gives
// for any (assignment, B) of a cluster small enough to enumerate here.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "models/plan.h"
#include "planners/metis/internal.h"
#include "planners/search.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners::metis {
namespace {

using planners::testing::Fixture;

Fixture Small() {
  return Fixture(planners::testing::BundledCluster("metis-uniform-t4-v100-4"),
                 planners::testing::BundledModel("gpt3-350m"), "{global_batch_size: 16, seq_len: 1024, dtype: fp16}");
}

Fixture Sixteen() {
  return Fixture(planners::testing::BundledCluster("metis-uniform-t4-v100-16"),
                 planners::testing::BundledModel("gpt3-6.7b"), "{global_batch_size: 128, seq_len: 1024, dtype: fp16}");
}

Result<SearchResult> SearchWith(PlanningProblem problem, uint32_t alternatives, const Knobs& knobs = Knobs{}) {
  problem.alternatives = alternatives;
  SearchStats stats;
  return Search(problem, knobs, stats);
}

// The pick and its runners-up as one ranking: (serialized plan, cost).
std::vector<std::pair<std::string, double>> Ranking(const SearchResult& r) {
  std::vector<std::pair<std::string, double>> out = {{r.plan->SerializeAsString(), r.cost_s}};
  for (const RankedPlan& alt : r.alternatives) out.emplace_back(alt.plan.SerializeAsString(), alt.cost_s);
  return out;
}

// What every list of runners-up must satisfy, whatever the search found.
void ExpectWellFormed(const Fixture& f, const SearchResult& r, uint32_t asked) {
  const PlanningProblem problem = f.problem();
  EXPECT_LE(r.alternatives.size(), asked);
  std::set<std::string> seen = {r.plan->SerializeAsString()};
  double previous = r.cost_s;
  for (size_t i = 0; i < r.alternatives.size(); ++i) {
    const RankedPlan& alt = r.alternatives[i];
    EXPECT_TRUE(seen.insert(alt.plan.SerializeAsString()).second) << "runner-up " << i + 1 << " repeats a plan";
    EXPECT_GE(alt.cost_s, previous) << "runner-up " << i + 1 << " is cheaper than the plan before it";
    previous = alt.cost_s;
    const Status valid = models::ValidatePlan(alt.plan, f.context(), "runner-up " + std::to_string(i + 1));
    EXPECT_TRUE(valid.ok()) << valid.message();
    // Its cost is eq. 1 of the plan itself, recomputed from the plan alone.
    EXPECT_NEAR(alt.cost_s, PlanCost(problem, Knobs{}, alt.plan), 1e-9 * alt.cost_s) << "runner-up " << i + 1;
  }
}

TEST(MetisRunnersUp, PickUnchangedAndRunnersUpDistinctValidAndSorted) {
  for (const Fixture& f : {Small(), Sixteen()}) {
    const PlanningProblem problem = f.problem();
    auto alone = SearchWith(problem, 0);
    ASSERT_TRUE(alone.ok()) << alone.status().message();
    EXPECT_TRUE(alone->alternatives.empty());
    for (uint32_t asked : {1u, 3u, 7u}) {
      auto with = SearchWith(problem, asked);
      ASSERT_TRUE(with.ok()) << with.status().message();
      EXPECT_EQ(with->plan->SerializeAsString(), alone->plan->SerializeAsString()) << asked << " asked";
      EXPECT_EQ(with->cost_s, alone->cost_s);
      EXPECT_EQ(with->alternatives.size(), asked) << "both searches cost thousands of plans";
      ExpectWellFormed(f, *with, asked);
    }
  }
}

// Fewer runners-up are a prefix of more, and two threads give the same list as one.
TEST(MetisRunnersUp, PrefixOfALongerListAndIndependentOfThreads) {
  const Fixture f = Sixteen();
  auto three = SearchWith(f.problem(), 3);
  auto ten = SearchWith(f.problem(), 10);
  Knobs two;
  two.threads = 2;
  auto threaded = SearchWith(f.problem(), 10, two);
  ASSERT_TRUE(three.ok() && ten.ok() && threaded.ok());
  const auto short_list = Ranking(*three), long_list = Ranking(*ten);
  ASSERT_EQ(short_list.size(), 4u);
  ASSERT_EQ(long_list.size(), 11u);
  EXPECT_TRUE(std::equal(short_list.begin(), short_list.end(), long_list.begin()));
  EXPECT_EQ(Ranking(*threaded), long_list);
}

// The cut compares against the keep-th best plan, so the runners-up equal the top of the search without the
// cut (every (assignment, B) pair's DFS run to the end, every plan it costs ranked).
TEST(MetisRunnersUp, EqualTheTopOfTheSearchWithoutTheCut) {
  for (const Fixture& f : {Small(), Sixteen()}) {
    Knobs no_bound;
    no_bound.use_bound = false;
    auto bounded = SearchWith(f.problem(), 12);
    auto unbounded = SearchWith(f.problem(), 12, no_bound);
    ASSERT_TRUE(bounded.ok() && unbounded.ok());
    EXPECT_EQ(Ranking(*bounded), Ranking(*unbounded));
  }
}

// On 4 GPUs (§4.1's full space) every (stage-device assignment, B) pair is enumerated here and planned with
// Algorithm 1 alone (PlanAssignment: the best plan of the pair's DFS). The pick is the best of them; every
// pair's best plan that costs less than the last runner-up is in the list; and the list ranks the whole
// search (every plan any pair's DFS costs, with the cut off) in the same order.
TEST(MetisRunnersUp, NeverBehindAnyAssignmentsBestPlanOnAnEnumeratedCluster) {
  const Fixture f = Small();
  const PlanningProblem problem = f.problem();
  const Knobs knobs;
  const auto classes = NodeClasses(*f.cluster);
  const uint32_t N = f.cluster->num_devices(), G = f.training->global_batch_size();
  std::map<std::string, double> pair_best;  // every pair's best plan that validates
  uint32_t pairs = 0;
  for (uint32_t S = 1; S <= N; ++S) {
    for (const auto& sizes : StageSizeMultisets(N, S, knobs.var, true)) {
      for (const auto& order : StageSizeOrders(sizes, knobs.max_permutation_length)) {
        ForEachAssignment(*f.cluster, classes, order, true, {}, [&](const Assignment& a) {
          for (uint32_t B : Divisors(G)) {
            ++pairs;
            auto found = PlanAssignment(problem, knobs, a, B);
            if (!found || !models::ValidatePlan(found->first, f.context(), "pair").ok()) continue;
            pair_best.emplace(found->first.SerializeAsString(), found->second);
          }
          return true;
        });
      }
    }
  }
  ASSERT_GT(pair_best.size(), 20u) << pairs << " pairs";
  std::vector<std::pair<double, std::string>> by_cost;
  for (const auto& [plan, cost] : pair_best) by_cost.emplace_back(cost, plan);
  std::sort(by_cost.begin(), by_cost.end());

  auto r = SearchWith(problem, 9);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->alternatives.size(), 9u);
  ExpectWellFormed(f, *r, 9);
  EXPECT_DOUBLE_EQ(r->cost_s, by_cost.front().first);
  const auto ranking = Ranking(*r);
  std::set<std::string> listed;
  for (const auto& [plan, cost] : ranking) listed.insert(plan);
  const double last = ranking.back().second;
  size_t cheaper = 0;
  for (const auto& [cost, plan] : by_cost) {
    if (cost >= last) break;
    ++cheaper;
    EXPECT_TRUE(listed.count(plan)) << "a pair's best plan of cost " << cost << " is missing (last runner-up "
                                    << last << ")";
  }
  EXPECT_GT(cheaper, 2u);

  // Brute force over every plan the DFS costs: all of them kept (far more asked than exist), the cut off.
  Knobs no_bound;
  no_bound.use_bound = false;
  auto all = SearchWith(problem, 1000000, no_bound);
  ASSERT_TRUE(all.ok());
  const auto full = Ranking(*all);
  ASSERT_GT(full.size(), ranking.size());
  ASSERT_LT(all->alternatives.size(), 1000000u);
  EXPECT_TRUE(std::equal(ranking.begin(), ranking.end(), full.begin()));
  for (size_t i = 1; i < full.size(); ++i) EXPECT_LE(full[i - 1].second, full[i].second);
}

// Through the registry: RunPlanner keeps them (each validates), and the pick's cost is eq. 1's.
TEST(MetisRunnersUp, ThroughTheRegistry) {
  const Fixture f = Small();
  PlanningProblem problem = f.problem();
  problem.alternatives = 3;
  auto r = planners::testing::Run("metis", problem);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->alternatives.size(), 3u);
  EXPECT_NEAR(r->cost_s, PlanCost(problem, Knobs{}, r->plan), 1e-9 * r->cost_s);
  for (const auto& note : r->stats.notes) EXPECT_EQ(note.find("dropped runner-up"), std::string::npos) << note;
  problem.alternatives = 0;
  auto alone = planners::testing::Run("metis", problem);
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(alone->alternatives.empty());
  EXPECT_EQ(alone->plan.SerializeAsString(), r->plan.SerializeAsString());
}

}  // namespace
}  // namespace hetsim::planners::metis
