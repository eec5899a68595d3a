#include "models/transformer.h"

namespace hetsim::models {

// FP8 training keeps bf16 tensors (proto::DTYPE_FP8); TF32 keeps fp32 ones.
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
  if (a == 0 || h % a != 0) {
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
      return 2 * NormParams() + (spec_.linear_bias() ? 2.0 * spec_.hidden_size() : 0.0);
    case LayerKind::kHead: return NormParams();
  }
  return 0;
}

double TransformerModel::NormParams() const {
  const double h = spec_.hidden_size();
  return spec_.norm() == proto::Model::NORM_RMSNORM ? h : 2 * h;
}

double TransformerModel::AttentionParams() const {
  const double h = spec_.hidden_size(), kvd = double(kv_heads()) * head_dim();
  const double bias = spec_.linear_bias() ? (h + 2 * kvd + h) : 0;
  return 2 * h * h + 2 * h * kvd + bias;
}

double TransformerModel::MlpParams() const {
  const double h = spec_.hidden_size(), f = spec_.ffn_hidden_size();
  const bool b = spec_.linear_bias();
  if (spec_.mlp() == proto::Model::MLP_SWIGLU) return 3 * h * f + (b ? 2 * f + h : 0);
  return 2 * h * f + (b ? f + h : 0);
}

double TransformerModel::BlockMatmulParams() const {
  const double h = spec_.hidden_size(), f = spec_.ffn_hidden_size(), kvd = double(kv_heads()) * head_dim();
  const double mlp = spec_.mlp() == proto::Model::MLP_SWIGLU ? 3 * h * f : 2 * h * f;
  return 2 * h * h + 2 * h * kvd + mlp;
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
      return AttentionParams() + MlpParams() + 2 * NormParams();
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

double TransformerModel::ParamsPerRank(uint32_t layer, uint32_t tp, bool head_holds_embedding_copy) const {
  const double h = spec_.hidden_size(), v = spec_.vocab_size(), t = tp;
  switch (kind(layer)) {
    case LayerKind::kEmbedding:
      // Vocabulary-parallel embedding; position/segment tables and norms replicated.
      return v * h / t + (Params(layer) - v * h);
    case LayerKind::kTransformer: {
      // Column/row-parallel matrices and column biases are split; norms and row-parallel biases are not.
      const double replicated = 2 * NormParams() + (spec_.linear_bias() ? 2 * h : 0);
      return (Params(layer) - replicated) / t + replicated;
    }
    case LayerKind::kHead: {
      double p = Params(layer);
      if (spec_.tied_embeddings() && head_holds_embedding_copy) p += v * h;
      const double split = (spec_.tied_embeddings() && !head_holds_embedding_copy) ? 0 : v * h;
      return (p - split) + split / t;
    }
  }
  return 0;
}

double TransformerModel::ForwardFlops(uint32_t layer, double batch, uint32_t seq_len) const {
  const double tokens = batch * seq_len, h = spec_.hidden_size(), v = spec_.vocab_size();
  switch (kind(layer)) {
    case LayerKind::kEmbedding: return 0;  // a table lookup
    case LayerKind::kTransformer:
      return 2 * tokens * BlockMatmulParams() + 4 * batch * double(seq_len) * seq_len * h;
    case LayerKind::kHead: {
      double f = 2 * tokens * v * h;
      if (spec_.encoder_only()) f += 2 * tokens * h * h;  // MLM transform
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
                                         proto::Attention attention, double dropout) const {
  const double B = DTypeBytes(dtype), s = seq_len, b = batch, h = spec_.hidden_size(), t = tp;
  const double sbh = s * b * h;
  switch (kind(layer)) {
    case LayerKind::kEmbedding:
      return 0;  // only token ids (negligible) are kept
    case LayerKind::kHead:
      // Input of the final norm and of the projection, and fp32 logits for the loss (vocab-parallel).
      return (sequence_parallel ? 2 * B * sbh / t : 2 * B * sbh) + 4.0 * s * b * spec_.vocab_size() / t;
    case LayerKind::kTransformer:
      break;
  }
  if (recompute == proto::RECOMPUTE_FULL) {
    return sequence_parallel ? B * sbh / t : B * sbh;  // only the layer input
  }
  const double kvd = double(kv_heads()) * head_dim(), f = spec_.ffn_hidden_size();
  const double a = spec_.num_attention_heads();
  const bool swiglu = spec_.mlp() == proto::Model::MLP_SWIGLU;
  if (recompute == proto::RECOMPUTE_OP_SELECTIVE) {
    // torchtitan's policy (torchtitan/distributed/activation_checkpoint.py, `selective_ac_option: op`):
    // MUST_SAVE the outputs of the attention kernel, of reduce-scatters and of every other matmul, prefer
    // recomputing everything else. Kept: the block's input (the checkpoint's), Q (1st matmul), V (3rd), the
    // attention output and its log-sum-exp, the MLP's first matmul (5th) and, with SwiGLU, its down
    // projection (7th, after the reduce-scatter under sequence parallelism). Dropout masks are recomputed.
    const double replicated = B * sbh * (swiglu ? 2 : 1);
    double split = B * s * b * (h + kvd + h + f);
    if (attention != proto::ATTENTION_STANDARD) split += 4.0 * s * b * a;
    return (sequence_parallel ? replicated / t : replicated) + split / t;
  }
  // Replicated across TP ranks unless sequence parallel: inputs of both norms and of QKV and the MLP.
  const double replicated = 4 * B * sbh;
  // Split across TP ranks: Q, K, V; the attention output (input of the output projection); MLP internals.
  const double mlp_internal = (swiglu ? 3 : 2) * B * s * b * f;
  double split = B * s * b * (h + 2 * kvd) + B * sbh + mlp_internal;
  double masks = 0;  // 1 byte per element (Korthikanti et al. 2022 §4.1)
  if (attention != proto::ATTENTION_STANDARD) {  // flash, either kernel
    split += 4.0 * s * b * a;  // softmax log-sum-exp statistics, fp32
  } else if (recompute != proto::RECOMPUTE_SELECTIVE) {
    split += B * a * s * s * b;  // softmax output kept for the value product
    if (dropout > 0) split += a * s * s * b + B * a * s * s * b;  // attention-dropout mask and its output
  }
  if (dropout > 0) masks = 2 * sbh;  // after the attention output projection and after the MLP
  return (sequence_parallel ? (replicated + masks) / t : replicated + masks) + split / t;
}

double TransformerModel::RecomputedPeakBytes(uint32_t layer, double batch, uint32_t seq_len, uint32_t tp,
                                             bool sequence_parallel, proto::Recompute recompute, proto::DType dtype,
                                             proto::Attention attention, double dropout) const {
  if (recompute != proto::RECOMPUTE_FULL && recompute != proto::RECOMPUTE_OP_SELECTIVE) return 0;
  const auto bytes = [&](proto::Recompute r) {
    return ActivationBytes(layer, batch, seq_len, tp, sequence_parallel, r, dtype, attention, dropout);
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
