// The replay engine (internal to sim/; the public API is sim/replay.h): the event loop over a trace and the
// run's books. The recovery policy (sim/recovery/policy.h) decides what happens on an event; the engine
// keeps the world (which node is in the job, free, down or absent), the training timeline and the report.
//
//   replay_engine.cc    the event loop: trace events to node roles, interruptions, repairs; the report
//   replay_training.cc  training segments: iterations in closed form, a step per checkpoint; rollbacks
//   replay_recovery.cc  after a loss: detection, the nodes to restart on (same plan or re-plan), the down
//                       phases; growing back
//   replay_configs.cc   configurations (a plan on a set of nodes) and their simulated costs, cached
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/recovery/policy.h"
#include "sim/replay.h"

namespace hetsim::sim::replay_internal {

using recovery::Config;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = 1e-9;
constexpr uint32_t kSpareNode = recovery::kSpareNode;
// Checkpoints a run may hold: the training loop runs once per checkpoint (the iterations between two advance
// in closed form), so a fixed interval that would make more is refused, naming the least interval that fits.
constexpr double kMaxCheckpoints = kMaxCheckpointsPerRun;  // sim/replay.h

enum class Role : uint8_t { kFree, kJob, kDown, kAbsent };  // kAbsent: preempted, or not yet added (spot)

struct InternalEvent {
  double t;
  uint64_t seq;
  enum Kind { kTrace, kRepair, kRemove, kStragglerEnd, kResume } kind;
  uint32_t index;  // trace event, node, straggler or resume generation
  bool operator>(const InternalEvent& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// "megatron: 4 pipelines × 2 stages, TP 4" when the plan has no name.
std::string PlanLabel(const proto::Plan& p);

class Engine : public recovery::Env {
 public:
  Engine(const ReplayInputs& in, std::unique_ptr<recovery::Policy> policy);

  Result<proto::ReplayReport> Run();

  // ---- recovery::Env ----
  const models::Cluster& cluster() const override { return c_; }
  const models::TransformerModel& model() const override { return *in_.model; }
  const proto::Training& training() const override { return in_.training; }
  const std::string& calibration() const override { return in_.sim.compute.calibration; }
  Result<double> Seconds(const std::string& key, const std::function<Result<double>()>& simulate) override;
  Result<double> PlayTransfers(const models::Cluster& on, const std::vector<Transfer>& transfers,
                               const std::string& what) override;
  void Progress(const std::string& line) override {
    if (in_.progress) in_.progress(line);
  }

 private:
  // ---- configurations (replay_configs.cc) ----
  Result<std::shared_ptr<Config>> MakeConfig(proto::Plan plan, std::shared_ptr<const models::Cluster> cluster,
                                             std::vector<uint32_t> node_map, double replan_s);
  Result<std::shared_ptr<Config>> ReplanConfig();  // the plan on every live node
  std::vector<uint32_t> PhysicalNodesOf(const Config& c) const {
    std::vector<uint32_t> out;
    for (uint32_t n : c.nodes) out.push_back(c.node_map[n]);
    return out;
  }

  // ---- the world (replay_engine.cc) ----
  uint32_t GpusOf(uint32_t node) const {
    if (node >= kSpareNode) return spare_gpus_per_node_;
    auto lost = lost_gpus_.find(node);
    return c_.node(node).num_gpus - (lost == lost_gpus_.end() ? 0 : static_cast<uint32_t>(lost->second.size()));
  }
  bool JobUses(uint32_t node) const { return node < role_.size() && role_[node] == Role::kJob; }
  void SetRole(uint32_t node, Role r);
  // Changes the GPUs a node has lost (GPU-granular policies) through `change`, keeping the books.
  void ChangeLostGpus(uint32_t node, const std::function<void()>& change);
  // The job's node slots: the node in each of the plan's slots, and each node's slot.
  void SetSlots(std::vector<uint32_t> slots);
  void FillSlot(size_t slot, uint32_t node);
  // GPU-hours: charges what was held since the last call, then holds what the job holds now.
  void AccrueCost() {
    gpu_seconds_ += held_gpus_ * (now_ - held_since_);
    held_gpus_ = spare_gpus_total_ + job_gpus_;
    held_since_ = now_;
  }
  void Schedule(double t, InternalEvent::Kind k, uint32_t index) { queue_.push({t, seq_++, k, index}); }
  bool NextEvent(InternalEvent* ev);
  Status HandleTraceEvent(double t, const proto::TraceEvent& e);
  Status NodesBack(double t);
  std::set<uint32_t> DeadDevices() const;
  double StragglerFactor() const;
  void FillReport(double mtbf, uint32_t events);

  // ---- training (replay_training.cc) ----
  void StartTraining(double t);
  void AdvanceTraining(double t1);
  void EndTraining(double t, bool rollback, const std::string& cause);
  void Split(double t);  // a new segment (the iteration time changed); the iterations since the checkpoint stay
  void CloseSegment(double t, uint64_t lost_iterations);
  void Commit();
  void RecordConfig(const Config& c);
  void RollBackFurther();  // the policy's rollback goes further back than the last checkpoint
  void AddSegment(double start, double end, const std::string& phase, const std::string& cause);
  void TruncateDown(double t);

  // ---- recovery (replay_recovery.cc) ----
  recovery::Loss PendingLoss() const;
  Status Interrupt(double t, const std::string& cause, bool detect, const std::set<uint32_t>& failed_nodes);
  Status TryRecover(double t, const std::string& cause);
  bool FillVacantSlots();  // same-plan placement; false: not enough nodes (nothing changed)
  Status Reconfigure(double t);  // graceful growth

  const ReplayInputs& in_;
  const models::Cluster& c_;
  std::unique_ptr<recovery::Policy> policy_;
  const recovery::Traits& traits_;
  double detection_s_ = 0, restart_s_ = 0, duration_ = 0, tokens_per_iteration_ = 0;
  bool grow_ = false, notice_ckpt_ = false;
  // GPU-granular policies: GPUs lost on nodes that stay in the job (node -> local indices).
  std::map<uint32_t, std::set<uint32_t>> lost_gpus_;
  ReplayCache local_cache_;
  proto::ReplayReport report_;

  // The world.
  std::vector<Role> role_;
  std::vector<double> back_at_;
  std::vector<std::vector<uint32_t>> nodes_of_group_;  // the trace cluster's nodes by group, ascending
  std::vector<std::set<uint32_t>> free_;               // free nodes by group
  uint32_t virtual_free_ = 0;                          // spares not yet used
  double spare_gpus_total_ = 0;
  uint32_t spare_gpus_per_node_ = 0;
  double job_gpus_ = 0;  // GPUs of the nodes in the job
  // Trace events in time order (those within the run), and the engine's own events.
  std::vector<uint32_t> trace_order_;
  size_t next_trace_ = 0;
  std::priority_queue<InternalEvent, std::vector<InternalEvent>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  double now_ = 0;
  double gpu_seconds_ = 0, held_gpus_ = 0, held_since_ = 0;

  std::shared_ptr<Config> base_;  // the starting configuration
  std::shared_ptr<Config> cfg_;   // the current one
  std::map<std::string, std::shared_ptr<Config>> replanned_;  // ReplanConfig's, by live nodes
  // The physical node in each of the plan's node slots (kSpareNode + i: a spare), each trace node's slot
  // (-1: none), and the slots whose node is not in the job (vacant: to fill before a restart).
  std::vector<uint32_t> slots_;
  std::vector<int32_t> slot_of_;
  std::set<size_t> vacant_;
  double interval_s_ = 0;

  enum class Mode { kTraining, kDown, kWaiting, kIdle } mode_ = Mode::kIdle;
  uint64_t resume_generation_ = 0;
  size_t down_begin_ = 0;  // first segment of the current down phases
  std::string down_cause_;
  std::set<uint32_t> pending_failed_;  // nodes lost since training stopped (for the restore's sources)
  bool pending_software_ = false;
  bool pending_rollback_ = true;
  bool rolled_further_ = false;  // the policy's extra rollback was taken for this loss
  std::shared_ptr<Config> pending_from_;

  // Training state.
  double seg_start_ = 0, t_ = 0, T_ = 0, C_ = 0;
  uint64_t k_ = 1, u_ = 0;
  bool force_save_ = false;  // the next unit is a checkpoint (a preemption's notice)
  uint64_t seg_iters_ = 0;
  uint32_t seg_ckpts_ = 0;
  double seg_ckpt_s_ = 0;
  double uncommitted_s_ = 0;
  uint64_t committed_ = 0;
  double kept_s_ = 0, lost_s_ = 0, ckpt_total_s_ = 0;
  uint32_t interruptions_ = 0;
  std::map<std::string, double> by_event_;
  std::map<std::string, int> config_index_;
  struct Straggler {
    uint32_t device;
    double slowdown;
  };
  std::map<uint32_t, Straggler> stragglers_;                              // by end-event id
  std::multiset<std::pair<double, uint32_t>, std::greater<>> slowest_;  // (slowdown, device), slowest first
};

}  // namespace hetsim::sim::replay_internal
