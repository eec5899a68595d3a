// One play of the analytic player's programs as a dependency graph, and the link sharing it saw
// (planners/lowering_play.h).
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <span>
#include <unordered_map>

#include "models/op_prices.h"
#include "models/topology.h"
#include "planners/lowering_play.h"

namespace hetsim::planners::play {

class Game::Impl {
 public:
  using Stats = GameStats;
  Impl(Setup& s, const Slowdowns* slow, bool contention, bool record,
       std::vector<std::vector<PlayResult::Span>>* trace)
      : s_(s), slow_(slow), contention_(contention), record_(record), trace_(trace) {}

  Status Run() {
    const size_t n = s_.programs.size();
    actors_.resize(2 * n);
    msgs_.resize(s_.streams.size());
    posts_.resize(s_.groups.size());
    ends_.resize(s_.groups.size());
    signals_.resize(n);
    gathered_.resize(n);
    dp_end_.assign(n, kUnknown);
    stats_.resize(n);
    const size_t resources = s_.streams.size() + s_.groups.size() + 3 * n;
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
    double async_start = 0, async_s = 0;  // kComputeAsync's start and seconds
    float async_sm_share = 0;             // ... and its hidden collectives' SM share (POp::sm_share)
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
  uint32_t GatheredRes(uint32_t slot) const {
    return static_cast<uint32_t>(s_.streams.size() + s_.groups.size() + 2 * s_.programs.size()) + slot;
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
      if (const double* x = slow_->find(key)) slow = std::max(slow, *x);
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

  // When a folded collective's flows have all arrived, after its call (Setup::folded): ring steps (striped
  // or not, `step_bytes` per member) or, with `all_to_all`, a direct all-to-all of `step_bytes` per member.
  double FoldedSeconds(uint32_t g, double step_bytes, bool stripe, bool all_to_all = false) {
    const bool contention = contention_;
    const uint8_t mode = all_to_all ? 2 : stripe ? 1 : 0;
    const auto key = std::make_tuple(g, step_bytes, mode, contention);
    auto it = s_.folded_price.find(key);
    if (it != s_.folded_price.end()) return it->second;
    const auto& routes = *s_.routes;
    const auto flows_of = [&](uint32_t h) {
      return all_to_all ? AllToAllFlows(s_.Members(h)) : RingFlows(s_.Members(h), routes, stripe);
    };
    double price = 0;
    if (!contention) {
      // Each flow alone on its route (kLowerBound and the contention-free play): the slowest.
      for (const RingFlow& f : flows_of(g)) {
        price = std::max(price, routes.GpuToGpu(f.from, f.to).Seconds(step_bytes * f.fraction));
      }
    } else {
      // The group's flows and those of the folded groups that share a link with them, launched together.
      std::vector<std::pair<Route, double>> flows;
      std::unordered_set<uint32_t> used;
      for (const RingFlow& f : flows_of(g)) {
        const Route r = routes.GpuToGpu(f.from, f.to);
        for (uint32_t i = 0; i < r.num_links; ++i) used.insert(r.links[i]);
        flows.emplace_back(r, step_bytes * f.fraction);
      }
      for (uint32_t h : s_.groups[g].family) {
        if (h == g) continue;
        std::vector<std::pair<Route, double>> theirs;
        bool shares = false;
        for (const RingFlow& f : flows_of(h)) {
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
      // The root sends the buffer to every member at once (sim/engine_collectives.cc RunCollective).
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
    if (s_.folded && s_.groups[g].folded && op.collective == CollectiveKind::kAllToAll) {
      return p + FoldedSeconds(g, op.bytes, false, true);
    }
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
    if (s_.folded && s_.groups[g].folded) {
      // The folded collective stands for its last member to finish: the longest hop's latency (the engine's
      // SlowestHopLatency).
      double slowest = 0;
      for (uint32_t k = 0; k < n; ++k) slowest = std::max(slowest, s_.HopOf(g, k, !nvls).to_next.latency_s);
      return p + FoldedSeconds(g, step_bytes, !nvls) + (nvls ? slowest : (steps - 1) * slowest);
    }
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
          a.async_start = a.t;
          a.async_s = op.seconds;
          a.async_sm_share = op.sm_share;
          (op.category == Category::kForward ? st.forward_s : st.backward_s) += op.seconds;
          st.pipeline_end_s = std::max(st.pipeline_end_s, a.async_end);
          break;
        case Kind::kComputeJoin: {
          // As the simulator's join: the hidden collectives ran from the compute's start until now.
          const double slower = models::SmContentionSeconds(a.async_s, a.t - a.async_start, a.async_sm_share);
          a.t = std::max(a.t, a.async_end) + slower;
          a.async_end = 0;
          a.async_sm_share = 0;
          if (slower > 0) {
            (op.category == Category::kForward ? st.forward_s : st.backward_s) += slower;
            st.pipeline_end_s = std::max(st.pipeline_end_s, a.t);
          }
          break;
        }
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
        // Main stream -> DP stream: gradients ready; DP stream -> main stream: parameters gathered
        // (comm.param_gather_overlap), as the engine's two semaphores.
        case Kind::kSignal:
          (a.dp ? gathered_ : signals_)[a.slot].push_back(a.t);
          Wake(a.dp ? GatheredRes(a.slot) : SignalRes(a.slot));
          break;
        case Kind::kAwait: {
          const auto& sig = (a.dp ? signals_ : gathered_)[a.slot];
          if (sig.size() <= a.awaits) {
            Block(id, a.dp ? SignalRes(a.slot) : GatheredRes(a.slot));
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
        case Kind::kTransfer:
          a.t += op.seconds;
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
  std::vector<std::vector<double>> gathered_;  // per slot: when the DP stream gathered each group (kSignal)
  std::vector<double> dp_end_;
  std::vector<Stats> stats_;
  std::vector<FlowRecord> flows_;
  std::deque<Route> arena_;
  Route scratch_;
  std::vector<std::vector<uint32_t>> stagers_;
  bool stagers_built_ = false;
};

Game::Game(Setup& s, const Slowdowns* slow, bool contention, bool record,
           std::vector<std::vector<PlayResult::Span>>* trace)
    : impl_(std::make_unique<Impl>(s, slow, contention, record, trace)) {}
Game::~Game() = default;
Status Game::Run() { return impl_->Run(); }
const std::vector<GameStats>& Game::stats() const { return impl_->stats(); }
std::vector<FlowRecord>& Game::flows() { return impl_->flows(); }

namespace {

// A flow's source (a stream's leg, a collective member's sub-flow): the key without its sequence or instance.
uint64_t SourceOf(uint64_t key) {
  return key >> 63 ? key & ~(uint64_t{0x3FFFFFFF} << 3) : key & ~(uint64_t{0x3FFFF} << 23);
}

}  // namespace

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


}  // namespace hetsim::planners::play
