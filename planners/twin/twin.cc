#include "planners/twin/twin.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/plan.h"
#include "models/training.h"
#include "planners/exhaustive/exhaustive.h"
#include "planners/proto/twin.pb.h"

namespace hetsim::planners::twin {
namespace {

constexpr uint32_t kDefaultCandidatesPerPlanner = 4;
constexpr double kDefaultPlannerTimeLimitS = 10;
constexpr double kDefaultKeepWithin = 0.1;

struct Candidate {
  proto::Plan plan;
  double estimate_s = 0;
  std::string found_by;
  bool pick = false;  // a planner's own pick (always kept)
};

const char* RecomputeName(proto::Recompute r) {
  return r == proto::RECOMPUTE_UNSPECIFIED ? "the training spec's" : models::RecomputeName(r);
}

class TwinPlanner : public PlannerWithOptions<proto::TwinOptions> {
 public:
  std::string name() const override { return "twin"; }
  // Its pool holds megatron's and deepspeed's expert-parallel plans.
  bool SearchesExpertParallelism() const override { return true; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    std::vector<std::string> names(o.planners().begin(), o.planners().end());
    if (names.empty()) {
      for (const auto& n : PlannerNames()) {
        // exhaustive's closed-form search within its exact range (its default max_devices), time-limited
        // like metis: its structures (any grouping of machines into stages) are ones no other planner builds.
        if (n == "exhaustive" && problem.cluster.num_devices() > exhaustive::kDefaultMaxDevices) continue;
        if (n != "twin") names.push_back(n);
      }
    }
    const uint32_t per = o.candidates_per_planner() > 0 ? o.candidates_per_planner() : kDefaultCandidatesPerPlanner;
    const bool variants = o.has_recompute_variants() ? o.recompute_variants() : true;

    PlanningProblem asked = problem;
    asked.alternatives = per - 1;
    asked.seeds.clear();
    asked.progress = nullptr;
    const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
    const AnalyticCostModel cost(problem);

    PlannerResult result;
    SearchStats& stats = result.stats;
    std::set<std::string> seen;
    std::vector<Candidate> pool;
    uint32_t offered = 0;
    const auto offer = [&](const proto::Plan& plan, const std::string& by, bool pick) {
      ++offered;
      std::string key;
      proto::Plan keyed = plan;
      keyed.clear_name();
      keyed.clear_planner();
      keyed.SerializeToString(&key);
      if (!seen.insert(std::move(key)).second) {
        stats.Reject("same plan as an earlier candidate");
        return;
      }
      if (!models::ValidatePlan(plan, ctx, "").ok()) {
        stats.Reject("invalid or out of memory on the cluster");
        return;
      }
      ++stats.candidates_evaluated;
      pool.push_back({plan, cost.Estimate(plan, /*with_memory=*/false).iteration_s, by, pick});
    };
    std::vector<std::string> per_planner;
    for (const std::string& name : names) {
      if (name == "twin") return Status::Invalid("twin options: planners: twin cannot start from itself; remove it");
      const double limit_s = o.planner_time_limit_s() > 0 ? o.planner_time_limit_s() : kDefaultPlannerTimeLimitS;
      // Anytime limits where a planner has one (its options' own key).
      const std::string options =
          name == "metis" || name == "exhaustive" ? "time_limit_s: " + std::to_string(limit_s) : std::string();
      HETSIM_ASSIGN_OR_RETURN(auto planner, CreatePlanner(name, options, "twin's options for " + name));
      if (problem.progress) problem.progress("twin: " + name + "'s candidates");
      const auto start = std::chrono::steady_clock::now();
      auto r = RunPlanner(*planner, asked);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char line[160];
      if (!r.ok()) {
        std::snprintf(line, sizeof line, "%s: no plan (%.2f s)", name.c_str(), wall);
        per_planner.push_back(line);
        continue;
      }
      std::vector<proto::Plan> plans{r->plan};
      for (const auto& alt : r->alternatives) plans.push_back(alt.plan);
      std::snprintf(line, sizeof line, "%s: %zu (%.2f s%s)", name.c_str(), plans.size(), wall,
                    options.empty() ? "" : (", " + options).c_str());
      per_planner.push_back(line);
      for (size_t i = 0; i < plans.size(); ++i) {
        proto::Plan p = plans[i];
        p.set_planner("twin");
        const std::string by = name + (i == 0 ? "'s pick" : " runner-up " + std::to_string(i));
        offer(p, by, i == 0);
        if (!variants) continue;
        // The policy the plan runs with: its own, else the training spec's (none when neither says).
        proto::Recompute effective = p.recompute() != proto::RECOMPUTE_UNSPECIFIED ? p.recompute()
                                                                                   : problem.training.recompute();
        if (effective == proto::RECOMPUTE_UNSPECIFIED) effective = proto::RECOMPUTE_NONE;
        for (proto::Recompute r2 : {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL}) {
          if (r2 == effective) continue;
          proto::Plan v = p;
          v.set_recompute(r2);
          offer(v, by + ", recomputation " + RecomputeName(r2), false);
        }
      }
    }
    if (pool.empty()) {
      return Status::Infeasible("twin: no planner's candidate fits on the cluster (" + std::to_string(offered) +
                                " offered; see each planner's own error with `hetsim plan --planner NAME`)");
    }
    std::stable_sort(pool.begin(), pool.end(),
                     [](const Candidate& a, const Candidate& b) { return a.estimate_s < b.estimate_s; });
    // Every planner's pick stays (the answer must be checked against each); of the rest, those near the best.
    const double within = o.keep_within() > 0 ? o.keep_within() : kDefaultKeepWithin;
    const double bar = pool.front().estimate_s * (1 + within);
    const size_t before = pool.size();
    pool.erase(std::remove_if(pool.begin() + 1, pool.end(),
                              [&](const Candidate& c) { return !c.pick && c.estimate_s > bar; }),
               pool.end());
    if (pool.size() < before) stats.Reject("played estimate more than keep_within above the best", before - pool.size());
    std::string from;
    for (const auto& l : per_planner) from += (from.empty() ? "" : ", ") + l;
    char head[300];
    std::snprintf(head, sizeof head,
                  "pool: %zu candidates (every planner's pick, and the others within %.0f%% of the best played "
                  "estimate; %zu distinct that fit of %u offered) from %zu planners, by played estimate %.4g s to "
                  "%.4g s",
                  pool.size(), 100 * within, before, offered, names.size(), pool.front().estimate_s,
                  pool.back().estimate_s);
    stats.notes.push_back(head);
    stats.notes.push_back("  candidates per planner (pick and runners-up): " + from);
    result.plan = std::move(pool.front().plan);
    result.cost_s = pool.front().estimate_s;
    result.found_by = pool.front().found_by;
    const size_t keep = std::min<size_t>(pool.size() - 1, problem.alternatives);
    for (size_t i = 1; i <= keep; ++i) {
      result.alternatives.push_back({std::move(pool[i].plan), pool[i].estimate_s, 0, pool[i].found_by});
    }
    return result;
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() { return std::make_unique<TwinPlanner>(); }

}  // namespace hetsim::planners::twin
