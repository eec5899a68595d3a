#include "models/stragglers.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include <boost/math/distributions/normal.hpp>
#include <boost/math/quadrature/gauss_kronrod.hpp>

#include "models/plan.h"

namespace hetsim::models {

double ExpectedMaxOfStandardNormals(uint32_t n) {
  if (n <= 1) return 0;
  static std::mutex mu;
  static std::map<uint32_t, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(n); it != cache.end()) return it->second;
  // E[max] = ∫_0^∞ (1 − Φ(x)^n) dx − ∫_−∞^0 Φ(x)^n dx; both integrands vanish beyond |x| = 12 in
  // double.
  const boost::math::normal_distribution<double> z;
  const double nn = n;
  const auto upper = [&](double x) { return 1 - std::pow(boost::math::cdf(z, x), nn); };
  const auto lower = [&](double x) { return std::pow(boost::math::cdf(z, x), nn); };
  using Gk = boost::math::quadrature::gauss_kronrod<double, 61>;
  const double e = Gk::integrate(upper, 0.0, 12.0, 15, 1e-12) - Gk::integrate(lower, -12.0, 0.0, 15, 1e-12);
  cache.emplace(n, e);
  return e;
}

StragglerWait StragglerWaitFor(const proto::Plan& plan, const Cluster& cluster, const ComputeCost& cost,
                               double iteration_s) {
  StragglerWait w;
  std::set<uint32_t> nodes;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) {
        if (d < cluster.num_devices()) nodes.insert(cluster.device(d).node);
      }
    }
  }
  w.nodes = static_cast<uint32_t>(nodes.size());
  w.data_parallel = false;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) w.data_parallel |= plan.pipelines_size() > 1 || DpDegree(st) > 1;
  }
  if (w.nodes <= 1 || !(iteration_s > 0)) return w;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) {
        if (d < cluster.num_devices()) w.cv = std::max(w.cv, cost.StragglerCv(*cluster.device(d).gpu));
      }
    }
  }
  if (w.cv > 0) w.seconds = w.cv * iteration_s * ExpectedMaxOfStandardNormals(w.nodes);
  return w;
}

}  // namespace hetsim::models
