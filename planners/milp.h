// A small mixed-integer linear program and its exact solution by COIN-OR CBC (branch and cut): for the
// planners whose papers pose their search as an integer program (AutoHet eq. 3 and eq. 4).
//
//   Milp p(Milp::kMaximize);
//   const int x = p.AddVar(0, 4, 3.0, true);   // integer 0 ≤ x ≤ 4, objective coefficient 3
//   p.AddRow({{x, 1.0}}, -kMilpInf, 2.5);       // x ≤ 2.5
//   auto s = p.Solve(10);                       // s->values[x] == 2, s->objective == 6
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "models/status.h"

namespace hetsim::planners {

inline constexpr double kMilpInf = std::numeric_limits<double>::infinity();

struct MilpSolution {
  enum Outcome : uint8_t {
    kOptimal,     // proven optimal
    kFeasible,    // a solution, optimality not proven before the time limit
    kInfeasible,  // proven to have no solution
    kNoSolution,  // the time limit passed without a solution
  };
  Outcome outcome = kNoSolution;
  std::vector<double> values;  // per variable (kOptimal, kFeasible)
  double objective = 0;
  uint64_t nodes = 0;          // branch-and-bound nodes
  double seconds = 0;
  bool has_solution() const { return outcome == kOptimal || outcome == kFeasible; }
};

class Milp {
 public:
  enum Sense : uint8_t { kMinimize, kMaximize };
  explicit Milp(Sense sense) : sense_(sense) {}

  // A variable lb ≤ x ≤ ub (either may be ±kMilpInf) with objective coefficient `objective`; returns its
  // index.
  int AddVar(double lb, double ub, double objective, bool integer);
  // lo ≤ Σ coef·x ≤ hi (lo = -kMilpInf or hi = kMilpInf for one-sided rows; lo = hi for equalities).
  void AddRow(const std::vector<std::pair<int, double>>& terms, double lo, double hi);
  // Fixes a variable's bounds after it was added.
  void SetBounds(int var, double lb, double ub);
  // CBC's preprocessing (CglPreProcess: probing, duplicate and dominated columns, its own presolve) is on by
  // default. It may change which of several optimal solutions CBC returns, never whether a program is
  // feasible or its optimum; on programs of many columns and few rows (AutoHet eq. 3) it is most of CBC's time.
  void set_preprocess(bool on) { preprocess_ = on; }
  // CBC's cut generators and primal heuristics (on by default): the same holds for them.
  void set_cuts(bool on) { cuts_ = on; }
  void set_heuristics(bool on) { heuristics_ = on; }

  size_t num_vars() const { return lb_.size(); }
  size_t num_rows() const { return rows_.size(); }

  // Solves with CBC, at most `time_limit_s` seconds (0: no limit). Errors only for a malformed program.
  Result<MilpSolution> Solve(double time_limit_s) const;

 private:
  struct Row {
    std::vector<std::pair<int, double>> terms;
    double lo, hi;
  };
  Sense sense_;
  bool preprocess_ = true;
  bool cuts_ = true;
  bool heuristics_ = true;
  std::vector<double> lb_, ub_, obj_;
  std::vector<bool> integer_;
  std::vector<Row> rows_;
};

}  // namespace hetsim::planners
