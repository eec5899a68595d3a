// Forked children (simulations, workers, plotting) end with their parent: killing `hetsim` never leaves a
// SimGrid child or a worker running on.
#pragma once

#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

namespace hetsim::models {

// Call first thing in a forked child, with the parent's pid taken before fork().
inline void TieToParent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died between fork() and prctl()
}

}  // namespace hetsim::models
