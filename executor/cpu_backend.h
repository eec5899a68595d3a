// The CPU backend: every op in FP32 with Eigen, run immediately on the calling thread (one MPI rank per
// CPU worker; Eigen is not given threads of its own, so ranks do not oversubscribe the cores).
#pragma once

#include <memory>

#include "executor/backend.h"

namespace hetsim::executor {

std::unique_ptr<Backend> MakeCpuBackend();

}  // namespace hetsim::executor
