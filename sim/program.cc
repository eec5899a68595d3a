#include "sim/program.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <unordered_map>

#include "models/communicator.h"
#include "models/fold.h"
#include "models/platform_routes.h"

namespace hetsim::sim {
namespace {

OpKind PlayKind(models::OpKind k) {
  switch (k) {
    case models::OpKind::kCompute: return OpKind::kCompute;
    case models::OpKind::kSend: return OpKind::kSend;
    case models::OpKind::kRecv: return OpKind::kRecv;
    case models::OpKind::kPostRecv: return OpKind::kPostRecv;
    case models::OpKind::kCollective: return OpKind::kCollective;
    case models::OpKind::kSignal: return OpKind::kSignal;
    case models::OpKind::kAwait: return OpKind::kAwait;
    case models::OpKind::kJoin: return OpKind::kJoin;
    case models::OpKind::kWaitSends: return OpKind::kWaitSends;
    case models::OpKind::kHostCopy: return OpKind::kHostCopy;
  }
  return OpKind::kCompute;
}

// A GPU type's calibrated constants, looked up once per type rather than once per operation (each
// look-up of the calibration takes a lock and builds a key).
struct GpuCosts {
  double pass_overhead_s = 0;
  std::unordered_map<uint32_t, double> collective_latency_s;  // by group size

  GpuCosts(const models::GpuSpec& gpu, const models::ComputeCost& cost)
      : pass_overhead_s(cost.PassOverheadSeconds(gpu)) {}
  double CollectiveLatency(const models::GpuSpec& gpu, const models::ComputeCost& cost, uint32_t group_size) {
    auto it = collective_latency_s.find(group_size);
    if (it == collective_latency_s.end()) {
      it = collective_latency_s.emplace(group_size, cost.CollectiveLatencySeconds(gpu, group_size)).first;
    }
    return it->second;
  }
};

// The duration of one lowered compute operation of rank `r` on `gpu` (`node`: the rank's node).
double ComputeSeconds(const models::Op& op, const models::RankOps& r, const models::GpuSpec& gpu,
                      const models::NodeInfo& node, const models::ComputeCost& cost, const GpuCosts& consts,
                      bool separate_recompute) {
  if (op.category == Category::kOptimizer) {
    // CPU offload: the step runs on the node's CPU, shared by the plan's ranks there.
    const double step = op.host_ranks > 0
                            ? models::HostOptimizerSeconds(op.params, op.host_ranks, node.cpu_adam_params_per_s)
                            : cost.OptimizerSeconds(gpu, op.params);
    return step + cost.IterationOverheadSeconds(gpu);
  }
  const models::SequenceSharding shard = r.shard;  // CP / Ulysses: the rank's share of each sequence
  const double batch = op.sequences();
  return models::PassSeconds(op, r, cost.model(), consts.pass_overhead_s, separate_recompute,
                             proto::RECOMPUTE_UNSPECIFIED, [&](uint32_t l, bool forward, proto::Recompute rc) {
                               return forward ? cost.ForwardSeconds(gpu, l, r.tp, batch, shard, r.experts)
                                              : cost.BackwardSeconds(gpu, l, r.tp, batch, rc, shard, r.experts);
                             });
}

// `group_comm[g]`: how group g's collectives are priced (models::GroupComms).
void Append(std::vector<Op>& out, const models::Op& lo, const models::RankOps& r, const models::GpuSpec& gpu,
            const models::NodeInfo& node, const std::vector<std::vector<uint32_t>>& groups,
            const std::vector<models::GroupComm>& group_comm, const models::ComputeCost& cost, GpuCosts& consts,
            const Fidelity& fid, bool separate_recompute, double given_s) {
  Op op;
  op.kind = PlayKind(lo.kind);
  op.category = lo.category;
  op.collective = lo.collective;
  op.algorithm = lo.algorithm;
  op.channel = lo.channel;
  op.micro_batch = lo.micro_batch;
  op.peer = lo.peer == models::kNone ? 0 : lo.peer;
  op.group = lo.group == models::kNone ? 0 : lo.group;
  op.rank = lo.rank;
  op.bytes = lo.bytes;
  op.to_host = lo.to_host;
  op.hide_share = lo.hide_share;
  op.sm_share = lo.sm_share;
  if (lo.kind == models::OpKind::kCompute) {
    op.seconds = given_s >= 0 ? given_s : ComputeSeconds(lo, r, gpu, node, cost, consts, separate_recompute);
    // (0: models::DropIdleCompute)
    // Consecutive compute of the same pass is one slice.
    if (!out.empty() && out.back().kind == OpKind::kCompute && out.back().category == op.category &&
        out.back().micro_batch == op.micro_batch) {
      out.back().seconds += op.seconds;
      return;
    }
  }
  if (lo.kind == models::OpKind::kCollective) {
    // The call's fixed cost α (NCCL launch and synchronisation; between nodes NCCL's modelled latency of
    // the algorithm and protocol it picks), before its transfers. Rings reach a fraction of the links'
    // bandwidth (NCCL's bus bandwidth): the transfers carry the bytes that take as long at the full
    // bandwidth, the same for every rank of a group (models::PriceCollective).
    const models::CollectivePrice price = models::PriceCollective(
        lo, group_comm[op.group], consts.CollectiveLatency(gpu, cost, static_cast<uint32_t>(groups[op.group].size())));
    op.seconds = price.latency_s;
    op.bytes = price.bytes;
    if (lo.category == Category::kTp && fid.tp == TpDetail::kAnalytic) op.kind = OpKind::kTpAnalytic;
  }
  out.push_back(op);
}

// The distinct collective calls between nodes of the lowering's ranks (category, kind, group, one call's
// bytes), with NCCL's choice for each, largest first, at most 8 (Programs::nccl_calls).
void NoteNcclCalls(const models::Lowering& lowering, const std::vector<models::GroupComm>& group_comm,
                   std::vector<NcclCallNote>* out) {
  std::map<std::tuple<int, int, uint32_t, uint32_t, double>, NcclCallNote> seen;
  const auto note = [&](const models::Op& lo) {
    if (lo.kind != models::OpKind::kCollective || lo.group == models::kNone || lo.bytes <= 0) return;
    const models::GroupComm& g = group_comm[lo.group];
    const bool kind = lo.collective == models::CollectiveKind::kAllReduce ||
                      lo.collective == models::CollectiveKind::kReduceScatter ||
                      lo.collective == models::CollectiveKind::kAllGather;
    if (g.net == nullptr || !kind || lo.algorithm != models::Algorithm::kRing) return;
    const double bytes = lo.bytes / std::max(1u, lo.calls);
    const auto key = std::make_tuple(static_cast<int>(lo.category), static_cast<int>(lo.collective), g.nccl.ranks,
                                     g.nccl.nodes, std::round(bytes));
    if (seen.count(key)) return;
    NcclCallNote n;
    n.category = lo.category;
    n.kind = lo.collective;
    n.ranks = g.nccl.ranks;
    n.nodes = g.nccl.nodes;
    n.bytes = bytes;
    n.call = models::ChooseNccl(lo.collective, bytes, g.nccl, *g.net);
    n.nic = g.nccl.nic;
    seen.emplace(key, n);
  };
  for (const auto& r : lowering.ranks) {
    for (const auto& lo : r.ops) note(lo);
    for (const auto& lo : r.dp_stream) note(lo);
  }
  for (auto& [k, n] : seen) out->push_back(n);
  std::stable_sort(out->begin(), out->end(), [](const NcclCallNote& a, const NcclCallNote& b) { return a.bytes > b.bytes; });
  if (out->size() > 8) out->resize(8);
}

bool IsTpComm(const Op& op) {
  return op.category == Category::kTp && (op.kind == OpKind::kCollective || op.kind == OpKind::kTpAnalytic);
}

// comm.tp_overlap (models/op_prices.h OverlapTpChunks).
std::vector<Op> OverlapTp(const std::vector<Op>& ops) {
  return models::OverlapTpChunks(ops, OpKind::kCompute, OpKind::kComputeAsync, OpKind::kComputeJoin, IsTpComm);
}

// Log-normal compute noise of mean 1 and coefficient of variation cv: σ² = ln(1 + cv²), μ = −σ²/2.
void Jitter(Programs& out, double cv, uint64_t seed) {
  const double sigma = std::sqrt(std::log1p(cv * cv));
  for (size_t i = 0; i < out.devices.size(); ++i) {
    std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + out.devices[i]);
    std::lognormal_distribution<double> noise(-sigma * sigma / 2, sigma);
    for (Op& op : out.programs[i].ops) {
      if (op.kind == OpKind::kCompute) op.seconds *= noise(gen);
    }
  }
}

}  // namespace

namespace {

// Fills out->fold from a decision that the ranks fold; `out` holds the lowering's groups.
void SetFold(models::RankFold&& rf, Programs* out) {
  FoldMap fold;
  fold.rep = std::move(rf.rep);
  fold.played = rf.played;
  for (const auto& [k, copies] : rf.send_copies) {
    fold.send_copies[StreamKey(std::get<0>(k), std::get<1>(k), std::get<2>(k))] = copies;
  }
  for (const auto& [k, peer] : rf.ring_peer) fold.ring_peer[RingKey(k.first, k.second)] = peer;
  fold.family.resize(out->groups.size());
  for (uint32_t g = 0; g < out->groups.size(); ++g) {
    if (rf.folded_onto[g] == g) fold.family[g].insert(fold.family[g].begin(), g);
  }
  for (uint32_t g = 0; g < out->groups.size(); ++g) {
    if (rf.folded_onto[g] != models::kNone && rf.folded_onto[g] != g) fold.family[rf.folded_onto[g]].push_back(g);
  }
  out->fold = std::move(fold);
}

// The platform's routes for the fold decision, built at the first folded send. Both ends of a compared copy
// have the representatives' GPU types, so the default calibration's routes compare as the run's.
struct LazyRoutes {
  const models::Cluster& cluster;
  std::optional<models::PlatformRoutes> routes;
  const models::PlatformRoutes& operator()() {
    if (!routes) routes.emplace(cluster);
    return *routes;
  }
};

// Fills out->fold when the lowering's ranks fold (models::FoldRanks, the decision the planners' played
// estimate takes too); otherwise returns why not. `out` holds the lowering's devices and groups
// (TakePlacement moved them).
std::string FoldRanks(const models::Lowering& lw, const models::PlanContext& ctx, bool skeletons, Programs* out) {
  if (!out->staged_groups.empty()) return "CPU-staged transfers";
  LazyRoutes routes{ctx.cluster, {}};
  models::RankFold rf;
  const std::string note = models::FoldRanks(lw, out->device_slot, out->groups, ctx.cluster,
                                             [&]() -> const models::PlatformRoutes& { return routes(); }, skeletons, &rf);
  if (!note.empty()) return note;
  SetFold(std::move(rf), out);
  return "";
}

// Lowers the representatives of a plan whose shape may fold (FoldShape), with every rank's skeleton compared
// to its representative's as the lowering emits it and then released (models::RankFolder): `note` empty and
// `fold` filled when the ranks fold.
Result<models::Lowering> LowerFolding(const proto::Plan& plan, const models::PlanContext& ctx,
                                      const models::LoweringOptions& options, std::string* note,
                                      models::RankFold* fold) {
  models::LoweringOptions lo = options;
  lo.lower_devices = models::FoldRepresentatives(plan, ctx.cluster);
  lo.skeletons = true;
  LazyRoutes routes{ctx.cluster, {}};
  std::optional<models::RankFolder> folder;
  lo.skeleton_done = [&](const models::Lowering& lw, uint32_t slot) {
    if (!folder) {
      folder.emplace(lw, lw.device_slot, lw.groups, ctx.cluster,
                     [&]() -> const models::PlatformRoutes& { return routes(); }, true);
    }
    folder->Add(slot);
    return folder->IsRepresentative(slot);  // the others compare against it: keep it
  };
  HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, models::LowerPlan(plan, ctx, lo));
  *note = folder ? folder->Finish(lowering.groups.size(), fold) : "no devices";
  return lowering;
}

}  // namespace

namespace {

// Everything of `out` but the programs and the fold: devices, groups, staging.
void TakePlacement(models::Lowering& lowering, const models::PlanContext& ctx, Programs* out) {
  out->cpu_staged = lowering.cpu_staged;
  const models::Communicator comm(ctx.cluster, lowering.comm);
  if (comm.any_staged()) {
    out->staged_groups = comm.staged_groups();
    out->num_groups = static_cast<uint32_t>(ctx.cluster.spec().nodes_size());
    for (const auto& n : ctx.cluster.nodes()) out->node_group.push_back(n.group);
  }
  out->devices = std::move(lowering.devices);
  out->device_slot = std::move(lowering.device_slot);
  out->groups = std::move(lowering.groups);
}

bool HasSkeletons(const models::Lowering& lowering) {
  return !lowering.ranks.empty() && !lowering.ranks[0].skeleton.empty();
}

// ProgramsFromLowering, with the fold decided already (`decided`: LowerFolding's) or not.
Programs Price(models::Lowering&& lowering, const models::PlanContext& ctx, const models::ComputeCost& cost,
               const ProgramOptions& options, models::RankFold* decided, const ComputeSecondsFn& compute_seconds = {}) {
  Programs out;
  out.fidelity = options.fidelity;
  TakePlacement(lowering, ctx, &out);
  const bool separate_recompute = lowering.separate_recompute;
  if (decided != nullptr) {
    SetFold(std::move(*decided), &out);
    out.folded = true;
  } else if (options.fold && options.fidelity.collectives != CollectiveDetail::kFull) {
    if (options.compute_jitter_cv > 0) {
      out.fold_note = "compute jitter";
    } else {
      // TakePlacement moved the devices and groups: FoldRanks reads them from `out`.
      out.fold_note = FoldRanks(lowering, ctx, HasSkeletons(lowering), &out);
      out.folded = out.fold_note.empty();
    }
  } else {
    out.fold_note = options.fold ? "full fidelity" : "folding off";
  }
  out.programs.resize(out.devices.size());
  std::unordered_map<const models::GpuSpec*, GpuCosts> gpu_costs;
  std::unordered_map<const models::GpuSpec*, double> efficiency;  // by GPU type: one calibration look-up each
  const std::vector<models::GroupComm> group_comm = models::GroupComms(
      ctx.cluster, out.groups,
      [&](uint32_t d) {
        const models::GpuSpec* gpu = ctx.cluster.device(d).gpu;
        auto it = efficiency.find(gpu);
        if (it == efficiency.end()) it = efficiency.emplace(gpu, cost.CollectiveEfficiency(*gpu)).first;
        return it->second;
      },
      cost);
  NoteNcclCalls(lowering, group_comm, &out.nccl_calls);
  for (size_t i = 0; i < out.devices.size(); ++i) {
    models::RankOps& r = lowering.ranks[i];
    DeviceProgram& prog = out.programs[i];
    prog.pipeline = r.pipeline;
    prog.stage = r.stage;
    std::vector<models::Op>().swap(r.skeleton);
    if (out.folded && out.fold.rep[i] != i) {  // played by its representative: not costed
      std::vector<models::Op>().swap(r.ops);
      std::vector<models::Op>().swap(r.dp_stream);
      continue;
    }
    const auto& gpu = *ctx.cluster.device(r.device).gpu;
    const auto& node = ctx.cluster.node(ctx.cluster.device(r.device).node);
    auto costs = gpu_costs.find(&gpu);
    if (costs == gpu_costs.end()) costs = gpu_costs.emplace(&gpu, GpuCosts(gpu, cost)).first;
    GpuCosts& consts = costs->second;
    prog.ops.reserve(r.ops.size());
    prog.dp_stream.reserve(r.dp_stream.size());
    // Seconds given for the compute (imported traces), or −1: the cost model prices it.
    const auto given = [&](bool dp, size_t k) {
      return compute_seconds ? compute_seconds(static_cast<uint32_t>(i), dp, k) : -1.0;
    };
    for (size_t k = 0; k < r.ops.size(); ++k) {
      Append(prog.ops, r.ops[k], r, gpu, node, out.groups, group_comm, cost, consts, options.fidelity,
             separate_recompute, given(false, k));
    }
    for (size_t k = 0; k < r.dp_stream.size(); ++k) {
      Append(prog.dp_stream, r.dp_stream[k], r, gpu, node, out.groups, group_comm, cost, consts, options.fidelity,
             separate_recompute, given(true, k));
    }
    std::vector<models::Op>().swap(r.ops);
    std::vector<models::Op>().swap(r.dp_stream);
  }
  if (options.compute_jitter_cv > 0) Jitter(out, options.compute_jitter_cv, options.seed);
  for (auto& prog : out.programs) {
    models::HideBehindGemms(&prog.ops, OpKind::kCompute, OpKind::kComputeAsync, OpKind::kComputeJoin);
    models::DropIdleCompute(&prog.ops, OpKind::kCompute);
    if (lowering.tp_overlap) prog.ops = OverlapTp(prog.ops);
  }
  return out;
}

}  // namespace

double PriceComputeOp(const models::Op& op, const models::RankOps& r, const models::PlanContext& ctx,
                      const models::ComputeCost& cost, bool separate_recompute) {
  const models::GpuSpec& gpu = *ctx.cluster.device(r.device).gpu;
  const models::NodeInfo& node = ctx.cluster.node(ctx.cluster.device(r.device).node);
  const GpuCosts consts(gpu, cost);
  return ComputeSeconds(op, r, gpu, node, cost, consts, separate_recompute);
}

Programs ProgramsFromLowering(models::Lowering&& lowering, const models::PlanContext& ctx,
                              const models::ComputeCost& cost, const ProgramOptions& options) {
  return Price(std::move(lowering), ctx, cost, options, nullptr);
}

Programs ProgramsFromLowering(models::Lowering&& lowering, const models::PlanContext& ctx,
                              const models::ComputeCost& cost, const ProgramOptions& options,
                              const ComputeSecondsFn& compute_seconds) {
  return Price(std::move(lowering), ctx, cost, options, nullptr, compute_seconds);
}

Result<Programs> BuildPrograms(const proto::Plan& plan, const models::PlanContext& ctx,
                               const models::ComputeCost& cost, const ProgramOptions& options) {
  models::LoweringOptions lo;
  lo.fuse_passes = options.fidelity.tp != TpDetail::kPerLayer;
  // Measured profiles that already include a layer's TP collectives: nothing to add.
  lo.tp_in_compute = [&](uint32_t device, uint32_t layer, uint32_t tp, double batch) {
    return cost.TpIncludedInProfile(*ctx.cluster.device(device).gpu, layer, tp, batch);
  };
  std::string note;
  if (options.fold && options.fidelity.collectives != CollectiveDetail::kFull && options.compute_jitter_cv <= 0) {
    // Decide folding from the plan's shape and the ranks' skeletons, and lower only the representatives.
    note = models::FoldShape(plan, ctx.cluster);
    if (note.empty()) {
      if (options.verify_fold) {
        HETSIM_ASSIGN_OR_RETURN(const FoldDecision structural, DecideFold(plan, ctx, lo, false));
        HETSIM_ASSIGN_OR_RETURN(const FoldDecision full, DecideFold(plan, ctx, lo, true));
        const std::string diff = CompareFoldDecisions(structural, full);
        if (!diff.empty()) return Status::Internal("folding: the plan's shape and the full comparison disagree: " + diff);
      }
      models::RankFold fold;
      HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, LowerFolding(plan, ctx, lo, &note, &fold));
      if (note.empty()) return Price(std::move(lowering), ctx, cost, options, &fold);
    }
  }
  HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, models::LowerPlan(plan, ctx, lo));
  if (note.empty()) return ProgramsFromLowering(std::move(lowering), ctx, cost, options);
  ProgramOptions unfolded = options;
  unfolded.fold = false;
  Programs out = ProgramsFromLowering(std::move(lowering), ctx, cost, unfolded);
  out.fold_note = note;
  return out;
}

Result<FoldDecision> DecideFold(const proto::Plan& plan, const models::PlanContext& ctx,
                                const models::LoweringOptions& options, bool full_comparison) {
  FoldDecision d;
  if (!full_comparison) {
    d.note = models::FoldShape(plan, ctx.cluster);
    if (!d.note.empty()) return d;
    models::RankFold fold;
    HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, LowerFolding(plan, ctx, options, &d.note, &fold));
    Programs p;
    TakePlacement(lowering, ctx, &p);
    if (p.staged_groups.empty() && d.note.empty()) {
      SetFold(std::move(fold), &p);
      d.folded = true;
      d.fold = std::move(p.fold);
    } else if (d.note.empty()) {
      d.note = "CPU-staged transfers";
    }
    d.groups = std::move(p.groups);
    return d;
  }
  HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, models::LowerPlan(plan, ctx, options));
  Programs p;
  TakePlacement(lowering, ctx, &p);
  d.note = FoldRanks(lowering, ctx, false, &p);
  d.folded = d.note.empty();
  if (d.folded) d.fold = std::move(p.fold);
  d.groups = std::move(p.groups);
  return d;
}

std::string CompareFoldDecisions(const FoldDecision& a, const FoldDecision& b) {
  if (a.folded != b.folded) {
    return a.folded ? "folds, against: " + b.note : "does not fold (" + a.note + "), against a fold";
  }
  if (!a.folded) return "";
  if (a.groups != b.groups) return "different collective groups";
  if (a.fold.rep != b.fold.rep) return "different representatives";
  if (a.fold.played != b.fold.played) return "different numbers of played devices";
  if (a.fold.family != b.fold.family) return "different folded collective groups";
  if (a.fold.send_copies != b.fold.send_copies) return "different folded pipeline sends";
  if (a.fold.ring_peer != b.fold.ring_peer) return "different ring peers";
  return "";
}

}  // namespace hetsim::sim
