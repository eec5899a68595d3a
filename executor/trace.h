// Timing of every operation the executor runs, and the two outputs built from it: the IterationReport
// (models/proto/report.proto, the simulator's format) and a Chrome-trace JSON timeline (one track per
// device; slices named forward/backward/tp/pp/dp/optimizer, as the simulator writes them).
//
// Slices are recorded as backend marks (CUDA events on the CUDA backend, the steady clock on the CPU
// backend) and resolved after the iteration, relative to the iteration's start (taken right after a
// barrier). TP slices nest inside the forward/backward slice of their micro-batch.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/exec_plan.h"
#include "models/cluster.h"
#include "models/iteration_report.h"
#include "models/lowering.h"
#include "models/proto/profile.pb.h"
#include "models/proto/report.pb.h"
#include "models/transformer.h"

namespace hetsim::executor {

// The categories of the lowering (models/lowering.h), shared with the simulator.
using models::Category;
using models::CategoryName;
using models::kNumCategories;

struct TimedSlice {
  Category category = Category::kForward;
  int32_t micro_batch = -1;  // −1 when the slice belongs to no micro-batch
  double begin_s = 0;        // since the iteration's start
  double end_s = 0;
  int32_t layer = -1;        // plan layer, for per-layer timing (profiles); −1 otherwise
};

// Thread-safe: the compute thread and the CPU backend's side-stream worker record into one recorder.
class SliceRecorder {
 public:
  explicit SliceRecorder(Backend* backend) : backend_(backend) {}
  size_t Begin(Category c, int32_t micro_batch, int32_t layer = -1);
  void End(size_t index);
  // Valid after Backend::Synchronize(): the recorded slices relative to `origin`; clears them.
  std::vector<TimedSlice> Resolve(Backend::Mark origin);

  // Records one slice for the lifetime of the scope (no-op with a null recorder).
  class Scope {
   public:
    Scope(SliceRecorder* r, Category c, int32_t micro_batch, int32_t layer = -1)
        : r_(r), i_(r ? r->Begin(c, micro_batch, layer) : 0) {}
    ~Scope() {
      if (r_) r_->End(i_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    SliceRecorder* r_;
    size_t i_;
  };

 private:
  struct Pending {
    Category category;
    int32_t micro_batch;
    int32_t layer;
    Backend::Mark begin, end;
  };
  Backend* backend_;
  std::mutex mu_;  // the side stream's worker (comm.dp_overlap, CPU backend) records too
  std::vector<Pending> pending_;
};

// Everything one device measured over the timed iterations.
struct DeviceTiming {
  int rank = 0;
  std::vector<double> iteration_s;                 // per timed iteration, from its start to its end
  std::vector<std::vector<TimedSlice>> slices;     // per timed iteration
  double peak_memory_bytes = 0;
};

// Seconds of each category in `slices`; the TP and CP slices are also subtracted from the forward/backward
// slices they nest in when `exclusive` is set.
std::vector<double> CategorySeconds(const std::vector<TimedSlice>& slices, bool exclusive);

struct ReportContext {
  const ExecPlan& plan;
  const models::Cluster& cluster;
  const models::TransformerModel& model;
  const proto::Training& training;
  std::string plan_name;
  double wall_time_s = 0;
};

// What the ranks measured, in the form the shared writers (models/iteration_report.h) take. Per device
// (by rank), averaged over the timed iterations: compute = forward + backward + optimizer − nested TP and
// CP; TP, PP (receives; sends are asynchronous), DP and CP (ring, all-to-alls) communication; the end of the last forward/backward
// slice. The iteration time is the slowest rank's, averaged over the timed iterations; the timeline lays
// the timed iterations end to end (each as long as its slowest rank).
models::IterationMeasure MeasureIteration(const ReportContext& ctx, const std::vector<DeviceTiming>& devices);

// models::BuildIterationReport of MeasureIteration (the simulator's report writer).
proto::IterationReport BuildReport(const ReportContext& ctx, const std::vector<DeviceTiming>& devices);

// models::ChromeTraceJson of MeasureIteration (the simulator's timeline writer).
std::string BuildChromeTrace(const ReportContext& ctx, const std::vector<DeviceTiming>& devices);

// Per-layer measurements of one rank (profile mode), averaged per micro-batch (forward, backward) or per
// step (optimizer).
struct LayerMeasurement {
  uint32_t layer = 0;
  double forward_s = 0;
  double backward_s = 0;  // includes the forward recomputation under full recompute
  double optimizer_s = 0;
  double activation_bytes = 0;  // kept for the backward pass per micro-batch
};

// Sums the per-layer slices of `steps` (each a step's layer slices) into per-micro-batch averages.
std::vector<LayerMeasurement> MeasureLayers(const std::vector<std::vector<TimedSlice>>& steps,
                                            const std::vector<double>& activation_bytes, uint32_t layer_begin,
                                            uint32_t layer_end, uint32_t micro_batches);

// One LayerTiming per layer kind present: the embedding, the transformer blocks (their mean) and the head
// (models/proto/profile.proto).
std::vector<proto::LayerTiming> ProfileLayers(const models::TransformerModel& model,
                                              const std::vector<LayerMeasurement>& layers, uint32_t tp,
                                              uint32_t micro_batch_size);

}  // namespace hetsim::executor
