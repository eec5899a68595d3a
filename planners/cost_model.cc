#include "planners/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/stragglers.h"
#include "planners/planner.h"

namespace hetsim::planners {
namespace {

using models::LayerKind;

struct RangeShape {
  uint32_t blocks = 0;
  bool embedding = false;
  bool head = false;
};

RangeShape Shape(const models::TransformerModel& model, uint32_t begin, uint32_t end) {
  RangeShape s;
  s.embedding = begin == 0 && end > 0;
  s.head = end == model.num_layers() && begin < end;
  const uint32_t total = end > begin ? end - begin : 0;
  s.blocks = total - (s.embedding ? 1 : 0) - (s.head ? 1 : 0);
  return s;
}

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// "1.23 s", "45.6 ms", "7.8 us".
std::string Seconds(double s) {
  if (s >= 1) return Fmt("%.3f s", s);
  if (s >= 1e-3) return Fmt("%.2f ms", s * 1e3);
  return Fmt("%.1f us", s * 1e6);
}

}  // namespace

BlockClasses::BlockClasses(const models::TransformerModel& model) : layers_(model.num_layers()) {
  std::vector<uint32_t> class_of(layers_, 0);
  std::vector<int> index_of(4, -1);  // BlockClass is two bits
  for (uint32_t l = 0; l < layers_; ++l) {
    if (model.kind(l) != LayerKind::kTransformer) continue;
    const uint32_t k = model.BlockClass(l);
    if (k >= index_of.size()) index_of.resize(k + 1, -1);
    if (index_of[k] < 0) {
      index_of[k] = static_cast<int>(first_.size());
      first_.push_back(l);
    }
    class_of[l] = static_cast<uint32_t>(index_of[k]);
  }
  prefix_.assign(first_.size() * (layers_ + 1), 0);
  for (uint32_t c = 0; c < first_.size(); ++c) {
    uint32_t* p = &prefix_[c * (layers_ + 1)];
    for (uint32_t l = 0; l < layers_; ++l) {
      p[l + 1] = p[l] + (model.kind(l) == LayerKind::kTransformer && class_of[l] == c ? 1 : 0);
    }
  }
}

uint32_t BlockClasses::Count(uint32_t c, uint32_t begin, uint32_t end) const {
  end = std::min(end, layers_);
  if (end <= begin) return 0;
  const uint32_t* p = &prefix_[c * (layers_ + 1)];
  return p[end] - p[begin];
}

AnalyticCostModel::AnalyticCostModel(const PlanningProblem& problem, CostModelOptions options)
    : cluster_(problem.cluster),
      model_(problem.model),
      training_(problem.training),
      compute_(problem.model, problem.training, problem.profiles, problem.compute),
      topology_(problem.cluster),
      options_(options),
      classes_(problem.model),
      view_(*this),
      context_{problem.cluster, problem.model, problem.training},
      player_(context_, view_, problem.compute.calibration) {
  auto count = [&](const models::GpuSpec* gpu, uint32_t n) {
    auto it = std::find_if(types_.begin(), types_.end(), [&](const auto& t) { return t.first == gpu; });
    if (it == types_.end()) {
      types_.emplace_back(gpu, n);
    } else {
      it->second += n;
    }
  };
  if (options_.average_over != nullptr) {
    for (uint32_t d : *options_.average_over) count(cluster_.device(d).gpu, 1);
  } else {
    for (const auto& node : cluster_.nodes()) count(node.gpu, node.num_gpus);
  }
}

std::pair<double, double> AnalyticCostModel::LayerCompute(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp,
                                                          double b, proto::Recompute recompute) const {
  if (Averaging(gpu)) {
    // AMP (Li et al. 2022) averages measured per-layer costs over the cluster's GPUs: the mean over the
    // devices of each device's profiled time, when every GPU type has one.
    bool all = !types_.empty();
    for (const auto& [type, count] : types_) all = all && compute_.IsProfiled(*type, layer, tp, b);
    if (all) {
      double fwd = 0, bwd = 0, n = 0;
      for (const auto& [type, count] : types_) {
        fwd += count * compute_.ForwardSeconds(*type, layer, tp, b);
        bwd += count * compute_.BackwardSeconds(*type, layer, tp, b, recompute);
        n += count;
      }
      return {fwd / n, bwd / n};
    }
  }
  return {compute_.ForwardSeconds(gpu, layer, tp, b), compute_.BackwardSeconds(gpu, layer, tp, b, recompute)};
}

bool AnalyticCostModel::TpIncluded(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double b) const {
  if (tp <= 1) return false;
  if (Averaging(gpu)) {
    bool all = !types_.empty();
    for (const auto& [type, count] : types_) all = all && compute_.TpIncludedInProfile(*type, layer, tp, b);
    if (all) return true;
  }
  return compute_.TpIncludedInProfile(gpu, layer, tp, b);
}

bool AnalyticCostModel::AveragesProfiles(uint32_t tp, double b) const {
  if (!options_.average_profiles || options_.assume_gpu == nullptr || types_.empty()) return false;
  const uint32_t L = model_.num_layers();
  for (uint32_t layer : {0u, L > 2 ? 1u : 0u, L - 1}) {
    for (const auto& [type, count] : types_) {
      if (!compute_.IsProfiled(*type, layer, tp, b)) return false;
    }
  }
  return true;
}

const models::GpuSpec& AnalyticCostModel::ComputeGpu(uint32_t device) const {
  return options_.assume_gpu != nullptr ? *options_.assume_gpu : *cluster_.device(device).gpu;
}

std::pair<double, double> AnalyticCostModel::RangeCompute(const models::GpuSpec& gpu, uint32_t begin, uint32_t end,
                                                          uint32_t tp, double b, proto::Recompute recompute) const {
  const RangeShape s = Shape(model_, begin, end);
  double fwd = 0, bwd = 0;
  // Each class of blocks priced by its first block (one class, block 1, for a dense model).
  for (uint32_t c = 0; c < classes_.size(); ++c) {
    const uint32_t blocks = classes_.Count(c, begin, end);
    if (blocks == 0) continue;
    const auto [f, bw] = LayerCompute(gpu, classes_.first(c), tp, b, recompute);
    fwd += blocks * f;
    bwd += blocks * bw;
  }
  if (s.embedding) {
    const auto [f, bw] = LayerCompute(gpu, 0, tp, b, recompute);
    fwd += f;
    bwd += bw;
  }
  if (s.head) {
    const auto [f, bw] = LayerCompute(gpu, model_.num_layers() - 1, tp, b, recompute);
    fwd += f;
    bwd += bw;
  }
  if (end > begin) {
    // The host's fixed work per micro-batch and pass (kernel model; as the simulator charges it).
    fwd += compute_.PassOverheadSeconds(gpu);
    bwd += compute_.PassOverheadSeconds(gpu);
  }
  return {fwd, bwd};
}

const models::GpuSpec& AnalyticCostModel::SlowestGpu(std::span<const uint32_t> group) const {
  // The slowest GPU of a TP group sets its pace (groups are normally of one type).
  const models::GpuSpec* gpu = &ComputeGpu(group[0]);
  for (uint32_t d : group.subspan(1)) {
    const models::GpuSpec* g = &ComputeGpu(d);
    if (g != gpu && g->PeakTflops(training_.dtype()) < gpu->PeakTflops(training_.dtype())) gpu = g;
  }
  return *gpu;
}

ReplicaLinks AnalyticCostModel::Links(std::span<const uint32_t> group, std::span<const uint32_t> next,
                                      std::span<const uint32_t> prev, bool leader_broadcast, uint32_t next_tp,
                                      uint32_t prev_tp) const {
  ReplicaLinks l;
  if (group.size() > 1) l.tp = topology_.Slowest(group);
  l.has_next = !next.empty();
  l.has_prev = !prev.empty();
  if (l.has_next) l.next = topology_.SlowestBetween(group, next);
  if (l.has_prev) l.prev = topology_.SlowestBetween(group, prev);
  if (leader_broadcast) {
    // HexiScale eq. 5: one leader of the receiving stage's TP group receives, then broadcasts in the group.
    if (l.has_next && next_tp > 1) {
      l.next_tp = next_tp;
      l.next_intra = topology_.Slowest(next.subspan(0, std::min<size_t>(next_tp, next.size())));
    }
    if (l.has_prev && prev_tp > 1) {
      l.prev_tp = prev_tp;
      l.prev_intra = topology_.Slowest(prev.subspan(0, std::min<size_t>(prev_tp, prev.size())));
    }
  }
  return l;
}

ReplicaTime AnalyticCostModel::Replica(const models::GpuSpec& gpu, uint32_t tp, uint32_t begin, uint32_t end, double b,
                                       const ReplicaLinks& links, proto::Recompute recompute) const {
  ReplicaTime r;
  if (b <= 0 || tp == 0) return r;
  std::tie(r.forward_s, r.backward_s) = RangeCompute(gpu, begin, end, tp, b, recompute);
  if (tp > 1) {
    const RangeShape s = Shape(model_, begin, end);
    const double bytes = models::TpAllReduceBytesPerLayer(model_, 1, b, training_.seq_len(), training_.dtype());
    const double one = models::RingAllReduceSeconds(bytes, tp, links.tp) + compute_.CollectiveLatencySeconds(gpu, tp);
    // A measured profile that times a layer's TP collectives already charged them (Sailor's do).
    const double blocks = s.blocks > 0 && !TpIncluded(gpu, 1, tp, b) ? s.blocks : 0.0;
    const bool embedding = s.embedding && !TpIncluded(gpu, 0, tp, b);
    const bool head = s.head && !TpIncluded(gpu, model_.num_layers() - 1, tp, b);
    const double per_pass = (2.0 * blocks + (embedding ? 1 : 0) + (head ? 1 : 0)) * one;
    const double recomputed = recompute == proto::RECOMPUTE_FULL ? 2.0 * blocks * one : 0.0;
    r.tp_s = 2 * per_pass + recomputed;
  }
  const double boundary = models::PipelineBoundaryBytes(model_, b, training_.seq_len(), training_.dtype());
  auto hop = [&](const models::Link& link, uint32_t receivers, const models::Link& intra) {
    double t = models::PointToPointSeconds(boundary, link);
    if (receivers > 1) t += (receivers - 1) * (intra.latency_s + boundary / (receivers * intra.bandwidth_bytes_s));
    return t;
  };
  if (links.has_next) r.pp_s += hop(links.next, links.next_tp, links.next_intra);
  if (links.has_prev) r.pp_s += hop(links.prev, links.prev_tp, links.prev_intra);
  return r;
}

ReplicaTime AnalyticCostModel::Replica(std::span<const uint32_t> group, uint32_t begin, uint32_t end, double b,
                                       std::span<const uint32_t> next, std::span<const uint32_t> prev,
                                       proto::Recompute recompute, bool leader_broadcast, uint32_t next_tp,
                                       uint32_t prev_tp) const {
  if (group.empty() || b <= 0) return ReplicaTime{};
  return Replica(SlowestGpu(group), static_cast<uint32_t>(group.size()), begin, end, b,
                 Links(group, next, prev, leader_broadcast, next_tp, prev_tp), recompute);
}

double AnalyticCostModel::GradientChunkBytes(uint32_t begin, uint32_t end, uint32_t chunks,
                                             bool holds_embedding) const {
  const RangeShape s = Shape(model_, begin, end);
  const double wb = models::DTypeBytes(training_.dtype());
  double params = 0;
  for (uint32_t c = 0; c < classes_.size(); ++c) {
    const uint32_t blocks = classes_.Count(c, begin, end);
    if (blocks > 0) params += blocks * model_.ParamsPerRank(classes_.first(c), chunks, !holds_embedding);
  }
  if (s.embedding) params += model_.ParamsPerRank(0, chunks, false);
  if (s.head) params += model_.ParamsPerRank(model_.num_layers() - 1, chunks, !holds_embedding);
  return params * wb;
}

double AnalyticCostModel::GradSyncSeconds(double bytes, std::span<const uint32_t> devices, uint32_t zero_stage,
                                          uint32_t micro_batches, proto::CommOptions::Algorithm algorithm) const {
  const uint32_t n = static_cast<uint32_t>(devices.size());
  if (n <= 1 || bytes <= 0) return 0;
  // Rings stripe their hops between nodes over the members' NICs (models::Topology::RingLink); a tree
  // crosses on one path.
  const models::Link link = algorithm == proto::CommOptions::ALGORITHM_TREE && zero_stage < 2
                                ? topology_.Slowest(devices)
                                : topology_.RingLink(devices);
  const double m = std::max<uint32_t>(1, micro_batches);
  // Every collective call's fixed cost α (kernel model), as the simulator charges it.
  const double alpha = compute_.CollectiveLatencySeconds(ComputeGpu(devices[0]), n);
  switch (zero_stage) {
    case 2:
      return m * (models::RingReduceScatterSeconds(bytes, n, link) + alpha) +
             models::RingAllGatherSeconds(bytes, n, link) + alpha;
    case 3:
      return m * (2 * models::RingAllGatherSeconds(bytes, n, link) + models::RingReduceScatterSeconds(bytes, n, link) +
                  3 * alpha);
    default:
      break;
  }
  switch (algorithm) {
    case proto::CommOptions::ALGORITHM_TREE:
      return models::TreeAllReduceSeconds(bytes, n, link) + alpha;
    case proto::CommOptions::ALGORITHM_HIERARCHICAL:
      return topology_.HierarchicalAllReduceSeconds(bytes, devices) + alpha;
    default:
      return models::RingAllReduceSeconds(bytes, n, link) + alpha;
  }
}

double AnalyticCostModel::OptimizerSeconds(uint32_t device, double params) const {
  const models::GpuSpec& gpu = ComputeGpu(device);
  if (Averaging(gpu)) {
    bool all = !types_.empty();
    for (const auto& [type, count] : types_) all = all && compute_.OptimizerProfiled(*type);
    if (all) {
      double sum = 0, n = 0;
      for (const auto& [type, count] : types_) {
        sum += count * compute_.OptimizerSeconds(*type, params);
        n += count;
      }
      return sum / n + compute_.IterationOverheadSeconds(gpu);
    }
  }
  return compute_.OptimizerSeconds(gpu, params) + compute_.IterationOverheadSeconds(gpu);
}

double PipelineSeconds(std::span<const double> stage_times, uint32_t micro_batches, proto::Plan::Schedule schedule,
                       uint32_t virtual_stages) {
  if (stage_times.empty()) return 0;
  double sum = 0, mx = 0;
  for (double t : stage_times) {
    sum += t;
    mx = std::max(mx, t);
  }
  const double m = std::max<uint32_t>(1, micro_batches);
  if (schedule == proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
    const double v = std::max<uint32_t>(1, virtual_stages);
    return m * mx + (sum - mx) / v;
  }
  return (m - 1) * mx + sum;
}

PlanEstimate AnalyticCostModel::ClosedFormEstimate(const proto::Plan& plan, bool with_memory) const {
  PlanEstimate e;
  const proto::Recompute recompute = models::EffectiveRecompute(plan, training_);
  const proto::Plan::Schedule schedule = models::EffectiveSchedule(plan);
  const bool leader = plan.comm().pp_leader_broadcast();
  const uint32_t zero = plan.zero_stage();
  // Per device: its stage's backward time (for overlap), its optimizer parameters.
  std::vector<double> device_backward(cluster_.num_devices(), 0);
  std::vector<uint32_t> device_layers(cluster_.num_devices(), 0);
  std::vector<uint32_t> device_pipeline(cluster_.num_devices(), 0);
  std::vector<char> holds_embedding(cluster_.num_devices(), 0);
  // DP replicas per layer: the ZeRO sharding factor.
  std::vector<uint32_t> replicas(model_.num_layers(), 0);
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model_.num_layers(); ++l) {
        replicas[l] += models::DpDegree(st);
      }
    }
  }
  e.pipelines.reserve(plan.pipelines_size());
  std::vector<double> times;
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    PipelineEstimate pe;
    pe.micro_batches = pipe.num_micro_batches();
    times.clear();
    const int S = pipe.stages_size();
    for (int s = 0; s < S; ++s) {
      const auto& st = pipe.stages(s);
      const uint32_t tp = models::TpDegree(st);
      const auto split = models::MicroBatchSplit(st, pipe.micro_batch_size());
      const std::span<const uint32_t> devices(st.devices().data(), st.devices_size());
      std::span<const uint32_t> next, prev;
      uint32_t next_tp = 1;
      if (s + 1 < S) {
        next = std::span<const uint32_t>(pipe.stages(s + 1).devices().data(), pipe.stages(s + 1).devices_size());
        next_tp = models::TpDegree(pipe.stages(s + 1));
      }
      if (s > 0)
        prev = std::span<const uint32_t>(pipe.stages(s - 1).devices().data(), pipe.stages(s - 1).devices_size());
      StageEstimate se;
      for (uint32_t r = 0; r < models::DpDegree(st); ++r) {
        const auto group = devices.subspan(size_t{r} * tp, tp);
        const double b = r < split.size() ? split[r] : 0;
        const ReplicaTime rt =
            Replica(group, st.layer_begin(), st.layer_end(), b, next, prev, recompute, leader, next_tp);
        if (rt.total_s() >= se.time_s) {
          se.time_s = rt.total_s();
          se.slowest = rt;
        }
        for (uint32_t d : group) {
          device_backward[d] = std::max(device_backward[d], rt.backward_s);
          device_layers[d] = st.layer_end() - st.layer_begin();
          device_pipeline[d] = static_cast<uint32_t>(p);
          holds_embedding[d] = st.layer_begin() == 0;
        }
      }
      times.push_back(se.time_s);
      pe.stages.push_back(se);
    }
    pe.time_s = PipelineSeconds(times, pipe.num_micro_batches(), schedule, plan.virtual_stages());
    double work = 0;
    for (double t : times) work += pipe.num_micro_batches() * t;
    pe.bubble_fraction = pe.time_s > 0 && S > 0 ? std::max(0.0, 1.0 - work / (S * pe.time_s)) : 0;
    if (pe.time_s > e.pipeline_s) {
      e.pipeline_s = pe.time_s;
      e.slowest_pipeline = static_cast<uint32_t>(p);
    }
    e.pipelines.push_back(std::move(pe));
  }
  // Gradient synchronisation: each device runs its groups one after another.
  std::vector<double> sync(cluster_.num_devices(), 0);
  for (const auto& g : models::DeriveGradSyncGroups(plan, model_)) {
    // The group's first holder tells whether a tied head keeps its own embedding copy.
    const double bytes =
        GradientChunkBytes(g.layer_begin, g.layer_end, g.num_chunks, holds_embedding[g.devices.front()]);
    uint32_t m = 1;
    for (uint32_t d : g.devices)
      m = std::max(m, plan.pipelines(static_cast<int>(device_pipeline[d])).num_micro_batches());
    // Bucketed as the simulator plays it: ⌈S / bucket⌉ equal collectives, one after another, so each
    // bucket pays the collective's latency terms again.
    const double bucket = plan.comm().dp_bucket_mib() * 1024 * 1024;
    const double buckets = bucket > 0 ? std::max(1.0, std::ceil(bytes / bucket)) : 1.0;
    const double t = buckets * GradSyncSeconds(bytes / buckets, g.devices, zero, m, plan.comm().dp_algorithm());
    for (uint32_t d : g.devices) sync[d] += t;
  }
  for (uint32_t d = 0; d < cluster_.num_devices(); ++d) {
    double t = sync[d];
    if (plan.comm().dp_overlap() && t > 0) {
      // Each layer's gradients are ready when its backward ends: all but the last layer's share overlap.
      const double last = t / std::max<uint32_t>(1, device_layers[d]);
      t = std::max(last, t - device_backward[d]);
    }
    e.dp_sync_s = std::max(e.dp_sync_s, t);
  }
  // Optimizer step.
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      const uint32_t tp = models::TpDegree(st);
      const bool has_embedding = st.layer_begin() == 0;
      double params = 0;
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model_.num_layers(); ++l) {
        const double n = model_.ParamsPerRank(l, tp, !has_embedding);
        params += zero >= 1 ? n / std::max<uint32_t>(1, replicas[l]) : n;
      }
      for (uint32_t d : st.devices()) e.optimizer_s = std::max(e.optimizer_s, OptimizerSeconds(d, params));
    }
  }
  e.iteration_s = e.pipeline_s + e.dp_sync_s + e.optimizer_s;
  AddThroughputAndMemory(plan, with_memory, &e);
  return e;
}

void AnalyticCostModel::AddThroughputAndMemory(const proto::Plan& plan, bool with_memory, PlanEstimate* out) const {
  PlanEstimate& e = *out;
  const double sequences = training_.global_batch_size();
  if (e.iteration_s > 0) {
    e.tokens_per_s = sequences * training_.seq_len() / e.iteration_s;
    double peak = 0;
    std::vector<char> used(cluster_.num_devices(), 0);
    for (const auto& pipe : plan.pipelines()) {
      for (const auto& st : pipe.stages()) {
        for (uint32_t d : st.devices()) {
          if (d < used.size() && !used[d]) {
            used[d] = 1;
            peak += cluster_.device(d).gpu->PeakTflops(training_.dtype()) * 1e12;
          }
        }
      }
    }
    if (peak > 0) e.mfu = model_.IterationModelFlops(sequences, training_.seq_len()) / (e.iteration_s * peak);
  }
  if (with_memory) {
    e.has_memory = true;
    e.worst_shortfall_gib = -std::numeric_limits<double>::infinity();
    const models::PlanContext ctx{cluster_, model_, training_};
    for (const auto& dm : models::EstimateMemory(plan, ctx)) {
      const double frac = dm.capacity_gib > 0 ? dm.total_gib / dm.capacity_gib : 0;
      if (frac > e.peak_memory_fraction) {
        e.peak_memory_fraction = frac;
        e.tightest_device = dm.device;
      }
      e.worst_shortfall_gib = std::max(e.worst_shortfall_gib, dm.total_gib - dm.capacity_gib);
      e.oom |= dm.oom();
    }
  }
}

double AnalyticCostModel::View::LayerSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch,
                                             bool forward, proto::Recompute recompute, models::SequenceSharding shard,
                                             const models::ExpertSharding& experts) const {
  if (shard.ways() == 1 && m_.Averaging(gpu)) {
    // AMP's averaged view: the mean of the devices' profiled times, when every GPU type has one.
    bool all = !m_.types_.empty();
    for (const auto& [type, count] : m_.types_) all = all && m_.compute_.IsProfiled(*type, layer, tp, batch);
    if (all) {
      double sum = 0, n = 0;
      for (const auto& [type, count] : m_.types_) {
        sum += count * (forward ? m_.compute_.ForwardSeconds(*type, layer, tp, batch)
                                : m_.compute_.BackwardSeconds(*type, layer, tp, batch, recompute));
        n += count;
      }
      return sum / n;
    }
  }
  if (forward) return m_.compute_.ForwardSeconds(gpu, layer, tp, batch, shard, experts);
  return m_.compute_.BackwardSeconds(gpu, layer, tp, batch, recompute, shard, experts);
}

double AnalyticCostModel::View::OptimizerSeconds(const models::GpuSpec& gpu, double params) const {
  if (m_.Averaging(gpu)) {
    bool all = !m_.types_.empty();
    for (const auto& [type, count] : m_.types_) all = all && m_.compute_.OptimizerProfiled(*type);
    if (all) {
      double sum = 0, n = 0;
      for (const auto& [type, count] : m_.types_) {
        sum += count * m_.compute_.OptimizerSeconds(*type, params);
        n += count;
      }
      return sum / n + m_.compute_.IterationOverheadSeconds(gpu);
    }
  }
  return m_.compute_.OptimizerSeconds(gpu, params) + m_.compute_.IterationOverheadSeconds(gpu);
}

Result<PlayResult> AnalyticCostModel::Play(const proto::Plan& plan, const PlayOptions& options) const {
  return player_.Play(plan, options);
}

PlanEstimate AnalyticCostModel::Estimate(const proto::Plan& plan, bool with_memory) const {
  PlayOptions options;
  options.contention_passes = options_.contention_passes;
  options.extrapolate = true;
  auto play = player_.Play(plan, options);
  if (!play.ok()) return ClosedFormEstimate(plan, with_memory);
  PlanEstimate e = FromPlay(plan, *play);
  AddThroughputAndMemory(plan, with_memory, &e);
  return e;
}

double AnalyticCostModel::LowerBoundSeconds(const proto::Plan& plan) const {
  // The simulator may play the plan folded or not (SimOptions::fold): the smaller of the two plays.
  PlayOptions options;
  options.pricing = Pricing::kLowerBound;
  options.fold = false;
  auto unfolded = player_.Play(plan, options);
  if (!unfolded.ok()) return 0;
  double bound = unfolded->iteration_s;
  options.fold = true;
  auto folded = player_.Play(plan, options);
  if (folded.ok() && folded->folded) bound = std::min(bound, folded->iteration_s);
  return bound;
}

PlanEstimate AnalyticCostModel::FromPlay(const proto::Plan& plan, const PlayResult& play) const {
  PlanEstimate e;
  e.played = true;
  e.folded = play.folded;
  e.iteration_s = play.iteration_s;
  e.pipelines.resize(plan.pipelines_size());
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    e.pipelines[p].micro_batches = plan.pipelines(p).num_micro_batches();
    e.pipelines[p].stages.resize(plan.pipelines(p).stages_size());
  }
  for (const DevicePlay& d : play.devices) {
    PipelineEstimate& pe = e.pipelines[d.pipeline];
    pe.time_s = std::max(pe.time_s, d.pipeline_end_s);
    const double m = std::max<uint32_t>(1, pe.micro_batches);
    StageEstimate& se = pe.stages[d.stage];
    ReplicaTime r;
    r.forward_s = d.forward_s / m;
    r.backward_s = d.backward_s / m;
    r.tp_s = d.tp_s / m;
    if (r.total_s() >= se.time_s) {
      se.time_s = r.total_s();
      se.slowest = r;
    }
    e.optimizer_s = std::max(e.optimizer_s, d.optimizer_s);
  }
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    PipelineEstimate& pe = e.pipelines[p];
    double work = 0;
    for (const auto& st : pe.stages) work += pe.micro_batches * st.time_s;
    const double S = static_cast<double>(pe.stages.size());
    pe.bubble_fraction = pe.time_s > 0 && S > 0 ? std::max(0.0, 1.0 - work / (S * pe.time_s)) : 0;
    if (pe.time_s > e.pipeline_s) {
      e.pipeline_s = pe.time_s;
      e.slowest_pipeline = static_cast<uint32_t>(p);
    }
  }
  // The simulator's wait for the slowest node (models/stragglers.h); the breakdown counts it in the sync.
  e.iteration_s += models::StragglerWaitFor(plan, cluster_, compute_, play.iteration_s).seconds;
  e.dp_sync_s = std::max(0.0, e.iteration_s - e.pipeline_s - e.optimizer_s);
  return e;
}

models::GpuSpec AverageGpu(const models::Cluster& cluster) {
  std::vector<uint32_t> all(cluster.num_devices());
  for (uint32_t d = 0; d < cluster.num_devices(); ++d) all[d] = d;
  return AverageGpu(cluster, all);
}

models::GpuSpec AverageGpu(const models::Cluster& cluster, const std::vector<uint32_t>& devices) {
  models::GpuSpec avg;
  avg.name = "average";
  const double n = std::max<size_t>(1, devices.size());
  for (uint32_t d : devices) {
    const auto& g = *cluster.device(d).gpu;
    avg.peak_bf16_tflops += g.peak_bf16_tflops / n;
    avg.peak_fp16_tflops += g.peak_fp16_tflops / n;
    avg.peak_fp32_tflops += g.peak_fp32_tflops / n;
    avg.peak_tf32_tflops += g.PeakTflops(proto::DTYPE_TF32) / n;  // FP32 where a part has no TF32
    avg.peak_fp8_tflops += g.peak_fp8_tflops / n;
    avg.memory_gib += g.memory_gib / n;
    avg.hbm_bandwidth_gbyte_s += g.hbm_bandwidth_gbyte_s / n;
    avg.scale_up_bandwidth_gbyte_s += g.scale_up_bandwidth_gbyte_s / n;
    avg.pcie_bandwidth_gbyte_s += g.pcie_bandwidth_gbyte_s / n;
  }
  return avg;
}

std::string DescribeEstimate(const PlanEstimate& e) {
  std::string out = "estimate (analytic model, " +
                    std::string(e.played ? (e.folded ? "lowering played folded" : "lowering played") : "closed form") +
                    "): iteration " + Seconds(e.iteration_s) + "; slowest pipeline " + Seconds(e.pipeline_s) +
                    " (pipeline " + std::to_string(e.slowest_pipeline) + "), then DP sync " + Seconds(e.dp_sync_s) +
                    " and optimizer " + Seconds(e.optimizer_s) + "\n";
  out += "  throughput " + Fmt("%.0f", e.tokens_per_s) + " tokens/s, MFU " + Fmt("%.1f%%", 100 * e.mfu);
  if (e.has_memory) {
    out += ", peak memory " + Fmt("%.0f%%", 100 * e.peak_memory_fraction) + " of device " +
           std::to_string(e.tightest_device) + (e.oom ? " (OUT OF MEMORY)" : "");
  }
  out += "\n";
  // Identical pipelines are collapsed into one line.
  for (size_t p = 0; p < e.pipelines.size(); ++p) {
    const auto& pe = e.pipelines[p];
    size_t q = p;
    auto same = [&](const PipelineEstimate& a, const PipelineEstimate& b) {
      if (a.stages.size() != b.stages.size() || a.micro_batches != b.micro_batches) return false;
      return std::abs(a.time_s - b.time_s) <= 1e-12 * std::max(1.0, a.time_s);
    };
    while (q + 1 < e.pipelines.size() && same(pe, e.pipelines[q + 1])) ++q;
    double slowest_stage = 0;
    for (const auto& s : pe.stages) slowest_stage = std::max(slowest_stage, s.time_s);
    out += "  pipeline" + (q > p ? "s " + std::to_string(p) + "-" + std::to_string(q) : " " + std::to_string(p)) +
           ": " + Seconds(pe.time_s) + " (" + std::to_string(pe.stages.size()) + " stages, " +
           std::to_string(pe.micro_batches) + " micro-batches, slowest stage " + Seconds(slowest_stage) +
           " per micro-batch, bubble " + Fmt("%.1f%%", 100 * pe.bubble_fraction) + ")\n";
    p = q;
  }
  return out;
}

}  // namespace hetsim::planners
