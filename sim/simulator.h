// hetsim's simulator: one training iteration of a Plan on a SimGrid model of the cluster.
//
// SimGrid allows one engine per process, so every call runs the simulation in a child process (fork)
// and brings the report and timeline back through a pipe: callers (the CLI, planners, the experiment
// runner, tests) may simulate as often as they like. This header (and those it includes) has no SimGrid:
// code outside sim/ includes it without SimGrid's headers.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "models/cost.h"
#include "models/iteration_report.h"
#include "models/plan.h"
#include "models/proto/report.pb.h"
#include "sim/program.h"

namespace hetsim::sim {

// Where a long simulation stands, reported to SimOptions::progress in the calling process.
struct SimProgress {
  enum Phase : uint8_t {
    kBuilt,    // the programs are built: `total` operations to play (sent once)
    kPlaying,  // `done` of `total` played, the simulated clock at `simulated_s` (every progress_interval_s)
  };
  Phase phase = kBuilt;
  uint64_t done = 0;
  uint64_t total = 0;
  double simulated_s = 0;
  double wall_s = 0;  // since SimulateIteration was called
};

struct SimOptions {
  Fidelity fidelity = Fidelity::Balanced();
  bool record_timeline = false;
  // With record_timeline: the devices whose slices are kept (empty: every device). Thousands of devices'
  // slices make timelines of gigabytes that no viewer opens; DefaultTimelineDevices picks a readable set.
  std::vector<uint32_t> timeline_devices;
  models::ComputeOptions compute;
  const models::ProfileDb* profiles = nullptr;  // measured layer costs; analytic where absent
  double compute_jitter_cv = 0;                 // see ProgramOptions
  uint64_t seed = 1;
  // Progress of one simulation: called from the calling thread while it waits for the simulation process.
  std::function<void(const SimProgress&)> progress;
  double progress_interval_s = 5;
  // Fold identical ranks (sim/program.h, FoldMap; docs/simulator.md "Folding"): symmetric plans play one
  // device per stage at fast and balanced fidelity. Full fidelity never folds; false plays every device
  // (`hetsim simulate --no-fold`), the reference the folding error is measured against.
  bool fold = true;
  // Debugging (ProgramOptions::verify_fold): also lower every rank and check the fold decision operation
  // by operation; an error where the two disagree.
  bool verify_fold = false;
  // The CPU twin with more ranks than cores: the devices compute through a pool of this many cores, as
  // hetsim-exec --cores runs its ranks (executor/mpi_comm.h ShareCores): a device holds a core from its
  // start, gives it up while it waits (a receive, a collective, its sends, its DP stream) and queues for one
  // after, served in the order asked; at most this many compute at once, each at its own speed. 0: each
  // device computes whenever it is ready. Plans are not folded then (a folded replica would hold no core).
  uint32_t shared_cores = 0;
};
inline constexpr uint32_t kMaxSharedCores = 65536;
// Whether `cores` is a machine's core count (1 to kMaxSharedCores); the error names `what`.
Status CheckSharedCores(uint32_t cores, const std::string& what);

struct SimResult {
  proto::IterationReport report;
  // Per device (parallel to report.devices()), when SimOptions::record_timeline.
  std::vector<std::vector<Slice>> timeline;
  bool timeline_partial = false;  // SimOptions::timeline_devices chose some devices: the others have none
  // Devices played by an actor: all of them unless the plan was folded; `fold_note` says why it was not.
  uint32_t played_devices = 0;
  std::string fold_note;
  // Folded runs: links whose bandwidth stands for the folded copies of the transfers on them.
  uint32_t scaled_links = 0;
};

// Simulates one iteration. The plan must pass ValidatePlanStructure; devices that run out of memory
// are flagged in the report (the iteration is still simulated).
Result<SimResult> SimulateIteration(const proto::Plan& plan, const models::PlanContext& ctx, const SimOptions& options);

// Plays hand-built programs on the cluster's platform (in a child process, like SimulateIteration):
// for tests of the engine and for benchmarks.
Result<EngineResult> SimulatePrograms(const Programs& programs, const models::Cluster& cluster, bool record_timeline,
                                      const std::string& calibration = "");

// Data movement outside an iteration (checkpoints, state recovery; sim/replay.h): transfers between the
// platform's endpoints, all started together, played on the cluster's SimGrid platform.
struct Endpoint {
  enum Kind : uint8_t { kGpu, kHostMemory, kNvme, kObjectStore };
  Kind kind = kGpu;
  uint32_t index = 0;  // device (kGpu) or node (kHostMemory, kNvme); unused for the object store
};
struct Transfer {
  Endpoint from, to;
  double bytes = 0;
};
// Seconds until the last transfer has arrived. Endpoints the cluster lacks (no local NVMe, no object
// store) are an error naming the cluster field to add.
Result<double> SimulateTransfers(const std::vector<Transfer>& transfers, const models::Cluster& cluster,
                                 const std::string& calibration = "");

// The devices a timeline shows unless told: every device of a plan of at most `max_devices`; otherwise the
// first device of every stage of the first pipeline and of every pipeline shaped unlike those before it
// (stages, their widths, TP degrees, layers and GPU types, micro-batches), so a symmetric plan shows one row
// per stage (TP ranks and replicas of a stage run the same schedule).
std::vector<uint32_t> DefaultTimelineDevices(const proto::Plan& plan, const models::Cluster& cluster,
                                             uint32_t max_devices = 256);
// The first device of every stage of every pipeline.
std::vector<uint32_t> StageTimelineDevices(const proto::Plan& plan);

// Chrome-trace JSON (open in Perfetto or chrome://tracing), written by models::ChromeTraceJson like the
// executor's: one process per node, one track per GPU, slices named forward / backward / tp / pp / dp /
// zero / optimizer with the micro-batch.
std::string ChromeTraceJson(const SimResult& result, const models::Cluster& cluster);

// The report as JSON (proto3 JSON mapping): models::ReportJson.
using models::ReportJson;

// "fast" | "balanced" | "full" -> Fidelity.
Result<Fidelity> ParseFidelity(const std::string& name);

// A progress line for people ("41% of 3,145,728 operations played, simulated clock 3.912 s, 10 s"), or ""
// for a kBuilt record of a simulation too small to announce (under a million operations).
std::string DescribeProgress(const SimProgress& p);

}  // namespace hetsim::sim
