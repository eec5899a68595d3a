// Without the traces or planners room (HETSIM_SKIP_ROOMS): no `hetsim replay`.
#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> ReplayCommands() { return {}; }
std::vector<Command> AdviseCommands() { return {}; }
Result<std::string> ValidateAdviseConfig(const std::string& path) {
  return Status::Invalid(path + ": `hetsim advise` needs the traces and planners rooms (HETSIM_SKIP_ROOMS)");
}

}  // namespace hetsim::cli
