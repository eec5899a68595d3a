// A rank that waits forever for a peer that stopped (killed, hung in a kernel, a lost message) would hang the
// whole job: the watchdog ends it instead, saying which rank waited for what and which rank stopped.
//
// Naming the stopped rank: every rank's watchdog thread writes a heartbeat file (Share: a folder all ranks
// see) twice a second with its last progress. The rank that times out reads them all: a rank whose heartbeat
// is stale (StaleHeartbeatS) is stopped (killed, suspended, crashed: its watchdog thread no longer runs); a
// rank whose heartbeat is fresh but whose progress is as old as the timeout hangs where its file says. The
// rank that timed out removes the folder before it ends the job.
#pragma once

#include <algorithm>
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
    last_wall_.store(WallNow(), std::memory_order_relaxed);
    last_.store(Now(), std::memory_order_release);
  }

  // Heartbeats go to (and are read from) `dir`, which every rank of the job sees; "" stops writing them.
  void Share(const std::string& dir);

  // A heartbeat older than this (seconds; written every 0.5 s) means the rank's process does not run: four
  // missed beats, but under 0.6 of the timeout (a rank stopped when the waiting one last progressed has
  // been silent about the timeout when the waiting one gives up), and at least 1 s.
  static double StaleHeartbeatS(double timeout_s) { return std::max(1.0, std::min(2.0, 0.6 * timeout_s)); }

  // What the heartbeat files in `dir` say about the ranks other than `self` at wall time `now_ms`: one line
  // per stopped rank (stale heartbeat), else per rank without progress for `timeout_s`; empty if none.
  static std::string Culprits(const std::string& dir, int self, int64_t now_ms, double timeout_s);

  static int64_t WallNow() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

 private:
  static int64_t Now() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void Watch();
  void WriteHeartbeat();

  int rank_;
  double timeout_s_;
  std::atomic<int64_t> last_{0}, last_wall_{0};
  std::string dir_;  // heartbeats (guarded by mu_)
  std::atomic<const char*> what_{"start-up"};
  std::atomic<int64_t> peer_{-1}, op_{-1};
  std::atomic<uint32_t> step_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace hetsim::executor
