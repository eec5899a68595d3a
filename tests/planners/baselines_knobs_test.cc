// The memory knobs the baselines search as their frameworks' users turn them — activation recomputation
// (none / selective / full), the ZeRO stage, the micro-batch size, and for deepspeed and fsdp CPU offload —
// on small cases whose answers are derived by hand below: a model that fits without recomputation gets
// none, one that only fits with full recomputation gets full, DeepSpeed takes ZeRO-3 only when lower stages
// do not fit, CPU offload is taken only when nothing fits without it, an explicit policy is kept, the plan
// file carries the choice, and when nothing fits the error says what was tried.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "models/plan.h"
#include "models/spec_io.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::Fixture;

using testing::kBaselines;

// ---- the arithmetic every case below uses (models::EstimateMemory, by hand) ------------------------------
//
// Llama-3 8B: L = 32 blocks, h = 4096, FFN 14336 (SwiGLU), 32 heads, 8 KV heads of 128 (kvd = 1024),
// vocabulary V = 128256, untied head, no biases; bf16 (2 bytes) with Adam (4 + 8 bytes of fp32 master
// weights and moments per parameter), flash attention, 1 GiB workspace.
//   parameters: 32 × (2h² + 2h·kvd + 3h·FFN + 2h) + 2Vh + h = 8,030,261,248 (P).
//   static bytes per device over d data-parallel replicas: ZeRO-0 16P; ZeRO-1 4P + 12P/d; ZeRO-2
//   2P + 14P/d; ZeRO-3 16P/d plus the gathered largest layer (the embedding or the head, 2Vh bytes
//   = 1.05e9).
//   activations per token without recomputation (TP 1, no sequence parallelism): per block 4·2h (norm,
//   QKV and MLP inputs) + 2(h + 2kvd) (Q, K, V) + 2h (attention output) + 3·2·FFN (SwiGLU) + 4·32 (the
//   softmax statistics) = 139,392 bytes, × 32 = 4,460,544; the head 2·2h + 4V (fp32 logits) = 529,408;
//   in all 4,989,952 bytes (4.65 MiB) per token.
//   with full recomputation: each block keeps its input (2h = 8192 bytes, × 32 = 262,144), the head the
//   same 529,408, and the largest layer is re-materialised while it runs (the head's 529,408): 1,320,960
//   bytes per token.
// On one H200 (141 GiB) the static state is 16P = 119.66 GiB, which leaves 141 − 119.66 − 1 = 20.34 GiB
// for activations.

constexpr const char* kOneH200 = R"(
name: one-h200
nodes: [{name: n, gpus: {type: h200, count: 1}}]
)";

// Four single-GPU nodes: no TP or sequence parallelism inside a node, so every baseline's choices are
// data parallelism, the ZeRO stage, recomputation and the micro-batch size.
std::string FourNodes(const std::string& gpu) {
  return "name: four-" + gpu + "\nnodes: [{name: n, count: 4, gpus: {type: " + gpu +
         ", count: 1}, nic: {kind: roce, bandwidth_gbps: 100}}]\n";
}

proto::Recompute Recompute(const PlannerResult& r, const Fixture& f) {
  return models::EffectiveRecompute(r.plan, *f.training);
}

uint32_t SequencesPerMicroBatch(const proto::Plan& plan) {
  uint32_t b = 0;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t x : models::MicroBatchSplit(st, pipe.micro_batch_size())) b = std::max(b, x);
    }
  }
  return b;
}

using testing::Notes;

// 2048 tokens, 4 sequences on one H200: without recomputation b = 2 needs 2 × 2048 × 4.65 MiB = 19.04 GiB
// (fits in 20.34), b = 4 needs 38.07 GiB (does not). Full recomputation would let b = 4 fit (10.08 GiB), but
// it repeats every block's forward pass: 4 passes of b = 4 against 2 × 3 passes of b = 2, a third more work
// that larger GEMMs do not win back. So every baseline runs without recomputation, two micro-batches of 2.
TEST(BaselineKnobs, AModelThatFitsWithoutRecomputationGetsNone) {
  const Fixture f(testing::ClusterFromYaml(kOneH200), testing::BundledModel("llama3-8b"),
                  "{global_batch_size: 4, seq_len: 2048}");
  for (const auto& name : kBaselines) {
    auto r = testing::Run(name, f.problem());
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_NONE) << name;
    EXPECT_EQ(r->plan.recompute(), proto::RECOMPUTE_UNSPECIFIED) << name << ": the training spec's policy";
    EXPECT_EQ(SequencesPerMicroBatch(r->plan), 2u) << name;
    EXPECT_EQ(Notes(*r).find("recompute="), std::string::npos) << name << "\n" << Notes(*r);
    EXPECT_EQ(r->plan.offload(), proto::Plan::OFFLOAD_UNSPECIFIED) << name << ": no CPU offload where none is needed";
  }
}

// 6144 tokens, 4 sequences on one H200: without recomputation even b = 1 needs 28.55 GiB of the 20.34 left;
// with full recomputation b = 1 needs 7.56 GiB, b = 2 15.12 GiB, b = 4 30.23 GiB. Selective recomputation
// frees nothing under flash attention (no attention scores are kept), so megatron does not try it. Every
// baseline: full recomputation, two micro-batches of 2 (fewer, larger micro-batches run faster).
TEST(BaselineKnobs, AModelThatOnlyFitsWithFullRecomputationGetsFull) {
  const Fixture f(testing::ClusterFromYaml(kOneH200), testing::BundledModel("llama3-8b"),
                  "{global_batch_size: 4, seq_len: 6144}");
  for (const auto& name : kBaselines) {
    auto r = testing::Run(name, f.problem());
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_FULL) << name;
    EXPECT_EQ(r->plan.recompute(), proto::RECOMPUTE_FULL) << name << ": the plan states what the planner changed";
    EXPECT_EQ(SequencesPerMicroBatch(r->plan), 2u) << name;
    const std::string notes = Notes(*r);
    EXPECT_NE(notes.find("recompute=full, b=2 needed to fit"), std::string::npos) << name << "\n" << notes;
  }
  auto megatron = testing::Run("megatron", f.problem());
  ASSERT_TRUE(megatron.ok());
  EXPECT_EQ(megatron->stats.rejected.count(
                "selective recomputation not tried: it frees no memory here (flash attention keeps no attention "
                "scores) and only costs time"),
            1u);
}

// Standard attention at 4096 tokens, one sequence, one H200: without recomputation each block also keeps
// its softmax output (2 bytes × 32 heads × 4096² = 1.07 GB), 51.02 GiB in all — no fit. Selective
// recomputation drops exactly that: 19.02 GiB, fits in 20.34; full: 5.04 GiB. Recomputing only the attention
// core is cheaper than recomputing whole blocks, so Megatron-LM (--recompute-granularity selective) picks
// selective; DeepSpeed and FSDP checkpoint whole blocks only, so they need full.
TEST(BaselineKnobs, SelectiveWhereItSufficesForMegatronFullForDeepSpeed) {
  const Fixture f(testing::ClusterFromYaml(kOneH200), testing::BundledModel("llama3-8b"),
                  "{global_batch_size: 1, seq_len: 4096, attention: standard}");
  auto megatron = testing::Run("megatron", f.problem());
  ASSERT_TRUE(megatron.ok()) << megatron.status().message();
  EXPECT_EQ(Recompute(*megatron, f), proto::RECOMPUTE_SELECTIVE);
  EXPECT_NE(Notes(*megatron).find("recompute=selective needed to fit"), std::string::npos) << Notes(*megatron);
  for (const char* name : {"deepspeed", "fsdp"}) {
    auto r = testing::Run(name, f.problem());
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
    EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_FULL) << name;
  }
}

// Four single-GPU nodes, 2048 tokens, 16 sequences (4 per replica, b ∈ {1, 2, 4}).
//   A100-40GB: the static state alone is 119.66 GiB (ZeRO-0), 52.35 (ZeRO-1), 41.13 (ZeRO-2: over 40
//   before any activation) or 30.89 GiB (ZeRO-3); with ZeRO-3, 40 − 30.89 − 1 = 8.11 GiB remain: b = 1
//   without recomputation needs 9.52 GiB (no), with full recomputation b = 2 needs 5.04 GiB (yes) and b = 4
//   10.08 GiB (no). So deepspeed needs all three knobs: ZeRO-3, full recomputation, b = 2.
//   A100-80GB: ZeRO-1 leaves 80 − 52.35 − 1 = 26.65 GiB, enough for b = 2 without recomputation (19.04),
//   and ZeRO-3 fits b = 4 (38.07 of 48.11 GiB); the ranking decides. ZeRO-3 moves 3 × ¾ × 16 GB over the
//   12.5 GB/s NIC per micro-batch (2.9 s) but layer by layer behind the compute (models/lowering.h "ZeRO-3
//   and FSDP by units"): a block's gather, 26 ms, against its forward, about 18 ms at b = 4, and its gather
//   plus reduce-scatter, 52 ms, against its backward, about 36 ms, so the step is about 32 × (26 + 52) ms =
//   2.5 s. ZeRO-1 (b = 2, two micro-batches) computes about 1.8 s and all-reduces 2 × ¾ × 16 GB (1.9 s)
//   behind the last backward only: about 3.2 s. So deepspeed takes ZeRO-3, b = 4, no recomputation, by the
//   ranking, not to fit.
TEST(BaselineKnobs, DeepSpeedTakesZero3WhereNothingElseFitsOrItsPerLayerCallsHide) {
  {
    const Fixture f(testing::ClusterFromYaml(FourNodes("a100-40gb")), testing::BundledModel("llama3-8b"),
                    "{global_batch_size: 16, seq_len: 2048}");
    auto r = testing::Run("deepspeed", f.problem());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->plan.zero_stage(), 3u);
    EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_FULL);
    EXPECT_EQ(SequencesPerMicroBatch(r->plan), 2u);
    EXPECT_NE(Notes(*r).find("recompute=full, zero=3, b=2 needed to fit"), std::string::npos) << Notes(*r);
  }
  {
    const Fixture f(testing::ClusterFromYaml(FourNodes("a100-80gb")), testing::BundledModel("llama3-8b"),
                    "{global_batch_size: 16, seq_len: 2048}");
    auto r = testing::Run("deepspeed", f.problem());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->plan.zero_stage(), 3u);
    EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_NONE);
    EXPECT_EQ(SequencesPerMicroBatch(r->plan), 4u);
    EXPECT_NE(Notes(*r).find("zero=3 chosen by the ranking (candidates with less memory saving fit too"),
              std::string::npos)
        << Notes(*r);
  }
}

// Four A100-40GB nodes at 8192 tokens: ZeRO-3 leaves 8.11 GiB (above), and even one sequence with full
// recomputation needs 10.08 GiB — 30.89 + 1 + 10.08 = 41.97 GiB, plus the CUDA context (400 MiB) and two
// 4-rank NCCL communicators (world and gradient sync) on one-GPU nodes (2/25 of 688 MiB each): 42.47 GiB
// of 40. With CPU offload forbidden (the
// option `offload: [none]`) no setting of DeepSpeed or FSDP fits; the error names the closest attempt and
// every setting tried, and suggests only what was not tried (CPU offload among them).
TEST(BaselineKnobs, NothingFitsSaysWhatWasTried) {
  const Fixture f(testing::ClusterFromYaml(FourNodes("a100-40gb")), testing::BundledModel("llama3-8b"),
                  "{global_batch_size: 16, seq_len: 8192}");
  for (const char* name : {"deepspeed", "fsdp"}) {
    auto r = testing::Run(name, f.problem(), "offload: [none]");
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), Status::Code::kInfeasible);
    const std::string& msg = r.status().message();
    EXPECT_NE(msg.find("dp=4 sp=1 b=1 m=4 zero=3 recompute=full: device 0 (a100-40gb) needs 42.5 GiB of 40.0 GiB"),
              std::string::npos)
        << msg;
    const std::string zeros = std::string(name) == "deepspeed" ? "0, 1, 2, 3" : "0, 2, 3";
    EXPECT_NE(msg.find("tried: recompute none, full; ZeRO stage " + zeros +
                       "; sequences per replica per micro-batch 1, 2, 4"),
              std::string::npos)
        << msg;
    const size_t tries = msg.find("\n  try: ");
    ASSERT_NE(tries, std::string::npos) << msg;
    EXPECT_EQ(msg.find("recompute", tries), std::string::npos) << msg;
    EXPECT_EQ(msg.find("ZeRO-3", tries), std::string::npos) << msg;
    EXPECT_NE(msg.find("CPU offload", tries), std::string::npos) << msg;  // outside the search: suggested
  }
}

// The same case with CPU offload searched (the default). Bytes per device over the 4 replicas (P =
// 8,030,261,248; the head, the largest layer, has Vh + h = 525,340,672 parameters, 1,050,681,344 bytes):
//   offload=optimizer (ZeRO-Offload) keeps the fp16 weights as the ZeRO stage shards them, two buckets of
//   the largest layer's gradients (2.10e9 bytes, 1.96 GiB) and no optimizer state. With full recomputation
//   (10.08 GiB of activations per sequence) and the 1 GiB workspace:
//     ZeRO-3: 2P/4 + the gathered head = 4.72 GiB; b = 1 17.75 GiB, b = 2 27.83, b = 4 47.99 (no);
//     ZeRO-2: 2P = 14.96 GiB; b = 1 27.99 GiB, b = 2 38.07 (fits), b = 4 no;
//     without recomputation (38.07 GiB per sequence) nothing fits.
//   So deepspeed stops at its first offload level, optimizer, with full recomputation (its ranking picks
//   among the four that fit); it never reaches optimizer_and_params.
//   fsdp offers only CPUOffload(offload_params=True) with FULL_SHARD: the weights leave too, leaving the
//   layer being computed and the next (2 × 0.98 GiB): b = 1 14.99 GiB, b = 2 25.07, b = 4 45.23 (no).
// Each rank's shard in host memory: (12 + 2) · P/4 bytes = 26.18 GiB with the optimizer offloaded, 29.92 GiB
// with the weights too; the cluster spec gives no host memory, so it is assumed to be enough.
TEST(BaselineKnobs, CpuOffloadOnlyWhenNothingElseFits) {
  const Fixture f(testing::ClusterFromYaml(FourNodes("a100-40gb")), testing::BundledModel("llama3-8b"),
                  "{global_batch_size: 16, seq_len: 8192}");
  {
    auto r = testing::Run("deepspeed", f.problem());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->plan.offload(), proto::Plan::OFFLOAD_OPTIMIZER);
    EXPECT_GE(r->plan.zero_stage(), 2u);
    EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_FULL);
    EXPECT_TRUE(r->plan.comm().dp_overlap());  // the copies overlap the backward pass
    const auto mem = models::EstimateMemory(r->plan, f.context());
    const double grads = 2.0 * 1050681344;
    for (const auto& dm : mem) {
      EXPECT_DOUBLE_EQ(dm.optimizer_gib, 0);
      EXPECT_NEAR(dm.grads_gib * 1024 * 1024 * 1024, grads, 1);
      EXPECT_NEAR(dm.host_gib, 14.0 * 8030261248 / 4 / (1024.0 * 1024 * 1024), 1e-9);
      EXPECT_LE(dm.total_gib, dm.capacity_gib);
    }
    const std::string notes = Notes(*r);
    EXPECT_NE(notes.find("offload=optimizer needed to fit"), std::string::npos) << notes;
    EXPECT_NE(notes.find("no candidate fits without CPU offload"), std::string::npos) << notes;
    EXPECT_EQ(r->stats.rejected.count("parameter offload needs ZeRO-3"), 0u) << "never reached optimizer_and_params";
  }
  {
    auto r = testing::Run("fsdp", f.problem());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->plan.offload(), proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS);
    EXPECT_EQ(r->plan.zero_stage(), 3u);
    EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_FULL);
    for (const auto& dm : models::EstimateMemory(r->plan, f.context())) {
      EXPECT_NEAR(dm.params_gib * 1024 * 1024 * 1024, 2.0 * 1050681344, 1);
      EXPECT_NEAR(dm.host_gib, 16.0 * 8030261248 / 4 / (1024.0 * 1024 * 1024), 1e-9);
    }
    const std::string notes = Notes(*r);
    EXPECT_NE(notes.find("offload=optimizer_and_params needed to fit"), std::string::npos) << notes;
    EXPECT_NE(notes.find("no candidate fits without CPU offload"), std::string::npos) << notes;
  }
}

// The same batch on four 12 GiB RTX 3080 Ti: one sequence's activations with full recomputation (10.08 GiB),
// the workspace (1 GiB) and the two gradient buckets that stay under any offload (1.96 GiB) already exceed
// 12 GiB, so no offload level helps, and the error lists the levels tried.
TEST(BaselineKnobs, NothingFitsEvenWithCpuOffload) {
  const Fixture f(testing::ClusterFromYaml(FourNodes("rtx3080ti")), testing::BundledModel("llama3-8b"),
                  "{global_batch_size: 16, seq_len: 8192}");
  auto ds = testing::Run("deepspeed", f.problem());
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("; CPU offload none, optimizer, optimizer_and_params"), std::string::npos)
      << ds.status().message();
  EXPECT_NE(ds.status().message().find("NVMe offload"), std::string::npos) << ds.status().message();
  auto fsdp = testing::Run("fsdp", f.problem());
  ASSERT_FALSE(fsdp.ok());
  EXPECT_NE(fsdp.status().message().find("; CPU offload none, optimizer_and_params"), std::string::npos)
      << fsdp.status().message();
  const std::string& msg = fsdp.status().message();
  const size_t tries = msg.find("\n  try: ");
  ASSERT_NE(tries, std::string::npos) << msg;
  EXPECT_EQ(msg.find("CPU offload", tries), std::string::npos) << "tried, so not suggested: " << msg;
}

// A policy the training spec states is kept: selective on the case above that needs full (selective frees
// nothing under flash attention) leaves megatron without a plan and says so; full on the case that fits
// without recomputation stays full. The planners' `recompute` option pins the policies too.
TEST(BaselineKnobs, AnExplicitRecomputePolicyIsKept) {
  {
    const Fixture f(testing::ClusterFromYaml(kOneH200), testing::BundledModel("llama3-8b"),
                    "{global_batch_size: 4, seq_len: 6144, recompute: selective}");
    auto r = testing::Run("megatron", f.problem());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Status::Code::kInfeasible);
    EXPECT_NE(r.status().message().find("tried: recompute selective;"), std::string::npos) << r.status().message();
  }
  {
    const Fixture f(testing::ClusterFromYaml(kOneH200), testing::BundledModel("llama3-8b"),
                    "{global_batch_size: 4, seq_len: 6144}");
    auto r = testing::Run("deepspeed", f.problem(), "{recompute: [none], offload: [none]}");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("tried: recompute none;"), std::string::npos) << r.status().message();
  }
  {
    const Fixture f(testing::ClusterFromYaml(kOneH200), testing::BundledModel("llama3-8b"),
                    "{global_batch_size: 4, seq_len: 2048, recompute: full}");
    for (const auto& name : kBaselines) {
      auto r = testing::Run(name, f.problem());
      ASSERT_TRUE(r.ok()) << name << ": " << r.status().message();
      EXPECT_EQ(Recompute(*r, f), proto::RECOMPUTE_FULL) << name;
    }
  }
}

// The chosen policy travels in the plan (Plan.recompute) and the plan file: read back with the training
// spec it was planned for (which says none), it still validates — because it recomputes; the same plan
// without its policy does not fit.
TEST(BaselineKnobs, ThePlanFileCarriesTheChosenPolicy) {
  const Fixture f(testing::ClusterFromYaml(kOneH200), testing::BundledModel("llama3-8b"),
                  "{global_batch_size: 4, seq_len: 6144}");
  auto r = testing::Run("megatron", f.problem());
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto path = std::filesystem::temp_directory_path() / "hetsim-baselines-knobs-plan.yaml";
  ASSERT_TRUE(models::WriteFileAtomically(path.string(), PlanFileYaml(r->plan, "one-h200", "llama3-8b", *f.training))
                  .ok());
  auto plan = models::LoadPlan(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto training = models::ResolveTraining(plan->training(), *f.model, "plan");
  ASSERT_TRUE(training.ok());
  EXPECT_EQ(training->recompute(), proto::RECOMPUTE_NONE);
  EXPECT_EQ(plan->recompute(), proto::RECOMPUTE_FULL);
  const models::PlanContext ctx{*f.cluster, *f.model, *training};
  EXPECT_TRUE(models::ValidatePlan(*plan, ctx, "plan").ok());
  proto::Plan without = *plan;
  without.clear_recompute();
  EXPECT_EQ(models::ValidatePlan(without, ctx, "plan").code(), Status::Code::kInfeasible);
}

}  // namespace
}  // namespace hetsim::planners
