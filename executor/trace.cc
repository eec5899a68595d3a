#include "executor/trace.h"

#include <algorithm>
#include <cstdio>

namespace hetsim::executor {

const char* CategoryName(Category c) {
  switch (c) {
    case Category::kForward: return "forward";
    case Category::kBackward: return "backward";
    case Category::kOptimizer: return "optimizer";
    case Category::kTp: return "tp";
    case Category::kPp: return "pp";
    case Category::kDp: return "dp";
  }
  return "?";
}

size_t SliceRecorder::Begin(Category c, int32_t micro_batch, int32_t layer) {
  pending_.push_back({c, micro_batch, layer, backend_->Record(), 0});
  return pending_.size() - 1;
}

void SliceRecorder::End(size_t index) { pending_.at(index).end = backend_->Record(); }

std::vector<TimedSlice> SliceRecorder::Resolve(Backend::Mark origin) {
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
    // TP collectives run inside a forward or backward slice: attribute them to communication only.
    for (const auto& sl : slices) {
      if (sl.category != Category::kTp) continue;
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

proto::IterationReport BuildReport(const ReportContext& ctx, const std::vector<DeviceTiming>& devices) {
  proto::IterationReport r;
  r.set_kind("iteration_report");
  r.set_cluster(ctx.cluster.name());
  r.set_model(ctx.model.name());
  r.set_plan(ctx.plan_name);
  r.set_source("executor");
  const auto iters = IterationTimes(devices);
  double t = 0;
  for (double x : iters) t += x;
  t = iters.empty() ? 0 : t / double(iters.size());
  r.set_iteration_time_s(t);
  const double tokens = double(ctx.training.global_batch_size()) * ctx.training.seq_len();
  r.set_tokens_per_s(t > 0 ? tokens / t : 0);
  double peak_flops = 0;
  for (uint32_t d : ctx.plan.devices) peak_flops += ctx.cluster.device(d).gpu->PeakTflops(ctx.training.dtype()) * 1e12;
  const double model_flops = ctx.model.IterationModelFlops(ctx.training.global_batch_size(), ctx.training.seq_len());
  r.set_mfu(t > 0 && peak_flops > 0 ? model_flops / (t * peak_flops) : 0);
  r.set_flops_convention("model FLOPs = 3 x forward FLOPs (TransformerModel::IterationModelFlops: 2 per MAC, "
                         "attention 4·b·s²·h per layer, no causal halving, no recomputation)");
  double idle_total = 0;
  for (const auto& d : devices) {
    const RankRole& role = ctx.plan.roles.at(static_cast<size_t>(d.rank));
    std::vector<double> sum(kNumCategories, 0.0);
    for (const auto& it : d.slices) {
      const auto s = CategorySeconds(it, true);
      for (int c = 0; c < kNumCategories; ++c) sum[static_cast<size_t>(c)] += s[static_cast<size_t>(c)];
    }
    const double n = std::max<size_t>(1, d.slices.size());
    auto avg = [&](Category c) { return sum[static_cast<size_t>(c)] / n; };
    auto* dr = r.add_devices();
    dr->set_device(role.device);
    const auto& info = ctx.cluster.device(role.device);
    dr->set_gpu(info.gpu->name);
    dr->set_node(ctx.cluster.node(info.node).name);
    dr->set_pipeline(role.pipeline);
    dr->set_stage(role.stage);
    const double compute = avg(Category::kForward) + avg(Category::kBackward) + avg(Category::kOptimizer);
    const double comm = avg(Category::kTp) + avg(Category::kPp) + avg(Category::kDp);
    dr->set_compute_s(compute);
    dr->set_communication_s(comm);
    dr->set_tp_communication_s(avg(Category::kTp));
    dr->set_pp_communication_s(avg(Category::kPp));
    dr->set_dp_communication_s(avg(Category::kDp));
    const double idle = std::max(0.0, t - compute - comm);
    dr->set_idle_s(idle);
    idle_total += idle;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    dr->set_peak_memory_gib(d.peak_memory_bytes / gib);
    dr->set_capacity_gib(info.gpu->memory_gib);
    dr->set_oom(d.peak_memory_bytes / gib > info.gpu->memory_gib);
    if (dr->oom()) r.set_any_oom(true);
  }
  r.set_bubble_fraction(t > 0 && !devices.empty() ? idle_total / (t * double(devices.size())) : 0);
  r.set_wall_time_s(ctx.wall_time_s);
  return r;
}

namespace {

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o;
}

}  // namespace

std::string BuildChromeTrace(const ReportContext& ctx, const std::vector<DeviceTiming>& devices) {
  const auto iters = IterationTimes(devices);
  std::vector<double> offset(iters.size() + 1, 0.0);
  for (size_t i = 0; i < iters.size(); ++i) offset[i + 1] = offset[i] + iters[i];
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"source\": \"executor\", \"plan\": \"" +
                    JsonEscape(ctx.plan_name) + "\"},\n\"traceEvents\": [\n";
  bool first = true;
  auto emit = [&](const std::string& e) {
    out += first ? "  " : ",\n  ";
    out += e;
    first = false;
  };
  std::vector<bool> named_node(ctx.cluster.nodes().size(), false);
  char buf[512];
  for (const auto& d : devices) {
    const RankRole& role = ctx.plan.roles.at(static_cast<size_t>(d.rank));
    const auto& info = ctx.cluster.device(role.device);
    if (!named_node[info.node]) {
      named_node[info.node] = true;
      emit("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(info.node) +
           ", \"args\": {\"name\": \"" + JsonEscape(ctx.cluster.node(info.node).name) + "\"}}");
    }
    std::snprintf(buf, sizeof(buf),
                  "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %u, \"tid\": %u, \"args\": {\"name\": "
                  "\"GPU %u (%s) p%u s%u\"}}",
                  info.node, role.device, role.device, JsonEscape(info.gpu->name).c_str(), role.pipeline, role.stage);
    emit(buf);
    emit("{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " + std::to_string(info.node) +
         ", \"tid\": " + std::to_string(role.device) + ", \"args\": {\"sort_index\": " + std::to_string(role.device) +
         "}}");
    for (size_t i = 0; i < d.slices.size(); ++i) {
      for (const auto& s : d.slices[i]) {
        const std::string name = s.micro_batch >= 0 ? std::string(CategoryName(s.category)) + " mb " +
                                                          std::to_string(s.micro_batch)
                                                    : CategoryName(s.category);
        std::snprintf(buf, sizeof(buf),
                      "{\"ph\": \"X\", \"name\": \"%s\", \"cat\": \"%s\", \"pid\": %u, \"tid\": %u, \"ts\": %.3f, "
                      "\"dur\": %.3f, \"args\": {\"iteration\": %zu, \"micro_batch\": %d}}",
                      name.c_str(), CategoryName(s.category), info.node, role.device, (offset[i] + s.begin_s) * 1e6,
                      (s.end_s - s.begin_s) * 1e6, i, s.micro_batch);
        emit(buf);
      }
    }
  }
  out += "\n]}\n";
  return out;
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
