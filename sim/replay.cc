#include "sim/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <set>

#include "models/iteration_report.h"
#include "models/plan.h"
#include "sim/autohet_recovery.h"
#include "sim/hetu_switching.h"

namespace hetsim::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr double kEps = 1e-9;
constexpr uint32_t kVirtualNode = 0x80000000u;  // spare nodes outside the trace's cluster: kVirtualNode + i

constexpr double kDefaultDetectionS = 120;
constexpr double kDefaultRestartS = 300;
constexpr double kDefaultSpotFraction = 0.35;
constexpr double kDefaultRemoteIntervalS = 3 * 3600;

// ---- policies ----------------------------------------------------------------------------------------
//
// A policy is a set of choices the engine below plays (docs/replay.md has the sources):
//   which nodes the job runs on after a loss (the same plan on replacements, or a re-plan on every live node),
//   where checkpoints go and what blocks training while they are saved, and where state comes back from.

enum class Placement { kFixed, kElastic };      // the plan on replacement nodes | re-plan on the live nodes
// kLayerwise: AutoHet's layer-wise checkpoint, copied to host memory (blocking), then to local NVMe and the
// object store in the background. kLayerBitmap: AutoHet's local-first loading (sim/autohet_recovery.h).
enum class SaveTo { kObjectStore, kNvme, kHostMemory, kLayerwise };
// kGraphSwitch: Hetu v2's fused-BSR graph switching from the surviving replicas (sim/hetu_switching.h).
enum class RestoreFrom { kCheckpoint, kHostMemory, kReplicas, kLayerBitmap, kGraphSwitch };

struct PolicyTraits {
  Placement placement = Placement::kFixed;
  SaveTo save = SaveTo::kObjectStore;
  RestoreFrom restore = RestoreFrom::kCheckpoint;
  bool spares = false;          // keeps hot spares (spare nodes outside the trace's cluster)
  bool default_grow = false;
  bool default_notice_checkpoint = false;
  bool gpu_granular = false;  // hetu: a failed GPU leaves the other GPUs of its node in the job
  const char* default_planner = "";
  const char* default_planner_options = "";
};

struct PolicyEntry {
  PolicyInfo info;
  PolicyTraits traits;
};

const std::vector<PolicyEntry>& PolicyTable() {
  static const std::vector<PolicyEntry> table = [] {
    std::vector<PolicyEntry> t;
    PolicyTraits cr;  // Megatron-LM / DeepSpeed: save to remote storage, restart the same job, reload it all
    t.push_back({{"checkpoint-restart",
                  "checkpoints to the object store; restart the same plan on free or repaired nodes and reload "
                  "(Megatron-LM, DeepSpeed)"},
                 cr});
    PolicyTraits hs = cr;  // Llama 3 §3.3.4: failed hosts are swapped for spares, the job restarts from a checkpoint
    hs.spares = true;
    t.push_back({{"hot-spares",
                  "checkpoint-restart with spare nodes that replace failed ones at once (Llama 3, Dubey et al. 2024 "
                  "§3.3.4)"},
                 hs});
    PolicyTraits im;  // Gemini (Wang et al., SOSP'23): checkpoints in host memory of the node and of peers
    im.save = SaveTo::kHostMemory;
    im.restore = RestoreFrom::kHostMemory;
    im.spares = true;
    t.push_back({{"in-memory",
                  "checkpoints in host memory of the node and replicas-1 peers, remote ones every remote_interval_s; "
                  "reload from memory (Gemini, Wang et al. SOSP'23)"},
                 im});
    PolicyTraits va;  // Varuna (Athlur et al., EuroSys'22): DP+PP morphing, checkpoints to local disk + cloud
    va.placement = Placement::kElastic;
    va.save = SaveTo::kNvme;
    va.restore = RestoreFrom::kCheckpoint;
    va.default_grow = true;
    va.default_planner = "megatron";
    va.default_planner_options = "tp_degrees: [1]";
    t.push_back({{"varuna",
                  "re-plan pipeline x data parallelism on the live nodes; checkpoints to local NVMe, restore from "
                  "the object store (Varuna, Athlur et al. EuroSys'22)"},
                 va});
    PolicyTraits el;  // Oobleck (Jang et al., SOSP'23) / Bamboo (Thorpe et al., NSDI'23)
    el.placement = Placement::kElastic;
    el.restore = RestoreFrom::kReplicas;
    el.default_grow = true;
    el.default_notice_checkpoint = true;
    el.default_planner = "megatron";
    t.push_back({{"elastic",
                  "re-plan with any registered planner on the live nodes; state from surviving replicas, no "
                  "rollback while every layer has one (Oobleck, Jang et al. SOSP'23; Bamboo, NSDI'23)"},
                 el});
    // AutoHet (§IV): layer-wise checkpoints to host memory, local NVMe and the cloud (§IV-B1); after a re-plan
    // each device loads its layers' shards, split or concatenated to the new TP degree (§IV-B2), from its own
    // node, then from other nodes over RDMA, and only the pieces no live node holds from the cloud (§IV-C).
    PolicyTraits ah;
    ah.placement = Placement::kElastic;
    ah.save = SaveTo::kLayerwise;
    ah.restore = RestoreFrom::kLayerBitmap;
    ah.default_grow = true;
    ah.default_planner = "autohet";  // planners/autohet: AutoHet §III's planner
    t.push_back({{"autohet",
                  "re-plan on the live nodes; layer-wise checkpoints in host memory, local NVMe and the cloud; "
                  "restore local-first, then from peers over RDMA, the missing pieces from the cloud (AutoHet "
                  "§IV)"},
                 ah});
    // ---- hetu (Hetu v2 §6, §7.2; sim/hetu_switching.h) ----
    // No restart: graph specialisation (a fixed time), then the weights move from the surviving replicas to
    // the new plan by fused BSR; no rollback while every weight slice has a live owner (ZeRO off, §7.2), else
    // the checkpoint. A failed GPU costs only that GPU (its node's other GPUs stay).
    PolicyTraits he;
    he.placement = Placement::kElastic;
    he.restore = RestoreFrom::kGraphSwitch;
    he.gpu_granular = true;
    he.default_grow = true;
    he.default_notice_checkpoint = true;
    // planners/hetu: Hetu's strategies (per-type TP groups, a node with failed GPUs as smaller groups, uneven
    // pipelines), with ZeRO off as in the paper's elastic strategies (§A.3, Tables 7-8).
    he.default_planner = "hetu";
    he.default_planner_options = "{zero_stage: 0}";
    t.push_back({{"hetu",
                  "re-plan on every live GPU; graph specialisation, then fused-BSR graph switching of the weights "
                  "from surviving replicas, no restart (Hetu v2 §6, §7.2)"},
                 he});
    return t;
  }();
  return table;
}

const PolicyEntry* FindPolicy(const std::string& name) {
  for (const auto& p : PolicyTable()) {
    if (p.info.name == name) return &p;
  }
  return nullptr;
}

// "megatron: 4 pipelines × 2 stages, TP 4" when the plan has no name.
std::string PlanLabel(const proto::Plan& p) {
  if (!p.name().empty()) return p.name();
  std::string s = (p.planner().empty() ? std::string("plan") : p.planner()) + ": " +
                  std::to_string(p.pipelines_size()) + (p.pipelines_size() == 1 ? " pipeline" : " pipelines");
  if (p.pipelines_size() > 0) {
    const auto& pl = p.pipelines(0);
    s += " × " + std::to_string(pl.stages_size()) + (pl.stages_size() == 1 ? " stage" : " stages");
    if (pl.stages_size() > 0 && pl.stages(0).tp_degree() > 1) s += ", TP " + std::to_string(pl.stages(0).tp_degree());
  }
  return s;
}

std::string Hash(const std::string& s) {
  return std::to_string(std::hash<std::string>{}(s)) + ":" + std::to_string(s.size());
}

// ---- the engine -----------------------------------------------------------------------------------------

enum class Role : uint8_t { kFree, kJob, kDown, kAbsent };  // kAbsent: preempted, or not yet added (spot)

// A configuration the job runs in: a plan on a cluster (the trace's, or the sub-cluster of the live nodes).
struct Config {
  std::string key;
  proto::Plan plan;
  std::shared_ptr<const models::Cluster> cluster;
  std::vector<uint32_t> node_map;  // the plan cluster's node -> the trace cluster's node
  std::vector<uint32_t> place;     // the plan cluster's device -> the trace cluster's device
  std::vector<uint32_t> nodes;     // nodes the plan uses (plan cluster indices, ascending)
  double iteration_s = 0;
  double save_s = 0;
  double load_s = 0;  // every device reads its state from the object store
  double replan_s = 0;
  uint32_t gpus = 0;
  std::vector<uint32_t> devices;    // the plan's devices in plan order (plan cluster indices)
  std::vector<double> state_bytes;  // per plan device (plan order): parameters + optimizer state it holds
  std::vector<double> write_bytes;  // per plan device: its share of one checkpoint
};

struct InternalEvent {
  double t;
  uint64_t seq;
  enum Kind { kTrace, kRepair, kRemove, kStragglerEnd, kResume } kind;
  uint32_t index;  // trace event, node, or resume generation
  bool operator>(const InternalEvent& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

class Engine {
 public:
  explicit Engine(const ReplayInputs& in) : in_(in), c_(*in.cluster) {
    const auto* entry = FindPolicy(in.policy.name());
    traits_ = entry->traits;
    detection_s_ = in.spec.has_detection_s() ? in.spec.detection_s() : kDefaultDetectionS;
    restart_s_ = in.spec.has_restart_s() ? in.spec.restart_s() : kDefaultRestartS;
    grow_ = in.policy.has_grow() ? in.policy.grow() : traits_.default_grow;
    notice_ckpt_ = in.policy.has_checkpoint_on_notice() ? in.policy.checkpoint_on_notice()
                                                         : traits_.default_notice_checkpoint;
    replicas_ = in.policy.has_replicas() ? in.policy.replicas() : 2;
    remote_interval_s_ = in.policy.has_remote_interval_s() ? in.policy.remote_interval_s() : kDefaultRemoteIntervalS;
    load_from_host_memory_ = in.policy.load_from_host_memory();
    if (in.policy.has_specialization_s()) specialization_s_ = in.policy.specialization_s();
    hetu_.fused = !in.policy.has_fused_bsr() || in.policy.fused_bsr();
    hetu_.heuristics = !in.policy.has_bsr_heuristics() || in.policy.bsr_heuristics();
    hetu_.bytes_per_param = in.policy.switch_bytes_per_param();
    duration_ = in.trace.duration_s();
    tokens_per_iteration_ = static_cast<double>(in.training.global_batch_size()) * in.training.seq_len();
  }

  Result<proto::ReplayReport> Run();

 private:
  // ---- simulated costs (cached) ----
  Result<double> Cached(const std::string& key, const std::function<Result<double>()>& compute) {
    auto& cache = in_.cache != nullptr ? in_.cache->seconds : local_cache_.seconds;
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    HETSIM_ASSIGN_OR_RETURN(double v, compute());
    cache[key] = v;
    return v;
  }
  void Progress(const std::string& line) {
    if (in_.progress) in_.progress(line);
  }
  Result<std::shared_ptr<Config>> MakeConfig(proto::Plan plan, std::shared_ptr<const models::Cluster> cluster,
                                             std::vector<uint32_t> node_map, double replan_s);
  Result<double> TransferTime(const std::string& key, const models::Cluster& cluster, const std::vector<Transfer>& t,
                              const std::string& what);
  Result<double> SaveCost(const Config& c);

  // ---- world ----
  uint32_t GpusOf(uint32_t node) const {
    if (node >= kVirtualNode) return spare_gpus_per_node_;
    auto lost = lost_gpus_.find(node);
    return c_.node(node).num_gpus - (lost == lost_gpus_.end() ? 0 : static_cast<uint32_t>(lost->second.size()));
  }
  bool JobUses(uint32_t node) const { return node < role_.size() && role_[node] == Role::kJob; }
  void SetRole(uint32_t node, Role r) {
    AccrueCost();
    role_[node] = r;
    if (r == Role::kDown || r == Role::kAbsent) left_since_ckpt_.insert(node);  // its local copies are gone
  }
  void AccrueCost() {
    double held = spare_gpus_total_;
    for (uint32_t s : slots_) {
      if (s >= kVirtualNode) continue;  // counted with the spares
      held += JobUses(s) ? GpusOf(s) : 0;
    }
    if (traits_.placement == Placement::kElastic) {
      held = 0;
      for (size_t n = 0; n < role_.size(); ++n) held += role_[n] == Role::kJob ? GpusOf(static_cast<uint32_t>(n)) : 0;
    }
    gpu_seconds_ += held_gpus_ * (now_ - held_since_);
    held_gpus_ = held;
    held_since_ = now_;
  }
  void Schedule(double t, InternalEvent::Kind k, uint32_t index) { queue_.push({t, seq_++, k, index}); }

  // ---- the job ----
  void StartTraining(double t);
  void AdvanceTraining(double t1);
  void EndTraining(double t, bool rollback, const std::string& cause);
  void Split(double t);  // a new segment (the iteration time changed); the iterations since the checkpoint stay
  void CloseSegment(double t, uint64_t lost_iterations);
  void Commit();
  bool NeedsRollback() const;
  void RecordConfig(const Config& c);
  void RollbackToRemote();
  Status Interrupt(double t, const std::string& cause, bool detect, const std::set<uint32_t>& failed_nodes);
  Status TryRecover(double t, const std::string& cause);
  Status Reconfigure(double t);  // graceful growth (elastic)
  void AddSegment(double start, double end, const std::string& phase, const std::string& cause);
  void TruncateDown(double t);
  double StragglerFactor() const;
  Result<std::shared_ptr<Config>> ElasticConfig();
  Result<double> RestoreTime(const Config& from, const Config& to, const std::set<uint32_t>& failed, bool rollback,
                             bool software);
  bool StateSurvives(const Config& from, const std::set<uint32_t>& failed) const;
  Result<double> LayerwiseRestoreTime(const Config& to);
  // hetu: devices of the trace cluster whose state is gone, and the graph switch's time.
  std::set<uint32_t> DeadDevices() const;
  Result<double> GraphSwitchTime(const Config& from, const Config& to);
  // Where a configuration's devices sit on the trace's cluster (elastic placement: no spare nodes).
  std::vector<DevicePlace> PlacesOf(const Config& c) const {
    std::vector<DevicePlace> out(c.cluster->num_devices());
    for (uint32_t d = 0; d < c.cluster->num_devices(); ++d) out[d] = {c.place[d], c_.device(c.place[d]).node};
    return out;
  }
  std::vector<uint32_t> PhysicalNodesOf(const Config& c) const {
    std::vector<uint32_t> out;
    for (uint32_t n : c.nodes) out.push_back(c.node_map[n]);
    return out;
  }

  const ReplayInputs& in_;
  const models::Cluster& c_;
  PolicyTraits traits_;
  double detection_s_ = 0, restart_s_ = 0, duration_ = 0, tokens_per_iteration_ = 0;
  bool grow_ = false, notice_ckpt_ = false;
  uint32_t replicas_ = 2;
  double remote_interval_s_ = 0;
  bool load_from_host_memory_ = false;  // autohet: local copies read from host memory, not NVMe
  double specialization_s_ = 10;        // hetu: graph specialisation (Hetu v2 §8)
  HetuSwitchOptions hetu_;
  // hetu: GPUs lost on nodes that stay in the job (node -> local indices).
  std::map<uint32_t, std::set<uint32_t>> lost_gpus_;
  ReplayCache local_cache_;
  proto::ReplayReport report_;

  std::vector<Role> role_;
  std::vector<double> back_at_;
  uint32_t virtual_free_ = 0;
  double spare_gpus_total_ = 0;
  uint32_t spare_gpus_per_node_ = 0;
  std::priority_queue<InternalEvent, std::vector<InternalEvent>, std::greater<>> queue_;
  uint64_t seq_ = 0;
  double now_ = 0;
  double gpu_seconds_ = 0, held_gpus_ = 0, held_since_ = 0;

  std::shared_ptr<Config> base_;  // the starting configuration
  std::shared_ptr<Config> cfg_;   // the current one
  std::vector<uint32_t> slots_;   // fixed placement: the physical node in each of the plan's node slots
  double interval_s_ = 0;

  enum class Mode { kTraining, kDown, kWaiting, kIdle } mode_ = Mode::kIdle;
  uint64_t resume_generation_ = 0;
  size_t down_begin_ = 0;          // first segment of the current down phases
  std::vector<std::pair<std::string, double>> after_wait_;  // phases to run once the wait ends
  std::string down_cause_;
  std::set<uint32_t> pending_failed_;  // nodes lost since training stopped (for the restore's sources)
  bool pending_software_ = false;
  bool pending_rollback_ = true;
  std::shared_ptr<Config> pending_from_;
  // AutoHet's layer bitmap (§IV-C): the configuration whose devices saved the last checkpoint, and the
  // nodes that left since (their host memory and NVMe copies are gone).
  std::shared_ptr<Config> ckpt_cfg_;
  std::set<uint32_t> left_since_ckpt_;

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
  double training_since_remote_s_ = 0;  // in-memory: training time since the last remote checkpoint
  uint64_t committed_since_remote_ = 0;
  double kept_since_remote_s_ = 0;
  uint32_t interruptions_ = 0;
  std::map<std::string, double> by_event_;
  std::map<std::string, int> config_index_;
  bool remote_rolled_ = false;
  struct Straggler {
    uint32_t device;
    double slowdown;
  };
  std::map<uint32_t, Straggler> stragglers_;  // by end-event sequence
};

Result<double> Engine::TransferTime(const std::string& key, const models::Cluster& cluster,
                                    const std::vector<Transfer>& t, const std::string& what) {
  return Cached(key, [&]() -> Result<double> {
    Progress("replay: simulating " + what + " (" + std::to_string(t.size()) + " transfers)");
    return SimulateTransfers(t, cluster, in_.sim.compute.calibration);
  });
}

Result<std::shared_ptr<Config>> Engine::MakeConfig(proto::Plan plan, std::shared_ptr<const models::Cluster> cluster,
                                                   std::vector<uint32_t> node_map, double replan_s) {
  auto cfg = std::make_shared<Config>();
  cfg->plan = std::move(plan);
  cfg->cluster = std::move(cluster);
  cfg->node_map = std::move(node_map);
  cfg->replan_s = replan_s;
  const models::Cluster& cl = *cfg->cluster;
  // Where its devices sit on the trace's cluster: a node with fewer GPUs than its physical one (hetu: GPUs
  // lost) runs on the physical node's surviving GPUs in order.
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
  cfg->key = Hash(key_text);
  HETSIM_ASSIGN_OR_RETURN(cfg->iteration_s, Cached("iteration|" + cfg->key, [&]() -> Result<double> {
                            Progress("replay: simulating an iteration of " + PlanLabel(cfg->plan) + " on " +
                                     std::to_string(cfg->gpus) + " GPUs");
                            SimOptions opt = in_.sim;
                            opt.record_timeline = false;
                            HETSIM_ASSIGN_OR_RETURN(SimResult r, SimulateIteration(cfg->plan, ctx, opt));
                            return r.report.iteration_time_s();
                          }));
  // Every device reads what it holds from the object store (a restart after a rollback).
  std::vector<Transfer> load;
  for (size_t i = 0; i < memory.size(); ++i) {
    load.push_back({{Endpoint::kObjectStore, 0}, {Endpoint::kGpu, memory[i].device}, cfg->state_bytes[i]});
  }
  HETSIM_ASSIGN_OR_RETURN(cfg->load_s, TransferTime("load-object-store|" + cfg->key, cl, load,
                                                    "a checkpoint load from the object store"));
  HETSIM_ASSIGN_OR_RETURN(cfg->save_s, SaveCost(*cfg));
  return cfg;
}

// Seconds a checkpoint blocks training: the device-to-storage copy of the policy's target (Varuna writes to
// local disk and uploads in the background; Gemini copies to host memory and replicates to peers while
// training goes on, §4 of its paper).
Result<double> Engine::SaveCost(const Config& c) {
  const models::Cluster& cl = *c.cluster;
  std::vector<Transfer> t;
  for (size_t i = 0; i < c.devices.size(); ++i) {
    const uint32_t d = c.devices[i];
    switch (traits_.save) {
      case SaveTo::kObjectStore:
        t.push_back({{Endpoint::kGpu, d}, {Endpoint::kObjectStore, 0}, c.write_bytes[i]});
        break;
      case SaveTo::kNvme:
        t.push_back({{Endpoint::kGpu, d}, {Endpoint::kNvme, cl.device(d).node}, c.write_bytes[i]});
        break;
      case SaveTo::kHostMemory:
      case SaveTo::kLayerwise:
        // AutoHet §IV-B1: every device saves its own layers (each replica, so that every node keeps what its
        // devices ran); torch.save to CPU memory blocks, the NVMe write and the cloud upload do not.
        t.push_back({{Endpoint::kGpu, d}, {Endpoint::kHostMemory, cl.device(d).node}, c.state_bytes[i]});
        break;
    }
  }
  const char* what[] = {"a checkpoint save to the object store", "a checkpoint save to local NVMe",
                        "a checkpoint copy to host memory", "a layer-wise checkpoint copy to host memory"};
  return TransferTime("save|" + std::to_string(static_cast<int>(traits_.save)) + "|" + c.key, cl, t,
                      what[static_cast<int>(traits_.save)]);
}

// ---- segments ----

void Engine::AddSegment(double start, double end, const std::string& phase, const std::string& cause) {
  auto* s = report_.add_segments();
  s->set_start_s(start);
  s->set_end_s(end);
  s->set_phase(phase);
  s->set_cause(cause);
  s->set_gpus(cfg_ != nullptr ? cfg_->gpus : 0);
}

// Cuts the down phases at `t` (a new interruption): phases not started are dropped.
void Engine::TruncateDown(double t) {
  auto* segs = report_.mutable_segments();
  while (segs->size() > static_cast<int>(down_begin_) && segs->Get(segs->size() - 1).start_s() >= t) segs->RemoveLast();
  if (segs->size() > static_cast<int>(down_begin_)) {
    auto* last = segs->Mutable(segs->size() - 1);
    if (last->end_s() > t) last->set_end_s(t);
  }
  ++resume_generation_;  // the pending resume is stale
}

double Engine::StragglerFactor() const {
  double f = 1;
  for (const auto& [_, s] : stragglers_) {
    const uint32_t node = c_.device(s.device).node;
    if (JobUses(node)) f = std::max(f, s.slowdown);
  }
  return f;
}

// ---- training ----

void Engine::RecordConfig(const Config& c) {
  if (config_index_.count(c.key) != 0) return;
  config_index_[c.key] = report_.configurations_size();
  auto* rc = report_.add_configurations();
  rc->set_gpus(c.gpus);
  rc->set_plan(PlanLabel(c.plan));
  rc->set_nodes(c.cluster->Summary());
  rc->set_iteration_s(c.iteration_s);
  rc->set_checkpoint_save_s(c.save_s);
  rc->set_checkpoint_load_s(c.load_s);
}

void Engine::StartTraining(double t) {
  mode_ = Mode::kTraining;
  RecordConfig(*cfg_);
  seg_start_ = t_ = t;
  T_ = cfg_->iteration_s * StragglerFactor();
  C_ = cfg_->save_s;
  k_ = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(interval_s_ / T_)));
  seg_iters_ = 0;
  seg_ckpts_ = 0;
  seg_ckpt_s_ = 0;
  force_save_ = false;
}

void Engine::Commit() {
  committed_ += u_;
  kept_s_ += uncommitted_s_;
  committed_since_remote_ += u_;
  kept_since_remote_s_ += uncommitted_s_;
  u_ = 0;
  uncommitted_s_ = 0;
}

// Runs iterations and checkpoints from t_ up to t1 (t_ is always at the end of a whole unit: an iteration
// or a checkpoint save).
void Engine::AdvanceTraining(double t1) {
  for (;;) {
    if (u_ < k_ && !force_save_) {
      const double fit = std::floor((t1 - t_) / T_ + kEps);
      const uint64_t n = std::min<uint64_t>(k_ - u_, fit > 0 ? static_cast<uint64_t>(fit) : 0);
      t_ += static_cast<double>(n) * T_;
      u_ += n;
      seg_iters_ += n;
      uncommitted_s_ += static_cast<double>(n) * T_;
      if (u_ < k_) return;
    }
    if (t_ + C_ > t1 + kEps) return;
    t_ += C_;
    force_save_ = false;
    ++seg_ckpts_;
    seg_ckpt_s_ += C_;
    ckpt_total_s_ += C_;
    const double trained = uncommitted_s_;
    Commit();
    if (traits_.restore == RestoreFrom::kLayerBitmap) {
      ckpt_cfg_ = cfg_;
      left_since_ckpt_.clear();
    }
    if (traits_.save == SaveTo::kHostMemory) {
      training_since_remote_s_ += trained;
      if (training_since_remote_s_ >= remote_interval_s_) {
        // A remote checkpoint, written from host memory in the background (Gemini §3).
        training_since_remote_s_ = 0;
        committed_since_remote_ = 0;
        kept_since_remote_s_ = 0;
      }
    }
  }
}

void Engine::CloseSegment(double t, uint64_t lost_iterations) {
  AddSegment(seg_start_, t, "train", "");
  auto* s = report_.mutable_segments(report_.segments_size() - 1);
  s->set_seconds_per_iteration(T_);
  s->set_iterations(seg_iters_);
  s->set_lost_iterations(lost_iterations);
  s->set_checkpoints(seg_ckpts_);
  s->set_checkpoint_time_s(seg_ckpt_s_);
  s->set_tokens_kept((static_cast<double>(seg_iters_) - static_cast<double>(lost_iterations)) * tokens_per_iteration_);
  auto* rc = report_.mutable_configurations(config_index_.at(cfg_->key));
  rc->set_seconds(rc->seconds() + (t - seg_start_));
}

// Closes the training segment at t: with a rollback the iterations since the last checkpoint are lost;
// without one (state kept by replicas, or the end of the run) they are kept and only the unit in progress is.
void Engine::EndTraining(double t, bool rollback, const std::string& cause) {
  AdvanceTraining(t);
  uint64_t lost_iterations = 0;
  double lost = t - t_;  // the unit in progress
  if (rollback) {
    lost += uncommitted_s_;
    lost_iterations = u_;
    u_ = 0;
    uncommitted_s_ = 0;
  } else {
    Commit();
  }
  lost_s_ += lost;
  if (lost > 0 && !cause.empty()) by_event_[cause] += lost;
  CloseSegment(t, lost_iterations);
  mode_ = Mode::kIdle;
}

void Engine::Split(double t) {
  AdvanceTraining(t);
  lost_s_ += t - t_;  // the unit in progress starts over at the new speed
  CloseSegment(t, 0);
  const bool force = force_save_;
  StartTraining(t);
  force_save_ = force;
}

void Engine::RollbackToRemote() {
  // Every host-memory copy of some state is gone: back to the last remote checkpoint.
  committed_ -= committed_since_remote_;
  kept_s_ -= kept_since_remote_s_;
  lost_s_ += kept_since_remote_s_;
  by_event_[down_cause_] += kept_since_remote_s_;
  committed_since_remote_ = 0;
  kept_since_remote_s_ = 0;
  training_since_remote_s_ = 0;
}

// ---- recovery ----

bool Engine::StateSurvives(const Config& from, const std::set<uint32_t>& failed) const {
  // Every layer needs a stage holding it whose devices all live (a replica in another pipeline).
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

// Whether the job must go back to a checkpoint in storage (not only to its last in-memory checkpoint or its
// replicas' state) after losing pending_failed_.
bool Engine::NeedsRollback() const {
  switch (traits_.restore) {
    case RestoreFrom::kCheckpoint:
    case RestoreFrom::kLayerBitmap:
      return true;
    case RestoreFrom::kReplicas:
      // A crash of the job's processes loses every GPU's state; a node loss only the replicas on it.
      return pending_software_ || !StateSurvives(*pending_from_, pending_failed_);
    case RestoreFrom::kGraphSwitch: {
      // hetu: every slice of every weight needs a live owner (Hetu v2 Table 7's note: ZeRO off, two pipelines).
      if (pending_software_) return true;
      const auto& f = *pending_from_;
      HetuSwitchOptions probe = hetu_;
      probe.heuristics = false;
      const auto plan = PlanHetuSwitch(f.plan, f.place, f.plan, f.place, *in_.model, in_.training, c_, DeadDevices(), probe);
      return plan.missing_bytes > 0 || f.plan.zero_stage() > 0;
    }
    case RestoreFrom::kHostMemory: {
      // Gemini's group placement: consecutive nodes of the job in groups of `replicas` keep each other's
      // checkpoints; a group all of whose nodes failed has lost them.
      for (size_t g = 0; g < slots_.size(); g += replicas_) {
        bool all = true;
        for (size_t i = g; i < std::min(slots_.size(), g + replicas_); ++i) all &= pending_failed_.count(slots_[i]) != 0;
        if (all) return true;
      }
      return false;
    }
  }
  return true;
}

// Seconds to bring back the state of `to` after losing `failed` (nodes of the trace cluster) from `from`.
Result<double> Engine::RestoreTime(const Config& from, const Config& to, const std::set<uint32_t>& failed,
                                   bool rollback, bool software) {
  if (traits_.restore == RestoreFrom::kLayerBitmap) return LayerwiseRestoreTime(to);
  if (traits_.restore == RestoreFrom::kCheckpoint || rollback) return to.load_s;
  if (traits_.restore == RestoreFrom::kGraphSwitch) return GraphSwitchTime(from, to);
  const models::Cluster& cl = *to.cluster;
  const std::vector<uint32_t>& devices = to.devices;
  if (traits_.restore == RestoreFrom::kHostMemory) {
    // Gemini: devices of surviving nodes reload from their own host memory, a replaced node's devices from
    // a peer's (the next node of its group) over the network. Costed once per number of replaced nodes, on
    // the first groups' nodes (the same links and sizes as any other).
    const size_t replaced = software ? 0 : failed.size();
    std::set<uint32_t> replaced_nodes;
    for (size_t i = 0; i < to.nodes.size() && replaced_nodes.size() < replaced; i += replicas_) {
      replaced_nodes.insert(to.nodes[i]);
    }
    std::vector<Transfer> t;
    for (size_t i = 0; i < devices.size(); ++i) {
      const uint32_t node = cl.device(devices[i]).node;
      uint32_t src = node;
      if (replaced_nodes.count(node) != 0) {
        const auto pos = static_cast<size_t>(std::find(to.nodes.begin(), to.nodes.end(), node) - to.nodes.begin());
        src = to.nodes[pos + 1 < to.nodes.size() ? pos + 1 : (pos > 0 ? pos - 1 : pos)];
      }
      t.push_back({{Endpoint::kHostMemory, src}, {Endpoint::kGpu, devices[i]}, to.state_bytes[i]});
    }
    return TransferTime("restore-host-memory|" + std::to_string(replaced) + "|" + to.key, cl, t,
                        "a restore from host memory (" + std::to_string(replaced) + " replaced nodes)");
  }
  // Replicas (Oobleck §5): each device of the new plan that does not already hold its shard receives it
  // from a surviving device of the old plan holding its first layer, replicas taken in turn. Played on the
  // trace's cluster (both plans mapped onto it); simulated once per pair of configurations.
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
        old_holders.push_back({c_.node(node).first_device + dev.local, s.layer_begin(), s.layer_end(),
                               std::max(1u, s.tp_degree()), static_cast<uint32_t>(r)});
      }
    }
  }
  std::vector<Transfer> t;
  size_t turn = 0, i = 0;
  for (const auto& p : to.plan.pipelines()) {
    for (const auto& s : p.stages()) {
      for (int r = 0; r < s.devices_size(); ++r, ++i) {
        const auto& dev = cl.device(s.devices(r));
        const uint32_t phys = c_.node(to.node_map[dev.node]).first_device + dev.local;
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
  return TransferTime("restore-replicas|" + from.key + "|" + to.key, c_, t, "a state redistribution from replicas");
}

// AutoHet §IV-B2/§IV-C: every device of `to` loads the pieces of its layers from the last checkpoint, its
// own node's copy first, then other live nodes' over the network, the rest from the object store. Played on
// the trace's cluster (both configurations mapped onto it).
Result<double> Engine::LayerwiseRestoreTime(const Config& to) {
  LayerBitmap bitmap;
  if (ckpt_cfg_ != nullptr) {
    const models::PlanContext saved{*ckpt_cfg_->cluster, *in_.model, in_.training};
    bitmap = LayerBitmap(LayerPieces(ckpt_cfg_->plan, saved, PlacesOf(*ckpt_cfg_)));
    for (uint32_t n : left_since_ckpt_) bitmap.Forget(n);
  }
  const models::PlanContext ctx{*to.cluster, *in_.model, in_.training};
  const RecoveryLoad load = PlanRecoveryLoad(bitmap, LayerPieces(to.plan, ctx, PlacesOf(to)),
                                             load_from_host_memory_ ? Endpoint::kHostMemory : Endpoint::kNvme);
  std::string key = c_.spec().SerializeAsString();
  for (const auto& t : load.transfers) {
    key += "|" + std::to_string(t.from.kind) + ":" + std::to_string(t.from.index) + ">" + std::to_string(t.to.index) +
           ":" + std::to_string(t.bytes);
  }
  char what[160];
  std::snprintf(what, sizeof(what), "a layer-wise restore (%.3g GB local, %.3g GB from peers, %.3g GB from the cloud)",
                load.local_bytes / 1e9, load.peer_bytes / 1e9, load.cloud_bytes / 1e9);
  return TransferTime("restore-layerwise|" + Hash(key), c_, load.transfers, what);
}

// hetu: the trace cluster's devices whose state is gone: the failed GPUs of nodes that stay, every GPU of a
// node lost since training stopped (down, preempted, or back from a repair with empty memory).
std::set<uint32_t> Engine::DeadDevices() const {
  std::set<uint32_t> dead;
  for (const auto& [n, locals] : lost_gpus_) {
    for (uint32_t k : locals) dead.insert(c_.node(n).first_device + k);
  }
  for (uint32_t n : pending_failed_) {
    const bool stays = lost_gpus_.count(n) != 0 && (role_[n] == Role::kJob || role_[n] == Role::kFree);
    if (stays) continue;
    for (uint32_t k = 0; k < c_.node(n).num_gpus; ++k) dead.insert(c_.node(n).first_device + k);
  }
  return dead;
}

// hetu (Hetu v2 §6.2): the weights of `from` that survive move to `to` by (fused) BSR, on the trace's cluster.
Result<double> Engine::GraphSwitchTime(const Config& from, const Config& to) {
  const std::set<uint32_t> dead = DeadDevices();
  const auto plan = PlanHetuSwitch(from.plan, from.place, to.plan, to.place, *in_.model, in_.training, c_, dead, hetu_);
  if (plan.missing_bytes > 0) return to.load_s;  // NeedsRollback saw it first; kept for safety
  std::string key = "hetu-switch|" + from.key + "|" + to.key + "|" + std::to_string(hetu_.fused) +
                    std::to_string(hetu_.heuristics) + "|" + std::to_string(SwitchBytesPerParam(hetu_, in_.training));
  for (uint32_t d : dead) key += "," + std::to_string(d);
  return Cached(key, [&]() -> Result<double> {
    char what[160];
    std::snprintf(what, sizeof(what), "a graph switch (%s BSR, %.3g GB sent, %.3g GB local)",
                  hetu_.fused ? "fused" : "unfused", plan.sent_bytes / 1e9, plan.local_bytes / 1e9);
    Progress(std::string("replay: simulating ") + what);
    return SimulateSwitch(plan, c_, in_.sim.compute.calibration);
  });
}

// The plan on every live node (elastic policies): the starting one on the whole cluster, else re-planned.
Result<std::shared_ptr<Config>> Engine::ElasticConfig() {
  // Live nodes in the live cluster's order: each group's whole nodes, then its nodes with lost GPUs (hetu).
  std::vector<uint32_t> live;
  for (int g = 0; g < c_.spec().nodes_size(); ++g) {
    for (int degraded = 0; degraded < 2; ++degraded) {
      for (uint32_t n = 0; n < role_.size(); ++n) {
        if (c_.node(n).group != static_cast<uint32_t>(g) || (lost_gpus_.count(n) != 0) != (degraded != 0)) continue;
        if (role_[n] == Role::kFree || role_[n] == Role::kJob) live.push_back(n);
      }
    }
  }
  if (live.empty()) return Status::Invalid("no live node");
  const bool all = live.size() == role_.size() && lost_gpus_.empty();
  if (all && in_.policy.replan_plans_size() == 0) return base_;
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
      std::vector<uint32_t> degraded;  // hetu: a node with lost GPUs is a group of one with fewer GPUs
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
    return MakeConfig(fixed, cluster, live, in_.policy.has_replan_s() ? in_.policy.replan_s() : 0);
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
  const auto [planner, options] = DefaultReplanner(in_.policy);
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
  return MakeConfig(it->second.plan, cluster, live, replan_s);
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
    remote_rolled_ = false;
    pending_rollback_ = NeedsRollback();
    // Lost: the iterations since the last checkpoint (in memory or in storage), unless replicas keep them.
    const bool keeps = traits_.restore == RestoreFrom::kReplicas || traits_.restore == RestoreFrom::kGraphSwitch;
    EndTraining(t, !keeps || pending_rollback_, cause);
  } else {
    TruncateDown(t);
    pending_failed_.insert(failed_nodes.begin(), failed_nodes.end());
    pending_software_ = pending_software_ || software;
    pending_rollback_ = pending_rollback_ || NeedsRollback();
  }
  if (traits_.restore == RestoreFrom::kHostMemory && pending_rollback_ && !remote_rolled_) {
    RollbackToRemote();
    remote_rolled_ = true;
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

// Chooses the nodes (and plan) to restart on, from time t; waits when there are not enough.
Status Engine::TryRecover(double t, const std::string& cause) {
  std::shared_ptr<Config> next;
  double replan = 0;
  if (traits_.placement == Placement::kFixed) {
    // Every slot whose node is gone takes a free node of the same group, then a spare.
    std::vector<uint32_t> want = slots_;
    std::set<uint32_t> taken(want.begin(), want.end());
    uint32_t virtual_left = virtual_free_;
    bool ok = true;
    for (size_t i = 0; i < want.size(); ++i) {
      const uint32_t n = want[i];
      if (n >= kVirtualNode || role_[n] == Role::kJob) continue;
      if (role_[n] == Role::kFree) continue;  // its own node is back
      const uint32_t group = c_.node(base_->nodes[i]).group;
      bool found = false;
      for (uint32_t m = 0; m < role_.size() && !found; ++m) {
        if (role_[m] == Role::kFree && c_.node(m).group == group && taken.count(m) == 0) {
          want[i] = m;
          taken.insert(m);
          found = true;
        }
      }
      if (!found && virtual_left > 0) {
        --virtual_left;
        want[i] = kVirtualNode + virtual_left;
        found = true;
      }
      ok &= found;
    }
    if (!ok) {
      mode_ = Mode::kWaiting;
      AddSegment(t, kInf, "wait", cause);
      return Status::Ok();
    }
    virtual_free_ = virtual_left;
    for (size_t i = 0; i < want.size(); ++i) {
      if (want[i] < kVirtualNode && role_[want[i]] != Role::kJob) SetRole(want[i], Role::kJob);
    }
    slots_ = want;
    AccrueCost();
    next = base_;
  } else {
    auto cfg = ElasticConfig();
    if (!cfg.ok()) {
      mode_ = Mode::kWaiting;
      AddSegment(t, kInf, "wait", cause);
      Progress("replay: waiting for nodes at t=" + std::to_string(t) + " s: " + cfg.status().message());
      return Status::Ok();
    }
    next = *cfg;
    if (next->key != cfg_->key) replan = next->replan_s;
    for (uint32_t n = 0; n < role_.size(); ++n) {
      if (role_[n] == Role::kJob) SetRole(n, Role::kFree);
    }
    slots_ = PhysicalNodesOf(*next);
    for (uint32_t n : slots_) SetRole(n, Role::kJob);
    AccrueCost();
  }
  double restore = 0;  // nothing to restore before the first iteration
  if (committed_ > 0 || u_ > 0) {
    HETSIM_ASSIGN_OR_RETURN(restore,
                            RestoreTime(*pending_from_, *next, pending_failed_, pending_rollback_, pending_software_));
  }
  double at = t;
  auto phase = [&](const char* name, double s) {
    if (s <= 0) return;
    AddSegment(at, at + s, name, cause);
    at += s;
  };
  cfg_ = next;
  phase("replan", replan);
  // hetu: graph specialisation in place of a restart, unless it fell back to the checkpoint.
  const bool hetu = traits_.restore == RestoreFrom::kGraphSwitch && !pending_rollback_;
  phase("restart", hetu ? specialization_s_ : restart_s_);
  phase("recover", restore);
  mode_ = Mode::kDown;
  Schedule(at, InternalEvent::kResume, static_cast<uint32_t>(++resume_generation_));
  return Status::Ok();
}

// Elastic growth: nodes came back while training; stop after the iteration in progress, re-plan, move state.
Status Engine::Reconfigure(double t) {
  auto cfg = ElasticConfig();
  if (!cfg.ok() || (*cfg)->key == cfg_->key) return Status::Ok();
  pending_from_ = cfg_;
  pending_failed_.clear();
  pending_software_ = false;
  pending_rollback_ = false;
  down_cause_ = "capacity added";
  EndTraining(t, false, "");
  if (traits_.restore == RestoreFrom::kLayerBitmap) {
    // The state at the stop is what the new configuration loads: saved layer-wise where it ran (uncharged,
    // as varuna's growth reloads the state at the stop from the object store).
    ckpt_cfg_ = cfg_;
    left_since_ckpt_.clear();
  }
  mode_ = Mode::kDown;
  down_begin_ = static_cast<size_t>(report_.segments_size());
  return TryRecover(t, "capacity added");
}

std::string KindName(proto::TraceEvent::Kind k) {
  switch (k) {
    case proto::TraceEvent::KIND_GPU_FAILURE: return "gpu failure";
    case proto::TraceEvent::KIND_NODE_FAILURE: return "node failure";
    case proto::TraceEvent::KIND_LINK_FAILURE: return "link failure";
    case proto::TraceEvent::KIND_SOFTWARE_FAILURE: return "software failure";
    case proto::TraceEvent::KIND_PREEMPTION: return "preemption";
    case proto::TraceEvent::KIND_CAPACITY_ADDED: return "capacity added";
    case proto::TraceEvent::KIND_STRAGGLER: return "straggler";
    default: return "event";
  }
}

Result<proto::ReplayReport> Engine::Run() {
  const auto& trace = in_.trace;
  role_.assign(c_.nodes().size(), trace.starts_empty() ? Role::kAbsent : Role::kFree);
  back_at_.assign(c_.nodes().size(), kInf);
  if (duration_ <= 0) {
    duration_ = trace.events_size() > 0 ? trace.events(trace.events_size() - 1).time_s() : 0;
    if (duration_ <= 0) return Status::Invalid(in_.trace_name + ": the trace has no duration_s and no events");
  }

  // The starting configuration.
  auto full = std::shared_ptr<const models::Cluster>(in_.cluster, [](const models::Cluster*) {});
  std::vector<uint32_t> identity(c_.nodes().size());
  for (uint32_t n = 0; n < identity.size(); ++n) identity[n] = n;
  HETSIM_ASSIGN_OR_RETURN(base_, MakeConfig(in_.plan, full, identity, in_.policy.has_replan_s() ? in_.policy.replan_s() : 0));
  cfg_ = base_;
  pending_from_ = base_;
  slots_ = PhysicalNodesOf(*base_);
  if (traits_.spares) {
    const uint32_t plan_nodes = static_cast<uint32_t>(base_->nodes.size());
    const uint32_t spares = in_.policy.has_spares() ? in_.policy.spares() : std::max(1u, (plan_nodes + 99) / 100);
    virtual_free_ = spares;
    spare_gpus_per_node_ = c_.node(base_->nodes[0]).num_gpus;
    spare_gpus_total_ = static_cast<double>(spares) * spare_gpus_per_node_;
  }

  // Young/Daly with the mean time between interruptions of a job on every node: failures of any kind and
  // preemptions.
  uint32_t interrupting = 0;
  for (const auto& e : trace.events()) {
    interrupting += e.kind() != proto::TraceEvent::KIND_CAPACITY_ADDED && e.kind() != proto::TraceEvent::KIND_STRAGGLER;
  }
  const double mtbf = interrupting > 0 ? duration_ / interrupting : duration_;
  if (in_.spec.checkpoint_interval_s() > 0) {
    interval_s_ = in_.spec.checkpoint_interval_s();
    report_.set_checkpoint_interval_rule("fixed");
  } else {
    interval_s_ = YoungDalyInterval(base_->save_s, mtbf);
    report_.set_checkpoint_interval_rule("young-daly");
  }
  uint32_t events = 0;
  for (int i = 0; i < trace.events_size(); ++i) {
    if (trace.events(i).time_s() > duration_) continue;
    ++events;
    Schedule(trace.events(i).time_s(), InternalEvent::kTrace, static_cast<uint32_t>(i));
  }

  // Start: every node present (failure traces), or wait for capacity (spot traces).
  if (trace.starts_empty()) {
    mode_ = Mode::kWaiting;
    down_begin_ = 0;
    down_cause_ = "no capacity yet";
    pending_rollback_ = false;
    AddSegment(0, kInf, "wait", down_cause_);
  } else {
    for (uint32_t n : slots_) SetRole(n, Role::kJob);
    AccrueCost();
    StartTraining(0);
  }

  while (!queue_.empty() && queue_.top().t <= duration_) {
    const InternalEvent ev = queue_.top();
    queue_.pop();
    const double t = ev.t;
    if (mode_ == Mode::kTraining) AdvanceTraining(t);
    now_ = t;
    AccrueCost();
    auto nodes_back = [&]() -> Status {
      if (mode_ == Mode::kWaiting) {
        TruncateDown(t);
        mode_ = Mode::kDown;
        return TryRecover(t, down_cause_);
      }
      if (mode_ == Mode::kTraining && traits_.placement == Placement::kElastic && grow_) return Reconfigure(t);
      return Status::Ok();
    };
    switch (ev.kind) {
      case InternalEvent::kResume:
        if (ev.index != resume_generation_ || mode_ != Mode::kDown) break;
        StartTraining(t);
        if (traits_.placement == Placement::kElastic && grow_) HETSIM_RETURN_IF_ERROR(Reconfigure(t));
        break;
      case InternalEvent::kStragglerEnd:
        stragglers_.erase(ev.index);
        if (mode_ == Mode::kTraining) Split(t);
        break;
      case InternalEvent::kRepair:
        if (traits_.gpu_granular && lost_gpus_.count(ev.index) != 0 && role_[ev.index] != Role::kDown &&
            back_at_[ev.index] == t) {
          // hetu: the node's failed GPUs are back.
          AccrueCost();
          lost_gpus_.erase(ev.index);
          back_at_[ev.index] = kInf;
          HETSIM_RETURN_IF_ERROR(nodes_back());
          break;
        }
        if (role_[ev.index] != Role::kDown || back_at_[ev.index] != t) break;
        lost_gpus_.erase(ev.index);
        back_at_[ev.index] = kInf;
        SetRole(ev.index, Role::kFree);  // back to the pool (a spare for hot-spares)
        HETSIM_RETURN_IF_ERROR(nodes_back());
        break;
      case InternalEvent::kRemove: {
        // Nodes removed at the same instant (one preemption of several nodes) leave together: one interruption
        // and one re-plan, not one per node.
        std::vector<uint32_t> gone = {ev.index};
        while (!queue_.empty() && queue_.top().t == t && queue_.top().kind == InternalEvent::kRemove) {
          gone.push_back(queue_.top().index);
          queue_.pop();
        }
        std::set<uint32_t> hit;
        for (uint32_t n : gone) {
          if (JobUses(n)) hit.insert(n);
          if (role_[n] == Role::kDown) back_at_[n] = kInf;
          SetRole(n, Role::kAbsent);
        }
        if (!hit.empty() && mode_ != Mode::kWaiting) HETSIM_RETURN_IF_ERROR(Interrupt(t, "preemption", false, hit));
        break;
      }
      case InternalEvent::kTrace: {
        const auto& e = trace.events(static_cast<int>(ev.index));
        const std::string cause = e.cause().empty() ? KindName(e.kind()) : e.cause();
        std::set<uint32_t> nodes;
        for (uint32_t d : e.devices()) nodes.insert(c_.device(d).node);
        for (uint32_t n : e.nodes()) nodes.insert(n);
        if (traits_.gpu_granular && e.kind() == proto::TraceEvent::KIND_GPU_FAILURE && e.nodes_size() == 0) {
          // hetu: only the failed GPUs leave; a node left with none is down.
          std::set<uint32_t> hit;
          for (uint32_t d : e.devices()) {
            const uint32_t n = c_.device(d).node;
            if (role_[n] == Role::kAbsent || role_[n] == Role::kDown) continue;
            if (JobUses(n)) hit.insert(n);
            AccrueCost();
            lost_gpus_[n].insert(c_.device(d).local);
            back_at_[n] = e.repair_s() > 0 ? t + e.repair_s() : kInf;
            if (e.repair_s() > 0) Schedule(t + e.repair_s(), InternalEvent::kRepair, n);
            if (GpusOf(n) == 0) {
              lost_gpus_.erase(n);
              SetRole(n, Role::kDown);
            }
          }
          if (!hit.empty() && mode_ != Mode::kWaiting) HETSIM_RETURN_IF_ERROR(Interrupt(t, cause, true, hit));
          break;
        }
        switch (e.kind()) {
          case proto::TraceEvent::KIND_GPU_FAILURE:
          case proto::TraceEvent::KIND_NODE_FAILURE:
          case proto::TraceEvent::KIND_LINK_FAILURE: {
            // A node with a failed GPU, host or link leaves the job until it is repaired.
            std::set<uint32_t> hit;
            for (uint32_t n : nodes) {
              if (role_[n] == Role::kAbsent) continue;
              if (JobUses(n)) hit.insert(n);
              SetRole(n, Role::kDown);
              back_at_[n] = e.repair_s() > 0 ? t + e.repair_s() : kInf;
              if (e.repair_s() > 0) Schedule(t + e.repair_s(), InternalEvent::kRepair, n);
            }
            if (!hit.empty() && mode_ != Mode::kWaiting) HETSIM_RETURN_IF_ERROR(Interrupt(t, cause, true, hit));
            break;
          }
          case proto::TraceEvent::KIND_SOFTWARE_FAILURE:
            if (mode_ == Mode::kTraining || mode_ == Mode::kDown) HETSIM_RETURN_IF_ERROR(Interrupt(t, cause, true, {}));
            break;
          case proto::TraceEvent::KIND_PREEMPTION: {
            bool hits_job = false;
            for (uint32_t n : nodes) hits_job |= JobUses(n);
            if (hits_job && notice_ckpt_ && mode_ == Mode::kTraining && e.notice_s() >= C_ + T_ && u_ > 0 &&
                u_ < k_) {
              // Save now: the iteration in progress is dropped, the next unit is a checkpoint; what is trained
              // after it and before the removal is lost (unless replicas keep it).
              lost_s_ += t - t_;
              t_ = t;
              force_save_ = true;
            }
            for (uint32_t n : nodes) Schedule(t + e.notice_s(), InternalEvent::kRemove, n);
            break;
          }
          case proto::TraceEvent::KIND_CAPACITY_ADDED:
            for (uint32_t n : nodes) {
              if (role_[n] == Role::kAbsent) SetRole(n, Role::kFree);
            }
            HETSIM_RETURN_IF_ERROR(nodes_back());
            break;
          case proto::TraceEvent::KIND_STRAGGLER:
            for (uint32_t d : e.devices()) {
              const auto id = static_cast<uint32_t>(seq_);
              stragglers_[id] = {d, e.slowdown()};
              Schedule(t + e.duration_s(), InternalEvent::kStragglerEnd, id);
            }
            if (mode_ == Mode::kTraining) Split(t);
            break;
          default:
            break;
        }
        break;
      }
    }
  }

  // The end of the run: the iterations done so far count.
  now_ = duration_;
  if (mode_ == Mode::kTraining) {
    EndTraining(duration_, false, "");
  } else {
    TruncateDown(duration_);
  }
  AccrueCost();

  auto& r = report_;
  r.set_kind("replay_report");
  r.set_cluster(c_.name());
  r.set_model(in_.model->name());
  r.set_plan(PlanLabel(in_.plan));
  r.set_trace(in_.trace_name);
  r.set_policy(in_.policy.label().empty() ? in_.policy.name() : in_.policy.label());
  r.set_replan_time(in_.policy.has_replan_s() ? "fixed" : in_.policy.measured_replan() ? "measured" : "none");
  r.set_seed(in_.trace.seed());
  r.set_duration_s(duration_);
  r.set_checkpoint_interval_s(interval_s_);
  r.set_mtbf_s(mtbf);
  r.set_interruptions(interruptions_);
  r.set_events(events);
  r.set_iterations(committed_);
  r.set_tokens(static_cast<double>(committed_) * tokens_per_iteration_);
  r.set_goodput_tokens_per_s(r.tokens() / duration_);
  r.set_ideal_tokens_per_s(tokens_per_iteration_ / base_->iteration_s);
  r.set_ettr(kept_s_ / duration_);
  r.set_lost_work_s(lost_s_);
  r.set_checkpoint_overhead_s(ckpt_total_s_);
  std::map<std::string, double> by_phase;
  double down = 0;
  for (const auto& s : r.segments()) {
    if (s.phase() == "train") continue;
    const double len = s.end_s() - s.start_s();
    down += len;
    by_phase[s.phase()] += len;
    by_event_[s.cause()] += len;
  }
  r.set_downtime_s(down);
  by_phase["lost work"] = lost_s_;
  by_phase["checkpoint"] = ckpt_total_s_;
  for (const char* phase : {"checkpoint", "lost work", "detect", "replan", "wait", "restart", "recover"}) {
    auto* d = r.add_downtime();
    d->set_cause(phase);
    d->set_seconds(by_phase[phase]);
  }
  for (const auto& [cause, s] : by_event_) {
    if (s <= 0) continue;
    auto* d = r.add_by_event_cause();
    d->set_cause(cause);
    d->set_seconds(s);
  }
  r.set_spares_gpus(spare_gpus_total_);
  r.set_gpu_hours(gpu_seconds_ / 3600);
  double price = in_.spec.has_usd_per_gpu_hour() ? in_.spec.usd_per_gpu_hour()
                                                  : OnDemandUsdPerGpuHour(c_.node(base_->nodes[0]).gpu->name);
  if (trace.starts_empty() && !in_.spec.has_usd_per_gpu_hour()) {
    price *= in_.spec.has_spot_price_fraction() ? in_.spec.spot_price_fraction() : kDefaultSpotFraction;
  }
  r.set_usd_per_gpu_hour(price);
  r.set_cost_usd(r.gpu_hours() * price);
  return r;
}

}  // namespace

Result<proto::ReplayReport> ReplayRun(const ReplayInputs& in) {
  if (in.cluster == nullptr || in.model == nullptr) return Status::Invalid("replay: no cluster or model");
  HETSIM_RETURN_IF_ERROR(CheckRecoveryPolicy(in.policy, "policy"));
  Engine engine(in);
  return engine.Run();
}

const std::vector<PolicyInfo>& RecoveryPolicies() {
  static const std::vector<PolicyInfo> list = [] {
    std::vector<PolicyInfo> l;
    for (const auto& p : PolicyTable()) l.push_back(p.info);
    return l;
  }();
  return list;
}

Status CheckRecoveryPolicy(const proto::RecoveryPolicy& policy, const std::string& where) {
  const PolicyEntry* p = FindPolicy(policy.name());
  if (p == nullptr) {
    std::string names;
    for (const auto& e : PolicyTable()) names += (names.empty() ? "" : ", ") + e.info.name;
    return Status::Invalid(where + ".name: unknown recovery policy '" + policy.name() + "' (policies: " + names + ")");
  }
  const auto& t = p->traits;
  auto refuse = [&](bool set, const char* field, const char* who) -> Status {
    if (!set) return Status::Ok();
    return Status::Invalid(where + "." + field + ": policy " + policy.name() + " does not take it (only " + who + ")");
  };
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_spares() && !t.spares, "spares", "hot-spares, in-memory"));
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_replicas() && t.save != SaveTo::kHostMemory, "replicas", "in-memory"));
  HETSIM_RETURN_IF_ERROR(
      refuse(policy.has_remote_interval_s() && t.save != SaveTo::kHostMemory, "remote_interval_s", "in-memory"));
  const bool elastic = t.placement == Placement::kElastic;
  const char* re_planning = "elastic, varuna, autohet, hetu";
  HETSIM_RETURN_IF_ERROR(refuse(!policy.planner().empty() && !elastic, "planner", re_planning));
  HETSIM_RETURN_IF_ERROR(refuse(!policy.planner_options().empty() && !elastic, "planner_options", re_planning));
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_replan_s() && !elastic, "replan_s", re_planning));
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_measured_replan() && !elastic, "measured_replan", re_planning));
  if (policy.has_replan_s() && policy.measured_replan()) {
    return Status::Invalid(where + ": replan_s and measured_replan: choose one (a fixed re-planning time, or the "
                                   "planner's measured wall time)");
  }
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_grow() && !elastic, "grow", re_planning));
  HETSIM_RETURN_IF_ERROR(refuse(policy.replan_plans_size() > 0 && !elastic, "replan_plans", re_planning));
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_load_from_host_memory() && t.restore != RestoreFrom::kLayerBitmap,
                                "load_from_host_memory", "autohet"));
  const bool hetu = t.restore == RestoreFrom::kGraphSwitch;
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_specialization_s() && !hetu, "specialization_s", "hetu"));
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_fused_bsr() && !hetu, "fused_bsr", "hetu"));
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_bsr_heuristics() && !hetu, "bsr_heuristics", "hetu"));
  HETSIM_RETURN_IF_ERROR(refuse(policy.has_switch_bytes_per_param() && !hetu, "switch_bytes_per_param", "hetu"));
  for (int i = 0; i < policy.replan_plans_size(); ++i) {
    const auto& plan = policy.replan_plans(i);
    const std::string at = where + ".replan_plans[" + std::to_string(i) + "]";
    if (plan.pipelines_size() == 0) {
      return Status::Invalid(at + ".pipelines: a plan needs at least one pipeline (docs/formats.md, Plan)");
    }
    for (int j = 0; j < i; ++j) {
      if (policy.replan_plans(j).SerializeAsString() == plan.SerializeAsString()) {
        return Status::Invalid(at + ": the same plan as replan_plans[" + std::to_string(j) +
                               "]; list each plan once (the first that fits the live nodes is used)");
      }
    }
  }
  return Status::Ok();
}

// The default planner (and options) an elastic policy re-plans with.
std::pair<std::string, std::string> DefaultReplanner(const proto::RecoveryPolicy& policy) {
  const PolicyEntry* p = FindPolicy(policy.name());
  if (p == nullptr) return {"", ""};
  std::string planner = policy.planner().empty() ? p->traits.default_planner : policy.planner();
  std::string options = policy.planner().empty() && policy.planner_options().empty() ? p->traits.default_planner_options
                                                                                     : policy.planner_options();
  return {planner, options};
}

double YoungDalyInterval(double delta, double m) {
  if (m <= 0) return 0;
  if (delta <= 0) return 0;
  if (delta >= 2 * m) return m;
  const double x = delta / (2 * m);
  return std::sqrt(2 * delta * m) * (1 + std::sqrt(x) / 3 + x / 9) - delta;
}

// AWS on-demand list prices (us-east-1) per instance-hour divided by the instance's GPUs: p5.48xlarge
// (8×H100, $98.32), p4de.24xlarge (8×A100 80 GB, $40.97), p4d.24xlarge (8×A100 40 GB, $32.77), p3.16xlarge
// (8×V100, $24.48), p3dn.24xlarge (8×V100 32 GB, $31.21), g4dn.12xlarge (4×T4, $3.91), g5.48xlarge (8×A10G,
// $16.29). Other types: 0 (set replay.usd_per_gpu_hour).
double OnDemandUsdPerGpuHour(const std::string& gpu) {
  static const std::map<std::string, double> price = {
      {"h100", 98.32 / 8},     {"a100-80gb", 40.97 / 8}, {"a100-40gb", 32.77 / 8}, {"v100", 24.48 / 8},
      {"v100-32gb", 31.21 / 8}, {"t4", 3.912 / 4},        {"a10", 16.29 / 8},
  };
  auto it = price.find(gpu);
  return it == price.end() ? 0 : it->second;
}

std::string ReplayReportJson(const proto::ReplayReport& report) { return models::MessageJson(report); }

}  // namespace hetsim::sim
