#include "planners/lowering_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "models/communicator.h"
#include "models/plan.h"
#include "models/topology.h"
#include "planners/lowering_play.h"

namespace hetsim::planners {

using namespace play;  // NOLINT(google-build-using-namespace): the player's own internals

// ---- the player ----------------------------------------------------------------------------------------------

double SimulatorCompute::LayerSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch,
                                      bool forward, proto::Recompute recompute, models::SequenceSharding shard,
                                      const models::ExpertSharding& experts) const {
  if (forward) return cost_.ForwardSeconds(gpu, layer, tp, batch, shard, experts);
  return cost_.BackwardSeconds(gpu, layer, tp, batch, recompute, shard, experts);
}

double SimulatorCompute::OptimizerSeconds(const models::GpuSpec& gpu, double params) const {
  return cost_.OptimizerSeconds(gpu, params) + cost_.IterationOverheadSeconds(gpu);
}

LoweringPlayer::LoweringPlayer(const models::PlanContext& ctx, const ComputeSource& compute,
                               const std::string& calibration)
    : cluster_(ctx.cluster), model_(ctx.model), training_(ctx.training), compute_(compute),
      routes_(ctx.cluster, calibration) {}

namespace {

// `delays`: per pipeline, idle time at the start of each of its ranks (empty: none).
PlayResult PlayLowering(const models::Lowering& lw, const Fold* fold, const models::Cluster& cluster,
                        const ComputeSource& cs, const models::PlatformRoutes& routes, const PlayOptions& options,
                        const std::vector<double>& delays, Status* status) {
  Setup s;
  s.folded = fold != nullptr;
  s.fold = fold;
  s.played.assign(lw.ranks.size(), 1);
  if (fold != nullptr) {
    for (size_t i = 0; i < lw.ranks.size(); ++i) s.played[i] = fold->rep[i] == i ? 1 : 0;
  }
  BuildPrograms(lw, cluster, cs, routes, options.pricing, options.recompute, &s);
  for (size_t i = 0; i < s.programs.size(); ++i) {
    Program& prog = s.programs[i];
    if (!s.played[i] || prog.pipeline >= delays.size() || delays[prog.pipeline] <= 0) continue;
    POp wait;
    wait.kind = Kind::kCompute;
    wait.category = Category::kIdle;
    wait.seconds = delays[prog.pipeline];
    prog.main.insert(prog.main.begin(), wait);
  }
  PlayResult out;
  out.folded = s.folded;
  out.operations = s.operations;
  if (fold != nullptr) {
    // Every collective of a folded run is played by one device: the folded groups price with it.
    for (size_t g = 0; g < s.groups.size(); ++g) s.groups[g].folded = true;
    for (uint32_t g = 0; g < fold->folded_onto.size(); ++g) {
      if (fold->folded_onto[g] == g) s.groups[g].family.insert(s.groups[g].family.begin(), g);
    }
    for (uint32_t g = 0; g < fold->folded_onto.size(); ++g) {
      const uint32_t x = fold->folded_onto[g];
      if (x != models::kNone && x != g) s.groups[x].family.push_back(g);
    }
    // A pipeline stream's folded copies that cross its links share them (the engine plays them beside it,
    // or scales the links down by as many).
    for (Stream& st : s.streams) {
      auto it = fold->send_copies.find({st.src, st.dst, st.channel});
      if (it == fold->send_copies.end()) continue;
      std::map<uint32_t, uint32_t> sharing;
      for (uint32_t i = 0; i < st.route.num_links; ++i) sharing[st.route.links[i]] = 1;
      for (const auto& [from, to] : it->second) {
        const Route r = routes.GpuToGpu(from, to);
        for (uint32_t i = 0; i < r.num_links; ++i) {
          auto l = sharing.find(r.links[i]);
          if (l != sharing.end()) ++l->second;
        }
      }
      for (const auto& [link, n] : sharing) {
        if (n > 1) st.twins.emplace_back(link, n);
      }
    }
  } else {
    CountLinkSources(&s);
    out.max_link_sources = s.max_link_sources;
  }
  const bool simulator = options.pricing == Pricing::kSimulator;
  std::vector<std::vector<PlayResult::Span>> trace;
  const auto traced = [&]() -> std::vector<std::vector<PlayResult::Span>>* {
    if (!options.trace) return nullptr;
    trace.assign(lw.ranks.size(), {});
    return &trace;
  };
  Game first(s, nullptr, false, simulator, traced());
  *status = first.Run();
  if (!status->ok()) return out;
  Slowdowns slow;
  out.max_link_flows = simulator ? Contention(first.flows(), routes, &slow) : 0;
  std::vector<play::GameStats> stats = first.stats();
  out.plays = 1;
  for (int pass = 1; simulator && pass <= options.contention_passes; ++pass) {
    if (slow.empty() && !s.folded) break;  // nothing shared a link: the first play stands
    const bool again = pass < options.contention_passes;
    Game game(s, &slow, true, again, traced());
    *status = game.Run();
    if (!status->ok()) return out;
    stats = game.stats();
    ++out.plays;
    if (!again) break;
    Slowdowns next;
    Contention(game.flows(), routes, &next);
    // Halfway between the slowdowns seen before and after: the sharing each play sees overshoots the
    // other's.
    const double keep = 0.5;
    slow.ForEach([&](uint64_t key, double& x) {
      const double* seen = next.find(key);
      x = keep * x + (1 - keep) * (seen == nullptr ? 1.0 : *seen);
    });
    next.ForEach([&](uint64_t key, const double& x) {
      if (!slow.count(key)) slow[key] = keep + (1 - keep) * x;
    });
  }
  out.devices.resize(lw.ranks.size());
  for (size_t i = 0; i < lw.ranks.size(); ++i) {
    const uint32_t from = fold != nullptr ? fold->rep[i] : static_cast<uint32_t>(i);
    const play::GameStats& g = stats[from];
    DevicePlay& d = out.devices[i];
    d.device = lw.ranks[i].device;
    d.pipeline = lw.ranks[i].pipeline;
    d.stage = lw.ranks[i].stage;
    d.forward_s = g.forward_s;
    d.backward_s = g.backward_s;
    d.optimizer_s = g.optimizer_s;
    d.tp_s = g.tp_s;
    d.pipeline_end_s = g.pipeline_end_s;
    d.end_s = g.end_s;
    out.iteration_s = std::max(out.iteration_s, g.end_s);
  }
  out.trace = std::move(trace);
  return out;
}

}  // namespace

Result<PlayResult> LoweringPlayer::PlayOnce(const proto::Plan& plan, const PlayOptions& given,
                                            const std::vector<double>& delays, const Again& again) const {
  const models::PlanContext ctx{cluster_, model_, training_};
  PlayOptions options = given;
  options.recompute = models::EffectiveRecompute(plan, training_);
  models::LoweringOptions lo;
  lo.fuse_passes = true;  // the simulator's balanced fidelity
  lo.tp_in_compute = [this](uint32_t device, uint32_t layer, uint32_t tp, double batch) {
    return compute_.TpInCompute(compute_.Gpu(device), layer, tp, batch);
  };
  std::string note = "folding off";
  if (options.fold && options.pricing != Pricing::kUpperBound) {
    note = models::FoldShape(plan, cluster_);
    if (note.empty()) {
      // The representatives lowered, every rank's skeleton compared with its representative's as it comes
      // (models::RankFolder) and released.
      models::LoweringOptions reps = lo;
      reps.lower_devices = models::FoldRepresentatives(plan, cluster_);
      reps.skeletons = true;
      std::optional<models::RankFolder> folder;
      reps.skeleton_done = [&](const models::Lowering& lw, uint32_t slot) {
        if (!folder) {
          folder.emplace(lw, lw.device_slot, lw.groups, cluster_,
                         [this]() -> const models::PlatformRoutes& { return routes_; }, true);
        }
        folder->Add(slot);
        return folder->IsRepresentative(slot);  // the others compare against it: keep it
      };
      HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, models::LowerPlan(plan, ctx, reps));
      Fold fold;
      note = folder ? folder->Finish(lowering.groups.size(), &fold) : "no devices";
      if (note.empty()) {
        Status status;
        PlayResult out = PlayLowering(lowering, &fold, cluster_, compute_, routes_, options, delays, &status);
        if (!status.ok()) return status;
        if (again) {
          if (auto more = again(out)) {
            out = PlayLowering(lowering, &fold, cluster_, compute_, routes_, options, *more, &status);
            if (!status.ok()) return status;
          }
        }
        return out;
      }
    }
  }
  HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, models::LowerPlan(plan, ctx, lo));
  Status status;
  PlayResult out = PlayLowering(lowering, nullptr, cluster_, compute_, routes_, options, delays, &status);
  if (!status.ok()) return status;
  if (again) {
    if (auto more = again(out)) {
      out = PlayLowering(lowering, nullptr, cluster_, compute_, routes_, options, *more, &status);
      if (!status.ok()) return status;
    }
  }
  out.fold_note = note;
  return out;
}

std::optional<PlayResult> LoweringPlayer::Extrapolated(const proto::Plan& plan, const PlayOptions& options) const {
  const int P = plan.pipelines_size();
  if (P == 0) return std::nullopt;
  // The micro-batches not played stand in as idle time at the start of each rank's passes; overlapped
  // parameter all-gathers run at the start of the DP stream, which that idle time would hide.
  if (plan.comm().param_gather_overlap()) return std::nullopt;
  const bool interleaved = models::EffectiveSchedule(plan) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B;
  const bool gpipe = models::EffectiveSchedule(plan) == proto::Plan::SCHEDULE_GPIPE;
  // Per pipeline: micro-batches played (past the warm-up and cool-down transients, and past the engine's 32
  // outstanding sends under GPipe), and the step between samples (interleaving plays groups of S).
  std::vector<uint32_t> played(P), step(P);
  bool any = false;
  for (int p = 0; p < P; ++p) {
    const auto& pipe = plan.pipelines(p);
    const uint32_t S = std::max(1, pipe.stages_size());
    step[p] = interleaved ? S : 1;
    uint32_t cap = std::max<uint32_t>(2 * S + 2, gpipe ? 34 : 0);
    cap = (cap + step[p] - 1) / step[p] * step[p];
    // Four plays of about `cap` micro-batches are worth it from about five times that many.
    played[p] = pipe.num_micro_batches() >= 5 * cap ? cap : pipe.num_micro_batches();
    any = any || played[p] < pipe.num_micro_batches();
  }
  if (!any) return std::nullopt;
  if (plan.zero_stage() >= 3) {
    // ZeRO-3 gathers every micro-batch across pipelines: they keep one count.
    for (int p = 0; p < P; ++p) played[p] = played[0];
  }
  PlayOptions sample = options;
  sample.extrapolate = false;
  sample.trace = false;
  // The simulator folds a plan only when its pipelines have one micro-batch count: cutting some pipelines
  // must not make the samples foldable where the plan is not.
  for (int p = 1; p < P; ++p) {
    sample.fold = sample.fold && plan.pipelines(p).num_micro_batches() == plan.pipelines(0).num_micro_batches();
  }
  // Pipeline ends at `played` micro-batches, one step and two steps more; the first sample's lowering is
  // played again with the delays.
  std::vector<std::vector<double>> ends(3, std::vector<double>(P, 0));
  proto::Plan reduced = plan;
  const auto sample_plan = [&](int k) {
    for (int p = 0; p < P; ++p) {
      const bool cut = played[p] < plan.pipelines(p).num_micro_batches();
      reduced.mutable_pipelines(p)->set_num_micro_batches(played[p] + (cut ? k * step[p] : 0));
    }
    return reduced;
  };
  const auto record = [&](int k, const PlayResult& r) {
    for (const DevicePlay& d : r.devices) ends[k][d.pipeline] = std::max(ends[k][d.pipeline], d.pipeline_end_s);
  };
  for (int k = 1; k <= 2; ++k) {
    auto r = PlayOnce(sample_plan(k), sample, {});
    if (!r.ok()) return std::nullopt;
    record(k, *r);
  }
  // Each cut pipeline must be periodic already: two equal increments (within 2% where contention passes
  // re-price flows by the sharing each play saw, which need not repeat exactly; their mean is taken).
  const bool exact = options.pricing != Pricing::kSimulator || options.contention_passes == 0;
  bool periodic = false;
  const Again delays = [&](const PlayResult& first) -> std::optional<std::vector<double>> {
    record(0, first);
    std::vector<double> out(P, 0);
    for (int p = 0; p < P; ++p) {
      if (played[p] >= plan.pipelines(p).num_micro_batches()) continue;
      const double d1 = ends[1][p] - ends[0][p], d2 = ends[2][p] - ends[1][p];
      const double tolerance = exact ? 1e-9 * ends[2][p] + 1e-12 : 0.02 * d1;
      if (!(d1 > 0) || std::abs(d2 - d1) > tolerance) return std::nullopt;
      out[p] = (plan.pipelines(p).num_micro_batches() - played[p]) / static_cast<double>(step[p]) * (d1 + d2) / 2;
    }
    periodic = true;
    return out;
  };
  auto out = PlayOnce(sample_plan(0), sample, {}, delays);
  if (!out.ok() || !periodic) return std::nullopt;
  // The compute of the micro-batches not played.
  for (DevicePlay& d : out->devices) {
    const double scale = plan.pipelines(static_cast<int>(d.pipeline)).num_micro_batches() /
                         static_cast<double>(played[d.pipeline]);
    d.forward_s *= scale;
    d.backward_s *= scale;
    d.tp_s *= scale;
  }
  out->extrapolated = true;
  return std::move(*out);
}

Result<PlayResult> LoweringPlayer::Play(const proto::Plan& plan, const PlayOptions& options) const {
  if (const int over = models::PipelineOverMicroBatchBound(plan); over >= 0) {
    return Status::Invalid("pipelines: " + std::to_string(plan.pipelines(over).num_micro_batches()) +
                           " micro-batches, more than " + std::to_string(models::kMaxMicroBatches) + " are played");
  }
  if (options.extrapolate && !options.trace) {
    if (auto out = Extrapolated(plan, options)) return std::move(*out);
  }
  return PlayOnce(plan, options, {});
}

}  // namespace hetsim::planners
