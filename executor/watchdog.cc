#include "executor/watchdog.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace hetsim::executor {

Watchdog::Watchdog(int rank, double timeout_s) : rank_(rank), timeout_s_(timeout_s) {
  last_.store(Now());
  last_wall_.store(WallNow());
  if (timeout_s_ > 0) thread_ = std::thread([this] { Watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Share(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  dir_ = dir;
}

// "<written ms> <last progress ms> <step> <operation> <what>" (wall clock, milliseconds since the epoch), written
// beside the file and renamed over it, so a reader never sees half a line.
void Watchdog::WriteHeartbeat() {
  if (dir_.empty()) return;
  const std::string path = dir_ + "/rank-" + std::to_string(rank_);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return;
    f << WallNow() << ' ' << last_wall_.load() << ' ' << step_.load() << ' ' << op_.load() << ' ' << what_.load()
      << '\n';
    if (!f) return;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
}

std::string Watchdog::Culprits(const std::string& dir, int self, int64_t now_ms, double timeout_s) {
  struct Heart {
    int64_t written = 0, progress = 0, op = -1;
    uint32_t step = 0;
    std::string what;
  };
  std::map<int, Heart> hearts;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || name.find('.') != std::string::npos) continue;
    int rank = -1;
    try {
      rank = std::stoi(name.substr(5));
    } catch (...) {
      continue;
    }
    if (rank == self) continue;
    std::ifstream f(entry.path());
    Heart h;
    if (!(f >> h.written >> h.progress >> h.step >> h.op)) continue;
    std::getline(f >> std::ws, h.what);
    hearts[rank] = h;
  }
  const auto at = [](const Heart& h) {
    return " (operation " + std::to_string(h.op) + " of step " + std::to_string(h.step) + ")";
  };
  char secs[32];
  std::ostringstream stopped, stuck;
  for (const auto& [rank, h] : hearts) {
    const double silent = static_cast<double>(now_ms - h.written) / 1000;
    const double idle = static_cast<double>(now_ms - h.progress) / 1000;
    if (silent >= StaleHeartbeatS(timeout_s)) {
      std::snprintf(secs, sizeof(secs), "%.0f", silent);
      stopped << "hetsim-exec: rank " << rank << " stopped: no heartbeat for " << secs
              << " s (killed, suspended or crashed); it was in " << h.what << at(h) << "\n";
    } else if (idle >= timeout_s) {
      std::snprintf(secs, sizeof(secs), "%.0f", idle);
      stuck << "hetsim-exec: rank " << rank << " runs but made no progress for " << secs << " s in " << h.what
            << at(h) << "\n";
    }
  }
  // A stopped rank explains the others' waits; without one, the ranks stuck the longest are the lead.
  return stopped.str().empty() ? stuck.str() : stopped.str();
}

void Watchdog::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(500));
    if (stop_) break;
    WriteHeartbeat();
    const double idle = static_cast<double>(Now() - last_.load(std::memory_order_acquire)) / 1000;
    if (idle < timeout_s_) continue;
    const int64_t peer = peer_.load(), op = op_.load();
    char peer_text[48] = "";
    if (peer >= 0) std::snprintf(peer_text, sizeof(peer_text), " with rank %lld", static_cast<long long>(peer));
    std::fprintf(stderr,
                 "hetsim-exec: rank %d: no progress for %.0f s in %s%s (operation %lld of step %u): a peer rank "
                 "stopped or hangs; ending the job (--timeout-s sets the limit)\n",
                 rank_, idle, what_.load(), peer_text, static_cast<long long>(op), step_.load());
    if (!dir_.empty()) {
      std::fputs(Culprits(dir_, rank_, WallNow(), timeout_s_).c_str(), stderr);
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);  // the job ends here: nobody else removes it
    }
    std::fflush(stderr);
    // mpirun sees a rank exit non-zero and ends the others.
    ::_exit(124);
  }
}

}  // namespace hetsim::executor
