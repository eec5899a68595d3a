// Shared by the benchmarks (tools/benchmarks): the `name value unit` output line, the process's CPU time,
// and the set-up of a planning problem (training settings, results checked with their error printed).
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "models/proto/training.pb.h"
#include "models/status.h"

namespace hetsim::bench {

// CPU seconds this process has used (all threads): on a shared machine steadier than wall time.
inline double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

// One measurement line, flushed at once (long runs show progress).
inline void Print(const std::string& name, double value, const char* unit) {
  std::printf("%s %.6g %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

// Training settings of a benchmark's problem (resolved against its model with models::ResolveTraining).
inline proto::Training TrainingOf(uint32_t global_batch, uint32_t seq_len, proto::DType dtype,
                                  proto::Recompute recompute = proto::RECOMPUTE_UNSPECIFIED) {
  proto::Training t;
  t.set_global_batch_size(global_batch);
  t.set_seq_len(seq_len);
  if (dtype != proto::DTYPE_UNSPECIFIED) t.set_dtype(dtype);
  if (recompute != proto::RECOMPUTE_UNSPECIFIED) t.set_recompute(recompute);
  return t;
}

// Whether every result holds a value; else the first error is printed to stderr (the set-up stops there).
template <typename... Results>
bool AllOk(const Results&... results) {
  bool ok = true;
  const auto check = [&ok](const auto& r) {
    if (ok && !r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      ok = false;
    }
  };
  (check(results), ...);
  return ok;
}

}  // namespace hetsim::bench
