// The planners' analytic cost model (planners/cost_model.h: the lowering played as a dependency graph)
// against the simulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/cost_model.h"
#include "planners/planner.h"
#include "sim/simulator.h"

namespace hetsim {
namespace {

// HETSIM_COST_PLAN=plan.yaml: prints the estimate, the plays and the simulation of one plan file (a
// debugging aid; skipped otherwise).
TEST(CostAgreement, PlanFromEnvironment) {
  const char* path = std::getenv("HETSIM_COST_PLAN");
  if (path == nullptr) GTEST_SKIP() << "set HETSIM_COST_PLAN to a plan file";
  auto plan = models::LoadPlan(path);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto cluster = models::LoadCluster(models::ResolveRelative(plan->cluster(), path));
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  auto model = models::LoadModel(models::ResolveRelative(plan->model(), path));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto training = models::ResolveTraining(plan->training(), *model, "training");
  ASSERT_TRUE(training.ok()) << training.status().message();
  const models::PlanContext ctx{*cluster, *model, *training};
  planners::PlanningProblem problem{*cluster, *model, *training, nullptr, {}};
  const planners::AnalyticCostModel cost(problem);
  const auto t0 = std::chrono::steady_clock::now();
  const planners::PlanEstimate e = cost.Estimate(*plan, false);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s", planners::DescribeEstimate(e).c_str());
  std::printf("estimate wall %.3f ms\n", wall * 1e3);
  std::printf("closed form %.6f s, lower bound %.6f s\n", cost.ClosedFormEstimate(*plan, false).iteration_s,
              cost.LowerBoundSeconds(*plan));
  for (const bool fold : {true, false}) {
    planners::PlayOptions o;
    o.contention_passes = 0;
    o.fold = fold;
    auto p0 = cost.Play(*plan, o);
    ASSERT_TRUE(p0.ok()) << p0.status().message();
    o.pricing = planners::Pricing::kUpperBound;
    auto ub = cost.Play(*plan, o);
    ASSERT_TRUE(ub.ok()) << ub.status().message();
    std::printf("fold %d: contention-free %.6f s (folded %d %s, most flows on a link %u, sources %u), upper %.6f s\n",
                fold, p0->iteration_s, p0->folded, p0->fold_note.c_str(), p0->max_link_flows, ub->max_link_sources,
                ub->iteration_s);
    sim::SimOptions so;
    so.fold = fold;
    so.record_timeline = !fold && std::getenv("HETSIM_COST_TRACE") != nullptr;
    auto r = sim::SimulateIteration(*plan, ctx, so);
    ASSERT_TRUE(r.ok()) << r.status().message();
    if (so.record_timeline) {
      // Both timelines, device by device: the simulator's slices, then the play's operations.
      o.pricing = planners::Pricing::kSimulator;
      o.trace = true;
      auto traced = cost.Play(*plan, o);
      ASSERT_TRUE(traced.ok());
      for (size_t i = 0; i < r->timeline.size(); ++i) {
        std::printf("device %u simulated:", r->report.devices(static_cast<int>(i)).device());
        for (const auto& sl : r->timeline[i]) {
          std::printf(" %s%u[%.6f,%.6f]", models::CategoryName(sl.category), sl.micro_batch, sl.start_s, sl.end_s);
        }
        std::printf("\ndevice %u played:   ", traced->devices[i].device);
        for (const auto& sp : traced->trace[i]) {
          if (sp.end_s > sp.start_s) {
            std::printf(" %s%s#%u[%.6f,%.6f]", sp.stream ? "dp:" : "", models::CategoryName(sp.category), sp.index,
                        sp.start_s, sp.end_s);
          }
        }
        std::printf("\n");
      }
    }
    std::printf("fold %d: simulated %.6f s (played %u devices, %s)\n", fold, r->report.iteration_time_s(),
                r->played_devices, r->fold_note.c_str());
  }
}

// ---- random plans against the simulator ----------------------------------------------------------------

// Small clusters of every kind the platform builds: NVSwitch nodes, PCIe nodes, NICs per GPU and one shared
// NIC per node, slow Ethernet, pods with oversubscribed uplinks, one GPU per node, cross-vendor nodes whose
// transfers are staged through host memory, two zones.
struct ClusterCase {
  const char* name;
  const char* yaml;
};
const ClusterCase kClusters[] = {
    {"nvswitch-node", "name: c\nnodes: [{name: n, gpus: {type: h100, count: 8}}]\n"},
    {"nvlink-per-gpu-nic",
     "name: c\nnodes: [{name: n, count: 4, gpus: {type: a100-80gb, count: 2}, "
     "nic: {kind: infiniband, bandwidth_gbps: 200, attachment: per_gpu}}]\n"},
    {"pcie-shared-nic",
     "name: c\nnodes: [{name: n, count: 2, gpus: {type: rtx4090, count: 4}, fabric: {kind: pcie, bandwidth_gbyte_s: 24}, "
     "nic: {kind: ethernet, bandwidth_gbps: 25, latency_us: 20}}]\nnetwork: {switch_latency_us: 1}\n"},
    {"slow-ethernet-hetero",
     "name: c\nnodes:\n"
     "  - {name: a, gpus: {type: rtx3090, count: 2}, fabric: {kind: pcie, bandwidth_gbyte_s: 24}, "
     "nic: {kind: ethernet, bandwidth_gbps: 5.6, latency_us: 30}}\n"
     "  - {name: b, gpus: {type: rtx4090, count: 4}, fabric: {kind: pcie, bandwidth_gbyte_s: 32}, "
     "nic: {kind: ethernet, bandwidth_gbps: 5.6, latency_us: 30}}\n"
     "  - {name: c, gpus: {type: a100-80gb, count: 2}, nic: {kind: ethernet, bandwidth_gbps: 5.6, latency_us: 30}}\n"
     "network: {switch_latency_us: 1}\n"},
    {"pods-oversubscribed",
     "name: c\nnodes: [{name: n, count: 4, gpus: {type: h100, count: 2}, "
     "nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}]\n"
     "network: {pods: {nodes_per_pod: 2, oversubscription: 4}, switch_latency_us: 2}\n"},
    {"one-gpu-per-node",
     "name: c\nnodes: [{name: n, count: 8, gpus: {type: a100-80gb, count: 1}, "
     "nic: {kind: roce, bandwidth_gbps: 100, latency_us: 5}}]\n"},
    {"fat-tree-shared-nics",
     "name: c\nnodes: [{name: n, count: 4, gpus: {type: a100-80gb, count: 2}, "
     "nic: {kind: roce, bandwidth_gbps: 100, count: 1}}]\n"
     "network: {fat_tree: {nodes_per_leaf: 2, oversubscription: 2}, switch_latency_us: 1}\n"},
    {"cross-vendor-staged",
     "name: c\nnodes:\n"
     "  - {name: amd, gpus: {type: mi250x, count: 4}, nic: {kind: ethernet, bandwidth_gbps: 20, latency_us: 30}}\n"
     "  - {name: acc, gpus: {type: a100-80gb-pcie, count: 4}, vendor: other, fabric: {kind: pcie}, "
     "nic: {kind: ethernet, bandwidth_gbps: 20, latency_us: 30}}\n"},
    {"two-zones",
     "name: c\nnodes:\n"
     "  - {name: e, count: 2, zone: east, gpus: {type: a100-80gb, count: 2}, "
     "nic: {kind: infiniband, bandwidth_gbps: 200, attachment: per_gpu}}\n"
     "  - {name: w, count: 2, zone: west, gpus: {type: a100-80gb, count: 2}, "
     "nic: {kind: infiniband, bandwidth_gbps: 200, attachment: per_gpu}}\n"
     "zone_links: [{from: east, to: west, bandwidth_gbps: 100, latency_ms: 1}]\n"},
};

struct ModelCase {
  const char* name;
  uint32_t seq_len;
};
const ModelCase kModels[] = {{"gpt3-350m", 512}, {"llama-tiny", 256}, {"gpt3-350m", 1024}};

// One random plan: the plan, the training spec, which cluster and model.
struct RandomCase {
  uint64_t seed = 0;
  size_t cluster = 0, model = 0;
  proto::Plan plan;
  proto::Training training;
};

uint32_t Pick(std::mt19937_64& rng, uint32_t lo, uint32_t hi) {
  return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
}
bool Chance(std::mt19937_64& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

// `total` split into `parts` positive counts at random.
std::vector<uint32_t> RandomParts(std::mt19937_64& rng, uint32_t total, uint32_t parts) {
  std::vector<uint32_t> out(parts, 1);
  for (uint32_t i = parts; i < total; ++i) ++out[Pick(rng, 0, parts - 1)];
  return out;
}

// A random plan over a random cluster; not necessarily valid (the caller validates).
RandomCase MakeRandomCase(uint64_t seed, const std::vector<models::Cluster>& clusters,
                          const std::vector<models::TransformerModel>& models) {
  std::mt19937_64 rng(seed);
  RandomCase c;
  c.seed = seed;
  c.cluster = Pick(rng, 0, static_cast<uint32_t>(clusters.size() - 1));
  c.model = Pick(rng, 0, static_cast<uint32_t>(models.size() - 1));
  const models::Cluster& cluster = clusters[c.cluster];
  const models::TransformerModel& model = models[c.model];
  const uint32_t L = model.num_layers();
  const uint32_t heads = model.spec().num_attention_heads();
  const uint32_t kv = model.kv_heads();
  // Devices: a random subset in node order, or shuffled (stages and rings across nodes).
  std::vector<uint32_t> devices(cluster.num_devices());
  for (uint32_t d = 0; d < devices.size(); ++d) devices[d] = d;
  if (Chance(rng, 0.3)) std::shuffle(devices.begin(), devices.end(), rng);
  devices.resize(Pick(rng, std::min<uint32_t>(2, cluster.num_devices()), cluster.num_devices()));
  proto::Plan& plan = c.plan;
  const uint32_t P = Pick(rng, 1, std::min<uint32_t>(3, static_cast<uint32_t>(devices.size())));
  const auto per_pipe = RandomParts(rng, static_cast<uint32_t>(devices.size()), P);
  const int schedule = static_cast<int>(Pick(rng, 0, 3));  // 0, 1: 1F1B; 2: GPipe; 3: interleaved
  const uint32_t zero = Pick(rng, 0, 3);
  const uint32_t shared_m = Pick(rng, 1, 6);
  size_t next = 0;
  for (uint32_t p = 0; p < P; ++p) {
    auto* pipe = plan.add_pipelines();
    const uint32_t n = per_pipe[p];
    const uint32_t S = Pick(rng, 1, std::min<uint32_t>({4, n, L}));
    const auto widths = RandomParts(rng, n, S);
    const auto layers = RandomParts(rng, L, S);
    uint32_t most_dp = 1, begin = 0;
    std::vector<uint32_t> dps;
    for (uint32_t s = 0; s < S; ++s) {
      auto* st = pipe->add_stages();
      const uint32_t w = widths[s];
      for (uint32_t i = 0; i < w; ++i) st->add_devices(devices[next++]);
      std::vector<uint32_t> tps;
      for (uint32_t t = 1; t <= w; t *= 2) {
        if (w % t == 0 && heads % t == 0 && kv % t == 0) tps.push_back(t);
      }
      const uint32_t tp = tps[Pick(rng, 0, static_cast<uint32_t>(tps.size() - 1))];
      if (tp > 1) st->set_tp_degree(tp);
      st->set_layer_begin(begin);
      begin += layers[s];
      st->set_layer_end(begin);
      dps.push_back(w / tp);
      most_dp = std::max(most_dp, w / tp);
    }
    // Sequence sharding on every stage alike (context parallelism or Ulysses), now and then.
    if (Chance(rng, 0.12)) {
      bool all_even = true;
      for (uint32_t s = 0; s < S; ++s) all_even = all_even && dps[s] % 2 == 0;
      if (all_even) {
        const bool ulysses = Chance(rng, 0.5);
        most_dp = 1;
        for (uint32_t s = 0; s < S; ++s) {
          auto* st = pipe->mutable_stages(static_cast<int>(s));
          if (ulysses) {
            st->set_ulysses_degree(2);
          } else {
            st->set_cp_degree(2);
          }
          dps[s] /= 2;
          most_dp = std::max(most_dp, dps[s]);
        }
      }
    }
    const uint32_t b = Pick(rng, most_dp, most_dp + 3);
    pipe->set_micro_batch_size(b);
    pipe->set_num_micro_batches(zero == 3 ? shared_m : Pick(rng, 1, 6));
    for (uint32_t s = 0; s < S; ++s) {
      if (dps[s] > 1 && Chance(rng, 0.6)) {
        auto* st = pipe->mutable_stages(static_cast<int>(s));
        for (uint32_t x : RandomParts(rng, b, dps[s])) st->add_micro_batch_split(x);
      }
    }
  }
  if (schedule == 2) plan.set_schedule(proto::Plan::SCHEDULE_GPIPE);
  if (schedule == 3) {
    plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
    plan.set_virtual_stages(2);
  }
  plan.set_zero_stage(schedule == 3 ? std::min<uint32_t>(zero, 2) : zero);
  plan.set_sequence_parallel(Chance(rng, 0.3));
  auto* comm = plan.mutable_comm();
  comm->set_dp_overlap(Chance(rng, 0.3));
  if (Chance(rng, 0.3)) comm->set_dp_bucket_mib(Chance(rng, 0.5) ? 1 : 8);
  const uint32_t algo = Pick(rng, 0, 3);
  if (algo == 2) comm->set_dp_algorithm(proto::CommOptions::ALGORITHM_TREE);
  if (algo == 3) comm->set_dp_algorithm(proto::CommOptions::ALGORITHM_HIERARCHICAL);
  comm->set_pp_leader_broadcast(Chance(rng, 0.2));
  comm->set_pp_scatter_gather(Chance(rng, 0.1));
  comm->set_tp_overlap(Chance(rng, 0.15));
  if (Chance(rng, 0.2)) comm->set_tp_algorithm(proto::CommOptions::ALGORITHM_NVLS);
  uint32_t global = 0;
  for (const auto& pipe : plan.pipelines()) global += pipe.micro_batch_size() * pipe.num_micro_batches();
  c.training.set_global_batch_size(global);
  c.training.set_seq_len(kModels[c.model].seq_len);
  const uint32_t rc = Pick(rng, 0, 2);
  c.training.set_recompute(rc == 0 ? proto::RECOMPUTE_NONE : rc == 1 ? proto::RECOMPUTE_SELECTIVE : proto::RECOMPUTE_FULL);
  return c;
}

// Whether the plan may be played folded by the simulator (its shape allows it): then the folded
// simulation is checked too.
bool MayFold(const proto::Plan& plan) {
  const auto& p0 = plan.pipelines(0);
  for (const auto& pipe : plan.pipelines()) {
    if (pipe.stages_size() != p0.stages_size()) return false;
    for (int s = 0; s < pipe.stages_size(); ++s) {
      if (pipe.stages(s).devices_size() != p0.stages(s).devices_size()) return false;
      if (models::DpDegree(pipe.stages(s)) != 1 || models::StageSharding(pipe.stages(s)).ways() != 1) return false;
    }
  }
  return true;
}

// 240 random valid plans (seeded) on the clusters above, each played by the cost model and simulated:
//   - the lower bound is never above the simulated iteration, folded or not;
//   - uncontended plans — in the contention-free play no directed link ever carries two flows at the same
//     time — the contention-free play and the estimate agree with the simulation within 5% (the play is
//     then the simulator's own timeline: expect rounding only);
//   - contended plans: contention-free play ≤ simulated ≤ the upper-bound play, where every flow gets
//     bandwidth / K_l on each link l of its route, K_l the distinct flow sources that ever cross l (each
//     source has one flow in flight at a time, and max-min fairness gives each of ≤ K_l flows at least
//     that share); the estimate's error is printed.
TEST(CostAgreement, RandomPlansAgainstTheSimulator) {
  std::vector<models::Cluster> clusters;
  for (const auto& cc : kClusters) {
    proto::Cluster cp;
    ASSERT_TRUE(models::ParseYaml(cc.yaml, cc.name, &cp).ok()) << cc.name;
    auto c = models::Cluster::Build(cp, cc.name);
    ASSERT_TRUE(c.ok()) << cc.name << ": " << c.status().message();
    clusters.push_back(std::move(*c));
  }
  std::vector<models::TransformerModel> models;
  for (const auto& mc : kModels) {
    auto m = models::LoadModel(mc.name);
    ASSERT_TRUE(m.ok());
    models.push_back(std::move(*m));
  }
  const uint32_t wanted = std::getenv("HETSIM_COST_CASES") ? std::atoi(std::getenv("HETSIM_COST_CASES")) : 240;
  const uint64_t first_seed = std::getenv("HETSIM_COST_SEED") ? std::atoll(std::getenv("HETSIM_COST_SEED")) : 1;
  uint32_t valid = 0, uncontended = 0, folded = 0;
  double worst_uncontended = 0, worst_estimate = 0, sum_estimate = 0, worst_bound_ratio = 0;
  std::vector<double> errors;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t seed = first_seed; valid < wanted && seed < first_seed + 20 * wanted; ++seed) {
    RandomCase c = MakeRandomCase(seed, clusters, models);
    const models::Cluster& cluster = clusters[c.cluster];
    const models::TransformerModel& model = models[c.model];
    auto training = models::ResolveTraining(c.training, model, "training");
    if (!training.ok()) continue;
    const models::PlanContext ctx{cluster, model, *training};
    if (!models::ValidatePlanStructure(c.plan, ctx, "plan").ok()) continue;
    planners::PlanningProblem problem{cluster, model, *training, nullptr, {}};
    const planners::AnalyticCostModel cost(problem);
    planners::PlayOptions free;
    free.contention_passes = 0;
    free.fold = false;
    auto p0 = cost.Play(c.plan, free);
    if (!p0.ok()) continue;  // a plan the lowering refuses (the simulator refuses it too)
    ++valid;
    if (const char* dir = std::getenv("HETSIM_COST_DUMP")) {
      // The case as files `hetsim simulate --plan` and HETSIM_COST_PLAN read.
      const std::string cfile = std::string(dir) + "/cluster-" + kClusters[c.cluster].name + ".yaml";
      ASSERT_TRUE(models::WriteFileAtomically(cfile, std::string("kind: cluster\n") + kClusters[c.cluster].yaml).ok());
      ASSERT_TRUE(models::WriteFileAtomically(std::string(dir) + "/seed-" + std::to_string(seed) + ".yaml",
                                              planners::PlanFileYaml(c.plan, cfile, kModels[c.model].name, *training))
                      .ok());
    }
    const std::string where = "seed " + std::to_string(seed) + " (cluster " + kClusters[c.cluster].name + ", model " +
                              kModels[c.model].name + "): HETSIM_COST_SEED=" + std::to_string(seed) +
                              " HETSIM_COST_CASES=1 reproduces it";
    planners::PlayOptions upper = free;
    upper.pricing = planners::Pricing::kUpperBound;
    auto ub = cost.Play(c.plan, upper);
    ASSERT_TRUE(ub.ok()) << where;
    const double estimate = cost.Estimate(c.plan, false).iteration_s;
    const double lower = cost.LowerBoundSeconds(c.plan);
    sim::SimOptions unfolded_options;
    unfolded_options.fold = false;
    auto sim = sim::SimulateIteration(c.plan, ctx, unfolded_options);
    ASSERT_TRUE(sim.ok()) << where << ": " << sim.status().message();
    const double simulated = sim->report.iteration_time_s();
    double simulated_default = simulated;
    if (MayFold(c.plan)) {
      auto folded_sim = sim::SimulateIteration(c.plan, ctx, sim::SimOptions{});
      ASSERT_TRUE(folded_sim.ok()) << where;
      simulated_default = folded_sim->report.iteration_time_s();
      folded += folded_sim->played_devices < static_cast<uint32_t>(folded_sim->report.devices_size()) ? 1 : 0;
    }
    const double slack = 1e-9;
    EXPECT_LE(lower, simulated * (1 + slack)) << where << ": lower bound above the unfolded simulation";
    EXPECT_LE(lower, simulated_default * (1 + slack)) << where << ": lower bound above the simulation";
    const double error = std::abs(estimate - simulated_default) / simulated_default;
    errors.push_back(error);
    sum_estimate += error;
    worst_estimate = std::max(worst_estimate, error);
    if (p0->max_link_flows <= 1) {
      ++uncontended;
      const double e0 = std::abs(p0->iteration_s - simulated) / simulated;
      worst_uncontended = std::max({worst_uncontended, e0, error});
      EXPECT_LE(e0, 0.05) << where << ": contention-free play " << p0->iteration_s << " s, simulated " << simulated;
      EXPECT_LE(error, 0.05) << where << ": estimate " << estimate << " s, simulated " << simulated_default;
    } else {
      EXPECT_LE(p0->iteration_s, simulated * (1 + slack)) << where << ": contention-free play above the simulation";
      EXPECT_LE(simulated, ub->iteration_s * (1 + slack)) << where << ": simulation above the upper bound";
      worst_bound_ratio = std::max(worst_bound_ratio, simulated / p0->iteration_s);
    }
    if (std::getenv("HETSIM_COST_VERBOSE") != nullptr || error > 0.1) {
      std::printf("seed %4llu %-22s %-10s est %9.5f sim %9.5f (%+6.1f%%) free %9.5f lb %9.5f ub %9.5f flows %u K %u%s\n",
                  static_cast<unsigned long long>(seed), kClusters[c.cluster].name, kModels[c.model].name, estimate,
                  simulated_default, 100 * (estimate - simulated_default) / simulated_default, p0->iteration_s, lower,
                  ub->iteration_s, p0->max_link_flows, ub->max_link_sources, simulated_default != simulated ? " folded" : "");
    }
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(errors.begin(), errors.end());
  const double median = errors.empty() ? 0 : errors[errors.size() / 2];
  const double p90 = errors.empty() ? 0 : errors[errors.size() * 9 / 10];
  std::printf("%u plans (%u uncontended, %u folded by the simulator) in %.1f s: uncontended worst error %.2e; "
              "estimate error median %.2f%%, 90th percentile %.2f%%, worst %.2f%%, mean %.2f%%; contended "
              "simulated / contention-free at most %.2f\n",
              valid, uncontended, folded, wall, worst_uncontended, 100 * median, 100 * p90, 100 * worst_estimate,
              100 * sum_estimate / std::max<uint32_t>(1, valid), worst_bound_ratio);
  EXPECT_EQ(valid, wanted) << "too few valid random plans";
}

}  // namespace
}  // namespace hetsim
