// Without the traces or planners room (HETSIM_SKIP_ROOMS): no `hetsim replay`.
#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> ReplayCommands() { return {}; }

}  // namespace hetsim::cli
