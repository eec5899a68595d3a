#include "executor/exec_plan.h"

#include <algorithm>
#include <map>
#include <set>

namespace hetsim::executor {

int ExecPlan::RankOfDevice(uint32_t device) const {
  const auto it = std::lower_bound(devices.begin(), devices.end(), device);
  return it != devices.end() && *it == device ? static_cast<int>(it - devices.begin()) : -1;
}

size_t ExecPlan::SyncGroupOfLowering(uint32_t g) const {
  const auto& lg = lowering.sync_groups.at(g);
  for (size_t i = 0; i < sync_groups.size(); ++i) {
    const auto& sg = sync_groups[i].group;
    // An MoE layer's dense and expert groups share its layers: the part and the members tell them apart.
    if (sg.layer_begin == lg.layer_begin && sg.layer_end == lg.layer_end && sg.chunk == lg.chunk &&
        sg.part == lg.part && sg.devices == lg.devices) {
      return i;
    }
  }
  HETSIM_CHECK(false, "ExecPlan: the lowering's sync group " + std::to_string(g) + " is not in the plan's");
  return 0;
}

Status CheckExecutableModel(const models::TransformerModel& model) {
  const auto& m = model.spec();
  std::vector<std::string> problems;
  if (m.norm() != proto::Model::NORM_RMSNORM) problems.push_back("norm must be rmsnorm");
  if (m.mlp() != proto::Model::MLP_SWIGLU) problems.push_back("mlp must be swiglu");
  if (m.position() != proto::Model::POSITION_ROPE) problems.push_back("position must be rope");
  if (m.linear_bias()) problems.push_back("linear_bias must be false");
  if (m.tied_embeddings()) problems.push_back("tied_embeddings must be false");
  if (m.encoder_only() || m.num_token_types() > 0) problems.push_back("the model must be a decoder (no encoder_only, no token types)");
  if (model.head_dim() % 2 != 0) problems.push_back("the head dimension must be even for RoPE");
  if (m.has_mla()) problems.push_back("mla (latent attention) must be absent");
  if (m.qk_norm()) problems.push_back("qk_norm must be false");
  if (m.sliding_window() > 0) problems.push_back("sliding_window must be 0");
  if (m.attention_sinks()) problems.push_back("attention_sinks must be false");
  if (m.has_moe()) {
    // The MoE block runs a softmax router without bias (docs/executor.md "Mixture of experts").
    if (m.moe().router() == proto::MoE::ROUTER_SIGMOID) {
      problems.push_back("moe.router must be softmax (the sigmoid router's balancing bias is not implemented)");
    }
    if (m.moe().router_bias()) problems.push_back("moe.router_bias must be false");
    if (m.moe().mtp_modules() > 0) problems.push_back("moe.mtp_modules must be 0 (multi-token prediction is not implemented)");
  }
  if (problems.empty()) return Status::Ok();
  std::string msg = "model '" + model.name() + "': the executor implements Llama-style decoders only:";
  for (const auto& p : problems) msg += " " + p + ";";
  return Status::Invalid(msg);
}

namespace {

// Each rank's role: its pipeline, stage, replica, TP rank and sequence shard, its groups (TP, Ulysses, CP), its
// model chunks and the sequences it handles; and the canonical holder of every layer.
void AssignRoles(const proto::Plan& plan, const models::PlanContext& ctx, ExecPlan& ep) {
  auto rank_of = [&](uint32_t device) { return ep.RankOfDevice(device); };
  ep.canonical_holder.assign(ctx.model.num_layers(), {UINT32_MAX, 0, 0});
  uint64_t first_sequence = 0;
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    const auto S = static_cast<uint32_t>(pipe.stages_size());
    // Per stage: the replicas' sequence ranges within a micro-batch.
    std::vector<std::vector<SeqRange>> shares(S);
    for (uint32_t s = 0; s < S; ++s) {
      const auto& st = pipe.stages(static_cast<int>(s));
      uint32_t begin = 0;
      for (uint32_t n : models::MicroBatchSplit(st, pipe.micro_batch_size())) {
        shares[s].push_back({begin, begin + n});
        begin += n;
      }
    }
    for (uint32_t s = 0; s < S; ++s) {
      const auto& st = pipe.stages(static_cast<int>(s));
      const uint32_t tp = models::TpDegree(st), dp = models::DpDegree(st);
      const std::vector<models::LayerRange> chunks = models::StageChunks(plan, pipe, static_cast<int>(s), ctx.model);
      for (const models::LayerRange& c : chunks) {
        for (uint32_t l = c.begin; l < c.end; ++l) {
          if (ep.canonical_holder[l][0] == UINT32_MAX) ep.canonical_holder[l] = {static_cast<uint32_t>(p), s, 0};
        }
      }
      const uint32_t u = models::UlyssesDegree(st), cp = models::CpDegree(st);
      for (uint32_t r = 0; r < dp; ++r) {
        // Devices: TP innermost, then the sequence shard (Ulysses or CP: the plan has at most one), then the
        // replica (models::StageDevice).
        for (uint32_t k = 0; k < tp && u > 1; ++k) {
          std::vector<int> uly;
          for (uint32_t j = 0; j < u; ++j) uly.push_back(rank_of(models::StageDevice(st, r, j, k)));
          ep.uly_groups.push_back(uly);
        }
        for (uint32_t k = 0; k < tp && cp > 1; ++k) {
          std::vector<int> ring;
          for (uint32_t c = 0; c < cp; ++c) ring.push_back(rank_of(models::StageDevice(st, r, c, k)));
          ep.cp_groups.push_back(ring);
        }
        for (uint32_t j = 0; j < u * cp; ++j) {
          std::vector<int> group;
          for (uint32_t k = 0; k < tp; ++k) group.push_back(rank_of(models::StageDevice(st, r, j, k)));
          if (tp > 1) ep.tp_groups.push_back(group);
          for (uint32_t k = 0; k < tp; ++k) {
            RankRole& role = ep.roles[static_cast<size_t>(group[k])];
            role.rank = group[k];
            role.device = models::StageDevice(st, r, j, k);
            role.ulysses = u;
            role.cp = cp;
            role.shard = j;
            if (u > 1) role.uly_group = ep.uly_groups[ep.uly_groups.size() - tp + k];
            if (cp > 1) role.cp_group = ep.cp_groups[ep.cp_groups.size() - tp + k];
            role.pipeline = static_cast<uint32_t>(p);
            role.stage = s;
            role.num_stages = S;
            role.layer_begin = st.layer_begin();
            role.layer_end = st.layer_end();
            role.chunks = chunks;
            role.num_chunks = static_cast<uint32_t>(chunks.size());
            role.tp = tp;
            role.tp_rank = k;
            role.dp = dp;
            role.replica = r;
            role.micro_batch_size = pipe.micro_batch_size();
            role.num_micro_batches = pipe.num_micro_batches();
            role.first_sequence = first_sequence;
            role.share = shares[s][r];
            role.tp_group = group;
          }
        }
      }
    }
    first_sequence += uint64_t{pipe.micro_batch_size()} * pipe.num_micro_batches();
  }
}

// Expert parallelism: each rank's EP group and rank, expert-TP group and rank and expert-DP rank
// (Megatron-Core's folding of the stage's devices in their listed order: the lowering's models::EpGroupOf and
// ExpertTpGroupOf of the device's position), and every EP and expert-TP group in plan order.
void AssignExpertGroups(const proto::Plan& plan, ExecPlan& ep) {
  const auto ranks_of = [&](const std::vector<uint32_t>& devices) {
    std::vector<int> ranks;
    for (uint32_t d : devices) ranks.push_back(ep.RankOfDevice(d));
    return ranks;
  };
  const auto note = [](std::vector<std::vector<int>>& groups, const std::vector<int>& g) {
    if (g.size() > 1 && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  };
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      const uint32_t n = models::EpDegree(st), etp = models::ExpertTpDegree(st);
      for (int i = 0; i < st.devices_size(); ++i) {
        RankRole& role = ep.roles.at(static_cast<size_t>(ep.RankOfDevice(st.devices(i))));
        const auto index = static_cast<uint32_t>(i);
        role.ep = n;
        role.ep_rank = index / etp % n;
        role.etp = etp;
        role.etp_rank = index % etp;
        role.edp_rank = index / (etp * n);
        role.ep_group = ranks_of(models::EpGroupOf(st, index));
        role.etp_group = ranks_of(models::ExpertTpGroupOf(st, index));
        note(ep.ep_groups, role.ep_group);
        note(ep.etp_groups, role.etp_group);
      }
    }
  }
}

// Pipeline transfers: the lowering's sends and receives of micro-batch 0 (every micro-batch moves the same
// rows), and the channels (sender, receiver) they need.
void CollectTransfers(ExecPlan& ep) {
  auto rank_of = [&](uint32_t device) { return ep.RankOfDevice(device); };
  std::set<std::pair<int, int>> channels;
  for (auto& role : ep.roles) {
    role.slot = ep.lowering.device_slot.at(role.device);
    for (const models::Op& op : ep.lowering.ranks[role.slot].ops) {
      if ((op.kind != models::OpKind::kSend && op.kind != models::OpKind::kRecv) || op.micro_batch != 0 ||
          op.channel == models::kChanCp) {
        continue;  // CP's ring runs inside the pass, on the ring's communicator
      }
      const bool fwd = op.channel == models::kChanPpForward, send = op.kind == models::OpKind::kSend;
      const Transfer t{rank_of(op.peer), op.seq_begin, op.seq_end};
      (send ? (fwd ? role.send_forward : role.send_backward) : (fwd ? role.recv_forward : role.recv_backward)).push_back(t);
      if (send) channels.insert({role.rank, t.peer});
    }
  }
  ep.channels.assign(channels.begin(), channels.end());
}

// What the executor's MoE layer runs (docs/executor.md "Mixture of experts"): NCCL-style all-to-alls in the EP
// group and expert TP's all-gathers and reduce-scatters, not overlapped, with a fixed capacity per expert, under
// TP on sequence-parallel shards (validation demands sequence_parallel there); anything else is refused with
// the field to change.
Status CheckExpertParallel(const proto::Plan& plan, const models::PlanContext& ctx, const std::string& file) {
  if (!ctx.model.HasMoe()) return Status::Ok();
  const std::string fix = "; simulate this plan (hetsim simulate) or ";
  if (plan.comm().ep_dispatcher() == proto::CommOptions::EP_DISPATCHER_NODE_DEDUP) {
    return Status::Invalid(file + ": comm.ep_dispatcher: node_dedup (DeepEP's node-deduplicated dispatch) is not "
                           "implemented in the executor, which exchanges every token copy with one all-to-all in the "
                           "EP group" + fix + "set comm.ep_dispatcher: alltoall to run it here");
  }
  if (plan.comm().ep_overlap()) {
    return Status::Invalid(file + ": comm.ep_overlap: the executor runs the EP all-to-alls between the layer's "
                           "computations, not behind them" + fix + "set comm.ep_overlap: false to run it here");
  }
  if (ctx.training.moe_capacity_factor() <= 0) {
    return Status::Invalid(file + ": training.moe_capacity_factor: the executor runs Megatron-Core's drop-and-pad "
                           "dispatch (fixed all-to-all sizes, as the lowering prices them), which needs a capacity "
                           "factor; set moe_capacity_factor (e.g. " +
                           std::to_string(ctx.model.spec().moe().num_experts() / ctx.model.spec().moe().top_k()) +
                           " = num_experts / top_k drops no token)");
  }
  if (plan.zero_stage() > 0) {
    return Status::Invalid(file + ": zero_stage: " + std::to_string(plan.zero_stage()) + ": the executor's ZeRO "
                           "shards whole layers, while an MoE layer's experts and the rest synchronise over different "
                           "groups" + fix + "set zero_stage: 0 to run it here");
  }
  return Status::Ok();
}

}  // namespace

Result<ExecPlan> BuildExecPlan(const proto::Plan& plan, const models::PlanContext& ctx, const std::string& file) {
  HETSIM_RETURN_IF_ERROR(CheckExecutableModel(ctx.model));
  ExecPlan ep;
  ep.schedule = models::EffectiveSchedule(plan);
  // Ulysses needs the local heads to split evenly over its ranks.
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    for (int s = 0; s < plan.pipelines(p).stages_size(); ++s) {
      const auto& st = plan.pipelines(p).stages(s);
      const std::string at = file + ": pipelines[" + std::to_string(p) + "].stages[" + std::to_string(s) + "].";
      const uint32_t u = models::UlyssesDegree(st);
      const auto [q, kv] = models::HeadsPerTpRank(ctx.model, models::TpDegree(st));
      if (u > 1 && (q % u != 0 || kv % u != 0)) {
        return Status::Invalid(at + "ulysses_degree: " + std::to_string(u) + " does not divide the " +
                               std::to_string(q) + " query and " + std::to_string(kv) +
                               " key/value heads each TP rank holds (Ulysses gives every rank 1/u of them); "
                               "choose a degree that divides both");
      }
    }
  }
  HETSIM_RETURN_IF_ERROR(CheckExpertParallel(plan, ctx, file));
  // CPU offload needs a host optimizer and host-resident shards the runtime does not have: refuse rather
  // than run the plan with everything on the GPU (which the plan says does not fit).
  if (models::OffloadsOptimizer(plan)) {
    return Status::Invalid(file + ": offload: " + models::OffloadName(models::EffectiveOffload(plan)) +
                           ": the executor keeps parameters, gradients and optimizer states on the GPU and runs "
                           "the optimizer there; CPU offload (ZeRO-Offload, ZeRO-Infinity, FSDP CPUOffload) is "
                           "simulated only: simulate this plan (hetsim simulate) or set offload: none");
  }
  if (ctx.training.activation_offload_layers() > 0) {
    return Status::Invalid(file + ": training.activation_offload_layers: " +
                           std::to_string(ctx.training.activation_offload_layers()) +
                           ": the executor keeps every activation on the GPU; activation offload is simulated only: "
                           "simulate this plan (hetsim simulate) or set activation_offload_layers: 0");
  }
  ep.global_batch = ctx.training.global_batch_size();
  ep.seq_len = ctx.training.seq_len();
  const auto recompute = models::EffectiveRecompute(plan, ctx.training);
  ep.full_recompute = recompute == proto::RECOMPUTE_FULL;
  ep.selective_recompute = recompute == proto::RECOMPUTE_SELECTIVE;
  if (recompute == proto::RECOMPUTE_OP_SELECTIVE) {
    return Status::Invalid(file + ": recompute: op_selective: the executor recomputes whole blocks (full) or "
                           "the attention core (selective), not torchtitan's per-operation policy; simulate this "
                           "plan (hetsim simulate) or set recompute: none, selective or full to run it here");
  }
  if (ep.selective_recompute && models::ModulesOf(ctx.training) != models::kCoreAttentionOnly) {
    return Status::Invalid(file + ": training.recompute_modules: the executor's selective recomputation repeats "
                           "the attention core alone; simulate this plan (hetsim simulate) or set "
                           "recompute_modules: [core_attn] (or leave it out) to run it here");
  }
  // Features with no implementation here are refused (never run in another form): the lowering of the plan
  // would not be what runs.
  proto::Plan exec = plan;
  ep.zero_stage = plan.zero_stage();
  const auto refuse = [&](const std::string& field, const std::string& why) {
    return Status::Invalid(file + ": " + field + ": " + why + "; simulate this plan (hetsim simulate) or " +
                           "turn the option off to run it here");
  };
  bool tp_stage = false, tp_changes = false, sharded = false;
  for (const auto& pipe : plan.pipelines()) {
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      tp_stage = tp_stage || models::TpDegree(st) > 1;
      sharded = sharded || models::StageSharding(st).ways() > 1;
      if (s + 1 < pipe.stages_size() && models::TpDegree(st) != models::TpDegree(pipe.stages(s + 1))) {
        tp_changes = true;
      }
    }
  }
  ep.sequence_parallel = plan.sequence_parallel() && tp_stage;
  ep.tp_backward_blocking = plan.comm().tp_backward_blocking();
  if (ep.sequence_parallel) {
    // Megatron-LM's sequence parallelism sends each TP rank's shard to its peer of the next stage, so the
    // stages of a pipeline share one TP degree; the rest is not implemented here.
    const char* why = tp_changes ? "a pipeline changes its TP degree between stages (each TP rank holds a "
                                   "sequence shard, sent to the same TP rank of the next stage)"
                      : sharded ? "with context parallelism or Ulysses, which the executor does not combine "
                                  "with it"
                      : plan.comm().pp_leader_broadcast() ? "with comm.pp_leader_broadcast (every TP rank holds "
                                                            "a different shard)"
                      : plan.comm().dp_overlap() ? "with comm.dp_overlap (the norms' gradients are summed over TP "
                                                   "before the gradient sync starts)"
                                                 : nullptr;
    if (why != nullptr) return refuse("sequence_parallel", why);
  }
  if (plan.comm().tp_overlap() && tp_stage) {
    return refuse("comm.tp_overlap", "the executor runs TP collectives after the GEMMs that produce them (no "
                                     "userbuffers chunking)");
  }
  if (plan.comm().param_gather_overlap()) {
    return refuse("comm.param_gather_overlap", "the executor all-gathers the parameters right after the optimizer "
                                               "step (its DP stream starts with the gradient sync)");
  }
  ep.pp_scatter_gather = plan.comm().pp_scatter_gather() && !plan.comm().pp_leader_broadcast();
  // NVLS is NCCL's algorithm choice on NVSwitch nodes (NCCL takes it by itself there); the executor's
  // collectives are the same all-reduces, so the lowering is that of the ring.
  if (plan.comm().tp_algorithm() == proto::CommOptions::ALGORITHM_NVLS) {
    exec.mutable_comm()->set_tp_algorithm(proto::CommOptions::ALGORITHM_RING);
  }
  if (plan.comm().dp_overlap()) {
    // Shared key/value heads (TP > kv heads) sum their partial gradients over the TP group before the DP
    // sync, for every layer at once (GradSync::Begin): that step has no place on the DP stream.
    for (const auto& pipe : plan.pipelines()) {
      for (const auto& st : pipe.stages()) {
        if (models::TpDegree(st) > ctx.model.kv_heads()) {
          return Status::Invalid(file + ": comm.dp_overlap: a stage with TP " + std::to_string(models::TpDegree(st)) +
                                 " > " + std::to_string(ctx.model.kv_heads()) +
                                 " key/value heads sums shared heads' gradients before the whole sync, which the "
                                 "executor cannot overlap; set comm.dp_overlap: false or TP <= kv heads");
        }
      }
    }
  }
  ep.cpu_staged = plan.comm().cpu_staged();
  ep.moe_capacity_factor = ctx.training.moe_capacity_factor();
  HETSIM_ASSIGN_OR_RETURN(ep.lowering, models::LowerPlan(exec, ctx));

  // Rank <-> device.
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) ep.devices.insert(ep.devices.end(), st.devices().begin(), st.devices().end());
  }
  std::sort(ep.devices.begin(), ep.devices.end());
  ep.roles.resize(ep.devices.size());
  auto rank_of = [&](uint32_t device) { return ep.RankOfDevice(device); };

  AssignRoles(plan, ctx, ep);
  AssignExpertGroups(plan, ep);
  CollectTransfers(ep);
  for (auto& g : models::DeriveGradSyncGroups(plan, ctx.model)) {
    SyncGroupRanks sg;
    for (uint32_t d : g.devices) sg.ranks.push_back(rank_of(d));
    sg.group = std::move(g);
    ep.sync_groups.push_back(std::move(sg));
  }
  return ep;
}

}  // namespace hetsim::executor
