// The Metis search's shared pieces (internal to planners/metis): the anytime deadline, a placement made
// ready for evaluation (Layout), the DFS state of Algorithm 1, what every evaluation shares (Context,
// Scratch), and the Evaluator of one (assignment, B) pair. The Evaluator's methods live by concern:
//   algorithm1.cc — Metis §4.2, Algorithm 1 (DataLB, LayerLB, the DP-first DFS) and the eq. 1 cost;
//   bound.cc      — the exact lower bound that cuts the DFS (not in the paper);
//   search.cc     — the driver: work units, threads, the time limit, the best plan and its notes.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "planners/metis/internal.h"
#include "planners/symmetric.h"

namespace hetsim::planners::metis {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- the anytime limit (time_limit_s; not in the paper) ---------------------------------------------------

// The search's deadline, shared by its workers. A check costs an increment: each worker reads the clock on
// its first check and then once every kStride checks (one check per (assignment, B) evaluation and per DFS
// node), so the search stops within a few evaluations of the limit; once one worker has seen it pass,
// every check returns true.
class Deadline {
 public:
  // `clock` (optional): seconds since any fixed point (Knobs::clock_s); the steady clock by default.
  Deadline(double limit_s, std::function<double()> clock) : limit_s_(limit_s), clock_(std::move(clock)) {
    if (!clock_) {
      clock_ = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      };
    }
    start_s_ = clock_();
  }

  double limit_s() const { return limit_s_; }
  // `ticks`: the calling worker's own counter.
  bool Passed(uint32_t& ticks) {
    if (limit_s_ <= 0) return false;
    if (passed_.load(std::memory_order_relaxed)) return true;
    if ((ticks++ & (kStride - 1)) != 0) return false;
    if (ElapsedSeconds() >= limit_s_) passed_.store(true, std::memory_order_relaxed);
    return passed_.load(std::memory_order_relaxed);
  }
  bool passed() const { return passed_.load(std::memory_order_relaxed); }
  double ElapsedSeconds() const { return clock_() - start_s_; }

 private:
  static constexpr uint32_t kStride = 16;
  const double limit_s_;
  std::function<double()> clock_;
  double start_s_ = 0;
  std::atomic<bool> passed_{false};
};

// ---- layouts ---------------------------------------------------------------------------------------------

// One stage's GPUs on one node.
struct Part {
  uint32_t node = 0, k = 0, type = 0, cls = 0;
  double memory_gib = 0;
};

// A placement made ready for evaluation (reused from one assignment to the next).
struct Layout {
  uint32_t S = 0;
  std::vector<uint32_t> part_begin;  // S + 1, into parts
  std::vector<Part> parts;           // by stage, then node
  std::vector<uint32_t> size;        // GPUs per stage
  std::vector<uint32_t> slot;        // S + 1: where stage s's DP replicas sit in State::split
  std::vector<char> hetero;          // Dg.IsHetero() (Algorithm 1, line 12): more than one GPU type
  std::vector<models::Link> dp_link;  // the slowest link among a stage's GPUs (§4.2.1: DP's bandwidth)
  std::vector<models::Link> pp;       // pp[i]: the slowest link between stages i and i + 1
  // A stage's composition ((class, GPUs) by node), its position (first, middle, last, only) and S, hashed
  // twice: what the bound's per-stage values depend on besides B (Scratch::bounds).
  std::vector<std::pair<uint64_t, uint64_t>> sig;
  std::vector<double> pp_hop_s;  // pp_hop_s[i]: one sequence's activations over pp[i] (the bound's f)
};

inline uint64_t Mix(uint64_t h, uint64_t v) {  // splitmix64 of h ^ v
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Links between nodes (one direction): link(a, b) for a ≠ b, and for a = b the link between two GPUs of a.
class NodeLinks {
 public:
  NodeLinks(const models::Cluster& cluster, const models::Topology& topology) {
    N_ = static_cast<uint32_t>(cluster.nodes().size());
    links_.resize(size_t{N_} * N_);
    for (uint32_t a = 0; a < N_; ++a) {
      const auto& na = cluster.nodes()[a];
      for (uint32_t b = 0; b < N_; ++b) {
        if (a == b) {
          links_[a * N_ + b] =
              na.num_gpus >= 2 ? topology.Between(na.first_device, na.first_device + 1) : models::Link{};
        } else {
          links_[a * N_ + b] = topology.Between(na.first_device, cluster.nodes()[b].first_device);
        }
      }
    }
  }
  const models::Link& at(uint32_t a, uint32_t b) const { return links_[size_t{a} * N_ + b]; }

 private:
  uint32_t N_ = 0;
  std::vector<models::Link> links_;
};

void Worst(models::Link& acc, const models::Link& l, bool& any);

// `boundary_bytes`: the PP bytes of one sequence. `from` > 0: `lay` already holds a layout of S stages
// whose stages 0..from−1 are those of `pl` (the same GPUs of the same nodes); only stages from..S−1 and
// the link between stages from−1 and from are recomputed (consecutive stage-size orders share prefixes).
void MakeLayout(const models::Cluster& cluster, const Profiler& prof, const NodeLinks& links, double boundary_bytes,
                const Placement& pl, Layout& lay, uint32_t from = 0);

// ---- the DFS state ---------------------------------------------------------------------------------------

// IntraPlan, MbsPlan and LayerPlan of Algorithm 1 (line 14: StagePlan), with per-stage caches.
struct State {
  std::vector<uint32_t> tp;      // IntraPlan: TP degree per stage (DP = size / TP)
  std::vector<uint32_t> split;   // MbsPlan: sequences per DP replica, stage s at [slot[s], slot[s] + DP)
  std::vector<char> split_ok;    // the split exists (DataLB found one)
  std::vector<uint32_t> blocks;  // LayerPlan: transformer blocks per stage
  std::vector<uint32_t> begin;   // S + 1 layer boundaries from `blocks`
  std::vector<double> cap;       // §4.2.2 3) capacity per stage (from tp and split)
  std::vector<int32_t> most;     // the most blocks a stage's memory holds (−1 none, −2 not computed)
};

// The closest memory misses, for the "nothing fits" message (strings built only for those kept).
struct Miss {
  double shortfall_gib = 0, need_gib = 0, capacity_gib = 0;
  std::string what, device;
};
struct Misses {
  std::vector<Miss> top;  // at most 3, by shortfall
  bool Wants(double shortfall) const { return top.size() < 3 || shortfall < top.back().shortfall_gib; }
  void Add(Miss m) {
    for (const Miss& x : top) {
      if (x.what == m.what) return;
    }
    top.push_back(std::move(m));
    std::stable_sort(top.begin(), top.end(),
                     [](const Miss& a, const Miss& b) { return a.shortfall_gib < b.shortfall_gib; });
    if (top.size() > 3) top.resize(3);
  }
};

struct Counters {
  uint64_t evaluated = 0, invalid = 0, oom = 0, truncated = 0, assignments = 0, orders = 0, pruned = 0;
  uint64_t orders_skipped = 0;  // stage-size orders ruled out by an earlier order's first stages
  Misses misses;
};

// What every evaluation shares.
struct Context {
  const PlanningProblem& problem;
  const Knobs& knobs;
  const Profiler& prof;
  uint32_t L = 0, blocks = 0;
  double w_emb = 0, w_block = 0, w_head = 0;  // §4.2.2 3) "the load of layers"
  double boundary_bytes = 0;                  // PP bytes of one sequence
  double wb = 2;                              // bytes per gradient element
  Context(const PlanningProblem& p, const Knobs& k, const Profiler& pr) : problem(p), knobs(k), prof(pr) {
    L = pr.layers();
    blocks = p.model.num_blocks();
    // "Metis estimates the execution time of each layer": the first GPU type at tp 1, one sequence.
    w_emb = pr.LayerSeconds(0, 0, models::LayerKind::kEmbedding, 1);
    w_block = pr.LayerSeconds(0, 0, models::LayerKind::kTransformer, 1);
    w_head = pr.LayerSeconds(0, 0, models::LayerKind::kHead, 1);
    boundary_bytes = models::PipelineBoundaryBytes(p.model, 1, p.training.seq_len(), p.training.dtype());
    wb = models::DTypeBytes(p.training.dtype());
    // For the lower bound: each (GPU type, node class, TP degree)'s least seconds per sequence of one
    // block, embedding and head (compute + TP) over the profiled range of sizes.
    types = pr.num_types();
    classes = pr.classes().empty() ? 0 : *std::max_element(pr.classes().begin(), pr.classes().end()) + 1;
    tps = static_cast<uint32_t>(pr.tp_degrees().size());
    mu.assign(size_t{types} * classes * tps * 3, kInf);
    for (uint32_t g = 0; g < types; ++g) {
      for (uint32_t c = 0; c < classes; ++c) {
        for (uint32_t ti = 0; ti < tps; ++ti) {
          if (!pr.TpProfiled(c, static_cast<int>(ti))) continue;
          for (uint32_t kind = 0; kind < 3; ++kind) {
            double best = kInf;
            for (uint32_t n = 1; n <= pr.max_batch(); ++n) {
              best = std::min(best, KindSeconds(g, c, static_cast<int>(ti), kind, n) / n);
            }
            mu[((size_t{g} * classes + c) * tps + ti) * 3 + kind] = best;
          }
        }
      }
    }
  }
  // Seconds (compute + TP) of one layer of kind 0 (embedding), 1 (block) or 2 (head) for n sequences.
  double KindSeconds(uint32_t type, uint32_t cls, int tpi, uint32_t kind, uint32_t n) const {
    const uint32_t begin = kind == 0 ? 0 : kind == 1 ? 1 : L - 1;
    const uint32_t end = kind == 0 ? 1 : kind == 1 ? 2 : L;
    return prof.RangeSeconds(type, tpi, n, begin, end) + prof.RangeTpSeconds(cls, tpi, n, begin, end);
  }
  double Mu(uint32_t type, uint32_t cls, uint32_t tpi, uint32_t kind) const {
    return mu[((size_t{type} * classes + cls) * tps + tpi) * 3 + kind];
  }
  uint32_t types = 0, classes = 0, tps = 0;
  std::vector<double> mu;
};

// The bound's per-stage values of one (assignment, B) (Evaluator::PrepareBound): β [stage][tp], f
// [stage], the blocks a stage's memory can hold at most [stage][tp], StageDpCost [stage][tp], and per
// stage prefix sums of what decides the root's feasibility (Evaluator::Terms at s = 0): `room[s]`, the
// blocks stages 0..s−1 hold at most (each at its best TP degree), and `short_of[s]`, how many of them
// cannot hold their fewest blocks. The search keeps one per (node order, B) and refreshes only the stages
// after the prefix that the previous assignment of that node order shares (`sizes`, `B`: what they hold).
struct BoundArrays {
  std::vector<double> beta, f, dp0, dp1;
  std::vector<int32_t> most;
  std::vector<uint32_t> room, short_of;
  std::vector<uint32_t> sizes;
  uint32_t B = 0;
  // Leading stages whose β, f, most and DP values are this order's (the prefix sums room and short_of
  // cover every stage once prepared): a pair that Evaluator::PrepareMemory already found out of memory
  // leaves the later stages' values as they were.
  uint32_t full = 0;
};

// Scratch vectors of ProportionalBlocks (no allocation per call in the search).
struct Scratch {
  std::vector<uint32_t> lo, hi, n;
  std::vector<double> c, share, fixed;
  std::vector<std::pair<double, double>> events;
  // The bound's per-stage values, by (composition, position, micro-batches in flight, micro-batch): a
  // direct-mapped cache (a collision recomputes; two independent 64-bit hashes must both match).
  struct StageBound {
    uint64_t key = 0, check = 0;
    int32_t most_any = -1;  // the most blocks over the TP degrees with a finite β (-1: none)
    std::array<double, 8> beta;
    std::array<int32_t, 8> most;
    std::array<double, 8> dp0, dp1;  // the stage's DP all-reduce: dp0 + dp1 × its blocks
    double emb = 0, head = 0;
  };
  // The bound's per-stage values of an evaluation that brings none of its own.
  BoundArrays own;
  std::vector<std::pair<uint64_t, uint64_t>> keys;  // per stage: its entry's key and check
  std::vector<std::pair<double, uint32_t>> fill;     // Evaluator::Terms
  // DataLB's splits of mixed stages, direct-mapped like `bounds`.
  struct SplitEntry {
    uint64_t key = 0, check = 0;
    bool ok = false;
    double cap = 0;
    std::vector<uint32_t> split;
  };
  static constexpr size_t kSplitSlots = size_t{1} << 12;
  std::vector<SplitEntry> splits = std::vector<SplitEntry>(kSplitSlots);
  static constexpr size_t kBoundSlots = size_t{1} << 14;
  std::vector<StageBound> bounds = std::vector<StageBound>(kBoundSlots);
};

bool ProportionalBlocksInto(uint32_t blocks, const std::vector<double>& capacity, const std::vector<double>& fixed_load,
                            double block_load, const std::vector<uint32_t>& max_blocks, Scratch& x,
                            std::vector<uint32_t>& out);

// ---- Algorithm 1, lines 5–22, for one assignment and one number of micro-batches B ----------------------

// A complete plan of one (assignment, B) the DFS costed (line 20), kept for the runners-up: its eq. 1 cost,
// its place among the pair's costed plans in DFS order (deterministic: the DFS does not depend on the
// incumbent), and its state.
struct Leaf {
  double cost = 0;
  uint64_t seq = 0;
  State st;
};

class Evaluator {
 public:
  // `incumbent`: the cost of the best plan found so far; subtrees whose lower bound exceeds it are cut.
  // `deadline` (optional) stops the DFS once the time limit has passed (`ticks`: the worker's counter);
  // Run() then returns the best plan of the nodes it visited, and cut() says so.
  // `arrays` (optional): the bound's per-stage values, valid for stages 0..from−1 of this layout and B
  // (BoundArrays); PrepareBound recomputes the rest. Without them, scratch.own, all recomputed.
  Evaluator(const Context& ctx, const Layout& lay, uint32_t B, Counters& counters, Scratch& scratch,
            double incumbent = kInf, Deadline* deadline = nullptr, uint32_t* ticks = nullptr,
            BoundArrays* arrays = nullptr, uint32_t from = 0)
      : ctx_(ctx),
        prof_(ctx.prof),
        lay_(lay),
        S_(lay.S),
        B_(B),
        b_(ctx.problem.training.global_batch_size() / B),
        counters_(counters),
        scratch_(scratch),
        incumbent_(incumbent),
        deadline_(ticks != nullptr ? deadline : nullptr),
        ticks_(ticks),
        arrays_(arrays != nullptr ? *arrays : scratch.own),
        from_(arrays != nullptr ? from : 0) {}

  // The best complete plan's eq. 1 cost (+inf when none); the plan's state is best_state().
  double Run();

  const State& best_state() const { return best_state_; }

  // Runners-up (PlanningProblem::alternatives): before Run(), asks it to keep the `keep` best complete plans
  // of the pair that differ as plans (by (cost, seq); ties to the earlier), each costing at most the
  // incumbent (the cut's threshold, which the caller sets to the keep-th best plan of the search so far);
  // leaves() then holds them, best first. keep = 0 (the default): none, and Run() does exactly what it
  // does for the pick alone.
  void KeepLeaves(uint32_t keep) { keep_leaves_ = keep; }
  const std::vector<Leaf>& leaves() const { return leaves_; }
  uint32_t micro_batch() const { return b_; }
  // Whether the time limit stopped the DFS before it finished.
  bool cut() const { return cut_; }
  // Whether Run() got as far as the bound's per-stage values (the BoundArrays given now hold this pair's).
  bool prepared() const { return prepared_; }
  // When Run() cut the pair because a stage cannot hold its fewest blocks at any TP degree it can reach:
  // the first such stage (its cache entry depends only on the stages up to it, so every stage-size order
  // that begins with this one's first short_at() + 1 stages is cut the same way). UINT32_MAX otherwise.
  uint32_t short_at() const { return short_at_; }

  // The lower bound on every plan of this assignment and B (+inf when a stage is invalid at TP 1).
  double RootBound();

  // Eq. 1: Σ t_i + (B − 1)·max t_j + DP_all, plus the optimizer step (the authors' estimator adds the
  // parameter update time; hetsim's simulator plays it) and B × the profiled per-micro-batch overheads
  // (the released estimator's fb_sync of the last stage and batch generator; 0 without them).
  double Cost(const State& st) const;

  // The layer boundaries of a complete state from its blocks (PlanCost).
  static void SetBegins(const Layout& lay, State& st);

 private:
  double InFlight(uint32_t s) const { return MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, s, S_, B_, 1); }

  void SetBlocks(State& st) const;

  // InvalidIntraPlan (line 26): the TP degree is not profiled or does not fit the stage's nodes (TP stays
  // inside a node), or a DP replica gets no sequence or more than the profiled micro-batch sizes.
  bool Invalid(uint32_t s, const State& st) const;

  // DataLB: the even split in a stage of one GPU type; in a mixed stage, the micro-batch split in
  // proportion to each replica's throughput (§4.1 "Load balancing"; Fig. 6's HA-DP), each replica at
  // least one sequence, at most the largest profiled size and, once the stage's layers are known, what
  // its memory holds ("capacity-aware"). Refreshes the stage's capacity.
  void DataLB(uint32_t s, State& st, bool memory) const;

  // Whether a device of stage s holding layers [begin, end) runs out of memory; `worst` (optional) gets
  // the device with the largest shortfall.
  bool OomAt(uint32_t s, const State& st, uint32_t begin, uint32_t end, Miss* worst) const;

  // DetectOOM (lines 29, 40): a device's estimated memory (§4.3) exceeds its capacity.
  bool Oom(uint32_t s, const State& st) const { return OomAt(s, st, st.begin[s], st.begin[s + 1], nullptr); }

  // The most blocks stage s holds within its memory with its intra-stage plan (−1: not even the fewest).
  int32_t MaxBlocks(uint32_t s, State& st) const;

  // LayerLB (lines 15, 34, 39): blocks in proportion to the stages' capacities; stages before `capped`
  // (those the DFS has fixed, and the stage whose layers are moved away) stay within their memory.
  bool LayerLB(State& st, uint32_t capped) const;

  // ---- an exact cut (not in the paper): a lower bound on the eq. 1 cost of every plan the DFS can still
  // reach from a node. Stage j's time is at least f_j (PP hops of one sequence, the embedding or head)
  // plus x_j blocks × β_j, its least per-block time over the TP degrees it may still take (exact for the
  // even split of a one-type stage; b / Σ_r 1/μ_r for any split of a mixed stage); the layer split x is
  // relaxed. Then max_j t_j ≥ T* = min_x max_j (f_j + x_j β_j) and Σ_j t_j ≥ Σ_j f_j + min_x Σ_j x_j β_j,
  // so cost ≥ (B − 1)·T* + Σ f + min Σ x β (DP and the optimizer ≥ 0). A plan the cut removes costs at
  // least the incumbent, and ties go to the earlier plan, so the search returns the same plan.

  // The least seconds of one layer of `kind` per micro-batch on stage s at TP tps[ti] (+inf: invalid).
  double StageKindLB(uint32_t s, uint32_t ti, uint32_t kind) const;

  // The most blocks stage s can hold in memory at TP tps[ti] (an upper bound: a mixed stage's replicas
  // are assumed to take a single sequence); −1 when not even its fewest.
  int32_t MaxBlocksLB(uint32_t s, uint32_t ti) const;

  // The TP degrees the DFS can give stage s, as a mask over tps: lines 30–36 raise TP only on a stage that
  // runs out of memory, one doubling at a time, starting from TP 1 (line 7), and a raise to an invalid
  // degree ends the branch (line 26; `valid[ti]` = StageKindLB, whose +inf implies InvalidIntraPlan). So
  // the chain stops at the first degree at which the stage cannot run out of memory: holding the most
  // blocks LayerLB can give it (every other stage keeps its fewest) with the largest micro-batch share a
  // replica can get (⌈b/DP⌉ in the even split, b − (DP − 1) at most in DataLB's).
  uint32_t ReachableTp(uint32_t s, const std::array<double, 8>& valid) const;

  // Stage s's DP term of eq. 1 at TP tps[ti] as a function of its blocks x: the ring all-reduce of its
  // gradients per TP rank over the slowest link among its GPUs is dp0 + dp1·x (the parameters of a layer
  // range are affine in its blocks, and so is the all-reduce in its bytes); 0 with one DP replica.
  void StageDpCost(uint32_t s, uint32_t ti, double& dp0, double& dp1) const;

  // The bound's per-stage values of stages from_..S−1 (and f of stage from_ − 1, whose link to the next
  // stage may have changed), with the prefix sums of BoundArrays.
  void PrepareBound();
  // The prefix sums alone (room and short_of: enough for RootInfeasible), from one cache line per stage.
  // 97% of the pairs of a 64-GPU search stop there (their stages cannot hold the model), so they skip
  // copying the other values.
  void PrepareMemory();

  // Whether the root's bound is +inf (Terms(0, ·) infeasible: a stage cannot hold its fewest blocks at any
  // TP degree it can reach, or all stages together cannot hold the model), from the prefix sums in O(1).
  // Where PrepareMemory/PrepareBound start (stages before it keep the previous pair's values); sizes the
  // arrays when it is 0.
  uint32_t BoundStart();
  // Stage s's cache entry (computed on a miss), keyed by scratch_.keys[s].
  const Scratch::StageBound& StageEntry(uint32_t s);
  // Fills scratch_.keys for stages start..S−1 and prefetches their entries.
  void StageKeys(uint32_t start);
  bool RootInfeasible() const {
    return arrays_.short_of[S_] > 0 || arrays_.room[S_] < ctx_.blocks;
  }

  // The bound at a DFS node about to handle stage s (s = 0: the root): stages before s keep their TP
  // degree, stage s may only raise its own, later stages may take any it can reach (ReachableTp). With
  // x_j blocks on stage j (lo_j ≤ x_j ≤ M_j, M_j what its memory holds at most, Σ x_j = blocks):
  //   - max_j t_j ≥ T*, the least T with Σ_j capT_j(T) ≥ blocks, capT_j(T) = max over its TP degrees of
  //     min(M_j, (T − f_j)/β_j): the blocks it can process within T;
  //   - Σ_j t_j ≥ Σ_j f_j + min Σ_j x_j β_j (the fastest stages filled first, up to their memory);
  //   - DP_all ≥ D*, the least D with Σ_j capD_j(D) ≥ blocks, capD_j(D) = max over its TP degrees of
  //     min(M_j, (D − dp0_j)/dp1_j) (StageDpCost): the split that minimises the largest all-reduce.
  // Each term is minimised over the layer split on its own, so cost ≥ (B − 1)·T* + Σ f + min Σ xβ + D*.
  struct BoundTerms {
    bool feasible = true;
    double rest = 0;              // Σ f + min Σ x β
    double lo_t = 0, hi_t = 0;    // T* ∈ [lo_t, hi_t]: lo_t = the largest stage time at its fewest blocks
    double lo_d = 0, hi_d = 0;    // the same for D*
  };

  uint32_t FirstTp(uint32_t j, uint32_t s, const State& st) const;
  uint32_t LastTp(uint32_t j, uint32_t s, const State& st) const { return j < s ? FirstTp(j, s, st) + 1 : ctx_.tps; }

  BoundTerms Terms(uint32_t s, const State& st) const;

  // Σ_j capT_j(t).
  double CapacityT(uint32_t s, const State& st, double t) const;

  // Σ_j capD_j(d).
  double CapacityD(uint32_t s, const State& st, double d) const;

  // The least x in [lo, hi] with capacity(x) ≥ blocks, from below: bisection keeps capacity(a) < blocks
  // (or a = lo), so the result never exceeds the true value.
  template <typename Capacity>
  double Least(double lo, double hi, const Capacity& capacity) const {
    const double blocks = ctx_.blocks;
    double a = lo, b = std::max(hi, lo);
    if (capacity(a) >= blocks) return a;
    for (int it = 0; it < 40 && b - a > 1e-6 * b; ++it) {
      const double mid = 0.5 * (a + b);
      if (capacity(mid) >= blocks) {
        b = mid;
      } else {
        a = mid;
      }
    }
    return a;
  }

  // The bound's value (+inf when no layer split fits in memory).
  double Bound(uint32_t s, const State& st) const;

  // Whether Bound(s, st) > incumbent, decided with as few capacity sums as possible: T* > t ⟺ capT(t) <
  // blocks (capT does not decrease), so a point test against what the incumbent leaves for T* (with D*
  // at its floor) or for D* (with T* at its floor) settles most cases without a bisection.
  bool Exceeds(uint32_t s, const State& st, double incumbent) const;

  double Incumbent() const { return std::min(incumbent_, best_); }

  // Lines 24–44.
  void Dfs(uint32_t s, State st);

  void RecordMiss(uint32_t s, const State& st);

  // Lines 18–22: a complete plan, costed with eq. 1.
  void Emit(const State& st);

  // Whether two complete states of this pair give the same plan (BuildPlan writes the TP degrees, the layer
  // boundaries and, for stages with more than one DP replica, the replicas' micro-batch shares).
  bool SamePlan(const State& a, const State& b) const;
  // Keeps a costed leaf among the keep_leaves_ best (KeepLeaves).
  void KeepLeaf(double c, const State& st);

  const Context& ctx_;
  const Profiler& prof_;
  const Layout& lay_;
  const uint32_t S_, B_, b_;
  Counters& counters_;
  Scratch& scratch_;
  mutable std::vector<uint32_t> most_;
  double incumbent_ = kInf;
  uint64_t nodes_ = 0;
  double best_ = kInf;
  State best_state_;
  uint32_t keep_leaves_ = 0;
  uint64_t leaf_seq_ = 0;
  std::vector<Leaf> leaves_;  // sorted by (cost, seq)
  Deadline* deadline_ = nullptr;
  uint32_t* ticks_ = nullptr;
  bool cut_ = false;
  bool prepared_ = false;
  uint32_t short_at_ = UINT32_MAX;
  BoundArrays& arrays_;
  const uint32_t from_;
  // The bound's per-stage values (in arrays_): β [stage][tp], f [stage], the blocks a stage's memory can
  // hold at most [stage][tp], and StageDpCost [stage][tp].
  std::vector<double>& beta_ = arrays_.beta;
  std::vector<double>& f_ = arrays_.f;
  std::vector<int32_t>& most_lb_ = arrays_.most;
  std::vector<double>& dp0_ = arrays_.dp0;
  std::vector<double>& dp1_ = arrays_.dp1;
};

}  // namespace hetsim::planners::metis
