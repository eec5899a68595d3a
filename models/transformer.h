// Per-layer math of a transformer: parameters, FLOPs and activation bytes.
//
// Layers are numbered over the whole model as in a Plan: 0 = embedding, 1..L = transformer blocks,
// L+1 = head (final norm, output projection, loss). Formulas:
// - Parameters: counted matrix by matrix (docs/models.md gives the formula).
// - FLOPs: 2 FLOPs per multiply-add of every matmul, plus the attention score and value products
//   (2·2·b·s²·h per layer, no causal halving: the convention of Narayanan et al. 2021, "Efficient
//   Large-Scale Language Model Training on GPU Clusters", eq. 3). Backward = 2 × forward.
// - Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
//   Models", §4.1 (34·s·b·h + 5·a·s²·b bytes per layer at 16 bit), generalised element by element to
//   grouped-query attention, any FFN width and SwiGLU, without dropout masks (modern LLM pre-training
//   runs without dropout); with flash attention the s² terms are not stored.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/proto/model.pb.h"
#include "models/proto/training.pb.h"
#include "models/status.h"

namespace hetsim::models {

enum class LayerKind { kEmbedding, kTransformer, kHead };

// How each sequence is sharded across ranks that hold the same weights: context parallelism (ring
// attention over `cp` ranks, Liu et al. 2023; Megatron-LM's CP) and DeepSpeed-Ulysses (all-to-all to head
// sharding over `ulysses` ranks, Jacobs et al. 2023). Each rank holds seq_len / ways() tokens outside
// attention.
struct SequenceSharding {
  uint32_t cp = 1;
  uint32_t ulysses = 1;
  uint32_t ways() const { return cp * ulysses; }
  bool operator==(const SequenceSharding&) const = default;
};

// How a stage lays out the experts of its MoE layers (plan.proto Stage.ep_degree / expert_tp_degree):
// each rank holds num_experts / ep of the routed experts, each expert split over etp ranks; `imbalance` is
// the busiest rank's routed tokens over its even share (models/moe.h). Dense blocks ignore it.
struct ExpertSharding {
  uint32_t ep = 1;
  uint32_t etp = 1;
  double imbalance = 1;
  // Megatron-Core's alltoall dispatcher (false: the flex dispatchers, DeepEP and HybridEP: the plan's
  // comm.ep_dispatcher node_dedup), and dropless routing (no capacity factor): the kernels around the
  // grouped GEMMs differ (models/kernels.h MoE kernels).
  bool alltoall = true;
  bool dropless = true;
  bool operator==(const ExpertSharding&) const = default;
};

// Megatron-Core's --recompute-modules under recompute: selective, as a bit set (bit i: proto::RecomputeModule
// value i). The default is the attention core alone.
using RecomputeModules = uint32_t;
inline constexpr RecomputeModules kCoreAttentionOnly = 1u << proto::RECOMPUTE_MODULE_CORE_ATTN;
inline bool Recomputes(RecomputeModules modules, proto::RecomputeModule m) { return (modules >> m) & 1u; }
// The training's modules (its list, or the default when empty).
RecomputeModules ModulesOf(const proto::Training& training);

// Bytes of one element of `dtype`.
double DTypeBytes(proto::DType dtype);
// True when the training keeps fp32 master weights beside lower-precision ones (bf16, fp16, fp8).
bool MixedPrecision(proto::DType dtype);
// Optimizer-side bytes per parameter beyond the weights and gradients: the fp32 master copy (mixed
// precision), the optimizer's state (Adam: two moments in `optimizer_state_dtype`, fp32 by default; SGD: one
// fp32 momentum) and `optimizer_extra_bytes_per_param`. The one rule every memory estimate uses.
double OptimizerBytesPerParam(const proto::Training& training);

class TransformerModel {
 public:
  // Validates the architecture (head counts divide, kv heads divide heads, …).
  static Result<TransformerModel> Build(proto::Model spec, const std::string& file);

  const proto::Model& spec() const { return spec_; }
  const std::string& name() const { return spec_.name(); }
  uint32_t num_blocks() const { return spec_.num_layers(); }
  // Layers a plan partitions: embedding + blocks + head.
  uint32_t num_layers() const { return spec_.num_layers() + 2; }
  LayerKind kind(uint32_t layer) const;
  uint32_t kv_heads() const;
  // Width of one attention head (Model.head_dim, else hidden / heads); under MLA the value head's.
  uint32_t head_dim() const;
  // Widths summed over heads: queries (= keys per head) and values (the attention output before its
  // projection). Without MLA both are heads · head_dim; under MLA heads · (nope + rope) and heads · v.
  double QueryWidth() const;
  double ValueWidth() const;
  // Keys each query of `layer` attends over at `seq_len` tokens (the sliding window where it applies).
  double AttentionKeys(uint32_t layer, double seq_len) const;
  // Mixture of experts: whether the model has any, and whether block `layer` is an MoE layer.
  bool HasMoe() const { return spec_.has_moe(); }
  bool IsMoe(uint32_t layer) const;
  // Parameters of the routed experts of `layer` (the part expert parallelism shards), 0 for other layers.
  double ExpertParams(uint32_t layer) const;
  // Parameters of `layer` one token passes through (its top-k experts only), and summed over the model
  // (with or without the input embedding table, a lookup). Equal to Params for dense models.
  double ActiveParams(uint32_t layer) const;
  double TotalActiveParams(bool include_embedding = true) const;
  // The shared experts' hidden units in all (0: none, or a dense model), and the attention's matmul
  // parameters (Q, K, V or MLA's projections, and the output projection).
  double SharedExpertWidth() const;
  double AttentionMatmulParams() const;
  // Multi-token-prediction modules' parameters (Model.moe.mtp_modules; their embedding and head shared),
  // not part of TotalParams.
  double MtpParams() const;
  // Multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core's MultiTokenPredictionBlock): the modules run on the
  // stage that holds the output head, after the main model, each one more block like the model's last (MtpBlock),
  // so the head layer carries their work, parameters and activations. ExpertBlocks: the MoE blocks `layer`
  // runs (1 for an MoE block; the modules for the head when their block is MoE; else 0).
  uint32_t MtpModules() const { return spec_.has_moe() ? spec_.moe().mtp_modules() : 0; }
  uint32_t MtpBlock() const { return num_blocks(); }
  uint32_t ExpertBlocks(uint32_t layer) const;
  bool HasExperts(uint32_t layer) const { return ExpertBlocks(layer) > 0; }
  // The kind of block `layer` is: bit 0 an MoE layer, bit 1 sliding-window attention (0 for the embedding
  // and the head). Blocks of one class cost the same, so consumers price one of each.
  uint32_t BlockClass(uint32_t layer) const;

  // Parameters of `layer` as counted for the model's size (a tied head counts no output matrix).
  double Params(uint32_t layer) const;
  double TotalParams() const;
  // Parameters of `layer` that one rank of a TP group of `tp` holds (norms and row-parallel biases are
  // replicated; a tied head that lives apart from the embedding holds its own copy of the matrix).
  double ParamsPerRank(uint32_t layer, uint32_t tp, bool head_holds_embedding_copy) const;
  // ... with the routed experts of an MoE layer laid out by `experts` (each rank: 1/(ep·etp) of them).
  double ParamsPerRank(uint32_t layer, uint32_t tp, bool head_holds_embedding_copy,
                       const ExpertSharding& experts) const;
  // Parameters of `layer` that sequence parallelism applies to on sequence shards (the norms, the
  // row-parallel biases and an MoE block's router, replicated over TP): their gradients are partial per TP
  // rank and summed over the TP group after the backward passes (Megatron-LM's finalize_model_grads).
  double SequenceParallelParams(uint32_t layer) const;

  // Forward FLOPs of `layer` for a micro-batch of `batch` sequences of `seq_len` tokens (whole layer,
  // not divided by TP).
  double ForwardFlops(uint32_t layer, double batch, uint32_t seq_len) const;
  // Backward FLOPs (2 × forward; the embedding's weight gradient is a scatter, counted as 0).
  double BackwardFlops(uint32_t layer, double batch, uint32_t seq_len) const;
  // Model FLOPs of one iteration over `sequences` sequences (forward + backward, no recomputation):
  // the numerator of MFU.
  double IterationModelFlops(double sequences, uint32_t seq_len) const;

  // Bytes of activations one TP rank stores for the backward pass of `layer` per micro-batch; with
  // `dropout` > 0, plus the dropout masks (1 byte per element).
  double ActivationBytes(uint32_t layer, double batch, uint32_t seq_len, uint32_t tp, bool sequence_parallel,
                         proto::Recompute recompute, proto::DType dtype, proto::Attention attention,
                         double dropout = 0, const ExpertSharding& experts = {},
                         RecomputeModules modules = kCoreAttentionOnly) const;
  // Bytes a backward pass re-materialises for one layer at a time under `recompute` (what it keeps is in
  // ActivationBytes): full recomputation rebuilds all of the layer's activations, op-level selective the
  // ones it did not keep; none and selective (attention core, whose scores flash attention never stores)
  // nothing counted here.
  double RecomputedPeakBytes(uint32_t layer, double batch, uint32_t seq_len, uint32_t tp, bool sequence_parallel,
                             proto::Recompute recompute, proto::DType dtype, proto::Attention attention,
                             double dropout = 0, const ExpertSharding& experts = {}) const;
  // Under op-level selective recomputation (proto::RECOMPUTE_OP_SELECTIVE), the share of a block's forward
  // FLOPs its backward pass repeats: the matmuls torchtitan's policy does not keep. The block's matmuls in
  // call order are Q, K, V, the attention output, then the MLP's (SwiGLU: gate, up, down; else in, out);
  // every other one is kept (the 1st, 3rd, ...), so K, the attention output and the up (SwiGLU) or out
  // projection are recomputed. torchtitan's blocks have separate Q, K and V matmuls (Megatron fuses them),
  // which is the order this follows. Norms and activations are recomputed too; they are memory-bound and
  // not counted here.
  double OpSelectiveRecomputedShare(uint32_t layer, uint32_t seq_len) const;
  // Bytes of the hidden states crossing a stage boundary per micro-batch (b·s·h elements).
  double BoundaryBytes(double batch, uint32_t seq_len, proto::DType dtype) const;

 private:
  double NormParams() const;
  double AttentionParams() const;
  double MlpParams(double ffn) const;  // one MLP (or expert) of `ffn` hidden units, biases included
  double MoeParams() const;            // an MoE layer's MLP part: experts, shared experts, router
  // Activation bytes of an MoE layer's routed part on one rank that routes `tokens` tokens.
  double RoutedActivationBytes(double tokens, proto::DType dtype, const ExpertSharding& experts,
                               bool recompute_activation = false) const;
  // Matmul parameters of `layer` one token passes through (attention, router, top-k and shared experts).
  double BlockMatmulParams(uint32_t layer) const;
  proto::Model spec_;
};

// Megatron-LM's uniform pipeline split: the blocks evenly over `pp` stages, the embedding with the first
// stage and the head with the last, as [begin, end) layer ranges; nullopt when pp does not divide the
// block count.
std::optional<std::vector<std::pair<uint32_t, uint32_t>>> UniformBlocksSplit(const TransformerModel& model,
                                                                             uint32_t pp);

}  // namespace hetsim::models
