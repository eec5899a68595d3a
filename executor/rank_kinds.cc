#include "executor/rank_kinds.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "models/communicator.h"

namespace hetsim::executor {

const char* BackendKindName(BackendKind kind) { return kind == BackendKind::kCpu ? "cpu" : "cuda"; }

bool IsCpuWorker(const models::GpuSpec& gpu) { return gpu.form_factor == "CPU worker"; }

namespace {

// The machine's CPU worker: the catalog's `cpu` row, the speed the CPU backend runs at.
Result<double> MachinePeak() {
  auto cpu = models::GpuCatalog::Bundled().Find("cpu");
  if (!cpu.ok()) return cpu.status();
  return cpu.value()->peak_fp32_tflops;
}

Result<BackendKind> BackendOf(const models::GpuSpec& gpu, const std::string& backend) {
  if (backend == "cpu") return BackendKind::kCpu;
  if (backend == "cuda") return BackendKind::kCuda;
  if (backend == "auto") return IsCpuWorker(gpu) ? BackendKind::kCpu : BackendKind::kCuda;
  return Status::Invalid("hetsim-exec: --backend: unknown backend '" + backend + "' (expected auto, cpu or cuda)");
}

// The precision rule (rank_kinds.h): a job with a CPU rank trains in fp32 everywhere; CUDA ranks alone run bf16
// or fp32.
Status CheckDtype(const std::vector<RankKind>& kinds, const ExecPlan& plan, proto::DType dtype, const std::string& file) {
  for (size_t r = 0; r < kinds.size(); ++r) {
    const RankKind& k = kinds[r];
    if (k.backend == BackendKind::kCpu && dtype != proto::DTYPE_FP32) {
      return Status::Invalid(
          file + ": training.dtype: " + models::DTypeName(dtype) + ": rank " + std::to_string(r) + " runs device " +
          std::to_string(plan.devices[r]) + " (" + k.gpu->name +
          ") on the CPU backend, which computes in fp32 only, and every rank of a job trains in one dtype; set "
          "`training: {dtype: fp32}` in the plan or pass --dtype fp32");
    }
    if (k.backend == BackendKind::kCuda && dtype != proto::DTYPE_BF16 && dtype != proto::DTYPE_FP32) {
      return Status::Invalid(file + ": training.dtype: the CUDA backend runs bf16 or fp32, not " +
                             models::DTypeName(dtype) +
                             " (fp16 would need loss scaling; fp8 and tf32 GEMMs are not implemented); set "
                             "`training: {dtype: bf16}` or pass --dtype bf16");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<double> CpuWorkerSlowdown(const models::GpuSpec& gpu) {
  auto machine = MachinePeak();
  if (!machine.ok()) return machine.status();
  if (gpu.peak_fp32_tflops <= 0 || gpu.peak_fp32_tflops > *machine) {
    return Status::Invalid(gpu.name + ": the CPU backend runs a CPU worker at the machine's speed (the catalog's cpu "
                           "row, " + std::to_string(*machine) + " TFLOPS fp32) or slower, and " + gpu.name + " says " +
                           std::to_string(gpu.peak_fp32_tflops) + "; use cpu, or a slower CPU-worker type (cpu-slow)");
  }
  return *machine / gpu.peak_fp32_tflops;
}

Result<RankKinds> RankKinds::Choose(const ExecPlan& plan, const models::Cluster& cluster, const std::string& backend,
                                    proto::DType dtype, const std::string& file) {
  RankKinds out;
  for (uint32_t device : plan.devices) {
    RankKind k;
    const models::DeviceInfo& d = cluster.device(device);
    k.gpu = d.gpu;
    k.node = d.node;
    k.node_group = cluster.node(d.node).group;
    auto b = BackendOf(*d.gpu, backend);
    if (!b.ok()) return b.status();
    k.backend = *b;
    if (k.backend == BackendKind::kCpu && IsCpuWorker(*d.gpu)) {
      auto s = CpuWorkerSlowdown(*d.gpu);
      if (!s.ok()) return Status::Invalid("cluster '" + cluster.name() + "': nodes[].gpus.type: " + s.status().message());
      k.slowdown = *s;
    }
    out.kinds_.push_back(k);
  }
  if (Status s = CheckDtype(out.kinds_, plan, dtype, file); !s.ok()) return s;
  // The communicator's paths by node group under the cluster's own rule (auto: vendors decide).
  const models::Communicator comm(cluster);
  out.groups_ = static_cast<uint32_t>(cluster.spec().nodes_size());
  out.staged_ = comm.staged_groups();
  std::vector<int> everyone(out.kinds_.size());
  std::iota(everyone.begin(), everyone.end(), 0);
  if (dtype != proto::DTYPE_FP32 && out.Mixed(everyone)) {
    return Status::Invalid(file + ": training.dtype: " + models::DTypeName(dtype) + ": the job's ranks are of several " +
                           "kinds (" + out.Describe() + "), and what crosses kinds goes through host memory and MPI " +
                           "in fp32; set `training: {dtype: fp32}` in the plan or pass --dtype fp32");
  }
  return out;
}

bool RankKinds::has(BackendKind backend) const {
  return std::any_of(kinds_.begin(), kinds_.end(), [&](const RankKind& k) { return k.backend == backend; });
}

bool RankKinds::Mixed(const std::vector<int>& ranks) const {
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankKind& a = of(ranks[i]);
    for (size_t j = i + 1; j < ranks.size(); ++j) {
      const RankKind& b = of(ranks[j]);
      if (a.backend != b.backend) return true;
      if (a.node != b.node && staged_.at(size_t{a.node_group} * groups_ + b.node_group) != 0) return true;
    }
  }
  return false;
}

std::string RankKinds::Describe() const {
  const auto label = [](const RankKind& k) {
    std::string s = k.gpu->name + " (" + BackendKindName(k.backend) + " backend";
    if (k.slowdown > 1) {
      char buf[32];
      std::snprintf(buf, sizeof buf, " at 1/%g speed", k.slowdown);
      s += buf;
    }
    return s + ")";
  };
  std::string out;
  for (size_t r = 0; r < kinds_.size();) {
    size_t e = r + 1;
    while (e < kinds_.size() && label(kinds_[e]) == label(kinds_[r])) ++e;
    out += std::string(out.empty() ? "" : "; ") + (e - r == 1 ? "rank " + std::to_string(r)
                                                              : "ranks " + std::to_string(r) + "-" + std::to_string(e - 1)) +
           ": " + label(kinds_[r]);
    r = e;
  }
  return out;
}

}  // namespace hetsim::executor
