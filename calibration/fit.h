// Fitting the simulator's per-GPU parameters to microbenchmarks (`hetsim calibrate`): the compute model's
// GEMM and memory efficiencies and fixed costs from hetsim-kernel-bench, the link α–β and the per-call
// collective latency from hetsim-coll-bench. Every fit is a robust least-squares fit (Eigen; iteratively
// reweighted with Huber weights) of relative error, so that small and large measurements weigh alike and
// a few outliers (a descheduled run, a one-wave GEMM) do not drag the line.
//
// The models fitted are the simulator's own (models/kernels.h):
//   GEMM       t = ideal(k) / gemm_efficiency + kernel_latency   ideal: waves of tiles at peak (or FLOPs/peak
//                                                                  without SMs)
//   memory     t = bytes / (HBM bandwidth · memory_efficiency) + kernel_latency
//   p2p        t = latency + bytes / bandwidth                    (intra-node link, models::LinkCalibration)
//   all-reduce t = α(g) + 2(g−1)/g · bytes / (bandwidth · collective_efficiency)
// kernel_latency is the launch floor (back-to-back one-element kernels) when the bench measured it, else the
// memory fit's intercept; host_overhead is the measured issue time per kernel.
#pragma once

#include <string>
#include <vector>

#include "models/gpu_catalog.h"
#include "models/proto/calibration.pb.h"
#include "models/status.h"

namespace hetsim::calibration {

// One row of hetsim-kernel-bench's CSV.
struct KernelRow {
  std::string kind, name, model, pass;
  double tp = 0, micro_batch = 0, seq_len = 0;
  double m = 0, n = 0, k = 0, batch = 1, bytes = 0, flops = 0;
  double median_s = 0, min_s = 0, model_s = 0;
};
// One row of hetsim-coll-bench's CSV.
struct CommRow {
  std::string op;  // allreduce | p2p
  int group_size = 0;
  double bytes = 0, median_s = 0;
};

Result<std::vector<KernelRow>> ReadKernelBench(const std::string& path);
Result<std::vector<CommRow>> ReadCommBench(const std::string& path);

// y ≈ X·c minimising Σ w_i ((X c − y)_i / y_i)², w from Huber's function of the relative residual
// (threshold 1.345 robust standard deviations, MAD-scaled), 20 reweighting rounds at most.
struct LinearFit {
  std::vector<double> coef;
  double mape = 0;    // mean |relative residual|
  double worst = 0;   // max |relative residual|
  double bias = 0;    // mean relative residual
  size_t n = 0;
};
LinearFit RobustFit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);

// What the fit found, per part, for the report and the provenance.
struct FitSummary {
  std::vector<std::string> lines;  // human-readable, one per fitted quantity
};

// Fits a calibration entry for `gpu` from the two benchmarks (either may be empty: then those fields stay
// unset and the base calibration's values apply). Errors when a part has too few rows to fit.
Result<proto::KernelCalibration> FitCalibration(const models::GpuSpec& gpu, const std::vector<KernelRow>& kernels,
                                                const std::vector<CommRow>& comm, FitSummary* summary);

}  // namespace hetsim::calibration
