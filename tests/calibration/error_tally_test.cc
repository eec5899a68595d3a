// The one error tally of every validation report (calibration/error_tally.h).
#include "calibration/error_tally.h"

#include <gtest/gtest.h>

namespace hetsim::calibration {
namespace {

TEST(ErrorTally, MapeBiasAndWorstOfTheRelativeErrors) {
  ErrorTally t;
  EXPECT_EQ(t.count(), 0);
  EXPECT_EQ(t.mape(), 0);  // no runs: zeros, not NaN
  EXPECT_EQ(t.Line(), "   0 runs  MAPE    0.0%  bias   +0.0%");
  // +10%, −20%, +4%: MAPE (10 + 20 + 4) / 3 = 11.33%, bias (10 − 20 + 4) / 3 = −2%, worst 20%.
  for (double e : {0.10, -0.20, 0.04}) t.Add(e);
  EXPECT_EQ(t.count(), 3);
  EXPECT_NEAR(t.mape(), 0.34 / 3, 1e-12);
  EXPECT_NEAR(t.bias(), -0.02, 1e-12);
  EXPECT_NEAR(t.worst(), 0.20, 1e-12);
  EXPECT_EQ(t.Line("plans"), "   3 plans  MAPE   11.3%  bias   -2.0%");
}

}  // namespace
}  // namespace hetsim::calibration
