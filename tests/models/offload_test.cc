// CPU offload (Plan.offload): validation, the per-device memory of models::EstimateMemory under each
// offload level and the host memory per node, and the lowering's host copies and CPU optimizer step, all
// against numbers derived by hand for llama-tiny.
#include <gtest/gtest.h>

#include <string>

#include "models/describe.h"
#include "models/lowering.h"
#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "tests/common/specs.h"

namespace hetsim::models {
namespace {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

using testing_util::kGib;

// llama-tiny (h = 256, f = 688, 8 heads of 32, 4 kv heads, V = 1024, 4 blocks; tests/models/plan_test.cc):
// a block has 725,504 parameters, the embedding 262,144, the head 262,400; P = 3,426,560 in all. Under
// bf16 mixed precision: 2 bytes of weights and of gradients, 12 of fp32 master weights and Adam moments.
constexpr double kBlock = 725504, kEmbedding = 262144, kHead = 262400, kP = 3426560;

// One node of two A100-80GB with `host` (may be empty) in its node group.
Cluster TwoGpus(const std::string& host) {
  return ClusterFrom("name: two\nnodes:\n  - {name: n, gpus: {type: a100-80gb, count: 2}" + host + "}\n");
}

struct World {
  Cluster cluster;
  TransformerModel model = std::move(LoadModel("llama-tiny")).value();
  proto::Training training;
  PlanContext ctx() const { return {cluster, model, training}; }
};

World MakeWorld(const std::string& host = "") {
  World w{TwoGpus(host), std::move(LoadModel("llama-tiny")).value(), {}};
  proto::Training t;
  EXPECT_TRUE(ParseYaml("{global_batch_size: 8, seq_len: 128, dtype: bf16}", "training", &t).ok());
  auto r = ResolveTraining(t, w.model, "training");
  EXPECT_TRUE(r.ok()) << r.status().message();
  w.training = std::move(r).value();
  return w;
}

// ZeRO data parallelism over the two GPUs: two pipelines of one stage holding every layer, 4 × 1 sequences.
proto::Plan TwoReplicas(uint32_t zero, const std::string& offload, const std::string& extra = "") {
  return PlanFrom("zero_stage: " + std::to_string(zero) + "\noffload: " + offload + "\n" + extra + R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [1], layer_end: 6}]}
)");
}

// The same on one GPU.
proto::Plan OneGpu(uint32_t zero, const std::string& offload, const std::string& extra = "") {
  return PlanFrom("zero_stage: " + std::to_string(zero) + "\noffload: " + offload + "\n" + extra + R"(
pipelines:
  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}
)");
}

TEST(OffloadValidation, OffloadNeedsItsZeroStage) {
  const World w = MakeWorld();
  const Status a = ValidatePlanStructure(TwoReplicas(1, "optimizer"), w.ctx(), "p.yaml");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("p.yaml: offload: optimizer needs zero_stage 2 or 3"), std::string::npos) << a.message();
  const Status b = ValidatePlanStructure(TwoReplicas(2, "optimizer_and_params"), w.ctx(), "p.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("offload: optimizer_and_params needs zero_stage 3"), std::string::npos) << b.message();
  EXPECT_TRUE(ValidatePlanStructure(TwoReplicas(2, "optimizer"), w.ctx(), "p.yaml").ok());
  EXPECT_TRUE(ValidatePlanStructure(TwoReplicas(3, "optimizer_and_params"), w.ctx(), "p.yaml").ok());
  EXPECT_TRUE(ValidatePlanStructure(TwoReplicas(0, "none"), w.ctx(), "p.yaml").ok());
}

// Per device, ZeRO over the 2 replicas (bytes):
//   none, ZeRO-2:   weights 2P = 6,853,120; gradients 2P/2 = 3,426,560; optimizer 12P/2 = 20,559,360.
//   optimizer, ZeRO-2: weights 2P; gradients two buckets of the largest layer's (a block's) gradients,
//     2 · 2 · 725,504 = 2,902,016 (less than 2P); optimizer 0; host (12 + 2)P/2 = 23,985,920.
//   optimizer, ZeRO-3: weights 2P/2 + the gathered block 2 · 725,504 = 4,877,568; the rest as above.
//   optimizer_and_params, ZeRO-3: weights: the block being computed and the next, 2 · 1,451,008 =
//     2,902,016; host (12 + 2 + 2)P/2 = 27,412,480.
// Activations are the same at every level.
TEST(OffloadMemory, WhatLeavesTheGpuAtEachLevel) {
  const World w = MakeWorld();
  const auto none = EstimateMemory(TwoReplicas(2, "none"), w.ctx());
  ASSERT_EQ(none.size(), 2u);
  EXPECT_DOUBLE_EQ(none[0].params_gib * kGib, 2 * kP);
  EXPECT_DOUBLE_EQ(none[0].grads_gib * kGib, kP);
  EXPECT_DOUBLE_EQ(none[0].optimizer_gib * kGib, 6 * kP);
  EXPECT_DOUBLE_EQ(none[0].host_gib, 0);

  const auto opt2 = EstimateMemory(TwoReplicas(2, "optimizer"), w.ctx());
  EXPECT_DOUBLE_EQ(opt2[1].params_gib * kGib, 2 * kP);
  EXPECT_DOUBLE_EQ(opt2[1].grads_gib * kGib, 2 * 2 * kBlock);
  EXPECT_DOUBLE_EQ(opt2[1].optimizer_gib, 0);
  EXPECT_DOUBLE_EQ(opt2[1].host_gib * kGib, 14 * kP / 2);
  EXPECT_DOUBLE_EQ(opt2[1].activations_gib, none[1].activations_gib);

  const auto opt3 = EstimateMemory(TwoReplicas(3, "optimizer"), w.ctx());
  EXPECT_DOUBLE_EQ(opt3[0].params_gib * kGib, kP + 2 * kBlock);
  EXPECT_DOUBLE_EQ(opt3[0].grads_gib * kGib, 2 * 2 * kBlock);
  EXPECT_DOUBLE_EQ(opt3[0].host_gib * kGib, 14 * kP / 2);

  const auto params = EstimateMemory(TwoReplicas(3, "optimizer_and_params"), w.ctx());
  EXPECT_DOUBLE_EQ(params[0].params_gib * kGib, 2 * 2 * kBlock);
  EXPECT_DOUBLE_EQ(params[0].grads_gib * kGib, 2 * 2 * kBlock);
  EXPECT_DOUBLE_EQ(params[0].optimizer_gib, 0);
  EXPECT_DOUBLE_EQ(params[0].host_gib * kGib, 16 * kP / 2);
  // The GPU total is the sum of its parts, as without offload (no allocator overhead, 1 GiB workspace, the
  // CUDA context and NCCL's buffers).
  EXPECT_NEAR(params[0].total_gib,
              params[0].params_gib + params[0].grads_gib + params[0].activations_gib + params[0].workspace_gib +
                  params[0].context_gib + params[0].nccl_gib,
              1e-12);
  EXPECT_GT(params[0].nccl_gib, 0);
}

// The gradient buckets follow comm.dp_bucket_mib: two buckets of 1 MiB = 2,097,152 bytes; buckets of
// 8 MiB would hold more than the rank's 2P = 6,853,120 bytes of gradients, which is the cap.
TEST(OffloadMemory, GradientBuffersFollowTheBucketSize) {
  const World w = MakeWorld();
  EXPECT_DOUBLE_EQ(EstimateMemory(TwoReplicas(2, "optimizer", "comm: {dp_bucket_mib: 1}"), w.ctx())[0].grads_gib * kGib,
                   2 * 1048576.0);
  EXPECT_DOUBLE_EQ(EstimateMemory(TwoReplicas(2, "optimizer", "comm: {dp_bucket_mib: 8}"), w.ctx())[0].grads_gib * kGib,
                   2 * kP);
}

// Host memory per node: the node's two ranks need 2 · 23,985,920 = 47,971,840 bytes (0.0447 GiB) with the
// optimizer offloaded and 2 · 27,412,480 = 54,824,960 (0.0511 GiB) with the parameters too. A node of
// 0.05 GiB holds the first and not the second; a node whose spec gives no host memory is not checked.
TEST(OffloadMemory, HostMemoryIsCheckedPerNodeWhenTheSpecGivesIt) {
  const World small = MakeWorld(", host_memory_gib: 0.05");
  const auto opt = HostMemoryByNode(EstimateMemory(TwoReplicas(3, "optimizer"), small.ctx()), small.cluster);
  ASSERT_EQ(opt.size(), 1u);
  EXPECT_DOUBLE_EQ(opt[0].need_gib * kGib, 2 * 14 * kP / 2);
  EXPECT_DOUBLE_EQ(opt[0].capacity_gib, 0.05);
  EXPECT_FALSE(opt[0].oom());
  EXPECT_TRUE(ValidatePlan(TwoReplicas(3, "optimizer"), small.ctx(), "p.yaml").ok());
  const Status s = ValidatePlan(TwoReplicas(3, "optimizer_and_params"), small.ctx(), "p.yaml");
  EXPECT_EQ(s.code(), Status::Code::kInfeasible);
  EXPECT_NE(s.message().find("p.yaml: offload: node n needs 0.1 GiB of host memory"), std::string::npos)
      << s.message();

  const World unstated = MakeWorld();
  const auto host = HostMemoryByNode(EstimateMemory(TwoReplicas(3, "optimizer_and_params"), unstated.ctx()),
                                     unstated.cluster);
  ASSERT_EQ(host.size(), 1u);
  EXPECT_DOUBLE_EQ(host[0].capacity_gib, 0);  // not stated: assumed enough
  EXPECT_FALSE(host[0].oom());
  EXPECT_TRUE(ValidatePlan(TwoReplicas(3, "optimizer_and_params"), unstated.ctx(), "p.yaml").ok());
  EXPECT_TRUE(HostMemoryByNode(EstimateMemory(TwoReplicas(3, "none"), unstated.ctx()), unstated.cluster).empty());
}

// The plan file carries the level (YAML names without the enum prefix), and `hetsim describe --plan` shows
// it with each node's host memory: 0.0447 GiB of the stated 0.05 on the node, or "assumed enough" where the
// spec states none.
TEST(OffloadPlan, TheFileAndTheDescriptionCarryIt) {
  const proto::Plan plan = TwoReplicas(3, "optimizer_and_params");
  EXPECT_EQ(plan.offload(), proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS);
  const std::string yaml = MessageToYaml(plan);
  EXPECT_NE(yaml.find("offload: optimizer_and_params"), std::string::npos) << yaml;
  EXPECT_EQ(PlanFrom(yaml).SerializeAsString(), plan.SerializeAsString());

  const World small = MakeWorld(", host_memory_gib: 0.05");
  const std::string text = DescribePlan(TwoReplicas(3, "optimizer"), small.ctx());
  EXPECT_NE(text.find("ZeRO-3, recompute none, CPU offload optimizer"), std::string::npos) << text;
  EXPECT_NE(text.find("host memory (offload: optimizer):\n  n: 0.0 GiB of 0"), std::string::npos) << text;
  const World unstated = MakeWorld();
  const std::string assumed = DescribePlan(TwoReplicas(3, "optimizer"), unstated.ctx());
  EXPECT_NE(assumed.find("n: 0.0 GiB (the cluster spec gives no host_memory_gib: assumed enough)"), std::string::npos)
      << assumed;
  EXPECT_EQ(DescribePlan(TwoReplicas(3, "none"), unstated.ctx()).find("offload"), std::string::npos);
}

// ---- the lowering -------------------------------------------------------------------------------------

Lowering LowerIt(const World& w, const proto::Plan& plan) {
  const Status v = ValidatePlanStructure(plan, w.ctx(), "plan");
  EXPECT_TRUE(v.ok()) << v.message();
  auto l = LowerPlan(plan, w.ctx());
  EXPECT_TRUE(l.ok()) << l.status().message();
  return std::move(l).value();
}

// The operations of a stream from `first` on, as "kind/category" words with the host copies' direction.
std::string Tail(const std::vector<Op>& ops, size_t first) {
  std::string out;
  for (size_t i = first; i < ops.size(); ++i) {
    const Op& op = ops[i];
    std::string word;
    switch (op.kind) {
      case OpKind::kCollective: word = CollectiveName(op.collective); break;
      case OpKind::kHostCopy: word = op.to_host ? "d2h" : "h2d"; break;
      case OpKind::kCompute: word = op.host_ranks > 0 ? "cpu_step" : "step"; break;
      case OpKind::kWaitSends: word = "wait"; break;
      case OpKind::kJoin: word = "join"; break;
      case OpKind::kAwait: word = "await"; break;
      default: word = "other"; break;
    }
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

size_t AfterLastPass(const std::vector<Op>& ops) {
  size_t i = ops.size();
  while (i > 0 && !(ops[i - 1].kind == OpKind::kCompute && ops[i - 1].category == Category::kBackward)) --i;
  return i;
}

// ZeRO-Offload on two replicas (one sync group of layers 0-5, 2P = 6,853,120 bytes of gradients): after the
// backward passes each rank reduce-scatters, copies its half to the host (3,426,560 bytes), steps on the CPU
// over its P/2 = 1,713,280 parameters with the node's CPU shared by 2 ranks, copies its updated fp16 half
// back (3,426,560 bytes) and all-gathers.
TEST(OffloadLowering, ZeroOffloadCopiesTheShardOutAndBack) {
  const World w = MakeWorld();
  const Lowering l = LowerIt(w, TwoReplicas(2, "optimizer"));
  const auto& ops = l.ranks[0].ops;
  EXPECT_EQ(Tail(ops, AfterLastPass(ops)), "wait reduce_scatter d2h cpu_step h2d all_gather");
  for (const Op& op : ops) {
    if (op.kind == OpKind::kHostCopy) {
      EXPECT_DOUBLE_EQ(op.bytes, kP);
    }
    if (op.category == Category::kOptimizer) {
      EXPECT_DOUBLE_EQ(op.params, kP / 2);
      EXPECT_EQ(op.host_ranks, 2u);
    }
  }
  const OpTotals t = TotalOps(l);
  EXPECT_DOUBLE_EQ(t.d2h_bytes, 2 * kP);
  EXPECT_DOUBLE_EQ(t.h2d_bytes, 2 * kP);
  EXPECT_DOUBLE_EQ(t.host_optimizer_params, kP);
  EXPECT_NE(FormatLowering(l).find("compute optimizer mb 0 layers 0-6 seqs 0-0 flops 0 params 1.71328e+06 on_host 2"),
            std::string::npos);
}

// With 1 MiB buckets the 6,853,120 bytes go in ceil(6.54) = 7 reduce-scatters of 979,017.14 bytes, each
// followed by the copy of the rank's half (489,508.57 bytes).
TEST(OffloadLowering, EachBucketsShardGoesToTheHostAfterItsReduceScatter) {
  const World w = MakeWorld();
  const Lowering l = LowerIt(w, TwoReplicas(2, "optimizer", "comm: {dp_bucket_mib: 1}"));
  const auto& ops = l.ranks[1].ops;
  std::string expected = "wait";
  for (int i = 0; i < 7; ++i) expected += " reduce_scatter d2h";
  EXPECT_EQ(Tail(ops, AfterLastPass(ops)), expected + " cpu_step h2d all_gather");
  for (const Op& op : ops) {
    if (op.kind == OpKind::kHostCopy && op.to_host) {
      EXPECT_NEAR(op.bytes, 2 * kP / 7 / 2, 1e-6);
    }
  }
}

// One GPU with comm.dp_overlap (ZeRO-Offload §4.1's single-GPU schedule): no replica shares a layer, so each
// layer's gradients go to the host one layer at a time on the DP stream, as soon as the last backward has
// passed it (layers 5 down to 0: the head's 524,800 bytes, each block's 1,451,008, the embedding's 524,288);
// the step runs on the CPU over all P parameters (one rank on the node) and the 2P bytes of updated weights
// come back.
TEST(OffloadLowering, OneGpuCopiesEachLayersGradientsDuringTheLastBackward) {
  const World w = MakeWorld();
  const Lowering l = LowerIt(w, OneGpu(2, "optimizer", "comm: {dp_overlap: true}"));
  const auto& r = l.ranks[0];
  EXPECT_EQ(Tail(r.dp_stream, 0), "await d2h await d2h await d2h await d2h await d2h await d2h");
  const double bytes[] = {2 * kHead, 2 * kBlock, 2 * kBlock, 2 * kBlock, 2 * kBlock, 2 * kEmbedding};
  const uint32_t layers[] = {5, 4, 3, 2, 1, 0};
  for (int i = 0; i < 6; ++i) {
    const Op& op = r.dp_stream[2 * i + 1];
    EXPECT_DOUBLE_EQ(op.bytes, bytes[i]);
    EXPECT_EQ(op.layer_begin, layers[i]);
  }
  // The main stream signals once per layer in the last backward, then joins and steps.
  size_t signals = 0;
  for (const Op& op : r.ops) signals += op.kind == OpKind::kSignal ? 1 : 0;
  EXPECT_EQ(signals, 6u);
  EXPECT_EQ(Tail(r.ops, AfterLastPass(r.ops)), "other wait join cpu_step h2d");  // "other": the last signal
  EXPECT_DOUBLE_EQ(TotalOps(l).h2d_bytes, 2 * kP);
  EXPECT_DOUBLE_EQ(TotalOps(l).host_optimizer_params, kP);
}

// Parameter offload on one GPU (ZeRO-3): before each of the 4 forward and 4 backward passes every layer's
// weights come from the host (8 · 2P = 54,824,960 bytes); nothing is copied after the step, which updates
// the host's copy.
TEST(OffloadLowering, ParameterOffloadFetchesTheWeightsBeforeEveryPass) {
  const World w = MakeWorld();
  const Lowering l = LowerIt(w, OneGpu(3, "optimizer_and_params"));
  const OpTotals t = TotalOps(l);
  EXPECT_DOUBLE_EQ(t.h2d_bytes, 8 * 2 * kP);
  EXPECT_DOUBLE_EQ(t.d2h_bytes, 2 * kP);
  const auto& ops = l.ranks[0].ops;
  EXPECT_EQ(Tail(ops, AfterLastPass(ops)), "wait d2h d2h d2h d2h d2h d2h cpu_step");
}

// Parameter offload over two replicas: each ZeRO-3 all-gather (before each of the 8 passes and the one
// after the step) is preceded by the copy of the rank's half of the weights, P = 3,426,560 bytes.
TEST(OffloadLowering, ParameterOffloadCopiesEachShardBeforeItsGather) {
  const World w = MakeWorld();
  const Lowering l = LowerIt(w, TwoReplicas(3, "optimizer_and_params"));
  const auto& ops = l.ranks[0].ops;
  size_t gathers = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::kCollective || ops[i].collective != CollectiveKind::kAllGather) continue;
    ++gathers;
    ASSERT_GT(i, 0u);
    EXPECT_EQ(ops[i - 1].kind, OpKind::kHostCopy);
    EXPECT_FALSE(ops[i - 1].to_host);
    EXPECT_DOUBLE_EQ(ops[i - 1].bytes, kP);
  }
  EXPECT_EQ(gathers, 9u);
  EXPECT_DOUBLE_EQ(TotalOps(l).h2d_bytes, 2 * 9 * kP);
}

TEST(OffloadLowering, InterleavedSchedulesAreRefused) {
  const World w = MakeWorld();
  auto plan = TwoReplicas(2, "optimizer", "schedule: interleaved_1f1b");
  const auto l = LowerPlan(plan, w.ctx());
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("offload: CPU offload is lowered for the 1f1b and gpipe schedules"),
            std::string::npos);
}

}  // namespace
}  // namespace hetsim::models
