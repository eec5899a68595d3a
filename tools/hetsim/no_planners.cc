// Built instead of plan_commands.cc when the planners room is left out (HETSIM_SKIP_ROOMS).
#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> PlannerCommands() { return {}; }

}  // namespace hetsim::cli
