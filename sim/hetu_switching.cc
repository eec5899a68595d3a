#include "sim/hetu_switching.h"

#include <map>

namespace hetsim::sim {

namespace hs = models::hspmd;

double SwitchBytesPerParam(const HetuSwitchOptions& options, const proto::Training& training) {
  if (options.bytes_per_param > 0) return options.bytes_per_param;
  // As models::EstimateMemory counts weights and optimizer state (gradients are recomputed by the next step).
  return models::DTypeBytes(training.dtype()) + models::OptimizerBytesPerParam(training);
}

hs::SwitchPlan PlanHetuSwitch(const proto::Plan& from, const std::vector<uint32_t>& from_place, const proto::Plan& to,
                              const std::vector<uint32_t>& to_place, const models::TransformerModel& model,
                              const proto::Training& training, const models::Cluster& cluster,
                              const std::set<uint32_t>& lost, const HetuSwitchOptions& options) {
  const double bpp = SwitchBytesPerParam(options, training);
  const models::Topology topo(cluster);
  hs::BsrOptions bsr;
  bsr.heuristics = options.heuristics;
  bsr.topology = &topo;
  bsr.lost = lost;
  return hs::PlanSwitch(hs::WeightTensors(from, model, bpp, from_place), hs::WeightTensors(to, model, bpp, to_place),
                        options.fused, bsr);
}

std::vector<Transfer> SwitchTransfers(const std::vector<hs::Send>& sends) {
  std::vector<Transfer> t;
  for (const auto& s : sends) {
    if (s.from != s.to && s.bytes > 0) t.push_back({{Endpoint::kGpu, s.from}, {Endpoint::kGpu, s.to}, s.bytes});
  }
  return t;
}

Result<double> SimulateSwitch(const hs::SwitchPlan& plan, const models::Cluster& cluster, const std::string& calibration) {
  double total = 0;
  for (const auto& round : plan.rounds) {
    const auto t = SwitchTransfers(round);
    if (t.empty()) continue;
    HETSIM_ASSIGN_OR_RETURN(double s, SimulateTransfers(t, cluster, calibration));
    total += s;
  }
  return total;
}

std::vector<SenderVolume> VolumesBySender(const hs::SwitchPlan& plan, const models::Cluster& cluster) {
  std::map<uint32_t, SenderVolume> by;
  for (const auto& round : plan.rounds) {
    for (const auto& s : round) {
      if (s.from == s.to) continue;
      auto& v = by[s.from];
      v.device = s.from;
      (cluster.device(s.from).node == cluster.device(s.to).node ? v.intra_node_bytes : v.inter_node_bytes) += s.bytes;
    }
  }
  std::vector<SenderVolume> out;
  for (const auto& [d, v] : by) out.push_back(v);
  return out;
}

}  // namespace hetsim::sim
