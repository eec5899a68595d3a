// elastic (Oobleck, Jang et al., SOSP'23; Bamboo, Thorpe et al., NSDI'23): re-plans on every live node with
// any registered planner (`planner`, `planner_options`; default megatron), shrinking on a loss and growing
// back when nodes return (`grow: false` stays shrunk). Checkpoints go to the object store, and the job saves
// one at a preemption's notice when the notice leaves time (C + T).
//
// State comes back from the surviving replicas' GPUs (Oobleck §5): each device of the new plan that does not
// already hold its shard receives it from a surviving device of the old plan holding its first layer,
// replicas taken in turn. No rollback while every layer has a stage all of whose devices live; after a crash
// of the job's processes, or when a layer lost every replica, the job rolls back to its checkpoint and reads
// it from the object store. The redistribution is simulated once per pair of configurations (the first
// time it happens).
#include <algorithm>

#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {
namespace {

Traits ElasticTraits() {
  Traits t;
  t.placement = Placement::kReplan;
  t.grow = true;
  t.checkpoint_on_notice = true;
  t.planner = "megatron";
  return t;
}

// Whether every layer has a stage holding it whose devices all live (a replica in another pipeline).
bool StateSurvives(const Config& from, const std::set<uint32_t>& failed) {
  uint32_t max_end = 0;
  for (const auto& p : from.plan.pipelines()) {
    for (const auto& s : p.stages()) max_end = std::max(max_end, s.layer_end());
  }
  std::vector<bool> held(max_end, false);
  for (const auto& p : from.plan.pipelines()) {
    for (const auto& s : p.stages()) {
      bool alive = true;
      for (uint32_t d : s.devices()) alive &= failed.count(from.node_map[from.cluster->device(d).node]) == 0;
      if (!alive) continue;
      for (uint32_t l = s.layer_begin(); l < s.layer_end(); ++l) held[l] = true;
    }
  }
  return std::all_of(held.begin(), held.end(), [](bool b) { return b; });
}

// The transfers that move the surviving replicas' state of `from` to `to`, both placed on `c` (the trace's
// cluster).
std::vector<Transfer> Redistribution(const Config& from, const Config& to, const std::set<uint32_t>& failed,
                                     const models::Cluster& c) {
  struct Holder {
    uint32_t device;  // on the trace's cluster
    uint32_t begin, end, tp, rank;
  };
  std::vector<Holder> old_holders;
  for (const auto& p : from.plan.pipelines()) {
    for (const auto& s : p.stages()) {
      for (int r = 0; r < s.devices_size(); ++r) {
        const auto& dev = from.cluster->device(s.devices(r));
        const uint32_t node = from.node_map[dev.node];
        if (failed.count(node) != 0) continue;
        old_holders.push_back({c.node(node).first_device + dev.local, s.layer_begin(), s.layer_end(),
                               std::max(1u, s.tp_degree()), static_cast<uint32_t>(r)});
      }
    }
  }
  const models::Cluster& cl = *to.cluster;
  std::vector<Transfer> t;
  size_t turn = 0, i = 0;
  for (const auto& p : to.plan.pipelines()) {
    for (const auto& s : p.stages()) {
      for (int r = 0; r < s.devices_size(); ++r, ++i) {
        const auto& dev = cl.device(s.devices(r));
        const uint32_t phys = c.node(to.node_map[dev.node]).first_device + dev.local;
        bool has = false;
        std::vector<const Holder*> sources;
        for (const auto& h : old_holders) {
          has |= h.device == phys && h.begin == s.layer_begin() && h.end == s.layer_end() &&
                 h.tp == std::max(1u, s.tp_degree()) && h.rank == static_cast<uint32_t>(r);
          if (h.begin <= s.layer_begin() && s.layer_begin() < h.end) sources.push_back(&h);
        }
        if (has || sources.empty()) continue;
        t.push_back({{Endpoint::kGpu, sources[turn++ % sources.size()]->device}, {Endpoint::kGpu, phys},
                     to.state_bytes[i]});
      }
    }
  }
  return t;
}

class Elastic : public Policy {
 public:
  Elastic() : Policy(ElasticTraits()) {}

  Result<double> SaveSeconds(const Config& c, Env& env) override { return ObjectStoreSaveSeconds(c, env); }

  // A crash of the job's processes loses every GPU's state; a node loss only the replicas on it.
  bool NeedsRollback(const Loss& loss, Env&) override {
    return loss.software || !StateSurvives(loss.from, loss.failed_nodes);
  }
  bool ReplicasKeepWork() const override { return true; }

  Result<double> RestoreSeconds(const Loss& loss, const Config& to, bool rollback, Env& env) override {
    if (rollback) return to.load_s;
    return env.Seconds("restore-replicas|" + loss.from.key + "|" + to.key, [&] {
      return env.PlayTransfers(env.cluster(), Redistribution(loss.from, to, loss.failed_nodes, env.cluster()),
                               "a state redistribution from replicas");
    });
  }
};

}  // namespace

std::unique_ptr<Policy> NewElastic(const proto::RecoveryPolicy&) { return std::make_unique<Elastic>(); }

}  // namespace hetsim::sim::recovery
