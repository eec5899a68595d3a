// Placeholder until the room's commands land.
#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> PlannerCommands() { return {}; }

}  // namespace hetsim::cli
