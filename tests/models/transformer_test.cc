// Layer math against hand-derived numbers and the closed forms of the papers the formulas cite.
#include "models/transformer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "models/proto/model.pb.h"
#include "models/spec_io.h"

namespace hetsim::models {
namespace {

TransformerModel Load(const std::string& name) {
  auto m = LoadModel(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

// A GPT-style model: h = 1024, 16 heads, ffn 4h, GELU, layernorm, learned positions, tied, no biases.
TransformerModel Gpt(uint32_t kv_heads = 0) {
  proto::Model m;
  m.set_name("gpt-test");
  m.set_num_layers(4);
  m.set_hidden_size(1024);
  m.set_ffn_hidden_size(4096);
  m.set_num_attention_heads(16);
  m.set_num_kv_heads(kv_heads);
  m.set_vocab_size(50000);
  m.set_max_seq_len(2048);
  m.set_mlp(proto::Model::MLP_GELU);
  m.set_norm(proto::Model::NORM_LAYERNORM);
  m.set_position(proto::Model::POSITION_LEARNED);
  m.set_tied_embeddings(true);
  auto r = TransformerModel::Build(m, "test");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

TEST(Transformer, EveryBundledModelMatchesItsPublishedSizeWithinOnePercent) {
  for (const auto& name : BundledNames(SpecKind::kModel)) {
    const auto m = Load(name);
    if (name == "opt-350m") continue;  // 512-wide word embedding projected to 1024: see docs/models.md
    ASSERT_GT(m.spec().published_params_billion(), 0) << name;
    const double ours = m.TotalParams() / 1e9;
    EXPECT_NEAR(ours / m.spec().published_params_billion(), 1.0, 0.01)
        << name << ": ours " << ours << " B vs published " << m.spec().published_params_billion() << " B";
  }
}

TEST(Transformer, Llama2SevenBCountedMatrixByMatrix) {
  // h = 4096, f = 11008, V = 32000, 32 layers, untied, RMSNorm, no biases:
  // block = 4h² + 3hf + 2h = 67,108,864 + 135,266,304 + 8,192 = 202,383,360
  // total = 32 · block + V·h (embedding) + V·h + h (head) = 6,738,415,616
  const auto m = Load("llama2-7b");
  EXPECT_EQ(m.Params(1), 202383360.0);
  EXPECT_EQ(m.Params(0), 131072000.0);
  EXPECT_EQ(m.Params(33), 131076096.0);
  EXPECT_EQ(m.TotalParams(), 6738415616.0);
}

TEST(Transformer, LayerNumberingPutsEmbeddingAndHeadAtTheEnds) {
  const auto m = Load("llama2-7b");
  EXPECT_EQ(m.num_layers(), 34u);
  EXPECT_EQ(m.kind(0), LayerKind::kEmbedding);
  EXPECT_EQ(m.kind(1), LayerKind::kTransformer);
  EXPECT_EQ(m.kind(32), LayerKind::kTransformer);
  EXPECT_EQ(m.kind(33), LayerKind::kHead);
}

TEST(Transformer, ForwardFlopsMatchNarayananClosedForm) {
  // Narayanan et al. 2021 eq. 3: a GPT block costs 24·B·s·h² (1 + s/(6h)) forward FLOPs.
  const auto m = Gpt();
  const double b = 8, s = 2048, h = 1024;
  EXPECT_DOUBLE_EQ(m.ForwardFlops(1, b, 2048), 24 * b * s * h * h * (1 + s / (6 * h)));
  EXPECT_DOUBLE_EQ(m.BackwardFlops(1, b, 2048), 2 * m.ForwardFlops(1, b, 2048));
  // The head's logits: 2·B·s·h·V.
  EXPECT_DOUBLE_EQ(m.ForwardFlops(5, b, 2048), 2 * b * s * h * 50000);
  EXPECT_EQ(m.ForwardFlops(0, b, 2048), 0.0);
}

TEST(Transformer, ActivationsMatchKorthikantiWithoutDropout) {
  // Korthikanti et al. 2022 §4.1: s·b·h·(34 + 5·a·s/h) bytes per layer at 16 bit, of which the dropout
  // masks and the attention dropout output are 2·s·b·h + 3·a·s²·b; hetsim stores no dropout, leaving
  // 32·s·b·h + 2·a·s²·b. Under TP t (no sequence parallelism) 8·s·b·h stays replicated.
  const auto m = Gpt();
  const double s = 2048, b = 4, h = 1024, a = 16;
  const double none = m.ActivationBytes(1, b, 2048, 1, false, proto::RECOMPUTE_NONE, proto::DTYPE_BF16,
                                        proto::ATTENTION_STANDARD);
  EXPECT_DOUBLE_EQ(none, 32 * s * b * h + 2 * a * s * s * b);
  const double tp4 = m.ActivationBytes(1, b, 2048, 4, false, proto::RECOMPUTE_NONE, proto::DTYPE_BF16,
                                       proto::ATTENTION_STANDARD);
  EXPECT_DOUBLE_EQ(tp4, 8 * s * b * h + (24 * s * b * h + 2 * a * s * s * b) / 4);
  const double sp4 = m.ActivationBytes(1, b, 2048, 4, true, proto::RECOMPUTE_NONE, proto::DTYPE_BF16,
                                       proto::ATTENTION_STANDARD);
  EXPECT_DOUBLE_EQ(sp4, none / 4);
  // Selective recomputation drops the s² term; full recomputation keeps only the layer input.
  EXPECT_DOUBLE_EQ(m.ActivationBytes(1, b, 2048, 1, false, proto::RECOMPUTE_SELECTIVE, proto::DTYPE_BF16,
                                     proto::ATTENTION_STANDARD),
                   32 * s * b * h);
  EXPECT_DOUBLE_EQ(m.ActivationBytes(1, b, 2048, 1, false, proto::RECOMPUTE_FULL, proto::DTYPE_BF16,
                                     proto::ATTENTION_STANDARD),
                   2 * s * b * h);
  // Flash attention keeps fp32 log-sum-exp statistics (4·a·s·b bytes) instead of the s² scores.
  EXPECT_DOUBLE_EQ(m.ActivationBytes(1, b, 2048, 1, false, proto::RECOMPUTE_NONE, proto::DTYPE_BF16,
                                     proto::ATTENTION_FLASH),
                   32 * s * b * h + 4 * a * s * b);
}

// torchtitan's op-level selective checkpointing keeps, per token of a Llama 2 7B block (h = kv = 4,096,
// ffn 11,008, 32 heads, SwiGLU, flash attention, bf16): the block input and the down projection's output
// (2 x 2h bytes), Q, V, the attention output and the gate projection's output (2 x (h + h + h + 11,008)
// bytes) and the attention's fp32 log-sum-exp (4 x 32): 16,384 + 46,592 + 128 = 63,104 bytes, against
// 131,712 with nothing recomputed (4 x 2h replicated, 2 x (3h + h + 3 x 11,008) split, 128). Under TP 2 with
// sequence parallelism everything is halved. While a block's backward runs it rebuilds the rest:
// 131,712 - 63,104 bytes per token. Its backward repeats K, the attention output and the up projection:
// 2h² + 2h² + 2h x 11,008 = 157,286,400 FLOPs per token of a forward of 2 x 202,375,168 (matmul
// parameters) + 4 x 4,096 x h (attention at 4,096 tokens) = 471,859,200: exactly a third.
TEST(Transformer, OpSelectiveRecomputationKeepsEveryOtherMatmulsOutput) {
  const auto m = Load("llama2-7b");
  const double s = 4096;
  const auto bytes = [&](proto::Recompute r, uint32_t tp, bool sp) {
    return m.ActivationBytes(1, 1, 4096, tp, sp, r, proto::DTYPE_BF16, proto::ATTENTION_FLASH);
  };
  EXPECT_DOUBLE_EQ(bytes(proto::RECOMPUTE_OP_SELECTIVE, 1, false), 63104 * s);
  EXPECT_DOUBLE_EQ(bytes(proto::RECOMPUTE_NONE, 1, false), 131712 * s);
  EXPECT_DOUBLE_EQ(bytes(proto::RECOMPUTE_OP_SELECTIVE, 2, true), 63104 * s / 2);
  EXPECT_DOUBLE_EQ(m.RecomputedPeakBytes(1, 1, 4096, 1, false, proto::RECOMPUTE_OP_SELECTIVE, proto::DTYPE_BF16,
                                         proto::ATTENTION_FLASH),
                   (131712 - 63104) * s);
  EXPECT_DOUBLE_EQ(m.RecomputedPeakBytes(1, 1, 4096, 1, false, proto::RECOMPUTE_FULL, proto::DTYPE_BF16,
                                         proto::ATTENTION_FLASH),
                   131712 * s);
  EXPECT_DOUBLE_EQ(m.RecomputedPeakBytes(1, 1, 4096, 1, false, proto::RECOMPUTE_NONE, proto::DTYPE_BF16,
                                         proto::ATTENTION_FLASH),
                   0);
  EXPECT_NEAR(m.OpSelectiveRecomputedShare(1, 4096), 1.0 / 3, 1e-12);
  EXPECT_EQ(m.OpSelectiveRecomputedShare(0, 4096), 0);  // the embedding is not checkpointed
}

TEST(Transformer, GroupedQueryAttentionShrinksKeyValueProjections) {
  // With 4 kv heads of 64: K and V are h × 256 each instead of h × h.
  const auto mha = Gpt(0);
  const auto gqa = Gpt(4);
  EXPECT_DOUBLE_EQ(mha.Params(1) - gqa.Params(1), 2.0 * 1024 * (1024 - 256));
}

TEST(Transformer, TensorParallelShardsMatricesButNotNorms) {
  const auto m = Load("llama2-7b");
  // Block: 4h² + 3hf split over t; two RMSNorms (2h) replicated.
  const double h = 4096, f = 11008;
  EXPECT_DOUBLE_EQ(m.ParamsPerRank(1, 4, false), (4 * h * h + 3 * h * f) / 4 + 2 * h);
  // Untied head: V·h split, final norm replicated.
  EXPECT_DOUBLE_EQ(m.ParamsPerRank(33, 2, true), 32000 * h / 2 + h);
}

TEST(Transformer, TiedHeadAwayFromEmbeddingHoldsItsOwnCopy) {
  const auto m = Gpt();
  const double vh = 50000.0 * 1024;
  EXPECT_DOUBLE_EQ(m.Params(5), 2 * 1024);  // tied: only the final layernorm counts toward the size
  EXPECT_DOUBLE_EQ(m.ParamsPerRank(5, 2, true), vh / 2 + 2 * 1024);
  EXPECT_DOUBLE_EQ(m.ParamsPerRank(5, 2, false), 2 * 1024);
}

TEST(Transformer, InvalidArchitecturesAreRejected) {
  proto::Model m;
  m.set_name("bad");
  m.set_num_layers(2);
  m.set_hidden_size(1000);
  m.set_ffn_hidden_size(4000);
  m.set_num_attention_heads(16);  // 1000 % 16 != 0
  m.set_num_kv_heads(3);          // 16 % 3 != 0
  m.set_vocab_size(10);
  m.set_max_seq_len(10);
  auto r = TransformerModel::Build(m, "bad.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad.yaml: num_attention_heads"), std::string::npos);
  EXPECT_NE(r.status().message().find("num_kv_heads"), std::string::npos);
}

}  // namespace
}  // namespace hetsim::models
