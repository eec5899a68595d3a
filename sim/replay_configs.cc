// Configurations (a plan on a set of nodes) and their simulated costs, cached for the replays of a sweep.
#include <set>

#include "models/plan.h"
#include "sim/replay_engine.h"

namespace hetsim::sim::replay_internal {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

}  // namespace

Result<double> Engine::Seconds(const std::string& key, const std::function<Result<double>()>& simulate) {
  auto& cache = in_.cache != nullptr ? in_.cache->seconds : local_cache_.seconds;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  HETSIM_ASSIGN_OR_RETURN(double v, simulate());
  cache[key] = v;
  return v;
}

Result<double> Engine::PlayTransfers(const models::Cluster& on, const std::vector<Transfer>& transfers,
                                     const std::string& what) {
  Progress("replay: simulating " + what + " (" + std::to_string(transfers.size()) + " transfers)");
  return SimulateTransfers(transfers, on, in_.sim.compute.calibration);
}

Result<std::shared_ptr<Config>> Engine::MakeConfig(proto::Plan plan, std::shared_ptr<const models::Cluster> cluster,
                                                   std::vector<uint32_t> node_map, double replan_s) {
  auto cfg = std::make_shared<Config>();
  cfg->plan = std::move(plan);
  cfg->cluster = std::move(cluster);
  cfg->node_map = std::move(node_map);
  cfg->replan_s = replan_s;
  const models::Cluster& cl = *cfg->cluster;
  // Where its devices sit on the trace's cluster: a node with fewer GPUs than its physical one (GPUs lost)
  // runs on the physical node's surviving GPUs in order.
  for (uint32_t d = 0; d < cl.num_devices(); ++d) {
    const auto& dev = cl.device(d);
    const uint32_t node = cfg->node_map[dev.node];
    uint32_t local = dev.local;
    auto lost = lost_gpus_.find(node);
    if (lost != lost_gpus_.end() && cl.node(dev.node).num_gpus < c_.node(node).num_gpus) {
      for (uint32_t k = 0, alive = 0; k < c_.node(node).num_gpus; ++k) {
        if (lost->second.count(k) != 0) continue;
        if (alive++ == dev.local) {
          local = k;
          break;
        }
      }
    }
    cfg->place.push_back(c_.node(node).first_device + local);
  }
  models::PlanContext ctx{cl, *in_.model, in_.training};
  std::set<uint32_t> nodes;
  const auto memory = models::EstimateMemory(cfg->plan, ctx);
  const double pipelines = std::max(1, cfg->plan.pipelines_size());
  for (const auto& m : memory) {
    cfg->devices.push_back(m.device);
    nodes.insert(cl.device(m.device).node);
    cfg->state_bytes.push_back((m.params_gib + m.optimizer_gib) * kGiB);
    // One checkpoint holds every parameter and the optimizer state once, written in parallel by the
    // replicas (Megatron-LM's fully parallel save): a replicated tensor is split over the pipelines.
    const double params = m.params_gib * kGiB / pipelines;
    const double opt = cfg->plan.zero_stage() >= 1 ? m.optimizer_gib * kGiB : m.optimizer_gib * kGiB / pipelines;
    cfg->write_bytes.push_back(params + opt);
  }
  cfg->nodes.assign(nodes.begin(), nodes.end());
  cfg->gpus = static_cast<uint32_t>(memory.size());
  std::string key_text = cl.spec().SerializeAsString() + "|" + cfg->plan.SerializeAsString() + "|" +
                         in_.model->name() + "|" + in_.training.SerializeAsString() + "|" +
                         std::to_string(static_cast<int>(in_.sim.fidelity.collectives)) +
                         std::to_string(static_cast<int>(in_.sim.fidelity.tp)) + "|" + in_.sim.compute.calibration;
  cfg->key = recovery::ShortKey(key_text);
  HETSIM_ASSIGN_OR_RETURN(cfg->iteration_s, Seconds("iteration|" + cfg->key, [&]() -> Result<double> {
                            Progress("replay: simulating an iteration of " + PlanLabel(cfg->plan) + " on " +
                                     std::to_string(cfg->gpus) + " GPUs");
                            SimOptions opt = in_.sim;
                            opt.record_timeline = false;
                            HETSIM_ASSIGN_OR_RETURN(SimResult r, SimulateIteration(cfg->plan, ctx, opt));
                            return r.report.iteration_time_s();
                          }));
  // Every device reads what it holds from the object store (a restart after a rollback).
  HETSIM_ASSIGN_OR_RETURN(cfg->load_s, Seconds("load-object-store|" + cfg->key, [&] {
                            std::vector<Transfer> load;
                            for (size_t i = 0; i < memory.size(); ++i) {
                              load.push_back({{Endpoint::kObjectStore, 0},
                                              {Endpoint::kGpu, memory[i].device},
                                              cfg->state_bytes[i]});
                            }
                            return PlayTransfers(cl, load, "a checkpoint load from the object store");
                          }));
  HETSIM_ASSIGN_OR_RETURN(cfg->save_s, policy_->SaveSeconds(*cfg, *this));
  return cfg;
}

// The plan on every live node (re-planning policies): the starting one on the whole cluster, else a fixed
// plan for these nodes (replan_plans), else the policy's planner's. Built once per set of live nodes.
Result<std::shared_ptr<Config>> Engine::ReplanConfig() {
  // Live nodes in the live cluster's order: each group's whole nodes, then its nodes with lost GPUs.
  std::vector<uint32_t> live;
  std::string live_key;
  for (const auto& group : nodes_of_group_) {
    for (int degraded = 0; degraded < 2; ++degraded) {
      for (uint32_t n : group) {
        auto lost = lost_gpus_.find(n);
        if ((lost != lost_gpus_.end()) != (degraded != 0)) continue;
        if (role_[n] != Role::kFree && role_[n] != Role::kJob) continue;
        live.push_back(n);
        live_key += std::to_string(n);
        if (lost != lost_gpus_.end()) {
          for (uint32_t k : lost->second) live_key += "-" + std::to_string(k);
        }
        live_key += ",";
      }
    }
  }
  if (live.empty()) return Status::Invalid("no live node");
  const bool all = live.size() == role_.size() && lost_gpus_.empty();
  if (all && in_.policy.replan_plans_size() == 0) return base_;
  if (auto it = replanned_.find(live_key); it != replanned_.end()) return it->second;
  // The live nodes' cluster: the trace cluster's node groups in order, each with its live nodes only, named
  // <cluster>-live-<live nodes per group> (the trace cluster itself when every node is live).
  proto::Cluster spec = c_.spec();
  std::shared_ptr<const models::Cluster> cluster = base_->cluster;
  if (!all) {
    std::vector<uint32_t> count(static_cast<size_t>(spec.nodes_size()), 0);
    for (uint32_t n : live) ++count[c_.node(n).group];
    spec.clear_nodes();
    std::string counts;
    for (int g = 0; g < c_.spec().nodes_size(); ++g) {
      uint32_t k = count[static_cast<size_t>(g)];
      std::vector<uint32_t> degraded;  // a node with lost GPUs is a group of one with fewer GPUs
      for (uint32_t n : live) {
        if (c_.node(n).group == static_cast<uint32_t>(g) && lost_gpus_.count(n) != 0) degraded.push_back(n);
      }
      k -= static_cast<uint32_t>(degraded.size());
      counts += (g > 0 ? "-" : "") + std::to_string(k);
      if (k > 0) {
        auto* ng = spec.add_nodes();
        *ng = c_.spec().nodes(g);
        ng->set_count(k);
      }
      for (uint32_t n : degraded) {
        auto* ng = spec.add_nodes();
        *ng = c_.spec().nodes(g);
        ng->set_count(1);
        ng->set_name(ng->name() + "-degraded-" + std::to_string(n));
        ng->mutable_gpus()->set_count(GpusOf(n));
        counts += "+" + std::to_string(GpusOf(n));
      }
    }
    spec.set_name(c_.name() + "-live-" + counts);
    HETSIM_ASSIGN_OR_RETURN(models::Cluster sub, models::Cluster::Build(spec, "<live nodes of " + c_.name() + ">"));
    cluster = std::make_shared<const models::Cluster>(std::move(sub));
  }
  auto remember = [&](Result<std::shared_ptr<Config>> made) -> Result<std::shared_ptr<Config>> {
    if (made.ok()) replanned_[live_key] = *made;
    return made;
  };
  // A plan written for exactly these live nodes (the policy's replan_plans) comes first, even before the
  // starting plan: it names their cluster (or none), validates on it and uses every one of its GPUs. No
  // search, so no re-planning time unless replan_s.
  for (const auto& fixed : in_.policy.replan_plans()) {
    if (!fixed.cluster().empty() && fixed.cluster() != cluster->name()) continue;
    const models::PlanContext ctx{*cluster, *in_.model, in_.training};
    if (!models::ValidatePlanStructure(fixed, ctx, "").ok()) continue;
    std::set<uint32_t> used;
    for (const auto& p : fixed.pipelines()) {
      for (const auto& s : p.stages()) used.insert(s.devices().begin(), s.devices().end());
    }
    if (used.size() != cluster->num_devices()) continue;
    return remember(MakeConfig(fixed, cluster, live, in_.policy.has_replan_s() ? in_.policy.replan_s() : 0));
  }
  if (all) return base_;
  if (!in_.replan) {
    std::string why = "policy " + in_.policy.name() + " re-plans, but no planner is available";
    if (in_.policy.replan_plans_size() > 0) {
      why += " and none of its replan_plans uses exactly the live nodes (" + cluster->name() + ": " +
             cluster->Summary() + ")";
    }
    return Status::Invalid(why);
  }
  // Keyed by the planner and options actually used (policies with different defaults share no plan).
  const auto [planner, options] = recovery::Replanner(in_.policy);
  const std::string plan_key = planner + "|" + options + "|" + spec.name() + "|" + in_.model->name() + "|" +
                               in_.training.SerializeAsString();
  auto& plans = in_.cache != nullptr ? in_.cache->plans : local_cache_.plans;
  auto it = plans.find(plan_key);
  if (it == plans.end()) {
    Progress("replay: re-planning on " + std::to_string(live.size()) + " live nodes (" + cluster->Summary() + ")");
    HETSIM_ASSIGN_OR_RETURN(Replanned r, in_.replan(*cluster, in_.policy));
    it = plans.emplace(plan_key, std::move(r)).first;
  }
  // No re-planning time unless the policy fixes one or asks for the planner's measured wall time, so that
  // the same inputs give the same report.
  const double replan_s = in_.policy.has_replan_s()       ? in_.policy.replan_s()
                          : in_.policy.measured_replan() ? it->second.wall_s
                                                         : 0;
  return remember(MakeConfig(it->second.plan, cluster, live, replan_s));
}

}  // namespace hetsim::sim::replay_internal
