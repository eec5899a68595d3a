#include "models/kernels.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

namespace hetsim::models {
namespace {

// Streaming multiprocessors (NVIDIA) or compute units (AMD, per device as the framework sees it), from
// the vendors' architecture whitepapers and product pages.
int SmCount(const std::string& gpu) {
  static const std::map<std::string, int> kSms = {
      {"p100", 56},      {"v100", 80},       {"v100-32gb", 80},  {"v100-pcie", 80},   {"t4", 40},
      {"a10", 72},       {"a100-40gb", 108}, {"a100-80gb", 108}, {"a100-40gb-pcie", 108},
      {"a100-80gb-pcie", 108}, {"a800", 108}, {"h100", 132},     {"h100-pcie", 114},  {"h800", 132},
      {"h20", 78},       {"h200", 132},      {"gh200", 132},     {"rtx3080ti", 80},   {"rtx3090", 82},
      {"rtx4090", 128},  {"l40s", 142},      {"mi250x", 110},    {"mi300x", 304},     {"rtx2080", 46},
      {"titan-rtx", 72}};
  auto it = kSms.find(gpu);
  return it == kSms.end() ? 0 : it->second;
}

bool IsA100Family(const std::string& gpu) { return gpu.rfind("a100", 0) == 0 || gpu == "a800"; }

KernelParams Generic(const GpuSpec& gpu) {
  KernelParams p;
  p.sm_count = SmCount(gpu.name);
  p.source =
      "generic defaults (the A100 fit's efficiencies; host and collective costs of a tuned PyTorch + NCCL stack), "
      "not measured on this GPU type";
  if (gpu.name == "cpu") {
    // The executor's CPU backend: Eigen kernels, MPI collectives; no launch queue to speak of.
    p.sm_count = 0;
    p.kernel_latency_s = 0;
    p.host_overhead_s = 0;
    p.collective_latency_s = {{2, 0}};
    p.source = "cpu: no fixed per-kernel costs until calibrated (issue 15)";
  }
  return p;
}

// The A100's chip: GEMM and HBM efficiencies fitted by tools/fit/fit_kernel_model.py on the development
// half (even rows) of vTrain's 1,440 measured Megatron-DeepSpeed runs on one DGX A100-SXM4-80GB
// (experiments/validation/vtrain_a100_single_node.csv); host and collective costs generic, since they
// belong to the software stack, not the chip (the calibration "vtrain-a100" has that run's).
KernelParams A100(const GpuSpec& gpu) {
  KernelParams p = Generic(gpu);
  p.gemm_efficiency = 0.9201;
  p.memory_efficiency = 0.7606;
  p.source = "A100 efficiencies fitted on vTrain's runs (development half, tools/fit/fit_kernel_model.py); "
             "generic host and collective costs";
  return p;
}

// The whole fit, stack included: vTrain's Megatron-DeepSpeed (PyTorch eager, fp16 with loss scaling) issues
// kernels slowly (about 61 µs each) and pays about 1.2 ms of host work per micro-batch and pass, so its
// small models run at a few percent of peak; its NCCL calls cost 23 µs (2 GPUs), under 1 µs (4) and
// 157 µs (8) beyond their transfers.
KernelParams VtrainA100(const GpuSpec& gpu) {
  KernelParams p = A100(gpu);
  p.kernel_latency_s = 22.63e-6;
  p.host_overhead_s = 60.86e-6;
  p.pass_overhead_s = 1.194e-3;
  p.iteration_overhead_s = 0;
  p.collective_latency_s = {{2, 22.5e-6}, {4, 0.3e-6}, {8, 157.3e-6}};
  p.source = "fitted on vTrain's A100 runs (development half), tools/fit/fit_kernel_model.py";
  return p;
}

// Hopper SXM parts (the H100's chip: 132 SMs, the same tensor cores and HBM3 generation).
bool IsHopperSxm(const std::string& gpu) {
  return gpu == "h100" || gpu == "h800" || gpu == "h200" || gpu == "gh200";
}

// Measured on one H100 80GB HBM3 (SXM5, driver 580.159, CUDA 13.0, cuBLAS 13) with hetsim-kernel-bench
// (calibration/gpu_session.sh, 2026-11-22; data: calibration/data/kernels-h100.csv, fit:
// tools/fit/fit_microbench.py):
// - GEMM: 1,155 distinct BF16 GEMMs of Llama-2 7B/13B/70B and Llama-3 8B/70B blocks and heads at TP 1-8,
//   micro-batch 1-4, sequence 2,048-8,192, on random data: 72.2% of the 989 TFLOPS dense peak per full wave of
//   128x128 tiles (median 686 TFLOP/s, best 811), per-GEMM error of the fit 7.5% MAPE.
// - HBM: a vectorised copy reaches 90% of 3.35 TB/s and the fused Adam step 78% (traffic >= 32 MB); the
//   memory efficiency is their mean, for the vectorised fused kernels a tuned stack runs.
// - Latency: one-element kernels back to back complete one per 4.53 µs, the host issuing them at the same
//   rate, so the GPU-side latency is at most that; taken as the kernel latency.
KernelParams H100(const GpuSpec& gpu) {
  KernelParams p = Generic(gpu);
  p.gemm_efficiency = 0.7226;
  p.memory_efficiency = 0.84;
  p.kernel_latency_s = 4.53e-6;
  p.source = "H100 GEMM/HBM efficiencies and kernel latency measured with hetsim-kernel-bench "
             "(calibration/data/kernels-h100.csv); generic host and collective costs";
  return p;
}

}  // namespace

Status CheckKernelCalibration(const std::string& calibration, const std::string& flag) {
  const auto& known = KernelCalibrations();
  if (calibration.empty() || std::find(known.begin(), known.end(), calibration) != known.end()) return Status::Ok();
  std::string names;
  for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
  return Status::Invalid(flag + ": unknown calibration '" + calibration + "' (bundled: " + names + ")");
}

double KernelParams::CollectiveLatency(uint32_t group_size) const {
  if (group_size <= 1 || collective_latency_s.empty()) return 0;
  const auto& c = collective_latency_s;
  if (group_size <= c.front().first) return c.front().second;
  for (size_t i = 1; i < c.size(); ++i) {
    if (group_size <= c[i].first) {
      const double x0 = std::log2(c[i - 1].first), x1 = std::log2(c[i].first), x = std::log2(group_size);
      return c[i - 1].second + (c[i].second - c[i - 1].second) * (x - x0) / (x1 - x0);
    }
  }
  return c.back().second;
}

const std::vector<std::string>& KernelCalibrations() {
  static const std::vector<std::string> kNames = {"default", "vtrain-a100"};
  return kNames;
}

const KernelParams& KernelParamsFor(const GpuSpec& gpu, const std::string& calibration) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, KernelParams>* cache =
      new std::map<std::pair<std::string, std::string>, KernelParams>();
  std::lock_guard<std::mutex> lock(mu);
  const std::pair<std::string, std::string> key{gpu.name, calibration};
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  KernelParams p;
  if (IsA100Family(gpu.name)) {
    p = calibration == "vtrain-a100" ? VtrainA100(gpu) : A100(gpu);
  } else if (IsHopperSxm(gpu.name)) {
    p = H100(gpu);
  } else {
    p = Generic(gpu);
  }
  return (*cache)[key] = p;
}

std::vector<Kernel> LayerKernels(const TransformerModel& model, uint32_t layer, Pass pass, const KernelShape& shape) {
  const auto& spec = model.spec();
  const double e = DTypeBytes(shape.dtype);
  const double t = shape.tp;
  // s: the tokens of each sequence on this rank (CP and Ulysses shard the sequence); full_s: the whole
  // sequence, which attention still spans.
  const double full_s = shape.seq_len, ways = shape.shard.ways();
  const double b = shape.micro_batch, s = full_s / ways, bs = b * s;
  const double h = spec.hidden_size();
  std::vector<Kernel> k;
  auto gemm = [&](const char* name, double m, double n, double kk, double batch = 1) {
    Kernel x;
    x.type = Kernel::Type::kGemm;
    x.name = name;
    x.m = m, x.n = n, x.k = kk, x.batch = batch;
    k.push_back(x);
  };
  auto mem = [&](const char* name, double bytes) {
    Kernel x;
    x.name = name;
    x.bytes = bytes;
    k.push_back(x);
  };
  // A linear layer: forward (m, n, k); backward input gradient (m, k, n) and weight gradient (n, k, m).
  auto linear = [&](const char* fwd, const char* dgrad, const char* wgrad, double m, double n, double kk) {
    const size_t first = k.size();
    if (pass == Pass::kForward) {
      gemm(fwd, m, n, kk);
    } else {
      gemm(dgrad, m, kk, n);
      gemm(wgrad, n, kk, m);
    }
    if (model.kind(layer) == LayerKind::kTransformer) {
      for (size_t i = first; i < k.size(); ++i) k[i].block_linear = true;
    }
  };
  const bool fwd = pass == Pass::kForward;
  switch (model.kind(layer)) {
    case LayerKind::kEmbedding:
      // Vocabulary-parallel lookup + position add (forward); the gradient scattered into the table.
      mem(fwd ? "embedding" : "embedding-grad", (fwd ? 3 : 2) * bs * h * e);
      return k;
    case LayerKind::kHead: {
      const double v = spec.vocab_size() / t;
      mem(fwd ? "final-norm" : "final-norm-grad", (fwd ? 2 : 3) * bs * h * e);
      linear("logits", "logits-dgrad", "logits-wgrad", bs, v, h);
      // Vocabulary-parallel cross-entropy on fp32 logits: max, exp-sum, loss (forward); softmax
      // gradient (backward).
      mem(fwd ? "cross-entropy" : "cross-entropy-grad", (fwd ? 3 : 2) * bs * v * 4);
      return k;
    }
    case LayerKind::kTransformer: break;
  }
  const double heads = spec.num_attention_heads() / t;
  const double hd = model.head_dim();
  const double qkv = (spec.num_attention_heads() + 2.0 * model.kv_heads()) * hd / t;
  const double ffn = spec.ffn_hidden_size() / t;
  const bool swiglu = spec.mlp() == proto::Model::MLP_SWIGLU;
  const bool standard = shape.attention == proto::ATTENTION_STANDARD;
  const double scores = b * heads * s * s;  // elements of one score matrix set

  mem(fwd ? "norm1" : "norm1-grad", (fwd ? 2 : 3) * bs * h * e);
  linear("qkv", "qkv-dgrad", "qkv-wgrad", bs, qkv, h);
  if (standard) {
    mem(fwd ? "qkv-layout" : "qkv-layout-grad", (fwd ? 2 : 3) * bs * h / t * e);
    if (fwd) {
      gemm("scores", s, s, hd, b * heads);
      mem("scale-mask-softmax", 2 * scores * e);
      mem("attention-dropout", scores * (2 * e + 1));
      gemm("context", s, hd, s, b * heads);
    } else {
      gemm("context-dgrad", s, s, hd, b * heads);    // d(probs) = d(ctx) · Vᵀ
      gemm("context-wgrad", s, hd, s, b * heads);    // dV = probsᵀ · d(ctx)
      gemm("scores-dgrad-q", s, hd, s, b * heads);   // dQ = d(scores) · K
      gemm("scores-dgrad-k", hd, s, s, b * heads);   // dK = d(scores)ᵀ · Q
      mem("softmax-grad", 3 * scores * e);
      mem("attention-dropout-grad", scores * (2 * e + 1));
    }
    mem(fwd ? "context-layout" : "context-layout-grad", (fwd ? 2 : 3) * bs * h / t * e);
  } else {
    // Flash attention: scores never reach HBM; the causal half of QKᵀ and AV (forward), and their
    // recomputation plus four GEMMs' worth (backward: 2.5× the forward).
    Kernel x;
    x.type = Kernel::Type::kFused;
    x.name = fwd ? "flash-attention" : "flash-attention-grad";
    const double causal = spec.encoder_only() ? 1.0 : 0.5;
    // Queries of this rank: the local tokens (CP), or the whole sequence after Ulysses' all-to-all with
    // heads / ulysses. Keys: the whole sequence. Load-balanced CP gives every rank the causal share
    // s_q · full_s · causal of the score matrix (Megatron-LM's 2·cp chunking).
    const double uly = shape.shard.ulysses, cp = shape.shard.cp;
    const double q_tokens = full_s / cp, att_heads = heads / uly, att_qkv = qkv / uly;
    const double flops = (fwd ? 1.0 : 2.5) * 4 * b * q_tokens * full_s * att_heads * hd * causal;
    // Ring attention: one kernel per ring step, each over the rank's queries and one K/V block.
    x.flops = flops / cp;
    x.bytes = (fwd ? 2 : 4) * b * q_tokens * att_qkv * e;
    for (uint32_t i = 0; i < shape.shard.cp; ++i) k.push_back(x);
    // Rescaling the partial output and log-sum-exp of each later step (fp32 read and write).
    if (fwd) {
      for (uint32_t i = 1; i < shape.shard.cp; ++i) mem("ring-attention-correction", 2 * b * q_tokens * h / t * 4);
    }
  }
  linear("attention-out", "attention-out-dgrad", "attention-out-wgrad", bs, h, h / t);
  mem(fwd ? "bias-dropout-add" : "bias-dropout-add-grad", (fwd ? 3 * e + 1 : 4 * e) * bs * h);
  mem(fwd ? "norm2" : "norm2-grad", (fwd ? 2 : 3) * bs * h * e);
  linear("mlp-in", "mlp-in-dgrad", "mlp-in-wgrad", bs, (swiglu ? 2 : 1) * ffn, h);
  mem(fwd ? "activation" : "activation-grad", (swiglu ? 3 : 2) * (fwd ? 1.0 : 1.5) * bs * ffn * e);
  linear("mlp-out", "mlp-out-dgrad", "mlp-out-wgrad", bs, h, ffn);
  mem(fwd ? "bias-dropout-add" : "bias-dropout-add-grad", (fwd ? 3 * e + 1 : 4 * e) * bs * h);
  return k;
}

double KernelGpuSeconds(const Kernel& k, const GpuSpec& gpu, const KernelParams& p, proto::DType dtype) {
  // FP8 training (Transformer Engine) runs only the blocks' linear layers in FP8: attention, the head and
  // the rest compute in bf16. The same efficiency applies at either peak: on the H100, PyTorch's BF16 and
  // FP8 GEMMs over the same shapes reach 68% and 66% of their peaks (calibration/data/gemm-dtypes-h100.csv).
  const proto::DType math = dtype == proto::DTYPE_FP8 && !k.block_linear ? proto::DTYPE_BF16 : dtype;
  const double peak = gpu.PeakTflops(math) * 1e12 * p.gemm_efficiency;
  const double bw = gpu.hbm_bandwidth_gbyte_s * 1e9 * p.memory_efficiency;
  const double e = DTypeBytes(dtype);
  double t = 0;
  switch (k.type) {
    case Kernel::Type::kMemory:
      t = bw > 0 ? k.bytes / bw : 0;
      break;
    case Kernel::Type::kFused:
      t = std::max(peak > 0 ? k.flops / peak : 0, bw > 0 ? k.bytes / bw : 0);
      break;
    case Kernel::Type::kGemm: {
      if (k.m <= 0 || k.n <= 0 || k.k <= 0 || k.batch <= 0) return 0;
      double compute = 0;
      if (peak > 0) {
        if (p.sm_count > 0) {
          const double tiles = k.batch * std::ceil(k.m / p.tile_m) * std::ceil(k.n / p.tile_n);
          const double waves = std::ceil(tiles / p.sm_count);
          compute = waves * 2 * p.tile_m * p.tile_n * k.k / (peak / p.sm_count);
        } else {
          compute = 2 * k.m * k.n * k.k * k.batch / peak;
        }
      }
      const double memory = bw > 0 ? e * k.batch * (k.m * k.k + k.k * k.n + k.m * k.n) / bw : 0;
      t = std::max(compute, memory);
      break;
    }
  }
  return t + p.kernel_latency_s;
}

PassTime TimeKernels(const std::vector<Kernel>& kernels, const GpuSpec& gpu, const KernelParams& p,
                     proto::DType dtype) {
  PassTime out;
  for (const Kernel& k : kernels) out.gpu_s += KernelGpuSeconds(k, gpu, p, dtype);
  out.kernels = kernels.size();
  out.host_s = p.host_overhead_s * static_cast<double>(kernels.size());
  return out;
}

}  // namespace hetsim::models
