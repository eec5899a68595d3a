// The expected maximum of n standard normals behind the straggler wait (models/stragglers.h).
#include <gtest/gtest.h>

#include <cmath>

#include "models/stragglers.h"

namespace hetsim::models {
namespace {

TEST(Stragglers, ExpectedMaximumOfStandardNormalsMatchesTheClosedForms) {
  // One replica waits for nobody. For two, max(X, Y) = (X + Y + |X − Y|) / 2 and X − Y ~ N(0, 2), whose mean
  // absolute value is 2/sqrt(pi): E = 1/sqrt(pi). For three, E = 3/(2 sqrt(pi)) (the order statistics'
  // closed form: the middle one has mean 0 and the extremes are symmetric, with E[max] − E[min] = 3/sqrt(pi)).
  const double pi = std::acos(-1.0);
  EXPECT_EQ(ExpectedMaxOfStandardNormals(0), 0.0);
  EXPECT_EQ(ExpectedMaxOfStandardNormals(1), 0.0);
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(2), 1 / std::sqrt(pi), 1e-9);
  EXPECT_NEAR(ExpectedMaxOfStandardNormals(3), 3 / (2 * std::sqrt(pi)), 1e-9);
  // More replicas, a later last arrival, but slowly: never beyond sqrt(2 ln n).
  double last = 0;
  for (uint32_t n : {4u, 8u, 64u, 512u, 16384u}) {
    const double e = ExpectedMaxOfStandardNormals(n);
    EXPECT_GT(e, last) << n;
    EXPECT_LT(e, std::sqrt(2 * std::log(double(n)))) << n;
    last = e;
  }
}

}  // namespace
}  // namespace hetsim::models
