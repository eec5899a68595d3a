// ValidateRuns (calibration/validate_runs.h): the report the numbers in docs come from, asserted on directly.
#include "calibration/validate_runs.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace hetsim::calibration {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ValidateRuns, TableOnesTenRunsSplitIntoHalvesAndTally) {
  // Megatron-LM SC'21 Table 1: ten rows, alternating halves (rows 0, 2, ... development), every one under
  // `default` (stack megatron-lm) with blocking backward TP all-reduces (its tp_backward column). Each tally is
  // the mean of its runs' relative errors, recomputed here from the runs; the CSV has a header and a line per
  // run; "tp=8" collects the TP-8 rows.
  ValidationOptions opt;
  auto rep = ValidateRuns(std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/megatron_sc21_table1.csv", opt);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->runs.size(), 10u);
  EXPECT_EQ(rep->failed, 0u);
  EXPECT_EQ(rep->calibrations, (std::map<std::string, int>{{"default", 10}}));
  EXPECT_EQ(rep->development_half.count(), 5);
  EXPECT_EQ(rep->held_out_half.count(), 5);
  double dev_abs = 0, all_signed = 0;
  int tp8 = 0;
  for (size_t i = 0; i < rep->runs.size(); ++i) {
    const MeasuredRun& r = rep->runs[i];
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(rep->development[i], i % 2 == 0);
    EXPECT_TRUE(r.tp_backward_blocking);
    EXPECT_EQ(r.calibration, "default");
    EXPECT_GT(r.simulated_ms, 0);
    if (i % 2 == 0) dev_abs += std::fabs(r.rel());
    all_signed += r.rel();
    tp8 += r.tp == 8;
  }
  EXPECT_NEAR(rep->development_half.mape(), dev_abs / 5, 1e-12);
  EXPECT_NEAR(rep->all.bias(), all_signed / 10, 1e-12);
  ASSERT_TRUE(rep->by_configuration.count("tp=8"));
  EXPECT_EQ(rep->by_configuration.at("tp=8").count(), tp8);
  size_t lines = 0;
  for (char c : rep->csv) lines += c == '\n';
  EXPECT_EQ(lines, 11u);
}

TEST(ValidateRuns, TheStackPicksCalibrationAndBackwardTpUnlessTheRowSays) {
  // One small TP-2 run three times: Megatron-LM's stack (async backward TP all-reduces), Megatron-DeepSpeed's
  // (blocking: it turns the asynchronous all-reduce off), and Megatron-LM's with tp_backward blocking. The
  // Megatron-LM run that blocks is slower than the one that does not (the same calibration, more exposed TP).
  const std::string header = "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,iteration_ms,stack,"
                             "tp_backward\n";
  const std::string run = "4,16,4,1024,16,24,1024,2,2,1,300.0,";
  const std::string path = WriteTemp("vr-stacks.csv", header + run + "megatron-lm,\n" + run + "megatron-deepspeed,\n" +
                                                          run + "megatron-lm,blocking\n");
  auto rep = ValidateRuns(path, ValidationOptions{});
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_EQ(rep->runs.size(), 3u);
  EXPECT_FALSE(rep->runs[0].tp_backward_blocking);
  EXPECT_TRUE(rep->runs[1].tp_backward_blocking);
  EXPECT_TRUE(rep->runs[2].tp_backward_blocking);
  EXPECT_EQ(rep->runs[0].calibration, "default");
  EXPECT_EQ(rep->runs[1].calibration, "megatron-deepspeed");
  EXPECT_LT(rep->runs[0].simulated_ms, rep->runs[2].simulated_ms);
  EXPECT_EQ(rep->calibrations, (std::map<std::string, int>{{"default", 2}, {"megatron-deepspeed", 1}}));
  // --limit: the first run only.
  ValidationOptions one;
  one.limit = 1;
  auto first = ValidateRuns(path, one);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->runs.size(), 1u);
  EXPECT_EQ(first->runs[0].simulated_ms, rep->runs[0].simulated_ms);
}

TEST(ValidateRuns, ABadRowNamesItsFileLineAndColumn) {
  const std::string path = WriteTemp("vr-bad.csv", "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,"
                                                   "iteration_ms\n4,16,4,1024,16,24,1024,2,2,1,fast\n");
  auto rep = ValidateRuns(path, ValidationOptions{});
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.status().message().find(path + ":2: iteration_ms: 'fast' is not a number"), std::string::npos)
      << rep.status().message();
}

}  // namespace
}  // namespace hetsim::calibration
