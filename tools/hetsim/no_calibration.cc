// Without the calibration room (HETSIM_SKIP_ROOMS): no `hetsim calibrate`.
#include <ostream>

#include "tools/hetsim/cli.h"

namespace hetsim::cli {

std::vector<Command> CalibrationCommands() { return {}; }

int RunValidateExecutor(const po::variables_map&, std::ostream&, std::ostream& err) {
  err << "hetsim validate-sim --executor: this build has no executor (needs MPI; the calibration room was left out)\n";
  return 1;
}

}  // namespace hetsim::cli
