#include "models/intervals.h"

#include <gtest/gtest.h>

namespace hetsim::models {
namespace {

RunClass Class(const std::string& family, uint32_t pp, uint32_t gpus) {
  RunClass c;
  c.family = family;
  c.pp = pp;
  c.gpus = gpus;
  return c;
}

std::vector<Residual> Table() {
  std::vector<Residual> t;
  // Ten A100 runs at PP 1 on 8 GPUs, measured 0.91 .. 1.00 of simulated; three A100 runs at PP 4 (1.20 each);
  // ten Hopper runs at 1.10.
  for (int i = 0; i < 10; ++i) t.push_back({"a", Class("a100", 1, 8), 0.91 + 0.01 * i});
  for (int i = 0; i < 3; ++i) t.push_back({"b", Class("a100", 4, 8), 1.20});
  for (int i = 0; i < 10; ++i) t.push_back({"h", Class("hopper", 1, 8), 1.10});
  return t;
}

// `t` with n runs of class `cls` from set `set`, their ratios first, first + step, ...
std::vector<Residual> WithRuns(std::vector<Residual> t, const std::string& set, const RunClass& cls, int n,
                               double first, double step) {
  for (int i = 0; i < n; ++i) t.push_back({set, cls, first + step * i});
  return t;
}

TEST(Intervals, QuantilesOfTheMostSpecificClassWithEnoughRuns) {
  // Ten runs of the class: n + 1 = 11 slots; the 80% interval takes ranks floor(0.1 · 11) = 1 and
  // ceil(0.9 · 11) = 10 of the sorted ratios: 0.91 and 1.00.
  const PredictionInterval i = IntervalFrom(Table(), Class("a100", 1, 8), 0.8);
  EXPECT_EQ(i.runs, 10u);
  EXPECT_DOUBLE_EQ(i.lo, 0.91);
  EXPECT_NEAR(i.hi, 1.00, 1e-12);
  EXPECT_EQ(i.sets, "a");
  EXPECT_EQ(i.like, "a100, 16-bit, no ZeRO-3, PP 1, 1-8 GPUs");
}

TEST(Intervals, TooFewRunsBackOffToACoarserClass) {
  // Three A100 runs at PP 4 are fewer than kMinIntervalRuns: the class drops the GPU count, then the pipeline
  // depth, ZeRO-3 and dtype stay equal, so the 13 A100 runs of the family-and-dtype levels are used: ranks
  // floor(0.1 · 14) = 1 (0.91) and ceil(0.9 · 14) = 13 (1.20).
  const PredictionInterval i = IntervalFrom(Table(), Class("a100", 4, 8), 0.8);
  EXPECT_EQ(i.runs, 13u);
  EXPECT_DOUBLE_EQ(i.lo, 0.91);
  EXPECT_DOUBLE_EQ(i.hi, 1.20);
  EXPECT_EQ(i.like, "a100, 16-bit, no ZeRO-3");
  EXPECT_EQ(i.sets, "a, b");
}

TEST(Intervals, AnUnknownFamilyFallsBackToItsDtype) {
  const PredictionInterval i = IntervalFrom(Table(), Class("other", 1, 8), 0.8);
  // No `other` runs: the dtype level (all 23 runs are 16-bit).
  EXPECT_EQ(i.runs, 23u);
  EXPECT_EQ(i.like, "16-bit");
  EXPECT_TRUE(i.caveat.empty());
  const std::string line = DescribeInterval(i, 10.0);
  // 23 runs, n + 1 = 24 slots: ranks floor(0.1 · 24) = 2 (0.92) and ceil(0.9 · 24) = 22 (1.20) of 10 s.
  EXPECT_NE(line.find("80% interval 9.2-12 s (23 measured runs like it: 16-bit"), std::string::npos) << line;
}

// A run on a type with no measured basis draws only on runs on such types (generic values, as far off as they
// were): none in the table, no interval; with ten of them at 1.30 .. 1.48 (every other 0.02), those alone: ranks 1
// and 10 of 11 slots, 1.30 and 1.48, where the measured runs' would have said 0.92-1.20.
TEST(Intervals, ATypeWithoutMeasuredBasisDrawsOnRunsOfSuchTypes) {
  RunClass c = Class("other", 1, 8);
  c.measured = false;
  const PredictionInterval none = IntervalFrom(Table(), c, 0.8);
  EXPECT_EQ(none.runs, 0u);
  EXPECT_NE(none.caveat.find("no run on such a type is bundled"), std::string::npos) << none.caveat;
  const std::vector<Residual> t = WithRuns(Table(), "g", c, 10, 1.30, 0.02);
  const PredictionInterval i = IntervalFrom(t, c, 0.8);
  EXPECT_EQ(i.runs, 10u);
  EXPECT_DOUBLE_EQ(i.lo, 1.30);
  EXPECT_NEAR(i.hi, 1.48, 1e-12);
  EXPECT_EQ(i.sets, "g");
  EXPECT_NE(i.caveat.find("no measured basis"), std::string::npos);
  // A measured run of the same class keeps the measured runs' interval.
  EXPECT_EQ(IntervalFrom(t, Class("other", 1, 8), 0.8).runs, 23u);
}

// A mixture of experts draws on MoE runs only, and a dense run never does: with no MoE run in the table, no
// interval (the caveat says why); with twelve Hopper MoE runs at 1.05 .. 1.60 (every 0.05), those alone: n + 1 = 13
// slots, ranks floor(0.1 · 13) = 1 (1.05) and ceil(0.9 · 13) = 12 (1.60), where the Hopper dense runs say 1.10-1.10;
// the dense Hopper run's interval is unchanged by them.
TEST(Intervals, AMixtureOfExpertsDrawsOnMoeRunsOnly) {
  RunClass c = Class("hopper", 1, 8);
  c.moe = true;
  const PredictionInterval none = IntervalFrom(Table(), c, 0.8);
  EXPECT_EQ(none.runs, 0u);
  EXPECT_EQ(DescribeInterval(none, 10.0), "no interval: a mixture of experts and no measured MoE run is bundled");
  RunClass moe_runs = Class("hopper", 8, 256);
  moe_runs.moe = true;
  const std::vector<Residual> t = WithRuns(Table(), "m", moe_runs, 12, 1.05, 0.05);
  const PredictionInterval i = IntervalFrom(t, c, 0.8);
  EXPECT_EQ(i.runs, 12u);
  EXPECT_DOUBLE_EQ(i.lo, 1.05);
  EXPECT_NEAR(i.hi, 1.60, 1e-12);
  EXPECT_EQ(i.sets, "m");
  EXPECT_EQ(i.like, "MoE, hopper, 16-bit, no ZeRO-3");
  EXPECT_NE(i.caveat.find("MoE runs only"), std::string::npos) << i.caveat;
  const PredictionInterval dense = IntervalFrom(t, Class("hopper", 1, 8), 0.8);
  EXPECT_EQ(dense.runs, 10u);
  EXPECT_DOUBLE_EQ(dense.hi, 1.10);
}

TEST(Intervals, CoverageCountsRunsInsideTheirIntervals) {
  PredictionInterval i;
  i.lo = 0.9;
  i.hi = 1.1;
  i.runs = 10;
  IntervalCoverage c;
  EXPECT_TRUE(c.Add(i, 100, 95));
  EXPECT_FALSE(c.Add(i, 100, 120));
  EXPECT_EQ(c.Line(), "cover 50.0% of 2 runs");
}

TEST(Intervals, TheBundledTableParsesAndNamesGpuFamilies) {
  EXPECT_GE(BundledResiduals().size(), 800u);
  EXPECT_EQ(GpuFamily("a800"), "a100");
  EXPECT_EQ(GpuFamily("h200"), "hopper");
  EXPECT_EQ(GpuFamily("rtx3090"), "other");
  EXPECT_EQ(DtypeClass(proto::DTYPE_FP8), "fp8");
  EXPECT_EQ(DtypeClass(proto::DTYPE_TF32), "32-bit");
  const auto bad = ParseResiduals("set,line,family,dtype,zero3,pp,gpus,ratio\na,1,a100,16-bit,0,1,8,-1\n", "t.csv");
  const auto basis = ParseResiduals("set,line,family,dtype,zero3,pp,gpus,ratio,measured\na,1,other,fp8,0,1,8,1.3,0\n",
                                    "t.csv");
  ASSERT_TRUE(basis.ok()) << basis.status().message();
  EXPECT_FALSE((*basis)[0].cls.measured);
  EXPECT_FALSE((*basis)[0].cls.moe);
  const auto moe = ParseResiduals("set,line,family,dtype,zero3,pp,gpus,ratio,measured,moe\na,1,hopper,fp8,0,8,256,1.3,1,1\n",
                                  "t.csv");
  ASSERT_TRUE(moe.ok()) << moe.status().message();
  EXPECT_TRUE((*moe)[0].cls.moe);
  size_t moe_runs = 0;
  for (const auto& r : BundledResiduals()) moe_runs += r.cls.moe ? 1 : 0;
  EXPECT_EQ(moe_runs, 10u);  // the development half of Megatron-Bridge's MoE runs
  size_t unmeasured = 0;
  for (const auto& r : BundledResiduals()) unmeasured += r.cls.measured ? 0 : 1;
  EXPECT_GE(unmeasured, 10u);  // the GB300 and MI355X runs of the outside checks' development halves
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.csv:2:"), std::string::npos);
}

}  // namespace
}  // namespace hetsim::models
