// The Plan's semantics: validation against a cluster, model and training spec; the layer-wise
// gradient-synchronisation groups it implies; and the per-device memory it needs.
//
// Validation reports every problem it finds, each naming the plan file and the key path
// (`pipelines[1].stages[0].devices[3]`), what was expected and what was found.
#pragma once

#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"
#include "models/transformer.h"

namespace hetsim::models {

// The most micro-batches one pipeline may run in an iteration: the simulator plays each, so a plan beyond
// this (a global batch of millions of sequences in small micro-batches) would take hours to simulate or
// plan. Every command checks it: plan validation, the planners' played estimate, validate-sim's runs.
inline constexpr uint32_t kMaxMicroBatches = 65536;
// The first pipeline of `plan` with more than kMaxMicroBatches micro-batches, or -1.
int PipelineOverMicroBatchBound(const proto::Plan& plan);

// What a plan is checked against. `training` must be resolved (ResolveTraining).
struct PlanContext {
  const Cluster& cluster;
  const TransformerModel& model;
  const proto::Training& training;
};

// Sequences of each micro-batch per intra-stage DP replica: the explicit split, or as even as possible
// (the first replicas get one more when it does not divide).
std::vector<uint32_t> MicroBatchSplit(const proto::Stage& stage, uint32_t micro_batch_size);
uint32_t TpDegree(const proto::Stage& stage);
uint32_t CpDegree(const proto::Stage& stage);       // context-parallel (ring attention) degree, default 1
uint32_t UlyssesDegree(const proto::Stage& stage);  // DeepSpeed-Ulysses degree, default 1
// How the stage shards each sequence (context parallelism and Ulysses).
SequenceSharding StageSharding(const proto::Stage& stage);
// Devices of one intra-stage DP replica: tp · ulysses · cp.
uint32_t ReplicaWidth(const proto::Stage& stage);
// Intra-stage DP replicas: devices / ReplicaWidth.
uint32_t DpDegree(const proto::Stage& stage);
// The device of intra-stage DP replica r, sequence shard j (= cp_rank · ulysses + ulysses_rank) and TP rank
// k (the rank order of plan.proto's Stage: TP innermost, then Ulysses, then CP, then DP).
uint32_t StageDevice(const proto::Stage& stage, uint32_t r, uint32_t j, uint32_t k);
// Expert parallelism (plan.proto Stage.ep_degree, expert_tp_degree; docs/moe.md): the EP degree (default
// 1), the experts' TP degree (default the stage's tp_degree) and the expert-DP degree devices / (etp·ep).
uint32_t EpDegree(const proto::Stage& stage);
uint32_t ExpertTpDegree(const proto::Stage& stage);
uint32_t ExpertDpDegree(const proto::Stage& stage);
// The devices of the EP group of the stage's device at position `index` (Megatron-Core's folding: position
// i = etp_rank + etp·(ep_rank + ep·edp_rank)), in EP-rank order; and of its expert-TP group.
std::vector<uint32_t> EpGroupOf(const proto::Stage& stage, uint32_t index);
std::vector<uint32_t> ExpertTpGroupOf(const proto::Stage& stage, uint32_t index);
// The busiest EP rank's routed tokens over its even share when each of `tokens` tokens per rank picks top_k
// experts uniformly at random, as Megatron-Core's forced load balancing routes (random router logits):
// a rank's count is binomial with mean tokens·top_k and variance tokens·top_k·(1 − 1/ep), and the busiest
// of ep ranks sits E[max of ep standard normals] deviations above the mean. A trained router is less even:
// training.moe_load_imbalance overrides it; a capacity factor caps it (docs/moe.md "Load imbalance").
double UniformRoutingImbalance(double tokens, uint32_t top_k, uint32_t ep);
// The chance that a token's top_k experts, drawn uniformly among `experts` spread evenly over `nodes` nodes,
// include one of a given node's: 1 − C(E − E/n, k) / C(E, k) (node-deduplicated dispatch sends the token there
// once).
double NodeHitProbability(uint32_t experts, uint32_t top_k, uint32_t nodes);
// The stage's expert layout for `tokens` routed tokens per rank and micro-batch (ep, etp, imbalance: the
// training's moe_load_imbalance, else UniformRoutingImbalance; at most the capacity factor when one is set;
// the plan's dispatcher and whether routing is dropless).
ExpertSharding StageExperts(const proto::Stage& stage, const TransformerModel& model, const proto::Training& training,
                            const proto::CommOptions& comm, double tokens);
// Query and key/value heads one TP rank of a stage of degree `tp` holds (heads TP does not divide stay
// whole; a key/value head shared by several TP ranks counts once): what Ulysses splits over its ranks.
std::pair<uint32_t, uint32_t> HeadsPerTpRank(const TransformerModel& model, uint32_t tp);
proto::Plan::Schedule EffectiveSchedule(const proto::Plan& plan);
proto::Recompute EffectiveRecompute(const proto::Plan& plan, const proto::Training& training);
// CPU offload (Plan.offload; unspecified = none): whether the optimizer states and step, and also the
// parameter shards, live in host memory.
proto::Plan::Offload EffectiveOffload(const proto::Plan& plan);
bool OffloadsOptimizer(const proto::Plan& plan);
bool OffloadsParams(const proto::Plan& plan);
// "none", "optimizer", "optimizer_and_params".
std::string OffloadName(proto::Plan::Offload offload);

// GPU bytes of gradients a rank keeps under CPU offload (EstimateMemory and planners::MemoryModel): the
// gradient buckets on their way to host memory — one being filled by the backward pass while the previous
// one is reduce-scattered and copied out (DeepSpeed's double-buffered reduce bucket with overlap_comm;
// FSDP's gradient of one wrapped block while the previous one is reduced) — each `dp_bucket_mib`, or the
// largest layer's gradients when the plan sets no bucket size (ZeRO-Offload §4.1 copies each gradient
// "individually or in small groups" as soon as it is computed); never more than the rank's gradients.
double OffloadGradientBufferBytes(double rank_grad_bytes, double largest_layer_grad_bytes, double dp_bucket_mib);

// Checks everything except memory. Errors are prefixed with `file`.
Status ValidatePlanStructure(const proto::Plan& plan, const PlanContext& ctx, const std::string& file);
// ValidatePlanStructure plus memory: a device whose estimate exceeds its capacity is an error that
// gives the per-device numbers.
Status ValidatePlan(const proto::Plan& plan, const PlanContext& ctx, const std::string& file);

// A half-open range of plan layers (0 embedding, 1..L blocks, L+1 head).
struct LayerRange {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t size() const { return end - begin; }
  bool contains(uint32_t layer) const { return begin <= layer && layer < end; }
};

// The layers stage `s` of `pipe` holds, one range per model chunk, in chunk order. Without interleaving that
// is the stage's [layer_begin, layer_end). Under interleaved 1F1B with v virtual stages the plan's range only
// says how many transformer blocks the stage holds; the blocks themselves are placed as Megatron-LM places
// them (Narayanan et al. 2021 §2.2: each device holds several non-contiguous subsets of layers; Megatron-LM's
// layer offset of a virtual pipeline rank): model chunk c of stage s is virtual stage
// c·S + s, the stage's block count is cut into v chunks as evenly as possible (the first chunks take the
// remainder), and the model's blocks are dealt out in virtual-stage order — chunk 0 of stages 0..S−1, then
// chunk 1, and so on — so that a micro-batch meets the blocks in model order. The embedding goes with stage
// 0's chunk 0 and the head with stage S−1's last chunk. Every stage keeps its block count (and so its time
// and memory); only which blocks it holds changes.
std::vector<LayerRange> StageChunks(const proto::Plan& plan, const proto::Pipeline& pipe, int s,
                                    const TransformerModel& model);

// One gradient-synchronisation group (context-parallel and Ulysses ranks hold the same weights, so every
// sequence shard of every replica is a holder: DP × CP as in Megatron-LM): the devices that hold the same shard (`chunk` of `num_chunks`)
// of layers [layer_begin, layer_end) and all-reduce its gradients after the backward pass.
// When the replicas of a layer use different TP degrees, every layer's parameters are cut into
// lcm(TP degrees) chunks and each chunk is synchronised among the ranks that own it (HexiScale §3.2);
// with equal degrees this is the usual "rank k of every TP group" pattern.
// MoE layers' gradients go in two kinds of groups, as Megatron-Core keeps expert and dense parameters in
// separate buffers: the dense part (attention, norms, router, shared experts) over DP × CP as above, and
// the routed experts over each expert-DP group (the holders with the same EP and expert-TP rank).
struct GradSyncGroup {
  enum class Part : uint8_t { kAll, kDense, kExperts };
  uint32_t layer_begin = 0;
  uint32_t layer_end = 0;
  uint32_t chunk = 0;
  uint32_t num_chunks = 1;
  std::vector<uint32_t> devices;  // one per replica, in pipeline/stage/replica order
  Part part = Part::kAll;
  uint32_t expert_shards = 1;  // kExperts: ep · etp (each member holds 1/expert_shards of the routed experts)
};
// Parameters of `layer` one member of `g` synchronises (its shard of the layer's part that `g` carries).
double GroupParamsPerRank(const TransformerModel& model, const GradSyncGroup& g, uint32_t layer);

// Requires a structurally valid plan. Consecutive layers with the same holders are merged.
std::vector<GradSyncGroup> DeriveGradSyncGroups(const proto::Plan& plan, const TransformerModel& model);

// Memory of one device under the plan, in GiB. Mixed precision Adam keeps 2 (weights) + 2 (gradients)
// + 12 (fp32 master weights and two moments) bytes per parameter (Rajbhandari et al. 2020, ZeRO §3);
// ZeRO-1/2/3 shard the optimizer states / + gradients / + weights over the layer's DP replicas.
// Activations: per micro-batch (TransformerModel::ActivationBytes) times the micro-batches in flight:
// 1F1B keeps min(m, S − i) at stage i of S, GPipe keeps all m, interleaved 1F1B keeps what Megatron-LM's
// schedule warms up (InterleavedInFlight; S + (S − 1)/v at stage 0 for m > S, Narayanan et al. 2021
// §2.2.2; m when m = S). Context parallelism and
// Ulysses shard the sequence, so each rank stores the activations of seq_len / (cp · ulysses) tokens;
// ring attention adds its K/V receive buffers (ContextParallelBufferBytes) while a block runs.
// Transient bytes of ring attention on one rank while a transformer block runs (0 for cp = 1): two K/V
// blocks of seq_len / cp tokens (TransformerEngine double-buffers the block being received while the
// current one is used; in the backward the K/V block travels with its gradient dK/dV, the same two
// blocks' worth).
double ContextParallelBufferBytes(const TransformerModel& model, double batch, uint32_t seq_len, uint32_t tp,
                                  uint32_t cp, proto::DType dtype);
// Under CPU offload (Plan.offload) the GPU keeps:
//   optimizer: its fp16 weights as the ZeRO stage shards them (ZeRO-3: the shard plus the gathered layer
//     being computed), the gradient buckets of OffloadGradientBufferBytes and no optimizer states;
//   optimizer_and_params: no weight shard either — only the gathered layer being computed and the next one,
//     prefetched (DeepSpeed's stage-3 prefetch, FSDP's backward prefetch): twice the largest layer.
// Host memory (`host_gib`, not part of the GPU total) holds the rank's shard of the fp32 master weights
// and optimizer states (the training's optimizer bytes per parameter) and of the fp16 gradients
// (ZeRO-Offload §3: 12 + 2 bytes per parameter under mixed-precision Adam), plus the fp16 weight shard
// under optimizer_and_params. ValidatePlan checks the sum over a node's ranks against the node's
// host_memory_gib when the cluster spec gives one; otherwise host memory is assumed to be enough.
struct DeviceMemory {
  uint32_t device = 0;
  uint32_t pipeline = 0;
  uint32_t stage = 0;
  double params_gib = 0;
  double grads_gib = 0;
  double optimizer_gib = 0;
  double activations_gib = 0;
  double workspace_gib = 0;
  double allocator_gib = 0;  // the caching allocator's overhead (training.allocator_overhead)
  double context_gib = 0;    // the CUDA context (training.cuda_context_gib)
  double nccl_gib = 0;       // NCCL's buffers of the communicators the rank uses (NcclCommunicators)
  uint32_t nccl_communicators = 0;
  double total_gib = 0;
  double capacity_gib = 0;
  double host_gib = 0;  // CPU offload: the rank's bytes in its node's host memory
  bool oom() const { return total_gib > capacity_gib; }
};

// The NCCL communicators one rank of a stage creates under Megatron-LM's process groups (PyTorch creates a
// group's communicator at its first collective, so only groups that communicate count): the default
// (world) group, used for barriers and the loss, whenever the plan has more than one device; the TP group
// (tp > 1); the CP/Ulysses group (cp · ulysses > 1); the gradient-sync group (the stage's layers have more
// than one data-parallel replica, `dp_replicas`); the pipeline group of the p2p sends (stages > 1); the
// embedding group of tied embeddings (first and last stage of a pipeline of > 1 stages).
// `two_rank` counts those of exactly two ranks (charged kNcclTwoRankFraction of the default size).
struct NcclCommunicators {
  uint32_t count = 0;
  uint32_t two_rank = 0;
};
NcclCommunicators CountNcclCommunicators(uint32_t plan_devices, uint32_t tp, uint32_t sequence_ways,
                                         uint32_t dp_replicas, uint32_t stages, bool holds_tied_end);
// The communicators of a rank of stage `stage` of pipeline `pipe`; `replicas[l]` is layer l's DP × CP
// replica count over the plan (what ZeRO shards over).
// `plan_devices`: PlanDevices(plan), counted once by the caller.
NcclCommunicators StageNcclCommunicators(const proto::Plan& plan, const TransformerModel& model, int pipe, int stage,
                                         const std::vector<uint32_t>& replicas, uint32_t plan_devices);
uint32_t PlanDevices(const proto::Plan& plan);
// The runtime memory of one rank in GiB (context + NCCL buffers; 0 with training.tensors_only_memory).
// `channel_fraction`: NcclChannelFraction of the rank's node.
double NcclGib(const NcclCommunicators& c, const proto::Training& training, double channel_fraction = 1.0);
// 1 on nodes of several GPUs on an NVLink-class fabric (NVSwitch, NVLink, xGMI); kNcclPcieChannelFraction
// on PCIe-only nodes and on one-GPU nodes (whose every communicator runs over the NIC, a few channels).
double NcclChannelFraction(const NodeInfo& node);
double ContextGib(const proto::Training& training);

// Micro-batches' worth of a stage's activations held at once under Megatron-LM's interleaved 1F1B
// (forward_backward_pipelining_with_interleaving): stage s of S with v model chunks and m micro-batches
// runs 2(S − s − 1) + (v − 1)·S warm-up chunk forwards (all m·v when m = S, or when that is fewer) and keeps
// at most one more chunk in flight in the steady state; a chunk holds 1/v of the stage's layers.
double InterleavedInFlight(uint32_t stage, uint32_t stages, uint32_t m, uint32_t v);

// Requires a structurally valid plan. One entry per device the plan uses, in plan order.
std::vector<DeviceMemory> EstimateMemory(const proto::Plan& plan, const PlanContext& ctx);

// Host memory a plan needs on one node under CPU offload (the sum of its ranks' host_gib).
struct NodeHostMemory {
  uint32_t node = 0;
  double need_gib = 0;
  double capacity_gib = 0;  // the spec's host_memory_gib; 0 when the spec gives none (not checked)
  bool oom() const { return capacity_gib > 0 && need_gib > capacity_gib; }
};
// One entry per node with offloaded state, in node order (empty without offload).
std::vector<NodeHostMemory> HostMemoryByNode(const std::vector<DeviceMemory>& memory, const Cluster& cluster);

}  // namespace hetsim::models
