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
    // Galvatron's profiler measures the layers on the GPU it runs on and its cost model and layer balancing
    // assume every GPU is that one (a homogeneous-cluster design): on a heterogeneous cluster its stages are
    // balanced for the first GPU type, which HexiScale §5.2 observes as "additional bubbles due to
    // imbalanced computation across pipeline stages". On a subset of machines, the subset's first GPU.
    CostModelOptions view;
    ViewFor subset_view;
    if (!o.hetero_aware()) {
      view.assume_gpu = problem.cluster.device(0).gpu;
      subset_view = [&problem](const std::vector<uint32_t>& devices) {
        RankingView v;
        v.assume_gpu = *problem.cluster.device(devices[0]).gpu;
        return v;
      };
    }
    const AnalyticCostModel ranking(problem, view);
    return SearchBalancedSymmetric(name(), problem, ranking, space, subset_view);
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<GalvatronPlanner>();
}

}  // namespace hetsim::planners::galvatron
