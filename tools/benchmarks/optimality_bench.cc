// bench_optimality: every planner on small heterogeneous clusters, judged in the simulator against the
// simulated optimum (docs/planners.md "How close each planner gets").
//
//   bench_optimality [FILTER] [--table] [--k K] [--polish N]
//
// For each cluster (12 bundled ones and 7 written here that none of the papers ran) the model gpt3-1.3b (fp16,
// global batch 32, sequence 1024) is planned by every registered planner — its own pick (what `hetsim plan`
// returns by default), the simulator-checked choice among its K best (`--refine K`, default 4), and with
// --polish N that choice polished on the twin — and each plan is simulated. `twin` (hetsim's own planner) is
// run at its default: its pick column is the best of its pool by the played estimate, its checked column the
// whole search. The reference is `exhaustive` at its default: the proof over its space, warm-started with every
// other planner's candidates (not twin's: the reference stays independent of the planner it judges), with
// --polish N its choice polished too; whether the proof closed is printed per cluster. Lines, `name value unit`:
//   optimality.<planner>.<cluster>.pick     simulated time of the planner's pick / the reference
//   optimality.<planner>.<cluster>.refined  the same for the checked choice (twin: its search)
//   optimality.<planner>.<cluster>.polished the same for the polished plan (.plan_polished_s its time)
//   optimality.<planner>.<cluster>.plan_s   planning wall time without / .plan_refined_s with the check
//   optimality.exhaustive.<cluster>.proven  1 when the reference is proven the simulated optimum, else 0
//   optimality.exhaustive.<cluster>.lower_bound_s  no plan of exhaustive's space simulates faster (X)
//   optimality.<planner>.<cluster>.refined_over_bound  the checked choice's time / X (gap at most this − 1)
// A planner that finds no plan prints `….status 0 ok`. FILTER keeps the clusters or planners whose name
// contains it (a filter that matches a cluster keeps those clusters). --table also prints the Markdown table
// docs/planners.md holds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/planner.h"
#include "tools/benchmarks/bench_util.h"
#include "sim/planning/refine.h"

namespace {

using namespace hetsim;

const std::vector<std::string> kBundled = {
    "hexiscale-case-study",           "hexiscale-mini-setting1",       "hexiscale-mini-setting2",
    "hexiscale-mini-setting3",        "metis-nonuniform-p100-dominant-8", "metis-nonuniform-v100-dominant-8",
    "metis-uniform-t4-v100-8",        "metis-uniform-p100-v100-4",     "autohet-nonuniform-1a100-4h20",
    "autohet-nonuniform-3a100-5h800", "autohet-uniform-a100-h20-8",    "autohet-uniform-a100-h800-4",
};

// Two clusters none of the papers ran: a lab's mixed box and a rented pair of unlike nodes.
const char* kLabBox = R"(kind: cluster
name: lab-a100-rtx3090
description: 2x A100 (NVLink) and 4x RTX 3090 (PCIe) in two machines over 25 Gb/s Ethernet
nodes:
  - name: a100
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: ethernet, bandwidth_gbps: 25, latency_us: 20}
  - name: rtx3090
    gpus: {type: rtx3090, count: 4}
    fabric: {kind: pcie, bandwidth_gbyte_s: 24}
    nic: {kind: ethernet, bandwidth_gbps: 25, latency_us: 20}
network: {single_switch: {}}
)";
const char* kRented = R"(kind: cluster
name: rented-h100-l40s
description: 4x H100 (NVLink) and 4x L40S (PCIe) in two machines over 100 Gb/s InfiniBand
nodes:
  - name: h100
    gpus: {type: h100, count: 4}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 100}
  - name: l40s
    gpus: {type: l40s, count: 4}
    fabric: {kind: pcie, bandwidth_gbyte_s: 32}
    nic: {kind: infiniband, bandwidth_gbps: 100}
network: {single_switch: {}}
)";
// Five more built for issue 55's outside check (session 33): the kinds of plans the papers' spaces miss.
// A slow P100 on 1 Gb/s: leaving it idle is fastest.
const char* kOldMix = R"(kind: cluster
name: v100-t4-p100-1g
description: 2x V100, 2x T4 and 1x P100 in three machines over 1 Gb/s Ethernet
nodes:
  - name: v100
    gpus: {type: v100, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: ethernet, bandwidth_gbps: 1, latency_us: 30}
  - name: t4
    gpus: {type: t4, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 12}
    nic: {kind: ethernet, bandwidth_gbps: 1, latency_us: 30}
  - name: p100
    gpus: {type: p100, count: 1}
    fabric: {kind: pcie, bandwidth_gbyte_s: 12}
    nic: {kind: ethernet, bandwidth_gbps: 1, latency_us: 30}
network: {single_switch: {}}
)";
// PCIe cards only: where recomputation and data parallelism trade differently than on NVLink.
const char* kPcieOnly = R"(kind: cluster
name: pcie-h100-a100
description: 2x H100 PCIe and 4x A100 80GB PCIe in two machines, no NVLink, 100 Gb/s RoCE
nodes:
  - name: h100
    gpus: {type: h100-pcie, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 50}
    nic: {kind: roce, bandwidth_gbps: 100}
  - name: a100
    gpus: {type: a100-80gb-pcie, count: 4}
    fabric: {kind: pcie, bandwidth_gbyte_s: 25}
    nic: {kind: roce, bandwidth_gbps: 100}
network: {single_switch: {}}
)";
// A cloud inference box beside a training box: ten GPUs, most of them small.
const char* kL40sA10 = R"(kind: cluster
name: l40s-a10-10
description: 2x L40S and 8x A10 in three machines over 25 Gb/s Ethernet
nodes:
  - name: l40s
    gpus: {type: l40s, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 32}
    nic: {kind: ethernet, bandwidth_gbps: 25, latency_us: 20}
  - name: a10-a
    gpus: {type: a10, count: 4}
    fabric: {kind: pcie, bandwidth_gbyte_s: 16}
    nic: {kind: ethernet, bandwidth_gbps: 25, latency_us: 20}
  - name: a10-b
    gpus: {type: a10, count: 4}
    fabric: {kind: pcie, bandwidth_gbyte_s: 16}
    nic: {kind: ethernet, bandwidth_gbps: 25, latency_us: 20}
network: {single_switch: {}}
)";
// Two vendors on one InfiniBand switch.
const char* kTwoVendors = R"(kind: cluster
name: h100-mi300x-8
description: 4x H100 (NVLink) and 4x MI300X (Infinity Fabric) in two machines over 200 Gb/s InfiniBand
nodes:
  - name: h100
    gpus: {type: h100, count: 4}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 200}
  - name: mi300x
    gpus: {type: mi300x, count: 4}
    nic: {kind: infiniband, bandwidth_gbps: 200}
network: {single_switch: {}}
)";
// Three generations, twelve GPUs.
const char* kThreeGenerations = R"(kind: cluster
name: a100-v100-t4-12
description: 4x A100 (NVLink), 4x V100 (NVLink) and 4x T4 (PCIe) in three machines over 50 Gb/s RoCE
nodes:
  - name: a100
    gpus: {type: a100-40gb, count: 4}
    fabric: {kind: nvlink}
    nic: {kind: roce, bandwidth_gbps: 50}
  - name: v100
    gpus: {type: v100, count: 4}
    fabric: {kind: nvlink}
    nic: {kind: roce, bandwidth_gbps: 50}
  - name: t4
    gpus: {type: t4, count: 4}
    fabric: {kind: pcie, bandwidth_gbyte_s: 12}
    nic: {kind: roce, bandwidth_gbps: 50}
network: {single_switch: {}}
)";

Result<models::Cluster> Inline(const char* yaml) {
  proto::Cluster spec;
  HETSIM_RETURN_IF_ERROR(models::ParseYaml(yaml, "bench cluster", &spec));
  return models::Cluster::Build(spec, "bench cluster");
}

struct Row {
  bool ok = false;
  bool proven = false;
  double lower_bound_s = 0;  // exhaustive: no plan of its space simulates faster (PlannerResult::space_lower_bound_s)
  double pick_s = 0, refined_s = 0, plan_s = 0, plan_refined_s = 0;
  double polished_s = 0, plan_polished_s = 0;  // with --polish N (0: not run)
};

double Wall(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The planner's pick and the simulator-checked choice, both simulated.
Row Measure(const std::string& name, const planners::PlanningProblem& problem, uint32_t k, uint32_t polish) {
  Row row;
  auto planner = planners::CreatePlanner(name);
  if (!planner.ok()) return row;
  planning::RefineOptions pick_only;
  pick_only.k = 1;  // the pick, simulated once (its planning time is the search alone)
  const auto t0 = std::chrono::steady_clock::now();
  planning::RefineOutcome out;
  auto r = planning::PlanOnTwin(**planner, problem, pick_only, &out);
  row.plan_s = Wall(t0) - out.sim_wall_s;
  if (!r.ok() || out.candidates.empty() || !out.candidates[0].error.empty()) return row;
  row.pick_s = out.candidates[0].simulated_s;
  planning::RefineOptions refine;
  refine.k = k;
  if (name == "exhaustive" && polish > 0) {
    // The reference: one proof (its warm start holds the polished plans), then its choice polished; its
    // checked cell is the proof's choice.
    refine.polish = polish;
    const auto t1 = std::chrono::steady_clock::now();
    auto rp = planning::PlanOnTwin(**planner, problem, refine, &out);
    row.plan_refined_s = row.plan_polished_s = Wall(t1);
    if (!rp.ok() || out.candidates.empty()) return row;
    row.refined_s = out.candidates[out.chosen].simulated_s;
    row.polished_s = out.polished ? out.polish.end_s : row.refined_s;
    row.proven = out.proven;
    row.lower_bound_s = rp->space_lower_bound_s;
    row.ok = true;
    return row;
  }
  const auto t1 = std::chrono::steady_clock::now();
  auto rr = planning::PlanOnTwin(**planner, problem, refine, &out);
  row.plan_refined_s = Wall(t1);
  if (!rr.ok()) return row;
  // twin's search ends in its local search's plan (out.polish), not in the checked pool's choice.
  row.refined_s = out.polished ? out.polish.end_s : out.candidates[out.chosen].simulated_s;
  row.proven = out.proven;
  row.lower_bound_s = rr->space_lower_bound_s;
  row.ok = true;
  row.polished_s = row.refined_s;
  if (polish > 0) {
    // The default of `hetsim plan` (kAutoPolish) or --polish N; for exhaustive, its proof warm-started with
    // every other planner's polished plan, then its own choice polished (sim/planning/refine.h).
    refine.polish = polish;
    const auto t2 = std::chrono::steady_clock::now();
    auto rp = planning::PlanOnTwin(**planner, problem, refine, &out);
    row.plan_polished_s = Wall(t2);
    if (rp.ok() && out.polished) row.polished_s = out.polish.end_s;  // else the checked choice's, as above
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter;
  bool table = false;
  uint32_t k = planning::kSeedCandidates;
  // The checked choice polished on the twin (sim/planning/polish.h) with --polish N; by default none (and the
  // reference is exhaustive's proof alone).
  uint32_t polish = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--table") {
      table = true;
    } else if (a == "--k" && i + 1 < argc) {
      k = static_cast<uint32_t>(std::stoul(argv[++i]));
    } else if (a == "--polish" && i + 1 < argc) {
      polish = static_cast<uint32_t>(std::stoul(argv[++i]));
    } else {
      filter = a;
    }
  }
  auto model = models::LoadModel("gpt3-1.3b");
  if (!bench::AllOk(model)) return 1;
  auto training = models::ResolveTraining(bench::TrainingOf(32, 1024, proto::DTYPE_FP16), *model, "bench training");
  if (!bench::AllOk(training)) return 1;
  std::vector<models::Cluster> clusters;
  for (const auto& name : kBundled) {
    auto c = models::LoadCluster(name);
    if (!bench::AllOk(c)) return 1;
    clusters.push_back(std::move(c).value());
  }
  for (const char* yaml : {kLabBox, kRented, kOldMix, kPcieOnly, kL40sA10, kTwoVendors, kThreeGenerations}) {
    auto c = Inline(yaml);
    if (!bench::AllOk(c)) return 1;
    clusters.push_back(std::move(c).value());
  }
  std::vector<std::string> names = planners::PlannerNames();
  // cluster -> planner -> row
  std::map<std::string, std::map<std::string, Row>> rows;
  std::vector<std::string> order;
  // A filter that names clusters keeps those (every planner); otherwise it names planners.
  const bool names_clusters = !filter.empty() && std::any_of(clusters.begin(), clusters.end(), [&](const auto& c) {
    return c.name().find(filter) != std::string::npos;
  });
  for (const auto& cluster : clusters) {
    if (names_clusters && cluster.name().find(filter) == std::string::npos) continue;
    const bool cluster_wanted = filter.empty() || names_clusters;
    const planners::PlanningProblem problem{cluster, *model, *training};
    const Row ref = Measure("exhaustive", problem, planning::kAutoRefine, polish);
    if (!ref.ok) {
      std::cerr << cluster.name() << ": exhaustive found no plan; skipped\n";
      continue;
    }
    order.push_back(cluster.name());
    for (const auto& p : names) {
      if (!cluster_wanted && p.find(filter) == std::string::npos) continue;
      const Row row = p == "exhaustive" ? ref : Measure(p, problem, p == "twin" ? planning::kAutoRefine : k, polish);
      rows[cluster.name()][p] = row;
      const std::string key = "optimality." + p + "." + cluster.name();
      if (!row.ok) {
        bench::Print(key + ".status", 0, "ok");
        continue;
      }
      bench::Print(key + ".pick", row.pick_s / ref.polished_s, "ratio");
      bench::Print(key + ".refined", row.refined_s / ref.polished_s, "ratio");
      bench::Print(key + ".plan_s", row.plan_s, "s");
      bench::Print(key + ".plan_refined_s", row.plan_refined_s, "s");
      if (p == "exhaustive") bench::Print(key + ".proven", row.proven ? 1 : 0, "bool");
      // The space's lower bound X: a plan's gap to exhaustive's optimum is at most its time / X − 1.
      if (p == "exhaustive" && ref.lower_bound_s > 0) bench::Print(key + ".lower_bound_s", ref.lower_bound_s, "s");
      if (ref.lower_bound_s > 0) bench::Print(key + ".refined_over_bound", row.refined_s / ref.lower_bound_s, "ratio");
      if (polish > 0) {
        bench::Print(key + ".polished", row.polished_s / ref.polished_s, "ratio");
        bench::Print(key + ".plan_polished_s", row.plan_polished_s, "s");
      }
    }
  }
  if (!table) return 0;
  // One row per planner: per cluster "pick / refined" as simulated time over the reference, then the worst,
  // and the planning times (largest over clusters).
  std::printf("\n| planner |");
  for (const auto& c : order) std::printf(" %s |", c.c_str());
  const char* cells = polish > 0 ? "pick / refined / polished" : "pick / refined";
  std::printf(" worst %s | planning s (%s, max) |\n|---|", cells, cells);
  for (size_t i = 0; i < order.size(); ++i) std::printf("---|");
  std::printf("---|---|\n");
  for (const auto& p : names) {
    std::printf("| %s |", p.c_str());
    double worst_pick = 0, worst_refined = 0, worst_polished = 0, plan = 0, plan_refined = 0, plan_polished = 0;
    for (const auto& c : order) {
      auto it = rows[c].find(p);
      if (it == rows[c].end() || !it->second.ok) {
        std::printf(" no plan |");
        continue;
      }
      const Row& r = it->second;
      const double ref = rows[c]["exhaustive"].polished_s;
      if (polish > 0) {
        std::printf(" %.2f / %.2f / %.2f |", r.pick_s / ref, r.refined_s / ref, r.polished_s / ref);
      } else {
        std::printf(" %.2f / %.2f |", r.pick_s / ref, r.refined_s / ref);
      }
      worst_pick = std::max(worst_pick, r.pick_s / ref);
      worst_refined = std::max(worst_refined, r.refined_s / ref);
      worst_polished = std::max(worst_polished, r.polished_s / ref);
      plan = std::max(plan, r.plan_s);
      plan_refined = std::max(plan_refined, r.plan_refined_s);
      plan_polished = std::max(plan_polished, r.plan_polished_s);
    }
    if (polish > 0) {
      std::printf(" %.2f / %.2f / %.2f | %.2f / %.2f / %.2f |\n", worst_pick, worst_refined, worst_polished, plan,
                  plan_refined, plan_polished);
    } else {
      std::printf(" %.2f / %.2f | %.2f / %.2f |\n", worst_pick, worst_refined, plan, plan_refined);
    }
  }
  std::printf("\nexhaustive's reference proven the simulated optimum on:");
  for (const auto& c : order) {
    if (rows[c]["exhaustive"].proven) std::printf(" %s", c.c_str());
  }
  std::printf("\n");
  return 0;
}
