#include "executor/trace.h"

#include <algorithm>
#include <cstdio>

namespace hetsim::executor {

size_t SliceRecorder::Begin(Category c, int32_t micro_batch, int32_t layer) {
  const Backend::Mark begin = backend_->Record();
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({c, micro_batch, layer, begin, 0});
  return pending_.size() - 1;
}

void SliceRecorder::End(size_t index) {
  const Backend::Mark end = backend_->Record();
  std::lock_guard<std::mutex> lock(mu_);
  pending_.at(index).end = end;
}

std::vector<TimedSlice> SliceRecorder::Resolve(Backend::Mark origin) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TimedSlice> out;
  out.reserve(pending_.size());
  for (const auto& p : pending_) {
    out.push_back(
        {p.category, p.micro_batch, backend_->Elapsed(origin, p.begin), backend_->Elapsed(origin, p.end), p.layer});
  }
  pending_.clear();
  return out;
}

std::vector<double> CategorySeconds(const std::vector<TimedSlice>& slices, bool exclusive) {
  std::vector<double> s(kNumCategories, 0.0);
  for (const auto& sl : slices) s[static_cast<size_t>(sl.category)] += sl.end_s - sl.begin_s;
  if (exclusive) {
    // TP collectives, CP's ring, Ulysses' and EP's all-to-alls run inside a forward or backward slice: attribute
    // them to communication only.
    for (const auto& sl : slices) {
      if (sl.category != Category::kTp && sl.category != Category::kCp && sl.category != Category::kEp) continue;
      for (const auto& outer : slices) {
        if ((outer.category == Category::kForward || outer.category == Category::kBackward) &&
            outer.begin_s <= sl.begin_s && sl.end_s <= outer.end_s) {
          s[static_cast<size_t>(outer.category)] -= sl.end_s - sl.begin_s;
          break;
        }
      }
    }
  }
  return s;
}

namespace {

// The slowest rank's duration of each timed iteration.
std::vector<double> IterationTimes(const std::vector<DeviceTiming>& devices) {
  std::vector<double> t;
  for (const auto& d : devices) {
    if (t.size() < d.iteration_s.size()) t.resize(d.iteration_s.size(), 0.0);
    for (size_t i = 0; i < d.iteration_s.size(); ++i) t[i] = std::max(t[i], d.iteration_s[i]);
  }
  return t;
}

}  // namespace

models::IterationMeasure MeasureIteration(const ReportContext& ctx, const std::vector<DeviceTiming>& devices) {
  models::IterationMeasure m;
  m.source = "executor";
  m.plan_name = ctx.plan_name;
  m.wall_time_s = ctx.wall_time_s;
  const auto iters = IterationTimes(devices);
  std::vector<double> offset(iters.size() + 1, 0.0);
  for (size_t i = 0; i < iters.size(); ++i) offset[i + 1] = offset[i] + iters[i];
  m.iteration_s = iters.empty() ? 0 : offset.back() / double(iters.size());
  const double gib = 1024.0 * 1024.0 * 1024.0;
  for (const auto& d : devices) {
    const RankRole& role = ctx.plan.roles.at(static_cast<size_t>(d.rank));
    std::vector<double> sum(kNumCategories, 0.0);
    double pipeline_end = 0;
    models::DeviceMeasure dm;
    for (size_t i = 0; i < d.slices.size(); ++i) {
      const auto s = CategorySeconds(d.slices[i], true);
      for (int c = 0; c < kNumCategories; ++c) sum[static_cast<size_t>(c)] += s[static_cast<size_t>(c)];
      double end = 0;
      for (const auto& sl : d.slices[i]) {
        if (sl.category == Category::kForward || sl.category == Category::kBackward) end = std::max(end, sl.end_s);
        dm.slices.push_back({offset[i] + sl.begin_s, offset[i] + sl.end_s, sl.category, sl.micro_batch});
      }
      pipeline_end += end;
    }
    const double n = std::max<size_t>(1, d.slices.size());
    auto avg = [&](Category c) { return sum[static_cast<size_t>(c)] / n; };
    dm.device = role.device;
    dm.pipeline = role.pipeline;
    dm.stage = role.stage;
    dm.fwd_bwd_s = avg(Category::kForward) + avg(Category::kBackward);
    dm.compute_s = dm.fwd_bwd_s + avg(Category::kOptimizer);
    dm.tp_s = avg(Category::kTp);
    dm.pp_s = avg(Category::kPp);
    dm.dp_s = avg(Category::kDp);
    dm.zero_s = avg(Category::kZero);
    dm.cp_s = avg(Category::kCp);
    dm.ep_s = avg(Category::kEp);
    dm.pipeline_end_s = pipeline_end / n;
    dm.comm_in_phase_s = dm.tp_s + dm.pp_s + dm.cp_s + dm.ep_s;  // the gradient sync comes after the last backward pass
    dm.peak_memory_gib = d.peak_memory_bytes / gib;
    dm.capacity_gib = ctx.cluster.device(role.device).gpu->memory_gib;
    m.devices.push_back(std::move(dm));
  }
  return m;
}

proto::IterationReport BuildReport(const ReportContext& ctx, const std::vector<DeviceTiming>& devices) {
  return models::BuildIterationReport(MeasureIteration(ctx, devices), ctx.cluster, ctx.model, ctx.training);
}

std::string BuildChromeTrace(const ReportContext& ctx, const std::vector<DeviceTiming>& devices) {
  return models::ChromeTraceJson(MeasureIteration(ctx, devices), ctx.cluster);
}

std::vector<LayerMeasurement> MeasureLayers(const std::vector<std::vector<TimedSlice>>& steps,
                                            const std::vector<double>& activation_bytes, uint32_t layer_begin,
                                            uint32_t layer_end, uint32_t micro_batches) {
  std::vector<LayerMeasurement> out;
  for (uint32_t l = layer_begin; l < layer_end; ++l) {
    LayerMeasurement m;
    m.layer = l;
    if (l - layer_begin < activation_bytes.size()) m.activation_bytes = activation_bytes[l - layer_begin];
    out.push_back(m);
  }
  if (steps.empty()) return out;
  for (const auto& step : steps) {
    for (const auto& s : step) {
      if (s.layer < static_cast<int32_t>(layer_begin) || s.layer >= static_cast<int32_t>(layer_end)) continue;
      LayerMeasurement& m = out[static_cast<size_t>(s.layer) - layer_begin];
      const double d = s.end_s - s.begin_s;
      if (s.category == Category::kForward) m.forward_s += d;
      if (s.category == Category::kBackward) m.backward_s += d;
      if (s.category == Category::kOptimizer) m.optimizer_s += d;
    }
  }
  const double n = double(steps.size());
  for (auto& m : out) {
    m.forward_s /= n * micro_batches;
    m.backward_s /= n * micro_batches;
    m.optimizer_s /= n;
  }
  return out;
}

std::vector<proto::LayerTiming> ProfileLayers(const models::TransformerModel& model,
                                              const std::vector<LayerMeasurement>& layers, uint32_t tp,
                                              uint32_t micro_batch_size) {
  const models::LayerKind kinds[] = {models::LayerKind::kEmbedding, models::LayerKind::kTransformer,
                                     models::LayerKind::kHead};
  const proto::LayerTiming::LayerKind proto_kinds[] = {proto::LayerTiming::LAYER_KIND_EMBEDDING,
                                                       proto::LayerTiming::LAYER_KIND_TRANSFORMER,
                                                       proto::LayerTiming::LAYER_KIND_HEAD};
  std::vector<proto::LayerTiming> out;
  for (int k = 0; k < 3; ++k) {
    LayerMeasurement sum;
    int n = 0;
    for (const auto& m : layers) {
      if (model.kind(m.layer) != kinds[k]) continue;
      sum.forward_s += m.forward_s;
      sum.backward_s += m.backward_s;
      sum.optimizer_s += m.optimizer_s;
      sum.activation_bytes += m.activation_bytes;
      ++n;
    }
    if (n == 0) continue;
    proto::LayerTiming t;
    t.set_layer(proto_kinds[k]);
    t.set_tp_degree(tp);
    t.set_micro_batch_size(micro_batch_size);
    t.set_forward_s(sum.forward_s / n);
    t.set_backward_s(sum.backward_s / n);
    t.set_optimizer_s(sum.optimizer_s / n);
    t.set_activation_gib(sum.activation_bytes / n / (1024.0 * 1024.0 * 1024.0));
    out.push_back(t);
  }
  return out;
}

}  // namespace hetsim::executor
