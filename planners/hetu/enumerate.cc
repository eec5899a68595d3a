// Step 1 of the Hetu planner's search (Search::Run; hetu.h, item 5's bound): every candidate (per-type TP combination,
// pipeline count, stage order, micro-batch size) with a lower bound of its predicted iteration time from the pipelines'
// shapes alone — each shape's fewest seconds of its slowest stage and of all its stages over the layer splits its
// memory allows, then the micro-batches split over the pipelines.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <tuple>
#include <utility>
#include <vector>

#include "planners/hetu/search_internal.h"

namespace hetsim::planners::hetu {

void Search::Enumerate(std::vector<uint32_t> tps) {
  ++tp_combinations_;
  const uint32_t index = static_cast<uint32_t>(combinations_.size());
  combinations_.push_back(Groups(std::move(tps)));
  const Combination& c = combinations_.back();
  const uint32_t G = static_cast<uint32_t>(c.groups.size());
  std::vector<uint32_t> counts(options_.pipelines().begin(), options_.pipelines().end());
  if (counts.empty()) {
    for (uint32_t p = 1; p <= G; ++p) counts.push_back(p);
  }
  std::vector<bool> orders;  // slowest type first?
  switch (options_.stage_order()) {
    case Options::STAGE_ORDER_SLOWEST_FIRST: orders = {true}; break;
    case Options::STAGE_ORDER_FASTEST_FIRST: orders = {false}; break;
    default: orders = types_.size() > 1 ? std::vector<bool>{true, false} : std::vector<bool>{true};
  }
  for (uint32_t P : counts) {
    if (P > G) {
      stats_.Reject("more pipelines than TP groups");
      continue;
    }
    // The pipelines' contents (by class), each with its pipeline count.
    std::optional<std::vector<std::pair<std::vector<uint32_t>, uint32_t>>> contents;
    std::vector<std::vector<size_t>> pipes;
    if (c.by_class && !options_.disable_bounds()) contents = DealByClass(c, P);
    if (!contents) pipes = Deal(c, P);
    bool too_long = false;
    if (contents) {
      for (const auto& [content, n] : *contents) {
        const uint64_t size = std::accumulate(content.begin(), content.end(), uint64_t{0});
        too_long |= size > blocks_ + 2 || (size == 2 && blocks_ == 0);
      }
    } else {
      for (const auto& p : pipes) too_long |= p.size() > blocks_ + 2 || (p.size() == 2 && blocks_ == 0);
    }
    if (too_long) {
      stats_.Reject("a pipeline with more stages than layers");
      continue;
    }
    for (bool slowest_first : orders) {
      ++shapes_;
      std::vector<Shape> shapes;
      if (!options_.disable_bounds()) shapes = contents ? ShapesByClass(c, *contents, slowest_first)
                                                       : ShapesOfPipes(c, pipes, slowest_first);
      for (uint32_t b : bs_) {
        const uint64_t seq = next_seq_++;
        if (batch_ % b != 0) {
          stats_.Reject("micro-batch size does not divide the global batch");
          continue;
        }
        const uint32_t M = static_cast<uint32_t>(batch_ / b);
        if (M < P) {
          stats_.Reject("fewer micro-batches than pipelines");
          continue;
        }
        Pending pending{seq, index, P, slowest_first, b, 0};
        if (!options_.disable_bounds()) {
          const std::optional<double> bound = Bound(c, shapes, P, M, b);
          if (!bound) {
            stats_.Reject("no layer split fits in memory");
            continue;
          }
          pending.bound = *bound;
        }
        pending_.push_back(pending);
      }
    }
  }
}

std::vector<Shape> Search::ShapesByClass(const Combination& c,
                                         const std::vector<std::pair<std::vector<uint32_t>, uint32_t>>& contents,
                                         bool slowest_first) const {
  // Classes in stage order (one class per (type, TP degree) here, and types of distinct speeds).
  std::vector<uint32_t> rank(c.classes.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::sort(rank.begin(), rank.end(), [&](uint32_t a, uint32_t b) {
    const GroupClass& x = c.classes[a];
    const GroupClass& y = c.classes[b];
    const double sa = types_[x.type].block_s, sb = types_[y.type].block_s;
    if (x.type != y.type) return slowest_first ? sa > sb : sa < sb;
    return x.tp > y.tp;
  });
  std::map<std::vector<uint32_t>, uint32_t> count;
  for (const auto& [content, n] : contents) {
    std::vector<uint32_t> stages;
    for (uint32_t k : rank) stages.insert(stages.end(), content[k], k);
    count[stages] += n;
  }
  std::vector<Shape> out;
  for (auto& [stages, n] : count) out.push_back(Shape{stages, n, n});
  return out;
}

std::vector<Shape> Search::ShapesOfPipes(const Combination& c, std::vector<std::vector<size_t>> pipes,
                                         bool slowest_first) const {
  std::map<std::vector<uint32_t>, uint32_t> count;
  std::map<std::vector<std::pair<size_t, uint32_t>>, uint32_t> shard;
  for (auto& p : pipes) {
    OrderStages(c, slowest_first, &p);
    std::vector<uint32_t> stages;
    std::vector<std::pair<size_t, uint32_t>> key;
    for (size_t g : p) {
      stages.push_back(c.groups[g].cls);
      key.emplace_back(c.groups[g].type, c.groups[g].tp);
    }
    ++count[stages];
    ++shard[key];
  }
  std::vector<Shape> out;
  for (auto& [stages, n] : count) {
    std::vector<std::pair<size_t, uint32_t>> key;
    for (uint32_t k : stages) key.emplace_back(c.classes[k].type, c.classes[k].tp);
    out.push_back(Shape{stages, n, shard[key]});
  }
  return out;
}

std::pair<uint32_t, uint32_t> Search::Range(uint32_t s, uint32_t S, uint32_t n) const {
  const uint32_t L = problem_.model.num_layers();
  if (S == 1) return {0, L};
  if (s == 0) return {0, 1 + n};
  if (s + 1 == S) return {L - 1 - n, L};
  return {1, 1 + n};
}

const std::vector<double>& Search::StageSeconds(const Combination& c, uint32_t k, uint32_t pos, uint32_t b) {
  auto key = std::make_tuple(&c, k, pos, b);
  auto it = stage_seconds_.find(key);
  if (it != stage_seconds_.end()) return it->second;
  const GroupClass& cls = c.classes[k];
  const Group& g = c.groups[cls.example];
  const ReplicaLinks links = cost_.Links(g.devices, {}, {});
  const models::GpuSpec& gpu = cost_.SlowestGpu(g.devices);
  // A position stands for any stage count with it: S = 1, 2 (first, last) or 3 (middle).
  const uint32_t S = pos == 0 ? 1 : pos == 3 ? 3 : 2;
  const uint32_t s = pos == 2 ? 1 : pos == 3 ? 1 : 0;
  std::vector<double> t(blocks_ + 1, kInf);
  for (uint32_t n = (pos == 0 ? blocks_ : pos == 3 ? 1 : 0); n <= blocks_; ++n) {
    const auto [begin, end] = Range(s, S, n);
    t[n] = cost_.Replica(gpu, g.tp, begin, end, b, links, rc_).total_s();
  }
  return stage_seconds_.emplace(key, std::move(t)).first->second;
}

int64_t Search::MostBlocks(const Combination& c, uint32_t k, uint32_t s, uint32_t S, double in_flight, uint32_t shard,
                           uint32_t b) {
  const uint32_t pos = Position(s, S);
  auto key = std::make_tuple(&c, k, pos, in_flight, shard, b);
  auto it = most_blocks_.find(key);
  if (it != most_blocks_.end()) return it->second;
  const GroupClass& cls = c.classes[k];
  const Group& g = c.groups[cls.example];
  double cap = kInf;
  for (uint32_t d : g.devices) cap = std::min(cap, problem_.cluster.device(d).gpu->memory_gib);
  auto fits = [&](uint32_t n) {
    const auto [begin, end] = Range(s, S, n);
    const double need = memory_.TotalGib(memory_.StaticGib(begin, end, g.tp, zero_, shard),
                                         memory_.ActivationGibPerSequence(begin, end, g.tp, sequence_parallel_, rc_),
                                         memory_.PeakLayerGibPerSequence(begin, end, g.tp, sequence_parallel_, rc_), b,
                                         in_flight);
    return FitsIn(need, cap);
  };
  const uint32_t lo = S == 1 ? blocks_ : (s == 0 || s + 1 == S) ? 0 : 1;
  int64_t most = -1;
  if (fits(lo)) {
    uint32_t a = lo, z = blocks_;
    while (a < z) {
      const uint32_t mid = (a + z + 1) / 2;
      if (fits(mid)) {
        a = mid;
      } else {
        z = mid - 1;
      }
    }
    most = a;
  }
  most_blocks_.emplace(key, most);
  return most;
}

std::optional<double> Search::Bound(const Combination& c, const std::vector<Shape>& shapes, uint32_t P, uint32_t M,
                                    uint32_t b) {
  const uint32_t m_min = M / P;
  std::vector<double> slowest(shapes.size()), sum(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& shape = shapes[i];
    const uint32_t S = static_cast<uint32_t>(shape.stages.size());
    if (options_.even_layers()) {
      const auto ranges = EvenLayerSplit(problem_.model.num_layers(), S);
      double mx = 0, total = 0;
      for (uint32_t s = 0; s < S; ++s) {
        const Group& g = c.groups[c.classes[shape.stages[s]].example];
        const double t = cost_.Replica(cost_.SlowestGpu(g.devices), g.tp, ranges[s].first, ranges[s].second, b,
                                       cost_.Links(g.devices, {}, {}), rc_)
                             .total_s();
        mx = std::max(mx, t);
        total += t;
      }
      slowest[i] = mx;
      sum[i] = total;
      continue;
    }
    std::vector<uint32_t> n(S), hi(S);
    std::vector<const std::vector<double>*> table(S);
    uint64_t sum_lo = 0, sum_hi = 0;
    double per_block = kInf;
    for (uint32_t s = 0; s < S; ++s) {
      const uint32_t k = shape.stages[s];
      const double in_flight = MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, s, S, m_min, 0);
      const int64_t most = MostBlocks(c, k, s, S, in_flight, shape.shard, b);
      const uint32_t lo = S == 1 ? blocks_ : (s == 0 || s + 1 == S) ? 0 : 1;
      if (most < lo) return std::nullopt;
      n[s] = lo;
      hi[s] = S == 1 ? blocks_ : static_cast<uint32_t>(std::min<int64_t>(most, blocks_));
      sum_lo += lo;
      sum_hi += hi[s];
      table[s] = &StageSeconds(c, k, Position(s, S), b);
      const auto& t = *table[s];
      for (uint32_t x = lo; x < hi[s]; ++x) per_block = std::min(per_block, t[x + 1] - t[x]);
    }
    if (sum_lo > blocks_ || sum_hi < blocks_) return std::nullopt;
    double mx = 0, total = 0;
    using Next = std::pair<double, uint32_t>;  // a stage's time with one more block, the stage
    std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
    for (uint32_t s = 0; s < S; ++s) {
      mx = std::max(mx, (*table[s])[n[s]]);
      total += (*table[s])[n[s]];
      if (n[s] < hi[s]) next.emplace((*table[s])[n[s] + 1], s);
    }
    for (uint64_t left = blocks_ - sum_lo; left > 0; --left) {
      const auto [t, s] = next.top();
      next.pop();
      mx = std::max(mx, t);
      if (++n[s] < hi[s]) next.emplace((*table[s])[n[s] + 1], s);
    }
    if (blocks_ > sum_lo) total += (blocks_ - sum_lo) * std::max(0.0, per_block);
    slowest[i] = mx;
    sum[i] = total;
  }
  // The pipelines: (m − 1)·slowest + sum each, the batch's M micro-batches split over them.
  auto pipeline = [&](size_t i, double m) { return (m - 1) * slowest[i] + sum[i]; };
  double bound = 0;
  if (P == 1 || options_.even_micro_batches()) {
    for (size_t i = 0; i < shapes.size(); ++i) bound = std::max(bound, pipeline(i, m_min));
  } else {
    // The least T such that the pipelines can take M micro-batches with every one within T.
    auto enough = [&](double T) {
      uint64_t total = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        if (T < sum[i]) return false;
        const double m = std::floor((T - sum[i]) / slowest[i]) + 1;
        total += static_cast<uint64_t>(std::min<double>(m, M)) * shapes[i].count;
      }
      return total >= M;
    };
    double lo = 0, hi = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      lo = std::max(lo, pipeline(i, 1));
      hi = std::max(hi, pipeline(i, M));
    }
    if (!enough(lo)) {
      for (int iter = 0; iter < 100 && hi - lo > 1e-12 * hi; ++iter) {
        const double mid = (lo + hi) / 2;
        (enough(mid) ? hi : lo) = mid;
      }
    }
    bound = lo;  // no split keeps every pipeline below it (or the bound every pipeline has anyway)
  }
  return bound * (1 - 1e-9);  // rounding: the model adds the same terms in another order
}

}  // namespace hetsim::planners::hetu
