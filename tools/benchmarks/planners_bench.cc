// bench_planners: search times of the planners on bundled clusters and the cost of one analytic estimate.
//
//   bench_planners [FILTER]
//
// Prints one line per measurement, `name value unit`, e.g.
//   plan.megatron.hexiscale-240.llama2-70b 0.012 s
//   plan.megatron.hexiscale-240.llama2-70b.candidates 25 count
//   estimate.llama3-405b-16384 2100 us
// FILTER (optional) keeps the measurements whose name contains it. A planner that finds no plan prints its
// time anyway and `….status 0 ok`. The exhaustive search runs with a 120 s limit and reports whether it
// proved optimality (`….proven 1 bool`).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/planner.h"
#include "tools/benchmarks/bench_util.h"

namespace {

using namespace hetsim;

struct Case {
  std::string cluster, model, training;  // training as inline YAML
  std::vector<std::string> planners;
  std::string options;  // for every planner of the case
};

void Line(const std::string& name, double value, const char* unit) {
  std::printf("%s %.6g %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

bool Wanted(const std::string& name, const std::string& filter) {
  return filter.empty() || name.find(filter) != std::string::npos;
}

Result<proto::Training> TrainingFor(const models::TransformerModel& model, const std::string& yaml) {
  proto::Training t;
  HETSIM_RETURN_IF_ERROR(models::ParseYaml(yaml, "bench training", &t));
  return models::ResolveTraining(t, model, "bench training");
}

int RunCase(const Case& c, const std::string& filter) {
  bool any = false;
  for (const auto& p : c.planners) any |= Wanted("plan." + p + "." + c.cluster + "." + c.model, filter);
  if (!any) return 0;
  auto cluster = models::LoadCluster(c.cluster);
  auto model = models::LoadModel(c.model);
  if (!bench::AllOk(cluster, model)) return 1;
  auto training = TrainingFor(*model, c.training);
  if (!bench::AllOk(training)) return 1;
  const planners::PlanningProblem problem{*cluster, *model, *training};
  for (const auto& p : c.planners) {
    const std::string name = "plan." + p + "." + c.cluster + "." + c.model;
    if (!Wanted(name, filter)) continue;
    auto planner = planners::CreatePlanner(p, c.options, "bench options");
    if (!bench::AllOk(planner)) return 1;
    const auto start = std::chrono::steady_clock::now();
    auto result = planners::RunPlanner(**planner, problem);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Line(name, wall, "s");
    if (!result.ok()) {
      Line(name + ".status", 0, "ok");
      continue;
    }
    Line(name + ".candidates", static_cast<double>(result->stats.candidates_evaluated), "count");
    Line(name + ".iteration", result->estimate.iteration_s, "s");
    if (result->stats.claims_optimal) Line(name + ".proven", result->stats.proven_optimal ? 1 : 0, "bool");
  }
  return 0;
}

// Microseconds per analytic estimate of a bundled plan (the planners' inner-loop cost).
int RunEstimate(const std::string& plan_name, const std::string& filter) {
  const std::string name = "estimate." + plan_name;
  if (!Wanted(name, filter)) return 0;
  auto text = models::ReadSpec(models::SpecKind::kPlan, plan_name);
  if (!text.ok()) {
    std::cerr << text.status().message() << "\n";
    return 1;
  }
  proto::Plan plan;
  if (auto s = models::ParseSpec(*text, models::SpecKind::kPlan, &plan); !s.ok()) {
    std::cerr << s.message() << "\n";
    return 1;
  }
  auto cluster = models::LoadCluster(plan.cluster());
  auto model = models::LoadModel(plan.model());
  if (!cluster.ok() || !model.ok()) return 1;
  auto training = models::ResolveTraining(plan.training(), *model, plan_name);
  if (!training.ok()) return 1;
  const planners::PlanningProblem problem{*cluster, *model, *training};
  const planners::AnalyticCostModel cost(problem);
  int reps = 0;
  double sink = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < 0.5 || reps < 3) {
    sink += cost.Estimate(plan, /*with_memory=*/false).iteration_s;
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  Line(name, elapsed / reps * 1e6, "us");
  if (sink < 0) std::cerr << "";  // keep the loop
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  const std::vector<std::string> baselines = {"megatron", "deepspeed", "fsdp", "galvatron", "whale", "alpa", "amp"};
  const std::vector<Case> cases = {
      {"hexiscale-case-study", "llama2-7b", "{global_batch_size: 64, seq_len: 4096, recompute: full}", baselines, ""},
      {"metis-uniform-t4-v100-16", "gpt3-1.3b", "{global_batch_size: 128, seq_len: 1024, dtype: fp16}", baselines, ""},
      {"hetu-h800x16-h20x32", "llama3-70b", "{global_batch_size: 64, seq_len: 4096, recompute: full}", baselines, ""},
      {"hexiscale-240", "llama2-70b", "{recompute: full}", baselines, ""},
      {"hetu-h800x16-h20x32", "llama2-70b", "{global_batch_size: 64, seq_len: 4096}", {"hetu"}, ""},
      {"hetu-elastic-c2", "llama2-70b", "{global_batch_size: 64, seq_len: 4096}", {"hetu"}, "zero_stage: 0"},
      {"llama3-16384", "llama3-405b", "{seq_len: 8192, recompute: selective}", {"megatron"}, ""},
      {"hexiscale-case-study", "llama-tiny", "{}", {"exhaustive"}, "time_limit_s: 120"},
      {"metis-uniform-t4-v100-8", "gpt3-1.3b", "{global_batch_size: 64, seq_len: 1024, dtype: fp16}", {"exhaustive"},
       "time_limit_s: 120"},
      {"hexiscale-case-study", "llama2-7b", "{global_batch_size: 64, seq_len: 4096, recompute: full}", {"exhaustive"},
       "time_limit_s: 120"},
  };
  int rc = 0;
  for (const auto& c : cases) rc |= RunCase(c, filter);
  for (const char* plan : {"case-study-asymmetric", "metis-mixed-stage", "llama3-405b-16384"}) {
    rc |= RunEstimate(plan, filter);
  }
  return rc;
}
