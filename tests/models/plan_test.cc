// Plan semantics: memory estimates and gradient-sync groups against hand-derived values.
#include "models/plan.h"

#include <gtest/gtest.h>

#include <array>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "tests/common/specs.h"

namespace hetsim::models {
namespace {

using testing_util::kGib;

struct Fixture {
  Cluster cluster;
  TransformerModel model;
  proto::Training training;
};

Fixture Make(const std::string& cluster, const std::string& model, const std::string& training_yaml) {
  auto c = LoadCluster(cluster);
  auto m = LoadModel(model);
  EXPECT_TRUE(c.ok() && m.ok());
  proto::Training t;
  EXPECT_TRUE(ParseYaml(training_yaml, "training", &t).ok());
  auto r = ResolveTraining(t, *m, "training");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return {std::move(c).value(), std::move(m).value(), std::move(r).value()};
}

using testing_util::PlanFrom;

// Two single-device stages of llama-tiny (embedding + 2 blocks, 2 blocks + head), 4 micro-batches of 2.
constexpr const char* kTwoStages = R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 3}
      - {devices: [1], layer_begin: 3, layer_end: 6}
)";

TEST(PlanMemory, TwoStageOneFOneBMatchesHandDerivation) {
  // llama-tiny: h = 256, f = 688, 8 heads of 32, 4 kv heads, V = 1024, 4 blocks.
  // block params = 2h² + 2h·(4·32) + 3hf + 2h = 131,072 + 65,536 + 528,384 + 512 = 725,504
  // embedding = V·h = 262,144; head = V·h + h = 262,400.
  // fp32 Adam: 4 (weights) + 4 (gradients) + 8 (two moments) = 16 bytes per parameter.
  auto f = Make("cpu-4", "llama-tiny", "{global_batch_size: 8, seq_len: 128, dtype: fp32}");
  const auto plan = PlanFrom(kTwoStages);
  PlanContext ctx{f.cluster, f.model, f.training};
  ASSERT_TRUE(ValidatePlanStructure(plan, ctx, "plan").ok());
  const auto mem = EstimateMemory(plan, ctx);
  ASSERT_EQ(mem.size(), 2u);
  const double stage0_params = 262144 + 2 * 725504.0, stage1_params = 2 * 725504.0 + 262400;
  EXPECT_DOUBLE_EQ(mem[0].params_gib * kGib, 4 * stage0_params);
  EXPECT_DOUBLE_EQ(mem[0].grads_gib * kGib, 4 * stage0_params);
  EXPECT_DOUBLE_EQ(mem[0].optimizer_gib * kGib, 8 * stage0_params);
  EXPECT_DOUBLE_EQ(mem[1].optimizer_gib * kGib, 8 * stage1_params);
  // Activations per block per micro-batch (fp32, 256 tokens, flash attention):
  //   replicated 4·4·256·256 = 1,048,576; Q,K,V 4·256·(256 + 2·128) = 524,288; attention output
  //   4·256·256 = 262,144; SwiGLU internals 3·4·256·688 = 2,113,536; softmax stats 4·256·8 = 8,192
  //   -> 3,956,736 bytes. Head: 2·4·256·256 + 4·256·1024 = 1,572,864.
  // 1F1B in flight: stage 0 keeps min(4, 2) = 2 micro-batches, stage 1 keeps 1.
  const double block = 3956736, head = 1572864;
  EXPECT_DOUBLE_EQ(mem[0].activations_gib * kGib, 2 * (2 * block));
  EXPECT_DOUBLE_EQ(mem[1].activations_gib * kGib, 1 * (2 * block + head));
  EXPECT_DOUBLE_EQ(mem[0].workspace_gib, 1.0);
  EXPECT_DOUBLE_EQ(mem[0].capacity_gib, 16.0);
}

TEST(PlanMemory, DropoutMasksAllocatorOverheadAndExtraOptimizerBytes) {
  // The plan above (stage 1: 2 blocks + head, 1 micro-batch in flight), with standard attention, dropout,
  // a 10% allocator overhead and Megatron's 4-byte fp32 main-gradient buffer.
  auto f = Make("cpu-4", "llama-tiny",
                "{global_batch_size: 8, seq_len: 128, dtype: fp32, attention: standard, dropout: 0.1, "
                "allocator_overhead: 0.1, optimizer_extra_bytes_per_param: 4}");
  const auto plan = PlanFrom(kTwoStages);
  PlanContext ctx{f.cluster, f.model, f.training};
  const auto mem = EstimateMemory(plan, ctx);
  ASSERT_EQ(mem.size(), 2u);
  const double stage1_params = 2 * 725504.0 + 262400;
  // Optimizer: 8 (Adam moments) + 4 (the extra buffer) bytes per parameter.
  EXPECT_DOUBLE_EQ(mem[1].optimizer_gib * kGib, 12 * stage1_params);
  // A block (fp32, b = 2, s = 128, 8 heads): without the softmax statistics of flash attention
  // (3,956,736 − 8,192), plus the kept softmax output 4·8·128²·2 = 1,048,576, the attention-dropout mask
  // 8·128²·2 = 262,144 and its output 1,048,576, and the two hidden masks 2·256·256 = 131,072:
  // 6,438,912 bytes. Head unchanged: 1,572,864.
  const double block = 3956736 - 8192 + 1048576 + 262144 + 1048576 + 131072, head = 1572864;
  EXPECT_DOUBLE_EQ(mem[1].activations_gib * kGib, 2 * block + head);
  const double tensors = mem[1].params_gib + mem[1].grads_gib + mem[1].optimizer_gib + mem[1].activations_gib;
  EXPECT_NEAR(mem[1].allocator_gib, 0.1 * tensors, 1e-15);
  // Plus 1 GiB of workspace, the CUDA context (400 MiB) and two 2-rank NCCL communicators (the world of
  // two devices and the two-stage pipeline group), 544 MiB each on NVLink, 2/25 of that on cpu-4's PCIe
  // (models/training.h).
  EXPECT_EQ(mem[1].nccl_communicators, 2u);
  EXPECT_NEAR(mem[1].total_gib, 1.1 * tensors + 1.0 + (400.0 + 2 * 544.0 * 2 / 25) / 1024, 1e-12);
}

TEST(PlanMemory, AdamMomentsInBf16HalveTheOptimizerState) {
  // bf16 training: fp32 master weights (4 bytes) and Adam's two moments, fp32 (8 bytes) or bf16 (4 bytes).
  const auto plan = PlanFrom(kTwoStages);
  const double stage1_params = 2 * 725504.0 + 262400;
  for (const auto& [moments, bytes] : {std::pair<std::string, double>{"", 12}, {", optimizer_state_dtype: fp32", 12},
                                       {", optimizer_state_dtype: bf16", 8}}) {
    auto f = Make("cpu-4", "llama-tiny", "{global_batch_size: 8, seq_len: 128, dtype: bf16" + moments + "}");
    const auto mem = EstimateMemory(plan, PlanContext{f.cluster, f.model, f.training});
    ASSERT_EQ(mem.size(), 2u);
    EXPECT_DOUBLE_EQ(mem[1].optimizer_gib * kGib, bytes * stage1_params) << moments;
    EXPECT_DOUBLE_EQ(OptimizerBytesPerParam(f.training), bytes) << moments;
  }
}

TEST(PlanMemory, GpipeKeepsEveryMicroBatchAndZeroShardsOverReplicas) {
  auto f = Make("cpu-4", "llama-tiny", "{global_batch_size: 8, seq_len: 128, dtype: fp32}");
  auto plan = PlanFrom(R"(
schedule: gpipe
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages: [{devices: [0], layer_begin: 0, layer_end: 6}]
  - micro_batch_size: 1
    num_micro_batches: 4
    stages: [{devices: [1], layer_begin: 0, layer_end: 6}]
)");
  PlanContext ctx{f.cluster, f.model, f.training};
  ASSERT_TRUE(ValidatePlanStructure(plan, ctx, "plan").ok());
  const double all = 3426560;  // llama-tiny's parameters
  auto mem = EstimateMemory(plan, ctx);
  // GPipe: all 4 micro-batches in flight; 128 tokens: block = 3,956,736 / 2, head = 1,572,864 / 2.
  EXPECT_DOUBLE_EQ(mem[0].activations_gib * kGib, 4 * (4 * 3956736 / 2.0 + 1572864 / 2.0));
  plan.set_zero_stage(1);
  mem = EstimateMemory(plan, ctx);
  EXPECT_DOUBLE_EQ(mem[0].optimizer_gib * kGib, 8 * all / 2);
  EXPECT_DOUBLE_EQ(mem[0].grads_gib * kGib, 4 * all);
  plan.set_zero_stage(3);
  mem = EstimateMemory(plan, ctx);
  EXPECT_DOUBLE_EQ(mem[0].grads_gib * kGib, 4 * all / 2);
  // ZeRO-3 also holds the gathered weights of the largest layer (a block, 725,504 parameters).
  EXPECT_DOUBLE_EQ(mem[0].params_gib * kGib, 4 * all / 2 + 4 * 725504.0);
}

TEST(GradSync, DifferentTpDegreesSyncInChunksOfTheSmallestShard) {
  // Pipeline 0 holds every layer with TP 2 on devices 0,1; pipeline 1 with TP 4 on devices 4..7
  // (hexiscale-case-study has 8 devices). lcm(2, 4) = 4 chunks: chunk c lives on TP rank c·t/4.
  auto f = Make("hexiscale-case-study", "llama-tiny", "{global_batch_size: 2, seq_len: 128}");
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0, 1], tp_degree: 2, layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [4, 5, 6, 7], tp_degree: 4, layer_end: 6}]}
)");
  PlanContext ctx{f.cluster, f.model, f.training};
  ASSERT_TRUE(ValidatePlanStructure(plan, ctx, "plan").ok());
  const auto groups = DeriveGradSyncGroups(plan, f.model);
  ASSERT_EQ(groups.size(), 4u);
  const std::vector<std::vector<uint32_t>> want = {{0, 4}, {0, 5}, {1, 6}, {1, 7}};
  for (uint32_t c = 0; c < 4; ++c) {
    EXPECT_EQ(groups[c].layer_begin, 0u);
    EXPECT_EQ(groups[c].layer_end, 6u);
    EXPECT_EQ(groups[c].num_chunks, 4u);
    EXPECT_EQ(groups[c].chunk, c);
    EXPECT_EQ(groups[c].devices, want[c]);
  }
}

TEST(GradSync, DifferentLayerSplitsGiveOneGroupPerCommonSegment) {
  // AutoHet II-C: pipelines cut at different layers sync layer by layer. Cuts at 3 (pipeline 0) and 2
  // (pipeline 1) give segments [0,2), [2,3), [3,6), each synced by the two stages holding it.
  auto f = Make("cpu-4", "llama-tiny", "{global_batch_size: 2, seq_len: 128, dtype: fp32}");
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [2], layer_end: 2}, {devices: [3], layer_begin: 2, layer_end: 6}]}
)");
  PlanContext ctx{f.cluster, f.model, f.training};
  ASSERT_TRUE(ValidatePlanStructure(plan, ctx, "plan").ok());
  const auto groups = DeriveGradSyncGroups(plan, f.model);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].devices, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(groups[1].layer_begin, 2u);
  EXPECT_EQ(groups[1].devices, (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(groups[2].layer_begin, 3u);
  EXPECT_EQ(groups[2].devices, (std::vector<uint32_t>{1, 3}));
}

// Megatron-LM's placement of model chunks under interleaved 1F1B (Narayanan et al. 2021 §2.2): virtual
// stage c·S + s runs on stage s, blocks are dealt out in virtual-stage order. llama2-7b has 32 blocks
// (plan layers 0..33). Stage 0 [0,12) holds 11 blocks, cut 6 + 5; stage 1 [12,34) holds 21, cut 11 + 10.
// Dealt: (c0,s0) blocks 1-6 with the embedding = [0,7); (c0,s1) blocks 7-17 = [7,18); (c1,s0) blocks 18-22
// = [18,23); (c1,s1) blocks 23-32 with the head = [23,34).
TEST(StageChunks, InterleavedStagesHoldMegatronsChunksInModelOrder) {
  auto m = LoadModel("llama2-7b");
  ASSERT_TRUE(m.ok());
  auto plan = PlanFrom(R"(
schedule: interleaved_1f1b
virtual_stages: 2
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 2, stages: [{devices: [0], layer_end: 12}, {devices: [1], layer_begin: 12, layer_end: 34}]}
)");
  const auto s0 = StageChunks(plan, plan.pipelines(0), 0, *m);
  const auto s1 = StageChunks(plan, plan.pipelines(0), 1, *m);
  ASSERT_EQ(s0.size(), 2u);
  ASSERT_EQ(s1.size(), 2u);
  EXPECT_EQ(s0[0].begin, 0u);
  EXPECT_EQ(s0[0].end, 7u);
  EXPECT_EQ(s1[0].begin, 7u);
  EXPECT_EQ(s1[0].end, 18u);
  EXPECT_EQ(s0[1].begin, 18u);
  EXPECT_EQ(s0[1].end, 23u);
  EXPECT_EQ(s1[1].begin, 23u);
  EXPECT_EQ(s1[1].end, 34u);
  // Without interleaving a stage holds its range.
  plan.set_schedule(proto::Plan::SCHEDULE_1F1B);
  plan.set_virtual_stages(1);
  const auto plain = StageChunks(plan, plan.pipelines(0), 1, *m);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].begin, 12u);
  EXPECT_EQ(plain[0].end, 34u);
}

// With DP under interleaving the sync groups are cut at every chunk boundary: llama-tiny on two stages of
// two replicas, two chunks each (stage 0: [0,2) and [3,4); stage 1: [2,3) and [4,6)) gives four groups.
TEST(GradSync, InterleavedChunksSyncOnTheirOwn) {
  auto f = Make("cpu-4", "llama-tiny", "{global_batch_size: 8, seq_len: 128, dtype: fp32}");
  const auto plan = PlanFrom(R"(
schedule: interleaved_1f1b
virtual_stages: 2
pipelines:
  - {micro_batch_size: 4, num_micro_batches: 2, stages: [{devices: [0, 1], layer_end: 3}, {devices: [2, 3], layer_begin: 3, layer_end: 6}]}
)");
  PlanContext ctx{f.cluster, f.model, f.training};
  ASSERT_TRUE(ValidatePlanStructure(plan, ctx, "plan").ok()) << ValidatePlanStructure(plan, ctx, "plan").message();
  const auto groups = DeriveGradSyncGroups(plan, f.model);
  ASSERT_EQ(groups.size(), 4u);
  const std::vector<std::array<uint32_t, 3>> want = {{0, 2, 0}, {2, 3, 2}, {3, 4, 0}, {4, 6, 2}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(groups[i].layer_begin, want[i][0]) << i;
    EXPECT_EQ(groups[i].layer_end, want[i][1]) << i;
    EXPECT_EQ(groups[i].devices, (std::vector<uint32_t>{want[i][2], want[i][2] + 1})) << i;
  }
}

TEST(GradSync, IntraStageDataParallelReplicasSyncTogether) {
  auto f = Make("cpu-4", "llama-tiny", "{global_batch_size: 3, seq_len: 128, dtype: fp32}");
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 3, num_micro_batches: 1, stages: [{devices: [0, 1, 2, 3], tp_degree: 2, micro_batch_split: [2, 1], layer_end: 6}]}
)");
  PlanContext ctx{f.cluster, f.model, f.training};
  ASSERT_TRUE(ValidatePlanStructure(plan, ctx, "plan").ok()) << ValidatePlanStructure(plan, ctx, "plan").message();
  const auto groups = DeriveGradSyncGroups(plan, f.model);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].devices, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(groups[1].devices, (std::vector<uint32_t>{1, 3}));
}

TEST(PlanHelpers, EvenMicroBatchSplitGivesTheRemainderToTheFirstReplicas) {
  proto::Stage st;
  for (uint32_t d : {0, 1, 2}) st.add_devices(d);
  EXPECT_EQ(MicroBatchSplit(st, 8), (std::vector<uint32_t>{3, 3, 2}));
  st.add_micro_batch_split(5);
  st.add_micro_batch_split(2);
  st.add_micro_batch_split(1);
  EXPECT_EQ(MicroBatchSplit(st, 8), (std::vector<uint32_t>{5, 2, 1}));
}

TEST(BundledPlans, EveryBundledPlanValidatesAgainstTheClusterAndModelItNames) {
  for (const auto& name : BundledNames(SpecKind::kPlan)) {
    auto src = ReadSpec(SpecKind::kPlan, name);
    ASSERT_TRUE(src.ok());
    proto::Plan p;
    ASSERT_TRUE(ParseSpec(*src, SpecKind::kPlan, &p).ok()) << name;
    auto c = LoadCluster(p.cluster());
    auto m = LoadModel(p.model());
    ASSERT_TRUE(c.ok() && m.ok()) << name;
    auto t = ResolveTraining(p.training(), *m, name);
    ASSERT_TRUE(t.ok()) << t.status().message();
    PlanContext ctx{*c, *m, *t};
    const Status s = ValidatePlan(p, ctx, name);
    EXPECT_TRUE(s.ok()) << s.message();
  }
}

TEST(BundledSpecs, EveryClusterAndModelBuilds) {
  for (const auto& name : BundledNames(SpecKind::kCluster)) {
    auto c = LoadCluster(name);
    EXPECT_TRUE(c.ok()) << c.status().message();
  }
  for (const auto& name : BundledNames(SpecKind::kModel)) {
    auto m = LoadModel(name);
    EXPECT_TRUE(m.ok()) << m.status().message();
  }
}

TEST(BundledSpecs, Llama3ClusterHasSixteenThousandGpusInPods) {
  auto c = LoadCluster("llama3-16384");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_devices(), 16384u);
  EXPECT_EQ(c->nodes().size(), 2048u);
  EXPECT_EQ(c->spec().network().pods().nodes_per_pod() * 8, 3072u);
  EXPECT_DOUBLE_EQ(c->spec().network().pods().oversubscription(), 7.0);
  EXPECT_EQ(c->node(0).nic.bandwidth_gbps(), 400.0);
  EXPECT_EQ(c->node(0).nic.attachment(), proto::Nic::ATTACHMENT_PER_GPU);
}


// Runtime memory (models/plan.h): the CUDA context and one NCCL communicator per process group the rank
// uses, 688 MiB for >= 3 ranks and 544 MiB for 2 on NVLink-class nodes (NVIDIA/nccl#964), 400 MiB of
// context (pytorch/pytorch#109888).
TEST(PlanMemory, RuntimeMemoryCountsTheRanksCommunicators) {
  // One device: no communicator. Every dimension above 1 adds one; the tied-embedding group only on an end
  // stage of a pipeline of more than one stage.
  EXPECT_EQ(CountNcclCommunicators(1, 1, 1, 1, 1, true).count, 0u);
  const auto c = CountNcclCommunicators(64, 4, 1, 8, 2, true);
  EXPECT_EQ(c.count, 5u);     // world, TP, DP, pipeline, embedding
  EXPECT_EQ(c.two_rank, 2u);  // the two-stage pipeline group and the embedding group
  EXPECT_EQ(CountNcclCommunicators(64, 4, 1, 8, 2, false).count, 4u);
  EXPECT_EQ(CountNcclCommunicators(8, 8, 1, 1, 1, true).count, 2u);  // world and TP, one stage: no embedding group

  // Sailor's 16-node plan at DP 8 × PP 2 × TP 4 on GH200 nodes (NVLink): every rank has five communicators,
  // 3 × 688 + 2 × 544 = 3,152 MiB, and 400 MiB of context.
  const std::string dir = std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/sailor_gh200_opt350/";
  auto f = Make(dir + "clusters/clariden-gh200-n16.yaml", "opt-350m",
                "{global_batch_size: 1024, seq_len: 2048, dtype: tf32, attention: standard}");
  auto plan = LoadPlan(dir + "plans/n16-d8.yaml");
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  PlanContext ctx{f.cluster, f.model, f.training};
  const auto mem = EstimateMemory(*plan, ctx);
  ASSERT_EQ(mem.size(), 64u);
  for (const auto& dm : mem) {
    EXPECT_EQ(dm.nccl_communicators, 5u) << "device " << dm.device;
    EXPECT_NEAR(dm.nccl_gib, 3152.0 / 1024, 1e-12);
    EXPECT_NEAR(dm.context_gib, 400.0 / 1024, 1e-12);
    EXPECT_NEAR(dm.total_gib,
                dm.params_gib + dm.grads_gib + dm.optimizer_gib + dm.activations_gib + dm.workspace_gib +
                    (400.0 + 3152.0) / 1024,
                1e-9);
  }

  // The tensors alone when asked for (training.tensors_only_memory).
  f.training.set_tensors_only_memory(true);
  for (const auto& dm : EstimateMemory(*plan, ctx)) {
    EXPECT_EQ(dm.nccl_gib, 0);
    EXPECT_EQ(dm.context_gib, 0);
  }
}

// Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving): stage s of S warms up
// 2(S − s − 1) + (v − 1)·S chunk forwards and keeps one more in the steady state, a chunk being 1/v of the
// stage; all m·v chunks when m = S or when they are fewer.
TEST(PlanMemory, InterleavedInFlightFollowsMegatronsWarmUp) {
  // S = 4, v = 2, m = 8: stage 0 warms up 6 + 4 = 10 chunks, 11 in flight = 5.5 stages' worth (Narayanan
  // et al.'s S + (S − 1)/v); the last stage 0 + 4 + 1 = 5 chunks = 2.5 (more than 1F1B's one micro-batch).
  EXPECT_DOUBLE_EQ(InterleavedInFlight(0, 4, 8, 2), 5.5);
  EXPECT_DOUBLE_EQ(InterleavedInFlight(3, 4, 8, 2), 2.5);
  // m = S = 16, v = 4 (the bundled Llama 3 405B plan): every stage runs all 64 chunk forwards first: 16.
  EXPECT_DOUBLE_EQ(InterleavedInFlight(0, 16, 16, 4), 16);
  EXPECT_DOUBLE_EQ(InterleavedInFlight(15, 16, 16, 4), 16);
  // Fewer chunks than the warm-up (S = 4, v = 2, m = 2): all 4 chunks = 2.
  EXPECT_DOUBLE_EQ(InterleavedInFlight(0, 4, 2, 2), 2);
}

}  // namespace
}  // namespace hetsim::models
