// Running hetsim's own programs from a command (`hetsim calibrate`, `hetsim validate-sim --executor`): where
// the sibling binaries are, the mpirun prefix, and a child process whose output streams through.
#pragma once

#include <string>
#include <vector>

#include "models/child_process.h"
#include "models/status.h"

namespace hetsim::cli {

// The path of `name` (e.g. "hetsim-exec") beside the running hetsim binary, or an error saying how to
// build it.
Result<std::string> SiblingBinary(const std::string& name);

using models::JoinArgs;      // models/child_process.h
using models::MpirunPrefix;  // models/child_process.h

// Runs argv, the child's stdout and stderr going to ours (or to `log_path` when given, for output that
// would swamp a terminal). Returns its exit code (128 + signal when killed), or an error when it cannot
// start.
Result<int> RunChild(const std::vector<std::string>& argv, const std::string& log_path = "");

// tools/plot of the source tree the running binary was built from (HETSIM_PLOT_DIR overrides), or
// "tools/plot".
std::string FindPlotDir();



}  // namespace hetsim::cli
