// Forked children (simulations, workers, plotting) end with their parent: killing `hetsim` never leaves a
// SimGrid child or a worker running on.
#pragma once

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <vector>

#include "models/status.h"

namespace hetsim::models {

// Call first thing in a forked child, with the parent's pid taken before fork().
inline void TieToParent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died between fork() and prctl()
}

// Returns the heap's freed pages to the system (jemalloc's purge where hetsim runs on it, else glibc's
// malloc_trim). Called before forking a simulation: a child inherits the parent's dirty pages and its
// allocator would purge them page by page (a planner's search that freed gigabytes made every one of
// hundreds of simulations slow).
void ReleaseFreeHeap();

// Runs argv without a shell (stdin closed; stdout and stderr to `log_path` when given), tied to this process's
// life; returns its exit code (128 + signal when killed), or an error when it cannot start.
Result<int> RunProgram(const std::vector<std::string>& argv, const std::string& log_path = "");

// `mpirun` (or `mpirun_cmd`, split at spaces) with -np `ranks`, allowing oversubscription (more ranks
// than cores) and, as root, running as root.
std::vector<std::string> MpirunPrefix(const std::string& mpirun_cmd, int ranks);

// argv as one shell-like line (for messages and provenance).
std::string JoinArgs(const std::vector<std::string>& argv);

// tools/plot of the source tree the running binary was built from (HETSIM_PLOT_DIR overrides), or "tools/plot".
std::string PlotDir();

}  // namespace hetsim::models
