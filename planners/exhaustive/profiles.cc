// The exhaustive search's pipeline profiles: per pipeline shape, each stage's replica times as an affine
// function of its blocks (shared between shapes), the blocks each stage's memory can hold, the smallest
// largest stage time per micro-batch size and the tables of the best later stages (Rest); and the min-max
// split of a micro-batch over a stage's replicas (SplitTime).
#include <algorithm>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planners/exhaustive/search_internal.h"

namespace hetsim::planners::exhaustive {

Profile& Search::ProfileOf(const Pipe& pipe) {
  auto [it, fresh] = profiles_.try_emplace(pipe.key);
  Profile& pr = it->second;
  if (!fresh) return pr;
  const uint32_t S = static_cast<uint32_t>(pipe.stages.size());
  pr.S = S;
  pr.X = bmax_ + 1;
  for (uint32_t s = 0; s < S; ++s) {
    const Stage& st = pipe.stages[s];
    pr.entry_base.push_back(static_cast<uint32_t>(pr.rows.size()));
    const std::span<const uint32_t> next =
        s + 1 < S ? std::span<const uint32_t>(pipe.stages[s + 1].devices) : std::span<const uint32_t>();
    const std::span<const uint32_t> prev =
        s > 0 ? std::span<const uint32_t>(pipe.stages[s - 1].devices) : std::span<const uint32_t>();
    for (uint32_t e = 0; e < st.groups.size(); ++e) {
      // Replica times depend on the entry's node and TP degree, the position (embedding, head) and the
      // nodes of the neighbouring stages: rows are shared on those.
      std::string row_key;
      row_key += static_cast<char>(st.tp);
      row_key += static_cast<char>(st.groups[e].first);
      row_key += static_cast<char>((s == 0 ? 1 : 0) | (s + 1 == S ? 2 : 0));
      if (s + 1 < S) {
        for (const auto& [n, g] : pipe.stages[s + 1].groups) row_key += static_cast<char>(n);
      }
      row_key += '\xff';
      if (s > 0) {
        for (const auto& [n, g] : pipe.stages[s - 1].groups) row_key += static_cast<char>(n);
      }
      auto [row, made] = rows_.try_emplace(row_key);
      if (made) {
        // The first replica of this entry stands for all (same node, same links).
        uint32_t r = 0;
        while (st.replica_entry[r] != e) ++r;
        const std::span<const uint32_t> g(st.devices.data() + size_t{r} * st.tp, st.tp);
        const models::GpuSpec& gpu = cost_.SlowestGpu(g);
        const ReplicaLinks hops = cost_.Links(g, next, prev);
        const ReplicaLinks local = cost_.Links(g, {}, {});
        row->second.assign(4 * size_t{pr.X}, 0);
        for (uint32_t x = 1; x <= bmax_ && sim_ != nullptr; ++x) {
          // The simulator's compute alone (RangeCompute prices each pass as sim/program.cc does: its
          // layers plus one host overhead per pass); communication only adds to it.
          const double overhead = 2 * cost_.compute().PassOverheadSeconds(gpu);
          // Both passes and the forward alone (for the round trips of Layers), each without its overhead.
          auto compute = [&](uint32_t begin, uint32_t end) {
            const auto [fw, bw] = cost_.RangeCompute(gpu, begin, end, st.tp, x, rc_);
            return std::pair{fw + bw - overhead, fw - overhead / 2};
          };
          double f = overhead, ff = overhead / 2;
          for (const auto& [begin, end, holds] : {std::tuple{0u, 1u, s == 0}, std::tuple{L_ - 1, L_, s + 1 == S}}) {
            if (!holds) continue;
            const auto [both, fwd] = compute(begin, end);
            f += both;
            ff += fwd;
          }
          const auto [block, block_fwd] = compute(1, 2);
          row->second[x] = f;
          row->second[pr.X + x] = block;
          row->second[2 * pr.X + x] = ff;
          row->second[3 * pr.X + x] = block_fwd;
        }
        for (uint32_t x = 1; x <= bmax_ && sim_ == nullptr; ++x) {
          double f = cost_.Replica(gpu, st.tp, 1, 1, x, hops, rc_).total_s();  // PP hops only
          if (s == 0) f += cost_.Replica(gpu, st.tp, 0, 1, x, local, rc_).total_s();
          if (s + 1 == S) f += cost_.Replica(gpu, st.tp, L_ - 1, L_, x, local, rc_).total_s();
          row->second[x] = f;
          row->second[pr.X + x] = cost_.Replica(gpu, st.tp, 1, 2, x, local, rc_).total_s();
        }
      }
      pr.rows.push_back(&row->second);
    }
  }
  // Memory: the most blocks each stage could hold at all.
  uint64_t capacity = 0;
  pr.max_blocks.assign(S, 0);
  for (uint32_t s = 0; s < S && pr.feasible; ++s) {
    const Stage& st = pipe.stages[s];
    double cap_gib = kInf;
    for (const auto& [n, g] : st.groups) cap_gib = std::min(cap_gib, cluster_.nodes()[n].gpu->memory_gib);
    auto fits = [&](uint32_t blocks) {
      const auto [begin, end] = Range(s, S, blocks);
      double least = kInf;
      for (uint32_t z : zeros_) {
        least = std::min(least, memory_.StaticGib(begin, end, st.tp, z, cluster_.num_devices()));
      }
      const double act = memory_.ActivationGibPerSequence(begin, end, st.tp, true, rc_);
      const double peak = memory_.PeakLayerGibPerSequence(begin, end, st.tp, true, rc_);
      return FitsIn(memory_.TotalGib(least, act, peak, 1, 1), cap_gib);
    };
    const int64_t most = MostBlocksThatFit(LowBlocks(s, S), blocks_, fits);
    if (most < 0) {
      pr.feasible = false;
      break;
    }
    pr.max_blocks[s] = static_cast<uint32_t>(most);
    capacity += static_cast<uint32_t>(most);
  }
  if (capacity < blocks_) pr.feasible = false;
  pr.tstar.assign(pr.X, kInf);
  pr.sum_lo.assign(size_t{pr.X} * (S + 1), 0);
  pr.rest.assign(pr.X, {});
  if (!pr.feasible) return pr;
  StageTimes(pr, pipe, scratch_table_);
  for (uint32_t b = pipe.max_replicas; b <= bmax_; ++b) {
    // This micro-batch size's stage times.
    const uint32_t N = blocks_ + 1;
    const double* table = scratch_table_.data() + size_t{b} * S * N;
    for (uint32_t s = S; s-- > 0;) {
      pr.sum_lo[size_t{b} * (S + 1) + s] =
          pr.sum_lo[size_t{b} * (S + 1) + s + 1] + table[size_t{s} * N + LowBlocks(s, S)];
    }
    pr.tstar[b] = SmallestLargest(pr, table);
    if (pr.tstar[b] < kInf) {
      pr.rho = std::min(pr.rho, pr.tstar[b] / b);
      pr.beta = std::min(pr.beta, std::max(0.0, pr.SumLo(b, 0) - pr.tstar[b]));
    }
  }
  // A 1F1B pipeline may hide its fill behind the bottleneck stage's work: in the simulator-bound mode the
  // pipeline bound is m·t* alone.
  if (!(pr.beta < kInf) || sim_ != nullptr) pr.beta = 0;
  return pr;
}

void Search::StageTimes(const Profile& pr, const Pipe& pipe, std::vector<double>& t) const {
  const uint32_t S = pr.S, N = blocks_ + 1;
  t.assign(size_t{pr.X} * S * N, kInf);
  std::vector<uint32_t> x;
  for (uint32_t s = 0; s < S; ++s) {
    const Stage& st = pipe.stages[s];
    const uint32_t R = st.replicas;
    for (uint32_t n = LowBlocks(s, S); n <= std::min(pr.max_blocks[s], blocks_); ++n) {
      auto value = [&](uint32_t r, uint32_t seqs) {
        const uint32_t e = st.replica_entry[r];
        return pr.F(s, e, seqs) + n * pr.C(s, e, seqs);
      };
      auto at = [&](uint32_t b) -> double& { return t[(size_t{b} * S + s) * N + n]; };
      if (R == 1 || st.groups.size() == 1) {
        // One replica, or identical replicas: as even as possible (SplitTime).
        for (uint32_t b = R; b <= bmax_; ++b) at(b) = value(0, (b + R - 1) / R);
        continue;
      }
      x.assign(R, 1);
      auto largest = [&] {
        double most = 0;
        for (uint32_t r = 0; r < R; ++r) most = std::max(most, value(r, x[r]));
        return most;
      };
      at(R) = largest();
      for (uint32_t b = R + 1; b <= bmax_; ++b) {
        double best = kInf;
        uint32_t pick = 0;
        for (uint32_t r = 0; r < R; ++r) {
          const double v = value(r, x[r] + 1);
          if (v < best) {
            best = v;
            pick = r;
          }
        }
        ++x[pick];
        at(b) = largest();
      }
    }
  }
}

double Search::SmallestLargest(const Profile& pr, const double* t) const {
  // Every stage's times are non-decreasing in its blocks: starting from each stage's fewest, the block that
  // raises the largest time least goes next (to the stage whose next time is smallest) until the model is
  // placed. The largest time reached is the least T at which every stage fits its fewest and the most blocks
  // each can hold within T add up to the model: whenever the greedy takes a time above some T, every stage's
  // next time exceeds T and the blocks placed fall short.
  const uint32_t S = pr.S, N = blocks_ + 1;
  uint32_t placed = 0;
  double largest = 0;
  scratch_at_.resize(S);
  for (uint32_t s = 0; s < S; ++s) {
    const uint32_t lo = LowBlocks(s, S), hi = std::min(pr.max_blocks[s], blocks_);
    if (lo > hi) return kInf;
    scratch_at_[s] = lo;
    placed += lo;
    largest = std::max(largest, t[size_t{s} * N + lo]);
  }
  while (placed < blocks_) {
    double next = kInf;
    uint32_t pick = S;
    for (uint32_t s = 0; s < S; ++s) {
      if (scratch_at_[s] >= std::min(pr.max_blocks[s], blocks_)) continue;
      const double v = t[size_t{s} * N + scratch_at_[s] + 1];
      if (v < next) {
        next = v;
        pick = s;
      }
    }
    if (pick == S) return kInf;
    ++scratch_at_[pick];
    ++placed;
    largest = std::max(largest, next);
  }
  return largest;
}

const std::vector<double>& Search::Rest(Profile& pr, const Pipe& pipe, uint32_t b) const {
  auto& rest = pr.rest[b];
  if (!rest.empty()) return rest;
  const uint32_t S = pr.S, N = blocks_ + 1;
  const size_t sums = size_t{S + 1} * N, times = 2 * sums;
  rest.assign(times + size_t{S} * N, kInf);
  for (uint32_t k = 0; k < S; ++k) {
    for (uint32_t n = LowBlocks(k, S); n <= std::min(pr.max_blocks[k], blocks_); ++n) {
      rest[times + size_t{k} * N + n] = T0(pr, pipe, b, k, n);
    }
  }
  rest[size_t{S} * N + 0] = 0;
  rest[sums + size_t{S} * N + 0] = 0;
  for (uint32_t k = S; k-- > 0;) {
    const uint32_t lo = LowBlocks(k, S), hi = std::min(pr.max_blocks[k], blocks_);
    for (uint32_t B = 0; B <= blocks_; ++B) {
      double best = kInf, best_sum = kInf;
      if (k + 1 == S) {
        if (B >= lo && B <= hi) best = best_sum = rest[times + size_t{k} * N + B];
      } else {
        for (uint32_t n = lo; n <= std::min(B, hi); ++n) {
          const double t = rest[times + size_t{k} * N + n];
          best = std::min(best, std::max(t, rest[size_t{k + 1} * N + B - n]));
          best_sum = std::min(best_sum, t + rest[sums + size_t{k + 1} * N + B - n]);
        }
      }
      rest[size_t{k} * N + B] = best;
      rest[sums + size_t{k} * N + B] = best_sum;
    }
  }
  return rest;
}

double Search::SplitTime(const Profile& pr, const Stage& st, uint32_t s, uint32_t n, uint32_t b,
                         const std::vector<uint32_t>& caps, std::vector<uint32_t>* split) const {
  auto value = [&](uint32_t r, uint32_t x) {
    const uint32_t e = st.replica_entry[r];
    return pr.F(s, e, x) + n * pr.C(s, e, x);
  };
  const uint32_t R = st.replicas;
  if (R == 1) {
    if (caps[0] < b) return kInf;
    if (split != nullptr) split->assign(1, b);
    return value(0, b);
  }
  if (st.groups.size() == 1) {
    // Identical replicas: as even as possible (what the greedy below gives, first replicas first).
    const uint32_t big = (b + R - 1) / R, extra = b % R;
    if (caps[0] < big) return kInf;
    if (split != nullptr) {
      split->assign(R, b / R);
      for (uint32_t r = 0; r < extra; ++r) ++(*split)[r];
    }
    return value(0, big);
  }
  // MinMaxSplit without allocations (R and b are small here): each next sequence goes to the replica
  // whose time after taking it is smallest (optimal for non-decreasing times; ties to the lower index).
  std::vector<uint32_t>& x = split != nullptr ? *split : scratch_split_;
  x.assign(R, 1);
  for (uint32_t r = 0; r < R; ++r) {
    if (caps[r] < 1) return kInf;
  }
  for (uint32_t left = b - R; left > 0; --left) {
    double best = kInf;
    uint32_t pick = R;
    for (uint32_t r = 0; r < R; ++r) {
      if (x[r] >= caps[r]) continue;
      const double v = value(r, x[r] + 1);
      if (v < best) {
        best = v;
        pick = r;
      }
    }
    if (pick == R) return kInf;
    ++x[pick];
  }
  double t = 0;
  for (uint32_t r = 0; r < R; ++r) t = std::max(t, value(r, x[r]));
  return t;
}

void Search::ResetSplitCache(size_t p, uint32_t S) {
  split_cache_.resize(pipes_.size());
  auto& memos = split_cache_[p];
  memos.resize(size_t{S} * (blocks_ + 1));  // kept splits keep their storage
  for (SplitMemo& m : memos) m.done = false;
}

double Search::CachedSplitTime(size_t p, const Profile& pr, const Stage& st, uint32_t s, uint32_t n, uint32_t b,
                               const std::vector<uint32_t>& caps, std::vector<uint32_t>& split) {
  if (st.replicas == 1 || st.groups.size() == 1) return SplitTime(pr, st, s, n, b, caps, &split);
  // The greedy with caps takes the uncapped greedy's steps as long as that split is within the caps (each
  // step's pick is below its cap then, and skipping replicas it did not pick changes nothing): the
  // uncapped split, computed once per (stage, blocks) for this micro-batch size, answers most calls.
  SplitMemo& memo = split_cache_[p][size_t{s} * (blocks_ + 1) + n];
  if (!memo.done) {
    scratch_caps_.assign(st.replicas, b);
    memo.t = SplitTime(pr, st, s, n, b, scratch_caps_, &memo.split);
    memo.done = true;
  }
  bool within = memo.t < kInf;
  for (uint32_t r = 0; r < st.replicas && within; ++r) within = memo.split[r] <= caps[r];
  if (!within) return SplitTime(pr, st, s, n, b, caps, &split);
  split.assign(memo.split.begin(), memo.split.end());
  return memo.t;
}

}  // namespace hetsim::planners::exhaustive
