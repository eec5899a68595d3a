// checkpoint-restart (Megatron-LM, DeepSpeed): every device writes its share of a checkpoint to the object
// store (the save blocks training); after a loss the same plan restarts on the job's nodes, a lost node
// replaced by a free node of its group (else the job waits for its repair), and every device reads what it
// holds back from the object store. Every loss rolls back to the last checkpoint.
#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {
namespace {

class CheckpointRestart : public Policy {
 public:
  CheckpointRestart() : Policy(Traits{}) {}

  Result<double> SaveSeconds(const Config& c, Env& env) override { return ObjectStoreSaveSeconds(c, env); }
  bool NeedsRollback(const Loss&, Env&) override { return true; }
  Result<double> RestoreSeconds(const Loss&, const Config& to, bool, Env&) override { return to.load_s; }
};

}  // namespace

std::unique_ptr<Policy> NewCheckpointRestart(const proto::RecoveryPolicy&) {
  return std::make_unique<CheckpointRestart>();
}

}  // namespace hetsim::sim::recovery
