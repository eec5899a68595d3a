// The per-kernel compute model: each layer pass lowered to the kernels Megatron-LM launches for it, each
// kernel costed on a GPU type by a roofline with wave quantisation and fixed costs.
//
// A kernel is a GEMM (m, n, k, batch) or a memory-bound pass over `bytes` of HBM traffic. On a GPU with
// parameters P (KernelParams):
//   GEMM:    tiles = batch · ⌈m/tile_m⌉ · ⌈n/tile_n⌉, waves = ⌈tiles / sm_count⌉,
//            compute = waves · (2 · tile_m · tile_n · k) / (peak / sm_count) / P.gemm_efficiency
//            (the last wave runs as long as a full one: wave quantisation), memory = its operands' bytes
//            / (HBM bandwidth · P.memory_efficiency); gpu = max(compute, memory) + P.kernel_latency_s.
//   memory:  gpu = bytes / (HBM bandwidth · P.memory_efficiency) + P.kernel_latency_s.
//   host:    every kernel costs P.host_overhead_s of CPU time to issue (framework dispatch + launch).
// A pass (a layer's forward or backward) takes max(Σ gpu, Σ host): the host issues asynchronously, so the
// GPU waits for it only when the kernels are shorter than their issue cost (small models, high TP).
//
// The kernel lists follow Megatron-LM's GPT block (Shoeybi et al. 2019; Korthikanti et al. 2022 §4): QKV,
// attention core (standard: QKᵀ, scale-mask-softmax, dropout, AV batched GEMMs; flash: one fused kernel
// of the causal half of the score FLOPs), output projection, bias-dropout-add, two norms, MLP (GELU: 2
// GEMMs; SwiGLU: a fused gate+up GEMM and a down GEMM) and its activation. A backward GEMM is two GEMMs
// (input gradient and weight gradient). The head is the vocabulary GEMM and a vocabulary-parallel
// cross-entropy in fp32. docs/simulator.md ("Compute model") lists every kernel. Context parallelism and
// Ulysses shard the tokens (KernelShape::shard).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/gpu_catalog.h"
#include "models/proto/calibration.pb.h"
#include "models/proto/report.pb.h"
#include "models/proto/training.pb.h"
#include "models/status.h"
#include "models/transformer.h"

namespace hetsim::models {

struct KernelParams {
  std::string source;                 // where the values come from
  // An entry naming this GPU type set its efficiencies (else generic defaults); a dtype listed in
  // by_dtype is measured for that dtype (MeasuredFor), unless an entry says `measured: false` (assumed).
  bool measured = false;
  bool assumed = false;
  int sm_count = 0;                   // streaming multiprocessors; 0 = no wave quantisation
  double tile_m = 128, tile_n = 128;  // GEMM output tile of the library's kernels
  double gemm_efficiency = 0.87;      // fraction of peak a full wave of GEMM tiles reaches
  // Where a dtype reaches other fractions (calibration's by_dtype); 0 = not set for that dtype.
  struct DTypeEfficiency {
    proto::DType dtype;
    double gemm = 0, memory = 0;
  };
  std::vector<DTypeEfficiency> by_dtype;
  double memory_efficiency = 0.84;    // fraction of the HBM bandwidth memory-bound kernels reach
  double kernel_latency_s = 5e-6;     // GPU time of every kernel beyond its roofline
  double host_overhead_s = 10e-6;     // CPU time to issue one kernel
  double pass_overhead_s = 0;         // host time per micro-batch and pass on a stage (schedule, data)
  double iteration_overhead_s = 0;    // per iteration (optimizer bookkeeping, logging)
  double straggler_cv = 0;            // replicas' spread in time to the gradient sync (calibration.proto)
  // Fixed cost α of one collective call by group size (sorted by size; interpolated in log2 of the size,
  // the last value held beyond): NCCL's launch and synchronisation cost, added to the simulated transfer.
  std::vector<std::pair<uint32_t, double>> collective_latency_s = {{2, 20e-6}, {8, 30e-6}};
  // Measured intra-node link (0 / −1: the cluster's fabric applies), and the fraction of link bandwidth
  // collectives reach (calibration.proto).
  double link_bandwidth_bytes_s = 0;
  double link_latency_s = -1;
  double collective_efficiency = 1;
  // Measured bus bandwidth of an all-reduce inside one node by group size (bytes/s; calibration.proto's
  // collective_latency[].bus_bandwidth_gbyte_s); empty: the fabric's link × collective_efficiency applies.
  std::vector<std::pair<uint32_t, double>> collective_bus_bandwidth;
  // A flash kernel's forward and backward efficiency by keys per query block (calibration.proto's
  // flash_attention points of that kernel, sorted by length).
  struct AttentionCurve {
    std::vector<std::pair<double, double>> forward, backward;
  };
  // [0]: flash (empty: the GEMM efficiency); [1]: FlashAttention's Triton kernel (`attention: flash_triton`;
  // empty: flash's curve). AttentionCurveIndex picks the slot.
  AttentionCurve flash_attention[2];
  static int AttentionCurveIndex(proto::Attention kernel) { return kernel == proto::ATTENTION_FLASH_TRITON ? 1 : 0; }
  // The fraction of the dense peak flash attention (`kernel`: ATTENTION_FLASH or ATTENTION_FLASH_TRITON)
  // reaches over `keys` keys (interpolated in log2 of the length, the nearest point held beyond); 0 without a
  // curve.
  double FlashAttentionEfficiency(double keys, bool backward,
                                  proto::Attention kernel = proto::ATTENTION_FLASH) const;

  double CollectiveLatency(uint32_t group_size) const;
  // The measured intra-node bus bandwidth for `group_size` GPUs (interpolated in log2 of the size, the
  // nearest entry held beyond), or 0 when this type has none.
  double CollectiveBusBandwidth(uint32_t group_size) const;
  // gemm_efficiency, or the dtype's own where the calibration gives one.
  double GemmEfficiency(proto::DType dtype) const;
  double MemoryEfficiency(proto::DType dtype) const;
  bool MeasuredFor(proto::DType dtype) const;
};

// The parameters of a GPU type under a bundled calibration: "default" (or "") is the chip's values with a
// tuned stack's host costs; "vtrain-a100" is the whole fit to vTrain's A100 runs, host costs included
// (GPU types it does not cover get the default). models/kernels.cc says which values were fitted on
// measured runs and which are generic.
// `calibration` is a bundled name (models/catalog/calibrations/, "" = "default") or a calibration file's
// path (models/proto/calibration.proto) that CheckKernelCalibration accepted.
const KernelParams& KernelParamsFor(const GpuSpec& gpu, const std::string& calibration = "");
// What `gpu`'s compute times in `dtype` rest on under the kernel model and `calibration` ("" = "default"):
// the calibration entry's source and whether a measurement of this GPU type is behind it for the math `dtype`
// runs in (GpuSpec::MathDType). `profiled` stays false: measured layer profiles are the simulator's to add.
// The `compute basis` lines of `hetsim simulate` and `hetsim describe --gpu` print it.
proto::ComputeBasisReport ComputeBasisFor(const GpuSpec& gpu, const std::string& calibration, proto::DType dtype);
// The bundled calibrations' names.
const std::vector<std::string>& KernelCalibrations();
// Reads and checks a calibration (bundled name or path): GPU names, group-size order, base.
Result<proto::Calibration> LoadKernelCalibration(const std::string& name_or_path);
// The measured profiles a calibration brings (its `profiles`, resolved against the file's folder); empty
// for bundled calibrations without any, or an invalid one.
std::vector<std::string> CalibrationProfiles(const std::string& calibration);
// OK when `calibration` is empty, bundled or a valid calibration file; else an error naming `flag` (and
// the file and field), listing the bundled names.
Status CheckKernelCalibration(const std::string& calibration, const std::string& flag = "--calibration");

// The one rule every command picks a calibration by (docs/calibration.md "One rule"): a run's chip values
// are `default`'s for its GPU types, and its host costs are those of the software stack it runs on. The
// stacks hetsim knows and the calibration each selects:
//   megatron-lm, nemo, pytorch-fsdp, torchtitan -> "default" (a tuned stack's generic host costs; no
//     stack-level measurement bundled for them);
//   megatron-deepspeed -> "megatron-deepspeed" (its host costs fitted on vTrain's runs).
// Validation CSVs name a run's stack in a `stack` column; a plan names its stack's calibration in
// `calibration:`. `--calibration` on a command line overrides the rule for every run.
const std::vector<std::string>& SoftwareStacks();
// The calibration the rule picks for `stack` ("" = megatron-lm); an error naming `where`, the value and the
// known stacks otherwise.
Result<std::string> StackCalibration(const std::string& stack, const std::string& where = "stack");

struct Kernel {
  enum class Type : uint8_t { kGemm, kMemory, kFused };
  Type type = Type::kMemory;
  const char* name = "";
  double m = 0, n = 0, k = 0, batch = 1;  // GEMM shape (per batch entry)
  double bytes = 0;                       // HBM traffic (memory kernels; GEMMs: derived from the shape)
  double flops = 0;                       // fused kernels (flash attention): FLOPs at GEMM efficiency
  bool block_linear = false;  // a transformer block's linear layer: the GEMMs FP8 training runs in FP8
  bool fp4 = false;           // ... and under the NVFP4 recipe in FP4 (at the GPU's FP4 rate)
  // Flash attention: the keys each query block attends over (the sequence, or one K/V block per ring
  // step), which sets its efficiency where the calibration has a curve (KernelParams::flash_attention).
  double attention_keys = 0;
  proto::Attention attention = proto::ATTENTION_FLASH;  // which flash kernel (its own curve)
  bool backward = false;
  // Kernels this entry stands for (a framework loop issuing one per expert): each costs its launch
  // latency on the GPU and its issue cost on the host; `bytes` is their sum.
  double launches = 1;
};

enum class Pass : uint8_t { kForward, kBackward };

struct KernelShape {
  double micro_batch = 1;
  uint32_t seq_len = 1;
  uint32_t tp = 1;
  proto::DType dtype = proto::DTYPE_BF16;
  proto::Fp8Recipe fp8_recipe = proto::FP8_RECIPE_DELAYED;  // under dtype fp8: the casts around its GEMMs
  proto::Attention attention = proto::ATTENTION_FLASH;
  // Context parallelism / Ulysses: every token-proportional kernel sees seq_len / (cp · ulysses) tokens.
  // Ring attention (cp > 1) runs as cp flash-attention steps over the K/V blocks of the ring, whose FLOPs
  // add up to the rank's causal share 1/cp of the whole sequence's attention, plus cp − 1 memory-bound
  // corrections of the partial output (online softmax); under Ulysses attention runs on the whole sequence
  // with heads / (tp · ulysses) per rank. Flash attention only (ValidatePlanStructure).
  SequenceSharding shard;
  // An MoE layer's expert layout on this rank (ep, expert TP, the busiest rank's routing imbalance).
  ExpertSharding experts;
};

// The kernels of one pass of `layer` on one TP rank (backward: without recomputation).
std::vector<Kernel> LayerKernels(const TransformerModel& model, uint32_t layer, Pass pass, const KernelShape& shape);

// The forward kernels a selective backward of `layer` repeats for Megatron-Core's recompute modules other
// than the attention core (`layernorm`: the two norms; `moe_act`: the routed experts' activation;
// `mla_up_proj`: MLA's up projections and RoPE; `mlp`: a dense block's MLP GEMMs and activation). The
// attention core's share is ComputeCost's FLOP share, as before modules existed.
std::vector<Kernel> RecomputedModuleKernels(const TransformerModel& model, uint32_t layer, const KernelShape& shape,
                                            RecomputeModules modules);

struct PassTime {
  double gpu_s = 0;   // Σ kernel GPU time
  double host_s = 0;  // Σ issue cost
  size_t kernels = 0;
  double seconds() const { return gpu_s > host_s ? gpu_s : host_s; }
};

// GPU time of one kernel.
double KernelGpuSeconds(const Kernel& k, const GpuSpec& gpu, const KernelParams& p, proto::DType dtype);
PassTime TimeKernels(const std::vector<Kernel>& kernels, const GpuSpec& gpu, const KernelParams& p,
                     proto::DType dtype);

}  // namespace hetsim::models
