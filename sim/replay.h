// Replay of a whole training run over an availability / failure trace (docs/replay.md).
//
// The run is a timeline of training segments and down phases. A training segment advances at the current
// configuration's simulated iteration time (SimulateIteration, once per configuration: a 54-day run never
// simulates iteration by iteration) with a checkpoint every k iterations; each checkpoint blocks training for
// its save time, simulated as transfers on the cluster's SimGrid platform (SimulateTransfers). An event that
// stops the job (a failure of one of its nodes, a software crash, a preemption) costs the work since the last
// checkpoint the policy can restore, then detection, re-planning (none by default, a fixed time, or the
// planner's measured wall time when asked for), waiting for nodes, restart, and state recovery — again
// transfers on the platform (the object store, local NVMe, host memory of the node or of a peer, surviving
// replicas' GPUs). Which of those a run pays is the recovery policy's choice: one file per policy in
// sim/recovery/ behind a registry (sim/recovery/policy.h: checkpoint-restart, hot-spares, in-memory,
// varuna, elastic, autohet, hetu); the engine (sim/replay_engine.h) is the event loop.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/replay.pb.h"
#include "models/proto/trace.pb.h"
#include "models/transformer.h"
#include "sim/simulator.h"

namespace hetsim::sim {

// Re-planning for the elastic policies goes through a callback, so that sim/ does not depend on the
// planners: the caller (CLI, experiment runner) plans `live` with the policy's planner.
struct Replanned {
  proto::Plan plan;
  double wall_s = 0;  // the planner's measured wall time
};
using Replanner = std::function<Result<Replanned>(const models::Cluster& live, const proto::RecoveryPolicy& policy)>;

// Simulated costs keyed by what determines them (a configuration's iteration time, a set of transfers):
// shared by the replays of a sweep so that each is simulated once.
struct ReplayCache {
  std::map<std::string, double> seconds;
  std::map<std::string, Replanned> plans;
};

struct ReplayInputs {
  const models::Cluster* cluster = nullptr;  // the trace's cluster
  const models::TransformerModel* model = nullptr;
  proto::Training training;  // resolved against the model
  proto::Plan plan;          // the starting plan, on `cluster`
  proto::Trace trace;        // checked against `cluster` (traces::CheckTrace)
  std::string trace_name;
  proto::Replay spec;
  proto::RecoveryPolicy policy;
  SimOptions sim;     // how iterations are simulated (fidelity, calibration, profiles)
  Replanner replan;   // needed by the re-planning policies (varuna, elastic, autohet, hetu) unless replan_plans fit
  ReplayCache* cache = nullptr;
  std::function<void(const std::string&)> progress;  // a line per simulated configuration or transfer set
};

// Replays the run. Deterministic: the same inputs give the same report, byte for byte, unless a policy
// asks for the planner's measured wall time (`measured_replan`; the report then says replan_time: measured).
// Errors: the policy's options (CheckRecoveryPolicy), a trace with no duration, a fixed checkpoint interval
// that would checkpoint more than ten million times (the error names replay.checkpoint_interval_s and the
// least interval that fits), and what the simulations report (a cluster without the storage a policy needs).
Result<proto::ReplayReport> ReplayRun(const ReplayInputs& in);
// The most checkpoints a fixed interval may make in one replayed run (`hetsim advise` checks its
// checkpoint_intervals against its window with the same bound).
constexpr double kMaxCheckpointsPerRun = 1e7;

// The registered recovery policies (sim/recovery/registry.cc): name and a line (with the paper it follows).
struct PolicyInfo {
  std::string name;
  std::string summary;
};
const std::vector<PolicyInfo>& RecoveryPolicies();
// Checks a policy's name and the options it takes; the error names `where` (e.g. "replay.policies[1]").
Status CheckRecoveryPolicy(const proto::RecoveryPolicy& policy, const std::string& where);

// What a registered policy takes, from its traits (sim/recovery/policy.h): hot spares (`spares`), and the
// re-planning fields (`planner`, `replan_s`, `measured_replan`, `grow`) of the policies that re-plan on the
// live nodes. False for an unknown policy.
bool PolicyTakesSpares(const std::string& policy);
bool PolicyReplans(const std::string& policy);

// The planner (and its options) an elastic policy re-plans with: the policy's, or its default (megatron;
// varuna: megatron with TP 1, Varuna's pipeline × data parallelism; autohet: autohet; hetu: hetu with ZeRO off).
std::pair<std::string, std::string> DefaultReplanner(const proto::RecoveryPolicy& policy);

// Daly's higher-order optimum checkpoint interval (Daly 2006, eq. 37; Young 1974's sqrt(2·δ·M) to first order)
// for a checkpoint that costs `checkpoint_s` and a mean time between interruptions `mtbf_s`: seconds of
// work between checkpoints.
double YoungDalyInterval(double checkpoint_s, double mtbf_s);

// On-demand price of one GPU-hour of a catalog GPU type (sim/replay.cc's table, with sources); 0 if unknown.
double OnDemandUsdPerGpuHour(const std::string& gpu);

// The report as JSON (proto3 JSON mapping, fields in declaration order).
std::string ReplayReportJson(const proto::ReplayReport& report);
// The same JSON written in pieces, one segment at a time (a million-event replay's report is ~110 MB of
// JSON, which protobuf's printer would hold whole, several times over): what `put` receives, joined, parses
// to the same object as ReplayReportJson's (segments printed compactly, one per line).
Status WriteReplayReportJson(const proto::ReplayReport& report, const models::PieceSink& put);

}  // namespace hetsim::sim
