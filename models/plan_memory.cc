// Per-device memory of a plan (models/plan.h EstimateMemory, HostMemoryByNode): weights, gradients and optimizer
// state by ZeRO stage and CPU offload, activations in flight per schedule (and those offloaded to host memory),
// the CUDA context and NCCL's communicators; split from plan.cc, which validates plans.
#include "models/plan.h"

#include "models/communicator.h"
#include "models/kernels.h"
#include "models/spec_io.h"
#include "models/training.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

namespace hetsim::models {

namespace {

constexpr double kGib = 1024.0 * 1024.0 * 1024.0;

}  // namespace

NcclCommunicators StageNcclCommunicators(const proto::Plan& plan, const TransformerModel& model, int pipe, int stage,
                                         const std::vector<uint32_t>& replicas, uint32_t plan_devices) {
  const auto& pl = plan.pipelines(pipe);
  const auto& st = pl.stages(stage);
  const uint32_t ways = StageSharding(st).ways();
  uint32_t dp_replicas = 1;
  for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model.num_layers() && l < replicas.size(); ++l) {
    dp_replicas = std::max(dp_replicas, replicas[l] / ways);
  }
  const bool tied_end =
      model.spec().tied_embeddings() && (st.layer_begin() == 0 || st.layer_end() >= model.num_layers());
  NcclCommunicators c = CountNcclCommunicators(plan_devices, TpDegree(st), ways, dp_replicas,
                                               static_cast<uint32_t>(pl.stages_size()), tied_end);
  bool moe = false;
  for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model.num_layers(); ++l) {
    moe |= model.HasExperts(l);
  }
  if (moe) {
    // Megatron-Core's expert groups: EP (the dispatch), expert TP, expert DP (the expert gradients).
    for (uint32_t ranks : {EpDegree(st), ExpertTpDegree(st) != TpDegree(st) ? ExpertTpDegree(st) : 1u,
                           ExpertDpDegree(st)}) {
      if (ranks < 2) continue;
      ++c.count;
      if (ranks == 2) ++c.two_rank;
    }
  }
  return c;
}

double NcclGib(const NcclCommunicators& c, const proto::Training& training, double channel_fraction) {
  if (training.tensors_only_memory()) return 0;
  return training.nccl_communicator_gib() * channel_fraction *
         ((c.count - c.two_rank) + c.two_rank * kNcclTwoRankFraction);
}

double NcclChannelFraction(const NodeInfo& node) {
  const bool scale_up = node.num_gpus > 1 && node.fabric.kind() != proto::IntraNodeFabric::KIND_PCIE;
  return scale_up ? 1.0 : kNcclPcieChannelFraction;
}

double ContextGib(const proto::Training& training) {
  return training.tensors_only_memory() ? 0 : training.cuda_context_gib();
}

double InterleavedInFlight(uint32_t stage, uint32_t stages, uint32_t m, uint32_t v) {
  v = std::max<uint32_t>(1, v);
  const double total = double(m) * v;
  if (m == stages) return total / v;  // Megatron-LM warms every chunk up when m equals the pipeline size
  const double warmup = 2.0 * (stages - stage - 1) + double(v - 1) * stages;
  return std::min(total, warmup + 1) / v;
}

std::vector<DeviceMemory> EstimateMemory(const proto::Plan& plan, const PlanContext& ctx) {
  const auto& model = ctx.model;
  const auto& tr = ctx.training;
  const proto::Recompute recompute = EffectiveRecompute(plan, tr);
  const proto::Plan::Schedule schedule = EffectiveSchedule(plan);
  const double weight_bytes = DTypeBytes(tr.dtype());
  const double grad_bytes = weight_bytes;
  const double optim_bytes = OptimizerBytesPerParam(tr);
  const uint32_t zero = plan.zero_stage();
  const bool offload_optimizer = OffloadsOptimizer(plan), offload_params = OffloadsParams(plan);
  // DP replicas per layer: the ZeRO sharding factor; MoE layers' routed experts shard over expert DP.
  std::vector<uint32_t> replicas(model.num_layers(), 0), expert_replicas(model.num_layers(), 0);
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model.num_layers(); ++l) {
        replicas[l] += DpDegree(st) * StageSharding(st).ways();  // ZeRO shards over DP × CP (Megatron-LM)
        expert_replicas[l] += ExpertDpDegree(st);
      }
    }
  }
  const uint32_t plan_devices = PlanDevices(plan);
  std::vector<DeviceMemory> out;
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    const uint32_t S = static_cast<uint32_t>(pipe.stages_size());
    const uint32_t m = pipe.num_micro_batches();
    for (uint32_t s = 0; s < S; ++s) {
      const auto& st = pipe.stages(static_cast<int>(s));
      const uint32_t tp = TpDegree(st);
      const SequenceSharding shard_seq = StageSharding(st);
      // Tokens of each sequence one rank holds (CP: two of the 2·cp chunks; Ulysses: seq / u).
      const uint32_t local_seq = tr.seq_len() / shard_seq.ways();
      const bool holds_embedding = st.layer_begin() == 0;
      double in_flight = 0;
      switch (schedule) {
        case proto::Plan::SCHEDULE_GPIPE: in_flight = m; break;
        case proto::Plan::SCHEDULE_INTERLEAVED_1F1B: {
          in_flight = InterleavedInFlight(s, S, m, plan.virtual_stages());
          break;
        }
        default: in_flight = std::min<uint32_t>(m, S - s); break;
      }
      const NcclCommunicators comms = StageNcclCommunicators(plan, model, p, static_cast<int>(s), replicas, plan_devices);
      const auto split = MicroBatchSplit(st, pipe.micro_batch_size());
      const ExpertSharding experts =
          StageExperts(st, model, tr, plan.comm(), double(split.empty() ? 0 : split[0]) * local_seq / tp);
      double params = 0, grads = 0, optim = 0, largest_layer = 0, all_grads = 0, host = 0;
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model.num_layers(); ++l) {
        const double n = model.ParamsPerRank(l, tp, !holds_embedding, experts);
        // The routed experts (1/(ep·etp) of them here) shard over the expert-DP replicas, the rest over DP × CP.
        const double routed = model.ExpertParams(l) / (double(experts.ep) * experts.etp);
        const double shard = std::max<uint32_t>(1, replicas[l]);
        const double expert_shard = std::max<uint32_t>(1, expert_replicas[l]);
        const auto sharded = [&](double bytes, bool by_zero) {
          return by_zero ? (n - routed) * bytes / shard + routed * bytes / expert_shard : n * bytes;
        };
        params += sharded(weight_bytes, zero >= 3);
        grads += sharded(grad_bytes, zero >= 2);
        optim += sharded(optim_bytes, zero >= 1);
        largest_layer = std::max(largest_layer, n * weight_bytes);
        all_grads += n * grad_bytes;
        // Offload needs ZeRO ≥ 2 (validation): the host holds the rank's shard.
        if (offload_optimizer) host += n * (optim_bytes + grad_bytes) / shard;
        if (offload_params) host += n * weight_bytes / shard;
      }
      if (zero >= 3) params += largest_layer;  // the gathered weights of the layer being computed
      if (offload_optimizer) {
        optim = 0;
        grads = OffloadGradientBufferBytes(all_grads, largest_layer / weight_bytes * grad_bytes,
                                           plan.comm().dp_bucket_mib());
      }
      if (offload_params) params = 2 * largest_layer;  // the layer being computed and the next, prefetched
      for (uint32_t r = 0; r < DpDegree(st); ++r) {
        const double b = r < split.size() ? split[r] : 0;
        double act = 0, peak_layer = 0, offloaded = 0, staging = 0;
        bool blocks = false;
        uint32_t block = 0;
        for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model.num_layers(); ++l) {
          const double bytes = model.ActivationBytes(l, b, local_seq, tp, plan.sequence_parallel(), recompute,
                                                     tr.dtype(), tr.attention(), tr.dropout(), experts, ModulesOf(tr));
          // training.activation_offload_layers: the stage's first blocks keep theirs in host memory; the GPU
          // holds one block's worth while it is copied.
          if (model.kind(l) == LayerKind::kTransformer && block++ < tr.activation_offload_layers()) {
            offloaded += bytes;
            staging = std::max(staging, bytes);
          } else {
            act += bytes;
          }
          blocks |= model.kind(l) == LayerKind::kTransformer;
          peak_layer = std::max(peak_layer, model.RecomputedPeakBytes(l, b, local_seq, tp, plan.sequence_parallel(),
                                                                      recompute, tr.dtype(), tr.attention(),
                                                                      tr.dropout(), experts));
        }
        // Ring attention's receive buffers live while a block runs (one block at a time).
        if (blocks) peak_layer += ContextParallelBufferBytes(model, b, tr.seq_len(), tp, shard_seq.cp, tr.dtype());
        act = act * in_flight + peak_layer + staging;  // recomputation re-materialises one layer at a time
        // Every TP, Ulysses and CP rank of the replica holds the same amounts.
        for (uint32_t i = 0; i < ReplicaWidth(st); ++i) {
          DeviceMemory dm;
          dm.device = st.devices(static_cast<int>(r * ReplicaWidth(st) + i));
          dm.pipeline = static_cast<uint32_t>(p);
          dm.stage = s;
          dm.params_gib = params / kGib;
          dm.grads_gib = grads / kGib;
          dm.optimizer_gib = optim / kGib;
          dm.activations_gib = act / kGib;
          dm.workspace_gib = tr.workspace_gib();
          const double tensors = dm.params_gib + dm.grads_gib + dm.optimizer_gib + dm.activations_gib;
          dm.allocator_gib = tr.allocator_overhead() * tensors;
          dm.context_gib = ContextGib(tr);
          dm.nccl_communicators = comms.count;
          dm.nccl_gib = NcclGib(comms, tr, NcclChannelFraction(ctx.cluster.node(ctx.cluster.device(dm.device).node)));
          dm.total_gib = tensors + dm.allocator_gib + dm.workspace_gib + dm.context_gib + dm.nccl_gib;
          dm.capacity_gib = ctx.cluster.device(dm.device).gpu->memory_gib;
          dm.host_gib = (host + offloaded * in_flight) / kGib;
          out.push_back(dm);
        }
      }
    }
  }
  return out;
}

std::vector<NodeHostMemory> HostMemoryByNode(const std::vector<DeviceMemory>& memory, const Cluster& cluster) {
  std::map<uint32_t, double> need;
  for (const auto& dm : memory) {
    if (dm.host_gib > 0) need[cluster.device(dm.device).node] += dm.host_gib;
  }
  std::vector<NodeHostMemory> out;
  for (const auto& [node, gib] : need) {
    const auto& info = cluster.node(node);
    out.push_back({node, gib, info.host_memory_stated ? info.host_memory_gib : 0.0});
  }
  return out;
}

}  // namespace hetsim::models
