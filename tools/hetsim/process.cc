#include "tools/hetsim/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "models/child_process.h"

namespace hetsim::cli {

namespace fs = std::filesystem;

Result<std::string> SiblingBinary(const std::string& name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path p = self.parent_path() / name;
  if (ec || !fs::exists(p)) {
    return Status::Invalid(name + " was not found beside hetsim (" + self.parent_path().string() +
                           "); it is built with the executor (needs MPI: `bash tools/bootstrap.sh`, then rebuild)");
  }
  return p.string();
}

Result<int> RunChild(const std::vector<std::string>& argv, const std::string& log_path) {
  return models::RunProgram(argv, log_path);
}

std::string FindPlotDir() { return models::PlotDir(); }


}  // namespace hetsim::cli
