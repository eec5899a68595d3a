#include "planners/lowering_cost.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "models/communicator.h"
#include "models/topology.h"

namespace hetsim::planners {
namespace {

using models::Algorithm;
using models::Category;
using models::CollectiveKind;
using models::Route;

constexpr double kUnknown = -1;         // a time not known yet (times are ≥ 0)
constexpr size_t kMaxPendingSends = 32;  // the engine's Reap: past this many posted sends it waits for the oldest
// comm.tp_overlap's chunks (sim/program.h kTpOverlapChunks).
constexpr double kTpOverlapChunks = 4;

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
uint64_t P2pKey(uint32_t stream, uint32_t seq, uint32_t leg) {
  return (uint64_t{1} << 63) | ((uint64_t{stream} & 0x3FFFFFFF) << 33) | ((uint64_t{seq} & 0x3FFFFFFF) << 3) | leg;
}
uint64_t CollKey(uint32_t group, uint32_t inst, uint32_t rank, uint32_t sub) {
  return ((uint64_t{group} & 0x3FFFFF) << 41) | ((uint64_t{inst} & 0x3FFFF) << 23) | ((uint64_t{rank} & 0xFFFF) << 7) |
         (sub & 0x7F);
}
// A source of flows (kUpperBound): a stream's leg, or a collective member's sub-flow (any instance).
uint64_t P2pSource(uint32_t stream, uint32_t leg) { return P2pKey(stream, 0, leg); }
uint64_t CollSource(uint32_t group, uint32_t rank, uint32_t sub) { return CollKey(group, 0, rank, sub); }

// A ring member's hop to its successor (sim/engine.cc Exchange and StripeOverRails).
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
std::vector<RingFlow> RingFlows(const std::vector<uint32_t>& g, const models::PlatformRoutes& routes, bool stripe) {
  std::vector<RingFlow> flows;
  const size_t n = g.size();
  for (size_t r = 0; r < n; ++r) {
    const uint32_t self = g[r], to = g[(r + 1) % n];
    const uint32_t here = routes.NodeOf(self), there = routes.NodeOf(to);
    std::vector<uint32_t> mine, theirs;
    if (stripe && here != there) {
      for (uint32_t d : g) {
        if (routes.NodeOf(d) == here && d != self) mine.push_back(d);
        if (routes.NodeOf(d) == there && d != to) theirs.push_back(d);
      }
    }
    const size_t extra = std::min(mine.size(), theirs.size());
    const double share = 1.0 / static_cast<double>(extra + 1);
    for (size_t i = 0; i < extra; ++i) flows.push_back({mine[i], theirs[i], share});
    flows.push_back({self, to, share});
  }
  return flows;
}

// Flows launched together and shared max-min fairly (SimGrid's CM02 sharing): each becomes active after its
// route's latency and ends when its bytes have gone through. Returns when the last ends.
double FluidMakespan(const std::vector<std::pair<Route, double>>& flows, const models::PlatformRoutes& routes) {
  const size_t F = flows.size();
  if (F == 0) return 0;
  std::vector<double> left(F), rate(F, 0);
  std::vector<char> active(F, 0), done(F, 0);
  for (size_t f = 0; f < F; ++f) left[f] = std::llround(std::max(0.0, flows[f].second));
  double now = 0, end = 0;
  size_t remaining = F;
  std::unordered_map<uint32_t, std::vector<uint32_t>> on_link;
  while (remaining > 0) {
    // Activate the flows whose latency has passed; finish those with nothing left.
    for (size_t f = 0; f < F; ++f) {
      if (!done[f] && !active[f] && flows[f].first.latency_s <= now + 1e-15) active[f] = 1;
      if (active[f] && !done[f] && left[f] <= 0) {
        done[f] = 1;
        --remaining;
        end = std::max(end, now);
      }
    }
    if (remaining == 0) break;
    // Max-min rates of the active flows (progressive filling).
    on_link.clear();
    for (size_t f = 0; f < F; ++f) {
      rate[f] = -1;
      if (!active[f] || done[f]) continue;
      const Route& r = flows[f].first;
      for (uint32_t i = 0; i < r.num_links; ++i) on_link[r.links[i]].push_back(static_cast<uint32_t>(f));
    }
    std::unordered_map<uint32_t, double> capacity;
    std::unordered_map<uint32_t, uint32_t> unfixed;
    for (const auto& [l, fs] : on_link) {
      capacity[l] = routes.LinkBandwidth(l);
      unfixed[l] = static_cast<uint32_t>(fs.size());
    }
    for (;;) {
      uint32_t best = UINT32_MAX;
      double share = std::numeric_limits<double>::infinity();
      for (const auto& [l, k] : unfixed) {
        if (k == 0) continue;
        const double s = capacity[l] / k;
        if (s < share) {
          share = s;
          best = l;
        }
      }
      if (best == UINT32_MAX) break;
      for (uint32_t f : on_link[best]) {
        if (rate[f] >= 0) continue;
        rate[f] = share;
        const Route& r = flows[f].first;
        for (uint32_t i = 0; i < r.num_links; ++i) {
          capacity[r.links[i]] -= share;
          --unfixed[r.links[i]];
        }
      }
    }
    // The next event: a flow ends or another becomes active.
    double step = std::numeric_limits<double>::infinity();
    for (size_t f = 0; f < F; ++f) {
      if (done[f]) continue;
      if (active[f]) {
        if (rate[f] > 0) step = std::min(step, left[f] / rate[f]);
      } else {
        step = std::min(step, flows[f].first.latency_s - now);
      }
    }
    if (!std::isfinite(step)) break;  // nothing can progress (no bandwidth): give up
    for (size_t f = 0; f < F; ++f) {
      if (!active[f] || done[f] || rate[f] <= 0) continue;
      left[f] -= rate[f] * step;
      if (left[f] < 1e-6) left[f] = 0;  // SimGrid's precision on bytes is coarser
    }
    now += step;
  }
  return std::max(end, now);
}

}  // namespace

// ---- folding (the simulator's decision, sim/program.cc FoldShape and FoldRanks) -------------------------

namespace {

struct Fold {
  std::vector<uint32_t> rep;          // per slot: the slot whose program stands for it
  std::vector<uint32_t> folded_onto;  // per group: the played group it folds onto (kNone: none)
  // Per played send stream (src device, dst device, channel): the folded devices' copies (from, to).
  std::map<std::tuple<uint32_t, uint32_t, uint8_t>, std::vector<std::pair<uint32_t, uint32_t>>> send_copies;
};

// What the plan must have before its ranks are compared: no CPU staging, every pipeline as deep as
// pipeline 0 with stages as wide, one replica and one sequence shard per stage. "" when it may fold.
std::string FoldShape(const proto::Plan& plan, const models::Cluster& cluster) {
  if (plan.comm().cpu_staged() || models::Communicator(cluster, plan.comm()).any_staged()) {
    return "CPU-staged transfers";
  }
  if (models::OffloadsOptimizer(plan)) return "CPU offload (host copies)";  // as sim/program.cc
  if (plan.pipelines_size() == 0) return "no pipelines";
  const auto& p0 = plan.pipelines(0);
  for (const auto& pipe : plan.pipelines()) {
    if (pipe.stages_size() != p0.stages_size()) return "pipelines of different depths";
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      if (st.devices_size() != p0.stages(s).devices_size()) return "stages of different widths";
      if (models::DpDegree(st) != 1) return "data parallelism inside a stage";
      if (models::StageSharding(st).ways() != 1) return "sequence sharding (context parallelism, Ulysses)";
    }
  }
  return "";
}

bool SameWork(const models::Op& a, const models::Op& b) {
  return a.kind == b.kind && a.category == b.category && a.collective == b.collective && a.algorithm == b.algorithm &&
         a.reduce == b.reduce && a.channel == b.channel && a.recompute == b.recompute && a.in_pass == b.in_pass &&
         a.micro_batch == b.micro_batch && a.bucket == b.bucket && a.num_buckets == b.num_buckets &&
         a.calls == b.calls && a.layer_begin == b.layer_begin && a.layer_end == b.layer_end &&
         a.seq_begin == b.seq_begin && a.seq_end == b.seq_end && a.bytes == b.bytes && a.flops == b.flops &&
         a.params == b.params;
}

// Compares every rank's skeleton with its representative's (the first device of its stage in pipeline 0).
// "" and `out` filled when the ranks fold.
std::string FoldRanks(const models::Lowering& lw, const models::Cluster& cluster, Fold* out) {
  const size_t n = lw.ranks.size();
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> first, count;  // (pipeline, stage) -> first slot, devices
  for (uint32_t i = 0; i < n; ++i) {
    const auto k = std::make_pair(lw.ranks[i].pipeline, lw.ranks[i].stage);
    first.emplace(k, i);
    ++count[k];
  }
  Fold fold;
  fold.rep.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    const auto& r = lw.ranks[i];
    auto it = first.find({0, r.stage});
    if (it == first.end()) return "pipeline 0 has no stage " + std::to_string(r.stage);
    if (count[{r.pipeline, r.stage}] != count[it->first]) return "stages of different widths";
    fold.rep[i] = it->second;
  }
  const auto slot_of = [&](uint32_t device) { return lw.device_slot[device]; };
  fold.folded_onto.assign(lw.groups.size(), models::kNone);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t rep = fold.rep[i];
    const auto& a = lw.ranks[rep];
    const auto& b = lw.ranks[i];
    if (cluster.device(a.device).gpu != cluster.device(b.device).gpu) return "different GPU types";
    if (a.tp != b.tp || a.layer_begin != b.layer_begin || a.layer_end != b.layer_end || a.shard_rank != b.shard_rank ||
        a.skeleton.size() != b.skeleton.size() || a.num_stages != b.num_stages ||
        a.num_micro_batches != b.num_micro_batches) {
      return "devices " + std::to_string(a.device) + " and " + std::to_string(b.device) + " do different work";
    }
    for (size_t k = 0; k < a.skeleton.size(); ++k) {
      const models::Op& x = a.skeleton[k];
      const models::Op& y = b.skeleton[k];
      if (!SameWork(x, y)) return "devices " + std::to_string(a.device) + " and " + std::to_string(b.device) + " differ";
      switch (x.kind) {
        case models::OpKind::kPostRecv:
          return "early receives (context parallelism)";
        case models::OpKind::kSend:
        case models::OpKind::kRecv: {
          if (fold.rep[slot_of(x.peer)] != slot_of(x.peer) || fold.rep[slot_of(y.peer)] != slot_of(x.peer)) {
            return "point-to-point peers that do not fold";
          }
          if (x.kind == models::OpKind::kSend && i != rep) {
            auto& copies = fold.send_copies[{a.device, x.peer, x.channel}];
            const auto c = std::make_pair(b.device, y.peer);
            if (std::find(copies.begin(), copies.end(), c) == copies.end()) copies.push_back(c);
          }
          break;
        }
        case models::OpKind::kCollective: {
          if (x.collective != CollectiveKind::kAllReduce && x.collective != CollectiveKind::kReduceScatter &&
              x.collective != CollectiveKind::kAllGather) {
            return std::string(models::CollectiveName(x.collective)) + " collectives";
          }
          if (x.algorithm == Algorithm::kTree) return "tree collectives";
          const auto& gx = lw.groups[x.group];
          const auto& gy = lw.groups[y.group];
          if (gx.size() != gy.size()) return "collective groups of different sizes";
          if (fold.folded_onto[y.group] != models::kNone && fold.folded_onto[y.group] != x.group) {
            return "a collective group folds onto two groups";
          }
          fold.folded_onto[y.group] = x.group;
          for (const auto* g : {&gx, &gy}) {
            for (uint32_t d : *g) {
              if (fold.rep[slot_of(d)] != rep) return "collective groups spanning stages";
            }
          }
          break;
        }
        default:
          break;
      }
    }
  }
  uint32_t played = 0;
  for (uint32_t i = 0; i < n; ++i) played += fold.rep[i] == i ? 1 : 0;
  if (played == n) return "no two devices do the same work";
  *out = std::move(fold);
  return "";
}

// The devices that represent the others when a plan folds: the first device of each stage of pipeline 0.
std::vector<bool> Representatives(const proto::Plan& plan, const models::Cluster& cluster) {
  std::vector<bool> out(cluster.num_devices(), false);
  for (const auto& st : plan.pipelines(0).stages()) {
    if (st.devices_size() > 0) out[st.devices(0)] = true;
  }
  return out;
}

}  // namespace

// ---- the programs with their prices -------------------------------------------------------------------------

namespace {

struct Setup {
  const models::Lowering* lw = nullptr;
  const models::PlatformRoutes* routes = nullptr;
  Pricing pricing = Pricing::kSimulator;
  bool folded = false;
  std::vector<char> played;       // per slot
  std::vector<Program> programs;  // per slot (empty where not played)
  std::vector<Stream> streams;
  std::vector<Group> groups;
  std::vector<uint32_t> link_sources;  // per directed link: distinct flow sources (kUpperBound)
  uint32_t max_link_sources = 0;
  uint64_t operations = 0;
  // Per group and step bytes: a folded collective's price (the flows launched together).
  std::map<std::tuple<uint32_t, double, bool, bool>, double> folded_price;

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
      h.notice = h.to_next;  // the zero-byte notice goes from the GPU's own actor (sim/engine.cc StagedSend)
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

// The duration of one lowered compute operation of rank `r` (sim/program.cc ComputeSeconds).
class ComputePrices {
 public:
  ComputePrices(const ComputeSource& cs, const models::Cluster& cluster, bool separate_recompute,
                proto::Recompute recompute)
      : cs_(cs), cluster_(cluster), separate_(separate_recompute), recompute_(recompute) {}

  double Seconds(const models::Op& op, const models::RankOps& r, const models::GpuSpec& gpu) {
    if (op.category == Category::kOptimizer) {
      if (op.host_ranks == 0) return cs_.OptimizerSeconds(gpu, op.params);
      // CPU offload: the step runs on the node's CPU, shared by the plan's ranks there (sim/program.cc).
      return models::HostOptimizerSeconds(op.params, op.host_ranks, cluster_.node(cluster_.device(r.device).node).cpu_adam_params_per_s) +
             cs_.cost().IterationOverheadSeconds(gpu);
    }
    const bool overhead = !op.recompute && op.layer_begin == r.layer_begin && op.layer_end > op.layer_begin;
    const Key key{&gpu, r.tp, r.shard.cp, r.shard.ulysses, op.layer_begin, op.layer_end, op.sequences(),
                  static_cast<uint8_t>(op.category), op.recompute, overhead};
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    double seconds = overhead ? PassOverhead(gpu) : 0;
    const double batch = op.sequences();
    const auto layer = [&](uint32_t l) {
      if (op.category == Category::kForward || op.recompute) {
        return cs_.LayerSeconds(gpu, l, r.tp, batch, true, proto::RECOMPUTE_UNSPECIFIED, r.shard);
      }
      // With separate recomputation operations a backward operation is the backward alone; otherwise it
      // includes what the plan recomputes (as the simulator charges it).
      return cs_.LayerSeconds(gpu, l, r.tp, batch, false, separate_ ? proto::RECOMPUTE_NONE : recompute_, r.shard);
    };
    uint32_t blocks = 0, first_block = 0;
    const auto& model = cs_.cost().model();
    for (uint32_t l = op.layer_begin; l < op.layer_end; ++l) {
      if (model.kind(l) == models::LayerKind::kTransformer) {
        if (blocks++ == 0) first_block = l;
      } else {
        seconds += layer(l);
      }
    }
    if (blocks > 0) seconds += blocks * layer(first_block);
    cache_.emplace(key, seconds);
    return seconds;
  }

  double CollectiveLatency(const models::GpuSpec& gpu, uint32_t n) {
    const auto key = std::make_pair(&gpu, n);
    auto it = latency_.find(key);
    if (it != latency_.end()) return it->second;
    return latency_[key] = cs_.cost().CollectiveLatencySeconds(gpu, n);
  }
  double Efficiency(const models::GpuSpec& gpu) {
    auto it = efficiency_.find(&gpu);
    if (it != efficiency_.end()) return it->second;
    return efficiency_[&gpu] = cs_.cost().CollectiveEfficiency(gpu);
  }

 private:
  double PassOverhead(const models::GpuSpec& gpu) {
    auto it = overhead_.find(&gpu);
    if (it != overhead_.end()) return it->second;
    return overhead_[&gpu] = cs_.cost().PassOverheadSeconds(gpu);
  }
  struct Key {
    const models::GpuSpec* gpu;
    uint32_t tp, cp, ulysses, begin, end, seqs;
    uint8_t category;
    bool recompute, overhead;
    bool operator==(const Key& o) const {
      return gpu == o.gpu && tp == o.tp && cp == o.cp && ulysses == o.ulysses && begin == o.begin && end == o.end &&
             seqs == o.seqs && category == o.category && recompute == o.recompute && overhead == o.overhead;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = reinterpret_cast<uintptr_t>(k.gpu);
      for (uint64_t v : {uint64_t{k.tp}, uint64_t{k.cp}, uint64_t{k.ulysses}, uint64_t{k.begin}, uint64_t{k.end},
                         uint64_t{k.seqs}, uint64_t{k.category}, uint64_t{k.recompute}, uint64_t{k.overhead}}) {
        h = (h ^ v) * 0x100000001B3ull;
      }
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  const ComputeSource& cs_;
  const models::Cluster& cluster_;
  bool separate_;
  proto::Recompute recompute_;
  std::unordered_map<Key, double, KeyHash> cache_;
  std::map<std::pair<const models::GpuSpec*, uint32_t>, double> latency_;
  std::map<const models::GpuSpec*, double> efficiency_, overhead_;
};

Kind KindOf(models::OpKind k) {
  switch (k) {
    case models::OpKind::kCompute: return Kind::kCompute;
    case models::OpKind::kSend: return Kind::kSend;
    case models::OpKind::kRecv: return Kind::kRecv;
    case models::OpKind::kPostRecv: return Kind::kPostRecv;
    case models::OpKind::kCollective: return Kind::kCollective;
    case models::OpKind::kSignal: return Kind::kSignal;
    case models::OpKind::kAwait: return Kind::kAwait;
    case models::OpKind::kJoin: return Kind::kJoin;
    case models::OpKind::kWaitSends: return Kind::kWaitSends;
    case models::OpKind::kHostCopy: return Kind::kCompute;  // priced as its transfer, blocking its stream
  }
  return Kind::kCompute;
}

bool IsTpComm(const POp& op) { return op.category == Category::kTp && op.kind == Kind::kCollective; }

// comm.tp_overlap (sim/program.cc OverlapTp): a pass's compute C followed by TP collectives becomes
// C/k, C·(k−1)/k started asynchronously, the collectives with (k−1)/k of their bytes, the join, the collectives
// with the last 1/k of their bytes and no fixed latency.
std::vector<POp> OverlapTp(const std::vector<POp>& ops) {
  std::vector<POp> out;
  out.reserve(ops.size() + ops.size() / 2);
  const double k = kTpOverlapChunks;
  for (size_t i = 0; i < ops.size(); ++i) {
    const POp& op = ops[i];
    const bool pass =
        op.kind == Kind::kCompute && (op.category == Category::kForward || op.category == Category::kBackward);
    size_t j = i + 1;
    while (pass && j < ops.size() && IsTpComm(ops[j]) && ops[j].micro_batch == op.micro_batch) ++j;
    if (!pass || j == i + 1) {
      out.push_back(op);
      continue;
    }
    POp first = op;
    first.seconds = op.seconds / k;
    out.push_back(first);
    POp async = op;
    async.kind = Kind::kComputeAsync;
    async.seconds = op.seconds - first.seconds;
    out.push_back(async);
    for (size_t c = i + 1; c < j; ++c) {
      POp during = ops[c];
      during.bytes = ops[c].bytes * (k - 1) / k;
      out.push_back(during);
    }
    POp join = op;
    join.kind = Kind::kComputeJoin;
    join.seconds = 0;
    out.push_back(join);
    for (size_t c = i + 1; c < j; ++c) {
      POp tail = ops[c];
      tail.bytes = ops[c].bytes / k;
      tail.seconds = 0;
      out.push_back(tail);
    }
    i = j - 1;
  }
  return out;
}

// Prices the lowering's played ranks (sim/program.cc Append) and finds its message streams.
void BuildPrograms(const models::Lowering& lw, const models::Cluster& cluster, const ComputeSource& cs,
                   const models::PlatformRoutes& routes, Pricing pricing, proto::Recompute recompute, Setup* s) {
  s->lw = &lw;
  s->routes = &routes;
  s->pricing = pricing;
  const models::Communicator comm(cluster, lw.comm);
  s->staged_all = lw.cpu_staged;
  if (comm.any_staged()) {
    s->staged_groups = comm.staged_groups();
    s->num_groups = static_cast<uint32_t>(cluster.spec().nodes_size());
    for (const auto& n : cluster.nodes()) s->node_group.push_back(n.group);
  }
  s->groups.resize(lw.groups.size());
  for (size_t g = 0; g < lw.groups.size(); ++g) s->groups[g].members = &lw.groups[g];
  s->programs.resize(lw.ranks.size());
  std::map<std::tuple<uint32_t, uint32_t, uint8_t>, uint32_t> stream_ids;
  ComputePrices prices(cs, cluster, lw.separate_recompute, recompute);
  const auto stream_of = [&](uint32_t src, uint32_t dst, uint8_t channel) {
    auto [it, inserted] = stream_ids.emplace(std::make_tuple(src, dst, channel), static_cast<uint32_t>(s->streams.size()));
    if (inserted) {
      Stream st;
      st.src = src;
      st.dst = dst;
      st.src_slot = lw.device_slot[src];
      st.dst_slot = lw.device_slot[dst];
      st.channel = channel;
      st.route = routes.GpuToGpu(src, dst);
      const uint32_t na = routes.NodeOf(src), nb = routes.NodeOf(dst);
      st.staged = s->Staged(na, nb);
      if (st.staged) {
        st.g2h = routes.GpuToHost(src);
        st.h2h = routes.HostToHost(na, nb);
        st.notice = routes.HostToGpu(na, dst);
        st.h2g = routes.HostToGpu(dst);
      }
      s->streams.push_back(st);
    }
    return it->second;
  };
  for (size_t i = 0; i < lw.ranks.size(); ++i) {
    const models::RankOps& r = lw.ranks[i];
    Program& prog = s->programs[i];
    prog.device = r.device;
    prog.pipeline = r.pipeline;
    prog.stage = r.stage;
    prog.gpu = &cs.Gpu(r.device);
    if (!s->played[i]) continue;
    const models::GpuSpec& gpu = *prog.gpu;
    for (int which = 0; which < 2; ++which) {
      const auto& in = which == 0 ? r.ops : r.dp_stream;
      auto& out = which == 0 ? prog.main : prog.dp;
      out.reserve(in.size());
      for (const models::Op& lo : in) {
        POp op;
        op.kind = KindOf(lo.kind);
        op.category = lo.category;
        op.collective = lo.collective;
        op.algorithm = lo.algorithm;
        op.micro_batch = lo.micro_batch;
        op.bytes = lo.bytes;
        switch (lo.kind) {
          case models::OpKind::kCompute: {
            op.seconds = prices.Seconds(lo, r, gpu);
            if (op.seconds <= 0) continue;
            // Consecutive compute of the same pass is one operation.
            if (!out.empty() && out.back().kind == Kind::kCompute && out.back().category == op.category &&
                out.back().micro_batch == op.micro_batch) {
              out.back().seconds += op.seconds;
              continue;
            }
            break;
          }
          case models::OpKind::kHostCopy: {
            // CPU offload: one transfer over the GPU's PCIe link and its node's host memory link, which
            // blocks its stream (sim/engine.cc). Played alone: the contention passes leave it out.
            const Route route = lo.to_host ? s->routes->GpuToHost(r.device) : s->routes->HostToGpu(r.device);
            op.seconds = route.Seconds(lo.bytes);
            break;
          }
          case models::OpKind::kSend:
            op.ref = stream_of(r.device, lo.peer, lo.channel);
            break;
          case models::OpKind::kRecv:
          case models::OpKind::kPostRecv:
            op.ref = stream_of(lo.peer, r.device, lo.channel);
            break;
          case models::OpKind::kCollective: {
            op.ref = lo.group;
            op.rank = lo.rank;
            const uint32_t n = static_cast<uint32_t>(lw.groups[lo.group].size());
            op.seconds = lo.calls * prices.CollectiveLatency(gpu, n);
            // The collective efficiency: the simulator's transfers carry the bytes that take as long at the
            // full bandwidth. The lower bound leaves it out (links at their full bandwidth).
            if (pricing != Pricing::kLowerBound) op.bytes = lo.bytes / prices.Efficiency(gpu);
            break;
          }
          default:
            break;
        }
        out.push_back(op);
      }
    }
    if (lw.tp_overlap) prog.main = OverlapTp(prog.main);
    s->operations += prog.main.size() + prog.dp.size();
  }
  // The most receives a stream has posted ahead (ring attention posts cp − 1 before its compute).
  for (size_t i = 0; i < s->programs.size(); ++i) {
    std::unordered_map<uint32_t, uint32_t> ahead;
    for (const POp& op : s->programs[i].main) {
      if (op.kind == Kind::kPostRecv) {
        const uint32_t k = ++ahead[op.ref];
        s->streams[op.ref].max_early = std::max(s->streams[op.ref].max_early, k);
      } else if (op.kind == Kind::kRecv && ahead[op.ref] > 0) {
        --ahead[op.ref];
      }
    }
  }
}

// Per directed link, the distinct flow sources that cross it (kUpperBound's K_l).
void CountLinkSources(Setup* s) {
  std::vector<std::pair<uint32_t, uint64_t>> pairs;  // (link, source)
  std::unordered_map<uint64_t, uint32_t> multiplicity;
  const auto add = [&](const Route& r, uint64_t source) {
    for (uint32_t i = 0; i < r.num_links; ++i) pairs.emplace_back(r.links[i], source);
  };
  for (uint32_t k = 0; k < s->streams.size(); ++k) {
    const Stream& st = s->streams[k];
    if (!st.staged) {
      add(st.route, P2pSource(k, 0));
      multiplicity[P2pSource(k, 0)] = st.max_early;
    } else {
      add(st.g2h, P2pSource(k, 1));
      add(st.h2h, P2pSource(k, 2));
      add(st.notice, P2pSource(k, 3));
      add(st.h2g, P2pSource(k, 4));
    }
  }
  std::unordered_set<uint64_t> seen;  // (group, rank, algorithm and kind) already counted
  for (size_t i = 0; i < s->programs.size(); ++i) {
    if (!s->played[i]) continue;
    for (const auto* ops : {&s->programs[i].main, &s->programs[i].dp}) {
      for (const POp& op : *ops) {
        if (op.kind != Kind::kCollective) continue;
        const uint64_t sig = CollKey(op.ref, static_cast<uint32_t>(op.collective) * 4 + static_cast<uint32_t>(op.algorithm),
                                     op.rank, 0);
        if (!seen.insert(sig).second) continue;
        const auto& m = s->Members(op.ref);
        const uint32_t n = static_cast<uint32_t>(m.size());
        if (n < 2) continue;
        const uint32_t g = op.ref, r = op.rank;
        const bool all_reduce = op.collective == CollectiveKind::kAllReduce;
        if (op.collective == CollectiveKind::kBroadcast) {
          if (r == 0) {
            for (uint32_t j = 1; j < n; ++j) add(s->routes->GpuToGpu(m[0], m[j]), CollSource(g, 0, j));
          }
        } else if (op.collective == CollectiveKind::kAllToAll) {
          for (uint32_t j = 1; j < n; ++j) add(s->routes->GpuToGpu(m[r], m[(r + j) % n]), CollSource(g, r, j));
        } else if (all_reduce && op.algorithm == Algorithm::kTree) {
          if (r > 0) {
            add(s->routes->GpuToGpu(m[r], m[(r - 1) / 2]), CollSource(g, r, 0));
            add(s->routes->GpuToGpu(m[(r - 1) / 2], m[r]), CollSource(g, r, 1));
          }
        } else {
          const bool nvls = all_reduce && op.algorithm == Algorithm::kNvls;
          const Hop& h = s->HopOf(g, r, !nvls);
          if (h.staged_send) {
            add(h.g2h, CollSource(g, r, 1));
            add(h.h2h, CollSource(g, r, 2));
            add(h.notice, CollSource(g, r, 3));
          } else {
            add(h.to_next, CollSource(g, r, 0));
          }
          if (h.staged_recv) add(h.h2g, CollSource(g, r, 4));
          for (size_t j = 0; j < h.stripe_routes.size(); ++j) {
            add(h.stripe_routes[j], CollSource(g, r, 8 + static_cast<uint32_t>(j)));
          }
        }
      }
    }
  }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  s->link_sources.assign(s->routes->num_links(), 0);
  for (const auto& [link, source] : pairs) {
    auto it = multiplicity.find(source);
    s->link_sources[link] += it == multiplicity.end() ? 1 : it->second;
    s->max_link_sources = std::max(s->max_link_sources, s->link_sources[link]);
  }
}

}  // namespace

// ---- one play -------------------------------------------------------------------------------------------------

namespace {

struct FlowRecord {
  uint64_t key;
  double start, end;  // the whole flow, latency included
  const Route* route;  // stable for the play (a stream's, a hop's, or the play's arena)
  const std::vector<std::pair<uint32_t, uint32_t>>* twins;  // folded copies per link (Stream::twins), or none
};

using Slowdowns = std::unordered_map<uint64_t, double>;

class Game {
 public:
  Game(Setup& s, const Slowdowns* slow, bool contention, bool record,
       std::vector<std::vector<PlayResult::Span>>* trace = nullptr)
      : s_(s), slow_(slow), contention_(contention), record_(record), trace_(trace) {}

  Status Run() {
    const size_t n = s_.programs.size();
    actors_.resize(2 * n);
    msgs_.resize(s_.streams.size());
    posts_.resize(s_.groups.size());
    ends_.resize(s_.groups.size());
    signals_.resize(n);
    dp_end_.assign(n, kUnknown);
    stats_.resize(n);
    const size_t resources = s_.streams.size() + s_.groups.size() + 2 * n;
    waiters_.resize(resources);
    for (uint32_t i = 0; i < n; ++i) {
      if (!s_.played[i]) continue;
      for (int dp = 0; dp < 2; ++dp) {
        Actor& a = actors_[2 * i + dp];
        a.slot = i;
        a.dp = dp == 1;
        a.ops = dp ? &s_.programs[i].dp : &s_.programs[i].main;
        if (dp && a.ops->empty()) {
          a.finished = true;
          dp_end_[i] = 0;
          continue;
        }
        a.live = true;
        Enqueue(2 * i + dp);
      }
    }
    while (!ready_.empty()) {
      const uint32_t id = ready_.front();
      ready_.pop_front();
      actors_[id].queued = false;
      Advance(id);
    }
    for (const Actor& a : actors_) {
      if (a.live && !a.finished) {
        return Status::Internal("lowering play: device " + std::to_string(s_.programs[a.slot].device) + (a.dp ? " (DP stream)" : "") +
                                " is stuck at operation " + std::to_string(a.pc) + " of " +
                                std::to_string(a.ops->size()));
      }
    }
    return Status::Ok();
  }

  struct Stats {
    double forward_s = 0, backward_s = 0, optimizer_s = 0, tp_s = 0, pipeline_end_s = 0, end_s = 0;
  };
  const std::vector<Stats>& stats() const { return stats_; }
  std::vector<FlowRecord>& flows() { return flows_; }

 private:
  struct Actor {
    uint32_t slot = 0;
    bool dp = false;
    bool live = false, finished = false, queued = false;
    const std::vector<POp>* ops = nullptr;
    size_t pc = 0;
    double t = 0;
    double async_end = 0;
    bool in_op = false;        // the current operation is posted
    uint32_t op_ref = 0;       // its sequence (receive) or instance (collective)
    bool early = false;        // the receive completes one posted ahead
    double call_s = 0;         // when the current collective was called
    double begin_s = -1;       // when the current operation began (traces)
    bool reap = false;         // the pending sends are checked before the next operation
    int finish_step = 0;       // 0: stop the stagers, 1: wait for the sends
    size_t next_stager = 0;
    std::deque<std::pair<uint32_t, uint32_t>> pending;  // (stream, sequence) sends not waited for
    uint32_t awaits = 0;
  };
  struct Msgs {
    std::vector<double> send_post, recv_post, done, pickup, bytes;
    uint32_t sent = 0, gets = 0, resolved = 0;
    std::deque<uint32_t> early;  // receives posted ahead, by sequence
    double stager_free = 0;      // staged: when the stager takes its next item
  };

  bool LowerBound() const { return s_.pricing == Pricing::kLowerBound; }

  void Enqueue(uint32_t id) {
    Actor& a = actors_[id];
    if (a.queued || a.finished) return;
    a.queued = true;
    ready_.push_back(id);
  }
  uint32_t StreamRes(uint32_t k) const { return k; }
  uint32_t GroupRes(uint32_t g) const { return static_cast<uint32_t>(s_.streams.size()) + g; }
  uint32_t SignalRes(uint32_t slot) const {
    return static_cast<uint32_t>(s_.streams.size() + s_.groups.size()) + slot;
  }
  uint32_t DoneRes(uint32_t slot) const {
    return static_cast<uint32_t>(s_.streams.size() + s_.groups.size() + s_.programs.size()) + slot;
  }
  void Block(uint32_t id, uint32_t res) { waiters_[res].push_back(id); }
  void Wake(uint32_t res) {
    auto& w = waiters_[res];
    for (uint32_t id : w) Enqueue(id);
    w.clear();
  }

  // latency + bytes / bandwidth of a flow, slowed by contention (kSimulator's later plays) or by the worst
  // share of its links (kUpperBound).
  double FlowSeconds(const Route& r, double bytes, uint64_t key, double extra = 1) const {
    const double b = std::llround(std::max(0.0, bytes));
    if (b <= 0) return r.latency_s;
    double slow = extra;
    if (s_.pricing == Pricing::kUpperBound) {
      for (uint32_t i = 0; i < r.num_links; ++i) {
        const uint32_t l = r.links[i];
        slow = std::max(slow, s_.link_sources[l] * r.bandwidth_bytes_s / s_.routes->LinkBandwidth(l));
      }
    } else if (slow_ != nullptr) {
      auto it = slow_->find(key);
      if (it != slow_->end()) slow = std::max(slow, it->second);
    }
    return r.latency_s + b / r.bandwidth_bytes_s * slow;
  }
  // A route that lives as long as the play (flow records point to it).
  const Route& Keep(const Route& r) {
    if (!record_) {
      scratch_ = r;
      return scratch_;
    }
    arena_.push_back(r);
    return arena_.back();
  }
  void Record(uint64_t key, double start, double end, const Route& r,
              const std::vector<std::pair<uint32_t, uint32_t>>* twins = nullptr) {
    if (record_ && end > start) flows_.push_back({key, start, end, &r, twins});
  }

  // ---- message streams ----

  static double At(const std::vector<double>& v, uint32_t i) { return i < v.size() ? v[i] : kUnknown; }
  static void Put(std::vector<double>& v, uint32_t i, double x) {
    if (v.size() <= i) v.resize(std::max<size_t>(i + 1, 2 * v.size()), kUnknown);
    v[i] = x;
  }

  // Works out the transfers of stream k whose both sides are posted, in order.
  void Resolve(uint32_t k) {
    Msgs& m = msgs_[k];
    const Stream& st = s_.streams[k];
    while (m.resolved < m.sent) {
      const uint32_t i = m.resolved;
      const double b = m.bytes[i];
      if (!st.staged) {
        if (i >= m.gets) break;
        const double start = std::max(m.send_post[i], m.recv_post[i]);
        const double end = start + FlowSeconds(st.route, b, P2pKey(k, i, 0));
        Record(P2pKey(k, i, 0), start, end, st.route, st.twins.empty() ? nullptr : &st.twins);
        Put(m.done, i, end);
      } else {
        // The stager takes item i when it is free (the item message is a zero-byte transfer to the host), copies
        // it to host memory, sends it to the peer's host and tells the receiver, who copies it to its GPU.
        if (At(m.pickup, i) < 0) Put(m.pickup, i, std::max(m.send_post[i], m.stager_free) + st.g2h.latency_s);
        if (i >= m.gets) break;
        double t = m.pickup[i];
        const double t1 = t + FlowSeconds(st.g2h, b, P2pKey(k, i, 1));
        Record(P2pKey(k, i, 1), t, t1, st.g2h);
        const double t2 = t1 + FlowSeconds(st.h2h, b, P2pKey(k, i, 2));
        Record(P2pKey(k, i, 2), t1, t2, st.h2h);
        const double notice = std::max(t2, m.recv_post[i]) + st.notice.latency_s;
        m.stager_free = notice;
        const double end = notice + FlowSeconds(st.h2g, b, P2pKey(k, i, 4));
        Record(P2pKey(k, i, 4), notice, end, st.h2g);
        Put(m.done, i, end);
      }
      ++m.resolved;
    }
    Wake(StreamRes(k));
  }

  // When the sender's posted send (stream, sequence) stops holding it: the transfer's end, or (staged) when
  // the stager took it. kUnknown until known.
  double SendComplete(uint32_t k, uint32_t seq) const {
    const Msgs& m = msgs_[k];
    return s_.streams[k].staged ? At(m.pickup, seq) : At(m.done, seq);
  }

  // The engine's Reap after every operation: sends that have arrived leave the queue; past 32 the oldest is
  // waited for. False when it must wait for a send whose end is not known yet.
  bool Reap(uint32_t id) {
    Actor& a = actors_[id];
    while (!a.pending.empty()) {
      const auto [k, seq] = a.pending.front();
      const double c = SendComplete(k, seq);
      const bool over = a.pending.size() > kMaxPendingSends;
      if (c >= 0) {
        if (c <= a.t || over) {
          a.t = std::max(a.t, c);
          a.pending.pop_front();
          continue;
        }
        break;
      }
      if (!over) break;
      Block(id, StreamRes(k));
      return false;
    }
    return true;
  }

  // Waits for every posted send; false (blocked) when one's end is not known yet.
  bool WaitAllSends(uint32_t id) {
    Actor& a = actors_[id];
    for (const auto& [k, seq] : a.pending) {
      if (SendComplete(k, seq) < 0) {
        Block(id, StreamRes(k));
        return false;
      }
    }
    for (const auto& [k, seq] : a.pending) a.t = std::max(a.t, SendComplete(k, seq));
    a.pending.clear();
    return true;
  }

  // ---- collectives ----

  double& PostOf(uint32_t g, uint32_t inst, uint32_t rank) {
    const size_t n = s_.Members(g).size();
    auto& v = posts_[g];
    const size_t i = size_t{inst} * n + rank;
    if (v.size() <= i) v.resize(std::max((size_t{inst} + 1) * n, 2 * v.size()), kUnknown);
    return v[i];
  }
  double PostAt(uint32_t g, uint32_t inst, uint32_t rank) const {
    const size_t n = s_.Members(g).size();
    const auto& v = posts_[g];
    const size_t i = size_t{inst} * n + rank;
    return i < v.size() ? v[i] : kUnknown;
  }

  // When a folded collective's flows have all arrived, after its call (Setup::folded).
  double FoldedSeconds(uint32_t g, double step_bytes, bool stripe) {
    const bool contention = contention_;
    const auto key = std::make_tuple(g, step_bytes, stripe, contention);
    auto it = s_.folded_price.find(key);
    if (it != s_.folded_price.end()) return it->second;
    const auto& routes = *s_.routes;
    double price = 0;
    if (!contention) {
      // Each flow alone on its route (kLowerBound and the contention-free play): the slowest.
      for (const RingFlow& f : RingFlows(s_.Members(g), routes, stripe)) {
        price = std::max(price, routes.GpuToGpu(f.from, f.to).Seconds(step_bytes * f.fraction));
      }
    } else {
      // The group's flows and those of the folded groups that share a link with them, launched together.
      std::vector<std::pair<Route, double>> flows;
      std::unordered_set<uint32_t> used;
      for (const RingFlow& f : RingFlows(s_.Members(g), routes, stripe)) {
        const Route r = routes.GpuToGpu(f.from, f.to);
        for (uint32_t i = 0; i < r.num_links; ++i) used.insert(r.links[i]);
        flows.emplace_back(r, step_bytes * f.fraction);
      }
      for (uint32_t h : s_.groups[g].family) {
        if (h == g) continue;
        std::vector<std::pair<Route, double>> theirs;
        bool shares = false;
        for (const RingFlow& f : RingFlows(s_.Members(h), routes, stripe)) {
          const Route r = routes.GpuToGpu(f.from, f.to);
          for (uint32_t i = 0; i < r.num_links; ++i) shares = shares || used.count(r.links[i]) > 0;
          theirs.emplace_back(r, step_bytes * f.fraction);
        }
        if (shares) flows.insert(flows.end(), theirs.begin(), theirs.end());
      }
      price = FluidMakespan(flows, routes);
    }
    s_.folded_price.emplace(key, price);
    return price;
  }

  // Broadcasts, all-to-alls and trees: every member's end once all members have called.
  bool AllAtOnce(uint32_t g, uint32_t inst, const POp& op) {
    const auto& m = s_.Members(g);
    const uint32_t n = static_cast<uint32_t>(m.size());
    auto& ends = ends_[g];
    if (ends.size() >= (size_t{inst} + 1) * n && ends[size_t{inst} * n] >= 0) return true;
    std::vector<double> p(n);
    for (uint32_t r = 0; r < n; ++r) {
      p[r] = PostAt(g, inst, r);
      if (p[r] < 0) return false;
    }
    std::vector<double> e = p;
    const auto& routes = *s_.routes;
    if (op.collective == CollectiveKind::kBroadcast) {
      // The root sends the buffer to every member at once (sim/engine.cc RunCollective).
      for (uint32_t j = 1; j < n; ++j) {
        const Route& r = Keep(routes.GpuToGpu(m[0], m[j]));
        const double start = std::max(p[0], p[j]);
        const double end = start + FlowSeconds(r, op.bytes, CollKey(g, inst, 0, j));
        Record(CollKey(g, inst, 0, j), start, end, r);
        e[j] = std::max(e[j], end);
        e[0] = std::max(e[0], end);
      }
    } else if (op.collective == CollectiveKind::kAllToAll) {
      for (uint32_t a = 0; a < n; ++a) {
        for (uint32_t j = 1; j < n; ++j) {
          const uint32_t b = (a + j) % n;
          const Route& r = Keep(routes.GpuToGpu(m[a], m[b]));
          const double start = std::max(p[a], p[b]);
          const double end = start + FlowSeconds(r, op.bytes / n, CollKey(g, inst, a, j));
          Record(CollKey(g, inst, a, j), start, end, r);
          e[a] = std::max(e[a], end);
          e[b] = std::max(e[b], end);
        }
      }
    } else {
      // Binary tree by rank: up to the parents, then the result back down; then the remaining latencies.
      std::vector<double> up = p;
      for (uint32_t a = 1; a < n; ++a) {
        const uint32_t parent = (a - 1) / 2;
        const Route& r = Keep(routes.GpuToGpu(m[a], m[parent]));
        const double start = std::max(p[a], p[parent]);
        const double end = start + FlowSeconds(r, op.bytes, CollKey(g, inst, a, 0));
        Record(CollKey(g, inst, a, 0), start, end, r);
        up[a] = std::max(up[a], end);
        up[parent] = std::max(up[parent], end);
      }
      e = up;
      for (uint32_t a = 1; a < n; ++a) {
        const uint32_t parent = (a - 1) / 2;
        const Route& r = Keep(routes.GpuToGpu(m[parent], m[a]));
        const double start = std::max(up[a], up[parent]);
        const double end = start + FlowSeconds(r, op.bytes, CollKey(g, inst, a, 1));
        Record(CollKey(g, inst, a, 1), start, end, r);
        e[a] = std::max(e[a], end);
        e[parent] = std::max(e[parent], end);
      }
      const double depth = std::floor(std::log2(static_cast<double>(n)));
      if (depth > 1) {
        for (uint32_t a = 0; a < n; ++a) e[a] += 2 * (depth - 1) * routes.GpuToGpu(m[a], m[(a + 1) % n]).latency_s;
      }
    }
    if (ends.size() < (size_t{inst} + 1) * n) ends.resize((size_t{inst} + 1) * n, kUnknown);
    for (uint32_t r = 0; r < n; ++r) ends[size_t{inst} * n + r] = e[r];
    return true;
  }

  // The end of actor `id`'s part in its current collective; kUnknown when it must wait (registered).
  double CollectiveEnd(uint32_t id, const POp& op) {
    Actor& a = actors_[id];
    const uint32_t g = op.ref, r = op.rank, inst = a.op_ref;
    const auto& m = s_.Members(g);
    const uint32_t n = static_cast<uint32_t>(m.size());
    const double p = PostAt(g, inst, r);
    if (n < 2) return p;
    const bool all_reduce = op.collective == CollectiveKind::kAllReduce;
    if (op.collective == CollectiveKind::kBroadcast || op.collective == CollectiveKind::kAllToAll ||
        (all_reduce && op.algorithm == Algorithm::kTree)) {
      if (!AllAtOnce(g, inst, op)) {
        Block(id, GroupRes(g));
        return kUnknown;
      }
      return ends_[g][size_t{inst} * n + r];
    }
    const bool nvls = all_reduce && op.algorithm == Algorithm::kNvls;
    const uint32_t steps = all_reduce ? 2 * (n - 1) : n - 1;
    const double step_bytes = nvls ? op.bytes / models::kNvlsEfficiency : op.bytes / n * steps;
    const Hop& h = s_.HopOf(g, r, !nvls);
    const double trailing = nvls ? h.to_next.latency_s : (steps - 1) * h.to_next.latency_s;
    if (s_.folded && s_.groups[g].folded) return p + FoldedSeconds(g, step_bytes, !nvls) + trailing;
    const double p_prev = PostAt(g, inst, h.prev), p_next = PostAt(g, inst, h.next);
    if (p_prev < 0 || p_next < 0) {
      Block(id, GroupRes(g));
      return kUnknown;
    }
    const Hop& hp = s_.HopOf(g, h.prev, !nvls);
    const Hop& hn = s_.HopOf(g, h.next, !nvls);
    // When each member posts its own send and its receive: after its staged copies when its hop is staged
    // (the copy to host memory, then to the peer's host memory, both blocking).
    const auto posted = [&](const Hop& x, uint32_t rank, double px) {
      if (!x.staged_send) return px;
      const double t1 = px + FlowSeconds(x.g2h, step_bytes, CollKey(g, inst, rank, 1));
      const double t2 = t1 + FlowSeconds(x.h2h, step_bytes, CollKey(g, inst, rank, 2));
      if (rank == r) {
        Record(CollKey(g, inst, rank, 1), px, t1, x.g2h);
        Record(CollKey(g, inst, rank, 2), t1, t2, x.h2h);
      }
      return t2;
    };
    const bool staged = h.staged_send || h.staged_recv;
    const double u_r = posted(h, r, p);
    const double u_next = posted(hn, h.next, p_next);
    const double u_prev = posted(hp, h.prev, p_prev);
    double end = 0;
    // This member's own send.
    const double own_bytes = step_bytes * h.fraction;
    const double send_start = std::max(u_r, u_next);
    if (h.staged_send) {
      end = std::max(end, send_start + h.notice.latency_s);
    } else {
      const double e = send_start + FlowSeconds(h.to_next, own_bytes, CollKey(g, inst, r, 0));
      Record(CollKey(g, inst, r, 0), send_start, e, h.to_next);
      end = std::max(end, e);
    }
    // The other rails' flows of its hop, started with its call.
    for (size_t i = 0; i < h.stripe_routes.size(); ++i) {
      const uint64_t key = CollKey(g, inst, r, 8 + static_cast<uint32_t>(i));
      const double e = p + FlowSeconds(h.stripe_routes[i], own_bytes, key);
      Record(key, p, e, h.stripe_routes[i]);
      end = std::max(end, e);
    }
    // What it receives from its predecessor.
    const double recv_start = std::max(u_prev, u_r);
    if (h.staged_recv) {
      const double copy = recv_start + hp.notice.latency_s;
      const double e = copy + FlowSeconds(h.h2g, step_bytes, CollKey(g, inst, r, 4));
      Record(CollKey(g, inst, r, 4), copy, e, h.h2g);
      end = std::max(end, e);
    } else {
      end = std::max(end, recv_start + FlowSeconds(hp.to_next, step_bytes * hp.fraction, CollKey(g, inst, h.prev, 0)));
    }
    if (staged) {
      // The staged exchange waits for every send the device has posted.
      if (!WaitAllSends(id)) return kUnknown;
      end = std::max(end, a.t);
    }
    return end + trailing;
  }

  // ---- the actors ----

  void Advance(uint32_t id) {
    Actor& a = actors_[id];
    Stats& st = stats_[a.slot];
    for (;;) {
      if (a.reap) {
        if (!Reap(id)) return;
        a.reap = false;
      }
      if (a.pc == a.ops->size()) {
        if (Finish(id)) return;
        return;
      }
      const POp& op = (*a.ops)[a.pc];
      if (a.begin_s < 0) a.begin_s = a.t;
      switch (op.kind) {
        case Kind::kCompute:
          a.t += op.seconds;
          if (op.category == Category::kIdle) {
            // (a delay standing for micro-batches not played: LoweringPlayer's extrapolation)
          } else if (op.category == Category::kOptimizer) {
            st.optimizer_s += op.seconds;
          } else if (op.category != Category::kForward && op.category != Category::kBackward) {
            // (a CPU offload copy, priced as its transfer)
          } else {
            (op.category == Category::kForward ? st.forward_s : st.backward_s) += op.seconds;
            st.pipeline_end_s = std::max(st.pipeline_end_s, a.t);
          }
          break;
        case Kind::kComputeAsync:
          a.async_end = a.t + op.seconds;
          (op.category == Category::kForward ? st.forward_s : st.backward_s) += op.seconds;
          st.pipeline_end_s = std::max(st.pipeline_end_s, a.async_end);
          break;
        case Kind::kComputeJoin:
          a.t = std::max(a.t, a.async_end);
          a.async_end = 0;
          break;
        case Kind::kSend: {
          Msgs& m = msgs_[op.ref];
          const uint32_t seq = m.sent++;
          Put(m.send_post, seq, a.t);
          Put(m.bytes, seq, op.bytes);
          a.pending.emplace_back(op.ref, seq);
          Resolve(op.ref);
          break;
        }
        case Kind::kPostRecv: {
          Msgs& m = msgs_[op.ref];
          const uint32_t seq = m.gets++;
          Put(m.recv_post, seq, a.t);
          m.early.push_back(seq);
          Resolve(op.ref);
          break;
        }
        case Kind::kRecv: {
          Msgs& m = msgs_[op.ref];
          if (!a.in_op) {
            a.in_op = true;
            if (!m.early.empty()) {
              a.early = true;
              a.op_ref = m.early.front();
            } else {
              a.early = false;
              a.op_ref = m.gets++;
              Put(m.recv_post, a.op_ref, a.t);
              Resolve(op.ref);
            }
          }
          const double done = At(m.done, a.op_ref);
          if (done < 0) {
            Block(id, StreamRes(op.ref));
            return;
          }
          a.t = std::max(a.t, done);
          if (a.early) m.early.pop_front();
          a.in_op = false;
          break;
        }
        case Kind::kCollective: {
          if (!a.in_op) {
            a.in_op = true;
            a.call_s = a.t;
            a.op_ref = counters_[(uint64_t{a.slot} << 32) | op.ref]++;
            PostOf(op.ref, a.op_ref, op.rank) = a.t + op.seconds;
            Wake(GroupRes(op.ref));
          }
          const double end = CollectiveEnd(id, op);
          if (end < 0) return;
          a.t = end;
          if (op.category == Category::kTp) st.tp_s += end - a.call_s;
          a.in_op = false;
          break;
        }
        case Kind::kSignal:
          signals_[a.slot].push_back(a.t);
          Wake(SignalRes(a.slot));
          break;
        case Kind::kAwait: {
          const auto& sig = signals_[a.slot];
          if (sig.size() <= a.awaits) {
            Block(id, SignalRes(a.slot));
            return;
          }
          a.t = std::max(a.t, sig[a.awaits++]);
          break;
        }
        case Kind::kJoin:
          if (!WaitAllSends(id)) return;
          if (dp_end_[a.slot] < 0) {
            Block(id, DoneRes(a.slot));
            return;
          }
          a.t = std::max(a.t, dp_end_[a.slot]);
          break;
        case Kind::kWaitSends:
          if (!WaitAllSends(id)) return;
          break;
      }
      if (trace_ != nullptr) {
        (*trace_)[a.slot].push_back({static_cast<uint8_t>(a.dp ? 1 : 0), static_cast<uint32_t>(a.pc), a.begin_s,
                                     op.kind == Kind::kComputeAsync ? a.async_end : a.t, op.category});
      }
      a.begin_s = -1;
      ++a.pc;
      a.reap = !LowerBound();
    }
  }

  // The end of a stream: the stagers stopped (after their last notices), every send waited for.
  bool Finish(uint32_t id) {
    Actor& a = actors_[id];
    if (a.finish_step == 0) {
      // Stagers in the engine's order (by mailbox key: sender, receiver, channel).
      if (!a.dp) {
        if (stagers_.empty() && !stagers_built_) BuildStagers();
        const auto& mine = stagers_[a.slot];
        for (; a.next_stager < mine.size(); ++a.next_stager) {
          const uint32_t k = mine[a.next_stager];
          const Msgs& m = msgs_[k];
          if (m.sent == 0) continue;
          if (m.resolved < m.sent) {
            Block(id, StreamRes(k));
            return false;
          }
          a.t = std::max(a.t, m.stager_free) + s_.streams[k].g2h.latency_s;
        }
      }
      a.finish_step = 1;
    }
    if (!WaitAllSends(id)) return false;
    a.finished = true;
    Stats& st = stats_[a.slot];
    if (a.dp) {
      dp_end_[a.slot] = a.t;
      Wake(DoneRes(a.slot));
    } else {
      st.end_s = a.t;
    }
    return true;
  }

  void BuildStagers() {
    stagers_built_ = true;
    stagers_.assign(s_.programs.size(), {});
    std::vector<uint32_t> order;
    for (uint32_t k = 0; k < s_.streams.size(); ++k) {
      if (s_.streams[k].staged) order.push_back(k);
    }
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
      const Stream& a = s_.streams[x];
      const Stream& b = s_.streams[y];
      return std::make_tuple(a.src, a.dst, a.channel) < std::make_tuple(b.src, b.dst, b.channel);
    });
    for (uint32_t k : order) stagers_[s_.streams[k].src_slot].push_back(k);
  }

  Setup& s_;
  const Slowdowns* slow_;
  bool contention_;
  bool record_;
  std::vector<std::vector<PlayResult::Span>>* trace_;
  std::vector<Actor> actors_;
  std::deque<uint32_t> ready_;
  std::vector<std::vector<uint32_t>> waiters_;
  std::vector<Msgs> msgs_;
  std::vector<std::vector<double>> posts_, ends_;  // per group: per instance and rank
  std::unordered_map<uint64_t, uint32_t> counters_;  // (slot, group) -> collectives called so far
  std::vector<std::vector<double>> signals_;
  std::vector<double> dp_end_;
  std::vector<Stats> stats_;
  std::vector<FlowRecord> flows_;
  std::deque<Route> arena_;
  Route scratch_;
  std::vector<std::vector<uint32_t>> stagers_;
  bool stagers_built_ = false;
};

// From one play's flows: every flow's slowdown (for each link of its route, the average number of flows on
// the link while it ran, weighed by the link's bandwidth against the route's bottleneck), and the most
// flows ever on one link at once.
// A flow's source (a stream's leg, a collective member's sub-flow): the key without its sequence or instance.
uint64_t SourceOf(uint64_t key) {
  return key >> 63 ? key & ~(uint64_t{0x3FFFFFFF} << 3) : key & ~(uint64_t{0x3FFFF} << 23);
}

uint32_t Contention(const std::vector<FlowRecord>& flows, const models::PlatformRoutes& routes, Slowdowns* slow) {
  // The flows of each link (counting sort by link).
  const uint32_t L = routes.num_links();
  std::vector<uint32_t> offset(L + 1, 0);
  for (const FlowRecord& f : flows) {
    for (uint32_t i = 0; i < f.route->num_links; ++i) ++offset[f.route->links[i] + 1];
  }
  for (uint32_t l = 0; l < L; ++l) offset[l + 1] += offset[l];
  std::vector<uint32_t> order(offset[L]);
  {
    std::vector<uint32_t> at(offset.begin(), offset.end() - 1);
    for (uint32_t f = 0; f < flows.size(); ++f) {
      const Route& r = *flows[f].route;
      for (uint32_t i = 0; i < r.num_links; ++i) order[at[r.links[i]]++] = f;
    }
  }
  uint32_t most = flows.empty() ? 0 : 1;
  struct Event {
    double t;
    int delta;      // + weight at the start of a flow's bandwidth phase, − at its end
    uint32_t flow;  // index among the link's flows
  };
  std::vector<Event> events;
  std::vector<double> area_from, area_to;
  for (uint32_t link = 0; link < L; ++link) {
    if (offset[link] == offset[link + 1]) continue;
    const std::span<const uint32_t> fs(order.data() + offset[link], offset[link + 1] - offset[link]);
    if (flows[fs.front()].twins == nullptr) {
      // Flows of one source never overlap (a stream moves one message at a time, a collective member one
      // instance at a time).
      const uint64_t source = SourceOf(flows[fs.front()].key);
      bool one = true;
      for (uint32_t f : fs) one = one && SourceOf(flows[f].key) == source;
      if (one) continue;
    }
    // The bandwidth phase of each flow (after its latency), and how many flows it stands for on this link
    // (itself and its folded copies).
    const auto weight = [&](uint32_t f) {
      if (flows[f].twins == nullptr) return 1;
      for (const auto& [l, n] : *flows[f].twins) {
        if (l == link) return static_cast<int>(n);
      }
      return 1;
    };
    events.clear();
    int total = 0;
    for (uint32_t i = 0; i < fs.size(); ++i) {
      const FlowRecord& f = flows[fs[i]];
      const double start = std::min(f.end, f.start + f.route->latency_s);
      if (f.end <= start) continue;
      const int w = weight(fs[i]);
      events.push_back({start, +w, i});
      events.push_back({f.end, -w, i});
      total += w;
    }
    if (total < 2) continue;
    // Ends before starts at the same time.
    std::sort(events.begin(), events.end(),
              [](const Event& x, const Event& y) { return x.t != y.t ? x.t < y.t : x.delta < y.delta; });
    area_from.assign(fs.size(), 0);
    area_to.assign(fs.size(), 0);
    int level = 0;
    double area = 0, last = events.front().t;
    for (const Event& ev : events) {
      area += level * (ev.t - last);  // ∫ flows on the link, up to ev.t
      last = ev.t;
      (ev.delta > 0 ? area_from : area_to)[ev.flow] = area;
      level += ev.delta;
      most = std::max<uint32_t>(most, static_cast<uint32_t>(std::max(level, 0)));
    }
    const double bw = routes.LinkBandwidth(link);
    for (uint32_t i = 0; i < fs.size(); ++i) {
      const FlowRecord& f = flows[fs[i]];
      const double start = std::min(f.end, f.start + f.route->latency_s);
      if (f.end <= start) continue;
      const double average = (area_to[i] - area_from[i]) / (f.end - start);
      const double factor = average * f.route->bandwidth_bytes_s / bw;
      if (factor > 1 + 1e-9) {
        double& x = (*slow)[f.key];
        x = std::max(x, factor);
      }
    }
  }
  return most;
}

}  // namespace

// ---- the player ----------------------------------------------------------------------------------------------

double SimulatorCompute::LayerSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double batch,
                                      bool forward, proto::Recompute recompute, models::SequenceSharding shard) const {
  if (forward) return cost_.ForwardSeconds(gpu, layer, tp, batch, shard);
  return cost_.BackwardSeconds(gpu, layer, tp, batch, recompute, shard);
}

double SimulatorCompute::OptimizerSeconds(const models::GpuSpec& gpu, double params) const {
  return cost_.OptimizerSeconds(gpu, params) + cost_.IterationOverheadSeconds(gpu);
}

LoweringPlayer::LoweringPlayer(const models::PlanContext& ctx, const ComputeSource& compute,
                               const std::string& calibration)
    : cluster_(ctx.cluster), model_(ctx.model), training_(ctx.training), compute_(compute),
      routes_(ctx.cluster, calibration) {}

namespace {

// `delays`: per pipeline, idle time at the start of each of its ranks (empty: none).
PlayResult PlayLowering(const models::Lowering& lw, const Fold* fold, const models::Cluster& cluster,
                        const ComputeSource& cs, const models::PlatformRoutes& routes, const PlayOptions& options,
                        const std::vector<double>& delays, Status* status) {
  Setup s;
  s.folded = fold != nullptr;
  s.played.assign(lw.ranks.size(), 1);
  if (fold != nullptr) {
    for (size_t i = 0; i < lw.ranks.size(); ++i) s.played[i] = fold->rep[i] == i ? 1 : 0;
  }
  BuildPrograms(lw, cluster, cs, routes, options.pricing, options.recompute, &s);
  for (size_t i = 0; i < s.programs.size(); ++i) {
    Program& prog = s.programs[i];
    if (!s.played[i] || prog.pipeline >= delays.size() || delays[prog.pipeline] <= 0) continue;
    POp wait;
    wait.kind = Kind::kCompute;
    wait.category = Category::kIdle;
    wait.seconds = delays[prog.pipeline];
    prog.main.insert(prog.main.begin(), wait);
  }
  PlayResult out;
  out.folded = s.folded;
  out.operations = s.operations;
  if (fold != nullptr) {
    // Every collective of a folded run is played by one device: the folded groups price with it.
    for (size_t g = 0; g < s.groups.size(); ++g) s.groups[g].folded = true;
    for (uint32_t g = 0; g < fold->folded_onto.size(); ++g) {
      if (fold->folded_onto[g] == g) s.groups[g].family.insert(s.groups[g].family.begin(), g);
    }
    for (uint32_t g = 0; g < fold->folded_onto.size(); ++g) {
      const uint32_t x = fold->folded_onto[g];
      if (x != models::kNone && x != g) s.groups[x].family.push_back(g);
    }
    // A pipeline stream's folded copies that cross its links share them (the engine plays them beside it,
    // or scales the links down by as many).
    for (Stream& st : s.streams) {
      auto it = fold->send_copies.find({st.src, st.dst, st.channel});
      if (it == fold->send_copies.end()) continue;
      std::map<uint32_t, uint32_t> sharing;
      for (uint32_t i = 0; i < st.route.num_links; ++i) sharing[st.route.links[i]] = 1;
      for (const auto& [from, to] : it->second) {
        const Route r = routes.GpuToGpu(from, to);
        for (uint32_t i = 0; i < r.num_links; ++i) {
          auto l = sharing.find(r.links[i]);
          if (l != sharing.end()) ++l->second;
        }
      }
      for (const auto& [link, n] : sharing) {
        if (n > 1) st.twins.emplace_back(link, n);
      }
    }
  } else {
    CountLinkSources(&s);
    out.max_link_sources = s.max_link_sources;
  }
  const bool simulator = options.pricing == Pricing::kSimulator;
  std::vector<std::vector<PlayResult::Span>> trace;
  const auto traced = [&]() -> std::vector<std::vector<PlayResult::Span>>* {
    if (!options.trace) return nullptr;
    trace.assign(lw.ranks.size(), {});
    return &trace;
  };
  Game first(s, nullptr, false, simulator, traced());
  *status = first.Run();
  if (!status->ok()) return out;
  Slowdowns slow;
  out.max_link_flows = simulator ? Contention(first.flows(), routes, &slow) : 0;
  std::vector<Game::Stats> stats = first.stats();
  out.plays = 1;
  for (int pass = 1; simulator && pass <= options.contention_passes; ++pass) {
    if (slow.empty() && !s.folded) break;  // nothing shared a link: the first play stands
    const bool again = pass < options.contention_passes;
    Game game(s, &slow, true, again, traced());
    *status = game.Run();
    if (!status->ok()) return out;
    stats = game.stats();
    ++out.plays;
    if (!again) break;
    Slowdowns next;
    Contention(game.flows(), routes, &next);
    // Halfway between the slowdowns seen before and after: the sharing each play sees overshoots the
    // other's.
    const double keep = 0.5;
    for (auto& [key, x] : slow) {
      auto it = next.find(key);
      x = keep * x + (1 - keep) * (it == next.end() ? 1.0 : it->second);
    }
    for (const auto& [key, x] : next) {
      if (!slow.count(key)) slow[key] = keep + (1 - keep) * x;
    }
  }
  out.devices.resize(lw.ranks.size());
  for (size_t i = 0; i < lw.ranks.size(); ++i) {
    const uint32_t from = fold != nullptr ? fold->rep[i] : static_cast<uint32_t>(i);
    const Game::Stats& g = stats[from];
    DevicePlay& d = out.devices[i];
    d.device = lw.ranks[i].device;
    d.pipeline = lw.ranks[i].pipeline;
    d.stage = lw.ranks[i].stage;
    d.forward_s = g.forward_s;
    d.backward_s = g.backward_s;
    d.optimizer_s = g.optimizer_s;
    d.tp_s = g.tp_s;
    d.pipeline_end_s = g.pipeline_end_s;
    d.end_s = g.end_s;
    out.iteration_s = std::max(out.iteration_s, g.end_s);
  }
  out.trace = std::move(trace);
  return out;
}

}  // namespace

Result<PlayResult> LoweringPlayer::PlayOnce(const proto::Plan& plan, const PlayOptions& given,
                                            const std::vector<double>& delays, const Again& again) const {
  const models::PlanContext ctx{cluster_, model_, training_};
  PlayOptions options = given;
  options.recompute = models::EffectiveRecompute(plan, training_);
  models::LoweringOptions lo;
  lo.fuse_passes = true;  // the simulator's balanced fidelity
  lo.tp_in_compute = [this](uint32_t device, uint32_t layer, uint32_t tp, double batch) {
    return compute_.TpInCompute(compute_.Gpu(device), layer, tp, batch);
  };
  std::string note = "folding off";
  if (options.fold && options.pricing != Pricing::kUpperBound) {
    note = FoldShape(plan, cluster_);
    if (note.empty()) {
      models::LoweringOptions reps = lo;
      reps.lower_devices = Representatives(plan, cluster_);
      reps.skeletons = true;
      HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, models::LowerPlan(plan, ctx, reps));
      Fold fold;
      note = FoldRanks(lowering, cluster_, &fold);
      if (note.empty()) {
        Status status;
        PlayResult out = PlayLowering(lowering, &fold, cluster_, compute_, routes_, options, delays, &status);
        if (!status.ok()) return status;
        if (again) {
          if (auto more = again(out)) {
            out = PlayLowering(lowering, &fold, cluster_, compute_, routes_, options, *more, &status);
            if (!status.ok()) return status;
          }
        }
        return out;
      }
    }
  }
  HETSIM_ASSIGN_OR_RETURN(models::Lowering lowering, models::LowerPlan(plan, ctx, lo));
  Status status;
  PlayResult out = PlayLowering(lowering, nullptr, cluster_, compute_, routes_, options, delays, &status);
  if (!status.ok()) return status;
  if (again) {
    if (auto more = again(out)) {
      out = PlayLowering(lowering, nullptr, cluster_, compute_, routes_, options, *more, &status);
      if (!status.ok()) return status;
    }
  }
  out.fold_note = note;
  return out;
}

std::optional<PlayResult> LoweringPlayer::Extrapolated(const proto::Plan& plan, const PlayOptions& options) const {
  const int P = plan.pipelines_size();
  if (P == 0) return std::nullopt;
  const bool interleaved = models::EffectiveSchedule(plan) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B;
  const bool gpipe = models::EffectiveSchedule(plan) == proto::Plan::SCHEDULE_GPIPE;
  // Per pipeline: micro-batches played (past the warm-up and cool-down transients, and past the engine's 32
  // outstanding sends under GPipe), and the step between samples (interleaving plays groups of S).
  std::vector<uint32_t> played(P), step(P);
  bool any = false;
  for (int p = 0; p < P; ++p) {
    const auto& pipe = plan.pipelines(p);
    const uint32_t S = std::max(1, pipe.stages_size());
    step[p] = interleaved ? S : 1;
    uint32_t cap = std::max<uint32_t>(2 * S + 2, gpipe ? 34 : 0);
    cap = (cap + step[p] - 1) / step[p] * step[p];
    // Four plays of about `cap` micro-batches are worth it from about five times that many.
    played[p] = pipe.num_micro_batches() >= 5 * cap ? cap : pipe.num_micro_batches();
    any = any || played[p] < pipe.num_micro_batches();
  }
  if (!any) return std::nullopt;
  if (plan.zero_stage() >= 3) {
    // ZeRO-3 gathers every micro-batch across pipelines: they keep one count.
    for (int p = 0; p < P; ++p) played[p] = played[0];
  }
  PlayOptions sample = options;
  sample.extrapolate = false;
  sample.trace = false;
  // The simulator folds a plan only when its pipelines have one micro-batch count: cutting some pipelines
  // must not make the samples foldable where the plan is not.
  for (int p = 1; p < P; ++p) {
    sample.fold = sample.fold && plan.pipelines(p).num_micro_batches() == plan.pipelines(0).num_micro_batches();
  }
  // Pipeline ends at `played` micro-batches, one step and two steps more; the first sample's lowering is
  // played again with the delays.
  std::vector<std::vector<double>> ends(3, std::vector<double>(P, 0));
  proto::Plan reduced = plan;
  const auto sample_plan = [&](int k) {
    for (int p = 0; p < P; ++p) {
      const bool cut = played[p] < plan.pipelines(p).num_micro_batches();
      reduced.mutable_pipelines(p)->set_num_micro_batches(played[p] + (cut ? k * step[p] : 0));
    }
    return reduced;
  };
  const auto record = [&](int k, const PlayResult& r) {
    for (const DevicePlay& d : r.devices) ends[k][d.pipeline] = std::max(ends[k][d.pipeline], d.pipeline_end_s);
  };
  for (int k = 1; k <= 2; ++k) {
    auto r = PlayOnce(sample_plan(k), sample, {});
    if (!r.ok()) return std::nullopt;
    record(k, *r);
  }
  // Each cut pipeline must be periodic already: two equal increments (within 2% where contention passes
  // re-price flows by the sharing each play saw, which need not repeat exactly; their mean is taken).
  const bool exact = options.pricing != Pricing::kSimulator || options.contention_passes == 0;
  bool periodic = false;
  const Again delays = [&](const PlayResult& first) -> std::optional<std::vector<double>> {
    record(0, first);
    std::vector<double> out(P, 0);
    for (int p = 0; p < P; ++p) {
      if (played[p] >= plan.pipelines(p).num_micro_batches()) continue;
      const double d1 = ends[1][p] - ends[0][p], d2 = ends[2][p] - ends[1][p];
      const double tolerance = exact ? 1e-9 * ends[2][p] + 1e-12 : 0.02 * d1;
      if (!(d1 > 0) || std::abs(d2 - d1) > tolerance) return std::nullopt;
      out[p] = (plan.pipelines(p).num_micro_batches() - played[p]) / static_cast<double>(step[p]) * (d1 + d2) / 2;
    }
    periodic = true;
    return out;
  };
  auto out = PlayOnce(sample_plan(0), sample, {}, delays);
  if (!out.ok() || !periodic) return std::nullopt;
  // The compute of the micro-batches not played.
  for (DevicePlay& d : out->devices) {
    const double scale = plan.pipelines(static_cast<int>(d.pipeline)).num_micro_batches() /
                         static_cast<double>(played[d.pipeline]);
    d.forward_s *= scale;
    d.backward_s *= scale;
    d.tp_s *= scale;
  }
  out->extrapolated = true;
  return std::move(*out);
}

Result<PlayResult> LoweringPlayer::Play(const proto::Plan& plan, const PlayOptions& options) const {
  if (options.extrapolate && !options.trace) {
    if (auto out = Extrapolated(plan, options)) return std::move(*out);
  }
  return PlayOnce(plan, options, {});
}

}  // namespace hetsim::planners
