// The analytic cost model of a Plan. Two parts:
//
// Estimate() plays the plan's lowering (models/lowering.h) — the per-rank operation lists the simulator
// plays — as a dependency graph, every operation priced as the simulator prices it when nothing shares its
// links, then once more with every transfer slowed by the link sharing the first play saw
// (planners/lowering_cost.h says exactly what and how). So the estimate cannot drift from what the
// simulator plays: same schedules, same transfers, same compute times, same DP stream, same folding. It
// takes microseconds to milliseconds per plan (docs/planners.md gives the figures).
//
// LowerBoundSeconds() is the same play at the most optimistic prices: never above the simulated iteration
// (the argument is in planners/lowering_cost.h), so a search can rule a plan out without simulating it.
//
// The building blocks below are the closed form in the shape the papers use (Metis eq. 1; HexiScale
// Appendix A, eqs. 3–10), microseconds per evaluation, for planners' inner loops and their papers' own cost
// models. For pipeline p with m micro-batches of b sequences and stages s = 1..S, each stage's intra-stage
// DP replica r (a TP group of t devices) processes b_r sequences of every micro-batch:
//   replica time  τ_{s,r} = F + B            (forward and backward compute of the stage's layers on the
//                                             replica's slowest GPU; B includes recomputation)
//                         + TP all-reduces   (per layer: 2 per block and 1 for embedding/head in each pass,
//                                             ring over the TP group's slowest link; full recomputation
//                                             repeats the forward ones)
//                         + PP hops          (activations of b_r sequences to the next stage, gradients to
//                                             the previous one: α + bytes/β over the slowest link from the
//                                             replica to that stage)
//   stage time    t_s = max_r τ_{s,r}
//   pipeline      T_p = (m − 1)·max_s t_s + Σ_s t_s              (1F1B and GPipe)
//                 T_p = m·max_s t_s + (Σ_s t_s − max_s t_s)/v    (interleaved 1F1B, v chunks per stage)
//   DP sync       per gradient-sync group (models::DeriveGradSyncGroups) of n devices holding S bytes,
//                 over the group's slowest link: ZeRO 0/1 ring all-reduce 2(n−1)/n·S/β + 2(n−1)α;
//                 ZeRO-2 a reduce-scatter per micro-batch plus one all-gather; ZeRO-3 two all-gathers and
//                 a reduce-scatter per micro-batch. A device's groups run one after another; the sync
//                 time is the largest per-device sum (HexiScale eq. 7). With comm.dp_overlap it hides
//                 behind the stage's last backward pass except for one layer's share.
//   optimizer     the largest per-device step over the parameters it updates (sharded by ZeRO ≥ 1)
//   iteration     max_p T_p + DP sync + optimizer.
// (Estimate used this closed form before it played the lowering; it remains for plans the lowering refuses.)
// Memory comes from models::EstimateMemory, the same function ValidatePlan uses.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/cost.h"
#include "models/plan.h"
#include "models/topology.h"
#include "planners/lowering_cost.h"

namespace hetsim::planners {

struct PlanningProblem;

struct CostModelOptions {
  // When set, every device computes (and runs its optimizer step) as this GPU: Megatron-LM's view
  // (the cluster's first GPU type) or Alpa/AMP's (the average GPU). Memory and links stay real.
  const models::GpuSpec* assume_gpu = nullptr;
  // With assume_gpu (AMP's and Alpa's averaged view, Li et al. 2022): a layer that the problem's profiles
  // time on every GPU type of the cluster (at its TP degree) costs the average over the devices of their
  // profiled times, per-micro-batch overheads included, instead of the analytic time on assume_gpu; the
  // optimizer step likewise averages the devices' profiled steps when every type has one. Layers or steps
  // some type lacks a profile for fall back to assume_gpu.
  bool average_profiles = false;
  // The devices the averaged view averages over (a baseline running on a subset of the machines averages
  // over the GPUs it runs on); null: every device of the cluster. Must outlive the model.
  const std::vector<uint32_t>* average_over = nullptr;
  // Estimate: plays after the contention-free one that re-price every transfer by the link sharing the
  // previous play saw (PlayOptions::contention_passes); 0 = the contention-free play alone.
  int contention_passes = 3;
};

// One intra-stage replica (a TP group) for one micro-batch.
struct ReplicaTime {
  double forward_s = 0;   // compute
  double backward_s = 0;  // compute, recomputation included
  double tp_s = 0;        // TP all-reduces, both passes
  double pp_s = 0;        // PP sends: activations forward, gradients backward
  double total_s() const { return forward_s + backward_s + tp_s + pp_s; }
};

// The links a replica uses: its TP group's, and the PP links to the neighbouring stages (with the
// receiving TP group's own link when the plan broadcasts from a leader, HexiScale eq. 5).
struct ReplicaLinks {
  models::Link tp;
  bool has_next = false, has_prev = false;
  models::Link next, prev;
  uint32_t next_tp = 1, prev_tp = 1;  // receivers of a leader broadcast (1 = none)
  models::Link next_intra, prev_intra;
};

struct StageEstimate {
  ReplicaTime slowest;  // the replica that sets the stage time
  double time_s = 0;    // t_s
};

struct PipelineEstimate {
  double time_s = 0;  // T_p
  uint32_t micro_batches = 0;
  std::vector<StageEstimate> stages;
  double bubble_fraction = 0;  // 1 − Σ_s m·t_s / (S·T_p)
};

// What Estimate found. From the played lowering: iteration_s is when the last device ends; a pipeline's
// time_s when its last forward or backward compute ends; a stage's time_s its slowest device's compute and
// TP time per micro-batch (slowest: that device's forward, backward and TP per micro-batch; pp_s 0);
// optimizer_s the longest optimizer step; dp_sync_s what the iteration takes beyond the slowest pipeline
// and that step (the exposed gradient sync, ZeRO gathers and the waits for them), so that
// iteration_s = pipeline_s + dp_sync_s + optimizer_s unless the optimizer step of the last device to end is
// shorter than the longest one.
struct PlanEstimate {
  double iteration_s = 0;
  double pipeline_s = 0;  // the slowest pipeline
  uint32_t slowest_pipeline = 0;
  double dp_sync_s = 0;
  double optimizer_s = 0;
  // True when the lowering was played; false for a plan the lowering refuses, estimated by the closed form.
  bool played = false;
  bool folded = false;  // played one device per stage, as the simulator folds the plan
  std::vector<PipelineEstimate> pipelines;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs (no recomputation) / (time × Σ peak of the devices the plan uses)
  // Memory (only when estimated with memory).
  bool has_memory = false;
  double peak_memory_fraction = 0;  // the largest used / capacity over devices
  uint32_t tightest_device = 0;
  double worst_shortfall_gib = 0;  // the largest (used − capacity) over devices; ≤ 0 when everything fits
  bool oom = false;
};

// The blocks of a model by class (models::TransformerModel::BlockClass: MoE or dense, sliding-window or
// full attention). Blocks of one class cost the same, so per-range costs price one block of each class —
// its first — times that class's blocks in the range. A dense model has one class, whose first block is
// layer 1, so such a cost is the "every block like block 1" of the papers' formulas; DeepSeek-V3 has two
// (3 dense blocks, then 58 MoE ones), gpt-oss-120b two (sliding-window and full attention alternate).
class BlockClasses {
 public:
  explicit BlockClasses(const models::TransformerModel& model);
  uint32_t size() const { return static_cast<uint32_t>(first_.size()); }
  // The first block (layer index) of class c, c < size(): the one a cost model prices for the class.
  uint32_t first(uint32_t c) const { return first_[c]; }
  // Blocks of class c among layers [begin, end) (the embedding and head count in none).
  uint32_t Count(uint32_t c, uint32_t begin, uint32_t end) const;

 private:
  uint32_t layers_ = 0;
  std::vector<uint32_t> first_;
  std::vector<uint32_t> prefix_;  // [c · (layers + 1) + l]: blocks of class c among layers [0, l)
};

class AnalyticCostModel {
 public:
  AnalyticCostModel(const PlanningProblem& problem, CostModelOptions options = {});
  // The player refers back to the model: not copyable.
  AnalyticCostModel(const AnalyticCostModel&) = delete;
  AnalyticCostModel& operator=(const AnalyticCostModel&) = delete;

  // The estimate of a structurally valid plan (models::ValidatePlanStructure): its lowering played (see the
  // header comment). Without memory it skips models::EstimateMemory (planners check memory on their own in
  // their inner loops).
  PlanEstimate Estimate(const proto::Plan& plan, bool with_memory = true) const;
  // A lower bound of the iteration time the simulator gives the plan at its default (balanced) fidelity,
  // folded or not, with this model's compute view (the real GPUs unless CostModelOptions say otherwise): the
  // lowering played with compute and fixed latencies exact and every transfer alone on its route at full
  // bandwidth (planners/lowering_cost.h, kLowerBound, states why it is sound). 0 for a plan the lowering
  // refuses (which the simulator refuses too).
  double LowerBoundSeconds(const proto::Plan& plan) const;
  // The lowering played with the given options (tests, tools).
  Result<PlayResult> Play(const proto::Plan& plan, const PlayOptions& options) const;
  // The closed form (the building blocks composed as in the header comment).
  PlanEstimate ClosedFormEstimate(const proto::Plan& plan, bool with_memory = true) const;

  // ---- building blocks (planners' inner loops) ----

  // The GPU `device` computes as (the real one, or options.assume_gpu).
  const models::GpuSpec& ComputeGpu(uint32_t device) const;
  // Time of one replica (TP group `group` of degree group.size()) running layers [begin, end) on b
  // sequences; `next` / `prev` are the devices of the neighbouring stages (empty for none), next_tp and
  // prev_tp their TP degrees (used with leader_broadcast).
  ReplicaTime Replica(std::span<const uint32_t> group, uint32_t begin, uint32_t end, double b,
                      std::span<const uint32_t> next, std::span<const uint32_t> prev, proto::Recompute recompute,
                      bool leader_broadcast = false, uint32_t next_tp = 1, uint32_t prev_tp = 1) const;
  // The same in two steps, for inner loops that reuse the links: the replica's links, and its time on
  // `gpu` (the group's slowest, SlowestGpu) at TP degree tp.
  ReplicaLinks Links(std::span<const uint32_t> group, std::span<const uint32_t> next, std::span<const uint32_t> prev,
                     bool leader_broadcast = false, uint32_t next_tp = 1, uint32_t prev_tp = 1) const;
  ReplicaTime Replica(const models::GpuSpec& gpu, uint32_t tp, uint32_t begin, uint32_t end, double b,
                      const ReplicaLinks& links, proto::Recompute recompute) const;
  const models::GpuSpec& SlowestGpu(std::span<const uint32_t> group) const;
  // Forward and backward compute of layers [begin, end) on `gpu` at TP degree tp for b sequences.
  // (Measured profiles time a layer's TP collectives when they say so; Replica then adds none for it.)
  std::pair<double, double> RangeCompute(const models::GpuSpec& gpu, uint32_t begin, uint32_t end, uint32_t tp,
                                         double b, proto::Recompute recompute) const;
  // Bytes of gradients one rank holding chunk 1/chunks of layers [begin, end) synchronises.
  double GradientChunkBytes(uint32_t begin, uint32_t end, uint32_t chunks, bool holds_embedding) const;
  // One gradient-sync group's time (see the header comment); `micro_batches` matters for ZeRO 2 and 3.
  double GradSyncSeconds(double bytes, std::span<const uint32_t> devices, uint32_t zero_stage, uint32_t micro_batches,
                         proto::CommOptions::Algorithm algorithm = proto::CommOptions::ALGORITHM_RING) const;
  // Optimizer step of a device updating `params` parameters.
  double OptimizerSeconds(uint32_t device, double params) const;
  // True when every layer kind at TP tp (1, 2, ... up to the largest node) is timed by the averaged
  // profiles of CostModelOptions::average_profiles, i.e. when the averaged view uses measured times.
  bool AveragesProfiles(uint32_t tp, double b) const;

  const models::Topology& topology() const { return topology_; }
  const models::ComputeCost& compute() const { return compute_; }
  const models::TransformerModel& model() const { return model_; }
  const proto::Training& training() const { return training_; }
  const models::Cluster& cluster() const { return cluster_; }
  const BlockClasses& block_classes() const { return classes_; }

 private:
  const models::Cluster& cluster_;
  const models::TransformerModel& model_;
  const proto::Training& training_;
  models::ComputeCost compute_;
  models::Topology topology_;
  CostModelOptions options_;
  BlockClasses classes_;
  // The GPU types and their device counts the averaged view averages over (the cluster's, or those of
  // CostModelOptions::average_over).
  std::vector<std::pair<const models::GpuSpec*, uint32_t>> types_;
  // This model's compute view for the player.
  class View : public ComputeSource {
   public:
    explicit View(const AnalyticCostModel& m) : m_(m) {}
    const models::GpuSpec& Gpu(uint32_t device) const override { return m_.ComputeGpu(device); }
    double LayerSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch, bool forward,
                        proto::Recompute recompute, models::SequenceSharding shard,
                        const models::ExpertSharding& experts) const override;
    double OptimizerSeconds(const models::GpuSpec& gpu, double params) const override;
    bool TpInCompute(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch) const override {
      return m_.TpIncluded(gpu, layer, tp, batch);
    }
    const models::ComputeCost& cost() const override { return m_.compute_; }

   private:
    const AnalyticCostModel& m_;
  };
  View view_;
  models::PlanContext context_;
  LoweringPlayer player_;
  // The estimate's fields from a play.
  PlanEstimate FromPlay(const proto::Plan& plan, const PlayResult& play) const;
  void AddThroughputAndMemory(const proto::Plan& plan, bool with_memory, PlanEstimate* e) const;

  bool Averaging(const models::GpuSpec& gpu) const {
    return options_.average_profiles && &gpu == options_.assume_gpu;
  }
  // Forward and backward seconds of one layer (the averaged view where it applies).
  std::pair<double, double> LayerCompute(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double b,
                                         proto::Recompute recompute) const;
  // Whether the time of `layer` on `gpu` already includes its TP collectives (every type's, averaging).
  bool TpIncluded(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double b) const;
};

// T_p for per-micro-batch stage times (see the header comment).
double PipelineSeconds(std::span<const double> stage_times, uint32_t micro_batches, proto::Plan::Schedule schedule,
                       uint32_t virtual_stages = 1);

// A GPU whose throughput, memory and bandwidths are the averages over the cluster's devices (Alpa/AMP's
// view of a heterogeneous cluster, Metis §3).
models::GpuSpec AverageGpu(const models::Cluster& cluster);
// The same over `devices` only (a baseline running on some of the machines).
models::GpuSpec AverageGpu(const models::Cluster& cluster, const std::vector<uint32_t>& devices);

// A few lines: iteration time and its parts, per-pipeline times and bubbles, throughput, MFU, memory.
std::string DescribeEstimate(const PlanEstimate& estimate);

}  // namespace hetsim::planners
