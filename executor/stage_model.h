// The part of a Llama-style decoder one rank holds: the plan layers of its stage — one range, or under
// interleaved 1F1B one range per model chunk (models::StageChunks) — sharded for its TP rank
// (executor/sharding.h), with forward and backward passes per micro-batch and chunk written against the
// Backend interface.
//
// Layers: 0 = embedding (vocabulary-parallel; partial lookups all-reduced over the TP group), 1..L =
// blocks (pre-RMSNorm, grouped-query attention with RoPE, SwiGLU MLP; Megatron-LM column/row-parallel
// projections with one all-reduce after each row-parallel projection in the forward pass and one after
// each column-parallel input gradient in the backward pass), L+1 = head (final RMSNorm, vocabulary-
// parallel output projection and cross-entropy: max and sum all-reduces, Megatron-LM §3).
//
// The loss is the mean token cross-entropy over the whole global batch, so the head seeds the backward
// pass with grad_scale = 1 / (global batch · seq_len) whatever the micro-batch and pipeline layout;
// gradients of every micro-batch, replica and pipeline are then plain sums.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "executor/backend.h"
#include "executor/sharding.h"
#include "executor/trace.h"
#include "models/lowering.h"
#include "models/plan.h"
#include "models/transformer.h"

namespace hetsim::executor {

struct ModelOptions {
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  uint64_t seed = 1234;
  // Selective activation recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  // Transformer Models", §4.2; Megatron-LM's --recompute-granularity selective): a block's forward does not
  // keep the attention core's softmax probabilities (the s × s scores per head); its backward recomputes
  // them from the q, k and v it kept.
  bool selective_recompute = false;
  // Sequence parallelism (Korthikanti et al. 2022 §4.2.2, Megatron-LM's --sequence-parallel; with TP > 1):
  // between the TP regions the residual stream, the norms and the stage's input and output are
  // sequence-sharded — TP rank k holds positions [k·s/t, (k+1)·s/t) of every sequence — and each TP
  // all-reduce becomes an all-gather before the column-parallel GEMMs and a reduce-scatter after the
  // row-parallel ones (backward: the mirror image). The gathered norm outputs are kept for the backward (no
  // second all-gather there). The norms' gradients are partial per TP rank (GradSync sums them).
  bool sequence_parallel = false;
  // comm.tp_backward_blocking: without SP the column-parallel dgrad's all-reduce is not issued behind the
  // wgrad GEMM (the op log says so; on CPU workers every call is synchronous anyway).
  bool tp_backward_blocking = false;
  // Expert parallelism (MoE models; docs/executor.md "Mixture of experts"): this rank is EP rank `ep_rank`
  // of `ep` and holds experts [ep_rank·E/ep, (ep_rank+1)·E/ep) of every MoE block; as expert-TP rank
  // `etp_rank` of `etp` it holds rows [etp_rank·F/etp, (etp_rank+1)·F/etp) of each of their F FFN units
  // (column-parallel gate and up, row-parallel down). `capacity_factor` (training.moe_capacity_factor,
  // required for MoE blocks): Megatron-Core's drop-and-pad, each expert takes ceil(cf · tokens · top_k / E)
  // copies of a rank's tokens (the rest are dropped, empty slots padded with zeros), so every all-to-all
  // has a fixed size.
  uint32_t ep = 1;
  uint32_t ep_rank = 0;
  uint32_t etp = 1;
  uint32_t etp_rank = 0;
  double capacity_factor = 0;
};

struct Param {
  ParamSpec spec;
  Buffer master;  // f32 [held rows, cols]
  Buffer weight;  // compute copy (act dtype) when the backend keeps one
  Buffer grad;    // f32, same shape as master
  Buffer adam_m, adam_v;
  Tensor w() const { return weight.empty() ? master.t() : weight.t(); }
};

// Told of every layer pass and TP collective the model runs, in the order it runs them (the executor's
// record of what it executed, compared with the plan's lowering: hetsim-exec --ops-out).
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // `recompute`: the forward recomputation of a block inside the backward pass.
  virtual void LayerPass(bool forward, bool recompute, uint32_t mb, uint32_t layer, int64_t sequences) = 0;
  // `kind`: all-reduce (`max`: of maxima), or under sequence parallelism all-gather / reduce-scatter; `bytes`:
  // the whole tensor's; `behind_gemms`: a column-parallel linear's backward call that Megatron-LM launches
  // before the GEMM it runs behind (models::LayerTpCollectives).
  virtual void TpCollective(uint32_t mb, uint32_t layer, double bytes, bool max,
                            models::CollectiveKind kind = models::CollectiveKind::kAllReduce,
                            bool behind_gemms = false) = 0;
  // A Ulysses all-to-all of `bytes` (this rank's whole tensor), reported after the block's TP collectives
  // (the lowering's order within a pass).
  virtual void UlyssesAllToAll(uint32_t mb, uint32_t layer, double bytes) {
    (void)mb, (void)layer, (void)bytes;
  }
  // Context parallelism's ring messages of one block pass (`bytes`, one per message), reported before the
  // pass's compute (`before`: the sends to the next CP rank and the receives posted from the previous one)
  // and after it (the receives completed), the lowering's form.
  virtual void CpRing(uint32_t mb, uint32_t layer, const std::vector<double>& bytes, bool before) {
    (void)mb, (void)layer, (void)bytes, (void)before;
  }
  // An MoE block's collective around its experts, reported after the block's TP collectives and Ulysses
  // all-to-alls in the order it ran (the lowering's within a pass: dispatch, expert-TP all-gather,
  // reduce-scatter, combine): `kind` all-to-all in the EP group (dispatch or combine, or their gradients;
  // `bytes`: this rank's send buffer), or all-gather / reduce-scatter in the expert-TP group (`bytes`: the
  // gathered tensor's).
  virtual void ExpertCollective(uint32_t mb, uint32_t layer, models::CollectiveKind kind, double bytes) {
    (void)mb, (void)layer, (void)kind, (void)bytes;
  }
};

class StageModel {
 public:
  // `chunks`: the layer ranges the rank holds, in chunk order (one without interleaving); `tp_comm` may be
  // null when tp == 1; `recorder` may be null (no timing).
  StageModel(Backend* backend, const models::TransformerModel& model, std::vector<models::LayerRange> chunks,
             uint32_t tp, uint32_t tp_rank, Comm* tp_comm, const ModelOptions& options, SliceRecorder* recorder);
  StageModel(Backend* backend, const models::TransformerModel& model, uint32_t layer_begin, uint32_t layer_end,
             uint32_t tp, uint32_t tp_rank, Comm* tp_comm, const ModelOptions& options, SliceRecorder* recorder)
      : StageModel(backend, model, {{layer_begin, layer_end}}, tp, tp_rank, tp_comm, options, recorder) {}

  bool holds_embedding() const { return chunks_.front().begin == 0; }
  bool holds_head() const { return chunks_.back().end == model_.num_layers(); }
  const std::vector<models::LayerRange>& chunks() const { return chunks_; }
  // The chunk whose range is [begin, end), or −1.
  int ChunkOf(uint32_t begin, uint32_t end) const;
  std::vector<Param>& params() { return params_; }

  // Forward pass of micro-batch `mb` over model chunk `chunk`: `batch` sequences of `seq` tokens. `input`
  // is the token ids [T, 1] i32 when the chunk holds the embedding, else the hidden states [T, hidden];
  // `labels` [T, 1] i32 when it holds the head. Returns the output hidden states (an empty Buffer when the
  // chunk holds the head). Keeps what the backward pass needs or, when `recompute` (full activation
  // recomputation, Megatron-LM style: each block keeps only its input and runs its forward again right
  // before its backward).
  Buffer Forward(uint32_t mb, int64_t batch, int64_t seq, Buffer input, Buffer labels, float grad_scale,
                 bool recompute, uint32_t chunk = 0);
  // Backward pass of `mb` over `chunk`; `dout` is the gradient of the output (empty when the chunk holds
  // the head). Accumulates parameter gradients; returns the gradient of the input (empty when the chunk
  // holds the embedding). With `down_to` above the chunk's first layer, runs only the layers from where the
  // micro-batch's backward stands (the chunk's end at first) down to `down_to` and returns the gradient of
  // layer `down_to`'s input, to be passed back in as `dout` of the next part (comm.dp_overlap signals
  // between them).
  Buffer Backward(uint32_t mb, Buffer dout, uint32_t chunk = 0, uint32_t down_to = 0);

  // Σ of the token cross-entropies of every forward pass since the last ZeroLoss ([1,1] f32; zero unless
  // the stage holds the head).
  Tensor loss() const { return loss_.t(); }
  void ZeroLoss();
  void ZeroGrads();
  // Adam over every parameter (`step` is 1-based), but those of the `skip` layers (ZeRO updates them).
  void OptimizerStep(const AdamParams& adam, const std::set<uint32_t>& skip = {});

  // Per-layer timing (profiles): when set, every layer's forward, backward (with its recomputation) and
  // optimizer step is recorded as a slice with its layer, and the bytes each layer keeps for the backward
  // pass are measured.
  void SetLayerRecorder(SliceRecorder* recorder) { layer_recorder_ = recorder; }
  void SetOpObserver(OpObserver* observer) { observer_ = observer; }
  // DeepSpeed-Ulysses (Jacobs et al. 2023, §3.1) over `comm` (u members, this rank's sequence shard is its
  // rank in it): every pass gets seq / u tokens of each sequence; each block's q, k and v go by all-to-all
  // from [tokens / u, heads] to [tokens, heads / u], attention runs on the whole sequence for the rank's
  // 1/u of the local heads, and its output comes back; the backward does the mirror image. The local
  // query and key/value heads must divide by u.
  void SetUlysses(Comm* comm) { uly_comm_ = comm; }
  int64_t ulysses() const { return uly_comm_ != nullptr ? uly_comm_->size() : 1; }
  // Context parallelism over the ring `comm` (cp members; this rank's CP rank c is its rank in it), the
  // load-balanced causal split of ring attention (Liu et al. 2023; Megatron-LM/TransformerEngine): every
  // pass gets chunks c and 2·cp − 1 − c of each sequence's 2·cp chunks. Each block's forward circulates
  // the ranks' K/V blocks around the ring (cp − 1 steps) and runs causal attention for the rank's queries
  // against the whole sequence's keys; it keeps only its own K/V, so the backward circulates them again,
  // computes its queries' contributions to every block's dK/dV and sends them home around the ring (a ring
  // reduce-scatter, cp − 1 steps). docs/executor.md says how this differs from TransformerEngine's
  // blockwise kernels.
  void SetContextParallel(Comm* comm) { cp_comm_ = comm; }
  // The EP group's communicator (ModelOptions::ep members; may stay null when ep == 1) and the expert-TP
  // group's (ModelOptions::etp members; may stay null when etp == 1).
  void SetExpertParallel(Comm* ep_comm, Comm* etp_comm = nullptr);
  int64_t cp() const { return cp_comm_ != nullptr ? cp_comm_->size() : 1; }
  // Bytes kept by each layer of the last chunk that ran a forward pass keeping activations (index: layer
  // − the chunk's first layer), when a layer recorder is set.
  const std::vector<double>& activation_bytes() const { return activation_bytes_; }

 private:
  // An MoE block's routing of one micro-batch: E experts × C slots (capacity), expert-major.
  struct MoeRoute {
    int64_t capacity = 0;
    std::vector<int64_t> slot_token;  // [E·C]: the token row in a slot, −1 for padding
    std::vector<float> slot_weight;   // [E·C]: its router weight (0 for padding)
    std::vector<int64_t> copy_slot;   // [tokens·top_k]: the slot of each token's j-th choice, −1 if dropped
    std::vector<float> weight;        // [tokens·top_k]: softmax over the token's top-k logits
    std::vector<int32_t> expert;      // [tokens·top_k]: the chosen experts, best first
  };
  struct BlockSaved {
    Buffer x, inv1, n1, q, k, v, probs, attn, x2, inv2, n2, gate, up, act;
    // MoE blocks (gate, up, act above are the shared experts'): the routing, the local experts' inputs,
    // their gate, up and activation ([local experts · etp · ep · C] rows, expert-major, then the source
    // expert-TP rank, then the source EP rank), and the combined expert outputs in this rank's slot order
    // (the router's gradient needs them).
    MoeRoute route;
    Buffer e_in, e_gate, e_up, e_act, e_out;
  };
  struct HeadSaved {
    Buffer x, inv, n, dlogits;
  };
  struct MicroBatch {
    models::LayerRange range;  // the chunk's layers
    uint32_t backward_end = 0;  // layers [range.begin, backward_end) still wait for their backward
    int64_t batch = 0, seq = 0;
    float grad_scale = 0;
    Buffer tokens;  // the embedding's input
    Buffer labels;
    std::vector<BlockSaved> blocks;
    HeadSaved head;
    bool saved = false;
  };

  // The layer's parameter of `kind`; for a routed expert tensor, local expert `expert`'s.
  Param& P(uint32_t layer, ParamKind kind, int64_t expert = 0);
  void TpAllReduce(Tensor t, ReduceOp op, int32_t mb, bool behind_gemms = false);
  // Sequence parallelism: rows of the residual stream per micro-batch of `rows` tokens; the all-gather of a
  // sequence-sharded tensor ([batch·seq/t, w] → [batch·seq, w]); the reduce-scatter of a partial one
  // (the reverse). Without it: the tensor itself, and the all-reduce.
  bool sp() const { return options_.sequence_parallel && tp_ > 1; }
  int64_t ShardRows(int64_t rows) const { return sp() ? rows / tp_ : rows; }
  // The row layouts the sequence-sharding collectives move between (SP's all-gather and reduce-scatter,
  // Ulysses' all-to-alls): `by_member` holds each of `members` members' run of every sequence, member by
  // member ([members][batch][part]); `by_sequence` the same runs in sequence order ([batch][members][part]).
  // Copies one into the other.
  void Regroup(Tensor by_member, Tensor by_sequence, int64_t batch, int64_t members, bool to_sequences);
  Buffer SpGather(Buffer shard, int64_t batch, int64_t seq, int32_t mb);
  // SpGather's all-gather (`behind_gemms`: a backward's re-gather of a column-parallel linear's input).
  Buffer GatherShard(Tensor shard, int64_t batch, int64_t seq, int32_t mb, bool behind_gemms = false);
  Buffer SpReduce(Buffer full, int64_t batch, int64_t seq, int32_t mb, bool behind_gemms = false);
  // Under SP a column-parallel linear keeps its input sequence-sharded and gathers it again in the backward
  // (Megatron-LM, Transformer Engine): `saved` itself without SP.
  Buffer Regather(const Buffer& saved, int64_t batch, int64_t seq, int32_t mb);
  Buffer New(int64_t rows, int64_t cols, DType dtype) { return Buffer(be_, rows, cols, dtype); }
  Buffer NewAct(int64_t rows, int64_t cols) { return Buffer(be_, rows, cols, be_->act_dtype()); }
  // checkpoint: blocks keep only their inputs (full recomputation).
  Buffer RunForward(uint32_t mb, MicroBatch& st, Buffer input, bool checkpoint);
  Buffer BlockForward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s, Buffer x);
  Buffer BlockBackward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s, Buffer dy);
  void HeadForward(uint32_t mb, MicroBatch& st, HeadSaved& s, Buffer x, bool add_loss);
  Buffer HeadBackward(uint32_t mb, MicroBatch& st, HeadSaved& s);
  // The MLP half of a block: dense (SwiGLU) or MoE (shared experts, router, routed experts). Forward: from
  // the normed input (`n2` as saved: the sequence shard under SP) to the MLP's output before the residual
  // ([ShardRows(T), h]); backward: from the output's gradient `dy` (the shard under SP) to the normed input's
  // gradient (same rows), accumulating the parameters' gradients.
  Buffer MlpForward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s);
  Buffer MlpBackward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s, const Buffer& dy);
  // The routed experts of an MoE block (executor/stage_moe.cc): router, top-k, capacity, dispatch
  // all-to-all, the local experts' SwiGLU MLPs, combine all-to-all, weighted un-permutation; and the exact
  // backward of all of it (the router's included). `n2` and `dy` are [tokens, h] rows this rank routes.
  Buffer MoeForward(uint32_t layer, uint32_t mb, BlockSaved& s, Tensor n2);
  Buffer MoeBackward(uint32_t layer, uint32_t mb, BlockSaved& s, Tensor n2, Tensor dy);
  // Top-k of the router's logits ([tokens, E] f32 on the host), softmax over the chosen, slots by capacity.
  MoeRoute Route(const std::vector<float>& logits, int64_t tokens) const;
  // The local experts' SwiGLU MLPs (their F/etp units each) on s.e_in ([local experts · rows, h],
  // expert-major) and their backward; under expert TP the outputs and input gradients are partial sums.
  Buffer ExpertsForward(uint32_t layer, BlockSaved& s, int64_t rows);
  Buffer ExpertsBackward(uint32_t layer, BlockSaved& s, Tensor dout, int64_t rows);
  // Between this rank's slot order ([E·C, h]: expert-major) and the exchanged blocks: the dispatch
  // all-to-all sends EP rank j the slots of its experts and returns, per source rank, the slots of this
  // rank's experts, regrouped expert-major ([local experts][ep][C]); `ToSlots` is the mirror image.
  Buffer ToExperts(Tensor slots, int64_t capacity, int32_t mb);
  Buffer ToSlots(Tensor grouped, int64_t capacity, int32_t mb);
  // Expert TP (Megatron-Core's gather_from / reduce_scatter_to_sequence_parallel_region over the expert-TP
  // group): GatherExperts all-gathers the members' received rows ([local experts][rows] each) into
  // [local experts][etp][rows]; ScatterExperts reduce-scatters partial sums in that layout back to this
  // member's [local experts][rows]. Both return their input as it is at expert TP 1.
  Buffer GatherExperts(Buffer grouped, int32_t mb);
  Buffer ScatterExperts(Buffer partial, int32_t mb);
  // The EP all-to-all (a copy at EP 1; its bytes wait in pending_ep_ until the block's end, FlushAllToAll).
  void EpAllToAll(Tensor in, Tensor out, int32_t mb);
  // Ulysses' layout changes for `batch` sequences of `seq_local` tokens per rank, `width` = local heads ×
  // head dim: [batch·seq_local, width] (this rank's tokens) to [batch·seq_local·u, width / u] (every token of
  // head group j = this rank's rank), and back.
  Buffer ToHeads(Tensor x, int64_t batch, int64_t seq_local, int32_t mb);
  Buffer ToTokens(Tensor y, int64_t batch, int64_t seq_local, int32_t mb);
  // The all-to-all (its bytes wait in pending_a2a_ until the block's end, FlushAllToAll).
  void AllToAll(Tensor in, Tensor out);
  void FlushAllToAll(uint32_t mb, uint32_t layer);
  // CP: the first row of half `half` (0: chunk r, 1: chunk 2·cp − 1 − r) of CP rank r's tokens in a
  // sequence of S tokens.
  int64_t CpPosition(int64_t r, int half, int64_t seq_local) const;
  // This rank's rows [batch·seq_local, w] at their positions in [batch·S, w] (zeros elsewhere), and back.
  Buffer CpScatter(Tensor local, int64_t batch, int64_t seq_local);
  Buffer CpExtract(Tensor full, int64_t batch, int64_t seq_local);
  // The ring's K/V round: every rank's k and v ([batch·seq_local, kv width]) at their positions in *kf, *vf.
  void CpGatherKv(Tensor k, Tensor v, int64_t batch, int64_t seq_local, int32_t mb, Buffer* kf, Buffer* vf);
  // The ring's dK/dV round: the sums over the ring of every rank's full-sequence *dk, *dv at this rank's
  // positions, in place of them.
  void CpReduceScatterKv(Buffer* dk, Buffer* dv, int64_t batch, int64_t seq_local, int32_t mb);
  // The ring messages of one block pass (the lowering's: cp − 1 K/V blocks, and in a backward as many of
  // dK/dV), reported to the observer.
  void ReportRing(uint32_t mb, uint32_t layer, const MicroBatch& st, bool forward, bool before);

  Backend* be_;
  const models::TransformerModel& model_;
  std::vector<models::LayerRange> chunks_;
  uint32_t tp_, tp_rank_;
  Comm* tp_comm_;
  ModelOptions options_;
  SliceRecorder* recorder_;
  SliceRecorder* layer_recorder_ = nullptr;
  OpObserver* observer_ = nullptr;
  Comm* uly_comm_ = nullptr;           // SetUlysses
  Comm* cp_comm_ = nullptr;            // SetContextParallel
  std::vector<double> pending_a2a_;  // bytes of the block's all-to-alls not yet reported
  Comm* ep_comm_ = nullptr;          // SetExpertParallel
  Comm* etp_comm_ = nullptr;         // SetExpertParallel
  // The block's expert collectives (kind, bytes) not yet reported.
  std::vector<std::pair<models::CollectiveKind, double>> pending_ep_;
  uint32_t current_layer_ = 0;
  std::vector<double> activation_bytes_;
  HeadShard heads_;
  int64_t ffn_local_ = 0;
  int64_t shared_local_ = 0;  // an MoE block's shared experts' width on this TP rank
  int64_t vocab_begin_ = 0;
  std::vector<Param> params_;
  std::vector<size_t> layer_first_param_;  // by layer: index of its first parameter (SIZE_MAX: not held)
  std::map<std::pair<uint32_t, uint32_t>, MicroBatch> micro_batches_;  // by (micro-batch, chunk)
  Buffer loss_;
};

}  // namespace hetsim::executor
