#include "tools/hetsim/process.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

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

std::vector<std::string> MpirunPrefix(const std::string& mpirun_cmd, int ranks) {
  std::vector<std::string> argv;
  std::istringstream in(mpirun_cmd.empty() ? "mpirun" : mpirun_cmd);
  for (std::string w; in >> w;) argv.push_back(w);
  argv.push_back("--oversubscribe");
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.push_back("-np");
  argv.push_back(std::to_string(ranks));
  return argv;
}

Result<int> RunChild(const std::vector<std::string>& argv, const std::string& log_path) {
  if (argv.empty()) return Status::Invalid("RunChild: empty command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Internal("fork() failed for " + argv[0]);
  if (pid == 0) {
    models::TieToParent(parent);
    ::close(STDIN_FILENO);
    if (!log_path.empty()) {
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) ::dup2(fd, STDOUT_FILENO), ::dup2(fd, STDERR_FILENO), ::close(fd);
    }
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "hetsim: cannot run %s (is it installed and on PATH?)\n", args[0]);
    std::_Exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::Internal("waitpid() failed for " + argv[0]);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string FindPlotDir() {
  if (const char* env = std::getenv("HETSIM_PLOT_DIR")) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    if (fs::exists(dir / "tools/plot/figures.py")) return (dir / "tools/plot").string();
  }
  return "tools/plot";
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string JoinArgs(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace hetsim::cli
