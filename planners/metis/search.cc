// Metis §4.2: the driver of the hetero-aware search — the work units (stage counts and stage-size
// multisets, §4.2.2 1)), every stage-device assignment and micro-batch count of each, spread over threads,
// the anytime time limit, the best plan, its runners-up and the search's notes — and the single-assignment entry points
// (PlanAssignment, PlanCost). Algorithm 1 itself is in algorithm1.cc, its lower bound in bound.cc.
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

#include "planners/metis/search_internal.h"

namespace hetsim::planners::metis {
namespace {

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

// The runners-up (PlanningProblem::alternatives): the `keep` best distinct plans one worker (or, merged, the
// whole search) has costed, ordered by (cost, unit, ordinal, leaf) — the pick's order, extended to the
// complete plans of one (assignment, B) in DFS order — so that the result does not depend on the threads.
// A plan reached twice keeps its earlier place.
class Runners {
 public:
  struct Entry {
    double cost = kInf;
    uint64_t unit = 0, ordinal = 0, leaf = 0;
    proto::Plan plan;
    std::string key;  // the serialized plan
    auto Order() const { return std::tie(cost, unit, ordinal, leaf); }
  };

  explicit Runners(uint32_t keep) : keep_(keep) {}
  bool WouldKeep(double c, uint64_t u, uint64_t o, uint64_t l) const {
    return kept_.size() < keep_ || std::tie(c, u, o, l) < kept_.back().Order();
  }
  // The cost a plan must not exceed to be kept: the keep-th best's when full, else +inf.
  double bar() const { return kept_.size() < keep_ ? kInf : kept_.back().cost; }
  void Offer(Entry e) {
    if (!WouldKeep(e.cost, e.unit, e.ordinal, e.leaf)) return;
    if (e.key.empty()) e.plan.SerializeToString(&e.key);
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->key != e.key) continue;
      if (it->Order() <= e.Order()) return;
      kept_.erase(it);
      break;
    }
    const auto at = std::upper_bound(kept_.begin(), kept_.end(), e,
                                     [](const Entry& a, const Entry& b) { return a.Order() < b.Order(); });
    kept_.insert(at, std::move(e));
    if (kept_.size() > keep_) kept_.pop_back();
  }
  std::vector<Entry>& kept() { return kept_; }

 private:
  size_t keep_;
  std::vector<Entry> kept_;  // sorted by Order()
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
  uint32_t max_len = 0;      // its permutation length (max_permutation_length unless the order budget cut it)
};

// The state one node order of the consecutive placement carries from one stage-size order to the next
// (consecutive orders of a unit share prefixes): the layout of its last assignment with that
// assignment's stage sizes, and the bound's per-stage values per micro-batch count (by index into the
// divisors of the global batch).
struct Stream {
  Layout lay;
  std::vector<uint32_t> sizes;
  std::vector<BoundArrays> bounds;
};

// How many leading stages two stage-size orders share (0 when their stage counts differ: a stage's
// layout and bound depend on S).
uint32_t SharedPrefix(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return 0;
  uint32_t i = 0;
  while (i < a.size() && a[i] == b[i]) ++i;
  return i;
}

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

namespace {

// Work units: (stage count, size multiset), in order, each with the micro-batch counts B that fit it
// (`multisets` counts them all, fitting or not) and its permutation length under the order budget
// `max_orders` (Knobs::max_orders; `budget_cut` counts the units it shortened).
std::vector<Unit> MakeUnits(const Knobs& knobs, const Profiler& prof, uint32_t N, uint32_t G, uint32_t max_stages,
                            const std::vector<uint32_t>& micro_batch_counts, uint64_t max_orders, uint64_t* multisets,
                            uint64_t* budget_cut) {
  std::vector<Unit> units;
  for (uint32_t S = 1; S <= max_stages; ++S) {
    for (auto& ms : StageSizeMultisets(N, S, knobs.var, !knobs.any_group_size, knobs.released_var)) {
      ++*multisets;
      Unit u{S, std::move(ms), {}, knobs.max_permutation_length};
      for (uint32_t B : micro_batch_counts) {
        if (BatchFits(u.sizes, G / B, prof.max_batch())) u.Bs.push_back(B);
      }
      if (!u.Bs.empty()) units.push_back(std::move(u));
    }
  }
  std::vector<std::vector<uint32_t>> sizes;
  for (const Unit& u : units) sizes.push_back(u.sizes);
  const std::vector<uint32_t> lengths = PermutationLengths(sizes, knobs.max_permutation_length, max_orders);
  for (size_t u = 0; u < units.size(); ++u) {
    units[u].max_len = lengths[u];
    *budget_cut += lengths[u] < knobs.max_permutation_length;
  }
  return units;
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
// ProbeOrder gives the probe's order (RunPhase 0): units by the lower bound of their first assignment.
std::vector<size_t> ProbeOrder(const std::vector<Unit>& units, const models::Cluster& cluster,
                               const std::vector<uint32_t>& classes, bool full_space,
                               const std::vector<std::vector<uint32_t>>& node_orders, const Profiler& prof,
                               const NodeLinks& links, const Context& ctx, Deadline& deadline) {
  uint32_t ticks = 0;
  Layout lay;
  Scratch scratch;
  Counters scratch_counters;
  std::vector<double> priority(units.size(), kInf);
  for (size_t u = 0; u < units.size() && !deadline.Passed(ticks); ++u) {
    const auto orders = StageSizeOrders(units[u].sizes, 1);  // the sizes in one order: cheap
    ForEachPlacement(cluster, classes, orders.front(), full_space, node_orders, [&](const Placement& pl) {
      MakeLayout(cluster, prof, links, ctx.boundary_bytes, pl, lay);
      for (uint32_t B : units[u].Bs) {
        Evaluator ev(ctx, lay, B, scratch_counters, scratch);
        priority[u] = std::min(priority[u], ev.RootBound());
      }
      return false;
    });
  }
  std::vector<size_t> unit_order;
  for (size_t u = 0; u < units.size(); ++u) unit_order.push_back(u);
  std::stable_sort(unit_order.begin(), unit_order.end(), [&](size_t a, size_t b) { return priority[a] < priority[b]; });
  return unit_order;
}

// What the workers of both phases share: Search's inputs and its per-unit and best-so-far state.
struct Shared {
  Shared(const PlanningProblem& p, const Knobs& k, const Profiler& pr, const Context& c, const NodeLinks& l, Deadline& d,
         const std::vector<std::vector<uint32_t>>& no, const std::vector<uint32_t>& mbc, const std::vector<Unit>& u,
         const std::vector<size_t>& uo, bool fs, uint32_t kp)
      : problem(p), knobs(k), prof(pr), ctx(c), links(l), deadline(d), node_orders(no), micro_batch_counts(mbc),
        units(u), unit_order(uo), full_space(fs), keep(kp), unit_state(u.size(), 0), probed(u.size(), 0),
        probe_cost(u.size(), kInf), probe_evaluations(u.size(), 0), runners(kp) {}
  const PlanningProblem& problem;
  const Knobs& knobs;
  const Profiler& prof;
  const Context& ctx;
  const NodeLinks& links;
  Deadline& deadline;
  const std::vector<std::vector<uint32_t>>& node_orders;
  const std::vector<uint32_t>& micro_batch_counts;
  const std::vector<Unit>& units;
  const std::vector<size_t>& unit_order;  // the order workers take units in (re-sorted between phases)
  const bool full_space;
  // With runners-up asked (keep > 0), the cut compares against the keep-th best plan instead (a pair whose
  // bound exceeds it cannot hold one of the keep best): the least keep-th best cost of any worker
  // (shared_bar), each worker's being beaten by keep distinct plans.
  const uint32_t keep;
  // Per unit: how far it got (0 not started, 1 probed or started, 2 finished), its probe's best cost, and
  // the evaluations its probe numbered.
  std::vector<uint8_t> unit_state, probed;
  std::vector<double> probe_cost;
  std::vector<uint64_t> probe_evaluations;
  std::atomic<double> shared_best{kInf};  // the best cost any worker has found: a valid incumbent for all
  std::atomic<double> shared_bar{kInf};
  std::mutex mu;  // guards what follows
  Best best;
  Runners runners;
  Counters total;
  std::vector<Miss> all_misses;

  // Unit u's state after a worker's pass over it in `phase`: the probe's count, cost and whether it covered
  // the unit; finished unless cut (or, probing, unless it has more orders).
  void EndUnit(size_t u, int phase, uint64_t ordinal, double unit_best, bool cut, bool more_orders) {
    if (phase == 0) {
      probe_evaluations[u] = ordinal;
      probe_cost[u] = unit_best;
      probed[u] = !cut;
    }
    if (!cut && (phase == 1 || !more_orders)) unit_state[u] = 2;
  }
  // A worker's best plan, runners-up and counters, added to the search's.
  void Merge(Best& mine, Runners& my_runners, Counters& counters) {
    std::lock_guard<std::mutex> lock(mu);
    if (mine.plan && best.Better(mine.cost, mine.unit, mine.ordinal)) best = std::move(mine);
    for (Runners::Entry& e : my_runners.kept()) runners.Offer(std::move(e));
    total.evaluated += counters.evaluated;
    total.invalid += counters.invalid;
    total.oom += counters.oom;
    total.truncated += counters.truncated;
    total.pruned += counters.pruned;
    total.assignments += counters.assignments;
    total.orders += counters.orders;
    total.orders_skipped += counters.orders_skipped;
    for (auto& m : counters.misses.top) all_misses.push_back(std::move(m));
  }
};

// One worker of phase `phase` (0: probe, 1: the rest; see Search): takes units unit_order[next++] until
// none is left or the time limit passes, then merges its best plan, runners-up and counters into `sh`.
void SearchWorker(Shared& sh, int phase, std::atomic<size_t>& next) {
  const auto& problem = sh.problem;
  const auto& cluster = problem.cluster;
  const auto& knobs = sh.knobs;
  const auto& prof = sh.prof;
  const auto& ctx = sh.ctx;
  const auto& links = sh.links;
  Deadline& deadline = sh.deadline;
  const auto& node_orders = sh.node_orders;
  const auto& micro_batch_counts = sh.micro_batch_counts;
  const auto& units = sh.units;
  const bool full_space = sh.full_space;
  const uint32_t keep = sh.keep;
  auto& unit_state = sh.unit_state;
  auto& probe_evaluations = sh.probe_evaluations;
  auto& shared_best = sh.shared_best;
  auto& shared_bar = sh.shared_bar;
  Counters counters;
  Best mine;
  Runners my_runners(keep);
  Layout lay;
  Scratch scratch;
  std::vector<Placement> built;  // ForEachConsecutivePlacement's
  std::vector<Stream> streams(node_orders.size());
  for (Stream& stream : streams) stream.bounds.resize(micro_batch_counts.size());
  uint32_t my_ticks = 0;
  while (!deadline.Passed(my_ticks)) {
    const size_t i = next++;
    if (i >= units.size()) break;
    const size_t u = sh.unit_order[i];
    if (unit_state[u] == 2) continue;  // each unit is taken by one worker per phase; read after joins
    unit_state[u] = 1;
    bool cut = false;
    uint64_t ordinal = phase == 0 ? 0 : probe_evaluations[u];
    uint64_t order_index = 0;
    double unit_best = kInf;
    bool more_orders = false;
    const uint64_t n_bs = units[u].Bs.size();
    uint64_t last_rank = 0;  // of the order visited before (ranks between were skipped)
    ForEachStageSizeOrderSkipping(units[u].sizes, units[u].max_len,
                                  [&](const std::vector<uint32_t>& order, uint64_t rank) -> std::optional<uint32_t> {
      if (order_index++ != 0) {
        if (phase == 0) {
          more_orders = true;
          return std::nullopt;
        }
      } else if (phase == 1) {
        return 0u;  // the probe's
      }
      if (rank > last_rank + 1) counters.orders_skipped += rank - last_rank - 1;
      last_rank = rank;
      ++counters.orders;
      // Whether every pair of this order was cut because some stage cannot hold its fewest blocks, and
      // the most leading stages that decided it (then every order beginning with them is cut too).
      bool all_short = true;
      uint32_t short_prefix = 0;
      uint32_t pairs = 0;
      // One assignment: `layout` its layout; `stream` (consecutive placement) the node order's reusable
      // state, whose stages before the prefix this order shares with the previous one are kept.
      auto assignment = [&](const Placement& pl, Layout& layout, Stream* stream, uint32_t node_order) {
        ++counters.assignments;
        for (uint64_t bi = 0; bi < n_bs; ++bi) {
          const uint32_t B = units[u].Bs[bi];
          // Algorithm 1's loops (line 4) stop at the time limit: checked once per (assignment, B).
          if (deadline.Passed(my_ticks)) {
            cut = true;
            break;
          }
          BoundArrays* arrays = nullptr;
          uint32_t from = 0;
          if (stream != nullptr) {
            arrays = &stream->bounds[static_cast<size_t>(
                std::lower_bound(micro_batch_counts.begin(), micro_batch_counts.end(), B) -
                micro_batch_counts.begin())];
            from = arrays->B == B ? SharedPrefix(arrays->sizes, order) : 0;
            arrays->sizes.clear();  // valid again once PrepareMemory or PrepareBound has run
          }
          double incumbent = std::min(mine.cost, shared_best.load());
          if (keep > 0) incumbent = std::max(incumbent, std::min(my_runners.bar(), shared_bar.load()));
          Evaluator ev(ctx, layout, B, counters, scratch, incumbent, &deadline, &my_ticks, arrays, from);
          ev.KeepLeaves(keep);
          const double c = ev.Run();
          if (arrays != nullptr && ev.prepared()) {
            arrays->sizes = order;
            arrays->B = B;
          }
          cut |= ev.cut();
          ++pairs;
          if (ev.short_at() == UINT32_MAX) {
            all_short = false;
          } else {
            short_prefix = std::max(short_prefix, ev.short_at() + 1);
          }
          // The pair's place in the unit's canonical order: by (order, node order, B) under the
          // consecutive placement, whose orders may be skipped; by count in the full space.
          const uint64_t o = full_space ? ordinal++ : (rank * node_orders.size() + node_order) * n_bs + bi;
          if (keep > 0 && !ev.leaves().empty()) {
            for (const Leaf& leaf : ev.leaves()) {
              if (!my_runners.WouldKeep(leaf.cost, u, o, leaf.seq)) break;  // the rest cost more
              Runners::Entry e{leaf.cost, u, o, leaf.seq,
                               BuildPlan(cluster, pl, layout, leaf.st, ev.micro_batch(), B, knobs.zero_stage), {}};
              if (!CheckMemory(e.plan, problem, prof.memory()).fits) continue;
              my_runners.Offer(std::move(e));
            }
            const double bar = my_runners.bar();
            double seen = shared_bar.load();
            while (bar < seen && !shared_bar.compare_exchange_weak(seen, bar)) {
            }
          }
          if (!(c < kInf) || !mine.Better(c, u, o)) continue;
          proto::Plan plan = BuildPlan(cluster, pl, layout, ev.best_state(), ev.micro_batch(), B, knobs.zero_stage);
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
      };
      if (full_space) {
        ForEachPlacement(cluster, sh.prof.classes(), order, true, node_orders, [&](const Placement& pl) {
          MakeLayout(cluster, prof, links, ctx.boundary_bytes, pl, lay);
          return assignment(pl, lay, nullptr, 0);
        });
      } else {
        ForEachConsecutivePlacement(cluster, order, node_orders, built, [&](const Placement& pl, uint32_t o) {
          Stream& stream = streams[o];
          MakeLayout(cluster, prof, links, ctx.boundary_bytes, pl, stream.lay,
                     SharedPrefix(stream.sizes, order));
          stream.sizes = order;
          return assignment(pl, stream.lay, &stream, o);
        });
      }
      if (cut) return std::nullopt;
      // Skipping is for the consecutive placement (the full space's placements of a prefix vary).
      return !full_space && all_short && pairs > 0 ? short_prefix : 0u;
    });
    sh.EndUnit(u, phase, ordinal, unit_best, cut, more_orders);
  }
  sh.Merge(mine, my_runners, counters);
}

// Runs phase `phase` on `threads` workers.
void RunPhase(Shared& sh, int phase, uint32_t threads) {
  std::atomic<size_t> next{0};
  if (threads == 1) {
    SearchWorker(sh, phase, next);
    return;
  }
  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < threads; ++t) pool.emplace_back([&] { SearchWorker(sh, phase, next); });
  for (auto& t : pool) t.join();
}

}  // namespace

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
  const uint64_t max_orders =
      knobs.max_orders > 0 ? knobs.max_orders : std::max<uint64_t>(1, static_cast<uint64_t>(kOrderWork / N));
  uint64_t multisets = 0, budget_cut = 0;
  const std::vector<Unit> units =
      MakeUnits(knobs, prof, N, G, max_stages, micro_batch_counts, max_orders, &multisets, &budget_cut);
  // The order of work (ProbeOrder): phase 0 probes each unit's first order, phase 1 does the rest.
  std::vector<size_t> unit_order =
      ProbeOrder(units, cluster, classes, result.full_space, node_orders, prof, links, ctx, deadline);

  const uint32_t keep = problem.alternatives > 0 ? problem.alternatives + 1 : 0;
  Shared sh(problem, knobs, prof, ctx, links, deadline, node_orders, micro_batch_counts, units, unit_order,
            result.full_space, keep);
  const uint32_t threads = std::max<uint32_t>(1, std::min<uint32_t>(knobs.threads, 64));
  RunPhase(sh, 0, threads);
  // A unit's probe cost is an upper bound on its best plan, a good guess at how good its other orders are.
  std::stable_sort(unit_order.begin(), unit_order.end(),
                   [&](size_t a, size_t b) { return sh.probe_cost[a] < sh.probe_cost[b]; });
  RunPhase(sh, 1, threads);
  Counters& total = sh.total;
  Best& best = sh.best;

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
  stats.notes.push_back(std::to_string(multisets) + " stage-size multisets (var " + var +
                        (knobs.released_var ? ", the released planner's bound" : "") + "), " +
                        std::to_string(total.orders) + " orders (max permutation length " +
                        std::to_string(knobs.max_permutation_length) + ")" +
                        (total.orders_skipped > 0
                             ? " and " + std::to_string(total.orders_skipped) +
                                   " more skipped (every pair of an order that began with the same stages was cut "
                                   "because one of those stages cannot hold its fewest blocks; exact)"
                             : std::string()) +
                        ", " + std::to_string(total.assignments) +
                        " stage-device assignments (" +
                        (result.full_space ? std::string("§4.1 full space")
                                           : "consecutive GPUs over " + std::to_string(node_orders.size()) +
                                                 " node orders") +
                        "), " + std::to_string(micro_batch_counts.size()) + " micro-batch counts");
  if (budget_cut > 0) {
    stats.notes.push_back("order budget (max_orders: " + std::to_string(max_orders) + "; not in the paper): " +
                          std::to_string(budget_cut) + " of " + std::to_string(units.size()) +
                          " work units searched with a shorter permutation length than " +
                          std::to_string(knobs.max_permutation_length) +
                          " (their smallest groups merged further), so that the search explores at most that many "
                          "stage-size orders");
  }
  std::string coverage;
  if (deadline.passed()) {
    result.cut_by_time_limit = true;
    coverage = CoverageNote(units, sh.probed, sh.unit_state, micro_batch_counts);
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
    if (!sh.all_misses.empty()) {
      std::sort(sh.all_misses.begin(), sh.all_misses.end(), [](const Miss& a, const Miss& b) {
        return std::tie(a.shortfall_gib, a.what) < std::tie(b.shortfall_gib, b.what);
      });
      InfeasibleTracker tracker;
      for (const Miss& m : sh.all_misses) tracker.Offer(m.what, m.need_gib, m.capacity_gib, m.device);
      return tracker.ToStatus("metis", problem, stats);
    }
    return NothingFound("metis", problem, stats,
                        "Metis needs a stage count and micro-batch count where every DP replica gets 1 to "
                        "max_profiled_batch_size sequences");
  }
  // The runners-up: the best distinct plans after the pick. The pick is the best plan of the pairs' best
  // plans that passes hetsim's memory check, as without runners-up; a cheaper plan could precede it only
  // if that check rejected the best plan of its pair (never seen: §4.3's estimate agrees with it), and is
  // then left out so that the runners-up follow the pick.
  if (keep > 0) {
    const std::string pick = best.plan->SerializeAsString();
    for (Runners::Entry& e : sh.runners.kept()) {
      if (result.alternatives.size() >= problem.alternatives) break;
      if (e.key == pick || e.cost < best.cost) continue;
      result.alternatives.push_back(RankedPlan{std::move(e.plan), e.cost});
    }
    stats.notes.push_back("runners-up: " + std::to_string(result.alternatives.size()) + " of " +
                          std::to_string(problem.alternatives) +
                          " asked, the next-best distinct plans by eq. 1 (the cut compared lower bounds against the " +
                          std::to_string(keep) + "th best plan instead of the best)");
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
