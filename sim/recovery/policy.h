// The recovery policies' interface and registry (docs/replay.md, "Recovery policies").
//
// The replay engine (sim/replay.h) plays a run over a trace; at each point where recovery policies differ it
// asks the run's policy: what a checkpoint's save blocks (where checkpoints go), whether a loss needs a
// rollback to a checkpoint in storage (or the job's state survives it), where the state comes back from and
// what that costs, and what the restart costs. A policy's Traits say the rest: the same plan on replacement
// nodes or a re-plan on every live node (its default planner), hot spares, growing back, a checkpoint at a
// preemption's notice, GPU-granular failures, and which options (fields of proto::RecoveryPolicy) it takes.
//
// A policy decides; sim/ prices. Every cost is data movement played on the cluster's SimGrid platform
// (SimulateTransfers in sim/simulator.h, SimulateSwitch in sim/hetu_switching.h), asked for through the
// engine's Env, which caches it for the replays of a sweep. No SimGrid header here or in a policy's file.
//
// One file per policy (sim/recovery/<policy>.cc: a class deriving from Policy, its factory, the paper it
// follows) and one line per policy in sim/recovery/registry.cc. A policy object lives for one replay and
// may keep state (what Gemini has written remotely, AutoHet's layer bitmap).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/replay.pb.h"
#include "models/transformer.h"
#include "sim/simulator.h"

namespace hetsim::sim::recovery {

// Spare nodes (outside the trace's cluster) are numbered from here in the engine's node slots.
constexpr uint32_t kSpareNode = 0x80000000u;

// A configuration the job runs in: a plan on a cluster (the trace's, or the sub-cluster of its live nodes)
// placed on the trace's cluster, with its simulated costs. Built by the engine once per plan and live set.
struct Config {
  std::string key;  // the cluster, plan, model, training and simulation options (not the placement)
  proto::Plan plan;
  std::shared_ptr<const models::Cluster> cluster;
  std::vector<uint32_t> node_map;  // the plan cluster's node -> the trace cluster's node
  std::vector<uint32_t> place;     // the plan cluster's device -> the trace cluster's device
  std::vector<uint32_t> nodes;     // nodes the plan uses (plan cluster indices, ascending)
  double iteration_s = 0;
  double save_s = 0;  // what a checkpoint blocks (Policy::SaveSeconds)
  double load_s = 0;  // every device reads what it holds from the object store
  double replan_s = 0;
  uint32_t gpus = 0;
  std::vector<uint32_t> devices;    // the plan's devices in plan order (plan cluster indices)
  std::vector<double> state_bytes;  // per plan device (plan order): parameters + optimizer state it holds
  std::vector<double> write_bytes;  // per plan device: its share of one checkpoint
};

// Where the job runs after it lost nodes.
enum class Placement {
  kSamePlan,  // the starting plan; a lost node's slot takes a free node of its group, else a spare, else waits
  kReplan,    // a plan for every live node (replan_plans, or the policy's planner); shrinks and grows
};

// What a policy is, whatever the run.
struct Traits {
  Placement placement = Placement::kSamePlan;
  bool spares = false;                // keeps hot spares outside the trace's cluster (takes `spares`)
  bool grow = false;                  // kReplan: grows back when nodes return (`grow` overrides)
  bool checkpoint_on_notice = false;  // saves at a preemption's notice (`checkpoint_on_notice` overrides)
  bool gpu_granular = false;          // a failed GPU leaves the other GPUs of its node in the job
  std::string planner;                // kReplan: the planner that re-plans by default
  std::string planner_options;        // and its options (YAML)
  // The policy's own fields of proto::RecoveryPolicy; every policy takes name, label and
  // checkpoint_on_notice, kReplan policies the re-planning fields (planner, planner_options, replan_s,
  // measured_replan, grow, replan_plans), `spares` policies spares. Any other field set is refused.
  std::vector<std::string> options;
};

// What the engine offers a policy: the run's inputs and the simulator's costs, cached for a sweep.
class Env {
 public:
  virtual ~Env() = default;
  virtual const models::Cluster& cluster() const = 0;  // the trace's
  virtual const models::TransformerModel& model() const = 0;
  virtual const proto::Training& training() const = 0;  // resolved against the model
  virtual const std::string& calibration() const = 0;   // the kernel-model calibration the costs use
  // A simulated cost, computed by `simulate` the first time `key` is asked for. The cache is shared by the
  // replays of a sweep, so the key must name everything the cost depends on.
  virtual Result<double> Seconds(const std::string& key, const std::function<Result<double>()>& simulate) = 0;
  // Seconds until the last of `transfers`, started together on `on`, has arrived (SimulateTransfers), with a
  // progress line "replay: simulating <what> (<n> transfers)". Not cached: call it from Seconds.
  virtual Result<double> PlayTransfers(const models::Cluster& on, const std::vector<Transfer>& transfers,
                                       const std::string& what) = 0;
  virtual void Progress(const std::string& line) = 0;

  Result<double> TransferSeconds(const std::string& key, const models::Cluster& on,
                                 const std::vector<Transfer>& transfers, const std::string& what) {
    return Seconds(key, [&] { return PlayTransfers(on, transfers, what); });
  }
};

// A loss the job recovers from: what it lost since training last stopped.
struct Loss {
  const Config& from;                      // the configuration that was training
  const std::set<uint32_t>& failed_nodes;  // trace nodes lost since then (failed, preempted)
  bool software = false;                   // the job's processes crashed: every GPU's memory is gone
  // kSamePlan: the node in each of the plan's node slots now (kSpareNode + i for a spare), and each trace
  // node's slot (-1: none).
  const std::vector<uint32_t>& slots;
  const std::vector<int32_t>& slot_of;
  // Trace-cluster devices whose memory is gone: every GPU of a lost node, the failed GPUs of nodes that
  // stay (GPU-granular policies). Computed when called.
  std::function<std::set<uint32_t>()> dead_devices;
};

// Work taken back from the run's books.
struct Work {
  uint64_t iterations = 0;
  double seconds = 0;
};

class Policy {
 public:
  explicit Policy(Traits traits) : traits_(std::move(traits)) {}
  virtual ~Policy() = default;
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  const Traits& traits() const { return traits_; }

  // ---- checkpoints ----
  // Seconds a checkpoint of `c` blocks training: the copies that must finish before the next iteration
  // (what goes on in the background is free).
  virtual Result<double> SaveSeconds(const Config& c, Env& env) = 0;
  // Called after every commit of trained work: `iterations` and their `seconds` are now safe (in a checkpoint,
  // or kept by surviving replicas, or counted at the end of the run).
  virtual void Committed(uint64_t iterations, double seconds) {
    (void)iterations;
    (void)seconds;
  }
  // A checkpoint of `c` is complete; it holds `trained_s` seconds of training since the previous one.
  virtual void Saved(const std::shared_ptr<const Config>& c, double trained_s) {
    (void)c;
    (void)trained_s;
  }
  // Training stopped without a loss to change configuration (growing back): the state at the stop, where
  // `c` ran, is what the next configuration restores.
  virtual void Stopped(const std::shared_ptr<const Config>& c) { (void)c; }
  // A trace node left (failed, preempted): what it held is gone.
  virtual void NodeLeft(uint32_t node) { (void)node; }

  // ---- a loss ----
  // Whether the job must go back to a checkpoint in storage (not only to its last checkpoint in memory, or
  // to what its surviving replicas hold).
  virtual bool NeedsRollback(const Loss& loss, Env& env) = 0;
  // Whether a loss that needs no rollback keeps the iterations trained since the last checkpoint (surviving
  // replicas hold them); otherwise every loss loses them.
  virtual bool ReplicasKeepWork() const { return false; }
  // Called once per rollback: committed work that the rollback takes back too (Gemini: what was only in
  // host memory since the last remote checkpoint). Default: none.
  virtual Work RollBack() { return {}; }
  // Seconds to bring back the state of `to` after `loss` (`rollback`: from a checkpoint in storage).
  virtual Result<double> RestoreSeconds(const Loss& loss, const Config& to, bool rollback, Env& env) = 0;
  // Seconds of the restart phase (relaunch, communicator set-up), the run's being `restart_s`.
  virtual double RestartSeconds(bool rollback, double restart_s) const {
    (void)rollback;
    return restart_s;
  }

 private:
  Traits traits_;
};

// ---- the registry (sim/recovery/registry.cc) ----

struct Registered {
  std::string name;
  std::string summary;  // one line: what it does and the paper it follows
  std::function<std::unique_ptr<Policy>(const proto::RecoveryPolicy& options)> create;
};
// Every policy, in the order `hetsim list policies` shows them.
const std::vector<Registered>& Registry();
// nullptr when no policy has this name.
const Registered* FindPolicy(const std::string& name);
// The policy of `options.name()` configured by `options` (which CheckOptions accepted).
Result<std::unique_ptr<Policy>> NewPolicy(const proto::RecoveryPolicy& options);
// The policy's name and the options it takes; errors name `where` and the field
// ("replay.policies[1].spares").
Status CheckOptions(const proto::RecoveryPolicy& options, const std::string& where);
// The planner and options a kReplan policy re-plans with: the policy's `planner` (with its
// `planner_options`), else its default.
std::pair<std::string, std::string> Replanner(const proto::RecoveryPolicy& options);

// ---- costs every policy builds on ----

// Each device's share of one checkpoint (Config::write_bytes) written to `to` (the object store, or its
// node's NVMe), every device at once (Megatron-LM's fully parallel save).
std::vector<Transfer> CheckpointWrites(const Config& c, Endpoint::Kind to);
// Each device's state (Config::state_bytes) copied to its node's host memory.
std::vector<Transfer> HostMemoryCopies(const Config& c);
// Seconds a save to the object store blocks (shared by the policies that checkpoint there).
Result<double> ObjectStoreSaveSeconds(const Config& c, Env& env);

// ---- cache keys ----

// A configuration and where its devices sit on the trace's cluster (Config::key leaves the placement out).
std::string PlacementKey(const Config& c);
// A short key standing for a long text (its hash and length).
std::string ShortKey(const std::string& text);

}  // namespace hetsim::sim::recovery
