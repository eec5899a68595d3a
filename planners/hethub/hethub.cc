#include "planners/hethub/hethub.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <functional>
#include <numeric>
#include <optional>
#include <set>

#include "planners/cost_model.h"
#include "planners/proto/hethub.pb.h"
#include "planners/search.h"
#include "planners/symmetric.h"

namespace hetsim::planners::hethub {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Options = proto::HetHubOptions;

// The GPUs of one type (catalog name and vendor), in node order.
struct GpuType {
  const models::GpuSpec* gpu = nullptr;
  std::string label;
  std::vector<uint32_t> devices;
  uint32_t stages = 0;           // N / (d·t) under the current (t, d)
  std::vector<double> seconds;   // per micro-batch time of 1..L blocks on one TP group (index l − 1)
};

class Search {
 public:
  Search(const PlanningProblem& problem, const Options& options)
      : problem_(problem), options_(options), cost_(problem), blocks_(problem.model.num_blocks()),
        batch_(problem.training.global_batch_size()) {
    for (uint32_t n = 0; n < problem.cluster.nodes().size(); ++n) {
      const auto& node = problem.cluster.node(n);
      const std::string& vendor = problem.cluster.spec().nodes(static_cast<int>(node.group)).vendor();
      const std::string label = node.gpu->name + (vendor.empty() ? "" : " (" + vendor + ")");
      auto it = std::find_if(types_.begin(), types_.end(), [&](const GpuType& t) { return t.label == label; });
      if (it == types_.end()) {
        types_.push_back(GpuType{node.gpu, label, {}, 0, {}});
        it = types_.end() - 1;
      }
      for (uint32_t g = 0; g < node.num_gpus; ++g) it->devices.push_back(node.first_device + g);
    }
  }

  Result<PlannerResult> Run() {
    uint32_t node_gcd = 0;
    for (const auto& n : problem_.cluster.nodes()) node_gcd = std::gcd(node_gcd, n.num_gpus);
    const std::vector<uint32_t> tps = TpCandidates(
        problem_, std::vector<uint32_t>(options_.tp_degrees().begin(), options_.tp_degrees().end()), node_gcd, &stats_);
    std::vector<uint32_t> bs(options_.micro_batch_sizes().begin(), options_.micro_batch_sizes().end());
    if (bs.empty()) bs = {1};
    const uint32_t zero = options_.has_zero_stage() ? options_.zero_stage() : 1;
    const uint64_t max_leaves = options_.max_leaves() > 0 ? options_.max_leaves() : 100000;
    uint32_t type_gcd = 0;
    for (const auto& t : types_) type_gcd = std::gcd(type_gcd, static_cast<uint32_t>(t.devices.size()));
    // The predictor reports each candidate's peak memory (§3.2) and a candidate that does not fit is not a
    // strategy; the memory knob of the Megatron-LM runs HetHub launches is activation recomputation
    // (--recompute-granularity), searched like the baselines' (docs/planners.md, "Memory knobs"). ZeRO
    // stays the option's stage: Megatron-DeepSpeed's pipeline engine runs ZeRO-1 at most, and HetHub's
    // plans are pipelines.
    const std::vector<proto::Recompute> policies = RecomputeCandidates(
        problem_, RecomputeList(options_.recompute()),
        {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL}, &stats_);
    for (uint32_t t : tps) {
      std::vector<uint32_t> ds(options_.dp_degrees().begin(), options_.dp_degrees().end());
      if (ds.empty()) {
        for (uint32_t d = 1; d * t <= type_gcd; ++d) ds.push_back(d);
      }
      for (uint32_t d : ds) {
        if (type_gcd % (d * t) != 0) {
          stats_.Reject("d × t does not divide every GPU type's count (uniform DP and TP)");
          continue;
        }
        uint32_t S = 0;
        for (auto& ty : types_) S += ty.stages = static_cast<uint32_t>(ty.devices.size()) / (d * t);
        if (S > blocks_) {
          stats_.Reject("more stages than blocks");
          continue;
        }
        for (uint32_t b : bs) {
          if (batch_ % (uint64_t{d} * b) != 0) {
            stats_.Reject("d × micro-batch size does not divide the global batch");
            continue;
          }
          for (proto::Recompute rc : policies) {
            tried_policies_.insert(rc);
            Tables(t, b, rc);
            Level(t, d, b, zero, rc, S, max_leaves);
            if (truncated_) break;
          }
          if (truncated_) break;
        }
        if (truncated_) break;
      }
      if (truncated_) break;
    }
    if (!best_) {
      if (!oom_.empty()) return oom_.ToStatus("hethub", problem_, stats_);
      return NothingFound("hethub", problem_, stats_, "allow more TP or DP degrees, or add GPUs of each type");
    }
    PlannerResult out;
    // The closed form's pool of best leaves (the DFS's bound cuts the others; the same first plan as best_),
    // re-ranked by the played estimate: hetsim's analytic model orders the final few as the simulator
    // would (docs/planner-scaling.md, "Played or closed form").
    runners_.MoveInto(&out);
    out.stats = stats_;
    const bool moved =
        RerankByPlayedEstimate(cost_, RerankPool(problem_.cluster.num_devices()), problem_.alternatives, &out) != 0;
    out.stats.notes.push_back("DFS: " + std::to_string(dfs_nodes_) + " tree nodes, " + std::to_string(leaves_) +
                              " leaves costed by the predictor, " + std::to_string(pruned_bound_) +
                              " branches cut by the bottleneck bound (rule 2)");
    out.stats.notes.push_back("chosen: " + (moved ? Summary(out.plan) : best_summary_) + " (predicted " +
                              Fmt(out.cost_s) + " s per iteration; the closed form's best " + Fmt(best_s_) + " s)");
    // Which recomputation the pick needed (docs/planners.md, "Memory knobs").
    const proto::Recompute chosen_rc = models::EffectiveRecompute(out.plan, problem_.training);
    if (tried_policies_.size() > 1 && chosen_rc > *tried_policies_.begin()) {
      out.stats.notes.push_back(
          "memory knobs: recompute=" + RecomputeName(chosen_rc) +
          (*fitted_policies_.begin() == chosen_rc
               ? " needed to fit (no leaf fits with less recomputation)"
               : " chosen by the predictor (leaves with less recomputation fit too, but rank slower)"));
    }
    if (truncated_) {
      out.stats.notes.push_back("the search stopped at max_leaves = " + std::to_string(max_leaves) +
                                "; the plan is the best of the leaves costed");
    }
    return out;
  }

 private:
  // Per type, the time of 1..L blocks on one of its TP groups (compute and TP communication, §3.3.3's
  // "time required for each stage's hardware to independently compute 1 to L decoder layers").
  void Tables(uint32_t t, uint32_t b, proto::Recompute rc) {
    for (auto& ty : types_) {
      const std::vector<uint32_t> group(ty.devices.begin(), ty.devices.begin() + t);
      ty.seconds.assign(blocks_, kInf);
      for (uint32_t l = 1; l <= blocks_; ++l) {
        ty.seconds[l - 1] = cost_.Replica(group, 1, 1 + l, b, {}, {}, rc).total_s();
      }
    }
  }

  // Level 1 for a fixed (t, d, b): the DFS over each type's block total.
  void Level(uint32_t t, uint32_t d, uint32_t b, uint32_t zero, proto::Recompute rc, uint32_t S,
             uint64_t max_leaves) {
    // The uniform split's slowest stage: ⌈L / S⌉ blocks on the slowest type.
    const uint32_t even = (blocks_ + S - 1) / S;
    double uniform = 0;
    for (const auto& ty : types_) {
      if (ty.stages > 0) uniform = std::max(uniform, ty.seconds[even - 1]);
    }
    const double bound = uniform * (options_.bottleneck_slack() > 0 ? options_.bottleneck_slack() : 1.0);
    std::vector<uint32_t> totals(types_.size(), 0);
    if (options_.uniform_split()) {
      // Stages in node order, the extra blocks on the first ones.
      uint32_t stage = 0;
      for (size_t k = 0; k < types_.size(); ++k) {
        for (uint32_t q = 0; q < types_[k].stages; ++q, ++stage) totals[k] += blocks_ / S + (stage < blocks_ % S ? 1 : 0);
      }
      Leaf(totals, t, d, b, zero, rc, true);
      return;
    }
    // The most blocks a type can take with every stage under the bound.
    std::vector<uint32_t> cap(types_.size(), 0);
    for (size_t k = 0; k < types_.size(); ++k) {
      uint32_t l = 0;
      while (l < blocks_ && types_[k].seconds[l] <= bound * (1 + 1e-12)) ++l;
      cap[k] = l * types_[k].stages;
    }
    std::vector<uint32_t> cap_after(types_.size() + 1, 0), min_after(types_.size() + 1, 0);
    for (size_t k = types_.size(); k-- > 0;) {
      cap_after[k] = cap_after[k + 1] + cap[k];
      min_after[k] = min_after[k + 1] + types_[k].stages;
    }
    std::function<void(size_t, uint32_t)> dfs = [&](size_t k, uint32_t left) {
      if (truncated_) return;
      ++dfs_nodes_;
      if (k == types_.size()) {
        if (left == 0) {
          if (leaves_ >= max_leaves) {
            truncated_ = true;
            return;
          }
          Leaf(totals, t, d, b, zero, rc, false);
        }
        return;
      }
      const uint32_t s = types_[k].stages;
      if (s == 0) {
        totals[k] = 0;
        dfs(k + 1, left);
        return;
      }
      for (uint32_t L = s; L + min_after[k + 1] <= left; ++L) {
        // Rule 1: the type's stages hold ⌊L/s⌋ or ⌈L/s⌉ blocks; rule 2: the heavier one under the bound.
        const uint32_t heavy = (L + s - 1) / s;
        if (types_[k].seconds[heavy - 1] > bound * (1 + 1e-12)) {
          ++pruned_bound_;
          break;  // more blocks only get slower
        }
        if (left - L > cap_after[k + 1]) {
          ++pruned_bound_;
          continue;  // the other types cannot take the rest under the bound
        }
        totals[k] = L;
        dfs(k + 1, left - L);
      }
    };
    dfs(0, blocks_);
  }

  // A leaf: each type's total split near-evenly over its stages, the stages ordered (rule 3), the plan
  // built and costed by the predictor.
  void Leaf(const std::vector<uint32_t>& totals, uint32_t t, uint32_t d, uint32_t b, uint32_t zero,
            proto::Recompute rc, bool uniform) {
    ++leaves_;
    struct StageDraft {
      size_t type;
      uint32_t blocks;
      double seconds;
    };
    std::vector<StageDraft> stages;
    for (size_t k = 0; k < types_.size(); ++k) {
      const uint32_t s = types_[k].stages;
      for (uint32_t q = 0; q < s; ++q) {
        const uint32_t l = totals[k] / s + (q < totals[k] % s ? 1 : 0);
        stages.push_back({k, l, types_[k].seconds[l - 1]});
      }
    }
    const bool descending =
        options_.has_descending_stage_order() ? options_.descending_stage_order() : !uniform;
    if (descending) {
      std::stable_sort(stages.begin(), stages.end(),
                       [](const StageDraft& a, const StageDraft& c) { return a.seconds > c.seconds; });
    }
    proto::Plan plan;
    plan.set_zero_stage(zero);
    // HetHub runs on Megatron-LM, whose pipeline sends scatter the boundary tensor over the TP ranks
    // (--scatter-gather-tensors-in-pipeline, on by default): each rank sends 1/t of it.
    plan.mutable_comm()->set_pp_scatter_gather(true);
    // §3.1: the unified communicator picks each pair's path from the cluster; the plan records that it does.
    plan.mutable_comm()->set_communicator(proto::CommOptions::COMMUNICATOR_AUTO);
    std::vector<uint32_t> used(types_.size(), 0);  // stages of each type placed so far
    std::vector<proto::Pipeline*> pipes;
    for (uint32_t j = 0; j < d; ++j) {
      auto* p = plan.add_pipelines();
      p->set_micro_batch_size(b);
      p->set_num_micro_batches(static_cast<uint32_t>(batch_ / (uint64_t{d} * b)));
      pipes.push_back(p);
    }
    uint32_t at = 0;
    std::string summary = "t=" + std::to_string(t) + " d=" + std::to_string(d) + " b=" + std::to_string(b) + ":";
    for (size_t i = 0; i < stages.size(); ++i) {
      const GpuType& ty = types_[stages[i].type];
      const uint32_t q = used[stages[i].type]++;
      const uint32_t begin = i == 0 ? 0 : at + 1;
      at += stages[i].blocks;
      const uint32_t end = i + 1 == stages.size() ? problem_.model.num_layers() : at + 1;
      for (uint32_t j = 0; j < d; ++j) {
        auto* st = pipes[j]->add_stages();
        const size_t first = (size_t{q} * d + j) * t;
        for (uint32_t g = 0; g < t; ++g) st->add_devices(ty.devices[first + g]);
        st->set_tp_degree(t);
        st->set_layer_begin(begin);
        st->set_layer_end(end);
      }
      summary += (i ? " → " : " ") + ty.gpu->name + ":" + std::to_string(stages[i].blocks);
    }
    // A layout that fits under a lighter recomputation policy is only slower under a heavier one. The
    // layout: (t, d, b, ZeRO) and the stages' types and blocks in order.
    std::string layout = std::to_string(t) + "," + std::to_string(d) + "," + std::to_string(b) + "," +
                         std::to_string(zero) + ":";
    for (const StageDraft& st : stages) layout += std::to_string(st.type) + "x" + std::to_string(st.blocks) + ",";
    if (fitted_.count(layout)) {
      --leaves_;
      stats_.Reject("more recomputation than a candidate of the same layout that fits (only slower)");
      return;
    }
    SetRecompute(&plan, rc, problem_.training);
    FitMoePlan(&plan, problem_.model);  // one TP degree throughout: only sequence parallelism may change
    if (rc != problem_.training.recompute()) summary += " recompute=" + RecomputeName(rc);
    // The predictor is hetsim's closed form (AnalyticCostModel::ClosedFormEstimate: per-stage compute, TP
    // and PP hops, 1F1B, DP sync), the shape of §3.3.3's predictor, in microseconds per leaf. Not the played
    // estimate (Estimate: the lowering played, a fraction of a millisecond per 8 GPUs and seconds per
    // leaf at 4,096 GPUs): the simulator-checked choice (--refine, sim/planning/refine.h) checks the
    // pick and the runners-up in the simulator itself (docs/planner-scaling.md, "Played or closed form").
    const PlanEstimate e = cost_.ClosedFormEstimate(plan, /*with_memory=*/true);
    ++stats_.candidates_evaluated;
    if (e.oom) {
      stats_.Reject("out of memory");
      oom_.Offer(summary, e.worst_shortfall_gib + problem_.cluster.device(e.tightest_device).gpu->memory_gib,
                 problem_.cluster.device(e.tightest_device).gpu->memory_gib,
                 problem_.cluster.DeviceName(e.tightest_device));
      return;
    }
    fitted_.insert(std::move(layout));
    fitted_policies_.insert(rc);
    runners_.Offer(e.iteration_s, plan);  // the simulator-checked choice's candidates (planner.h)
    if (!best_ || e.iteration_s < best_s_) {
      best_ = plan;
      best_s_ = e.iteration_s;
      best_summary_ = summary;
    }
  }

  // A leaf's summary from its plan: "t=.. d=.. b=..: type:blocks → …" (Leaf writes the same).
  std::string Summary(const proto::Plan& plan) const {
    const auto& pipe = plan.pipelines(0);
    std::string out = "t=" + std::to_string(models::TpDegree(pipe.stages(0))) + " d=" +
                      std::to_string(plan.pipelines_size()) + " b=" + std::to_string(pipe.micro_batch_size()) + ":";
    for (int i = 0; i < pipe.stages_size(); ++i) {
      const auto& st = pipe.stages(i);
      const uint32_t blocks = st.layer_end() - st.layer_begin() - (i == 0 ? 1 : 0) - (i + 1 == pipe.stages_size() ? 1 : 0);
      out += (i ? " → " : " ") + problem_.cluster.device(st.devices(0)).gpu->name + ":" + std::to_string(blocks);
    }
    if (plan.recompute() != proto::RECOMPUTE_UNSPECIFIED) out += " recompute=" + RecomputeName(plan.recompute());
    return out;
  }

  static std::string Fmt(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }

  const PlanningProblem& problem_;
  const Options& options_;
  AnalyticCostModel cost_;
  const uint32_t blocks_;
  const uint64_t batch_;
  std::vector<GpuType> types_;
  SearchStats stats_;
  InfeasibleTracker oom_;
  std::optional<proto::Plan> best_;
  double best_s_ = kInf;
  std::string best_summary_;
  RankedPlans runners_{std::max(RerankPool(problem_.cluster.num_devices()), problem_.alternatives + 1) - 1};
  uint64_t dfs_nodes_ = 0, leaves_ = 0, pruned_bound_ = 0;
  std::set<std::string> fitted_;  // layouts (plans without their recompute policy) that fit
  std::set<proto::Recompute> tried_policies_, fitted_policies_;
  bool truncated_ = false;
};

class HetHubPlanner : public PlannerWithOptions<Options> {
 public:
  std::string name() const override { return "hethub"; }
  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    Search search(problem, options_);
    return search.Run();
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<HetHubPlanner>();
}

}  // namespace hetsim::planners::hethub
