// The analytic player's programs: a lowering's ranks priced at the simulator's (or the bounds') prices,
// with the simulator's folding decision (planners/lowering_play.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "models/communicator.h"
#include "models/op_prices.h"
#include "models/topology.h"
#include "planners/lowering_play.h"

namespace hetsim::planners::play {

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

std::vector<RingFlow> AllToAllFlows(const std::vector<uint32_t>& g) {
  std::vector<RingFlow> flows;
  const size_t n = g.size();
  for (size_t a = 0; a < n; ++a) {
    for (size_t i = 1; i < n; ++i) flows.push_back({g[a], g[(a + i) % n], 1.0 / static_cast<double>(n)});
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
                  static_cast<uint8_t>(op.category), op.recompute, overhead, r.experts};
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    const double batch = op.sequences();
    const double seconds = models::PassSeconds(
        op, r, cs_.cost().model(), overhead ? PassOverhead(gpu) : 0, separate_, recompute_,
        [&](uint32_t l, bool forward, proto::Recompute rc) {
          return cs_.LayerSeconds(gpu, l, r.tp, batch, forward, rc, r.shard, r.experts);
        });
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
    models::ExpertSharding experts;
    bool operator==(const Key& o) const {
      return gpu == o.gpu && tp == o.tp && cp == o.cp && ulysses == o.ulysses && begin == o.begin && end == o.end &&
             seqs == o.seqs && category == o.category && recompute == o.recompute && overhead == o.overhead &&
             experts == o.experts;
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

// comm.tp_overlap (models/op_prices.h OverlapTpChunks, as sim/program.cc OverlapTp).
std::vector<POp> OverlapTp(const std::vector<POp>& ops) {
  return models::OverlapTpChunks(ops, Kind::kCompute, Kind::kComputeAsync, Kind::kComputeJoin, IsTpComm);
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
  // Each group's collectives priced as the simulator prices them (models::GroupComms): every rank of a
  // ring carries the same bytes; groups spanning nodes as NCCL runs them.
  const std::vector<models::GroupComm> group_comm = models::GroupComms(
      cluster, lw.groups, [&](uint32_t d) { return prices.Efficiency(cs.Gpu(d)); }, cs.cost());
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
        op.hide_share = lo.hide_share;
        op.sm_share = lo.sm_share;
        // An activation offload copy runs beside its pass's compute (sim/engine.cc): not compute itself.
        const bool activations = lo.category == Category::kForward || lo.category == Category::kBackward;
        if (lo.kind == models::OpKind::kHostCopy && activations) op.kind = Kind::kTransfer;
        switch (lo.kind) {
          case models::OpKind::kCompute: {
            op.seconds = prices.Seconds(lo, r, gpu);  // (0: models::DropIdleCompute)
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
            if (s->fold != nullptr && !s->played[lw.device_slot[lo.peer]] && s->fold->rep[lw.device_slot[lo.peer]] == i) {
              // A ring message from a device folded onto this one (models/fold.h): it arrives as this
              // device's own message to its ring peer does, so it is matched on that stream.
              op.ref = stream_of(r.device, s->fold->ring_peer.at({r.device, lo.channel}), lo.channel);
            } else {
              op.ref = stream_of(lo.peer, r.device, lo.channel);
            }
            // A CPU-staged transfer is received where it is needed (sim/engine.cc).
            if (lo.kind == models::OpKind::kPostRecv && s->streams[op.ref].staged) continue;
            break;
          case models::OpKind::kCollective: {
            op.ref = lo.group;
            op.rank = lo.rank;
            const uint32_t n = static_cast<uint32_t>(lw.groups[lo.group].size());
            const models::CollectivePrice price =
                models::PriceCollective(lo, group_comm[lo.group], prices.CollectiveLatency(gpu, n));
            op.seconds = price.latency_s;
            // The collective efficiency: the simulator's transfers carry the bytes that take as long at the
            // full bandwidth. The lower bound leaves it out (links at their full bandwidth).
            if (pricing != Pricing::kLowerBound) op.bytes = price.bytes;
            break;
          }
          default:
            break;
        }
        out.push_back(op);
      }
    }
    models::HideBehindGemms(&prog.main, Kind::kCompute, Kind::kComputeAsync, Kind::kComputeJoin);
    models::DropIdleCompute(&prog.main, Kind::kCompute);
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


}  // namespace hetsim::planners::play
