// Context parallelism and Ulysses played by the simulator, against closed forms derived by hand
// (llama-tiny: 4 blocks, d_model 256, 8 query / 4 KV heads of 32, vocabulary 1024, 3,426,560 parameters;
// bf16; seq 128; one micro-batch of one sequence on one stage; no optimizer step).
#include <gtest/gtest.h>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "tests/common/specs.h"
#include "sim/simulator.h"

namespace hetsim::sim {
namespace {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

struct CpSetting {
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
};

CpSetting MakeCpSetting(const std::string& cluster_yaml) {
  auto m = models::LoadModel("llama-tiny");
  EXPECT_TRUE(m.ok());
  proto::Training t;
  t.set_global_batch_size(1);
  t.set_seq_len(128);
  auto tr = models::ResolveTraining(t, *m, "t");
  EXPECT_TRUE(tr.ok());
  return {ClusterFrom(cluster_yaml), std::move(m).value(), std::move(tr).value()};
}

Result<SimResult> SimulateCp(const CpSetting& run, const proto::Plan& plan, Fidelity fid) {
  models::PlanContext ctx{run.cluster, run.model, run.training};
  const Status v = models::ValidatePlanStructure(plan, ctx, "plan");
  EXPECT_TRUE(v.ok()) << v.message();
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
  opt.compute.optimizer_bytes_per_param = 0;
  opt.fidelity = fid;
  return SimulateIteration(plan, ctx, opt);
}

proto::Plan OneStage(const std::string& devices, const std::string& degrees) {
  return PlanFrom("pipelines:\n  - micro_batch_size: 1\n    num_micro_batches: 1\n    stages:\n      - {devices: [" +
                  devices + "], " + degrees + ", layer_end: 6}\n");
}

// Two H100s whose fabric is so fast that communication is free, or so slow (1 MB/s) that it dominates.
std::string Node(const char* bandwidth_gbyte_s) {
  return std::string("name: two\nnodes:\n  - name: n\n    gpus: {type: h100, count: 2}\n"
                     "    fabric: {kind: nvswitch, bandwidth_gbyte_s: ") +
         bandwidth_gbyte_s + ", latency_us: 0.000001}\n";
}

// The token-efficiency time of the whole model's forward and backward on one rank that holds 1/ways of
// the sequence: Σ_l (F_l + B_l) / ways ÷ (peak · 0.6 · t / (t + 256)), t = 128 / ways tokens per rank.
double ClosedFormCompute(const CpSetting& run, double ways) {
  double flops = 0;
  for (uint32_t l = 0; l < run.model.num_layers(); ++l) {
    flops += run.model.ForwardFlops(l, 1, 128) + run.model.BackwardFlops(l, 1, 128);
  }
  const double peak = run.cluster.device(0).gpu->PeakTflops(proto::DTYPE_BF16) * 1e12;
  const double t = 128 / ways;
  return flops / ways / (peak * 0.6 * t / (t + 256));
}

TEST(ContextParallelSim, FreeCommunicationTakesTheClosedFormComputeOfHalfTheSequence) {
  // cp 2 with free links: each rank computes half of every layer's FLOPs at the efficiency of 64 tokens.
  // The ring hides behind the compute; the gradient sync over the CP group (6,853,120 bytes at 1e15 B/s,
  // 6.85 ns) follows it. Iteration = that compute (about 11.08 µs) + 6.85 ns, within 3 ns.
  const CpSetting run = MakeCpSetting(Node("1000000"));
  const double expected = ClosedFormCompute(run, 2) + 6853120.0 / 1e15;
  for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced()}) {
    auto r = SimulateCp(run, OneStage("0, 1", "cp_degree: 2"), fid);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_NEAR(r->report.iteration_time_s(), expected, 3e-9);
    // ...and it is faster than one GPU doing the whole sequence.
    auto one = SimulateCp(run, OneStage("0", "tp_degree: 1"), fid);
    ASSERT_TRUE(one.ok());
    EXPECT_NEAR(one->report.iteration_time_s(), ClosedFormCompute(run, 1), 3e-9);
    EXPECT_LT(r->report.iteration_time_s(), one->report.iteration_time_s());
  }
}

TEST(ContextParallelSim, SlowLinksExposeTheRingAndTheDpTimesCpGradientSync) {
  // cp 2 over 1 MB/s links. Each rank sends its peer, per block, one K/V block of 2 · 64 tokens · 4 kv
  // heads · 32 · 2 bytes = 32,768 bytes in the forward and 65,536 (K/V + dK/dV) in the backward: 4 ·
  // 98,304 = 393,216 bytes, 0.393216 s, each waited for after the (microsecond) compute. The CP ranks hold
  // the same weights, so the whole model's gradients (3,426,560 · 2 = 6,853,120 bytes) are all-reduced in
  // the 2-rank group: 2(n−1)/n · S / B = 6.85312 s. Both directions of a link run at once (full duplex).
  // Iteration = 7.246336 s + the compute (< 1 ms).
  const CpSetting run = MakeCpSetting(Node("0.001"));
  const double comm = (393216.0 + 6853120.0) / 1e6;
  for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced()}) {
    auto r = SimulateCp(run, OneStage("0, 1", "cp_degree: 2"), fid);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const double t = r->report.iteration_time_s();
    EXPECT_GE(t, comm - 1e-9) << t - comm;  // rounding of the summed transfers
    EXPECT_LE(t, comm + 1e-3);
    // The ring's exposed time is booked as CP communication, the sync as DP.
    const auto& d = r->report.devices(0);
    EXPECT_NEAR(d.cp_communication_s(), 0.393216, 1e-3);
    EXPECT_NEAR(d.dp_communication_s(), 6.85312, 1e-3);
  }
}

TEST(ContextParallelSim, TheRingHidesBehindTheBlockCompute) {
  // cp 2 over 100 GB/s links: a block's forward K/V block (32,768 bytes) takes 0.33 µs and its backward
  // one (65,536) 0.66 µs, shorter than the block's compute (half of 202,375,168 forward FLOPs at
  // 989 TFLOP/s · 0.6 · 64/320: about 0.85 µs forward, 1.7 µs backward). The receives are posted before
  // the compute, so nothing of the 3.93 µs of ring traffic (393,216 bytes) is exposed; played after the
  // compute it would all be. The iteration is the compute plus the gradient all-reduce (68.53 µs).
  const CpSetting run = MakeCpSetting(Node("100"));
  for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced()}) {
    auto r = SimulateCp(run, OneStage("0, 1", "cp_degree: 2"), fid);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_LT(r->report.devices(0).cp_communication_s(), 0.05 * 393216 / 100e9);
    EXPECT_NEAR(r->report.iteration_time_s(), ClosedFormCompute(run, 2) + 6853120 / 100e9, 0.05e-6);
  }
}

TEST(UlyssesSim, AllToAllsOverSlowLinksTakeTheirClosedForm) {
  // Ulysses 2 over 1 MB/s links: each block's forward all-to-alls carry q, k, v and the output of 64
  // tokens: 64 · (8 + 4 + 4 + 8) heads · 32 · 2 bytes = 98,304 bytes of buffer, of which each rank sends
  // half (S/n to the other member) and receives half at the same time: 49,152 bytes, 0.049152 s per
  // block and pass; backward the same. 4 blocks × 2 passes: 0.393216 s. Plus the gradient sync over
  // the 2 Ulysses ranks (6.85312 s, as for CP).
  const CpSetting run = MakeCpSetting(Node("0.001"));
  const double comm = 8 * 49152.0 / 1e6 + 6853120.0 / 1e6;
  for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced()}) {
    auto r = SimulateCp(run, OneStage("0, 1", "ulysses_degree: 2"), fid);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_GE(r->report.iteration_time_s(), comm);
    EXPECT_LE(r->report.iteration_time_s(), comm + 1e-3);
    EXPECT_NEAR(r->report.devices(1).cp_communication_s(), 8 * 49152.0 / 1e6, 1e-3);
  }
}

}  // namespace
}  // namespace hetsim::sim
