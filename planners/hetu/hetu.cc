#include "planners/hetu/hetu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "models/plan.h"
#include "planners/cost_model.h"
#include "planners/proto/hetu.pb.h"
#include "planners/search.h"
#include "planners/symmetric.h"

namespace hetsim::planners::hetu {
namespace {

using Options = proto::HetuOptions;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The GPUs of one catalog type, in node order.
struct GpuType {
  const models::GpuSpec* gpu = nullptr;
  std::vector<uint32_t> nodes;     // indices into cluster.nodes()
  std::vector<uint32_t> tp_choices;
  uint32_t largest_node = 0;
  double block_s = 0;  // one block, one sequence, forward + backward on one GPU of the type (speed rank)
};

// One TP group: a stage of some pipeline.
struct Group {
  std::vector<uint32_t> devices;
  uint32_t tp = 1;
  size_t type = 0;
  double speed = 0;  // blocks per second at one sequence (1 / the group's per-block time)
  uint32_t cls = 0;  // its GroupClass
};

// TP groups that cost the same as a stage anywhere: one GPU type and degree, the same TP link, the same
// speed. Groups of a class are interchangeable in the lower bound below.
struct GroupClass {
  size_t type = 0;
  uint32_t tp = 1;
  double speed = 0;
  models::Link tp_link;
  uint32_t example = 0;  // a group of the class
};

// The TP groups of one per-type TP combination, dealt longest-processing-time first.
struct Combination {
  std::vector<uint32_t> tps;
  std::vector<Group> groups;
  std::vector<size_t> by_speed;  // the dealing order: fastest first (ties: device order)
  std::vector<GroupClass> classes;
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // the dealing order as (class, how many in a row)
  // The pipelines' shapes can be derived from the classes alone (see DealByClass); otherwise every
  // pipeline count is dealt group by group.
  bool by_class = true;
};

// A pipeline layout (ordered stage classes) and how many pipelines have it; `shard` is the number of
// pipelines with its (GPU type, TP degree) sequence, the ZeRO sharding the layer balance assumes.
struct Shape {
  std::vector<uint32_t> stages;  // classes, stage order
  uint32_t count = 0;
  uint32_t shard = 0;
};

// One candidate of the enumeration: (TP combination, pipeline count, stage order, micro-batch size).
struct Pending {
  uint64_t seq = 0;  // its place in the enumeration order (ties between equal plans go to the earlier)
  uint32_t combination = 0;
  uint32_t pipelines = 0;
  bool slowest_first = true;
  uint32_t micro_batch = 1;
  double bound = 0;  // lower bound of its predicted iteration time
};

std::string Fmt(const char* format, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

class Search {
 public:
  Search(const PlanningProblem& problem, const Options& options)
      : problem_(problem), options_(options), cost_(problem), memory_(problem),
        blocks_(problem.model.num_blocks()), batch_(problem.training.global_batch_size()),
        rc_(problem.training.recompute()), zero_(options.has_zero_stage() ? options.zero_stage() : 1),
        sequence_parallel_(options.has_sequence_parallel() ? options.sequence_parallel() : true) {
    const auto& nodes = problem.cluster.nodes();
    for (uint32_t n = 0; n < nodes.size(); ++n) {
      auto it = std::find_if(types_.begin(), types_.end(), [&](const GpuType& t) { return t.gpu == nodes[n].gpu; });
      if (it == types_.end()) {
        types_.push_back(GpuType{nodes[n].gpu, {}, {}, 0, 0});
        it = types_.end() - 1;
      }
      it->nodes.push_back(n);
      it->largest_node = std::max(it->largest_node, nodes[n].num_gpus);
    }
    for (auto& ty : types_) {
      const uint32_t first = nodes[ty.nodes.front()].first_device;
      const std::vector<uint32_t> one = {first};
      ty.block_s = cost_.Replica(one, 1, 2, 1, {}, {}, rc_).total_s();
      std::vector<uint32_t> requested(options_.tp_degrees().begin(), options_.tp_degrees().end());
      if (requested.empty()) {
        for (uint32_t t = 1; t <= ty.largest_node; t *= 2) requested.push_back(t);
      }
      for (uint32_t t : requested) {
        if (t > ty.largest_node) {
          stats_.Reject("TP degree larger than the type's largest node");
        } else if (!ModelAllowsTp(problem.model, t)) {
          stats_.Reject("TP degree the model's heads do not allow");
        } else {
          ty.tp_choices.push_back(t);
        }
      }
    }
    // Two types of equal per-block time keep their dealing order inside a pipeline (the stage sort below
    // ties them), which the classes do not record.
    for (size_t a = 0; a < types_.size(); ++a) {
      for (size_t b = a + 1; b < types_.size(); ++b) equal_type_speeds_ |= types_[a].block_s == types_[b].block_s;
    }
  }

  Result<PlannerResult> Run() {
    for (const auto& ty : types_) {
      if (ty.tp_choices.empty()) {
        return Status::Invalid("hetu: no TP degree in tp_degrees fits the " + ty.gpu->name + " nodes (largest " +
                               std::to_string(ty.largest_node) + " GPUs) and the model's heads; allow a smaller degree");
      }
    }
    static constexpr uint32_t kDefaultSizes[] = {1, 2, 4};
    const auto& requested = options_.micro_batch_sizes();
    bs_ = requested.empty() ? std::vector<uint32_t>(std::begin(kDefaultSizes), std::end(kDefaultSizes))
                            : std::vector<uint32_t>(requested.begin(), requested.end());
    // Step 1: every candidate of the enumeration with a lower bound of its iteration time (or rejected).
    std::vector<size_t> pick(types_.size(), 0);
    while (true) {
      std::vector<uint32_t> tps;
      for (size_t k = 0; k < types_.size(); ++k) tps.push_back(types_[k].tp_choices[pick[k]]);
      Enumerate(std::move(tps));
      size_t k = 0;
      while (k < types_.size() && ++pick[k] == types_[k].tp_choices.size()) pick[k++] = 0;
      if (k == types_.size()) break;
    }
    // Step 2: candidates in order of their bound, each built and costed, until the bound passes the best
    // plan's time. A skipped candidate is predicted slower than the best (its bound is), so the result is
    // the enumeration's best plan; ties go to the earlier candidate of the enumeration, as without bounds.
    std::stable_sort(pending_.begin(), pending_.end(),
                     [](const Pending& a, const Pending& b) { return a.bound < b.bound; });
    uint64_t pruned = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      const Pending& c = pending_[i];
      // Past the played pool's worst (the best plan's time when it is one), no candidate can enter it.
      if (!options_.disable_bounds() && pool_.size() >= played_pool_ &&
          c.bound > pool_[played_pool_ - 1].t * (1 + 1e-9)) {
        pruned = pending_.size() - i;
        break;
      }
      Evaluate(c);
    }
    if (pool_.empty()) {
      if (!misses_.empty()) return misses_.ToStatus("hetu", problem_, stats_);
      return NothingFound("hetu", problem_, stats_,
                          "allow more TP degrees or pipeline counts, or a smaller micro-batch size");
    }
    PlannerResult result;
    const double closed_form_best_s = pool_.front().t;
    result.plan = std::move(pool_.front().plan);
    for (size_t i = 1; i < pool_.size(); ++i) result.alternatives.push_back({std::move(pool_[i].plan), pool_[i].t});
    result.stats = std::move(stats_);
    result.stats.notes.push_back(std::to_string(tp_combinations_) + " per-type TP combinations, " +
                                 std::to_string(shapes_) + " pipeline layouts, " +
                                 std::to_string(result.stats.candidates_evaluated) + " candidates costed");
    if (!options_.disable_bounds()) {
      result.stats.notes.push_back(std::to_string(pruned) + " of " + std::to_string(pending_.size()) +
                                   " candidates skipped: their lower bound exceeds the chosen plan's time");
    }
    // The pool re-ranked by the played estimate; the runners-up are the simulator-checked choice's.
    result.cost_s = closed_form_best_s;
    RerankByPlayedEstimate(cost_, static_cast<uint32_t>(played_pool_), problem_.alternatives, &result);
    result.stats.notes.push_back("chosen: " + Describe(result.plan) + " (predicted " + Fmt("%.4f", result.cost_s) +
                                 " s per iteration; the closed form's best " + Fmt("%.4f", closed_form_best_s) +
                                 " s)");
    return result;
  }

 private:
  // ---- the groups and their dealing ---------------------------------------------------------------

  // The TP groups of the cluster when type k uses degree tps[k]: each node cut into groups of that degree,
  // the rest into the largest powers of two that fit (7 at TP 4: 4 + 2 + 1).
  Combination Groups(std::vector<uint32_t> tps) const {
    Combination c;
    c.tps = std::move(tps);
    const auto& nodes = problem_.cluster.nodes();
    for (size_t k = 0; k < types_.size(); ++k) {
      for (uint32_t n : types_[k].nodes) {
        uint32_t at = 0;
        while (at < nodes[n].num_gpus) {
          uint32_t t = c.tps[k];
          while (t > nodes[n].num_gpus - at || !ModelAllowsTp(problem_.model, t)) t /= 2;
          Group g;
          for (uint32_t i = 0; i < t; ++i) g.devices.push_back(nodes[n].first_device + at + i);
          g.tp = t;
          g.type = k;
          g.speed = 1.0 / cost_.Replica(g.devices, 1, 2, 1, {}, {}, rc_).total_s();
          const models::Link link = t > 1 ? cost_.topology().Slowest(g.devices) : models::Link{};
          auto same = [&](const GroupClass& x) {
            return x.type == k && x.tp == t && x.speed == g.speed && x.tp_link.kind == link.kind &&
                   x.tp_link.bandwidth_bytes_s == link.bandwidth_bytes_s && x.tp_link.latency_s == link.latency_s;
          };
          auto it = std::find_if(c.classes.begin(), c.classes.end(), same);
          if (it == c.classes.end()) {
            c.classes.push_back(GroupClass{k, t, g.speed, link, static_cast<uint32_t>(c.groups.size())});
            it = c.classes.end() - 1;
          }
          g.cls = static_cast<uint32_t>(it - c.classes.begin());
          c.groups.push_back(std::move(g));
          at += t;
        }
      }
    }
    // Longest processing time first: the fastest groups first (ties: device order).
    c.by_speed.resize(c.groups.size());
    std::iota(c.by_speed.begin(), c.by_speed.end(), 0);
    std::stable_sort(c.by_speed.begin(), c.by_speed.end(),
                     [&](size_t a, size_t b) { return c.groups[a].speed > c.groups[b].speed * (1 + 1e-12); });
    std::vector<bool> seen(c.classes.size(), false);
    for (size_t g : c.by_speed) {
      const uint32_t k = c.groups[g].cls;
      if (!c.runs.empty() && c.runs.back().first == k) {
        ++c.runs.back().second;
        continue;
      }
      c.by_class &= !seen[k];  // a class met twice: bins with one content may hold it in different orders
      seen[k] = true;
      c.runs.emplace_back(k, 1);
    }
    // The stage order ranks (type, TP degree), then devices: two classes of one (type, degree) are ordered
    // by their devices, which the classes do not record.
    for (size_t a = 0; a < c.classes.size(); ++a) {
      for (size_t b = a + 1; b < c.classes.size(); ++b) {
        c.by_class &= !(c.classes[a].type == c.classes[b].type && c.classes[a].tp == c.classes[b].tp);
      }
    }
    c.by_class &= !equal_type_speeds_;
    return c;
  }

  // The groups dealt to P pipelines, longest processing time first: each group, fastest first, to the
  // pipeline with the least speed so far (ties: the lowest index).
  std::vector<std::vector<size_t>> Deal(const Combination& c, uint32_t P) const {
    std::vector<std::vector<size_t>> pipes(P);
    using Load = std::pair<double, uint32_t>;  // (speed so far, pipeline): the least, then the lowest index
    std::priority_queue<Load, std::vector<Load>, std::greater<>> least;
    for (uint32_t p = 0; p < P; ++p) least.emplace(0.0, p);
    for (size_t g : c.by_speed) {
      auto [speed, p] = least.top();
      least.pop();
      pipes[p].push_back(g);
      least.emplace(speed + c.groups[g].speed, p);
    }
    return pipes;
  }

  // Stages ordered by GPU type (slowest or fastest first), larger TP groups first within a type, then by
  // device.
  void OrderStages(const Combination& c, bool slowest_first, std::vector<size_t>* pipe) const {
    std::stable_sort(pipe->begin(), pipe->end(), [&](size_t a, size_t b) {
      const Group& ga = c.groups[a];
      const Group& gb = c.groups[b];
      const double sa = types_[ga.type].block_s, sb = types_[gb.type].block_s;
      if (ga.type != gb.type) return slowest_first ? sa > sb : sa < sb;
      if (ga.tp != gb.tp) return ga.tp > gb.tp;
      return ga.devices.front() < gb.devices.front();
    });
  }

  // The same dealing on classes of pipelines instead of pipelines: pipelines that hold the same groups
  // (by class) with the same speed sum are taken together, a run of same-class groups filling the least
  // loaded ones k at a time. Exact as long as the least loaded pipelines never tie across two different
  // contents (the tie would be broken by pipeline index); then it returns nullopt and the caller deals
  // group by group. Returns (content: groups per class, pipelines) pairs.
  std::optional<std::vector<std::pair<std::vector<uint32_t>, uint32_t>>> DealByClass(const Combination& c,
                                                                                     uint32_t P) const {
    struct Bins {
      std::vector<uint32_t> content;
      double load;
      uint32_t count;
    };
    std::vector<Bins> bins = {{std::vector<uint32_t>(c.classes.size(), 0), 0.0, P}};
    for (const auto& [k, length] : c.runs) {
      uint32_t left = length;
      const double v = c.classes[k].speed;
      while (left > 0) {
        size_t low = bins.size();
        bool tie = false;
        for (size_t i = 0; i < bins.size(); ++i) {
          if (bins[i].count == 0) continue;
          if (low == bins.size() || bins[i].load < bins[low].load) {
            low = i;
            tie = false;
          } else if (bins[i].load == bins[low].load) {
            tie = true;
          }
        }
        if (tie) return std::nullopt;
        const uint32_t take = std::min(left, bins[low].count);
        bins[low].count -= take;
        left -= take;
        std::vector<uint32_t> content = bins[low].content;
        ++content[k];
        const double load = bins[low].load + v;
        auto it = std::find_if(bins.begin(), bins.end(),
                               [&](const Bins& b) { return b.load == load && b.content == content; });
        if (it == bins.end()) {
          bins.push_back(Bins{std::move(content), load, take});
        } else {
          it->count += take;
        }
        std::erase_if(bins, [](const Bins& b) { return b.count == 0; });
      }
    }
    std::vector<std::pair<std::vector<uint32_t>, uint32_t>> out;
    for (auto& b : bins) out.emplace_back(std::move(b.content), b.count);
    return out;
  }

  // ---- step 1: the enumeration and its bounds -------------------------------------------------------

  void Enumerate(std::vector<uint32_t> tps) {
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

  // The shapes of dealt pipelines (class-level contents), stages in order.
  std::vector<Shape> ShapesByClass(const Combination& c,
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

  // The shapes of pipelines dealt group by group.
  std::vector<Shape> ShapesOfPipes(const Combination& c, std::vector<std::vector<size_t>> pipes,
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

  // Layers [begin, end) of stage s of S holding n blocks (as BalancedSplit places them).
  std::pair<uint32_t, uint32_t> Range(uint32_t s, uint32_t S, uint32_t n) const {
    const uint32_t L = problem_.model.num_layers();
    if (S == 1) return {0, L};
    if (s == 0) return {0, 1 + n};
    if (s + 1 == S) return {L - 1 - n, L};
    return {1, 1 + n};
  }
  static uint32_t Position(uint32_t s, uint32_t S) { return S == 1 ? 0 : s == 0 ? 1 : s + 1 == S ? 2 : 3; }

  // Seconds per micro-batch of b sequences of a stage of class k at position `pos` holding n blocks,
  // without its pipeline sends (what the analytic model charges on top); index n.
  const std::vector<double>& StageSeconds(const Combination& c, uint32_t k, uint32_t pos, uint32_t b) {
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

  // The most blocks a stage of class k at position s of S holds in memory (BalancedSplit's check, the
  // same arithmetic), with `in_flight` micro-batches of b sequences and ZeRO sharding `shard`; −1 when
  // not even its fewest fit.
  int64_t MostBlocks(const Combination& c, uint32_t k, uint32_t s, uint32_t S, double in_flight, uint32_t shard,
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

  // A lower bound of the predicted iteration time of the candidate (c, P, b) with these shapes, or nullopt
  // when its layer balance cannot fit in memory (then the candidate is rejected, as the search would).
  //   - Per shape, the fewest seconds of its slowest stage (T*) and of all its stages (Σ*) over every layer
  //     split that the stages' memory allows, stage times without pipeline sends (the analytic model adds
  //     them): T* by giving each next block to the stage that stays fastest with it (optimal for stage
  //     times that grow with their blocks), Σ* as the fewest blocks everywhere plus the rest at the
  //     cheapest per-block time. The memory caps are BalancedSplit's, with the fewest micro-batches any
  //     pipeline has in flight (larger caps: a relaxation); when even they leave no split, none fits.
  //   - A pipeline of m micro-batches takes at least (m − 1)·T* + Σ* (1F1B, Metis eq. 1); the micro-batch
  //     split over the pipelines is at best the min-max of these (every pipeline at least one).
  //   - DP sync and the optimizer step are at least 0.
  std::optional<double> Bound(const Combination& c, const std::vector<Shape>& shapes, uint32_t P, uint32_t M,
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

  // ---- step 2: building and costing a candidate --------------------------------------------------

  void Evaluate(const Pending& p) {
    const Combination& c = combinations_[p.combination];
    auto pipes = Deal(c, p.pipelines);
    for (auto& pipe : pipes) OrderStages(c, p.slowest_first, &pipe);
    std::optional<proto::Plan> plan = Candidate(c.groups, pipes, p.micro_batch);
    if (!plan) return;
    std::string what = Describe(*plan);
    Consider(std::move(*plan), what, p.seq);
  }

  // One layout at micro-batch size b: layers balanced per pipeline shape, micro-batches over pipelines;
  // nullopt (rejected) when a shape's layers cannot fit in memory.
  std::optional<proto::Plan> Candidate(const std::vector<Group>& groups, const std::vector<std::vector<size_t>>& pipes,
                                       uint32_t b) {
    const uint32_t M = static_cast<uint32_t>(batch_ / b);
    const uint32_t P = static_cast<uint32_t>(pipes.size());
    const uint32_t L = problem_.model.num_layers();
    proto::Plan plan;
    plan.set_zero_stage(zero_);
    plan.set_sequence_parallel(sequence_parallel_);
    for (uint32_t p = 0; p < P; ++p) {
      auto* pipe = plan.add_pipelines();
      pipe->set_micro_batch_size(b);
      pipe->set_num_micro_batches(M / P + (p < M % P ? 1 : 0));
      const auto ranges = EvenLayerSplit(L, static_cast<uint32_t>(pipes[p].size()));
      for (size_t s = 0; s < pipes[p].size(); ++s) {
        const Group& g = groups[pipes[p][s]];
        auto* st = pipe->add_stages();
        for (uint32_t d : g.devices) st->add_devices(d);
        st->set_tp_degree(g.tp);
        st->set_layer_begin(ranges[s].first);
        st->set_layer_end(ranges[s].second);
      }
    }
    if (!options_.even_layers()) {
      // Pipelines of one shape (the same GPU type and TP degree at every stage) share a balanced split.
      std::map<std::vector<std::pair<size_t, uint32_t>>, std::vector<uint32_t>> shapes;
      for (uint32_t p = 0; p < P; ++p) {
        std::vector<std::pair<size_t, uint32_t>> key;
        for (size_t g : pipes[p]) key.emplace_back(groups[g].type, groups[g].tp);
        shapes[key].push_back(p);
      }
      for (const auto& [key, members] : shapes) {
        proto::Plan skeleton;
        skeleton.set_zero_stage(plan.zero_stage());
        skeleton.set_sequence_parallel(plan.sequence_parallel());
        for (uint32_t p : members) *skeleton.add_pipelines() = plan.pipelines(static_cast<int>(p));
        const auto layers = BalancedSplit(skeleton, problem_, cost_, memory_);
        if (!layers) {
          stats_.Reject("no layer split fits in memory");
          return std::nullopt;
        }
        for (uint32_t p : members) {
          auto* pipe = plan.mutable_pipelines(static_cast<int>(p));
          for (int s = 0; s < pipe->stages_size(); ++s) {
            pipe->mutable_stages(s)->set_layer_begin((*layers)[static_cast<size_t>(s)].first);
            pipe->mutable_stages(s)->set_layer_end((*layers)[static_cast<size_t>(s)].second);
          }
        }
      }
    }
    if (!options_.even_micro_batches() && P > 1) {
      // T_p(m) = (m − 1)·max_s t_s + Σ_s t_s, from the closed form's stage times at this layer split (the
      // same formula; see Consider for why the closed form).
      const PlanEstimate e = cost_.ClosedFormEstimate(plan, /*with_memory=*/false);
      std::vector<double> slowest(P, 0), sum(P, 0);
      for (uint32_t p = 0; p < P; ++p) {
        for (const auto& st : e.pipelines[p].stages) {
          slowest[p] = std::max(slowest[p], st.time_s);
          sum[p] += st.time_s;
        }
      }
      const auto split = MinMaxSplit(
          M, P, [&](uint32_t p, uint32_t m) { return (m - 1.0) * slowest[p] + sum[p]; }, std::vector<uint32_t>(P, M));
      if (split) {
        for (uint32_t p = 0; p < P; ++p) plan.mutable_pipelines(static_cast<int>(p))->set_num_micro_batches((*split)[p]);
      }
    }
    return plan;
  }

  // Memory on the real devices, then the analytic model (BestPlan's ranking); the best is the fastest,
  // ties to the earlier candidate of the enumeration.
  void Consider(proto::Plan plan, const std::string& what, uint64_t seq) {
    const MemoryCheck mem = CheckMemory(plan, problem_, memory_);
    if (!mem.fits) {
      stats_.Reject("out of memory");
      misses_.Offer(what, mem.need_gib, mem.capacity_gib,
                    std::to_string(mem.device) + " (" + problem_.cluster.device(mem.device).gpu->name + ")");
      return;
    }
    ++stats_.candidates_evaluated;
    // Every candidate is ranked by hetsim's closed form (AnalyticCostModel::ClosedFormEstimate; §A.3's
    // "cost model"), the model the search's lower bound (Bound) bounds, so skipping by the bound keeps the
    // enumeration's best plans. The pool of the closed form's best is re-ranked by the played estimate in
    // Run (Estimate, the lowering played: milliseconds per candidate at 1,024 GPUs, too slow for the
    // thousands costed there; docs/planner-scaling.md, "Played or closed form").
    const double t = cost_.ClosedFormEstimate(plan, /*with_memory=*/false).iteration_s;
    // The pool: the best by (time, enumeration order), distinct plans (an equal plan keeps the earlier).
    auto before = [](double ta, uint64_t sa, double tb, uint64_t sb) { return ta < tb || (ta == tb && sa < sb); };
    if (pool_.size() == pool_size_ && !before(t, seq, pool_.back().t, pool_.back().seq)) return;
    std::string key;
    plan.SerializeToString(&key);
    for (auto it = pool_.begin(); it != pool_.end(); ++it) {
      if (it->key != key) continue;
      if (!before(t, seq, it->t, it->seq)) return;
      pool_.erase(it);
      break;
    }
    const auto at = std::find_if(pool_.begin(), pool_.end(), [&](const Kept& k) { return before(t, seq, k.t, k.seq); });
    pool_.insert(at, Kept{t, seq, std::move(plan), std::move(key)});
    if (pool_.size() > pool_size_) pool_.pop_back();
  }

  // "2 pipeline(s), ZeRO-1: [h20 TP4 L0-7 → h800 TP4 L8-81] 32×bs1 ×2" in short form: identical pipelines in a
  // row are written once with their count.
  std::string Describe(const proto::Plan& plan) const {
    std::string out = std::to_string(plan.pipelines_size()) + " pipeline(s), ZeRO-" + std::to_string(plan.zero_stage()) + ":";
    std::string last;
    uint32_t repeat = 0;
    auto flush = [&]() {
      if (repeat == 0) return;
      out += " " + last + (repeat > 1 ? " ×" + std::to_string(repeat) : "");
    };
    for (const auto& pipe : plan.pipelines()) {
      std::string one = "[";
      for (int s = 0; s < pipe.stages_size(); ++s) {
        const auto& st = pipe.stages(s);
        one += (s ? " → " : "") + problem_.cluster.device(st.devices(0)).gpu->name + " TP" +
               std::to_string(models::TpDegree(st)) + " L" + std::to_string(st.layer_begin()) + "-" +
               std::to_string(st.layer_end() - 1);
      }
      one += "] " + std::to_string(pipe.num_micro_batches()) + "×bs" + std::to_string(pipe.micro_batch_size());
      if (one == last) {
        ++repeat;
        continue;
      }
      flush();
      last = std::move(one);
      repeat = 1;
    }
    flush();
    return out;
  }

  const PlanningProblem& problem_;
  const Options& options_;
  AnalyticCostModel cost_;
  MemoryModel memory_;
  const uint32_t blocks_;
  const uint64_t batch_;
  const proto::Recompute rc_;
  const uint32_t zero_;
  const bool sequence_parallel_;
  std::vector<GpuType> types_;
  bool equal_type_speeds_ = false;
  std::vector<uint32_t> bs_;
  std::deque<Combination> combinations_;  // stable addresses (the caches below key on them)
  std::vector<Pending> pending_;
  uint64_t next_seq_ = 0;
  std::map<std::tuple<const Combination*, uint32_t, uint32_t, uint32_t>, std::vector<double>> stage_seconds_;
  std::map<std::tuple<const Combination*, uint32_t, uint32_t, double, uint32_t, uint32_t>, int64_t> most_blocks_;
  SearchStats stats_;
  InfeasibleTracker misses_;
  // The closed form's best candidates (RerankPool of them), by time then enumeration order.
  struct Kept {
    double t;
    uint64_t seq;
    proto::Plan plan;
    std::string key;  // the serialized plan (distinctness)
  };
  // The first played_pool_ are the closed form's best (the bound prunes against the last of them); the
  // rest, runners-up for the simulator-checked choice, the best of the candidates costed.
  const size_t played_pool_ = RerankPool(problem_.cluster.num_devices());
  const size_t pool_size_ = std::max<size_t>(played_pool_, problem_.alternatives + 1);
  std::vector<Kept> pool_;
  uint64_t tp_combinations_ = 0, shapes_ = 0;
};

class HetuPlanner : public PlannerWithOptions<Options> {
 public:
  std::string name() const override { return "hetu"; }
  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    Search search(problem, options_);
    return search.Run();
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<HetuPlanner>();
}

}  // namespace hetsim::planners::hetu
