// The exact search of `exhaustive` (internal to planners/exhaustive): the pieces of a structure under
// construction (Stage, Pipe), a pipeline shape's time tables (Profile), the simulator-bound mode of the proof,
// and the Search itself. The Search's methods live by concern:
//   enumerate.cc — the enumeration: structures (pipelines × stages × device groups, with symmetry reduction),
//                  then per structure the ZeRO stage, (b, m) per pipeline and the layer split, and the leaves;
//   profiles.cc  — a pipeline shape's stage-time tables, the smallest largest stage time, the min-max split;
//   bounds.cc    — the lower bounds that cut the enumeration (batch allocation, DP sync, optimizer step);
//   exhaustive.cc — the planner: the search's runs, the re-ranking by the played estimate, the proof list;
//   proof_search.cc — the proof search run over threads, one structure at a time, in the sequential order.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/communicator.h"
#include "models/platform_routes.h"
#include "planners/proto/exhaustive.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::exhaustive {

constexpr double kInf = std::numeric_limits<double>::infinity();
// A bound prunes only when it exceeds the incumbent by more than rounding could explain.
constexpr double kPruneSlack = 1e-9;
// Node sets (plans leaving whole nodes idle) beyond which the nested family is taken (Search::node_sets_).
constexpr double kMaxNodeSets = 1024;
// The closed form's default time limit in the proof, where it is only the warm start: at 12 GPUs 20 s finds
// an incumbent within 0.5% of what 300 s finds (docs/planners.md, "exhaustive at 10-12 GPUs").
constexpr double kWarmStartTimeLimitS = 20;
// Pipeline shapes whose profiles a search keeps at most: beyond, the cache starts afresh (Search::TrimCaches).
// Millions of shapes at 12 GPUs held 18 GB; a profile costs microseconds to recompute.
constexpr size_t kMaxCachedProfiles = 200000;

// One stage of a pipeline under construction: TP groups of degree tp taken from nodes.
struct Stage {
  uint32_t tp = 1;
  std::vector<std::pair<uint32_t, uint32_t>> groups;  // (node, TP groups on it), by node
  std::vector<uint32_t> devices;                      // concrete devices, TP groups consecutive
  std::vector<uint32_t> replica_entry;                // replica -> index into groups
  uint32_t replicas = 0;
};

struct Pipe {
  std::vector<Stage> stages;
  std::vector<int> signature;  // invariant under relabelling identical nodes
  std::string key;             // node-level description (costs depend on nodes only)
  uint32_t devices = 0;
  uint32_t max_replicas = 0;
};

// Time tables of one pipeline shape (by Pipe::key). Replica times are affine in the block count,
// τ(n, x) = F(x) + n·C(x), per stage, per node entry, per sequences x (rows shared between shapes).
// Without memory caps, t0(b, s, n) is the min-max split's stage time, non-decreasing in n.
struct Profile {
  uint32_t S = 0, X = 0;                         // stages, bmax + 1
  std::vector<uint32_t> entry_base;              // per stage: its first entry's index
  // Per entry: F at [x], C at [X + x]; in the simulator-bound mode the forward pass's share of them at
  // [2X + x] and [3X + x] (zero otherwise).
  std::vector<const std::vector<double>*> rows;
  // Blocks each stage can hold at most whatever the rest of the plan (one sequence, one micro-batch in
  // flight, the most ZeRO sharding possible); the shape is infeasible when they cannot hold the model.
  std::vector<uint32_t> max_blocks;
  bool feasible = true;
  std::vector<double> tstar;   // per b: a lower bound of the smallest possible largest stage time
  std::vector<double> sum_lo;  // per b × (S + 1): Σ_{s ≥ k} t0 at the fewest blocks
  double rho = kInf;           // min_b tstar/b: a lower bound on the pipeline's seconds per sequence
  double beta = kInf;          // min_b max(0, sum_lo − tstar): fill-and-drain lower bound
  // rest[b][k·N + B]: the smallest possible largest stage time of stages k.. holding B blocks (lazily).
  std::vector<std::vector<double>> rest;

  double F(uint32_t s, uint32_t e, uint32_t x) const { return (*rows[entry_base[s] + e])[x]; }
  double C(uint32_t s, uint32_t e, uint32_t x) const { return (*rows[entry_base[s] + e])[X + x]; }
  double Ff(uint32_t s, uint32_t e, uint32_t x) const { return (*rows[entry_base[s] + e])[2 * X + x]; }
  double Cf(uint32_t s, uint32_t e, uint32_t x) const { return (*rows[entry_base[s] + e])[3 * X + x]; }
  // A replica's forward and backward passes of x sequences over n blocks, and the forward pass alone.
  double Passes(uint32_t s, uint32_t e, uint32_t x, uint32_t n) const { return F(s, e, x) + n * C(s, e, x); }
  double Forward(uint32_t s, uint32_t e, uint32_t x, uint32_t n) const { return Ff(s, e, x) + n * Cf(s, e, x); }
  double SumLo(uint32_t b, uint32_t k) const { return sum_lo[size_t{b} * (S + 1) + k]; }
};

// The simulator-bound mode of the search (the proof of the simulator's optimum): every bound is a lower
// bound of the simulated iteration, subtrees are cut against a fixed threshold, and every leaf that
// survives is played at the lower-bound pricing (AnalyticCostModel::LowerBoundSeconds) and kept when that
// is below the threshold.
struct SimBoundMode {
  double threshold_s = 0;   // plans that cannot simulate below this are cut
  uint64_t max_leaves = 0;  // LowerBoundSeconds evaluations before the search stops (0: no limit)
};

// A plan kept by the simulator-bound mode, with its lower bound of the simulated iteration.
struct BoundedPlan {
  double lower_bound_s = 0;
  proto::Plan plan;
};

// What the simulator-bound mode found in one structure (Search::EvaluateOne), with what the proof search
// needs to take it in the sequential order under the counted budgets (proof_search.cc).
struct StructureOutcome {
  uint64_t nodes = 0;                 // layer-split nodes explored
  bool complete = false;              // ran to its end (else stopped: a budget, the time limit, a cancel)
  std::string stop_reason;
  std::vector<uint64_t> play_nodes;   // per lower-bound play: the node count when it was played
  std::vector<uint64_t> kept_plays;   // per kept plan: the play (1-based) that kept it
  std::vector<BoundedPlan> kept;
  uint64_t floor_above_bound = 0, network_pruned = 0, schedule_pruned = 0, out_of_memory = 0;
};

// The proof search (proof_search.cc): every structure of the space evaluated in the simulator-bound mode on
// `threads` threads and taken in the enumeration's order, with the budgets (max_proof_nodes,
// max_bound_plays) counted over that order, so the result is the sequential search's whatever the threads.
struct ProofOutcome {
  std::vector<BoundedPlan> kept;
  uint64_t plays = 0, nodes = 0, structures = 0;
  uint64_t floor_above_bound = 0, network_pruned = 0, schedule_pruned = 0, out_of_memory = 0;
  bool stopped = false;
  std::string stop_reason;
  uint32_t threads = 1;
};
ProofOutcome RunProofSearch(const PlanningProblem& problem, const proto::ExhaustiveOptions& options,
                            const SimBoundMode& mode);

class Search {
 public:
  // Keeps the exact top `keep_alternatives` + 1 plans under the closed form.
  Search(const PlanningProblem& problem, const proto::ExhaustiveOptions& options, SearchStats& stats,
         uint32_t keep_alternatives, const SimBoundMode* sim = nullptr);

  void Run();
  // The closed form's warm start (exhaustive's proof with other planners' candidates): subtrees that cannot
  // beat `bar_s` under the closed form are cut from the first structure on, so the search keeps only plans
  // better than the best candidate (none, when no plan of the space is).
  void SetWarmBar(double bar_s) {
    warm_bar_ = bar_s;
    incumbent_ = std::min(incumbent_, bar_s);
  }

  bool found() const { return !kept_.empty(); }
  bool stopped() const { return stopped_; }
  std::vector<BoundedPlan>& bounded() { return bounded_; }
  uint64_t bounded_leaves() const { return bounded_leaves_; }
  uint64_t floor_above_bound() const { return floor_above_bound_; }
  void MoveInto(PlannerResult* result) { kept_.MoveInto(result); }
  InfeasibleTracker& misses() { return misses_; }

  // The parallel proof search (proof_search.cc). With a sink, Run only enumerates: each structure goes to
  // the sink instead of being evaluated (the sink returns false to stop the enumeration). EvaluateOne
  // evaluates one such structure from a clean state (the caches kept). A set cancel flag stops the search.
  using StructureSink = std::function<bool(const std::vector<Pipe>&)>;
  void SetStructureSink(StructureSink sink) { sink_ = std::move(sink); }
  void SetCancel(const std::atomic<bool>* cancel) { cancel_ = cancel; }
  StructureOutcome EvaluateOne(const std::vector<Pipe>& pipes);
  const std::string& stop_reason() const { return stop_reason_; }
  // A bound of every plan's iteration from compute alone: the global batch over every device's best rate
  // (TP 1, the largest micro-batch; valid for the analytic compute model, 0 with measured profiles).
  double RateFloor() const;

 private:
  // ---- what the bounds accumulate ----

  // Lower bounds of the time that does not depend on the pipelines' schedule, accumulated over the
  // devices placed so far: the iteration adds the largest DP sync and the largest optimizer step.
  struct Acc {
    double pipe_max = 0;  // the slowest pipeline so far
    double dp = 0;        // a lower bound of the largest per-device DP sync time
    double opt = 0;       // a lower bound of the largest optimizer step
    // Simulator-bound mode: the network floors (CrossNodeSyncFloor and its stage and leaf forms), bounds of
    // the simulated iteration that the lower-bound play need not reach (it prices striped flows as if alone
    // on their routes), so Leaf does not check them against it.
    double cross = 0;
    double played() const { return pipe_max + dp + opt; }
    double total() const { return std::max(played(), cross); }
  };

  // Per stage of the structure and node entry: an upper bound on the bandwidth and a lower bound on the
  // latency of the DP groups its devices join (own stage's replicas and, for P > 1, one holder in each
  // other pipeline).
  struct DpLink {
    double bandwidth = kInf;
    double latency = 0;
    uint32_t holders = 1;  // a lower bound on the group size
    // The same bounds counting only the pipelines after this one (those not placed yet in Layers).
    double later_bandwidth = kInf;
    double later_latency = 0;
    // Simulator-bound mode: the most bandwidth one ring step into or out of this entry's devices can have
    // (route bottlenecks, rail striping counted), 0 without co-holders.
    double sim_bandwidth = 0;
  };

  // Per (pipeline, stage, blocks) quantities of the current structure and ZeRO stage, computed once.
  struct StageN {
    bool done = false;
    double dp_base = 0;                  // the largest per-device ring time (all-reduce; reduce-scatter for ZeRO 2/3)
    double opt = 0;                      // the largest optimizer step
    double stat = 0, act = 0, peak = 0;  // memory (GiB): static, per sequence in flight, re-materialised
    double sim_floor = 0;                // simulator-bound mode: the least gradient sync + optimizer step
    double sim_gather = 0;               // simulator-bound mode: the least ZeRO-3 gather before one pass
  };

  struct Choice {
    uint32_t b = 0, m = 0;
    std::vector<uint32_t> blocks;               // per stage
    std::vector<std::vector<uint32_t>> splits;  // per stage
  };

  // ---- limits and the enumeration (enumerate.cc) ----

  bool Stop();

  void BuildPipelines();

  void BuildStages();

  uint32_t class_count() const {
    return class_of_.empty() ? 0 : *std::max_element(class_of_.begin(), class_of_.end()) + 1;
  }

  // Chooses how many TP groups node n (and the nodes after it) give to the stage being built.
  void ChooseGroups(uint32_t tp, uint32_t n, Stage& st, std::vector<uint32_t>& new_cap, std::vector<char>& skipped);

  void AddStage(Stage st);

  void EvaluateStructure();

  bool Pruned(double lower_bound) const { return bounds_ && lower_bound >= incumbent_ * (1 + kPruneSlack); }

  // Chooses (b, m, layer split) for pipeline p and the ones after it.
  void Inner(size_t p, uint32_t g_left, Acc acc, const std::vector<Profile*>& profiles);

  // Chooses the blocks of stage s of pipeline p (the stages before it hold the rest). `tied`: every
  // earlier choice equals the identical previous pipeline's, whose blocks then bound this one's. `tsum`:
  // the earlier stages' times per micro-batch summed; in the simulator-bound mode the pipeline fill: under
  // 1F1B stage s cannot start before micro-batch 0's forward has crossed the stages before it, nor end
  // before its last backward has crossed them back, so its m passes take at least Σ_{j<s} (F_j + B_j) more,
  // with the hops between the stages; a stage split over replicas (which replica feeds which is not fixed
  // here) adds its least replica forward and least replica backward.
  void Layers(size_t p, uint32_t s, uint32_t left, double tmax, double tsum, uint32_t g_after, Acc acc, bool tied,
              const std::vector<Profile*>& profiles);
  // Layers' last step: pipeline p's blocks all placed (`tmax`, `tsum` as in Layers); its bounds, then the
  // next pipeline.
  void PipelineSplit(size_t p, double tmax, double tsum, uint32_t g_after, const Acc& acc,
                     const std::vector<Profile*>& profiles);
  // The sequences each replica of stage s of pipeline p can hold with n blocks (at most b), into *caps;
  // false when one holds none (the first such miss is offered to misses_ while nothing is kept).
  bool ReplicaCaps(size_t p, uint32_t s, uint32_t n, uint32_t b, double in_flight, std::vector<uint32_t>* caps);

  std::string Describe(size_t p, uint32_t s, uint32_t n) const;

  void Leaf(const Acc& acc);

  // ---- pipeline profiles (profiles.cc) ----

  // The canonical layer range of stage s of S holding n blocks.
  std::pair<uint32_t, uint32_t> Range(uint32_t s, uint32_t S, uint32_t n) const {
    if (S == 1) return {0, L_};
    if (s == 0) return {0, 1 + n};
    if (s + 1 == S) return {L_ - 1 - n, L_};
    return {1, 1 + n};
  }
  uint32_t LowBlocks(uint32_t s, uint32_t S) const { return S == 1 ? blocks_ : (s == 0 || s + 1 == S) ? 0 : 1; }

  Profile& ProfileOf(const Pipe& pipe);
  // Empties the profile and row caches once they hold kMaxCachedProfiles shapes; called only where no
  // Profile is referenced (the start of EvaluateStructure and PartialBound).
  void TrimCaches() {
    if (profiles_.size() < kMaxCachedProfiles) return;
    profiles_costed_ += profiles_.size();
    profiles_.clear();
    rows_.clear();
  }
  uint64_t profiles_costed_ = 0;  // shapes costed before the caches were last emptied

  // Stage s's time with n blocks and b sequences split without memory caps.
  double T0(const Profile& pr, const Pipe& pipe, uint32_t b, uint32_t s, uint32_t n) const {
    const Stage& st = pipe.stages[s];
    scratch_caps_.assign(st.replicas, b);
    return SplitTime(pr, st, s, n, b, scratch_caps_, nullptr);
  }
  // T0 for every micro-batch size at once into t[(b·S + s)·(blocks + 1) + n] (kInf beyond the stage's
  // memory cap): SplitTime's greedy gives each next sequence to the replica whose time after taking it is
  // smallest, so the split of b + 1 sequences is the split of b plus one step.
  void StageTimes(const Profile& pr, const Pipe& pipe, std::vector<double>& t) const;

  // The smallest largest stage time over layer splits respecting the memory caps (without caps on the
  // micro-batch split), from the stage times t[s·(L+1) + n]: binary search over the times that occur.
  double SmallestLargest(const Profile& pr, const double* t) const;

  // rest(b, k, B) (see Profile), computed for b on first use: entries [0, (S+1)·N) hold the smallest
  // largest stage time, entries [(S+1)·N, 2(S+1)·N) the smallest sum of stage times, of stages k.. holding
  // B blocks; and entries [2(S+1)·N, …) this b's stage times t0(s, n).
  const std::vector<double>& Rest(Profile& pr, const Pipe& pipe, uint32_t b) const;

  // The min-max split of b sequences over the stage's replicas (caps[r] at most each) for n blocks; its
  // time, and the split in *split when given. kInf when the caps make it impossible.
  double SplitTime(const Profile& pr, const Stage& st, uint32_t s, uint32_t n, uint32_t b,
                   const std::vector<uint32_t>& caps, std::vector<uint32_t>* split) const;
  // SplitTime for pipeline p's stage s at the current micro-batch size (ResetSplitCache when it changes),
  // answered from the uncapped split where that fits the caps.
  double CachedSplitTime(size_t p, const Profile& pr, const Stage& st, uint32_t s, uint32_t n, uint32_t b,
                         const std::vector<uint32_t>& caps, std::vector<uint32_t>& split);
  void ResetSplitCache(size_t p, uint32_t S);
  struct SplitMemo {
    bool done = false;
    double t = 0;
    std::vector<uint32_t> split;
  };
  std::vector<std::vector<SplitMemo>> split_cache_;  // [pipeline][stage·(blocks + 1) + blocks]

  // ---- bounds (bounds.cc) ----

  // The smallest T with Σ_p G_p = G and every pipeline p within G_p·ρ_p + β_p ≤ T (a relaxation of the
  // batch allocation; see the derivation in docs/planners.md). `extra_rate` adds an optimistic pipeline
  // of that many sequences per second (devices not yet placed).
  double AllocationBound(const std::vector<Profile*>& profiles, double extra_rate) const;

  // A lower bound of every structure extending the current one. The newest closed pipeline enters only
  // by its devices' rates when `newest_profiled` is false (its profile is not computed yet).
  double PartialBound(bool newest_profiled = true);

  // AllocationBound for pipelines first.. sharing g sequences.
  double AllocationBoundFor(const std::vector<Profile*>& profiles, size_t first, uint32_t g) const;

  // The most DP replicas any layer of pipeline p can have (ZeRO's sharding factor), with `free` devices
  // still to be placed.
  void SetShardBound(uint32_t free);

  // Lower bounds of the DP sync and optimizer time whatever the layer split: each stage with its fewest
  // blocks (both grow with the blocks) and one micro-batch.
  Acc StructureFloor() const;

  // `extra_holders`: pipelines not built yet that will hold every layer too.
  void PrepareDpLinks(uint32_t extra_holders);

  // Parameters one rank of TP degree tp holds for layers [begin, end) (as models::EstimateMemory counts).
  double RankParams(uint32_t begin, uint32_t end, uint32_t tp) const;

  void ResetStageCache();

  const StageN& StageAt(size_t p, uint32_t s, uint32_t n) {
    StageN& c = stage_cache_[stage_base_[p] + size_t{s} * (blocks_ + 1) + n];
    if (!c.done) c = ComputeStageN(p, s, n);
    return c;
  }

  StageN ComputeStageN(size_t p, uint32_t s, uint32_t n) const;

  // Simulator-bound mode: a lower bound of what every device of stage s of pipeline p (n blocks) does after
  // its last backward pass (gradient sync and optimizer step).
  double SimStageFloor(size_t p, uint32_t s, uint32_t n) { return StageAt(p, s, n).sim_floor; }

  // The most bandwidth a ring step between a device of node a and one of node b can get (a == b: inside the
  // node): the fastest route either way; across nodes times the node's GPUs (the engine stripes a step over
  // the rails of the members on both nodes) and no slower than the host copies where transfers may be
  // CPU-staged (GPUs of different vendors).
  double RingCap(uint32_t a, uint32_t b);

  // Simulator-bound mode: a bound of the simulated iteration from the gradient syncs between nodes. With
  // ZeRO ≥ 1 the lowering reduce-scatters every gradient group over a ring of its holders, steps, and
  // all-gathers it over the same ring. A ring whose holders sit on two or more nodes has a member whose ring
  // predecessor is on another node: its two exchanges bring (n − 1)/n of the group's bytes each across
  // nodes, striped over rails but all into its node through that node's NICs, so they take at least
  // 2 (n − 1)/n · bytes / (the node's NIC bandwidth, summed). Groups are the segments of the model cut at
  // every pipeline's stage boundaries; which is largest depends on the split, so the bound takes the
  // average. It applies where a stage's replicas span nodes (the stage's own fewest layers, cut by the other
  // pipelines' boundaries) or where two pipelines share no node (every layer's group spans nodes); 0 under
  // ZeRO 0 (the all-reduce may be a tree). Bytes are one TP rank's at the lcm of the structure's TP degrees
  // (where degrees differ the sync is chunked that finely). Also sets cross_tp_ and cross_cap_.
  double CrossNodeSyncFloor();
  // Every byte a node's NICs must carry each way — the pipeline messages between stages on different nodes
  // and, under ZeRO ≥ 1, the gradient rings that span nodes (a ring enters and leaves each of its nodes) —
  // over the node's NIC bandwidth, the largest over the nodes, accumulated stage by stage as pipeline p's
  // stages are chosen (StartNicLoads once the earlier pipelines are: their messages; StageNicFloor for
  // stage s holding layers [begin, end) with its split known; nic_in_/nic_out_[p][s] hold the loads before
  // stage s of pipeline p): the gradient rings of the layers pipeline p holds so far, with the holders of
  // pipelines 0..p (and at least one more per later pipeline). At the last pipeline's last stage it is the
  // plan's floor.
  void StartNicLoads(size_t p);
  double StageNicFloor(size_t p, uint32_t s, uint32_t begin, uint32_t end);
  // Pipeline p's messages between stages j and j + 1, and the gradient rings of the segments of layers
  // [begin, end) whose holding stages in pipelines [0, known) are chosen, added to the nodes' loads.
  void AddPipelineMessages(size_t p, uint32_t j, std::vector<double>& in, std::vector<double>& out) const;
  void AddGradientLoads(size_t known, uint32_t begin, uint32_t end, std::vector<double>& in,
                        std::vector<double>& out);
  double NicFloor(const std::vector<double>& in, const std::vector<double>& out) const;
  std::vector<std::vector<std::vector<double>>> nic_in_, nic_out_;  // [pipeline][stage][node]
  std::vector<uint32_t> scratch_nodes_;
  double NicBytesPerSecond(uint32_t node) const;
  // 2 (n − 1)/n of layers [begin, end)'s gradient bytes over `groups`, at `cap`; the bytes of one TP rank of
  // degree `tp` (0: cross_tp_, the structure's; the sync is chunked at the lcm of the holders' degrees).
  double CrossSeconds(uint32_t begin, uint32_t end, uint32_t groups, uint32_t holders, double cap,
                      uint32_t tp = 0) const;
  // scratch_cuts_: begin, end and the stage boundaries of pipelines [0, pipelines)'s chosen splits strictly
  // between them, sorted: the segments of [begin, end) whose holders do not change.
  void SegmentCuts(size_t pipelines, uint32_t begin, uint32_t end);
  // The stage of pipeline q's chosen split that holds `layer`.
  uint32_t StageHolding(size_t q, uint32_t layer) const;
  uint32_t cross_tp_ = 0;      // the gradient chunking of the structure: lcm of its TP degrees (0: no bound)
  double cross_cap_ = 0;       // the most NIC bandwidth of a node the structure uses

  // Simulator-bound mode, for pipeline p at micro-batch size b: hop_[p][j], the least time micro-batch
  // messages take from stage j to j + 1 and back (between stages of one replica the micro-batch's message
  // each way; else the least one-sequence message over the replica pairs), hop_suffix_[p][s] =
  // Σ_{j ≥ s} hop_[p][j], single_suffix_[p][s]: stages s.. all have one replica (RoundTrips' round trip is
  // then a chain of fixed devices), and LeastLater's tables.
  void PreparePipeline(size_t p, uint32_t b, const Profile& pr);
  // The least compute of one micro-batch in stages k.. of pipeline p holding `blocks` blocks (PreparePipeline).
  double LeastLater(size_t p, uint32_t k, uint32_t blocks) const {
    if (blocks < least_lo_[p][k]) return kInf;
    return least_fixed_[p][k] + (least_c_[p][k] < kInf ? (blocks - least_lo_[p][k]) * least_c_[p][k] : 0);
  }
  std::vector<std::vector<double>> least_fixed_, least_c_;
  std::vector<std::vector<uint32_t>> least_lo_;
  // The least time one pipeline message of `bytes` (before the TP scatter) takes from stage `from` to `to`
  // (from their replicas `from_replica` and `to_replica`).
  double MessageFloor(const Stage& from, const Stage& to, double bytes, uint32_t from_replica = 0,
                      uint32_t to_replica = 0);
  // Simulator-bound mode: each replica r of stage s (n blocks, shares `split`) does its forward of
  // micro-batch 0 (f), waits for that micro-batch's round trip through the later stages (at least one
  // replica of each: `later`, and the hops between stages of one replica), does its backward (τ − f), then
  // its m − 1 other backward passes and the max(0, m − (S − s)) forward passes 1F1B leaves after them:
  // f + trip + m (τ − f) + max(0, m − (S − s)) f, the largest over the replicas, before what follows its
  // passes. `least`, when given, takes the least τ of the stage's replicas.
  double ReplicaRoundTrip(size_t p, const Profile& pr, uint32_t s, uint32_t n, const std::vector<uint32_t>& split,
                          double later, double* least = nullptr) const;
  // ReplicaRoundTrip of every stage with every split known (a leaf of pipeline p), the later stages at
  // their replicas' least, plus what follows each stage's passes (stage_floor_).
  double FirstRoundTrip(size_t p, const Profile& pr) const;
  // Simulator-bound mode: 1F1B lets stage s of S run at most S − s micro-batches ahead of its backward
  // passes (Megatron-LM's warm-up), so the forward of micro-batch i + S − s waits for micro-batch i's round
  // trip through stages s.. and back: with `stage_times` a lower bound of their compute per micro-batch,
  // the stage's passes take at least ⌈m / (S − s)⌉ round trips (with the hops). 0 when a stage from s on
  // has replicas.
  double RoundTrips(size_t p, uint32_t s, uint32_t m, double stage_times) const {
    if (!single_suffix_[p][s]) return 0;
    const uint32_t ahead = static_cast<uint32_t>(pipes_[p].stages.size()) - s;
    return ((m + ahead - 1) / ahead) * (stage_times + hop_suffix_[p][s]);
  }

  // Simulator-bound mode, with every split of pipeline p known: its 1F1B schedule played at the stage level
  // — every replica's passes in the lowering's order at their least prices (ZeRO-3's least gathers before
  // each), every message between stages at its least time alone on its route, sends asynchronous — and the
  // latest end of a replica's passes plus what follows them (SimStageFloor). A far cheaper bound than the
  // lower-bound play, which it cannot exceed (checked as floor_above_bound_).
  double ScheduleFloor(size_t p, const Profile& pr);
  struct ScheduleEdge {
    uint32_t from, to;   // replica slots (ScheduleScratch::base) of stages j and j + 1
    double there, back;  // the least time of their forward message and of the backward one
  };
  struct ScheduleScratch {
    std::vector<uint32_t> base, stage, cursor;
    std::vector<uint32_t> edge_begin;  // per boundary j (S − 1: the end): its first edge
    std::vector<double> fwd, bwd, after, fend, bend, clock;
    std::vector<ScheduleEdge> edges;
  };
  ScheduleScratch schedule_;

  // Lower bounds of the DP sync and optimizer time of stage s of pipeline p holding n blocks.
  std::pair<double, double> StageBounds(size_t p, uint32_t s, uint32_t n, uint32_t m) {
    const StageN& c = StageAt(p, s, n);
    const double factor = zero_ == 2 ? m + 1.0 : zero_ == 3 ? 3.0 * m : 1.0;
    return {factor * c.dp_base, c.opt};
  }

  // A lower bound of the DP sync time of stage s of pipeline p holding layers [begin, end), knowing the
  // layer splits of pipelines 0..p−1 (choice_): layer segments with their exact known holders, plus one
  // holder per pipeline still to place (over its best possible link).
  double KnownDpBound(size_t p, uint32_t s, uint32_t begin, uint32_t end, uint32_t m);

  const PlanningProblem& problem_;
  AnalyticCostModel cost_;
  MemoryModel memory_;
  SearchStats& stats_;
  const models::Cluster& cluster_;
  const models::TransformerModel& model_;
  const uint32_t L_, blocks_, G_;
  const proto::Recompute rc_;
  uint32_t bmax_ = 32;
  std::vector<uint32_t> zeros_;
  bool allow_unused_ = false;
  // The node sets the enumeration runs over, one after another (every node first): with whole nodes allowed
  // idle, per symmetry class of identical nodes the first j of its k nodes (j = 0..k), every combination but
  // the empty one (or the nested family beyond kMaxNodeSets), by decreasing device count; else every node.
  // 1 marks a node that takes part.
  std::vector<std::vector<char>> node_sets_;
  // Marks the nodes outside `active` as fully used (nothing left to place there) for the enumeration.
  void RestrictTo(const std::vector<char>& active);
  bool bounds_ = true;
  double time_limit_s_ = 300;
  uint64_t max_evaluations_ = 0;
  std::vector<uint32_t> tps_;
  std::vector<uint32_t> class_of_;
  bool rate_bounds_ = true;
  std::vector<double> device_rate_;

  // State of the enumeration.
  std::vector<uint32_t> used_;
  std::vector<char> opened_;
  uint32_t free_total_ = 0;
  std::vector<Pipe> pipes_;
  Pipe current_;
  std::unordered_map<std::string, Profile> profiles_;
  std::unordered_map<std::string, std::vector<double>> rows_;  // F and C rows of one stage entry
  mutable std::vector<uint32_t> scratch_caps_, scratch_at_;
  std::vector<double> scratch_times_, scratch_table_;
  std::vector<std::vector<uint32_t>> scratch_caps_by_stage_, scratch_split_by_stage_;
  std::vector<uint32_t> scratch_cuts_, scratch_devices_;
  uint64_t out_of_memory_ = 0;  // layer choices that did not fit (counted, reported once)
  uint64_t schedule_pruned_ = 0;  // pipeline splits cut by ScheduleFloor
  uint64_t network_pruned_ = 0;  // plans cut at their last stage by StageNicFloor (counted, reported once)
  uint64_t layer_nodes_ = 0;    // layer-split nodes explored
  uint64_t max_nodes_ = 0;      // simulator-bound mode: stop after this many (0: no limit)
  uint32_t zero_ = 1;
  std::vector<uint32_t> shard_bound_;
  std::vector<Choice> choice_;
  std::vector<std::vector<std::vector<DpLink>>> dp_links_;  // [pipeline][stage][entry]
  std::vector<StageN> stage_cache_;                         // [stage_base_[pipeline] + stage·(blocks + 1) + blocks]
  std::vector<size_t> stage_base_;
  mutable std::vector<uint32_t> scratch_split_;

  double incumbent_ = kInf;
  double warm_bar_ = kInf;  // SetWarmBar
  RankedPlans kept_;
  const SimBoundMode* sim_ = nullptr;
  std::optional<models::PlatformRoutes> routes_;  // simulator-bound mode
  std::vector<double> ring_cap_;                  // RingCap by node pair (−1: not computed)
  std::optional<models::Communicator> comm_;      // simulator-bound mode: which node pairs are CPU-staged
  double boundary_bytes_ = 0;                     // one sequence's pipeline-boundary tensor
  std::vector<std::vector<double>> hop_, hop_suffix_;  // simulator-bound mode (PreparePipeline)
  std::vector<std::vector<char>> single_suffix_;
  // Simulator-bound mode, per pipeline and stage of the split being built: its time per micro-batch and what
  // follows its passes at least (Layers' stage_floor).
  std::vector<std::vector<double>> stage_t_, stage_floor_;
  std::vector<BoundedPlan> bounded_;              // simulator-bound mode: the leaves kept
  std::vector<uint64_t> play_nodes_, kept_plays_;  // simulator-bound mode: StructureOutcome's
  StructureSink sink_;
  const std::atomic<bool>* cancel_ = nullptr;
  uint64_t bounded_leaves_ = 0;                   // leaves played at the lower-bound pricing
  uint64_t floor_above_bound_ = 0;                // leaves whose cheap floor exceeded the played bound
  InfeasibleTracker misses_;
  uint64_t structures_ = 0;
  uint64_t ticks_ = 0;
  bool stopped_ = false;
  std::string stop_reason_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hetsim::planners::exhaustive
