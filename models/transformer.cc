#include "models/transformer.h"

#include <algorithm>

namespace hetsim::models {

// FP8 training keeps bf16 tensors (proto::DTYPE_FP8); TF32 keeps fp32 ones.
RecomputeModules ModulesOf(const proto::Training& training) {
  if (training.recompute_modules().empty()) return kCoreAttentionOnly;
  RecomputeModules m = 0;
  for (int x : training.recompute_modules()) m |= 1u << x;
  return m;
}

double DTypeBytes(proto::DType dtype) {
  return dtype == proto::DTYPE_FP32 || dtype == proto::DTYPE_TF32 ? 4.0 : 2.0;
}

bool MixedPrecision(proto::DType dtype) { return DTypeBytes(dtype) < 4.0; }

double OptimizerBytesPerParam(const proto::Training& training) {
  const bool adam = training.optimizer() == proto::Training::OPTIMIZER_ADAM;
  const double moment = training.optimizer_state_dtype() == proto::DTYPE_BF16 ? 2.0 : 4.0;
  return (MixedPrecision(training.dtype()) ? 4.0 : 0.0) + (adam ? 2 * moment : 4.0) +
         training.optimizer_extra_bytes_per_param();
}

Result<TransformerModel> TransformerModel::Build(proto::Model spec, const std::string& file) {
  ErrorList errors;
  const std::string at = file + ": ";
  const uint32_t h = spec.hidden_size(), a = spec.num_attention_heads();
  if (spec.head_dim() == 0 && !spec.has_mla() && (a == 0 || h % a != 0)) {
    errors.Add(at + "num_attention_heads: " + std::to_string(a) + " does not divide hidden_size " +
               std::to_string(h));
  }
  const uint32_t kv = spec.num_kv_heads() == 0 ? a : spec.num_kv_heads();
  if (kv == 0 || (a != 0 && a % kv != 0)) {
    errors.Add(at + "num_kv_heads: " + std::to_string(kv) + " must divide num_attention_heads " + std::to_string(a));
  }
  if (spec.num_layers() == 0) errors.Add(at + "num_layers: must be at least 1");
  if (spec.vocab_size() == 0) errors.Add(at + "vocab_size: must be at least 1");
  if (spec.encoder_only() && spec.num_token_types() == 0) {
    // Allowed (encoder without segment embeddings), nothing to check.
  }
  if (spec.has_defaults() && spec.defaults().seq_len() > spec.max_seq_len()) {
    errors.Add(at + "defaults.seq_len: " + std::to_string(spec.defaults().seq_len()) + " exceeds max_seq_len " +
               std::to_string(spec.max_seq_len()));
  }
  if (spec.has_moe()) {
    const auto& moe = spec.moe();
    if (moe.top_k() > moe.num_experts()) {
      errors.Add(at + "moe.top_k: " + std::to_string(moe.top_k()) + " exceeds moe.num_experts " +
                 std::to_string(moe.num_experts()) + " (a token picks top_k distinct experts)");
    }
    if (moe.first_dense_layers() >= spec.num_layers()) {
      errors.Add(at + "moe.first_dense_layers: " + std::to_string(moe.first_dense_layers()) +
                 " leaves no MoE layer among num_layers " + std::to_string(spec.num_layers()));
    }
    if (moe.num_shared_experts() == 0 && moe.shared_expert_ffn_hidden_size() > 0) {
      errors.Add(at + "moe.shared_expert_ffn_hidden_size: set without moe.num_shared_experts (set it to 1 or more)");
    }
  }
  if (spec.sliding_window_every() > 0 && spec.sliding_window() == 0) {
    errors.Add(at + "sliding_window_every: set without sliding_window (the window in tokens)");
  }
  if (!errors.empty()) return errors.ToStatus();
  TransformerModel m;
  m.spec_ = std::move(spec);
  return m;
}

LayerKind TransformerModel::kind(uint32_t layer) const {
  if (layer == 0) return LayerKind::kEmbedding;
  if (layer > spec_.num_layers()) return LayerKind::kHead;
  return LayerKind::kTransformer;
}

uint32_t TransformerModel::kv_heads() const {
  return spec_.num_kv_heads() == 0 ? spec_.num_attention_heads() : spec_.num_kv_heads();
}

double TransformerModel::SequenceParallelParams(uint32_t layer) const {
  switch (kind(layer)) {
    case LayerKind::kEmbedding: return 0;
    case LayerKind::kTransformer:
      // An MoE block's router is replicated over TP and runs on the sequence shard (Megatron-Core's TopKRouter
      // marks its weight sequence_parallel, so finalize_model_grads all-reduces it with the norms').
      return 2 * NormParams() + (spec_.linear_bias() ? 2.0 * spec_.hidden_size() : 0.0) +
             (IsMoe(layer) ? double(spec_.hidden_size()) * spec_.moe().num_experts() : 0.0);
    case LayerKind::kHead: return NormParams() + MtpModules() * (SequenceParallelParams(MtpBlock()) + 2 * NormParams());
  }
  return 0;
}

double TransformerModel::NormParams() const {
  const double h = spec_.hidden_size();
  return spec_.norm() == proto::Model::NORM_RMSNORM ? h : 2 * h;
}

uint32_t TransformerModel::head_dim() const {
  if (spec_.has_mla()) return spec_.mla().v_head_dim();
  if (spec_.head_dim() > 0) return spec_.head_dim();
  return spec_.hidden_size() / spec_.num_attention_heads();
}

double TransformerModel::QueryWidth() const {
  const double a = spec_.num_attention_heads();
  if (spec_.has_mla()) return a * (spec_.mla().qk_nope_head_dim() + spec_.mla().qk_rope_head_dim());
  return a * head_dim();
}

double TransformerModel::ValueWidth() const { return double(spec_.num_attention_heads()) * head_dim(); }

double TransformerModel::AttentionKeys(uint32_t layer, double seq_len) const {
  return (BlockClass(layer) & 2u) != 0 ? std::min(seq_len, double(spec_.sliding_window())) : seq_len;
}

bool TransformerModel::IsMoe(uint32_t layer) const {
  if (!spec_.has_moe() || kind(layer) != LayerKind::kTransformer) return false;
  // HuggingFace's DeepSeek-V3 and Megatron-Core's --moe-layer-freq: block i (0-based) is MoE when
  // i >= first_k_dense_replace and i % moe_layer_freq == 0.
  const uint32_t i = layer - 1, freq = std::max(1u, spec_.moe().layer_frequency());
  return i >= spec_.moe().first_dense_layers() && i % freq == 0;
}

uint32_t TransformerModel::BlockClass(uint32_t layer) const {
  if (kind(layer) != LayerKind::kTransformer) return 0;
  const uint32_t every = std::max(1u, spec_.sliding_window_every());
  const bool window = spec_.sliding_window() > 0 && (layer - 1) % every == 0;
  return (IsMoe(layer) ? 1u : 0u) | (window ? 2u : 0u);
}

double TransformerModel::AttentionMatmulParams() const {
  const double h = spec_.hidden_size();
  if (spec_.has_mla()) {
    // DeepSeek-V3 §2.1.1: W^DQ (h -> q_lora), W^UQ and W^QR (q_lora -> heads·(nope + rope)), W^DKV and W^KR
    // (h -> kv_lora + rope), W^UK and W^UV (kv_lora -> heads·(nope + v)), W^O (heads·v -> h).
    const auto& m = spec_.mla();
    const double a = spec_.num_attention_heads();
    const double q = m.q_lora_rank() > 0 ? h * m.q_lora_rank() + m.q_lora_rank() * QueryWidth() : h * QueryWidth();
    const double kv = h * (m.kv_lora_rank() + m.qk_rope_head_dim()) +
                      double(m.kv_lora_rank()) * a * (m.qk_nope_head_dim() + m.v_head_dim());
    return q + kv + ValueWidth() * h;
  }
  const double kvd = double(kv_heads()) * head_dim();
  return 2 * h * QueryWidth() + 2 * h * kvd;
}

double TransformerModel::AttentionParams() const {
  const double h = spec_.hidden_size(), kvd = double(kv_heads()) * head_dim();
  double p = AttentionMatmulParams();
  if (spec_.linear_bias()) p += QueryWidth() + 2 * kvd + h;
  if (spec_.qk_norm()) p += 2.0 * head_dim();
  if (spec_.attention_sinks()) p += spec_.num_attention_heads();
  if (spec_.has_mla()) p += spec_.mla().q_lora_rank() + spec_.mla().kv_lora_rank();  // the latents' RMSNorms
  return p;
}

double TransformerModel::MlpParams(double f) const {
  const double h = spec_.hidden_size();
  const bool b = spec_.linear_bias();
  if (spec_.mlp() == proto::Model::MLP_SWIGLU) return 3 * h * f + (b ? 2 * f + h : 0);
  return 2 * h * f + (b ? f + h : 0);
}

double TransformerModel::SharedExpertWidth() const {
  const auto& moe = spec_.moe();
  if (moe.num_shared_experts() == 0) return 0;
  return moe.shared_expert_ffn_hidden_size() > 0 ? moe.shared_expert_ffn_hidden_size()
                                                 : double(moe.num_shared_experts()) * moe.expert_ffn_hidden_size();
}

double TransformerModel::MoeParams() const {
  const auto& moe = spec_.moe();
  const double h = spec_.hidden_size(), e = moe.num_experts();
  // The router's h x E linear, its bias (GPT-OSS) or the sigmoid router's per-expert balancing bias
  // (DeepSeek-V3's e_score_correction_bias).
  double router = h * e;
  if (moe.router_bias() || moe.router() == proto::MoE::ROUTER_SIGMOID) router += e;
  const double shared = SharedExpertWidth() > 0 ? MlpParams(SharedExpertWidth()) : 0;
  return e * MlpParams(moe.expert_ffn_hidden_size()) + shared + router;
}

double TransformerModel::ExpertParams(uint32_t layer) const {
  const uint32_t blocks = ExpertBlocks(layer);
  return blocks > 0 ? blocks * spec_.moe().num_experts() * MlpParams(spec_.moe().expert_ffn_hidden_size()) : 0;
}

uint32_t TransformerModel::ExpertBlocks(uint32_t layer) const {
  if (IsMoe(layer)) return 1;
  return kind(layer) == LayerKind::kHead && IsMoe(MtpBlock()) ? MtpModules() : 0;
}

double TransformerModel::BlockMatmulParams(uint32_t layer) const {
  const double h = spec_.hidden_size();
  const double per_ffn = spec_.mlp() == proto::Model::MLP_SWIGLU ? 3 * h : 2 * h;
  double mlp = per_ffn * spec_.ffn_hidden_size();
  if (IsMoe(layer)) {
    const auto& moe = spec_.moe();
    mlp = per_ffn * (double(moe.top_k()) * moe.expert_ffn_hidden_size() + SharedExpertWidth()) + h * moe.num_experts();
  }
  return AttentionMatmulParams() + mlp;
}

double TransformerModel::Params(uint32_t layer) const {
  const double h = spec_.hidden_size(), v = spec_.vocab_size();
  switch (kind(layer)) {
    case LayerKind::kEmbedding: {
      double p = v * h + double(spec_.num_token_types()) * h;
      if (spec_.position() == proto::Model::POSITION_LEARNED) p += double(spec_.max_seq_len()) * h;
      if (spec_.encoder_only()) p += NormParams();
      return p;
    }
    case LayerKind::kTransformer:
      return AttentionParams() + (IsMoe(layer) ? MoeParams() : MlpParams(spec_.ffn_hidden_size())) + 2 * NormParams();
    case LayerKind::kHead: {
      double p = spec_.tied_embeddings() ? 0 : v * h;
      if (spec_.encoder_only()) {
        p += (h * h + h) + (h * h + h) + NormParams() + v;  // pooler, MLM transform + norm, decoder bias
      } else {
        p += NormParams();
      }
      return p;
    }
  }
  return 0;
}

double TransformerModel::TotalParams() const {
  double total = 0;
  for (uint32_t l = 0; l < num_layers(); ++l) total += Params(l);
  return total;
}

double TransformerModel::ActiveParams(uint32_t layer) const {
  if (!IsMoe(layer)) return Params(layer);
  const auto& moe = spec_.moe();
  return Params(layer) - double(moe.num_experts() - moe.top_k()) * MlpParams(moe.expert_ffn_hidden_size());
}

double TransformerModel::TotalActiveParams(bool include_embedding) const {
  double total = 0;
  for (uint32_t l = include_embedding ? 0 : 1; l < num_layers(); ++l) total += ActiveParams(l);
  return total;
}

double TransformerModel::MtpParams() const {
  if (!spec_.has_moe() || spec_.moe().mtp_modules() == 0) return 0;
  // DeepSeek-V3 §2.2: per module a block (an MoE block, like the model's last), the projection M_k of
  // [h; h] -> h and RMSNorms of both inputs; the embedding and the output head are the main model's.
  const double h = spec_.hidden_size();
  return spec_.moe().mtp_modules() * (Params(spec_.num_layers()) + 2 * h * h + 2 * NormParams());
}

double TransformerModel::ParamsPerRank(uint32_t layer, uint32_t tp, bool head_holds_embedding_copy,
                                       const ExpertSharding& experts) const {
  const double all = ParamsPerRank(layer, tp, head_holds_embedding_copy);
  const double routed = ExpertParams(layer);
  if (routed <= 0) return all;
  // ParamsPerRank splits the routed experts over TP like every other matrix; here over ep · etp instead.
  return all - routed / tp + routed / (double(experts.ep) * std::max(1u, experts.etp));
}

double TransformerModel::ParamsPerRank(uint32_t layer, uint32_t tp, bool head_holds_embedding_copy) const {
  const double h = spec_.hidden_size(), v = spec_.vocab_size(), t = tp;
  switch (kind(layer)) {
    case LayerKind::kEmbedding:
      // Vocabulary-parallel embedding; position/segment tables and norms replicated.
      return v * h / t + (Params(layer) - v * h);
    case LayerKind::kTransformer: {
      // Column/row-parallel matrices and column biases are split; norms and row-parallel biases are not.
      // The router's linear is replicated as well (Megatron-Core's TopKRouter).
      double replicated = 2 * NormParams() + (spec_.linear_bias() ? 2 * h : 0);
      if (IsMoe(layer)) replicated += h * spec_.moe().num_experts();
      return (Params(layer) - replicated) / t + replicated;
    }
    case LayerKind::kHead: {
      double p = Params(layer);
      if (spec_.tied_embeddings() && head_holds_embedding_copy) p += v * h;
      const double split = (spec_.tied_embeddings() && !head_holds_embedding_copy) ? 0 : v * h;
      // Multi-token prediction: each module's block split as the model's last is, its column-parallel 2h -> h
      // projection, its two replicated input norms (the embedding and the output head are the main model's).
      const double mtp = MtpModules() * (ParamsPerRank(MtpBlock(), tp, false) + 2 * h * h / t + 2 * NormParams());
      return (p - split) + split / t + mtp;
    }
  }
  return 0;
}

double TransformerModel::ForwardFlops(uint32_t layer, double batch, uint32_t seq_len) const {
  const double tokens = batch * seq_len, h = spec_.hidden_size(), v = spec_.vocab_size();
  switch (kind(layer)) {
    case LayerKind::kEmbedding: return 0;  // a table lookup
    case LayerKind::kTransformer: {
      // Scores and values: 2·b·s·keys·(query width) + 2·b·s·keys·(value width) (= 4·b·s²·h for MHA).
      const double keys = AttentionKeys(layer, seq_len);
      return 2 * tokens * BlockMatmulParams(layer) + 2 * tokens * keys * (QueryWidth() + ValueWidth());
    }
    case LayerKind::kHead: {
      double f = 2 * tokens * v * h;
      if (spec_.encoder_only()) f += 2 * tokens * h * h;  // MLM transform
      // Multi-token prediction: per module its projection, its block and the shared output head again.
      if (MtpModules() > 0) {
        f += MtpModules() * (2 * tokens * 2 * h * h + ForwardFlops(MtpBlock(), batch, seq_len) + 2 * tokens * v * h);
      }
      return f;
    }
  }
  return 0;
}

double TransformerModel::BackwardFlops(uint32_t layer, double batch, uint32_t seq_len) const {
  return 2 * ForwardFlops(layer, batch, seq_len);
}

double TransformerModel::IterationModelFlops(double sequences, uint32_t seq_len) const {
  double f = 0;
  for (uint32_t l = 0; l < num_layers(); ++l) f += 3 * ForwardFlops(l, sequences, seq_len);
  return f;
}

double TransformerModel::ActivationBytes(uint32_t layer, double batch, uint32_t seq_len, uint32_t tp,
                                         bool sequence_parallel, proto::Recompute recompute, proto::DType dtype,
                                         proto::Attention attention, double dropout,
                                         const ExpertSharding& experts, RecomputeModules modules) const {
  const double B = DTypeBytes(dtype), s = seq_len, b = batch, h = spec_.hidden_size(), t = tp;
  const double sbh = s * b * h;
  switch (kind(layer)) {
    case LayerKind::kEmbedding:
      return 0;  // only token ids (negligible) are kept
    case LayerKind::kHead: {
      // Input of the final norm and of the projection, and fp32 logits for the loss (vocab-parallel).
      const double head = (sequence_parallel ? 2 * B * sbh / t : 2 * B * sbh) + 4.0 * s * b * spec_.vocab_size() / t;
      if (MtpModules() == 0) return head;
      // Multi-token prediction, per module: its block's, the inputs of its two norms and of its projection
      // (h, h, 2h; sequence-sharded under SP), and its own pass through the output head.
      const double block = ActivationBytes(MtpBlock(), batch, seq_len, tp, sequence_parallel, recompute, dtype, attention,
                                           dropout, experts, modules);
      return head + MtpModules() * (block + (sequence_parallel ? 4 * B * sbh / t : 4 * B * sbh) + head);
    }
    case LayerKind::kTransformer:
      break;
  }
  if (recompute == proto::RECOMPUTE_FULL) {
    return sequence_parallel ? B * sbh / t : B * sbh;  // only the layer input
  }
  const double kvd = double(kv_heads()) * head_dim();
  const double a = spec_.num_attention_heads();
  const bool swiglu = spec_.mlp() == proto::Model::MLP_SWIGLU;
  // An MoE layer's MLP part: the shared experts' internals split over TP like a dense MLP's, plus the
  // routed part on this rank (RoutedActivationBytes); a dense block's MLP of ffn_hidden_size.
  const bool moe = IsMoe(layer);
  const double f = moe ? SharedExpertWidth() : spec_.ffn_hidden_size();
  // Megatron-Core's recompute modules (selective only) drop what they recompute.
  const bool selective = recompute == proto::RECOMPUTE_SELECTIVE;
  const auto recomputed = [&](proto::RecomputeModule m) { return selective && Recomputes(modules, m); };
  const double routed =
      moe ? RoutedActivationBytes(batch * s / t, dtype, experts, recomputed(proto::RECOMPUTE_MODULE_MOE_ACT)) : 0;
  if (recompute == proto::RECOMPUTE_OP_SELECTIVE) {
    // torchtitan's policy (torchtitan/distributed/activation_checkpoint.py, `selective_ac_option: op`):
    // MUST_SAVE the outputs of the attention kernel, of reduce-scatters and of every other matmul, prefer
    // recomputing everything else. Kept: the block's input (the checkpoint's), Q (1st matmul), V (3rd), the
    // attention output and its log-sum-exp, the MLP's first matmul (5th) and, with SwiGLU, its down
    // projection (7th, after the reduce-scatter under sequence parallelism). Dropout masks are recomputed.
    const double replicated = B * sbh * (swiglu ? 2 : 1);
    double split = B * s * b * (QueryWidth() + (spec_.has_mla() ? ValueWidth() : kvd) + ValueWidth() + f);
    if (attention != proto::ATTENTION_STANDARD) split += 4.0 * s * b * a;
    return (sequence_parallel ? replicated / t : replicated) + split / t + routed;
  }
  // FP8 training (Transformer Engine): a block linear keeps the FP8 copy of its input for the backward, one
  // byte an element (te.Linear, LayerNormLinear, GroupedLinear save the quantised input), not the bf16 one.
  const double B8 = dtype == proto::DTYPE_FP8 ? 1.0 : B;
  // Replicated across TP ranks unless sequence parallel: inputs of both norms, and of QKV and the MLP (the
  // norms' outputs, not kept when the norms are recomputed: `layernorm`).
  const double replicated = 2 * B * sbh + (recomputed(proto::RECOMPUTE_MODULE_LAYERNORM) ? 0 : 2 * B8 * sbh);
  // Split across TP ranks: Q, K, V; the attention output (attention's own, and the output projection's
  // input: one tensor but under FP8); MLP internals (the first GEMM's output, the activation's output that the
  // second GEMM keeps).
  // A dense block's recomputed MLP (`mlp`) keeps only its input, already counted above.
  const double mlp_internal =
      !moe && recomputed(proto::RECOMPUTE_MODULE_MLP) ? 0 : ((swiglu ? 2 : 1) * B + B8) * s * b * f;
  // Q, K and V as attention reads them (MLA: the up-projected heads) and the attention output.
  const double kw = spec_.has_mla() ? QueryWidth() : kvd, vw = spec_.has_mla() ? ValueWidth() : kvd;
  const double out = dtype == proto::DTYPE_FP8 ? B + B8 : B;
  double split = s * b * (B * (QueryWidth() + kw + vw) + out * ValueWidth()) + mlp_internal;
  double latents = 0;  // replicated over TP: MLA's down projections are not split
  if (spec_.has_mla() && recomputed(proto::RECOMPUTE_MODULE_MLA_UP_PROJ)) {
    // `mla_up_proj`: the up-projected Q, K and V are recomputed from the latents, which are kept instead (the
    // up projections' inputs: the normed query and key-value latents, and the shared rotary key).
    split -= s * b * B * (QueryWidth() + kw + vw);
    latents = B * s * b * (spec_.mla().q_lora_rank() + spec_.mla().kv_lora_rank() + spec_.mla().qk_rope_head_dim());
  }
  double masks = 0;  // 1 byte per element (Korthikanti et al. 2022 §4.1)
  if (attention != proto::ATTENTION_STANDARD) {  // flash, either kernel
    split += 4.0 * s * b * a;  // softmax log-sum-exp statistics, fp32
  } else if (!recomputed(proto::RECOMPUTE_MODULE_CORE_ATTN)) {
    split += B * a * s * s * b;  // softmax output kept for the value product
    if (dropout > 0) split += a * s * s * b + B * a * s * s * b;  // attention-dropout mask and its output
  }
  if (dropout > 0) masks = 2 * sbh;  // after the attention output projection and after the MLP
  return (sequence_parallel ? (replicated + masks) / t : replicated + masks) + split / t + routed + latents;
}

double TransformerModel::RoutedActivationBytes(double tokens, proto::DType dtype, const ExpertSharding& experts,
                                               bool recompute_activation) const {
  // Megatron-Core's MoE layer (alltoall dispatcher, TEGroupedMLP) keeps per routed token copy: the permuted
  // input of the first expert GEMM (h; FP8 training keeps its FP8 copy), that GEMM's output (2·f_e under
  // SwiGLU, else f_e) and the activation's output (f_e, the second GEMM's input, FP8 under FP8); the
  // permutation and un-permutation keep index maps only, and the routing probabilities are applied in the
  // activation. Per token, the router's fp32 logits and probabilities (2·E·4 bytes). The busiest rank holds
  // `imbalance` times its even share of the routed copies (an expert-TP group gathers etp ranks' tokens,
  // each rank computing 1/etp of the experts' width).
  const auto& moe = spec_.moe();
  const double B = DTypeBytes(dtype), B8 = dtype == proto::DTYPE_FP8 ? 1.0 : B;
  const double h = spec_.hidden_size(), fe = moe.expert_ffn_hidden_size();
  const bool swiglu = spec_.mlp() == proto::Model::MLP_SWIGLU;
  const double copies = tokens * moe.top_k() * std::max(1.0, experts.imbalance);
  // `moe_act` recomputes the activation in the backward: its output is not kept.
  return copies * (std::max(1u, experts.etp) * h * B8 + ((swiglu ? 2 : 1) * B + (recompute_activation ? 0 : B8)) * fe) +
         tokens * 8.0 * moe.num_experts();
}

double TransformerModel::RecomputedPeakBytes(uint32_t layer, double batch, uint32_t seq_len, uint32_t tp,
                                             bool sequence_parallel, proto::Recompute recompute, proto::DType dtype,
                                             proto::Attention attention, double dropout,
                                             const ExpertSharding& experts) const {
  if (recompute != proto::RECOMPUTE_FULL && recompute != proto::RECOMPUTE_OP_SELECTIVE) return 0;
  const auto bytes = [&](proto::Recompute r) {
    return ActivationBytes(layer, batch, seq_len, tp, sequence_parallel, r, dtype, attention, dropout, experts);
  };
  const double all = bytes(proto::RECOMPUTE_NONE);
  return recompute == proto::RECOMPUTE_FULL ? all : std::max(0.0, all - bytes(recompute));
}

double TransformerModel::OpSelectiveRecomputedShare(uint32_t layer, uint32_t seq_len) const {
  if (kind(layer) != LayerKind::kTransformer) return 0;
  const double h = spec_.hidden_size(), kvd = double(kv_heads()) * head_dim(), f = spec_.ffn_hidden_size();
  // Per token: K (h -> kvd), the attention output (h -> h), and the MLP's up (SwiGLU, h -> f) or out (f -> h).
  const double recomputed = 2 * h * kvd + 2 * h * h + 2 * h * f;
  const double forward = ForwardFlops(layer, 1, seq_len) / seq_len;
  return forward > 0 ? std::min(1.0, recomputed / forward) : 0;
}

double TransformerModel::BoundaryBytes(double batch, uint32_t seq_len, proto::DType dtype) const {
  return DTypeBytes(dtype) * batch * seq_len * spec_.hidden_size();
}

std::optional<std::vector<std::pair<uint32_t, uint32_t>>> UniformBlocksSplit(const TransformerModel& model,
                                                                             uint32_t pp) {
  const uint32_t L = model.num_blocks();
  if (pp == 0 || L % pp != 0) return std::nullopt;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  const uint32_t k = L / pp;
  for (uint32_t s = 0; s < pp; ++s) {
    const uint32_t begin = s == 0 ? 0 : 1 + s * k;
    const uint32_t end = s + 1 == pp ? model.num_layers() : 1 + (s + 1) * k;
    out.emplace_back(begin, end);
  }
  return out;
}

}  // namespace hetsim::models
