// bench_autohet [FILTER]: the AutoHet planner's planning time at 8, 16, 32 and 64 GPUs (the paper's §V-B:
// 1.23-159.12 s up to 64 GPUs with SCIP; hetsim solves eq. 3 with CBC on type-aggregated counts).
//
// Clusters: `autohet-4node` (nodes of A100, H800, H20 and A100, 400 Gbps RoCE) with 2, 4 and 8 GPUs per
// node (8, 16, 32 GPUs) and two nodes of each kind at 8 GPUs (64). GPT-3 6.7B, global batch 128, 2,048
// tokens, BF16. Prints `name value unit`: wall and CPU time, integer programs solved, the plan's eq. 1
// and analytic iteration times, and its number of pipelines.

#include <chrono>
#include <cstdio>
#include <string>

#include "models/spec_io.h"
#include "models/training.h"
#include "planners/planner.h"
#include "tools/benchmarks/bench_util.h"

namespace {

namespace models = hetsim::models;
namespace planners = hetsim::planners;
namespace proto = hetsim::proto;
using hetsim::bench::Print;
using hetsim::bench::AllOk;
using hetsim::bench::CpuSeconds;
using hetsim::bench::TrainingOf;

int Run(const std::string& filter) {
  auto base = models::LoadCluster("autohet-4node");
  auto model = models::LoadModel("gpt3-6.7b");
  if (!AllOk(base, model)) return 1;
  auto training = models::ResolveTraining(TrainingOf(128, 2048, proto::DTYPE_BF16), *model, "bench");
  auto planner = planners::CreatePlanner("autohet");
  if (!AllOk(training, planner)) return 1;
  for (uint32_t gpus : {8u, 16u, 32u, 64u}) {
    const std::string tag = "autohet/" + std::to_string(gpus) + "gpu-a100-h800-h20-gpt3-6.7b";
    if (!filter.empty() && tag.find(filter) == std::string::npos) continue;
    proto::Cluster spec = base->spec();
    spec.set_name("autohet-bench-" + std::to_string(gpus));
    for (auto& node : *spec.mutable_nodes()) {
      node.mutable_gpus()->set_count(gpus <= 32 ? gpus / 4 : 8);
      node.set_count(gpus <= 32 ? 1 : gpus / 32);
    }
    auto cluster = models::Cluster::Build(spec, tag);
    if (!AllOk(cluster)) return 1;
    const planners::PlanningProblem problem{*cluster, *model, *training};
    const auto start = std::chrono::steady_clock::now();
    const double cpu0 = CpuSeconds();
    auto r = planners::RunPlanner(**planner, problem);
    Print(tag + "/plan_wall", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), "s");
    Print(tag + "/plan_cpu", CpuSeconds() - cpu0, "s");
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", tag.c_str(), r.status().message().c_str());
      continue;
    }
    Print(tag + "/candidates", static_cast<double>(r->stats.candidates_evaluated), "plans");
    Print(tag + "/iteration_estimate", r->estimate.iteration_s, "s");
    Print(tag + "/pipelines", r->plan.pipelines_size(), "pipelines");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Run(argc > 1 ? argv[1] : "");
}
