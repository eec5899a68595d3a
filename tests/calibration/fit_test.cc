// The calibration fit (calibration/fit.h) on synthetic measurements with known parameters.
#include "calibration/fit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/spec_io.h"

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
  EXPECT_FALSE(k->collective_latency(0).has_bus_bandwidth_gbyte_s());  // one efficiency describes both
  EXPECT_FALSE(k->has_gemm_efficiency());
}

TEST(FitCalibration, GroupSizesWithDifferentBusBandwidthsKeepTheirOwn) {
  // No p2p rows: the link is the catalog's. All-reduce among 2: 5 us + bytes / 4 GB/s of bus bandwidth
  // (2(2−1)/2 = 1); among 8: 20 us + 1.75 · bytes / 8 GB/s. One efficiency cannot describe both (they differ
  // 2×), so each size gets its own latency and bus bandwidth; the efficiency is the median of the two
  // sizes' (4 and 8 GB/s over the link: their mean, as the median of two).
  std::vector<CommRow> rows;
  for (double b = 1024; b <= 64e6; b *= 4) {
    rows.push_back({"allreduce", 2, b, 5e-6 + b / 4e9});
    rows.push_back({"allreduce", 8, b, 20e-6 + 1.75 * b / 8e9});
  }
  auto k = FitCalibration(Cpu(), {}, rows, nullptr);
  ASSERT_TRUE(k.ok()) << k.status().message();
  ASSERT_EQ(k->collective_latency_size(), 2);
  EXPECT_EQ(k->collective_latency(0).group_size(), 2u);
  EXPECT_NEAR(k->collective_latency(0).latency_us(), 5, 0.05);
  EXPECT_NEAR(k->collective_latency(0).bus_bandwidth_gbyte_s(), 4, 0.01);
  EXPECT_EQ(k->collective_latency(1).group_size(), 8u);
  EXPECT_NEAR(k->collective_latency(1).latency_us(), 20, 0.05);
  EXPECT_NEAR(k->collective_latency(1).bus_bandwidth_gbyte_s(), 8, 0.01);
  const double link = Cpu().scale_up_bandwidth_gbyte_s > 0 ? Cpu().scale_up_bandwidth_gbyte_s
                                                            : Cpu().pcie_bandwidth_gbyte_s;
  // The median of the inverse efficiencies link/4 and link/8 is their mean, 3·link/16.
  EXPECT_NEAR(k->collective_efficiency(), 16.0 / 3 / link, 1e-3);
}

TEST(FitCalibration, TooFewRowsIsAnError) {
  std::vector<CommRow> rows = {{"p2p", 2, 1024, 1e-6}};
  auto k = FitCalibration(Cpu(), {}, rows, nullptr);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("point-to-point"), std::string::npos) << k.status().message();
}

// ---- fitting to layer profiles ----

const models::GpuSpec& Gh200() { return *models::GpuCatalog::Bundled().Find("gh200").value(); }

// A profile of `name` on gh200 whose TP-1 block times are the compute model's own at the given GEMM and
// memory efficiencies in TF32 (standard attention), plus TP-2 rows that must not enter the fit.
proto::Profile SyntheticProfile(const std::string& name, double gemm, double memory) {
  auto model = models::LoadModel(name);
  EXPECT_TRUE(model.ok());
  models::KernelParams p = models::KernelParamsFor(Gh200());
  p.by_dtype = {{proto::DTYPE_TF32, gemm, memory}};
  proto::Profile profile;
  profile.set_gpu("gh200");
  profile.set_model(name);
  profile.set_seq_len(2048);
  for (uint32_t tp : {1u, 2u}) {
    for (uint32_t mb : {1u, 2u, 4u, 8u}) {
      models::KernelShape shape;
      shape.micro_batch = mb, shape.seq_len = 2048, shape.tp = tp, shape.dtype = proto::DTYPE_TF32;
      shape.attention = proto::ATTENTION_STANDARD;
      auto* l = profile.add_layers();
      l->set_layer(proto::LayerTiming::LAYER_KIND_TRANSFORMER);
      l->set_tp_degree(tp);
      l->set_micro_batch_size(mb);
      const double extra = tp > 1 ? 1.0 : 0.0;  // TP rows: a second of "communication" the fit must ignore
      l->set_forward_s(models::TimeKernels(models::LayerKernels(*model, 1, models::Pass::kForward, shape), Gh200(), p,
                                           proto::DTYPE_TF32).gpu_s + extra);
      l->set_backward_s(models::TimeKernels(models::LayerKernels(*model, 1, models::Pass::kBackward, shape), Gh200(),
                                            p, proto::DTYPE_TF32).gpu_s);
    }
  }
  return profile;
}

TEST(FitFromProfiles, RecoversTheEfficienciesThatMadeTheProfiles) {
  // Two models: within one, a block's GEMM and memory work both grow in proportion to the micro-batch, so
  // only a second shape (another hidden size) tells the two efficiencies apart.
  std::vector<LayerObservation> obs;
  for (const char* name : {"opt-350m", "opt-30b"}) {
    auto o = ProfileObservations(SyntheticProfile(name, 0.5, 0.4), name, Gh200(), proto::DTYPE_TF32,
                                 proto::ATTENTION_STANDARD);
    ASSERT_TRUE(o.ok()) << o.status().message();
    ASSERT_EQ(o->size(), 8u);  // 4 micro-batch sizes x 2 TP degrees, forward + backward together
    obs.insert(obs.end(), o->begin(), o->end());
  }
  FitSummary summary;
  auto fit = FitFromProfiles(Gh200(), proto::DTYPE_TF32, models::KernelParamsFor(Gh200()), obs,
                             /*fit_tp_latency=*/false, &summary);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  ASSERT_EQ(fit->by_dtype_size(), 1);
  EXPECT_EQ(fit->by_dtype(0).dtype(), proto::DTYPE_TF32);
  EXPECT_NEAR(fit->by_dtype(0).gemm_efficiency(), 0.5, 1e-3);
  EXPECT_NEAR(fit->by_dtype(0).memory_efficiency(), 0.4, 1e-3);
  EXPECT_FALSE(fit->has_gemm_efficiency());  // other dtypes keep the base's values
  EXPECT_EQ(fit->collective_latency_size(), 0);
  // With the TP latency fit: each TP-2 row spends 1 s beyond its compute (and its small transfers) over
  // 4 all-reduces, so about 0.25 s each.
  auto with_tp = FitFromProfiles(Gh200(), proto::DTYPE_TF32, models::KernelParamsFor(Gh200()), obs,
                                 /*fit_tp_latency=*/true, &summary);
  ASSERT_TRUE(with_tp.ok());
  ASSERT_EQ(with_tp->collective_latency_size(), 1);
  EXPECT_EQ(with_tp->collective_latency(0).group_size(), 2u);
  EXPECT_NEAR(with_tp->collective_latency(0).latency_us(), 0.25e6, 0.25e6 * 0.01);
}

// `--fit-tp-collectives`: rows whose time beyond compute is their block's 4 all-reduces, each
// α + 2(t−1)/t · bytes / B, give back each TP degree's α and B. TP 4: α = 100 µs, B = 5 GB/s; TP 8: no fixed
// cost, B = 1.5 GB/s (the two-parameter fit's α lands at or just below 0, so α is held at 0); TP 2 has one row
// only and gets no entry. Bytes per all-reduce: micro-batch × 2048 × 1024 (opt-350m's width) × 4 (TF32).
TEST(FitTpCollectives, RecoversEachDegreesLatencyAndBusBandwidth) {
  auto model = models::LoadModel("opt-350m");
  ASSERT_TRUE(model.ok());
  const models::KernelParams& p = models::KernelParamsFor(Gh200());
  std::vector<LayerObservation> rows;
  const auto add = [&](uint32_t tp, uint32_t mb, double alpha, double bandwidth) {
    models::KernelShape shape;
    shape.micro_batch = mb, shape.seq_len = 2048, shape.tp = tp, shape.dtype = proto::DTYPE_TF32;
    shape.attention = proto::ATTENTION_STANDARD;
    LayerObservation o;
    o.tp = tp;
    o.kernels = models::LayerKernels(*model, 1, models::Pass::kForward, shape);
    const auto back = models::LayerKernels(*model, 1, models::Pass::kBackward, shape);
    o.kernels.insert(o.kernels.end(), back.begin(), back.end());
    o.tp_allreduce_bytes = mb * 2048.0 * 1024 * 4;
    const double compute = models::TimeKernels(o.kernels, Gh200(), p, proto::DTYPE_TF32).gpu_s;
    o.seconds = compute + 4 * (alpha + 2.0 * (tp - 1) / tp * o.tp_allreduce_bytes / bandwidth);
    rows.push_back(o);
  };
  for (uint32_t mb : {1u, 2u, 4u, 8u}) {
    add(4, mb, 100e-6, 5e9);
    add(8, mb, 0, 1.5e9);
  }
  add(2, 1, 0, 20e9);
  proto::KernelCalibration out;
  FitSummary summary;
  FitTpCollectives(Gh200(), proto::DTYPE_TF32, p, rows, &out, &summary);
  ASSERT_EQ(out.collective_latency_size(), 2);
  EXPECT_EQ(out.collective_latency(0).group_size(), 4u);
  EXPECT_NEAR(out.collective_latency(0).latency_us(), 100, 1);
  EXPECT_NEAR(out.collective_latency(0).bus_bandwidth_gbyte_s(), 5, 0.01);
  EXPECT_EQ(out.collective_latency(1).group_size(), 8u);
  EXPECT_NEAR(out.collective_latency(1).latency_us(), 0, 1);
  EXPECT_NEAR(out.collective_latency(1).bus_bandwidth_gbyte_s(), 1.5, 0.01);
  std::string said;
  for (const auto& l : summary.lines) said += l + "\n";
  EXPECT_NE(said.find("TP 2: fewer than 2 rows"), std::string::npos) << said;
}

TEST(FitFromProfiles, OneModelFitsTheGemmEfficiencyAlone) {
  // One shape: the memory side is not identifiable; it stays at the base's value (made equal to the
  // truth here), and the GEMM efficiency is recovered.
  auto obs = ProfileObservations(SyntheticProfile("opt-350m", 0.5, 0.4), "p", Gh200(), proto::DTYPE_TF32,
                                 proto::ATTENTION_STANDARD);
  ASSERT_TRUE(obs.ok());
  models::KernelParams base = models::KernelParamsFor(Gh200());
  base.by_dtype = {{proto::DTYPE_TF32, 0.9, 0.4}};
  FitSummary summary;
  auto fit = FitFromProfiles(Gh200(), proto::DTYPE_TF32, base, *obs, false, &summary);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_NEAR(fit->by_dtype(0).gemm_efficiency(), 0.5, 1e-3);
  EXPECT_FALSE(fit->by_dtype(0).has_memory_efficiency());
  EXPECT_NE(summary.lines.front().find("not identifiable"), std::string::npos) << summary.lines.front();
}

TEST(FitFromProfiles, AProfileOfAnotherGpuOrWithoutTp1RowsIsRefused) {
  proto::Profile profile = SyntheticProfile("opt-350m", 0.5, 0.4);
  auto a100 = models::GpuCatalog::Bundled().Find("a100-80gb");
  ASSERT_TRUE(a100.ok());
  auto other = ProfileObservations(profile, "p.yaml", **a100, proto::DTYPE_TF32, proto::ATTENTION_STANDARD);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("p.yaml: gpu: the profile is for 'gh200'"), std::string::npos)
      << other.status().message();
  proto::Profile tp2;
  for (const auto& l : profile.layers()) {
    if (l.tp_degree() == 2) *tp2.add_layers() = l;
  }
  tp2.set_gpu("gh200"), tp2.set_model("opt-350m"), tp2.set_seq_len(2048);
  auto none = ProfileObservations(tp2, "p.yaml", Gh200(), proto::DTYPE_TF32, proto::ATTENTION_STANDARD);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no transformer row at tp_degree 1"), std::string::npos);
}

TEST(FitFromProfiles, AnUnidentifiableMemorySideFallsBackToTheBasesValue) {
  // Sailor's Titan RTX profile of OPT-350M (one shape, 4 micro-batch sizes): a first round of the
  // two-efficiency fit lands on a memory efficiency of 0.17, and the next round finds the two sides not
  // identifiable. The GEMM-only fit must then start again from the base's memory efficiency (0.84), not
  // from the abandoned 0.17, at which the memory-bound kernels alone outlast the measured blocks and no
  // GEMM efficiency fits (the fit failed so until session 25).
  const models::GpuSpec& titan = *models::GpuCatalog::Bundled().Find("titan-rtx").value();
  auto profile = models::LoadProfile("sailor-opt-350m-titan-rtx");
  ASSERT_TRUE(profile.ok()) << profile.status().message();
  auto obs = ProfileObservations(*profile, "titan", titan, proto::DTYPE_FP32, proto::ATTENTION_STANDARD);
  ASSERT_TRUE(obs.ok()) << obs.status().message();
  models::KernelParams base = models::KernelParamsFor(titan);
  base.by_dtype = {{proto::DTYPE_FP32, 0.87, 0.84}};
  FitSummary summary;
  auto fit = FitFromProfiles(titan, proto::DTYPE_FP32, base, *obs, false, &summary);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_FALSE(fit->by_dtype(0).has_memory_efficiency());
  EXPECT_NE(summary.lines.front().find("memory efficiency kept at 0.8400"), std::string::npos)
      << summary.lines.front();
  // A block forward + backward at micro-batch 1 is 3 x 24 h^2 s + 3 x 4 s^2 h = 206 GFLOP of GEMMs (h 1,024,
  // s 2,048), 28 ms measured: at least 206 / 0.028 / 16.3e3 = 45% of the FP32 peak, so a physical
  // efficiency lies between that and 1.
  const double ge = fit->by_dtype(0).gemm_efficiency();
  EXPECT_GT(ge, 0.45);
  EXPECT_LT(ge, 1.0);
}

// The bundled default's per-dtype entries change their dtype only.
TEST(ByDtype, AnEntryForOneDtypeLeavesTheOthers) {
  const models::KernelParams& p = models::KernelParamsFor(Gh200());
  EXPECT_NEAR(p.GemmEfficiency(proto::DTYPE_TF32), 0.5174, 1e-9);
  EXPECT_NEAR(p.MemoryEfficiency(proto::DTYPE_TF32), 0.4102, 1e-9);
  EXPECT_NEAR(p.GemmEfficiency(proto::DTYPE_BF16), 0.6084, 1e-9);  // H100-measured, at the sustained clock
  EXPECT_NEAR(p.MemoryEfficiency(proto::DTYPE_BF16), 0.84, 1e-9);
  EXPECT_TRUE(p.MeasuredFor(proto::DTYPE_BF16));
  const models::KernelParams& v100 = models::KernelParamsFor(*models::GpuCatalog::Bundled().Find("v100").value());
  EXPECT_TRUE(v100.MeasuredFor(proto::DTYPE_FP32));
  EXPECT_FALSE(v100.MeasuredFor(proto::DTYPE_FP16));  // generic defaults for what Sailor did not run
  // A GEMM in TF32 takes 0.6084 / 0.5174 times as long as at the bf16 entry's efficiency (compute-bound shape).
  models::Kernel g;
  g.type = models::Kernel::Type::kGemm, g.m = 8192, g.n = 8192, g.k = 8192;
  models::KernelParams bf16_eff = p;
  bf16_eff.by_dtype.clear();
  const double lat = p.kernel_latency_s;
  EXPECT_NEAR((models::KernelGpuSeconds(g, Gh200(), p, proto::DTYPE_TF32) - lat) /
                  (models::KernelGpuSeconds(g, Gh200(), bf16_eff, proto::DTYPE_TF32) - lat),
              0.6084 / 0.5174, 1e-6);
}

// megatron-deepspeed: the software stack's host costs over the default's chip values, for every GPU type;
// what the chips measured (GH200's TF32 fit, A100's efficiencies) stays, and so does whether it is measured.
TEST(ByDtype, TheTitanRtxRestsOnItsProfileFitInFp32Only) {
  // default's titan-rtx entry: the FP32 GEMM efficiency fitted on Sailor's profile
  // (calibration/data/profile-fits/titan-rtx.txt), measured for fp32 and for tf32 (which runs in FP32 there),
  // not for fp16.
  const models::GpuSpec& titan = *models::GpuCatalog::Bundled().Find("titan-rtx").value();
  const models::KernelParams& p = models::KernelParamsFor(titan);
  EXPECT_NEAR(p.GemmEfficiency(proto::DTYPE_FP32), 0.7135, 1e-9);
  EXPECT_TRUE(p.MeasuredFor(proto::DTYPE_FP32));
  EXPECT_EQ(titan.MathDType(proto::DTYPE_TF32), proto::DTYPE_FP32);
  EXPECT_FALSE(p.MeasuredFor(proto::DTYPE_FP16));
}

TEST(ByDtype, TheMegatronDeepSpeedStackChangesHostCostsOnly) {
  const models::KernelParams& base = models::KernelParamsFor(Gh200());
  const models::KernelParams& p = models::KernelParamsFor(Gh200(), "megatron-deepspeed");
  // On the GH200 the stack issues from a Grace host: its own fitted host costs (Sailor's development half);
  // every other GPU type keeps the values fitted on vTrain's x86 hosts.
  EXPECT_NEAR(p.host_overhead_s, 73.16e-6, 1e-12);
  EXPECT_NEAR(p.pass_overhead_s, 1.3266e-3, 1e-12);
  EXPECT_NEAR(p.GemmEfficiency(proto::DTYPE_TF32), base.GemmEfficiency(proto::DTYPE_TF32), 1e-12);
  EXPECT_NEAR(p.kernel_latency_s, base.kernel_latency_s, 1e-15);
  EXPECT_EQ(p.MeasuredFor(proto::DTYPE_TF32), base.MeasuredFor(proto::DTYPE_TF32));
  EXPECT_NE(p.source.find("TF32 GEMM and memory efficiencies fitted on Sailor"), std::string::npos) << p.source;
  EXPECT_NE(p.source.find("host costs of Megatron-DeepSpeed"), std::string::npos) << p.source;
  const auto& t4 = *models::GpuCatalog::Bundled().Find("t4").value();
  EXPECT_NEAR(models::KernelParamsFor(t4, "megatron-deepspeed").host_overhead_s, 58.01e-6, 1e-12);
  EXPECT_NEAR(models::KernelParamsFor(t4, "megatron-deepspeed").pass_overhead_s, 0.9952e-3, 1e-12);
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
