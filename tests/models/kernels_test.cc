// The per-kernel compute model (models/kernels.h): roofline with wave quantisation, fixed costs, host-bound
// passes, TP sharding of the kernels' shapes, and the ComputeCost that uses it.
#include "models/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "models/cost.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

const GpuSpec& Gpu(const std::string& name) { return *GpuCatalog::Bundled().Find(name).value(); }

Kernel Gemm(double m, double n, double k) {
  Kernel g;
  g.type = Kernel::Type::kGemm;
  g.m = m, g.n = n, g.k = k;
  return g;
}

// One sequence of 4,096 tokens at TP 1 in FP8 (the delayed recipe unless a test sets another).
KernelShape Fp8Shape() {
  KernelShape s;
  s.seq_len = 4096;
  s.dtype = proto::DTYPE_FP8;
  return s;
}

// How many kernels of `ks` are called `name`, and their bytes.
std::pair<int, double> KernelsNamed(const std::vector<Kernel>& ks, const std::string& name) {
  double sum = 0;
  int n = 0;
  for (const Kernel& x : ks) {
    if (name == x.name) sum += x.bytes, ++n;
  }
  return {n, sum};
}

const Kernel* Named(const std::vector<Kernel>& ks, const char* name) {
  for (const Kernel& k : ks) {
    if (std::strcmp(k.name, name) == 0) return &k;
  }
  return nullptr;
}

TEST(KernelModel, ALastPartialWaveCostsAFullWave) {
  // A100: 108 SMs, 312 TFLOPS fp16. 10×10 tiles of 128×128 fill one wave (100 ≤ 108); 11×10 = 110 tiles need
  // two. With k = 8192 both are compute-bound: one wave is 2·128·128·8192 FLOPs at 312e12·eff/108 per SM.
  const GpuSpec& a100 = Gpu("a100-80gb");
  const KernelParams& p = KernelParamsFor(a100);
  const double wave = 2.0 * 128 * 128 * 8192 / (312e12 * p.gemm_efficiency / 108);
  EXPECT_NEAR(KernelGpuSeconds(Gemm(1280, 1280, 8192), a100, p, proto::DTYPE_FP16), wave + p.kernel_latency_s,
              1e-12);
  EXPECT_NEAR(KernelGpuSeconds(Gemm(1408, 1280, 8192), a100, p, proto::DTYPE_FP16), 2 * wave + p.kernel_latency_s,
              1e-12);
  // An outer product (k = 16) is HBM-bound: its 16384² output dominates the bytes (about 0.35 ms against
  // 152 waves × 0.2 µs of math).
  const double bytes = 2.0 * (16384.0 * 16 + 16 * 16384 + 16384.0 * 16384);
  EXPECT_NEAR(KernelGpuSeconds(Gemm(16384, 16384, 16), a100, p, proto::DTYPE_FP16),
              bytes / (2039e9 * p.memory_efficiency) + p.kernel_latency_s, 1e-12);
}

TEST(KernelModel, APassIsHostBoundWhenItsKernelsAreShorterThanTheirIssueCost) {
  const GpuSpec& a100 = Gpu("a100-80gb");
  const KernelParams& p = KernelParamsFor(a100, "vtrain-a100");
  Kernel tiny;
  tiny.bytes = 1024;
  const PassTime t = TimeKernels({tiny, tiny, tiny}, a100, p, proto::DTYPE_FP16);
  EXPECT_EQ(t.kernels, 3u);
  EXPECT_NEAR(t.host_s, 3 * p.host_overhead_s, 1e-15);
  EXPECT_GT(t.host_s, t.gpu_s);
  EXPECT_DOUBLE_EQ(t.seconds(), t.host_s);
  Kernel big;
  big.bytes = 1e9;  // 1 GB: about 0.6 ms of HBM time, far above the issue cost
  const PassTime u = TimeKernels({big}, a100, p, proto::DTYPE_FP16);
  EXPECT_DOUBLE_EQ(u.seconds(), u.gpu_s);
}

TEST(KernelModel, TensorParallelismShardsWeightsNotTokens) {
  auto model = LoadModel("gpt3-2.6b");
  ASSERT_TRUE(model.ok()) << model.status().message();
  const double h = model->spec().hidden_size();
  KernelShape shape;
  shape.micro_batch = 2;
  shape.seq_len = 1024;
  shape.tp = 4;
  const auto ks = LayerKernels(*model, 1, Pass::kForward, shape);
  const Kernel* qkv = Named(ks, "qkv");
  ASSERT_NE(qkv, nullptr);
  EXPECT_DOUBLE_EQ(qkv->m, 2 * 1024);  // every rank sees all tokens
  EXPECT_DOUBLE_EQ(qkv->n, 3 * h / 4);
  EXPECT_DOUBLE_EQ(qkv->k, h);
  const Kernel* out = Named(ks, "attention-out");
  ASSERT_NE(out, nullptr);
  EXPECT_DOUBLE_EQ(out->k, h / 4);
}

TEST(KernelModel, BackwardGemmsDoTwiceTheForwardFlops) {
  auto model = LoadModel("gpt3-2.6b");
  ASSERT_TRUE(model.ok());
  KernelShape shape;
  shape.seq_len = 2048;
  shape.tp = 2;
  shape.attention = proto::ATTENTION_STANDARD;
  auto gemm_flops = [&](Pass pass) {
    double f = 0;
    for (const Kernel& k : LayerKernels(*model, 1, pass, shape)) {
      if (k.type == Kernel::Type::kGemm) f += 2 * k.m * k.n * k.k * k.batch;
    }
    return f;
  };
  EXPECT_NEAR(gemm_flops(Pass::kBackward), 2 * gemm_flops(Pass::kForward), 1e-6 * gemm_flops(Pass::kForward));
  // And the forward GEMMs are the block's matmul FLOPs (ForwardFlops counts the same matmuls), per rank.
  EXPECT_NEAR(gemm_flops(Pass::kForward), model->ForwardFlops(1, 1, 2048) / 2, 1e-6 * gemm_flops(Pass::kForward));
}

TEST(KernelModel, FlashAttentionKeepsTheScoresOutOfHbm) {
  auto model = LoadModel("gpt3-2.6b");
  ASSERT_TRUE(model.ok());
  KernelShape shape;
  shape.seq_len = 2048;
  shape.attention = proto::ATTENTION_STANDARD;
  const auto standard = LayerKernels(*model, 1, Pass::kForward, shape);
  ASSERT_NE(Named(standard, "scale-mask-softmax"), nullptr);
  // b · heads · s² fp16 scores, read and written.
  EXPECT_DOUBLE_EQ(Named(standard, "scale-mask-softmax")->bytes,
                   2.0 * model->spec().num_attention_heads() * 2048.0 * 2048 * 2);
  shape.attention = proto::ATTENTION_FLASH;
  const auto flash = LayerKernels(*model, 1, Pass::kForward, shape);
  EXPECT_EQ(Named(flash, "scale-mask-softmax"), nullptr);
  ASSERT_NE(Named(flash, "flash-attention"), nullptr);
  EXPECT_LT(flash.size(), standard.size());
}

// The default calibration's H100 curve (FlashAttention-2's published speeds, calibration/data/attention):
// 0.301 / 0.242 of the peak at 2,048 keys, 0.323 / 0.272 at 4,096, 0.339 / 0.295 from 16,384 on.
TEST(KernelModel, FlashAttentionRunsAtItsMeasuredEfficiencyByLength) {
  const GpuSpec& h100 = Gpu("h100");
  const KernelParams& p = KernelParamsFor(h100);
  EXPECT_DOUBLE_EQ(p.FlashAttentionEfficiency(2048, false), 0.301);
  EXPECT_DOUBLE_EQ(p.FlashAttentionEfficiency(2048, true), 0.242);
  // Halfway in log2 between 2,048 and 4,096 keys: halfway between their efficiencies.
  EXPECT_NEAR(p.FlashAttentionEfficiency(2048 * std::sqrt(2.0), false), (0.301 + 0.323) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(p.FlashAttentionEfficiency(131072, true), 0.295);  // held beyond the last point
  EXPECT_DOUBLE_EQ(p.FlashAttentionEfficiency(100, false), 0.193);    // and before the first
  // A flash-attention forward of 1 TFLOP over 2,048 keys: 1e12 / (989 TFLOPS × 0.301), not at the GEMM
  // efficiency (0.6084); its bytes are far below the roofline's knee.
  Kernel k;
  k.type = Kernel::Type::kFused;
  k.flops = 1e12;
  k.bytes = 1e6;
  k.attention_keys = 2048;
  const double t = KernelGpuSeconds(k, h100, p, proto::DTYPE_BF16);
  EXPECT_NEAR(t, 1e12 / (989e12 * 0.301) + p.kernel_latency_s, 1e-9);
  // GPUs without a curve keep the GEMM efficiency (the A100's is fitted on vTrain's runs).
  const GpuSpec& a100 = Gpu("a100-80gb");
  const KernelParams& pa = KernelParamsFor(a100);
  EXPECT_EQ(pa.FlashAttentionEfficiency(2048, false), 0);
  EXPECT_NEAR(KernelGpuSeconds(k, a100, pa, proto::DTYPE_BF16),
              1e12 / (a100.PeakTflops(proto::DTYPE_BF16) * 1e12 * pa.gemm_efficiency) + pa.kernel_latency_s, 1e-9);
  // Ring attention's steps run over one K/V block each: 32K tokens on CP 4 are 8,192 keys per step.
  auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  KernelShape shape;
  shape.seq_len = 32768;
  shape.shard.cp = 4;
  const auto ring = LayerKernels(*model, 1, Pass::kBackward, shape);
  ASSERT_NE(Named(ring, "flash-attention-grad"), nullptr);
  EXPECT_DOUBLE_EQ(Named(ring, "flash-attention-grad")->attention_keys, 8192);
  EXPECT_TRUE(Named(ring, "flash-attention-grad")->backward);
}

TEST(KernelModel, FlashAttentionsTritonKernelRunsOnItsOwnCurve) {
  // The A100 family's Triton curve (default calibration): 0.43 forward at 16K keys, 0.2152 backward at 2,048.
  const GpuSpec& a100 = Gpu("a100-40gb");
  const KernelParams& pa = KernelParamsFor(a100);
  EXPECT_DOUBLE_EQ(pa.FlashAttentionEfficiency(16384, false, proto::ATTENTION_FLASH_TRITON), 0.43);
  EXPECT_DOUBLE_EQ(pa.FlashAttentionEfficiency(2048, true, proto::ATTENTION_FLASH_TRITON), 0.2152);
  EXPECT_EQ(pa.FlashAttentionEfficiency(16384, false, proto::ATTENTION_FLASH), 0);  // FlashAttention-2: none
  // The H100 has no Triton curve: the kernel runs on flash's (FlashAttention-2's 0.301 at 2,048 keys).
  EXPECT_DOUBLE_EQ(KernelParamsFor(Gpu("h100")).FlashAttentionEfficiency(2048, false, proto::ATTENTION_FLASH_TRITON),
                   0.301);
  // The lowering tags the fused kernel with the training's attention, and its time follows that curve:
  // a 2,048-token forward at 0.3825 of the A100's 312 TFLOPS.
  auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  KernelShape shape;
  shape.seq_len = 2048;
  shape.attention = proto::ATTENTION_FLASH_TRITON;
  const auto ks = LayerKernels(*model, 1, Pass::kForward, shape);
  const Kernel* fa = Named(ks, "flash-attention");
  ASSERT_NE(fa, nullptr);
  EXPECT_EQ(fa->attention, proto::ATTENTION_FLASH_TRITON);
  const double rate = 312e12 * 0.3825;
  EXPECT_NEAR(KernelGpuSeconds(*fa, a100, pa, proto::DTYPE_BF16),
              std::max(fa->flops / rate, fa->bytes / (a100.hbm_bandwidth_gbyte_s * 1e9 * pa.memory_efficiency)) +
                  pa.kernel_latency_s,
              1e-12);
  // It stores what flash attention stores (no s × s scores).
  EXPECT_DOUBLE_EQ(model->ActivationBytes(1, 1, 2048, 1, false, proto::RECOMPUTE_NONE, proto::DTYPE_BF16,
                                          proto::ATTENTION_FLASH_TRITON, 0),
                   model->ActivationBytes(1, 1, 2048, 1, false, proto::RECOMPUTE_NONE, proto::DTYPE_BF16,
                                          proto::ATTENTION_FLASH, 0));
}

TEST(KernelModel, EachFlashKernelsPointsFormTheirOwnCurve) {
  const std::string path = ::testing::TempDir() + "/two-kernels.yaml";
  {
    std::ofstream f(path);
    f << "kind: calibration\nbase: default\ngpus:\n  - gpus: [h100]\n    flash_attention:\n"
         "      - {seq_len: 1024, forward: 0.5, backward: 0.4}\n"
         "      - {seq_len: 512, forward: 0.2, backward: 0.1, kernel: flash_triton}\n"
         "      - {seq_len: 4096, forward: 0.6, backward: 0.5}\n"
         "      - {seq_len: 2048, forward: 0.3, backward: 0.2, kernel: flash_triton}\n";
  }
  ASSERT_TRUE(CheckKernelCalibration(path).ok()) << CheckKernelCalibration(path).message();
  const KernelParams& p = KernelParamsFor(Gpu("h100"), path);
  EXPECT_DOUBLE_EQ(p.FlashAttentionEfficiency(4096, false), 0.6);
  EXPECT_DOUBLE_EQ(p.FlashAttentionEfficiency(4096, false, proto::ATTENTION_FLASH_TRITON), 0.3);  // held
  EXPECT_NEAR(p.FlashAttentionEfficiency(1024, true, proto::ATTENTION_FLASH_TRITON), 0.15, 1e-12);  // log2 middle
  // Out of order within one kernel, or a curve for standard attention: refused, naming the entry.
  const std::string bad = ::testing::TempDir() + "/two-kernels-bad.yaml";
  {
    std::ofstream f(bad);
    f << "kind: calibration\ngpus:\n  - gpus: [h100]\n    flash_attention:\n"
         "      - {seq_len: 2048, forward: 0.3, backward: 0.2, kernel: flash_triton}\n"
         "      - {seq_len: 4096, forward: 0.5, backward: 0.4}\n"
         "      - {seq_len: 1024, forward: 0.2, backward: 0.1, kernel: flash_triton}\n"
         "      - {seq_len: 8192, forward: 0.2, backward: 0.1, kernel: standard}\n";
  }
  const Status s = CheckKernelCalibration(bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gpus[0].flash_attention[2].seq_len: one kernel's entries must go up"), std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().find("flash_attention[1].seq_len"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("gpus[0].flash_attention[3].kernel: standard attention has no flash curve"),
            std::string::npos)
      << s.message();
}

TEST(KernelModel, CollectiveLatencyInterpolatesInLogGroupSize) {
  KernelParams p;
  p.collective_latency_s = {{2, 10e-6}, {8, 40e-6}};
  EXPECT_EQ(p.CollectiveLatency(1), 0.0);
  EXPECT_DOUBLE_EQ(p.CollectiveLatency(2), 10e-6);
  EXPECT_NEAR(p.CollectiveLatency(4), 25e-6, 1e-15);  // halfway between log2 2 and log2 8
  EXPECT_DOUBLE_EQ(p.CollectiveLatency(64), 40e-6);  // held beyond the last size
}

TEST(KernelModel, NamedCalibrationsCoverTheirGpusOnly) {
  const KernelParams& a100 = KernelParamsFor(Gpu("a100-80gb"), "vtrain-a100");
  const KernelParams& a100_default = KernelParamsFor(Gpu("a100-80gb"));
  EXPECT_GT(a100.host_overhead_s, a100_default.host_overhead_s);
  // The chip's values in `default` are the joint fit on vTrain's one-node and multi-node runs (what the
  // `a100-80gb` calibration held until session 36); `vtrain-a100` keeps the single-node fit's own.
  EXPECT_DOUBLE_EQ(a100_default.gemm_efficiency, 0.7650);
  EXPECT_NEAR(KernelParamsFor(Gpu("a100-80gb"), "megatron-deepspeed").kernel_latency_s, 10.86e-6, 1e-12);
  // The A100's all-reduce inside a node is nccl-tests' on vTrain's nodes: 2 GPUs reach less bus bandwidth
  // than 8 (187.6 against 222.5 GB/s). The A800's NVLink is slower: none of those applies to it.
  EXPECT_DOUBLE_EQ(a100_default.CollectiveBusBandwidth(2), 187.6e9);
  EXPECT_DOUBLE_EQ(a100_default.CollectiveBusBandwidth(8), 222.5e9);
  EXPECT_DOUBLE_EQ(KernelParamsFor(Gpu("a800")).CollectiveBusBandwidth(8), 0);
  EXPECT_DOUBLE_EQ(KernelParamsFor(Gpu("a800")).gemm_efficiency, 0.7650);
  EXPECT_DOUBLE_EQ(a100.gemm_efficiency, 0.9201);
  const KernelParams& h100 = KernelParamsFor(Gpu("h100"), "vtrain-a100");
  EXPECT_DOUBLE_EQ(h100.host_overhead_s, KernelParamsFor(Gpu("h100")).host_overhead_s);
  EXPECT_EQ(h100.sm_count, 132);
}

// The H100 parameters were measured on an H100 SXM (calibration/data/h100/kernels.csv; GEMMs 0.7226 in bursts,
// 0.7226 x 0.842 = 0.6084 at the sustained clock) and hold for the Hopper SXM parts that share its chip, not for
// the cut-down H20 or the PCIe card's 114 SMs.
TEST(KernelModel, MeasuredHopperParametersCoverTheSxmChipOnly) {
  for (const char* name : {"h100", "h800", "h200"}) {
    const KernelParams& p = KernelParamsFor(Gpu(name));
    EXPECT_DOUBLE_EQ(p.gemm_efficiency, 0.6084) << name;
    EXPECT_EQ(p.sm_count, 132) << name;
  }
  for (const char* name : {"h20", "h100-pcie"}) {
    EXPECT_NE(KernelParamsFor(Gpu(name)).gemm_efficiency, 0.6084) << name;
  }
  // A full wave of 128x128 tiles over k = 4096 on the H100: 132 tiles x 2*128*128*4096 FLOPs at 60.84% of
  // 989 TFLOPS = 29.44 us of compute (the operands, 28 MB, take 10 us at 84% of 3.35 TB/s), plus 4.53 us.
  const Kernel g = Gemm(11 * 128, 12 * 128, 4096);  // 132 tiles: one full wave
  const double flops = 132 * 2.0 * 128 * 128 * 4096;
  EXPECT_NEAR(KernelGpuSeconds(g, Gpu("h100"), KernelParamsFor(Gpu("h100")), proto::DTYPE_BF16),
              flops / (989e12 * 0.6084) + 4.53e-6, 1e-9);
}

// FP8 (Transformer Engine) runs the blocks' linear layers at the FP8 peak (H100: 1978.9 against 989 BF16
// TFLOPS) and at the FP8 GEMM efficiency (0.5530 against BF16's 0.6084: the sustained FP8/BF16 ratio, default
// calibration), everything else in bf16: a compute-bound QKV GEMM takes (989 / 1978.9) x (0.6084 / 0.5530)
// = 0.550 of its BF16 time less the shared kernel latency, the head's logits GEMM and the attention take
// their BF16 time.
TEST(KernelModel, Fp8RunsOnlyTheBlocksLinearLayersAtTheFp8Peak) {
  const auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  const GpuSpec& h100 = Gpu("h100");
  const KernelParams& p = KernelParamsFor(h100);
  KernelShape bf16, fp8;
  bf16.micro_batch = fp8.micro_batch = 4;
  bf16.seq_len = fp8.seq_len = 4096;
  fp8.dtype = proto::DTYPE_FP8;
  const auto block16 = LayerKernels(*model, 1, Pass::kForward, bf16), block8 = LayerKernels(*model, 1, Pass::kForward, fp8);
  const Kernel* qkv = Named(block8, "qkv");
  ASSERT_NE(qkv, nullptr);
  EXPECT_TRUE(qkv->block_linear);
  const double t16 = KernelGpuSeconds(*Named(block16, "qkv"), h100, p, proto::DTYPE_BF16) - p.kernel_latency_s;
  const double t8 = KernelGpuSeconds(*qkv, h100, p, proto::DTYPE_FP8) - p.kernel_latency_s;
  EXPECT_NEAR(t8 / t16, 989.0 / 1978.9 * 0.6084 / 0.5530, 1e-3);
  const uint32_t head = model->num_layers() - 1;
  const auto head_kernels = LayerKernels(*model, head, Pass::kForward, fp8);
  const Kernel* logits = Named(head_kernels, "logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_FALSE(logits->block_linear);
  EXPECT_DOUBLE_EQ(KernelGpuSeconds(*logits, h100, p, proto::DTYPE_FP8),
                   KernelGpuSeconds(*logits, h100, p, proto::DTYPE_BF16));
  // Storage: fp8 keeps bf16 tensors and fp32 masters; tf32 keeps fp32 tensors and no separate masters.
  EXPECT_DOUBLE_EQ(DTypeBytes(proto::DTYPE_FP8), 2.0);
  EXPECT_TRUE(MixedPrecision(proto::DTYPE_FP8));
  EXPECT_DOUBLE_EQ(DTypeBytes(proto::DTYPE_TF32), 4.0);
  EXPECT_FALSE(MixedPrecision(proto::DTYPE_TF32));
  EXPECT_DOUBLE_EQ(h100.PeakTflops(proto::DTYPE_TF32), 494.7);
  EXPECT_DOUBLE_EQ(Gpu("a100-80gb").PeakTflops(proto::DTYPE_FP8), 0.0);
}

TEST(KernelModel, Fp8AddsTransformerEnginesCastTransposeKernels) {
  // Llama-2 7B (h 4,096, SwiGLU ffn 11,008, MHA) at micro-batch 1 × 4,096 tokens, TP 1. Forward: the inputs of
  // attention-out (h) and mlp-out (ffn) are cast to FP8 and transposed (4 bytes per element); QKV's and mlp-in's
  // come from the norms. Backward: every linear's output gradient (QKV 3h, out h, mlp-in 2·ffn, mlp-out h).
  const auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  KernelShape fp8 = Fp8Shape();
  const double tokens = 4096, h = 4096, ffn = 11008;
  const auto bytes = KernelsNamed;
  const auto fwd = bytes(LayerKernels(*model, 1, Pass::kForward, fp8), "fp8-cast-transpose");
  EXPECT_EQ(fwd.first, 2);
  EXPECT_DOUBLE_EQ(fwd.second, 4 * tokens * (h + ffn));
  const auto bwd = bytes(LayerKernels(*model, 1, Pass::kBackward, fp8), "fp8-cast-transpose-grad");
  EXPECT_EQ(bwd.first, 4);
  EXPECT_DOUBLE_EQ(bwd.second, 4 * tokens * (3 * h + h + 2 * ffn + h));
  // Not in bf16, and not in the head (its GEMM runs in bf16).
  KernelShape bf16 = fp8;
  bf16.dtype = proto::DTYPE_BF16;
  EXPECT_EQ(bytes(LayerKernels(*model, 1, Pass::kBackward, bf16), "fp8-cast-transpose-grad").first, 0);
  EXPECT_EQ(bytes(LayerKernels(*model, model->num_layers() - 1, Pass::kBackward, fp8), "fp8-cast-transpose-grad").first, 0);
}

// The same block under the other recipes (proto::Fp8Recipe). Current scaling: the norms no longer quantise,
// so all four linears' inputs (QKV h, out h, mlp-in h, mlp-out ffn) get an amax pass (2 bytes an element)
// and a cast-transpose (4); backward the same over the output gradients. Block scaling: one pass of
// 4 + 8/128 bytes an element per input or gradient, no amax pass.
TEST(KernelModel, Fp8RecipesAddOrUnfuseCasts) {
  const auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  KernelShape fp8 = Fp8Shape();
  const double tokens = 4096, h = 4096, ffn = 11008;
  const auto bytes = KernelsNamed;
  const double inputs = tokens * (h + h + h + ffn), grads = tokens * (3 * h + h + 2 * ffn + h);
  fp8.fp8_recipe = proto::FP8_RECIPE_CURRENT;
  const auto fwd = LayerKernels(*model, 1, Pass::kForward, fp8), bwd = LayerKernels(*model, 1, Pass::kBackward, fp8);
  EXPECT_EQ(bytes(fwd, "fp8-amax"), std::make_pair(4, 2 * inputs));
  EXPECT_EQ(bytes(fwd, "fp8-cast-transpose"), std::make_pair(4, 4 * inputs));
  EXPECT_EQ(bytes(bwd, "fp8-amax-grad"), std::make_pair(4, 2 * grads));
  EXPECT_EQ(bytes(bwd, "fp8-cast-transpose-grad"), std::make_pair(4, 4 * grads));
  fp8.fp8_recipe = proto::FP8_RECIPE_BLOCKWISE;
  const auto bfwd = LayerKernels(*model, 1, Pass::kForward, fp8);
  EXPECT_EQ(bytes(bfwd, "fp8-amax").first, 0);
  EXPECT_EQ(bytes(bfwd, "fp8-cast-transpose"), std::make_pair(4, (4 + 8.0 / 128) * inputs));
  EXPECT_EQ(bytes(LayerKernels(*model, 1, Pass::kBackward, fp8), "fp8-cast-transpose-grad"),
            std::make_pair(4, (4 + 8.0 / 128) * grads));
}

// Blackwell's block-scaled recipes. A B200 (gpus.csv: FP8 4,500 and FP4 9,000 dense TFLOPS): a compute-bound
// block GEMM under NVFP4 runs at the FP4 rate, twice MXFP8's (the same tiles, the same efficiency); the
// quantisation passes are 4 + 2/32 (MXFP8) and 2 + 1 + 2/16 (NVFP4) bytes an element, norm-fed inputs too.
TEST(KernelModel, BlockScaledRecipesOnBlackwell) {
  const GpuSpec& b200 = Gpu("b200");
  const KernelParams& p = KernelParamsFor(b200);
  Kernel g = Gemm(8192, 8192, 8192);
  g.block_linear = true;
  const double t8 = KernelGpuSeconds(g, b200, p, proto::DTYPE_FP8) - p.kernel_latency_s;
  g.fp4 = true;
  const double t4 = KernelGpuSeconds(g, b200, p, proto::DTYPE_FP8) - p.kernel_latency_s;
  EXPECT_NEAR(t8 / t4, 9000.0 / 4500.0, 1e-9);
  const auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  KernelShape s;
  s.seq_len = 4096;
  s.dtype = proto::DTYPE_FP8;
  const double tokens = 4096, h = 4096, ffn = 11008, inputs = tokens * (3 * h + ffn);
  const auto cast_bytes = [&](proto::Fp8Recipe r, bool* fp4) {
    s.fp8_recipe = r;
    double sum = 0;
    for (const Kernel& k : LayerKernels(*model, 1, Pass::kForward, s)) {
      if (std::string(k.name) == "fp8-cast-transpose") sum += k.bytes;
      if (std::string(k.name) == "qkv") *fp4 = k.fp4;
    }
    return sum;
  };
  bool fp4 = true;
  EXPECT_DOUBLE_EQ(cast_bytes(proto::FP8_RECIPE_MXFP8, &fp4), (4 + 2.0 / 32) * inputs);
  EXPECT_FALSE(fp4);
  EXPECT_DOUBLE_EQ(cast_bytes(proto::FP8_RECIPE_NVFP4, &fp4), (2 + 1 + 2.0 / 16) * inputs);
  EXPECT_TRUE(fp4);
  EXPECT_TRUE(RecipeUnsupported(b200, proto::DTYPE_FP8, proto::FP8_RECIPE_NVFP4).empty());
  EXPECT_FALSE(RecipeUnsupported(Gpu("h100"), proto::DTYPE_FP8, proto::FP8_RECIPE_NVFP4).empty());
}

TEST(KernelModel, Fp8RecipeNeedsFp8) {
  const auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  proto::Training t;
  t.set_fp8_recipe(proto::FP8_RECIPE_CURRENT);
  auto r = ResolveTraining(t, *model, "t.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("t.yaml: fp8_recipe"), std::string::npos) << r.status().message();
  t.set_dtype(proto::DTYPE_FP8);
  t.clear_fp8_recipe();
  r = ResolveTraining(t, *model, "t.yaml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->fp8_recipe(), proto::FP8_RECIPE_DELAYED);
  // The YAML name of FP8_RECIPE_BLOCKWISE is `blockwise` (the enum type's prefix, digits included, dropped).
  proto::Training y;
  ASSERT_TRUE(ParseYaml("dtype: fp8\nfp8_recipe: blockwise\n", "t.yaml", &y).ok());
  EXPECT_EQ(y.fp8_recipe(), proto::FP8_RECIPE_BLOCKWISE);
}

// TF32 training is FP32 tensors with TF32 math where the part has it: a Turing card (RTX 2080, no TF32 mode)
// runs the same training's GEMMs in FP32 at its FP32 peak and its FP32 efficiency (the `default` entry fitted
// on Sailor's RTX 2080 profile), not at the generic TF32 values, and the Ampere card beside it uses TF32.
TEST(KernelModel, Tf32RunsInFp32OnPartsWithoutTf32) {
  const GpuSpec& turing = Gpu("rtx2080");
  const GpuSpec& ampere = Gpu("rtx3090");
  EXPECT_EQ(turing.MathDType(proto::DTYPE_TF32), proto::DTYPE_FP32);
  EXPECT_EQ(ampere.MathDType(proto::DTYPE_TF32), proto::DTYPE_TF32);
  EXPECT_EQ(turing.MathDType(proto::DTYPE_FP16), proto::DTYPE_FP16);
  EXPECT_DOUBLE_EQ(turing.PeakTflops(proto::DTYPE_TF32), 10.1);  // its FP32 peak
  EXPECT_DOUBLE_EQ(ampere.PeakTflops(proto::DTYPE_TF32), 35.6);
  const KernelParams& p = KernelParamsFor(turing);
  // One full wave on the 2080's 46 SMs, k = 1024: 46 tiles x 2*128*128*1024 FLOPs at 1.194 x 10.1 TFLOPS
  // (the operands, 2.2 MB at 4 bytes, are far below that at 448 GB/s).
  const Kernel g = Gemm(46 * 128, 128, 1024);
  const double flops = 46 * 2.0 * 128 * 128 * 1024;
  EXPECT_NEAR(KernelGpuSeconds(g, turing, p, proto::DTYPE_TF32), flops / (10.1e12 * 1.194) + p.kernel_latency_s,
              1e-9);
  EXPECT_DOUBLE_EQ(KernelGpuSeconds(g, turing, p, proto::DTYPE_TF32), KernelGpuSeconds(g, turing, p, proto::DTYPE_FP32));
}

TEST(KernelModel, UnknownCalibrationNamesTheFlagAndTheBundledOnes) {
  EXPECT_TRUE(CheckKernelCalibration("").ok());
  EXPECT_TRUE(CheckKernelCalibration("vtrain-a100").ok());
  const Status s = CheckKernelCalibration("vtrain-h100", "--calibration");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--calibration: unknown calibration 'vtrain-h100'"), std::string::npos);
  EXPECT_NE(s.message().find("cpu, default, h100, megatron-deepspeed, sailor-mit, vtrain-a100"), std::string::npos);
}

// A calibration file layers over its base: the fields it sets for a GPU type change, the rest are the
// base's, and GPU types it does not name keep the base's values.
TEST(KernelModel, ACalibrationFileOverridesOnlyWhatItSets) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/h100-slow-gemm.yaml";
  {
    std::ofstream f(path);
    f << "kind: calibration\nname: h100-slow-gemm\nbase: default\n"
         "gpus:\n  - gpus: [h100]\n    source: test\n    gemm_efficiency: 0.5\n"
         "    collective_latency: [{group_size: 2, latency_us: 7}, {group_size: 16, latency_us: 70}]\n";
  }
  ASSERT_TRUE(CheckKernelCalibration(path).ok()) << CheckKernelCalibration(path).message();
  const KernelParams& h100 = KernelParamsFor(Gpu("h100"), path);
  EXPECT_DOUBLE_EQ(h100.gemm_efficiency, 0.5);
  EXPECT_DOUBLE_EQ(h100.memory_efficiency, 0.84);      // default's H100 entry
  EXPECT_DOUBLE_EQ(h100.kernel_latency_s, 4.53e-6);    // default's H100 entry
  EXPECT_DOUBLE_EQ(h100.host_overhead_s, 10e-6);       // default's generic values
  EXPECT_EQ(h100.source, "test");
  // α interpolates in log2 of the group size: 4 GPUs sit a third of the way from 2 to 16.
  EXPECT_NEAR(h100.CollectiveLatency(4), 7e-6 + (70e-6 - 7e-6) / 3, 1e-12);
  EXPECT_DOUBLE_EQ(KernelParamsFor(Gpu("a100-80gb"), path).gemm_efficiency, 0.7650);
}

TEST(KernelModel, BadCalibrationFilesNameTheFileAndTheField) {
  const std::string path = ::testing::TempDir() + "/bad-calibration.yaml";
  {
    std::ofstream f(path);
    f << "kind: calibration\nbase: nosuch\ngpus:\n  - gpus: [h1000]\n"
         "    collective_latency: [{group_size: 8, latency_us: 1}, {group_size: 4, latency_us: 2}]\n"
         "    flash_attention: [{seq_len: 4096, forward: 0.3, backward: 0.3}, {seq_len: 1024, forward: 0.2, backward: 0.2}]\n";
  }
  const Status s = CheckKernelCalibration(path);
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("--calibration: " + path + ": gpus[0].gpus[0]:"), std::string::npos) << m;
  EXPECT_NE(m.find("h1000"), std::string::npos) << m;
  EXPECT_NE(m.find(path + ": gpus[0].collective_latency[1].group_size: the entries must go up in group size"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(path + ": gpus[0].flash_attention[1].seq_len: one kernel's entries must go up in sequence length"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find(path + ": base: 'nosuch' is not a bundled calibration (cpu, default, h100, megatron-deepspeed, sailor-mit, vtrain-a100)"), std::string::npos)
      << m;
  // An efficiency above 10 breaks the schema's bounds (above 1 is allowed for nominal catalog rows).
  {
    std::ofstream f(path);
    f << "kind: calibration\ngeneric: {gemm_efficiency: 12}\n";
  }
  EXPECT_FALSE(CheckKernelCalibration(path).ok());
}

TEST(KernelModel, ComputeCostAddsAForwardForFullRecomputation) {
  auto model = LoadModel("gpt3-2.6b");
  ASSERT_TRUE(model.ok());
  proto::Training t;
  t.set_seq_len(1024);
  t.set_recompute(proto::RECOMPUTE_FULL);
  auto training = ResolveTraining(t, *model, "t");
  ASSERT_TRUE(training.ok()) << training.status().message();
  const ComputeCost cost(*model, *training);
  const GpuSpec& h100 = Gpu("h100");
  const double fwd = cost.ForwardSeconds(h100, 1, 2, 4);
  const double none = cost.BackwardSeconds(h100, 1, 2, 4, proto::RECOMPUTE_NONE);
  EXPECT_GT(none, fwd);  // a backward pass does about twice the forward's work
  EXPECT_NEAR(cost.BackwardSeconds(h100, 1, 2, 4), none + fwd, 1e-15);
  // Cached pass times are the same numbers.
  EXPECT_DOUBLE_EQ(cost.ForwardSeconds(h100, 2, 2, 4), fwd);
}

// Megatron-Core's recompute modules (training.recompute_modules, under recompute: selective). Llama 2 7B at
// micro-batch 1 x 4,096 tokens, TP 1, bf16 on an H100: adding `layernorm` to the attention core repeats the
// two norms' forward kernels in the backward, each a memory pass over 2 x 4,096 x 4,096 bf16 elements
// (read and write), and drops the two norms' outputs from what the block keeps: 2 x 2 bytes x 4,096 x 4,096.
// Leaving the attention core out removes the attention core's FLOP share (4·s²·h of the forward's FLOPs).
TEST(KernelModel, RecomputeModulesRepeatTheirKernelsAndKeepLess) {
  auto model = LoadModel("llama2-7b");
  ASSERT_TRUE(model.ok());
  const GpuSpec& h100 = Gpu("h100");
  const auto backward = [&](std::vector<proto::RecomputeModule> modules) {
    proto::Training t;
    t.set_seq_len(4096);
    t.set_recompute(proto::RECOMPUTE_SELECTIVE);
    for (auto m : modules) t.add_recompute_modules(m);
    auto training = ResolveTraining(t, *model, "t");
    EXPECT_TRUE(training.ok()) << training.status().message();
    const ComputeCost cost(*model, *training);
    return std::make_pair(cost.BackwardSeconds(h100, 1, 1, 1), cost.ForwardSeconds(h100, 1, 1, 1));
  };
  const auto [core, fwd] = backward({});
  const auto [core_and_norms, fwd2] = backward({proto::RECOMPUTE_MODULE_CORE_ATTN, proto::RECOMPUTE_MODULE_LAYERNORM});
  EXPECT_DOUBLE_EQ(fwd, fwd2);
  Kernel norm;
  norm.bytes = 2.0 * 4096 * 4096 * 2;
  const double norms = 2 * KernelGpuSeconds(norm, h100, KernelParamsFor(h100), proto::DTYPE_BF16);
  EXPECT_NEAR(core_and_norms - core, norms, 1e-9);
  const auto [norms_only, fwd3] = backward({proto::RECOMPUTE_MODULE_LAYERNORM});
  const double s = 4096, h = 4096;
  const double core_share = 4 * s * s * h / model->ForwardFlops(1, 1, 4096);
  EXPECT_NEAR(core_and_norms - norms_only, fwd3 * core_share, 1e-9);
  // Memory: the norms' outputs are not kept.
  const double keep = model->ActivationBytes(1, 1, 4096, 1, false, proto::RECOMPUTE_SELECTIVE, proto::DTYPE_BF16,
                                             proto::ATTENTION_FLASH);
  const RecomputeModules norm_modules = kCoreAttentionOnly | 1u << proto::RECOMPUTE_MODULE_LAYERNORM;
  EXPECT_DOUBLE_EQ(keep - model->ActivationBytes(1, 1, 4096, 1, false, proto::RECOMPUTE_SELECTIVE, proto::DTYPE_BF16,
                                                 proto::ATTENTION_FLASH, 0, {}, norm_modules),
                   2 * 2 * s * h);
  // Only under selective recomputation, and only modules the model has.
  proto::Training bad;
  bad.add_recompute_modules(proto::RECOMPUTE_MODULE_LAYERNORM);
  auto r = ResolveTraining(bad, *model, "t.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("t.yaml: recompute_modules: apply under recompute: selective"), std::string::npos);
  bad.set_recompute(proto::RECOMPUTE_SELECTIVE);
  bad.add_recompute_modules(proto::RECOMPUTE_MODULE_MOE_ACT);
  r = ResolveTraining(bad, *model, "t.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("moe_act on model 'llama2-7b', which has no experts"), std::string::npos);
}

// A collective's efficiency is its group's: the least of its members' (a ring runs at its slowest link),
// so every rank of a ring mixing GPU types carries the same bytes. Devices 0-1 at 0.7, 2-3 at 0.9.
TEST(CollectiveEfficiency, AGroupTakesTheLeastOfItsMembers) {
  const auto eff = [](uint32_t d) { return d < 2 ? 0.7 : 0.9; };
  const auto g = GroupCollectiveEfficiencies({{0, 1}, {2, 3}, {1, 2}, {3}, {}}, eff);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_DOUBLE_EQ(g[0], 0.7);
  EXPECT_DOUBLE_EQ(g[1], 0.9);
  EXPECT_DOUBLE_EQ(g[2], 0.7);  // mixed: the slower member's
  EXPECT_DOUBLE_EQ(g[3], 0.9);
  EXPECT_DOUBLE_EQ(g[4], 1.0);  // no member: full bandwidth
}

// Measured intra-node bus bandwidth by group size: linear in log2 of the size between entries (2 → 10 GB/s,
// 8 → 4 GB/s: 4 GPUs halfway, 7 GB/s), the nearest entry beyond them, 0 for a type without entries.
TEST(CollectiveBusBandwidth, InterpolatesInLog2OfTheGroupSize) {
  KernelParams k;
  EXPECT_EQ(k.CollectiveBusBandwidth(4), 0);
  k.collective_bus_bandwidth = {{2, 10e9}, {8, 4e9}};
  EXPECT_DOUBLE_EQ(k.CollectiveBusBandwidth(2), 10e9);
  EXPECT_NEAR(k.CollectiveBusBandwidth(4), 7e9, 1);
  EXPECT_DOUBLE_EQ(k.CollectiveBusBandwidth(16), 4e9);
  EXPECT_EQ(k.CollectiveBusBandwidth(1), 0);  // no collective
}

}  // namespace
}  // namespace hetsim::models
