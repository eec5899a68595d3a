// bench_hexiscale [FILTER]: the HexiScale planner's search time at 64, 128, 240 and 320 GPUs (the paper's
// Figure 9: under two minutes on 12 cores; hetsim's target: at most 10 s at 320 GPUs on 2 cores).
//
// Clusters: the Appendix B mix (8× RTX 3090, 4× RTX 3090, 8× RTX 4090 and 8× A800 machines, 0.7 GB/s
// between machines; `hexiscale-240`) with the machine counts scaled to the GPU count (the paper does not
// give the other compositions). Model: Llama 30B, 2,048 tokens, global batch 2,048 (4M tokens), full
// recomputation (the paper: "the runtime is independent of model size"). Prints one line per
// measurement, `name value unit`: the search's wall and CPU time (one thread: on a loaded machine the
// CPU time is the wall time it would take alone), the plans costed, the plan's pipelines and its
// analytic MFU.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "models/training.h"
#include "planners/planner.h"
#include "tools/benchmarks/bench_util.h"

namespace {

using hetsim::Result;
namespace models = hetsim::models;
namespace planners = hetsim::planners;
namespace proto = hetsim::proto;
using hetsim::bench::AllOk;
using hetsim::bench::Print;
using hetsim::bench::TrainingOf;

struct Case {
  uint32_t gpus;
  uint32_t rtx3090x8, rtx3090x4, rtx4090x8, a800x8;  // machines of each kind (hexiscale-240's node order)
};

int Run(const std::string& filter) {
  const std::vector<Case> cases = {
      {64, 1, 2, 5, 1}, {128, 2, 2, 12, 1}, {240, 5, 6, 20, 2}, {320, 7, 6, 27, 3}};
  auto base = models::LoadCluster("hexiscale-240");
  auto model = models::LoadModel("llama-30b");
  if (!AllOk(base, model)) return 1;
  const proto::Cluster spec = base->spec();
  auto training = models::ResolveTraining(
      TrainingOf(2048, 2048, proto::DTYPE_UNSPECIFIED, proto::RECOMPUTE_FULL), *model, "bench");
  if (!AllOk(training)) return 1;
  for (const Case& c : cases) {
    const std::string tag = "hexiscale/" + std::to_string(c.gpus) + "gpu";
    if (!filter.empty() && tag.find(filter) == std::string::npos) continue;
    proto::Cluster s = spec;
    const uint32_t counts[] = {c.rtx3090x8, c.rtx3090x4, c.rtx4090x8, c.a800x8};
    for (int i = 0; i < 4 && i < s.nodes_size(); ++i) s.mutable_nodes(i)->set_count(counts[i]);
    s.set_name("hexiscale-bench-" + std::to_string(c.gpus));
    auto cluster = models::Cluster::Build(s, "bench");
    auto planner = planners::CreatePlanner("hexiscale");
    if (!AllOk(cluster, planner)) return 1;
    const planners::PlanningProblem problem{*cluster, *model, *training};
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    auto result = planners::RunPlanner(**planner, problem);
    const double cpu = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!result.ok()) {
      std::fprintf(stderr, "%s: %s\n", tag.c_str(), result.status().message().c_str());
      return 1;
    }
    Print(tag + "/search_time", wall, "s");
    Print(tag + "/search_cpu_time", cpu, "s");  // the search is single-threaded: wall time without other load
    Print(tag + "/candidates", static_cast<double>(result->stats.candidates_evaluated), "plans");
    Print(tag + "/pipelines", result->plan.pipelines_size(), "pipelines");
    Print(tag + "/estimated_mfu", 100 * result->estimate.mfu, "%");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return Run(argc > 1 ? argv[1] : "");
}
