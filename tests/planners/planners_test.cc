// The planner framework (planners/planner.h): the registry, options read from YAML with the standard errors,
// the plan file, and the acceptance sweep — every baseline on every bundled cluster for a representative
// set of models either returns a plan that validates (memory included) or says why none fits.
#include "planners/planner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <set>

#include "models/describe.h"
#include "models/plan.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::Fixture;

using testing::kBaselines;

TEST(Registry, ListsEveryBaselineAndTheExactReference) {
  const auto names = PlannerNames();
  for (const auto& n : kBaselines) EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_NE(std::find(names.begin(), names.end(), "exhaustive"), names.end());
  for (const auto& p : Planners()) EXPECT_FALSE(p.summary.empty()) << p.name;
}

TEST(Registry, UnknownPlannerSuggestsTheNearestName) {
  auto p = CreatePlanner("megatorn");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Status::Code::kNotFound);
  EXPECT_NE(p.status().message().find("did you mean 'megatron'"), std::string::npos) << p.status().message();
}

TEST(Registry, SchemesHandOutTheirPlannersAndUnregisteredOnesSayWhereTheyRun) {
  // A scheme's factory receives what follows "scheme:"; here it hands out megatron for reference "m".
  std::string asked;
  RegisterPlannerScheme("test", [&asked](const std::string& ref) -> Result<std::unique_ptr<Planner>> {
    asked = ref;
    return CreatePlanner("megatron");
  });
  auto p = CreatePlanner("test:m:x");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(asked, "m:x");
  EXPECT_EQ((*p)->name(), "megatron");
  RegisterPlannerScheme("test", nullptr);
  EXPECT_EQ(CreatePlanner("test:m").status().code(), Status::Code::kNotFound);
  // Without the Python package in the process, a Python planner's name says where it runs.
  const auto py = CreatePlanner("python:my_planners:Greedy");
  ASSERT_FALSE(py.ok());
  EXPECT_NE(py.status().message().find("Python package"), std::string::npos) << py.status().message();
}

TEST(Options, UnknownKeysWrongTypesAndRangesAreErrorsWithTheirPlace) {
  auto misspelt = CreatePlanner("megatron", "tp_degree: [2]\n", "opts.yaml");
  ASSERT_FALSE(misspelt.ok());
  EXPECT_NE(misspelt.status().message().find("opts.yaml:1:1: tp_degree: unknown key 'tp_degree'; did you mean "
                                             "'tp_degrees'?"),
            std::string::npos)
      << misspelt.status().message();
  auto range = CreatePlanner("deepspeed", "zero_stages: [1, 4]\n", "ds.yaml");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("ds.yaml:1:"), std::string::npos) << range.status().message();
  EXPECT_NE(range.status().message().find("zero_stages[1]"), std::string::npos) << range.status().message();
  auto type = CreatePlanner("exhaustive", "allow_unused_devices: maybe\n", "ex.yaml");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find("expected true or false"), std::string::npos) << type.status().message();
  // Valid options are kept.
  auto ok = CreatePlanner("galvatron", "{tp_degrees: [1, 2], max_micro_batch_size: 4}", "g.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_NE(models::MessageToYaml((*ok)->options()).find("max_micro_batch_size: 4"), std::string::npos);
}

TEST(Framework, RefusesADtypeTheGpusCannotTrainIn) {
  // P100/V100/T4 have no BF16.
  const Fixture f(testing::BundledCluster("metis-uniform-p100-v100-4"), testing::BundledModel("gpt3-1.3b"), "{}");
  auto r = testing::Run("megatron", f.problem());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("dtype: fp16"), std::string::npos) << r.status().message();
}

TEST(Framework, PlanFileCarriesItsReferencesAndValidates) {
  const Fixture f(testing::BundledCluster("hexiscale-case-study"), testing::BundledModel("llama2-7b"),
                  "{global_batch_size: 32, seq_len: 1024, recompute: full}");
  auto r = testing::Run("galvatron", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::string text =
      PlanFileYaml(r->plan, "hexiscale-case-study", "llama2-7b", *f.training, "plan by a test\nsecond line");
  EXPECT_EQ(text.rfind("# plan by a test\n# second line\n", 0), 0u) << text.substr(0, 80);
  const auto path = std::filesystem::temp_directory_path() / "hetsim-planners-test-plan.yaml";
  ASSERT_TRUE(models::WriteFileAtomically(path.string(), text).ok());
  auto plan = models::LoadPlan(path.string());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->planner(), "galvatron");
  EXPECT_EQ(plan->cluster(), "hexiscale-case-study");
  EXPECT_EQ(plan->model(), "llama2-7b");
  auto cluster = models::LoadCluster(plan->cluster());
  auto model = models::LoadModel(plan->model());
  ASSERT_TRUE(cluster.ok() && model.ok());
  auto training = models::ResolveTraining(plan->training(), *model, "plan");
  ASSERT_TRUE(training.ok()) << training.status().message();
  const Status valid = models::ValidatePlan(*plan, {*cluster, *model, *training}, path.string());
  EXPECT_TRUE(valid.ok()) << valid.message();
  std::filesystem::remove(path);
}

// The dtype a cluster can train in: bf16 when every GPU has it, else fp16, else fp32 (CPU workers).
std::string DtypeFor(const models::Cluster& c) {
  bool bf16 = true, fp16 = true;
  for (uint32_t d = 0; d < c.num_devices(); ++d) {
    bf16 &= c.device(d).gpu->peak_bf16_tflops > 0;
    fp16 &= c.device(d).gpu->peak_fp16_tflops > 0;
  }
  return bf16 ? "bf16" : fp16 ? "fp16" : "fp32";
}

// Every baseline on every bundled cluster × {GPT-3 1.3B, Llama-2 7B, Llama-2 70B} (global batch 64 of 2048
// tokens, full recomputation for the 70B): a plan that validates, or kInfeasible naming the closest
// attempts / the constraints that ruled everything out. The 16,384-GPU cluster runs megatron only.
// Under the sanitizers (10-20x slower; the played estimate of every candidate dominates) the sweep keeps every
// baseline on every third cluster of up to 128 GPUs with the smallest and the largest model: the same code
// paths (plans, memory knobs, infeasibility messages); the release pass runs the whole sweep.
TEST(Acceptance, EveryBaselineOnEveryBundledClusterPlansOrSaysWhy) {
#ifdef HETSIM_SANITIZED
  constexpr bool kTrimmed = true;
#else
  constexpr bool kTrimmed = false;
#endif
  std::map<std::string, int> planned, infeasible;
  int pairs_with_a_plan = 0, pairs = 0;
  int index = 0;
  for (const auto& name : models::BundledNames(models::SpecKind::kCluster)) {
    const models::Cluster cluster = testing::BundledCluster(name);
    const bool huge = cluster.num_devices() > 4096;
    if (kTrimmed && (cluster.num_devices() > 128 || index++ % 3 != 0)) continue;
    for (const char* model_name : {"gpt3-1.3b", "llama2-7b", "llama2-70b"}) {
      if (kTrimmed && std::string(model_name) == "llama2-7b") continue;
      const std::string training = std::string("{global_batch_size: 64, seq_len: 2048, dtype: ") + DtypeFor(cluster) +
                                   (std::string(model_name) == "llama2-70b" ? ", recompute: full}" : "}");
      const Fixture f(cluster, testing::BundledModel(model_name), training);
      bool any = false;
      ++pairs;
      for (const auto& planner : kBaselines) {
        if (huge && planner != "megatron") continue;
        auto r = testing::Run(planner, f.problem());
        const std::string where = planner + " on " + name + " for " + model_name;
        if (r.ok()) {
          const Status valid = models::ValidatePlan(r->plan, f.context(), where);
          EXPECT_TRUE(valid.ok()) << valid.message();
          EXPECT_EQ(r->plan.planner(), planner);
          EXPECT_GT(r->estimate.iteration_s, 0) << where;
          EXPECT_FALSE(r->estimate.oom) << where;
          ++planned[planner];
          any = true;
          continue;
        }
        ++infeasible[planner];
        EXPECT_EQ(r.status().code(), Status::Code::kInfeasible) << where << ": " << r.status().message();
        const std::string& msg = r.status().message();
        const bool memory = msg.find("closest attempts") != std::string::npos && msg.find("GiB") != std::string::npos;
        const bool space = msg.find("holds no valid plan") != std::string::npos && msg.find("rejected") != std::string::npos;
        EXPECT_TRUE(memory || space) << where << ": " << msg;
        EXPECT_NE(msg.find(name), std::string::npos) << where << ": " << msg;
      }
      pairs_with_a_plan += any;
    }
  }
  for (const auto& p : kBaselines) {
    EXPECT_GT(planned[p], 0) << p;
    std::cout << "[ info     ] " << p << ": " << planned[p] << " planned, " << infeasible[p] << " infeasible\n";
  }
  // Llama-2 70B does not fit on the small clusters at all; everything else has some baseline plan.
  EXPECT_GT(pairs_with_a_plan, pairs * 2 / 3);
}


// ---- runners-up (PlanningProblem::alternatives, RankedPlans) ----------------------------------------

proto::Plan Tagged(const std::string& name) {
  proto::Plan p;
  p.set_name(name);
  return p;
}

TEST(RankedPlans, KeepsTheBestDistinctPlansInCostOrderTiesFirstComeFirst) {
  RankedPlans kept(2);  // the pick and two runners-up
  EXPECT_TRUE(std::isinf(kept.bar()));
  EXPECT_TRUE(kept.Offer(5, Tagged("a")));
  EXPECT_TRUE(kept.Offer(3, Tagged("b")));
  EXPECT_TRUE(kept.Offer(4, Tagged("c")));
  EXPECT_EQ(kept.bar(), 5);                      // full: a plan must beat the worst kept
  EXPECT_FALSE(kept.Offer(3, Tagged("b")));      // the same plan again
  EXPECT_FALSE(kept.Offer(5, Tagged("d")));      // no better than the worst kept
  EXPECT_TRUE(kept.Offer(3, Tagged("e")));       // ties the best: kept after it
  EXPECT_EQ(kept.bar(), 4);
  PlannerResult r;
  kept.MoveInto(&r);
  EXPECT_EQ(r.plan.name(), "b");
  EXPECT_EQ(r.cost_s, 3);
  ASSERT_EQ(r.alternatives.size(), 2u);
  EXPECT_EQ(r.alternatives[0].plan.name(), "e");
  EXPECT_EQ(r.alternatives[1].plan.name(), "c");
  EXPECT_EQ(r.alternatives[1].cost_s, 4);
}

TEST(RankedPlans, ZeroAlternativesKeepsOnlyThePick) {
  RankedPlans kept(0);
  EXPECT_TRUE(kept.Offer(2, Tagged("a")));
  EXPECT_EQ(kept.bar(), 2);
  EXPECT_FALSE(kept.Offer(2, Tagged("b")));
  EXPECT_TRUE(kept.Offer(1, Tagged("c")));
  PlannerResult r;
  kept.MoveInto(&r);
  EXPECT_EQ(r.plan.name(), "c");
  EXPECT_TRUE(r.alternatives.empty());
}

// Asking for runners-up changes neither the pick nor its cost; the runners-up are valid, distinct, no cheaper
// than the pick and in cost order (for the baselines' shared search and the exact reference alike).
TEST(Framework, RunnersUpAreValidDistinctAndNoBetterThanThePick) {
  const Fixture f(testing::BundledCluster("hexiscale-case-study"), testing::BundledModel("llama-tiny"),
                  "{global_batch_size: 16, seq_len: 128}");
  for (const std::string name : {"megatron", "galvatron", "exhaustive"}) {
    auto alone = testing::Run(name, f.problem());
    ASSERT_TRUE(alone.ok()) << name << ": " << alone.status().message();
    EXPECT_TRUE(alone->alternatives.empty()) << name;
    PlanningProblem asked = f.problem();
    asked.alternatives = 3;
    auto with = testing::Run(name, asked);
    ASSERT_TRUE(with.ok()) << name << ": " << with.status().message();
    if (name != "exhaustive") {  // exhaustive re-ranks its pool by the played estimate when asked for more
      EXPECT_EQ(with->plan.SerializeAsString(), alone->plan.SerializeAsString()) << name;
      EXPECT_EQ(with->cost_s, alone->cost_s) << name;
    }
    ASSERT_EQ(with->alternatives.size(), 3u) << name;
    std::set<std::string> distinct{with->plan.SerializeAsString()};
    double previous = with->cost_s;
    for (const auto& alt : with->alternatives) {
      EXPECT_TRUE(distinct.insert(alt.plan.SerializeAsString()).second) << name << ": a repeated runner-up";
      EXPECT_GE(alt.cost_s, previous) << name;
      previous = alt.cost_s;
      EXPECT_EQ(alt.plan.planner(), name);
      const Status valid = models::ValidatePlan(alt.plan, f.context(), "runner-up");
      EXPECT_TRUE(valid.ok()) << name << ": " << valid.message();
    }
  }
}

}  // namespace
}  // namespace hetsim::planners
