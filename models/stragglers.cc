#include "models/stragglers.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

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
  // One pass over the plan's devices: the nodes they occupy and their GPU types (few: the calibration's
  // value is looked up once per type, not per device).
  StragglerWait w;
  w.data_parallel = plan.pipelines_size() > 1;
  std::vector<bool> occupied(cluster.nodes().size(), false);
  std::vector<const GpuSpec*> types;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      w.data_parallel = w.data_parallel || DpDegree(st) > 1;
      for (uint32_t d : st.devices()) {
        if (d >= cluster.num_devices()) continue;
        const DeviceInfo& dev = cluster.device(d);
        if (!occupied[dev.node]) {
          occupied[dev.node] = true;
          ++w.nodes;
        }
        if (std::find(types.begin(), types.end(), dev.gpu) == types.end()) types.push_back(dev.gpu);
      }
    }
  }
  for (const GpuSpec* gpu : types) w.cv = std::max(w.cv, cost.StragglerCv(*gpu));
  if (w.nodes > 1 && iteration_s > 0 && w.cv > 0) {
    w.seconds = w.cv * iteration_s * ExpectedMaxOfStandardNormals(w.nodes);
  }
  return w;
}

}  // namespace hetsim::models
