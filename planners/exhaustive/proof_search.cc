// The proof search of the simulator's optimum over threads (search_internal.h, RunProofSearch).
//
// In the simulator-bound mode the cut is a fixed threshold, so each structure's subtree is explored the same
// way whatever was explored before it: the structures are independent. One thread enumerates them (the
// enumeration's own bounds cut whole families, as in the sequential search) into a short queue; workers,
// each with its own Search and caches, evaluate one structure at a time and record, per lower-bound play,
// the node count it was played at. The results are then taken in the enumeration's order and the counted
// budgets applied over that order exactly as the sequential search applies them (it stops at the node that
// exceeds max_proof_nodes and after the play that reaches max_bound_plays), so the kept plans, the counts
// and whether the space is covered do not depend on the thread count; only the wall-clock safety net
// (proof_time_limit_s) does, as it did before. Once the budgets run out the structures after the stop are
// cancelled.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "planners/exhaustive/search_internal.h"

namespace hetsim::planners::exhaustive {
namespace {

constexpr double kProgressEvery_s = 10;

// The sequential order's bookkeeping: what has been taken so far, and where the budgets stopped it.
class InOrder {
 public:
  InOrder(uint64_t max_nodes, uint64_t max_plays, uint64_t max_structures)
      : max_nodes_(max_nodes), max_plays_(max_plays), max_structures_(max_structures) {}

  // Takes structure outcomes in order; false once the search has stopped (nothing after it counts).
  bool Take(StructureOutcome& o, ProofOutcome& out) {
    if (out.stopped) return false;
    if (max_structures_ > 0 && out.structures >= max_structures_) {
      return Stop(out, "budget of " + std::to_string(max_structures_) +
                           " structures reached: the space is not covered");
    }
    out.floor_above_bound += o.floor_above_bound;
    out.network_pruned += o.network_pruned;
    out.schedule_pruned += o.schedule_pruned;
    out.out_of_memory += o.out_of_memory;
    size_t next_kept = 0;
    for (size_t i = 0; i < o.play_nodes.size(); ++i) {
      if (max_nodes_ > 0 && out.nodes + o.play_nodes[i] > max_nodes_) return Stop(out, NodeBudget());
      ++out.plays;
      if (next_kept < o.kept_plays.size() && o.kept_plays[next_kept] == i + 1) {
        out.kept.push_back(std::move(o.kept[next_kept++]));
      }
      if (max_plays_ > 0 && out.plays >= max_plays_) {
        out.nodes += o.play_nodes[i];
        return Stop(out, "budget of " + std::to_string(max_plays_) +
                             " lower-bound plays reached: the space is not covered");
      }
    }
    if (max_nodes_ > 0 && out.nodes + o.nodes > max_nodes_) return Stop(out, NodeBudget());
    out.nodes += o.nodes;
    if (!o.complete) return Stop(out, o.stop_reason);
    ++out.structures;
    return true;
  }

 private:
  std::string NodeBudget() const {
    return "budget of " + std::to_string(max_nodes_) + " layer-split nodes reached: the space is not covered";
  }
  bool Stop(ProofOutcome& out, std::string reason) {
    if (max_nodes_ > 0) out.nodes = std::min(out.nodes, max_nodes_);
    out.stopped = true;
    out.stop_reason = std::move(reason);
    return false;
  }

  const uint64_t max_nodes_, max_plays_, max_structures_;
};

}  // namespace

ProofOutcome RunProofSearch(const PlanningProblem& problem, const proto::ExhaustiveOptions& options,
                            const SimBoundMode& mode) {
  ProofOutcome out;
  const uint32_t hw = std::max(1u, std::thread::hardware_concurrency());
  out.threads = std::min<uint32_t>(options.proof_threads() > 0 ? options.proof_threads() : hw, 64);
  InOrder order(options.max_proof_nodes() > 0 ? options.max_proof_nodes() : 20000000, mode.max_leaves,
                options.max_proof_structures());
  const auto start = std::chrono::steady_clock::now();

  std::mutex mu;
  std::condition_variable queued, drained;
  std::deque<std::pair<uint64_t, std::vector<Pipe>>> queue;
  const size_t queue_cap = 4 * size_t{out.threads};
  bool enumerated = false;
  std::atomic<bool> cancel{false};
  std::map<uint64_t, StructureOutcome> finished;  // evaluated, waiting for the ones before them
  uint64_t next = 0, enumerated_count = 0;
  double last_report = 0;

  // Under mu: takes what is next in order; cancels everything once the search has stopped.
  auto take_in_order = [&] {
    for (auto it = finished.find(next); it != finished.end(); it = finished.find(next)) {
      const bool go_on = order.Take(it->second, out);
      finished.erase(it);
      ++next;
      if (!go_on) {
        cancel.store(true);
        finished.clear();
        queue.clear();
        drained.notify_all();
        queued.notify_all();
        return;
      }
    }
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (problem.progress && now - last_report >= kProgressEvery_s) {
      last_report = now;
      char line[256];
      std::snprintf(line, sizeof line,
                    "exhaustive proof: %llu structures covered of %llu enumerated so far, %llu layer-split nodes, "
                    "%llu plays, %zu plans kept (%.0f s, %u threads)",
                    static_cast<unsigned long long>(out.structures), static_cast<unsigned long long>(enumerated_count),
                    static_cast<unsigned long long>(out.nodes), static_cast<unsigned long long>(out.plays),
                    out.kept.size(), now, out.threads);
      problem.progress(line);
    }
  };

  auto worker = [&] {
    SearchStats stats;
    Search search(problem, options, stats, 0, &mode);
    search.SetCancel(&cancel);
    for (;;) {
      std::pair<uint64_t, std::vector<Pipe>> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        queued.wait(lock, [&] { return !queue.empty() || enumerated || cancel.load(); });
        if (queue.empty()) return;  // enumerated (or cancelled) and nothing left
        task = std::move(queue.front());
        queue.pop_front();
        drained.notify_one();
      }
      StructureOutcome o = search.EvaluateOne(task.second);
      std::lock_guard<std::mutex> lock(mu);
      if (cancel.load()) continue;
      finished.emplace(task.first, std::move(o));
      take_in_order();
    }
  };

  std::vector<std::thread> pool;
  for (uint32_t t = 0; t < out.threads; ++t) pool.emplace_back(worker);

  SearchStats stats;
  Search enumeration(problem, options, stats, 0, &mode);
  enumeration.SetCancel(&cancel);
  enumeration.SetStructureSink([&](const std::vector<Pipe>& pipes) {
    std::unique_lock<std::mutex> lock(mu);
    drained.wait(lock, [&] { return queue.size() < queue_cap || cancel.load(); });
    if (cancel.load()) return false;
    queue.emplace_back(enumerated_count++, pipes);
    queued.notify_one();
    return true;
  });
  enumeration.Run();
  {
    std::lock_guard<std::mutex> lock(mu);
    enumerated = true;
    queued.notify_all();
  }
  for (auto& t : pool) t.join();
  // The enumeration itself stopped on the time limit: the structures it did not reach are not covered.
  if (!out.stopped && enumeration.stopped() && !cancel.load()) {
    out.stopped = true;
    out.stop_reason = enumeration.stop_reason();
  }
  if (!out.stopped && next < enumerated_count) {  // cannot happen: every structure was taken or cancelled
    out.stopped = true;
    out.stop_reason = "internal error: " + std::to_string(enumerated_count - next) + " structures not evaluated";
  }
  return out;
}

}  // namespace hetsim::planners::exhaustive
