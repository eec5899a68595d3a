#include "planners/galvatron/galvatron.h"

#include "planners/proto/galvatron.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::galvatron {
namespace {

class GalvatronPlanner : public PlannerWithOptions<proto::GalvatronOptions> {
 public:
  std::string name() const override { return "galvatron"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const auto& o = options_;
    SymmetricSearch space;
    space.tp_degrees.assign(o.tp_degrees().begin(), o.tp_degrees().end());
    space.pp_degrees.assign(o.pp_degrees().begin(), o.pp_degrees().end());
    space.micro_batch_sizes.assign(o.micro_batch_sizes().begin(), o.micro_batch_sizes().end());
    space.zero_stages = o.zero_stages().empty() ? std::vector<uint32_t>{1, 3}
                                                : std::vector<uint32_t>(o.zero_stages().begin(), o.zero_stages().end());
    if (o.max_micro_batch_size() > 0) space.max_micro_batch_size = o.max_micro_batch_size();
    space.sequence_parallel = o.has_sequence_parallel() ? o.sequence_parallel() : true;
    // Galvatron-BMW checkpoints layer by layer; a plan has one policy, so checkpointing is whole-model on or
    // off (--global_checkpoint).
    space.recompute = RecomputeCandidates(problem, RecomputeList(o.recompute()),
                                          {proto::RECOMPUTE_NONE, proto::RECOMPUTE_FULL}, nullptr);
    // Galvatron's profiler measures the layers on the GPU it runs on, and its cost model balances the layers
    // of the stages as if every GPU were that one (a homogeneous-cluster design): on unlike GPUs the stages
    // are balanced for the first GPU type, the "additional bubbles due to imbalanced computation across
    // pipeline stages" HexiScale §5.2 measures. The degrees themselves HexiScale fine-tuned on the real
    // cluster (Appendix C.2), so candidates are ranked on the real GPUs.
    space.balance_as_first_gpu = !o.hetero_aware();
    const AnalyticCostModel ranking(problem);
    return SearchBalancedSymmetric(name(), problem, ranking, space);
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<GalvatronPlanner>();
}

}  // namespace hetsim::planners::galvatron
