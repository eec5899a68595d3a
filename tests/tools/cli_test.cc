// The command line's answers to bad input: unknown commands, flags and kinds get a suggestion, bad
// files name the file and key, and every such error exits non-zero (moved here from tests/models so that
// the models/ tests do not link the CLI).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "tests/common/text_checks.h"
#include "tests/tools/cli_run.h"
#include "tools/hetsim/cli.h"

namespace hetsim {
namespace {

using testing_cli::RunCli;
using testing_cli::WriteTemp;
using testing_util::BadFile;
using testing_util::EveryLineNames;
using testing_util::Has;
using testing_util::Lines;

TEST(BadSpecKind, ValidateWithoutKindNamesFileAndKey) {
  const std::string file = BadFile("missing_kind.yaml");
  const auto r = RunCli({"validate", file});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(Has(r.err, file + ": missing top-level key 'kind'"));
  EXPECT_TRUE(Has(r.err, "cluster, model, training, plan, profile"));
}


// Issue 31's acceptance: no bundled plan that mirrors a published run is flagged out of memory. Every plan
// file under experiments/ and the catalog validates without an out-of-memory line, except HexiScale §3.1's
// Megatron "plan 3", a hypothetical plan the paper discusses without memory (correct to flag), and
// torchtitan's Llama 2 70B at batch 2 with op-level checkpointing, a run its page reports out of memory
// (test ValidateSim.TheBundledTorchtitanRunsFitWhereTheyTrained checks it is flagged).
TEST(BundledPlanFiles, NoPlanThatMirrorsAPublishedRunIsFlaggedOutOfMemory) {
  namespace fs = std::filesystem;
  int checked = 0;
  for (const char* root : {"experiments", "models/catalog/plans"}) {
    for (const auto& e : fs::recursive_directory_iterator(std::string(HETSIM_SOURCE_DIR) + "/" + root)) {
      if (!e.is_regular_file() || e.path().extension() != ".yaml") continue;
      std::ifstream in(e.path());
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find("\nkind: plan\n") == std::string::npos && text.str().rfind("kind: plan\n", 0) != 0) continue;
      if (e.path().filename() == "megatron-plan3.yaml" || e.path().filename() == "llama2-70b-b2-op_selective.yaml") {
        continue;
      }
      const auto r = RunCli({"validate", e.path().string()});
      ++checked;
      EXPECT_FALSE(Has(r.out + r.err, ") but has ")) << e.path() << ": " << r.err.substr(0, 400);
      EXPECT_FALSE(Has(r.out + r.err, "OUT OF MEMORY")) << e.path();
    }
  }
  EXPECT_GE(checked, 40);
}

TEST(BadSpecKind, ValidateWithUnknownKindSuggests) {
  const std::string file = BadFile("unknown_kind.yaml");
  const auto r = RunCli({"validate", file});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(Has(r.err, file + ":2:"));
  EXPECT_TRUE(Has(r.err, "kind: unknown kind 'clustr'"));
  EXPECT_TRUE(Has(r.err, "did you mean 'cluster'"));
}


// For death tests: 0 when `hetsim validate FILE` fails (exit 1) with `expected` on stderr.
int ValidateInChild(const std::string& file, const std::string& expected) {
  const auto r = RunCli({"validate", file});
  return r.code == 1 && r.err.find(expected) != std::string::npos ? 0 : 3;
}

// Interleaved 1F1B divides the micro-batch count by the stage count: a pipeline without stages must be
// an error, not a division by zero. Run in a child process so that a crash fails only this test.
TEST(BadPlanDeathTest, InterleavedScheduleWithoutStagesDoesNotCrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string file = BadFile("plan_interleaved_no_stages.yaml");
  EXPECT_EXIT(std::_Exit(ValidateInChild(file, file + ": pipelines[0].stages: a pipeline needs at least one stage")),
              testing::ExitedWithCode(0), "");
}


// ---- command line --------------------------------------------------------------------------------

TEST(BadCli, UnknownSubcommandSuggests) {
  const auto r = RunCli({"valdate", "x.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "unknown command 'valdate'; did you mean 'validate'?"));
  EXPECT_TRUE(r.out.empty());
}

TEST(BadCli, UnknownFlagSuggests) {
  const auto r = RunCli({"describe", "--clustr", "x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "unknown flag '--clustr'; did you mean '--cluster'?"));
}

TEST(BadCli, ListWithMisspelledKindSuggests) {
  const auto r = RunCli({"list", "clustres"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.err, "unknown kind 'clustres'; did you mean 'clusters'?"));
}

TEST(BadCli, ValidateNonexistentPathNamesIt) {
  const std::string path = BadFile("no-such-dir/no-such-file.yaml");
  const auto r = RunCli({"validate", path});
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(Has(r.err, path));
  EXPECT_TRUE(Has(r.err, "no such file"));
}

TEST(BadCli, ValidatePlanPrintsEveryError) {
  const std::string file = BadFile("plan_two_errors.yaml");
  const auto r = RunCli({"validate", file});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, "pipelines[0].stages[1].devices[0]"));
  EXPECT_TRUE(Has(r.err, "pipelines[0].stages[2].layer_begin"));
  EXPECT_TRUE(EveryLineNames(r.err, file));
}

TEST(BadCli, BadFlagValuesAreUsageErrors) {
  const auto not_a_number = RunCli({"describe", "--model", "llama2-7b", "--global-batch", "abc"});
  EXPECT_EQ(not_a_number.code, 2);
  EXPECT_TRUE(Has(not_a_number.err, "--global-batch"));
  const auto bad_dtype = RunCli({"describe", "--model", "llama2-7b", "--dtype", "bf61"});
  EXPECT_NE(bad_dtype.code, 0);
  EXPECT_TRUE(Has(bad_dtype.err, "--dtype: unknown value 'bf61'"));
  EXPECT_TRUE(Has(bad_dtype.err, "did you mean 'bf16'"));
  const auto missing_value = RunCli({"describe", "--cluster"});
  EXPECT_EQ(missing_value.code, 2);
  EXPECT_TRUE(Has(missing_value.err, "--cluster"));
}

// `--global-batch -1` must not silently become 4294967295 sequences.
TEST(BadCli, NegativeGlobalBatchIsRejected) {
  const auto r = RunCli({"describe", "--model", "llama2-7b", "--global-batch", "-1"});
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.err, "--global-batch"));
}



TEST(Calibrate, RefitsTheBundledA100CollectivesFromTheirData) {
  // calibration/data/a100-80gb holds the nccl-tests curve the bundled a100-80gb calibration was fitted on:
  // refitting it gives the file's value (0.7057 of NVLink), and what is written loads as a calibration.
  const std::string out = testing::TempDir() + "a100-refit.yaml";
  const auto r = RunCli({"calibrate", "--from-data", std::string(HETSIM_SOURCE_DIR) + "/calibration/data/a100-80gb",
                         "--gpu", "a100-80gb", "--name", "refit", "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "all-reduce: bus bandwidth 0.706 of the link's"));
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(Has(text.str(), "collective_efficiency: 0.7057"));
  EXPECT_TRUE(Has(text.str(), "command: hetsim calibrate --gpu a100-80gb --from-data"));
  const auto v = RunCli({"validate", out});
  EXPECT_EQ(v.code, 0) << v.err;
}

TEST(Calibrate, RefitsTheA100InNodeAllReducesPerGroupSize) {
  // calibration/data/a100-vtrain-nccl holds nccl-tests all-reduces on 2-8 GPUs of one of vTrain's A100 nodes;
  // their bus bandwidths differ (about 188 GB/s on 2 GPUs, 222 on 8), so each group size gets its own latency
  // and bus bandwidth, and the values are those the bundled default calibration holds for the A100's 2, 4 and 8 GPUs.
  const std::string out = testing::TempDir() + "a100-nccl-refit.yaml";
  const std::string data = std::string(HETSIM_SOURCE_DIR) + "/calibration/data/a100-vtrain-nccl";
  const auto r = RunCli({"calibrate", "--from-data", data, "--gpu", "a100-80gb", "--name", "nccl", "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "all-reduce per group size")) << r.out;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  std::ifstream bundled_in(std::string(HETSIM_SOURCE_DIR) + "/models/catalog/calibrations/default.yaml");
  std::stringstream bundled;
  bundled << bundled_in.rdbuf();
  for (const auto& [g, lat, bw] : std::vector<std::tuple<int, std::string, std::string>>{
           {2, "40.69", "187.6"}, {4, "47.69", "211.5"}, {8, "70.65", "222.5"}}) {
    EXPECT_TRUE(Has(text.str(), "group_size: " + std::to_string(g) + "\n        latency_us: " + lat +
                                    "\n        bus_bandwidth_gbyte_s: " + bw))
        << g << "\n" << text.str();
    EXPECT_TRUE(Has(bundled.str(), "{group_size: " + std::to_string(g) + ", latency_us: " + lat +
                                       ", bus_bandwidth_gbyte_s: " + bw + "}"))
        << g;
  }
  const auto v = RunCli({"validate", out});
  EXPECT_EQ(v.code, 0) << v.err;
}

TEST(Calibrate, BadInputIsAClearError) {
  const auto a = RunCli({"calibrate", "--backend", "tpu"});
  EXPECT_EQ(a.code, 2);
  EXPECT_TRUE(Has(a.err, "--backend: unknown backend 'tpu' (expected cpu or cuda)"));
  const auto b = RunCli({"calibrate", "--from-data", testing::TempDir() + "no-such-dir"});
  EXPECT_EQ(b.code, 1);
  EXPECT_TRUE(Has(b.err, "none of kernels.csv, collectives.csv or network.csv is there"));
  const auto c = RunCli({"calibrate", "--gpu", "h1000"});
  EXPECT_EQ(c.code, 2);
  EXPECT_TRUE(Has(c.err, "--gpu:"));
  const std::string dir = testing::TempDir() + "bad-cal-data";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  { std::ofstream(dir + "/collectives.csv") << "op,group_size,bytes,median_s\np2p,2,1024,x\n"; }
  const auto d = RunCli({"calibrate", "--from-data", dir});
  EXPECT_EQ(d.code, 1);
  EXPECT_TRUE(Has(d.err, dir + "/collectives.csv:2: column median_s: 'x' is not a number"));
  const std::string net = testing::TempDir() + "bad-net-data";
  ASSERT_EQ(std::system(("mkdir -p " + net).c_str()), 0);
  { std::ofstream(net + "/network.csv") << "nodes,gpus_per_node,nic,nic_gbps,bytes,time_us\n4,8,omnipath,200,1024,50\n"; }
  const auto e = RunCli({"calibrate", "--from-data", net});
  EXPECT_EQ(e.code, 1);
  EXPECT_TRUE(Has(e.err, net + "/network.csv:2: column nic: 'omnipath' (expected infiniband, roce or ethernet)")) << e.err;
  { std::ofstream(net + "/network.csv") << "nodes,gpus_per_node,nic,nic_gbps,bytes,time_us\n1,8,roce,200,1024,50\n"; }
  const auto f = RunCli({"calibrate", "--from-data", net});
  EXPECT_EQ(f.code, 1);
  EXPECT_TRUE(Has(f.err, net + "/network.csv:2: nodes must be a whole number >= 2")) << f.err;
  // A newline in a path would go into the calibration file's description: refused before anything runs.
  const auto g = RunCli({"calibrate", "--from-data", net + "\nkind: injected"});
  EXPECT_EQ(g.code, 2);
  EXPECT_TRUE(Has(g.err, "--from-data: the path holds a control character")) << g.err;
}

TEST(Calibrate, RefitsANetworkFromCollectivesMeasuredAcrossNodes) {
  // calibration/data/network/b200-p6-efa: 4 nodes of 8 B200 over EFA (modelled as RDMA, `roce`). Only
  // network.csv there: the file written has a network entry for roce and no GPU entry, and loads.
  const std::string out = testing::TempDir() + "efa.yaml";
  const auto r = RunCli({"calibrate", "--from-data",
                         std::string(HETSIM_SOURCE_DIR) + "/calibration/data/network/b200-p6-efa", "--name", "efa",
                         "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "network: bus efficiency")) << r.out;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(Has(text.str(), "nics: [roce]") || Has(text.str(), "- roce")) << text.str();
  EXPECT_FALSE(Has(text.str(), "gpus:")) << text.str();
  const auto v = RunCli({"validate", out});
  EXPECT_EQ(v.code, 0) << v.err;
}

// The bundled GH200 TF32 entry of `default` is what `--from-profiles` gives on the two Sailor profiles
// (calibration/data/profile-fits/gh200.txt): refitting reproduces it, and the file written loads.
TEST(Calibrate, FromProfilesRefitsTheBundledGh200Entry) {
  const std::string out = testing::TempDir() + "gh200-refit.yaml";
  const auto r = RunCli({"calibrate", "--from-profiles", "sailor-opt-30b-gh200,sailor-opt-350m-gh200", "--gpu", "gh200",
                         "--dtype", "tf32", "--attention", "standard", "--check-profiles", "sailor-llama3-8b-gh200",
                         "-o", out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "GEMM efficiency 0.5174 in tf32, memory efficiency 0.4102")) << r.out;
  EXPECT_TRUE(Has(r.out, "held out, sailor-llama3-8b-gh200 (not fitted on)")) << r.out;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(Has(text.str(), "dtype: tf32")) << text.str();
  EXPECT_TRUE(Has(text.str(), "gemm_efficiency: 0.5174")) << text.str();
  EXPECT_EQ(RunCli({"validate", out}).code, 0);
  // Bad input: no dtype, a profile of another GPU type, an unknown profile.
  const auto a = RunCli({"calibrate", "--from-profiles", "sailor-opt-30b-gh200", "--gpu", "gh200"});
  EXPECT_EQ(a.code, 2);
  EXPECT_TRUE(Has(a.err, "--from-profiles needs --dtype")) << a.err;
  const auto b = RunCli({"calibrate", "--from-profiles", "sailor-opt-30b-v100", "--gpu", "gh200", "--dtype", "tf32"});
  EXPECT_EQ(b.code, 2);
  EXPECT_TRUE(Has(b.err, "sailor-opt-30b-v100: gpu: the profile is for")) << b.err;
  const auto c = RunCli({"calibrate", "--from-profiles", "no-such-profile", "--gpu", "gh200", "--dtype", "tf32"});
  EXPECT_EQ(c.code, 2);
  EXPECT_TRUE(Has(c.err, "--from-profiles:")) << c.err;
}

// The bundled `sailor-mit` calibration's RTX 2080 collectives are what `--fit-tp-collectives` gives on
// Sailor's RTX 2080 profile (calibration/data/profile-fits/rtx2080-collectives.txt): refitting reproduces
// them, the file written loads, and the latency-only fit cannot be asked for at the same time.
TEST(Calibrate, FitTpCollectivesRefitsTheBundledSailorMitEntry) {
  const std::string out = testing::TempDir() + "rtx2080-collectives.yaml";
  const std::vector<std::string> args = {"calibrate", "--from-profiles", "sailor-opt-350m-rtx2080", "--gpu", "rtx2080",
                                         "--dtype", "fp32", "--attention", "standard", "--base", "megatron-deepspeed",
                                         "--fit-tp-collectives", "-o", out};
  const auto r = RunCli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "all-reduce among 8 GPUs: latency 0.0 us, bus bandwidth 5.375 GB/s")) << r.out;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(Has(text.str(), "bus_bandwidth_gbyte_s: 5.375")) << text.str();
  EXPECT_TRUE(Has(text.str(), "--fit-tp-collectives")) << text.str();  // the command, in the provenance
  EXPECT_EQ(RunCli({"validate", out}).code, 0);
  const models::KernelParams& bundled =
      models::KernelParamsFor(*models::GpuCatalog::Bundled().Find("rtx2080").value(), "sailor-mit");
  EXPECT_NEAR(bundled.CollectiveBusBandwidth(8), 5.375e9, 1e3);
  std::vector<std::string> both = args;
  both.push_back("--fit-tp-latency");
  const auto refused = RunCli(both);
  EXPECT_EQ(refused.code, 2);
  EXPECT_TRUE(Has(refused.err, "--fit-tp-latency and --fit-tp-collectives: name one")) << refused.err;
}

// A planner's name means its plan: by default `hetsim plan --planner hetu` returns Hetu's own pick, nothing
// simulated or polished. `hetsim plan --polish N` (opt-in) simulates the pick once and improves it on the twin,
// saying that it goes beyond the paper: hetu's two four-stage pipelines on hexiscale-mini-setting1 (0.7829 s
// simulated) lose a micro-batch-count imbalance within three simulations. Bad values are refused with the
// flag named.
TEST(Plan, ANamedPlannerReturnsItsOwnPickAndPolishingIsOptIn) {
  const std::vector<std::string> base = {"plan", "--planner", "hetu", "--cluster", "hexiscale-mini-setting1", "--model",
                                         "gpt3-1.3b", "--global-batch", "32", "--seq-len", "1024", "--dtype", "fp16"};
  const auto by_default = RunCli(base);
  ASSERT_EQ(by_default.code, 0) << by_default.err;
  EXPECT_FALSE(Has(by_default.out, "polish (")) << by_default.out;
  EXPECT_FALSE(Has(by_default.out, "twin check")) << by_default.out;
  auto args = base;
  args.insert(args.end(), {"--polish", "3"});
  const auto r = RunCli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "twin check (--refine 1)")) << r.out;
  EXPECT_TRUE(Has(r.out, "polish (--polish 3, at most 120 s; beyond the planner's paper): 3 changes simulated")) << r.out;
  EXPECT_TRUE(Has(r.out, "faster than the checked choice")) << r.out;
  auto zero = base;
  zero.insert(zero.end(), {"--polish", "3", "--refine", "0"});
  const auto z = RunCli(zero);
  EXPECT_EQ(z.code, 2);
  EXPECT_TRUE(Has(z.err, "--polish needs the twin check")) << z.err;
  auto negative = base;
  negative.insert(negative.end(), {"--polish", "-1"});
  const auto n = RunCli(negative);
  EXPECT_EQ(n.code, 2);
  EXPECT_TRUE(Has(n.err, "--polish: expected 0..100000")) << n.err;
}

TEST(Replay, PrintsEveryPolicyAndWritesTheReport) {
  const std::string report = (std::filesystem::temp_directory_path() / "hetsim-cli-replay.json").string();
  auto r = RunCli({"replay", "--cluster", "hetu-h20x32", "--model", "llama-tiny", "--planner", "megatron", "--trace",
                   "llama3", "--days", "10", "--rate-scale", "20", "--policy", "checkpoint-restart", "--policy",
                   "hot-spares", "--fidelity", "fast", "--report-out", report});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "policy checkpoint-restart:")) << r.out;
  EXPECT_TRUE(Has(r.out, "policy hot-spares:")) << r.out;
  EXPECT_TRUE(Has(r.out, "ETTR")) << r.out;
  std::ifstream in(report);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(Has(text.str(), "\"kind\": \"replay_report\"")) << text.str().substr(0, 200);
}

TEST(Replay, BadInputNamesTheFlagOrFieldAndTheFix) {
  auto missing = RunCli({"replay", "--cluster", "hetu-h20x32", "--model", "llama-tiny", "--planner", "megatron"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(Has(missing.err, "--trace")) << missing.err;
  auto policy = RunCli({"replay", "--cluster", "hetu-h20x32", "--model", "llama-tiny", "--planner", "megatron",
                        "--trace", "llama3", "--policy", "elastc"});
  EXPECT_EQ(policy.code, 2);
  EXPECT_TRUE(Has(policy.err, "unknown recovery policy 'elastc'")) << policy.err;
  EXPECT_TRUE(Has(policy.err, "elastic")) << policy.err;
  auto interval = RunCli({"replay", "--cluster", "hetu-h20x32", "--model", "llama-tiny", "--planner", "megatron",
                          "--trace", "llama3", "--checkpoint-interval", "hourly"});
  EXPECT_EQ(interval.code, 2);
  EXPECT_TRUE(Has(interval.err, "--checkpoint-interval")) << interval.err;
  // A trace recorded on another cluster.
  const std::string trace = WriteTemp("other-cluster.trace.yaml",
                                      "kind: trace\nname: t\ncluster: hetu-h20x16\nduration_s: 100\nevents: []\n");
  auto other = RunCli({"replay", "--cluster", "hetu-h20x32", "--model", "llama-tiny", "--planner", "megatron",
                       "--trace", trace});
  EXPECT_EQ(other.code, 1);
  EXPECT_TRUE(Has(other.err, "the trace names cluster hetu-h20x16")) << other.err;
  // A cluster without an object store cannot take checkpoint-restart's checkpoints.
  auto store = RunCli({"replay", "--cluster", "metis-uniform-t4-v100-4", "--model", "llama-tiny", "--planner",
                       "megatron", "--dtype", "fp16", "--trace", "llama3", "--days", "1", "--fidelity", "fast"});
  EXPECT_EQ(store.code, 1);
  EXPECT_TRUE(Has(store.err, "no object store")) << store.err;
  EXPECT_TRUE(Has(store.err, "kind: object_store")) << store.err;
}


TEST(Simulate, OutOfMemoryPlansFailUnlessAllowed) {
  // Llama-2 70B (80 blocks, 82 plan layers) on one 16 GB V100 cannot fit; the numbers are printed and the exit status says so.
  const std::string plan = WriteTemp("oom-plan.yaml", "kind: plan\npipelines: [{micro_batch_size: 1, num_micro_batches: 4, "
                                                      "stages: [{devices: [2], layer_end: 82}]}]\n");
  const std::vector<std::string> args = {"simulate", "--cluster", "metis-uniform-t4-v100-4", "--model", "llama2-70b",
                                         "--plan", plan, "--dtype", "fp16", "--global-batch", "4", "--seq-len",
                                         "512", "--fidelity", "fast"};
  auto r = RunCli(args);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "simulated one iteration")) << r.out;  // the numbers are still shown
  EXPECT_TRUE(Has(r.err, "does not fit in memory") && Has(r.err, "--allow-oom")) << r.err;
  auto allowed = args;
  allowed.push_back("--allow-oom");
  EXPECT_EQ(RunCli(allowed).code, 0);
}

TEST(Simulate, SaysWhatNcclRunsBetweenNodes) {
  // HexiScale's case-study plan 3 syncs one stage's gradients between two machines over Ethernet: a DP
  // all-reduce of 2 ranks on 2 nodes. NCCL's ring Simple there: base 8.4 us + 2 inter-node steps at the
  // tree's NET latency (one rank per node) of 14 us, times the ring plateau 1.4 = 50.96 us a call.
  const auto r = RunCli({"simulate", "--plan",
                         std::string(HETSIM_SOURCE_DIR) + "/experiments/hexiscale/case_study/megatron-plan3.yaml",
                         "--allow-oom", "--fidelity", "fast"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Has(r.out, "between nodes   dp all_reduce of 2 ranks on 2 nodes")) << r.out;
  EXPECT_TRUE(Has(r.out, "NCCL ring/Simple, 51 us")) << r.out;
  EXPECT_TRUE(Has(r.out, "(ethernet)")) << r.out;
}

TEST(Simulate, UsesThePlansOwnCalibrationUnlessTheCommandLineNamesOne) {
  // Sailor's plans name their software stack's calibration (megatron-deepspeed): simulate uses it, says so
  // in the compute basis, and --calibration wins over it; a plan naming no bundled calibration and no file
  // is an error naming the plan and the field.
  const std::string dir = std::string(HETSIM_SOURCE_DIR) + "/experiments/validation/sailor_gh200_opt350/plans/";
  const auto own = RunCli({"simulate", "--plan", dir + "n1-d1-m4-g1.yaml"});
  ASSERT_EQ(own.code, 0) << own.err;
  EXPECT_TRUE(Has(own.out, "gh200: calibration megatron-deepspeed")) << own.out;
  const auto flag = RunCli({"simulate", "--plan", dir + "n1-d1-m4-g1.yaml", "--calibration", "default"});
  ASSERT_EQ(flag.code, 0) << flag.err;
  EXPECT_TRUE(Has(flag.out, "gh200: calibration default")) << flag.out;
  std::ifstream in(dir + "n1-d1-m4-g1.yaml");
  std::stringstream text;
  text << in.rdbuf();
  std::string yaml = text.str();
  const std::string cluster_ref = "cluster: ../clusters/", stack = "calibration: megatron-deepspeed";
  yaml.replace(yaml.find(cluster_ref), cluster_ref.size(), "cluster: " + dir + "../clusters/");
  yaml.replace(yaml.find(stack), stack.size(), "calibration: megatron");
  const auto bad = RunCli({"simulate", "--plan", WriteTemp("bad-stack.yaml", yaml)});
  EXPECT_EQ(bad.code, 1);  // an invalid plan file, as any other field of it
  EXPECT_TRUE(Has(bad.err, "bad-stack.yaml: calibration:")) << bad.err;
}

TEST(Simulate, SaysWhetherThePlanWasFolded) {
  // cpu-4-dp4: four identical DP replicas of one device each, so one device is played for all four;
  // with --no-fold every device is, and the summary says why; cpu-4-pp2's two stages do different work.
  auto dp4 = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32"});
  ASSERT_EQ(dp4.code, 0) << dp4.out << dp4.err;
  EXPECT_TRUE(Has(dp4.out, "folded          1 of 4 devices played")) << dp4.out;
  auto all = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32", "--no-fold"});
  ASSERT_EQ(all.code, 0) << all.out << all.err;
  EXPECT_TRUE(Has(all.out, "not folded      folding off")) << all.out;
  auto pp2 = RunCli({"simulate", "--plan", "cpu-4-pp2", "--seq-len", "32"});
  ASSERT_EQ(pp2.code, 0) << pp2.out << pp2.err;
  EXPECT_TRUE(Has(pp2.out, "not folded      no two devices do the same work")) << pp2.out;
}

TEST(Simulate, SharedCoresPoolTheComputeAndRefuseImpossibleCounts) {
  // cpu-4-dp4's four replicas through a pool of two cores: two compute, then the other two, so the iteration
  // takes about twice as long as alone (the gradient sync, a few percent, is not doubled), and no device is
  // folded.
  // A count of 0 or one that wrapped from a negative number is refused with the flag named.
  const auto alone = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32"});
  const auto shared = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32", "--shared-cores", "2"});
  ASSERT_EQ(alone.code, 0) << alone.err;
  ASSERT_EQ(shared.code, 0) << shared.err;
  EXPECT_TRUE(Has(shared.out, "not folded")) << shared.out;
  const auto seconds = [](const std::string& out) {
    const size_t at = out.find("iteration time");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 14));
  };
  const double ratio = seconds(shared.out) / seconds(alone.out);
  EXPECT_GT(ratio, 1.8) << shared.out << alone.out;
  EXPECT_LT(ratio, 2.05) << shared.out << alone.out;
  for (const char* bad : {"0", "-1"}) {
    const auto r = RunCli({"simulate", "--plan", "cpu-4-dp4", "--shared-cores", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_TRUE(Has(r.err, "--shared-cores")) << r.err;
  }
}

TEST(Simulate, TimelineDevicesChoosesTheRowsAndNamesBadIds) {
  // cpu-4-dp4 uses devices 0-3. "1,3" keeps two of them (the note says so, the file names only those two);
  // "all" keeps all four without a note; ids outside the plan and malformed ranges are errors naming the flag.
  const std::string t = testing::TempDir() + "t.json";
  auto two = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32", "--timeline-out", t, "--timeline-devices",
                     "1,3"});
  ASSERT_EQ(two.code, 0) << two.out << two.err;
  EXPECT_TRUE(Has(two.out, "; 2 of 4 devices (those asked for; --timeline-devices all for every one)")) << two.out;
  std::stringstream json;
  json << std::ifstream(t).rdbuf();
  EXPECT_TRUE(Has(json.str(), "\"GPU 1 (")) << json.str().substr(0, 400);
  EXPECT_TRUE(Has(json.str(), "\"GPU 3 ("));
  EXPECT_FALSE(Has(json.str(), "\"GPU 0 ("));
  EXPECT_FALSE(Has(json.str(), "\"GPU 2 ("));
  auto all = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32", "--timeline-out", t, "--timeline-devices",
                     "all"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_TRUE(Has(all.out, "(open in https://ui.perfetto.dev)\n")) << all.out;
  auto outside = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32", "--timeline-out", t,
                         "--timeline-devices", "2-5"});
  EXPECT_EQ(outside.code, 2);
  EXPECT_TRUE(Has(outside.err, "--timeline-devices: device 4 is not used by the plan (it uses 4 devices, ids 0 to 3"))
      << outside.err;
  auto bad = RunCli({"simulate", "--plan", "cpu-4-dp4", "--seq-len", "32", "--timeline-out", t, "--timeline-devices",
                     "3-1"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(Has(bad.err, "--timeline-devices: '3-1' is not a device id or range (expected auto, all, stages")) << bad.err;
}

TEST(Simulate, AnUnwritableOutputFailsBeforeTheWork) {
  auto r = RunCli({"simulate", "--plan", "llama3-405b-16384", "--fidelity", "fast", "--report-out",
                   "/nonexistent-folder/r.json"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.err, "--report-out /nonexistent-folder/r.json: folder /nonexistent-folder does not exist")) << r.err;
  EXPECT_FALSE(Has(r.out, "simulated")) << r.out;  // refused before the 16,384-GPU simulation
}

}  // namespace
}  // namespace hetsim

namespace hetsim::cli {
namespace {

// `hetsim plan --calibration` plans with the calibrated compute model (a slower GEMM makes the analytic
// estimate longer) and names a calibration it cannot find.
TEST(PlanCalibration, ChangesTheEstimateAndNamesBadOnes) {
  const std::vector<std::string> base = {"plan", "--planner", "hethub", "--cluster", "hethub-amd-accel2-16",
                                         "--model", "llama2-7b", "--global-batch", "64", "--seq-len", "1024",
                                         "--dtype", "fp16"};
  auto with = base;
  with.insert(with.end(), {"--calibration", std::string(HETSIM_SOURCE_DIR) + "/experiments/hethub/calibration-pair2.yaml"});
  const auto plain = RunCli(base);
  const auto calibrated = RunCli(with);
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(calibrated.code, 0) << calibrated.err;
  auto iteration = [](const std::string& out) {
    const auto at = out.find("estimate (analytic model): iteration ");
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 37));
  };
  // Pair 2's fit slows both stand-ins to a quarter or less of their default speed.
  EXPECT_GT(iteration(calibrated.out), 2 * iteration(plain.out)) << calibrated.out;
  auto bad = base;
  bad.insert(bad.end(), {"--calibration", "no-such-calibration"});
  const auto r = RunCli(bad);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("no-such-calibration"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hetsim::cli

namespace hetsim::cli {
namespace {

// `describe --plan --hspmd` prints the plan's HSPMD annotations: Table 7's C2 has a pipeline of TP4 groups and
// one ending in TP2 and TP1 groups, so the last layers' weights are split 4 ways in one subgroup and 2 ways
// (then 1) in the other, and the gradients meet by SplitAllReduce across the two (Hetu v2 §8).
TEST(DescribeHspmd, PrintsTheUnionsAndTheSplitAllReduce) {
  const auto r = RunCli({"describe", "--plan", std::string(HETSIM_SOURCE_DIR) + "/experiments/hetu/elastic/hetu-c2.yaml",
                         "--hspmd"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("DS[{S0:4} | {S0:2}] HDim -1 HSize 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradient sync: SplitAR"), std::string::npos) << r.out;
}

// `describe --gpu` prints the catalog row and the compute basis per dtype: the B200's dense peaks (HGX B200
// totals with sparsity, 72 PF FP8 over 8 GPUs, halved: 4.5 PF; FP4 72 PF dense over 8), its block-scaled
// formats, its source, and its basis (ml-engineering's sustained GEMM measurements); the H100's BF16 rests
// on the bench's measurement; an RTX PRO 6000 has none.
TEST(DescribeGpu, PrintsPeaksSourceAndComputeBasis) {
  const auto g = RunCli({"describe", "--gpu", "rtx-pro-6000"});
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_NE(g.out.find("NO MEASURED BASIS"), std::string::npos) << g.out;
  const auto r = RunCli({"describe", "--gpu", "B200"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("GPU type b200 (nvidia, HGX B200 180GB)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp8        4500.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp4        9000.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nvfp4 (9000.0)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("180 GiB at 7700 GB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nvswitch, 900.0 GB/s per GPU one direction"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1000 W"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("source          NVIDIA HGX B200 specifications"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compute basis   bf16: calibration default"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("compute basis   fp8: calibration default"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("B200 GEMMs at their sustained rate"), std::string::npos) << r.out;

  const auto h = RunCli({"describe", "--gpu", "h100"});
  ASSERT_EQ(h.code, 0) << h.err;
  const size_t bf16 = h.out.find("compute basis   bf16:");
  ASSERT_NE(bf16, std::string::npos) << h.out;
  const std::string line = h.out.substr(bf16, h.out.find('\n', bf16) - bf16);
  EXPECT_EQ(line.find("NO MEASURED BASIS"), std::string::npos) << line;

  const auto typo = RunCli({"describe", "--gpu", "b200x"});
  EXPECT_NE(typo.code, 0);
  EXPECT_NE(typo.err.find("--gpu: unknown GPU type 'b200x'; did you mean 'b200'?"), std::string::npos) << typo.err;
  const auto both = RunCli({"describe", "--gpu", "b200", "--model", "llama2-7b"});
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--gpu describes a catalog GPU type on its own"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace hetsim::cli

namespace hetsim::cli {
namespace {

// The `hetu` recovery policy re-plans with the `hetu` planner (ZeRO off) unless told otherwise: after GPU 31
// fails, the live cluster is 3 full H20 nodes and one with 7 GPUs, and the hetu planner uses all 31 GPUs
// (a 7-GPU node forms TP 4 + 2 + 1 groups), where Megatron-LM's uniform TP cannot; `--replan-planner`
// switches it (the configuration lines name the planner that made each plan).
TEST(ReplayHetu, ReplansWithTheHetuPlannerByDefault) {
  const std::string dir = std::string(HETSIM_SOURCE_DIR) + "/experiments/hetu/elastic/";
  const std::vector<std::string> base = {"replay", "--plan", dir + "hetu-c1.yaml", "--cluster", "hetu-h20x32", "--trace",
                                         dir + "homogeneous.trace.yaml", "--policy", "hetu", "--fidelity", "fast"};
  const auto r = RunCli(base);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("configuration hetu: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 node × 7 h20, 31 GPUs"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("configuration megatron"), std::string::npos) << r.out;
  auto with = base;
  with.insert(with.end(), {"--replan-planner", "megatron"});
  const auto m = RunCli(with);
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_NE(m.out.find("configuration megatron"), std::string::npos) << m.out;
}

}  // namespace
}  // namespace hetsim::cli
