// The analytic cost model (planners/cost_model.h) against closed forms derived by hand. Layer times come
// from hand-written profiles so that every term is a round number.
#include "planners/cost_model.h"

#include <gtest/gtest.h>

#include "models/plan.h"
#include "models/profile_db.h"
#include "planners/search.h"
#include "tests/planners/test_util.h"

namespace hetsim::planners {
namespace {

using testing::ClusterFromYaml;
using testing::Fixture;
using testing::PlanFromYaml;

// llama-tiny per-layer times at TP 1 and micro-batch 1: a block 1 ms forward and 2 ms backward on an
// A100 and half that on an H100; the head 0.5 / 1 ms (A100) and half that on an H100; the embedding 0.
models::ProfileDb TinyProfiles() {
  models::ProfileDb db;
  for (const auto& [gpu, scale] : {std::pair<std::string, double>{"a100-80gb", 1.0}, {"h100", 0.5}}) {
    proto::Profile p;
    p.set_gpu(gpu);
    p.set_model("llama-tiny");
    p.set_seq_len(128);
    auto add = [&](proto::LayerTiming::LayerKind kind, double fwd, double bwd) {
      auto* l = p.add_layers();
      l->set_layer(kind);
      l->set_tp_degree(1);
      l->set_micro_batch_size(1);
      l->set_forward_s(fwd * scale);
      l->set_backward_s(bwd * scale);
    };
    add(proto::LayerTiming::LAYER_KIND_EMBEDDING, 0, 0);
    add(proto::LayerTiming::LAYER_KIND_TRANSFORMER, 1e-3, 2e-3);
    add(proto::LayerTiming::LAYER_KIND_HEAD, 0.5e-3, 1e-3);
    const Status s = db.Add(p, gpu + ".yaml");
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return db;
}

// The closed-form compute model without the kernel model's fixed costs (collective α, host overheads).
PlanningProblem ClosedForm(PlanningProblem p) {
  p.compute.model = models::ComputeModel::kTokenEfficiency;
  return p;
}

// llama-tiny (h = 256, 4 blocks, V = 1024, untied): block 725,504 parameters, embedding 262,144, head
// 262,144 + 256 (final norm) = 262,400; in all 3,426,560 (models/catalog/models/llama-tiny.yaml).
constexpr double kBlock = 725504, kEmbedding = 262144, kHead = 262400, kTotal = 3426560;

TEST(PipelineTime, OneFOneBAndInterleavedClosedForms) {
  const std::vector<double> t = {1.0, 3.0};
  // (m − 1)·max + Σ = 3·3 + 4.
  EXPECT_DOUBLE_EQ(PipelineSeconds(t, 4, proto::Plan::SCHEDULE_1F1B), 13.0);
  EXPECT_DOUBLE_EQ(PipelineSeconds(t, 4, proto::Plan::SCHEDULE_GPIPE), 13.0);
  // Interleaved with v = 2: m·max + (Σ − max)/v = 12 + 0.5.
  EXPECT_DOUBLE_EQ(PipelineSeconds(t, 4, proto::Plan::SCHEDULE_INTERLEAVED_1F1B, 2), 12.5);
  // One micro-batch: the stages one after another.
  EXPECT_DOUBLE_EQ(PipelineSeconds(t, 1, proto::Plan::SCHEDULE_1F1B), 4.0);
}

TEST(AnalyticCost, TwoStageOneFOneBClosedForm) {
  // The closed form (the building blocks composed; Estimate played it before it played the lowering).
  const Fixture f(ClusterFromYaml(R"(
name: pair
nodes: [{name: n, gpus: {type: a100-80gb, count: 2}, fabric: {kind: nvswitch}}]
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const models::ProfileDb db = TinyProfiles();
  const AnalyticCostModel cost(f.problem(&db));
  const proto::Plan plan = PlanFromYaml(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 3}
      - {devices: [1], layer_begin: 3, layer_end: 6}
)");
  ASSERT_TRUE(models::ValidatePlanStructure(plan, f.context(), "plan").ok());
  const PlanEstimate e = cost.ClosedFormEstimate(plan);
  // One PP hop: b·s·h bf16 values = 1·128·256·2 = 65,536 bytes over NVSwitch (A100 catalog: 300 GB/s,
  // 2 µs default latency).
  const double hop = 2e-6 + 65536 / 300e9;
  // Stage 0: embedding (0) + 2 blocks × (1 + 2) ms, then its forward send; stage 1: 2 blocks × 3 ms + head
  // 1.5 ms, then its backward send.
  const double t0 = 6e-3 + hop, t1 = 7.5e-3 + hop;
  ASSERT_EQ(e.pipelines.size(), 1u);
  EXPECT_NEAR(e.pipelines[0].stages[0].time_s, t0, 1e-12);
  EXPECT_NEAR(e.pipelines[0].stages[1].time_s, t1, 1e-12);
  // 1F1B: (m − 1)·max + Σ = 3·t1 + t0 + t1 = 36 ms + 5 hops.
  EXPECT_NEAR(e.pipeline_s, 36e-3 + 5 * hop, 1e-12);
  // No data parallelism: nothing to synchronise. The optimizer step streams 32 bytes per parameter
  // through HBM (A100: 2,039 GB/s); stage 1 holds the most (2 blocks + head).
  EXPECT_EQ(e.dp_sync_s, 0);
  EXPECT_NEAR(e.optimizer_s, (2 * kBlock + kHead) * 32 / 2039e9, 1e-15);
  EXPECT_NEAR(e.iteration_s, e.pipeline_s + e.optimizer_s, 1e-15);
  // Bubble of the slower pipeline: 1 − Σ m·t_s / (S·T) with the numbers above.
  EXPECT_NEAR(e.pipelines[0].bubble_fraction, 1 - 4 * (t0 + t1) / (2 * e.pipeline_s), 1e-12);
  // Tokens: 4 sequences of 128 per iteration.
  EXPECT_NEAR(e.tokens_per_s, 512 / e.iteration_s, 1e-6);
  EXPECT_TRUE(e.has_memory);
  EXPECT_FALSE(e.oom);
}

TEST(AnalyticCost, TwoPipelinesOfDifferentSpeedSlowerOnePlusRingSyncClosedForm) {
  // One A100 and one H100 in two machines, one 100 Gb/s RoCE NIC each (3 µs), one 1 µs switch.
  const Fixture f(ClusterFromYaml(R"(
name: mixed
nodes:
  - {name: a, gpus: {type: a100-80gb, count: 1}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 3}}
  - {name: h, gpus: {type: h100, count: 1}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 3}}
network: {switch_latency_us: 1}
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 8, seq_len: 128}");
  const models::ProfileDb db = TinyProfiles();
  const AnalyticCostModel cost(ClosedForm(f.problem(&db)));
  proto::Plan plan = PlanFromYaml(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 3, stages: [{devices: [0], layer_begin: 0, layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 5, stages: [{devices: [1], layer_begin: 0, layer_end: 6}]}
)");
  ASSERT_TRUE(models::ValidatePlanStructure(plan, f.context(), "plan").ok());
  const PlanEstimate e = cost.ClosedFormEstimate(plan);
  // A100: 3 micro-batches × (4 blocks × 3 ms + 1.5 ms head) = 40.5 ms; H100: 5 × 6.75 ms = 33.75 ms.
  EXPECT_NEAR(e.pipelines[0].time_s, 40.5e-3, 1e-12);
  EXPECT_NEAR(e.pipelines[1].time_s, 33.75e-3, 1e-12);
  EXPECT_EQ(e.slowest_pipeline, 0u);
  // Gradient sync: one group of 2 over the 100 Gb/s = 12.5 GB/s link, α = 3 µs NIC + 1 µs switch; all
  // 3,426,560 bf16 gradients: ring 2(n−1)/n·S/β + 2(n−1)·α = S/β + 2α.
  const double bytes = kTotal * 2;
  const double sync = bytes / 12.5e9 + 2 * 4e-6;
  EXPECT_NEAR(e.dp_sync_s, sync, 1e-12);
  // Optimizer: every device updates the whole model; the A100 (2,039 GB/s) is slower than the H100.
  const double opt = kTotal * 32 / 2039e9;
  EXPECT_NEAR(e.optimizer_s, opt, 1e-15);
  EXPECT_NEAR(e.iteration_s, 40.5e-3 + sync + opt, 1e-12);
  // ZeRO-1: the same ring volume (reduce-scatter + all-gather), the optimizer step on half the states.
  plan.set_zero_stage(1);
  const PlanEstimate z1 = cost.ClosedFormEstimate(plan);
  EXPECT_NEAR(z1.dp_sync_s, sync, 1e-12);
  EXPECT_NEAR(z1.optimizer_s, opt / 2, 1e-15);
  // ZeRO-2 reduce-scatters after each micro-batch (the most of the group's pipelines: 5) and all-gathers
  // once: 6 × (S/2)/β + 6·α.
  plan.set_zero_stage(2);
  EXPECT_NEAR(cost.ClosedFormEstimate(plan).dp_sync_s, 6 * (bytes / 2 / 12.5e9 + 4e-6), 1e-12);
  // Overlapped with the last backward pass (9 ms on the A100, 4.5 ms on the H100, both longer than the
  // sync), only the last layer's share of the sync shows: sync / 6 layers.
  plan.set_zero_stage(0);
  plan.mutable_comm()->set_dp_overlap(true);
  EXPECT_NEAR(cost.ClosedFormEstimate(plan).dp_sync_s, std::max(sync / 6, sync - 9e-3), 1e-12);
}

// ---- the played lowering (Estimate) ---------------------------------------------------------------------

TEST(AnalyticCostPlayed, TwoStageOneFOneBTimelineByHand) {
  // The plan of TwoStageOneFOneBClosedForm, without the kernel model's fixed costs. Stage 0: forward F0 =
  // 2 ms (embedding 0 + 2 blocks), backward B0 = 4 ms; stage 1: F1 = 2.5 ms (2 blocks + head), B1 = 5 ms; one
  // hop h (65,536 bytes: 2 µs + bytes / 300 GB/s, the two NVSwitch ports' half latencies). A message starts
  // when both sides are there (sends do not block, receives do). 1F1B, m = 4, stage 0 warms up with one
  // forward:
  //   stage 0: F(0) [0, 2], F(1) [2, 4]; stage 1: a0 arrives 2 + h, F(0), B(0) end 9.5 + h, F(1) from
  //   9.5 + 2h (a1 was sent at 4), B(1) ends 17 + 2h; stage 0 gets g0 at 9.5 + 2h, B(0) to 13.5 + 2h, F(2)
  //   to 15.5 + 2h, g1 at 17 + 3h, B(1) to 21 + 3h, F(3) to 23 + 3h; stage 1: a2 at 17 + 3h, F(2), B(2)
  //   to 24.5 + 3h, a3 at 24.5 + 4h, F(3), B(3) to 32 + 4h; stage 0: g2 at 24.5 + 4h, B(2) to 28.5 + 4h,
  //   g3 at 32 + 5h, B(3) to 36 + 5h.
  // Then each stage's optimizer step (32 bytes per parameter through 2,039 GB/s of HBM).
  const Fixture f(ClusterFromYaml(R"(
name: pair
nodes: [{name: n, gpus: {type: a100-80gb, count: 2}, fabric: {kind: nvswitch}}]
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const models::ProfileDb db = TinyProfiles();
  const AnalyticCostModel cost(ClosedForm(f.problem(&db)));
  const proto::Plan plan = PlanFromYaml(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 3}
      - {devices: [1], layer_begin: 3, layer_end: 6}
)");
  const PlanEstimate e = cost.Estimate(plan);
  EXPECT_TRUE(e.played);
  const double h = 2e-6 + 65536 / 300e9;
  const double opt0 = (2 * kBlock + kEmbedding) * 32 / 2039e9, opt1 = (2 * kBlock + kHead) * 32 / 2039e9;
  EXPECT_NEAR(e.pipelines[0].time_s, 36e-3 + 5 * h, 1e-12);
  EXPECT_NEAR(e.iteration_s, std::max(36e-3 + 5 * h + opt0, 32e-3 + 5 * h + opt1), 1e-12);
  // Per micro-batch: stage 0 computes 6 ms, stage 1 7.5 ms.
  EXPECT_NEAR(e.pipelines[0].stages[0].time_s, 6e-3, 1e-12);
  EXPECT_NEAR(e.pipelines[0].stages[1].time_s, 7.5e-3, 1e-12);
  EXPECT_NEAR(e.pipelines[0].bubble_fraction, 1 - 4 * (6e-3 + 7.5e-3) / (2 * (36e-3 + 5 * h)), 1e-12);
  // Nothing shares a link, so the lower bound is the same play.
  EXPECT_NEAR(cost.LowerBoundSeconds(plan), e.iteration_s, 1e-12);
}

TEST(AnalyticCostPlayed, SlowHopIsExposedOnlyWhereTheReceiverWaits) {
  // The same two stages on two machines over 1 Gb/s (125 MB/s) Ethernet, 30 µs NICs, a 0 µs switch: a hop
  // takes h = 65,536 B / 125 MB/s + 1 µs (the two PCIe half hops) + 30 µs (the two NICs' halves) = 0.555 ms.
  // The timeline of TwoStageOneFOneBTimelineByHand holds for any h below 1.5 ms (every wait is for the later
  // of a send and its receive), so the pipeline takes 36 ms + 5h. The closed form adds each stage's hop to
  // its time per micro-batch, t0 = 6 ms + h', t1 = 7.5 ms + h' (h' = its link: bytes / 125 MB/s + the NIC's
  // 30 µs), and (m − 1)·t1 + t0 + t1 = 36 ms + 5h' here too: the play agrees with it when the hops are
  // exposed once per micro-batch on the slower stage.
  const Fixture f(ClusterFromYaml(R"(
name: two
nodes: [{name: n, count: 2, gpus: {type: a100-80gb, count: 1}, nic: {kind: ethernet, bandwidth_gbps: 1, latency_us: 30}}]
network: {switch_latency_us: 0}
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const models::ProfileDb db = TinyProfiles();
  const AnalyticCostModel cost(ClosedForm(f.problem(&db)));
  proto::Plan plan = PlanFromYaml(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 3}
      - {devices: [1], layer_begin: 3, layer_end: 6}
)");
  const double h = 65536 / 125e6 + 31e-6, h_closed = 65536 / 125e6 + 30e-6;
  EXPECT_NEAR(cost.Estimate(plan).pipelines[0].time_s, 36e-3 + 5 * h, 1e-9);
  EXPECT_NEAR(cost.ClosedFormEstimate(plan).pipeline_s, 36e-3 + 5 * h_closed, 1e-9);
  // GPipe: all forwards, then all backwards. Stage 0's forwards end at 2, 4, 6, 8 ms; stage 1 asks for a_k
  // after its previous forward, so a transfer starts then: F(0) [2 + h, 4.5 + h], F(1) [4.5 + 2h, 7 + 2h],
  // F(2) [7 + 3h, 9.5 + 3h], F(3) [9.5 + 4h, 12 + 4h], then B(0..3) 5 ms each from 12 + 4h, sending g_k
  // at 17 + 4h + 5k. Stage 0 waits for each: g_k arrives at 17 + 5h + 5k, B(k) takes 4 ms, so the last ends
  // at 32 + 5h + 4 = 36 + 5h, as 1F1B (one hop exposed per micro-batch on the slower stage).
  EXPECT_NEAR(cost.Estimate(plan).pipelines[0].time_s, 36e-3 + 5 * h, 1e-9);
}

TEST(AnalyticCostPlayed, TwoPipelinesOfDifferentSpeedThenOneRingStep) {
  // TwoPipelinesOfDifferentSpeedSlowerOnePlusRingSyncClosedForm played: the A100 pipeline ends at 40.5 ms,
  // the H100 one at 33.75 ms; the ring of two starts when both have called it (40.5 ms): at the balanced
  // fidelity one exchange of 2(n−1)/n·S = S bytes with the neighbour over [PCIe, NIC, NIC, PCIe] (12.5 GB/s;
  // latency 0.5 + 2 + 2 + 0.5 µs = 5 µs: half of each PCIe hop and of NIC 3 µs + switch 1 µs), then the
  // remaining step's latency (5 µs). Then each device's optimizer step; the A100's ends last.
  const Fixture f(ClusterFromYaml(R"(
name: mixed
nodes:
  - {name: a, gpus: {type: a100-80gb, count: 1}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 3}}
  - {name: h, gpus: {type: h100, count: 1}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 3}}
network: {switch_latency_us: 1}
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 8, seq_len: 128}");
  const models::ProfileDb db = TinyProfiles();
  const AnalyticCostModel cost(ClosedForm(f.problem(&db)));
  proto::Plan plan = PlanFromYaml(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 3, stages: [{devices: [0], layer_begin: 0, layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 5, stages: [{devices: [1], layer_begin: 0, layer_end: 6}]}
)");
  const PlanEstimate e = cost.Estimate(plan);
  EXPECT_NEAR(e.pipelines[0].time_s, 40.5e-3, 1e-12);
  EXPECT_NEAR(e.pipelines[1].time_s, 33.75e-3, 1e-12);
  const double bytes = kTotal * 2;
  const double sync = 5e-6 + bytes / 12.5e9 + 5e-6;
  const double opt = kTotal * 32 / 2039e9;
  EXPECT_NEAR(e.iteration_s, 40.5e-3 + sync + opt, 1e-12);
  EXPECT_NEAR(e.dp_sync_s, sync, 1e-12);
  EXPECT_NEAR(e.optimizer_s, opt, 1e-15);
  // ZeRO-1: a reduce-scatter ((n−1)/n·S = S/2, no remaining steps), the step on half the states, then an
  // all-gather of S/2 after it.
  plan.set_zero_stage(1);
  const double half = 5e-6 + bytes / 2 / 12.5e9;
  EXPECT_NEAR(cost.Estimate(plan).iteration_s, 40.5e-3 + half + opt / 2 + half, 1e-12);
  // Overlapped (comm.dp_overlap): both pipelines hold every layer, so there is one gradient group, handed
  // to the DP stream when the last backward ends: nothing to overlap, the same iteration.
  plan.set_zero_stage(0);
  plan.mutable_comm()->set_dp_overlap(true);
  EXPECT_NEAR(cost.Estimate(plan).iteration_s, 40.5e-3 + sync + opt, 1e-12);
}

TEST(AnalyticCost, TensorParallelAllReducesPerLayer) {
  // A TP-2 group on two A100s over NVSwitch; analytic compute (no profile).
  const Fixture f(ClusterFromYaml(R"(
name: pair
nodes: [{name: n, gpus: {type: a100-80gb, count: 2}, fabric: {kind: nvswitch}}]
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 2, seq_len: 128}");
  const AnalyticCostModel cost(ClosedForm(f.problem()));
  const std::vector<uint32_t> group = {0, 1};
  // Each block all-reduces b·s·h bf16 values twice per pass, the embedding and the head once:
  // (2·4 + 2) all-reduces per pass, two passes; each a ring of 2 over 300 GB/s with 2 µs latency.
  const double one = 65536 / 300e9 + 2 * 2e-6;
  const ReplicaTime r = cost.Replica(group, 0, 6, 1, {}, {}, proto::RECOMPUTE_NONE);
  EXPECT_NEAR(r.tp_s, 2 * 10 * one, 1e-15);
  // Full recomputation repeats the blocks' forward all-reduces in the backward pass.
  const ReplicaTime full = cost.Replica(group, 0, 6, 1, {}, {}, proto::RECOMPUTE_FULL);
  EXPECT_NEAR(full.tp_s, 2 * 10 * one + 8 * one, 1e-15);
  // Compute splits over the group: half the FLOPs each (at the efficiency of half the tokens).
  const auto [f1, b1] = cost.RangeCompute(*f.cluster->device(0).gpu, 1, 2, 1, 1, proto::RECOMPUTE_NONE);
  const auto [f2, b2] = cost.RangeCompute(*f.cluster->device(0).gpu, 1, 2, 2, 1, proto::RECOMPUTE_NONE);
  EXPECT_LT(f2, f1);
  EXPECT_GT(f2, f1 / 2);  // lower efficiency at half the tokens per rank
  EXPECT_NEAR(b1, 2 * f1, 1e-15);
}

TEST(AnalyticCost, IntraStageReplicasWaitForTheSlowest) {
  // Two replicas of one stage, an A100 and an H100, each micro-batch split [1, 1]: the A100 sets the pace.
  const Fixture f(ClusterFromYaml(R"(
name: mixed
nodes:
  - {name: a, gpus: {type: a100-80gb, count: 1}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 3}}
  - {name: h, gpus: {type: h100, count: 1}, nic: {kind: roce, bandwidth_gbps: 100, latency_us: 3}}
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const models::ProfileDb db = TinyProfiles();
  const AnalyticCostModel cost(f.problem(&db));
  const proto::Plan plan = PlanFromYaml(R"(
pipelines:
  - {micro_batch_size: 2, num_micro_batches: 2, stages: [{devices: [0, 1], layer_begin: 0, layer_end: 6}]}
)");
  const PlanEstimate e = cost.Estimate(plan);
  EXPECT_NEAR(e.pipelines[0].stages[0].time_s, 13.5e-3, 1e-12);
  EXPECT_NEAR(e.pipeline_s, 27e-3, 1e-12);
}

TEST(AnalyticCost, FirstGpuViewIgnoresHeterogeneityButNotMemory) {
  const Fixture f(testing::BundledCluster("hexiscale-case-study"), testing::BundledModel("llama2-7b"),
                  "{global_batch_size: 8, seq_len: 1024, recompute: full}");
  const AnalyticCostModel real(f.problem());
  const AnalyticCostModel as_a800(f.problem(), {f.cluster->device(0).gpu});
  // Device 7 is an RTX 3090: slower for real, an A800 in Megatron's view.
  EXPECT_EQ(&as_a800.ComputeGpu(7), f.cluster->device(0).gpu);
  const std::vector<uint32_t> d7 = {7};
  EXPECT_GT(real.Replica(d7, 1, 2, 1, {}, {}, proto::RECOMPUTE_FULL).total_s(),
            as_a800.Replica(d7, 1, 2, 1, {}, {}, proto::RECOMPUTE_FULL).total_s());
  // The average GPU of 3 A800 (312) + 3 RTX 4090 (165.2) + 2 RTX 3090 (71) in bf16 TFLOPS.
  const models::GpuSpec avg = AverageGpu(*f.cluster);
  EXPECT_NEAR(avg.peak_bf16_tflops, (3 * 312 + 3 * 165.2 + 2 * 71) / 8.0, 1e-9);
  EXPECT_NEAR(avg.memory_gib, (3 * 80 + 5 * 24) / 8.0, 1e-9);
}

// TF32 on parts without TF32 tensor cores runs in FP32 (models/gpu_catalog.h MathDType), so the closed form's
// average GPU of 4 T4 (FP32 8.1 TFLOPS) + 4 V100 (15.7) has a TF32 peak of (4 * 8.1 + 4 * 15.7) / 8 = 11.9,
// not 0.
TEST(AnalyticCost, TheAverageGpuTakesEachPartsEffectiveTf32Peak) {
  const models::GpuSpec avg = AverageGpu(testing::BundledCluster("metis-uniform-t4-v100-8"));
  EXPECT_NEAR(avg.peak_tf32_tflops, (4 * 8.1 + 4 * 15.7) / 8.0, 1e-9);
  EXPECT_NEAR(avg.PeakTflops(proto::DTYPE_TF32), 11.9, 1e-9);
}

// ---- measured profiles -------------------------------------------------------------------------------

// llama-tiny block times at TP 1 and 2, micro-batch 1, per GPU: forward f, backward 2f (embedding and
// head 0). Optional: the block's optimizer step at `optimizer_ns_per_param` ns per parameter, and its
// activations per sequence.
struct Measured {
  std::string gpu;
  double forward_s = 0;
  double optimizer_ns_per_param = 0;
};
models::ProfileDb BlockProfiles(const std::vector<Measured>& measured, bool tp_included = false,
                                double activation_gib = 0) {
  models::ProfileDb db;
  for (const Measured& m : measured) {
    proto::Profile p;
    p.set_gpu(m.gpu);
    p.set_model("llama-tiny");
    p.set_seq_len(128);
    p.set_includes_tp_communication(tp_included);
    for (uint32_t tp : {1u, 2u}) {
      for (auto kind : {proto::LayerTiming::LAYER_KIND_EMBEDDING, proto::LayerTiming::LAYER_KIND_TRANSFORMER,
                        proto::LayerTiming::LAYER_KIND_HEAD}) {
        auto* l = p.add_layers();
        l->set_layer(kind);
        l->set_tp_degree(tp);
        l->set_micro_batch_size(1);
        if (kind != proto::LayerTiming::LAYER_KIND_TRANSFORMER) continue;
        l->set_forward_s(m.forward_s);
        l->set_backward_s(2 * m.forward_s);
        // A block's parameters per rank: 725,504 / tp (llama-tiny's blocks split evenly).
        l->set_optimizer_s(m.optimizer_ns_per_param * 1e-9 * kBlock / tp);
        l->set_activation_gib(activation_gib);
      }
    }
    const Status st = db.Add(p, m.gpu + ".yaml");
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return db;
}

models::Cluster TwoTypes(uint32_t a100s, uint32_t h100s) {
  const std::string nic = "fabric: {kind: nvswitch}, nic: {kind: roce, bandwidth_gbps: 200}";
  return ClusterFromYaml("name: two-types\nnodes:\n  - {name: a, gpus: {type: a100-80gb, count: " +
                         std::to_string(a100s) + "}, " + nic + "}\n  - {name: h, gpus: {type: h100, count: " +
                         std::to_string(h100s) + "}, " + nic + "}\n");
}

// AMP (Li et al. 2022) averages measured per-layer costs over the cluster's GPUs: with a block profiled
// at 1 ms (A100) and 3 ms (H100) forward on two of each, the averaged view costs it 2 ms (4 ms backward);
// three A100s and one H100 weigh it (3·1 + 3)/4 = 1.5 ms.
TEST(AnalyticCostProfiles, AveragedViewAveragesProfiledLayerTimesOverTheDevices) {
  const models::ProfileDb db = BlockProfiles({{"a100-80gb", 1e-3}, {"h100", 3e-3}});
  for (const auto& [a100s, h100s, expected] :
       {std::tuple<uint32_t, uint32_t, double>{2, 2, 2e-3}, {3, 1, 1.5e-3}}) {
    const Fixture f(TwoTypes(a100s, h100s), testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
    const PlanningProblem problem = ClosedForm(f.problem(&db));
    const models::GpuSpec avg = AverageGpu(*f.cluster);
    const AnalyticCostModel amp(problem, {&avg, /*average_profiles=*/true});
    const auto [fwd, bwd] = amp.RangeCompute(avg, 1, 2, 1, 1, proto::RECOMPUTE_NONE);
    EXPECT_NEAR(fwd, expected, 1e-15) << a100s << " A100 + " << h100s << " H100";
    EXPECT_NEAR(bwd, 2 * expected, 1e-15);
    EXPECT_TRUE(amp.AveragesProfiles(1, 1));
    // Without averaging profiles (today's Alpa/AMP view without a profile): the average GPU's analytic time.
    const AnalyticCostModel spec(problem, {&avg});
    EXPECT_NEAR(spec.RangeCompute(avg, 1, 2, 1, 1, proto::RECOMPUTE_NONE).first,
                spec.compute().ForwardSeconds(avg, 1, 1, 1), 1e-15);
    EXPECT_GT(std::abs(spec.RangeCompute(avg, 1, 2, 1, 1, proto::RECOMPUTE_NONE).first - expected), 1e-4);
    EXPECT_FALSE(spec.AveragesProfiles(1, 1));
  }
}

TEST(AnalyticCostProfiles, AveragedViewNeedsAProfileOfEveryGpuType) {
  // Only the A100 is profiled: the H100's share cannot be measured, so the average GPU's analytic time.
  const models::ProfileDb db = BlockProfiles({{"a100-80gb", 1e-3}});
  const Fixture f(TwoTypes(2, 2), testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const PlanningProblem problem = ClosedForm(f.problem(&db));
  const models::GpuSpec avg = AverageGpu(*f.cluster);
  const AnalyticCostModel amp(problem, {&avg, true});
  EXPECT_FALSE(amp.AveragesProfiles(1, 1));
  EXPECT_NEAR(amp.RangeCompute(avg, 1, 2, 1, 1, proto::RECOMPUTE_NONE).first,
              amp.compute().ForwardSeconds(avg, 1, 1, 1), 1e-15);
}

TEST(AnalyticCostProfiles, AveragedOptimizerStepAndRealOneUseProfiledRates) {
  const Fixture f(TwoTypes(2, 2), testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  // Only the A100 profiled, at 1 ns per parameter: device 0 (A100) uses it ...
  const models::ProfileDb a100 = BlockProfiles({{"a100-80gb", 1e-3, 1.0}});
  const AnalyticCostModel real(ClosedForm(f.problem(&a100)));
  EXPECT_NEAR(real.OptimizerSeconds(0, 1e6), 1e-3, 1e-12);
  // ... and the H100s keep the HBM model: 32 bytes per parameter at 3,350 GB/s.
  EXPECT_NEAR(real.OptimizerSeconds(2, 1e6), 32e6 / 3350e9, 1e-15);
  // Both profiled (1 and 3 ns per parameter, two GPUs each): the averaged view's step is 2 ns per parameter.
  const models::ProfileDb both = BlockProfiles({{"a100-80gb", 1e-3, 1.0}, {"h100", 3e-3, 3.0}});
  const models::GpuSpec avg = AverageGpu(*f.cluster);
  const AnalyticCostModel amp(ClosedForm(f.problem(&both)), {&avg, true});
  EXPECT_NEAR(amp.OptimizerSeconds(0, 1e6), 2e-3, 1e-12);
  EXPECT_NEAR(amp.OptimizerSeconds(3, 1e6), 2e-3, 1e-12);
}

TEST(AnalyticCostProfiles, ProfiledOptimizerStepInTheEstimate) {
  const Fixture f(ClusterFromYaml(R"(
name: pair
nodes: [{name: n, gpus: {type: a100-80gb, count: 2}, fabric: {kind: nvswitch}}]
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const models::ProfileDb db = BlockProfiles({{"a100-80gb", 1e-3, 1.0}});
  const AnalyticCostModel cost(ClosedForm(f.problem(&db)));
  const proto::Plan plan = PlanFromYaml(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 3}
      - {devices: [1], layer_begin: 3, layer_end: 6}
)");
  // Stage 1 updates the most: 2 blocks + the head, at 1 ns per parameter (no HBM model).
  EXPECT_NEAR(cost.Estimate(plan).optimizer_s, (2 * kBlock + kHead) * 1e-9, 1e-15);
}

TEST(AnalyticCostProfiles, NoTensorParallelAllReducesWhenTheProfileTimesThem) {
  const Fixture f(ClusterFromYaml(R"(
name: pair
nodes: [{name: n, gpus: {type: a100-80gb, count: 2}, fabric: {kind: nvswitch}}]
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const std::vector<uint32_t> group = {0, 1};
  const models::ProfileDb with = BlockProfiles({{"a100-80gb", 1e-3}}, /*tp_included=*/true);
  const models::ProfileDb without = BlockProfiles({{"a100-80gb", 1e-3}}, /*tp_included=*/false);
  const AnalyticCostModel included(ClosedForm(f.problem(&with)));
  const AnalyticCostModel added(ClosedForm(f.problem(&without)));
  const ReplicaTime a = included.Replica(group, 1, 3, 1, {}, {}, proto::RECOMPUTE_NONE);
  const ReplicaTime b = added.Replica(group, 1, 3, 1, {}, {}, proto::RECOMPUTE_NONE);
  EXPECT_EQ(a.tp_s, 0);
  EXPECT_GT(b.tp_s, 0);
  EXPECT_NEAR(a.forward_s, 2e-3, 1e-15);  // 2 blocks, TP communication inside
  EXPECT_NEAR(b.forward_s, 2e-3, 1e-15);
}

TEST(AnalyticCostProfiles, MemoryChecksTakeProfiledActivationsWhereLarger) {
  const Fixture f(ClusterFromYaml(R"(
name: pair
nodes: [{name: n, gpus: {type: a100-80gb, count: 2}, fabric: {kind: nvswitch}}]
)"),
                  testing::BundledModel("llama-tiny"), "{global_batch_size: 4, seq_len: 128}");
  const MemoryModel arithmetic(f.problem());
  const double analytic = arithmetic.ActivationGibPerSequence(1, 2, 1, false, proto::RECOMPUTE_NONE);
  const double overhead = 1 + f.training->allocator_overhead();
  // A block measured at 2 GiB per sequence (far above llama-tiny's arithmetic): the profile's.
  const models::ProfileDb big = BlockProfiles({{"a100-80gb", 1e-3}}, false, 2.0);
  const MemoryModel measured(f.problem(&big));
  EXPECT_NEAR(measured.ActivationGibPerSequence(1, 2, 1, false, proto::RECOMPUTE_NONE), 2.0 * overhead, 1e-12);
  EXPECT_NEAR(measured.ActivationGibPerSequence(1, 3, 1, false, proto::RECOMPUTE_NONE), 4.0 * overhead, 1e-12);
  // Under full recomputation the profile (measured without) does not apply.
  EXPECT_NEAR(measured.ActivationGibPerSequence(1, 2, 1, false, proto::RECOMPUTE_FULL),
              arithmetic.ActivationGibPerSequence(1, 2, 1, false, proto::RECOMPUTE_FULL), 1e-15);
  // A measurement below the arithmetic cannot loosen the check (ValidatePlan uses the arithmetic).
  const models::ProfileDb tiny = BlockProfiles({{"a100-80gb", 1e-3}}, false, analytic / overhead / 10);
  EXPECT_NEAR(MemoryModel(f.problem(&tiny)).ActivationGibPerSequence(1, 2, 1, false, proto::RECOMPUTE_NONE), analytic,
              1e-15);
  // A planner sees it: 40 GiB per sequence and block leaves no llama-tiny layout on two 80 GB GPUs without
  // recomputation. The profile, measured without recomputation, applies to neither recomputation policy, so
  // when megatron searches them it takes the cheaper one, selective.
  const models::ProfileDb huge = BlockProfiles({{"a100-80gb", 1e-3}}, false, 40.0);
  EXPECT_TRUE(testing::Run("megatron", f.problem(), "recompute: [none]").ok());
  const auto r = testing::Run("megatron", f.problem(&huge), "recompute: [none]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInfeasible) << r.status().message();
  const auto searched = testing::Run("megatron", f.problem(&huge));
  ASSERT_TRUE(searched.ok()) << searched.status().message();
  EXPECT_EQ(models::EffectiveRecompute(searched->plan, *f.training), proto::RECOMPUTE_SELECTIVE);
}

}  // namespace
}  // namespace hetsim::planners
