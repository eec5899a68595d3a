// Gradient dumps: round trip and comparison.
#include "executor/gradient_file.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace hetsim::executor {
namespace {

GradientDump Sample() {
  GradientDump d;
  d.loss = 2.5;
  d.tensors.push_back({"layer0.embedding", 2, 3, {1, 2, 3, 4, 5, 6}});
  d.tensors.push_back({"layer1.attn_norm", 3, 1, {0, 0, 0}});
  return d;
}

TEST(GradientFileTest, RoundTripAndComparison) {
  const auto path = (std::filesystem::temp_directory_path() / "hetsim_grad_test.bin").string();
  const GradientDump d = Sample();
  ASSERT_TRUE(WriteGradientDump(path, d).ok());
  auto back = ReadGradientDump(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->loss, 2.5);
  ASSERT_EQ(back->tensors.size(), 2u);
  EXPECT_EQ(back->tensors[0].data, d.tensors[0].data);
  auto same = CompareGradientDumps(*back, d);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->Within(1e-12));  // zero tensors compare equal to zero tensors
  GradientDump off = d;
  off.tensors[0].data[5] = 6.0f + 0.091f;  // ‖Δ‖ = 0.091, ‖ref‖ = √91: relative 0.091/9.539 = 9.54e-3
  auto cmp = CompareGradientDumps(off, d);
  ASSERT_TRUE(cmp.ok());
  EXPECT_NEAR(cmp->worst()->relative_l2, 0.091 / std::sqrt(91.0), 1e-6);
  EXPECT_EQ(cmp->worst()->name, "layer0.embedding");
  EXPECT_TRUE(cmp->Within(1e-2));
  EXPECT_FALSE(cmp->Within(1e-3));
  GradientDump other = d;
  other.tensors[1].rows = 1;
  other.tensors[1].data = {0};
  EXPECT_FALSE(CompareGradientDumps(other, d).ok());
  std::remove(path.c_str());
}

TEST(GradientFileTest, RejectsOtherFiles) {
  const auto path = (std::filesystem::temp_directory_path() / "hetsim_grad_bad.bin").string();
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("kind: plan\n", f);
  std::fclose(f);
  auto r = ReadGradientDump(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a gradient dump"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_FALSE(ReadGradientDump(path).ok());
}

}  // namespace
}  // namespace hetsim::executor
