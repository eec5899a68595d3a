#pragma once
// What a lowered operation costs before it meets the network: one price for the simulator (sim/program.cc)
// and for the analytic player (planners/lowering_cost.cc), so that the two cannot drift apart.
//
// - PassSeconds: one compute operation of a rank (a forward, backward or recomputation pass over a layer
//   range), from a per-layer price the caller supplies (the simulator's compute model, or a planner's view
//   of it), with the host's per-micro-batch overhead charged once per pass.
// - HideBehindGemms: the backward's asynchronous TP collectives and ZeRO-3's prefetched unit calls
//   (Op::hide_share) moved behind the compute they run during, on either consumer's operation type.
// - OverlapTpChunks: comm.tp_overlap's rewrite of a rank's program (Transformer Engine's userbuffers), on
//   either consumer's operation type.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "models/lowering.h"
#include "models/transformer.h"

namespace hetsim::models {

// TP communication overlap (comm.tp_overlap), as Transformer Engine's userbuffers pipeline it: a pass's
// compute C and the M of TP collectives that follow it run in kTpOverlapChunks chunks, chunk i's
// communication during chunk i+1's compute, so the pair takes C/k + max((k−1)·C/k, (k−1)·M/k) + M/k:
// the first chunk's compute and the last chunk's communication are exposed.
inline constexpr double kTpOverlapChunks = 4;

// The seconds of compute operation `op` (not the optimizer step) of rank `r`:
//   layer(l, forward, recompute) — one layer's pass at r's TP degree and sequence sharding for op's
//   sequences: forward (forward = true; also a recomputation's re-run forward, recompute unspecified), or
//   backward with `recompute` (what the backward includes);
//   pass_overhead_s — the host's per-micro-batch work of a pass on this stage, charged with the operation
//   that holds the stage's first layer (not with a recomputation);
//   separate_recompute — the lowering has separate recomputation operations, so a backward operation is
//   the backward alone; otherwise it includes `backward_recompute`.
// Transformer blocks of one class (TransformerModel::BlockClass: dense or MoE, full or windowed attention)
// cost the same, so one of each class is priced and the rest counted.
template <class LayerSeconds>
double PassSeconds(const Op& op, const RankOps& r, const TransformerModel& model, double pass_overhead_s,
                   bool separate_recompute, proto::Recompute backward_recompute, LayerSeconds&& layer) {
  double seconds = 0;
  if (!op.recompute && op.layer_begin == r.layer_begin && op.layer_end > op.layer_begin) {
    seconds += pass_overhead_s;
  }
  const auto one = [&](uint32_t l) -> double {
    if (op.category == Category::kForward || op.recompute) return layer(l, true, proto::RECOMPUTE_UNSPECIFIED);
    return layer(l, false, separate_recompute ? proto::RECOMPUTE_NONE : backward_recompute);
  };
  uint32_t blocks[4] = {0, 0, 0, 0}, first_block[4] = {0, 0, 0, 0};
  for (uint32_t l = op.layer_begin; l < op.layer_end; ++l) {
    if (model.kind(l) == LayerKind::kTransformer) {
      const uint32_t c = model.BlockClass(l) & 3u;
      if (blocks[c]++ == 0) first_block[c] = l;
    } else {
      seconds += one(l);
    }
  }
  for (int c = 0; c < 4; ++c) {
    if (blocks[c] > 0) seconds += blocks[c] * one(first_block[c]);
  }
  return seconds;
}

// The TP collectives a backward pass launches asynchronously before its column-parallel GEMMs (Op::hide_share
// > 0; models/lowering.h LayerTpCollectives), and ZeRO-3's prefetched unit gathers and reduce-scatters
// behind a forward or backward unit (models/lowering.h "ZeRO-3 and FSDP by units"): a compute operation of C
// seconds followed, before the next
// compute, by such collectives whose shares add up to s becomes
//   start compute s·C; those collectives; wait for the compute; compute (1 − s)·C; the other operations
// so the pair takes max(s·C, their time) + (1 − s)·C. The shares are of FLOPs (the GEMMs' against the
// operation's), the compute model's time split alike. Collectives whose kernels hold a share σ of the SMs
// (Op::sm_share: comm.ep_overlap's dispatcher) slow the compute beside them: the started compute carries
// the largest σ of those it hides, and its join prices the pair as OverlappedSeconds. `OpT` has kind,
// category, seconds, micro_batch, hide_share and sm_share; `compute`, `async` and `join` are as in
// OverlapTpChunks. Rewrites `*program` in place, and
// leaves it untouched (no copy: the planners play many programs) when no operation hides.
// Compute of `compute_s` seconds at the whole GPU's speed and communication of `comm_s` started together,
// the communication's kernels holding a share `sm_share` of the SMs while they run: the compute runs at
// 1 − sm_share of its speed until the communication ends, so the pair takes
//   max(comm_s, compute_s + comm_s · sm_share)
// (the compute ends after the communication unless compute_s ≤ comm_s · (1 − sm_share)).
inline double OverlappedSeconds(double compute_s, double comm_s, double sm_share) {
  return std::max(comm_s, compute_s + comm_s * sm_share);
}

// What the join of an overlapped pair adds to the later of the two ends when the communication's kernels
// hold SMs (OverlappedSeconds against max(compute, communication)); 0 without.
inline double SmContentionSeconds(double compute_s, double comm_s, double sm_share) {
  if (sm_share <= 0) return 0;
  return std::max(0.0, OverlappedSeconds(compute_s, comm_s, sm_share) - std::max(compute_s, comm_s));
}

template <class OpT, class KindT>
void HideBehindGemms(std::vector<OpT>* program, KindT compute, KindT async, KindT join) {
  if (std::none_of(program->begin(), program->end(), [](const OpT& op) { return op.hide_share > 0; })) return;
  const std::vector<OpT>& ops = *program;
  std::vector<OpT> out;
  out.reserve(ops.size() + ops.size() / 4);
  std::vector<size_t> hidden;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpT& op = ops[i];
    size_t j = i + 1;
    hidden.clear();
    double share = 0;
    if (op.kind == compute && (op.category == Category::kBackward || op.category == Category::kForward)) {
      for (; j < ops.size() && ops[j].kind != compute && ops[j].kind != async && ops[j].kind != join; ++j) {
        if (ops[j].hide_share > 0 && ops[j].micro_batch == op.micro_batch) {
          hidden.push_back(j);
          share += ops[j].hide_share;
        }
      }
    }
    if (hidden.empty()) {
      out.push_back(op);
      continue;
    }
    OpT started = op;
    started.kind = async;
    started.seconds = op.seconds * std::min(1.0, share);
    started.sm_share = 0;
    for (size_t c : hidden) started.sm_share = std::max(started.sm_share, ops[c].sm_share);
    out.push_back(started);
    for (size_t c : hidden) out.push_back(ops[c]);
    OpT wait = op;
    wait.kind = join;
    wait.seconds = 0;
    out.push_back(wait);
    OpT rest = op;
    rest.seconds = op.seconds - started.seconds;
    out.push_back(rest);
    for (size_t c = i + 1, h = 0; c < j; ++c) {
      if (h < hidden.size() && hidden[h] == c) {
        ++h;
        continue;
      }
      out.push_back(ops[c]);
    }
    i = j - 1;
  }
  *program = std::move(out);
}

// Compute operations that take no time (a layer a measured profile prices at zero) are kept while the
// programs are built, so that the calls the lowering puts behind them (HideBehindGemms) stay behind them
// rather than slipping behind an earlier compute; then this drops them.
template <class OpT, class KindT>
void DropIdleCompute(std::vector<OpT>* program, KindT compute) {
  program->erase(std::remove_if(program->begin(), program->end(),
                                [&](const OpT& op) { return op.kind == compute && op.seconds <= 0; }),
                 program->end());
}

// comm.tp_overlap: every forward/backward compute operation followed by TP collectives of its micro-batch
// becomes
//   compute C/k; start compute (k−1)·C/k; the collectives with (k−1)/k of their bytes; wait for the compute;
//   the collectives with the last 1/k of their bytes and no fixed cost
// (k = kTpOverlapChunks; the collectives' fixed costs stay with their first part). `OpT` has kind,
// category, seconds, bytes and micro_batch; `compute`, `async` and `join` are its kinds for a compute
// operation, a compute started without waiting, and the wait for it; is_tp(op) tells a TP collective.
template <class OpT, class KindT, class IsTp>
std::vector<OpT> OverlapTpChunks(const std::vector<OpT>& ops, KindT compute, KindT async, KindT join, IsTp&& is_tp) {
  std::vector<OpT> out;
  out.reserve(ops.size() + ops.size() / 2);
  const double k = kTpOverlapChunks;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpT& op = ops[i];
    const bool pass = op.kind == compute && (op.category == Category::kForward || op.category == Category::kBackward);
    size_t j = i + 1;
    while (pass && j < ops.size() && is_tp(ops[j]) && ops[j].micro_batch == op.micro_batch) ++j;
    if (!pass || j == i + 1) {
      out.push_back(op);
      continue;
    }
    OpT first = op;
    first.seconds = op.seconds / k;
    out.push_back(first);
    OpT started = op;
    started.kind = async;
    started.seconds = op.seconds - first.seconds;
    out.push_back(started);
    for (size_t c = i + 1; c < j; ++c) {
      OpT during = ops[c];
      during.bytes = ops[c].bytes * (k - 1) / k;
      out.push_back(during);
    }
    OpT wait = op;
    wait.kind = join;
    wait.seconds = 0;
    out.push_back(wait);
    for (size_t c = i + 1; c < j; ++c) {
      OpT tail = ops[c];
      tail.bytes = ops[c].bytes / k;
      tail.seconds = 0;
      out.push_back(tail);
    }
    i = j - 1;
  }
  return out;
}

}  // namespace hetsim::models
