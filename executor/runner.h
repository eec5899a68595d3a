// hetsim-exec's program: MPI start-up, spec loading, the training loop in the plan's schedule with timing
// of every operation (a warm-up, a barrier before every step, timed steps: the structure of
// NVIDIA/nccl-tests' timing loop), gradient dumps and comparisons, and the report and timeline written
// by rank 0.
#pragma once

namespace hetsim::executor {

// The whole program, from MPI_Init to MPI_Finalize. Returns the process exit code: 0 success, 1 a
// problem with the inputs (or gradients that differ from the reference), 2 a usage error.
int ExecMain(int argc, char** argv);

}  // namespace hetsim::executor
