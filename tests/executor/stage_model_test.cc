// The layer math of the CPU backend, on a tiny model in one process: gradients agree with finite
// differences of the loss, and do not depend on how a batch is cut into micro-batches or on
// recomputation.
#include "executor/stage_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "executor/cpu_backend.h"
#include "executor/init.h"

namespace hetsim::executor {
namespace {

models::TransformerModel TinyModel() {
  proto::Model m;
  m.set_name("micro");
  m.set_num_layers(2);
  m.set_hidden_size(32);
  m.set_ffn_hidden_size(48);
  m.set_num_attention_heads(4);
  m.set_num_kv_heads(2);
  m.set_vocab_size(64);
  m.set_max_seq_len(16);
  m.set_mlp(proto::Model::MLP_SWIGLU);
  m.set_norm(proto::Model::NORM_RMSNORM);
  m.set_position(proto::Model::POSITION_ROPE);
  auto built = models::TransformerModel::Build(m, "micro");
  HETSIM_CHECK(built.ok(), built.status().message());
  return *built;
}

// TinyModel with MoE blocks: 4 experts of width 16, top-k, one shared expert of width 16.
models::TransformerModel TinyMoeModel(uint32_t top_k) {
  proto::Model m = TinyModel().spec();
  m.set_name("micro-moe");
  auto* moe = m.mutable_moe();
  moe->set_num_experts(4);
  moe->set_top_k(top_k);
  moe->set_expert_ffn_hidden_size(16);
  moe->set_num_shared_experts(1);
  moe->set_shared_expert_ffn_hidden_size(16);
  auto built = models::TransformerModel::Build(m, "micro-moe");
  HETSIM_CHECK(built.ok(), built.status().message());
  return *built;
}

constexpr int64_t kBatch = 4, kSeq = 8;

// Runs the whole batch as `micro_batches` equal micro-batches; returns the mean loss.
double RunBatch(Backend* be, StageModel* model, int micro_batches, bool backward, bool recompute = false) {
  const int64_t per = kBatch / micro_batches;
  const float scale = 1.0f / float(kBatch * kSeq);
  model->ZeroLoss();
  for (int mb = 0; mb < micro_batches; ++mb) {
    std::vector<int32_t> tok(static_cast<size_t>(per * kSeq)), lab(tok.size()), seq(kSeq + 1);
    for (int64_t i = 0; i < per; ++i) {
      SyntheticSequence(3, static_cast<uint64_t>(mb * per + i), kSeq + 1, 64, seq.data());
      std::copy_n(seq.begin(), kSeq, tok.begin() + i * kSeq);
      std::copy_n(seq.begin() + 1, kSeq, lab.begin() + i * kSeq);
    }
    Buffer t(be, per * kSeq, 1, DType::kI32), l(be, per * kSeq, 1, DType::kI32);
    be->Upload(t.t(), tok.data());
    be->Upload(l.t(), lab.data());
    Buffer out = model->Forward(static_cast<uint32_t>(mb), per, kSeq, std::move(t), std::move(l), scale, recompute);
    EXPECT_TRUE(out.empty());
    if (backward) model->Backward(static_cast<uint32_t>(mb), Buffer());
  }
  float loss = 0;
  be->Download(&loss, model->loss());
  return loss / double(kBatch * kSeq);
}

std::vector<std::vector<float>> Grads(StageModel& m) {
  std::vector<std::vector<float>> g;
  for (auto& p : m.params()) {
    const float* d = p.grad.t().ptr<float>();
    g.emplace_back(d, d + p.grad.t().numel());
  }
  return g;
}

// Checks every parameter's gradient g against the central difference of the loss along g/‖g‖ with step
// `eps` (d/dε L(θ + ε·g/‖g‖) at ε = 0 is ‖g‖), within 1% plus `abs_tol`; returns the tensors checked.
int CheckFiniteDifferences(Backend* be, StageModel& m, double eps, double abs_tol) {
  const auto grads = Grads(m);
  int checked = 0;
  for (size_t i = 0; i < m.params().size(); ++i) {
    Param& p = m.params()[i];
    double norm2 = 0;
    for (float g : grads[i]) norm2 += double(g) * g;
    const double norm = std::sqrt(norm2);
    EXPECT_GT(norm, 0) << p.spec.name();
    if (norm == 0) continue;
    float* w = p.master.t().ptr<float>();
    std::vector<float> orig(w, w + p.master.t().numel());
    auto loss_at = [&](double e) {
      for (size_t k = 0; k < orig.size(); ++k) w[k] = orig[k] + static_cast<float>(e * grads[i][k] / norm);
      return RunBatch(be, &m, 1, false);
    };
    const double fd = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
    std::copy(orig.begin(), orig.end(), w);
    EXPECT_NEAR(fd, norm, 0.01 * norm + abs_tol) << p.spec.name();
    if (std::getenv("HETSIM_TEST_VERBOSE")) std::printf("%-20s fd %.6e analytic %.6e rel %.2e\n", p.spec.name().c_str(), fd, norm, std::abs(fd - norm) / norm);
    ++checked;
  }
  return checked;
}

TEST(StageModelTest, GradientsMatchDirectionalFiniteDifferences) {
  auto be = MakeCpuBackend();
  const auto model = TinyModel();
  StageModel m(be.get(), model, 0, model.num_layers(), 1, 0, nullptr, ModelOptions{}, nullptr);
  const double loss0 = RunBatch(be.get(), &m, 1, true);
  EXPECT_NEAR(loss0, std::log(64.0), 0.2);  // near-uniform predictions at initialisation
  // Central differences with ε = 1e-2: the truncation error is O(ε²·curvature) and the FP32 rounding of the
  // loss (~4·6e-8) divided by 2ε is ~1e-5.
  const int checked = CheckFiniteDifferences(be.get(), m, 1e-2, 2e-5);
  // embedding, 9 per block x 2, final norm + head
  EXPECT_EQ(checked, 1 + 18 + 2);
}

// Every parameter of a model with MoE blocks against finite differences (the router, the routed and the shared
// experts); returns the tensors checked.
int CheckMoeModel(uint32_t top_k, double eps, double abs_tol) {
  auto be = MakeCpuBackend();
  const auto model = TinyMoeModel(top_k);
  ModelOptions options;
  options.capacity_factor = 1;
  StageModel m(be.get(), model, 0, model.num_layers(), 1, 0, nullptr, options, nullptr);
  const double loss0 = RunBatch(be.get(), &m, 1, true);
  EXPECT_NEAR(loss0, std::log(64.0), 0.2);
  return CheckFiniteDifferences(be.get(), m, eps, abs_tol);
}

TEST(StageModelTest, MoeGradientsMatchDirectionalFiniteDifferences) {
  // Top-2 of 4 experts with drop-and-pad at capacity factor 1: each expert takes 16 of the 64 copies of the
  // 32 tokens, so uneven routing drops some. The top-k choice is piecewise constant, so the step is small
  // (ε = 1e-3 keeps every choice here; a flipped one would show as a jump of the loss): the FP32 rounding of
  // the loss divided by 2ε is then ~1e-4, which the small router and norm gradients (~6e-4) barely clear.
  // embedding, per MoE block 6 (norms, attention) + router + 3 shared + 3 routed tensors of each of the 4
  // experts, final norm + head
  EXPECT_EQ(CheckMoeModel(2, 1e-3, 2e-4), 1 + 2 * (10 + 3 * 4) + 2);
}

TEST(StageModelTest, MoeRouterGradientMatchesFiniteDifferencesWhenEveryExpertIsChosen) {
  // Top-4 of 4: the weights are the softmax over all logits, smooth in every parameter, so the larger step of
  // the dense test (ε = 1e-2, rounding ~1e-5) checks the router's gradient (the softmax's backward and
  // d w = dy · output) to 1%; capacity factor 1 is then room for every token.
  EXPECT_EQ(CheckMoeModel(4, 1e-2, 2e-5), 1 + 2 * (10 + 3 * 4) + 2);
}

TEST(StageModelTest, MicroBatchingAndRecomputationLeaveGradientsUnchanged) {
  auto be = MakeCpuBackend();
  const auto model = TinyModel();
  StageModel whole(be.get(), model, 0, model.num_layers(), 1, 0, nullptr, ModelOptions{}, nullptr);
  StageModel split(be.get(), model, 0, model.num_layers(), 1, 0, nullptr, ModelOptions{}, nullptr);
  StageModel recomputed(be.get(), model, 0, model.num_layers(), 1, 0, nullptr, ModelOptions{}, nullptr);
  const double l1 = RunBatch(be.get(), &whole, 1, true);
  const double l4 = RunBatch(be.get(), &split, 4, true);
  const double lr = RunBatch(be.get(), &recomputed, 2, true, true);
  EXPECT_NEAR(l1, l4, 1e-6);
  EXPECT_NEAR(l1, lr, 1e-6);
  const auto g1 = Grads(whole), g4 = Grads(split), gr = Grads(recomputed);
  for (size_t i = 0; i < g1.size(); ++i) {
    double d4 = 0, dr = 0, n = 0;
    for (size_t k = 0; k < g1[i].size(); ++k) {
      d4 += std::pow(double(g1[i][k]) - g4[i][k], 2);
      dr += std::pow(double(g1[i][k]) - gr[i][k], 2);
      n += std::pow(double(g1[i][k]), 2);
    }
    // Only the summation order differs (FP32): relative differences of order 1e-7.
    EXPECT_LT(std::sqrt(d4 / n), 1e-5) << whole.params()[i].spec.name();
    EXPECT_LT(std::sqrt(dr / n), 1e-5) << whole.params()[i].spec.name();
  }
}

TEST(StageModelTest, AdamMovesWeightsAgainstTheGradient) {
  auto be = MakeCpuBackend();
  const auto model = TinyModel();
  StageModel m(be.get(), model, 0, model.num_layers(), 1, 0, nullptr, ModelOptions{}, nullptr);
  const double before = RunBatch(be.get(), &m, 1, true);
  Param& p = m.params()[1];  // layer 1's attention norm weights, all 1 initially
  const float g0 = p.grad.t().ptr<float>()[0];
  AdamParams adam;
  adam.lr = 1e-3f;
  m.OptimizerStep(adam);
  // The first Adam step moves every weight by lr·sign(g) (bias-corrected m/√v = g/|g|).
  EXPECT_NEAR(p.master.t().ptr<float>()[0], 1.0f - 1e-3f * (g0 > 0 ? 1.0f : -1.0f), 1e-6);
  m.ZeroGrads();
  EXPECT_EQ(p.grad.t().ptr<float>()[0], 0.0f);
  const double after = RunBatch(be.get(), &m, 1, false);
  EXPECT_LT(after, before);
}

}  // namespace
}  // namespace hetsim::executor
