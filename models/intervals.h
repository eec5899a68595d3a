// Prediction intervals: how far a simulated iteration time is from what the same run measured, for runs
// like it (docs/calibration.md "Intervals").
//
// The bundled table models/catalog/intervals.csv holds one residual per measured run of the development
// halves (even data rows) of every bundled validation set, simulated by the one rule's calibration (what a
// user who passes no flags gets): the ratio measured / simulated and the run's class — GPU family, dtype,
// ZeRO-3 or not, pipeline depth, GPU count, and two partitions never mixed: whether its GPU types rest on
// measurements and whether the model is a mixture of experts (the twin errs on MoE runs differently from dense
// ones, docs/moe.md). tools/fit/build_intervals.py writes it. An interval at level q
// for a new prediction takes the residuals of the most specific class that has at least kMinRuns of them
// (dropping, in order, the GPU count, the pipeline depth, ZeRO-3, the dtype and the GPU family), and
// returns their (1 − q)/2 and (1 + q)/2 empirical quantiles: [simulated · lo, simulated · hi]. The held-out
// halves are not in the table; `hetsim validate-sim` reports how many of their runs the intervals cover.
#pragma once

#include <string>
#include <vector>

#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"
#include "models/status.h"

namespace hetsim::models {

class Cluster;

// The class of a run, as the residual table keys it.
struct RunClass {
  std::string family = "other";  // a100 | hopper | other | mixed (GpuFamily; mixed: several families)
  std::string dtype = "16-bit";  // fp8 | 16-bit | 32-bit (DtypeClass)
  bool zero3 = false;            // parameters sharded (ZeRO-3 / FSDP full shard)
  uint32_t pp = 1;               // stages of the deepest pipeline
  uint32_t gpus = 1;             // GPUs the run uses
  bool measured = true;          // every GPU type of the run rests on measurements (the compute basis)
  bool moe = false;              // the model routes tokens to experts (a mixture of experts)
};

// a100 (A100 and A800), hopper (H100, H800, H200, GH200, H20), other.
std::string GpuFamily(const std::string& gpu_name);
std::string DtypeClass(proto::DType dtype);
// The class of `plan` on `cluster` under `training`; `measured` as the simulation's compute basis says, `moe`
// whether the model has routed experts.
RunClass ClassOf(const proto::Plan& plan, const Cluster& cluster, const proto::Training& training, bool measured,
                 bool moe = false);

struct PredictionInterval {
  double level = 0.8;
  double lo = 1, hi = 1;  // measured / simulated at the (1 − level)/2 and (1 + level)/2 quantiles
  size_t runs = 0;        // residuals it rests on (0: none)
  std::string like;       // the features those runs share, e.g. "a100, 16-bit, PP 2-8"
  std::string sets;       // the validation sets they come from
  std::string caveat;     // e.g. that the GPU type has no measured basis
};

// At least this many residuals make a class specific enough.
inline constexpr size_t kMinIntervalRuns = 10;

// The interval for a run of class `c` at `level` (0 < level < 1) from the bundled residual table.
PredictionInterval IntervalFor(const RunClass& c, double level = 0.8);
// "80% interval 11.21-13.05 s (412 measured runs like it: a100, 16-bit, PP 2-8; vtrain-single)".
std::string DescribeInterval(const PredictionInterval& interval, double simulated_s);

// How many measured runs fall inside their intervals.
struct IntervalCoverage {
  size_t runs = 0, covered = 0;
  // Counts one run; returns whether `measured` lies in [simulated · lo, simulated · hi].
  bool Add(const PredictionInterval& interval, double simulated, double measured);
  // "cover 76.4% of 720 runs" (or "no runs").
  std::string Line() const;
};
// The line validate-sim prints: the held-out half's coverage, then all runs'.
std::string CoverageSummary(const IntervalCoverage& held_out, const IntervalCoverage& all);
// Whether the report's compute basis rests on measurements for every GPU type (a measured calibration entry
// or a measured layer profile).
template <typename Report>
bool AllComputeMeasured(const Report& report) {
  for (const auto& b : report.compute_basis()) {
    if (!b.measured() && !b.profiled()) return false;
  }
  return true;
}

// One residual of the table (exposed for tests and validate-sim).
struct Residual {
  std::string set;
  RunClass cls;
  double ratio = 1;  // measured / simulated
};
const std::vector<Residual>& BundledResiduals();
// Parses a residual table (the bundled CSV's format); errors name the line.
Result<std::vector<Residual>> ParseResiduals(const std::string& csv, const std::string& where);
// The interval from `residuals` instead of the bundled table.
PredictionInterval IntervalFrom(const std::vector<Residual>& residuals, const RunClass& c, double level);

}  // namespace hetsim::models
