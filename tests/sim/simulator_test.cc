// The simulator's report against closed forms derived by hand (CONVENTIONS.md: expectations never come from
// the program's own output): every device and a Chrome trace, progress while it plays, compute time at every
// fidelity, waiting that is not a bubble, clear errors, TP time not charged twice, TP overlap, collective
// efficiency, and what each GPU type's compute rests on. Schedules: pipeline_schedule_test.cc; collectives
// and transfers: collectives_test.cc. Every simulation runs in a child process (sim/simulator.h), so these
// tests can share one test process.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "models/communicator.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "sim/simulator.h"
#include "tests/common/specs.h"
#include "tests/sim/simulator_fixture.h"

namespace hetsim::sim {
namespace {

using fixture::ExactProfile;
using fixture::kFreeNode;
using fixture::MakeSetting;
using fixture::Setting;
using fixture::WriteCalibration;
using testing_util::ClusterFrom;
using testing_util::PlanFrom;

TEST(Simulator, ReportsEveryDeviceAndAChromeTrace) {
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 4
    stages: [{devices: [0, 1], tp_degree: 2, layer_end: 3}, {devices: [2, 3], micro_batch_split: [1, 1], layer_begin: 3, layer_end: 6}]
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
  opt.record_timeline = true;
  auto r = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->report.devices_size(), 4);
  ASSERT_EQ(r->timeline.size(), 4u);
  EXPECT_GT(r->report.tokens_per_s(), 0);
  EXPECT_GT(r->report.mfu(), 0);
  EXPECT_LT(r->report.mfu(), 1);
  const std::string trace = ChromeTraceJson(*r, run.cluster);
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\": \"forward mb 0\""), std::string::npos);
  EXPECT_NE(trace.find("\"cat\": \"tp\""), std::string::npos);
}

// Progress of a simulation comes back to the caller: one kBuilt record with the operation count, then,
// with a zero interval, a kPlaying record at every 4,096th operation played (the engine looks at the
// clock that often), in order, the simulated clock never going back and never past the iteration's end.
TEST(Simulator, ReportsProgressWhileItPlays) {
  const Setting run = MakeSetting(kFreeNode, 256);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 128
    stages: [{devices: [0, 1], tp_degree: 2, layer_end: 3}, {devices: [2, 3], tp_degree: 2, layer_begin: 3, layer_end: 6}]
  - micro_batch_size: 1
    num_micro_batches: 128
    stages: [{devices: [4, 5], tp_degree: 2, layer_end: 3}, {devices: [6, 7], tp_degree: 2, layer_begin: 3, layer_end: 6}]
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.profiles = &db;
  opt.fidelity = Fidelity::Full();
  opt.progress_interval_s = 0;
  std::vector<SimProgress> seen;
  opt.progress = [&seen](const SimProgress& p) { seen.push_back(p); };
  auto r = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen[0].phase, SimProgress::kBuilt);
  const uint64_t total = seen[0].total;
  ASSERT_GE(total, 3u * 4096) << "the plan should be large enough for several reports";
  ASSERT_EQ(seen.size(), 1 + total / 4096);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].phase, SimProgress::kPlaying);
    EXPECT_EQ(seen[i].done, 4096 * i);
    EXPECT_EQ(seen[i].total, total);
    EXPECT_GE(seen[i].simulated_s, seen[i - 1].simulated_s);
    EXPECT_LE(seen[i].simulated_s, r->report.iteration_time_s());
    EXPECT_GE(seen[i].wall_s, seen[i - 1].wall_s);
  }
  EXPECT_EQ(DescribeProgress(seen[0]), "") << "under a million operations: nothing to announce";
  SimProgress big{SimProgress::kPlaying, 1290000, 3145728, 3.9124, 10.2};
  EXPECT_EQ(DescribeProgress(big), "41% of 3,145,728 operations played, simulated clock 3.912 s, 10 s elapsed");
  big.phase = SimProgress::kBuilt;
  big.wall_s = 4.06;
  EXPECT_EQ(DescribeProgress(big), "playing 3,145,728 operations (programs built in 4.1 s)");
}

TEST(Simulator, ComputeTimeIsTheSameAtEveryFidelityForEveryRecomputation) {
  // The fidelities differ in how communication is played, never in what compute costs: per layer (full)
  // or per pass (balanced, fast), with recomputation as its own operations (full) or inside the backward
  // pass, every device computes for the same time (analytic cost model, TP 2, two stages).
  for (auto recompute : {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL}) {
    Setting run = MakeSetting(kFreeNode, 8);
    run.training.set_recompute(recompute);
    const auto plan = PlanFrom(R"(
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 4
    stages: [{devices: [0, 1], tp_degree: 2, layer_end: 3}, {devices: [2, 3], tp_degree: 2, layer_begin: 3, layer_end: 6}]
)");
    models::PlanContext ctx{run.cluster, run.model, run.training};
    std::vector<std::vector<double>> compute;
    for (Fidelity fid : {Fidelity::Full(), Fidelity::Balanced(), Fidelity::Fast()}) {
      SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
      opt.fidelity = fid;
      auto r = SimulateIteration(plan, ctx, opt);
      ASSERT_TRUE(r.ok()) << r.status().message();
      compute.emplace_back();
      for (const auto& d : r->report.devices()) compute.back().push_back(d.compute_s());
    }
    for (size_t i = 0; i < compute[0].size(); ++i) {
      EXPECT_NEAR(compute[1][i], compute[0][i], 1e-12 * compute[0][i]) << "recompute " << recompute;
      EXPECT_NEAR(compute[2][i], compute[0][i], 1e-12 * compute[0][i]) << "recompute " << recompute;
    }
  }
}

TEST(Simulator, WaitingForASlowerReplicaIsNotAPipelineBubble) {
  // Two single-stage pipelines, one on an H100 and one on an A100 (3.2x slower at the analytic cost), in
  // one ZeRO-2 group: after the last backward both reduce-scatter the gradients, so the H100 waits for the
  // A100 inside the first reduce-scatter. Without pipeline parallelism there is no bubble: the waiting is
  // idle time (the H100's idle_s > 0), and it and the collectives are not bubble. Micro-batches of 16
  // sequences keep the compute above the collectives' time (llama-tiny's blocks are small).
  const Setting run = MakeSetting(R"(
name: mixed
nodes:
  - {name: fast, gpus: {type: h100, count: 1}, nic: {kind: roce, bandwidth_gbps: 400}}
  - {name: slow, gpus: {type: a100-80gb, count: 1}, nic: {kind: roce, bandwidth_gbps: 400}}
)",
                                  128);
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 16, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 16, num_micro_batches: 4, stages: [{devices: [1], layer_end: 6}]}
zero_stage: 2
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // the 3.2x of the closed form
  auto r = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->report.devices(0).idle_s(), 0.05 * r->report.iteration_time_s());
  EXPECT_NEAR(r->report.bubble_fraction(), 0.0, 1e-9);
}

TEST(Simulator, InterleavedWithZeroThreeIsAClearError) {
  const Setting run = MakeSetting(kFreeNode, 8);
  auto plan = PlanFrom(R"(
schedule: interleaved_1f1b
virtual_stages: 2
zero_stage: 3
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0, 1], layer_end: 3}, {devices: [2, 3], layer_begin: 3, layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [4, 5], layer_end: 3}, {devices: [6, 7], layer_begin: 3, layer_end: 6}]}
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  auto r = SimulateIteration(plan, ctx, SimOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("zero_stage"), std::string::npos) << r.status().message();
}

TEST(Simulator, ProfilesThatIncludeTpCommunicationAreNotChargedTwice) {
  // Sailor-style profiles time whole layers, TP all-reduces included: a TP-2 stage timed by such a
  // profile gets no simulated TP collectives; the same numbers without the flag get them.
  for (const bool included : {true, false}) {
    proto::Profile p;
    ASSERT_TRUE(models::ParseYaml(std::string("gpu: h100\nmodel: llama-tiny\nseq_len: 128\nincludes_tp_communication: ") +
                                      (included ? "true" : "false") + R"(
layers:
  - {layer: transformer, tp_degree: 2, micro_batch_size: 1, forward_s: 0.001, backward_s: 0.002}
  - {layer: embedding, tp_degree: 2, micro_batch_size: 1}
  - {layer: head, tp_degree: 2, micro_batch_size: 1}
)",
                                  "p", &p)
                    .ok());
    models::ProfileDb db;
    ASSERT_TRUE(db.Add(p, "p").ok());
    const Setting run = MakeSetting(kFreeNode, 4);
    const auto plan = PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0, 1], tp_degree: 2, layer_end: 6}]}]");
    models::PlanContext ctx{run.cluster, run.model, run.training};
    SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
    opt.profiles = &db;
    auto r = SimulateIteration(plan, ctx, opt);
    ASSERT_TRUE(r.ok()) << r.status().message();
    if (included) {
      EXPECT_EQ(r->report.devices(0).tp_communication_s(), 0.0);
    } else {
      EXPECT_GT(r->report.devices(0).tp_communication_s(), 0.0);
    }
  }
}

// llama-tiny on a stage of TP degree `tp` at 128 tokens: blocks of 1 ms forward and 2 ms backward, embedding
// and head free.
void AddTinyProfile(models::ProfileDb* db, int tp = 2) {
  proto::Profile prof;
  const std::string t = std::to_string(tp);
  ASSERT_TRUE(models::ParseYaml("gpu: h100\nmodel: llama-tiny\nseq_len: 128\nlayers:\n"
                                "  - {layer: transformer, tp_degree: " + t +
                                    ", micro_batch_size: 1, forward_s: 0.001, backward_s: 0.002}\n"
                                    "  - {layer: embedding, tp_degree: " + t + ", micro_batch_size: 1}\n"
                                    "  - {layer: head, tp_degree: " + t + ", micro_batch_size: 1}\n",
                                "p", &prof)
                  .ok());
  ASSERT_TRUE(db->Add(prof, "p").ok());
}

// Two H100s on one NVSwitch of `gbyte_s` GB/s and ~0 latency, and one TP-2 stage over llama-tiny on them.
Setting Tp2Node(double gbyte_s) {
  return MakeSetting(R"(
name: nvswitch
nodes:
  - name: n
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: )" + std::to_string(gbyte_s) +
                         R"(, latency_us: 0.000001, pcie_bandwidth_gbyte_s: 1000000}
)",
                     1);
}
proto::Plan Tp2Plan() {
  return PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0, 1], "
                  "tp_degree: 2, layer_end: 6}]}]");
}
// Compute from `db`'s layer times (no fixed costs, no optimizer step).
SimOptions ProfiledOptions(const models::ProfileDb& db) {
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;
  opt.compute.optimizer_bytes_per_param = 0;
  opt.profiles = &db;
  return opt;
}

TEST(Simulator, TpOverlapHidesAllButTheLastChunkOfEachPasssTpCommunication) {
  // A TP-2 stage on one node (1 GB/s NVSwitch, ~0 latency), blocks of 1 ms forward and 2 ms backward, one
  // micro-batch. Without overlap a pass takes C + M (compute, then its fused TP all-reduces). With
  // comm.tp_overlap and k = 4 chunks it takes C/4 + max(3C/4, 3M/4) + M/4 = C + M/4 when M <= C (here M is
  // about 10 all-reduces of 64 KiB at 1 GB/s, under 1 ms, against C = 4 or 8 ms): 3/4 of the TP time is
  // hidden and 1/4 stays exposed.
  models::ProfileDb db;
  ASSERT_NO_FATAL_FAILURE(AddTinyProfile(&db));
  const Setting run = Tp2Node(1);
  const proto::Plan plan = Tp2Plan();
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt = ProfiledOptions(db);
  // Full fidelity overlaps each layer's collectives with that layer's compute: the embedding's and the
  // head's take no time here, so their all-reduces stay exposed; only the fused fidelities give the closed
  // form exactly.
  for (Fidelity fid : {Fidelity::Balanced(), Fidelity::Fast(), Fidelity::Full()}) {
    const bool fused = fid.tp != TpDetail::kPerLayer;
    opt.fidelity = fid;
    auto plain = SimulateIteration(plan, ctx, opt);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    proto::Plan overlapped = plan;
    overlapped.mutable_comm()->set_tp_overlap(true);
    auto over = SimulateIteration(overlapped, ctx, opt);
    ASSERT_TRUE(over.ok()) << over.status().message();
    const double tp = plain->report.devices(0).tp_communication_s();
    ASSERT_GT(tp, 0.0);
    ASSERT_LT(tp, 0.004);  // M <= C in both passes
    if (fused) {
      EXPECT_NEAR(over->report.iteration_time_s(), plain->report.iteration_time_s() - 0.75 * tp, 1e-6);
      EXPECT_NEAR(over->report.devices(0).tp_communication_s(), 0.25 * tp, 1e-6);
    } else {
      EXPECT_LT(over->report.iteration_time_s(), plain->report.iteration_time_s() - 0.5 * tp);
      EXPECT_LT(over->report.devices(0).tp_communication_s(), 0.5 * tp);
    }
    EXPECT_NEAR(over->report.devices(0).compute_s(), plain->report.devices(0).compute_s(), 1e-9);
  }
}

TEST(Simulator, BackwardTpAllReducesRunBehindTheWgradGemmsUnlessTheStackBlocks) {
  // The TP-2 stage above (blocks 1 ms forward, 2 ms backward, embedding and head free), without SP: the
  // backward's nine TP all-reduces (two per block, the head's one) run behind the column-parallel wgrad GEMMs,
  // which are the share s of the backward pass's FLOPs: llama-tiny, 128 tokens, TP 2: per block the QKV
  // (131,072 weights) and up projection (352,256) wgrad GEMMs 128 · 483,328 FLOPs, the head's
  // 2 · 128 · 1,024 · 256 / 2; the pass twice the forward's, 2 · (4 · (2 · 128 · 724,992 + 4 · 128² · 256) +
  // 2 · 128 · 1,024 · 256) over 2 FLOPs (s ≈ 0.32). With comm.tp_backward_blocking the pass takes C + M; without, max(s·C, M) + (1 − s)·C:
  // on a fast fabric (M ≤ s·C) the whole M is hidden, on a slow one (M > s·C) exactly s·C is.
  models::ProfileDb db;
  ASSERT_NO_FATAL_FAILURE(AddTinyProfile(&db));
  const double hidden = 4 * 128 * 483328.0 + 2 * 128 * 1024 * 256.0 / 2;
  const double pass = 2 * (4 * (2 * 128 * 724992.0 + 4 * 128.0 * 128 * 256) + 2 * 128 * 1024 * 256.0) / 2;
  const double s = hidden / pass, C = 0.008;
  for (double gbyte_s : {1.0, 0.02}) {
    const Setting run = Tp2Node(gbyte_s);
    proto::Plan plan = Tp2Plan();
    models::PlanContext ctx{run.cluster, run.model, run.training};
    SimOptions opt = ProfiledOptions(db);
    opt.fidelity = Fidelity::Fast();
    auto async = SimulateIteration(plan, ctx, opt);
    ASSERT_TRUE(async.ok()) << async.status().message();
    plan.mutable_comm()->set_tp_backward_blocking(true);
    auto blocking = SimulateIteration(plan, ctx, opt);
    ASSERT_TRUE(blocking.ok()) << blocking.status().message();
    const double gain = blocking->report.iteration_time_s() - async->report.iteration_time_s();
    const double hidden_tp = blocking->report.devices(0).tp_communication_s() - async->report.devices(0).tp_communication_s();
    if (gbyte_s == 1.0) {
      // M: nine all-reduces of 128 · 256 · 2 bytes over a 2-ring at 1 GB/s, about 0.6 ms < s·C ≈ 2.6 ms.
      EXPECT_GT(hidden_tp, 9 * 65536 / 1e9 * 0.9);
      EXPECT_NEAR(gain, hidden_tp, 1e-9);
    } else {
      EXPECT_NEAR(gain, s * C, 1e-6);
    }
    EXPECT_NEAR(async->report.devices(0).compute_s(), blocking->report.devices(0).compute_s(), 1e-9);
  }
}

// Device 0's exposed DP communication when `plan` is simulated on `run` with `db`'s layer costs under
// `calibration` (-1 when the simulation fails, which the test is told).
double DpSecondsUnder(const proto::Plan& plan, const Setting& run, const models::ProfileDb& db,
                      const std::string& calibration) {
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt;
  opt.profiles = &db;
  opt.compute.calibration = calibration;
  auto r = SimulateIteration(plan, ctx, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->report.devices(0).dp_communication_s() : -1;
}

TEST(Simulator, CollectiveEfficiencyStretchesTheGradientAllReduce) {
  // Data parallelism over two H100s joined at 1 GB/s, layer costs from an exact profile: with a calibrated
  // collective efficiency of 0.5 (and no per-call latency) the gradient all-reduce moves its bytes at half
  // the link's bandwidth, so its time doubles.
  const Setting run = MakeSetting(R"(
name: slow-pair
nodes:
  - name: n
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1, latency_us: 0.000001}
)", 4);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
comm: {dp_overlap: false}
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 2
    stages: [{devices: [0, 1], layer_end: 6}]
)");
  const std::string full = WriteCalibration("eff-1", "gpus:\n  - gpus: [h100]\n    collective_latency: [{group_size: 2, latency_us: 0}]\n");
  const std::string half = WriteCalibration(
      "eff-half", "gpus:\n  - gpus: [h100]\n    collective_efficiency: 0.5\n    collective_latency: [{group_size: 2, latency_us: 0}]\n");
  const double a = DpSecondsUnder(plan, run, db, full), b = DpSecondsUnder(plan, run, db, half);
  ASSERT_GT(a, 1e-3);
  EXPECT_NEAR(b / a, 2.0, 0.02);
}

TEST(Simulator, ZeroThreeUnitsPrefetchEachLayerBehindTheComputeBeforeIt) {
  // Data parallelism over two H100s on a 1 GB/s NVSwitch (~0 latency, no per-call cost, full collective
  // efficiency), ZeRO-3 by units, one micro-batch of llama-tiny: blocks 1 ms forward and 2 ms backward, the
  // embedding (layer 0) and the head (5) free. A unit's gather or reduce-scatter over the 2-ring moves half
  // its bf16 bytes each way: a block 725,504 params -> 0.7255 ms, the embedding 262,144 -> 0.2621 ms, the
  // head 262,400 -> 0.2624 ms, each under the compute it runs behind (a gather 1 ms forward; a gather and a
  // reduce-scatter, 2 ms backward). Played per layer (full fidelity):
  //   forward  g0 + max(0, g1) + 3 · 1 ms + max(1 ms, g5) + 0             = g0 + g1 + 4 ms
  //   backward g5 + max(0, g4) + 4 · 2 ms + max(0, r1) + r0               = g5 + g4 + 8 ms + r1 + r0
  // (the free embedding and head hide nothing): 12 ms + 2.9632 ms. In fused passes (balanced fidelity) the
  // calls behind a pass share the pass's compute but the last unit's (the head's FLOPs forward, about 8% of
  // the pass; the embedding's backward): 3.164 ms of gathers behind ~3.7 ms forward, 6.33 ms of gathers
  // and reduce-scatters behind ~8 ms backward, so only g0, g5 and r0 show: 12 ms + 0.7867 ms.
  models::ProfileDb db;
  ASSERT_NO_FATAL_FAILURE(AddTinyProfile(&db, 1));
  const Setting run = MakeSetting(R"(
name: pair
nodes:
  - name: n
    gpus: {type: h100, count: 2}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1, latency_us: 0.000001, pcie_bandwidth_gbyte_s: 1000000}
)", 2);
  const proto::Plan plan = PlanFrom(R"(
zero_stage: 3
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [1], layer_end: 6}]}
)");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  SimOptions opt = ProfiledOptions(db);
  opt.compute.calibration = WriteCalibration(
      "zero-units", "gpus:\n  - gpus: [h100]\n    collective_efficiency: 1\n    collective_latency: [{group_size: 2, latency_us: 0}]\n");
  const double g0 = 262144 / 1e9, block = 725504 / 1e9, g5 = 262400 / 1e9;
  opt.fidelity = Fidelity::Full();
  auto full = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_NEAR(full->report.iteration_time_s(), 0.012 + g0 + block + block + g5 + g0 + block, 0.01 * 0.003);
  opt.fidelity = Fidelity::Balanced();
  auto fused = SimulateIteration(plan, ctx, opt);
  ASSERT_TRUE(fused.ok()) << fused.status().message();
  EXPECT_NEAR(fused->report.iteration_time_s(), 0.012 + g0 + g5 + g0, 0.01 * 0.003);
}

// A measured bus bandwidth for the group's size (calibration collective_latency[].bus_bandwidth_gbyte_s)
// replaces the fabric's link for collectives inside one node: four H100s whose peer-to-peer over PCIe runs at
// 4 GB/s (fabric 4, PCIe links 16), DP over all four. Measured at 1 GB/s for groups of 4, the gradient
// all-reduce takes 4/1 = 4 times as long; an entry for another size only (2 GPUs at 1 GB/s) is held beyond
// it, so the same; across two nodes (2 + 2 GPUs) the entry does not apply: the NICs decide, unchanged.
TEST(Simulator, AMeasuredBusBandwidthPacesCollectivesInsideANode) {
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
comm: {dp_overlap: false}
pipelines:
  - micro_batch_size: 2
    num_micro_batches: 2
    stages: [{devices: [0, 1, 2, 3], layer_end: 6}]
)");
  const std::string link = WriteCalibration("bus-none", "gpus:\n  - gpus: [h100]\n    collective_latency: "
                                                        "[{group_size: 2, latency_us: 0}]\n");
  const std::string bus4 = WriteCalibration("bus-4", "gpus:\n  - gpus: [h100]\n    collective_latency: "
                                                     "[{group_size: 4, latency_us: 0, bus_bandwidth_gbyte_s: 1}]\n");
  const std::string bus2 = WriteCalibration("bus-2", "gpus:\n  - gpus: [h100]\n    collective_latency: "
                                                     "[{group_size: 2, latency_us: 0, bus_bandwidth_gbyte_s: 1}]\n");
  auto dp_seconds = [&](const Setting& run, const std::string& calibration) {
    return DpSecondsUnder(plan, run, db, calibration);
  };
  const Setting one = MakeSetting(R"(
name: pcie-box
nodes:
  - name: n
    gpus: {type: h100, count: 4}
    fabric: {kind: pcie, bandwidth_gbyte_s: 4, pcie_bandwidth_gbyte_s: 16, latency_us: 0.000001}
)", 4);
  const double a = dp_seconds(one, link);
  ASSERT_GT(a, 1e-3);
  EXPECT_NEAR(dp_seconds(one, bus4) / a, 4.0, 0.04);
  EXPECT_NEAR(dp_seconds(one, bus2) / a, 4.0, 0.04);
  const Setting two = MakeSetting(R"(
name: two-boxes
nodes:
  - name: n
    count: 2
    gpus: {type: h100, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 4, pcie_bandwidth_gbyte_s: 16, latency_us: 0.000001}
    nic: {kind: ethernet, bandwidth_gbps: 8}
)", 4);
  const double across = dp_seconds(two, link);
  ASSERT_GT(across, 1e-3);
  EXPECT_NEAR(dp_seconds(two, bus4) / across, 1.0, 1e-6);
}

// Every report says what each GPU type's compute rests on: the H100's entry of the default calibration is
// measured (hetsim-kernel-bench); the MI250X has only generic values.
TEST(ComputeBasis, EachGpuTypeSaysWhetherAMeasurementIsBehindIt) {
  const std::string node = "fabric: {pcie_bandwidth_gbyte_s: 16}, nic: {kind: ethernet, bandwidth_gbps: 100}}\n";
  const auto mixed = ClusterFrom("name: mixed\nnodes:\n  - {name: nv, gpus: {type: h100, count: 1}, " + node +
                                 "  - {name: amd, gpus: {type: mi250x, count: 1}, " + node);
  const Setting run{mixed, MakeSetting(kFreeNode, 4).model, MakeSetting(kFreeNode, 4).training};
  const auto plan = PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: "
                             "[{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]}]\n");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  auto r = SimulateIteration(plan, ctx, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->report.compute_basis_size(), 2);
  std::map<std::string, proto::ComputeBasisReport> by_gpu;
  for (const auto& b : r->report.compute_basis()) by_gpu[b.gpu()] = b;
  ASSERT_TRUE(by_gpu.count("h100") && by_gpu.count("mi250x"));
  EXPECT_TRUE(by_gpu["h100"].measured());
  EXPECT_EQ(by_gpu["h100"].calibration(), "default");
  EXPECT_NE(by_gpu["h100"].source().find("hetsim-kernel-bench"), std::string::npos);
  EXPECT_FALSE(by_gpu["mi250x"].measured());
  EXPECT_FALSE(by_gpu["mi250x"].profiled());
}

// A TF32 training on a Turing card runs in FP32, so its basis is the card's FP32 entry: the RTX 2080's FP32
// GEMM efficiency fitted on Sailor's profile counts as measured, as does the RTX 3090's TF32 entry.
TEST(ComputeBasis, Tf32OnATuringCardRestsOnItsFp32Entry) {
  const std::string node = "fabric: {pcie_bandwidth_gbyte_s: 16}, nic: {kind: ethernet, bandwidth_gbps: 100}}\n";
  const auto mixed = ClusterFrom("name: mixed\nnodes:\n  - {name: a, gpus: {type: rtx3090, count: 1}, " + node +
                                 "  - {name: t, gpus: {type: rtx2080, count: 1}, " + node);
  auto training = MakeSetting(kFreeNode, 4).training;
  training.set_dtype(proto::DTYPE_TF32);
  const Setting run{mixed, MakeSetting(kFreeNode, 4).model, training};
  const auto plan = PlanFrom("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: "
                             "[{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]}]\n");
  models::PlanContext ctx{run.cluster, run.model, run.training};
  auto r = SimulateIteration(plan, ctx, SimOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::map<std::string, proto::ComputeBasisReport> by_gpu;
  for (const auto& b : r->report.compute_basis()) by_gpu[b.gpu()] = b;
  ASSERT_TRUE(by_gpu.count("rtx3090") && by_gpu.count("rtx2080"));
  EXPECT_TRUE(by_gpu["rtx2080"].measured());
  EXPECT_TRUE(by_gpu["rtx3090"].measured());
}

}  // namespace
}  // namespace hetsim::sim
