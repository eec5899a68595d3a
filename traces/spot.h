// Published spot-instance traces turned into hetsim traces (models/proto/trace.proto) on a cluster whose
// nodes stand for the instances: an instance taken away becomes a PREEMPTION (with the cloud's notice), one
// granted a CAPACITY_ADDED. The trace starts empty (starts_empty): nodes exist only once added.
//
// Formats (traces/data/spot/README.md says which file is which):
//   bamboo       time_ms,add|remove,NAME per line (Bamboo, NSDI'23: p3-trace.csv, g4dn-trace.csv)
//   parcae       one JSON array per line: [time_ms, "add"|"remove"|"no-op"|"migration", {"nodes": [NAME, ...]}]
//                ("migration" is Parcae changing its strategy: no change of availability)
//                (Parcae, NSDI'24: aws_traces_gpt-6.7b_trace_*.txt)
//   hours-count  hours,instances per line (Bamboo's aws-spot-instances-*.csv)
//   dated-count  YYYY-MM-DD, HH:MM:SS, instances per line (Bamboo's a100x1/v100x1 traces)
//   skypilot     {"metadata": {"gap_seconds": G}, "data": [instances, ...]} (SkyPilot, NSDI'24)
// Named instances take the lowest free node index when they appear and free it when they go; count series
// add the lowest free indices and take away the highest live ones (the most recently granted).
#pragma once

#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/proto/trace.pb.h"
#include "models/status.h"

namespace hetsim::traces {

const std::vector<std::string>& SpotFormats();

struct SpotOptions {
  std::string format;
  double notice_s = 120;  // AWS's two-minute interruption notice (GCP gives 30 s)
};

// Reads `path` in `options.format`; errors name the file and line. More instances alive at once than the
// cluster has nodes is an error naming the peak.
Result<proto::Trace> ConvertSpotTrace(const std::string& path, const models::Cluster& cluster,
                                      const std::string& cluster_ref, const SpotOptions& options);

}  // namespace hetsim::traces
