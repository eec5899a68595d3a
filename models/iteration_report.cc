#include "models/iteration_report.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <map>

namespace hetsim::models {

const char* const kFlopsConvention =
    "model FLOPs = 3 x forward FLOPs (2 per multiply-add of every matmul, plus 4*b*s^2*h attention per layer, "
    "no causal halving, no recomputation) / (iteration time x sum of the plan's devices' dense peak at the "
    "training dtype)";

proto::IterationReport BuildIterationReport(const IterationMeasure& m, const Cluster& cluster,
                                            const TransformerModel& model, const proto::Training& training) {
  proto::IterationReport rep;
  rep.set_kind("iteration_report");
  rep.set_cluster(cluster.name());
  rep.set_model(model.name());
  rep.set_plan(m.plan_name);
  rep.set_source(m.source);
  const double T = m.iteration_s;
  rep.set_iteration_time_s(T);
  const double seqs = training.global_batch_size();
  rep.set_tokens_per_s(T > 0 ? seqs * training.seq_len() / T : 0);
  double peak = 0;
  for (const auto& d : m.devices) peak += cluster.device(d.device).gpu->PeakTflops(training.dtype()) * 1e12;
  rep.set_mfu(T > 0 && peak > 0 ? model.IterationModelFlops(seqs, training.seq_len()) / (T * peak) : 0);
  rep.set_flops_convention(kFlopsConvention);
  std::map<uint32_t, double> phase_end;  // pipeline -> end of its last forward/backward compute
  for (const auto& d : m.devices) {
    auto& e = phase_end[d.pipeline];
    e = std::max(e, d.pipeline_end_s);
  }
  double idle_in_phase = 0, phase_total = 0;
  bool any_oom = false;
  for (const auto& d : m.devices) {
    auto* dr = rep.add_devices();
    dr->set_device(d.device);
    dr->set_gpu(cluster.device(d.device).gpu->name);
    dr->set_node(cluster.node(cluster.device(d.device).node).name);
    dr->set_pipeline(d.pipeline);
    dr->set_stage(d.stage);
    dr->set_compute_s(d.compute_s);
    const double comm = d.tp_s + d.pp_s + d.dp_s + d.zero_s + d.cp_s + d.ep_s;
    dr->set_communication_s(comm);
    dr->set_idle_s(std::max(0.0, T - d.compute_s - comm));
    dr->set_tp_communication_s(d.tp_s);
    dr->set_pp_communication_s(d.pp_s);
    dr->set_dp_communication_s(d.dp_s + d.zero_s);
    dr->set_cp_communication_s(d.cp_s);
    dr->set_ep_communication_s(d.ep_s);
    dr->set_peak_memory_gib(d.peak_memory_gib);
    dr->set_capacity_gib(d.capacity_gib);
    const bool oom = d.peak_memory_gib > d.capacity_gib;
    dr->set_oom(oom);
    any_oom |= oom;
    const double phase = phase_end[d.pipeline];
    phase_total += phase;
    idle_in_phase += std::max(0.0, phase - d.fwd_bwd_s - d.comm_in_phase_s);
  }
  rep.set_any_oom(any_oom);
  rep.set_bubble_fraction(phase_total > 0 ? idle_in_phase / phase_total : 0);
  rep.set_wall_time_s(m.wall_time_s);
  return rep;
}

std::string JsonEscape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", u);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

std::string ChromeTraceJson(const IterationMeasure& m, const Cluster& cluster) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"source\": \"" + JsonEscape(m.source) +
                    "\", \"plan\": \"" + JsonEscape(m.plan_name) + "\"},\n\"traceEvents\": [\n";
  bool first = true;
  auto emit = [&](const std::string& e) {
    out += first ? "  " : ",\n  ";
    out += e;
    first = false;
  };
  std::vector<bool> named_node(cluster.nodes().size(), false);
  char buf[256];
  for (const auto& d : m.devices) {
    const auto& info = cluster.device(d.device);
    const std::string pid = std::to_string(info.node), tid = std::to_string(d.device);
    if (!named_node[info.node]) {
      named_node[info.node] = true;
      emit("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + pid + ", \"args\": {\"name\": \"" +
           JsonEscape(cluster.node(info.node).name) + "\"}}");
    }
    emit("{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + pid + ", \"tid\": " + tid +
         ", \"args\": {\"name\": \"GPU " + tid + " (" + JsonEscape(info.gpu->name) + ") p" +
         std::to_string(d.pipeline) + " s" + std::to_string(d.stage) + "\"}}");
    emit("{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " + pid + ", \"tid\": " + tid +
         ", \"args\": {\"sort_index\": " + tid + "}}");
    for (const auto& s : d.slices) {
      const char* cat = CategoryName(s.category);
      const bool per_mb = s.micro_batch >= 0 && s.category != Category::kOptimizer && s.category != Category::kDp;
      const std::string name = per_mb ? std::string(cat) + " mb " + std::to_string(s.micro_batch) : cat;
      std::snprintf(buf, sizeof(buf),
                    "\"cat\": \"%s\", \"pid\": %u, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f, \"args\": "
                    "{\"micro_batch\": %d}}",
                    cat, info.node, d.device, s.start_s * 1e6, (s.end_s - s.start_s) * 1e6, s.micro_batch);
      emit("{\"ph\": \"X\", \"name\": \"" + name + "\", " + buf);
    }
  }
  out += "\n]}\n";
  return out;
}

std::string MessageJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opt;
  opt.add_whitespace = true;
  opt.preserve_proto_field_names = true;
  opt.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, opt);
  return json;
}

std::string ReportJson(const proto::IterationReport& report) { return MessageJson(report); }

}  // namespace hetsim::models
