// CPU seconds spent by this process and the children it has waited for (each simulation runs in a child
// process, sim/simulator.h). The twin's search and the polish measure their limits on this clock rather than
// the wall clock, so that a machine shared with other jobs stops them after the same work, not earlier.
#pragma once

#include <sys/resource.h>

#include <cstdio>
#include <string>

namespace hetsim::planning {

inline double CpuSeconds() {
  double s = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    getrusage(who, &u);
    s += static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  }
  return s;
}

// A time for the search's notes: "0.2807 s".
inline std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g s", s);
  return buf;
}

}  // namespace hetsim::planning
