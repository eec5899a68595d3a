// The lowering: a Plan turned, exactly once, into the ordered list of operations every rank (device)
// performs in one training iteration. The simulator (sim/) plays these lists on SimGrid and the
// executor (executor/) runs them with real kernels and MPI/NCCL, so "the executor runs the very same
// plan" holds by construction, and calibration can compare the two operation by operation.
//
// No SimGrid, CUDA or MPI here, and no cost: operations carry sizes (bytes, FLOPs, parameters, sequences,
// layers), micro-batch ids and categories; turning them into seconds is the consumer's business.
//
// What is decided here, once:
//  - Schedules, per pipeline, stage s of S, m micro-batches:
//      1F1B (PipeDream-flush): min(S − s − 1, m) warm-up forwards, then one forward and one backward
//           alternately, then the remaining backwards;
//      GPipe: all m forwards, then all m backwards;
//      interleaved 1F1B: Megatron-LM's virtual-pipeline order (see EmitInterleaved in lowering.cc), with
//           each pass's input receive posted ahead (kPostRecv) after the previous pass of its direction,
//           as Megatron-LM's overlap_p2p_comm posts it (docs/lowering.md).
//  - A forward pass of a micro-batch on a rank: receive the activations from the previous stage (PP),
//    [ZeRO-3 all-gather], the layers in order with each layer's TP collectives, send to the next stage.
//    The backward pass mirrors it, layers in reverse order; under full recomputation each transformer
//    block first runs its forward again (with its forward TP collectives), as Megatron-LM's per-layer
//    activation checkpointing does.
//  - TP collectives per layer (Megatron-LM, Shoeybi et al. 2019 §3; vocabulary-parallel embedding and
//    cross-entropy): embedding forward 1 all-reduce of b·s·h, backward none; transformer block 2 of b·s·h
//    in each direction; head forward 2 all-reduces, of b·s fp32 row maxima and of 2·b·s fp32
//    softmax denominators and target logits, backward 1 of b·s·h. Sequence parallelism moves the same bytes as all-gather +
//    reduce-scatter pairs and is lowered as all-reduces.
//  - PP transfers between stages of different DP or TP degrees: each receiving TP rank k gets the
//    overlapping sequences from TP rank k mod t of every sending replica that holds them; with
//    comm.pp_leader_broadcast only TP rank 0 receives and broadcasts to its TP group.
//  - Context parallelism (Megatron-LM's CP over TransformerEngine's ring attention; Liu et al. 2023, "Ring
//    Attention with Blockwise Transformers"): every rank of a CP group of cp holds seq_len / cp tokens
//    (chunks c and 2·cp − 1 − c of 2·cp, so causal work is balanced) and computes 1/cp of each layer's
//    FLOPs. Each transformer block's forward (and its recomputation) passes K/V blocks around the ring:
//    cp − 1 sends of one K/V block (2·b·(s/cp)·kv·d/t elements) to the next CP rank and cp − 1 receives
//    from the previous one; its backward passes K/V with their gradients dK/dV: cp − 1 sends and receives
//    of twice that. The sends and the receives are posted (kPostRecv) before the block's compute and the
//    receives completed after it, so the ring overlaps the block's compute as TransformerEngine overlaps
//    it with the attention steps. TP
//    collectives and PP transfers carry the rank's s/cp tokens; PP runs between equal CP ranks.
//  - DeepSpeed-Ulysses (Jacobs et al. 2023, §3): every rank of a Ulysses group of u holds seq_len / u
//    tokens; each transformer block's forward has 4 all-to-alls in the group (q, k and v to head
//    sharding before attention, the output back after it) and its backward the mirror image (d(output)
//    before, dq, dk, dv after), each of the rank's whole local tensor.
//  - Gradient synchronisation after the last backward: the layer-wise groups of DeriveGradSyncGroups in
//    backward order (later layers first), each in comm.dp_bucket_mib buckets, all-reduced (ring, tree or
//    hierarchical = reduce-scatter in the node, all-reduce across nodes, all-gather in the node) or
//    reduce-scattered under ZeRO ≥ 1; with comm.dp_overlap on a second stream that starts each group
//    as soon as the backward of its layers is done. Then the optimizer step over the rank's shard, and
//    under ZeRO ≥ 1 the parameter all-gathers.
//  - ZeRO-3 and FSDP by units (ZeRO stage 3, Rajbhandari et al., SC'20, as DeepSpeed's stage-3 parameter
//    prefetcher runs it; PyTorch FSDP, Zhao et al., VLDB'23, with one unit per block): each layer is a unit whose parameters are
//    all-gathered right before its pass and freed after it, forward and backward alike
//    (reshard_after_forward), and whose gradients are reduce-scattered after its backward, in every
//    micro-batch (gradient accumulation into the shard, as both do unless told not to sync). The
//    first unit's gather of a pass is exposed; every next unit's is prefetched behind the compute of the
//    unit before it (FSDP's backward prefetch, its forward all-gathers issued ahead by the CPU thread with
//    at most two in flight, DeepSpeed's prefetch bucket), and a unit's reduce-scatter runs behind the next
//    unit's backward; the pass's last reduce-scatter is exposed. Those calls are Op::hide_share = 1 behind the
//    compute operation before them (models/op_prices.h HideBehindGemms), so one overlapped unit takes
//    max(its compute, the next gather + the previous reduce-scatter): the calls share one stream, as
//    a single NCCL communicator runs them in order. No gradient sync after the passes and no all-gather
//    after the step (the next forward gathers). Lowered so unless the plan offloads to the CPU, a stage
//    has TP > 1, or its pipelines split the layers differently (then members of one sync group sit at other
//    places of their schedules and would issue a group's per-layer calls in other orders; DeepSpeed runs
//    ZeRO-3 without pipelines and FSDP shards each stage over that stage's replicas); those keep the older form: each pass gathers the stage's whole shard first (exposed), and
//    gradients are reduce-scattered once after the last backward (Lowering::zero_units says which).
//  - CPU offload (Plan.offload; docs/lowering.md "CPU offload"). ZeRO-Offload (Ren et al., ATC'21, §4):
//    after each gradient bucket's reduce-scatter the rank copies its shard of the bucket to host memory
//    (kHostCopy, device to host), on the stream that reduce-scatters it (with comm.dp_overlap the DP
//    stream, so the copies overlap the backward pass as §4.1 describes); layers no other replica holds
//    are copied one layer at a time, right after their backward (the one-GPU schedule of §4.1). The
//    optimizer step then runs on the host CPU (the optimizer compute operation with `host_ranks` set: the
//    plan's ranks on the node share its cores), and the updated fp16 shard is copied back to the GPU
//    (host to device) before the parameter all-gathers. With the parameters offloaded too (ZeRO-Infinity,
//    Rajbhandari et al., SC'21; FSDP CPUOffload(offload_params=True)) every parameter all-gather is
//    preceded by the host-to-device copy of the rank's shard, layers no other replica holds are copied
//    whole before each pass, and no copy follows the step (it updates the host's fp16 shard in place).
//    The one-step delayed parameter update of ZeRO-Offload §4.2 is optional there and not lowered.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/plan.h"

namespace hetsim::models {

enum class OpKind : uint8_t {
  kCompute,     // a pass (or part of one) over layers [layer_begin, layer_end) of the rank's stage
  kSend,        // post an asynchronous point-to-point send of `bytes` to device `peer`
  kRecv,        // block until the matching message from device `peer` arrived
  kPostRecv,    // post the receive of the next message from `peer` on `channel` without waiting (ring
                // attention, interleaved 1F1B's pipeline inputs: the transfer runs during the compute that
                // follows; the kRecv completes it)
  kCollective,  // take part (as `rank`) in a collective over group `group`
  kSignal,      // (main stream) tell the rank's DP stream that the next gradient group is ready; (DP stream,
                // comm.param_gather_overlap) tell the main stream that the next group's parameters are gathered
  kAwait,       // wait for the other stream's next kSignal
  kJoin,        // (main stream) wait until the rank's DP stream has finished
  kWaitSends,   // wait for every posted send to complete
  kHostCopy,    // CPU offload: copy `bytes` between this device and its node's host memory over the GPU's
                // PCIe link (`to_host`: device to host, else host to device); the stream waits for it
};

// What an operation's time is booked as, in reports and timelines of the simulator and the executor.
// kCp: context-parallel ring exchanges and Ulysses all-to-alls (communication inside attention).
// kEp: expert parallelism's token dispatch and combine (all-to-alls in the EP group, and the expert-TP
// all-gathers and reduce-scatters around the experts).
enum class Category : uint8_t { kForward, kBackward, kOptimizer, kTp, kPp, kDp, kZero, kCp, kIdle, kEp };
inline constexpr int kNumCategories = 10;
const char* CategoryName(Category c);

// kAllToAll: every member sends S/n of its S-byte buffer to each other member (Ulysses).
enum class CollectiveKind : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kAllToAll };
const char* CollectiveName(CollectiveKind k);
const char* OpKindName(OpKind k);  // as `hetsim lower` prints it
enum class Algorithm : uint8_t { kRing, kTree, kNvls };
enum class ReduceOp : uint8_t { kSum, kMax };

// Point-to-point channels: messages between two devices are matched in order per channel.
enum Channel : uint8_t { kChanPpForward = 0, kChanPpBackward = 1, kChanTp = 2, kChanDp = 3, kChanCp = 4 };

inline constexpr uint32_t kNone = UINT32_MAX;

struct Op {
  OpKind kind = OpKind::kCompute;
  Category category = Category::kForward;
  CollectiveKind collective = CollectiveKind::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  ReduceOp reduce = ReduceOp::kSum;
  uint8_t channel = 0;
  bool recompute = false;  // compute: a forward recomputation inside the backward pass
  bool in_pass = false;    // collective: issued by the layer code inside the surrounding compute pass (TP)
  // TP collective of a backward pass: runs behind column-parallel GEMMs that are this share of the compute
  // operation before it (TpCollective::hidden_flops over that operation's FLOPs); 0: exposed.
  float hide_share = 0;
  // Collective behind compute (hide_share > 0) whose kernels hold this share of the GPU's SMs meanwhile
  // (comm.ep_overlap: the EP dispatcher's), slowing that compute (models/op_prices.h HideBehindGemms).
  float sm_share = 0;
  uint16_t micro_batch = 0;
  uint16_t bucket = 0;        // DP: this bucket of `num_buckets`
  uint16_t num_buckets = 1;
  uint32_t calls = 1;         // collective: the calls it stands for (a pass's fused TP all-reduces)
  uint32_t peer = kNone;      // send/recv: the other device
  uint32_t group = kNone;     // collective: index into Lowering::groups
  uint32_t rank = 0;          // collective: this device's rank in the group
  uint32_t sync_group = kNone;  // DP/ZeRO collective: index into Lowering::sync_groups
  uint32_t layer_begin = 0;   // compute / TP collective: the layers; DP/ZeRO: the sync group's layers
  uint32_t layer_end = 0;
  uint32_t seq_begin = 0;     // compute: the rank's sequences of the micro-batch; send/recv: the rows
  uint32_t seq_end = 0;       // [seq_begin, seq_end) of the rank's share that travel
  double bytes = 0;           // send/recv/collective payload (collectives: the full buffer S)
  double flops = 0;           // compute (forward/backward): FLOPs on this rank (divided by TP)
  double params = 0;          // optimizer: parameters this rank updates
  // Optimizer under CPU offload: the step runs on the host CPU of the rank's node, whose cores the plan's
  // `host_ranks` ranks on that node share (each gets 1/host_ranks of them); 0: on the GPU.
  uint32_t host_ranks = 0;
  bool to_host = false;       // host copy: device to host (gradients), else host to device (parameters)
  uint32_t sequences() const { return seq_end - seq_begin; }
};

// The operations of one rank.
struct RankOps {
  uint32_t device = 0;
  uint32_t pipeline = 0;
  uint32_t stage = 0;
  uint32_t replica = 0;   // intra-stage DP replica
  uint32_t tp_rank = 0;
  uint32_t tp = 1;
  uint32_t shard_rank = 0;   // sequence shard: cp_rank · ulysses + ulysses_rank
  SequenceSharding shard;    // the stage's CP and Ulysses degrees
  uint32_t stage_index = 0;  // position in the stage's device list (the expert layout's rank)
  // The stage's expert layout and the busiest EP rank's routing imbalance for this rank's micro-batch
  // (StageExperts; ep = etp = 1 and imbalance 1 for a dense model).
  ExpertSharding experts;
  uint32_t layer_begin = 0;  // the stage's layers
  uint32_t layer_end = 0;
  uint32_t num_stages = 0;         // of the rank's pipeline
  uint32_t num_micro_batches = 0;  // of the rank's pipeline
  std::vector<Op> ops;        // the main stream (empty for a rank LoweringOptions::lower_devices leaves out)
  std::vector<Op> dp_stream;  // the overlapped gradient-sync stream (empty unless comm.dp_overlap)
  // LoweringOptions::skeletons: the rank's operations with the schedule cut to one pass of each kind
  // (see there), the DP stream's operations inline after the main stream's.
  std::vector<Op> skeleton;
};

struct Lowering {
  std::vector<uint32_t> devices;              // devices the plan uses, in plan order
  std::vector<RankOps> ranks;                 // parallel to `devices`
  std::vector<std::vector<uint32_t>> groups;  // collective groups (devices in rank order)
  std::vector<GradSyncGroup> sync_groups;     // DeriveGradSyncGroups in backward order
  std::vector<uint32_t> device_slot;          // device -> index into `devices` (or kNone)
  // HetHub §3.1: transfers between nodes are staged through host memory (for the simulator's platform).
  bool cpu_staged = false;
  proto::CommOptions comm;  // the plan's communication options (the communicator's paths: models/communicator.h)
  bool tp_overlap = false;  // comm.tp_overlap: TP collectives overlap the pass they follow (the simulator)
  // Full recomputation has compute operations of its own (`Op::recompute`): a backward operation is then
  // the backward alone. Otherwise (no or selective recomputation, or fused passes) a backward operation
  // includes whatever the plan recomputes.
  bool separate_recompute = false;
  // Some ranks were left out (LoweringOptions::lower_devices): their `ops` and `dp_stream` are empty.
  bool partial = false;
  // ZeRO-3 lowered by units (see the header comment): per-layer gathers and reduce-scatters inside the
  // passes (Op::bucket: the layer's index in its sync group of Op::num_buckets layers).
  bool zero_units = false;
};

struct LoweringOptions {
  // One compute operation per pass and micro-batch (consecutive layers merged) and the pass's TP
  // collectives fused into one all-reduce of the same total bytes after it. Off: one compute operation
  // per layer, each followed by that layer's TP collectives (what the executor issues).
  bool fuse_passes = false;
  // Layers whose TP communication is already inside the compute's measured time (profiles that include
  // it): no TP collective is emitted for them. Called with (device, layer, TP degree, sequences).
  std::function<bool(uint32_t, uint32_t, uint32_t, double)> tp_in_compute;
  // Indexed by device: the ranks whose operations are lowered. Empty: every rank. The others keep their
  // placement (RankOps without operations), and the collective groups they would use are still made when
  // `skeletons` is on (in the same order as a full lowering makes them).
  std::vector<bool> lower_devices;
  // Every rank also gets its skeleton (RankOps::skeleton): the forward of each chunk (virtual stage) on
  // micro-batch 0, the backward of each chunk on micro-batch 0 and on the last micro-batch (which hands
  // gradient groups to an overlapped DP stream), then the gradient sync, optimizer and ZeRO gathers as in
  // `ops`. A rank's operations for every other micro-batch repeat one of these passes with only the
  // micro-batch changed, so two ranks of pipelines with the same stage count, micro-batch count and
  // schedule whose skeletons agree operation by operation (peers and groups aside) agree on every
  // operation: a few passes per rank decide folding (sim/program.h) where the full lists take millions.
  bool skeletons = false;
  // With `skeletons`: called after each rank's skeleton is lowered, ranks in plan order, with the lowering
  // so far (its groups as made by then); returning false releases the skeleton (models::RankFolder compares
  // ranks as they come, so a large plan's skeletons need not all be held at once).
  std::function<bool(const Lowering&, uint32_t slot)> skeleton_done;
};

// Lowers a structurally valid plan (ValidatePlanStructure). Errors for plans no consumer can run
// (interleaved 1F1B with ZeRO-3 or CPU offload; ZeRO-3 across pipelines of different micro-batch counts).
Result<Lowering> LowerPlan(const proto::Plan& plan, const PlanContext& ctx, const LoweringOptions& options = {});

// TP collectives of one layer's forward or backward pass for `batch` sequences (see the header comment),
// in the order Megatron-LM and Transformer Engine issue them. `bytes` is the whole tensor's (an all-gather's
// output, a reduce-scatter's input). Under sequence parallelism (Korthikanti et al. 2022, §4.2.2) each
// all-reduce around a column-/row-parallel pair becomes an all-gather before the column-parallel GEMM and a
// reduce-scatter after the row-parallel one: the embedding reduce-scatters its output (all-gathers its
// gradient), a block all-gathers before QKV and the MLP and reduce-scatters after the attention output and
// the MLP, the head all-gathers before its GEMM. The backward of each column-parallel linear (QKV, the MLP's
// up projection, the head) re-gathers its sequence-sharded input before its dgrad GEMM and reduce-scatters
// the dgrad before its wgrad GEMM, both asynchronous and hidden behind those GEMMs (Megatron-LM's
// LinearWithGradAccumulationAndAsyncCommunication, Transformer Engine's Linear/LayerNormLinear); the
// row-parallel ones all-gather their output gradient first, exposed. Without SP the column-parallel dgrad
// all-reduce is the one asynchronous call, behind the wgrad GEMM. FP8 training (Transformer Engine's
// delayed scaling) gathers the blocks' inputs and output gradients already cast to FP8 (one byte an element);
// reduce-scatters and all-reduces stay in the 2-byte type, as do the embedding's and the head's calls
// (Megatron's own layers, not Transformer Engine's).
struct TpCollective {
  double bytes = 0;
  ReduceOp reduce = ReduceOp::kSum;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  // Backward: launched asynchronously before a column-parallel GEMM that runs while it does (the input's
  // re-gather before the dgrad GEMM, the dgrad's reduce-scatter or all-reduce before the wgrad GEMM), that
  // GEMM's FLOPs for the call's tokens on one TP rank; 0: exposed (docs/lowering.md "TP collectives behind
  // the backward's GEMMs").
  double hidden_flops = 0;
};
// `seq_len`: the tokens of a sequence on the rank (seq_len / CP or Ulysses ways); `tp` divides hidden_flops.
// `blocking`: comm.tp_backward_blocking (no call hidden without SP).
std::vector<TpCollective> LayerTpCollectives(const TransformerModel& model, uint32_t layer, bool forward, double batch,
                                             uint32_t seq_len, proto::DType dtype, bool sequence_parallel = false,
                                             uint32_t tp = 1, bool blocking = false);

// Bytes of one K/V block a ring-attention rank sends per ring step in the forward pass: K and V of
// `batch` sequences of seq_len / cp tokens, kv heads / tp (at least one) per rank. The backward sends
// 2 · (cp − 1) such blocks (the K/V round and the dK/dV round).
double RingKvBlockBytes(const TransformerModel& model, double batch, uint32_t seq_len, uint32_t tp, uint32_t cp,
                        proto::DType dtype);
// Ulysses all-to-alls of one transformer block's forward (q, k, v, output) or backward (d(output), dq, dk,
// dv) pass: each the rank's local tensor of `batch` sequences of seq_len / ulysses tokens.
std::vector<double> UlyssesAllToAllBytes(const TransformerModel& model, bool forward, double batch, uint32_t seq_len,
                                         uint32_t tp, uint32_t ulysses, proto::DType dtype);

// One line per operation, for dumps and comparisons (`hetsim lower`, hetsim-exec --ops-out):
//   "device 3 main 12 recv pp mb 1 peer 2 rows 0-2 bytes 32768"
// Groups are printed as their device lists, so two lowerings that number groups differently still compare
// equal. `stream` is "main" or "dp".
std::string FormatOp(const Lowering& lowering, uint32_t device, const char* stream, size_t index, const Op& op);
// Every rank's operations, ranks in ascending device order.
std::string FormatLowering(const Lowering& lowering);

// Totals for tests and summaries.
struct OpTotals {
  double flops = 0;          // Σ compute FLOPs
  double send_bytes = 0;     // Σ send bytes
  double recv_bytes = 0;     // Σ receive bytes
  double collective_bytes[kNumCategories] = {};  // Σ over ranks of each rank's collective buffer bytes
  double cp_send_bytes = 0;  // Σ ring-attention send bytes (included in send_bytes)
  uint64_t cp_sends = 0;     // number of ring-attention sends
  double optimizer_params = 0;
  double host_optimizer_params = 0;  // of which updated on the host CPU (CPU offload)
  double d2h_bytes = 0;      // Σ host copies device to host (CPU offload)
  double h2d_bytes = 0;      // Σ host copies host to device
};
OpTotals TotalOps(const Lowering& lowering);

}  // namespace hetsim::models
