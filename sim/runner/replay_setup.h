// What `hetsim replay` and the experiment runner's replay points share (docs/replay.md): checking a
// manifest's `replay:` section, loading or drawing its trace, re-planning with a registered planner, and
// writing reports and figures.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/profile_db.h"
#include "models/proto/replay.pb.h"
#include "models/proto/trace.pb.h"
#include "models/transformer.h"
#include "sim/replay.h"

namespace hetsim::runner {

// The trace names, policies and settings; errors name `where` and the field ("replay.policies[1].spares").
Status CheckReplaySpec(const proto::Replay& spec, const std::string& where);

struct LoadedTrace {
  proto::Trace trace;
  std::string name;  // as reports name it
};
// spec.trace: "llama3" draws Llama-3-style failures on `cluster` for trace_days with `seed`; otherwise a
// trace file (relative to `relative_to`'s folder when given) or bundled name, checked against `cluster`
// (the cluster it was recorded on must be the same).
Result<LoadedTrace> LoadReplayTrace(const proto::Replay& spec, const models::Cluster& cluster,
                                    const std::string& cluster_ref, uint64_t seed, const std::string& relative_to = "");

// Re-plans live sub-clusters with the policy's planner (sim::DefaultReplanner), timing the search. The model,
// training and profiles must outlive the returned function.
sim::Replanner MakeReplanner(const models::TransformerModel& model, const proto::Training& training,
                             const models::ProfileDb* profiles = nullptr);

// Writes the reports (one JSON object, or a list for several) to `report_out` and draws `figure` with
// tools/plot/replay.py (goodput over time, downtime per policy). Empty paths are skipped.
Status WriteReplayOutputs(const std::vector<proto::ReplayReport>& reports, const std::string& report_out,
                          const std::string& figure, std::ostream& out);

}  // namespace hetsim::runner
