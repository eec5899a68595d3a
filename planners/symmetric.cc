#include "planners/symmetric.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>

#include "models/training.h"

namespace hetsim::planners {

std::vector<MachineSubset> MachineSubsets(const models::Cluster& cluster, proto::DType dtype) {
  const auto& nodes = cluster.nodes();
  const uint32_t n = static_cast<uint32_t>(nodes.size());
  std::vector<MachineSubset> out;
  std::set<std::vector<uint32_t>> seen;  // node sets already listed
  auto add = [&](std::vector<uint32_t> node_set, const std::string& why) {
    std::sort(node_set.begin(), node_set.end());
    if (node_set.empty() || node_set.size() == n || !seen.insert(node_set).second) return;
    MachineSubset subset;
    subset.why = why;
    for (uint32_t k : node_set) {
      for (uint32_t g = 0; g < nodes[k].num_gpus; ++g) subset.devices.push_back(nodes[k].first_device + g);
    }
    out.push_back(std::move(subset));
  };
  // GPU types in order of first appearance, with their machines in node order.
  std::vector<std::pair<const models::GpuSpec*, std::vector<uint32_t>>> types;
  for (uint32_t k = 0; k < n; ++k) {
    auto it = std::find_if(types.begin(), types.end(), [&](const auto& t) { return t.first == nodes[k].gpu; });
    if (it == types.end()) {
      types.push_back({nodes[k].gpu, {}});
      it = types.end() - 1;
    }
    it->second.push_back(k);
  }
  auto plural = [](size_t k, const std::string& one) { return std::to_string(k) + " " + one + (k == 1 ? "" : "s"); };
  for (const auto& [gpu, machines] : types) add(machines, "the " + gpu->name + " machines");
  std::vector<uint32_t> by_speed(n);
  std::iota(by_speed.begin(), by_speed.end(), 0u);
  std::stable_sort(by_speed.begin(), by_speed.end(), [&](uint32_t a, uint32_t b) {
    return nodes[a].gpu->PeakTflops(dtype) > nodes[b].gpu->PeakTflops(dtype);
  });
  for (uint32_t k = 1; k < n; ++k) {
    add({by_speed.begin(), by_speed.begin() + k}, "the " + plural(k, "fastest machine"));
  }
  for (const auto& [gpu, machines] : types) {
    for (size_t k = 1; k < machines.size(); ++k) {
      add({machines.begin(), machines.begin() + static_cast<std::ptrdiff_t>(k)},
          "the first " + plural(k, gpu->name + " machine"));
    }
  }
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  for (uint32_t k = n - 1; k >= 1; --k) {
    add({order.begin(), order.begin() + k}, "the first " + plural(k, "machine") + " in node order");
  }
  return out;
}

// A ranking of a subset's own (`view_for`).
struct SubsetSearch::View {
  std::unique_ptr<models::GpuSpec> gpu;
  std::vector<uint32_t> devices;  // averaged over (average_profiles)
  std::unique_ptr<AnalyticCostModel> model;
};

struct SubsetSearch::Subset {
  MachineSubset machines;
  std::unique_ptr<View> view;      // null: the whole cluster's ranking
  std::unique_ptr<BestPlan> best;  // null: not searched yet, or released
  bool found = false;
  double best_s = std::numeric_limits<double>::infinity();  // its best plan's closed form, once found
};

SubsetSearch::SubsetSearch(const PlanningProblem& problem, const AnalyticCostModel& ranking, ViewFor view_for,
                           const std::function<void(BestPlan&)>& configure)
    : problem_(problem), ranking_(ranking), view_for_(std::move(view_for)), configure_(configure) {
  whole_ = std::make_unique<BestPlan>(problem_, ranking_);
  if (configure_) configure_(*whole_);
}

SubsetSearch::~SubsetSearch() = default;

void SubsetSearch::Prepare(Subset& s) {
  if (s.best) return;
  const AnalyticCostModel* ranking = &ranking_;
  if (view_for_) {
    const RankingView view = view_for_(s.machines.devices);
    s.view = std::make_unique<View>();
    CostModelOptions options;
    if (view.assume_gpu) {
      s.view->gpu = std::make_unique<models::GpuSpec>(*view.assume_gpu);
      options.assume_gpu = s.view->gpu.get();
      if (view.average_profiles) {
        s.view->devices = s.machines.devices;
        options.average_profiles = true;
        options.average_over = &s.view->devices;
      }
    }
    s.view->model = std::make_unique<AnalyticCostModel>(problem_, options);
    ranking = s.view->model.get();
  }
  s.best = std::make_unique<BestPlan>(problem_, *ranking);
  if (configure_) configure_(*s.best);
}

void SubsetSearch::Release(Subset& s) {
  if (!s.best) return;
  released_.candidates_evaluated += s.best->stats().candidates_evaluated;
  for (const auto& [reason, count] : s.best->stats().rejected) released_.rejected[reason] += count;
  s.best.reset();
  s.view.reset();
}

bool SubsetSearch::Run(const Search& search) {
  search(NodeOrder(problem_.cluster), *whole_, ranking_);
  if (whole_->found()) return true;
  if (!subsets_built_) {
    subsets_built_ = true;
    for (auto& machines : MachineSubsets(problem_.cluster, problem_.training.dtype())) {
      subsets_.emplace_back();
      subsets_.back().machines = std::move(machines);
    }
  }
  // Memory stays bounded: only the best subset so far keeps its plans and its ranking; the others are
  // released once searched, except those that share the whole cluster's ranking and found nothing (a later
  // call, e.g. at the next CPU-offload level, searches them again and their memory knobs carry over).
  for (size_t i = 0; i < subsets_.size(); ++i) {
    Subset& s = subsets_[i];
    if (s.found) continue;
    Prepare(s);
    search(s.machines.devices, *s.best, s.view ? *s.view->model : ranking_);
    if (!s.best->found()) {
      if (s.view) Release(s);
      continue;
    }
    s.found = true;
    s.best_s = s.best->best_time();
    Subset* loser = &s;
    if (chosen_ < 0 || s.best_s < subsets_[static_cast<size_t>(chosen_)].best_s) {
      if (chosen_ >= 0) loser = &subsets_[static_cast<size_t>(chosen_)];
      chosen_ = static_cast<int>(i);
      if (loser == &s) continue;
    }
    if (loser->best_s < runner_up_s_) {
      runner_up_s_ = loser->best_s;
      runner_up_why_ = loser->machines.why;
    }
    Release(*loser);
  }
  return chosen_ >= 0;
}

bool SubsetSearch::found() const { return whole_->found() || chosen_ >= 0; }

std::string SubsetSearch::Describe(const std::vector<uint32_t>& devices) const {
  // "8 GPUs on 2 × a10 (4 × a10)": per node group of the spec, how many of its machines.
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> machines;  // node group -> (machines, node of the group)
  uint32_t last = std::numeric_limits<uint32_t>::max();
  for (uint32_t d : devices) {
    const uint32_t node = problem_.cluster.device(d).node;
    if (node == last) continue;
    last = node;
    auto& [count, example] = machines[problem_.cluster.node(node).group];
    if (count++ == 0) example = node;
  }
  std::string out = std::to_string(devices.size()) + " GPU" + (devices.size() == 1 ? "" : "s") + " on ";
  bool first = true;
  for (const auto& [group, m] : machines) {
    const auto& node = problem_.cluster.node(m.second);
    out += (first ? "" : ", ") + std::to_string(m.first) + " × " +
           problem_.cluster.spec().nodes(static_cast<int>(group)).name() + " (" + std::to_string(node.num_gpus) +
           " × " + node.gpu->name + ")";
    first = false;
  }
  return out;
}

Result<PlannerResult> SubsetSearch::Finish(const std::string& planner, const std::string& hint) {
  chosen_ranking_ = &ranking_;
  chose_subset_ = false;
  if (whole_->found() || subsets_.empty()) return whole_->Finish(planner, hint);
  const uint32_t N = problem_.cluster.num_devices();
  const std::string subsets_tried = std::to_string(subsets_.size()) +
                                    " subsets of whole machines it considers (each GPU type's machines alone, the "
                                    "fastest machines, the first machines of each type, the first in node order)";
  if (chosen_ < 0) {
    Result<PlannerResult> r = whole_->Finish(planner, hint);
    if (r.ok() || r.status().code() != Status::Code::kInfeasible) return r;
    return Status::Infeasible(r.status().message() + "\n  (on all " + std::to_string(N) + " GPUs; none of the " +
                              subsets_tried + " has a plan either)");
  }
  Subset& chosen = subsets_[static_cast<size_t>(chosen_)];
  // Why the whole cluster has no plan: memory, or the framework's layout rules.
  std::string why_not_all;
  if (whole_->missed_memory()) {
    why_not_all = "every layout of all " + std::to_string(N) + " GPUs it can express runs out of memory";
  } else {
    std::string reason;
    uint64_t most = 0;
    for (const auto& [r, count] : whole_->stats().rejected) {
      if (count > most) {
        most = count;
        reason = r;
      }
    }
    why_not_all = "no layout of all " + std::to_string(N) + " GPUs meets its constraints" +
                  (reason.empty() ? "" : " (most often: " + reason + ")");
  }
  Result<PlannerResult> r = chosen.best->Finish(planner, hint);
  if (!r.ok()) return r;
  // Everything searched counts in the statistics.
  auto absorb = [&](const SearchStats& stats) {
    r->stats.candidates_evaluated += stats.candidates_evaluated;
    for (const auto& [reason, count] : stats.rejected) r->stats.rejected[reason] += count;
  };
  absorb(whole_->stats());
  absorb(released_);
  for (auto& s : subsets_) {
    if (&s != &chosen && s.best) absorb(s.best->stats());
  }
  std::vector<char> used(N, 0);
  for (uint32_t d : chosen.machines.devices) used[d] = 1;
  std::vector<uint32_t> idle;
  for (uint32_t d = 0; d < N; ++d) {
    if (!used[d]) idle.push_back(d);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g s", chosen.best_s);
  std::string note = why_not_all + "; of the " + subsets_tried + ", it runs on " + chosen.machines.why + ", " +
                     Describe(chosen.machines.devices) + ", ranked fastest by its cost model (" + buf +
                     " per iteration";
  if (std::isfinite(runner_up_s_)) {
    std::snprintf(buf, sizeof buf, "%.4g s", runner_up_s_);
    note += "; next: " + runner_up_why_ + ", " + buf;
  }
  note += "); idle: " + Describe(idle);
  r->stats.notes.push_back(std::move(note));
  chosen_ranking_ = chosen.view ? chosen.view->model.get() : &ranking_;
  chose_subset_ = true;
  return r;
}

std::string RecomputeName(proto::Recompute recompute) {
  return models::RecomputeName(recompute == proto::RECOMPUTE_UNSPECIFIED ? proto::RECOMPUTE_NONE : recompute);
}

std::vector<proto::Recompute> RecomputeList(const google::protobuf::RepeatedField<int>& field) {
  std::vector<proto::Recompute> out;
  for (int v : field) out.push_back(static_cast<proto::Recompute>(v));
  return out;
}

std::vector<proto::Recompute> RecomputeCandidates(const PlanningProblem& problem,
                                                  const std::vector<proto::Recompute>& requested,
                                                  const std::vector<proto::Recompute>& offered, SearchStats* stats) {
  std::vector<proto::Recompute> out;
  const proto::Recompute stated = problem.training.recompute();
  if (!requested.empty()) {
    out = requested;
  } else if (stated == proto::RECOMPUTE_SELECTIVE || stated == proto::RECOMPUTE_FULL ||
             stated == proto::RECOMPUTE_OP_SELECTIVE) {
    out = {stated};
  } else {
    // Selective recomputation drops only what the attention core keeps (scores, softmax, dropout masks);
    // compare one block's activations with and without it, as the memory checks will.
    const MemoryModel memory(problem);
    const bool selective_frees_memory =
        memory.ActivationGibPerSequence(1, 2, 1, false, proto::RECOMPUTE_SELECTIVE) <
        memory.ActivationGibPerSequence(1, 2, 1, false, proto::RECOMPUTE_NONE);
    for (proto::Recompute rc : offered) {
      if (rc == proto::RECOMPUTE_SELECTIVE && !selective_frees_memory) {
        if (stats != nullptr) {
          stats->Reject("selective recomputation not tried: it frees no memory here (flash attention keeps no "
                        "attention scores) and only costs time");
        }
        continue;
      }
      out.push_back(rc);
    }
  }
  // Cheapest first (the enum's order: none, selective, full), each once: the planners stop at the first
  // policy that fits a candidate when more recomputation cannot make it faster.
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void SetRecompute(proto::Plan* plan, proto::Recompute recompute, const proto::Training& training) {
  if (recompute == training.recompute()) {
    plan->clear_recompute();
  } else {
    plan->set_recompute(recompute);
  }
}

BestPlan::BestPlan(const PlanningProblem& problem, const AnalyticCostModel& ranking)
    : problem_(problem),
      ranking_(ranking),
      memory_(problem),
      kept_(std::max(RerankPool(problem.cluster.num_devices()), problem.alternatives + 1) - 1) {}

uint32_t RerankPool(uint32_t devices) {
  return devices <= 256 ? 64 : devices <= 1024 ? 4 : 1;
}

size_t RerankByPlayedEstimate(const AnalyticCostModel& cost, uint32_t pool, uint32_t alternatives,
                              PlannerResult* result) {
  std::vector<RankedPlan> all;
  all.push_back({std::move(result->plan), result->cost_s});
  for (auto& alt : result->alternatives) all.push_back(std::move(alt));
  result->alternatives.clear();
  const size_t played = std::min<size_t>(pool, all.size());
  std::vector<size_t> order(all.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (played > 1) {
    std::vector<char> playable(played);
    for (size_t i = 0; i < played; ++i) {
      const PlanEstimate e = cost.Estimate(all[i].plan, /*with_memory=*/false);
      all[i].cost_s = e.iteration_s;
      playable[i] = e.played;
    }
    std::stable_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(played), [&](size_t a, size_t b) {
      if (playable[a] != playable[b]) return playable[a] > playable[b];
      return all[a].cost_s < all[b].cost_s;
    });
  }
  const size_t closed_form_pick_at = static_cast<size_t>(std::find(order.begin(), order.end(), 0) - order.begin());
  result->plan = std::move(all[order[0]].plan);
  result->cost_s = all[order[0]].cost_s;
  for (size_t i = 1; i < order.size() && result->alternatives.size() < alternatives; ++i) {
    result->alternatives.push_back(std::move(all[order[i]]));
  }
  if (played > 1) {
    result->stats.notes.push_back("the closed form's " + std::to_string(played) +
                                  " best plans re-ranked by the played lowering: the closed form's pick ranks " +
                                  std::to_string(closed_form_pick_at + 1) + " there, the played pick " +
                                  std::to_string(order[0] + 1) + " by the closed form");
  } else {
    result->stats.notes.push_back("ranked by the closed form alone (no played re-ranking above 1,024 GPUs)");
  }
  return closed_form_pick_at;
}

namespace {

// The largest number of sequences any replica of `plan` processes per micro-batch.
uint32_t LargestReplicaMicroBatch(const proto::Plan& plan) {
  uint32_t b = 0;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t x : models::MicroBatchSplit(st, pipe.micro_batch_size())) b = std::max(b, x);
    }
  }
  return b;
}

std::string Join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

std::string ListNumbers(const std::set<uint32_t>& values) {
  std::vector<std::string> parts;
  for (uint32_t v : values) parts.push_back(std::to_string(v));
  if (parts.size() > 8) {
    return std::to_string(*values.begin()) + " to " + std::to_string(*values.rbegin()) + " (" +
           std::to_string(values.size()) + " sizes)";
  }
  return Join(parts, ", ");
}

}  // namespace

double BestPlan::Consider(proto::Plan plan, const std::string& what) {
  // MoE models: the planners' memory model and closed form assume blocks alike and know no experts, so the
  // plan's memory is models::EstimateMemory's and its time the played estimate's (docs/moe.md "Planners").
  const bool moe = problem_.model.HasMoe();
  if (moe && plan.zero_stage() >= 3) {
    stats_.Reject("ZeRO-3 with MoE layers (not lowered for them; DeepSpeed refuses it too)");
    return std::numeric_limits<double>::infinity();
  }
  if (!FitMoePlan(&plan, problem_.model)) {
    stats_.Reject(kUnlikeMoeTp);
    return std::numeric_limits<double>::infinity();
  }
  const MemoryCheck mem = moe ? ExactMemoryCheck(plan, problem_) : CheckMemory(plan, problem_, memory_);
  const proto::Recompute rc = models::EffectiveRecompute(plan, problem_.training);
  const uint32_t b = LargestReplicaMicroBatch(plan);
  auto record = [&](Knobs& k) {
    k.recompute.insert(rc);
    k.zero.insert(plan.zero_stage());
    k.micro_batch.insert(b);
    k.offload.insert(models::EffectiveOffload(plan));
  };
  record(tried_);
  if (mem.fits) record(fit_);
  if (!mem.fits) {
    const bool device_fits = FitsIn(mem.need_gib, mem.capacity_gib);
    if (!device_fits || mem.host_fits) {
      stats_.Reject("out of memory");
      misses_.Offer(what, mem.need_gib, mem.capacity_gib,
                    std::to_string(mem.device) + " (" + problem_.cluster.device(mem.device).gpu->name + ")");
    } else {
      stats_.Reject("out of host memory (CPU offload)");
      misses_.Offer(what, mem.host_need_gib, mem.host_capacity_gib,
                    "host memory of node " + problem_.cluster.node(mem.host_node).name);
    }
    return std::numeric_limits<double>::infinity();
  }
  ++stats_.candidates_evaluated;
  // The closed form for every candidate, the played estimate for the pool in Finish: the baselines rank
  // with hetsim's model (their frameworks have no cost model of their own, or one of homogeneous GPUs that
  // the ranking view stands for), and the played estimate orders their best plans as the simulator would,
  // at a cost per plan that grows with the GPUs (docs/planner-scaling.md, "Played or closed form").
  const double t = moe ? ranking_.Estimate(plan, /*with_memory=*/false).iteration_s
                       : ranking_.ClosedFormEstimate(plan, /*with_memory=*/false).iteration_s;
  kept_.Offer(t, plan);
  return t;
}

std::string BestPlan::KnobsNote(const proto::Plan& chosen) const {
  const proto::Recompute rc = models::EffectiveRecompute(chosen, problem_.training);
  const uint32_t zero = chosen.zero_stage(), b = LargestReplicaMicroBatch(chosen);
  std::vector<std::string> needed, why, ranked;
  // A knob counts when the search tried more than one setting of it and the plan's setting saves more
  // memory than the least memory-saving one tried. It was needed when no candidate with a less
  // memory-saving setting fitted; otherwise the ranking preferred it.
  if (tried_.recompute.size() > 1 && rc > *tried_.recompute.begin()) {
    const std::string name = "recompute=" + RecomputeName(rc);
    if (*fit_.recompute.begin() == rc) {
      needed.push_back(name);
      why.push_back(tried_.recompute.count(proto::RECOMPUTE_SELECTIVE) && rc == proto::RECOMPUTE_FULL
                        ? "no candidate fits with less recomputation"
                        : "no candidate fits without recomputation");
    } else {
      ranked.push_back(name);
    }
  }
  if (tried_.zero.size() > 1 && zero > *tried_.zero.begin()) {
    const std::string name = "zero=" + std::to_string(zero);
    if (*fit_.zero.begin() == zero) {
      needed.push_back(name);
      why.push_back("no candidate fits with a lower ZeRO stage");
    } else {
      ranked.push_back(name);
    }
  }
  if (tried_.micro_batch.size() > 1 && b < *tried_.micro_batch.rbegin() && *fit_.micro_batch.rbegin() == b) {
    needed.push_back("b=" + std::to_string(b));
    why.push_back("no candidate fits with more sequences per micro-batch");
  }
  const proto::Plan::Offload offload = models::EffectiveOffload(chosen);
  if (tried_.offload.size() > 1 && offload > *tried_.offload.begin()) {
    const std::string name = "offload=" + models::OffloadName(offload);
    if (*fit_.offload.begin() == offload) {
      needed.push_back(name);
      why.push_back(offload == proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS &&
                            tried_.offload.count(proto::Plan::OFFLOAD_OPTIMIZER)
                        ? "no candidate fits offloading the optimizer alone"
                        : "no candidate fits without CPU offload");
    } else {
      ranked.push_back(name);
    }
  }
  std::string note;
  if (!needed.empty()) note = Join(needed, ", ") + " needed to fit (" + Join(why, "; ") + ")";
  if (!ranked.empty()) {
    note += (note.empty() ? "" : "; ") + Join(ranked, ", ") +
            " chosen by the ranking (candidates with less memory saving fit too, but rank slower)";
  }
  return note.empty() ? "" : "memory knobs: " + note;
}

std::string BestPlan::TriedLine() const {
  std::vector<std::string> rcs, zeros;
  for (proto::Recompute rc : tried_.recompute) rcs.push_back(RecomputeName(rc));
  for (uint32_t z : tried_.zero) zeros.push_back(std::to_string(z));
  std::string line = "tried: recompute " + Join(rcs, ", ") + "; ZeRO stage " + Join(zeros, ", ") +
                     "; sequences per replica per micro-batch " + ListNumbers(tried_.micro_batch);
  if (tried_.offload.size() > 1) {
    std::vector<std::string> offloads;
    for (proto::Plan::Offload o : tried_.offload) offloads.push_back(models::OffloadName(o));
    line += "; CPU offload " + Join(offloads, ", ");
  }
  return line;
}

Result<PlannerResult> BestPlan::Finish(const std::string& planner, const std::string& hint) {
  if (kept_.empty()) {
    if (misses_.empty()) return NothingFound(planner, problem_, stats_, hint);
    const Status status = misses_.ToStatus(planner, problem_, stats_);
    if (!report_knobs_) return status;
    // Say what was tried and suggest only what was not.
    std::string msg = status.message();
    if (const size_t at = msg.rfind("\n  try: "); at != std::string::npos) msg.resize(at);
    msg += "\n  " + TriedLine();
    std::vector<std::string> tries;
    if (!tried_.recompute.count(proto::RECOMPUTE_FULL)) {
      tries.push_back("full recomputation (--recompute full, or the planner option recompute: [full])");
    }
    // (ZeRO-3 is no option for MoE layers: Consider refuses it.)
    if (!tried_.zero.count(3) && !problem_.model.HasMoe()) tries.push_back("ZeRO-3 (the planner option zero_stages)");
    if (!tried_.micro_batch.count(1)) tries.push_back("micro-batches of one sequence");
    tries.insert(tries.end(), suggestions_.begin(), suggestions_.end());
    tries.push_back("a smaller global batch or sequence length");
    tries.push_back("more GPUs");
    msg += "\n  try: " + Join(tries, ", ");
    return Status::Infeasible(msg);
  }
  PlannerResult r;
  kept_.MoveInto(&r);
  r.stats = std::move(stats_);
  RerankByPlayedEstimate(ranking_, RerankPool(problem_.cluster.num_devices()), problem_.alternatives, &r);
  if (report_knobs_) {
    if (std::string note = KnobsNote(r.plan); !note.empty()) r.stats.notes.push_back(std::move(note));
  }
  return r;
}

void ConsiderPolicies(BestPlan& best, const std::vector<proto::Recompute>& policies,
                      const std::function<std::optional<PolicyCandidate>(proto::Recompute)>& make) {
  // The layout of the last candidate that fitted: the plan serialised without its recompute policy.
  std::string fitted;
  for (size_t i = 0; i < policies.size(); ++i) {
    auto candidate = make(policies[i]);
    if (!candidate) continue;
    proto::Plan layout = candidate->plan;
    layout.clear_recompute();
    std::string key = layout.SerializeAsString();
    if (!fitted.empty() && key == fitted) {
      best.stats().Reject("more recomputation than a candidate of the same layout that fits (only slower)");
      continue;
    }
    if (!std::isfinite(best.Consider(std::move(candidate->plan), candidate->what))) continue;
    if (!candidate->memory_shaped) {
      if (i + 1 < policies.size()) {
        best.stats().Reject("more recomputation than a candidate that fits unconstrained by memory (only slower)",
                            policies.size() - i - 1);
      }
      return;
    }
    fitted = std::move(key);
  }
}

void ForEachSymmetricShape(const PlanningProblem& problem, uint32_t devices, uint32_t node_gcd,
                           const std::vector<uint32_t>& tp_degrees, const std::vector<uint32_t>& pp_degrees,
                           SearchStats* stats, const std::function<void(uint32_t dp, uint32_t tp, uint32_t pp)>& shape) {
  const uint32_t G = problem.training.global_batch_size();
  const uint32_t L = problem.model.num_layers();
  for (uint32_t tp : TpCandidates(problem, tp_degrees, node_gcd, stats)) {
    for (uint32_t pp : pp_degrees.empty() ? Divisors(devices / tp) : pp_degrees) {
      if ((devices / tp) % pp != 0) {
        stats->Reject("PP degree does not divide the GPUs left after TP");
        continue;
      }
      if (pp > L) {
        stats->Reject("more pipeline stages than layers");
        continue;
      }
      const uint32_t dp = devices / (tp * pp);
      if (G % dp != 0) {
        stats->Reject("global batch not divisible by the DP degree");
        continue;
      }
      shape(dp, tp, pp);
    }
  }
}

Result<PlannerResult> SearchBalancedSymmetric(const std::string& planner, const PlanningProblem& problem,
                                              const AnalyticCostModel& ranking, const SymmetricSearch& space,
                                              const ViewFor& view_for,
                                              const std::function<std::string(const AnalyticCostModel&)>& ranking_note) {
  SubsetSearch machines(problem, ranking, view_for, [](BestPlan& b) { b.ReportMemoryKnobs(); });
  const uint32_t G = problem.training.global_batch_size();
  const uint32_t L = problem.model.num_layers();
  const std::vector<uint32_t> zeros = space.zero_stages.empty() ? std::vector<uint32_t>{1} : space.zero_stages;
  const std::vector<proto::Recompute> policies =
      space.recompute.empty() ? std::vector<proto::Recompute>{problem.training.recompute()} : space.recompute;
  machines.Run([&](const std::vector<uint32_t>& order, BestPlan& best, const AnalyticCostModel& rank) {
    SearchStats& stats = best.stats();
    const uint32_t N = static_cast<uint32_t>(order.size());
    std::optional<AnalyticCostModel> first_gpu;
    if (space.balance_as_first_gpu) {
      CostModelOptions view;
      view.assume_gpu = problem.cluster.device(order[0]).gpu;
      first_gpu.emplace(problem, view);
    }
    const AnalyticCostModel& balance = first_gpu ? *first_gpu : rank;
    ForEachSymmetricShape(problem, N, NodeGcd(problem.cluster, order), space.tp_degrees, space.pp_degrees, &stats,
                          [&](uint32_t dp, uint32_t tp, uint32_t pp) {
      for (uint32_t b : MicroBatchCandidates(G / dp, space.micro_batch_sizes, space.max_micro_batch_size)) {
        const uint32_t m = G / (dp * b);
        for (uint32_t zero : zeros) {
          // Looser memory caps can move layers onto faster stages, so more recomputation may still rank
          // faster when it changes the split.
          ConsiderPolicies(best, policies, [&](proto::Recompute rc) {
            proto::Plan plan = MegatronLayout(order, dp, tp, pp, EvenLayerSplit(L, pp), b, m);
            plan.set_zero_stage(zero);
            SetRecompute(&plan, rc, problem.training);
            if (space.sequence_parallel && tp > 1) plan.set_sequence_parallel(true);
            bool capped = false;
            if (auto layers = BalancedSplit(plan, problem, balance, best.memory(), &capped)) {
              ApplyLayers(&plan, *layers);
            } else {
              stats.Reject("no layer split fits in memory (tried the even split)");
            }
            return std::make_optional(
                PolicyCandidate{std::move(plan), CandidateName(dp, tp, pp, b, m, zero, rc), capped});
          });
        }
      }
    });
  });
  auto r = machines.Finish(planner, "needs dp × tp × pp = the GPUs of whole nodes, with TP inside a node");
  if (r.ok() && ranking_note) r->stats.notes.push_back(ranking_note(machines.chosen_ranking()));
  return r;
}

std::string CandidateName(uint32_t dp, uint32_t tp, uint32_t pp, uint32_t b, uint32_t m, uint32_t zero,
                          proto::Recompute recompute) {
  std::string out = "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
                    " b=" + std::to_string(b) + " m=" + std::to_string(m) + " zero=" + std::to_string(zero);
  if (recompute != proto::RECOMPUTE_UNSPECIFIED) out += " recompute=" + RecomputeName(recompute);
  return out;
}

}  // namespace hetsim::planners
