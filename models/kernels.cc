#include "models/kernels.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>

#include "models/nccl.h"
#include "models/spec_io.h"
#include "models/suggest.h"

namespace hetsim::models {
namespace {

constexpr int kMaxCalibrationDepth = 8;  // base chains (bundled ones are one deep)

// A calibration by bundled name or path, parsed and checked once (models/proto/calibration.proto).
Result<const proto::Calibration*> CachedCalibration(const std::string& name_or_path) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, proto::Calibration>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(name_or_path);
  if (it != cache->end()) return &it->second;
  HETSIM_ASSIGN_OR_RETURN(proto::Calibration c, LoadKernelCalibration(name_or_path));
  proto::Calibration& slot = (*cache)[name_or_path];
  slot = std::move(c);
  return &slot;
}

// Overwrites the fields `k` sets.
void Apply(const proto::KernelCalibration& k, KernelParams* p) {
  if (!k.source().empty()) p->source = k.source();
  if (k.has_gemm_efficiency()) p->gemm_efficiency = k.gemm_efficiency();
  if (k.has_memory_efficiency()) p->memory_efficiency = k.memory_efficiency();
  if (k.has_kernel_latency_us()) p->kernel_latency_s = k.kernel_latency_us() * 1e-6;
  if (k.has_host_overhead_us()) p->host_overhead_s = k.host_overhead_us() * 1e-6;
  if (k.has_pass_overhead_ms()) p->pass_overhead_s = k.pass_overhead_ms() * 1e-3;
  if (k.has_iteration_overhead_ms()) p->iteration_overhead_s = k.iteration_overhead_ms() * 1e-3;
  if (k.has_straggler_cv()) p->straggler_cv = k.straggler_cv();
  if (k.has_sm_count()) p->sm_count = static_cast<int>(k.sm_count());
  if (k.has_link_bandwidth_gbyte_s()) p->link_bandwidth_bytes_s = k.link_bandwidth_gbyte_s() * 1e9;
  if (k.has_link_latency_us()) p->link_latency_s = k.link_latency_us() * 1e-6;
  if (k.has_collective_efficiency()) p->collective_efficiency = k.collective_efficiency();
  for (const auto& d : k.by_dtype()) {
    auto& v = p->by_dtype;
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& e) { return e.dtype == d.dtype(); });
    if (it == v.end()) it = v.insert(v.end(), KernelParams::DTypeEfficiency{d.dtype()});
    if (d.has_gemm_efficiency()) it->gemm = d.gemm_efficiency();
    if (d.has_memory_efficiency()) it->memory = d.memory_efficiency();
  }
  // Each kernel's points replace the lower layer's curve for that kernel.
  bool replaced[2] = {false, false};
  for (const auto& a : k.flash_attention()) {
    const int i = KernelParams::AttentionCurveIndex(a.kernel());
    auto& curve = p->flash_attention[i];
    if (!replaced[i]) curve = {};
    replaced[i] = true;
    curve.forward.emplace_back(a.seq_len(), a.forward());
    curve.backward.emplace_back(a.seq_len(), a.backward());
  }
  if (k.collective_latency_size() > 0) {
    p->collective_latency_s.clear();
    p->collective_bus_bandwidth.clear();
    for (const auto& c : k.collective_latency()) {
      p->collective_latency_s.emplace_back(c.group_size(), c.latency_us() * 1e-6);
      if (c.has_bus_bandwidth_gbyte_s()) p->collective_bus_bandwidth.emplace_back(c.group_size(), c.bus_bandwidth_gbyte_s() * 1e9);
    }
  }
}

// The layers of `calibration` for `gpu`: built-in defaults, base, generic, the GPU's entry.
KernelParams Build(const GpuSpec& gpu, const std::string& calibration, int depth) {
  KernelParams p;
  p.sm_count = gpu.sm_count;  // gpus.csv sm_count, from the vendors' whitepapers and datasheets
  p.source = "built-in generic defaults";
  auto c = CachedCalibration(calibration);
  HETSIM_CHECK(c.ok(), c.ok() ? "" : c.status().message());
  const proto::Calibration& cal = *c.value();
  if (!cal.base().empty() && depth < kMaxCalibrationDepth) p = Build(gpu, cal.base(), depth + 1);
  const std::string below = p.source;
  Apply(cal.generic(), &p);
  // Generic efficiencies replace whatever a base measured for this type.
  const bool generic_efficiencies = cal.generic().has_gemm_efficiency() || cal.generic().has_memory_efficiency();
  if (generic_efficiencies) p.measured = false;
  // Generic values that leave the efficiencies alone (a software stack's host costs) keep the base's
  // account of the chip and add theirs.
  if (!cal.base().empty() && !generic_efficiencies && !cal.generic().source().empty()) {
    p.source = below + "; " + cal.generic().source();
  }
  for (const auto& k : cal.gpus()) {
    for (const auto& name : k.gpus()) {
      auto g = GpuCatalog::Bundled().Find(name);
      if (g.ok() && g.value()->name == gpu.name) {
        Apply(k, &p);
        // Efficiencies of this type: measured (a dtype's own GEMM efficiency counts for that dtype only).
        if (k.has_gemm_efficiency() || k.has_memory_efficiency()) p.measured = true;
        if (k.has_measured()) {
          p.measured = k.measured();
          p.assumed = !k.measured();
        }
      }
    }
  }
  return p;
}

}  // namespace

Result<proto::Calibration> LoadKernelCalibration(const std::string& name_or_path) {
  HETSIM_ASSIGN_OR_RETURN(SpecText src, ReadSpec(SpecKind::kCalibration, name_or_path));
  proto::Calibration c;
  HETSIM_RETURN_IF_ERROR(ParseSpec(src, SpecKind::kCalibration, &c));
  ErrorList errors;
  const std::string at = src.file + ": ";
  const auto check = [&](const proto::KernelCalibration& k, const std::string& path) {
    for (int j = 0; j < k.gpus_size(); ++j) {
      auto g = GpuCatalog::Bundled().Find(k.gpus(j));
      if (!g.ok()) errors.Add(at + path + ".gpus[" + std::to_string(j) + "]: " + g.status().message());
    }
    for (int j = 1; j < k.collective_latency_size(); ++j) {
      if (k.collective_latency(j).group_size() <= k.collective_latency(j - 1).group_size()) {
        errors.Add(at + path + ".collective_latency[" + std::to_string(j) +
                   "].group_size: the entries must go up in group size");
      }
    }
    // Each kernel's points go up in length (a kernel's points may follow another's).
    uint32_t last[2] = {0, 0};
    for (int j = 0; j < k.flash_attention_size(); ++j) {
      const auto& a = k.flash_attention(j);
      const std::string field = at + path + ".flash_attention[" + std::to_string(j) + "]";
      if (a.kernel() == proto::ATTENTION_STANDARD) {
        errors.Add(field + ".kernel: standard attention has no flash curve; name flash or flash_triton");
      }
      uint32_t& before = last[KernelParams::AttentionCurveIndex(a.kernel())];
      if (a.seq_len() <= before) errors.Add(field + ".seq_len: one kernel's entries must go up in sequence length");
      before = a.seq_len();
    }
  };
  check(c.generic(), "generic");
  if (c.generic().gpus_size() > 0) errors.Add(at + "generic.gpus: the generic values apply to every GPU; name none");
  for (int i = 0; i < c.gpus_size(); ++i) {
    const std::string path = "gpus[" + std::to_string(i) + "]";
    if (c.gpus(i).gpus_size() == 0) errors.Add(at + path + ".gpus: name the GPU types these values apply to");
    check(c.gpus(i), path);
  }
  if (!c.base().empty()) {
    // The base is bundled, so a chain ends; a file cannot name itself.
    auto base = ReadSpec(SpecKind::kCalibration, c.base());
    if (!base.ok() || !base->bundled) {
      errors.Add(at + "base: '" + c.base() + "' is not a bundled calibration (" + [] {
        std::string names;
        for (const auto& k : KernelCalibrations()) names += (names.empty() ? "" : ", ") + k;
        return names;
      }() + ")");
    }
  }
  // Its measured profiles must be there and read (a path beside the calibration file, or a bundled name).
  if (!src.bundled) {
    const auto dir = std::filesystem::path(src.file).parent_path();
    for (int i = 0; i < c.profiles_size(); ++i) {
      const std::string& p = c.profiles(i);
      const bool path = p.find('/') != std::string::npos || p.ends_with(".yaml") || p.ends_with(".yml");
      const std::string ref = path && !std::filesystem::path(p).is_absolute() ? (dir / p).string() : p;
      if (auto prof = LoadProfile(ref); !prof.ok()) {
        errors.Add(at + "profiles[" + std::to_string(i) + "]: " + prof.status().message());
      }
    }
  }
  if (!errors.empty()) return errors.ToStatus();
  return c;
}

std::vector<std::string> CalibrationProfiles(const std::string& calibration) {
  std::vector<std::string> out;
  if (calibration.empty()) return out;
  auto c = CachedCalibration(calibration);
  if (!c.ok()) return out;
  const auto dir = std::filesystem::path(calibration).parent_path();
  for (const auto& p : c.value()->profiles()) {
    const bool path = p.find('/') != std::string::npos || p.ends_with(".yaml") || p.ends_with(".yml");
    out.push_back(path && !std::filesystem::path(p).is_absolute() ? (dir / p).string() : p);
  }
  return out;
}

Status CheckKernelCalibration(const std::string& calibration, const std::string& flag) {
  if (calibration.empty()) return Status::Ok();
  auto c = CachedCalibration(calibration);
  if (c.ok()) return Status::Ok();
  const auto& known = KernelCalibrations();
  const bool path = calibration.find('/') != std::string::npos || calibration.ends_with(".yaml") ||
                    calibration.ends_with(".yml");
  if (path) return Status::Invalid(flag + ": " + c.status().message());
  std::string names;
  for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
  return Status::Invalid(flag + ": unknown calibration '" + calibration + "' (bundled: " + names +
                         "; or the path of a calibration file)" + DidYouMean(calibration, known));
}

const std::vector<std::string>& SoftwareStacks() {
  static const std::vector<std::string> stacks = {"megatron-deepspeed", "megatron-lm", "nemo", "pytorch-fsdp",
                                                  "torchtitan"};
  return stacks;
}

Result<std::string> StackCalibration(const std::string& stack, const std::string& where) {
  if (stack.empty() || stack == "megatron-lm" || stack == "nemo" || stack == "pytorch-fsdp" || stack == "torchtitan") {
    return std::string("default");
  }
  if (stack == "megatron-deepspeed") return std::string("megatron-deepspeed");
  std::string names;
  for (const auto& k : SoftwareStacks()) names += (names.empty() ? "" : ", ") + k;
  return Status::Invalid(where + ": unknown software stack '" + stack + "' (known: " + names +
                         "; a calibration for every run is --calibration)" + DidYouMean(stack, SoftwareStacks()));
}

namespace {
// A value by group size from entries sorted by size: linear in log2 of the size between entries, the
// nearest entry's beyond them.
// (Group sizes, and flash attention's keys per query block.)
template <typename Key>
double BySize(const std::vector<std::pair<Key, double>>& c, double group_size) {
  if (group_size <= c.front().first) return c.front().second;
  for (size_t i = 1; i < c.size(); ++i) {
    if (group_size <= c[i].first) {
      const double x0 = std::log2(c[i - 1].first), x1 = std::log2(c[i].first), x = std::log2(group_size);
      return c[i - 1].second + (c[i].second - c[i - 1].second) * (x - x0) / (x1 - x0);
    }
  }
  return c.back().second;
}
}  // namespace

double KernelParams::CollectiveLatency(uint32_t group_size) const {
  if (group_size <= 1 || collective_latency_s.empty()) return 0;
  return BySize(collective_latency_s, group_size);
}

double KernelParams::CollectiveBusBandwidth(uint32_t group_size) const {
  if (group_size <= 1 || collective_bus_bandwidth.empty()) return 0;
  return BySize(collective_bus_bandwidth, group_size);
}

double KernelParams::FlashAttentionEfficiency(double keys, bool backward, proto::Attention kernel) const {
  const AttentionCurve* c = &flash_attention[AttentionCurveIndex(kernel)];
  if (c->forward.empty()) c = &flash_attention[0];  // no curve of its own: flash's
  const auto& curve = backward ? c->backward : c->forward;
  if (curve.empty() || keys <= 0) return 0;
  return BySize(curve, keys);
}

double KernelParams::GemmEfficiency(proto::DType dtype) const {
  for (const auto& e : by_dtype) {
    if (e.dtype == dtype && e.gemm > 0) return e.gemm;
  }
  return gemm_efficiency;
}

double KernelParams::MemoryEfficiency(proto::DType dtype) const {
  for (const auto& e : by_dtype) {
    if (e.dtype == dtype && e.memory > 0) return e.memory;
  }
  return memory_efficiency;
}

bool KernelParams::MeasuredFor(proto::DType dtype) const {
  if (assumed) return false;
  for (const auto& e : by_dtype) {
    if (e.dtype == dtype) return true;
  }
  return measured;
}

namespace {

// The network layers of `calibration` for `kind`: built-in values, base, this file's entries.
NetworkParams BuildNetwork(proto::Nic::Kind kind, const std::string& calibration, int depth) {
  NetworkParams p;
  p.source = "built-in defaults";
  auto c = CachedCalibration(calibration);
  HETSIM_CHECK(c.ok(), c.ok() ? "" : c.status().message());
  const proto::Calibration& cal = *c.value();
  if (!cal.base().empty() && depth < kMaxCalibrationDepth) p = BuildNetwork(kind, cal.base(), depth + 1);
  for (const auto& e : cal.network()) {
    if (e.nics_size() > 0 && std::find(e.nics().begin(), e.nics().end(), kind) == e.nics().end()) continue;
    if (!e.source().empty()) p.source = e.source();
    if (e.has_bus_efficiency()) p.bus_efficiency = e.bus_efficiency();
    if (e.has_net_latency_us()) p.net_latency_s = e.net_latency_us() * 1e-6;
    if (e.has_net_overhead_us()) p.net_overhead_s = e.net_overhead_us() * 1e-6;
    if (e.has_ll128()) p.ll128 = e.ll128();
  }
  return p;
}

}  // namespace

const NetworkParams& NetworkParamsFor(proto::Nic::Kind kind, const std::string& calibration) {
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<int, std::string>, NetworkParams>();
  const std::string name = calibration.empty() ? "default" : calibration;
  std::lock_guard<std::mutex> lock(mu);
  const std::pair<int, std::string> key{static_cast<int>(kind), name};
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  return (*cache)[key] = BuildNetwork(kind, name, 0);
}

const std::vector<std::string>& KernelCalibrations() {
  static const std::vector<std::string> kNames = BundledNames(SpecKind::kCalibration);
  return kNames;
}

proto::ComputeBasisReport ComputeBasisFor(const GpuSpec& gpu, const std::string& calibration, proto::DType dtype) {
  proto::ComputeBasisReport b;
  b.set_gpu(gpu.name);
  b.set_calibration(calibration.empty() ? "default" : calibration);
  const KernelParams& k = KernelParamsFor(gpu, calibration);
  b.set_source(k.source);
  b.set_measured(k.MeasuredFor(gpu.MathDType(dtype)));
  return b;
}

const KernelParams& KernelParamsFor(const GpuSpec& gpu, const std::string& calibration) {
  // The planners' searches ask for the same GPU type's values millions of times in a row: the last answer of
  // this thread is kept (the cache below never moves or drops an entry, so the reference stays valid).
  thread_local std::string last_gpu, last_calibration;
  thread_local const KernelParams* last = nullptr;
  if (last != nullptr && last_gpu == gpu.name && last_calibration == calibration) return *last;
  static std::mutex mu;
  static auto* cache = new std::map<std::pair<std::string, std::string>, KernelParams>();
  const std::string name = calibration.empty() ? "default" : calibration;
  std::lock_guard<std::mutex> lock(mu);
  const std::pair<std::string, std::string> key{gpu.name, name};
  auto it = cache->find(key);
  if (it == cache->end()) it = cache->emplace(key, Build(gpu, name, 0)).first;
  last_gpu = gpu.name;
  last_calibration = calibration;
  last = &it->second;
  return it->second;
}

namespace {

// An MoE layer's MLP part on one rank (docs/moe.md), as Megatron-Core's MoELayer runs it with the alltoall
// dispatcher and grouped GEMMs (TEGroupedMLP): the router's h x E GEMM and its top-k over the rank's
// sequence shard (bs / tp tokens), the permutation of the top_k copies of each token into expert order
// (read and write), the shared experts (a TP-split MLP beside them), then on the experts' side the tokens
// this rank receives — top_k · bs / tp · imbalance of them (the busiest rank of the EP group, every rank's
// time), times etp under expert TP, whose all-gather gave each rank its group's tokens — through the
// E / ep local experts' grouped GEMMs (one GEMM per expert of tokens / (E/ep) rows, their tiles quantised
// together in waves), the activation, and the un-permutation weighted by the routing probabilities.
// Under FP8 the grouped GEMMs run in FP8 with their inputs cast as a block linear's are.
// The quantisation kernels in front of an FP8 GEMM whose input (forward) or output gradient (backward) has
// `elements` elements, as Transformer Engine's recipes run them (proto::Fp8Recipe):
//   - delayed: one cast-transpose reading the bf16 tensor and writing its FP8 copy and FP8 transpose, its
//     amax taken in the same pass (4 bytes an element); a forward input that a TE norm writes costs nothing
//     here (the norm writes it in FP8);
//   - current: the scale needs the tensor's amax first: an amax pass reading it (2 bytes an element), then
//     the cast-transpose (4); the norm's output is quantised after the norm;
//   - blockwise: one pass finding each 1x128 tile's scale and writing the row-wise and column-wise FP8
//     copies with their fp32 scales (4 + 8/128 bytes an element); norms do not quantise;
//   - mxfp8 and nvfp4 alike, with one-byte scales per 32 FP8 (4 + 2/32) or per 16 FP4 elements (2 + 1 +
//     2/16); the norm's output is quantised after it.
// Launches: current scaling's quantizer runs three kernels (amax, the scale from it, the cast-transpose;
// Transformer Engine 2.x Float8CurrentScalingQuantizer::quantize), the others one. A grouped GEMM's input is
// split into `tensors` per-expert tensors (split_quantize), which TE quantises one by one except under delayed
// scaling (one fused multi-tensor cast-transpose; TE 2.9 cast.cpp multi_tensor_quantize_impl).
template <class Mem>
void Fp8Casts(proto::Fp8Recipe recipe, Pass pass, double elements, bool norm_fed, Mem&& mem, double tensors = 1) {
  const bool fwd = pass == Pass::kForward;
  const auto cast = [&](double bytes, double launches) {
    mem(fwd ? "fp8-cast-transpose" : "fp8-cast-transpose-grad", bytes * elements, launches);
  };
  switch (recipe) {
    case proto::FP8_RECIPE_CURRENT:
      mem(fwd ? "fp8-amax" : "fp8-amax-grad", 2 * elements, tensors);
      cast(4, 2 * tensors);
      return;
    case proto::FP8_RECIPE_BLOCKWISE:
      cast(4 + 8.0 / 128, tensors);
      return;
    case proto::FP8_RECIPE_MXFP8:  // two FP8 copies and an E8M0 scale per 32 elements of each
      cast(4 + 2.0 / 32, tensors);
      return;
    case proto::FP8_RECIPE_NVFP4:  // bf16 read, two FP4 copies, an E4M3 scale per 16 elements of each
      cast(2 + 1 + 2.0 / 16, tensors);
      return;
    default:
      if (!fwd || !norm_fed) cast(4, 1);
      return;
  }
}

// The experts' output biases where the model has linear biases (GPT-OSS), as Megatron-Core's TEGroupedMLP
// adds them (core_v0.15.0 to v0.18: megatron/core/transformer/moe/experts.py, TEGroupedMLP._apply_bias; fc1's
// bias runs in its grouped GEMM's epilogue, fc2's is returned and applied here): a Python loop over the local
// experts computing `t + b * p` on each expert's rows (the bf16 output t, the expert's bias b, the rows' fp32
// routing probabilities p, so the sum is fp32), then torch.cat of the pieces and a cast back to bf16. Bytes
// per element of the R x h output: forward, b·p written (4), the sum reading t and b·p and writing fp32
// (2 + 4 + 4), the concatenation (4 + 4), the cast (4 + 2) = 28; backward (autograd), the cast's gradient to
// fp32 (2 + 4), the split's gradient concatenated (2 + 2), and per expert t's gradient cast to bf16 (4 + 2),
// b's gradient (grad·p written and summed: 4 + 4 + 4) and p's (grad·b written and summed: 4 + 4 + 4) = 40.
// Launches: per expert 2 forward (multiply, add) and 5 backward (cast, two multiplies, two sums), plus 2.
template <class Mem>
void ExpertOutputBias(Pass pass, double rows, double h, double local, Mem&& mem) {
  if (pass == Pass::kForward) {
    mem("experts-bias", 14 * rows * h, 2 * local);
    mem("experts-bias-concat", 14 * rows * h, 2);
  } else {
    mem("experts-bias-grad", 30 * rows * h, 5 * local);
    mem("experts-bias-concat-grad", 10 * rows * h, 2);
  }
}

template <class Linear, class Gemm, class Mem>
void MoeKernels(const TransformerModel& model, Pass pass, const KernelShape& shape, double bs, Linear&& linear,
                Gemm&& gemm, Mem&& mem, std::vector<Kernel>& out) {
  const auto& spec = model.spec();
  const auto& moe = spec.moe();
  const bool fwd = pass == Pass::kForward;
  const double e = DTypeBytes(shape.dtype), h = spec.hidden_size(), t = shape.tp;
  const bool swiglu = spec.mlp() == proto::Model::MLP_SWIGLU;
  const double experts = moe.num_experts(), k = moe.top_k();
  const double ep = std::max(1u, shape.experts.ep), etp = std::max(1u, shape.experts.etp);
  const double tokens = bs / t;  // the rank's sequence shard
  // Router: logits GEMM, then softmax/sigmoid, top-k and the probabilities (fp32, a few passes over E).
  if (fwd) {
    gemm("router", tokens, experts, h);
    mem("router-topk", 4 * tokens * experts * 4);
  } else {
    gemm("router-dgrad", tokens, h, experts);
    gemm("router-wgrad", h, experts, tokens);
    mem("router-topk-grad", 3 * tokens * experts * 4);
  }
  mem(fwd ? "permute" : "permute-grad", 2 * k * tokens * h * e);
  const double shared = model.SharedExpertWidth() / t;
  if (shared > 0) {
    linear("shared-in", "shared-in-dgrad", "shared-in-wgrad", bs, (swiglu ? 2 : 1) * shared, h, true);
    mem(fwd ? "shared-activation" : "shared-activation-grad", (swiglu ? 3 : 2) * (fwd ? 1.0 : 1.5) * bs * shared * e);
    linear("shared-out", "shared-out-dgrad", "shared-out-wgrad", bs, h, shared);
  }
  const double local = std::max(1.0, experts / ep);
  const double received = k * tokens * std::max(1.0, shape.experts.imbalance) * etp;
  const double rows = received / local, fe = moe.expert_ffn_hidden_size() / etp;
  const double fc1 = (swiglu ? 2 : 1) * fe;
  const bool fp8 = shape.dtype == proto::DTYPE_FP8;
  const auto grouped = [&](const char* f, const char* dg, const char* wg, double n, double kk) {
    if (fp8) Fp8Casts(shape.fp8_recipe, pass, received * (fwd ? kk : n), /*norm_fed=*/false, mem, local);
    const size_t first = out.size();
    if (fwd) {
      gemm(f, rows, n, kk, local);
    } else {
      gemm(dg, rows, kk, n, local);
      gemm(wg, n, kk, rows, local);
    }
    for (size_t i = first; i < out.size(); ++i) {
      out[i].block_linear = true;
      out[i].fp4 = fp8 && shape.fp8_recipe == proto::FP8_RECIPE_NVFP4;
    }
  };
  grouped("experts-fc1", "experts-fc1-dgrad", "experts-fc1-wgrad", fc1, h);
  // A clamped GLU (GPT-OSS) as Megatron-Core's weighted_bias_quick_geglu_impl runs it (core_v0.15.0 to
  // v0.18, megatron/core/fusions/fused_bias_geglu.py): before the fused activation, eager ops clamp the
  // gate half and the linear half (each read and written) and torch.cat joins them again (read and written):
  // 8 element-bytes per R x fe element forward, three launches; backward, each clamp's gradient reads the
  // gradient and its input and writes the gradient (3 + 3) and the two halves' gradients are joined into
  // the fc1 output's (2 + 2): 10, two launches.
  if (moe.expert_glu_limit() > 0 && swiglu) {
    mem(fwd ? "experts-glu-clamp" : "experts-glu-clamp-grad", (fwd ? 8 : 10) * received * fe * e, fwd ? 3 : 2);
  }
  mem(fwd ? "experts-activation" : "experts-activation-grad", (swiglu ? 3 : 2) * (fwd ? 1.0 : 1.5) * received * fe * e);
  grouped("experts-fc2", "experts-fc2-dgrad", "experts-fc2-wgrad", h, fe);
  if (spec.linear_bias()) ExpertOutputBias(pass, received, h, local, mem);
  // Megatron-Core's alltoall dispatcher (MoEAlltoAllTokenDispatcher, core_v0.15.0 to v0.18:
  // megatron/core/transformer/moe/token_dispatcher.py dispatch_postprocess / combine_preprocess): with more
  // than one local expert the tokens that arrive are sorted by local expert after the all-to-all ("permutation
  // 2", Transformer Engine's moe_sort_chunks_by_index: the R x h rows read and written) and unsorted before the
  // combine (the same); backward mirrors both. Under FP8 a dropless dispatch's per-expert row counts are padded
  // to the quantisation alignment before fc1 and unpadded after fc2 (TEGroupedMLP's Fp8Padding and
  // Fp8Unpadding: a read and a write of the rows each; random counts are almost never all aligned), which
  // drop-and-pad's capacities are taken to be. The flex dispatchers (DeepEP, HybridEP) permute once, on the
  // expert side (the permute and unpermute above).
  if (shape.experts.alltoall && local > 1) {
    mem(fwd ? "experts-sort" : "experts-sort-grad", 4 * received * h * e, 2);
  }
  if (shape.experts.alltoall && shape.experts.dropless && fp8) {
    mem(fwd ? "fp8-padding" : "fp8-padding-grad", 4 * received * h * e, fwd ? 3 : 2);
  }
  mem(fwd ? "unpermute" : "unpermute-grad", (fwd ? 2 : 3) * k * tokens * h * e);
}

// The output head on one TP rank of `bs` tokens: the final norm, the vocabulary-parallel logits and the
// cross-entropy on fp32 logits (max, exp-sum, loss forward; the softmax gradient backward). Then each
// multi-token-prediction module (DeepSeek-V3 §2.2, Megatron-Core's MultiTokenPredictionLayer): the shifted
// tokens' embedding, the RMSNorms of it and of the previous depth's hidden states, their concatenation
// projected 2h -> h (column-parallel), one block like the model's last, and the shared output head again.
template <class Linear, class Mem>
void HeadKernels(const TransformerModel& model, Pass pass, const KernelShape& shape, double bs, Linear&& linear,
                 Mem&& mem, std::vector<Kernel>& out) {
  const bool fwd = pass == Pass::kForward;
  const double e = DTypeBytes(shape.dtype), h = model.spec().hidden_size(), t = shape.tp;
  const double v = model.spec().vocab_size() / t;
  const auto head = [&] {
    mem(fwd ? "final-norm" : "final-norm-grad", (fwd ? 2 : 3) * bs * h * e);
    linear("logits", "logits-dgrad", "logits-wgrad", bs, v, h);
    mem(fwd ? "cross-entropy" : "cross-entropy-grad", (fwd ? 3 : 2) * bs * v * 4);
  };
  head();
  for (uint32_t i = 0; i < model.MtpModules(); ++i) {
    mem(fwd ? "mtp-embedding" : "mtp-embedding-grad", (fwd ? 3 : 2) * bs * h * e);
    mem(fwd ? "mtp-norms" : "mtp-norms-grad", 2 * (fwd ? 2 : 3) * bs * h * e);
    linear("mtp-proj", "mtp-proj-dgrad", "mtp-proj-wgrad", bs, h / t, 2 * h);
    for (const Kernel& x : LayerKernels(model, model.MtpBlock(), pass, shape)) out.push_back(x);
    head();
  }
}

// DeepSeek-V3 §2.1.1's projections as Megatron-Core's MLASelfAttention runs them, on one TP rank of `bs` tokens:
// the down projections to the latents (replicated over TP), their RMSNorms, the up projections to the heads
// (column-parallel), RoPE on the heads' rotary part.
template <class Linear, class Mem>
void MlaProjectionKernels(const TransformerModel& model, Pass pass, const KernelShape& shape, double bs,
                          Linear&& linear, Mem&& mem) {
  const auto& spec = model.spec();
  const auto& m = spec.mla();
  const bool fwd = pass == Pass::kForward;
  const double e = DTypeBytes(shape.dtype), h = spec.hidden_size(), t = shape.tp;
  const double ql = m.q_lora_rank(), kvl = m.kv_lora_rank(), rope = m.qk_rope_head_dim();
  const double heads_all = spec.num_attention_heads();
  if (ql > 0) {
    linear("q-down", "q-down-dgrad", "q-down-wgrad", bs, ql, h, /*norm_casts_input=*/true);
    mem(fwd ? "q-latent-norm" : "q-latent-norm-grad", (fwd ? 2 : 3) * bs * ql * e);
  }
  linear("q-up", "q-up-dgrad", "q-up-wgrad", bs, model.QueryWidth() / t, ql > 0 ? ql : h);
  linear("kv-down", "kv-down-dgrad", "kv-down-wgrad", bs, kvl + rope, h, /*norm_casts_input=*/true);
  mem(fwd ? "kv-latent-norm" : "kv-latent-norm-grad", (fwd ? 2 : 3) * bs * kvl * e);
  linear("kv-up", "kv-up-dgrad", "kv-up-wgrad", bs, heads_all * (m.qk_nope_head_dim() + m.v_head_dim()) / t, kvl);
  mem(fwd ? "rope" : "rope-grad", 2 * bs * heads_all / t * rope * e);
}

}  // namespace

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
  auto mem = [&](const char* name, double bytes, double launches = 1) {
    Kernel x;
    x.name = name;
    x.bytes = bytes;
    x.launches = launches;
    k.push_back(x);
  };
  // FP8 training as Transformer Engine runs a block's linear layers (te.Linear / te.LayerNormLinear under
  // delayed scaling, every GEMM of the three in FP8): the GEMM operands are FP8 copies made by cast-transpose
  // kernels, which read the bf16 tensor once and write its FP8 copy and the FP8 transpose the other GEMM of
  // the pair needs (4 bytes of traffic per element, their amax taken in the same pass):
  //   - forward: the input of a linear that no TE norm feeds (attention-out, mlp-out); the norms before QKV
  //     and mlp-in write their output in FP8 and transposed themselves (as many bytes as the bf16 output);
  //   - backward: the output gradient of every linear, before its dgrad and wgrad GEMMs.
  // That is the delayed-scaling recipe; current and block scaling add or unfuse casts (Fp8Casts).
  // Not priced: the weights' FP8 cast (once per step: Megatron-Core passes is_first_microbatch, so later
  // micro-batches reuse it) and the amax all-reduce (a few KiB per step).
  const bool fp8_linears = shape.dtype == proto::DTYPE_FP8 && model.kind(layer) == LayerKind::kTransformer;
  // A linear layer: forward (m, n, k); backward input gradient (m, k, n) and weight gradient (n, k, m).
  auto linear = [&](const char* fwd, const char* dgrad, const char* wgrad, double m, double n, double kk,
                    bool norm_casts_input = false) {
    if (fp8_linears) {
      Fp8Casts(shape.fp8_recipe, pass, pass == Pass::kForward ? m * kk : m * n, norm_casts_input, mem);
    }
    const size_t first = k.size();
    if (pass == Pass::kForward) {
      gemm(fwd, m, n, kk);
    } else {
      gemm(dgrad, m, kk, n);
      gemm(wgrad, n, kk, m);
    }
    if (model.kind(layer) == LayerKind::kTransformer) {
      for (size_t i = first; i < k.size(); ++i) {
        k[i].block_linear = true;
        k[i].fp4 = fp8_linears && shape.fp8_recipe == proto::FP8_RECIPE_NVFP4;
      }
    }
  };
  const bool fwd = pass == Pass::kForward;
  switch (model.kind(layer)) {
    case LayerKind::kEmbedding:
      // Vocabulary-parallel lookup + position add (forward); the gradient scattered into the table.
      mem(fwd ? "embedding" : "embedding-grad", (fwd ? 3 : 2) * bs * h * e);
      return k;
    case LayerKind::kHead:
      HeadKernels(model, pass, shape, bs, linear, mem, k);
      return k;
    case LayerKind::kTransformer: break;
  }
  const double heads = spec.num_attention_heads() / t;
  const double hd = model.head_dim();
  const double qkv = model.spec().has_mla() ? 0 : (model.QueryWidth() + 2.0 * model.kv_heads() * hd) / t;
  const double ffn = spec.ffn_hidden_size() / t;
  const bool swiglu = spec.mlp() == proto::Model::MLP_SWIGLU;
  const bool standard = shape.attention == proto::ATTENTION_STANDARD;
  const double scores = b * heads * s * s;  // elements of one score matrix set

  mem(fwd ? "norm1" : "norm1-grad", (fwd ? 2 : 3) * bs * h * e);
  if (spec.has_mla()) {
    MlaProjectionKernels(model, pass, shape, bs, linear, mem);
  } else {
    linear("qkv", "qkv-dgrad", "qkv-wgrad", bs, qkv, h, /*norm_casts_input=*/true);
  }
  if (spec.qk_norm()) mem(fwd ? "qk-norm" : "qk-norm-grad", (fwd ? 2 : 3) * bs * (model.QueryWidth() + model.kv_heads() * hd) / t * e);
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
    // recomputation plus four GEMMs' worth (backward: 2.5× the forward). A sliding window (GPT-OSS) bounds
    // the keys of every query, so no causal halving applies below the window.
    Kernel x;
    x.type = Kernel::Type::kFused;
    x.name = fwd ? "flash-attention" : "flash-attention-grad";
    const double keys = model.AttentionKeys(layer, full_s);
    const double causal = spec.encoder_only() || keys < full_s ? 1.0 : 0.5;
    // Queries of this rank: the local tokens (CP), or the whole sequence after Ulysses' all-to-all with
    // heads / ulysses. Keys: the whole sequence. Load-balanced CP gives every rank the causal share
    // s_q · full_s · causal of the score matrix (Megatron-LM's 2·cp chunking). Per head, the scores take
    // the query width and the values the value width (both head_dim but under MLA).
    const double uly = shape.shard.ulysses, cp = shape.shard.cp;
    const double q_tokens = full_s / cp, att_heads = heads / uly;
    const double kv_width = spec.has_mla() ? model.QueryWidth() + model.ValueWidth() : 2.0 * model.kv_heads() * hd;
    const double att_qkv = (model.QueryWidth() + kv_width) / t / uly;
    const double widths = (model.QueryWidth() + model.ValueWidth()) / spec.num_attention_heads();
    const double flops = (fwd ? 1.0 : 2.5) * 2 * b * q_tokens * keys * att_heads * widths * causal;
    // Ring attention: one kernel per ring step, each over the rank's queries and one K/V block.
    x.flops = flops / cp;
    x.attention_keys = keys / cp;  // a ring step's K/V block (the whole sequence without CP)
    x.attention = shape.attention;
    x.backward = !fwd;
    x.bytes = (fwd ? 2 : 4) * b * q_tokens * att_qkv * e;
    for (uint32_t i = 0; i < shape.shard.cp; ++i) k.push_back(x);
    // Rescaling the partial output and log-sum-exp of each later step (fp32 read and write).
    if (fwd) {
      for (uint32_t i = 1; i < shape.shard.cp; ++i) mem("ring-attention-correction", 2 * b * q_tokens * h / t * 4);
    }
  }
  linear("attention-out", "attention-out-dgrad", "attention-out-wgrad", bs, h, model.ValueWidth() / t);
  mem(fwd ? "bias-dropout-add" : "bias-dropout-add-grad", (fwd ? 3 * e + 1 : 4 * e) * bs * h);
  mem(fwd ? "norm2" : "norm2-grad", (fwd ? 2 : 3) * bs * h * e);
  if (model.IsMoe(layer)) {
    MoeKernels(model, pass, shape, bs, linear, gemm, mem, k);
  } else {
    linear("mlp-in", "mlp-in-dgrad", "mlp-in-wgrad", bs, (swiglu ? 2 : 1) * ffn, h, /*norm_casts_input=*/true);
    mem(fwd ? "activation" : "activation-grad", (swiglu ? 3 : 2) * (fwd ? 1.0 : 1.5) * bs * ffn * e);
    linear("mlp-out", "mlp-out-dgrad", "mlp-out-wgrad", bs, h, ffn);
  }
  mem(fwd ? "bias-dropout-add" : "bias-dropout-add-grad", (fwd ? 3 * e + 1 : 4 * e) * bs * h);
  return k;
}

std::vector<Kernel> RecomputedModuleKernels(const TransformerModel& model, uint32_t layer, const KernelShape& shape,
                                            RecomputeModules modules) {
  std::vector<Kernel> out;
  if (model.kind(layer) != LayerKind::kTransformer) return out;
  const bool moe = model.IsMoe(layer);
  const auto module_of = [&](std::string_view n) {
    if (n == "norm1" || n == "norm2") return proto::RECOMPUTE_MODULE_LAYERNORM;
    if (n == "q-up" || n == "kv-up" || n == "rope") return proto::RECOMPUTE_MODULE_MLA_UP_PROJ;
    if (moe && (n == "experts-activation" || n == "experts-glu-clamp")) return proto::RECOMPUTE_MODULE_MOE_ACT;
    if (!moe && (n == "mlp-in" || n == "activation" || n == "mlp-out")) return proto::RECOMPUTE_MODULE_MLP;
    return proto::RECOMPUTE_MODULE_UNSPECIFIED;
  };
  for (const Kernel& k : LayerKernels(model, layer, Pass::kForward, shape)) {
    const auto m = module_of(k.name);
    if (m != proto::RECOMPUTE_MODULE_UNSPECIFIED && Recomputes(modules, m)) out.push_back(k);
  }
  return out;
}

double KernelGpuSeconds(const Kernel& k, const GpuSpec& gpu, const KernelParams& p, proto::DType dtype) {
  // FP8 training (Transformer Engine) runs only the blocks' linear layers in FP8: attention, the head and
  // the rest compute in bf16. The same efficiency applies at either peak: on the H100, PyTorch's BF16 and
  // FP8 GEMMs over the same shapes reach 68% and 66% of their peaks (calibration/data/gemm-dtypes-h100.csv).
  // TF32 on a part without TF32 tensor cores computes in FP32, at that dtype's fitted efficiencies.
  const proto::DType native = gpu.MathDType(dtype);
  const proto::DType math = native == proto::DTYPE_FP8 && !k.block_linear ? proto::DTYPE_BF16 : native;
  // NVFP4's GEMMs run at the FP4 rate; no FP4 GEMM has been measured, so at the FP8 efficiency.
  const double math_peak = math == proto::DTYPE_FP8 && k.fp4 ? gpu.PeakFp4Tflops() : gpu.PeakTflops(math);
  const double peak = math_peak * 1e12 * p.GemmEfficiency(math);
  const double bw = gpu.hbm_bandwidth_gbyte_s * 1e9 * p.MemoryEfficiency(native);
  const double e = DTypeBytes(dtype);
  double t = 0;
  switch (k.type) {
    case Kernel::Type::kMemory:
      t = bw > 0 ? k.bytes / bw : 0;
      break;
    case Kernel::Type::kFused: {
      // Flash attention at its measured efficiency where the calibration has a curve.
      const double eff = k.attention_keys > 0 ? p.FlashAttentionEfficiency(k.attention_keys, k.backward, k.attention) : 0;
      const double rate = eff > 0 ? gpu.PeakTflops(math) * 1e12 * eff : peak;
      t = std::max(rate > 0 ? k.flops / rate : 0, bw > 0 ? k.bytes / bw : 0);
      break;
    }
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
  return t + p.kernel_latency_s * k.launches;
}

PassTime TimeKernels(const std::vector<Kernel>& kernels, const GpuSpec& gpu, const KernelParams& p,
                     proto::DType dtype) {
  PassTime out;
  double launches = 0;
  for (const Kernel& k : kernels) {
    out.gpu_s += KernelGpuSeconds(k, gpu, p, dtype);
    launches += k.launches;
  }
  out.kernels = static_cast<size_t>(launches);
  out.host_s = p.host_overhead_s * launches;
  return out;
}

}  // namespace hetsim::models
