#include "traces/trace.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "models/spec_io.h"
#include "models/yaml_proto.h"
#include "models/yaml_stream.h"

namespace hetsim::traces {

bool IsBinaryTrace(const std::string& path) { return path.ends_with(".pb"); }

namespace {

Status CheckEventCount(const proto::Trace& t, const std::string& file) {
  if (t.events_size() > static_cast<int>(kMaxTraceEvents)) {
    return Status::Invalid(file + ": events: " + std::to_string(t.events_size()) + " events, more than a trace may " +
                           "hold (" + std::to_string(kMaxTraceEvents) + "); split the run or thin the trace");
  }
  return Status::Ok();
}

Result<proto::Trace> LoadBinaryTrace(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Status::NotFound(path + ": no such file");
  const auto bytes = fs::file_size(path, ec);
  if (ec) return Status::IoError(path + ": cannot read its size: " + ec.message());
  if (bytes > kMaxBinaryTraceBytes) {
    return Status::Invalid(path + ": " + std::to_string(bytes >> 20) + " MiB is more than a binary trace may hold (" +
                           std::to_string(kMaxBinaryTraceBytes >> 20) + " MiB, about " +
                           std::to_string(kMaxTraceEvents) + " events)");
  }
  std::ifstream in(path, std::ios::binary);
  proto::Trace t;
  if (!in || !t.ParseFromIstream(&in)) {
    return Status::Invalid(path + ": not a binary trace (models/proto/trace.proto serialised); a YAML trace ends in "
                                  ".yaml");
  }
  if (t.kind() != "trace") {
    return Status::Invalid(path + ": kind: expected 'trace', found '" + t.kind() + "'");
  }
  HETSIM_RETURN_IF_ERROR(CheckEventCount(t, path));
  return t;
}

}  // namespace

Result<proto::Trace> LoadTrace(const std::string& name_or_path) {
  if (IsBinaryTrace(name_or_path)) return LoadBinaryTrace(name_or_path);
  HETSIM_ASSIGN_OR_RETURN(models::SpecText src, models::ReadSpec(models::SpecKind::kTrace, name_or_path));
  HETSIM_RETURN_IF_ERROR(models::PrescanYaml(src.text, src.file));
  // Events one at a time (models/yaml_stream.h): a million of them as yaml-cpp nodes would take ~5 GB.
  proto::Trace t;
  HETSIM_RETURN_IF_ERROR(models::ParseYamlStreaming(src.text, src.file, "trace", "events", kMaxTraceEvents, &t));
  return t;
}

Status SaveTrace(const proto::Trace& trace, const std::string& path) {
  HETSIM_RETURN_IF_ERROR(CheckEventCount(trace, path));
  if (IsBinaryTrace(path)) return models::WriteFileAtomically(path, trace.SerializeAsString());
  return models::WriteFileAtomically(
      path, "# Written by `hetsim trace`; models/proto/trace.proto, docs/traces.md.\n" + models::MessageToYaml(trace));
}

std::string EventKindName(Event::Kind kind) {
  return models::EnumValueYamlName(Event::Kind_descriptor()->FindValueByNumber(kind));
}

Status CheckTrace(const proto::Trace& trace, const models::Cluster& cluster, const std::string& file) {
  ErrorList errors;
  const uint32_t devices = cluster.num_devices();
  const auto nodes = static_cast<uint32_t>(cluster.nodes().size());
  const std::string cl = "cluster " + cluster.spec().name() + " (" + std::to_string(nodes) + " nodes, " +
                         std::to_string(devices) + " GPUs)";
  double last = 0;
  for (int i = 0; i < trace.events_size(); ++i) {
    const Event& e = trace.events(i);
    const std::string at = file + ": events[" + std::to_string(i) + "]";
    if (e.time_s() < last) {
      errors.Add(at + ".time_s: " + std::to_string(e.time_s()) + " comes before the previous event (" +
                 std::to_string(last) + "); sort the events by time");
    }
    last = std::max(last, e.time_s());
    if (trace.duration_s() > 0 && e.time_s() > trace.duration_s()) {
      errors.Add(at + ".time_s: after the trace's duration_s (" + std::to_string(trace.duration_s()) +
                 "); raise duration_s or drop the event");
    }
    for (int j = 0; j < e.devices_size(); ++j) {
      if (e.devices(j) >= devices) {
        errors.Add(at + ".devices[" + std::to_string(j) + "]: GPU " + std::to_string(e.devices(j)) +
                   " does not exist in " + cl + "; devices are numbered 0.." + std::to_string(devices - 1));
      }
    }
    for (int j = 0; j < e.nodes_size(); ++j) {
      if (e.nodes(j) >= nodes) {
        errors.Add(at + ".nodes[" + std::to_string(j) + "]: node " + std::to_string(e.nodes(j)) + " does not exist in " +
                   cl + "; nodes are numbered 0.." + std::to_string(nodes - 1) + " (`hetsim describe --cluster`)");
      }
    }
    switch (e.kind()) {
      case Event::KIND_GPU_FAILURE:
      case Event::KIND_STRAGGLER:
        if (e.devices_size() == 0) errors.Add(at + ".devices: a " + EventKindName(e.kind()) + " names the GPUs it hits");
        if (e.kind() == Event::KIND_STRAGGLER && !(e.slowdown() > 1)) {
          errors.Add(at + ".slowdown: a straggler runs slower: give a factor above 1 (e.g. 1.5)");
        }
        break;
      case Event::KIND_NODE_FAILURE:
      case Event::KIND_LINK_FAILURE:
      case Event::KIND_PREEMPTION:
      case Event::KIND_CAPACITY_ADDED:
        if (e.nodes_size() == 0) errors.Add(at + ".nodes: a " + EventKindName(e.kind()) + " names the nodes it hits");
        break;
      case Event::KIND_SOFTWARE_FAILURE:
        break;
      default:
        errors.Add(at + ".kind: missing or unknown");
    }
  }
  return errors.ToStatus();
}

std::string DescribeTrace(const proto::Trace& trace, const models::Cluster& cluster) {
  std::map<std::string, int> by_kind, by_cause;
  int interruptions = 0;
  for (const auto& e : trace.events()) {
    ++by_kind[EventKindName(e.kind())];
    if (!e.cause().empty()) ++by_cause[e.cause()];
    interruptions += e.kind() != Event::KIND_CAPACITY_ADDED && e.kind() != Event::KIND_STRAGGLER;
  }
  const double days = trace.duration_s() / 86400;
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "trace %s on %s (%u GPUs, %zu nodes): %.2f days, %d events, %d interruptions",
                trace.name().c_str(), cluster.spec().name().c_str(), cluster.num_devices(), cluster.nodes().size(), days,
                trace.events_size(), interruptions);
  o << buf;
  if (days > 0 && interruptions > 0) {
    std::snprintf(buf, sizeof buf, " (%.2f per day, one every %.1f h)", interruptions / days, 24 * days / interruptions);
    o << buf;
  }
  o << "\n  by kind:";
  for (const auto& [k, n] : by_kind) o << " " << k << " " << n << ";";
  if (!by_cause.empty()) {
    o << "\n  by cause:";
    for (const auto& [k, n] : by_cause) o << " " << k << " " << n << ";";
  }
  o << "\n";
  return o.str();
}

}  // namespace hetsim::traces
