// Plans that cannot run on their cluster and model (devices used twice or beyond the cluster, layers missing
// or covered twice, TP degrees and micro-batch splits that do not fit, plans out of memory, dtypes the GPUs
// lack, NVLS across nodes, bad interleaving): each rejected with a message that names the file, the key path
// and what was expected, several independent errors at once — and none may crash.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "models/cluster.h"
#include "models/gpu_catalog.h"
#include "models/plan.h"
#include "models/proto/plan.pb.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"
#include "tests/common/text_checks.h"
#include "tests/models/bad_input_helpers.h"

namespace hetsim::models {
namespace {

using bad_input::HasNot;
using testing_util::BadFile;
using testing_util::EveryLineNames;
using testing_util::Has;
using testing_util::Lines;

// ---- plans ---------------------------------------------------------------------------------------

// hexiscale-case-study: devices 0-2 a800 (80 GiB), 3-5 rtx4090, 6-7 rtx3090 (24 GiB).
// llama2-7b: 34 plan layers (0 embedding, 1..32 blocks, 33 head), 32 heads.
struct CaseStudy {
  Cluster cluster;
  TransformerModel model;
  proto::Training training;  // global batch 8, seq 1024, resolved
};

const CaseStudy& Study() {
  static const CaseStudy study = [] {
    auto c = LoadCluster("hexiscale-case-study");
    auto m = LoadModel("llama2-7b");
    HETSIM_CHECK(c.ok() && m.ok(), "bundled specs must load");
    proto::Training t;
    t.set_global_batch_size(8);
    t.set_seq_len(1024);
    auto rt = ResolveTraining(t, *m, "test training");
    HETSIM_CHECK(rt.ok(), rt.status().message());
    return CaseStudy{std::move(c).value(), std::move(m).value(), std::move(rt).value()};
  }();
  return study;
}

// One pipeline of micro-batch 2 × 4 micro-batches (= the global batch 8) with the given stages.
std::string OnePipeline(const std::string& stages, const std::string& top = "") {
  return "kind: plan\n" + top +
         "pipelines:\n"
         "  - micro_batch_size: 2\n"
         "    num_micro_batches: 4\n"
         "    stages:\n" +
         stages;
}

constexpr const char* kGoodStages =
    "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
    "      - {devices: [1], layer_begin: 12, layer_end: 23}\n"
    "      - {devices: [2], layer_begin: 23, layer_end: 34}\n";

// Parses the plan and validates it (structure only unless `memory`).
Status PlanStatus(const std::string& yaml, bool memory = false) {
  proto::Plan p;
  HETSIM_RETURN_IF_ERROR(ParseYaml(yaml, "plan.yaml", &p));
  const auto& s = Study();
  const PlanContext ctx{s.cluster, s.model, s.training};
  return memory ? ValidatePlan(p, ctx, "plan.yaml") : ValidatePlanStructure(p, ctx, "plan.yaml");
}

TEST(BadPlan, BaselinePlanIsValid) {
  const Status st = PlanStatus(OnePipeline(kGoodStages), /*memory=*/true);
  EXPECT_TRUE(st.ok()) << st.message();
}

// A plan built in code (the YAML schema stops at the same bound) with more micro-batches than the simulator
// plays: named with the fix; exactly kMaxMicroBatches is allowed.
TEST(BadPlan, MoreMicroBatchesThanTheBoundAreRefused) {
  proto::Plan p;
  ASSERT_TRUE(ParseYaml(OnePipeline(kGoodStages), "plan.yaml", &p).ok());
  const auto& s = Study();
  const PlanContext ctx{s.cluster, s.model, s.training};
  EXPECT_EQ(PipelineOverMicroBatchBound(p), -1);
  p.mutable_pipelines(0)->set_num_micro_batches(kMaxMicroBatches + 1);
  EXPECT_EQ(PipelineOverMicroBatchBound(p), 0);
  Status st = ValidatePlanStructure(p, ctx, "plan.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml: pipelines[0].num_micro_batches: 65537 micro-batches; at most 65536 are "
                                "simulated (lower the global batch or raise micro_batch_size)"))
      << st.message();
  p.mutable_pipelines(0)->set_num_micro_batches(kMaxMicroBatches);
  EXPECT_EQ(PipelineOverMicroBatchBound(p), -1);
  st = ValidatePlanStructure(p, ctx, "plan.yaml");  // still wrong: 131,072 sequences for a batch of 8
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(HasNot(st.message(), "at most 65536")) << st.message();
}

TEST(BadPlan, DeviceUsedTwiceNamesBothPlaces) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], tp_degree: 2, layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [2], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [1], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml: pipelines[0].stages[2].devices[0]: device 1 (a800:1) is already used by "
                                "pipelines[0].stages[0].devices[1]"));
  EXPECT_EQ(Lines(st.message()).size(), 1u) << st.message();
}

TEST(BadPlan, DeviceIndexBeyondCluster) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [8], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[2].devices[0]: device 8 does not exist; cluster "
                                "'hexiscale-case-study' has devices 0..7"));
}

TEST(BadPlan, MissingLayerBetweenStages) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 14, layer_end: 23}\n"
      "      - {devices: [2], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].layer_begin: is 14"));
  EXPECT_TRUE(Has(st.message(), "layers 12..13 would be missing"));
}

TEST(BadPlan, LayerCoveredTwice) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 10, layer_end: 23}\n"
      "      - {devices: [2], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].layer_begin: is 10 but the previous stage ends at 12"));
  EXPECT_TRUE(Has(st.message(), "covered twice"));
}

TEST(BadPlan, LastStageEndsBeforeTheModel) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [2], layer_begin: 23, layer_end: 33}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[2].layer_end: the last stage ends at 33"));
  EXPECT_TRUE(Has(st.message(), "model 'llama2-7b' has 34 layers"));
  EXPECT_TRUE(Has(st.message(), "it must end at 34"));
}

TEST(BadPlan, EmptyLayerRange) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [1], layer_begin: 12, layer_end: 12}\n"
      "      - {devices: [2], layer_begin: 12, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].layer_end: 12 must be greater than layer_begin 12"));
}

TEST(BadPlan, TpDegreeNotDividingHeads) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1, 2], tp_degree: 3, layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].tp_degree: 3 does not divide the model's 32 attention heads"));
  EXPECT_EQ(Lines(st.message()).size(), 1u) << st.message();
}

TEST(BadPlan, TpDegreeNotDividingStageDevices) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1, 2], tp_degree: 2, layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].tp_degree: 2 does not divide the stage's 3 devices"));
}

TEST(BadPlan, MicroBatchSplitWithWrongNumberOfEntries) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], micro_batch_split: [2], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].micro_batch_split: has 1 entries but the stage has 2 DP "
                                "replicas"));
}

TEST(BadPlan, MicroBatchSplitNotSummingToMicroBatch) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], micro_batch_split: [1, 2], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].micro_batch_split: sums to 3 but the pipeline's "
                                "micro_batch_size is 2"));
}

TEST(BadPlan, MicroBatchSplitWithZeroEntry) {
  const Status st = PlanStatus(OnePipeline(
      "      - {devices: [0, 1], micro_batch_split: [2, 0], layer_begin: 0, layer_end: 12}\n"
      "      - {devices: [3], layer_begin: 12, layer_end: 23}\n"
      "      - {devices: [4], layer_begin: 23, layer_end: 34}\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[0].micro_batch_split[1]: every DP replica needs at least one"));
}

TEST(BadPlan, GlobalBatchMismatch) {
  std::string yaml = OnePipeline(kGoodStages);
  yaml.replace(yaml.find("num_micro_batches: 4"), 20, "num_micro_batches: 5");
  const Status st = PlanStatus(yaml);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml: pipelines: micro_batch_size × num_micro_batches summed over pipelines is "
                                "10 sequences but the global batch is 8"));
}

TEST(BadPlan, DoesNotFitInMemory) {
  auto cluster = LoadCluster("hexiscale-case-study");
  auto model = LoadModel("llama2-70b");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  t.set_seq_len(1024);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok()) << training.status().message();
  proto::Plan p;
  ASSERT_TRUE(ParseYaml(R"(
kind: plan
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [6], layer_begin: 0, layer_end: 82}
)",
                        "big.yaml", &p)
                  .ok());
  const PlanContext ctx{*cluster, *model, *training};
  EXPECT_TRUE(ValidatePlanStructure(p, ctx, "big.yaml").ok());
  const Status st = ValidatePlan(p, ctx, "big.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kInfeasible);
  EXPECT_TRUE(Has(st.message(), "big.yaml: pipelines[0].stages[0]: device 6 (rtx3090:0, rtx3090) needs"));
  EXPECT_TRUE(Has(st.message(), "GiB"));
  // RTX 3090: 24 GiB (catalog). Llama-2 70B has ~69e9 parameters; mixed-precision Adam keeps
  // 2 + 2 + 12 = 16 bytes each, ~1.1e12 bytes ≈ 1000 GiB before any activation.
  EXPECT_TRUE(Has(st.message(), "but has 24.0 GiB"));
  const auto at = st.message().find(" needs ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GT(std::stod(st.message().substr(at + 7)), 1000.0) << st.message();
}

TEST(BadPlan, Bf16OnGpusWithoutBf16SuggestsFp16) {
  auto cluster = LoadCluster("metis-uniform-t4-v100-4");  // devices 0-1 t4, 2-3 v100
  auto model = LoadModel("llama-tiny");                    // 6 plan layers, 8 heads
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  auto training = ResolveTraining(t, *model, "training");  // dtype defaults to bf16
  ASSERT_TRUE(training.ok());
  ASSERT_EQ(training->dtype(), proto::DTYPE_BF16);
  proto::Plan p;
  ASSERT_TRUE(ParseYaml(R"(
kind: plan
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 3}
      - {devices: [2], layer_begin: 3, layer_end: 6}
)",
                        "old.yaml", &p)
                  .ok());
  const PlanContext ctx{*cluster, *model, *training};
  const Status st = ValidatePlanStructure(p, ctx, "old.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "old.yaml: pipelines[0].stages[0].devices[0]: device 0 is a t4, which cannot train in bf16"));
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages[1].devices[0]: device 2 is a v100"));
  EXPECT_TRUE(Has(st.message(), "dtype: fp16"));
  // In fp16 the same plan is fine.
  proto::Training fp16 = *training;
  fp16.set_dtype(proto::DTYPE_FP16);
  const PlanContext ctx16{*cluster, *model, fp16};
  EXPECT_TRUE(ValidatePlanStructure(p, ctx16, "old.yaml").ok());
}

// CPU workers have neither BF16 nor FP16 units: the advice must not be "set dtype: fp16" when the
// training spec already says fp16.
TEST(BadPlan, Fp16OnCpuWorkersDoesNotSuggestFp16Again) {
  auto cluster = LoadCluster("cpu-4");
  auto model = LoadModel("llama-tiny");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  t.set_dtype(proto::DTYPE_FP16);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok());
  proto::Plan p;
  ASSERT_TRUE(ParseYaml("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], "
                        "layer_end: 6}]}]\n",
                        "cpu.yaml", &p)
                  .ok());
  const PlanContext ctx{*cluster, *model, *training};
  const Status st = ValidatePlanStructure(p, ctx, "cpu.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "cpu.yaml: pipelines[0].stages[0].devices[0]: device 0 is a cpu"));
  EXPECT_TRUE(HasNot(st.message(), "dtype: fp16")) << "the training spec is already fp16";
  EXPECT_TRUE(Has(st.message(), "fp32"));
}

// FP8 needs FP8 tensor cores (Hopper, Ada, MI300): an A100 gets the advice to train in bf16.
TEST(BadPlan, Fp8OnGpusWithoutFp8SuggestsBf16) {
  auto a100 = LoadCluster("autohet-nonuniform-1a100-4h20");  // device 0: an A100; 1-4: H20 (FP8)
  auto model = LoadModel("llama-tiny");
  ASSERT_TRUE(a100.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  t.set_dtype(proto::DTYPE_FP8);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok());
  proto::Plan p;
  ASSERT_TRUE(ParseYaml("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], "
                        "layer_end: 6}]}]\n",
                        "fp8.yaml", &p)
                  .ok());
  const Status st = ValidatePlanStructure(p, PlanContext{*a100, *model, *training}, "fp8.yaml");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "fp8.yaml: pipelines[0].stages[0].devices[0]: device 0 is a a100-80gb, which "
                                "cannot train in fp8; set the training spec's dtype: bf16"))
      << st.message();
  // TF32 it has.
  proto::Training tf32 = *training;
  tf32.set_dtype(proto::DTYPE_TF32);
  EXPECT_TRUE(ValidatePlanStructure(p, PlanContext{*a100, *model, tf32}, "fp8.yaml").ok());
  // An H20 trains in FP8 but has no MXFP8 tensor cores (Hopper): the MXFP8 recipe names the field and the fix.
  proto::Training mx = *training;
  mx.set_fp8_recipe(proto::FP8_RECIPE_MXFP8);
  ASSERT_TRUE(ParseYaml("pipelines: [{micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [1], "
                        "layer_end: 6}]}]\n",
                        "fp8.yaml", &p)
                  .ok());
  const Status mxs = ValidatePlanStructure(p, PlanContext{*a100, *model, mx}, "fp8.yaml");
  ASSERT_FALSE(mxs.ok());
  EXPECT_TRUE(Has(mxs.message(), "devices[0]: device 1: training.fp8_recipe: a h20 has no native mxfp8 tensor cores"))
      << mxs.message();
  mx.set_fp8_recipe(proto::FP8_RECIPE_CURRENT);
  EXPECT_TRUE(ValidatePlanStructure(p, PlanContext{*a100, *model, mx}, "fp8.yaml").ok());
}

// NVLS reduces inside an NVSwitch: a TP group across nodes, or NVLS for the gradient sync, is an error.
TEST(BadPlan, NvlsNeedsTpGroupsInsideOneNvswitchNode) {
  auto cluster = LoadCluster("autohet-nonuniform-1a100-4h20");  // node a100: device 0; node h20: 1-4
  auto model = LoadModel("llama-tiny");
  ASSERT_TRUE(cluster.ok() && model.ok());
  proto::Training t;
  t.set_global_batch_size(4);
  auto training = ResolveTraining(t, *model, "training");
  ASSERT_TRUE(training.ok());
  const PlanContext ctx{*cluster, *model, *training};
  const auto check = [&](const std::string& yaml) {
    proto::Plan p;
    EXPECT_TRUE(ParseYaml(yaml, "nvls.yaml", &p).ok());
    return ValidatePlanStructure(p, ctx, "nvls.yaml");
  };
  const std::string across = "comm: {tp_algorithm: nvls}\npipelines: [{micro_batch_size: 1, num_micro_batches: 4, "
                             "stages: [{devices: [0, 1], tp_degree: 2, layer_end: 6}]}]\n";
  const Status st = check(across);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "nvls.yaml: comm.tp_algorithm: nvls needs every TP group inside one NVSwitch node, "
                                "but pipelines[0].stages[0]'s TP group of devices[0..1] spans nodes"))
      << st.message();
  EXPECT_TRUE(Has(st.message(), "use tp_algorithm: ring"));
  // Inside the H20 node (NVSwitch) it is fine.
  EXPECT_TRUE(check("comm: {tp_algorithm: nvls}\npipelines: [{micro_batch_size: 1, num_micro_batches: 4, "
                    "stages: [{devices: [1, 2, 3, 4], tp_degree: 4, layer_end: 6}]}]\n")
                  .ok());
  const Status dp = check("comm: {dp_algorithm: nvls}\npipelines: [{micro_batch_size: 1, num_micro_batches: 4, "
                          "stages: [{devices: [1, 2], layer_end: 6}]}]\n");
  ASSERT_FALSE(dp.ok());
  EXPECT_TRUE(Has(dp.message(), "nvls.yaml: comm.dp_algorithm: nvls is modelled for TP all-reduces inside a node only"));
}

TEST(BadPlan, VirtualStagesWithoutInterleavedSchedule) {
  const Status st = PlanStatus(OnePipeline(kGoodStages, "virtual_stages: 2\n"));
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "plan.yaml: virtual_stages: only the interleaved_1f1b schedule uses virtual stages"));
  EXPECT_EQ(Lines(st.message()).size(), 1u) << st.message();
}

TEST(BadPlan, ParameterGatherOverlapNeedsZeroOneOrTwoAndTheOverlappedSync) {
  const auto check = [](const std::string& top) { return PlanStatus(OnePipeline(kGoodStages, top)); };
  const Status zero = check("zero_stage: 3\ncomm: {dp_overlap: true, param_gather_overlap: true}\n");
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(Has(zero.message(), "plan.yaml: comm.param_gather_overlap: overlaps ZeRO 1-2's parameter all-gathers "
                                  "after the step, but zero_stage is 3; set zero_stage: 1 or 2"));
  const Status sync = check("zero_stage: 1\ncomm: {param_gather_overlap: true}\n");
  ASSERT_FALSE(sync.ok());
  EXPECT_TRUE(Has(sync.message(), "plan.yaml: comm.param_gather_overlap: runs the all-gathers on the overlapped "
                                  "gradient sync's stream; set comm.dp_overlap: true"));
  EXPECT_EQ(Lines(sync.message()).size(), 1u) << sync.message();
  const Status offload = check("zero_stage: 2\noffload: optimizer\ncomm: {dp_overlap: true, param_gather_overlap: true}\n");
  ASSERT_FALSE(offload.ok());
  EXPECT_TRUE(Has(offload.message(), "plan.yaml: comm.param_gather_overlap: not lowered with CPU offload"));
  EXPECT_TRUE(check("zero_stage: 2\ncomm: {dp_overlap: true, param_gather_overlap: true}\n").ok());
}

TEST(BadPlan, InterleavedScheduleNeedsMicroBatchMultipleOfStages) {
  std::string yaml = OnePipeline(kGoodStages, "schedule: interleaved_1f1b\nvirtual_stages: 2\n");
  const Status st = PlanStatus(yaml);  // 4 micro-batches, 3 stages
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].num_micro_batches: interleaved 1F1B needs a multiple of the stage "
                                "count (3)"));
}

TEST(BadPlan, EmptyPipelines) {
  const Status empty_list = PlanStatus("kind: plan\npipelines: []\n");
  ASSERT_FALSE(empty_list.ok());
  EXPECT_TRUE(Has(empty_list.message(), "plan.yaml: pipelines: a plan needs at least one pipeline"));
  const Status absent = PlanStatus("kind: plan\nname: nothing\n");
  ASSERT_FALSE(absent.ok());
  EXPECT_TRUE(Has(absent.message(), "plan.yaml:1:1: missing required key 'pipelines'"));
}

TEST(BadPlan, EmptyStageListAndEmptyDeviceList) {
  const Status st = PlanStatus(R"(
kind: plan
pipelines:
  - {micro_batch_size: 2, num_micro_batches: 2, stages: []}
  - micro_batch_size: 2
    num_micro_batches: 2
    stages:
      - {devices: [], layer_begin: 0, layer_end: 34}
)");
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "pipelines[0].stages: a pipeline needs at least one stage"));
  EXPECT_TRUE(Has(st.message(), "pipelines[1].stages[0].devices: a stage needs at least one device"));
}

TEST(BadPlan, ReportsSeveralIndependentErrorsAtOnce) {
  const std::string file = BadFile("plan_two_errors.yaml");
  auto plan = LoadPlan(file);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const auto& s = Study();
  const PlanContext ctx{s.cluster, s.model, s.training};
  const Status st = ValidatePlan(*plan, ctx, file);
  ASSERT_FALSE(st.ok());
  // Two problems, two lines: device 0 in two stages, and layer 23 in none.
  const auto lines = Lines(st.message());
  ASSERT_EQ(lines.size(), 2u) << st.message();
  EXPECT_TRUE(Has(lines[0], "pipelines[0].stages[1].devices[0]: device 0 (a800:0) is already used by "
                            "pipelines[0].stages[0].devices[0]"));
  EXPECT_TRUE(Has(lines[1], "pipelines[0].stages[2].layer_begin: is 24 but the previous stage ends at 23; "
                            "layers 23..23 would be missing"));
  EXPECT_TRUE(EveryLineNames(st.message(), file));
}

}  // namespace
}  // namespace hetsim::models
