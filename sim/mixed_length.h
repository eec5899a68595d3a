// Training over mixed-length data (Hetu v2 §7.3, Appendix A.4): per step, sequences of varied lengths
// fill a token budget; each system (packed DeepSpeed/Megatron, interval-based HotSPa/Hetu-A,
// heterogeneous Hetu-B) turns the step into simulated iterations, and this file adds them up.
//
// The cost model (docs/reproductions/hetu-mixed-length.md gives the reasoning):
//  - a "window" is one micro-batch: sequences packed first-fit-decreasing up to a window length, with
//    attention over the whole window (plain packing, no per-document masks);
//  - packed systems train fixed-shape windows of the context length: one SimulateIteration of the plan at
//    the context length with ceil(windows / replicas) micro-batches per pipeline;
//  - the others price each pipeline's windows by two simulations of that pipeline alone at the window's
//    length (rounded up to the grid): with 1 and 2 micro-batches, whose compute phases give a steady
//    per-window time δ(L) = C(L,2) − C(L,1) and a pipeline fill-and-drain time φ(L) = C(L,1) − δ(L); a
//    pipeline's windows cost Σ δ(L_w) + φ(max L_w) (exact for one-stage pipelines and equal windows);
//  - gradient sync and the optimizer step are the "tail" of a whole-plan simulation: its iteration time
//    minus the end of its last forward/backward compute;
//  - switching plans costs the transfers that re-shard the parameters (SwitchTransfers), played on the
//    cluster's SimGrid platform.
// Every simulation is cached per (plan, pipelines, length, micro-batch counts).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/proto/mixed_length.pb.h"
#include "models/proto/plan.pb.h"
#include "models/status.h"
#include "models/transformer.h"
#include "sim/simulator.h"

namespace hetsim::sim::mixed {

// ---- data ------------------------------------------------------------------------------------------

// Parses and checks a config (YAML text); errors are "file:line:col: key.path: …" or "file: field: …".
Result<proto::MixedLengthConfig> ParseConfig(const std::string& yaml_text, const std::string& file);
// Reads `path` and parses it.
Result<proto::MixedLengthConfig> LoadConfig(const std::string& path);

// Draws sequence lengths for one step after another. `lengths` holds the file's lengths when the data
// names a lengths_file (see LoadLengthsFile), else it is unused.
class LengthSampler {
 public:
  // Lengths above `max_tokens` (the context; 0 = no limit) are truncated to it.
  LengthSampler(const proto::MixedLengthData& data, std::vector<uint32_t> file_lengths, uint32_t max_tokens);
  // One step: lengths drawn until their sum reaches data.tokens_per_step; the last one is cut so that the
  // sum equals the budget exactly. Deterministic per (data.seed, how many steps were drawn before). Stops
  // after `max_sequences` + 1 lengths (the caller's limit was passed: the step is not whole).
  std::vector<uint32_t> NextStep(uint64_t max_sequences = UINT64_MAX);

 private:
  uint32_t Draw();
  proto::MixedLengthData data_;
  std::vector<uint32_t> file_lengths_;
  uint32_t max_tokens_ = 0;
  std::mt19937_64 rng_;
};

// One positive integer per line ('#' comments, blank lines allowed); errors name file:line.
Result<std::vector<uint32_t>> LoadLengthsFile(const std::string& path);

// First-fit decreasing: the fill (tokens) of each window of `window_tokens` the lengths are packed into,
// in the order windows were opened. Every length must be <= window_tokens.
std::vector<uint32_t> PackWindows(std::vector<uint32_t> lengths, uint32_t window_tokens);

// Index of the first interval (ascending upper bounds, inclusive) holding `length`; bounds.size() when none.
size_t IntervalOf(uint32_t length, const std::vector<uint32_t>& upper_bounds);

// ---- Hetu-B's balancer -------------------------------------------------------------------------------

// What the balancer knows of one pipeline: its window and the cost of its windows.
struct PipelineModel {
  uint32_t window_tokens = 0;
  std::function<double(uint32_t window_fill)> per_window_s;  // δ: one more window of this fill
  std::function<double(uint32_t longest_fill)> fill_drain_s;  // φ: pipeline fill and drain (0: one stage)
};
struct PipelineLoad {
  std::vector<uint32_t> sequences;  // lengths assigned, in assignment order
  std::vector<uint32_t> windows;    // fill of each window (first fit in assignment order)
  double time_s = 0;                // Σ δ(windows) + φ(max window); 0 when idle
};
// Longest-processing-time first: sequences in decreasing length, each to the pipeline (whose window holds
// it) with the smallest time after taking it, packed first-fit into that pipeline's windows; ties go to
// the lower index. Our stand-in for Hetu-B's unpublished "custom cost model" (Appendix A.4). A sequence no
// pipeline's window holds is an error.
Result<std::vector<PipelineLoad>> Balance(const std::vector<uint32_t>& lengths,
                                          const std::vector<PipelineModel>& pipelines);
double PipelineTime(const std::vector<uint32_t>& windows, const PipelineModel& model);

// ---- simulations -------------------------------------------------------------------------------------

// Where the simulated time of a plan goes.
struct SimPoint {
  double iteration_s = 0;
  double compute_phase_s = 0;  // end of the last forward/backward compute on any device
  bool oom = false;
};

// Runs (and caches) SimulateIteration for plans at given lengths and micro-batch counts.
class Simulations {
 public:
  Simulations(const models::Cluster& cluster, const models::TransformerModel& model, SimOptions options,
              uint32_t grid_tokens);
  // Registers a plan (its `training:` gives dtype, recompute, attention). Returns its id.
  int AddPlan(const proto::Plan& plan, const std::string& file);
  const proto::Plan& plan(int id) const { return plans_[id].plan; }
  const std::string& plan_file(int id) const { return plans_[id].file; }
  // The plan (only the pipelines listed; all when empty) at `seq_len` with `micro_batches[i]` micro-batches
  // for the i-th listed pipeline.
  Result<SimPoint> Run(int plan, const std::vector<int>& pipelines, uint32_t seq_len,
                       const std::vector<uint32_t>& micro_batches);
  // δ and φ of one pipeline at a window fill (rounded up to the grid), as sim/mixed_length.h's header says.
  Result<double> PerWindow(int plan, int pipeline, uint32_t fill);
  Result<double> FillDrain(int plan, int pipeline, uint32_t fill);
  // Gradient sync and optimizer step of the whole plan.
  Result<double> Tail(int plan);
  uint32_t Grid(uint32_t tokens) const;
  size_t simulations() const { return sims_run_; }
  // Devices that ran out of memory in any simulation so far, as "plan at L tokens" lines.
  const std::vector<std::string>& oom_notes() const { return oom_notes_; }
  std::function<void(const std::string&)> on_simulation;  // called before each new simulation

 private:
  struct PlanEntry {
    proto::Plan plan;
    std::string file;
    std::vector<std::string> pipeline_shape;  // pipelines with equal shapes share δ/φ simulations
  };
  Result<std::pair<double, double>> DeltaPhi(int plan, int pipeline, uint32_t fill);
  void NoteOom(const std::string& note) {
    if (std::find(oom_notes_.begin(), oom_notes_.end(), note) == oom_notes_.end()) oom_notes_.push_back(note);
  }
  const models::Cluster& cluster_;
  const models::TransformerModel& model_;
  SimOptions options_;
  uint32_t grid_;
  std::vector<PlanEntry> plans_;
  std::map<std::string, SimPoint> cache_;
  std::map<std::string, std::pair<double, double>> delta_phi_;
  size_t sims_run_ = 0;
  std::vector<std::string> oom_notes_;
};

// ---- switching ---------------------------------------------------------------------------------------

// The point-to-point transfers that turn plan `from`'s parameter layout into plan `to`'s: per layer, every
// device of `to` receives the part of its TP shard it did not hold under `from`, `bytes_per_param` bytes per
// parameter. Sources: see SwitchCost.Sources. Replicas (DP, CP, Ulysses) of a shard each receive it.
std::vector<Transfer> SwitchTransfers(const proto::Plan& from, const proto::Plan& to,
                                      const models::TransformerModel& model, const models::Cluster& cluster,
                                      double bytes_per_param, proto::SwitchCost::Sources sources);
// Seconds to play SwitchTransfers on the cluster's platform (0 when nothing moves). The one function a
// fused-BSR model (Hetu §4.3, §6) would replace.
Result<double> SwitchSeconds(const proto::Plan& from, const proto::Plan& to, const models::TransformerModel& model,
                             const models::Cluster& cluster, double bytes_per_param,
                             proto::SwitchCost::Sources sources, const std::string& calibration);

// ---- the run -----------------------------------------------------------------------------------------

struct StepRow {
  int step = 0;
  std::string system;
  double time_s = 0;
  double compute_s = 0;  // forward/backward phases
  double sync_s = 0;     // gradient sync + optimizer
  double switch_s = 0;
  uint32_t sequences = 0;
  uint32_t max_len = 0;  // after truncation
  std::string detail;    // which plan / intervals / Hetu-B strategy and per-pipeline loads
};
// Hetu-B's assignment of one step (Fig. 16).
struct Assignment {
  int step = 0;
  std::string system;
  std::string strategy;
  std::vector<uint32_t> pipeline_of_sequence;  // parallel to `lengths`
  std::vector<uint32_t> lengths;
  std::vector<double> pipeline_time_s;
};
struct RunResult {
  std::vector<StepRow> rows;
  std::vector<Assignment> assignments;  // every heterogeneous system's steps
  std::vector<std::vector<uint32_t>> step_lengths;  // the sampled data, truncated to the context
  size_t simulations = 0;
  std::vector<std::string> oom_notes;
};

struct RunOptions {
  std::function<void(const std::string&)> progress;  // a line for people, at most every few seconds
};

// Runs every system over the config's steps. `file` resolves relative paths and names errors.
Result<RunResult> RunMixedLength(const proto::MixedLengthConfig& config, const std::string& file,
                                 const RunOptions& options);

// The per-step rows as CSV (header: step,system,time_s,compute_s,sync_s,switch_s,sequences,max_len,detail).
std::string RowsCsv(const RunResult& result);
// Every heterogeneous step's assignment: step,system,strategy,sequence,length,pipeline.
std::string AssignmentsCsv(const RunResult& result);

}  // namespace hetsim::sim::mixed
