// The calibration fit (calibration/fit.h) on synthetic measurements with known parameters.
#include "calibration/fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "models/gpu_catalog.h"

namespace hetsim::calibration {
namespace {

TEST(RobustFit, RecoversAnExactLine) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (double v : {1.0, 2.0, 5.0, 10.0, 100.0}) x.push_back({v, 1.0}), y.push_back(2 * v + 3);
  const LinearFit f = RobustFit(x, y);
  ASSERT_EQ(f.coef.size(), 2u);
  EXPECT_NEAR(f.coef[0], 2, 1e-9);
  EXPECT_NEAR(f.coef[1], 3, 1e-9);
  EXPECT_NEAR(f.mape, 0, 1e-12);
}

TEST(RobustFit, OneOutlierDoesNotDragTheLine) {
  // y = 2x + 3 on 10 points; one measurement 5x too slow (a descheduled run). Ordinary least squares on
  // relative error would move the slope by several percent; Huber weights keep it within 1%.
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 1; i <= 10; ++i) x.push_back({10.0 * i, 1.0}), y.push_back(2 * 10.0 * i + 3);
  y[6] *= 5;
  const LinearFit f = RobustFit(x, y);
  EXPECT_NEAR(f.coef[0], 2, 0.02);
  EXPECT_GT(f.worst, 0.7);  // the outlier's residual is reported, not hidden
}

const models::GpuSpec& Cpu() { return *models::GpuCatalog::Bundled().Find("cpu").value(); }

TEST(FitCalibration, RecoversKnownKernelParameters) {
  // The cpu row: 1 TFLOPS fp32, 50 GB/s, no SMs (no waves). Synthetic: GEMMs at 0.5 of peak, two memory
  // kernel kinds at 0.2 and 0.8 of the bandwidth (their mean in 1/eff: 1/((5 + 1.25)/2) = 0.32), 2 us per
  // kernel, 1 us to issue one.
  const double peak = 1e12, bw = 50e9, lat = 2e-6;
  std::vector<KernelRow> rows;
  KernelRow launch;
  launch.kind = "launch", launch.name = "scale-1", launch.median_s = lat;
  rows.push_back(launch);
  launch.name = "host-issue", launch.median_s = 1e-6;
  rows.push_back(launch);
  for (double m : {64.0, 128.0, 256.0, 512.0}) {
    KernelRow g;
    g.kind = "gemm", g.name = "qkv", g.m = m, g.n = 256, g.k = 256;
    g.median_s = 2 * g.m * g.n * g.k / (peak * 0.5) + lat;
    rows.push_back(g);
  }
  for (double bytes : {1e6, 4e6, 16e6}) {
    for (auto [name, eff] : {std::pair{"rmsnorm", 0.2}, std::pair{"add", 0.8}}) {
      KernelRow r;
      r.kind = "memory", r.name = name, r.bytes = bytes, r.median_s = bytes / (bw * eff) + lat;
      rows.push_back(r);
    }
  }
  FitSummary summary;
  auto k = FitCalibration(Cpu(), rows, {}, &summary);
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_NEAR(k->gemm_efficiency(), 0.5, 1e-3);
  EXPECT_NEAR(k->memory_efficiency(), 0.32, 1e-3);
  EXPECT_NEAR(k->kernel_latency_us(), 2, 1e-3);
  EXPECT_NEAR(k->host_overhead_us(), 1, 1e-3);
  EXPECT_FALSE(k->has_link_bandwidth_gbyte_s());  // no communication rows: the base's links stay
  EXPECT_FALSE(summary.lines.empty());
}

TEST(FitCalibration, RecoversLinkAlphaBetaAndCollectiveEfficiency) {
  // p2p: 1 us + bytes / 10 GB/s. All-reduce among 2: 5 us + 2(2−1)/2 · bytes / (10 GB/s · 0.5); among 4:
  // 8 us + 2·3/4 · bytes / (10 GB/s · 0.5).
  std::vector<CommRow> rows;
  for (double b = 1024; b <= 64e6; b *= 4) {
    rows.push_back({"p2p", 2, b, 1e-6 + b / 10e9});
    rows.push_back({"allreduce", 2, b, 5e-6 + 1.0 * b / 5e9});
    rows.push_back({"allreduce", 4, b, 8e-6 + 1.5 * b / 5e9});
  }
  auto k = FitCalibration(Cpu(), {}, rows, nullptr);
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_NEAR(k->link_bandwidth_gbyte_s(), 10, 0.01);
  EXPECT_NEAR(k->link_latency_us(), 1, 0.01);
  EXPECT_NEAR(k->collective_efficiency(), 0.5, 1e-3);
  ASSERT_EQ(k->collective_latency_size(), 2);
  EXPECT_EQ(k->collective_latency(0).group_size(), 2u);
  EXPECT_NEAR(k->collective_latency(0).latency_us(), 5, 0.05);
  EXPECT_EQ(k->collective_latency(1).group_size(), 4u);
  EXPECT_NEAR(k->collective_latency(1).latency_us(), 8, 0.05);
  EXPECT_FALSE(k->has_gemm_efficiency());
}

TEST(FitCalibration, TooFewRowsIsAnError) {
  std::vector<CommRow> rows = {{"p2p", 2, 1024, 1e-6}};
  auto k = FitCalibration(Cpu(), {}, rows, nullptr);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("point-to-point"), std::string::npos) << k.status().message();
}

TEST(ReadBench, ErrorsNameTheFileLineAndColumn) {
  const std::string path = ::testing::TempDir() + "/coll.csv";
  {
    std::ofstream f(path);
    f << "# comment\nop,group_size,bytes,median_s\nallreduce,2,1024,1e-6\nbroadcast,2,1024,1e-6\n";
  }
  auto c = ReadCommBench(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(path + ":4: op 'broadcast'"), std::string::npos) << c.status().message();
  {
    std::ofstream f(path);
    f << "op,group_size,bytes\n";
  }
  c = ReadCommBench(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("no column 'median_s'"), std::string::npos) << c.status().message();
  {
    std::ofstream f(path);
    f << "op,group_size,bytes,median_s\np2p,2,1024,fast\n";
  }
  c = ReadCommBench(path);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(path + ":2: column median_s: 'fast' is not a number"), std::string::npos)
      << c.status().message();
  auto k = ReadKernelBench(::testing::TempDir() + "/nosuch.csv");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace hetsim::calibration
