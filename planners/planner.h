// The planner interface: every planner in hetsim turns (cluster, model, training spec, cost source,
// options) into a Plan plus search statistics, so that experiments can run them side by side on the same
// cluster. Planners are looked up by name in a registry (`hetsim list planners`).
//
// Contract of a planner:
//   - Configure() reads its options message from YAML (unknown keys, wrong types and ranges are errors
//     naming the file, line and key path, as for every hetsim file); no options = the defaults.
//   - MakePlan() returns a plan that passes models::ValidatePlan (memory included) on the real cluster,
//     or a Status saying why there is none: kInfeasible when nothing in the planner's space fits in
//     memory (the message lists the best attempts and their memory shortfall), kInvalidArgument when the
//     input cannot be planned for at all (e.g. a GPU that cannot train in the training spec's dtype).
//   - Planners are deterministic: the same input and options give the same plan.
// RunPlanner() wraps MakePlan(): it checks the input, times the search, names the planner in the plan and
// re-validates and estimates the result, so a planner bug surfaces as an Internal error, never as an
// invalid plan.
#pragma once

#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/cost.h"
#include "models/profile_db.h"
#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"
#include "planners/cost_model.h"

namespace hetsim::planners {

// What a planner plans for. The references must outlive the call.
struct PlanningProblem {
  const models::Cluster& cluster;
  const models::TransformerModel& model;
  const proto::Training& training;              // resolved (models::ResolveTraining)
  const models::ProfileDb* profiles = nullptr;  // cost source: measured layer costs; analytic where absent
  models::ComputeOptions compute = {};          // the analytic compute model's parameters
  // How many runners-up (the plans the planner ranks right after its pick, by its own cost model) to return
  // in PlannerResult::alternatives, so that the simulator can check the choice (sim/planning/refine.h,
  // `--refine K`). 0: none. A planner may return fewer (its search saw fewer distinct feasible plans, or it
  // constructs a single plan).
  uint32_t alternatives = 0;
  // exhaustive's proof only (sim/planning/refine.cc): other planners' candidates for the same problem. The
  // proof starts from the best of them by the played estimate when it beats the search's own incumbent, and
  // they are simulated beside the space's plans, so the answer is never slower in the simulator than any of
  // them (docs/planners.md, "exhaustive"). Each plan's `planner` field names where it came from.
  std::vector<proto::Plan> seeds = {};
  // Long searches (exhaustive's proof) report their progress here, a line at a time, about every 10 s;
  // `hetsim plan` prints them on stderr. Empty: no reports.
  std::function<void(const std::string&)> progress = {};
  // exhaustive's proof only: simulates a plan on the twin and returns its iteration in seconds (an error when
  // it fails or runs out of memory). The proof then cuts at the fastest simulated time of its incumbent and
  // the best seeds — the optimum is no slower — instead of the played estimate with its margin. Empty: the
  // cut comes from the estimates alone.
  std::function<Result<double>(const proto::Plan&)> simulate = {};
};

// How a search went.
struct SearchStats {
  uint64_t candidates_evaluated = 0;         // candidate plans whose cost was computed
  double wall_time_s = 0;                    // filled in by RunPlanner
  std::map<std::string, uint64_t> rejected;  // why candidates were discarded: reason -> count
  // Planners that prove optimality (exhaustive): whether the search finished.
  bool claims_optimal = false;
  bool proven_optimal = false;
  std::vector<std::string> notes;  // anything else worth a line in `hetsim plan`

  void Reject(const std::string& reason, uint64_t n = 1) { rejected[reason] += n; }
};

// A plan with its cost under the planner's own model (the paper's cost model for a paper planner, the
// analytic model for the baselines): comparable only within one planner's search.
struct RankedPlan {
  proto::Plan plan;
  double cost_s = 0;
  double lower_bound_s = 0;  // a lower bound of its simulated iteration where the planner gives one (else 0)
  std::string found_by = {};  // a seed's planner (PlanningProblem::seeds); empty for the planner's own plans
};

struct PlannerResult {
  proto::Plan plan;
  double cost_s = 0;      // the pick's cost under the planner's own model (0 when the planner does not say)
  PlanEstimate estimate;  // the analytic estimate of `plan` on the real cluster (filled in by RunPlanner)
  SearchStats stats;
  // Runners-up, best first by the planner's own model: at most PlanningProblem::alternatives plans, each
  // valid (memory included) and different from `plan` and from each other.
  std::vector<RankedPlan> alternatives;
  // > 0 (exhaustive's proof list): every plan of the planner's space whose simulated iteration can be below
  // this is `plan` or one of `alternatives`, which are then ordered by non-decreasing lower_bound_s.
  double complete_below_s = 0;
  // > 0 (exhaustive's proof): no plan of the planner's space simulates faster than this — the least lower
  // bound over the space where the proof search covered it, else the highest cut a probe search covered
  // (docs/planners.md, "Idle GPUs, speed and the gap beyond 16 GPUs"). A plan simulating t s is then within
  // (t − space_lower_bound_s) / space_lower_bound_s of the space's optimum.
  double space_lower_bound_s = 0;
  std::string found_by;  // `plan` is a seed (PlanningProblem::seeds): its planner; else empty
};

// The best plans a search has seen by cost: its pick and up to `alternatives` runners-up, distinct plans
// only (ties keep the earlier offer). Offering costs a comparison unless the plan is kept.
class RankedPlans {
 public:
  explicit RankedPlans(uint32_t alternatives) : keep_(alternatives + 1) {}
  // Whether a plan of this cost would be kept (callers skip building plans that would not).
  bool WouldKeep(double cost_s) const { return kept_.size() < keep_ || cost_s < kept_.back().cost_s; }
  // Keeps `plan` when it is among the best so far and differs from every plan kept; returns whether kept.
  bool Offer(double cost_s, const proto::Plan& plan);
  bool empty() const { return kept_.empty(); }
  double best_cost() const;  // +inf when empty
  // The cost a plan must beat to be kept: the worst kept when the list is full, else +inf.
  double bar() const;
  const proto::Plan& best() const { return kept_.front().plan; }
  // Moves the pick into result->plan (and cost_s), the runners-up into result->alternatives.
  void MoveInto(PlannerResult* result);

 private:
  size_t keep_;
  std::vector<RankedPlan> kept_;  // sorted by cost
  std::vector<std::string> keys_;  // parallel: each plan's serialized form, for distinctness
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual std::string name() const = 0;
  // Replaces the options with those in `options` (a YAML mapping of the options message; a null node
  // means the defaults). `file` names the source in errors.
  virtual Status Configure(const YAML::Node& options, const std::string& file) = 0;
  // The same from YAML text (an options file); empty text means the defaults.
  virtual Status ConfigureText(const std::string& yaml, const std::string& file) = 0;
  // The options message as configured (defaults not filled in).
  virtual const google::protobuf::Message& options() const = 0;
  // Searches for a plan; see the contract above. Fills result.plan and result.stats.
  virtual Result<PlannerResult> MakePlan(const PlanningProblem& problem) const = 0;
  // Whether the planner searches expert parallelism for MoE models (megatron, deepspeed); the others plan
  // them with EP 1, every rank holding every expert, and RunPlanner says so when nothing fits.
  virtual bool SearchesExpertParallelism() const { return false; }
};

// ---- registry ------------------------------------------------------------------------------------

struct PlannerInfo {
  std::string name;
  std::string summary;  // one line: what it models and where from
  std::function<std::unique_ptr<Planner>()> create;
};

// Every registered planner, in a fixed order.
const std::vector<PlannerInfo>& Planners();
std::vector<std::string> PlannerNames();
// A planner with default options; NotFound with "did you mean" for unknown names.
Result<std::unique_ptr<Planner>> CreatePlanner(const std::string& name);
// A planner configured from YAML text (empty text = defaults); `file` names the text in errors.
Result<std::unique_ptr<Planner>> CreatePlanner(const std::string& name, const std::string& options_yaml,
                                               const std::string& file);

// Planners defined outside this registry are named "<scheme>:<reference>": the Python package registers the
// scheme "python" (`python:module:Class`, a subclass of hetsim.Planner; docs/python.md). CreatePlanner hands
// such a name to its scheme's factory; a scheme nobody registered is an error saying where it can run.
// Registering a scheme again replaces its factory; an empty factory removes it. Thread-safe.
using PlannerFactory = std::function<Result<std::unique_ptr<Planner>>(const std::string& reference)>;
void RegisterPlannerScheme(const std::string& scheme, PlannerFactory factory);

// Checks that the problem can be planned for at all: every device can train in the training spec's dtype.
Status CheckProblem(const PlanningProblem& problem);

// Runs `planner` on `problem` (see the contract at the top of this file).
Result<PlannerResult> RunPlanner(const Planner& planner, const PlanningProblem& problem);

// The plan as a YAML file that `hetsim describe --plan` and `hetsim validate` read directly: the plan with
// its `cluster:`, `model:`, `training:` and `planner:` keys set.
// `comment` (optional) becomes `#` lines at the top.
std::string PlanFileYaml(const proto::Plan& plan, const std::string& cluster_ref, const std::string& model_ref,
                         const proto::Training& training, const std::string& comment = "");

// Several lines: the search statistics of a run (candidates, wall time, rejections by reason, notes).
std::string DescribeStats(const SearchStats& stats);

// ---- implementation helper ------------------------------------------------------------------------

// A planner whose options are the proto message `Options` (planners/proto/), read with models/yaml_proto.h.
template <typename Options>
class PlannerWithOptions : public Planner {
 public:
  Status Configure(const YAML::Node& node, const std::string& file) override {
    Options parsed;
    if (node && !node.IsNull()) HETSIM_RETURN_IF_ERROR(models::YamlToMessage(node, file, "", &parsed));
    options_ = std::move(parsed);
    return Status::Ok();
  }
  Status ConfigureText(const std::string& yaml, const std::string& file) override {
    Options parsed;
    HETSIM_RETURN_IF_ERROR(models::ParseYaml(yaml, file, &parsed));
    options_ = std::move(parsed);
    return Status::Ok();
  }
  const google::protobuf::Message& options() const override { return options_; }
  const Options& typed_options() const { return options_; }

 protected:
  Options options_;
};

}  // namespace hetsim::planners
