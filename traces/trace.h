// Availability and failure traces (models/proto/trace.proto, docs/traces.md): loading and checking them
// against a cluster, and summarising them.
#pragma once

#include <cstdint>
#include <string>

#include "models/cluster.h"
#include "models/proto/trace.pb.h"
#include "models/status.h"

namespace hetsim::traces {

// One event of a trace (models/proto/trace.proto), as the traces room names it.
using Event = proto::TraceEvent;

// Limits on a trace: events (a 54-day Llama 3 run on 16,384 GPUs has 419; a 10-year, 1000x-rate sensitivity
// study of a small cluster stays well under), and a binary file's size. YAML traces are read an event at a
// time (models/yaml_stream.h) and stop at models::kMaxTraceYamlBytes (256 MiB, room for the largest trace);
// binary protobuf (`hetsim trace generate|convert -o T.pb`) is smaller and reads ~10x faster.
constexpr uint32_t kMaxTraceEvents = 1'000'000;
constexpr uintmax_t kMaxBinaryTraceBytes = 128ull << 20;

// Whether `path` names a binary trace (models/proto/trace.proto serialised; the file name ends in .pb).
bool IsBinaryTrace(const std::string& path);

// A trace file (YAML, or binary when it ends in .pb) or bundled name, parsed; not yet checked against a
// cluster. More than kMaxTraceEvents events is an error naming the file.
Result<proto::Trace> LoadTrace(const std::string& name_or_path);

// Writes `trace` to `path`: binary protobuf when it ends in .pb, else YAML.
Status SaveTrace(const proto::Trace& trace, const std::string& path);

// Checks `trace` against `cluster`: events in time order and within duration_s, every kind with what it
// needs (devices, nodes, notice, slowdown), device and node indices that exist. Every error names `file`,
// the field (events[i].devices[j]) and the fix; all of them are reported.
Status CheckTrace(const proto::Trace& trace, const models::Cluster& cluster, const std::string& file);

// The event kind's name as trace files write it ("gpu_failure", ...).
std::string EventKindName(proto::TraceEvent::Kind kind);

// A few lines: duration, events by kind and by cause, interruptions per day, mean time between them.
std::string DescribeTrace(const proto::Trace& trace, const models::Cluster& cluster);

}  // namespace hetsim::traces
