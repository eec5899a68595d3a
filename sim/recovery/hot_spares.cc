// hot-spares (Llama 3, Dubey et al. 2024, §3.3.4): checkpoint-restart with spare nodes. The spares sit
// outside the trace's cluster, never fail and are held (and paid) for the whole run: `spares` of them
// (default 1% of the plan's nodes, at least 1). A lost node's slot takes a free node of its group, else a
// spare at once (in a heterogeneous cluster a spare replaces a node of any group); repaired nodes return to
// the pool. Checkpoints go to the object store and come back from it; every loss rolls back.
#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {
namespace {

Traits HotSparesTraits() {
  Traits t;
  t.spares = true;
  return t;
}

class HotSpares : public Policy {
 public:
  HotSpares() : Policy(HotSparesTraits()) {}

  Result<double> SaveSeconds(const Config& c, Env& env) override { return ObjectStoreSaveSeconds(c, env); }
  bool NeedsRollback(const Loss&, Env&) override { return true; }
  Result<double> RestoreSeconds(const Loss&, const Config& to, bool, Env&) override { return to.load_s; }
};

}  // namespace

std::unique_ptr<Policy> NewHotSpares(const proto::RecoveryPolicy&) { return std::make_unique<HotSpares>(); }

}  // namespace hetsim::sim::recovery
