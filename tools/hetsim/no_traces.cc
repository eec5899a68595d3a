// Without the traces room (HETSIM_SKIP_ROOMS): no `hetsim trace`, and trace files do not validate.
#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> TraceCommands() { return {}; }

Result<std::string> ValidateTraceFile(const std::string& path) {
  return Status::Invalid(path + ": this build has no traces room (HETSIM_SKIP_ROOMS)");
}

}  // namespace hetsim::cli
