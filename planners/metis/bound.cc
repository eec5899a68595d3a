// The exact cut of the Metis search (not in the paper): a lower bound on the eq. 1 cost of every plan the
// DFS of Algorithm 1 can still reach from a state, from each stage's least time per block and sequence
// over the TP degrees it can reach; an (assignment, B) pair or a subtree whose bound exceeds the best plan
// so far is skipped. Never changes the plan found (tests/planners: Metis.BoundAndThreadsDoNotChangeThePlan).
#include "planners/metis/search_internal.h"

namespace hetsim::planners::metis {

double Evaluator::RootBound() {
  for (uint32_t s = 0; s < S_; ++s) {
    const uint32_t k = lay_.size[s];
    if (b_ < k || (b_ + k - 1) / k > prof_.max_batch()) return kInf;
  }
  State st;
  st.tp.assign(S_, 1);
  PrepareBound();
  return Bound(0, st);
}

double Evaluator::StageKindLB(uint32_t s, uint32_t ti, uint32_t kind) const {
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

int32_t Evaluator::MaxBlocksLB(uint32_t s, uint32_t ti) const {
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

uint32_t Evaluator::ReachableTp(uint32_t s, const std::array<double, 8>& valid) const {
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

void Evaluator::StageDpCost(uint32_t s, uint32_t ti, double& dp0, double& dp1) const {
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

uint32_t Evaluator::BoundStart() {
  const uint32_t T = ctx_.tps;
  // Stage from_ − 1 keeps its values but not its f: its link to the next stage may have changed.
  const uint32_t start = from_ > 0 && from_ <= S_ && beta_.size() == size_t{S_} * T ? from_ - 1 : 0;
  if (start == 0) {
    beta_.assign(size_t{S_} * T, kInf);
    most_lb_.assign(size_t{S_} * T, -1);
    dp0_.assign(size_t{S_} * T, 0);
    dp1_.assign(size_t{S_} * T, 0);
    f_.assign(S_, 0);
    arrays_.room.assign(S_ + 1, 0);
    arrays_.short_of.assign(S_ + 1, 0);
    arrays_.full = 0;
  }
  return start;
}

void Evaluator::StageKeys(uint32_t start) {
  // The cache is larger than the CPU's near caches: fetch every stage's entry before using any.
  auto& keys = scratch_.keys;
  keys.resize(S_);
  for (uint32_t s = start; s < S_; ++s) {
    const uint64_t in_flight = std::min<uint32_t>(B_, S_ - s);
    keys[s] = {Mix(lay_.sig[s].first, (in_flight << 32) | b_),
               Mix(lay_.sig[s].second ^ 0x3c3cull, (uint64_t{b_} << 32) | in_flight)};
    __builtin_prefetch(&scratch_.bounds[keys[s].first & (Scratch::kBoundSlots - 1)]);
  }
}

const Scratch::StageBound& Evaluator::StageEntry(uint32_t s) {
  const uint32_t T = ctx_.tps;
  const auto [key, check] = scratch_.keys[s];
  Scratch::StageBound& e = scratch_.bounds[key & (Scratch::kBoundSlots - 1)];
  if (e.key == key && e.check == check && T <= e.beta.size()) return e;
  e.key = key;
  e.check = check;
  e.emb = e.head = kInf;
  for (uint32_t ti = 0; ti < T && ti < e.beta.size(); ++ti) e.beta[ti] = StageKindLB(s, ti, 1);
  const uint32_t reach = ReachableTp(s, e.beta);
  e.most_any = -1;
  for (uint32_t ti = 0; ti < T && ti < e.beta.size(); ++ti) {
    if (!((reach >> ti) & 1)) e.beta[ti] = kInf;
    e.most[ti] = e.beta[ti] < kInf ? MaxBlocksLB(s, ti) : -1;
    if (e.most[ti] < 0) e.beta[ti] = kInf;  // cannot hold its fewest blocks
    if (e.beta[ti] < kInf) e.most_any = std::max(e.most_any, e.most[ti]);
    if (!((reach >> ti) & 1)) continue;
    if (s == 0) e.emb = std::min(e.emb, StageKindLB(s, ti, 0));
    if (s + 1 == S_) e.head = std::min(e.head, StageKindLB(s, ti, 2));
    e.dp0[ti] = e.dp1[ti] = 0;
    if (e.beta[ti] < kInf) StageDpCost(s, ti, e.dp0[ti], e.dp1[ti]);
  }
  return e;
}

// The root's feasibility (Terms at s = 0: every TP degree of every stage), as prefix sums: stage s adds
// whether it cannot hold its fewest blocks and the most it can hold.
#define HETSIM_METIS_PREFIX_SUMS(s, most)                                                              \
  do {                                                                                                 \
    const uint32_t lo = S_ == 1 ? ctx_.blocks : ((s) == 0 || (s) + 1 == S_) ? 0 : 1;                   \
    arrays_.short_of[(s) + 1] = arrays_.short_of[s] + ((most) < static_cast<int32_t>(lo) ? 1 : 0);    \
    arrays_.room[(s) + 1] = arrays_.room[s] + static_cast<uint32_t>(std::max((most), 0));             \
  } while (false)

void Evaluator::PrepareMemory() {
  const uint32_t start = BoundStart();
  arrays_.full = std::min(arrays_.full, start);
  StageKeys(start);
  for (uint32_t s = start; s < S_; ++s) {
    const int32_t most = StageEntry(s).most_any;
    HETSIM_METIS_PREFIX_SUMS(s, most);
  }
  prepared_ = true;
}

void Evaluator::PrepareBound() {
  const uint32_t T = ctx_.tps;
  const uint32_t start = std::min(BoundStart(), arrays_.full);
  StageKeys(start);
  for (uint32_t s = start; s < S_; ++s) {
    const Scratch::StageBound& e = StageEntry(s);
    for (uint32_t ti = 0; ti < T && ti < e.beta.size(); ++ti) {
      beta_[s * T + ti] = e.beta[ti];
      most_lb_[s * T + ti] = e.most[ti];
      dp0_[s * T + ti] = e.dp0[ti];
      dp1_[s * T + ti] = e.dp1[ti];
    }
    f_[s] = 0;
    if (s == 0) f_[s] += e.emb < kInf ? e.emb : 0;
    if (s + 1 == S_) f_[s] += e.head < kInf ? e.head : 0;
    if (s + 1 < S_) f_[s] += lay_.pp_hop_s[s];
    if (s > 0) f_[s] += lay_.pp_hop_s[s - 1];
    HETSIM_METIS_PREFIX_SUMS(s, e.most_any);
  }
  arrays_.full = S_;
  prepared_ = true;
}
#undef HETSIM_METIS_PREFIX_SUMS

uint32_t Evaluator::FirstTp(uint32_t j, uint32_t s, const State& st) const {
  return j <= s ? static_cast<uint32_t>(prof_.TpIndex(st.tp[j])) : 0;
}

Evaluator::BoundTerms Evaluator::Terms(uint32_t s, const State& st) const {
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

double Evaluator::CapacityT(uint32_t s, const State& st, double t) const {
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

double Evaluator::CapacityD(uint32_t s, const State& st, double d) const {
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

double Evaluator::Bound(uint32_t s, const State& st) const {
  const BoundTerms terms = Terms(s, st);
  if (!terms.feasible) return kInf;
  const double t_star = B_ > 1 ? Least(terms.lo_t, terms.hi_t, [&](double t) { return CapacityT(s, st, t); }) : 0;
  const double d_star = Least(terms.lo_d, terms.hi_d, [&](double d) { return CapacityD(s, st, d); });
  return ((static_cast<double>(B_) - 1) * t_star + terms.rest + d_star) * (1 - 1e-9);
}

bool Evaluator::Exceeds(uint32_t s, const State& st, double incumbent) const {
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

}  // namespace hetsim::planners::metis
