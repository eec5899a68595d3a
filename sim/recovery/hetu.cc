// hetu (Hetu v2 §6, §7.2; docs/hspmd.md): re-plans on every live GPU, with no restart. A failed GPU leaves
// the other GPUs of its node in the job (the node becomes a group of one with fewer GPUs in the live
// cluster). After a change: detection, graph specialisation (`specialization_s`, default 10 s, §8:
// "typically completes within 10 seconds"; reported as the restart phase), then the weights and optimizer
// state move from the surviving devices to the new plan by BSR (§6.2), fused into one plan with one send per
// GPU pair (`fused_bsr: false`: per tensor, one after another), with the sender heuristics of §4.3
// (`bsr_heuristics: false`: the lowest owner sends), played on the platform by sim/hetu_switching.h.
//
// No rollback while every slice of every weight has a live owner and ZeRO is off (Table 7's note: ZeRO off,
// two pipelines); otherwise, and after a crash of the job's processes, the checkpoint: a rollback, a
// restart and a reload from the object store. Checkpoints go to the object store; one is saved at a
// preemption's notice. The new plan: `replan_plans` when given (the §7.2 manifests use Tables 7-8's), else
// the hetu planner with ZeRO off (planners/hetu: per-type TP groups, a node with failed GPUs as smaller
// groups, uneven pipelines; §A.3).
#include <cstdio>
#include <map>
#include <optional>

#include "sim/hetu_switching.h"
#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {
namespace {

constexpr size_t kMemo = 4096;  // answers kept per map (a long trace sees many sets of dead devices)

Traits HetuTraits() {
  Traits t;
  t.placement = Placement::kReplan;
  t.gpu_granular = true;
  t.grow = true;
  t.checkpoint_on_notice = true;
  t.planner = "hetu";
  t.planner_options = "{zero_stage: 0}";
  t.options = {"specialization_s", "fused_bsr", "bsr_heuristics", "switch_bytes_per_param"};
  return t;
}

std::string DeviceList(const std::set<uint32_t>& devices) {
  std::string s;
  for (uint32_t d : devices) s += "," + std::to_string(d);
  return s;
}

class Hetu : public Policy {
 public:
  explicit Hetu(const proto::RecoveryPolicy& o) : Policy(HetuTraits()) {
    if (o.has_specialization_s()) specialization_s_ = o.specialization_s();
    switch_.fused = !o.has_fused_bsr() || o.fused_bsr();
    switch_.heuristics = !o.has_bsr_heuristics() || o.bsr_heuristics();
    switch_.bytes_per_param = o.switch_bytes_per_param();
  }

  Result<double> SaveSeconds(const Config& c, Env& env) override { return ObjectStoreSaveSeconds(c, env); }

  bool NeedsRollback(const Loss& loss, Env& env) override {
    if (loss.software || loss.from.plan.zero_stage() > 0) return true;
    // Every slice of every weight needs a live owner: the switch from the old plan to itself, without the
    // sender heuristics, finds what no live device holds.
    const std::set<uint32_t> dead = loss.dead_devices();
    HetuSwitchOptions probe = switch_;
    probe.heuristics = false;
    const std::string key = PlacementKey(loss.from) + "|" + DeviceList(dead);
    auto it = orphaned_.find(key);
    if (it == orphaned_.end()) {
      if (orphaned_.size() >= kMemo) orphaned_.clear();
      const auto plan = PlanHetuSwitch(loss.from.plan, loss.from.place, loss.from.plan, loss.from.place, env.model(),
                                       env.training(), env.cluster(), dead, probe);
      it = orphaned_.emplace(key, plan.missing_bytes > 0).first;
    }
    return it->second;
  }
  bool ReplicasKeepWork() const override { return true; }

  // The weights of `from` that survive move to `to` by (fused) BSR, on the trace's cluster.
  Result<double> RestoreSeconds(const Loss& loss, const Config& to, bool rollback, Env& env) override {
    if (rollback) return to.load_s;
    const std::set<uint32_t> dead = loss.dead_devices();
    std::optional<models::hspmd::SwitchPlan> plan;
    const std::string exact = PlacementKey(loss.from) + "|" + PlacementKey(to) + "|" + DeviceList(dead);
    auto it = missing_.find(exact);
    if (it == missing_.end()) {
      if (missing_.size() >= kMemo) missing_.clear();
      plan = PlanHetuSwitch(loss.from.plan, loss.from.place, to.plan, to.place, env.model(), env.training(),
                            env.cluster(), dead, switch_);
      it = missing_.emplace(exact, plan->missing_bytes > 0).first;
    }
    if (it->second) return to.load_s;  // NeedsRollback saw it first, unless a node was lost meanwhile
    const std::string key = "hetu-switch|" + loss.from.key + "|" + to.key + "|" + std::to_string(switch_.fused) +
                            std::to_string(switch_.heuristics) + "|" +
                            std::to_string(SwitchBytesPerParam(switch_, env.training())) + DeviceList(dead);
    return env.Seconds(key, [&]() -> Result<double> {
      if (!plan) {
        plan = PlanHetuSwitch(loss.from.plan, loss.from.place, to.plan, to.place, env.model(), env.training(),
                              env.cluster(), dead, switch_);
      }
      char what[160];
      std::snprintf(what, sizeof(what), "a graph switch (%s BSR, %.3g GB sent, %.3g GB local)",
                    switch_.fused ? "fused" : "unfused", plan->sent_bytes / 1e9, plan->local_bytes / 1e9);
      env.Progress(std::string("replay: simulating ") + what);
      return SimulateSwitch(*plan, env.cluster(), env.calibration());
    });
  }

  // Graph specialisation in place of a restart, unless the job fell back to its checkpoint.
  double RestartSeconds(bool rollback, double restart_s) const override {
    return rollback ? restart_s : specialization_s_;
  }

 private:
  double specialization_s_ = 10;
  HetuSwitchOptions switch_;
  std::map<std::string, bool> orphaned_;  // NeedsRollback's answers, by old placement and dead devices
  std::map<std::string, bool> missing_;   // whether a switch misses a slice, by both placements and dead devices
};

}  // namespace

std::unique_ptr<Policy> NewHetu(const proto::RecoveryPolicy& options) { return std::make_unique<Hetu>(options); }

}  // namespace hetsim::sim::recovery
