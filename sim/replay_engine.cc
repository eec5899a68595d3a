// The replay engine's event loop: trace events and the engine's own (repairs, removals at the end of a
// preemption's notice, ends of stragglers, resumptions) in time order, the world they change (which node is
// in the job, free, down or absent), and the report.
#include "sim/replay_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hetsim::sim::replay_internal {
namespace {

constexpr double kDefaultDetectionS = 120;
constexpr double kDefaultRestartS = 300;
constexpr double kDefaultSpotFraction = 0.35;

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

// 2592000000 -> "2,592,000,000".
std::string Count(double n) {
  std::string digits = std::to_string(static_cast<unsigned long long>(std::llround(std::min(n, 1e18))));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<size_t>(i), ",");
  return digits;
}

// 2592000 -> "30 days".
std::string Span(double s) {
  char buf[32];
  if (s >= 2 * 86400) {
    std::snprintf(buf, sizeof(buf), "%.4g days", s / 86400);
  } else if (s >= 2 * 3600) {
    std::snprintf(buf, sizeof(buf), "%.4g hours", s / 3600);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4g s", s);
  }
  return buf;
}

// `x` rounded up to three significant digits.
double RoundUp3(double x) {
  if (!(x > 0)) return x;
  const double unit = std::pow(10.0, std::floor(std::log10(x)) - 2);
  return std::ceil(x / unit * (1 - 1e-12)) * unit;
}

}  // namespace

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

Engine::Engine(const ReplayInputs& in, std::unique_ptr<recovery::Policy> policy)
    : in_(in), c_(*in.cluster), policy_(std::move(policy)), traits_(policy_->traits()) {
  detection_s_ = in.spec.has_detection_s() ? in.spec.detection_s() : kDefaultDetectionS;
  restart_s_ = in.spec.has_restart_s() ? in.spec.restart_s() : kDefaultRestartS;
  grow_ = in.policy.has_grow() ? in.policy.grow() : traits_.grow;
  notice_ckpt_ = in.policy.has_checkpoint_on_notice() ? in.policy.checkpoint_on_notice() : traits_.checkpoint_on_notice;
  duration_ = in.trace.duration_s();
  tokens_per_iteration_ = static_cast<double>(in.training.global_batch_size()) * in.training.seq_len();
}

// ---- the world ----

void Engine::SetRole(uint32_t node, Role r) {
  AccrueCost();
  const Role old = role_[node];
  const uint32_t group = c_.node(node).group;
  if (old == Role::kJob) job_gpus_ -= GpusOf(node);
  if (old == Role::kFree) free_[group].erase(node);
  role_[node] = r;
  if (r == Role::kJob) job_gpus_ += GpusOf(node);
  if (r == Role::kFree) free_[group].insert(node);
  if (const int32_t slot = slot_of_[node]; slot >= 0) {
    if (r == Role::kJob) {
      vacant_.erase(static_cast<size_t>(slot));
    } else {
      vacant_.insert(static_cast<size_t>(slot));
    }
  }
  if (r == Role::kDown || r == Role::kAbsent) policy_->NodeLeft(node);  // its local copies are gone
}

void Engine::ChangeLostGpus(uint32_t node, const std::function<void()>& change) {
  const double before = GpusOf(node);
  change();
  if (role_[node] == Role::kJob) job_gpus_ += GpusOf(node) - before;
}

void Engine::SetSlots(std::vector<uint32_t> slots) {
  for (uint32_t n : slots_) {
    if (n < kSpareNode) slot_of_[n] = -1;
  }
  slots_ = std::move(slots);
  vacant_.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    const uint32_t n = slots_[i];
    if (n >= kSpareNode) continue;
    slot_of_[n] = static_cast<int32_t>(i);
    if (role_[n] != Role::kJob) vacant_.insert(i);
  }
}

void Engine::FillSlot(size_t slot, uint32_t node) {
  const uint32_t old = slots_[slot];
  if (old < kSpareNode && slot_of_[old] == static_cast<int32_t>(slot)) slot_of_[old] = -1;
  slots_[slot] = node;
  vacant_.erase(slot);
  if (node >= kSpareNode) return;
  slot_of_[node] = static_cast<int32_t>(slot);
  if (role_[node] != Role::kJob) vacant_.insert(slot);
}

// The trace cluster's devices whose state is gone: the failed GPUs of nodes that stay, every GPU of a node
// lost since training stopped (down, preempted, or back from a repair with empty memory).
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

double Engine::StragglerFactor() const {
  for (const auto& [slowdown, device] : slowest_) {
    if (JobUses(c_.device(device).node)) return std::max(1.0, slowdown);
  }
  return 1;
}

// The next event in time order (the trace's first at equal times), if it falls within the run.
bool Engine::NextEvent(InternalEvent* ev) {
  const bool trace = next_trace_ < trace_order_.size();
  if (!trace && queue_.empty()) return false;
  if (trace && (queue_.empty() || in_.trace.events(static_cast<int>(trace_order_[next_trace_])).time_s() <=
                                      queue_.top().t)) {
    const uint32_t i = trace_order_[next_trace_++];
    *ev = {in_.trace.events(static_cast<int>(i)).time_s(), 0, InternalEvent::kTrace, i};
  } else {
    *ev = queue_.top();
    queue_.pop();
  }
  return ev->t <= duration_;
}

// Nodes came back (a repair, capacity): a waiting job tries again; a re-planning one may grow.
Status Engine::NodesBack(double t) {
  if (mode_ == Mode::kWaiting) {
    TruncateDown(t);
    mode_ = Mode::kDown;
    return TryRecover(t, down_cause_);
  }
  if (mode_ == Mode::kTraining && traits_.placement == recovery::Placement::kReplan && grow_) return Reconfigure(t);
  return Status::Ok();
}

Status Engine::HandleTraceEvent(double t, const proto::TraceEvent& e) {
  const std::string cause = e.cause().empty() ? KindName(e.kind()) : e.cause();
  std::set<uint32_t> nodes;
  for (uint32_t d : e.devices()) nodes.insert(c_.device(d).node);
  for (uint32_t n : e.nodes()) nodes.insert(n);
  if (traits_.gpu_granular && e.kind() == proto::TraceEvent::KIND_GPU_FAILURE && e.nodes_size() == 0) {
    // Only the failed GPUs leave; a node left with none is down.
    std::set<uint32_t> hit;
    for (uint32_t d : e.devices()) {
      const uint32_t n = c_.device(d).node;
      if (role_[n] == Role::kAbsent || role_[n] == Role::kDown) continue;
      if (JobUses(n)) hit.insert(n);
      AccrueCost();
      ChangeLostGpus(n, [&] { lost_gpus_[n].insert(c_.device(d).local); });
      back_at_[n] = e.repair_s() > 0 ? t + e.repair_s() : kInf;
      if (e.repair_s() > 0) Schedule(t + e.repair_s(), InternalEvent::kRepair, n);
      if (GpusOf(n) == 0) {
        ChangeLostGpus(n, [&] { lost_gpus_.erase(n); });
        SetRole(n, Role::kDown);
      }
    }
    if (!hit.empty() && mode_ != Mode::kWaiting) return Interrupt(t, cause, true, hit);
    return Status::Ok();
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
      if (!hit.empty() && mode_ != Mode::kWaiting) return Interrupt(t, cause, true, hit);
      return Status::Ok();
    }
    case proto::TraceEvent::KIND_SOFTWARE_FAILURE:
      if (mode_ == Mode::kTraining || mode_ == Mode::kDown) return Interrupt(t, cause, true, {});
      return Status::Ok();
    case proto::TraceEvent::KIND_PREEMPTION: {
      bool hits_job = false;
      for (uint32_t n : nodes) hits_job |= JobUses(n);
      if (hits_job && notice_ckpt_ && mode_ == Mode::kTraining && e.notice_s() >= C_ + T_ && u_ > 0 && u_ < k_) {
        // Save now: the iteration in progress is dropped, the next unit is a checkpoint; what is trained
        // after it and before the removal is lost (unless replicas keep it).
        lost_s_ += t - t_;
        t_ = t;
        force_save_ = true;
      }
      for (uint32_t n : nodes) Schedule(t + e.notice_s(), InternalEvent::kRemove, n);
      return Status::Ok();
    }
    case proto::TraceEvent::KIND_CAPACITY_ADDED:
      for (uint32_t n : nodes) {
        if (role_[n] == Role::kAbsent) SetRole(n, Role::kFree);
      }
      return NodesBack(t);
    case proto::TraceEvent::KIND_STRAGGLER:
      for (uint32_t d : e.devices()) {
        const auto id = static_cast<uint32_t>(seq_);
        stragglers_[id] = {d, e.slowdown()};
        slowest_.emplace(e.slowdown(), d);
        Schedule(t + e.duration_s(), InternalEvent::kStragglerEnd, id);
      }
      if (mode_ == Mode::kTraining) Split(t);
      return Status::Ok();
    default:
      return Status::Ok();
  }
}

Result<proto::ReplayReport> Engine::Run() {
  const auto& trace = in_.trace;
  const uint32_t num_nodes = static_cast<uint32_t>(c_.nodes().size());
  role_.assign(num_nodes, Role::kAbsent);
  back_at_.assign(num_nodes, kInf);
  slot_of_.assign(num_nodes, -1);
  nodes_of_group_.assign(static_cast<size_t>(c_.spec().nodes_size()), {});
  free_.assign(static_cast<size_t>(c_.spec().nodes_size()), {});
  for (uint32_t n = 0; n < num_nodes; ++n) nodes_of_group_[c_.node(n).group].push_back(n);
  if (!trace.starts_empty()) {
    for (uint32_t n = 0; n < num_nodes; ++n) SetRole(n, Role::kFree);
  }
  if (duration_ <= 0) {
    duration_ = trace.events_size() > 0 ? trace.events(trace.events_size() - 1).time_s() : 0;
    if (duration_ <= 0) return Status::Invalid(in_.trace_name + ": the trace has no duration_s and no events");
  }
  // The loop below runs once per checkpoint (the iterations between two advance in closed form): an interval
  // that would checkpoint more than kMaxCheckpoints times is refused rather than played.
  if (const double interval = in_.spec.checkpoint_interval_s();
      interval > 0 && interval < duration_ / kMaxCheckpoints * (1 - 1e-12)) {
    char buf[400];
    std::snprintf(buf, sizeof(buf),
                  "replay.checkpoint_interval_s (--checkpoint-interval): %g s would checkpoint up to %s times in a run "
                  "of %s; give at least %g s (at most %s checkpoints in a run), or 0 (young-daly) for Young/Daly's "
                  "interval",
                  interval, Count(duration_ / interval).c_str(), Span(duration_).c_str(),
                  RoundUp3(duration_ / kMaxCheckpoints), Count(kMaxCheckpoints).c_str());
    return Status::Invalid(buf);
  }

  // The starting configuration.
  auto full = std::shared_ptr<const models::Cluster>(in_.cluster, [](const models::Cluster*) {});
  std::vector<uint32_t> identity(num_nodes);
  for (uint32_t n = 0; n < num_nodes; ++n) identity[n] = n;
  const double replan_s = in_.policy.has_replan_s() ? in_.policy.replan_s() : 0;
  HETSIM_ASSIGN_OR_RETURN(base_, MakeConfig(in_.plan, full, identity, replan_s));
  cfg_ = base_;
  pending_from_ = base_;
  SetSlots(PhysicalNodesOf(*base_));
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
  // The trace's events within the run, in time order (a checked trace is in order already).
  for (int i = 0; i < trace.events_size(); ++i) {
    if (trace.events(i).time_s() <= duration_) trace_order_.push_back(static_cast<uint32_t>(i));
  }
  std::stable_sort(trace_order_.begin(), trace_order_.end(), [&](uint32_t a, uint32_t b) {
    return trace.events(static_cast<int>(a)).time_s() < trace.events(static_cast<int>(b)).time_s();
  });
  const auto events = static_cast<uint32_t>(trace_order_.size());
  seq_ = events;

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

  InternalEvent ev;
  while (NextEvent(&ev)) {
    const double t = ev.t;
    if (mode_ == Mode::kTraining) AdvanceTraining(t);
    now_ = t;
    AccrueCost();
    switch (ev.kind) {
      case InternalEvent::kResume:
        if (ev.index != resume_generation_ || mode_ != Mode::kDown) break;
        StartTraining(t);
        if (traits_.placement == recovery::Placement::kReplan && grow_) HETSIM_RETURN_IF_ERROR(Reconfigure(t));
        break;
      case InternalEvent::kStragglerEnd:
        if (auto it = stragglers_.find(ev.index); it != stragglers_.end()) {
          slowest_.erase(slowest_.find({it->second.slowdown, it->second.device}));
          stragglers_.erase(it);
        }
        if (mode_ == Mode::kTraining) Split(t);
        break;
      case InternalEvent::kRepair:
        if (traits_.gpu_granular && lost_gpus_.count(ev.index) != 0 && role_[ev.index] != Role::kDown &&
            back_at_[ev.index] == t) {
          // The node's failed GPUs are back.
          AccrueCost();
          ChangeLostGpus(ev.index, [&] { lost_gpus_.erase(ev.index); });
          back_at_[ev.index] = kInf;
          HETSIM_RETURN_IF_ERROR(NodesBack(t));
          break;
        }
        if (role_[ev.index] != Role::kDown || back_at_[ev.index] != t) break;
        ChangeLostGpus(ev.index, [&] { lost_gpus_.erase(ev.index); });
        back_at_[ev.index] = kInf;
        SetRole(ev.index, Role::kFree);  // back to the pool (a spare for hot-spares)
        HETSIM_RETURN_IF_ERROR(NodesBack(t));
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
      case InternalEvent::kTrace:
        HETSIM_RETURN_IF_ERROR(HandleTraceEvent(t, trace.events(static_cast<int>(ev.index))));
        break;
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
  FillReport(mtbf, events);
  return std::move(report_);
}

void Engine::FillReport(double mtbf, uint32_t events) {
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
  if (in_.trace.starts_empty() && !in_.spec.has_usd_per_gpu_hour()) {
    price *= in_.spec.has_spot_price_fraction() ? in_.spec.spot_price_fraction() : kDefaultSpotFraction;
  }
  r.set_usd_per_gpu_hour(price);
  r.set_cost_usd(r.gpu_hours() * price);
}

}  // namespace hetsim::sim::replay_internal
