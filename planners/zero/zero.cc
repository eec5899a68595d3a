#include "planners/zero/zero.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "planners/proto/zero.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::zero {
namespace {

class ZeroPlanner : public PlannerWithOptions<proto::ZeroOptions> {
 public:
  ZeroPlanner(std::string name, std::vector<uint32_t> zeros, std::vector<uint32_t> sps,
              std::vector<proto::Plan::Offload> offloads, std::string offload_flags, std::string beyond,
              bool expert_parallel)
      : name_(std::move(name)), default_zeros_(std::move(zeros)), default_sps_(std::move(sps)),
        default_offloads_(std::move(offloads)), offload_flags_(std::move(offload_flags)), beyond_(std::move(beyond)),
        expert_parallel_(expert_parallel) {}

  std::string name() const override { return name_; }
  bool SearchesExpertParallelism() const override { return expert_parallel_; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    const AnalyticCostModel ranking(problem);
    std::vector<std::string> suggestions;
    SubsetSearch machines(problem, ranking, nullptr, [&suggestions](BestPlan& b) {
      b.ReportMemoryKnobs();
      for (const auto& s : suggestions) b.SuggestWhenNothingFits(s);
    });
    SearchStats& whole_stats = machines.whole().stats();
    // The offload levels the options pin, among those the framework offers.
    std::vector<proto::Plan::Offload> offloads = default_offloads_;
    if (!o.offload().empty()) {
      offloads.clear();
      for (int v : o.offload()) {
        auto level = static_cast<proto::Plan::Offload>(v);
        if (level == proto::Plan::OFFLOAD_UNSPECIFIED) level = proto::Plan::OFFLOAD_NONE;
        if (std::find(default_offloads_.begin(), default_offloads_.end(), level) == default_offloads_.end()) {
          whole_stats.Reject(name_ + " offers no CPU offload of the kind offload=" + models::OffloadName(level));
          continue;
        }
        offloads.push_back(level);
      }
      std::sort(offloads.begin(), offloads.end());
      offloads.erase(std::unique(offloads.begin(), offloads.end()), offloads.end());
      if (offloads.empty()) offloads.push_back(proto::Plan::OFFLOAD_NONE);
    }
    // Suggest what the search left out: the framework's CPU offload when the options forbid it, and what
    // lies beyond it (NVMe).
    if (offloads.back() < default_offloads_.back()) {
      suggestions.push_back(offload_flags_ + " (the planner option offload)");
    }
    if (!beyond_.empty()) suggestions.push_back(beyond_);
    for (const auto& s : suggestions) machines.whole().SuggestWhenNothingFits(s);
    Settings set;
    set.zeros = o.zero_stages().empty() ? default_zeros_
                                        : std::vector<uint32_t>(o.zero_stages().begin(), o.zero_stages().end());
    set.sps = o.sp_degrees().empty() ? default_sps_ : std::vector<uint32_t>(o.sp_degrees().begin(), o.sp_degrees().end());
    set.bmax = o.max_micro_batch_size() > 0 ? o.max_micro_batch_size() : 32;
    set.requested_b.assign(o.micro_batch_sizes().begin(), o.micro_batch_sizes().end());
    // Activation checkpointing of every block (DeepSpeed's and PyTorch's checkpoint wrappers): full.
    set.policies = RecomputeCandidates(problem, RecomputeList(o.recompute()),
                                       {proto::RECOMPUTE_NONE, proto::RECOMPUTE_FULL}, &whole_stats);
    if (problem.model.HasMoe() && offloads.back() != proto::Plan::OFFLOAD_NONE) {
      // EstimateMemory's host side shards expert states over DP, not expert DP, and the memory check of
      // MoE candidates (ExactMemoryCheck) knows no host memory: an offloaded MoE plan could not be checked.
      whole_stats.Reject("CPU offload with MoE layers (not searched: hetsim checks no host memory for expert shards)");
      offloads.assign(1, proto::Plan::OFFLOAD_NONE);
    }
    // CPU offload is the last resort, cheapest first: each level is searched only when nothing fitted at
    // the ones before (it adds host copies and a CPU optimizer step to a layout that is otherwise the same).
    // Each level on the whole cluster and then, when nothing fits there, on subsets of the machines
    // (SubsetSearch), before the next level.
    for (const proto::Plan::Offload offload : offloads) {
      if (machines.found()) break;
      machines.Run([&](const std::vector<uint32_t>& order, BestPlan& best, const AnalyticCostModel&) {
        SearchMachines(problem, set, offload, order, best);
      });
    }
    return machines.Finish(name_, "ZeRO data parallelism needs the global batch divisible by the number of replicas");
  }

 private:
  // What the options and the training spec leave to search.
  struct Settings {
    std::vector<uint32_t> zeros, sps, requested_b;
    uint32_t bmax = 32;
    std::vector<proto::Recompute> policies;
  };

  // The expert-parallel degrees to try with `dp` data-parallel ranks: {0} for a dense model (no expert
  // fields in the plan). DeepSpeed-MoE: ep_size divides the experts (deepspeed/moe/layer.py, MoE.__init__
  // asserts it) and the data-parallel world (deepspeed/utils/groups.py, _create_expert_and_data_parallel:
  // EP groups of ep_size consecutive ranks, expert-DP groups strided across them; ZeRO-1/2 partition the
  // experts' states over the expert-DP group, deepspeed/runtime/zero/stage_1_and_2.py
  // _configure_moe_settings: hetsim's layout with expert TP 1, docs/moe.md "Plans"). FSDP has no expert
  // parallelism of its own: EP 1, every rank holds every expert.
  std::vector<uint32_t> ExpertDegrees(const PlanningProblem& problem, uint32_t dp, SearchStats* stats) const {
    if (!problem.model.HasMoe()) return {0};
    const uint32_t experts = problem.model.spec().moe().num_experts();
    std::vector<uint32_t> out;
    for (uint32_t ep = 1; ep <= dp; ++ep) {
      const bool listed = options_.ep_degrees().empty() || std::find(options_.ep_degrees().begin(),
                                                                     options_.ep_degrees().end(), ep) !=
                                                               options_.ep_degrees().end();
      if (!listed || experts % ep != 0 || dp % ep != 0) continue;
      if (ep > 1 && !expert_parallel_) {
        stats->Reject(name_ + " has no expert parallelism (option ep_degrees > 1)");
        continue;
      }
      out.push_back(ep);
      if (!expert_parallel_) break;
    }
    if (out.empty()) stats->Reject("no listed EP degree divides both the experts and the data-parallel ranks");
    return out;
  }

  // One candidate per (SP, micro-batch, ZeRO stage, EP degree) on the machines `order`, with the cheapest
  // recomputation policy that fits.
  void SearchMachines(const PlanningProblem& problem, const Settings& set, proto::Plan::Offload offload,
                      const std::vector<uint32_t>& order, BestPlan& best) const {
    SearchStats& stats = best.stats();
    const uint32_t G = problem.training.global_batch_size();
    const uint32_t L = problem.model.num_layers();
    const bool moe = problem.model.HasMoe();
    const uint32_t N = static_cast<uint32_t>(order.size());
    const uint32_t node_gcd = NodeGcd(problem.cluster, order);
    for (uint32_t sp : set.sps) {
      if (node_gcd % sp != 0) {
        stats.Reject("SP degree does not divide the GPUs of every node (SP stays inside a node)");
        continue;
      }
      if (!ModelAllowsTp(problem.model, sp)) {
        stats.Reject("SP degree does not divide the model's attention or key/value heads");
        continue;
      }
      if (moe && sp > 1) {
        // This planner writes an SP group as a TP group, which DeepSpeed-MoE's expert groups (laid over
        // data-parallel ranks) would then have to fold in; not modelled.
        stats.Reject("SP with MoE layers (not searched: DeepSpeed-MoE lays its expert groups over data-parallel ranks)");
        continue;
      }
      const uint32_t dp = N / sp;
      if (G % dp != 0) {
        stats.Reject("global batch not divisible by the DP degree");
        continue;
      }
      const std::vector<uint32_t> eps = ExpertDegrees(problem, dp, &stats);
      for (uint32_t b : MicroBatchCandidates(G / dp, set.requested_b, set.bmax)) {
        const uint32_t m = G / (dp * b);
        for (uint32_t z : set.zeros) {
          if (offload >= proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS && z < 3) {
            stats.Reject("parameter offload needs ZeRO-3");
            continue;
          }
          if (offload >= proto::Plan::OFFLOAD_OPTIMIZER && z < 2) {
            stats.Reject("optimizer offload needs ZeRO-2 or 3");
            continue;
          }
          if (moe && z >= 3) {
            // DeepSpeed's engine asserts "MoE not supported with Stage 3" (deepspeed/runtime/engine.py,
            // _configure_zero_optimizer); FSDP's FULL_SHARD of MoE layers is not lowered by hetsim.
            stats.Reject("ZeRO-3 with MoE layers (DeepSpeed refuses it; FULL_SHARD of MoE layers is not lowered)");
            continue;
          }
          for (uint32_t ep : eps) {
            // The cheapest recomputation that fits: with everything else fixed, more recomputation only
            // adds time.
            for (proto::Recompute rc : set.policies) {
              proto::Plan plan = ep == 0 ? MegatronLayout(order, dp, sp, 1, {{0, L}}, b, m)
                                         : MoeLayout(order, dp, 1, 1, {{0, L}}, b, m, ep, 1);
              plan.set_zero_stage(z);
              SetRecompute(&plan, rc, problem.training);
              if (sp > 1) plan.set_sequence_parallel(true);
              if (offload != proto::Plan::OFFLOAD_NONE) {
                plan.set_offload(offload);
                // DeepSpeed's ZeRO-Offload configuration sets overlap_comm (its tutorial's config); FSDP
                // reduce-scatters and copies each gradient to the host on a side stream: the copies overlap
                // the backward pass (ZeRO-Offload §4.1).
                plan.mutable_comm()->set_dp_overlap(true);
              }
              std::string what = "dp=" + std::to_string(dp) + " sp=" + std::to_string(sp) + " b=" +
                                 std::to_string(b) + " m=" + std::to_string(m) + " zero=" + std::to_string(z) +
                                 " recompute=" + RecomputeName(rc);
              if (ep > 0) what += " ep=" + std::to_string(ep);
              if (offload != proto::Plan::OFFLOAD_NONE) what += " offload=" + models::OffloadName(offload);
              if (std::isfinite(best.Consider(std::move(plan), what))) break;
            }
          }
        }
      }
    }
  }

  std::string name_;
  std::vector<uint32_t> default_zeros_, default_sps_;
  std::vector<proto::Plan::Offload> default_offloads_;  // the framework's CPU offload levels, cheapest first
  std::string offload_flags_;  // how the framework turns them on
  std::string beyond_;         // a memory knob of the framework beyond the search (suggested when nothing fits)
  bool expert_parallel_ = false;  // whether the framework has expert parallelism (DeepSpeed-MoE's ep_size)
};

}  // namespace

std::unique_ptr<Planner> NewDeepSpeedPlanner() {
  // zero_optimization.stage 0-3. Ties keep the earlier candidate, and stage 0 ties with stage 1 on a single
  // replica, so it comes last.
  // CPU offload: ZeRO-Offload (offload_optimizer) with ZeRO-2/3, then ZeRO-Infinity's parameter offload
  // (offload_param) with ZeRO-3.
  return std::make_unique<ZeroPlanner>(
      "deepspeed", std::vector<uint32_t>{1, 2, 3, 0}, std::vector<uint32_t>{1, 2, 4, 8},
      std::vector<proto::Plan::Offload>{proto::Plan::OFFLOAD_NONE, proto::Plan::OFFLOAD_OPTIMIZER,
                                        proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS},
      "CPU offload (offload_optimizer / offload_param: {device: cpu})",
      "NVMe offload (ZeRO-Infinity, offload_optimizer / offload_param: {device: nvme}; not modelled by hetsim)",
      /*expert_parallel=*/true);
}

std::unique_ptr<Planner> NewFsdpPlanner() {
  // ShardingStrategy FULL_SHARD (FSDP's default, first so that it wins ties), SHARD_GRAD_OP, NO_SHARD.
  // CPUOffload(offload_params=True) moves the parameter and gradient shards to host memory and runs the
  // optimizer step on the CPU: FSDP has no optimizer-only offload.
  return std::make_unique<ZeroPlanner>(
      "fsdp", std::vector<uint32_t>{3, 2, 0}, std::vector<uint32_t>{1},
      std::vector<proto::Plan::Offload>{proto::Plan::OFFLOAD_NONE, proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS},
      "CPU offload (CPUOffload(offload_params=True))", "", /*expert_parallel=*/false);
}

}  // namespace hetsim::planners::zero
