// A rank that waits forever for a peer that stopped (killed, hung in a kernel, a lost message) would hang the
// whole job: the watchdog ends it instead, saying which rank waited for what.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace hetsim::executor {

class Watchdog {
 public:
  // No thread when timeout_s is 0.
  Watchdog(int rank, double timeout_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The rank is about to run `what` (a static string) with `peer` (-1: none), operation `op` of the step.
  void Beat(const char* what, int64_t peer, int64_t op, uint32_t step) {
    what_.store(what, std::memory_order_relaxed);
    peer_.store(peer, std::memory_order_relaxed);
    op_.store(op, std::memory_order_relaxed);
    step_.store(step, std::memory_order_relaxed);
    last_.store(Now(), std::memory_order_release);
  }

 private:
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void Watch();

  int rank_;
  double timeout_s_;
  std::atomic<int64_t> last_{0};
  std::atomic<const char*> what_{"start-up"};
  std::atomic<int64_t> peer_{-1}, op_{-1};
  std::atomic<uint32_t> step_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hetsim::executor
