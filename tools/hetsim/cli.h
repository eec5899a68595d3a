// The `hetsim` command line: subcommands, flags with --help and "did you mean" errors.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include <optional>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/report.pb.h"
#include "models/proto/training.pb.h"
#include "models/status.h"
#include "models/transformer.h"

namespace hetsim::cli {

namespace po = boost::program_options;

struct Command {
  std::string name;
  std::string summary;  // one line for `hetsim --help`
  std::string usage;    // "hetsim describe --cluster C --model M --plan P"
  // Declares the command's flags.
  std::function<void(po::options_description&, po::positional_options_description&)> flags;
  // Runs with parsed flags; prints results to `out`, returns the exit code.
  std::function<int(const po::variables_map&, std::ostream& out, std::ostream& err)> run;
};

// All registered subcommands: the spec commands (commands.cc), then each room's.
const std::vector<Command>& Commands();
std::vector<Command> SpecCommands();     // list, validate, describe (commands.cc)
std::vector<Command> PlannerCommands();  // plan (plan_commands.cc)
std::vector<Command> SimCommands();      // simulate (sim_commands.cc)
std::vector<Command> ChakraCommands();   // export-chakra, import-chakra (chakra_commands.cc)
std::vector<Command> RunCommands();      // run (run_command.cc; needs the planners room)
Command ValidateSimCommand();             // validate-sim (validate_sim_command.cc; needs the planners room)
std::vector<Command> CalibrationCommands();  // calibrate (calibrate_command.cc; needs the calibration room)
std::vector<Command> TraceCommands();  // trace (trace_commands.cc; needs the traces room)
std::vector<Command> ReplayCommands();  // replay (replay_command.cc; needs the traces and planners rooms)
std::vector<Command> MixedLengthCommands();
std::vector<Command> AdviseCommands();  // advise (advise_command.cc; needs the traces and planners rooms)
// An advise config checked in full (`hetsim validate`); a one-line description.
Result<std::string> ValidateAdviseConfig(const std::string& path);  // mixed-length (mixed_length_command.cc)
// A trace file checked against the cluster it names (`hetsim validate`); a one-line description.
Result<std::string> ValidateTraceFile(const std::string& path);
// validate-sim --executor (validate_exec_command.cc over calibration/validate_exec.h; without the calibration room: an error).
int RunValidateExecutor(const po::variables_map& vm, std::ostream& out, std::ostream& err);
// Plans with a registered planner (options: YAML text, may be empty); prints nothing. Without the
// planners room: an error.
// `refine`: candidates checked on the simulator (sim/planning/refine.h; −1 = the default, 0 = the planner's
// own pick); `polish`: simulations to polish the checked choice (sim/planning/polish.h; −1 = the default,
// 0: off); `notes` (optional) receives the twin check's and the polish's lines.
Result<proto::Plan> PlanWithPlanner(const std::string& planner, const std::string& options_yaml,
                                    const std::string& options_file, const models::Cluster& cluster,
                                    const models::TransformerModel& model, const proto::Training& training,
                                    int refine = -1, int polish = -1, std::vector<std::string>* notes = nullptr);
// --refine K (sim/planning/refine.h): −1 when not given, K in 0..64, or an error naming the flag.
Result<int> RefineFlag(const po::variables_map& vm);
// --polish N (sim/planning/polish.h): −1 when not given, N in 0..100000, or an error naming the flag; N > 0
// with --refine 0 is refused (the pick is simulated once before it is polished).
Result<int> PolishFlag(const po::variables_map& vm);
// The --refine and --polish flags of the commands that plan with --planner.
void AddRefineFlags(po::options_description& d);
// Registered planners as (name, one-line summary); empty when the planners room is left out.
std::vector<std::pair<std::string, std::string>> ListPlanners();
// Checks an experiment manifest in full (used by `hetsim validate`); returns a one-line description.
Result<std::string> ValidateExperiment(const std::string& path);

// ---- Shared helpers for commands that need a cluster, a model, a training spec and maybe a plan ----

// --training, --global-batch, --seq-len, --dtype, --recompute.
void AddTrainingFlags(po::options_description& d);
// --cluster, --model, --plan and the training flags.
void AddSpecFlags(po::options_description& d, bool with_plan);

struct Specs {
  std::optional<models::Cluster> cluster;
  std::optional<models::TransformerModel> model;
  proto::Training training;  // resolved against the model (when there is one)
  std::optional<proto::Plan> plan;
  std::string plan_file;
  std::vector<std::string> plan_notes;  // --planner: the twin check's lines (sim/planning/refine.h)
};

// Loads what the flags name. A plan's own `cluster:`, `model:` and `training:` keys fill in what the
// flags leave out (flags win). `need_cluster` / `need_model` make a missing one an error.
Result<Specs> LoadSpecs(const po::variables_map& vm, bool need_cluster, bool need_model);

// Plans with --planner (and --planner-options FILE) on the specs' cluster, model and training; fills in
// specs->plan and plan_file.
Status PlanWithFlags(const po::variables_map& vm, Specs* specs);

// Prints `s` to `err` and returns 1 (a command that found problems).
int Fail(std::ostream& err, const Status& s);

// printf-style formatting of up to four numbers.
std::string Fmt(const char* f, double a, double b = 0, double c = 0, double d = 0);

// What one GPU type's compute times rest on, as `simulate` and `describe --gpu` print it after the type's name:
// "calibration default — <source>", with the measured layer profile of `model` first when one is in use and
// "— NO MEASURED BASIS ..." last when no measurement of the type is behind it.
std::string ComputeBasisText(const proto::ComputeBasisReport& b, const std::string& model);

// The value of a string flag, or "".
std::string FlagString(const po::variables_map& vm, const char* key);

// Entry point: parses argv, dispatches, prints errors to `err`. Returns the process exit code
// (0 success, 1 the command found problems, 2 a usage error).
int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace hetsim::cli
