// autohet (AutoHet §IV, "Elastic Training Recovery"): re-plans on every live node (default planner autohet,
// AutoHet §III), shrinking on a loss and growing back when nodes return.
//
// - Layer-wise checkpoints (§IV-B1): every device saves its own pieces of its layers; the copy to its node's
//   host memory blocks training (torch.save to CPU memory), the local NVMe copy and the cloud upload run in
//   the background and are assumed done before the next checkpoint.
// - The layer bitmap (§IV-C, sim/recovery/autohet_layers.h): which node holds which ranges of every layer
//   part; the configuration that saved the last checkpoint, less every node that left since (a node that
//   comes back comes back empty). The object store holds everything.
// - Adaptive, accelerated loading (§IV-B2, §IV-C): after the restart every device of the new plan loads the
//   overlap of its ranges with the holders' (split or concatenated to the new TP degree): its own node's
//   copy first (local NVMe, or host memory with `load_from_host_memory: true`), then other live nodes' over
//   the network (RDMA), only the pieces no live node holds from the object store; all transfers at once on
//   the platform.
// Every loss rolls back to the last checkpoint (as varuna); growing back is graceful (no rollback), and the
// state at the stop is what is loaded, where the old configuration ran (its save is not charged, as
// varuna's reload from the object store is not). Choices where the paper is silent: docs/replay.md.
#include <cstdio>

#include "sim/recovery/autohet_layers.h"
#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {
namespace {

Traits AutohetTraits() {
  Traits t;
  t.placement = Placement::kReplan;
  t.grow = true;
  t.planner = "autohet";  // planners/autohet: AutoHet §III's planner
  t.options = {"load_from_host_memory"};
  return t;
}

// Where a configuration's devices sit on the trace's cluster `c`.
std::vector<DevicePlace> PlacesOf(const Config& cfg, const models::Cluster& c) {
  std::vector<DevicePlace> out(cfg.cluster->num_devices());
  for (uint32_t d = 0; d < cfg.cluster->num_devices(); ++d) out[d] = {cfg.place[d], c.device(cfg.place[d]).node};
  return out;
}

class Autohet : public Policy {
 public:
  explicit Autohet(const proto::RecoveryPolicy& o)
      : Policy(AutohetTraits()), local_tier_(o.load_from_host_memory() ? Endpoint::kHostMemory : Endpoint::kNvme) {}

  Result<double> SaveSeconds(const Config& c, Env& env) override {
    return env.Seconds("save|layerwise|" + c.key, [&] {
      return env.PlayTransfers(*c.cluster, HostMemoryCopies(c), "a layer-wise checkpoint copy to host memory");
    });
  }
  void Saved(const std::shared_ptr<const Config>& c, double) override { Hold(c); }
  void Stopped(const std::shared_ptr<const Config>& c) override { Hold(c); }
  void NodeLeft(uint32_t node) override { left_.insert(node); }

  bool NeedsRollback(const Loss&, Env&) override { return true; }

  // Every device of `to` loads its pieces of the last checkpoint, local first, then from peers, the rest from
  // the object store; played on the trace's cluster (both configurations placed on it).
  Result<double> RestoreSeconds(const Loss&, const Config& to, bool, Env& env) override {
    const models::Cluster& c = env.cluster();
    std::string key = std::to_string(std::hash<std::string>{}(c.spec().SerializeAsString())) + "|" +
                      std::to_string(static_cast<int>(local_tier_)) + "|" + PlacementKey(to) + "|";
    if (saved_ != nullptr) {
      key += PlacementKey(*saved_) + "|left";
      for (uint32_t n : left_) key += "," + std::to_string(n);
    }
    return env.Seconds("restore-layerwise|" + ShortKey(key), [&]() -> Result<double> {
      LayerBitmap bitmap;
      if (saved_ != nullptr) {
        const models::PlanContext ctx{*saved_->cluster, env.model(), env.training()};
        bitmap = LayerBitmap(LayerPieces(saved_->plan, ctx, PlacesOf(*saved_, c)));
        for (uint32_t n : left_) bitmap.Forget(n);
      }
      const models::PlanContext ctx{*to.cluster, env.model(), env.training()};
      const RecoveryLoad load = PlanRecoveryLoad(bitmap, LayerPieces(to.plan, ctx, PlacesOf(to, c)), local_tier_);
      char what[160];
      std::snprintf(what, sizeof(what),
                    "a layer-wise restore (%.3g GB local, %.3g GB from peers, %.3g GB from the cloud)",
                    load.local_bytes / 1e9, load.peer_bytes / 1e9, load.cloud_bytes / 1e9);
      return env.PlayTransfers(c, load.transfers, what);
    });
  }

 private:
  // The state of `c` is saved where it ran: the bitmap starts again from its devices.
  void Hold(const std::shared_ptr<const Config>& c) {
    saved_ = c;
    left_.clear();
  }

  Endpoint::Kind local_tier_;
  std::shared_ptr<const Config> saved_;  // the configuration whose devices saved the last checkpoint
  std::set<uint32_t> left_;              // trace nodes that left since (their copies are gone)
};

}  // namespace

std::unique_ptr<Policy> NewAutohet(const proto::RecoveryPolicy& options) { return std::make_unique<Autohet>(options); }

}  // namespace hetsim::sim::recovery
