#include "executor/watchdog.h"

#include <unistd.h>

#include <cstdio>

namespace hetsim::executor {

Watchdog::Watchdog(int rank, double timeout_s) : rank_(rank), timeout_s_(timeout_s) {
  last_.store(Now());
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

void Watchdog::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(500));
    if (stop_) break;
    const double idle = static_cast<double>(Now() - last_.load(std::memory_order_acquire)) / 1000;
    if (idle < timeout_s_) continue;
    const int64_t peer = peer_.load(), op = op_.load();
    char peer_text[48] = "";
    if (peer >= 0) std::snprintf(peer_text, sizeof(peer_text), " with rank %lld", static_cast<long long>(peer));
    std::fprintf(stderr,
                 "hetsim-exec: rank %d: no progress for %.0f s in %s%s (operation %lld of step %u): a peer rank "
                 "stopped or hangs; ending the job (--timeout-s sets the limit)\n",
                 rank_, idle, what_.load(), peer_text, static_cast<long long>(op), step_.load());
    std::fflush(stderr);
    // mpirun sees a rank exit non-zero and ends the others.
    ::_exit(124);
  }
}

}  // namespace hetsim::executor
