// The CPU backend: every op in FP32 with Eigen, run immediately on the calling thread (one MPI rank per
// CPU worker; Eigen is not given threads of its own, so ranks do not oversubscribe the cores).
#pragma once

#include <memory>

#include "executor/backend.h"

namespace hetsim::executor {

// `slowdown` >= 1: a slower CPU worker (rank_kinds.h), each kernel taking `slowdown` times its time here (the
// rank keeps its core for the difference).
std::unique_ptr<Backend> MakeCpuBackend(double slowdown = 1);

}  // namespace hetsim::executor
