// ValidatePlanRuns (calibration/validate_plan_runs.h): plan-file runs' report, asserted on directly.
#include "calibration/validate_plan_runs.h"
#include "models/intervals.h"

#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace hetsim::calibration {
namespace {

TEST(ValidatePlanRuns, SailorsFirstFourPlansSplitIntoHalvesAndTally) {
  // experiments/validation/sailor_gh200_opt350/runs.csv: each row names its plan; the first four (rows 0 and 2
  // development, 1 and 3 held out) measured time, gradient sync and peak memory, and every plan names the
  // megatron-deepspeed calibration. The tallies are the means of the runs' relative errors, recomputed here;
  // "dp=2" collects the fourth run alone (n2-d2), "pp=2" the third (n2-d1).
  PlanRunsOptions opt;
  opt.limit = 4;
  const std::string path = std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/sailor_gh200_opt350/runs.csv";
  ASSERT_TRUE(IsPlanRunsCsv(path));
  auto rep = ValidatePlanRuns(path, opt);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->runs.size(), 4u);
  EXPECT_EQ(rep->attempted, 4u);
  EXPECT_EQ(rep->failed, 0u);
  EXPECT_EQ(rep->development, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(rep->runs[2].plan, "plans/n2-d1.yaml");
  EXPECT_DOUBLE_EQ(rep->runs[2].measured_ms, 657.05);
  EXPECT_DOUBLE_EQ(rep->runs[3].measured_peak_gib, 11.6797);
  double dev = 0, all = 0, memory = 0;
  for (size_t i = 0; i < 4; ++i) {
    const PlanRun& r = rep->runs[i];
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NE(r.calibration.find("megatron-deepspeed"), std::string::npos) << r.calibration;
    const double rel = (r.simulated_ms - r.measured_ms) / r.measured_ms;
    all += std::abs(rel);
    if (i % 2 == 0) dev += std::abs(rel);
    memory += std::abs((r.simulated_peak_gib - r.measured_peak_gib) / r.measured_peak_gib);
  }
  EXPECT_EQ(rep->development_half.count(), 2);
  EXPECT_EQ(rep->held_out_half.count(), 2);
  EXPECT_NEAR(rep->development_half.mape(), dev / 2, 1e-12);
  EXPECT_NEAR(rep->all.mape(), all / 4, 1e-12);
  EXPECT_EQ(rep->peak_memory.count(), 4);
  EXPECT_NEAR(rep->peak_memory.mape(), memory / 4, 1e-12);
  EXPECT_EQ(rep->grad_sync.count(), 4);
  ASSERT_EQ(rep->by_configuration.count({"dp", 2.0}), 1u);
  EXPECT_EQ(rep->by_configuration.at({"dp", 2.0}).count(), 1);
  EXPECT_EQ(rep->by_configuration.at({"pp", 2.0}).count(), 1);
  EXPECT_EQ(rep->by_configuration.at({"dp", 1.0}).count(), 3);
  // The CSV: a header and one line per run.
  size_t lines = 0;
  for (char c : rep->csv) lines += c == '\n';
  EXPECT_EQ(lines, 5u);
}

TEST(ValidatePlanRuns, AMixtureOfExpertsIsClassedAsOneAndTakesTheMoeRunsInterval) {
  // One run of HybridEP's benchmark layer (a 128-expert model) and one of Sailor's dense plans: the per-run CSV's
  // last column says moe 1 and 0, and the MoE run's interval comes from the bundled MoE runs, which are all too
  // slow in reality (measured / simulated 1.07 .. 2.59), so it lies above the simulated time.
  const std::string dir = ::testing::TempDir();
  const std::string src = std::string(HETSIM_SOURCE_DIR);
  std::ofstream(dir + "moe-runs.csv") << "plan,iteration_ms\n"
                                      << src << "/experiments/moe/hybridep-h100/plan-ep16.yaml,1000\n"
                                      << src << "/experiments/validation/sailor_gh200_opt350/plans/n2-d1.yaml,657\n";
  auto rep = ValidatePlanRuns(dir + "moe-runs.csv", {});
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->runs.size(), 2u);
  ASSERT_TRUE(rep->runs[0].ok) << rep->runs[0].error;
  EXPECT_TRUE(rep->runs[0].cls.moe);
  EXPECT_FALSE(rep->runs[1].cls.moe);
  const std::string& csv = rep->csv;
  const size_t header_end = csv.find('\n');
  EXPECT_EQ(csv.substr(header_end - 12, 12), "measured,moe");
  const size_t first_end = csv.find('\n', header_end + 1), second_end = csv.find('\n', first_end + 1);
  EXPECT_EQ(csv.substr(first_end - 2, 2), ",1");
  EXPECT_EQ(csv.substr(second_end - 2, 2), ",0");
  const models::PredictionInterval interval = models::IntervalFor(rep->runs[0].cls);
  EXPECT_EQ(interval.runs, 10u);
  EXPECT_GT(interval.lo, 1.0);
}

TEST(ValidatePlanRuns, AMissingPlanIsAFailureOfItsRowAndBadNumbersAnError) {
  const std::string dir = testing::TempDir();
  std::ofstream(dir + "missing.csv") << "plan,iteration_ms\nno-such-plan.yaml,100\n";
  auto rep = ValidatePlanRuns(dir + "missing.csv", {});
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  EXPECT_EQ(rep->failed, 1u);
  ASSERT_EQ(rep->failures.size(), 1u);
  EXPECT_NE(rep->failures[0].find("missing.csv:2: not simulated"), std::string::npos) << rep->failures[0];
  EXPECT_EQ(rep->all.count(), 0);

  std::ofstream(dir + "bad.csv") << "plan,iteration_ms\np.yaml,-3\n";
  auto bad = ValidatePlanRuns(dir + "bad.csv", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.csv:2: iteration_ms: '-3' is not a positive number"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace hetsim::calibration
