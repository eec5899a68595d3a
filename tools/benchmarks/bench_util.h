// Shared by the planner benchmarks (bench_autohet, bench_metis, bench_hexiscale): the `name value unit`
// output line and the process's CPU time.
#pragma once

#include <sys/resource.h>

#include <cstdio>
#include <string>

namespace hetsim::bench {

// CPU seconds this process has used (all threads): on a shared machine steadier than wall time.
inline double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

// One measurement line, flushed at once (long runs show progress).
inline void Print(const std::string& name, double value, const char* unit) {
  std::printf("%s %.4g %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

}  // namespace hetsim::bench
