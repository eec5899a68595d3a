#pragma once
// The analytic player's internals (planners/lowering_cost.h is the interface), shared by its three files
// only: lowering_programs.cc turns a lowering into priced programs (the simulator's folding decision, the
// compute and collective prices, the message streams); lowering_game.cc plays them once as a dependency
// graph and measures the link sharing a play saw (the contention passes); lowering_cost.cc is the player
// (plays, contention passes, extrapolation of long pipelines).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "models/engine_rules.h"
#include "models/fold.h"
#include "models/lowering.h"
#include "models/platform_routes.h"
#include "planners/lowering_cost.h"

namespace hetsim::planners::play {

using models::Algorithm;
using models::Category;
using models::CollectiveKind;
using models::Route;

constexpr double kUnknown = -1;         // a time not known yet (times are ≥ 0)
using models::kMaxPendingSends;  // the engine's Reap (models/engine_rules.h)

// ---- the programs ----------------------------------------------------------------------------------------

enum class Kind : uint8_t {
  kCompute,
  kComputeAsync,  // start compute and go on (comm.tp_overlap)
  kComputeJoin,   // wait for it
  kSend,
  kRecv,
  kPostRecv,
  kCollective,
  kSignal,
  kAwait,
  kJoin,
  kWaitSends,
  kTransfer,  // a host copy beside the pass's compute (training.activation_offload_layers): its seconds, not compute
};

struct POp {
  Kind kind = Kind::kCompute;
  Category category = Category::kForward;
  CollectiveKind collective = CollectiveKind::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  uint16_t micro_batch = 0;
  uint32_t ref = 0;    // send / receive: message stream; collective: group
  uint32_t rank = 0;   // collective: the device's rank in the group
  double seconds = 0;  // compute; collective: the call's fixed latency α
  double bytes = 0;    // transfer bytes (collective: the buffer S over the collective efficiency)
  float hide_share = 0;  // TP collective behind the backward's GEMMs (models::Op::hide_share)
  // Collective: models::Op::sm_share; kComputeAsync: the largest of the collectives it hides.
  float sm_share = 0;
};

struct Program {
  uint32_t device = 0;
  const models::GpuSpec* gpu = nullptr;
  uint32_t pipeline = 0, stage = 0;
  std::vector<POp> main, dp;
};

// A message stream: the messages one device sends another on one channel, matched in order.
struct Stream {
  uint32_t src = 0, dst = 0;          // devices
  uint32_t src_slot = 0, dst_slot = 0;
  uint8_t channel = 0;
  bool staged = false;                // through host memory (HetHub §3.1): a stager per stream
  Route route;                        // GPU to GPU
  Route g2h, h2h, notice, h2g;        // staged: the stager's copies, its notice, the receiver's copy
  // Folded runs: per link of its route, the flows of the stream and of its folded copies on it (only links
  // with copies); the contention passes count each flow of the stream that many times there.
  std::vector<std::pair<uint32_t, uint32_t>> twins;
  uint32_t max_early = 1;             // the most receives posted ahead (context parallelism)
};

// Flow keys: a point-to-point message (stream, sequence, leg) or a collective member's flow (group,
// instance, rank, sub-flow). Keys identify the same flow in every play of one lowering.
inline uint64_t P2pKey(uint32_t stream, uint32_t seq, uint32_t leg) {
  return (uint64_t{1} << 63) | ((uint64_t{stream} & 0x3FFFFFFF) << 33) | ((uint64_t{seq} & 0x3FFFFFFF) << 3) | leg;
}
inline uint64_t CollKey(uint32_t group, uint32_t inst, uint32_t rank, uint32_t sub) {
  return ((uint64_t{group} & 0x3FFFFF) << 41) | ((uint64_t{inst} & 0x3FFFF) << 23) | ((uint64_t{rank} & 0xFFFF) << 7) |
         (sub & 0x7F);
}
// A source of flows (kUpperBound): a stream's leg, or a collective member's sub-flow (any instance).
inline uint64_t P2pSource(uint32_t stream, uint32_t leg) { return P2pKey(stream, 0, leg); }
inline uint64_t CollSource(uint32_t group, uint32_t rank, uint32_t sub) { return CollKey(group, 0, rank, sub); }

// A ring member's hop to its successor (sim/engine_collectives.cc Exchange and StripeOverRails).
struct Hop {
  bool ready = false;
  uint32_t prev = 0, next = 0;  // ranks
  Route to_next;
  double fraction = 1;          // of the step's bytes on the member's own flow
  std::vector<std::pair<uint32_t, uint32_t>> stripes;  // (from, to) devices of the other rails' flows
  std::vector<Route> stripe_routes;
  bool staged_send = false, staged_recv = false;
  Route g2h, h2h, notice, h2g;  // staged: this member's copies and notice to its successor, its own copy back
};

struct Group {
  const std::vector<uint32_t>* members = nullptr;
  std::vector<Hop> hops[2];  // per rank: without (NVLS) and with rail striping
  bool folded = false;       // fold mode: every member folds onto one played device
  std::vector<uint32_t> family;  // fold mode: the groups folded onto it (itself first)
};


// The ring flows of one step of every member of `g` (rail striping as the engine's RingFlows): (from, to,
// fraction).
struct RingFlow {
  uint32_t from, to;
  double fraction;
};
std::vector<RingFlow> RingFlows(const std::vector<uint32_t>& g, const models::PlatformRoutes& routes, bool stripe);
// The flows of a direct all-to-all over `g` (the engine's AllToAllFlows): every member to every other, 1/n of
// the buffer each.
std::vector<RingFlow> AllToAllFlows(const std::vector<uint32_t>& g);
double FluidMakespan(const std::vector<std::pair<Route, double>>& flows, const models::PlatformRoutes& routes);

// ---- folding (the simulator's decision: models/fold.h) ------------------------------------------------

using Fold = models::RankFold;

// ---- the programs with their prices ---------------------------------------------------------------------

struct Setup {
  const models::Lowering* lw = nullptr;
  const models::PlatformRoutes* routes = nullptr;
  Pricing pricing = Pricing::kSimulator;
  bool folded = false;
  const Fold* fold = nullptr;     // when folded
  std::vector<char> played;       // per slot
  std::vector<Program> programs;  // per slot (empty where not played)
  std::vector<Stream> streams;
  std::vector<Group> groups;
  std::vector<uint32_t> link_sources;  // per directed link: distinct flow sources (kUpperBound)
  uint32_t max_link_sources = 0;
  uint64_t operations = 0;
  // Per group, step bytes, flows (0 NVLS, 1 ring, 2 all-to-all) and contention: a folded collective's price
  // (the flows launched together).
  std::map<std::tuple<uint32_t, double, uint8_t, bool>, double> folded_price;

  const std::vector<uint32_t>& Members(uint32_t g) const { return *groups[g].members; }
  bool Staged(uint32_t node_a, uint32_t node_b) const {
    if (node_a == node_b) return false;
    return staged_all || (!staged_groups.empty() && staged_groups[size_t{node_group[node_a]} * num_groups +
                                                                  node_group[node_b]] != 0);
  }
  bool staged_all = false;
  std::vector<uint8_t> staged_groups;
  std::vector<uint32_t> node_group;
  uint32_t num_groups = 0;

  // The hop of rank r of group g to its successor (computed once).
  const Hop& HopOf(uint32_t g, uint32_t r, bool stripe) {
    auto& hops = groups[g].hops[stripe ? 1 : 0];
    const auto& m = Members(g);
    if (hops.empty()) hops.resize(m.size());
    Hop& h = hops[r];
    if (h.ready) return h;
    const uint32_t n = static_cast<uint32_t>(m.size());
    h.ready = true;
    h.next = (r + 1) % n;
    h.prev = (r + n - 1) % n;
    const uint32_t self = m[r], to = m[h.next], from = m[h.prev];
    h.to_next = routes->GpuToGpu(self, to);
    const uint32_t here = routes->NodeOf(self), there = routes->NodeOf(to);
    h.staged_send = Staged(here, there);
    h.staged_recv = Staged(routes->NodeOf(from), here);
    if (h.staged_send) {
      h.g2h = routes->GpuToHost(self);
      h.h2h = routes->HostToHost(here, there);
      h.notice = h.to_next;  // the zero-byte notice goes from the GPU's own actor (sim/engine_collectives.cc StagedSend)
    }
    if (h.staged_recv) h.h2g = routes->HostToGpu(self);
    if (stripe && here != there && !h.staged_send && !h.staged_recv) {
      std::vector<uint32_t> mine, theirs;
      for (uint32_t d : m) {
        if (routes->NodeOf(d) == here && d != self) mine.push_back(d);
        if (routes->NodeOf(d) == there && d != to) theirs.push_back(d);
      }
      const size_t extra = std::min(mine.size(), theirs.size());
      h.fraction = 1.0 / static_cast<double>(extra + 1);
      for (size_t i = 0; i < extra; ++i) {
        h.stripes.emplace_back(mine[i], theirs[i]);
        h.stripe_routes.push_back(routes->GpuToGpu(mine[i], theirs[i]));
      }
    }
    return h;
  }
};

// Prices the lowering's played ranks (sim/program.cc Append) and finds its message streams.
void BuildPrograms(const models::Lowering& lw, const models::Cluster& cluster, const ComputeSource& cs,
                   const models::PlatformRoutes& routes, Pricing pricing, proto::Recompute recompute, Setup* s);
// Per directed link, the distinct flow sources that cross it (kUpperBound's K_l).
void CountLinkSources(Setup* s);

// ---- one play -------------------------------------------------------------------------------------------

struct FlowRecord {
  uint64_t key;
  double start, end;  // the whole flow, latency included
  const Route* route;  // stable for the play (a stream's, a hop's, or the play's arena)
  const std::vector<std::pair<uint32_t, uint32_t>>* twins;  // folded copies per link (Stream::twins), or none
};

// Each flow's slowdown by its key: an open-addressing table (power-of-two slots, linear probing, keys
// mixed by splitmix64's finaliser), because the later plays look a slowdown up for every flow they price
// and std::unordered_map's prime modulo and node chasing dominated that (a 4,096-GPU plan's estimate).
// The interface is the part of std::unordered_map the players use; iteration order is unspecified.
class Slowdowns {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // The slowdown of `key`, or nullptr.
  const double* find(uint64_t key) const {
    if (size_ == 0) return nullptr;
    for (size_t i = Slot(key);; i = (i + 1) & mask_) {
      if (!used_[i]) return nullptr;
      if (keys_[i] == key) return &values_[i];
    }
  }
  bool count(uint64_t key) const { return find(key) != nullptr; }
  // The slowdown of `key`, inserted as 0 when absent.
  double& operator[](uint64_t key) {
    if ((size_ + 1) * 4 > keys_.size() * 3) Grow();
    size_t i = Slot(key);
    for (; used_[i]; i = (i + 1) & mask_) {
      if (keys_[i] == key) return values_[i];
    }
    used_[i] = 1;
    keys_[i] = key;
    values_[i] = 0;
    ++size_;
    return values_[i];
  }
  // Calls f(key, value&) for every entry.
  template <typename F>
  void ForEach(F&& f) {
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (used_[i]) f(keys_[i], values_[i]);
    }
  }
  template <typename F>
  void ForEach(F&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (used_[i]) f(keys_[i], values_[i]);
    }
  }

 private:
  size_t Slot(uint64_t key) const {
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return static_cast<size_t>(key) & mask_;
  }
  void Grow() {
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<double> values = std::move(values_);
    std::vector<char> used = std::move(used_);
    const size_t n = keys.empty() ? 64 : keys.size() * 2;
    keys_.assign(n, 0);
    values_.assign(n, 0);
    used_.assign(n, 0);
    mask_ = n - 1;
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (used[i]) (*this)[keys[i]] = values[i];
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<double> values_;
  std::vector<char> used_;
  size_t mask_ = 0, size_ = 0;
};


// What one device's play adds up to.
struct GameStats {
  double forward_s = 0, backward_s = 0, optimizer_s = 0, tp_s = 0, pipeline_end_s = 0, end_s = 0;
};

// One play of the programs as a dependency graph: without `slow`, every flow alone on its route; with it,
// each flow slowed by the sharing the previous play saw (`contention`). `record`: keep the flows (for
// Contention). `trace`: keep every operation's span.
class Game {
 public:
  Game(Setup& s, const Slowdowns* slow, bool contention, bool record,
       std::vector<std::vector<PlayResult::Span>>* trace = nullptr);
  ~Game();
  Status Run();
  const std::vector<GameStats>& stats() const;
  // Valid while the game lives (their routes point into it).
  std::vector<FlowRecord>& flows();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// From one play's flows: every flow's slowdown (for each link of its route, the average number of flows on
// the link while it ran, weighed by the link's bandwidth against the route's bottleneck); returns the most
// flows ever on one link at once.
uint32_t Contention(const std::vector<FlowRecord>& flows, const models::PlatformRoutes& routes, Slowdowns* slow);

}  // namespace hetsim::planners::play
