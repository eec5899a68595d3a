// hetsim-kernel-bench: times, on the executor's backends, the kernels the compute model (models/kernels.h)
// charges, and writes one CSV row per measurement with the model's prediction beside it.
//
// What it measures (each the median of --reps timed runs after warm-up, with the backend's stream timer):
// - gemm:    every distinct non-batched GEMM of models::LayerKernels for a transformer block and the head,
//            forward and backward, of each --models entry at each --tp shard, --micro-batch and --seq-len:
//            the shapes the lowering produces. A weight-gradient GEMM accumulates into an fp32 gradient
//            (beta = 1), as Megatron-LM's gradient-accumulation fusion does; the others write act dtype.
// - memory:  elementwise passes (copy, add, scale), RMSNorm forward and backward, SwiGLU and the Adam step,
//            over sizes from 64 KiB to 1 GiB of traffic: the slope is the reached HBM bandwidth, the
//            intercept the per-kernel latency.
// - attention: the backend's causal attention (standard: scores materialised) forward and backward at
//            each model's per-TP-rank head count.
// - launch:  2,000 back-to-back one-element kernels: GPU time per kernel (the floor of kernel latency) and
//            host issue time per kernel (what the model calls host_overhead_s for a bare launch).
// - sync:    a one-element kernel and the read-back of its value, host wall time per round trip: what a
//            dropless MoE dispatcher's device-to-host synchronisation costs the host beyond the GPU's work
//            (the model has no such term yet: its column is 0).
// - moe-gemm, moe-permute: each --moe-models entry's MoE block on one rank of each --ep group (expert TP 1,
//            TP 1, micro-batch 1, the first --seq-len; force-balanced top-k routing, as Megatron-Bridge's
//            benchmarks run): the expert GEMMs of the forward and backward as Transformer Engine's grouped
//            linear issues them, one GEMM per local expert (here in sequence on one stream; TE spreads them over
//            its cuBLAS streams), and the token permutation and weighted un-permutation (gather and scatter-add
//            of rows; the executor's kernels take host-side index lists, so the time includes their upload).
//            The model column is the batched kernel the lowering prices (its launches included).
// The model column is models::KernelGpuSeconds with --calibration's parameters for --gpu: the fit
// (calibration/) compares the two.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <boost/program_options.hpp>

#include "executor/backend.h"
#include "executor/cpu_backend.h"
#include "executor/rank_kinds.h"
#if HETSIM_EXECUTOR_CUDA
#include "executor/cuda_backend.h"
#endif
#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/spec_io.h"

namespace {

using hetsim::executor::Backend;
using hetsim::executor::Buffer;
using hetsim::executor::DType;
namespace hm = hetsim::models;
namespace po = boost::program_options;

using hm::SplitList;

struct Timing {
  double median_s = 0, min_s = 0;
  int reps = 0;
};

// Runs `op` warmup times untimed, then `reps` times between stream marks (so the GPU time of each run is
// read without host gaps), and returns the median and the minimum.
template <typename Op>
Timing TimeOp(Backend* be, int reps, Op op) {
  for (int i = 0; i < 3; ++i) op();
  be->Synchronize();
  be->ClearMarks();
  std::vector<Backend::Mark> marks;
  marks.push_back(be->Record());
  for (int i = 0; i < reps; ++i) {
    op();
    marks.push_back(be->Record());
  }
  be->Synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(be->Elapsed(marks[i], marks[i + 1]));
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), reps};
}

// Repetitions that keep a measurement near `budget_s` of GPU time, between 3 and max_reps.
int RepsFor(double estimate_s, int max_reps, double budget_s = 0.05) {
  if (estimate_s <= 0) return max_reps;
  return std::clamp(static_cast<int>(budget_s / estimate_s), 3, max_reps);
}

// Fills `t` with seeded normal values (std 0.02, like initial weights): tensor cores draw less power, and so
// hold higher clocks, on constant data, which would overstate GEMM throughput by about 10%.
void RandomFill(Backend* be, hetsim::executor::Tensor t, uint64_t id) {
  if (t.dtype == DType::kF32) {
    be->InitParam(t, 7, id, 0, 0.02f);
    return;
  }
  Buffer tmp(be, t.rows, t.cols, DType::kF32);
  be->InitParam(tmp.t(), 7, id, 0, 0.02f);
  be->Copy(t, tmp.t());
}

struct Row {
  std::string kind, name, model;
  int tp = 0;
  double micro_batch = 0;
  int seq_len = 0;
  std::string pass;
  double m = 0, n = 0, k = 0, batch = 1, bytes = 0, flops = 0;
  Timing measured;
  double model_s = 0;
  int ep = 0;  // MoE rows: the EP degree of the block (expert TP 1)
};

void WriteRow(std::ostream& out, const Row& r) {
  out << r.kind << ',' << r.name << ',' << r.model << ',' << r.tp << ',' << r.micro_batch << ',' << r.seq_len << ','
      << r.pass << ',' << r.m << ',' << r.n << ',' << r.k << ',' << r.batch << ',' << r.bytes << ',' << r.flops << ','
      << r.measured.median_s << ',' << r.measured.min_s << ',' << r.measured.reps << ',' << r.model_s << ',' << r.ep
      << '\n';
  out.flush();
}

// What every measurement below shares: the backend, the GPU and calibration of the prediction column, the
// activation dtype, the repetitions and the CSV.
struct Bench {
  Backend* be;
  const hm::GpuSpec* gpu;
  const hm::KernelParams* params;
  DType act;
  hetsim::proto::DType proto_dtype;
  int max_reps;
  bool quick;
  std::ostream* out;
};

// One-element kernels back to back: the per-kernel time on the device and the host's issue time.
void BenchLaunch(const Bench& x) {
  Backend* be = x.be;
  Buffer one(be, 1, 1, DType::kF32);
  be->Fill(one.t(), 1.0f);
  const int launches = x.quick ? 200 : 2000;
  be->Synchronize();
  be->ClearMarks();
  const auto m0 = be->Record();
  const auto h0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) be->Scale(one.t(), 1.0f);
  const auto h1 = std::chrono::steady_clock::now();
  const auto m1 = be->Record();
  be->Synchronize();
  Row r;
  r.kind = "launch", r.name = "scale-1";
  r.measured = {be->Elapsed(m0, m1) / launches, be->Elapsed(m0, m1) / launches, launches};
  r.model_s = x.params->kernel_latency_s;
  WriteRow(*x.out, r);
  Row h = r;
  h.name = "host-issue";
  const double host = std::chrono::duration<double>(h1 - h0).count() / launches;
  h.measured = {host, host, launches};
  h.model_s = x.params->host_overhead_s;
  WriteRow(*x.out, h);
  // A kernel then the read-back of its one value: the host waits for the GPU and the copy.
  const int trips = x.quick ? 20 : 200;
  std::vector<double> wall;
  float value = 0;
  for (int i = 0; i < trips + 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    be->Scale(one.t(), 1.0f);
    be->Download(&value, one.t());
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= 3) wall.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(wall.begin(), wall.end());
  Row y;
  y.kind = "sync", y.name = "d2h-round-trip";
  y.measured = {wall[wall.size() / 2], wall.front(), trips};
  WriteRow(*x.out, y);
}

// Memory-bound kernels over a sweep of sizes.
void BenchMemory(const Bench& x) {
  Backend* be = x.be;
  const DType act = x.act;
  const int64_t max_elems = x.quick ? (int64_t{1} << 24) : (int64_t{1} << 28);
  const size_t e = hetsim::executor::DTypeSize(act);
  for (int64_t n = int64_t{1} << 15; n <= max_elems; n *= 4) {
    const int64_t cols = 4096, rows = std::max<int64_t>(1, n / cols);
    const int64_t numel = rows * cols;
    Buffer bx(be, rows, cols, act), y(be, rows, cols, act), z(be, rows, cols, act);
    RandomFill(be, bx.t(), 8), RandomFill(be, y.t(), 9), be->Fill(z.t(), 0.0f);
    Buffer w(be, 1, cols, act), gw(be, 1, cols, DType::kF32), inv(be, rows, 1, DType::kF32);
    be->Fill(w.t(), 1.0f), be->Fill(gw.t(), 0.0f);
    auto mem_row = [&](const char* name, double bytes, auto op) {
      Row r;
      r.kind = "memory", r.name = name, r.bytes = bytes, r.m = static_cast<double>(numel);
      const double bw = x.gpu->hbm_bandwidth_gbyte_s * 1e9;
      r.measured = TimeOp(be, RepsFor(bw > 0 ? bytes / bw : 1e-3, x.max_reps), op);
      hm::Kernel k;
      k.bytes = bytes;
      r.model_s = hm::KernelGpuSeconds(k, *x.gpu, *x.params, x.proto_dtype);
      WriteRow(*x.out, r);
    };
    const double b = static_cast<double>(numel) * e;
    mem_row("copy", 2 * b, [&] { be->Copy(z.t(), bx.t()); });
    mem_row("add", 3 * b, [&] { be->Add(z.t(), bx.t()); });
    mem_row("scale", 2 * b, [&] { be->Scale(z.t(), 1.0f); });
    mem_row("rmsnorm", 2 * b, [&] { be->RmsNorm(z.t(), inv.t(), bx.t(), w.t(), 1e-5f); });
    mem_row("rmsnorm-grad", 3 * b, [&] { be->RmsNormBackward(z.t(), gw.t(), bx.t(), w.t(), inv.t(), y.t(), false); });
    if (numel % 2 == 0) {
      const auto half_x = hetsim::executor::Tensor{bx.t().data, rows, cols / 2, act};
      const auto half_y = hetsim::executor::Tensor{y.t().data, rows, cols / 2, act};
      const auto half_z = hetsim::executor::Tensor{z.t().data, rows, cols / 2, act};
      mem_row("swiglu", 1.5 * b, [&] { be->SwiGlu(half_z, half_x, half_y); });
    }
    if (numel <= (int64_t{1} << 26)) {
      // Adam over numel fp32 parameters: reads param, grad, m, v; writes param, m, v and the act copy.
      Buffer p(be, rows, cols, DType::kF32), g(be, rows, cols, DType::kF32), m1(be, rows, cols, DType::kF32),
          v1(be, rows, cols, DType::kF32);
      be->Fill(p.t(), 0.1f), be->Fill(g.t(), 0.01f), be->Fill(m1.t(), 0.0f), be->Fill(v1.t(), 0.0f);
      hetsim::executor::AdamParams ap;
      const auto copy_t = be->separate_weight_copy() ? z.t() : hetsim::executor::Tensor{};
      mem_row("adam", static_cast<double>(numel) * (7 * 4 + (copy_t.empty() ? 0 : e)),
              [&] { be->Adam(p.t(), g.t(), m1.t(), v1.t(), copy_t, ap); });
    }
  }
}

// A weight-gradient GEMM (accumulates into an fp32 gradient).
bool IsWgrad(const hm::Kernel& k) { return std::string(k.name).find("wgrad") != std::string::npos; }

// The operands of one GEMM of kernel `k`'s shape in the executor's layouts, `copies` of each stacked by rows
// (one per expert of a grouped GEMM), randomly filled:
//   forward  y[T,N] = x[T,K]·W[N,K]ᵀ          (trans_b)
//   dgrad    dx[T,K'] = dy[T,N']·W[N',K']      (M=T, N=K', K=N')
//   wgrad    dW[N',K'] += dy[T,N']ᵀ·x[T,K']     (trans_a; fp32 accumulation)
struct GemmOperands {
  Buffer a, b, c;
  bool ta = false, tb = false, wgrad = false;
  int64_t a_rows = 0, b_rows = 0, c_rows = 0;
  GemmOperands(Backend* be, DType act, const hm::Kernel& k, bool forward, int64_t copies = 1) : wgrad(IsWgrad(k)) {
    const auto M = static_cast<int64_t>(k.m), N = static_cast<int64_t>(k.n), K = static_cast<int64_t>(k.k);
    DType c_dtype = act;
    if (wgrad) {
      a_rows = K, b_rows = K, ta = true, c_dtype = DType::kF32;
      a = Buffer(be, copies * K, M, act), b = Buffer(be, copies * K, N, act);
    } else if (forward) {
      a_rows = M, b_rows = N, tb = true;
      a = Buffer(be, copies * M, K, act), b = Buffer(be, copies * N, K, act);
    } else {
      a_rows = M, b_rows = K;
      a = Buffer(be, copies * M, K, act), b = Buffer(be, copies * K, N, act);
    }
    c_rows = M;
    c = Buffer(be, copies * M, N, c_dtype);
    RandomFill(be, a.t(), 1), RandomFill(be, b.t(), 2), be->Fill(c.t(), 0.0f);
  }
  // The GEMM of copy i.
  void Run(Backend* be, int64_t i) const {
    be->Gemm(c.t().Rows(i * c_rows, (i + 1) * c_rows), a.t().Rows(i * a_rows, (i + 1) * a_rows), ta,
             b.t().Rows(i * b_rows, (i + 1) * b_rows), tb, 1.0f, wgrad ? 1.0f : 0.0f);
  }
};

// The GEMMs of `layer`'s passes at `shape`, in the executor's layouts, each shape and layout once (`seen`).
void BenchGemms(const Bench& x, const hm::TransformerModel& model, const std::string& model_name, uint32_t layer,
                const hm::KernelShape& shape, std::set<std::tuple<double, double, double, int>>* seen) {
  Backend* be = x.be;
  const DType act = x.act;
  for (auto pass : {hm::Pass::kForward, hm::Pass::kBackward}) {
    for (const auto& k : hm::LayerKernels(model, layer, pass, shape)) {
      if (k.type != hm::Kernel::Type::kGemm || k.batch != 1) continue;
      if (!seen->insert({k.m, k.n, k.k, IsWgrad(k) ? 2 : static_cast<int>(pass)}).second) continue;
      const GemmOperands g(be, act, k, pass == hm::Pass::kForward);
      Row r;
      r.kind = "gemm", r.name = k.name, r.model = model_name, r.tp = static_cast<int>(shape.tp);
      r.micro_batch = shape.micro_batch, r.seq_len = static_cast<int>(shape.seq_len);
      r.pass = pass == hm::Pass::kForward ? "fwd" : "bwd";
      r.m = k.m, r.n = k.n, r.k = k.k, r.flops = 2 * k.m * k.n * k.k;
      r.model_s = hm::KernelGpuSeconds(k, *x.gpu, *x.params, x.proto_dtype);
      r.measured = TimeOp(be, RepsFor(r.model_s, x.max_reps), [&] { g.Run(be, 0); });
      WriteRow(*x.out, r);
    }
  }
}

// The attention core of `block` at this rank's heads (standard attention: scores materialised), forward
// and backward; skipped when the probabilities would take more than 16 GB.
void BenchAttention(const Bench& x, const hm::TransformerModel& model, const std::string& model_name, uint32_t block,
                    const hm::KernelShape& shape) {
  Backend* be = x.be;
  const DType act = x.act;
  const auto& spec = model.spec();
  const uint32_t tp = shape.tp;
  hetsim::executor::AttentionShape as;
  as.batch = static_cast<int64_t>(shape.micro_batch), as.seq = shape.seq_len;
  as.q_heads = spec.num_attention_heads() / tp;
  const uint32_t kv = spec.num_kv_heads() ? spec.num_kv_heads() : spec.num_attention_heads();
  as.kv_heads = std::max<int64_t>(1, kv / tp);
  as.head_dim = spec.hidden_size() / spec.num_attention_heads();
  as.scale = 1.0f / std::sqrt(static_cast<float>(as.head_dim));
  const int64_t tokens = as.batch * as.seq;
  const double probs_bytes = static_cast<double>(as.probs_numel()) * hetsim::executor::DTypeSize(act);
  if (probs_bytes > 16e9) return;
  Buffer q(be, tokens, as.q_heads * as.head_dim, act), kk(be, tokens, as.kv_heads * as.head_dim, act),
      v(be, tokens, as.kv_heads * as.head_dim, act), o(be, tokens, as.q_heads * as.head_dim, act),
      probs(be, 1, as.probs_numel(), act), dq(be, tokens, as.q_heads * as.head_dim, act),
      dk(be, tokens, as.kv_heads * as.head_dim, act), dv(be, tokens, as.kv_heads * as.head_dim, act);
  RandomFill(be, q.t(), 3), RandomFill(be, kk.t(), 4), RandomFill(be, v.t(), 5);
  RandomFill(be, o.t(), 6);
  double model_fwd = 0, model_bwd = 0;
  for (auto pass : {hm::Pass::kForward, hm::Pass::kBackward}) {
    for (const auto& k : hm::LayerKernels(model, block, pass, shape)) {
      const std::string n = k.name;
      const bool core = (k.type == hm::Kernel::Type::kGemm && k.batch != 1) || n.find("softmax") != std::string::npos;
      if (core) (pass == hm::Pass::kForward ? model_fwd : model_bwd) += hm::KernelGpuSeconds(k, *x.gpu, *x.params, x.proto_dtype);
    }
  }
  Row r;
  r.kind = "attention", r.model = model_name, r.tp = static_cast<int>(tp);
  r.micro_batch = shape.micro_batch, r.seq_len = static_cast<int>(shape.seq_len);
  r.m = static_cast<double>(as.seq), r.n = static_cast<double>(as.seq), r.k = static_cast<double>(as.head_dim);
  r.batch = static_cast<double>(as.batch * as.q_heads);
  r.flops = 4.0 * r.batch * r.m * r.n * r.k;
  r.name = "attention-core", r.pass = "fwd", r.model_s = model_fwd;
  r.measured = TimeOp(be, RepsFor(model_fwd, x.max_reps), [&] {
    be->Attention(o.t(), probs.t(), q.t(), kk.t(), v.t(), as);
  });
  WriteRow(*x.out, r);
  r.name = "attention-core-grad", r.pass = "bwd", r.model_s = model_bwd, r.flops *= 2;
  r.measured = TimeOp(be, RepsFor(model_bwd, x.max_reps), [&] {
    be->AttentionBackward(dq.t(), dk.t(), dv.t(), o.t(), q.t(), kk.t(), v.t(), probs.t(), as);
  });
  WriteRow(*x.out, r);
}

// The MoE block of `model` on one rank of an EP group of `ep` (expert TP 1, TP 1, micro-batch 1, `seq` tokens,
// every token to top_k distinct experts in turn: force-balanced routing): its expert GEMMs, one GEMM per local
// expert in sequence, and its permutation and weighted un-permutation of the rank's top_k copies of each token.
void BenchMoe(const Bench& x, const hm::TransformerModel& model, const std::string& model_name, uint32_t ep,
              uint32_t seq) {
  Backend* be = x.be;
  const auto& moe = model.spec().moe();
  uint32_t layer = 0;
  while (layer < model.num_layers() && !model.IsMoe(layer)) ++layer;
  if (layer == model.num_layers() || moe.num_experts() % ep != 0) return;
  hm::KernelShape shape;
  shape.micro_batch = 1, shape.seq_len = seq, shape.tp = 1, shape.dtype = x.proto_dtype;
  shape.experts.ep = ep;
  std::cerr << "hetsim-kernel-bench: " << model_name << " MoE block, ep=" << ep << " seq=" << seq << "\n";
  const auto row_for = [&](const char* kind, const hm::Kernel& k, const char* pass) {
    Row r;
    r.kind = kind, r.name = k.name, r.model = model_name, r.tp = 1, r.ep = static_cast<int>(ep);
    r.micro_batch = 1, r.seq_len = static_cast<int>(seq), r.pass = pass;
    r.m = k.m, r.n = k.n, r.k = k.k, r.batch = k.batch, r.bytes = k.bytes;
    r.flops = 2 * k.m * k.n * k.k * k.batch;
    r.model_s = hm::KernelGpuSeconds(k, *x.gpu, *x.params, x.proto_dtype);
    return r;
  };
  for (auto pass : {hm::Pass::kForward, hm::Pass::kBackward}) {
    const char* pass_name = pass == hm::Pass::kForward ? "fwd" : "bwd";
    for (const auto& k : hm::LayerKernels(model, layer, pass, shape)) {
      if (k.type != hm::Kernel::Type::kGemm || std::string(k.name).rfind("experts-", 0) != 0) continue;
      const double bytes = (k.m * k.k + k.k * k.n + k.m * k.n) * k.batch * hetsim::executor::DTypeSize(x.act);
      if (bytes > 8e9) continue;
      const auto copies = static_cast<int64_t>(k.batch);
      const GemmOperands g(be, x.act, k, pass == hm::Pass::kForward, copies);
      Row r = row_for("moe-gemm", k, pass_name);
      r.measured = TimeOp(be, RepsFor(r.model_s, x.max_reps), [&] {
        for (int64_t i = 0; i < copies; ++i) g.Run(be, i);
      });
      WriteRow(*x.out, r);
    }
  }
  // The permutation: the rank's copies ordered by expert (copy j of token t goes to expert (t·top_k + j) mod E).
  const int64_t tokens = seq, top_k = moe.top_k(), experts = moe.num_experts(), h = model.spec().hidden_size();
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) by_expert[static_cast<size_t>((t * top_k + j) % experts)].push_back(t);
  }
  std::vector<int64_t> index;
  for (const auto& list : by_expert) index.insert(index.end(), list.begin(), list.end());
  const std::vector<float> probs(index.size(), 1.0f / static_cast<float>(top_k));
  Buffer in(be, tokens, h, x.act), copies(be, static_cast<int64_t>(index.size()), h, x.act), out(be, tokens, h, x.act);
  RandomFill(be, in.t(), 10), RandomFill(be, copies.t(), 11), be->Fill(out.t(), 0.0f);
  for (const auto& k : hm::LayerKernels(model, layer, hm::Pass::kForward, shape)) {
    const std::string n = k.name;
    if (n != "permute" && n != "unpermute") continue;
    Row r = row_for("moe-permute", k, "fwd");
    r.m = static_cast<double>(index.size()), r.n = static_cast<double>(h), r.flops = 0;
    if (n == "permute") {
      r.measured = TimeOp(be, RepsFor(r.model_s, x.max_reps), [&] { be->GatherRows(copies.t(), in.t(), index, {}); });
    } else {
      r.measured = TimeOp(be, RepsFor(r.model_s, x.max_reps),
                          [&] { be->ScatterAddRows(out.t(), copies.t(), index, probs); });
    }
    WriteRow(*x.out, r);
  }
}

// BenchMoe for each model of `models` (comma-separated) at each EP degree of `eps`; 2 when one is not an MoE model.
int BenchMoeModels(const Bench& x, const std::string& models, const std::string& eps, uint32_t seq) {
  for (const auto& model_name : SplitList(models)) {
    auto model = hm::LoadModel(model_name);
    if (!model.ok() || !model->spec().has_moe()) {
      std::cerr << "hetsim-kernel-bench: --moe-models: "
                << (model.ok() ? "'" + model_name + "' has no MoE layers" : model.status().message()) << "\n";
      return 2;
    }
    for (const auto& ep_s : SplitList(eps)) {
      BenchMoe(x, model.value(), model_name, static_cast<uint32_t>(std::stoul(ep_s)), seq);
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  std::string backend_name = "cpu", gpu_name, calibration, models_arg, tp_arg, mbs_arg, seq_arg, out_path, dtype_arg;
  std::string moe_models_arg, ep_arg;
  int max_reps = 20;
  bool quick = false;
  po::options_description desc(
      "hetsim-kernel-bench: times the compute model's kernels on an executor backend and writes a CSV\n"
      "(kind,name,model,tp,micro_batch,seq_len,pass,m,n,k,batch,bytes,flops,median_s,min_s,reps,model_s,ep)\n"
      "Options");
  desc.add_options()("help,h", "this help")
      ("backend", po::value(&backend_name)->default_value("cpu"), "cpu | cuda")
      ("gpu", po::value(&gpu_name)->default_value(""), "catalog GPU whose model prediction is written (default: h100 on cuda, cpu on cpu)")
      ("calibration", po::value(&calibration)->default_value("default"), "bundled kernel calibration of the prediction column")
      ("models", po::value(&models_arg)->default_value("llama2-7b,llama2-13b,llama2-70b"), "comma-separated bundled models or files (empty: none)")
      ("tp", po::value(&tp_arg)->default_value("1,2,4,8"), "TP shard degrees")
      ("micro-batch", po::value(&mbs_arg)->default_value("1,2,4"), "micro-batch sizes")
      ("seq-len", po::value(&seq_arg)->default_value("4096"), "sequence lengths")
      ("moe-models", po::value(&moe_models_arg)->default_value(""),
       "comma-separated MoE models whose MoE block is timed (expert GEMMs, permutation), e.g. qwen3-30b-a3b")
      ("ep", po::value(&ep_arg)->default_value("8,16,32,64"), "EP degrees of the MoE blocks (those dividing the experts)")
      ("dtype", po::value(&dtype_arg)->default_value(""), "bf16 | fp32 (default: bf16 on cuda, fp32 on cpu)")
      ("reps", po::value(&max_reps)->default_value(20), "timed repetitions per measurement (at most)")
      ("quick", po::bool_switch(&quick), "a small set (one model, TP 1 and 8, micro-batch 1, short memory sweep)")
      ("out,o", po::value(&out_path), "CSV output (default: standard output)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "hetsim-kernel-bench: " << e.what() << "\n" << desc;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  const bool cuda = backend_name == "cuda";
  if (!cuda && backend_name != "cpu") {
    std::cerr << "hetsim-kernel-bench: --backend must be cpu or cuda, not '" << backend_name << "'\n";
    return 2;
  }
  if (dtype_arg.empty()) dtype_arg = cuda ? "bf16" : "fp32";
  if (dtype_arg != "bf16" && dtype_arg != "fp32") {
    std::cerr << "hetsim-kernel-bench: --dtype must be bf16 or fp32\n";
    return 2;
  }
  const DType act = dtype_arg == "bf16" ? DType::kBF16 : DType::kF32;
  const auto proto_dtype = act == DType::kBF16 ? hetsim::proto::DTYPE_BF16 : hetsim::proto::DTYPE_FP32;
  if (gpu_name.empty()) gpu_name = cuda ? "h100" : "cpu";
  auto gpu = hm::GpuCatalog::Bundled().Find(gpu_name);
  if (!gpu.ok()) {
    std::cerr << "hetsim-kernel-bench: --gpu: " << gpu.status().message() << "\n";
    return 2;
  }
  const hm::KernelParams& params = hm::KernelParamsFor(*gpu.value(), calibration);
  if (quick) {  // a short set; the lists given on the command line stay
    if (!SplitList(models_arg).empty()) models_arg = SplitList(models_arg).front();
    if (vm["tp"].defaulted()) tp_arg = "1,8";
    if (vm["micro-batch"].defaulted()) mbs_arg = "1";
    if (vm["seq-len"].defaulted()) seq_arg = SplitList(seq_arg).front();
    max_reps = std::min(max_reps, 5);
  }

  std::unique_ptr<Backend> be;
#if HETSIM_EXECUTOR_CUDA
  if (cuda) be = hetsim::executor::MakeCudaBackend(0, act);
#endif
  if (cuda && !be) {
    std::cerr << "hetsim-kernel-bench: this build has no CUDA backend (configure with HETSIM_EXECUTOR_CUDA=ON)\n";
    return 2;
  }
  if (!be) {
    // A CPU-worker type slower than this machine (cpu-slow) is timed at its own speed (executor/rank_kinds.h).
    double slowdown = 1;
    if (hetsim::executor::IsCpuWorker(*gpu.value())) {
      auto s = hetsim::executor::CpuWorkerSlowdown(*gpu.value());
      if (!s.ok()) {
        std::cerr << "hetsim-kernel-bench: --gpu " << s.status().message() << "\n";
        return 2;
      }
      slowdown = *s;
    }
    be = hetsim::executor::MakeCpuBackend(slowdown);
  }

  std::ofstream file;
  if (!out_path.empty()) {
    file.open(out_path);
    if (!file) {
      std::cerr << "hetsim-kernel-bench: cannot write '" << out_path << "'\n";
      return 1;
    }
  }
  std::ostream& out = out_path.empty() ? std::cout : file;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string command;
  // The program's name without its folder: a data file records how it was made, not where.
  command = std::filesystem::path(argv[0]).filename().string();
  for (int i = 1; i < argc; ++i) command += " " + std::string(argv[i]);
  out << "# hetsim-kernel-bench backend=" << be->name() << " dtype=" << dtype_arg << " gpu=" << gpu_name
      << " calibration=" << calibration << " date=" << date << "\n# command: " << command << "\n";
  out << "kind,name,model,tp,micro_batch,seq_len,pass,m,n,k,batch,bytes,flops,median_s,min_s,reps,model_s,ep\n";

  const Bench bench{be.get(), gpu.value(), &params, act, proto_dtype, max_reps, quick, &out};
  BenchLaunch(bench);
  BenchMemory(bench);

  // The GEMMs and attention of each model's block and head.
  std::set<std::tuple<double, double, double, int>> seen;  // shape and layout (forward, dgrad, wgrad)
  for (const auto& model_name : SplitList(models_arg)) {
    auto model = hm::LoadModel(model_name);
    if (!model.ok()) {
      std::cerr << "hetsim-kernel-bench: --models: " << model.status().message() << "\n";
      return 2;
    }
    uint32_t block = 0, head = 0;
    for (uint32_t l = 0; l < model->num_layers(); ++l) {
      if (model->kind(l) == hm::LayerKind::kTransformer && block == 0) block = l;
      if (model->kind(l) == hm::LayerKind::kHead) head = l;
    }
    for (const auto& tp_s : SplitList(tp_arg)) {
      const uint32_t tp = static_cast<uint32_t>(std::stoul(tp_s));
      if (model->spec().num_attention_heads() % tp != 0) continue;
      for (const auto& seq_s : SplitList(seq_arg)) {
        for (const auto& mbs_s : SplitList(mbs_arg)) {
          hm::KernelShape shape;
          shape.micro_batch = std::stod(mbs_s), shape.seq_len = static_cast<uint32_t>(std::stoul(seq_s));
          shape.tp = tp, shape.dtype = proto_dtype, shape.attention = hetsim::proto::ATTENTION_STANDARD;
          std::cerr << "hetsim-kernel-bench: " << model_name << " tp=" << tp << " mbs=" << mbs_s << " seq=" << seq_s
                    << "\n";
          for (uint32_t layer : {block, head}) BenchGemms(bench, model.value(), model_name, layer, shape, &seen);
          BenchAttention(bench, model.value(), model_name, block, shape);
        }
      }
    }
  }
  return BenchMoeModels(bench, moe_models_arg, ep_arg, static_cast<uint32_t>(std::stoul(SplitList(seq_arg).front())));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "hetsim-kernel-bench: " << e.what() << "\n";
    return 1;
  }
}
