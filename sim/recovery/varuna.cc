// varuna (Varuna, Athlur et al., EuroSys'22): re-plans pipeline × data parallelism on every live node
// (default planner megatron at TP 1), shrinking on a loss and growing back when nodes return. A checkpoint
// blocks for each device's write to its node's local NVMe; the upload to the object store runs in the
// background. After a change of configuration the state is read from the object store (the sharding
// changed); every loss rolls back to the last checkpoint. Growing back is graceful: training stops after
// the unit in progress and the state at the stop is reloaded (its save is not charged).
#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {
namespace {

Traits VarunaTraits() {
  Traits t;
  t.placement = Placement::kReplan;
  t.grow = true;
  t.planner = "megatron";
  t.planner_options = "tp_degrees: [1]";
  return t;
}

class Varuna : public Policy {
 public:
  Varuna() : Policy(VarunaTraits()) {}

  Result<double> SaveSeconds(const Config& c, Env& env) override {
    return env.Seconds("save|nvme|" + c.key, [&] {
      return env.PlayTransfers(*c.cluster, CheckpointWrites(c, Endpoint::kNvme), "a checkpoint save to local NVMe");
    });
  }
  bool NeedsRollback(const Loss&, Env&) override { return true; }
  Result<double> RestoreSeconds(const Loss&, const Config& to, bool, Env&) override { return to.load_s; }
};

}  // namespace

std::unique_ptr<Policy> NewVaruna(const proto::RecoveryPolicy&) { return std::make_unique<Varuna>(); }

}  // namespace hetsim::sim::recovery
