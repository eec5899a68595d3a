#include "planners/metis/metis.h"

#include "planners/metis/internal.h"
#include "planners/proto/metis.pb.h"

namespace hetsim::planners::metis {
namespace {

class MetisPlanner : public PlannerWithOptions<proto::MetisOptions> {
 public:
  std::string name() const override { return "metis"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const Knobs knobs = KnobsFrom(options_);
    PlannerResult out;
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
