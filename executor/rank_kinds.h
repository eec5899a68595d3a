// Which backend each rank of hetsim-exec runs, and which of its communicators mix kinds of device (HetHub §3.1's
// distributed unified communicator). No MPI or CUDA here, so it is tested without launching processes.
//
// A rank's kind is its device's catalog type. A CPU worker (a catalog row whose form factor is "CPU worker":
// cpu, cpu-slow) runs the CPU backend; any other type the CUDA backend (`--backend auto`, the default).
// `--backend cpu` or `--backend cuda` forces one backend on every rank. A CPU worker slower than the `cpu` row
// runs at its share of the machine's speed: slowdown = the cpu row's fp32 peak / its own (cpu-slow: 2).
//
// A group of ranks (a TP, Ulysses, CP, EP or gradient-sync group) or a pipeline channel *mixes kinds* when its
// members run different backends or when the cluster's communicator (models/communicator.h, the rule the
// simulator plays) takes the CPU path between two of their nodes (GPUs of different vendors, no cross-vendor
// RDMA). Such a group talks through host memory and MPI (unified_comm.h); a group of one kind keeps its
// backend's own path (NCCL among CUDA ranks, MPI among CPU ranks). The rule reads the cluster's vendors
// whatever the plan's `comm.communicator` says (the executor has no cross-vendor RDMA; `comm.cpu_staged`
// still stages every pipeline message, as before).
//
// Precision: every rank of a job computes in the training's dtype, and a pipeline or collective message
// carries it on both sides. The CPU backend computes in fp32 only, so a job with a CPU rank trains in fp32
// everywhere (its CUDA ranks run cuBLAS in FP32, no TF32); bf16 with a CPU rank is refused, naming the rank. A job
// whose ranks mix kinds in any other way (CUDA ranks of two vendors) also trains in fp32: the host-staged
// collectives reduce fp32 through MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/exec_plan.h"
#include "models/cluster.h"
#include "models/proto/training.pb.h"
#include "models/status.h"

namespace hetsim::executor {

enum class BackendKind { kCpu, kCuda };

// "cpu", "cuda".
const char* BackendKindName(BackendKind kind);

// Whether a catalog type is a CPU worker (runs the CPU backend under --backend auto).
bool IsCpuWorker(const models::GpuSpec& gpu);

// How many times slower than this machine the CPU backend runs a CPU-worker type: the cpu row's fp32 peak over
// the type's (cpu 1, cpu-slow 2). An error for a type faster than the cpu row.
Result<double> CpuWorkerSlowdown(const models::GpuSpec& gpu);

struct RankKind {
  const models::GpuSpec* gpu = nullptr;  // the device's catalog type
  BackendKind backend = BackendKind::kCpu;
  double slowdown = 1;    // CPU backend: each kernel takes this many times its time on the machine (>= 1)
  uint32_t node = 0;      // the device's node (models::Cluster::node)
  uint32_t node_group = 0;  // its node group (the cluster spec's nodes[] index)
};

class RankKinds {
 public:
  // Each rank's kind under `--backend` = auto | cpu | cuda, checked against the training's dtype. Errors name
  // `file` (the plan), the field and the fix.
  static Result<RankKinds> Choose(const ExecPlan& plan, const models::Cluster& cluster, const std::string& backend,
                                  proto::DType dtype, const std::string& file);

  const RankKind& of(int rank) const { return kinds_.at(static_cast<size_t>(rank)); }
  int world_size() const { return static_cast<int>(kinds_.size()); }
  bool has(BackendKind backend) const;
  // Whether a group of world ranks (or a channel's two) mixes kinds: it then talks through host memory and MPI.
  bool Mixed(const std::vector<int>& ranks) const;
  // "ranks 0-2: cpu (cpu backend); rank 3: cpu-slow (cpu backend at 1/2 speed)".
  std::string Describe() const;

 private:
  std::vector<RankKind> kinds_;
  uint32_t groups_ = 0;
  std::vector<uint8_t> staged_;  // node group x node group: the communicator's CPU path between their nodes
};

}  // namespace hetsim::executor
