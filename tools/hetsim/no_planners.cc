// Built instead of plan_commands.cc when the planners room is left out (HETSIM_SKIP_ROOMS).
#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> PlannerCommands() { return {}; }
std::vector<Command> RunCommands() { return {}; }
std::vector<std::pair<std::string, std::string>> ListPlanners() { return {}; }
Result<proto::Plan> PlanWithPlanner(const std::string&, const std::string&, const std::string&, const models::Cluster&,
                                    const models::TransformerModel&, const proto::Training&, int, int,
                                    std::vector<std::string>*) {
  return Status::Invalid("--planner: this build leaves the planners room out");
}
Result<std::string> ValidateExperiment(const std::string& path) {
  return Status::Invalid(path + ": experiments need the planners room, which this build leaves out");
}

}  // namespace hetsim::cli
