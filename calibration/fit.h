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

#include <map>
#include <string>
#include <vector>

#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/proto/profile.pb.h"
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

// A CSV with a header line (after '#' comment lines) as rows of named cells (and "#line", the row's line);
// an error names a `required` column the header lacks.
Result<std::vector<std::map<std::string, std::string>>> ReadCsv(const std::string& path,
                                                                 const std::vector<std::string>& required);
// A row's cell `key` as a finite number; the error names the file, line and column.
Result<double> CsvNumber(const std::map<std::string, std::string>& row, const std::string& key, const std::string& path);

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

// ---- Fitting to measured layer profiles (`hetsim calibrate --from-profiles`) ----
//
// A profile (models/proto/profile.proto) times whole layer passes. A transformer block's forward and
// backward pass at TP 1 (one observation per micro-batch size: their sum, what an iteration spends) are the
// compute model's kernel lists (models::LayerKernels), so their time is linear in the inverse efficiencies: t − N·kernel_latency = Σ_GEMM ideal / gemm_efficiency + Σ_memory ideal / memory_efficiency
// (ideal: the kernel at unit efficiency without fixed costs; N kernels). Rows at higher TP carry their TP
// communication (Sailor's do) and are left out; embedding and head rows too (one row each per shape, and
// Sailor's embedding backward is not captured).

// One measured pass with the kernels the compute model lowers it to.
struct LayerObservation {
  std::string label;  // "opt-30b mb 2 forward + backward"
  std::vector<models::Kernel> kernels;
  double seconds = 0;  // measured
  uint32_t tp = 1;     // TP degree: rows above 1 carry their TP all-reduces
  double tp_allreduce_bytes = 0;  // bytes of each of the block's TP all-reduces (4 per forward + backward)
};

// The transformer rows of `profile` (`where` names it in errors) as observations on `gpu`, the training in
// `dtype` with `attention` (rows at TP t > 1: the kernels of one TP rank, tp = t). Errors: the profile is for another GPU type, its model is not in
// the catalog or its sequence length is 0, or it has no TP-1 transformer row.
Result<std::vector<LayerObservation>> ProfileObservations(const proto::Profile& profile, const std::string& where,
                                                          const models::GpuSpec& gpu, proto::DType dtype,
                                                          proto::Attention attention);

// Fits `gpu`'s GEMM and memory efficiencies for `dtype` (a by_dtype entry: the profiled stack's kernels in
// that precision) to the TP-1 observations, keeping `base`'s kernel latency; GEMMs that are memory-bound at the fitted values
// move to the memory side and the fit is repeated. When the memory side is not identifiable (a
// non-positive coefficient) only the GEMM efficiency is fitted, with base's memory efficiency. Errors with
// fewer than three observations. With `fit_tp_latency`, rows at TP t > 1 then give the per-call latency of a t-GPU all-reduce
// (collective_latency): the median over them of (measured − the fitted compute − 4 ring all-reduces'
// transfers at the catalog's scale-up bandwidth and base's collective efficiency) / 4.
Result<proto::KernelCalibration> FitFromProfiles(const models::GpuSpec& gpu, proto::DType dtype,
                                                 const models::KernelParams& base,
                                                 const std::vector<LayerObservation>& observations,
                                                 bool fit_tp_latency, FitSummary* summary,
                                                 bool fit_tp_bandwidth = false);
// `fit_tp_bandwidth` (`--fit-tp-collectives`; replaces fit_tp_latency's median): per TP degree t, the
// latency α and the bus bandwidth B of a t-GPU all-reduce inside the profiled node, fitted (robust, relative
// to the time beyond compute) to what each row spends beyond `fitted`'s compute as its block's 4 ring
// all-reduces, 4 (α + 2(t−1)/t · bytes / B); α is held at 0 where the two-parameter fit makes it negative.
// Adds collective_latency entries with bus_bandwidth_gbyte_s to `out`; a degree with fewer than two such
// rows, or whose time does not grow with the bytes, gets none (said in `summary`).
void FitTpCollectives(const models::GpuSpec& gpu, proto::DType dtype, const models::KernelParams& fitted,
                      const std::vector<LayerObservation>& tp_rows, proto::KernelCalibration* out, FitSummary* summary);

// The fitted entry's error on other observations (held-out profiles): one line per observation and a
// summary line (MAPE and bias of the compute model's block time with `fitted` layered over `base`).
void CheckOnProfiles(const models::GpuSpec& gpu, proto::DType dtype, const models::KernelParams& base,
                     const proto::KernelCalibration& fitted, const std::vector<LayerObservation>& observations,
                     FitSummary* summary);

}  // namespace hetsim::calibration
