#include "planners/layouts.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "models/training.h"

namespace hetsim::planners {

std::vector<uint32_t> NodeOrder(const models::Cluster& cluster) {
  std::vector<uint32_t> order(cluster.num_devices());
  for (uint32_t d = 0; d < cluster.num_devices(); ++d) order[d] = d;
  return order;
}

uint32_t NodeGcd(const models::Cluster& cluster, const std::vector<uint32_t>& devices) {
  uint32_t g = 0, last = std::numeric_limits<uint32_t>::max();
  for (uint32_t d : devices) {
    const uint32_t n = cluster.device(d).node;
    if (n == last) continue;
    last = n;
    g = std::gcd(g, cluster.node(n).num_gpus);
  }
  return std::max<uint32_t>(1, g);
}

proto::Plan MegatronLayout(const std::vector<uint32_t>& order, uint32_t dp, uint32_t tp, uint32_t pp,
                           const LayerRanges& layers, uint32_t micro_batch_size, uint32_t micro_batches) {
  proto::Plan plan;
  for (uint32_t d = 0; d < dp; ++d) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(micro_batch_size);
    pipe->set_num_micro_batches(micro_batches);
    for (uint32_t s = 0; s < pp; ++s) {
      auto* st = pipe->add_stages();
      for (uint32_t k = 0; k < tp; ++k) st->add_devices(order[size_t{s} * tp * dp + size_t{d} * tp + k]);
      if (tp > 1) st->set_tp_degree(tp);
      st->set_layer_begin(layers[s].first);
      st->set_layer_end(layers[s].second);
    }
  }
  return plan;
}

proto::Plan IntraStageLayout(const std::vector<uint32_t>& order, const std::vector<uint32_t>& sizes,
                             const std::vector<uint32_t>& tps, const LayerRanges& layers, uint32_t micro_batch_size,
                             uint32_t micro_batches, const std::vector<std::vector<uint32_t>>& splits) {
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(micro_batch_size);
  pipe->set_num_micro_batches(micro_batches);
  size_t next = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    auto* st = pipe->add_stages();
    for (uint32_t k = 0; k < sizes[s]; ++k) st->add_devices(order[next++]);
    if (tps[s] > 1) st->set_tp_degree(tps[s]);
    if (s < splits.size() && !splits[s].empty() && sizes[s] / tps[s] > 1) {
      for (uint32_t x : splits[s]) st->add_micro_batch_split(x);
    }
    st->set_layer_begin(layers[s].first);
    st->set_layer_end(layers[s].second);
  }
  return plan;
}

proto::Plan MoeLayout(const std::vector<uint32_t>& order, uint32_t dp, uint32_t tp, uint32_t pp, const LayerRanges& split,
                      uint32_t micro_batch_size, uint32_t micro_batches, uint32_t ep, uint32_t etp) {
  // The intra-stage layout with every stage's dp TP groups, each stage laying its experts out alike.
  proto::Plan plan = IntraStageLayout(order, std::vector<uint32_t>(pp, dp * tp), std::vector<uint32_t>(pp, tp), split,
                                      micro_batch_size * dp, micro_batches, {});
  for (auto& st : *plan.mutable_pipelines(0)->mutable_stages()) {
    st.set_ep_degree(ep);
    st.set_expert_tp_degree(etp);
  }
  return plan;
}

std::optional<LayerRanges> UniformLayersSplit(const models::TransformerModel& model, uint32_t pp) {
  if (pp == 0 || model.num_layers() % pp != 0) return std::nullopt;
  return EvenLayerSplit(model.num_layers(), pp);
}

MemoryCheck ExactMemoryCheck(const proto::Plan& plan, const PlanningProblem& problem) {
  const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
  MemoryCheck worst;
  double worst_gap = -std::numeric_limits<double>::infinity();
  for (const auto& dm : models::EstimateMemory(plan, ctx)) {
    const double gap = dm.total_gib - dm.capacity_gib;
    if (gap > worst_gap) {
      worst_gap = gap;
      worst.need_gib = dm.total_gib;
      worst.capacity_gib = dm.capacity_gib;
      worst.device = dm.device;
    }
  }
  worst.fits = worst_gap <= 0;
  return worst;
}

MemoryCheck CheckMemory(const proto::Plan& plan, const PlanningProblem& problem, const MemoryModel& memory) {
  const auto& model = problem.model;
  const uint32_t L = model.num_layers();
  std::vector<uint32_t> replicas(L, 0);
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < L; ++l) {
        replicas[l] += models::DpDegree(st) * models::StageSharding(st).ways();  // ZeRO over DP × CP
      }
    }
  }
  const proto::Recompute rc = models::EffectiveRecompute(plan, problem.training);
  const proto::Plan::Schedule schedule = models::EffectiveSchedule(plan);
  MemoryCheck worst;
  double worst_gap = -std::numeric_limits<double>::infinity();
  std::map<uint32_t, double> host_need;  // node -> GiB of offloaded shards
  const uint32_t plan_devices = models::PlanDevices(plan);
  for (int pi = 0; pi < plan.pipelines_size(); ++pi) {
    const auto& pipe = plan.pipelines(pi);
    const uint32_t S = static_cast<uint32_t>(pipe.stages_size());
    for (uint32_t s = 0; s < S; ++s) {
      const auto& st = pipe.stages(static_cast<int>(s));
      const uint32_t tp = models::TpDegree(st);
      const models::NcclCommunicators comms =
          models::StageNcclCommunicators(plan, model, pi, static_cast<int>(s), replicas, plan_devices);
      const uint32_t b0 = st.layer_begin(), e0 = std::min(st.layer_end(), L);
      double static_gib = 0;
      bool uniform = true;
      for (uint32_t l = b0; l < e0; ++l) uniform &= replicas[l] == replicas[b0];
      const proto::Plan::Offload offload = models::EffectiveOffload(plan);
      const double bucket_mib = plan.comm().dp_bucket_mib();
      if (uniform) {
        static_gib = memory.StaticGib(b0, e0, tp, plan.zero_stage(), replicas[b0], offload, bucket_mib);
      } else {
        static_gib = memory.StaticGibByLayer(b0, e0, tp, plan.zero_stage(), replicas, offload, bucket_mib);
      }
      const double host_gib = memory.HostGib(b0, e0, tp, offload, replicas);
      const auto shard = models::StageSharding(st);
      const double act = memory.ActivationGibPerSequence(b0, e0, tp, plan.sequence_parallel(), rc, shard);
      const double peak = memory.PeakLayerGibPerSequence(b0, e0, tp, plan.sequence_parallel(), rc, shard);
      const double in_flight = MemoryModel::InFlight(schedule, s, S, pipe.num_micro_batches(), plan.virtual_stages());
      const auto split = models::MicroBatchSplit(st, pipe.micro_batch_size());
      for (uint32_t r = 0; r < models::DpDegree(st); ++r) {
        const double b = r < split.size() ? split[r] : 0;
        const uint32_t width = models::ReplicaWidth(st);
        for (uint32_t k = 0; k < width; ++k) {
          const uint32_t d = st.devices(static_cast<int>(r * width + k));
          const double need = memory.TotalGib(static_gib, act, peak, b, in_flight, comms, d);
          if (host_gib > 0) host_need[problem.cluster.device(d).node] += host_gib;
          const double cap = problem.cluster.device(d).gpu->memory_gib;
          if (!FitsIn(need, cap)) worst.fits = false;
          if (need - cap > worst_gap) {
            worst_gap = need - cap;
            worst.need_gib = need;
            worst.capacity_gib = cap;
            worst.device = d;
          }
        }
      }
    }
  }
  // Host memory where the cluster spec states it (otherwise assumed enough, as models::ValidatePlan does).
  double worst_host_gap = -std::numeric_limits<double>::infinity();
  for (const auto& [node, need] : host_need) {
    const auto& info = problem.cluster.node(node);
    if (!info.host_memory_stated) continue;
    if (!FitsIn(need, info.host_memory_gib)) worst.host_fits = worst.fits = false;
    if (need - info.host_memory_gib > worst_host_gap) {
      worst_host_gap = need - info.host_memory_gib;
      worst.host_need_gib = need;
      worst.host_capacity_gib = info.host_memory_gib;
      worst.host_node = node;
    }
  }
  return worst;
}

std::optional<LayerRanges> BalancedSplit(const proto::Plan& skeleton, const PlanningProblem& problem,
                                         const AnalyticCostModel& ranking, const MemoryModel& memory, bool* capped) {
  if (capped != nullptr) *capped = false;
  const auto& model = problem.model;
  const uint32_t L = model.num_layers(), blocks = model.num_blocks();
  if (skeleton.pipelines_size() == 0) return std::nullopt;
  const uint32_t S = static_cast<uint32_t>(skeleton.pipelines(0).stages_size());
  for (const auto& pipe : skeleton.pipelines()) {
    if (static_cast<uint32_t>(pipe.stages_size()) != S) return std::nullopt;
  }
  if (S == 0 || S > blocks + 2) return std::nullopt;
  const proto::Recompute rc = models::EffectiveRecompute(skeleton, problem.training);
  const proto::Plan::Schedule schedule = models::EffectiveSchedule(skeleton);
  const uint32_t zero = skeleton.zero_stage();
  const bool sp = skeleton.sequence_parallel();
  std::vector<double> fixed(S, 0), per_block(S, 0);
  std::vector<uint32_t> max_blocks(S, blocks);
  auto span_of = [](const proto::Stage& st) {
    return std::span<const uint32_t>(st.devices().data(), st.devices_size());
  };
  // The layer range stage s would hold with n blocks (only the kinds matter for memory).
  auto range = [&](uint32_t s, uint32_t n) -> std::pair<uint32_t, uint32_t> {
    if (S == 1) return {0, L};
    if (s == 0) return {0, 1 + n};
    if (s + 1 == S) return {L - 1 - n, L};
    return {1, 1 + n};
  };
  for (uint32_t s = 0; s < S; ++s) {
    uint32_t shard = 0;
    for (const auto& pipe : skeleton.pipelines()) shard += models::DpDegree(pipe.stages(static_cast<int>(s)));
    for (const auto& pipe : skeleton.pipelines()) {
      const auto& st = pipe.stages(static_cast<int>(s));
      const uint32_t tp = models::TpDegree(st);
      const auto devices = span_of(st);
      const auto next = s + 1 < S ? span_of(pipe.stages(static_cast<int>(s + 1))) : std::span<const uint32_t>();
      const auto prev = s > 0 ? span_of(pipe.stages(static_cast<int>(s - 1))) : std::span<const uint32_t>();
      const auto split = models::MicroBatchSplit(st, pipe.micro_batch_size());
      const double in_flight =
          MemoryModel::InFlight(schedule, s, S, pipe.num_micro_batches(), skeleton.virtual_stages());
      for (uint32_t r = 0; r < models::DpDegree(st); ++r) {
        const auto g = devices.subspan(size_t{r} * tp, tp);
        const double b = r < split.size() ? split[r] : 0;
        double f = ranking.Replica(g, 1, 1, b, next, prev, rc).total_s();  // PP hops only
        if (s == 0) f += ranking.Replica(g, 0, 1, b, {}, {}, rc).total_s();
        if (s + 1 == S) f += ranking.Replica(g, L - 1, L, b, {}, {}, rc).total_s();
        fixed[s] = std::max(fixed[s], f);
        per_block[s] = std::max(per_block[s], ranking.Replica(g, 1, 2, b, {}, {}, rc).total_s());
        double cap = std::numeric_limits<double>::infinity();
        for (uint32_t d : g) cap = std::min(cap, problem.cluster.device(d).gpu->memory_gib);
        auto fits = [&](uint32_t n) {
          const auto [begin, end] = range(s, n);
          const double need = memory.TotalGib(memory.StaticGib(begin, end, tp, zero, shard),
                                              memory.ActivationGibPerSequence(begin, end, tp, sp, rc),
                                              memory.PeakLayerGibPerSequence(begin, end, tp, sp, rc), b, in_flight);
          return FitsIn(need, cap);
        };
        const uint32_t lo_n = S == 1 ? blocks : (s == 0 || s + 1 == S) ? 0 : 1;
        if (!fits(lo_n)) return std::nullopt;
        uint32_t lo = lo_n, hi = std::min(max_blocks[s], blocks);
        if (S == 1) hi = blocks;
        while (lo < hi) {  // the largest block count that fits
          const uint32_t mid = (lo + hi + 1) / 2;
          if (fits(mid)) {
            lo = mid;
          } else {
            hi = mid - 1;
          }
        }
        max_blocks[s] = std::min(max_blocks[s], lo);
      }
    }
  }
  auto split = BalanceBlocks(blocks, fixed, per_block, max_blocks);
  if (capped != nullptr && split) {
    *capped = split != BalanceBlocks(blocks, fixed, per_block, std::vector<uint32_t>(S, blocks));
  }
  return split;
}

void ApplyLayers(proto::Plan* plan, const LayerRanges& layers) {
  for (auto& pipe : *plan->mutable_pipelines()) {
    for (int s = 0; s < pipe.stages_size() && s < static_cast<int>(layers.size()); ++s) {
      pipe.mutable_stages(s)->set_layer_begin(layers[static_cast<size_t>(s)].first);
      pipe.mutable_stages(s)->set_layer_end(layers[static_cast<size_t>(s)].second);
    }
  }
}

}  // namespace hetsim::planners
