// The physical side of a Plan: what every MPI rank of `hetsim-exec` does and with whom it talks.
//
// Ranks map to the plan's devices in ascending device order (rank r runs the r-th smallest device the
// plan uses), so `mpirun -np N` must start exactly as many ranks as the plan has devices. The work itself
// is the plan's lowering (models/lowering.h), the same operation lists the simulator plays: each rank
// runs its list in order. From the plan and its lowering this derives, without any MPI or CUDA: each
// rank's pipeline, stage, intra-stage DP replica and TP rank; its share of every micro-batch (the stage's
// micro_batch_split, sequences taken in order); the TP groups; the pipeline transfers of the lowering
// (summarised per direction); and the layer-wise gradient-sync groups (models/plan.h
// DeriveGradSyncGroups) as world ranks.
//
// Every plan feature runs as lowered, or the plan is refused with the field to change (tp_overlap on TP
// stages; sequence parallelism with CP, Ulysses, DP overlap, the leader broadcast or a change of TP degree
// between stages; CPU offload; Ulysses that would split a head; for MoE models: ZeRO, the
// node-deduplicated dispatcher, ep_overlap, the sigmoid router, a router bias, no capacity factor).
// With comm.dp_overlap the lowering's DP stream runs on the backend's side stream (Backend::SideSubmit) on
// communicators of its own, each segment started at the main stream's signal. Interleaved 1F1B runs each
// stage's model chunks where Megatron-LM places them (models::StageChunks), in the lowering's order. ZeRO
// 1-3 (reduce-scatters, the optimizer on the rank's shard, all-gathers), hierarchical all-reduces, the PP
// leader broadcast and scatter-gather, CPU-staged transfers, context parallelism's ring and Ulysses'
// all-to-alls run as lowered
// (executor/grad_sync.h, executor/runner.cc, executor/stage_model.h, executor/mpi_comm.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/lowering.h"
#include "models/plan.h"
#include "models/proto/plan.pb.h"

namespace hetsim::executor {

// A half-open range of sequences inside a micro-batch.
struct SeqRange {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t size() const { return end - begin; }
};

// One pipeline message per micro-batch with world rank `peer`: the sequences [begin, end) of this rank's
// share of the micro-batch (rows begin·seq_len .. end·seq_len of its boundary tensor).
struct Transfer {
  int peer = 0;
  uint32_t begin = 0;
  uint32_t end = 0;
};

struct RankRole {
  int rank = 0;
  uint32_t slot = 0;     // index into ExecPlan::lowering.ranks
  uint32_t device = 0;
  uint32_t pipeline = 0;
  uint32_t stage = 0;
  uint32_t num_stages = 1;
  uint32_t layer_begin = 0;  // the stage's plan range (plan layers: 0 embedding, 1..L blocks, L+1 head)
  uint32_t layer_end = 0;
  // The layers the rank computes, one range per model chunk (models::StageChunks: the stage's range, or
  // under interleaved 1F1B Megatron-LM's placement of its v chunks).
  std::vector<models::LayerRange> chunks;
  uint32_t num_chunks = 1;  // v: model chunks per stage of the pipeline
  uint32_t tp = 1;
  uint32_t tp_rank = 0;
  uint32_t dp = 1;
  uint32_t replica = 0;
  uint32_t ulysses = 1;            // the stage's Ulysses degree u
  uint32_t cp = 1;                 // the stage's context-parallel degree
  uint32_t shard = 0;              // this rank's sequence shard (Ulysses: tokens [shard, shard + 1) · seq_len / u;
                                   // CP: its CP rank c, chunks c and 2·cp − 1 − c of 2·cp)
  std::vector<int> uly_group;      // world ranks of its Ulysses group, by shard (u > 1)
  std::vector<int> cp_group;       // world ranks of its CP ring, by CP rank (cp > 1)
  uint32_t micro_batch_size = 1;   // of the pipeline
  uint32_t num_micro_batches = 1;  // of the pipeline
  uint64_t first_sequence = 0;     // index in the global batch of the pipeline's first sequence
  SeqRange share;                  // this replica's sequences of every micro-batch
  std::vector<int> tp_group;       // world ranks of this rank's TP group, by TP rank
  // Expert parallelism (MoE models; Megatron-Core's parallel folding: the stage's devices in their listed
  // order as expert TP (fastest) × EP × expert DP, the lowering's models::EpGroupOf and ExpertTpGroupOf): the
  // EP group's world ranks by EP rank, this rank's EP rank (its experts: [ep_rank·E/ep, (ep_rank+1)·E/ep)),
  // the expert-TP group's world ranks by expert-TP rank, this rank's expert-TP rank (its rows of each of
  // those experts' F units: [etp_rank·F/etp, (etp_rank+1)·F/etp)) and expert-DP rank (the replica of those
  // experts it holds: 0 is the canonical copy).
  std::vector<int> ep_group;
  uint32_t ep = 1;
  uint32_t ep_rank = 0;
  std::vector<int> etp_group;
  uint32_t etp = 1;
  uint32_t etp_rank = 0;
  uint32_t edp_rank = 0;
  // The lowering's pipeline transfers of one micro-batch, per direction.
  std::vector<Transfer> recv_forward, send_forward, recv_backward, send_backward;

  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage + 1 == num_stages; }
  bool holds_embedding(uint32_t chunk) const { return chunks.at(chunk).begin == 0; }
  bool holds_head(uint32_t chunk, uint32_t num_layers) const { return chunks.at(chunk).end == num_layers; }
  // Global-batch index of the first sequence this rank processes in micro-batch `mb`.
  uint64_t FirstSequence(uint32_t mb) const {
    return first_sequence + uint64_t{mb} * micro_batch_size + share.begin;
  }
};

struct SyncGroupRanks {
  models::GradSyncGroup group;
  std::vector<int> ranks;  // world ranks, in the group's device order
};

struct ExecPlan {
  std::vector<uint32_t> devices;  // world rank -> device
  std::vector<RankRole> roles;    // by world rank
  std::vector<std::vector<int>> tp_groups;           // every TP group of more than one rank, plan order
  std::vector<std::vector<int>> uly_groups;          // every Ulysses group, plan order
  std::vector<std::vector<int>> cp_groups;           // every CP ring, plan order
  std::vector<std::vector<int>> ep_groups;           // every EP group of more than one rank, plan order
  std::vector<std::vector<int>> etp_groups;          // every expert-TP group of more than one rank, plan order
  std::vector<SyncGroupRanks> sync_groups;           // plan order (DeriveGradSyncGroups)
  std::vector<std::pair<int, int>> channels;         // directed (sender, receiver) pipeline pairs, sorted
  // Per layer: (pipeline, stage, replica) of its first holder, whose copy is the canonical one.
  std::vector<std::array<uint32_t, 3>> canonical_holder;  // its sequence shard 0
  uint32_t global_batch = 0;
  uint32_t seq_len = 0;
  proto::Plan::Schedule schedule = proto::Plan::SCHEDULE_1F1B;
  bool full_recompute = false;
  bool selective_recompute = false;  // ModelOptions::selective_recompute
  bool pp_scatter_gather = false;    // comm.pp_scatter_gather without the leader broadcast (Runner::Scattered)
  bool sequence_parallel = false;    // ModelOptions::sequence_parallel (applies to stages with TP > 1)
  bool tp_backward_blocking = false;  // ModelOptions::tp_backward_blocking (comm.tp_backward_blocking)
  uint32_t zero_stage = 0;  // ZeRO as the lowering orders it (executor/grad_sync.h)
  bool cpu_staged = false;  // pipeline transfers staged through host memory (executor/mpi_comm.h)
  double moe_capacity_factor = 0;  // ModelOptions::capacity_factor (training.moe_capacity_factor)
  // Plan features the executor runs in a simpler form (each says how); printed by rank 0.
  // What the ranks run: the lowering of the plan in the executor's form.
  models::Lowering lowering;

  int world_size() const { return static_cast<int>(devices.size()); }
  // World rank running `device`, or −1.
  int RankOfDevice(uint32_t device) const;
  // The operations of world rank `rank` (main stream).
  const std::vector<models::Op>& Ops(int rank) const { return lowering.ranks.at(roles.at(static_cast<size_t>(rank)).slot).ops; }
  // Its DP stream (comm.dp_overlap: the gradient sync the side stream runs; empty otherwise).
  const std::vector<models::Op>& DpOps(int rank) const {
    return lowering.ranks.at(roles.at(static_cast<size_t>(rank)).slot).dp_stream;
  }
  // Index into sync_groups of the lowering's sync group `g` (models::Lowering::sync_groups).
  size_t SyncGroupOfLowering(uint32_t g) const;
};

// Checks that the model is one the executor implements (Llama style: RMSNorm, SwiGLU, RoPE, no biases,
// untied embeddings, decoder only; MoE blocks with a softmax router without bias, no MTP modules).
Status CheckExecutableModel(const models::TransformerModel& model);

// Derives the ExecPlan. `plan` must pass models::ValidatePlanStructure. Errors (unsupported schedule or
// model) name `file`.
Result<ExecPlan> BuildExecPlan(const proto::Plan& plan, const models::PlanContext& ctx, const std::string& file);

// MPI tag of the pipeline message of micro-batch `mb` (forward activations or backward gradients) across
// the boundary after virtual stage `boundary` (chunk c of stage s of S is virtual stage c·S + s; without
// interleaving, the stage) of a pipeline of `virtual_stages` = S·v.
inline int PipelineTag(uint32_t mb, uint32_t boundary, uint32_t virtual_stages, bool backward) {
  return static_cast<int>((uint64_t{mb} * virtual_stages + boundary) * 2 + (backward ? 1 : 0));
}

}  // namespace hetsim::executor
