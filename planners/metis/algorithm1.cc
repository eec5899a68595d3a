// Metis §4.2, Algorithm 1: for one stage-device assignment and one micro-batch count B, the data load
// balancing of each stage (DataLB, lines 7–13), the capacity-aware layer load balancing (LayerLB, lines 15,
// 34, 39), the DP-first DFS over intra-stage plans (lines 16–40) and the cost of eq. 1 (§4.2.1) that ranks
// its plans; the layout of a placement that the evaluations share.
#include "planners/metis/search_internal.h"

namespace hetsim::planners::metis {

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

void MakeLayout(const models::Cluster& cluster, const Profiler& prof, const NodeLinks& links, double boundary_bytes,
                const Placement& pl, Layout& lay, uint32_t from) {
  const uint32_t S = static_cast<uint32_t>(pl.stage_begin.size()) - 1;
  if (lay.S != S || lay.part_begin.size() != S + 1) from = 0;
  from = std::min(from, S);
  lay.S = S;
  lay.part_begin = pl.stage_begin;
  lay.parts.resize(pl.stage_begin[from]);
  lay.size.resize(S);
  lay.slot.resize(S + 1);
  lay.hetero.resize(S);
  lay.dp_link.resize(S);
  lay.pp.resize(S > 0 ? S - 1 : 0);
  lay.sig.resize(S);
  lay.pp_hop_s.resize(lay.pp.size());
  lay.slot[0] = 0;
  for (uint32_t i = pl.stage_begin[from]; i < pl.parts.size(); ++i) {
    const auto [n, k] = pl.parts[i];
    // Profiler::DeviceGib charges the most runtime memory of any node; a node that needs less (PCIe-only:
    // fewer NCCL channels) gets the difference back as capacity.
    const double slack = prof.memory().WorkspaceGib() - prof.memory().WorkspaceGib(cluster.nodes()[n]);
    lay.parts.push_back({n, k, prof.type_of_node(n), prof.class_of_node(n), cluster.nodes()[n].gpu->memory_gib + slack});
  }
  for (uint32_t s = from; s < S; ++s) {
    lay.size[s] = 0;
    lay.hetero[s] = 0;
    lay.dp_link[s] = models::Link{};
    lay.sig[s] = {0x12345678ull, 0x9abcdef0ull};
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
    const uint64_t position = S == 1 ? 3 : s == 0 ? 0 : s + 1 == S ? 2 : 1;
    lay.sig[s].first = Mix(lay.sig[s].first, (uint64_t{S} << 8) | position);
    lay.sig[s].second = Mix(lay.sig[s].second ^ 0xa5a5ull, (position << 32) | S);
  }
  // The links between neighbouring stages, from the one between stages from − 1 and from on.
  for (uint32_t s = from > 0 ? from - 1 : 0; s + 1 < S; ++s) {
    bool any_pp = false;
    lay.pp[s] = models::Link{};
    for (uint32_t i = lay.part_begin[s]; i < lay.part_begin[s + 1]; ++i) {
      for (uint32_t j = lay.part_begin[s + 1]; j < lay.part_begin[s + 2]; ++j) {
        Worst(lay.pp[s], links.at(lay.parts[i].node, lay.parts[j].node), any_pp);
      }
    }
    lay.pp_hop_s[s] = models::PointToPointSeconds(boundary_bytes, lay.pp[s]);
  }
}

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

double Evaluator::Run() {
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
  // Most pairs are cut because their stages cannot hold the model at all (the root's bound is +inf);
  // the prefix sums of PrepareMemory say so without the bound's other values.
  if (ctx_.knobs.use_bound && Incumbent() < kInf) {
    PrepareMemory();
    if (RootInfeasible()) {
      if (arrays_.short_of[S_] > 0) {
        uint32_t k = 0;
        while (arrays_.short_of[k + 1] == 0) ++k;
        short_at_ = k;
      }
      ++counters_.pruned;
      return kInf;
    }
  }
  PrepareBound();
  State st;
  st.tp.assign(S_, 1);
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

double Evaluator::Cost(const State& st) const {
  double sum = 0, mx = 0, dp_all = 0, opt = 0, fb_sync = 0, batch_gen = 0;
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
        // The released estimator's per-micro-batch overheads: fb_sync of the last stage (the largest over
        // its GPU types) and the batch generator (here the first stage's), each B times.
        if (s + 1 == S_) fb_sync = std::max(fb_sync, prof_.FbSyncSeconds(p.type, tpi, n));
        if (s == 0) batch_gen = std::max(batch_gen, prof_.BatchGenerationSeconds(p.type, tpi, n));
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
  return sum + (static_cast<double>(B_) - 1) * mx + dp_all + opt + static_cast<double>(B_) * (fb_sync + batch_gen);
}

void Evaluator::SetBegins(const Layout& lay, State& st) {
  st.begin.assign(lay.S + 1, 0);
  for (uint32_t s = 0; s < lay.S; ++s) {
    st.begin[s + 1] = st.begin[s] + st.blocks[s] + (s == 0 ? 1 : 0) + (s + 1 == lay.S ? 1 : 0);
  }
}

void Evaluator::SetBlocks(State& st) const {
  st.begin[0] = 0;
  for (uint32_t s = 0; s < S_; ++s) {
    st.begin[s + 1] = st.begin[s] + st.blocks[s] + (s == 0 ? 1 : 0) + (s + 1 == S_ ? 1 : 0);
  }
}

bool Evaluator::Invalid(uint32_t s, const State& st) const {
  const uint32_t tp = st.tp[s];
  const int tpi = prof_.TpIndex(tp);
  if (tpi < 0) return true;
  for (uint32_t i = lay_.part_begin[s]; i < lay_.part_begin[s + 1]; ++i) {
    const Part& p = lay_.parts[i];
    if (p.k % tp != 0 || !prof_.TpProfiled(p.cls, tpi)) return true;
  }
  return !st.split_ok[s];
}

void Evaluator::DataLB(uint32_t s, State& st, bool memory) const {
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

bool Evaluator::OomAt(uint32_t s, const State& st, uint32_t begin, uint32_t end, Miss* worst) const {
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

int32_t Evaluator::MaxBlocks(uint32_t s, State& st) const {
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

bool Evaluator::LayerLB(State& st, uint32_t capped) const {
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

void Evaluator::Dfs(uint32_t s, State st) {
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

void Evaluator::RecordMiss(uint32_t s, const State& st) {
  Miss m;
  m.shortfall_gib = -kInf;
  if (!OomAt(s, st, st.begin[s], st.begin[s + 1], &m) || !counters_.misses.Wants(m.shortfall_gib)) return;
  m.what = std::to_string(S_) + " stages, B=" + std::to_string(B_) + ": stage " + std::to_string(s) + " (" +
           std::to_string(lay_.size[s]) + " GPUs, tp " + std::to_string(st.tp[s]) + ", layers " +
           std::to_string(st.begin[s]) + "-" + std::to_string(st.begin[s + 1] - 1) + ")";
  counters_.misses.Add(std::move(m));
}

void Evaluator::Emit(const State& st) {
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
  if (keep_leaves_ > 0) KeepLeaf(c, st);
}

bool Evaluator::SamePlan(const State& a, const State& b) const {
  if (a.tp != b.tp || a.begin != b.begin) return false;
  for (uint32_t s = 0; s < S_; ++s) {
    const uint32_t dp = lay_.size[s] / a.tp[s];
    if (dp > 1 && !std::equal(a.split.begin() + lay_.slot[s], a.split.begin() + lay_.slot[s] + dp,
                              b.split.begin() + lay_.slot[s])) {
      return false;
    }
  }
  return true;
}

void Evaluator::KeepLeaf(double c, const State& st) {
  const uint64_t seq = leaf_seq_++;
  // A plan costing more than the threshold is beaten by keep plans the search already holds.
  if (c > incumbent_) return;
  if (leaves_.size() >= keep_leaves_ && !(c < leaves_.back().cost)) return;
  // The same plan reached twice (both branches of lines 30–41 can end in one state) costs the same: the
  // earlier stays.
  for (const Leaf& l : leaves_) {
    if (l.cost == c && SamePlan(l.st, st)) return;
  }
  const auto at = std::upper_bound(leaves_.begin(), leaves_.end(), c,
                                   [](double x, const Leaf& l) { return x < l.cost; });
  leaves_.insert(at, Leaf{c, seq, st});
  if (leaves_.size() > keep_leaves_) leaves_.pop_back();
}

}  // namespace hetsim::planners::metis
