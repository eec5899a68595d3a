// Validation against measured runs (the numbers the project is judged by): `hetsim validate-sim --runs` over a
// CSV of measured training runs, each turned into a Megatron-LM layout on a cluster its columns describe,
// simulated under the one calibration rule (or one calibration for every run), and tallied by half, by
// configuration and by prediction interval. The CLI prints a ValidationReport; tests assert on it.
//
// The CSV layouts (experiments/validation/README.md): vTrain's eleven positional numbers a row (its
// Megatron-DeepSpeed runs), or a first line naming the columns — gpus, global_batch, micro_batch, hidden,
// heads, layers, seq_len, tp, dp, pp and iteration_ms, and optionally gpus_per_node, nic_gbps,
// nics_per_node, virtual_stages, gpu, stack and tp_backward (see validate_runs.cc). Rows alternate between
// the halves (even rows: development, odd rows: held out), so that a calibration fitted on the development
// half is judged on runs it has not seen. (Plan-file runs, a `plan` column, are
// validate_plan_runs.h's.)
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "calibration/error_tally.h"
#include "models/intervals.h"
#include "models/proto/training.pb.h"
#include "models/status.h"
#include "sim/simulator.h"

namespace hetsim::calibration {

// One measured run and what the simulator made of it.
struct MeasuredRun {
  int line = 0;
  uint32_t gpus = 0, global_batch = 0, micro_batch = 0, hidden = 0, heads = 0, layers = 0, seq_len = 0;
  uint32_t tp = 0, dp = 0, pp = 0;
  uint32_t gpus_per_node = 0;  // 0: one node of `gpus`
  double nic_gbps = 0;         // per GPU; 0: none (one node)
  uint32_t nics_per_node = 0;  // 0: one NIC per GPU
  uint32_t virtual_stages = 1;
  std::string gpu;          // empty: ValidationOptions::gpu
  std::string calibration;  // the one rule's pick for the run's stack (models::StackCalibration)
  bool tp_backward_blocking = false;  // comm.tp_backward_blocking (tp_backward column, or the stack's default)
  models::RunClass cls;     // for its prediction interval (models/intervals.h)
  double measured_ms = 0;
  double simulated_ms = 0;
  // The first device's (pipeline 0, stage 0) compute and exposed communication, for reading residuals.
  double compute_ms = 0, tp_ms = 0, pp_ms = 0, dp_ms = 0, idle_ms = 0;
  double peak_memory_gib = 0;  // the fullest device's simulated peak
  bool ok = false;
  std::string error;
  double rel() const { return (simulated_ms - measured_ms) / measured_ms; }
};


// The largest runs file read (vTrain's 1,440 runs take 60 KiB).
inline constexpr uintmax_t kMaxRunsFileBytes = 64ull << 20;

// A runs file that does not exist, is not a regular file or is larger than kMaxRunsFileBytes.
Status CheckRunsFile(const std::string& path);
// Reads a runs file in either layout; errors name FILE:LINE and the column.
Result<std::vector<MeasuredRun>> ReadMeasuredRuns(const std::string& path);

struct ValidationOptions {
  std::string gpu = "a100-80gb";  // the runs' GPU type unless a row's `gpu` says
  uint32_t vocab = 51200;
  proto::DType dtype = proto::DTYPE_FP16;
  proto::Recompute recompute = proto::RECOMPUTE_FULL;
  sim::Fidelity fidelity = sim::Fidelity::Fast();
  std::string calibration;  // for every run; empty: each run's stack's pick under the one rule
  size_t limit = std::numeric_limits<size_t>::max();  // simulate only the first `limit` runs
  std::function<void(size_t done, size_t total)> progress;  // every 50 runs
};

struct ValidationReport : HalvesTally {
  std::vector<MeasuredRun> runs;             // the simulated ones (ok or not), in file order
  std::map<std::string, ErrorTally> by_configuration;  // "tp=8", "pp=2", "nodes=16", ...
  models::IntervalCoverage cover_held_out, cover_all;
  std::map<std::string, int> calibrations;  // the calibrations used, with their run counts
  std::string csv;                          // one row per simulated run (`validate-sim -o`)
};

// Simulates every run of `path` (up to options.limit) and tallies the errors.
Result<ValidationReport> ValidateRuns(const std::string& path, const ValidationOptions& options);

}  // namespace hetsim::calibration
