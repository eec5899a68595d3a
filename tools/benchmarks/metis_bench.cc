// bench_metis [FILTER]: the Metis planner's search time at 16, 32, 64 and 128 GPUs (the paper's §5.4 and
// Table 4: 0.1, 0.5, 1.7, 58.9 and 600 s for 4, 8, 16, 32 and 64 GPUs of T4 + V100 with GPT-3, var 0.5
// and maximum permutation length 10; hetsim's target: at most 10 s at 64 GPUs on 2 cores).
//
// Clusters: Metis Table 3's uniform T4 + V100 composition (4-GPU GCP nodes, half of them T4, 16 Gbps;
// `metis-uniform-t4-v100-32`) with the node counts scaled to the GPU count. Models: Table 2's GPT-3 per
// GPU count (16 → 6.7B, 32 → 15B) and 15B beyond (Table 2 stops at 32 GPUs); global batch 128, 1,024
// tokens, FP16 (the three GPU types have no BF16). Every case runs with 1 and 2 search threads, and on
// one thread with 3 runners-up asked.
// Prints one line per measurement, `name value unit`: the search's wall time and CPU time (all threads;
// on a shared machine the CPU time is the steadier figure), the candidate plans costed, the plan's
// analytic iteration time and its number of stages (and, with runners-up asked, how many came back).
//
// Then Metis at bench_planner_scaling's largest size (docs/planner-scaling.md): 4,096 GPUs, half H800 and
// half H20 (`hetu-h800x16-h20x32` scaled), Llama-2 70B, 4,096 tokens, 4 sequences per GPU, BF16, full
// recomputation; one thread, without and with 3 runners-up. Timed is the planner's MakePlan alone (the
// search): RunPlanner's analytic estimate of the chosen plan, which bench_planner_scaling includes, is
// not Metis's work.
//
// Then the anytime search at 240 GPUs (HexiScale Appendix B: `hexiscale-240`, Llama 30B, 2,048 tokens,
// global batch 256, full recomputation, BF16), whose complete search takes hours: one thread under
// `time_limit_s: 60`, the same measurements plus `cut` (1 when the limit stopped the search). Its plan
// depends on how much the machine gets done in 60 s.

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "models/training.h"
#include "planners/planner.h"
#include "tools/benchmarks/bench_util.h"

namespace {

namespace models = hetsim::models;
namespace planners = hetsim::planners;
namespace proto = hetsim::proto;
using hetsim::bench::AllOk;
using hetsim::bench::CpuSeconds;
using hetsim::bench::Print;
using hetsim::bench::TrainingOf;

struct Case {
  uint32_t gpus;
  const char* model;
};

void PrintPlan(const std::string& tag, const planners::PlannerResult& r) {
  Print(tag + "/candidates", static_cast<double>(r.stats.candidates_evaluated), "plans");
  Print(tag + "/iteration_estimate", r.estimate.iteration_s, "s");
  Print(tag + "/stages", r.plan.pipelines(0).stages_size(), "stages");
  if (!r.alternatives.empty()) Print(tag + "/runners_up", static_cast<double>(r.alternatives.size()), "plans");
}

// The 240-GPU case under a time limit (see the top of the file).
int RunAnytime(const std::string& filter) {
  const std::string tag = "metis/240gpu-hexiscale-llama-30b/limit60s/threads1";
  if (!filter.empty() && tag.find(filter) == std::string::npos) return 0;
  auto cluster = models::LoadCluster("hexiscale-240");
  auto model = models::LoadModel("llama-30b");
  if (!AllOk(cluster, model)) return 1;
  auto training = models::ResolveTraining(TrainingOf(256, 2048, proto::DTYPE_BF16, proto::RECOMPUTE_FULL), *model,
                                          "bench");
  auto planner = planners::CreatePlanner("metis", "time_limit_s: 60", "bench");
  if (!AllOk(training, planner)) return 1;
  const planners::PlanningProblem problem{*cluster, *model, *training};
  const auto start = std::chrono::steady_clock::now();
  const double cpu0 = CpuSeconds();
  auto r = planners::RunPlanner(**planner, problem);
  Print(tag + "/search_wall", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), "s");
  Print(tag + "/search_cpu", CpuSeconds() - cpu0, "s");
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", tag.c_str(), r.status().message().c_str());
    return 1;
  }
  bool cut = false;
  for (const auto& note : r->stats.notes) cut |= note.find("cut by the time limit") != std::string::npos;
  Print(tag + "/cut", cut ? 1 : 0, "");
  PrintPlan(tag, *r);
  return 0;
}

// The 4,096-GPU case (see the top of the file).
int RunLarge(const std::string& filter) {
  auto base = models::LoadCluster("hetu-h800x16-h20x32");
  auto model = models::LoadModel("llama2-70b");
  if (!AllOk(base, model)) return 1;
  constexpr uint32_t kGpus = 4096;
  proto::Cluster spec = base->spec();
  spec.set_name("metis-bench-h800-h20-" + std::to_string(kGpus));
  for (auto& node : *spec.mutable_nodes()) node.set_count(kGpus / 16);
  auto cluster = models::Cluster::Build(spec, "bench_metis");
  auto training = models::ResolveTraining(TrainingOf(4 * kGpus, 4096, proto::DTYPE_BF16, proto::RECOMPUTE_FULL),
                                          *model, "bench");
  auto planner = planners::CreatePlanner("metis", "", "bench");
  if (!AllOk(cluster, training, planner)) return 1;
  for (uint32_t alternatives : {0u, 3u}) {
    const std::string tag = "metis/" + std::to_string(kGpus) + "gpu-h800-h20-llama2-70b/threads1" +
                            (alternatives > 0 ? "/alternatives" + std::to_string(alternatives) : "");
    if (!filter.empty() && tag.find(filter) == std::string::npos) continue;
    planners::PlanningProblem problem{*cluster, *model, *training};
    problem.alternatives = alternatives;
    const auto start = std::chrono::steady_clock::now();
    const double cpu0 = CpuSeconds();
    auto r = (*planner)->MakePlan(problem);
    Print(tag + "/search_wall", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), "s");
    Print(tag + "/search_cpu", CpuSeconds() - cpu0, "s");
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", tag.c_str(), r.status().message().c_str());
      return 1;
    }
    Print(tag + "/candidates", static_cast<double>(r->stats.candidates_evaluated), "plans");
    Print(tag + "/eq1_cost", r->cost_s, "s");
    Print(tag + "/stages", r->plan.pipelines(0).stages_size(), "stages");
    if (!r->alternatives.empty()) Print(tag + "/runners_up", static_cast<double>(r->alternatives.size()), "plans");
  }
  return 0;
}

int Run(const std::string& filter) {
  const std::vector<Case> cases = {{16, "gpt3-6.7b"}, {32, "gpt3-15b"}, {64, "gpt3-15b"}, {128, "gpt3-15b"}};
  auto base = models::LoadCluster("metis-uniform-t4-v100-32");
  if (!AllOk(base)) return 1;
  // Every case on 1 and 2 threads, and on one thread with 3 runners-up asked (what `--refine 4`, the
  // default of `hetsim plan`, asks the planner for; the simulation of the candidates is not timed here).
  struct Variant {
    uint32_t threads, alternatives;
  };
  for (const Case& c : cases) {
    for (const Variant v : {Variant{1, 0}, Variant{2, 0}, Variant{1, 3}}) {
      const uint32_t threads = v.threads;
      const std::string tag = "metis/" + std::to_string(c.gpus) + "gpu-t4-v100-" + c.model + "/threads" +
                              std::to_string(threads) +
                              (v.alternatives > 0 ? "/alternatives" + std::to_string(v.alternatives) : "");
      if (!filter.empty() && tag.find(filter) == std::string::npos) continue;
      proto::Cluster spec = base->spec();
      spec.set_name("metis-bench-t4-v100-" + std::to_string(c.gpus));
      for (auto& node : *spec.mutable_nodes()) node.set_count(c.gpus / 8);
      auto cluster = models::Cluster::Build(spec, tag);
      auto model = models::LoadModel(c.model);
      if (!AllOk(cluster, model)) return 1;
      auto training = models::ResolveTraining(TrainingOf(128, 1024, proto::DTYPE_FP16), *model, "bench");
      auto planner = planners::CreatePlanner("metis", "threads: " + std::to_string(threads), "bench");
      if (!AllOk(training, planner)) return 1;
      planners::PlanningProblem problem{*cluster, *model, *training};
      problem.alternatives = v.alternatives;
      const auto start = std::chrono::steady_clock::now();
      const double cpu0 = CpuSeconds();
      auto r = planners::RunPlanner(**planner, problem);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Print(tag + "/search_wall", wall, "s");
      Print(tag + "/search_cpu", CpuSeconds() - cpu0, "s");
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", tag.c_str(), r.status().message().c_str());
        continue;
      }
      PrintPlan(tag, *r);
    }
  }
  if (const int rc = RunLarge(filter); rc != 0) return rc;
  return RunAnytime(filter);
}

}  // namespace

int main(int argc, char** argv) {
  return Run(argc > 1 ? argv[1] : "");
}
