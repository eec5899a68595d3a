// Metis §4.2 (Algorithm 1): the hetero-aware search, its DP-first DFS over intra-stage plans, the
// capacity-aware layer and data load balancing, and the cost model of §4.2.1 (eq. 1) that ranks the plans.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <array>
#include <tuple>

#include "planners/metis/internal.h"
#include "planners/symmetric.h"

namespace hetsim::planners::metis {
namespace {

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

uint64_t Mix(uint64_t h, uint64_t v) {  // splitmix64 of h ^ v
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

void Worst(models::Link& acc, const models::Link& l, bool& any) {
  if (!any) {
    acc = l;
    any = true;
    return;
  }
  acc.bandwidth_bytes_s = std::min(acc.bandwidth_bytes_s, l.bandwidth_bytes_s);
  acc.latency_s = std::max(acc.latency_s, l.latency_s);
  if (static_cast<int>(l.kind) > static_cast<int>(acc.kind)) acc.kind = l.kind;
}

// `boundary_bytes`: the PP bytes of one sequence.
void MakeLayout(const models::Cluster& cluster, const Profiler& prof, const NodeLinks& links, double boundary_bytes,
                const Placement& pl, Layout& lay) {
  const uint32_t S = static_cast<uint32_t>(pl.stage_begin.size()) - 1;
  lay.S = S;
  lay.part_begin = pl.stage_begin;
  lay.parts.clear();
  lay.size.assign(S, 0);
  lay.slot.assign(S + 1, 0);
  lay.hetero.assign(S, 0);
  lay.dp_link.assign(S, models::Link{});
  lay.pp.assign(S > 0 ? S - 1 : 0, models::Link{});
  lay.sig.assign(S, {0x12345678ull, 0x9abcdef0ull});
  for (const auto& [n, k] : pl.parts) {
    lay.parts.push_back({n, k, prof.type_of_node(n), prof.class_of_node(n), cluster.nodes()[n].gpu->memory_gib});
  }
  for (uint32_t s = 0; s < S; ++s) {
    bool any = false;
    for (uint32_t i = lay.part_begin[s]; i < lay.part_begin[s + 1]; ++i) {
      const Part& p = lay.parts[i];
      lay.size[s] += p.k;
      lay.hetero[s] |= p.type != lay.parts[lay.part_begin[s]].type;
      lay.sig[s].first = Mix(lay.sig[s].first, (uint64_t{p.cls} << 32) | p.k);
      lay.sig[s].second = Mix(lay.sig[s].second ^ 0x5555ull, (uint64_t{p.k} << 32) | p.cls);
      if (p.k >= 2) Worst(lay.dp_link[s], links.at(p.node, p.node), any);
      for (uint32_t j = i + 1; j < lay.part_begin[s + 1]; ++j) Worst(lay.dp_link[s], links.at(p.node, lay.parts[j].node), any);
    }
    lay.slot[s + 1] = lay.slot[s] + lay.size[s];
    if (s + 1 < S) {
      bool any_pp = false;
      for (uint32_t i = lay.part_begin[s]; i < lay.part_begin[s + 1]; ++i) {
        for (uint32_t j = lay.part_begin[s + 1]; j < lay.part_begin[s + 2]; ++j) {
          Worst(lay.pp[s], links.at(lay.parts[i].node, lay.parts[j].node), any_pp);
        }
      }
    }
  }
  lay.pp_hop_s.resize(lay.pp.size());
  for (size_t i = 0; i < lay.pp.size(); ++i) lay.pp_hop_s[i] = models::PointToPointSeconds(boundary_bytes, lay.pp[i]);
  for (uint32_t s = 0; s < S; ++s) {
    const uint64_t position = S == 1 ? 3 : s == 0 ? 0 : s + 1 == S ? 2 : 1;
    lay.sig[s].first = Mix(lay.sig[s].first, (uint64_t{S} << 8) | position);
    lay.sig[s].second = Mix(lay.sig[s].second ^ 0xa5a5ull, (position << 32) | S);
  }
}

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

// Scratch vectors of ProportionalBlocks (no allocation per call in the search).
struct Scratch {
  std::vector<uint32_t> lo, hi, n;
  std::vector<double> c, share, fixed;
  std::vector<std::pair<double, double>> events;
  // The bound's per-stage values, by (composition, position, micro-batches in flight, micro-batch): a
  // direct-mapped cache (a collision recomputes; two independent 64-bit hashes must both match).
  struct StageBound {
    uint64_t key = 0, check = 0;
    std::array<double, 8> beta;
    std::array<int32_t, 8> most;
    std::array<double, 8> dp0, dp1;  // the stage's DP all-reduce: dp0 + dp1 × its blocks
    double emb = 0, head = 0;
  };
  // The bound's per-stage values of the current evaluation (Evaluator::PrepareBound).
  std::vector<double> beta, f, dp0, dp1;
  std::vector<int32_t> most;
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
                            std::vector<uint32_t>& out) {
  const uint32_t S = static_cast<uint32_t>(capacity.size());
  if (S == 0 || fixed_load.size() != S || max_blocks.size() != S) return false;
  auto& lo = x.lo;
  auto& hi = x.hi;
  lo.resize(S);
  hi.resize(S);
  uint64_t sum_lo = 0, sum_hi = 0;
  for (uint32_t s = 0; s < S; ++s) {
    lo[s] = S == 1 ? blocks : (s == 0 || s + 1 == S) ? 0 : 1;
    hi[s] = std::min(max_blocks[s], blocks);
    if (lo[s] > hi[s]) return false;
    sum_lo += lo[s];
    sum_hi += hi[s];
  }
  if (sum_lo > blocks || sum_hi < blocks) return false;
  out.resize(S);
  if (S == 1) {
    out[0] = blocks;
    return true;
  }
  const double w = block_load > 0 ? block_load : 1.0;
  auto& c = x.c;
  c.resize(S);
  double total_c = 0, total_f = 0;
  for (uint32_t s = 0; s < S; ++s) {
    c[s] = std::max(capacity[s], 1e-300);
    total_c += c[s];
    total_f += fixed_load[s];
  }
  // Stage s's continuous share x_s(λ) = clamp((λ·c_s − fixed_s)/w, lo_s, hi_s): its load in proportion to
  // its capacity, within its bounds. Find λ with Σ x_s = blocks.
  double lambda = (blocks * w + total_f) / total_c;  // no bound binds: loads ∝ capacities
  bool inside = true;
  for (uint32_t s = 0; s < S && inside; ++s) {
    const double v = (lambda * c[s] - fixed_load[s]) / w;
    inside = v >= lo[s] && v <= hi[s];
  }
  if (!inside) {
    // Memory caps bind (the usual case): fix the stages whose share exceeds their cap at the cap and
    // recompute λ over the others (λ only grows, so a fixed stage stays fixed); if a lower bound then
    // binds, sweep the breakpoints instead.
    auto& at_cap = x.n;
    at_cap.assign(S, 0);
    for (uint32_t round = 0; round <= S; ++round) {
      double free_c = 0, free_f = 0, rest = blocks;
      for (uint32_t s = 0; s < S; ++s) {
        if (at_cap[s]) {
          rest -= hi[s];
        } else {
          free_c += c[s];
          free_f += fixed_load[s];
        }
      }
      if (free_c <= 0) break;
      lambda = (rest * w + free_f) / free_c;
      bool more = false;
      for (uint32_t s = 0; s < S; ++s) {
        if (!at_cap[s] && (lambda * c[s] - fixed_load[s]) / w > hi[s]) {
          at_cap[s] = 1;
          more = true;
        }
      }
      if (!more) break;
    }
    inside = true;
    for (uint32_t s = 0; s < S && inside; ++s) {
      const double v = (lambda * c[s] - fixed_load[s]) / w;
      inside = at_cap[s] ? v >= hi[s] - 1e-9 : v >= lo[s] && v <= hi[s];
    }
  }
  if (!inside) {
    // Sweep the breakpoints of the piecewise-linear, non-decreasing Σ x_s(λ).
    auto& events = x.events;
    events.clear();
    double g = 0, slope = 0;
    for (uint32_t s = 0; s < S; ++s) {
      g += lo[s];
      events.emplace_back((fixed_load[s] + lo[s] * w) / c[s], c[s] / w);
      events.emplace_back((fixed_load[s] + hi[s] * w) / c[s], -c[s] / w);
    }
    std::sort(events.begin(), events.end());
    double at = events.front().first;
    lambda = at;
    for (const auto& [e, d] : events) {
      if (g + slope * (e - at) >= blocks) break;
      g += slope * (e - at);
      at = e;
      slope += d;
      lambda = at;
    }
    if (g < blocks && slope > 0) lambda = at + (blocks - g) / slope;
  }
  auto& share = x.share;
  share.resize(S);
  for (uint32_t s = 0; s < S; ++s) share[s] = std::clamp((lambda * c[s] - fixed_load[s]) / w, double(lo[s]), double(hi[s]));
  // Cumulative rounding keeps every stage within one block of its share.
  double cum = 0;
  int64_t prev = 0;
  bool ok = true;
  for (uint32_t s = 0; s < S; ++s) {
    cum += share[s];
    int64_t edge = s + 1 == S ? int64_t{blocks} : std::llround(cum);
    edge = std::clamp<int64_t>(edge, prev, blocks);
    out[s] = static_cast<uint32_t>(edge - prev);
    prev = edge;
    ok &= out[s] >= lo[s] && out[s] <= hi[s];
  }
  if (ok) return true;
  // Largest remainders within the bounds.
  uint64_t sum = 0;
  for (uint32_t s = 0; s < S; ++s) {
    out[s] = std::clamp<uint32_t>(static_cast<uint32_t>(std::floor(share[s] + 1e-9)), lo[s], hi[s]);
    sum += out[s];
  }
  while (sum < blocks) {
    uint32_t best = S;
    for (uint32_t s = 0; s < S; ++s) {
      if (out[s] < hi[s] && (best == S || share[s] - out[s] > share[best] - out[best])) best = s;
    }
    if (best == S) return false;
    ++out[best];
    ++sum;
  }
  while (sum > blocks) {
    uint32_t best = S;
    for (uint32_t s = 0; s < S; ++s) {
      if (out[s] > lo[s] && (best == S || share[s] - out[s] < share[best] - out[best])) best = s;
    }
    if (best == S) return false;
    --out[best];
    --sum;
  }
  return true;
}

// ---- Algorithm 1, lines 5–22, for one assignment and one number of micro-batches B ----------------------

class Evaluator {
 public:
  // `incumbent`: the cost of the best plan found so far; subtrees whose lower bound exceeds it are cut.
  // `deadline` (optional) stops the DFS once the time limit has passed (`ticks`: the worker's counter);
  // Run() then returns the best plan of the nodes it visited, and cut() says so.
  Evaluator(const Context& ctx, const Layout& lay, uint32_t B, Counters& counters, Scratch& scratch,
            double incumbent = kInf, Deadline* deadline = nullptr, uint32_t* ticks = nullptr)
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
        ticks_(ticks) {}

  // The best complete plan's eq. 1 cost (+inf when none); the plan's state is best_state().
  double Run() {
    // Every stage must give each DP replica at least one and at most max_profiled_batch sequences at TP 1
    // (InvalidIntraPlan, line 26): TP grows only on a stage that runs out of memory, so a stage invalid now
    // is invalid in every branch of the DFS.
    for (uint32_t s = 0; s < S_; ++s) {
      const uint32_t k = lay_.size[s];
      if (b_ < k || (b_ + k - 1) / k > prof_.max_batch()) {
        ++counters_.invalid;
        return kInf;
      }
    }
    State st;
    st.tp.assign(S_, 1);
    PrepareBound();
    if (ctx_.knobs.use_bound && Exceeds(0, st, Incumbent())) {
      ++counters_.pruned;
      return kInf;
    }
    st.split.assign(lay_.slot[S_], 0);
    st.split_ok.assign(S_, 0);
    st.blocks.assign(S_, 0);
    st.begin.assign(S_ + 1, 0);
    st.cap.assign(S_, 0);
    st.most.assign(S_, -2);
    // Lines 7–13: DP only; an even split of each micro-batch, balanced by GPU speed in mixed stages.
    for (uint32_t s = 0; s < S_; ++s) DataLB(s, st, /*memory=*/false);
    // Line 15: layers in proportion to the stages' capacities.
    if (!LayerLB(st, 0)) {
      ++counters_.invalid;
      return kInf;
    }
    nodes_ = 0;
    Dfs(0, std::move(st));
    return best_;
  }

  const State& best_state() const { return best_state_; }
  uint32_t micro_batch() const { return b_; }
  // Whether the time limit stopped the DFS before it finished.
  bool cut() const { return cut_; }

  // The lower bound on every plan of this assignment and B (+inf when a stage is invalid at TP 1).
  double RootBound() {
    for (uint32_t s = 0; s < S_; ++s) {
      const uint32_t k = lay_.size[s];
      if (b_ < k || (b_ + k - 1) / k > prof_.max_batch()) return kInf;
    }
    State st;
    st.tp.assign(S_, 1);
    PrepareBound();
    return Bound(0, st);
  }

  // Eq. 1: Σ t_i + (B − 1)·max t_j + DP_all, plus the optimizer step (the authors' estimator adds the
  // parameter update time; hetsim's simulator plays it).
  double Cost(const State& st) const {
    double sum = 0, mx = 0, dp_all = 0, opt = 0;
    for (uint32_t s = 0; s < S_; ++s) {
      const uint32_t begin = st.begin[s], end = st.begin[s + 1];
      const uint32_t tp = st.tp[s];
      const int tpi = prof_.TpIndex(tp);
      const uint32_t dp = lay_.size[s] / tp;
      double t = 0;
      uint32_t r = lay_.slot[s];
      for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
        const Part& p = lay_.parts[i];
        uint32_t last = 0;
        for (uint32_t j = 0; j < p.k / tp; ++j, ++r) {
          const uint32_t n = st.split[r];
          if (n == last) continue;
          last = n;
          // t_i: forward and backward compute and TP communication (profiled, §4.3), PP communication
          // (activation size / inter-stage bandwidth, §4.2.1).
          double x = prof_.RangeSeconds(p.type, tpi, n, begin, end) + prof_.RangeTpSeconds(p.cls, tpi, n, begin, end);
          if (s + 1 < S_) x += models::PointToPointSeconds(n * ctx_.boundary_bytes, lay_.pp[s]);
          if (s > 0) x += models::PointToPointSeconds(n * ctx_.boundary_bytes, lay_.pp[s - 1]);
          t = std::max(t, x);
        }
      }
      sum += t;
      mx = std::max(mx, t);
      // DP: "the total size of the model synchronization parameters by the slowest network bandwidth
      // within the DP group" (a ring all-reduce; the stages synchronise at the same time).
      const double params = prof_.RangeParams(tpi, begin, end);
      if (dp > 1) dp_all = std::max(dp_all, models::RingAllReduceSeconds(params * ctx_.wb, dp, lay_.dp_link[s]));
      const double shard = ctx_.knobs.zero_stage >= 1 ? dp : 1;
      for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
        opt = std::max(opt, prof_.cost().compute().OptimizerSeconds(prof_.gpu(lay_.parts[i].type), params / shard));
      }
    }
    return sum + (static_cast<double>(B_) - 1) * mx + dp_all + opt;
  }

  // The layer boundaries of a complete state from its blocks (PlanCost).
  static void SetBegins(const Layout& lay, State& st) {
    st.begin.assign(lay.S + 1, 0);
    for (uint32_t s = 0; s < lay.S; ++s) {
      st.begin[s + 1] = st.begin[s] + st.blocks[s] + (s == 0 ? 1 : 0) + (s + 1 == lay.S ? 1 : 0);
    }
  }

 private:
  double InFlight(uint32_t s) const { return MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, s, S_, B_, 1); }

  void SetBlocks(State& st) const {
    st.begin[0] = 0;
    for (uint32_t s = 0; s < S_; ++s) {
      st.begin[s + 1] = st.begin[s] + st.blocks[s] + (s == 0 ? 1 : 0) + (s + 1 == S_ ? 1 : 0);
    }
  }

  // InvalidIntraPlan (line 26): the TP degree is not profiled or does not fit the stage's nodes (TP stays
  // inside a node), or a DP replica gets no sequence or more than the profiled micro-batch sizes.
  bool Invalid(uint32_t s, const State& st) const {
    const uint32_t tp = st.tp[s];
    const int tpi = prof_.TpIndex(tp);
    if (tpi < 0) return true;
    for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
      const Part& p = lay_.parts[i];
      if (p.k % tp != 0 || !prof_.TpProfiled(p.cls, tpi)) return true;
    }
    return !st.split_ok[s];
  }

  // DataLB: the even split in a stage of one GPU type; in a mixed stage, the micro-batch split in
  // proportion to each replica's throughput (§4.1 "Load balancing"; Fig. 6's HA-DP), each replica at
  // least one sequence, at most the largest profiled size and, once the stage's layers are known, what
  // its memory holds ("capacity-aware"). Refreshes the stage's capacity.
  void DataLB(uint32_t s, State& st, bool memory) const {
    const uint32_t size = lay_.size[s];
    const uint32_t tp = st.tp[s];
    const int tpi = prof_.TpIndex(tp);
    st.split_ok[s] = 0;
    st.most[s] = -2;
    st.cap[s] = 1e-12;
    if (tpi < 0 || size % tp != 0) return;
    const uint32_t dp = size / tp;
    if (b_ < dp) return;
    uint32_t* split = &st.split[lay_.slot[s]];
    for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
      const Part& p = lay_.parts[i];
      if (p.k % tp != 0 || !prof_.TpProfiled(p.cls, tpi)) return;
    }
    Scratch::SplitEntry* entry = nullptr;  // the cache entry to complete (a mixed stage)
    if (!lay_.hetero[s]) {
      const uint32_t q = b_ / dp, rem = b_ % dp;
      if (q + (rem > 0 ? 1 : 0) > prof_.max_batch()) return;
      for (uint32_t r = 0; r < dp; ++r) split[r] = q + (r < rem ? 1 : 0);
    } else {
      // A mixed stage's split depends on its composition, TP, b and (with `memory`) its layers and
      // position: the same in many assignments, so it is cached (ProportionalSplit is linear in b).
      const uint64_t key = Mix(Mix(lay_.sig[s].first, (uint64_t{tp} << 32) | b_),
                               memory ? (uint64_t{st.begin[s]} << 40 | uint64_t{st.begin[s + 1]} << 20 | s) + 1 : 0);
      const uint64_t check = Mix(lay_.sig[s].second ^ 0x7e7eull, key);
      Scratch::SplitEntry& e = scratch_.splits[key & (Scratch::kSplitSlots - 1)];
      if (e.key == key && e.check == check) {
        if (!e.ok) return;
        std::copy(e.split.begin(), e.split.end(), split);
        st.split_ok[s] = 1;
        st.cap[s] = e.cap;
        return;
      }
      e.key = key;
      e.check = check;
      e.ok = false;
      entry = &e;
      const uint32_t even = std::min(prof_.max_batch(), (b_ + dp - 1) / dp);
      std::vector<double> speed;
      std::vector<uint32_t> caps;
      for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
        const Part& p = lay_.parts[i];
        uint32_t cap = prof_.max_batch();
        if (memory) {
          while (cap > 0 &&
                 !FitsIn(prof_.DeviceGib(tpi, st.begin[s], st.begin[s + 1], dp, cap, InFlight(s)), p.memory_gib)) {
            --cap;
          }
        }
        for (uint32_t j = 0; j < p.k / tp; ++j) {
          speed.push_back(1.0 / prof_.ModelSeconds(p.type, p.cls, tpi, even));
          caps.push_back(cap);
        }
      }
      auto found = DataSplit(b_, speed, caps);
      if (!found) return;
      std::copy(found->begin(), found->end(), split);
      e.ok = true;
      e.split = std::move(*found);
    }
    st.split_ok[s] = 1;
    // The capacity of §4.2.2 3): the throughput of the stage's intra-stage plan running the whole model as
    // a single stage (its slowest replica).
    double slowest = 0;
    uint32_t r = 0;
    for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
      const Part& p = lay_.parts[i];
      uint32_t last = 0;
      for (uint32_t j = 0; j < p.k / tp; ++j, ++r) {
        if (split[r] == last) continue;
        last = split[r];
        slowest = std::max(slowest, prof_.ModelSeconds(p.type, p.cls, tpi, split[r]));
      }
    }
    st.cap[s] = slowest > 0 ? 1.0 / slowest : 1e12;
    if (entry != nullptr) entry->cap = st.cap[s];
  }

  // Whether a device of stage s holding layers [begin, end) runs out of memory; `worst` (optional) gets
  // the device with the largest shortfall.
  bool OomAt(uint32_t s, const State& st, uint32_t begin, uint32_t end, Miss* worst) const {
    const uint32_t tp = st.tp[s];
    const int tpi = prof_.TpIndex(tp);
    if (tpi < 0 || !st.split_ok[s]) return true;
    const uint32_t dp = lay_.size[s] / tp;
    const double in_flight = InFlight(s);
    uint32_t r = lay_.slot[s];
    bool oom = false;
    for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
      const Part& p = lay_.parts[i];
      uint32_t n = 0;
      for (uint32_t j = 0; j < p.k / tp; ++j, ++r) n = std::max(n, st.split[r]);
      const double need = prof_.DeviceGib(tpi, begin, end, dp, n, in_flight);
      if (!FitsIn(need, p.memory_gib)) oom = true;
      if (worst != nullptr && need - p.memory_gib > worst->shortfall_gib) {
        worst->shortfall_gib = need - p.memory_gib;
        worst->need_gib = need;
        worst->capacity_gib = p.memory_gib;
        worst->device = ctx_.problem.cluster.nodes()[p.node].name + " (" + ctx_.problem.cluster.nodes()[p.node].gpu->name + ")";
      }
    }
    return oom;
  }

  // DetectOOM (lines 29, 40): a device's estimated memory (§4.3) exceeds its capacity.
  bool Oom(uint32_t s, const State& st) const { return OomAt(s, st, st.begin[s], st.begin[s + 1], nullptr); }

  // The most blocks stage s holds within its memory with its intra-stage plan (−1: not even the fewest).
  int32_t MaxBlocks(uint32_t s, State& st) const {
    if (st.most[s] != -2) return st.most[s];
    const uint32_t L = ctx_.L, blocks = ctx_.blocks;
    const uint32_t lo = S_ == 1 ? blocks : (s == 0 || s + 1 == S_) ? 0 : 1;
    // Blocks are identical, so a stage's memory depends on its block count and whether it holds the
    // embedding (first stage) or the head (last stage).
    auto fits = [&](uint32_t n) {
      const uint32_t begin = S_ == 1 || s == 0 ? 0 : s + 1 == S_ ? L - 1 - n : 1;
      const uint32_t end = S_ == 1 ? L : s == 0 ? 1 + n : s + 1 == S_ ? L : 1 + n;
      return !OomAt(s, st, begin, end, nullptr);
    };
    const auto result = static_cast<int32_t>(MostBlocksThatFit(lo, blocks, fits));
    st.most[s] = result;
    return result;
  }

  // LayerLB (lines 15, 34, 39): blocks in proportion to the stages' capacities; stages before `capped`
  // (those the DFS has fixed, and the stage whose layers are moved away) stay within their memory.
  bool LayerLB(State& st, uint32_t capped) const {
    auto& fixed = scratch_.fixed;
    fixed.assign(S_, 0);
    fixed[0] += ctx_.w_emb;
    fixed[S_ - 1] += ctx_.w_head;
    most_.assign(S_, ctx_.blocks);
    for (uint32_t s = 0; s < capped && s < S_; ++s) {
      const int32_t m = MaxBlocks(s, st);
      if (m < 0) return false;
      most_[s] = static_cast<uint32_t>(m);
    }
    if (!ProportionalBlocksInto(ctx_.blocks, st.cap, fixed, ctx_.w_block, most_, scratch_, st.blocks)) return false;
    SetBlocks(st);
    return true;
  }

  // ---- an exact cut (not in the paper): a lower bound on the eq. 1 cost of every plan the DFS can still
  // reach from a node. Stage j's time is at least f_j (PP hops of one sequence, the embedding or head)
  // plus x_j blocks × β_j, its least per-block time over the TP degrees it may still take (exact for the
  // even split of a one-type stage; b / Σ_r 1/μ_r for any split of a mixed stage); the layer split x is
  // relaxed. Then max_j t_j ≥ T* = min_x max_j (f_j + x_j β_j) and Σ_j t_j ≥ Σ_j f_j + min_x Σ_j x_j β_j,
  // so cost ≥ (B − 1)·T* + Σ f + min Σ x β (DP and the optimizer ≥ 0). A plan the cut removes costs at
  // least the incumbent, and ties go to the earlier plan, so the search returns the same plan.

  // The least seconds of one layer of `kind` per micro-batch on stage s at TP tps[ti] (+inf: invalid).
  double StageKindLB(uint32_t s, uint32_t ti, uint32_t kind) const {
    const uint32_t tp = prof_.tp_degrees()[ti];
    const uint32_t size = lay_.size[s];
    if (size % tp != 0) return kInf;
    const uint32_t dp = size / tp;
    if (b_ < dp || (b_ + dp - 1) / dp > prof_.max_batch()) return kInf;
    for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
      const Part& p = lay_.parts[i];
      if (p.k % tp != 0 || !prof_.TpProfiled(p.cls, static_cast<int>(ti))) return kInf;
    }
    if (!lay_.hetero[s]) {
      // The even split: the first b mod dp replicas take one more sequence.
      const uint32_t q = b_ / dp, rem = b_ % dp;
      double t = 0;
      uint32_t r = 0;
      for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
        const Part& p = lay_.parts[i];
        const uint32_t reps = p.k / tp;
        if (r < rem) t = std::max(t, ctx_.KindSeconds(p.type, p.cls, static_cast<int>(ti), kind, q + 1));
        if (r + reps > rem && q > 0) t = std::max(t, ctx_.KindSeconds(p.type, p.cls, static_cast<int>(ti), kind, q));
        r += reps;
      }
      return t;
    }
    double rate = 0;
    for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
      const Part& p = lay_.parts[i];
      rate += (p.k / tp) / ctx_.Mu(p.type, p.cls, ti, kind);
    }
    return rate > 0 ? b_ / rate : kInf;
  }

  // The most blocks stage s can hold in memory at TP tps[ti] (an upper bound: a mixed stage's replicas
  // are assumed to take a single sequence); −1 when not even its fewest.
  int32_t MaxBlocksLB(uint32_t s, uint32_t ti) const {
    const uint32_t tp = prof_.tp_degrees()[ti];
    const uint32_t dp = lay_.size[s] / tp;
    const uint32_t L = ctx_.L, blocks = ctx_.blocks;
    const uint32_t lo = S_ == 1 ? blocks : (s == 0 || s + 1 == S_) ? 0 : 1;
    const double in_flight = InFlight(s);
    auto range = [&](uint32_t x) -> std::pair<uint32_t, uint32_t> {
      if (S_ == 1) return {0, L};
      if (s == 0) return {0, 1 + x};
      if (s + 1 == S_) return {L - 1 - x, L};
      return {1, 1 + x};
    };
    const uint32_t q = b_ / dp, rem = b_ % dp;
    int64_t most = blocks;
    uint32_t r = 0;
    for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
      const Part& p = lay_.parts[i];
      const uint32_t reps = p.k / tp;
      const uint32_t n = lay_.hetero[s] ? 1 : (r < rem ? q + 1 : q);
      r += reps;
      const double cap = p.memory_gib * (1 - kMemorySafety) + 1e-9;
      auto need = [&](uint32_t x) {
        const auto [begin, end] = range(x);
        return prof_.DeviceGib(static_cast<int>(ti), begin, end, dp, n, in_flight);
      };
      if (S_ == 1) {
        if (need(blocks) > cap) return -1;
        continue;
      }
      if (need(lo) > cap) return -1;
      if (blocks < 2) continue;
      // Memory is affine in the block count from one block on.
      const double one = need(1), slope = need(2) - one;
      int64_t x = 0;
      if (one <= cap) x = slope > 0 ? 1 + static_cast<int64_t>(std::floor((cap - one) / slope)) : blocks;
      most = std::min<int64_t>(most, std::max<int64_t>(x, lo));
    }
    return static_cast<int32_t>(std::min<int64_t>(most, blocks));
  }

  // The TP degrees the DFS can give stage s, as a mask over tps: lines 30–36 raise TP only on a stage that
  // runs out of memory, one doubling at a time, starting from TP 1 (line 7), and a raise to an invalid
  // degree ends the branch (line 26; `valid[ti]` = StageKindLB, whose +inf implies InvalidIntraPlan). So
  // the chain stops at the first degree at which the stage cannot run out of memory: holding the most
  // blocks LayerLB can give it (every other stage keeps its fewest) with the largest micro-batch share a
  // replica can get (⌈b/DP⌉ in the even split, b − (DP − 1) at most in DataLB's).
  uint32_t ReachableTp(uint32_t s, const std::array<double, 8>& valid) const {
    const uint32_t T = std::min<uint32_t>(ctx_.tps, static_cast<uint32_t>(valid.size()));
    const uint32_t L = ctx_.L, blocks = ctx_.blocks;
    const uint32_t others = S_ == 1 ? 0 : (S_ - 2) - ((s == 0 || s + 1 == S_) ? 0 : 1);  // middles but s
    const uint32_t x = blocks - std::min(blocks, others);
    uint32_t begin = 0, end = L;
    if (S_ > 1) {
      if (s == 0) {
        end = 1 + x;
      } else if (s + 1 == S_) {
        begin = L - 1 - x;
      } else {
        begin = 1;
        end = 1 + x;
      }
    }
    const double in_flight = InFlight(s);
    uint32_t mask = 0;
    for (int ti = 0; ti >= 0 && static_cast<uint32_t>(ti) < T;) {
      if (!(valid[ti] < kInf)) break;
      mask |= 1u << ti;
      const uint32_t tp = prof_.tp_degrees()[ti];
      const uint32_t dp = lay_.size[s] / tp;
      // Even split: at most ⌈b/dp⌉ sequences; DataLB in a mixed stage: at most what the others leave.
      const uint32_t n = lay_.hetero[s] ? std::min(prof_.max_batch(), b_ - (dp - 1)) : (b_ + dp - 1) / dp;
      bool fits = true;
      for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1] && fits; ++i) {
        fits = FitsIn(prof_.DeviceGib(ti, begin, end, dp, n, in_flight), lay_.parts[i].memory_gib);
      }
      if (fits) break;
      ti = prof_.TpIndex(tp * 2);
    }
    return mask;
  }

  // Stage s's DP term of eq. 1 at TP tps[ti] as a function of its blocks x: the ring all-reduce of its
  // gradients per TP rank over the slowest link among its GPUs is dp0 + dp1·x (the parameters of a layer
  // range are affine in its blocks, and so is the all-reduce in its bytes); 0 with one DP replica.
  void StageDpCost(uint32_t s, uint32_t ti, double& dp0, double& dp1) const {
    const uint32_t dp = lay_.size[s] / prof_.tp_degrees()[ti];
    dp0 = dp1 = 0;
    if (dp <= 1) return;
    const uint32_t L = ctx_.L;
    auto range_params = [&](uint32_t x) {
      if (S_ == 1) return prof_.RangeParams(static_cast<int>(ti), 0, L);
      if (s == 0) return prof_.RangeParams(static_cast<int>(ti), 0, 1 + x);
      if (s + 1 == S_) return prof_.RangeParams(static_cast<int>(ti), L - 1 - x, L);
      return prof_.RangeParams(static_cast<int>(ti), 1, 1 + x);
    };
    dp0 = models::RingAllReduceSeconds(range_params(0) * ctx_.wb, dp, lay_.dp_link[s]);
    dp1 = std::max(0.0, models::RingAllReduceSeconds(range_params(1) * ctx_.wb, dp, lay_.dp_link[s]) - dp0);
  }

  void PrepareBound() {
    const uint32_t T = ctx_.tps;
    beta_.assign(size_t{S_} * T, kInf);
    most_lb_.assign(size_t{S_} * T, -1);
    dp0_.assign(size_t{S_} * T, 0);
    dp1_.assign(size_t{S_} * T, 0);
    f_.assign(S_, 0);
    // The cache is larger than the CPU's near caches: fetch every stage's entry before using any.
    auto& keys = scratch_.keys;
    keys.resize(S_);
    for (uint32_t s = 0; s < S_; ++s) {
      const uint64_t in_flight = std::min<uint32_t>(B_, S_ - s);
      keys[s] = {Mix(lay_.sig[s].first, (in_flight << 32) | b_),
                 Mix(lay_.sig[s].second ^ 0x3c3cull, (uint64_t{b_} << 32) | in_flight)};
      __builtin_prefetch(&scratch_.bounds[keys[s].first & (Scratch::kBoundSlots - 1)]);
    }
    for (uint32_t s = 0; s < S_; ++s) {
      const auto [key, check] = keys[s];
      Scratch::StageBound& e = scratch_.bounds[key & (Scratch::kBoundSlots - 1)];
      if (e.key != key || e.check != check || T > e.beta.size()) {
        e.key = key;
        e.check = check;
        e.emb = e.head = kInf;
        for (uint32_t ti = 0; ti < T && ti < e.beta.size(); ++ti) e.beta[ti] = StageKindLB(s, ti, 1);
        const uint32_t reach = ReachableTp(s, e.beta);
        for (uint32_t ti = 0; ti < T && ti < e.beta.size(); ++ti) {
          if (!((reach >> ti) & 1)) e.beta[ti] = kInf;
          e.most[ti] = e.beta[ti] < kInf ? MaxBlocksLB(s, ti) : -1;
          if (e.most[ti] < 0) e.beta[ti] = kInf;  // cannot hold its fewest blocks
          if (!((reach >> ti) & 1)) continue;
          if (s == 0) e.emb = std::min(e.emb, StageKindLB(s, ti, 0));
          if (s + 1 == S_) e.head = std::min(e.head, StageKindLB(s, ti, 2));
          e.dp0[ti] = e.dp1[ti] = 0;
          if (e.beta[ti] < kInf) StageDpCost(s, ti, e.dp0[ti], e.dp1[ti]);
        }
      }
      for (uint32_t ti = 0; ti < T && ti < e.beta.size(); ++ti) {
        beta_[s * T + ti] = e.beta[ti];
        most_lb_[s * T + ti] = e.most[ti];
        dp0_[s * T + ti] = e.dp0[ti];
        dp1_[s * T + ti] = e.dp1[ti];
      }
      if (s == 0) f_[s] += e.emb < kInf ? e.emb : 0;
      if (s + 1 == S_) f_[s] += e.head < kInf ? e.head : 0;
      if (s + 1 < S_) f_[s] += lay_.pp_hop_s[s];
      if (s > 0) f_[s] += lay_.pp_hop_s[s - 1];
    }
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

  uint32_t FirstTp(uint32_t j, uint32_t s, const State& st) const {
    return j <= s ? static_cast<uint32_t>(prof_.TpIndex(st.tp[j])) : 0;
  }
  uint32_t LastTp(uint32_t j, uint32_t s, const State& st) const { return j < s ? FirstTp(j, s, st) + 1 : ctx_.tps; }

  BoundTerms Terms(uint32_t s, const State& st) const {
    const uint32_t T = ctx_.tps;
    const uint32_t blocks = ctx_.blocks;
    BoundTerms out;
    double sum_f = 0, sum_x = 0;
    uint64_t room = 0, rest = blocks;
    auto& fill = scratch_.fill;  // (β, blocks above the fewest that memory allows) per stage
    fill.clear();
    for (uint32_t j = 0; j < S_; ++j) {
      const uint32_t lo = S_ == 1 ? blocks : (j == 0 || j + 1 == S_) ? 0 : 1;
      double floor_j = kInf, best_beta = kInf, floor_d = kInf;
      int32_t most = -1;
      for (uint32_t ti = FirstTp(j, s, st); ti < LastTp(j, s, st); ++ti) {
        const double bj = beta_[j * T + ti];
        if (!(bj < kInf)) continue;
        most = std::max(most, most_lb_[j * T + ti]);
        floor_j = std::min(floor_j, f_[j] + lo * bj);
        best_beta = std::min(best_beta, bj);
        out.hi_t = std::max(out.hi_t, f_[j] + blocks * bj);
        floor_d = std::min(floor_d, dp0_[j * T + ti] + lo * dp1_[j * T + ti]);
        out.hi_d = std::max(out.hi_d, dp0_[j * T + ti] + blocks * dp1_[j * T + ti]);
      }
      if (most < static_cast<int32_t>(lo)) {
        out.feasible = false;
        return out;
      }
      room += static_cast<uint32_t>(most);
      sum_f += f_[j];
      sum_x += lo * best_beta;
      rest -= lo;
      out.lo_t = std::max(out.lo_t, floor_j);
      out.lo_d = std::max(out.lo_d, floor_d);
      if (static_cast<uint32_t>(most) > lo) fill.emplace_back(best_beta, static_cast<uint32_t>(most) - lo);
    }
    if (room < blocks) {
      out.feasible = false;
      return out;
    }
    std::sort(fill.begin(), fill.end());
    for (size_t i = 0; i < fill.size() && rest > 0; ++i) {
      const uint64_t take = std::min<uint64_t>(rest, fill[i].second);
      sum_x += take * fill[i].first;
      rest -= take;
    }
    out.rest = sum_f + sum_x;
    return out;
  }

  // Σ_j capT_j(t).
  double CapacityT(uint32_t s, const State& st, double t) const {
    const uint32_t T = ctx_.tps;
    double total = 0;
    for (uint32_t j = 0; j < S_; ++j) {
      double c = 0;
      for (uint32_t ti = FirstTp(j, s, st); ti < LastTp(j, s, st); ++ti) {
        const double bj = beta_[j * T + ti];
        if (!(bj < kInf)) continue;
        c = std::max(c, std::min<double>(most_lb_[j * T + ti], std::max(0.0, (t - f_[j]) / bj)));
      }
      total += c;
    }
    return total;
  }

  // Σ_j capD_j(d).
  double CapacityD(uint32_t s, const State& st, double d) const {
    const uint32_t T = ctx_.tps;
    const double blocks = ctx_.blocks;
    double total = 0;
    for (uint32_t j = 0; j < S_; ++j) {
      double c = 0;
      for (uint32_t ti = FirstTp(j, s, st); ti < LastTp(j, s, st); ++ti) {
        if (!(beta_[j * T + ti] < kInf)) continue;
        const double d0 = dp0_[j * T + ti], d1 = dp1_[j * T + ti];
        const double fit = d1 > 0 ? std::max(0.0, (d - d0) / d1) : d >= d0 ? blocks : 0.0;
        c = std::max(c, std::min<double>(most_lb_[j * T + ti], fit));
      }
      total += c;
    }
    return total;
  }

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
  double Bound(uint32_t s, const State& st) const {
    const BoundTerms terms = Terms(s, st);
    if (!terms.feasible) return kInf;
    const double t_star = B_ > 1 ? Least(terms.lo_t, terms.hi_t, [&](double t) { return CapacityT(s, st, t); }) : 0;
    const double d_star = Least(terms.lo_d, terms.hi_d, [&](double d) { return CapacityD(s, st, d); });
    return ((static_cast<double>(B_) - 1) * t_star + terms.rest + d_star) * (1 - 1e-9);
  }

  // Whether Bound(s, st) > incumbent, decided with as few capacity sums as possible: T* > t ⟺ capT(t) <
  // blocks (capT does not decrease), so a point test against what the incumbent leaves for T* (with D*
  // at its floor) or for D* (with T* at its floor) settles most cases without a bisection.
  bool Exceeds(uint32_t s, const State& st, double incumbent) const {
    if (!(incumbent < kInf)) return false;
    const BoundTerms terms = Terms(s, st);
    if (!terms.feasible) return true;
    const double blocks = ctx_.blocks;
    const double w = static_cast<double>(B_) - 1;
    const double room = incumbent / (1 - 1e-9) - terms.rest;  // what (B − 1)·T* + D* must stay within
    if (w * terms.lo_t + terms.lo_d > room) return true;
    if (w > 0 && CapacityT(s, st, (room - terms.lo_d) / w) < blocks) return true;
    if (CapacityD(s, st, room - w * terms.lo_t) < blocks) return true;
    if (w == 0) return false;
    const double t_star = Least(terms.lo_t, terms.hi_t, [&](double t) { return CapacityT(s, st, t); });
    return CapacityD(s, st, room - w * t_star) < blocks;
  }

  double Incumbent() const { return std::min(incumbent_, best_); }

  // Lines 24–44.
  void Dfs(uint32_t s, State st) {
    // The time limit: the plans already emitted stay (the best of them is returned).
    if (cut_ || (deadline_ != nullptr && deadline_->Passed(*ticks_))) {
      cut_ = true;
      return;
    }
    // Both branches of lines 30–43 can succeed at every stage that runs out of memory, so the DFS is
    // exponential in such stages; it visits at most max_dfs_nodes nodes per (assignment, B).
    if (++nodes_ > ctx_.knobs.max_dfs_nodes) {
      if (nodes_ == ctx_.knobs.max_dfs_nodes + 1) ++counters_.truncated;
      return;
    }
    if (s == S_) {
      Emit(st);
      return;
    }
    if (Invalid(s, st)) {  // line 26: a partial plan, dropped at line 20
      ++counters_.invalid;
      return;
    }
    if (Oom(s, st)) {
      // Lines 30–36: increase TP (and lower DP), rebalance data and layers, and search this stage again.
      if (prof_.TpIndex(st.tp[s] * 2) >= 0) {
        State up = st;
        up.tp[s] *= 2;
        DataLB(s, up, /*memory=*/true);
        if (LayerLB(up, s)) Dfs(s, std::move(up));
      }
      // Lines 38–41: restore, and move layers of this stage to the others in proportion to their capacity.
      if (!LayerLB(st, s + 1) || Oom(s, st)) {
        ++counters_.oom;
        RecordMiss(s, st);
        return;
      }
    }
    Dfs(s + 1, std::move(st));  // lines 42–43
  }

  void RecordMiss(uint32_t s, const State& st) {
    Miss m;
    m.shortfall_gib = -kInf;
    if (!OomAt(s, st, st.begin[s], st.begin[s + 1], &m) || !counters_.misses.Wants(m.shortfall_gib)) return;
    m.what = std::to_string(S_) + " stages, B=" + std::to_string(B_) + ": stage " + std::to_string(s) + " (" +
             std::to_string(lay_.size[s]) + " GPUs, tp " + std::to_string(st.tp[s]) + ", layers " +
             std::to_string(st.begin[s]) + "-" + std::to_string(st.begin[s + 1] - 1) + ")";
    counters_.misses.Add(std::move(m));
  }

  // Lines 18–22: a complete plan, costed with eq. 1.
  void Emit(const State& st) {
    for (uint32_t s = 0; s < S_; ++s) {
      if (Invalid(s, st) || Oom(s, st)) {  // a later rebalance overfilled an earlier stage
        ++counters_.oom;
        return;
      }
    }
    ++counters_.evaluated;
    const double c = Cost(st);
    if (c < best_) {
      best_ = c;
      best_state_ = st;
    }
  }

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
  // The bound (in scratch_, reused): β [stage][tp], f [stage], the blocks a stage's memory can hold at
  // most [stage][tp], and StageDpCost [stage][tp].
  std::vector<double>& beta_ = scratch_.beta;
  std::vector<double>& f_ = scratch_.f;
  std::vector<int32_t>& most_lb_ = scratch_.most;
  std::vector<double>& dp0_ = scratch_.dp0;
  std::vector<double>& dp1_ = scratch_.dp1;
  Deadline* deadline_ = nullptr;
  uint32_t* ticks_ = nullptr;
  bool cut_ = false;
};

// Stage s's devices: GPUs of each node handed out in stage order.
std::vector<std::vector<uint32_t>> StageDevices(const models::Cluster& cluster, const Placement& pl) {
  std::vector<uint32_t> used(cluster.nodes().size(), 0);
  std::vector<std::vector<uint32_t>> out(pl.stage_begin.size() - 1);
  for (size_t s = 0; s + 1 < pl.stage_begin.size(); ++s) {
    for (uint32_t i = pl.stage_begin[s]; i < pl.stage_begin[s + 1]; ++i) {
      const auto [n, k] = pl.parts[i];
      for (uint32_t j = 0; j < k; ++j) out[s].push_back(cluster.nodes()[n].first_device + used[n]++);
    }
  }
  return out;
}

proto::Plan BuildPlan(const models::Cluster& cluster, const Placement& pl, const Layout& lay, const State& st,
                      uint32_t b, uint32_t B, uint32_t zero) {
  proto::Plan plan;
  plan.set_zero_stage(zero);
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(b);
  pipe->set_num_micro_batches(B);
  const auto devices = StageDevices(cluster, pl);
  bool any_tp = false;
  for (uint32_t s = 0; s < lay.S; ++s) {
    auto* ps = pipe->add_stages();
    for (uint32_t d : devices[s]) ps->add_devices(d);
    if (st.tp[s] > 1) {
      ps->set_tp_degree(st.tp[s]);
      any_tp = true;
    }
    const uint32_t dp = lay.size[s] / st.tp[s];
    if (dp > 1) {
      for (uint32_t r = 0; r < dp; ++r) ps->add_micro_batch_split(st.split[lay.slot[s] + r]);
    }
    ps->set_layer_begin(st.begin[s]);
    ps->set_layer_end(st.begin[s + 1]);
  }
  if (any_tp) plan.set_sequence_parallel(true);
  return plan;
}

// The best plan of one worker: ordered by (cost, unit, ordinal) so that the result does not depend on
// how the units are spread over threads.
struct Best {
  double cost = kInf;
  uint64_t unit = UINT64_MAX, ordinal = UINT64_MAX;
  std::optional<proto::Plan> plan;
  bool Better(double c, uint64_t u, uint64_t o) const { return std::tie(c, u, o) < std::tie(cost, unit, ordinal); }
};

// Whether micro-batch b can give every DP replica of a stage of k GPUs 1..max sequences at TP 1 (the
// check at the top of Evaluator::Run, for a whole size multiset at once).
bool BatchFits(const std::vector<uint32_t>& sizes, uint32_t b, uint32_t max_batch) {
  for (uint32_t k : sizes) {
    if (b < k || (b + k - 1) / k > max_batch) return false;
  }
  return true;
}

// A work unit of the search: one stage count S and one multiset of stage sizes, with every order of the
// sizes (§4.2.2 1)), every stage-device assignment of each order and every micro-batch count in Bs.
struct Unit {
  uint32_t S;
  std::vector<uint32_t> sizes;
  std::vector<uint32_t> Bs;  // the micro-batch counts every stage of these sizes can be valid with
};

// "8-14, 29, 31" for sorted, distinct values.
std::string Ranges(const std::vector<uint32_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(values[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(values[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

// Seconds with 4 significant digits ("120", "0.0121").
std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", s);
  return buf;
}

// What a search that the time limit cut covered: the units whose first stage-size order was probed, the
// units finished, by stage count, and the micro-batch counts tried. Per unit: `probed`, and `state`
// (0 not started, 1 started, 2 finished).
std::string CoverageNote(const std::vector<Unit>& units, const std::vector<uint8_t>& probed,
                         const std::vector<uint8_t>& state, const std::vector<uint32_t>& micro_batch_counts) {
  std::map<uint32_t, std::array<uint32_t, 3>> by_stages;  // S -> units, started, finished
  std::set<uint32_t> tried;
  size_t finished = 0, probes = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    auto& n = by_stages[units[u].S];
    ++n[0];
    n[1] += state[u] != 0;
    n[2] += state[u] == 2;
    finished += state[u] == 2;
    probes += probed[u] != 0 || state[u] == 2;
    if (state[u] != 0) tried.insert(units[u].Bs.begin(), units[u].Bs.end());
  }
  std::vector<uint32_t> complete, started, none;
  std::string partly;
  for (const auto& [S, n] : by_stages) {
    if (n[2] == n[0]) {
      complete.push_back(S);
    } else if (n[1] == 0) {
      none.push_back(S);
    } else if (n[2] == 0) {
      started.push_back(S);
    } else {
      partly += (partly.empty() ? "" : ", ") + std::to_string(S) + " (" + std::to_string(n[2]) + " of " +
                std::to_string(n[0]) + ")";
    }
  }
  std::string bs;
  for (uint32_t B : micro_batch_counts) {
    if (tried.count(B)) bs += (bs.empty() ? "" : ", ") + std::to_string(B);
  }
  return "it probed the first stage-size order of " + std::to_string(probes) + " of " +
         std::to_string(units.size()) + " work units (a unit: a stage count and a stage-size multiset) and " +
         "searched " + std::to_string(finished) +
         " units completely (every order, stage-device assignment and micro-batch count), best probe first; "
         "stage counts searched completely: " +
         Ranges(complete) + "; partly (units finished of all): " + (partly.empty() ? "none" : partly) +
         "; probed or started only: " + Ranges(started) + "; not reached: " + Ranges(none) +
         "; micro-batch counts B tried: " + (bs.empty() ? "none" : bs) +
         " (of the " + std::to_string(micro_batch_counts.size()) + " divisors of the global batch)";
}

}  // namespace

std::optional<std::vector<uint32_t>> ProportionalBlocks(uint32_t blocks, const std::vector<double>& capacity,
                                                        const std::vector<double>& fixed_load, double block_load,
                                                        const std::vector<uint32_t>& max_blocks) {
  Scratch scratch;
  std::vector<uint32_t> out;
  if (!ProportionalBlocksInto(blocks, capacity, fixed_load, block_load, max_blocks, scratch, out)) return std::nullopt;
  return out;
}

std::optional<std::vector<uint32_t>> DataSplit(uint32_t total, const std::vector<double>& throughput,
                                               const std::vector<uint32_t>& caps) {
  return ProportionalSplit(total, throughput, caps);
}

Result<SearchResult> Search(const PlanningProblem& problem, const Knobs& knobs, SearchStats& stats) {
  Deadline deadline(knobs.time_limit_s, knobs.clock_s);
  const Profiler prof(problem, knobs);
  const Context ctx(problem, knobs, prof);
  const auto& cluster = problem.cluster;
  const NodeLinks links(cluster, prof.topology());
  const uint32_t N = cluster.num_devices();
  const uint32_t G = problem.training.global_batch_size();
  uint32_t max_stages = std::min(N, prof.layers());
  if (knobs.max_stages > 0) max_stages = std::min(max_stages, knobs.max_stages);
  const std::vector<uint32_t>& classes = prof.classes();

  SearchResult result;
  // §4.1's full space when it is small enough; otherwise consecutive GPUs over every node-class order.
  result.full_space = CountFullAssignments(cluster, classes, knobs, max_stages, knobs.max_full_assignments) <=
                      knobs.max_full_assignments;
  const std::vector<std::vector<uint32_t>> node_orders =
      result.full_space ? std::vector<std::vector<uint32_t>>{} : NodeOrders(cluster, classes);
  // Line 4: every number of micro-batches B that divides the global batch ("we keep the global batch size
  // while exploring the micro-batch sizes").
  const std::vector<uint32_t> micro_batch_counts = Divisors(G);

  // Work units: (stage count, size multiset), in order; workers take them one at a time.
  std::vector<Unit> units;
  std::vector<size_t> unit_order;
  uint64_t multisets = 0;
  for (uint32_t S = 1; S <= max_stages; ++S) {
    for (auto& ms : StageSizeMultisets(N, S, knobs.var, !knobs.any_group_size)) {
      ++multisets;
      Unit u{S, std::move(ms), {}};
      for (uint32_t B : micro_batch_counts) {
        if (BatchFits(u.sizes, G / B, prof.max_batch())) u.Bs.push_back(B);
      }
      if (!u.Bs.empty()) units.push_back(std::move(u));
    }
  }

  // The order of work (not in the paper; the plan does not depend on it: ties between plans of equal cost
  // go to the earlier unit and assignment of the canonical order, Best::Better). It decides how soon a
  // good plan is found, which matters twice: the exact cut skips more once the incumbent is good, and
  // under time_limit_s the search returns whatever it has found. The canonical order (S = 1, 2, …) would
  // spend a limit on the first stage counts — at 240 GPUs those whose few large stages cross nodes, so
  // that their DP all-reduce runs over Ethernet — and so would an order by the lower bound alone, which
  // lets every stage take any TP degree it could reach and so underrates those DP all-reduces. So:
  //   1. probe: the first stage-size order of every unit, with every stage-device assignment and B (a
  //      small slice of each unit: its other orders permute the same sizes), units in order of the
  //      lower bound of their first assignment;
  //   2. the remaining orders of each unit, units in order of the best plan their probe found (units
  //      whose probe found none last, still by their bound).
  // Ordinals number a unit's evaluations in the canonical order across both phases.
  {
    uint32_t ticks = 0;
    Layout lay;
    Scratch scratch;
    Counters scratch_counters;
    std::vector<double> priority(units.size(), kInf);
    for (size_t u = 0; u < units.size() && !deadline.Passed(ticks); ++u) {
      const auto orders = StageSizeOrders(units[u].sizes, 1);  // the sizes in one order: cheap
      ForEachPlacement(cluster, classes, orders.front(), result.full_space, node_orders, [&](const Placement& pl) {
        MakeLayout(cluster, prof, links, ctx.boundary_bytes, pl, lay);
        for (uint32_t B : units[u].Bs) {
          Evaluator ev(ctx, lay, B, scratch_counters, scratch);
          priority[u] = std::min(priority[u], ev.RootBound());
        }
        return false;
      });
    }
    for (size_t u = 0; u < units.size(); ++u) unit_order.push_back(u);
    std::stable_sort(unit_order.begin(), unit_order.end(),
                     [&](size_t a, size_t b) { return priority[a] < priority[b]; });
  }

  // Per unit: how far it got (0 not started, 1 probed or started, 2 finished), its probe's best cost, and
  // the evaluations its probe numbered.
  std::vector<uint8_t> unit_state(units.size(), 0);
  std::vector<uint8_t> probed(units.size(), 0);
  std::vector<double> probe_cost(units.size(), kInf);
  std::vector<uint64_t> probe_evaluations(units.size(), 0);
  std::atomic<double> shared_best{kInf};  // the best cost any worker has found: a valid incumbent for all
  std::mutex mu;
  Best best;
  Counters total;
  std::vector<Miss> all_misses;
  // Runs `phase` (0: probe, 1: the rest) of units unit_order[0..] on `threads` workers.
  auto run_phase = [&](int phase, uint32_t threads) {
    std::atomic<size_t> next{0};
    auto worker = [&] {
      Counters counters;
      Best mine;
      Layout lay;
      Scratch scratch;
      uint32_t my_ticks = 0;
      while (!deadline.Passed(my_ticks)) {
        const size_t i = next++;
        if (i >= units.size()) break;
        const size_t u = unit_order[i];
        if (unit_state[u] == 2) continue;  // each unit is taken by one worker per phase; read after joins
        unit_state[u] = 1;
        bool cut = false;
        uint64_t ordinal = phase == 0 ? 0 : probe_evaluations[u];
        uint64_t order_index = 0;
        double unit_best = kInf;
        bool more_orders = false;
        ForEachStageSizeOrder(units[u].sizes, knobs.max_permutation_length, [&](const std::vector<uint32_t>& order) {
          if (order_index++ != 0) {
            if (phase == 0) {
              more_orders = true;
              return false;
            }
          } else if (phase == 1) {
            return true;  // the probe's
          }
          ++counters.orders;
          ForEachPlacement(cluster, classes, order, result.full_space, node_orders, [&](const Placement& pl) {
            ++counters.assignments;
            MakeLayout(cluster, prof, links, ctx.boundary_bytes, pl, lay);
            for (uint32_t B : units[u].Bs) {
              // Algorithm 1's loops (line 4) stop at the time limit: checked once per (assignment, B).
              if (deadline.Passed(my_ticks)) {
                cut = true;
                break;
              }
              Evaluator ev(ctx, lay, B, counters, scratch, std::min(mine.cost, shared_best.load()), &deadline,
                           &my_ticks);
              const double c = ev.Run();
              cut |= ev.cut();
              const uint64_t o = ordinal++;
              if (!(c < kInf) || !mine.Better(c, u, o)) continue;
              proto::Plan plan = BuildPlan(cluster, pl, lay, ev.best_state(), ev.micro_batch(), B, knobs.zero_stage);
              // §4.3's estimate agrees with hetsim's memory arithmetic; check all the same, so that the plan
              // always validates.
              if (!CheckMemory(plan, problem, prof.memory()).fits) {
                ++counters.oom;
                continue;
              }
              unit_best = std::min(unit_best, c);
              mine.cost = c;
              mine.unit = u;
              mine.ordinal = o;
              mine.plan = std::move(plan);
              double seen = shared_best.load();
              while (c < seen && !shared_best.compare_exchange_weak(seen, c)) {
              }
            }
            return !cut;
          });
          return !cut;
        });
        if (phase == 0) {
          probe_evaluations[u] = ordinal;
          probe_cost[u] = unit_best;
          probed[u] = !cut;
        }
        if (!cut && (phase == 1 || !more_orders)) unit_state[u] = 2;
      }
      std::lock_guard<std::mutex> lock(mu);
      if (mine.plan && best.Better(mine.cost, mine.unit, mine.ordinal)) best = std::move(mine);
      total.evaluated += counters.evaluated;
      total.invalid += counters.invalid;
      total.oom += counters.oom;
      total.truncated += counters.truncated;
      total.pruned += counters.pruned;
      total.assignments += counters.assignments;
      total.orders += counters.orders;
      for (auto& m : counters.misses.top) all_misses.push_back(std::move(m));
    };
    if (threads == 1) {
      worker();
    } else {
      std::vector<std::thread> pool;
      for (uint32_t t = 0; t < threads; ++t) pool.emplace_back(worker);
      for (auto& t : pool) t.join();
    }
  };
  const uint32_t threads = std::max<uint32_t>(1, std::min<uint32_t>(knobs.threads, 64));
  run_phase(0, threads);
  // A unit's probe cost is an upper bound on its best plan, a good guess at how good its other orders are.
  std::stable_sort(unit_order.begin(), unit_order.end(),
                   [&](size_t a, size_t b) { return probe_cost[a] < probe_cost[b]; });
  run_phase(1, threads);

  stats.candidates_evaluated += total.evaluated;
  if (multisets > units.size()) {
    stats.Reject("stage sizes that no micro-batch count fits (each DP replica needs 1 to max_profiled_batch_size "
                 "sequences)",
                 multisets - units.size());
  }
  if (total.invalid) {
    stats.Reject("InvalidIntraPlan (Alg. 1 l. 26): a DP replica gets no sequence or more than max_profiled_batch_size",
                 total.invalid);
  }
  if (total.oom) stats.Reject("out of memory after raising TP and moving layers (Alg. 1 l. 29-41)", total.oom);
  if (total.truncated) stats.Reject("DFS stopped at its node budget", total.truncated);
  if (total.pruned) {
    stats.Reject("cut by a lower bound on eq. 1 above the best plan so far (exact; not in the paper)", total.pruned);
  }
  result.assignments = total.assignments;
  result.size_orders = total.orders;
  char var[32];
  std::snprintf(var, sizeof var, "%g", knobs.var);
  stats.notes.push_back(std::to_string(multisets) + " stage-size multisets (var " + var + "), " +
                        std::to_string(total.orders) + " orders (max permutation length " +
                        std::to_string(knobs.max_permutation_length) + "), " + std::to_string(total.assignments) +
                        " stage-device assignments (" +
                        (result.full_space ? std::string("§4.1 full space")
                                           : "consecutive GPUs over " + std::to_string(node_orders.size()) +
                                                 " node orders") +
                        "), " + std::to_string(micro_batch_counts.size()) + " micro-batch counts");
  std::string coverage;
  if (deadline.passed()) {
    result.cut_by_time_limit = true;
    coverage = CoverageNote(units, probed, unit_state, micro_batch_counts);
    const std::string elapsed = FormatSeconds(deadline.ElapsedSeconds());
    if (best.plan) {
      stats.notes.push_back("search cut by the time limit (time_limit_s: " + FormatSeconds(knobs.time_limit_s) +
                            ") after " + elapsed +
                            " s: the plan is the best found so far, not the result of Metis's complete search; " +
                            coverage);
    } else {
      return Status::Infeasible("metis: no plan found before the time limit (time_limit_s: " +
                                FormatSeconds(knobs.time_limit_s) + ") cut the search after " + elapsed +
                                " s on cluster '" + cluster.name() + "' (" + std::to_string(N) +
                                " GPUs) for model '" + problem.model.name() + "'; " + coverage +
                                "\n  raise time_limit_s in the planner's options (0 = no limit)");
    }
  }
  if (!best.plan) {
    if (!all_misses.empty()) {
      std::sort(all_misses.begin(), all_misses.end(), [](const Miss& a, const Miss& b) {
        return std::tie(a.shortfall_gib, a.what) < std::tie(b.shortfall_gib, b.what);
      });
      InfeasibleTracker tracker;
      for (const Miss& m : all_misses) tracker.Offer(m.what, m.need_gib, m.capacity_gib, m.device);
      return tracker.ToStatus("metis", problem, stats);
    }
    return NothingFound("metis", problem, stats,
                        "Metis needs a stage count and micro-batch count where every DP replica gets 1 to "
                        "max_profiled_batch_size sequences");
  }
  result.plan = std::move(best.plan);
  result.cost_s = best.cost;
  return result;
}

std::optional<std::pair<proto::Plan, double>> PlanAssignment(const PlanningProblem& problem, const Knobs& knobs,
                                                             const Assignment& assignment, uint32_t micro_batches) {
  const Profiler prof(problem, knobs);
  const Context ctx(problem, knobs, prof);
  const NodeLinks links(problem.cluster, prof.topology());
  const Placement pl = ToPlacement(assignment);
  Layout lay;
  MakeLayout(problem.cluster, prof, links, ctx.boundary_bytes, pl, lay);
  Counters counters;
  Scratch scratch;
  Evaluator ev(ctx, lay, micro_batches, counters, scratch);
  const double c = ev.Run();
  if (!(c < kInf)) return std::nullopt;
  return std::make_pair(BuildPlan(problem.cluster, pl, lay, ev.best_state(), ev.micro_batch(), micro_batches,
                                  knobs.zero_stage),
                        c);
}

double PlanCost(const PlanningProblem& problem, const Knobs& knobs, const proto::Plan& plan) {
  const Profiler prof(problem, knobs);
  const Context ctx(problem, knobs, prof);
  const NodeLinks links(problem.cluster, prof.topology());
  const auto& pipe = plan.pipelines(0);
  const uint32_t N = static_cast<uint32_t>(problem.cluster.nodes().size());
  Assignment a;
  State st;
  for (const auto& stage : pipe.stages()) {
    Take t(N, 0);
    for (uint32_t d : stage.devices()) ++t[problem.cluster.device(d).node];
    a.push_back(t);
    st.tp.push_back(models::TpDegree(stage));
    for (uint32_t n : models::MicroBatchSplit(stage, pipe.micro_batch_size())) st.split.push_back(n);
    // Pad the stage's slot (its GPUs at TP 1) after its replicas.
    for (uint32_t r = models::DpDegree(stage); r < static_cast<uint32_t>(stage.devices_size()); ++r) st.split.push_back(0);
    const bool first = stage.layer_begin() == 0, last = stage.layer_end() == prof.layers();
    st.blocks.push_back(stage.layer_end() - stage.layer_begin() - (first ? 1 : 0) - (last ? 1 : 0));
  }
  const Placement pl = ToPlacement(a);
  Layout lay;
  MakeLayout(problem.cluster, prof, links, ctx.boundary_bytes, pl, lay);
  Evaluator::SetBegins(lay, st);
  Counters counters;
  Scratch scratch;
  Evaluator ev(ctx, lay, pipe.num_micro_batches(), counters, scratch);
  return ev.Cost(st);
}

}  // namespace hetsim::planners::metis
