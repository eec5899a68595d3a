// Llama-3-style failure traces: the unexpected interruptions of Llama 3 405B's 54-day pre-training
// snapshot on 16,384 H100s (Llama 3 Herd of Models, arXiv:2407.21783, §3.3.4 and Table 5: 419 unexpected
// interruptions, by component), turned into per-GPU rates and drawn as Poisson processes for any cluster
// size and duration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/proto/trace.pb.h"
#include "models/status.h"

namespace hetsim::traces {

// One row of Table 5: interruptions of `component` over the snapshot.
struct InterruptionRow {
  const char* component;
  const char* category;  // GPU, Host, Network, Unplanned Maintenance, Dependency, Unknown
  int count;
};
// The 18 rows of Table 5 (traces/data/llama3_table5_unexpected_interruptions.csv).
const std::vector<InterruptionRow>& Llama3Table5();
constexpr double kLlama3Gpus = 16384;
constexpr double kLlama3Days = 54;

// How long a failed part stays out (the paper gives no repair times; these are assumptions, per category,
// docs/traces.md): a GPU or host is swapped or repaired in hours, a link re-cabled faster, software needs
// no repair (a restart).
struct RepairHours {
  double gpu = 6;
  double host = 6;
  double network = 2;
  double maintenance = 4;
};

struct FailureTraceOptions {
  double days = 54;
  uint64_t seed = 1;
  double rate_scale = 1;  // multiplies every rate (sensitivity studies)
  RepairHours repair;
};

// Checks `options` before drawing: days in (0, 3650], rate_scale in [0, 1000], and an expected event count
// (every Table 5 rate scaled to the cluster) within kMaxTraceEvents with room for the Poisson spread. The
// error names `where`'s fields (`--days`, `--rate-scale` or a manifest's trace_days / trace_rate_scale).
Status CheckFailureTraceOptions(const models::Cluster& cluster, const FailureTraceOptions& options,
                                const std::string& days_field, const std::string& rate_field);
// The mean number of events a trace drawn with `options` on `cluster` holds.
double ExpectedFailureEvents(const models::Cluster& cluster, const FailureTraceOptions& options);

// Draws the trace: for each component, arrivals of a Poisson process at count / (16,384 GPUs × 54 days)
// per GPU-day times the cluster's GPUs; each arrival hits a uniformly drawn GPU (GPU components) or node
// (host, network, maintenance), or the job (software, unknown). Same seed, same trace.
proto::Trace GenerateLlama3Failures(const models::Cluster& cluster, const std::string& cluster_ref,
                                    const FailureTraceOptions& options);

}  // namespace hetsim::traces
