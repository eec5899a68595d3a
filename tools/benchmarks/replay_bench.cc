// Replay benchmarks: one line per measurement, `name value unit`. Usage: bench_replay [FILTER] (substring
// match on the names). Target (issue "Replay"): Llama 3 405B's 54 days on 16,384 H100s (a Table-5-rate
// failure trace, ~420 interruptions) in <= 2 minutes on 2 cores. Each run starts cold: the iteration is
// simulated once (the plan's cost dominates), checkpoint and recovery transfers once per kind.
#include <chrono>
#include <cstdio>
#include <string>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/replay.h"
#include "traces/llama3.h"

namespace {

using namespace hetsim;

void Bench(const std::string& name, const std::string& plan_file, const std::string& policy, const std::string& filter) {
  if (!filter.empty() && name.find(filter) == std::string::npos) return;
  auto text = models::ReadSpec(models::SpecKind::kPlan, plan_file);
  proto::Plan plan;
  if (!text.ok() || !models::ParseSpec(*text, models::SpecKind::kPlan, &plan).ok()) {
    std::fprintf(stderr, "%s: cannot read %s\n", name.c_str(), plan_file.c_str());
    return;
  }
  auto cluster = models::LoadCluster(plan.cluster());
  auto model = models::LoadModel(plan.model());
  if (!cluster.ok() || !model.ok()) {
    std::fprintf(stderr, "%s: cannot load the plan's cluster or model\n", name.c_str());
    return;
  }
  auto training = models::ResolveTraining(plan.training(), *model, plan_file);
  if (!training.ok()) return;
  const auto t0 = std::chrono::steady_clock::now();
  traces::FailureTraceOptions o;
  o.days = 54;
  o.seed = 1;
  sim::ReplayInputs in;
  in.cluster = &*cluster;
  in.model = &*model;
  in.training = *training;
  in.plan = plan;
  in.trace = traces::GenerateLlama3Failures(*cluster, plan.cluster(), o);
  in.trace_name = "llama3-54d";
  in.policy.set_name(policy);
  in.sim.fidelity = sim::Fidelity::Fast();
  auto r = sim::ReplayRun(in);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), r.status().message().c_str());
    return;
  }
  std::printf("%s %.2f s\n", name.c_str(), wall);
  std::printf("%s.ettr %.4f\n", name.c_str(), r->ettr());
  std::printf("%s.interruptions %u\n", name.c_str(), r->interruptions());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  Bench("replay.llama3-16384-54d.1f1b.hot-spares", "llama3-405b-16384", "hot-spares", filter);
  Bench("replay.llama3-16384-54d.1f1b.in-memory", "llama3-405b-16384", "in-memory", filter);
  Bench("replay.llama3-16384-54d.interleaved.hot-spares", "experiments/llama3/llama3-405b-16384-interleaved.yaml",
        "hot-spares", filter);
  return 0;
}
