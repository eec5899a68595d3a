#include "planners/metis/metis.h"

#include "planners/metis/internal.h"
#include "planners/proto/metis.pb.h"

namespace hetsim::planners::metis {
namespace {

class MetisPlanner : public PlannerWithOptions<proto::MetisOptions> {
 public:
  std::string name() const override { return "metis"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    Knobs knobs = KnobsFrom(options_);
    PlannerResult out;
    if (BlockClasses(problem.model).size() > 1) {
      // The bound (not in the paper) prices a stage's blocks like its first: with unlike blocks it could cut
      // the best plan, so it is off (the search is exact either way, only slower).
      knobs.use_bound = false;
      out.stats.notes.push_back("blocks of several classes (" + problem.model.name() +
                                "): the search runs without its lower bound");
    }
    HETSIM_ASSIGN_OR_RETURN(SearchResult found, Search(problem, knobs, out.stats));
    out.plan = std::move(*found.plan);
    out.cost_s = found.cost_s;
    out.alternatives = std::move(found.alternatives);
    char buf[96];
    std::snprintf(buf, sizeof buf, "eq. 1 cost of the chosen plan (Metis's own estimate): %.4f s", found.cost_s);
    out.stats.notes.push_back(buf);
    return out;
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<MetisPlanner>();
}

}  // namespace hetsim::planners::metis
