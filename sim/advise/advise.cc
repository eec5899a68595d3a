#include "sim/advise/advise.h"

#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <ostream>
#include <thread>

#include "models/child_process.h"
#include "models/spec_io.h"
#include "sim/advise/advise_internal.h"
#include "sim/runner/replay_setup.h"
#include "sim/runner/runner.h"
#include "sim/runner/world.h"

namespace hetsim::advise {

// ---- the decision ----

std::vector<bool> ParetoFront(const std::vector<Outcome>& o) {
  std::vector<bool> front(o.size(), false);
  for (size_t i = 0; i < o.size(); ++i) {
    if (!o[i].finite()) continue;
    front[i] = true;
    for (size_t j = 0; j < o.size() && front[i]; ++j) {
      if (j == i || !o[j].finite()) continue;
      const bool no_worse = o[j].time_s <= o[i].time_s && o[j].cost_usd <= o[i].cost_usd;
      const bool better = o[j].time_s < o[i].time_s || o[j].cost_usd < o[i].cost_usd;
      if (no_worse && better) front[i] = false;
    }
  }
  return front;
}

bool BoundDominated(double time_lb_s, double cost_lb_usd, const std::vector<Outcome>& outcomes) {
  for (const auto& o : outcomes) {
    if (!o.finite()) continue;
    if (o.time_s <= time_lb_s && o.cost_usd <= cost_lb_usd && (o.time_s < time_lb_s || o.cost_usd < cost_lb_usd)) {
      return true;
    }
  }
  return false;
}

int Recommend(const std::vector<Outcome>& o, const std::string& objective, double deadline_s, double budget_usd) {
  int best = -1;
  const bool cheapest = objective != "soonest";
  auto key = [&](const Outcome& x) {
    return cheapest ? std::make_pair(x.cost_usd, x.time_s) : std::make_pair(x.time_s, x.cost_usd);
  };
  for (size_t i = 0; i < o.size(); ++i) {
    if (!o[i].finite() || o[i].time_s > deadline_s || o[i].cost_usd > budget_usd) continue;
    if (best < 0 || key(o[i]) < key(o[static_cast<size_t>(best)])) best = static_cast<int>(i);
  }
  return best;
}

namespace {

namespace fs = std::filesystem;
using internal::ConfigRow;
using internal::Group;
using internal::PlannedGroup;

std::string Indexed(const std::string& dir, const char* sub, uint32_t index, const char* ext) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "/%s/%07u%s", sub, index, ext);
  return dir + buf;
}

bool ReadPoint(const std::string& path, proto::PointResult* r) {
  std::ifstream in(path, std::ios::binary);
  return in && r->ParseFromIstream(&in);
}

// A group's plan record: plans/NNNNNNN.pb (a PointResult: status, reason, iteration) and .plan.pb (the plan).
void SavePlanned(const std::string& dir, const Group& g, const PlannedGroup& p) {
  proto::PointResult r;
  r.set_point(g.index);
  r.set_id(g.id);
  r.set_status(p.ok ? "ok" : "failed");
  r.set_reason(p.reason);
  r.set_plan_search_s(p.plan_wall_s);
  auto* m = r.add_metrics();
  m->set_name("iteration_s");
  m->set_value(p.iteration_s);
  m = r.add_metrics();
  m->set_name("ideal_tokens_per_s");
  m->set_value(p.ideal_tokens_per_s);
  if (p.ok) (void)models::WriteFileAtomically(Indexed(dir, "plans", g.index, ".plan.pb"), p.plan.SerializeAsString());
  (void)models::WriteFileAtomically(Indexed(dir, "plans", g.index, ".pb"), r.SerializeAsString());
}

// A point's result when it is there and was computed from the same inputs.
bool ReadPointOf(const std::string& dir, const Config& c, const Group& g, const internal::ConfigSlot& slot,
                 uint32_t seed_index, proto::PointResult* r) {
  return ReadPoint(Indexed(dir, "points", slot.first_point + seed_index, ".pb"), r) &&
         r->id() == internal::PointId(c, g, slot, seed_index);
}

bool PointDone(const std::string& dir, const Config& c, const Group& g, const internal::ConfigSlot& slot,
               uint32_t seed_index) {
  proto::PointResult r;
  return ReadPointOf(dir, c, g, slot, seed_index, &r);
}

std::optional<PlannedGroup> LoadPlanned(const std::string& dir, const Group& g) {
  proto::PointResult r;
  if (!ReadPoint(Indexed(dir, "plans", g.index, ".pb"), &r) || r.id() != g.id) return std::nullopt;
  PlannedGroup p;
  p.ok = r.status() == "ok";
  p.reason = r.reason();
  p.plan_wall_s = r.plan_search_s();
  for (const auto& m : r.metrics()) {
    if (m.name() == "iteration_s") p.iteration_s = m.value();
    if (m.name() == "ideal_tokens_per_s") p.ideal_tokens_per_s = m.value();
  }
  if (p.ok) {
    std::ifstream in(Indexed(dir, "plans", g.index, ".plan.pb"), std::ios::binary);
    if (!in || !p.plan.ParseFromIstream(&in)) return std::nullopt;
  }
  return p;
}

// Runs `items` on this process, on --jobs forked workers, or over the mpirun ranks (each rank its share,
// then every rank waits for the others through marker files in `dir`). Returns false when a worker died.
// With a deadline, no item starts after it, and forked workers (always used then, so that one long plan
// cannot hold the run) still running at it are stopped; their items have no result (--resume computes
// them). Under mpirun the deadline does not apply: the ranks would pass it at different items and wait
// for each other at different barriers.
class Spreader {
 public:
  using Clock = std::chrono::steady_clock;
  Spreader(std::string dir, int jobs, std::optional<Clock::time_point> deadline)
      : dir_(std::move(dir)), world_(runner::World::Get()), deadline_(deadline) {
    workers_ = world_.distributed() ? world_.size() : std::max(1, jobs);
  }
  int workers() const { return workers_; }
  bool rank0() const { return world_.rank() == 0; }
  bool Limited() const { return deadline_.has_value(); }
  bool Expired() const { return deadline_ && !world_.distributed() && Clock::now() >= *deadline_; }

  bool Run(size_t n, const std::function<void(size_t)>& item) {
    ++phase_;
    if (world_.distributed()) {
      for (size_t i = static_cast<size_t>(world_.rank()); i < n; i += static_cast<size_t>(world_.size())) item(i);
      Barrier();
      return true;
    }
    if (!Limited() && (workers_ <= 1 || n <= 1)) {
      for (size_t i = 0; i < n; ++i) item(i);
      return true;
    }
    if (n == 0 || Expired()) return true;
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    std::vector<pid_t> pids;
    const int w = static_cast<int>(std::min<size_t>(static_cast<size_t>(workers_), n));
    for (int k = 0; k < w; ++k) {
      const pid_t pid = ::fork();
      if (pid < 0) return false;
      if (pid == 0) {
        models::TieToParent(parent);
        for (size_t i = static_cast<size_t>(k); i < n && !Expired(); i += static_cast<size_t>(w)) item(i);
        std::fflush(nullptr);
        ::_exit(0);
      }
      pids.push_back(pid);
    }
    bool all_ok = true;
    size_t left = pids.size();
    std::vector<char> done(pids.size(), 0);
    bool stopped = false;
    while (left > 0) {
      for (size_t k = 0; k < pids.size(); ++k) {
        int status = 0;
        if (done[k] || ::waitpid(pids[k], &status, Limited() ? WNOHANG : 0) <= 0) continue;
        done[k] = 1;
        --left;
        all_ok &= stopped || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
      }
      if (left > 0 && !stopped && Expired()) {  // never true without a deadline
        for (size_t k = 0; k < pids.size(); ++k) {
          if (!done[k]) ::kill(pids[k], SIGKILL);
        }
        stopped = true;
      }
      if (left > 0 && Limited()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return all_ok;
  }

 private:
  void Barrier() {
    const std::string sync = dir_ + "/sync";
    std::error_code ec;
    fs::create_directories(sync, ec);
    auto marker = [&](int rank) {
      return sync + "/" + world_.job() + "." + std::to_string(phase_) + "." + std::to_string(rank);
    };
    (void)models::WriteFileAtomically(marker(world_.rank()), "done\n");
    for (;;) {
      int done = 0;
      for (int r = 0; r < world_.size(); ++r) done += fs::exists(marker(r)) ? 1 : 0;
      if (done == world_.size()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  std::string dir_;
  const runner::World& world_;
  std::optional<Clock::time_point> deadline_;
  int workers_ = 1;
  int phase_ = 0;
};

std::string Duration(double s) {
  char buf[32];
  if (s >= 2 * 86400) std::snprintf(buf, sizeof(buf), "%.1f d", s / 86400);
  else if (s >= 3600) std::snprintf(buf, sizeof(buf), "%.1f h", s / 3600);
  else if (s >= 120) std::snprintf(buf, sizeof(buf), "%.0f min", s / 60);
  else std::snprintf(buf, sizeof(buf), "%.0f s", s);
  return buf;
}

// A configuration's row from its plan and its replays' files: failed (not planned, a replay missing or
// failed), pruned, or ok with its means and ranges over the seeds. `unfinished` (non-empty when the run
// stopped at its time limit) is the reason given for what was not computed; `missing` marks those rows.
ConfigRow ReadRow(const Config& c, const std::string& dir, const Group& g, const internal::ConfigSlot& slot,
                  const std::optional<PlannedGroup>& planned, bool pruned, const std::string& unfinished) {
  ConfigRow row;
  row.config = slot.index;
  row.group = &g;
  row.slot = &slot;
  auto not_computed = [&](const char* why) {
    row.status = "failed";
    row.reason = unfinished.empty() ? why : unfinished;
    row.missing = true;
    return row;
  };
  if (!planned) return not_computed("not planned (a worker was killed; rerun with --resume)");
  if (!planned->ok) {
    row.status = "failed";
    row.reason = planned->reason;
    return row;
  }
  if (pruned) {
    row.status = "pruned";
    row.reason = "its bound is dominated by a replayed configuration";
    return row;
  }
  std::vector<double> times, costs;
  double gf = 0, ettr = 0;
  for (uint32_t s = 0; s < c.seeds; ++s) {
    proto::PointResult r;
    if (!ReadPointOf(dir, c, g, slot, s, &r)) {
      return not_computed("replay missing (a worker was killed; rerun with --resume)");
    }
    if (r.status() != "ok") {
      row.status = "failed";
      row.reason = r.reason();
      return row;
    }
    for (const auto& m : r.metrics()) {
      if (m.name() == "time_to_train_days") times.push_back(m.value() * 86400);
      if (m.name() == "cost_usd") costs.push_back(m.value());
      if (m.name() == "goodput_fraction") gf += m.value() / c.seeds;
      if (m.name() == "ettr") ettr += m.value() / c.seeds;
    }
  }
  if (times.empty()) {
    row.status = "failed";
    row.reason = "no replay reported a time";
    return row;
  }
  row.status = "ok";
  row.seeds_ok = static_cast<uint32_t>(times.size());
  row.time_mean = std::accumulate(times.begin(), times.end(), 0.0) / times.size();
  row.cost_mean = std::accumulate(costs.begin(), costs.end(), 0.0) / costs.size();
  row.time_min = *std::min_element(times.begin(), times.end());
  row.time_max = *std::max_element(times.begin(), times.end());
  row.cost_min = *std::min_element(costs.begin(), costs.end());
  row.cost_max = *std::max_element(costs.begin(), costs.end());
  row.goodput_fraction = gf;
  row.ettr = ettr;
  return row;
}

// ---- RunAdvise's phases ----

// Phase 1: plans every group (with --resume, the plans already there are kept) and reads them all back.
std::vector<std::optional<PlannedGroup>> PlanGroups(const Config& c, const internal::Space& space, const std::string& dir,
                                                    const AdviseOptions& options, Spreader& spread, std::ostream& err) {
  size_t planned_count = 0;
  if (!spread.Run(space.groups.size(), [&](size_t i) {
        const Group& g = space.groups[i];
        if (options.resume && LoadPlanned(dir, g)) return;
        const PlannedGroup p = internal::PlanGroup(c, g);
        SavePlanned(dir, g, p);
        if (options.progress && spread.workers() == 1) {
          char line[256];
          std::snprintf(line, sizeof(line), "  plan %zu/%zu %s on %s: %s\n", ++planned_count, space.groups.size(),
                        c.planners[g.planner].label.c_str(), c.candidates[g.candidate].label.c_str(),
                        p.ok ? (std::to_string(p.iteration_s).substr(0, 6) + " s/iteration").c_str() : p.reason.substr(0, 90).c_str());
          err << line << std::flush;
        }
      })) {
    err << "hetsim advise: a planning worker ended abnormally; rerun with --resume\n";
  }
  std::vector<std::optional<PlannedGroup>> planned(space.groups.size());
  for (const auto& g : space.groups) planned[g.index] = LoadPlanned(dir, g);

  return planned;
}

// The groups' bounds and the order they are replayed in.
struct Bounds {
  std::vector<double> time_lb, cost_lb;  // per group; -1 where it has no plan
  std::vector<uint32_t> order;           // the planned groups, most promising first
};

// No faster than the plan's iteration without interruptions; no cheaper than the least rent over the seeds'
// windows. Ordered by the objective's bound.
Bounds BoundGroups(const Config& c, const internal::Space& space, const std::vector<std::optional<PlannedGroup>>& planned) {
  Bounds out;
  out.time_lb.assign(space.groups.size(), -1);
  out.cost_lb.assign(space.groups.size(), -1);
  auto& time_lb = out.time_lb;
  auto& cost_lb = out.cost_lb;
  auto& order = out.order;
  std::map<size_t, std::vector<double>> rent_of;
  for (const auto& g : space.groups) {
    if (!planned[g.index] || !planned[g.index]->ok) continue;
    if (!rent_of.count(g.candidate)) rent_of[g.candidate] = internal::RentPerSeed(c, g.candidate);
    const auto& rents = rent_of[g.candidate];
    time_lb[g.index] = c.spec.tokens() / planned[g.index]->ideal_tokens_per_s;
    cost_lb[g.index] = time_lb[g.index] / 3600 * *std::min_element(rents.begin(), rents.end());
    order.push_back(g.index);
  }
  const bool cheapest = c.objective == "cheapest";
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return cheapest ? std::make_pair(cost_lb[a], time_lb[a]) < std::make_pair(cost_lb[b], time_lb[b])
                    : std::make_pair(time_lb[a], cost_lb[a]) < std::make_pair(time_lb[b], cost_lb[b]);
  });
  return out;
}

// Phase 2: replays the groups in bound order, a round of `workers` groups at a time; after each round, groups
// whose bound is dominated by a replayed configuration are pruned. Returns which groups were pruned.
std::vector<char> ReplayInBoundOrder(const Config& c, const internal::Space& space, const std::string& dir,
                                     const AdviseOptions& options, Spreader& spread, bool talk,
                                     const std::function<double()>& elapsed,
                                     const std::vector<std::optional<PlannedGroup>>& planned, const Bounds& bounds,
                                     std::ostream& err) {
  const auto& time_lb = bounds.time_lb;
  const auto& cost_lb = bounds.cost_lb;
  const auto& order = bounds.order;
  std::vector<Outcome> outcome(space.configs);
  std::vector<char> pruned(space.groups.size(), 0), replayed(space.groups.size(), 0);
  auto aggregate = [&](const Group& g) {
    for (const auto& slot : g.configs) {
      Outcome o;
      o.ok = true;
      double t = 0, cost = 0;
      for (uint32_t s = 0; s < c.seeds; ++s) {
        proto::PointResult r;
        if (!ReadPointOf(dir, c, g, slot, s, &r) || r.status() != "ok") {
          o.ok = false;
          break;
        }
        for (const auto& m : r.metrics()) {
          if (m.name() == "time_to_train_days") t += m.value() * 86400;
          if (m.name() == "cost_usd") cost += m.value();
        }
      }
      if (o.ok) {
        o.time_s = t / c.seeds;
        o.cost_usd = cost / c.seeds;
      }
      outcome[slot.index] = o;
    }
  };
  size_t next = 0, groups_done = 0, points_run = 0;
  while (next < order.size() && !spread.Expired()) {
    std::vector<uint32_t> round;
    while (next < order.size() && round.size() < static_cast<size_t>(spread.workers())) {
      const uint32_t gi = order[next++];
      if (options.prune && BoundDominated(time_lb[gi], cost_lb[gi], outcome)) {
        pruned[gi] = 1;
        continue;
      }
      round.push_back(gi);
    }
    if (round.empty()) break;
    // The round's points (with --resume, those already there are kept).
    std::vector<std::pair<uint32_t, std::pair<const internal::ConfigSlot*, uint32_t>>> work;
    for (uint32_t gi : round) {
      for (const auto& slot : space.groups[gi].configs) {
        for (uint32_t s = 0; s < c.seeds; ++s) work.push_back({gi, {&slot, s}});
      }
    }
    points_run += work.size();
    if (!spread.Run(work.size(), [&](size_t i) {
          const auto& [gi, item] = work[i];
          if (options.resume && PointDone(dir, c, space.groups[gi], *item.first, item.second)) return;
          const proto::PointResult r =
              internal::ReplayPoint(c, space.groups[gi], *planned[gi], *item.first, item.second);
          if (r.status() == "killed") {
            std::fprintf(stderr, "hetsim advise: replay %u: %s; it has no result (rerun with --resume)\n", r.point(),
                         r.reason().c_str());
            return;
          }
          (void)models::WriteFileAtomically(Indexed(dir, "points", r.point(), ".pb"), r.SerializeAsString());
        })) {
      err << "hetsim advise: a replay worker ended abnormally; its replays are missing (rerun with --resume)\n";
    }
    for (uint32_t gi : round) {
      aggregate(space.groups[gi]);
      replayed[gi] = 1;
      ++groups_done;
    }
    if (talk) {
      size_t n_pruned = 0;
      for (char p : pruned) n_pruned += p;
      char line[256];
      std::snprintf(line, sizeof(line), "  replayed %zu of %zu plans (%zu pruned by their bound), %zu replays, %.0f s\n",
                    groups_done, order.size(), n_pruned, points_run, elapsed());
      err << line << std::flush;
    }
  }
  return pruned;
}

}  // namespace

Status RunAdvise(const Config& c, const AdviseOptions& options, std::ostream& out, std::ostream& err) {
  const std::string dir = options.out_dir.empty() ? "out/" + c.spec.name() : options.out_dir;
  std::error_code ec;
  for (const char* sub : {"points", "plans"}) {
    fs::create_directories(dir + "/" + sub, ec);
    if (ec) return Status::IoError(dir + ": cannot create the results folder: " + ec.message());
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<Spreader::Clock::time_point> stop_at;
  if (options.time_limit_s > 0) {
    // The work stops a tenth of the limit early (at most a minute) so that writing the outputs, the
    // recommended configuration's replays and the figure (~10 s at 96,000 configurations) fit within it.
    const double work_s = options.time_limit_s - std::min(60.0, 0.1 * options.time_limit_s);
    stop_at = t0 + std::chrono::duration_cast<Spreader::Clock::duration>(std::chrono::duration<double>(work_s));
  }
  Spreader spread(dir, options.jobs, stop_at);
  const internal::Space space = internal::Enumerate(c);
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  const bool talk = options.progress && spread.rank0();
  // Files are never cleared up front (under mpirun another rank may be writing already): every plan and point
  // is recomputed unless --resume finds it with the same id, and what this run did not compute is removed at
  // the end.
  if (talk) {
    err << "hetsim advise: " << c.candidates.size() << " candidate clusters x " << c.planners.size() << " planners = "
        << space.groups.size() << " plans; " << space.configs << " configurations x " << c.seeds << " seeds = "
        << space.points << " replays of " << Duration(c.window_s) << " each\n";
  }

  // Phase 1: plan every group (with --resume, the plans already there are kept).
  const std::vector<std::optional<PlannedGroup>> planned = PlanGroups(c, space, dir, options, spread, err);
  const Bounds bounds = BoundGroups(c, space, planned);
  const auto& time_lb = bounds.time_lb;
  const auto& cost_lb = bounds.cost_lb;
  const std::vector<char> pruned =
      ReplayInBoundOrder(c, space, dir, options, spread, talk, elapsed, planned, bounds, err);
  size_t missing = 0;
  if (!spread.rank0()) return Status::Ok();
  // Stopped at the time limit: what was not planned or replayed is named as such, the rest is reported.
  const bool stopped = spread.Expired();
  const std::string unfinished = stopped ? "not computed before the time limit (--time-limit; rerun with --resume)"
                                         : "";

  // Rows, the front and the recommendation.
  std::vector<ConfigRow> rows;
  for (const auto& g : space.groups) {
    for (const auto& slot : g.configs) {
      ConfigRow row = ReadRow(c, dir, g, slot, planned[g.index], pruned[g.index] != 0, unfinished);
      row.time_lb = time_lb[g.index];
      row.cost_lb = cost_lb[g.index];
      missing += row.missing ? 1 : 0;
      rows.push_back(row);
    }
  }
  std::vector<Outcome> outcomes(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].status != "ok") continue;
    outcomes[i].ok = true;
    outcomes[i].time_s = rows[i].time_mean;
    outcomes[i].cost_usd = rows[i].cost_mean;
  }
  const double deadline = c.spec.has_deadline_days() ? c.spec.deadline_days() * 86400 : INFINITY;
  const double budget = c.spec.has_budget_usd() ? c.spec.budget_usd() : INFINITY;
  const auto front = ParetoFront(outcomes);
  const int rec = Recommend(outcomes, c.objective, deadline, budget);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].pareto = front[i];
    rows[i].feasible = outcomes[i].finite() && outcomes[i].time_s <= deadline && outcomes[i].cost_usd <= budget;
    rows[i].recommended = static_cast<int>(i) == rec;
  }

  // The recommended configuration's replays, one per seed, for its figure.
  if (rec >= 0) {
    const ConfigRow& row = rows[static_cast<size_t>(rec)];
    std::vector<proto::ReplayReport> reports;
    for (uint32_t s = 0; s < c.seeds; ++s) {
      proto::ReplayReport report;
      (void)internal::ReplayPoint(c, *row.group, *planned[row.group->index], *row.slot, s, &report);
      report.set_policy(internal::PolicyLabel(c, *row.slot) + " (seed " + std::to_string(internal::SeedOf(c, s)) + ")");
      reports.push_back(std::move(report));
    }
    std::ostringstream sink;
    const Status st = runner::WriteReplayOutputs(reports, dir + "/recommended-replay.json",
                                                 options.figures ? dir + "/recommended-replay.png" : "", sink);
    if (!st.ok()) err << "warning: the recommended configuration's replay figure: " << st.message() << "\n";
  }
  std::string caveat;
  if (stopped && missing > 0) {  // a run whose work all ended just as the limit passed is complete
    caveat = "the run stopped at its time limit (" + Duration(options.time_limit_s) + ") with " +
             std::to_string(missing) + " of " + std::to_string(rows.size()) +
             " configurations not computed; the front and the recommendation are among those replayed before it.";
  }
  HETSIM_RETURN_IF_ERROR(internal::WriteOutputs(c, dir, rows, rec, caveat, out));
  // results.{jsonl,csv} hold this run's replays only: files of pruned groups, of other inputs, or beyond this
  // space (an earlier run of another config into the same folder) are removed first.
  for (const auto& g : space.groups) {
    for (const auto& slot : g.configs) {
      for (uint32_t s = 0; s < c.seeds; ++s) {
        proto::PointResult r;
        const std::string f = Indexed(dir, "points", slot.first_point + s, ".pb");
        if (fs::exists(f) && (pruned[g.index] || !ReadPointOf(dir, c, g, slot, s, &r))) fs::remove(f, ec);
      }
    }
  }
  for (const auto& e : fs::directory_iterator(dir + "/points", ec)) {
    const std::string stem = e.path().stem().string();
    const bool numbered = stem.size() == 7 && std::all_of(stem.begin(), stem.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (e.path().extension() != ".pb" || !numbered || std::stoul(stem) >= space.points) fs::remove(e.path(), ec);
  }
  HETSIM_RETURN_IF_ERROR(runner::MergeResults(dir, space.points));
  if (options.figures) {
    const std::vector<std::string> argv = {"/usr/bin/python3", models::PlotDir() + "/advise.py", dir, "-o",
                                           dir + "/pareto.png"};
    auto rc = models::RunProgram(argv);
    if (!rc.ok() || *rc != 0) err << "warning: drawing the Pareto figure failed (" << argv[1] << " " << dir << ")\n";
  }
  if (stopped && missing > 0) {
    return Status::Invalid("hetsim advise: stopped at the time limit (" + Duration(options.time_limit_s) + ", " +
                           "--time-limit) with " + std::to_string(missing) + " of " + std::to_string(rows.size()) +
                           " configurations not computed; the partial results are in " + dir + "; run again with " +
                           "--resume to continue (--time-limit 0: no limit; --jobs N: more workers), or narrow the "
                           "config");
  }
  if (missing > 0) {
    return Status::Invalid("hetsim advise: " + std::to_string(missing) + " configurations have no result (a worker was "
                           "killed); the others are in " + dir + "; run again with --resume to compute the missing ones");
  }
  return Status::Ok();
}

}  // namespace hetsim::advise
