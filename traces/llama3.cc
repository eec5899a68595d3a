#include "traces/llama3.h"

#include "traces/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

namespace hetsim::traces {

const std::vector<InterruptionRow>& Llama3Table5() {
  // Llama 3 Herd of Models (arXiv:2407.21783), Table 5: root-cause categorisation of the unexpected
  // interruptions during a 54-day period of Llama 3 405B pre-training (419 in all).
  static const std::vector<InterruptionRow> rows = {
      {"Faulty GPU", "GPU", 148},
      {"GPU HBM3 Memory", "GPU", 72},
      {"Software Bug", "Dependency", 54},
      {"Network Switch/Cable", "Network", 35},
      {"Host Maintenance", "Unplanned Maintenance", 32},
      {"GPU SRAM Memory", "GPU", 19},
      {"GPU System Processor", "GPU", 17},
      {"NIC", "Host", 7},
      {"NCCL Watchdog Timeouts", "Unknown", 7},
      {"Silent Data Corruption", "GPU", 6},
      {"GPU Thermal Interface + Sensor", "GPU", 6},
      {"SSD", "Host", 3},
      {"Power Supply", "Host", 3},
      {"Server Chassis", "Host", 2},
      {"IO Expansion Board", "Host", 2},
      {"Dependency", "Dependency", 2},
      {"CPU", "Host", 2},
      {"System Memory", "Host", 2},
  };
  return rows;
}

double ExpectedFailureEvents(const models::Cluster& cluster, const FailureTraceOptions& options) {
  double per_gpu_day = 0;
  for (const auto& row : Llama3Table5()) per_gpu_day += row.count / (kLlama3Gpus * kLlama3Days);
  return options.rate_scale * per_gpu_day * cluster.num_devices() * options.days;
}

Status CheckFailureTraceOptions(const models::Cluster& cluster, const FailureTraceOptions& options,
                                const std::string& days_field, const std::string& rate_field) {
  char buf[400];
  if (!(options.days > 0 && options.days <= 3650)) {
    std::snprintf(buf, sizeof buf, "%s: %g is not a length in days (0 < days <= 3650)", days_field.c_str(),
                  options.days);
    return Status::Invalid(buf);
  }
  if (!(options.rate_scale >= 0 && options.rate_scale <= 1000)) {
    std::snprintf(buf, sizeof buf, "%s: %g is not a factor between 0 and 1000", rate_field.c_str(),
                  options.rate_scale);
    return Status::Invalid(buf);
  }
  // Mean plus six standard deviations of the Poisson count stays within the limit.
  const double mean = ExpectedFailureEvents(cluster, options);
  if (mean + 6 * std::sqrt(mean) > kMaxTraceEvents) {
    std::snprintf(buf, sizeof buf,
                  "%s / %s: about %.3g events on %u GPUs, more than a trace may hold (%u); draw fewer days or a "
                  "lower rate (at most %.3g days at this rate)",
                  days_field.c_str(), rate_field.c_str(), mean, cluster.num_devices(), kMaxTraceEvents,
                  options.days * 0.99 * kMaxTraceEvents / mean);
    return Status::Invalid(buf);
  }
  return Status::Ok();
}

proto::Trace GenerateLlama3Failures(const models::Cluster& cluster, const std::string& cluster_ref,
                                    const FailureTraceOptions& options) {
  proto::Trace t;
  t.set_kind("trace");
  char name[160];
  std::snprintf(name, sizeof name, "llama3-failures-%s-%gd-seed%llu", cluster.spec().name().c_str(), options.days,
                static_cast<unsigned long long>(options.seed));
  t.set_name(name);
  t.set_description("Unexpected interruptions drawn at Llama 3 405B's per-GPU rates (Table 5) for " +
                    std::to_string(cluster.num_devices()) + " GPUs.");
  t.add_sources("Llama 3 Herd of Models, arXiv:2407.21783, Section 3.3.4 and Table 5 (419 unexpected interruptions "
                "in 54 days on 16,384 H100s)");
  t.add_sources("repair times: hetsim assumptions (traces/llama3.h RepairHours), not from the paper");
  t.set_cluster(cluster_ref);
  t.set_duration_s(options.days * 86400);
  t.set_seed(options.seed);
  std::mt19937_64 rng(options.seed);
  const double gpus = cluster.num_devices();
  const auto nodes = static_cast<uint32_t>(cluster.nodes().size());
  std::vector<Event> events;
  for (const auto& row : Llama3Table5()) {
    // Interruptions per second on this cluster.
    const double rate = options.rate_scale * row.count / (kLlama3Gpus * kLlama3Days * 86400) * gpus;
    if (!(rate > 0)) continue;
    std::exponential_distribution<double> gap(rate);
    const std::string category = row.category;
    for (double time = gap(rng); time < t.duration_s(); time += gap(rng)) {
      Event e;
      e.set_time_s(std::round(time * 1e3) / 1e3);  // milliseconds: a readable file
      e.set_cause(row.component);
      if (category == "GPU") {
        e.set_kind(Event::KIND_GPU_FAILURE);
        e.add_devices(static_cast<uint32_t>(std::uniform_int_distribution<uint32_t>(0, cluster.num_devices() - 1)(rng)));
        e.set_repair_s(options.repair.gpu * 3600);
      } else if (category == "Host" || category == "Unplanned Maintenance") {
        e.set_kind(Event::KIND_NODE_FAILURE);
        e.add_nodes(std::uniform_int_distribution<uint32_t>(0, nodes - 1)(rng));
        e.set_repair_s((category == "Host" ? options.repair.host : options.repair.maintenance) * 3600);
      } else if (category == "Network") {
        e.set_kind(Event::KIND_LINK_FAILURE);
        e.add_nodes(std::uniform_int_distribution<uint32_t>(0, nodes - 1)(rng));
        e.set_repair_s(options.repair.network * 3600);
      } else {
        e.set_kind(Event::KIND_SOFTWARE_FAILURE);
      }
      events.push_back(std::move(e));
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.time_s() < b.time_s(); });
  for (auto& e : events) *t.add_events() = std::move(e);
  return t;
}

}  // namespace hetsim::traces
