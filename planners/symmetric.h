// The candidate loop the baseline planners share, over the layouts of planners/layouts.h.
//
// BestPlan ranks candidates: memory on the real devices first (the closed forms of MemoryModel), then the
// planner's ranking cost model — its closed form (ClosedFormEstimate, microseconds) for every candidate,
// then the played estimate (Estimate: the lowering played, what the simulator plays, but a fraction of a
// millisecond per 8 GPUs and about 0.2 s per 16,384-GPU plan) for the closed form's best few (RerankPool);
// it keeps the best and the closest memory misses for the error message.
//
// The memory knobs a user of these frameworks turns when a model does not fit — activation recomputation,
// the ZeRO stage, the micro-batch size, and CPU offload where the framework has it — are part of every
// baseline's search (RecomputeCandidates; ZeRO stages, micro-batch sizes and offload levels per planner).
// BestPlan records which settings were tried and which fit, so that the plan's notes say which knobs were
// needed and a "no plan" error says what was tried.
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "models/transformer.h"
#include "planners/layouts.h"
#include "planners/search.h"

namespace hetsim::planners {

// ---- memory knobs --------------------------------------------------------------------------------

// The activation-recomputation policies a baseline tries, in order of increasing cost (none, selective,
// full):
//   - `requested` (the planner's `recompute` option) when it is not empty — the user pinned them;
//   - else the training spec's policy when it states selective or full — an explicit choice is kept;
//   - else `offered`, the policies the framework offers (Megatron-LM: none, selective, full; the others:
//     none, full). Selective is dropped when it frees no memory (with flash attention no attention scores
//     are kept, so Korthikanti et al.'s selective recomputation only costs time); `stats` (may be null)
//     counts that.
// A resolved training spec says none both when the user chose none and when nothing was said
// (models::ResolveTraining fills the default in), so none is searched as "unspecified"; the planner option
// `recompute: [none]` pins it.
std::vector<proto::Recompute> RecomputeCandidates(const PlanningProblem& problem,
                                                  const std::vector<proto::Recompute>& requested,
                                                  const std::vector<proto::Recompute>& offered, SearchStats* stats);
// The same from an options message's repeated enum field.
std::vector<proto::Recompute> RecomputeList(const google::protobuf::RepeatedField<int>& field);
// Sets `plan`'s recompute policy to `recompute`, leaving the field unset when that is the training spec's
// own policy (the plan then states only what the planner changed).
void SetRecompute(proto::Plan* plan, proto::Recompute recompute, const proto::Training& training);
// "none", "selective", "full".
std::string RecomputeName(proto::Recompute recompute);

// Played or closed form. The played estimate (AnalyticCostModel::Estimate) prices what the simulator plays
// but costs a fraction of a millisecond per 8-GPU plan and about 0.2 s per 16,384-GPU plan; the closed form
// (ClosedFormEstimate, the papers' formulas) costs microseconds. Searches that rank with hetsim's model
// (the baselines through BestPlan, hethub, hetu) rank every candidate by the closed form and re-rank the
// closed form's best few by the played estimate (docs/planner-scaling.md, "Played or closed form").
//
// How many of the closed form's best plans the played estimate re-ranks (the pool): 64 up to 256 GPUs, 4 up
// to 1,024 GPUs, 1 beyond (the closed form's pick, nothing played): a played estimate of a plan that does
// not fold costs about a second at 1,024 GPUs and over ten at 4,096. Independent of the runners-up asked
// for, so that the pick does not depend on --refine.
uint32_t RerankPool(uint32_t devices);
// Re-ranks the first `pool` of `result`'s pick and runners-up (a search's best plans by its closed form,
// best first) by the played estimate of `cost`: stable, so the closed form's order breaks ties; plans whose
// lowering cannot be played (which the simulator would not run either) go last among them. The runners-up
// past the pool follow in the closed form's order. Keeps `alternatives` runners-up, sets the re-ranked
// costs to the played times and adds a note. Returns the rank the closed form's pick took (0: still first).
size_t RerankByPlayedEstimate(const AnalyticCostModel& cost, uint32_t pool, uint32_t alternatives,
                              PlannerResult* result);

class BestPlan {
 public:
  BestPlan(const PlanningProblem& problem, const AnalyticCostModel& ranking);

  // Checks `plan` (structurally valid by construction) for memory on the real devices, then ranks it by
  // the closed form; keeps it when it is among the closed form's RerankPool best so far (ties keep the
  // earlier). `what` names it in messages. Returns its closed-form time, or +inf when it does not fit. Records the plan's memory knobs (its effective
  // recompute policy, ZeRO stage and largest per-replica micro-batch) as tried, and as fitting when it fits.
  double Consider(proto::Plan plan, const std::string& what);
  bool found() const { return !kept_.empty(); }
  // Whether some candidate was checked for memory and did not fit.
  bool missed_memory() const { return !misses_.empty(); }
  double best_time() const { return kept_.best_cost(); }  // the closed form's
  SearchStats& stats() { return stats_; }
  const MemoryModel& memory() const { return memory_; }
  // Turns on the memory-knob note and the "tried" line of Finish (the baselines; other planners that
  // share BestPlan keep their messages). The knobs: recomputation, the ZeRO stage, the micro-batch size
  // and CPU offload (Plan.offload, which deepspeed and fsdp search last).
  void ReportMemoryKnobs() { report_knobs_ = true; }
  // A framework knob outside the search to suggest when nothing fits (with ReportMemoryKnobs).
  void SuggestWhenNothingFits(std::string suggestion) { suggestions_.push_back(std::move(suggestion)); }
  // The best plan or, when none fits, the Infeasible status listing the closest attempts (NothingFound
  // when no candidate got as far as a memory check). With ReportMemoryKnobs: the plan's notes name the
  // memory knobs it needed ("recompute=full, b=2 needed to fit (…)") among those of which more than one
  // setting was tried, and the Infeasible message lists the settings tried. The pick and its runners-up
  // are the closed form's pool re-ranked by the played estimate (stable: the closed form breaks ties;
  // plans the lowering refuses go last), their costs the played ones.
  Result<PlannerResult> Finish(const std::string& planner, const std::string& hint = "");


 private:
  // Knob settings of the candidates considered: those of every candidate (tried_) and of those that fit (fit_).
  struct Knobs {
    std::set<proto::Recompute> recompute;
    std::set<uint32_t> zero, micro_batch;
    std::set<proto::Plan::Offload> offload;
  };
  std::string KnobsNote(const proto::Plan& chosen) const;
  std::string TriedLine() const;

  const PlanningProblem& problem_;
  const AnalyticCostModel& ranking_;
  MemoryModel memory_;
  SearchStats stats_;
  InfeasibleTracker misses_;
  RankedPlans kept_;  // the closed form's RerankPool best
  Knobs tried_, fit_;
  bool report_knobs_ = false;
  std::vector<std::string> suggestions_;
};

// ---- machine subsets -------------------------------------------------------------------------------

// A set of whole machines a baseline may run on when no layout of the whole cluster fits its framework's
// constraints: its users leave whole machines idle (Hetu v2 Appendix A.3: "the entire machine was treated
// as failed") and pick the machines they run on.
struct MachineSubset {
  std::vector<uint32_t> devices;  // node order
  std::string why;                // how it was picked, e.g. "the a10 machines", "the 3 fastest machines"
};
// The subsets a baseline considers, never the whole cluster and each node set once (the first reason
// kept), in this order: each GPU type's machines alone; every prefix of the machines sorted by speed
// (peak TFLOPS in `dtype`, fastest first, node order among equals); every prefix of each GPU type's
// machines in node order; every prefix of the machines in node order (what the baselines searched
// before). At most 3 × machines + GPU types subsets: a linear number, never the 2^machines of every
// subset.
std::vector<MachineSubset> MachineSubsets(const models::Cluster& cluster, proto::DType dtype);

// How a baseline ranks the plans of one set of devices: its framework's view of the GPUs.
struct RankingView {
  std::optional<models::GpuSpec> assume_gpu;  // every device computes as this GPU; none: the real GPUs
  bool average_profiles = false;              // CostModelOptions::average_profiles, over the set's devices
};
using ViewFor = std::function<RankingView(const std::vector<uint32_t>& devices)>;

// A baseline's search over the machines it can use. Run() searches every device in node order; when
// nothing fits there (in this call or an earlier one), it searches each MachineSubsets subset with the
// view `view_for` gives for its devices (a null `view_for`: the whole cluster's ranking for every subset),
// each into a BestPlan of its own. Finish() returns the whole cluster's plan when it has one (so a cluster
// whose every GPU is usable keeps the search's plan); else the plan of the subset whose best plan ranks
// fastest by its view (the closed form; ties keep the earlier subset), with a note naming the machines
// used, the machines left idle and why; else the whole cluster's "no plan" status, saying that the subsets
// were tried too. Rejection counts and candidates evaluated are summed over everything searched.
class SubsetSearch {
 public:
  using Search =
      std::function<void(const std::vector<uint32_t>& order, BestPlan& best, const AnalyticCostModel& ranking)>;
  // `ranking` ranks the whole cluster's candidates and must outlive this object; `configure` is applied to
  // every BestPlan (ReportMemoryKnobs, SuggestWhenNothingFits).
  SubsetSearch(const PlanningProblem& problem, const AnalyticCostModel& ranking, ViewFor view_for,
               const std::function<void(BestPlan&)>& configure);
  ~SubsetSearch();
  // The whole cluster's BestPlan (statistics gathered before the search go into its stats()).
  BestPlan& whole() { return *whole_; }
  // Searches as described above; returns whether anything fits so far.
  bool Run(const Search& search);
  bool found() const;
  Result<PlannerResult> Finish(const std::string& planner, const std::string& hint = "");
  // After Finish: the ranking of the plan returned (the whole cluster's, or the chosen subset's view), and
  // whether a subset was chosen.
  const AnalyticCostModel& chosen_ranking() const { return *chosen_ranking_; }
  bool chose_subset() const { return chose_subset_; }

 private:
  struct View;
  struct Subset;
  // Makes the subset's BestPlan (and its ranking, with `view_for`) unless it has them.
  void Prepare(Subset& s);
  // Adds the subset's statistics to released_ and frees its BestPlan and ranking.
  void Release(Subset& s);
  std::string Describe(const std::vector<uint32_t>& devices) const;

  const PlanningProblem& problem_;
  const AnalyticCostModel& ranking_;
  ViewFor view_for_;
  std::function<void(BestPlan&)> configure_;
  std::unique_ptr<BestPlan> whole_;
  std::vector<Subset> subsets_;
  bool subsets_built_ = false;
  int chosen_ = -1;  // the subset whose best plan ranks fastest so far
  double runner_up_s_ = std::numeric_limits<double>::infinity();
  std::string runner_up_why_;
  SearchStats released_;  // the statistics of the subsets released
  const AnalyticCostModel* chosen_ranking_ = nullptr;
  bool chose_subset_ = false;
};

// One candidate of a recomputation ladder (ConsiderPolicies): the plan (its recompute policy set), its
// name, and whether memory shaped its layout — a split or a choice that the memory caps changed from what
// speed alone would pick.
struct PolicyCandidate {
  proto::Plan plan;
  std::string what;
  bool memory_shaped = false;
};
// Considers, for each policy of `policies` (cheapest first, as RecomputeCandidates orders them), the
// candidate `make(policy)` builds (nullopt: none for this policy). More recomputation only adds time to a
// given layout (compute, and TP collectives under full recomputation), and without memory caps the layout
// a planner picks for speed cannot get faster by recomputing more. So once a candidate fits:
//   - if memory did not shape it, the heavier policies are not tried at all;
//   - else each heavier one is built (looser caps may move layers or sequences onto faster GPUs) and
//     skipped, without a memory check or a ranking, when its layout is the same apart from the policy.
// Skips are counted in the statistics.
void ConsiderPolicies(BestPlan& best, const std::vector<proto::Recompute>& policies,
                      const std::function<std::optional<PolicyCandidate>(proto::Recompute)>& make);

// Every symmetric shape of `devices` GPUs, the candidate loop of megatron, whale, galvatron and amp: tp
// from TpCandidates (`tp_degrees`, or every degree dividing `node_gcd` and the heads), pp from
// `pp_degrees` (or every divisor of devices / tp) that divides devices / tp and is at most the model's
// layers, dp = devices / (tp·pp) dividing the global batch. Calls `shape(dp, tp, pp)` for each; rejections
// are counted in `stats` with their reason.
void ForEachSymmetricShape(const PlanningProblem& problem, uint32_t devices, uint32_t node_gcd,
                           const std::vector<uint32_t>& tp_degrees, const std::vector<uint32_t>& pp_degrees,
                           SearchStats* stats, const std::function<void(uint32_t dp, uint32_t tp, uint32_t pp)>& shape);

// The search of galvatron and amp: Megatron's layout for every dp × tp × pp (TP inside nodes) and
// micro-batch size, layers balanced on the stages' speed under `ranking` (BalancedSplit), ranked by
// `ranking`. Lists left empty mean every valid value.
struct SymmetricSearch {
  std::vector<uint32_t> tp_degrees, pp_degrees, micro_batch_sizes, zero_stages;
  std::vector<proto::Recompute> recompute;  // from RecomputeCandidates; empty = the training spec's
  uint32_t max_micro_batch_size = 32;
  bool sequence_parallel = true;
  // Layers balanced as if every GPU were the first of the devices searched (a framework whose cost model
  // profiles one GPU: Galvatron); false: balanced under the ranking's view.
  bool balance_as_first_gpu = false;
};
// `view_for` ranks the machine subsets searched when the whole cluster has no plan (SubsetSearch; null:
// `ranking` for every subset); `ranking_note` (may be null) gives a note from the ranking of the plan
// returned.
Result<PlannerResult> SearchBalancedSymmetric(
    const std::string& planner, const PlanningProblem& problem, const AnalyticCostModel& ranking,
    const SymmetricSearch& space, const ViewFor& view_for = nullptr,
    const std::function<std::string(const AnalyticCostModel&)>& ranking_note = nullptr);

// "dp=4 tp=2 pp=2 b=1 m=8 zero=1", with " recompute=full" when `recompute` is given.
std::string CandidateName(uint32_t dp, uint32_t tp, uint32_t pp, uint32_t b, uint32_t m, uint32_t zero,
                          proto::Recompute recompute = proto::RECOMPUTE_UNSPECIFIED);

}  // namespace hetsim::planners
