// The CUDA backend: cuBLAS GEMMs (BF16 inputs with FP32 accumulation, or FP32), attention as strided-
// batched cuBLAS GEMMs around causal-softmax kernels of our own (the scores are materialised: the
// "standard" attention of the memory model, not a fused flash kernel), fused elementwise and row-wise
// kernels (executor/cuda_kernels.cu), stream-ordered memory (cudaMallocAsync), CUDA events for timing;
// NCCL communicators bootstrapped over MPI. Only built when CMake finds CUDA, nvcc and NCCL
// (HETSIM_EXECUTOR_CUDA). No CUDA header here: the rest of executor/ includes it freely.
#pragma once

#include <memory>

#include "executor/backend.h"

namespace hetsim::executor {

// Binds this process to GPU `local_rank` mod the GPUs visible on its node. `act_dtype` is kBF16 (weights
// and activations in BF16, FP32 master weights, gradients and optimizer states) or kF32.
std::unique_ptr<Backend> MakeCudaBackend(int local_rank, DType act_dtype);

// NCCL communicators on `backend` (which MakeCudaBackend made): one per group (the unique id is created
// by the group's first rank and broadcast over an MPI communicator of the group), and one per directed
// pipeline channel, so that sends (on a side stream) and receives (on the compute stream) never wait on
// each other inside one communicator.
std::unique_ptr<CommFactory> MakeNcclCommFactory(Backend* backend);

}  // namespace hetsim::executor
