// `hetsim calibrate`'s work (the CLI, tools/hetsim/calibrate_command.cc, turns flags into these options and
// prints nothing of its own): measure a machine with the executor's own kernels and communicators, fit the
// simulator's per-GPU parameters (calibration/fit.h) and write a calibration file
// (models/proto/calibration.proto) that `--calibration FILE` loads.
//
//   1. hetsim-kernel-bench: the lowering's GEMM shapes, memory-bound kernels, attention, launches;
//   2. mpirun -np R hetsim-coll-bench: all-reduces per group size and message size, point-to-point;
//   3. hetsim-exec --profile-out: the executor's own layers at a few (TP, micro-batch) shapes;
//   4. the robust fit, printed with its error, and the YAML with provenance (host, date, versions, command,
//      data files).
// `from_data` refits measurements taken before (DIR/kernels.csv, DIR/collectives.csv), e.g. on another
// machine, without measuring; DIR/network.csv (collectives measured across nodes, e.g. nccl-tests on a
// multi-node machine) refits the network's values under NCCL's model (calibration/network_fit.h).
// `gpu` "A,B" (a mixed cluster's kinds): each kind measured on its own backend into DATA/<kind>/ and one file with
// every kind's entry and profile (fp32 throughout when a kind is a CPU worker).
// CalibrateFromProfiles fits a GPU type's efficiencies to measured layer profiles instead (FitFromProfiles).
//
// Both return the command's exit code: 0, 1 when a step fails (a benchmark, a file), 2 when an option is
// wrong (named as its flag, with the fix); progress goes to `out`, errors to `err`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "models/status.h"

namespace hetsim::calibration {

struct CalibrateOptions {
  std::string backend = "cpu";  // cpu (Eigen + MPI, CPU workers) | cuda (cuBLAS + NCCL)
  std::string gpu;              // catalog type of the device measured; empty: cpu, or h100 on cuda
  int ranks = 2;                // ranks of the communication benchmark (0 or 1 skips it)
  bool ranks_given = false;     // without it, on cuda: one rank per GPU of this node (nvidia-smi -L)
  bool quick = false;           // short benchmarks
  std::string output;           // the file written; empty: NAME.yaml
  std::string name;             // the calibration's name; empty: GPU-measured
  std::string base = "default"; // the bundled calibration the file layers over
  std::string data_dir;         // where measurements go; empty: OUTPUT-data/ beside the output
  std::string from_data;        // non-empty: refit this folder's measurements, measure nothing
  std::string models;           // models whose GEMM shapes the kernel benchmark times; empty: its default
  std::optional<std::string> profile_model;  // the model profiled; unset: llama-tiny on cpu, none on cuda
  std::string profile_shapes = "1x1,1x2,1x4,2x2,2x4";  // TPxMICRO_BATCH shapes profiled
  uint32_t profile_seq_len = 64;
  std::string dtype;             // what the kernels and profiles run in; empty: bf16 on cuda, fp32 on cpu
  std::string mpirun = "mpirun";
  // Finds one of hetsim's programs (hetsim-exec, hetsim-kernel-bench, hetsim-coll-bench) by name; asked only
  // when measuring.
  std::function<Result<std::string>(const std::string&)> find_program;
};

int Calibrate(const CalibrateOptions& options, std::ostream& out, std::ostream& err);

struct FromProfilesOptions {
  std::string profiles;        // bundled names or paths, comma-separated (their TP-1 transformer rows)
  std::string check_profiles;  // held out: profiles the fitted values' error is reported on
  std::string gpu;             // the GPU type the profiles measured
  std::string dtype;           // the precision the profiled layers ran in
  std::string attention = "flash";
  std::string base = "default";
  std::string name, output;    // empty: GPU-profiles, NAME.yaml
  bool fit_tp_latency = false;      // each TP degree's all-reduce latency from the rows at TP > 1
  bool fit_tp_collectives = false;  // ... and its bus bandwidth inside the node
};

int CalibrateFromProfiles(const FromProfilesOptions& options, std::ostream& out, std::ostream& err);

}  // namespace hetsim::calibration
