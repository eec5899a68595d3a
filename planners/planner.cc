#include "planners/planner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <mutex>

#include "models/describe.h"
#include "models/plan.h"
#include "models/suggest.h"

namespace hetsim::planners {

std::vector<std::string> PlannerNames() {
  std::vector<std::string> names;
  for (const auto& p : Planners()) names.push_back(p.name);
  return names;
}

namespace {

std::mutex g_schemes_mutex;
std::map<std::string, PlannerFactory>& Schemes() {
  static auto* schemes = new std::map<std::string, PlannerFactory>();
  return *schemes;
}

// A planner of a registered scheme ("python:module:Class").
Result<std::unique_ptr<Planner>> CreateSchemePlanner(const std::string& name) {
  const std::string scheme = name.substr(0, name.find(':'));
  PlannerFactory factory;
  {
    std::lock_guard<std::mutex> lock(g_schemes_mutex);
    const auto it = Schemes().find(scheme);
    if (it != Schemes().end()) factory = it->second;
  }
  if (!factory) {
    return Status::NotFound("planner '" + name + "': " +
                            (scheme == "python" ? std::string("planners written in Python run from the Python package "
                                                              "(`hetsim.run`, `hetsim.plan`; docs/python.md), not from "
                                                              "the command line")
                                                : "no planner scheme '" + scheme + "' (`hetsim list planners`)"));
  }
  return factory(name.substr(scheme.size() + 1));
}

}  // namespace

void RegisterPlannerScheme(const std::string& scheme, PlannerFactory factory) {
  std::lock_guard<std::mutex> lock(g_schemes_mutex);
  if (factory) {
    Schemes()[scheme] = std::move(factory);
  } else {
    Schemes().erase(scheme);
  }
}

Result<std::unique_ptr<Planner>> CreatePlanner(const std::string& name) {
  if (name.find(':') != std::string::npos) return CreateSchemePlanner(name);
  for (const auto& p : Planners()) {
    if (p.name == name) return p.create();
  }
  std::string list;
  for (const auto& n : PlannerNames()) list += (list.empty() ? "" : ", ") + n;
  return Status::NotFound("unknown planner '" + name + "'" + DidYouMean(name, PlannerNames()) +
                          " (`hetsim list planners`: " + list + ")");
}

Result<std::unique_ptr<Planner>> CreatePlanner(const std::string& name, const std::string& options_yaml,
                                               const std::string& file) {
  HETSIM_ASSIGN_OR_RETURN(auto planner, CreatePlanner(name));
  HETSIM_RETURN_IF_ERROR(planner->ConfigureText(options_yaml, file));
  return planner;
}

bool RankedPlans::Offer(double cost_s, const proto::Plan& plan) {
  if (!WouldKeep(cost_s)) return false;
  std::string key;
  plan.SerializeToString(&key);
  if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) return false;
  // After the last plan of equal cost: ties keep the earlier offer first.
  const auto at = std::upper_bound(kept_.begin(), kept_.end(), cost_s,
                                   [](double c, const RankedPlan& r) { return c < r.cost_s; });
  const auto i = at - kept_.begin();
  kept_.insert(at, RankedPlan{plan, cost_s});
  keys_.insert(keys_.begin() + i, std::move(key));
  if (kept_.size() > keep_) {
    kept_.pop_back();
    keys_.pop_back();
  }
  return true;
}

double RankedPlans::best_cost() const {
  return kept_.empty() ? std::numeric_limits<double>::infinity() : kept_.front().cost_s;
}

double RankedPlans::bar() const {
  return kept_.size() < keep_ ? std::numeric_limits<double>::infinity() : kept_.back().cost_s;
}

void RankedPlans::MoveInto(PlannerResult* result) {
  if (kept_.empty()) return;
  result->plan = std::move(kept_.front().plan);
  result->cost_s = kept_.front().cost_s;
  result->alternatives.clear();
  for (size_t i = 1; i < kept_.size(); ++i) result->alternatives.push_back(std::move(kept_[i]));
  kept_.clear();
  keys_.clear();
}

Status CheckProblem(const PlanningProblem& problem) {
  const proto::DType dtype = problem.training.dtype();
  for (uint32_t d = 0; d < problem.cluster.num_devices(); ++d) {
    const auto& gpu = *problem.cluster.device(d).gpu;
    if (auto why = models::RecipeUnsupported(gpu, dtype, problem.training.fp8_recipe()); !why.empty()) {
      return Status::Invalid("cluster '" + problem.cluster.name() + "': device " + std::to_string(d) +
                             ": training.fp8_recipe: " + why);
    }
    if (gpu.PeakTflops(dtype) > 0) continue;
    uint32_t last = d;
    while (last + 1 < problem.cluster.num_devices() && problem.cluster.device(last + 1).gpu == &gpu) ++last;
    const char* use = models::SuggestedDType(gpu, dtype);
    return Status::Invalid(
        "cluster '" + problem.cluster.name() + "': device" +
        (last > d ? "s " + std::to_string(d) + "-" + std::to_string(last) : " " + std::to_string(d)) + " (" + gpu.name +
        ") cannot train in " + models::DTypeName(dtype) + "; set the training spec's dtype: " + use + " (--dtype " + use + ")");
  }
  if (problem.training.global_batch_size() == 0 || problem.training.seq_len() == 0) {
    return Status::Invalid("the training spec is not resolved (global batch and sequence length must be set)");
  }
  return Status::Ok();
}

Result<PlannerResult> RunPlanner(const Planner& planner, const PlanningProblem& problem) {
  HETSIM_RETURN_IF_ERROR(CheckProblem(problem));
  const auto start = std::chrono::steady_clock::now();
  auto result = planner.MakePlan(problem);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) {
    const Status& s = result.status();
    if (s.code() != Status::Code::kInfeasible || !problem.model.HasMoe() || planner.SearchesExpertParallelism()) {
      return s;
    }
    return Status::Infeasible(
        s.message() + "\nplanner '" + planner.name() + "' plans MoE models with expert parallelism 1 (every rank " +
        "holds all " + std::to_string(problem.model.spec().moe().num_experts()) + " experts of each MoE layer): " +
        "sharding the experts over ranks is outside what it can express; --planner megatron or deepspeed search " +
        "EP (docs/planners.md \"Mixtures of experts\")");
  }
  result->stats.wall_time_s = wall;
  result->plan.set_planner(planner.name());
  // A global batch of millions of sequences: the planner's layout is fine, the simulator's bound is not.
  if (const int over = models::PipelineOverMicroBatchBound(result->plan); over >= 0) {
    const auto& pipe = result->plan.pipelines(over);
    return Status::Invalid("planner '" + planner.name() + "': a global batch of " +
                           std::to_string(problem.training.global_batch_size()) + " sequences runs " +
                           std::to_string(pipe.num_micro_batches()) + " micro-batches of " +
                           std::to_string(pipe.micro_batch_size()) + " in a pipeline of its plan; at most " +
                           std::to_string(models::kMaxMicroBatches) + " are simulated: lower the global batch");
  }
  const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
  const Status valid = models::ValidatePlan(result->plan, ctx, "plan by planner '" + planner.name() + "'");
  if (!valid.ok()) {
    return Status::Internal("planner '" + planner.name() +
                            "' produced a plan that does not validate (a bug in the planner):\n" + valid.message());
  }
  result->estimate = AnalyticCostModel(problem).Estimate(result->plan, /*with_memory=*/true);
  // Runners-up: named like the pick; one that does not validate is a planner bug, dropped with a note so
  // that the pick (which did validate) still reaches the user.
  if (result->alternatives.size() > problem.alternatives) result->alternatives.resize(problem.alternatives);
  std::vector<RankedPlan> kept;
  for (size_t i = 0; i < result->alternatives.size(); ++i) {
    RankedPlan& alt = result->alternatives[i];
    alt.plan.set_planner(planner.name());
    const Status ok = models::ValidatePlan(alt.plan, ctx, "runner-up " + std::to_string(i + 2));
    if (!ok.ok()) {
      result->stats.notes.push_back("dropped runner-up " + std::to_string(i + 2) +
                                    " (does not validate; a planner bug): " + ok.message().substr(0, 200));
      continue;
    }
    kept.push_back(std::move(alt));
  }
  result->alternatives = std::move(kept);
  return result;
}

std::string PlanFileYaml(const proto::Plan& plan, const std::string& cluster_ref, const std::string& model_ref,
                         const proto::Training& training, const std::string& comment) {
  proto::Plan out = plan;
  out.set_kind("plan");
  if (out.name().empty()) {
    out.set_name((plan.planner().empty() ? std::string("plan") : plan.planner()) + "-" + model_ref + "-" + cluster_ref);
  }
  out.set_cluster(cluster_ref);
  out.set_model(model_ref);
  *out.mutable_training() = training;
  out.mutable_training()->clear_kind();
  out.mutable_training()->clear_name();
  std::string text;
  size_t start = 0;
  while (start < comment.size()) {
    size_t end = comment.find('\n', start);
    if (end == std::string::npos) end = comment.size();
    text += "# " + comment.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return text + models::MessageToYaml(out);
}

std::string DescribeStats(const SearchStats& stats) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "search: %llu candidates evaluated in %.3f s",
                static_cast<unsigned long long>(stats.candidates_evaluated), stats.wall_time_s);
  std::string out = buf;
  if (stats.claims_optimal) {
    out += stats.proven_optimal ? "; optimal under the analytic model (search complete)"
                                : "; NOT proven optimal (search stopped early)";
  }
  out += "\n";
  for (const auto& [reason, n] : stats.rejected) out += "  rejected " + std::to_string(n) + "× : " + reason + "\n";
  for (const auto& note : stats.notes) out += "  note: " + note + "\n";
  return out;
}

}  // namespace hetsim::planners
