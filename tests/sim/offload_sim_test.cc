// CPU offload played by the simulator (Plan.offload; docs/simulator.md "CPU offload") against closed forms
// derived by hand: the optimizer step on the node's CPU, the gradient copies to host memory overlapping the
// last backward pass (ZeRO-Offload §4.1), the copy of the updated weights back, and the node's CPU shared by
// its ranks. Every simulation runs in a child process (sim/simulator.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/plan.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/simulator.h"
#include "tests/common/specs.h"

namespace hetsim::sim {
namespace {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

// llama-tiny (bf16): a block has 725,504 parameters, the embedding 262,144, the head 262,400; P = 3,426,560.
constexpr double kBlock = 725504, kEmbedding = 262144, kHead = 262400, kP = 3426560;

// One node of `gpus` H100s: GPU-to-GPU traffic is free (1e6 GB/s, ~0 latency), each GPU's PCIe link to
// host memory carries 1 GB/s (so a byte takes 1 ns), and the node's CPU runs Adam over 10 million
// parameters per second (so P parameters take 0.342656 s).
std::string Node(int gpus) {
  return "name: offload\nnodes:\n  - name: n\n    gpus: {type: h100, count: " + std::to_string(gpus) +
         "}\n    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1000000, latency_us: 0.000001, "
         "pcie_bandwidth_gbyte_s: 1, pcie_latency_us: 0.000001}\n    cpu_adam_gparams_per_s: 0.01\n";
}

// Blocks of 1 ms forward and 2 ms backward at one sequence; the embedding and the head take no time.
models::ProfileDb Blocks() {
  proto::Profile p;
  const Status s = models::ParseYaml(R"(
gpu: h100
model: llama-tiny
seq_len: 128
layers:
  - {layer: transformer, tp_degree: 1, micro_batch_size: 1, forward_s: 0.001, backward_s: 0.002}
  - {layer: embedding, tp_degree: 1, micro_batch_size: 1, forward_s: 0, backward_s: 0}
  - {layer: head, tp_degree: 1, micro_batch_size: 1, forward_s: 0, backward_s: 0}
)",
                                     "blocks", &p);
  EXPECT_TRUE(s.ok()) << s.message();
  models::ProfileDb db;
  EXPECT_TRUE(db.Add(p, "blocks").ok());
  return db;
}

struct World {
  models::Cluster cluster;
  models::TransformerModel model = std::move(models::LoadModel("llama-tiny")).value();
  proto::Training training;
};

World Make(int gpus, uint32_t global_batch) {
  World r{ClusterFrom(Node(gpus)), std::move(models::LoadModel("llama-tiny")).value(), {}};
  proto::Training t;
  t.set_global_batch_size(global_batch);
  t.set_seq_len(128);
  auto tr = models::ResolveTraining(t, r.model, "t");
  EXPECT_TRUE(tr.ok()) << tr.status().message();
  r.training = std::move(tr).value();
  return r;
}

double Simulate(const World& run, const proto::Plan& plan) {
  const models::PlanContext ctx{run.cluster, run.model, run.training};
  const Status v = models::ValidatePlan(plan, ctx, "plan");
  EXPECT_TRUE(v.ok()) << v.message();
  const auto db = Blocks();
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
  opt.compute.optimizer_bytes_per_param = 0;                   // the GPU's optimizer step takes no time
  opt.profiles = &db;
  auto r = SimulateIteration(plan, ctx, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->report.iteration_time_s() : -1;
}

constexpr double kNs = 1e-9;  // seconds per byte over the 1 GB/s PCIe link

// One GPU, 4 micro-batches of one sequence (1F1B on one stage: F B F B …): 4 × (4 + 8) ms = 48 ms of
// passes. Without offload (ZeRO-2 on one GPU is plain data parallelism of one) the step on the GPU takes no
// time here: 48 ms.
//
// ZeRO-Offload (offload: optimizer, comm.dp_overlap as DeepSpeed's overlap_comm): in the last backward
// (from 40 ms) each layer's gradients go to host memory as soon as its backward is done, on the DP stream:
// the head (0 ms backward) at 40 ms, 2 · 262,400 bytes = 0.5248 ms; block 4 at 42 ms, 2 · 725,504 bytes =
// 1.451008 ms; blocks 3, 2 at 44 and 46 ms; block 1 at 48 ms, until 49.451008 ms; the embedding (0 ms
// backward, also done at 48 ms) after it, 2 · 262,144 bytes = 0.524288 ms, until 49.975296 ms. So only the
// last block's and the embedding's copies are exposed. Then the step on the CPU: P / 10⁷ = 342.656 ms; then
// the updated fp16 weights back, 2P bytes = 6.85312 ms.
//   T = 48 + 1.451008 + 0.524288 + 342.656 + 6.85312 = 399.484416 ms.
// Without overlap every copy follows the backward: 2P bytes = 6.85312 ms, T = 404.36224 ms.
TEST(OffloadSim, TheOffloadedIterationAddsTheCpuStepAndTheExposedCopies) {
  const World run = Make(1, 4);
  const std::string pipeline =
      "pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}]\n";
  const double plain = Simulate(run, PlanFrom("zero_stage: 2\n" + pipeline));
  const double overlapped =
      Simulate(run, PlanFrom("zero_stage: 2\noffload: optimizer\ncomm: {dp_overlap: true}\n" + pipeline));
  const double serial = Simulate(run, PlanFrom("zero_stage: 2\noffload: optimizer\n" + pipeline));
  const double cpu_step = kP / 1e7;
  EXPECT_NEAR(plain, 0.048, 1e-6);
  EXPECT_GE(overlapped - plain, cpu_step);
  EXPECT_NEAR(overlapped, 0.048 + 2 * kBlock * kNs + 2 * kEmbedding * kNs + cpu_step + 2 * kP * kNs, 1e-5);
  EXPECT_NEAR(serial, 0.048 + 2 * (kHead + 4 * kBlock + kEmbedding) * kNs + cpu_step + 2 * kP * kNs, 1e-5);
}

// Parameter offload on one GPU (ZeRO-3, offload: optimizer_and_params): before each of the 8 passes every
// layer's weights come from host memory, 2P bytes = 6.85312 ms each time, on the main stream (the lowering
// fetches a pass's weights before it, as it gathers them); the gradients go out as above (serially: no
// overlap), and nothing comes back after the step:
//   T = 48 + 8 · 6.85312 + 6.85312 + 342.656 = 452.33408 ms.
TEST(OffloadSim, ParameterOffloadFetchesTheWeightsBeforeEachPass) {
  const World run = Make(1, 4);
  const double t = Simulate(run, PlanFrom(R"(
zero_stage: 3
offload: optimizer_and_params
pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}]
)"));
  EXPECT_NEAR(t, 0.048 + 9 * 2 * kP * kNs + kP / 1e7, 1e-5);
}

// Two GPUs of one node, ZeRO-2 data parallelism (2 × 4 micro-batches of one sequence), no overlap: after
// 48 ms of passes each rank reduce-scatters its 2P bytes of gradients (free links), copies its half to host
// memory (P bytes = 3.42656 ms; the two copies share only the 200 GB/s host memory link), steps on the CPU
// over P/2 parameters with half the node's cores — P/2 · 2 / 10⁷ = 342.656 ms, as long as one rank with all
// of them — copies its half back (3.42656 ms) and all-gathers (free):
//   T = 48 + 3.42656 + 342.656 + 3.42656 = 397.50912 ms.
TEST(OffloadSim, TheNodesCpuIsSharedByItsRanks) {
  const World run = Make(2, 8);
  const double t = Simulate(run, PlanFrom(R"(
zero_stage: 2
offload: optimizer
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [1], layer_end: 6}]}
)"));
  EXPECT_NEAR(t, 0.048 + 2 * kP * kNs + kP / 1e7, 1e-4);
}

// Activation offload (training.activation_offload_layers = k): the first k blocks' kept activations, A bytes
// each for one sequence (the model's ActivationBytes), go to host memory after each forward pass and come
// back with each backward, one copy of k·A bytes beside the pass's compute. One GPU, 4 micro-batches of one
// sequence, 1F1B (F B F B …): a pass of compute C beside a copy X takes max(C, X), so
//   T = 4 · (max(4 ms, k·A·t) + max(8 ms, k·A·t)), t the link's seconds per byte,
// which on the 1 GB/s link is the 48 ms of passes whenever k·A ≤ 4 MB, and on a 0.1 GB/s link (10 ns a
// byte) more. Memory: the GPU holds the other blocks' activations and one offloaded block's in flight,
// (4 − k)·A + A; the host k·A.
TEST(OffloadSim, ActivationOffloadCopiesBesideThePassesAndFreesTheirMemory) {
  const std::string pipeline = "pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], "
                               "layer_end: 6}]}]\n";
  const proto::Plan plan = PlanFrom(pipeline);
  for (const double gbyte_s : {1.0, 0.1}) {
    std::string node = Node(1);
    node.replace(node.find("pcie_bandwidth_gbyte_s: 1,"), 26, "pcie_bandwidth_gbyte_s: " + std::to_string(gbyte_s) + ",");
    for (uint32_t k : {0u, 2u, 3u}) {
      World run = Make(1, 4);
      run.cluster = ClusterFrom(node);
      run.training.set_activation_offload_layers(k);
      const double a = run.model.ActivationBytes(1, 1, 128, 1, false, proto::RECOMPUTE_NONE, run.training.dtype(),
                                                 run.training.attention());
      const double copy = k * a * 1e-9 / gbyte_s;
      const double expected = 4 * (std::max(0.004, copy) + std::max(0.008, copy));
      EXPECT_NEAR(Simulate(run, plan), expected, 1e-6) << gbyte_s << " GB/s, k " << k;
      const auto memory = models::EstimateMemory(plan, models::PlanContext{run.cluster, run.model, run.training});
      World none = Make(1, 4);
      none.cluster = run.cluster;
      const auto base = models::EstimateMemory(plan, models::PlanContext{none.cluster, none.model, none.training});
      ASSERT_EQ(memory.size(), 1u);
      const double gib = 1024.0 * 1024 * 1024;
      EXPECT_NEAR(base[0].activations_gib - memory[0].activations_gib, (k > 0 ? k - 1.0 : 0.0) * a / gib, 1e-9);
      EXPECT_NEAR(memory[0].host_gib, k * a / gib, 1e-9);
    }
  }
}

// Megatron-Core offloads fewer blocks than the model has: all four of llama-tiny's is refused, naming the field.
TEST(OffloadSim, OffloadingEveryBlockIsRefused) {
  const World run = Make(1, 4);
  proto::Training t;
  t.set_global_batch_size(4);
  t.set_seq_len(128);
  t.set_activation_offload_layers(4);
  const auto r = models::ResolveTraining(t, run.model, "t.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("t.yaml: activation_offload_layers: 4: model 'llama-tiny' has 4 blocks"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace hetsim::sim
