// Availability of a candidate cluster for `hetsim advise` (docs/advise.md "Availability and cost"): the
// trace its run is replayed over, composed per node group from the type's spot trace (the fraction of its own
// peak the published trace has alive, applied to the group's nodes) and Llama-3-rate failures, and what
// renting it costs per hour.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/cluster.h"
#include "models/proto/advise.pb.h"
#include "models/proto/trace.pb.h"
#include "models/status.h"

namespace hetsim::advise {

// A spot trace reduced to the fraction of its peak alive over time: steps (time, fraction) from time 0.
struct SpotSeries {
  std::vector<std::pair<double, double>> steps;  // time_s ascending, the first at 0; fraction in [0, 1]
  double duration_s = 0;                          // the trace's length (it repeats after)
  double notice_s = 120;
  uint32_t peak = 0;  // instances alive at the trace's peak
  std::string source;  // the file, for reports
  uint64_t digest = 0;  // of the trace read (advise's point ids: an edit to the file changes them)
  // The fraction at `t` of a trace started at `offset` and repeated.
  double FractionAt(double t, double offset) const;
};

// Counts a spot trace's nodes alive over time (a trace that starts empty: CAPACITY_ADDED adds nodes, a
// PREEMPTION takes them notice_s after its warning).
SpotSeries SeriesOfTrace(const proto::Trace& trace);

// Reads `spec.file` (relative to `config_file`'s folder) in `spec.format` (a published format of
// traces/spot.h, or "trace": a hetsim trace that starts empty). Errors name the file.
Result<SpotSeries> LoadSpotSeries(const proto::AdviseSpotTrace& spec, const std::string& config_file);

// One node group of a candidate: how it is rented and where its availability comes from.
struct GroupCost {
  uint32_t nodes = 0;
  uint32_t gpus_per_node = 0;
  double usd_per_gpu_hour = 0;            // what it costs (the spot price for a spot group)
  double on_demand_usd_per_gpu_hour = 0;  // the type's on-demand price (hot spares are rented at it)
  const SpotSeries* spot = nullptr;  // null: on-demand (always rented)
  double failure_rate_scale = 1;     // Llama 3 Table 5 rates × this
};

// The trace a run on `cluster` (node groups in the order of `groups`) is replayed over: `window_s` long;
// spot groups follow their series from an offset drawn from `seed` (one per group), nodes granted lowest
// index first and taken back highest first, with the series' notice; every node fails at its group's
// Llama-3 rates (traces/llama3.h, drawn with `seed`). Starts empty when a group is spot, with every
// on-demand node and the spot nodes granted at time 0 added then. `rent_usd_per_h` receives the mean
// rent over the window: on-demand nodes all the time, spot nodes while granted.
Result<proto::Trace> ComposeTrace(const models::Cluster& cluster, const std::string& cluster_ref,
                                  const std::vector<GroupCost>& groups, uint64_t seed, double window_s,
                                  double* rent_usd_per_h);

}  // namespace hetsim::advise
