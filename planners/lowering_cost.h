// The lowering played as a dependency graph: the analytic cost model's iteration time, obtained from the
// very operation lists the simulator plays (models/lowering.h), so that the two cannot drift apart.
//
// The plan is lowered as the simulator's default (balanced) fidelity lowers it: one compute operation per
// pass with the pass's TP collectives fused after it. Every operation is priced as the simulator prices it
// when nothing shares its links (sim/program.cc, sim/engine.cc, docs/simulator.md):
//   - compute: models::ComputeCost's pass times (the per-micro-batch host overhead with the pass holding the
//     stage's first layer; backward with recomputation), the optimizer step with the iteration overhead;
//     comm.tp_overlap splits a pass and its TP collectives into kTpOverlapChunks as the simulator does;
//   - a point-to-point message: a rendezvous (the transfer starts when the sender has posted it and the
//     receiver asks for it), then latency + bytes / bandwidth of the platform route (models/platform_routes.h);
//     sends do not block the sender, receives block the receiver; a sender past 32 outstanding sends waits for
//     its oldest (the engine's Reap); CPU-staged transfers go GPU → host → host → GPU through one stager per
//     stream, as the engine's stager actors do;
//   - a collective: each member's call costs its fixed latency α (CollectiveLatencySeconds), then, at the
//     balanced fidelity, rings are one exchange of 2(n−1)/n·S (all-reduce; (n−1)/n·S for reduce-scatter and
//     all-gather) with the ring neighbours, striped over the rails of the members on both nodes, then the
//     remaining steps' latencies; NVLS one exchange of S / kNvlsEfficiency; trees, broadcasts and all-to-alls
//     as the engine plays them; every buffer divided by the GPU type's CollectiveEfficiency. A member's part
//     ends when its own flows have arrived — the ring neighbours', not the whole group's, as in the engine;
//   - the DP stream (comm.dp_overlap) runs beside the main stream, each gradient group after its signal.
// Plans the simulator folds (sim/program.h, FoldMap: every pipeline and every device of a stage doing the same
// work) are played the same way: one device per stage of pipeline 0, whose collectives end when every flow
// of the group has arrived.
//
// Three pricings:
//   - kSimulator: the uncontended prices above. When no directed link ever carries two flows at once in this
//     play (PlayResult::max_link_flows ≤ 1), it is the simulator's own timeline: max-min sharing gives every
//     flow its route's bandwidth, so every event happens when the play says. With contention passes (a
//     heuristic for the rest), the play is repeated with every flow slowed by the link sharing the play
//     before saw: for each link of its route, the average number of flows on the link during its bandwidth
//     phase (a folded flow counting once for itself and once for each folded copy sharing that link, as the
//     engine plays or scales them), times the route's bottleneck over the link's bandwidth; the largest over
//     the route. From the second pass on, each flow's slowdown is halfway between the last two plays' (each
//     play's sharing overshoots the other's).
//   - kLowerBound: nothing slower than the simulator can be: compute and fixed latencies exact, every flow
//     alone on its route at full bandwidth (no collective efficiency), no waits for outstanding sends.
//   - kUpperBound: every flow at the worst max-min share its route can get: on each link l, bandwidth /
//     K_l, K_l the number of distinct flow sources (message streams, collective members' flows) that ever
//     cross l; each source has at most one transfer in flight (a receiver takes one message at a time; a
//     member waits for its flows before its next collective), so at most K_l flows share l at any time and
//     max-min fairness gives each at least bandwidth / K_l there.
// Why kLowerBound is a lower bound of the simulated iteration (unfolded or folded): the simulated iteration
// is the same dependency graph — the same operations in the same order on every rank, the same rendezvous
// and collective edges, the same compute and fixed latencies — with only extra edges (the engine's waits for
// an outstanding send past 32) and with every transfer taking at least latency + bytes / bandwidth of its
// route (SimGrid's max-min sharing never gives a flow more than its bottleneck link, and the simulator's
// collective efficiency only adds bytes). Every event time of such a graph is a maximum of sums of
// durations along paths, so it can only grow when durations grow or edges are added. A folded simulation
// plays one device per stage whose collectives wait for every flow of the group (at least the device's own
// flows alone) and whose links may be scaled down: the same argument holds for the folded play. The bound is
// the smaller of the two plays where the plan may fold.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/cost.h"
#include "models/lowering.h"
#include "models/plan.h"
#include "models/platform_routes.h"

namespace hetsim::planners {

enum class Pricing : uint8_t { kSimulator, kLowerBound, kUpperBound };

struct PlayOptions {
  Pricing pricing = Pricing::kSimulator;
  // kSimulator: plays after the first that re-price every flow by the link sharing the previous play saw.
  // 0: the contention-free play.
  int contention_passes = 3;
  // Play symmetric plans folded where the simulator folds them (and only then).
  bool fold = true;
  // Keep every operation's start and end (PlayResult::trace; debugging).
  bool trace = false;
  // The recomputation backward passes include (set by Play from the plan: models::EffectiveRecompute).
  proto::Recompute recompute = proto::RECOMPUTE_UNSPECIFIED;
  // Pipelines of many micro-batches: play a few (about twice the stages), find each pipeline's period (the
  // growth of its end per micro-batch, the same over two more), and play the few with every rank of a
  // pipeline starting that many periods late, so the gradient sync and what follows meet as in the whole
  // iteration. Exact once every pipeline is periodic (two equal increments are taken as the sign; a
  // 1F1B pipeline repeats after its warm-up); the whole play where they are not. Not for bounds.
  bool extrapolate = false;
};

// What the player asks about compute: the simulator's view (SimulatorCompute) or a planner's (the
// analytic cost model with an assumed or averaged GPU).
class ComputeSource {
 public:
  virtual ~ComputeSource() = default;
  // The GPU `device` computes as.
  virtual const models::GpuSpec& Gpu(uint32_t device) const = 0;
  // One layer's pass (ComputeCost::ForwardSeconds, or BackwardSeconds with `recompute`).
  virtual double LayerSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch, bool forward,
                              proto::Recompute recompute, models::SequenceSharding shard,
                              const models::ExpertSharding& experts) const = 0;
  // The optimizer step over `params` parameters, with the iteration's fixed host overhead.
  virtual double OptimizerSeconds(const models::GpuSpec& gpu, double params) const = 0;
  // Whether a layer's measured time includes its TP collectives (the lowering then emits none).
  virtual bool TpInCompute(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch) const = 0;
  // Pass overheads, collective latencies and efficiencies.
  virtual const models::ComputeCost& cost() const = 0;
};

// Every device computes on its own GPU with `cost`, as the simulator does.
class SimulatorCompute : public ComputeSource {
 public:
  SimulatorCompute(const models::Cluster& cluster, const models::ComputeCost& cost) : cluster_(cluster), cost_(cost) {}
  const models::GpuSpec& Gpu(uint32_t device) const override { return *cluster_.device(device).gpu; }
  double LayerSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch, bool forward,
                      proto::Recompute recompute, models::SequenceSharding shard,
                      const models::ExpertSharding& experts) const override;
  double OptimizerSeconds(const models::GpuSpec& gpu, double params) const override;
  bool TpInCompute(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch) const override {
    return cost_.TpIncludedInProfile(gpu, layer, tp, batch);
  }
  const models::ComputeCost& cost() const override { return cost_; }

 private:
  const models::Cluster& cluster_;
  const models::ComputeCost& cost_;
};

// One device's iteration as played (folded devices carry their representative's).
struct DevicePlay {
  uint32_t device = 0;
  uint32_t pipeline = 0;
  uint32_t stage = 0;
  double forward_s = 0;       // forward compute
  double backward_s = 0;      // backward compute (recomputation included)
  double optimizer_s = 0;     // the optimizer step
  double tp_s = 0;            // from the call of each TP collective to its end (fixed latency included)
  double pipeline_end_s = 0;  // end of the last forward or backward compute
  double end_s = 0;           // end of the device's iteration
};

struct PlayResult {
  double iteration_s = 0;  // the latest device end
  std::vector<DevicePlay> devices;  // in plan order (models::Lowering::devices)
  bool folded = false;
  std::string fold_note;  // why the plan was not played folded ("" when it was, or folding was off)
  // The contention-free play (the first): the most flows that were ever on one directed link at the same
  // time (1: no two transfers ever shared a link, so the simulator plays exactly these times).
  uint32_t max_link_flows = 0;
  // The most distinct flow sources that cross one directed link (kUpperBound's K).
  uint32_t max_link_sources = 0;
  uint64_t operations = 0;  // operations played per play
  int plays = 0;            // plays run (1 + contention passes that changed something)
  bool extrapolated = false;  // PlayOptions::extrapolate took effect
  // PlayOptions::trace: per played device (index as `devices`), its operations in the order they ended:
  // (stream: 0 main, 1 DP; index in the stream; start; end; category).
  struct Span {
    uint8_t stream;
    uint32_t index;
    double start_s, end_s;
    models::Category category;
  };
  std::vector<std::vector<Span>> trace;
};

class LoweringPlayer {
 public:
  // `calibration`: the calibration the simulator's platform reads links from (ComputeOptions::calibration).
  // The references must outlive the player.
  LoweringPlayer(const models::PlanContext& ctx, const ComputeSource& compute, const std::string& calibration = "");

  // Plays a structurally valid plan (models::ValidatePlanStructure); errors where the lowering refuses it.
  Result<PlayResult> Play(const proto::Plan& plan, const PlayOptions& options = {}) const;

  const models::PlatformRoutes& routes() const { return routes_; }

 private:
  // One play; `delays` per pipeline (idle time before each of its ranks starts). With `again`: called with
  // the result; when it returns delays, the same lowering is played again with them and that play returned.
  using Again = std::function<std::optional<std::vector<double>>(const PlayResult&)>;
  Result<PlayResult> PlayOnce(const proto::Plan& plan, const PlayOptions& options, const std::vector<double>& delays,
                              const Again& again = {}) const;
  std::optional<PlayResult> Extrapolated(const proto::Plan& plan, const PlayOptions& options) const;
  const models::Cluster& cluster_;
  const models::TransformerModel& model_;
  const proto::Training& training_;
  const ComputeSource& compute_;
  models::PlatformRoutes routes_;
};

}  // namespace hetsim::planners
