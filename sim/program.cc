#include "sim/program.h"

#include <algorithm>
#include <map>
#include <cmath>
#include <numeric>
#include <random>

namespace hetsim::sim {

const char* CategoryName(Category c) {
  switch (c) {
    case Category::kForward: return "forward";
    case Category::kBackward: return "backward";
    case Category::kOptimizer: return "optimizer";
    case Category::kTp: return "tp";
    case Category::kPp: return "pp";
    case Category::kDp: return "dp";
    case Category::kZero: return "zero";
    case Category::kIdle: return "idle";
  }
  return "?";
}

namespace {

using models::DpDegree;
using models::TpDegree;

class Builder {
 public:
  Builder(const proto::Plan& plan, const models::PlanContext& ctx, const models::ComputeCost& cost,
          const ProgramOptions& options)
      : plan_(plan), ctx_(ctx), cost_(cost), fid_(options.fidelity), options_(options), model_(ctx.model),
        tr_(ctx.training) {}

  Result<Programs> Build() {
    HETSIM_RETURN_IF_ERROR(CheckSupported());
    out_.fidelity = fid_;
    out_.cpu_staged = plan_.comm().cpu_staged();
    out_.device_slot.assign(ctx_.cluster.num_devices(), UINT32_MAX);
    for (int p = 0; p < plan_.pipelines_size(); ++p) {
      for (int s = 0; s < plan_.pipelines(p).stages_size(); ++s) {
        for (uint32_t d : plan_.pipelines(p).stages(s).devices()) {
          out_.device_slot[d] = static_cast<uint32_t>(out_.devices.size());
          out_.devices.push_back(d);
          DeviceProgram dp;
          dp.pipeline = static_cast<uint32_t>(p);
          dp.stage = static_cast<uint32_t>(s);
          out_.programs.push_back(std::move(dp));
        }
      }
    }
    sync_groups_ = models::DeriveGradSyncGroups(plan_, model_);
    // Backward order: later layers first, then by chunk.
    std::stable_sort(sync_groups_.begin(), sync_groups_.end(), [](const auto& a, const auto& b) {
      return a.layer_begin != b.layer_begin ? a.layer_begin > b.layer_begin : a.chunk < b.chunk;
    });
    device_groups_.assign(ctx_.cluster.num_devices(), {});
    for (uint32_t g = 0; g < sync_groups_.size(); ++g) {
      for (uint32_t d : sync_groups_[g].devices) device_groups_[d].push_back(g);
    }
    for (int p = 0; p < plan_.pipelines_size(); ++p) {
      const auto& pipe = plan_.pipelines(p);
      for (int s = 0; s < pipe.stages_size(); ++s) {
        const auto& st = pipe.stages(s);
        for (uint32_t r = 0; r < DpDegree(st); ++r) {
          for (uint32_t k = 0; k < TpDegree(st); ++k) EmitDevice(p, s, r, k);
        }
      }
    }
    if (options_.compute_jitter_cv > 0) Jitter();
    return std::move(out_);
  }

 private:
  Status CheckSupported() const {
    if (models::EffectiveSchedule(plan_) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B && plan_.zero_stage() >= 3) {
      return Status::Invalid("plan: zero_stage: the simulator plays interleaved_1f1b with ZeRO 0-2; use zero_stage: 2 "
                             "or the 1f1b schedule for ZeRO-3");
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

  // Log-normal compute noise of mean 1 and coefficient of variation cv: σ² = ln(1 + cv²), μ = −σ²/2.
  void Jitter() {
    const double sigma = std::sqrt(std::log1p(options_.compute_jitter_cv * options_.compute_jitter_cv));
    for (size_t i = 0; i < out_.devices.size(); ++i) {
      std::mt19937_64 gen(options_.seed * 0x9E3779B97F4A7C15ull + out_.devices[i]);
      std::lognormal_distribution<double> noise(-sigma * sigma / 2, sigma);
      for (Op& op : out_.programs[i].ops) {
        if (op.kind == OpKind::kCompute) op.seconds *= noise(gen);
      }
    }
  }

  uint32_t GroupId(std::vector<uint32_t> members) {
    auto [it, inserted] = group_ids_.emplace(members, static_cast<uint32_t>(out_.groups.size()));
    if (inserted) out_.groups.push_back(std::move(members));
    return it->second;
  }

  static uint32_t RankIn(const std::vector<uint32_t>& members, uint32_t device) {
    return static_cast<uint32_t>(std::find(members.begin(), members.end(), device) - members.begin());
  }

  std::vector<uint32_t> TpGroup(const proto::Stage& st, uint32_t r) const {
    const uint32_t t = TpDegree(st);
    return {st.devices().begin() + r * t, st.devices().begin() + (r + 1) * t};
  }

  // Sequence ranges of each replica inside one micro-batch.
  static std::vector<std::pair<uint32_t, uint32_t>> Ranges(const proto::Stage& st, uint32_t mbs) {
    std::vector<std::pair<uint32_t, uint32_t>> out;
    uint32_t at = 0;
    for (uint32_t b : models::MicroBatchSplit(st, mbs)) {
      out.emplace_back(at, at + b);
      at += b;
    }
    return out;
  }

  void AddCollective(std::vector<Op>& ops, const std::vector<uint32_t>& members, uint32_t device, double bytes,
                     CollectiveKind kind, Category cat, uint16_t mb, Algorithm algo = Algorithm::kRing) {
    if (members.size() < 2 || bytes <= 0) return;
    Op op;
    op.kind = OpKind::kCollective;
    op.category = cat;
    op.collective = kind;
    op.algorithm = algo;
    op.group = GroupId(members);
    op.rank = RankIn(members, device);
    op.bytes = bytes;
    op.micro_batch = mb;
    ops.push_back(op);
  }

  // A DP all-reduce with the plan's algorithm; hierarchical expands into reduce-scatter inside each node,
  // all-reduce across nodes among same-local-index peers, all-gather inside each node (needs the same
  // number of members on every node; otherwise it falls back to a ring).
  void AddAllReduce(std::vector<Op>& ops, const std::vector<uint32_t>& members, uint32_t device, double bytes,
                    Category cat, uint16_t mb) {
    const auto algo = plan_.comm().dp_algorithm();
    if (algo == proto::CommOptions::ALGORITHM_TREE) {
      AddCollective(ops, members, device, bytes, CollectiveKind::kAllReduce, cat, mb, Algorithm::kTree);
      return;
    }
    if (algo == proto::CommOptions::ALGORITHM_HIERARCHICAL) {
      std::map<uint32_t, std::vector<uint32_t>> by_node;
      for (uint32_t d : members) by_node[ctx_.cluster.device(d).node].push_back(d);
      const size_t c = by_node.begin()->second.size();
      bool uniform = by_node.size() > 1 && c > 1;
      for (const auto& [node, ds] : by_node) uniform &= ds.size() == c;
      if (uniform) {
        const auto& local = by_node[ctx_.cluster.device(device).node];
        const size_t idx = RankIn(local, device);
        std::vector<uint32_t> cross;
        for (const auto& [node, ds] : by_node) cross.push_back(ds[idx]);
        AddCollective(ops, local, device, bytes, CollectiveKind::kReduceScatter, cat, mb);
        AddCollective(ops, cross, device, bytes / static_cast<double>(c), CollectiveKind::kAllReduce, cat, mb);
        AddCollective(ops, local, device, bytes, CollectiveKind::kAllGather, cat, mb);
        return;
      }
    }
    AddCollective(ops, members, device, bytes, CollectiveKind::kAllReduce, cat, mb);
  }

  void AddCompute(std::vector<Op>& ops, double seconds, Category cat, uint16_t mb) {
    if (seconds <= 0) return;
    if (!ops.empty() && ops.back().kind == OpKind::kCompute && ops.back().category == cat &&
        ops.back().micro_batch == mb) {
      ops.back().seconds += seconds;  // consecutive compute of the same pass is one slice
      return;
    }
    Op op;
    op.kind = OpKind::kCompute;
    op.category = cat;
    op.seconds = seconds;
    op.micro_batch = mb;
    ops.push_back(op);
  }

  // Compute of layers [a, b) in one direction, with the TP collectives the fidelity asks for.
  void AddLayers(std::vector<Op>& ops, uint32_t device, const proto::Stage& st, uint32_t r, uint32_t a, uint32_t b,
                 double batch, bool forward, uint16_t mb) {
    const auto& gpu = *ctx_.cluster.device(device).gpu;
    const uint32_t t = TpDegree(st);
    const Category cat = forward ? Category::kForward : Category::kBackward;
    const auto tp_group = TpGroup(st, r);
    double fused_bytes = 0;
    for (uint32_t l = a; l < b; ++l) {
      const double sec = forward ? cost_.ForwardSeconds(gpu, l, t, batch) : cost_.BackwardSeconds(gpu, l, t, batch);
      AddCompute(ops, sec, cat, mb);
      if (t < 2 || cost_.TpIncludedInProfile(gpu, l, t, batch)) continue;
      const double bytes = models::TpAllReduceBytesPerLayer(model_, l, batch, tr_.seq_len(), tr_.dtype());
      const int count = models::TpAllReducesPerLayer(model_, l);
      if (fid_.tp == TpDetail::kPerLayer) {
        for (int i = 0; i < count; ++i) {
          AddCollective(ops, tp_group, device, bytes, CollectiveKind::kAllReduce, Category::kTp, mb);
        }
      } else {
        fused_bytes += count * bytes;
      }
    }
    if (t < 2 || fused_bytes <= 0) return;
    if (fid_.tp == TpDetail::kPerStage) {
      AddCollective(ops, tp_group, device, fused_bytes, CollectiveKind::kAllReduce, Category::kTp, mb);
    } else if (fid_.tp == TpDetail::kAnalytic) {
      Op op;
      op.kind = OpKind::kTpAnalytic;
      op.category = Category::kTp;
      op.group = GroupId(tp_group);
      op.rank = RankIn(tp_group, device);
      op.bytes = fused_bytes;
      op.micro_batch = mb;
      ops.push_back(op);
    }
  }

  // Point-to-point transfers of micro-batch `mb` between stage `from` and stage `to` of pipeline p
  // (forward: to = from + 1; backward: to = from − 1), as seen by `device` at (stage, r, k).
  void AddPp(std::vector<Op>& ops, int p, int from, int to, uint32_t device, bool sending, uint32_t r, uint32_t k,
             bool forward, uint16_t mb) {
    const auto& pipe = plan_.pipelines(p);
    const auto& sst = pipe.stages(from);
    const auto& rst = pipe.stages(to);
    const uint32_t ts = TpDegree(sst), trv = TpDegree(rst);
    const auto srange = Ranges(sst, pipe.micro_batch_size());
    const auto rrange = Ranges(rst, pipe.micro_batch_size());
    const double per_seq = models::PipelineBoundaryBytes(model_, 1, tr_.seq_len(), tr_.dtype());
    const bool leader = plan_.comm().pp_leader_broadcast();
    const uint8_t chan = forward ? kChanPpForward : kChanPpBackward;
    for (uint32_t rr = 0; rr < rrange.size(); ++rr) {
      for (uint32_t kr = 0; kr < (leader ? 1u : trv); ++kr) {
        for (uint32_t sr = 0; sr < srange.size(); ++sr) {
          const uint32_t lo = std::max(rrange[rr].first, srange[sr].first);
          const uint32_t hi = std::min(rrange[rr].second, srange[sr].second);
          if (lo >= hi) continue;
          const uint32_t ks = leader ? 0 : kr % ts;
          const uint32_t sender = sst.devices(static_cast<int>(sr * ts + ks));
          const uint32_t receiver = rst.devices(static_cast<int>(rr * trv + kr));
          const bool mine = sending ? (sr == r && ks == k) : (rr == r && kr == k);
          if (!mine) continue;
          Op op;
          op.kind = sending ? OpKind::kSend : OpKind::kRecv;
          op.category = Category::kPp;
          op.channel = chan;
          op.peer = sending ? receiver : sender;
          op.bytes = (hi - lo) * per_seq;
          op.micro_batch = mb;
          ops.push_back(op);
        }
      }
    }
    if (!sending && leader && trv > 1) {
      const double bytes = (rrange[r].second - rrange[r].first) * per_seq;
      AddCollective(ops, TpGroup(rst, r), device, bytes, CollectiveKind::kBroadcast, Category::kPp, mb);
    }
  }

  double GroupBytes(const models::GradSyncGroup& g, proto::DType dtype) const {
    double params = 0;
    for (uint32_t l = g.layer_begin; l < g.layer_end; ++l) params += model_.ParamsPerRank(l, g.num_chunks, g.layer_begin != 0);
    return params * models::DTypeBytes(dtype);
  }

  void AddZeroGathers(std::vector<Op>& ops, uint32_t device, uint16_t mb) {
    if (plan_.zero_stage() < 3) return;
    for (uint32_t g : device_groups_[device]) {
      AddCollective(ops, sync_groups_[g].devices, device, GroupBytes(sync_groups_[g], tr_.dtype()),
                    CollectiveKind::kAllGather, Category::kZero, mb);
    }
  }

  void EmitDevice(int p, int s, uint32_t r, uint32_t k) {
    const auto& pipe = plan_.pipelines(p);
    const auto& st = pipe.stages(s);
    const uint32_t device = st.devices(static_cast<int>(r * TpDegree(st) + k));
    DeviceProgram& prog = out_.programs[out_.device_slot[device]];
    std::vector<Op>& ops = prog.ops;
    const int S = pipe.stages_size();
    const uint32_t m = pipe.num_micro_batches();
    const double batch = models::MicroBatchSplit(st, pipe.micro_batch_size())[r];
    const bool overlap = plan_.comm().dp_overlap() && !device_groups_[device].empty();

    auto forward = [&](uint16_t j) {
      if (s > 0) AddPp(ops, p, s - 1, s, device, false, r, k, true, j);
      AddZeroGathers(ops, device, j);
      AddLayers(ops, device, st, r, st.layer_begin(), st.layer_end(), batch, true, j);
      if (s + 1 < S) AddPp(ops, p, s, s + 1, device, true, r, k, true, j);
    };
    auto backward = [&](uint16_t j) {
      if (s + 1 < S) AddPp(ops, p, s + 1, s, device, false, r, k, false, j);
      AddZeroGathers(ops, device, j);
      if (overlap && j + 1u == m) {
        // The last backward runs segment by segment (later layers first) and hands each finished
        // segment's gradient groups to the DP stream.
        std::vector<uint32_t> cuts = {st.layer_end()};
        for (uint32_t g : device_groups_[device]) cuts.push_back(sync_groups_[g].layer_begin);
        std::sort(cuts.rbegin(), cuts.rend());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        for (size_t i = 0; i + 1 < cuts.size(); ++i) {
          AddLayers(ops, device, st, r, cuts[i + 1], cuts[i], batch, false, j);
          for (uint32_t g : device_groups_[device]) {
            if (sync_groups_[g].layer_begin == cuts[i + 1]) {
              Op sig;
              sig.kind = OpKind::kSignal;
              ops.push_back(sig);
            }
          }
        }
      } else {
        AddLayers(ops, device, st, r, st.layer_begin(), st.layer_end(), batch, false, j);
      }
      if (s > 0) AddPp(ops, p, s, s - 1, device, true, r, k, false, j);
    };

    if (models::EffectiveSchedule(plan_) == proto::Plan::SCHEDULE_GPIPE) {
      for (uint32_t j = 0; j < m; ++j) forward(static_cast<uint16_t>(j));
      for (uint32_t j = 0; j < m; ++j) backward(static_cast<uint16_t>(j));
    } else if (models::EffectiveSchedule(plan_) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
      EmitInterleaved(p, s, r, k, device, batch, ops);
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

    // Gradient synchronisation (ZeRO ≥ 1 reduce-scatters instead of all-reducing).
    std::vector<Op>& dp_ops = overlap ? prog.dp_stream : ops;
    for (uint32_t g : device_groups_[device]) {
      if (overlap) {
        Op aw;
        aw.kind = OpKind::kAwait;
        dp_ops.push_back(aw);
      }
      const double bytes = GroupBytes(sync_groups_[g], tr_.dtype());
      // Buckets of at most dp_bucket_mib each (all the same size), one collective per bucket.
      const double bucket = plan_.comm().dp_bucket_mib() * 1024 * 1024;
      const int buckets = bucket > 0 ? std::max(1, static_cast<int>(std::ceil(bytes / bucket))) : 1;
      for (int bucket_index = 0; bucket_index < buckets; ++bucket_index) {
        if (plan_.zero_stage() >= 1) {
          AddCollective(dp_ops, sync_groups_[g].devices, device, bytes / buckets, CollectiveKind::kReduceScatter,
                        Category::kDp, 0);
        } else {
          AddAllReduce(dp_ops, sync_groups_[g].devices, device, bytes / buckets, Category::kDp, 0);
        }
      }
    }
    if (overlap) {
      Op join;
      join.kind = OpKind::kJoin;
      ops.push_back(join);
    }
    // Optimizer step over the parameters this device updates (its ZeRO shard).
    double params = 0;
    for (uint32_t l = st.layer_begin(); l < st.layer_end(); ++l) {
      params += model_.ParamsPerRank(l, TpDegree(st), st.layer_begin() != 0);
    }
    double shard = 1;
    if (plan_.zero_stage() >= 1 && !device_groups_[device].empty()) {
      shard = static_cast<double>(sync_groups_[device_groups_[device].front()].devices.size());
    }
    AddCompute(ops, cost_.OptimizerSeconds(*ctx_.cluster.device(device).gpu, params / shard), Category::kOptimizer, 0);
    if (plan_.zero_stage() >= 1) {
      for (uint32_t g : device_groups_[device]) {
        AddCollective(ops, sync_groups_[g].devices, device, GroupBytes(sync_groups_[g], tr_.dtype()),
                      CollectiveKind::kAllGather, Category::kZero, 0);
      }
    }
  }

  // Interleaved 1F1B (Narayanan et al. 2021 §2.2, Megatron-LM's virtual pipeline): each stage's layers are
  // cut into v chunks, and chunk c of stage s is virtual stage c·S + s, so a micro-batch runs chunk 0 on
  // stages 0..S−1, then chunk 1 on stages 0..S−1, and so on (stage S−1 hands chunk c to stage 0's chunk
  // c + 1). Chunks split the stage's transformer blocks as evenly as possible (the first chunks take the
  // remainder); the embedding goes with the first chunk and the head with the last. Since a plan names
  // each stage's layers as one range, chunk c of stage s holds blocks of that range: with identical blocks
  // this relabels layers without changing any time or byte.
  //
  // The order is Megatron-LM's (schedules.py, forward_backward_pipelining_with_interleaving): m·v
  // forward micro-steps, step i running chunk (i mod S·v) / S on micro-batch (i / (S·v))·S + i mod S
  // (backward: chunk v − 1 − that); stage s first runs min(m·v, 2(S − s − 1) + (v − 1)·S) forwards, then
  // one forward and one backward alternately, then the remaining backwards. With free communication and
  // equal chunks this takes (m·v + S − 1)·(f + b) for chunk times f and b (tests/sim).
  //
  // With comm.dp_overlap, a gradient group is handed to the DP stream after the last backward of the lowest
  // chunk it touches (the chunk that finishes last).
  void EmitInterleaved(int p, int s, uint32_t r, uint32_t k, uint32_t device, double batch, std::vector<Op>& ops) {
    const auto& pipe = plan_.pipelines(p);
    const auto& st = pipe.stages(s);
    const uint32_t S = static_cast<uint32_t>(pipe.stages_size());
    const uint32_t m = pipe.num_micro_batches();
    const uint32_t v = std::max<uint32_t>(1, plan_.virtual_stages());
    const uint32_t L = model_.num_layers();
    // Chunk boundaries over the stage's blocks [first, last).
    const uint32_t first = std::max<uint32_t>(st.layer_begin(), 1), last = std::min<uint32_t>(st.layer_end(), L - 1);
    const uint32_t blocks = last > first ? last - first : 0;
    std::vector<uint32_t> cut(v + 1);
    for (uint32_t c = 0; c <= v; ++c) cut[c] = first + c * (blocks / v) + std::min(c, blocks % v);
    cut[0] = st.layer_begin();
    cut[v] = st.layer_end();
    const bool overlap = plan_.comm().dp_overlap() && !device_groups_[device].empty();
    // The lowest chunk each of the device's gradient groups touches.
    std::vector<uint32_t> done_chunk;
    for (uint32_t g : device_groups_[device]) {
      uint32_t c = 0;
      while (c + 1 < v && cut[c + 1] <= sync_groups_[g].layer_begin) ++c;
      done_chunk.push_back(c);
    }
    const int prev = s > 0 ? s - 1 : static_cast<int>(S) - 1, next = s + 1 < static_cast<int>(S) ? s + 1 : 0;
    auto forward = [&](uint32_t c, uint16_t j) {
      if (s > 0 || (c > 0 && S > 1)) AddPp(ops, p, prev, s, device, false, r, k, true, j);
      AddLayers(ops, device, st, r, cut[c], cut[c + 1], batch, true, j);
      if (s + 1 < static_cast<int>(S) || (c + 1 < v && S > 1)) AddPp(ops, p, s, next, device, true, r, k, true, j);
    };
    auto backward = [&](uint32_t c, uint16_t j) {
      if (s + 1 < static_cast<int>(S) || (c + 1 < v && S > 1)) AddPp(ops, p, next, s, device, false, r, k, false, j);
      AddLayers(ops, device, st, r, cut[c], cut[c + 1], batch, false, j);
      if (overlap && j + 1u == m) {
        for (size_t i = 0; i < done_chunk.size(); ++i) {
          if (done_chunk[i] != c) continue;
          Op sig;
          sig.kind = OpKind::kSignal;
          ops.push_back(sig);
        }
      }
      if (s > 0 || (c > 0 && S > 1)) AddPp(ops, p, s, prev, device, true, r, k, false, j);
    };
    const uint32_t total = m * v;
    const auto micro_batch = [&](uint32_t i) { return static_cast<uint16_t>((i / (S * v)) * S + i % S); };
    const auto chunk = [&](uint32_t i, bool fwd) {
      const uint32_t c = (i % (S * v)) / S;
      return fwd ? c : v - 1 - c;
    };
    const uint32_t warmup = std::min(total, 2 * (S - static_cast<uint32_t>(s) - 1) + (v - 1) * S);
    uint32_t f = 0, b = 0;
    for (; f < warmup; ++f) forward(chunk(f, true), micro_batch(f));
    while (f < total) {
      forward(chunk(f, true), micro_batch(f));
      ++f;
      backward(chunk(b, false), micro_batch(b));
      ++b;
    }
    for (; b < total; ++b) backward(chunk(b, false), micro_batch(b));
  }

  const proto::Plan& plan_;
  const models::PlanContext& ctx_;
  const models::ComputeCost& cost_;
  Fidelity fid_;
  ProgramOptions options_;
  const models::TransformerModel& model_;
  const proto::Training& tr_;
  Programs out_;
  std::vector<models::GradSyncGroup> sync_groups_;
  std::vector<std::vector<uint32_t>> device_groups_;
  std::map<std::vector<uint32_t>, uint32_t> group_ids_;
};

}  // namespace

Result<Programs> BuildPrograms(const proto::Plan& plan, const models::PlanContext& ctx,
                               const models::ComputeCost& cost, const ProgramOptions& options) {
  return Builder(plan, ctx, cost, options).Build();
}

}  // namespace hetsim::sim
