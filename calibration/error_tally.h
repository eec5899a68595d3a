// The error tally every validation reports (validate-sim's measured runs, its plan-file runs and its executor
// comparisons): relative errors (simulated − measured) / measured, summarised as MAPE, bias and the worst.
// Header-only: the command line uses it whichever rooms are built.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace hetsim::calibration {

class ErrorTally {
 public:
  void Add(double relative_error) {
    ++n_;
    abs_sum_ += std::fabs(relative_error);
    sum_ += relative_error;
    worst_ = std::fmax(worst_, std::fabs(relative_error));
  }
  int count() const { return n_; }
  // Mean absolute and mean signed relative error, and the largest absolute one (0 with no runs).
  double mape() const { return n_ > 0 ? abs_sum_ / n_ : 0; }
  double bias() const { return n_ > 0 ? sum_ / n_ : 0; }
  double worst() const { return worst_; }
  // "  12 runs  MAPE    5.2%  bias   +3.0%", as validate-sim prints each tally.
  std::string Line(const char* unit = "runs") const {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%4d %s  MAPE %6.1f%%  bias %+6.1f%%", n_, unit, 100 * mape(), 100 * bias());
    return buf;
  }

 private:
  int n_ = 0;
  double abs_sum_ = 0, sum_ = 0, worst_ = 0;
};

// The bookkeeping every report over a runs file shares: the development half (the even data rows, the part
// fits may use) and the held-out half (the odd ones), all runs, and the runs that did not simulate.
struct HalvesTally {
  std::vector<bool> development;                    // per attempted run: in the development half
  ErrorTally development_half, held_out_half, all;  // iteration time
  size_t failed = 0;
  std::vector<std::string> failures;                // "FILE:LINE: not simulated: why"

  // Records the i-th attempted run (0-based, in file order): when it simulated (`ok`), its relative error in
  // its half and in all, else a failure saying `error`. Returns whether it is in the development half.
  bool Record(size_t i, const std::string& file, int line, bool ok, const std::string& error, double relative_error) {
    const bool dev = i % 2 == 0;
    development.push_back(dev);
    if (!ok) {
      ++failed;
      failures.push_back(file + ":" + std::to_string(line) + ": not simulated: " + error);
      return dev;
    }
    (dev ? development_half : held_out_half).Add(relative_error);
    all.Add(relative_error);
    return dev;
  }
};

}  // namespace hetsim::calibration
