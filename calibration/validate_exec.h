// The simulator against plans run on hetsim-exec (`hetsim validate-sim --executor`): each plan executed under
// mpirun (one rank per device, `repeats` runs, the median one kept) and simulated with the same calibration;
// per plan the iteration time of both, the executor's run-to-run noise, and the time per operation class
// (compute, TP, PP, CP, DP communication, idle; mean over the plan's devices). The CLI loads the plans and
// prints the report; the CPU twin's benchmark (tools/bench calibration.cpu_twin) reads its CSV.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "calibration/error_tally.h"
#include "models/cluster.h"
#include "models/profile_db.h"
#include "models/proto/plan.pb.h"
#include "models/proto/report.pb.h"
#include "models/proto/training.pb.h"
#include "models/transformer.h"
#include "sim/simulator.h"

namespace hetsim::calibration {

// The operation classes compared, in the CSV's and the table's order.
inline constexpr int kOpClasses = 6;
inline constexpr const char* kOpClassNames[kOpClasses] = {"compute", "tp", "pp", "cp", "dp", "idle"};

// Mean over the report's devices of each class's seconds.
std::vector<double> OpClassSeconds(const proto::IterationReport& r);

// A plan to run and simulate, loaded as its file says (the CLI's LoadSpecs).
struct ExecPlan {
  std::string ref;   // as given: a plan file or a bundled name (what hetsim-exec is passed)
  std::string file;  // the plan's file, for errors
  proto::Plan plan;
  const models::Cluster* cluster = nullptr;
  const models::TransformerModel* model = nullptr;
  proto::Training training;
};

struct ExecPlanResult {
  std::string plan;
  int ranks = 0;
  double exec_s = 0, sim_s = 0, noise = 0;  // noise: coefficient of variation of the executor's iterations
  std::vector<double> exec_classes, sim_classes;
  double error() const { return (sim_s - exec_s) / exec_s; }
};

struct ExecOptions {
  std::string exe;        // hetsim-exec
  std::string mpirun;     // the mpirun command (empty: mpirun)
  std::string backend = "cpu";
  std::string work_dir;   // each run's report, losses and log
  std::string calibration = "default";
  const models::ProfileDb* profiles = nullptr;  // the calibration's measured profiles
  sim::Fidelity fidelity = sim::Fidelity::Balanced();
  uint32_t iterations = 0, warmup = 0;
  int repeats = 1;
  uint32_t cores = 1;  // this machine's: CPU plans with more ranks compute through a pool of cores − 1
};

struct ExecReport {
  std::vector<ExecPlanResult> results;  // the plans compared, in the order given
  ErrorTally tally;                     // of their errors
  int failed = 0;                       // plans not compared (why: on `err`)
  std::string csv;                      // one row per plan compared
};

// Simulates and executes each plan; progress lines go to `out`, each failure's reason to `err`.
ExecReport ValidateExecutor(const std::vector<ExecPlan>& plans, const ExecOptions& options, std::ostream& out,
                            std::ostream& err);

// The per-plan table of simulated against executed times (and by operation class) with the tally.
void PrintExecComparison(const ExecReport& report, const std::string& backend, const std::string& calibration,
                         std::ostream& out);

}  // namespace hetsim::calibration
