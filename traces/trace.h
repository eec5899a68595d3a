// Availability and failure traces (models/proto/trace.proto, docs/traces.md): loading and checking them
// against a cluster, and summarising them.
#pragma once

#include <string>

#include "models/cluster.h"
#include "models/proto/trace.pb.h"
#include "models/status.h"

namespace hetsim::traces {

// A trace file (or bundled name), parsed; not yet checked against a cluster.
Result<proto::Trace> LoadTrace(const std::string& name_or_path);

// Checks `trace` against `cluster`: events in time order and within duration_s, every kind with what it
// needs (devices, nodes, notice, slowdown), device and node indices that exist. Every error names `file`,
// the field (events[i].devices[j]) and the fix; all of them are reported.
Status CheckTrace(const proto::Trace& trace, const models::Cluster& cluster, const std::string& file);

// The event kind's name as trace files write it ("gpu_failure", ...).
std::string EventKindName(proto::TraceEvent::Kind kind);

// A few lines: duration, events by kind and by cause, interruptions per day, mean time between them.
std::string DescribeTrace(const proto::Trace& trace, const models::Cluster& cluster);

}  // namespace hetsim::traces
