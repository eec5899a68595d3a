// The lowering (models/lowering.h): the ranks of a plan in stage order, each rank's passes in its pipeline's
// schedule (1F1B, GPipe, Megatron-LM's interleaved 1F1B) followed by its gradient sync and optimizer step;
// and the text form of a lowering (FormatOp, FormatLowering) and its totals. One pass: lowering_passes.cc;
// gradient sync, ZeRO and the optimizer step: lowering_sync.cc.
#include "models/lowering.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "models/lowering_internal.h"

namespace hetsim::models {

const char* CategoryName(Category c) {
  switch (c) {
    case Category::kForward: return "forward";
    case Category::kBackward: return "backward";
    case Category::kOptimizer: return "optimizer";
    case Category::kTp: return "tp";
    case Category::kPp: return "pp";
    case Category::kDp: return "dp";
    case Category::kZero: return "zero";
    case Category::kCp: return "cp";
    case Category::kIdle: return "idle";
    case Category::kEp: return "ep";
  }
  return "?";
}

const char* CollectiveName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
  }
  return "?";
}

Result<Lowering> Lowerer::Lower() {
  HETSIM_RETURN_IF_ERROR(CheckSupported());
  out_.cpu_staged = plan_.comm().cpu_staged();
  out_.comm = plan_.comm();
  out_.tp_overlap = plan_.comm().tp_overlap();
  out_.separate_recompute = full_recompute_ && !options_.fuse_passes;
  // ZeRO-3 by units unless the plan offloads to the CPU, shards a stage by TP, or splits its pipelines'
  // layers differently (models/lowering.h).
  zero_units_ = plan_.zero_stage() >= 3 && !OffloadsOptimizer(plan_) && plan_.pipelines_size() > 0;
  for (const auto& pipe : plan_.pipelines()) {
    const auto& first = plan_.pipelines(0);
    zero_units_ = zero_units_ && pipe.stages_size() == first.stages_size();
    for (int s = 0; zero_units_ && s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      zero_units_ = TpDegree(st) == 1 && st.layer_begin() == first.stages(s).layer_begin() &&
                    st.layer_end() == first.stages(s).layer_end();
    }
  }
  out_.zero_units = zero_units_;
  out_.device_slot.assign(ctx_.cluster.num_devices(), kNone);
  for (int p = 0; p < plan_.pipelines_size(); ++p) {
    const auto& pipe = plan_.pipelines(p);
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      const uint32_t t = TpDegree(st), width = ReplicaWidth(st);
      for (int i = 0; i < st.devices_size(); ++i) {
        const uint32_t d = st.devices(i);
        out_.device_slot[d] = static_cast<uint32_t>(out_.devices.size());
        out_.devices.push_back(d);
        RankOps r;
        r.device = d;
        r.pipeline = static_cast<uint32_t>(p);
        r.stage = static_cast<uint32_t>(s);
        r.replica = static_cast<uint32_t>(i) / width;
        r.tp_rank = static_cast<uint32_t>(i) % t;
        r.tp = t;
        r.shard_rank = (static_cast<uint32_t>(i) % width) / t;
        r.shard = StageSharding(st);
        r.stage_index = static_cast<uint32_t>(i);
        {
          const auto split = MicroBatchSplit(st, pipe.micro_batch_size());
          const double seqs = r.replica < split.size() ? split[r.replica] : 0;
          r.experts = StageExperts(st, model_, tr_, plan_.comm(), seqs * (tr_.seq_len() / r.shard.ways()) / t);
        }
        r.layer_begin = st.layer_begin();
        r.layer_end = st.layer_end();
        r.num_stages = static_cast<uint32_t>(pipe.stages_size());
        r.num_micro_batches = pipe.num_micro_batches();
        out_.ranks.push_back(std::move(r));
      }
    }
  }
  out_.sync_groups = DeriveGradSyncGroups(plan_, model_);
  // Backward order: later layers first, then by chunk.
  std::stable_sort(out_.sync_groups.begin(), out_.sync_groups.end(), [](const auto& a, const auto& b) {
    // (A range's dense groups before its expert groups, so every rank syncs its parts in one order.)
    if (a.layer_begin != b.layer_begin) return a.layer_begin > b.layer_begin;
    const bool ea = a.part == GradSyncGroup::Part::kExperts, eb = b.part == GradSyncGroup::Part::kExperts;
    return ea != eb ? eb : a.chunk < b.chunk;
  });
  device_groups_.assign(ctx_.cluster.num_devices(), {});
  for (uint32_t g = 0; g < out_.sync_groups.size(); ++g) {
    for (uint32_t d : out_.sync_groups[g].devices) device_groups_[d].push_back(g);
  }
  MakeSegments();
  node_ranks_.assign(ctx_.cluster.nodes().size(), 0);
  for (uint32_t d : out_.devices) ++node_ranks_[ctx_.cluster.device(d).node];
  for (int p = 0; p < plan_.pipelines_size(); ++p) {
    const auto& pipe = plan_.pipelines(p);
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      for (uint32_t r = 0; r < DpDegree(st); ++r) {
        for (uint32_t j = 0; j < StageSharding(st).ways(); ++j) {
          for (uint32_t k = 0; k < TpDegree(st); ++k) {
            const uint32_t d = StageDevice(st, r, j, k);
            if (options_.lower_devices.empty() || (d < options_.lower_devices.size() && options_.lower_devices[d])) {
              EmitRank(p, s, r, j, k, false);
            } else {
              out_.partial = true;
            }
            if (options_.skeletons) EmitRank(p, s, r, j, k, true);
          }
        }
      }
    }
  }
  return std::move(out_);
}

Status Lowerer::CheckSupported() const {
  if (EffectiveSchedule(plan_) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B && plan_.zero_stage() >= 3) {
    return Status::Invalid("plan: zero_stage: interleaved_1f1b runs with ZeRO 0-2; use zero_stage: 2 "
                           "or the 1f1b schedule for ZeRO-3");
  }
  if (EffectiveSchedule(plan_) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B && OffloadsOptimizer(plan_)) {
    return Status::Invalid("plan: offload: CPU offload is lowered for the 1f1b and gpipe schedules; use one of "
                           "them or offload: none");
  }
  if (plan_.zero_stage() >= 3) {
    for (const auto& pipe : plan_.pipelines()) {
      if (pipe.num_micro_batches() != plan_.pipelines(0).num_micro_batches()) {
        return Status::Invalid("plan: zero_stage: ZeRO-3 gathers weights every micro-batch across pipelines, so "
                               "every pipeline needs the same num_micro_batches");
      }
    }
  }
  return Status::Ok();
}

void Lowerer::EmitRank(int p, int s, uint32_t r, uint32_t seq_shard, uint32_t k, bool skeleton) {
  const auto& pipe = plan_.pipelines(p);
  const auto& st = pipe.stages(s);
  const uint32_t device = StageDevice(st, r, seq_shard, k);
  RankOps& rank = out_.ranks[out_.device_slot[device]];
  std::vector<Op>& ops = skeleton ? rank.skeleton : rank.ops;
  // Ranks come stage by stage, and the ranks of a stage have (nearly) as many operations: room for the
  // previous rank's count saves growing the vector (and its page faults) a dozen times over.
  ops.reserve(skeleton ? last_skeleton_ops_ : last_rank_ops_);
  const int S = pipe.stages_size();
  const uint32_t m = pipe.num_micro_batches();
  const auto seqs = Ranges(st, pipe.micro_batch_size())[r];
  const auto& segments = segments_[device];
  // ZeRO-3 by units reduce-scatters inside the backward passes: no gradient stream after them.
  const bool overlap = plan_.comm().dp_overlap() && !segments.empty() && !zero_units_;

  auto forward = [&](uint16_t j) {
    if (s > 0) AddPp(ops, p, s - 1, s, device, false, r, k, true, j);
    AddZeroGathers(ops, device, j);
    AddForward(ops, device, st, r, st.layer_begin(), st.layer_end(), seqs, j);
    if (s + 1 < S) AddPp(ops, p, s, s + 1, device, true, r, k, true, j);
  };
  auto backward = [&](uint16_t j) {
    if (s + 1 < S) AddPp(ops, p, s + 1, s, device, false, r, k, false, j);
    AddZeroGathers(ops, device, j);
    if (overlap && j + 1u == m) {
      // The last backward runs segment by segment (later layers first) and hands each finished
      // segment's gradient groups (and, under CPU offload, its layers no other replica holds) to the DP
      // stream.
      std::vector<uint32_t> cuts = {st.layer_end()};
      for (const Segment& seg : segments) cuts.push_back(seg.layer_begin);
      std::sort(cuts.rbegin(), cuts.rend());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        AddLayers(ops, device, st, r, cuts[i + 1], cuts[i], seqs, false, j);
        for (const Segment& seg : segments) {
          if (seg.layer_begin == cuts[i + 1]) Signal(ops);
        }
      }
    } else {
      AddLayers(ops, device, st, r, st.layer_begin(), st.layer_end(), seqs, false, j);
    }
    if (s > 0) AddPp(ops, p, s, s - 1, device, true, r, k, false, j);
  };

  const auto schedule = EffectiveSchedule(plan_);
  if (skeleton && schedule != proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
    // One pass of each kind (LoweringOptions::skeletons).
    forward(0);
    backward(0);
    if (m > 1) backward(static_cast<uint16_t>(m - 1));
  } else if (schedule == proto::Plan::SCHEDULE_GPIPE) {
    for (uint32_t j = 0; j < m; ++j) forward(static_cast<uint16_t>(j));
    for (uint32_t j = 0; j < m; ++j) backward(static_cast<uint16_t>(j));
  } else if (schedule == proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
    EmitInterleaved(p, s, r, k, device, seqs, ops, skeleton);
  } else {
    const uint32_t warmup = std::min<uint32_t>(static_cast<uint32_t>(S - s - 1), m);
    uint32_t f = 0, b = 0;
    for (; f < warmup; ++f) forward(static_cast<uint16_t>(f));
    while (f < m) {
      forward(static_cast<uint16_t>(f++));
      backward(static_cast<uint16_t>(b++));
    }
    while (b < m) backward(static_cast<uint16_t>(b++));
  }
  Op wait;
  wait.kind = OpKind::kWaitSends;
  ops.push_back(wait);

  EmitSyncAndStep(device, st, rank, ops, overlap, skeleton);
  (skeleton ? last_skeleton_ops_ : last_rank_ops_) = ops.size();
  if (skeleton && options_.skeleton_done && !options_.skeleton_done(out_, out_.device_slot[device])) {
    std::vector<Op>().swap(ops);
  }
}

void Lowerer::EmitInterleaved(int p, int s, uint32_t r, uint32_t k, uint32_t device, std::pair<uint32_t, uint32_t> seqs,
                              std::vector<Op>& ops, bool skeleton) {
  const auto& pipe = plan_.pipelines(p);
  const auto& st = pipe.stages(s);
  const uint32_t S = static_cast<uint32_t>(pipe.stages_size());
  const uint32_t m = pipe.num_micro_batches();
  const uint32_t v = std::max<uint32_t>(1, plan_.virtual_stages());
  // The stage's model chunks as Megatron-LM places them (StageChunks).
  const std::vector<LayerRange> chunks = StageChunks(plan_, pipe, s, model_);
  const bool overlap = plan_.comm().dp_overlap() && !device_groups_[device].empty();
  // The chunk holding each of the device's gradient groups (groups are cut at every chunk boundary).
  std::vector<uint32_t> done_chunk;
  for (uint32_t g : device_groups_[device]) {
    uint32_t c = 0;
    while (c + 1 < v && !chunks[c].contains(out_.sync_groups[g].layer_begin)) ++c;
    done_chunk.push_back(c);
  }
  const int prev = s > 0 ? s - 1 : static_cast<int>(S) - 1, next = s + 1 < static_cast<int>(S) ? s + 1 : 0;
  const auto receives_forward = [&](uint32_t c) { return s > 0 || (c > 0 && S > 1); };
  const auto receives_backward = [&](uint32_t c) { return s + 1 < static_cast<int>(S) || (c + 1 < v && S > 1); };
  // Post the receives of a pass's input ahead (kPostRecv); the pass's own kRecv completes them.
  const auto post = [&](bool fwd, uint32_t c, uint16_t j) {
    if (!(fwd ? receives_forward(c) : receives_backward(c))) return;
    std::vector<Op> pp;
    AddPp(pp, p, fwd ? prev : next, s, device, false, r, k, fwd, j);
    for (Op& op : pp) {
      if (op.kind != OpKind::kRecv) continue;  // (a TP all-gather or broadcast of the pieces stays with the pass)
      op.kind = OpKind::kPostRecv;
      ops.push_back(op);
    }
  };
  auto forward = [&](uint32_t c, uint16_t j) {
    if (receives_forward(c)) AddPp(ops, p, prev, s, device, false, r, k, true, j);
    AddForward(ops, device, st, r, chunks[c].begin, chunks[c].end, seqs, j);
    if (s + 1 < static_cast<int>(S) || (c + 1 < v && S > 1)) AddPp(ops, p, s, next, device, true, r, k, true, j);
  };
  auto backward = [&](uint32_t c, uint16_t j) {
    if (receives_backward(c)) AddPp(ops, p, next, s, device, false, r, k, false, j);
    AddLayers(ops, device, st, r, chunks[c].begin, chunks[c].end, seqs, false, j);
    if (overlap && j + 1u == m) {
      for (size_t i = 0; i < done_chunk.size(); ++i) {
        if (done_chunk[i] == c) Signal(ops);
      }
    }
    if (s > 0 || (c > 0 && S > 1)) AddPp(ops, p, s, prev, device, true, r, k, false, j);
  };
  if (skeleton) {  // one pass of each kind (LoweringOptions::skeletons)
    for (uint32_t c = 0; c < v; ++c) forward(c, 0);
    for (uint32_t c = v; c-- > 0;) backward(c, 0);
    if (m > 1) {
      for (uint32_t c = v; c-- > 0;) backward(c, static_cast<uint16_t>(m - 1));
    }
    return;
  }
  const uint32_t total = m * v;
  const auto micro_batch = [&](uint32_t i) { return static_cast<uint16_t>((i / (S * v)) * S + i % S); };
  const auto chunk = [&](uint32_t i, bool fwd) {
    const uint32_t c = (i % (S * v)) / S;
    return fwd ? c : v - 1 - c;
  };
  const uint32_t warmup = std::min(total, 2 * (S - static_cast<uint32_t>(s) - 1) + (v - 1) * S);
  // Megatron-LM's overlap_p2p_comm, on for this schedule by default (--no-overlap-p2p-communication turns
  // it off; the other schedules run without it): each pass's output is sent together with the receive of
  // the next pass of the same direction (send_forward_recv_forward, send_backward_recv_backward), waited
  // for where that pass starts; the first backward's receive is posted at the end of the warm-up. In the
  // steady state the next forward's input thus arrives during this backward and the next backward's
  // gradient during the next forward, instead of each transfer starting when its pass needs it.
  const auto fwd = [&](uint32_t i) {
    forward(chunk(i, true), micro_batch(i));
    if (i + 1 < total) post(true, chunk(i + 1, true), micro_batch(i + 1));
  };
  const auto bwd = [&](uint32_t i) {
    backward(chunk(i, false), micro_batch(i));
    if (i + 1 < total) post(false, chunk(i + 1, false), micro_batch(i + 1));
  };
  uint32_t f = 0, b = 0;
  for (; f < warmup; ++f) fwd(f);
  if (warmup > 0 && warmup < total) post(false, chunk(0, false), micro_batch(0));
  while (f < total) {
    fwd(f++);
    bwd(b++);
  }
  for (; b < total; ++b) bwd(b);
}

namespace {

std::string Devices(const std::vector<uint32_t>& ds) {
  std::string s = "[";
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? "," : "") + std::to_string(ds[i]);
  return s + "]";
}

}  // namespace

const char* OpKindName(OpKind k) {
  switch (k) {
    case OpKind::kCompute: return "compute";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kPostRecv: return "post_recv";
    case OpKind::kCollective: return "collective";
    case OpKind::kSignal: return "signal";
    case OpKind::kAwait: return "await";
    case OpKind::kJoin: return "join";
    case OpKind::kWaitSends: return "wait_sends";
    case OpKind::kHostCopy: return "host_copy";
  }
  return "?";
}


Result<Lowering> LowerPlan(const proto::Plan& plan, const PlanContext& ctx, const LoweringOptions& options) {
  return Lowerer(plan, ctx, options).Lower();
}

std::string FormatOp(const Lowering& lowering, uint32_t device, const char* stream, size_t index, const Op& op) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "device %u %s %zu %s %s mb %u", device, stream, index, OpKindName(op.kind),
                CategoryName(op.category), op.micro_batch);
  std::string s = buf;
  switch (op.kind) {
    case OpKind::kCompute:
      std::snprintf(buf, sizeof(buf), " layers %u-%u seqs %u-%u%s flops %.6g params %.6g", op.layer_begin,
                    op.layer_end, op.seq_begin, op.seq_end, op.recompute ? " recompute" : "", op.flops, op.params);
      s += buf;
      if (op.host_ranks > 0) s += " on_host " + std::to_string(op.host_ranks);
      break;
    case OpKind::kHostCopy:
      std::snprintf(buf, sizeof(buf), " %s layers %u-%u bytes %.6g", op.to_host ? "d2h" : "h2d", op.layer_begin,
                    op.layer_end, op.bytes);
      s += buf;
      break;
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kPostRecv:
      std::snprintf(buf, sizeof(buf), " peer %u rows %u-%u bytes %.6g", op.peer, op.seq_begin, op.seq_end, op.bytes);
      s += buf;
      break;
    case OpKind::kCollective:
      std::snprintf(buf, sizeof(buf), " %s%s group ", CollectiveName(op.collective),
                    op.reduce == ReduceOp::kMax ? "(max)" : "");
      s += buf + Devices(lowering.groups.at(op.group));
      std::snprintf(buf, sizeof(buf), " layers %u-%u bytes %.6g", op.layer_begin, op.layer_end, op.bytes);
      s += buf;
      if (op.num_buckets > 1) s += " bucket " + std::to_string(op.bucket) + "/" + std::to_string(op.num_buckets);
      if (op.hide_share > 0) s += op.category == Category::kTp ? " behind-gemms" : " behind-compute";
      break;
    default:
      break;
  }
  return s;
}

std::string FormatLowering(const Lowering& lowering) {
  std::vector<uint32_t> order(lowering.devices.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return lowering.devices[a] < lowering.devices[b]; });
  std::string out;
  for (uint32_t i : order) {
    const auto& r = lowering.ranks[i];
    for (size_t k = 0; k < r.ops.size(); ++k) out += FormatOp(lowering, r.device, "main", k, r.ops[k]) + "\n";
    for (size_t k = 0; k < r.dp_stream.size(); ++k) out += FormatOp(lowering, r.device, "dp", k, r.dp_stream[k]) + "\n";
  }
  return out;
}

OpTotals TotalOps(const Lowering& lowering) {
  OpTotals t;
  for (const auto& r : lowering.ranks) {
    for (const auto* stream : {&r.ops, &r.dp_stream}) {
      for (const Op& op : *stream) {
        switch (op.kind) {
          case OpKind::kCompute:
            t.flops += op.flops;
            t.optimizer_params += op.params;
            if (op.host_ranks > 0) t.host_optimizer_params += op.params;
            break;
          case OpKind::kHostCopy: (op.to_host ? t.d2h_bytes : t.h2d_bytes) += op.bytes; break;
          case OpKind::kSend:
            t.send_bytes += op.bytes;
            if (op.category == Category::kCp) {
              t.cp_send_bytes += op.bytes;
              ++t.cp_sends;
            }
            break;
          case OpKind::kRecv: t.recv_bytes += op.bytes; break;
          case OpKind::kCollective: t.collective_bytes[static_cast<int>(op.category)] += op.bytes; break;
          default: break;
        }
      }
    }
  }
  return t;
}


}  // namespace hetsim::models
