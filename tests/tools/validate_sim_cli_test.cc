// hetsim validate-sim from the command line: measured runs (vTrain's layout, named columns, plan files),
// per-run CSVs, bad rows, and the executor mode's errors (split from cli_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/text_checks.h"
#include "tests/tools/cli_run.h"

namespace hetsim {
namespace {

using testing_cli::RunCli;
using testing_cli::WriteTemp;
using testing_util::BadFile;
using testing_util::EveryLineNames;
using testing_util::Has;
using testing_util::Lines;

TEST(ValidateSim, ReportsTheErrorOfEveryRunAndBothHalves) {
  // Two runs of a GPT model of hidden 1024 on 2 and 4 A100s; the measured times are the simulator's
  // order of magnitude, not its output: the test checks the report's shape, not a number.
  const std::string runs = WriteTemp("runs.csv",
                                     "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,"
                                     "sequence length,tensor parallelism,data parallelism,pipeline parallelism,"
                                     "iteration time (ms)\n"
                                     "2,16,8,1024,16,24,1024,1,1,2,372.16\n"
                                     "4,16,4,1024,16,24,1024,2,2,1,300.0\n");
  const std::string out = testing::TempDir() + "per-run.csv";
  const auto r = RunCli({"validate-sim", "--runs", runs, "-o", out});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "simulated 2 of 2 runs"));
  EXPECT_TRUE(Has(r.out, "development half     1 runs"));
  EXPECT_TRUE(Has(r.out, "held-out half        1 runs"));
  EXPECT_TRUE(Has(r.out, "tp=2"));
  std::ifstream in(out);
  std::string header, row1, row2, extra;
  std::getline(in, header);
  std::getline(in, row1);
  std::getline(in, row2);
  EXPECT_TRUE(Has(header, "measured_ms,simulated_ms,error"));
  EXPECT_TRUE(Has(row1, ",development,372.1600,"));
  EXPECT_TRUE(Has(row2, ",held_out,300.0000,"));
  EXPECT_FALSE(std::getline(in, extra));
}

// A CSV line's cells (no quoting: validate-sim's numbers and names).
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) out.push_back(c);
  return out;
}

// A number of the first run in a validate-sim -o file, by the header's column name.
double FirstRunCell(const std::string& per_run_csv, const std::string& column) {
  std::ifstream in(per_run_csv);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  const auto names = Cells(header), values = Cells(row);
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (names[i] == column) return std::stod(values[i]);
  }
  return -1;
}

// The simulated time of the first run in a validate-sim -o file.
double SimulatedMs(const std::string& per_run_csv) { return FirstRunCell(per_run_csv, "simulated_ms"); }

TEST(ValidateSim, PerRunCsvGivesTheFullestDevicesPeakMemory) {
  // A GPT of hidden 1024 and 24 blocks in two stages on 2 A100s: each stage holds at least 12 blocks of
  // 12.6 M parameters (12 h^2 + 13 h), 151 M, whose fp16 weights and gradients and fp32 Adam state and
  // master copy take 16 bytes each: at least 2.25 GiB; far below the 80 GiB of an A100.
  const std::string runs = WriteTemp("mem-runs.csv",
                                     "2,16,8,1024,16,24,1024,1,1,2,372.16\n");
  const std::string out = testing::TempDir() + "mem-per-run.csv";
  const auto r = RunCli({"validate-sim", "--runs", runs, "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  const double gib = FirstRunCell(out, "peak_memory_gib");
  EXPECT_GT(gib, 2.25);
  EXPECT_LT(gib, 40);
}

TEST(ValidateSim, BadRowsNameTheLineAndTheProblem) {
  const std::string shape = WriteTemp("bad-shape.csv", "4,16,4,1024,16,24,1024,2,1,1,300.0\n");
  const auto a = RunCli({"validate-sim", "--runs", shape});
  EXPECT_EQ(a.code, 1);
  EXPECT_TRUE(Has(a.err, shape + ":1: TP × DP × PP = 2 but #GPUs is 4"));
  const std::string columns = WriteTemp("bad-columns.csv", "4,16,4,1024\n");
  const auto b = RunCli({"validate-sim", "--runs", columns});
  EXPECT_EQ(b.code, 1);
  EXPECT_TRUE(Has(b.err, columns + ":1: expected 11 columns, found 4"));
  const auto c = RunCli({"validate-sim"});
  EXPECT_EQ(c.code, 2);
  EXPECT_TRUE(Has(c.err, "give --runs FILE.csv"));
}

TEST(ValidateSim, NamedColumnsInAnyOrderGiveTheSameRunAsVTrainsLayout) {
  // The same run (4 A100s, TP 2, DP 2) in vTrain's positional layout (vTrain's runs: Megatron-DeepSpeed) and
  // in named columns, reordered, naming that stack, with a provenance column the reader ignores: the same
  // simulated time to the printed digits.
  const std::string positional = WriteTemp("pos.csv", "4,16,4,1024,16,24,1024,2,2,1,300.0\n");
  const std::string named = WriteTemp("named.csv",
                                      "model,iteration_ms,pp,dp,tp,seq_len,layers,heads,hidden,micro_batch,"
                                      "global_batch,gpus,stack\n"
                                      "\"gpt, 0.3B\",300.0,1,2,2,1024,24,16,1024,4,16,4,megatron-deepspeed\n");
  const std::string a_out = testing::TempDir() + "pos-out.csv", b_out = testing::TempDir() + "named-out.csv";
  const auto a = RunCli({"validate-sim", "--runs", positional, "-o", a_out});
  const auto b = RunCli({"validate-sim", "--runs", named, "-o", b_out});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_GT(SimulatedMs(a_out), 0);
  EXPECT_EQ(SimulatedMs(a_out), SimulatedMs(b_out));
}

TEST(ValidateSim, EachRunGetsTheOneRulesCalibrationForItsStack) {
  // One run (4 A100s, TP 2, DP 2, hidden 1024: small kernels) measured on Megatron-LM and on
  // Megatron-DeepSpeed. The one rule gives the first `default` and the second `megatron-deepspeed`, whose
  // host costs (about 58 us per kernel issued, 1 ms per micro-batch and pass) Megatron-LM's tuned stack
  // lacks: the second is slower by more than 5%. A row without a stack is Megatron-LM's. --calibration given
  // applies to every row, so the Megatron-LM row then takes exactly the other's time once it also blocks on
  // the backward's TP all-reduces as Megatron-DeepSpeed does (its `tp_backward` default; Megatron-LM's is
  // async: faster); a bad `tp_backward` names its cell; a file mixing stacks
  // says how many runs used each calibration; an unknown stack fails before any simulation, naming the file,
  // line and column; the old `calibration` column is refused with what to write instead.
  const char* header = "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,iteration_ms,stack\n";
  const char* run = "4,16,4,1024,16,24,1024,2,2,1,300.0,";
  const std::string by_lm = WriteTemp("row-lm.csv", std::string(header) + run + "megatron-lm\n");
  const std::string by_mds = WriteTemp("row-mds.csv", std::string(header) + run + "megatron-deepspeed\n");
  const std::string a_out = testing::TempDir() + "row-lm-out.csv";
  const std::string b_out = testing::TempDir() + "row-mds-out.csv", c_out = testing::TempDir() + "row-flag-out.csv";
  const auto a = RunCli({"validate-sim", "--runs", by_lm, "-o", a_out});
  const auto b = RunCli({"validate-sim", "--runs", by_mds, "-o", b_out});
  const std::string lm_blocking =
      WriteTemp("row-lm-blocking.csv", std::string("gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,"
                                                   "iteration_ms,stack,tp_backward\n") +
                                           run + "megatron-lm,blocking\n");
  const auto c = RunCli({"validate-sim", "--runs", lm_blocking, "--calibration", "megatron-deepspeed", "-o", c_out});
  const std::string g_out = testing::TempDir() + "row-lm-async-out.csv";
  const auto g = RunCli({"validate-sim", "--runs", by_lm, "--calibration", "megatron-deepspeed", "-o", g_out});
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_LT(SimulatedMs(g_out), SimulatedMs(c_out));
  const std::string bad_tp = WriteTemp("row-bad-tp.csv", std::string("gpus,global_batch,micro_batch,hidden,heads,layers,"
                                                                     "seq_len,tp,dp,pp,iteration_ms,tp_backward\n") +
                                                             run + "sometimes\n");
  const auto h = RunCli({"validate-sim", "--runs", bad_tp});
  EXPECT_EQ(h.code, 1);
  EXPECT_TRUE(Has(h.err, bad_tp + ":2: tp_backward: 'sometimes' is neither blocking nor async")) << h.err;
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_TRUE(Has(a.out, "calibration default, the one rule's pick for the runs' software stack")) << a.out;
  EXPECT_TRUE(Has(b.out, "calibration megatron-deepspeed, the one rule's pick")) << b.out;
  EXPECT_TRUE(Has(c.out, "calibration megatron-deepspeed, fidelity")) << c.out;
  EXPECT_GT(SimulatedMs(b_out), SimulatedMs(a_out) * 1.05);
  EXPECT_EQ(SimulatedMs(c_out), SimulatedMs(b_out));
  const std::string mixed =
      WriteTemp("row-mixed.csv", std::string(header) + run + "megatron-lm\n" + run + "megatron-deepspeed\n" + run + "\n");
  const auto d = RunCli({"validate-sim", "--runs", mixed});
  ASSERT_EQ(d.code, 0) << d.err;
  // The third row's empty cell is Megatron-LM's stack: `default`.
  EXPECT_TRUE(Has(d.out, "calibration default (2 runs), megatron-deepspeed (1 runs)")) << d.out;
  const std::string bad = WriteTemp("row-typo.csv", std::string(header) + run + "megatron-deepsped\n");
  const auto e = RunCli({"validate-sim", "--runs", bad});
  EXPECT_EQ(e.code, 1);
  EXPECT_TRUE(Has(e.err, bad + ":2: stack: unknown software stack 'megatron-deepsped'")) << e.err;
  EXPECT_TRUE(Has(e.err, "did you mean 'megatron-deepspeed'")) << e.err;
  const std::string old = WriteTemp("row-old.csv", "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,"
                                                   "pp,iteration_ms,calibration\n" + std::string(run) + "default\n");
  const auto f = RunCli({"validate-sim", "--runs", old});
  EXPECT_EQ(f.code, 1);
  EXPECT_TRUE(Has(f.err, old + ":1: a `calibration` column is no longer read: name each run's software stack in a `stack` column"))
      << f.err;
}

TEST(ValidateSim, RunsOnSeveralNodesCrossTheirNics) {
  // TP 8 × PP 2 on two nodes of 8: every pipeline hand-off crosses the NICs. Hidden 1024, sequence 1024,
  // micro-batch 1, fp16: 2 MiB of activations a hand-off, scattered over the 8 TP ranks (Megatron's
  // scatter-gather), 256 KiB per GPU's NIC. At 1 Gb/s that is 2.1 ms a hop; the first micro-batch's forward
  // hop and the last one's backward hop lie on the critical path whatever overlaps, so the run takes at
  // least 4.2 ms longer than with 400 Gb/s NICs (where a hop costs 5 µs).
  const char* header = "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,gpus_per_node,nic_gbps,"
                       "iteration_ms\n";
  const std::string slow = WriteTemp("slow.csv", std::string(header) + "16,8,1,1024,16,24,1024,8,1,2,8,1,300\n");
  const std::string fast = WriteTemp("fast.csv", std::string(header) + "16,8,1,1024,16,24,1024,8,1,2,8,400,300\n");
  const std::string slow_out = testing::TempDir() + "slow-out.csv", fast_out = testing::TempDir() + "fast-out.csv";
  const auto a = RunCli({"validate-sim", "--runs", slow, "-o", slow_out});
  const auto b = RunCli({"validate-sim", "--runs", fast, "-o", fast_out});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_GE(SimulatedMs(slow_out) - SimulatedMs(fast_out), 4.2);
}

TEST(ValidateSim, TpAcrossNodesCostsTheSameAtEveryFidelity) {
  // TP 16 over two nodes of 8 GPUs with four shared 200 Gb/s NICs a node: every TP all-reduce's ring crosses
  // the NICs twice. The fast fidelity prices TP analytically; it must charge the ring's slowest hop (the
  // NICs, striped over the members), as the played rings of full fidelity do, not each rank's own hop
  // (which made it ~2x too fast). What remains is the played ring's step-by-step synchronisation, which the
  // analytic price leaves out: ~140 us per call (30 steps), 2.5% of the iteration at these 64 MB calls (10%
  // at 16 MB ones).
  const char* header = "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,gpus_per_node,nic_gbps,"
                       "nics_per_node,iteration_ms\n";
  const std::string runs = WriteTemp("tp16.csv", std::string(header) + "16,4,4,8192,64,4,1024,16,1,1,8,200,4,300\n");
  const std::string fast_out = testing::TempDir() + "tp16-fast.csv", full_out = testing::TempDir() + "tp16-full.csv";
  const auto a = RunCli({"validate-sim", "--runs", runs, "--fidelity", "fast", "-o", fast_out});
  const auto b = RunCli({"validate-sim", "--runs", runs, "--fidelity", "full", "-o", full_out});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NEAR(SimulatedMs(fast_out) / SimulatedMs(full_out), 1.0, 0.05);
}

TEST(ValidateSim, PlanFileRunsReportTimeSyncAndMemoryErrors) {
  // Two runs naming one plan file (relative to the CSV): the same simulated time, peak memory and gradient
  // sync on both rows, and each row's errors are (simulated − measured) / measured of its own measurements.
  WriteTemp("plan-runs-plan.yaml",
            "kind: plan\nname: p\ncluster: cpu-4\nmodel: llama-tiny\n"
            "training: {global_batch_size: 8, seq_len: 32, dtype: fp32}\nschedule: 1f1b\npipelines:\n"
            "  - {micro_batch_size: 2, num_micro_batches: 2, stages: [{devices: [0], layer_begin: 0, layer_end: 6}]}\n"
            "  - {micro_batch_size: 2, num_micro_batches: 2, stages: [{devices: [1], layer_begin: 0, layer_end: 6}]}\n");
  const std::string runs = WriteTemp("plan-runs.csv",
                                     "# two measurements of one plan\n"
                                     "plan,dp,pp,nodes,iteration_ms,grad_sync_ms,peak_memory_gib\n"
                                     "plan-runs-plan.yaml,2,1,1,100,1,1\n"
                                     "plan-runs-plan.yaml,2,1,1,200,2,2\n");
  const std::string out = testing::TempDir() + "plan-runs-out.csv";
  const auto r = RunCli({"validate-sim", "--runs", runs, "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "simulated 2 of 2 plans")) << r.out;
  EXPECT_TRUE(Has(r.out, "peak memory, all")) << r.out;
  EXPECT_TRUE(Has(r.out, "dp=2")) << r.out;
  std::ifstream in(out);
  std::string header, a, b;
  std::getline(in, header);
  std::getline(in, a);
  std::getline(in, b);
  const auto h = Cells(header), x = Cells(a), y = Cells(b);
  const auto col = [&](const std::vector<std::string>& row, const std::string& name) {
    const size_t i = static_cast<size_t>(std::find(h.begin(), h.end(), name) - h.begin());
    return i < row.size() ? std::stod(row[i]) : -1e300;
  };
  ASSERT_EQ(x.size(), h.size());
  ASSERT_EQ(y.size(), h.size());
  EXPECT_GT(col(x, "simulated_ms"), 0);
  EXPECT_EQ(col(x, "simulated_ms"), col(y, "simulated_ms"));
  EXPECT_GT(col(x, "simulated_peak_gib"), 0);
  EXPECT_EQ(col(x, "simulated_peak_gib"), col(y, "simulated_peak_gib"));
  EXPECT_GT(col(x, "simulated_grad_sync_ms"), 0);  // two pipelines all-reduce their gradients
  EXPECT_NEAR(col(x, "error"), col(x, "simulated_ms") / 100 - 1, 1e-5);
  EXPECT_NEAR(col(y, "error"), col(y, "simulated_ms") / 200 - 1, 1e-5);
  EXPECT_NEAR(col(y, "memory_error"), col(y, "simulated_peak_gib") / 2 - 1, 1e-4);
  EXPECT_NEAR(col(x, "grad_sync_error"), col(x, "simulated_grad_sync_ms") / 1 - 1, 1e-4);
}

TEST(ValidateSim, PlanFileRunsNameTheLineOfAMissingPlan) {
  const std::string runs = WriteTemp("plan-runs-missing.csv", "plan,iteration_ms\nno-such-plan.yaml,100\n");
  const auto r = RunCli({"validate-sim", "--runs", runs});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, runs + ":2: not simulated:")) << r.err;
  EXPECT_TRUE(Has(r.err, "no-such-plan.yaml")) << r.err;
  const std::string bad = WriteTemp("plan-runs-bad.csv", "plan,iteration_ms\nx.yaml,-3\n");
  const auto b = RunCli({"validate-sim", "--runs", bad});
  EXPECT_EQ(b.code, 1);
  EXPECT_TRUE(Has(b.err, bad + ":2: iteration_ms: '-3' is not a positive number")) << b.err;
}

TEST(ValidateSim, NamedColumnsBadInputNamesLineColumnAndFix) {
  const std::string missing = WriteTemp("missing.csv", "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,"
                                                       "dp,pp\n4,16,4,1024,16,24,1024,2,2,1\n");
  const auto a = RunCli({"validate-sim", "--runs", missing});
  EXPECT_EQ(a.code, 1);
  EXPECT_TRUE(Has(a.err, missing + ":1: the header names no 'iteration_ms' column")) << a.err;
  const char* header = "gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,gpus_per_node,iteration_ms\n";
  const std::string no_nic = WriteTemp("no-nic.csv", std::string(header) + "16,8,1,1024,16,24,1024,8,1,2,8,300\n");
  const auto b = RunCli({"validate-sim", "--runs", no_nic});
  EXPECT_EQ(b.code, 1);
  EXPECT_TRUE(Has(b.err, no_nic + ":2: the run spans 2 nodes; give nic_gbps")) << b.err;
  const std::string uneven = WriteTemp("uneven.csv", std::string(header) + "12,8,1,1024,16,24,1024,4,1,3,8,300\n");
  const auto c = RunCli({"validate-sim", "--runs", uneven});
  EXPECT_EQ(c.code, 1);
  EXPECT_TRUE(Has(c.err, uneven + ":2: gpus (12) is not a multiple of gpus_per_node (8)")) << c.err;
  const std::string word = WriteTemp("word.csv", std::string(header) + "16,8,one,1024,16,24,1024,8,1,2,8,300\n");
  const auto d = RunCli({"validate-sim", "--runs", word});
  EXPECT_EQ(d.code, 1);
  EXPECT_TRUE(Has(d.err, word + ":2: micro_batch: 'one' is not a number")) << d.err;
  const std::string cells = WriteTemp("cells.csv", std::string(header) + "16,8,1\n");
  const auto e = RunCli({"validate-sim", "--runs", cells});
  EXPECT_EQ(e.code, 1);
  EXPECT_TRUE(Has(e.err, cells + ":2: expected 12 cells (the header's columns), found 3")) << e.err;
}

TEST(ValidateSim, TheBundledMegatronTable1RunsSimulate) {
  // experiments/validation/megatron_sc21_table1.csv: its first three rows (32-128 GPUs on 4-16 nodes).
  const std::string out = testing::TempDir() + "table1.csv";
  const auto r = RunCli({"validate-sim", "--runs",
                         std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/megatron_sc21_table1.csv",
                         "--limit", "3", "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "simulated 3 of 3 runs")) << r.out;
  EXPECT_GT(SimulatedMs(out), 1000);  // 1.7B on 32 GPUs: seconds per iteration, as published (3.5 s)
}

TEST(ValidateSim, TheBundledSailorPlansSimulate) {
  // experiments/validation/sailor_gh200_opt350/runs.csv: every one of the 15 plans (1-32 GH200 nodes) loads
  // its plan, cluster and model relative to the CSV and simulates.
  const auto r = RunCli({"validate-sim", "--runs",
                         std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/sailor_gh200_opt350/runs.csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "simulated 15 of 15 plans")) << r.out;
  EXPECT_TRUE(Has(r.out, "nodes=32")) << r.out;
}

TEST(ValidateSim, TheBundledLlmFoundryFsdpRunsSimulateAndFitInMemory) {
  // experiments/validation/llmfoundry_a100_40gb_fsdp/runs.csv: all 78 FSDP (ZeRO-3) runs simulate, and none
  // needs more than the A100-40GB's 40 GiB (each ran). The first, MPT-70B on 128 GPUs, holds at least its
  // share of the sharded states: 16 bytes of bf16 weights, gradients, fp32 master copy and Adam moments per
  // parameter, 64.86 B parameters over 128 GPUs = 7.55 GiB.
  const std::string out = testing::TempDir() + "llmfoundry.csv";
  const auto r = RunCli({"validate-sim", "--runs",
                         std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/llmfoundry_a100_40gb_fsdp/runs.csv",
                         "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "simulated 78 of 78 plans")) << r.out;
  EXPECT_GT(FirstRunCell(out, "simulated_peak_gib"), 16 * 64.86e9 / 128 / (1u << 30));
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  const auto names = Cells(line);
  const size_t col = std::find(names.begin(), names.end(), "simulated_peak_gib") - names.begin();
  ASSERT_LT(col, names.size());
  int rows = 0;
  while (std::getline(in, line)) {
    const auto cells = Cells(line);
    ASSERT_LT(col, cells.size()) << line;
    EXPECT_LE(std::stod(cells[col]), 40.0) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 78);
}

TEST(ValidateSim, TheBundledNemoFp8RunsSimulate) {
  // experiments/validation/nemo_2407_h100_fp8/runs.csv: NVIDIA's 12 NeMo 24.07 FP8 runs (8-512 H100s; TP,
  // PP, CP and interleaved 1F1B) each load their plan, cluster and model beside the CSV and simulate.
  const auto r = RunCli({"validate-sim", "--runs",
                         std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/nemo_2407_h100_fp8/runs.csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "simulated 12 of 12 plans")) << r.out;
}

// experiments/validation/torchtitan_a100_fsdp: torchtitan's published FSDP2 runs on 64 A100 80GB simulate,
// and their memory says what the page says: every run it timed fits (op-level selective checkpointing on
// Llama 2 70B at local batch 1, full at batch 2, ...) and Llama 2 70B at batch 2 with op-level selective
// checkpointing does not (its footnote 1). Megatron's `selective` keeps everything flash attention leaves,
// so with it the batch-1 run would not fit either (docs/simulator.md "Op-level selective recomputation").
TEST(ValidateSim, TheBundledTorchtitanRunsFitWhereTheyTrained) {
  const std::string dir = std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/torchtitan_a100_fsdp/";
  const auto r = RunCli({"validate-sim", "--runs", dir + "runs.csv"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "simulated 6 of 6 plans")) << r.out;
  for (const std::string plan : {"llama3-8b-b1-op_selective", "llama3-70b-b1-full", "llama2-13b-b2-none",
                                 "llama2-13b-b2-op_selective", "llama2-70b-b1-op_selective", "llama2-70b-b2-full",
                                 "llama2-70b-b2-op_selective"}) {
    const auto d = RunCli({"describe", "--plan", dir + "plans/" + plan + ".yaml"});
    EXPECT_EQ(Has(d.out, "OUT OF MEMORY"), plan == "llama2-70b-b2-op_selective") << plan << "\n" << d.out;
  }
}

TEST(ValidateSim, EachPlanRunUsesTheCalibrationOfItsStack) {
  // The same Sailor plan (one GH200 node, TP 4, micro-batch 1: 24 blocks of small kernels) measured on
  // Megatron-LM and on Megatron-DeepSpeed (about 58-73 us of host time per kernel instead of 10): the second
  // is slower; a row naming an unknown stack is an error naming the file and line. The plan itself names
  // megatron-deepspeed: a row's `stack` decides over it.
  const std::string plan = std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/sailor_gh200_opt350/plans/n1-d1-m4-g1.yaml";
  const auto simulated = [&](const std::string& stack, const std::string& calibration) {
    const std::string csv =
        WriteTemp("row-" + stack + ".csv", "plan,iteration_ms,stack\n" + plan + ",73.59," + stack + "\n");
    const auto r = RunCli({"validate-sim", "--runs", csv});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(Has(r.out, "(calibration " + calibration)) << r.out;
    const size_t at = r.out.find("iteration time, all");
    const size_t bias = r.out.find("bias", at);
    return std::stod(r.out.substr(bias + 4));
  };
  const double by_lm = simulated("megatron-lm", "default"), by_stack = simulated("megatron-deepspeed", "megatron-deepspeed");
  EXPECT_GT(by_stack, by_lm + 5) << "bias % with the stack's host costs vs without";
  const std::string bad = WriteTemp("row-bad.csv", "plan,iteration_ms,stack\n" + plan + ",73.59,megatron\n");
  const auto r = RunCli({"validate-sim", "--runs", bad});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(Has(r.err, "row-bad.csv:2: stack: unknown software stack 'megatron'")) << r.err;
}

TEST(ValidateSim, PlanRunsTakeTheMeasuredProfilesGiven) {
  // Sailor's one-node GH200 plan of OPT-350M simulated with Sailor's measured GH200 profile of that model:
  // its blocks take the profile's times instead of the kernel model's, so the simulated time moves. A
  // profile that does not exist fails before any simulation; the column layouts, whose models no profile
  // names, refuse --profile.
  const std::string plan = std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/sailor_gh200_opt350/plans/n1-d1-m4-g1.yaml";
  const std::string csv = WriteTemp("profile-run.csv", "plan,iteration_ms\n" + plan + ",73.59\n");
  const std::string plain = testing::TempDir() + "profile-plain.csv", measured = testing::TempDir() + "profile-m.csv";
  const auto a = RunCli({"validate-sim", "--runs", csv, "-o", plain});
  const auto b = RunCli({"validate-sim", "--runs", csv, "--profile", "sailor-opt-350m-gh200", "-o", measured});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_GT(std::fabs(SimulatedMs(measured) / SimulatedMs(plain) - 1), 0.001);
  const auto c = RunCli({"validate-sim", "--runs", csv, "--profile", "no-such-profile"});
  EXPECT_EQ(c.code, 1);
  EXPECT_TRUE(Has(c.err, "--profile: no bundled profile named 'no-such-profile'")) << c.err;
  const std::string table1 = std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/megatron_sc21_table1.csv";
  const auto d = RunCli({"validate-sim", "--runs", table1, "--profile", "sailor-opt-350m-gh200"});
  EXPECT_EQ(d.code, 2);
  EXPECT_TRUE(Has(d.err, "--profile applies to plan-file runs")) << d.err;
}

TEST(ValidateSim, ExecutorModeNamesWhatIsMissingOrWrong) {
  const auto a = RunCli({"validate-sim", "--executor"});
  EXPECT_EQ(a.code, 2);
  EXPECT_TRUE(Has(a.err, "give --plans P1,P2,..."));
  const auto b = RunCli({"validate-sim", "--executor", "--plans", "cpu-4-single", "--backend", "tpu"});
  EXPECT_EQ(b.code, 2);
  EXPECT_TRUE(Has(b.err, "unknown backend 'tpu'"));
  const auto c = RunCli({"validate-sim", "--executor", "--plans", "cpu-4-single", "--calibration", "nosuch"});
  EXPECT_EQ(c.code, 2);
  EXPECT_TRUE(Has(c.err, "unknown calibration 'nosuch'"));
}

}  // namespace
}  // namespace hetsim
