#include "planners/hexiscale/cost.h"

#include <algorithm>
#include <limits>

#include "models/nccl.h"
#include "models/plan.h"

namespace hetsim::planners::hexiscale {
namespace {

// All-reduces of one transformer block per micro-batch: Megatron-LM's 2 in the forward and 2 in the
// backward pass, and the 2 of the forward again when the backward recomputes it.
double BlockAllReduces(proto::Recompute recompute) {
  return recompute == proto::RECOMPUTE_FULL ? 6 : 4;
}

}  // namespace

AppendixACost::AppendixACost(const PlanningProblem& problem)
    : cluster_(problem.cluster),
      model_(problem.model),
      training_(problem.training),
      compute_(problem.model, problem.training, problem.profiles, problem.compute),
      topology_(problem.cluster),
      recompute_(problem.training.recompute()),
      blocks_(problem.model) {
  const auto& nodes = cluster_.nodes();
  if (nodes.size() <= kLinkTableNodes) {
    node_links_.resize(nodes.size() * nodes.size());
    for (uint32_t a = 0; a < nodes.size(); ++a) {
      for (uint32_t b = 0; b < nodes.size(); ++b) {
        const uint32_t x = nodes[a].first_device;
        if (a == b && nodes[a].num_gpus < 2) continue;  // no pair on a one-GPU machine
        node_links_[a * nodes.size() + b] = topology_.Between(x, a == b ? x + 1 : nodes[b].first_device);
        if (a != b) node_links_[a * nodes.size() + b].bandwidth_bytes_s *= CollectiveNetEfficiency(a, b);
      }
    }
  }
}

double AppendixACost::CollectiveNetEfficiency(uint32_t a, uint32_t b) const {
  if (compute_.options().model != models::ComputeModel::kKernel) return 1;
  const auto& na = cluster_.node(a);
  const auto& nb = cluster_.node(b);
  if (!na.has_nic || !nb.has_nic) return 1;
  const std::string& cal = compute_.options().calibration;
  return std::min(models::NetworkParamsFor(na.nic.kind(), cal).bus_efficiency,
                  models::NetworkParamsFor(nb.nic.kind(), cal).bus_efficiency);
}

const models::Link& AppendixACost::NodeLink(uint32_t a, uint32_t b) const {
  const size_t n = cluster_.nodes().size();
  if (!node_links_.empty()) return node_links_[a * n + b];
  const uint32_t x = cluster_.node(a).first_device;
  node_link_scratch_ = topology_.Between(x, a == b ? x + 1 : cluster_.node(b).first_device);
  if (a != b) node_link_scratch_.bandwidth_bytes_s *= CollectiveNetEfficiency(a, b);
  return node_link_scratch_;
}

double AppendixACost::PairSum(std::span<const uint32_t> devices, double bytes_over_n) const {
  // max over x of Σ_{y≠x} (α_xy + bytes/(n·β_xy)); links depend on nodes only, so sum per node.
  const auto& cluster = cluster_;
  std::vector<std::pair<uint32_t, uint32_t>> nodes;  // (node, devices of the set on it), by first appearance
  std::vector<uint32_t>& slot = pair_sum_slot_;     // node -> index in `nodes` + 1 (0: none yet)
  slot.resize(cluster.nodes().size(), 0);
  for (uint32_t d : devices) {
    const uint32_t n = cluster.device(d).node;
    if (slot[n] == 0) {
      nodes.emplace_back(n, 1);
      slot[n] = static_cast<uint32_t>(nodes.size());
    } else {
      ++nodes[slot[n] - 1].second;
    }
  }
  for (const auto& [n, c] : nodes) slot[n] = 0;
  double worst = 0;
  for (const auto& [na, ca] : nodes) {
    double sum = 0;
    for (const auto& [nb, cb] : nodes) {
      const uint32_t others = nb == na ? cb - 1 : cb;
      if (others == 0) continue;
      // Two members on one node (so it has at least two GPUs): its fabric, between its first two.
      const models::Link& l = NodeLink(na, nb);
      sum += others * (l.latency_s + bytes_over_n / l.bandwidth_bytes_s);
    }
    worst = std::max(worst, sum);
  }
  return worst;
}

double AppendixACost::TpBlockSeconds(std::span<const uint32_t> group, double b) const {
  if (group.size() < 2 || b <= 0) return 0;
  const auto& t = training_;
  const double bytes = models::TpAllReduceBytesPerLayer(model_, 1, b, t.seq_len(), t.dtype());
  // Eq. 3: each all-reduce costs 2·max Σ (α + X/(|d|β)); 2·a of them per block (the paper's 12).
  return 2 * BlockAllReduces(recompute_) * PairSum(group, bytes / static_cast<double>(group.size()));
}

double AppendixACost::TpEdgeSeconds(std::span<const uint32_t> group, double b) const {
  if (group.size() < 2 || b <= 0) return 0;
  const auto& t = training_;
  const double bytes = models::TpAllReduceBytesPerLayer(model_, 0, b, t.seq_len(), t.dtype());
  return 2 * 2 * PairSum(group, bytes / static_cast<double>(group.size()));  // one per pass
}

double AppendixACost::DpSeconds(std::span<const uint32_t> holders, double bytes) const {
  if (holders.size() < 2 || bytes <= 0) return 0;
  return 2 * PairSum(holders, bytes / static_cast<double>(holders.size()));
}

models::Link AppendixACost::PpLink(uint32_t a, uint32_t b, uint32_t flows_a, uint32_t flows_b) const {
  models::Link l = topology_.Between(a, b);
  if (l.kind != models::LinkKind::kInterNode) return l;
  // A leader's transfer is one flow: the whole NIC (capped by the GPU's PCIe link), not a per-GPU share.
  auto flow = [&](uint32_t device) {
    const uint32_t n = cluster_.device(device).node;
    const auto& node = cluster_.node(n);
    const double share = topology_.OffNodeBandwidth(n);
    if (node.nic.attachment() == proto::Nic::ATTACHMENT_PER_GPU) return share;
    const double nic = node.nic.bandwidth_gbps() * 1e9 / 8 * std::max<uint32_t>(1, node.nic.count());
    const double pcie = node.fabric.pcie_bandwidth_gbyte_s() > 0 ? node.fabric.pcie_bandwidth_gbyte_s() * 1e9 : kInf;
    return std::min(nic, pcie);
  };
  const double base = std::min(topology_.OffNodeBandwidth(cluster_.device(a).node),
                               topology_.OffNodeBandwidth(cluster_.device(b).node));
  // Between() divides the shares by any oversubscription; keep that factor.
  if (base > 0) {
    l.bandwidth_bytes_s *=
        std::min(flow(a) / std::max<uint32_t>(1, flows_a), flow(b) / std::max<uint32_t>(1, flows_b)) / base;
  }
  return l;
}

double AppendixACost::NicSeconds(uint32_t node, double bytes) const {
  const auto& n = cluster_.node(node);
  if (!n.has_nic || bytes <= 0) return 0;
  const double nic = n.nic.bandwidth_gbps() * 1e9 / 8 * std::max<uint32_t>(1, n.nic.count()) *
                     (n.nic.attachment() == proto::Nic::ATTACHMENT_PER_GPU ? n.num_gpus : 1);
  const double pcie = n.fabric.pcie_bandwidth_gbyte_s() > 0 ? n.fabric.pcie_bandwidth_gbyte_s() * 1e9 * n.num_gpus : kInf;
  const double bw = std::min(nic, pcie);
  return bw > 0 ? bytes / bw : kInf;
}

double AppendixACost::PpHopSeconds(std::span<const uint32_t> from, std::span<const uint32_t> to, double b,
                                   bool leader_broadcast, const std::vector<uint32_t>* sharing) const {
  auto flows = [&](uint32_t device) { return sharing == nullptr ? 1u : (*sharing)[cluster_.device(device).node]; };
  if (from.empty() || to.empty() || b <= 0) return 0;
  const auto& t = training_;
  const double x = models::PipelineBoundaryBytes(model_, b, t.seq_len(), t.dtype());
  const uint32_t tf = static_cast<uint32_t>(from.size()), tt = static_cast<uint32_t>(to.size());
  if (!leader_broadcast) {
    double worst = 0;
    for (uint32_t k = 0; k < tt; ++k) {
      const models::Link l = PpLink(from[k % tf], to[k], flows(from[k % tf]), flows(to[k]));
      worst = std::max(worst, l.latency_s + x / l.bandwidth_bytes_s);
    }
    return 2 * worst;
  }
  // Eq. 5: the best leader pair; links depend on nodes only, so one device per node suffices.
  const auto& cluster = cluster_;
  double best = kInf;
  uint32_t last_from_node = UINT32_MAX;
  for (uint32_t s : from) {
    if (cluster.device(s).node == last_from_node) continue;
    last_from_node = cluster.device(s).node;
    uint32_t last_to_node = UINT32_MAX;
    for (uint32_t r : to) {
      if (cluster.device(r).node == last_to_node) continue;
      last_to_node = cluster.device(r).node;
      const models::Link l = PpLink(s, r, flows(s), flows(r));
      double v = l.latency_s + x / l.bandwidth_bytes_s;
      for (uint32_t y : to) {
        if (y == r) continue;
        const models::Link ly = topology_.Between(r, y);
        v += ly.latency_s + x / (tt * ly.bandwidth_bytes_s);
      }
      best = std::min(best, v);
    }
  }
  return 2 * best;
}

double AppendixACost::ComputeSeconds(const models::GpuSpec& gpu, uint32_t layer, uint32_t tp, double b) const {
  return compute_.ForwardSeconds(gpu, layer, tp, b) + compute_.BackwardSeconds(gpu, layer, tp, b, recompute_);
}

double AppendixACost::LayerSeconds(std::span<const uint32_t> group, const models::GpuSpec& gpu, uint32_t layer,
                                   double b) const {
  const uint32_t tp = static_cast<uint32_t>(group.size());
  double t = ComputeSeconds(gpu, layer, tp, b);
  // Eq. 3's TP all-reduces, unless the layer's measured profile already times them (Sailor's do).
  if (tp > 1 && !compute_.TpIncludedInProfile(gpu, layer, tp, b)) {
    t += model_.kind(layer) == models::LayerKind::kTransformer ? TpBlockSeconds(group, b) : TpEdgeSeconds(group, b);
  }
  return t;
}

double AppendixACost::StageSeconds(std::span<const uint32_t> group, uint32_t begin, uint32_t end, double b) const {
  if (group.empty() || begin >= end) return 0;
  const auto& model = model_;
  const uint32_t L = model.num_layers();
  // The slowest GPU of the group sets the pace (TP groups stay inside one machine: one type).
  const models::GpuSpec* gpu = cluster_.device(group[0]).gpu;
  for (uint32_t d : group) {
    const models::GpuSpec* g = cluster_.device(d).gpu;
    if (g->PeakTflops(training_.dtype()) < gpu->PeakTflops(training_.dtype())) gpu = g;
  }
  const bool embedding = begin == 0, head = end == L;
  double t = 0.0;
  for (uint32_t c = 0; c < blocks_.size(); ++c) {
    const uint32_t blocks = blocks_.Count(c, begin, end);
    if (blocks > 0) t += blocks * LayerSeconds(group, *gpu, blocks_.first(c), b);
  }
  if (embedding) t += LayerSeconds(group, *gpu, 0, b);
  if (head) t += LayerSeconds(group, *gpu, L - 1, b);
  return t;
}

double AppendixACost::PipelineSeconds(std::span<const double> stage_plus_hop_s, uint32_t micro_batches,
                                      double nic_floor_s) {
  double sum = 0, mx = nic_floor_s;
  for (double t : stage_plus_hop_s) {
    sum += t;
    mx = std::max(mx, t);
  }
  return sum + (std::max<uint32_t>(1, micro_batches) - 1.0) * mx;
}

AppendixACost::Breakdown AppendixACost::Evaluate(const proto::Plan& plan) const {
  Breakdown out;
  const bool leader = plan.comm().pp_leader_broadcast();
  const uint32_t n = cluster_.num_devices();
  std::vector<uint32_t> device_pipeline(n, 0);
  // Bytes each NIC carries out per micro-batch of every pipeline (activations forward, gradients back),
  // and the pipelines crossing it.
  std::vector<double> nic_bytes(cluster_.nodes().size(), 0);
  std::vector<uint32_t> sharing(cluster_.nodes().size(), 0);
  for (const auto& pipe : plan.pipelines()) {
    std::vector<char> touched(cluster_.nodes().size(), 0);
    for (int s = 0; s + 1 < pipe.stages_size(); ++s) {
      const uint32_t na = cluster_.device(pipe.stages(s).devices(0)).node;
      const uint32_t nb = cluster_.device(pipe.stages(s + 1).devices(0)).node;
      if (na != nb) touched[na] = touched[nb] = 1;
    }
    for (size_t k = 0; k < touched.size(); ++k) sharing[k] += touched[k];
  }
  for (const auto& pipe : plan.pipelines()) {
    const double x = models::PipelineBoundaryBytes(model_, pipe.micro_batch_size(), training_.seq_len(),
                                                   training_.dtype());
    for (int s = 0; s + 1 < pipe.stages_size(); ++s) {
      const uint32_t na = cluster_.device(pipe.stages(s).devices(0)).node;
      const uint32_t nb = cluster_.device(pipe.stages(s + 1).devices(0)).node;
      if (na == nb) continue;
      nic_bytes[na] += x;
      nic_bytes[nb] += x;
    }
  }
  std::vector<double> times;
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    const double b = pipe.micro_batch_size();
    times.clear();
    double floor = 0;
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      if (s + 1 < pipe.stages_size()) {
        const uint32_t na = cluster_.device(st.devices(0)).node, nb = cluster_.device(pipe.stages(s + 1).devices(0)).node;
        if (na != nb) floor = std::max({floor, NicSeconds(na, nic_bytes[na]), NicSeconds(nb, nic_bytes[nb])});
      }
      const std::span<const uint32_t> devices(st.devices().data(), st.devices_size());
      times.push_back(StageSeconds(devices, st.layer_begin(), st.layer_end(), b));
      if (s > 0) {
        // Eq. 5's two directions: the sender of each pays for it (forward j → j+1, backward j+1 → j).
        const auto& pv = pipe.stages(s - 1);
        const double hop =
            PpHopSeconds(std::span<const uint32_t>(pv.devices().data(), pv.devices_size()), devices, b, leader,
                         &sharing) /
            2;
        times[s - 1] += hop;
        times[s] += hop;
      }
      for (uint32_t d : st.devices()) device_pipeline[d] = static_cast<uint32_t>(p);
    }
    const double tp = PipelineSeconds(times, pipe.num_micro_batches(), floor);
    out.pipelines_s.push_back(tp);
    out.pipeline_s = std::max(out.pipeline_s, tp);
  }
  // Eq. 7: each device synchronises its chunks one after another; the slowest device bounds the step.
  const auto& model = model_;
  const double wb = models::DTypeBytes(training_.dtype());
  std::vector<double> sync(n, 0);
  for (const auto& g : models::DeriveGradSyncGroups(plan, model)) {
    double params = 0;
    for (uint32_t l = g.layer_begin; l < g.layer_end; ++l) params += model.ParamsPerRank(l, g.num_chunks, g.layer_begin != 0);
    double t = DpSeconds(g.devices, params * wb);
    if (plan.zero_stage() >= 2) {
      uint32_t m = 1;
      for (uint32_t d : g.devices) m = std::max(m, plan.pipelines(static_cast<int>(device_pipeline[d])).num_micro_batches());
      // A reduce-scatter (half an all-reduce) per micro-batch, plus an all-gather (ZeRO-2) or two
      // all-gathers per micro-batch (ZeRO-3).
      t = plan.zero_stage() == 2 ? t * (m + 1) / 2.0 : t * 1.5 * m;
    }
    for (uint32_t d : g.devices) sync[d] += t;
  }
  for (double s : sync) out.dp_s = std::max(out.dp_s, s);
  out.iteration_s = out.pipeline_s + out.dp_s;
  return out;
}

double AppendixACost::PaperMemoryBytes(uint32_t blocks, uint32_t tp, double b) const {
  const double h = model_.spec().hidden_size();
  const double bytes = models::DTypeBytes(training_.dtype());
  return blocks * (48 * h * h * bytes / std::max<uint32_t>(1, tp) + b * training_.seq_len() * h * bytes);
}

}  // namespace hetsim::planners::hexiscale
