// Placeholder until the room's commands land.
#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> SimCommands() { return {}; }

}  // namespace hetsim::cli
