#include "planners/milp.h"

#include <coin/Cbc_C_Interface.h>

#include <chrono>
#include <cstdlib>
#include <cmath>
#include <memory>

namespace hetsim::planners {

int Milp::AddVar(double lb, double ub, double objective, bool integer) {
  lb_.push_back(lb);
  ub_.push_back(ub);
  obj_.push_back(objective);
  integer_.push_back(integer);
  return static_cast<int>(lb_.size()) - 1;
}

void Milp::AddRow(const std::vector<std::pair<int, double>>& terms, double lo, double hi) {
  rows_.push_back({terms, lo, hi});
}

void Milp::SetBounds(int var, double lb, double ub) {
  lb_[static_cast<size_t>(var)] = lb;
  ub_[static_cast<size_t>(var)] = ub;
}

Result<MilpSolution> Milp::Solve(double time_limit_s) const {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(lb_.size());
  // Column-major matrix for Cbc_loadProblem; CBC's infinity is COIN_DBL_MAX, not IEEE infinity.
  auto finite = [](double v) {
    return std::isinf(v) ? (v > 0 ? std::numeric_limits<double>::max() : -std::numeric_limits<double>::max()) : v;
  };
  std::vector<std::vector<std::pair<int, double>>> cols(static_cast<size_t>(n));
  std::vector<double> row_lo, row_hi;
  for (size_t r = 0; r < rows_.size(); ++r) {
    for (const auto& [var, coef] : rows_[r].terms) {
      if (var < 0 || var >= n) return Status::Internal("milp: row " + std::to_string(r) + " names variable " + std::to_string(var));
      if (coef != 0) cols[static_cast<size_t>(var)].push_back({static_cast<int>(r), coef});
    }
    row_lo.push_back(finite(rows_[r].lo));
    row_hi.push_back(finite(rows_[r].hi));
  }
  std::vector<int> start{0}, index;
  std::vector<double> value;
  for (const auto& c : cols) {
    for (const auto& [r, v] : c) {
      index.push_back(r);
      value.push_back(v);
    }
    start.push_back(static_cast<int>(index.size()));
  }
  std::vector<double> lb, ub;
  for (int i = 0; i < n; ++i) {
    lb.push_back(finite(lb_[static_cast<size_t>(i)]));
    ub.push_back(finite(ub_[static_cast<size_t>(i)]));
  }
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> model(Cbc_newModel(), Cbc_deleteModel);
  Cbc_loadProblem(model.get(), n, static_cast<int>(rows_.size()), start.data(), index.data(), value.data(), lb.data(),
                  ub.data(), obj_.data(), row_lo.data(), row_hi.data());
  for (int i = 0; i < n; ++i) {
    if (integer_[static_cast<size_t>(i)]) Cbc_setInteger(model.get(), i);
  }
  Cbc_setObjSense(model.get(), sense_ == kMaximize ? -1 : 1);
  Cbc_setLogLevel(model.get(), 0);
  Cbc_setParameter(model.get(), "threads", "1");  // deterministic
  if (!preprocess_) Cbc_setParameter(model.get(), "preprocess", "off");
  if (!cuts_) Cbc_setParameter(model.get(), "cuts", "off");
  if (!heuristics_) Cbc_setParameter(model.get(), "heuristics", "off");
  if (time_limit_s > 0) Cbc_setMaximumSeconds(model.get(), time_limit_s);
  Cbc_setAllowableGap(model.get(), 1e-9);
  Cbc_setAllowableFractionGap(model.get(), 1e-9);
  if (std::getenv("HETSIM_MILP_DUMP")) Cbc_writeLp(model.get(), std::getenv("HETSIM_MILP_DUMP"));
  Cbc_solve(model.get());

  MilpSolution s;
  s.nodes = static_cast<uint64_t>(std::max(0, Cbc_getNodeCount(model.get())));
  const double* x = Cbc_getColSolution(model.get());
  const bool has = x != nullptr && !Cbc_isProvenInfeasible(model.get()) && Cbc_bestSolution(model.get()) != nullptr;
  if (Cbc_isProvenOptimal(model.get())) {
    s.outcome = MilpSolution::kOptimal;
  } else if (Cbc_isProvenInfeasible(model.get())) {
    s.outcome = MilpSolution::kInfeasible;
  } else {
    s.outcome = has ? MilpSolution::kFeasible : MilpSolution::kNoSolution;
  }
  if (s.has_solution()) {
    const double* best = Cbc_bestSolution(model.get());
    if (best == nullptr) best = x;
    s.values.assign(best, best + n);
    // Integers come back as 2.9999999: round them.
    for (int i = 0; i < n; ++i) {
      if (integer_[static_cast<size_t>(i)]) s.values[static_cast<size_t>(i)] = std::round(s.values[static_cast<size_t>(i)]);
    }
    s.objective = 0;
    for (int i = 0; i < n; ++i) s.objective += obj_[static_cast<size_t>(i)] * s.values[static_cast<size_t>(i)];
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace hetsim::planners
