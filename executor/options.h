// The command line of hetsim-exec and the loading of its specs (cluster, model, training, plan), the same
// way the hetsim CLI resolves them: a flag wins over the plan's own key; the training spec comes from
// --training, else the plan's `training:` key, else the model's defaults, with --global-batch, --seq-len,
// --dtype and --recompute on top. No MPI here, so it is tested without launching processes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"
#include "models/status.h"
#include "models/transformer.h"

namespace hetsim::executor {

struct ExecOptions {
  std::string cluster;   // bundled name or path; default: the plan's `cluster:`
  std::string model;     // bundled name or path; default: the plan's `model:`
  std::string training;  // training spec file (optional)
  std::string plan;      // plan file or bundled name (required)
  std::string backend = "auto";  // auto (per rank from its device type, executor/rank_kinds.h) | cpu | cuda
  uint32_t iterations = 3;      // timed iterations (training steps that are measured)
  uint32_t warmup = 1;          // untimed steps before them
  uint64_t seed = 1234;         // weights and data
  double lr = 1e-3;             // Adam learning rate
  double rope_theta = 10000.0;
  std::string report_out;         // IterationReport JSON
  std::string timeline_out;       // Chrome-trace JSON
  std::string ops_out;            // the operations every rank executed in the first step (models::FormatOp lines)
  std::string loss_out;           // CSV: step, loss, iteration seconds
  std::string dump_gradients;     // the gradients of the first step, as a binary file (gradient_file.h)
  std::string compare_gradients;  // a reference dump to compare the first step's gradients with
  double rtol = 1e-4;             // tolerance of --compare-gradients
  double timeout_s = 600;         // --timeout-s: a rank with no progress for this long ends the job (0: never)
  // --cores: the CPU backend's pool of cores (mpi_comm.h ShareCores; 0: none); default: all but one of this
  // machine's cores when it runs more ranks than it has cores
  std::optional<uint32_t> cores;
  std::string profile_out;        // per-layer timings of rank 0 merged into this profile YAML
  std::string profile_model;      // the profile's model name (default: the model's)
  std::optional<uint32_t> global_batch, seq_len;
  std::string dtype, recompute;
};

// Parses the flags. Returns the options, or an InvalidArgument status with a usage message (exit code 2).
// On --help, sets *help to the help text and returns default options.
Result<ExecOptions> ParseExecOptions(int argc, const char* const* argv, std::string* help);

struct LoadedSpecs {
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;  // resolved
  proto::Plan plan;
  std::string plan_file;
  std::string plan_name;  // the plan's name, else its file name
};

// Loads and validates everything (models::ValidatePlan, memory included).
Result<LoadedSpecs> LoadSpecs(const ExecOptions& options);

}  // namespace hetsim::executor
