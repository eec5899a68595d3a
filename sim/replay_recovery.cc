// After a loss: the work lost, detection, the nodes the job restarts on (the same plan on replacement nodes,
// or a re-plan on every live node, as the policy's placement says), re-planning, restart and state recovery
// (the policy's choices and costs); waiting when there are not enough nodes; growing back.
#include "sim/replay_engine.h"

namespace hetsim::sim::replay_internal {

recovery::Loss Engine::PendingLoss() const {
  return recovery::Loss{*pending_from_, pending_failed_, pending_software_, slots_, slot_of_,
                        [this] { return DeadDevices(); }};
}

// An event stopped the job at t (or hit it while it was recovering).
Status Engine::Interrupt(double t, const std::string& cause, bool detect, const std::set<uint32_t>& failed_nodes) {
  ++interruptions_;
  const bool software = failed_nodes.empty();
  down_cause_ = cause;
  if (mode_ == Mode::kTraining) {
    pending_from_ = cfg_;
    pending_failed_ = failed_nodes;
    pending_software_ = software;
    rolled_further_ = false;
    pending_rollback_ = policy_->NeedsRollback(PendingLoss(), *this);
    // Lost: the iterations since the last checkpoint (in memory or in storage), unless replicas keep them.
    EndTraining(t, !policy_->ReplicasKeepWork() || pending_rollback_, cause);
  } else {
    TruncateDown(t);
    pending_failed_.insert(failed_nodes.begin(), failed_nodes.end());
    pending_software_ = pending_software_ || software;
    pending_rollback_ = pending_rollback_ || policy_->NeedsRollback(PendingLoss(), *this);
  }
  if (pending_rollback_ && !rolled_further_) {
    RollBackFurther();
    rolled_further_ = true;
  }
  mode_ = Mode::kDown;
  down_begin_ = static_cast<size_t>(report_.segments_size());
  double at = t;
  if (detect && detection_s_ > 0) {
    AddSegment(at, at + detection_s_, "detect", cause);
    at += detection_s_;
  }
  return TryRecover(at, cause);
}

// Same-plan placement: every slot whose node left takes a free node of its group (the lowest-numbered one no
// slot holds), then a spare; a slot whose own node is back keeps it. All or nothing.
bool Engine::FillVacantSlots() {
  std::vector<std::pair<size_t, uint32_t>> fills;
  std::map<uint32_t, std::set<uint32_t>::const_iterator> next_free;  // by group
  uint32_t spares_left = virtual_free_;
  for (size_t i : vacant_) {
    if (role_[slots_[i]] == Role::kFree) continue;  // its own node is back
    const uint32_t group = c_.node(base_->nodes[i]).group;
    auto it = next_free.try_emplace(group, free_[group].begin()).first;
    auto& candidate = it->second;
    while (candidate != free_[group].end() && slot_of_[*candidate] >= 0) ++candidate;
    if (candidate != free_[group].end()) {
      fills.emplace_back(i, *candidate++);
    } else if (spares_left > 0) {
      --spares_left;
      fills.emplace_back(i, kSpareNode + spares_left);
    } else {
      return false;
    }
  }
  virtual_free_ = spares_left;
  for (const auto& [slot, node] : fills) FillSlot(slot, node);
  for (size_t i : std::vector<size_t>(vacant_.begin(), vacant_.end())) SetRole(slots_[i], Role::kJob);
  return true;
}

// Chooses the nodes (and plan) to restart on, from time t; waits when there are not enough.
Status Engine::TryRecover(double t, const std::string& cause) {
  std::shared_ptr<Config> next;
  double replan = 0;
  if (traits_.placement == recovery::Placement::kSamePlan) {
    if (!FillVacantSlots()) {
      mode_ = Mode::kWaiting;
      AddSegment(t, kInf, "wait", cause);
      return Status::Ok();
    }
    AccrueCost();
    next = base_;
  } else {
    auto cfg = ReplanConfig();
    if (!cfg.ok()) {
      mode_ = Mode::kWaiting;
      AddSegment(t, kInf, "wait", cause);
      Progress("replay: waiting for nodes at t=" + std::to_string(t) + " s: " + cfg.status().message());
      return Status::Ok();
    }
    next = *cfg;
    if (next->key != cfg_->key) replan = next->replan_s;
    for (uint32_t n : slots_) {
      if (JobUses(n)) SetRole(n, Role::kFree);
    }
    SetSlots(PhysicalNodesOf(*next));
    for (uint32_t n : slots_) SetRole(n, Role::kJob);
    AccrueCost();
  }
  double restore = 0;  // nothing to restore before the first iteration
  if (committed_ > 0 || u_ > 0) {
    HETSIM_ASSIGN_OR_RETURN(restore, policy_->RestoreSeconds(PendingLoss(), *next, pending_rollback_, *this));
  }
  double at = t;
  auto phase = [&](const char* name, double s) {
    if (s <= 0) return;
    AddSegment(at, at + s, name, cause);
    at += s;
  };
  cfg_ = next;
  phase("replan", replan);
  phase("restart", policy_->RestartSeconds(pending_rollback_, restart_s_));
  phase("recover", restore);
  mode_ = Mode::kDown;
  Schedule(at, InternalEvent::kResume, static_cast<uint32_t>(++resume_generation_));
  return Status::Ok();
}

// Growth: nodes came back while training; stop after the iteration in progress, re-plan, move state.
Status Engine::Reconfigure(double t) {
  auto cfg = ReplanConfig();
  if (!cfg.ok() || (*cfg)->key == cfg_->key) return Status::Ok();
  pending_from_ = cfg_;
  pending_failed_.clear();
  pending_software_ = false;
  pending_rollback_ = false;
  down_cause_ = "capacity added";
  EndTraining(t, false, "");
  policy_->Stopped(cfg_);
  mode_ = Mode::kDown;
  down_begin_ = static_cast<size_t>(report_.segments_size());
  return TryRecover(t, "capacity added");
}

}  // namespace hetsim::sim::replay_internal
