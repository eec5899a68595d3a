// The GPU catalog (models/gpu_catalog.h, models/catalog/gpus.csv): today's fleets' rows hold their datasheets'
// dense peaks, the FP6/FP4 and block-scaled columns parse and are checked, and the older rows are unchanged.
#include "models/gpu_catalog.h"

#include <gtest/gtest.h>

#include <string>

#include "models/kernels.h"

namespace hetsim::models {
namespace {

const GpuSpec& CatalogGpu(const std::string& name) {
  auto g = GpuCatalog::Bundled().Find(name);
  EXPECT_TRUE(g.ok()) << name << ": " << g.status().message();
  return *g.value();
}

// The twelve types of issue "today's fleets", each found by its name and an alias.
TEST(GpuCatalog, TodaysFleetsAreInTheCatalog) {
  const std::pair<const char*, const char*> rows[] = {
      {"b200", "B200"},         {"b300", "B300"},       {"gb200", "GB200"},       {"gb300", "GB300"},
      {"mi325x", "MI325X"},     {"mi355x", "MI355X"},   {"h100-nvl", "H100-NVL"}, {"h200-nvl", "H200-NVL"},
      {"a40", "A40"},           {"l4", "L4"},           {"rtx6000-ada", "RTX-6000-Ada"},
      {"rtx-pro-6000", "rtx-pro-6000-blackwell"}};
  for (const auto& [name, alias] : rows) {
    const GpuSpec& g = CatalogGpu(alias);
    EXPECT_EQ(g.name, name);
    EXPECT_FALSE(g.source.empty()) << name;
    EXPECT_GT(g.tdp_w, 0) << name;
    EXPECT_GT(g.sm_count, 0) << name;
    EXPECT_GT(g.memory_gib, 0) << name;
    EXPECT_GT(g.peak_bf16_tflops, 0) << name;
  }
  // 26 types before, 12 added.
  EXPECT_EQ(GpuCatalog::Bundled().gpus().size(), 39u);
}

// NVIDIA prints the HGX B200's peaks as 8-GPU totals with 2:4 sparsity (FP8/FP6 72 PF, FP16/BF16 36 PF, TF32
// 18 PF) and FP4 both ways (144 PF sparse, 72 PF dense): one GPU's dense peak is the total / 8, halved.
TEST(GpuCatalog, B200PeaksAreDenseAndPerGpu) {
  const GpuSpec& b = CatalogGpu("b200");
  EXPECT_DOUBLE_EQ(b.PeakTflops(proto::DTYPE_FP8), 72000.0 / 8 / 2);  // 4.5 PFLOPS
  EXPECT_DOUBLE_EQ(b.PeakTflops(proto::DTYPE_BF16), 36000.0 / 8 / 2);
  EXPECT_DOUBLE_EQ(b.PeakTflops(proto::DTYPE_TF32), 18000.0 / 8 / 2);
  EXPECT_DOUBLE_EQ(b.PeakFp6Tflops(), 72000.0 / 8 / 2);  // FP6 at FP8's rate
  EXPECT_DOUBLE_EQ(b.PeakFp4Tflops(), 72000.0 / 8);
  EXPECT_DOUBLE_EQ(b.memory_gib, 180);
  EXPECT_DOUBLE_EQ(b.scale_up_bandwidth_gbyte_s, 1800.0 / 2);  // NVLink 5: 1.8 TB/s both directions
  EXPECT_EQ(b.scale_up, "nvswitch");
  EXPECT_EQ(b.sm_count, 148);
  EXPECT_DOUBLE_EQ(b.tdp_w, 1000);
  for (BlockScaledFormat f : kBlockScaledFormats) EXPECT_TRUE(b.SupportsBlockScaled(f)) << BlockScaledFormatName(f);
  EXPECT_DOUBLE_EQ(b.PeakBlockScaledTflops(BlockScaledFormat::kNvfp4), 9000);
  EXPECT_DOUBLE_EQ(b.PeakBlockScaledTflops(BlockScaledFormat::kMxfp8), 4500);
}

// A superchip's GPU has its own numbers at its own power (GB200 NVL72 per GPU: 5 PF BF16 and 20 PF FP4 with
// sparsity at up to 1,200 W), not the HGX B200's; Blackwell Ultra raises dense FP4 (GB300 NVL72: 1,080 PF dense
// over 72 GPUs; HGX B300: 108 PF dense over 8) but not FP8.
TEST(GpuCatalog, SuperchipGpusCarryTheirOwnNumbers) {
  const GpuSpec& gb200 = CatalogGpu("gb200");
  EXPECT_DOUBLE_EQ(gb200.peak_bf16_tflops, 5000.0 / 2);
  EXPECT_DOUBLE_EQ(gb200.PeakFp4Tflops(), 20000.0 / 2);
  EXPECT_DOUBLE_EQ(gb200.tdp_w, 1200);
  EXPECT_GT(gb200.peak_bf16_tflops, CatalogGpu("b200").peak_bf16_tflops);
  EXPECT_DOUBLE_EQ(CatalogGpu("gb300").PeakFp4Tflops(), 1080000.0 / 72);
  EXPECT_DOUBLE_EQ(CatalogGpu("gb300").peak_fp8_tflops, 720000.0 / 72 / 2);
  EXPECT_DOUBLE_EQ(CatalogGpu("b300").PeakFp4Tflops(), 108000.0 / 8);
  EXPECT_DOUBLE_EQ(CatalogGpu("b300").peak_fp8_tflops, CatalogGpu("b200").peak_fp8_tflops);
  EXPECT_DOUBLE_EQ(CatalogGpu("b300").memory_gib, 288);
}

// AMD's peaks from the compute units: MI355X 256 CUs x 8,192 FP8 FLOPs a clock at 2.4 GHz (CDNA 4 doubles
// CDNA 3's 4,096), BF16 half of that, FP6 and FP4 twice; MI325X 304 CUs x 2,048 BF16 FLOPs a clock at 2.1 GHz.
TEST(GpuCatalog, AmdPeaksFollowFromTheirComputeUnits) {
  const GpuSpec& mi355x = CatalogGpu("mi355x");
  const double fp8 = 256 * 8192 * 2.4e9 / 1e12;
  EXPECT_NEAR(mi355x.PeakTflops(proto::DTYPE_FP8), fp8, 0.1);
  EXPECT_NEAR(mi355x.PeakTflops(proto::DTYPE_BF16), fp8 / 2, 0.1);
  EXPECT_NEAR(mi355x.PeakFp4Tflops(), 2 * fp8, 0.1);
  EXPECT_DOUBLE_EQ(mi355x.PeakFp6Tflops(), mi355x.PeakFp4Tflops());
  // CDNA 4 has no XF32 matrix mode: TF32 training runs its matmuls in FP32.
  EXPECT_EQ(mi355x.MathDType(proto::DTYPE_TF32), proto::DTYPE_FP32);
  EXPECT_DOUBLE_EQ(mi355x.PeakTflops(proto::DTYPE_TF32), 157.3);
  // The OCP MX formats natively, NVIDIA's NVFP4 not.
  EXPECT_TRUE(mi355x.SupportsBlockScaled(BlockScaledFormat::kMxfp4));
  EXPECT_FALSE(mi355x.SupportsBlockScaled(BlockScaledFormat::kNvfp4));
  EXPECT_DOUBLE_EQ(mi355x.PeakBlockScaledTflops(BlockScaledFormat::kNvfp4), 0);
  EXPECT_DOUBLE_EQ(mi355x.scale_up_bandwidth_gbyte_s, 7 * 153.6 / 2);
  EXPECT_NEAR(CatalogGpu("mi325x").peak_bf16_tflops, 304 * 2048 * 2.1e9 / 1e12, 0.1);
  EXPECT_DOUBLE_EQ(CatalogGpu("mi325x").memory_gib, 256);
  EXPECT_TRUE(CatalogGpu("mi325x").block_scaled.empty());
}

// Datasheets that print only sparse peaks (H100 NVL, H200 NVL, L4) are halved; the A40's states both.
TEST(GpuCatalog, SparseOnlyDatasheetsAreHalved) {
  EXPECT_DOUBLE_EQ(CatalogGpu("h100-nvl").peak_bf16_tflops, 1671.0 / 2);
  EXPECT_DOUBLE_EQ(CatalogGpu("h100-nvl").peak_fp8_tflops, 3341.0 / 2);
  EXPECT_DOUBLE_EQ(CatalogGpu("h200-nvl").peak_fp8_tflops, 3341.0 / 2);
  EXPECT_DOUBLE_EQ(CatalogGpu("h200-nvl").memory_gib, 141);
  EXPECT_DOUBLE_EQ(CatalogGpu("l4").peak_fp8_tflops, 485.0 / 2);
  EXPECT_DOUBLE_EQ(CatalogGpu("l4").peak_tf32_tflops, 120.0 / 2);
  EXPECT_DOUBLE_EQ(CatalogGpu("a40").peak_bf16_tflops, 299.4 / 2);
  EXPECT_DOUBLE_EQ(CatalogGpu("a40").peak_fp8_tflops, 0);  // Ampere has no FP8
  // The RTX 6000 Ada: 142 SMs x 1,024 dense FP16 FLOPs a clock at 2.505 GHz.
  EXPECT_NEAR(CatalogGpu("rtx6000-ada").peak_bf16_tflops, 142 * 1024 * 2.505e9 / 1e12, 0.1);
  // The RTX PRO 6000 Blackwell's 4,000 AI TOPS are FP4 with sparsity.
  EXPECT_DOUBLE_EQ(CatalogGpu("rtx-pro-6000").PeakFp4Tflops(), 4000.0 / 2);
  EXPECT_EQ(CatalogGpu("rtx-pro-6000").scale_up, "pcie");
}

// The rows before today's fleets keep their values; the columns they predate read 0 / none, and the SM counts
// that moved from models/kernels.cc into the catalog are the same.
TEST(GpuCatalog, OlderRowsAreUnchanged) {
  const GpuSpec& h100 = CatalogGpu("h100");
  EXPECT_DOUBLE_EQ(h100.peak_bf16_tflops, 989);
  EXPECT_DOUBLE_EQ(h100.peak_fp8_tflops, 1978.9);
  EXPECT_DOUBLE_EQ(h100.memory_gib, 80);
  EXPECT_DOUBLE_EQ(h100.PeakFp4Tflops(), 0);
  EXPECT_TRUE(h100.block_scaled.empty());
  EXPECT_DOUBLE_EQ(h100.tdp_w, 0);
  EXPECT_EQ(h100.sm_count, 132);
  EXPECT_EQ(CatalogGpu("a100-80gb").sm_count, 108);
  EXPECT_EQ(CatalogGpu("mi300x").sm_count, 304);
  EXPECT_EQ(CatalogGpu("rtx2080").sm_count, 46);
  EXPECT_EQ(CatalogGpu("cpu").sm_count, 0);
  EXPECT_EQ(KernelParamsFor(CatalogGpu("h100-pcie")).sm_count, 114);
}

// New types rest on datasheet peaks only: the compute basis says no measurement is behind them. The B200 and the
// MI325X are the exceptions (ml-engineering's sustained BF16 GEMM rate, 0.6472 of its peak; AMD's measured GEMM
// rates, below), and the GB200 takes its die's.
TEST(GpuCatalog, NewTypesHaveNoMeasuredBasis) {
  EXPECT_TRUE(ComputeBasisFor(CatalogGpu("b200"), "", proto::DTYPE_BF16).measured());
  EXPECT_DOUBLE_EQ(KernelParamsFor(CatalogGpu("b200")).gemm_efficiency, 0.6472);
  // The GB200 is the B200's die and takes its values (as the GH200 takes the H100's).
  EXPECT_TRUE(ComputeBasisFor(CatalogGpu("gb200"), "", proto::DTYPE_BF16).measured());
  EXPECT_DOUBLE_EQ(KernelParamsFor(CatalogGpu("gb200")).gemm_efficiency, 0.6472);
  for (const char* name : {"h100-nvl", "h200-nvl", "a40", "l4", "rtx6000-ada", "rtx-pro-6000"}) {
    for (proto::DType d : {proto::DTYPE_BF16, proto::DTYPE_FP16, proto::DTYPE_FP8, proto::DTYPE_TF32}) {
      EXPECT_FALSE(ComputeBasisFor(CatalogGpu(name), "", d).measured()) << name << " " << DTypeName(d);
    }
  }
  EXPECT_TRUE(ComputeBasisFor(CatalogGpu("h100"), "", proto::DTYPE_BF16).measured());
}

// Blackwell's GEMMs at ml-engineering's measured rates (calibration/data/gemm-sustained-public.csv): the B200
// sustains BF16 1,456.3 and FP8 2,795.7 of 2,250 and 4,500 TFLOPS; the B300's short bursts (1,769.0, 3,353.3)
// times the B200's sustained/burst ratios (1,456.3/1,770.9, 2,795.7/3,435.2) give 1,454.7 and 2,729.0; the GB300
// takes the B300's fractions of its own peaks; the MI355X's BF16 1,565.0 of 2,516.6, FP8 at that fraction.
TEST(GpuCatalog, BlackwellAndCdna4RestOnPublishedGemmRates) {
  const KernelParams& b200 = KernelParamsFor(CatalogGpu("b200"));
  EXPECT_NEAR(b200.GemmEfficiency(proto::DTYPE_BF16) * 2250, 1456.3, 0.1);
  EXPECT_NEAR(b200.GemmEfficiency(proto::DTYPE_FP8) * 4500, 2795.7, 0.25);  // four digits of 4,500
  const KernelParams& b300 = KernelParamsFor(CatalogGpu("b300"));
  EXPECT_NEAR(b300.GemmEfficiency(proto::DTYPE_BF16) * 2250, 1769.0 * 1456.3 / 1770.9, 0.2);
  EXPECT_NEAR(b300.GemmEfficiency(proto::DTYPE_FP8) * 4500, 3353.3 * 2795.7 / 3435.2, 0.5);
  EXPECT_DOUBLE_EQ(KernelParamsFor(CatalogGpu("gb300")).GemmEfficiency(proto::DTYPE_FP8),
                   b300.GemmEfficiency(proto::DTYPE_FP8));
  const KernelParams& mi355x = KernelParamsFor(CatalogGpu("mi355x"));
  EXPECT_NEAR(mi355x.GemmEfficiency(proto::DTYPE_BF16) * 2516.6, 1565.0, 0.2);
  EXPECT_DOUBLE_EQ(mi355x.GemmEfficiency(proto::DTYPE_FP8), mi355x.GemmEfficiency(proto::DTYPE_BF16));
  for (const char* name : {"b300", "gb300", "mi355x"}) {
    for (proto::DType d : {proto::DTYPE_BF16, proto::DTYPE_FP8}) {
      EXPECT_TRUE(ComputeBasisFor(CatalogGpu(name), "", d).measured()) << name << " " << DTypeName(d);
    }
  }
}

// An entry saying `measured: false` prices with its values but leaves the type without a measured basis, even
// for a dtype it lists (tools/fit/generic-basis.yaml, which the intervals' generic residuals come from).
TEST(GpuCatalog, AnAssumedEntryIsNoMeasuredBasis) {
  const std::string path = std::string(HETSIM_SOURCE_DIR) + "/tools/fit/generic-basis.yaml";
  const KernelParams& p = KernelParamsFor(CatalogGpu("gb300"), path);
  EXPECT_DOUBLE_EQ(p.GemmEfficiency(proto::DTYPE_FP8), 0.87);
  EXPECT_FALSE(ComputeBasisFor(CatalogGpu("gb300"), path, proto::DTYPE_FP8).measured());
  EXPECT_FALSE(ComputeBasisFor(CatalogGpu("mi355x"), path, proto::DTYPE_BF16).measured());
  EXPECT_TRUE(ComputeBasisFor(CatalogGpu("b200"), path, proto::DTYPE_FP8).measured());  // untouched
}

// The MI300X and MI325X rest on AMD's measured max-achievable GEMM rates against their datasheet peaks (BF16
// 708 and 843 of 1,307.4 TFLOPS, FP16 654 and 794, FP8 1,273 and 1,519 of 2,614.9) and on the MI300X's xGMI
// links measured at 0.72 of their 64 GB/s (the MI325X has the same links).
TEST(GpuCatalog, Cdna3PartsRestOnAmdsMeasuredGemmRates) {
  const KernelParams& mi300x = KernelParamsFor(CatalogGpu("mi300x"));
  EXPECT_NEAR(mi300x.GemmEfficiency(proto::DTYPE_BF16) * 1307.4, 708, 0.1);
  EXPECT_NEAR(mi300x.GemmEfficiency(proto::DTYPE_FP16) * 1307.4, 654, 0.1);
  EXPECT_NEAR(mi300x.GemmEfficiency(proto::DTYPE_FP8) * 2614.9, 1273, 0.1);
  const KernelParams& mi325x = KernelParamsFor(CatalogGpu("mi325x"));
  EXPECT_NEAR(mi325x.GemmEfficiency(proto::DTYPE_BF16) * 1307.4, 843, 0.1);
  EXPECT_NEAR(mi325x.GemmEfficiency(proto::DTYPE_FP16) * 1307.4, 794, 0.1);
  EXPECT_NEAR(mi325x.GemmEfficiency(proto::DTYPE_FP8) * 2614.9, 1519, 0.1);
  for (const KernelParams* p : {&mi300x, &mi325x}) EXPECT_DOUBLE_EQ(p->collective_efficiency, 0.72);
  EXPECT_TRUE(ComputeBasisFor(CatalogGpu("mi325x"), "", proto::DTYPE_FP8).measured());
  EXPECT_DOUBLE_EQ(KernelParamsFor(CatalogGpu("mi355x")).collective_efficiency, 1);  // CDNA 4: not measured
}

// The B200's all-reduce inside a node runs at NCCL's measured bus bandwidth by group size (HGX B200, 8 GiB:
// the ring's 673.2 GB/s at 4 GPUs, NVLS's 838.0 at 8), held beyond 8 (a GB200 NVL72 rack's larger groups); the
// GB200 takes the same (its die). Between entries: log2 interpolation, so 6 GPUs are the measured 778.2.
TEST(GpuCatalog, BlackwellIntraNodeAllReduceIsMeasured) {
  for (const char* name : {"b200", "gb200"}) {
    const KernelParams& p = KernelParamsFor(CatalogGpu(name));
    EXPECT_DOUBLE_EQ(p.CollectiveBusBandwidth(4), 673.2e9) << name;
    EXPECT_DOUBLE_EQ(p.CollectiveBusBandwidth(6), 778.2e9) << name;
    EXPECT_DOUBLE_EQ(p.CollectiveBusBandwidth(8), 838.0e9) << name;
    EXPECT_DOUBLE_EQ(p.CollectiveBusBandwidth(72), 838.0e9) << name;
  }
  EXPECT_EQ(KernelParamsFor(CatalogGpu("gb300")).CollectiveBusBandwidth(8), 0);  // no measurement: the port
}

std::string Header() {
  return "name,aliases,vendor,form_factor,peak_bf16_tflops,peak_fp16_tflops,peak_fp32_tflops,peak_tf32_tflops,"
         "peak_fp8_tflops,memory_gib,hbm_bandwidth_gbyte_s,scale_up,scale_up_bandwidth_gbyte_s,pcie_gen,"
         "pcie_bandwidth_gbyte_s,peak_fp6_tflops,peak_fp4_tflops,block_scaled,sm_count,tdp_w,source\n";
}

// A row with the given peak_fp8 / fp4, block_scaled and sm_count cells.
std::string Row(const std::string& fp8, const std::string& fp4, const std::string& block, const std::string& sms) {
  return "x,,nvidia,SXM,1,1,1,1," + fp8 + ",80,1000,nvswitch,450,5,64,0," + fp4 + "," + block + "," + sms +
         ",700,a test row\n";
}

TEST(GpuCatalogParse, BlockScaledColumnIsChecked) {
  auto ok = GpuCatalog::Parse(Header() + Row("2", "4", "mxfp8; NVFP4", "10"), "t.csv");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_TRUE(ok->gpus()[0].SupportsBlockScaled(BlockScaledFormat::kNvfp4));
  EXPECT_DOUBLE_EQ(ok->gpus()[0].PeakBlockScaledTflops(BlockScaledFormat::kNvfp4), 4);
  EXPECT_FALSE(ok->gpus()[0].SupportsBlockScaled(BlockScaledFormat::kMxfp4));

  auto typo = GpuCatalog::Parse(Header() + Row("2", "4", "mxfp44", "10"), "t.csv");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("t.csv:2: block_scaled: unknown format 'mxfp44'"), std::string::npos)
      << typo.status().message();
  EXPECT_NE(typo.status().message().find("did you mean 'mxfp4'"), std::string::npos) << typo.status().message();

  auto no_peak = GpuCatalog::Parse(Header() + Row("2", "0", "nvfp4", "10"), "t.csv");
  ASSERT_FALSE(no_peak.ok());
  EXPECT_NE(no_peak.status().message().find("lists 'nvfp4' but peak_fp4_tflops is 0"), std::string::npos)
      << no_peak.status().message();

  auto twice = GpuCatalog::Parse(Header() + Row("2", "4", "mxfp8;mxfp8", "10"), "t.csv");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("'mxfp8' is listed twice"), std::string::npos);
}

TEST(GpuCatalogParse, SmCountIsAWholeNumber) {
  auto bad = GpuCatalog::Parse(Header() + Row("2", "4", "", "10.5"), "t.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t.csv:2: sm_count: expected a whole number"), std::string::npos)
      << bad.status().message();
  // The header of the columns before FP6 and FP4 is refused with the expected columns named.
  auto old = GpuCatalog::Parse(
      "name,aliases,vendor,form_factor,peak_bf16_tflops,peak_fp16_tflops,peak_fp32_tflops,peak_tf32_tflops,"
      "peak_fp8_tflops,memory_gib,hbm_bandwidth_gbyte_s,scale_up,scale_up_bandwidth_gbyte_s,pcie_gen,"
      "pcie_bandwidth_gbyte_s,source\n",
      "old.csv");
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("old.csv:1: unexpected header; expected the columns name,aliases"),
            std::string::npos)
      << old.status().message();
  EXPECT_NE(old.status().message().find("block_scaled,sm_count,tdp_w,source"), std::string::npos);
}

}  // namespace
}  // namespace hetsim::models
