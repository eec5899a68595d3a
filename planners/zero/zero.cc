#include "planners/zero/zero.h"

#include <cmath>
#include <numeric>

#include "planners/proto/zero.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::zero {
namespace {

class ZeroPlanner : public PlannerWithOptions<proto::ZeroOptions> {
 public:
  ZeroPlanner(std::string name, std::vector<uint32_t> zeros, std::vector<uint32_t> sps, std::string offload)
      : name_(std::move(name)), default_zeros_(std::move(zeros)), default_sps_(std::move(sps)),
        offload_(std::move(offload)) {}

  std::string name() const override { return name_; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    const AnalyticCostModel ranking(problem);
    BestPlan best(problem, ranking);
    best.ReportMemoryKnobs();
    best.SuggestWhenNothingFits(offload_);
    SearchStats& stats = best.stats();
    const uint32_t G = problem.training.global_batch_size();
    const uint32_t L = problem.model.num_layers();
    const std::vector<uint32_t> zeros = o.zero_stages().empty()
                                            ? default_zeros_
                                            : std::vector<uint32_t>(o.zero_stages().begin(), o.zero_stages().end());
    const std::vector<uint32_t> sps =
        o.sp_degrees().empty() ? default_sps_ : std::vector<uint32_t>(o.sp_degrees().begin(), o.sp_degrees().end());
    const uint32_t bmax = o.max_micro_batch_size() > 0 ? o.max_micro_batch_size() : 32;
    const std::vector<uint32_t> requested_b(o.micro_batch_sizes().begin(), o.micro_batch_sizes().end());
    // Activation checkpointing of every block (DeepSpeed's and PyTorch's checkpoint wrappers): full.
    const std::vector<proto::Recompute> policies = RecomputeCandidates(
        problem, RecomputeList(o.recompute()), {proto::RECOMPUTE_NONE, proto::RECOMPUTE_FULL}, &stats);
    SearchWholeNodePrefixes(problem, best, [&](const std::vector<uint32_t>& order) {
      const uint32_t N = static_cast<uint32_t>(order.size());
      const uint32_t node_gcd = NodeGcd(problem.cluster, order);
      for (uint32_t sp : sps) {
        if (node_gcd % sp != 0) {
          stats.Reject("SP degree does not divide the GPUs of every node (SP stays inside a node)");
          continue;
        }
        if (!ModelAllowsTp(problem.model, sp)) {
          stats.Reject("SP degree does not divide the model's attention or key/value heads");
          continue;
        }
        const uint32_t dp = N / sp;
        if (G % dp != 0) {
          stats.Reject("global batch not divisible by the DP degree");
          continue;
        }
        for (uint32_t b : MicroBatchCandidates(G / dp, requested_b, bmax)) {
          const uint32_t m = G / (dp * b);
          for (uint32_t z : zeros) {
            // The cheapest recomputation that fits: with everything else fixed, more recomputation only
            // adds time.
            for (proto::Recompute rc : policies) {
              proto::Plan plan = MegatronLayout(order, dp, sp, 1, {{0, L}}, b, m);
              plan.set_zero_stage(z);
              SetRecompute(&plan, rc, problem.training);
              if (sp > 1) plan.set_sequence_parallel(true);
              const std::string what = "dp=" + std::to_string(dp) + " sp=" + std::to_string(sp) +
                                       " b=" + std::to_string(b) + " m=" + std::to_string(m) +
                                       " zero=" + std::to_string(z) + " recompute=" + RecomputeName(rc);
              if (std::isfinite(best.Consider(std::move(plan), what))) break;
            }
          }
        }
      }
    });
    return best.Finish(name_, "ZeRO data parallelism needs the global batch divisible by the number of replicas");
  }

 private:
  std::string name_;
  std::vector<uint32_t> default_zeros_, default_sps_;
  std::string offload_;  // the framework's CPU offload, which hetsim does not model
};

}  // namespace

std::unique_ptr<Planner> NewDeepSpeedPlanner() {
  // zero_optimization.stage 0-3. Ties keep the earlier candidate, and stage 0 ties with stage 1 on a single
  // replica, so it comes last.
  return std::make_unique<ZeroPlanner>(
      "deepspeed", std::vector<uint32_t>{1, 2, 3, 0}, std::vector<uint32_t>{1, 2, 4, 8},
      "CPU offload of the optimizer state (ZeRO-Offload, offload_optimizer: {device: cpu}; not modelled by hetsim)");
}

std::unique_ptr<Planner> NewFsdpPlanner() {
  // ShardingStrategy FULL_SHARD (FSDP's default, first so that it wins ties), SHARD_GRAD_OP, NO_SHARD.
  return std::make_unique<ZeroPlanner>(
      "fsdp", std::vector<uint32_t>{3, 2, 0}, std::vector<uint32_t>{1},
      "CPU offload of the parameters (CPUOffload(offload_params=True); not modelled by hetsim)");
}

}  // namespace hetsim::planners::zero
