// The iteration engine (sim/engine.h): RunEngine starts one actor per played device (and one per DP
// stream), runs the simulation and gathers the devices' traces; the event loop plays each operation of a
// device's program, keeps its clock (compute deferred until others can observe it) and splits its time into
// compute, communication and waiting. Transfers and collectives: engine_collectives.cc; folded runs:
// engine_fold.cc.
#include "sim/engine.h"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "models/engine_rules.h"
#include "models/op_prices.h"
#include "models/topology.h"
#include "sim/engine_internal.h"

namespace hetsim::sim {
namespace engine {

char g_payload = 0;

void Runner::Run() {
  const DeviceProgram& prog = sh_->programs->programs[slot_];
  const auto& ops = dp_stream_ ? prog.dp_stream : prog.ops;
  if (pooled()) sh_->cores->acquire();
  for (const Op& op : ops) {
    Execute(op);
    sh_->Played();
  }
  Flush();
  if (pooled()) sh_->cores->release();
  StopStagers();
  WaitAllSends();
  if (dp_stream_) {
    sh_->done[slot_]->release();
  } else {
    trace_.end_s = s4u::Engine::get_clock();
  }
  for (auto& [channel, rs] : rings_) {
    for (auto& f : rs.flows) f.first->wait();  // (sends never received: not in a balanced ring)
  }
  // The folded devices' copies load links but end nobody's iteration.
  for (auto& c : shadows_) c->wait();
  shadows_.clear();
}

void Runner::Execute(const Op& op) {
  // With a pool of cores (the CPU twin), a device gives its core up while it waits and queues for one after.
  const bool waits = op.kind == OpKind::kRecv || op.kind == OpKind::kCollective || op.kind == OpKind::kWaitSends ||
                     op.kind == OpKind::kJoin || op.kind == OpKind::kTpAnalytic || op.kind == OpKind::kAwait;
  if (op.kind != OpKind::kCompute && (op.kind != OpKind::kTpAnalytic || pooled())) Flush();
  if (waits && pooled()) sh_->cores->release();
  const double t0 = Now();
  switch (op.kind) {
    case OpKind::kCompute: {
      Defer(op.seconds);
      trace_.compute_s += op.seconds;
      if (op.category != Category::kOptimizer) {
        trace_.fwd_bwd_s += op.seconds;
        trace_.pipeline_end_s = t0 + op.seconds;
        trace_.comm_in_phase_s = trace_.tp_s + trace_.pp_s + trace_.dp_s + trace_.zero_s + trace_.cp_s +
                                 trace_.ep_s + collective_wait_s_;
      }
      Record(t0, op.category, op.micro_batch);
      break;
    }
    case OpKind::kComputeAsync:
      // The GPU host runs nothing else, so an execution of seconds × its speed takes `seconds`.
      async_compute_ = s4u::this_actor::exec_async(op.seconds * s4u::this_actor::get_host()->get_speed());
      async_end_s_ = t0 + op.seconds;
      async_start_s_ = t0;
      async_s_ = op.seconds;
      async_sm_share_ = op.sm_share;
      trace_.compute_s += op.seconds;
      trace_.fwd_bwd_s += op.seconds;
      trace_.pipeline_end_s = async_end_s_;
      Record(t0, op.category, op.micro_batch, async_end_s_);
      break;
    case OpKind::kComputeJoin: {
      if (async_compute_) async_compute_->wait();
      async_compute_ = nullptr;
      // The hidden collectives ran from the compute's start until now (they block in turn): if their kernels
      // held SMs, the compute beside them ran slower (models::OverlappedSeconds).
      const double slower = models::SmContentionSeconds(async_s_, t0 - async_start_s_, async_sm_share_);
      async_sm_share_ = 0;
      if (slower > 0) {
        const double from = Now();
        Defer(slower);
        trace_.compute_s += slower;
        trace_.fwd_bwd_s += slower;
        trace_.pipeline_end_s = from + slower;
        Record(from, op.category, op.micro_batch, from + slower);
      }
      trace_.comm_in_phase_s = trace_.tp_s + trace_.pp_s + trace_.dp_s + trace_.zero_s + trace_.cp_s + trace_.ep_s +
                               collective_wait_s_;
      break;
    }
    case OpKind::kSend:
      Send(op, t0);
      break;
    case OpKind::kPostRecv:
      PostRecv(op);
      break;
    case OpKind::kRecv:
      Recv(op, t0);
      break;
    case OpKind::kCollective: {
      // Waiting for the last member to arrive is idle time; communication starts once all are there.
      const std::pair<uint64_t, uint32_t> inst{op.group, counters().collectives[op.group]++};
      auto& slot = sh_->board.arrived[inst];
      slot.first = std::max(slot.first, t0);
      if (op.seconds > 0) s4u::this_actor::sleep_for(op.seconds);
      RunCollective(op);
      const double now = s4u::Engine::get_clock();
      auto it = sh_->board.arrived.find(inst);
      const double arrival = std::clamp(it->second.first, t0, now);
      if (++it->second.second == sh_->group_played[op.group]) sh_->board.arrived.erase(it);
      // Time under a running overlapped compute is neither communication nor waiting.
      const double busy_until = std::clamp(HiddenUntil(), t0, now);
      const double ready = std::max(arrival, busy_until);
      AddComm(op.category, now - ready);
      collective_wait_s_ += arrival > busy_until ? arrival - busy_until : 0;
      if (record_) {
        if (arrival > busy_until) trace_.slices.push_back({busy_until, arrival, Category::kIdle, op.micro_batch});
        if (now > ready) trace_.slices.push_back({ready, now, op.category, op.micro_batch});
      }
      break;
    }
    case OpKind::kTpAnalytic: {
      const auto& g = sh_->programs->groups[op.group];
      const double n = static_cast<double>(g.size());
      const double steps = 2 * (n - 1);
      double t = op.seconds;
      if (op.algorithm == Algorithm::kNvls) {
        auto [bw, lat] = RouteOf(g[(op.rank + 1) % g.size()]);
        t += op.bytes / (models::kNvlsEfficiency * bw) + 2 * lat;
      } else {
        // Every member's ring step at once: the step lasts as long as its most loaded link (a hop between
        // nodes striped over the members' NICs as the played rings do), the same for every member.
        const auto [s_per_byte, lat] = RingStepCost(op.group);
        t += steps * ((op.bytes / n) * s_per_byte + lat);
      }
      Defer(t);
      const double exposed_from = std::clamp(HiddenUntil(), t0, t0 + t);
      AddComm(op.category, t0 + t - exposed_from);
      Record(exposed_from, op.category, op.micro_batch);
      break;
    }
    // The main stream signals the DP stream that gradients are ready; the DP stream signals the main stream
    // that a group's parameters are gathered (comm.param_gather_overlap), whose wait is exposed ZeRO time.
    case OpKind::kSignal:
      (dp_stream_ ? sh_->gathered : sh_->ready)[slot_]->release();
      break;
    case OpKind::kAwait:
      if (dp_stream_) {
        sh_->ready[slot_]->acquire();
      } else {
        sh_->gathered[slot_]->acquire();
        trace_.zero_s += s4u::Engine::get_clock() - t0;
        Record(t0, Category::kZero, 0);
      }
      break;
    case OpKind::kJoin: {
      WaitAllSends();
      sh_->done[slot_]->acquire();
      const double waited = s4u::Engine::get_clock() - t0;
      trace_.dp_s += waited;  // the exposed part of the overlapped gradient sync
      Record(t0, Category::kDp, 0);
      break;
    }
    case OpKind::kWaitSends:
      WaitAllSends();
      break;
    case OpKind::kHostCopy: {
      // CPU offload: over the platform's route between the GPU and its node's host memory (the GPU's
      // PCIe link, which its NIC traffic also crosses, and the node's host memory link).
      s4u::Host* gpu = HostOf(self_);
      s4u::Host* cpu = CpuOf(self_);
      s4u::Comm::sendto(op.to_host ? gpu : cpu, op.to_host ? cpu : gpu, Bytes(op.bytes));
      // Activation offload copies run beside their pass's compute (training.activation_offload_layers): what
      // outlasts the compute is waiting, the report's idle time, not communication.
      if (op.category != Category::kForward && op.category != Category::kBackward) {
        AddComm(op.category, Now() - t0);
        Record(t0, op.category, op.micro_batch);
      }
      break;
    }
  }
  if (waits && pooled()) {
    Flush();
    sh_->cores->acquire();
  }
  Reap();
}

// A point-to-point send posted at t0 (asynchronous: Reap and WaitAllSends wait for it).
void Runner::Send(const Op& op, double t0) {
  if (RingMessage(op.peer)) {
    RingStream& rs = Ring(op.channel);
    rs.unsent.emplace_back(t0, op.bytes);
    ++rs.sent;
    const uint64_t key = MailboxKey(self_, rs.peer, op.channel);
    pending_.push_back({nullptr, key, sent_[key]++});
    RingStart(rs, op.channel);
    return;
  }
  const uint64_t key = MailboxKey(self_, op.peer, op.channel);
  sh_->board.posted[key].push_back(t0);
  if (Staged(op.peer)) {
    StagedSendAsync(op.peer, op.bytes, op.channel);
  } else {
    pending_.push_back({Box(self_, op.peer, op.channel)->put_async(&g_payload, Bytes(op.bytes)), key, sent_[key]++});
    if (folded()) {
      // The transfer starts now if its receiver waits already: so do the folded copies.
      auto w = sh_->board.waiting_recv.find(key);
      if (w != sh_->board.waiting_recv.end() && w->second > 0) {
        --w->second;
        StartCopies(key, op.bytes);
      }
    }
  }
}

// A receive posted ahead of its kRecv (ring attention, interleaved 1F1B's pipeline inputs).
void Runner::PostRecv(const Op& op) {
  if (RingMessage(op.peer)) {
    RingStream& rs = Ring(op.channel);
    ++rs.posted;
    RingStart(rs, op.channel);
    return;
  }
  // SimGrid starts a transfer once both sides are posted: posting the receive early lets a ring
  // attention or pipeline transfer run during the compute that follows. A CPU-staged transfer is
  // received where it is needed (its host-side receive is the stager's, sim/engine_collectives.cc).
  if (Staged(op.peer)) return;
  const uint64_t key = MailboxKey(op.peer, self_, op.channel);
  auto& early = early_recvs_[key];
  if (folded()) {
    // This receive takes the message after those the earlier early receives took: if its sender
    // posted it already the transfer (and its folded copies) starts now, else when it is posted.
    auto p = sh_->board.posted.find(key);
    if (p != sh_->board.posted.end() && p->second.size() > early.size()) {
      StartCopies(key, op.bytes);
    } else {
      ++sh_->board.waiting_recv[key];
    }
  }
  early.push_back(Box(op.peer, self_, op.channel)->get_async(&early_data_));
}

// A receive that blocks until its message is in: waiting for the sender is idle, the transfer is
// communication.
void Runner::Recv(const Op& op, double t0) {
  if (RingMessage(op.peer)) {
    const double posted = RingReceive(op.channel);
    const double now = s4u::Engine::get_clock();
    const double start = std::clamp(std::max(t0, posted), t0, now);
    AddComm(op.category, now - start);
    if (record_ && now > start) trace_.slices.push_back({start, now, op.category, op.micro_batch});
    return;
  }
  const uint64_t key = MailboxKey(op.peer, self_, op.channel);
  auto early = early_recvs_.find(key);
  if (early != early_recvs_.end() && !early->second.empty()) {
    early->second.front()->wait();
    early->second.pop_front();
  } else if (Staged(op.peer)) {
    StagedRecv(op.peer, op.bytes, op.channel);
  } else {
    if (folded()) {
      // The transfer starts when both sides are there: now if the message is posted (then the
      // folded copies start with it), else when the sender posts it.
      auto p = sh_->board.posted.find(key);
      if (p != sh_->board.posted.end() && !p->second.empty()) {
        StartCopies(key, op.bytes);
      } else {
        ++sh_->board.waiting_recv[key];
      }
    }
    void* data = nullptr;
    Box(op.peer, self_, op.channel)->get_async(&data)->wait();
  }
  if (!Staged(op.peer)) ++sh_->board.received[key];
  const double now = s4u::Engine::get_clock();
  // Waiting for the sender is bubble (idle); the transfer starts once both sides are there.
  auto it = sh_->board.posted.find(key);
  const bool known = it != sh_->board.posted.end() && !it->second.empty();
  const double start = std::clamp(known ? std::max(t0, it->second.front()) : t0, t0, now);
  if (known) it->second.pop_front();
  AddComm(op.category, now - start);
  if (record_ && now > start) trace_.slices.push_back({start, now, op.category, op.micro_batch});
}

void Runner::Record(double start, Category cat, uint16_t mb, double end) {
  if (!record_) return;
  if (end < 0) end = Now();
  if (end > start) trace_.slices.push_back({start, end, cat, mb});
}

void Runner::AddComm(Category cat, double seconds) {
  switch (cat) {
    case Category::kTp: trace_.tp_s += seconds; break;
    case Category::kPp: trace_.pp_s += seconds; break;
    case Category::kZero: trace_.zero_s += seconds; break;
    case Category::kCp: trace_.cp_s += seconds; break;
    case Category::kEp: trace_.ep_s += seconds; break;
    default: trace_.dp_s += seconds; break;
  }
}

void Runner::Reap() {
  // Finish arrived sends with wait() so they leave the actor's activity list, where each completion of
  // any of the actor's transfers scans them. Not with test(): in SimGrid 3.32 a successful test() marks
  // the s4u Comm finished, so the wait() after it returns at once and the kernel activity stays in the
  // list for good (thousands per actor on long pipelines, most of the run's time). A pipeline send has
  // arrived when its receiver has taken as many messages from the mailbox (Board::received); past
  // models::kMaxPendingSends posted sends the oldest is waited for, arrived or not.
  while (!pending_.empty() && (Arrived(pending_.front()) || pending_.size() > models::kMaxPendingSends)) {
    // (A folded ring message whose transfer has not started waits for its own receive: the unfolded
    // sender would wait for a receiver that waits as it does.)
    if (!pending_.front().comm) break;
    pending_.front().comm->wait();
    pending_.pop_front();
  }
}

bool Runner::Arrived(const Pending& p) const {
  if (p.key == kUntracked) return false;
  auto it = sh_->board.received.find(p.key);
  return it != sh_->board.received.end() && it->second > p.seq;
}

void Runner::Flush() {
  if (deferred_s_ <= 0) return;
  const double s = deferred_s_;
  deferred_s_ = 0;
  s4u::this_actor::sleep_for(s);
}

}  // namespace engine

uint64_t CountOperations(const Programs& programs) {
  uint64_t n = 0;
  for (const auto& p : programs.programs) n += p.ops.size() + p.dp_stream.size();
  return n;
}

EngineResult RunEngine(const Programs& programs, const Platform& platform, bool record_slices,
                       const ProgressHook& progress, const std::vector<uint32_t>& timeline_devices) {
  EngineResult result;
  result.devices.resize(programs.devices.size());
  engine::Shared shared{&programs, &platform, record_slices, &result, {}, {}, {}, {}, {}, {}, {}, {}, {},
                &progress, 0, CountOperations(programs), std::chrono::steady_clock::now()};
  shared.counters.resize(programs.devices.size());
  const bool folded = programs.folded;
  auto played = [&](size_t slot) { return !folded || programs.fold.rep[slot] == slot; };
  // The slots whose slices are kept; a played slot records when it or a device folded onto it is kept.
  std::vector<char> keep;
  if (record_slices && !timeline_devices.empty()) {
    keep.assign(programs.devices.size(), 0);
    for (uint32_t d : timeline_devices) {
      if (d < programs.device_slot.size() && programs.device_slot[d] != UINT32_MAX) keep[programs.device_slot[d]] = 1;
    }
    shared.record_slot = keep;
    if (folded) {
      for (size_t slot = 0; slot < keep.size(); ++slot) {
        if (keep[slot]) shared.record_slot[programs.fold.rep[slot]] = 1;
      }
    }
  }
  shared.group_played.resize(programs.groups.size());
  for (size_t g = 0; g < programs.groups.size(); ++g) {
    uint32_t k = 0;
    for (uint32_t d : programs.groups[g]) k += played(programs.device_slot[d]) ? 1 : 0;
    shared.group_played[g] = k;
  }
  if (folded) result.scaled_links = engine::ScaleTwinLinks(&shared);
  if (platform.shared_cores > 0) shared.cores = s4u::Semaphore::create(platform.shared_cores);
  for (size_t slot = 0; slot < programs.devices.size(); ++slot) {
    shared.ready.push_back(s4u::Semaphore::create(0));
    shared.gathered.push_back(s4u::Semaphore::create(0));
    shared.done.push_back(s4u::Semaphore::create(0));
  }
  for (uint32_t slot = 0; slot < programs.devices.size(); ++slot) {
    if (!played(slot)) continue;
    s4u::Host* host = platform.gpus[programs.devices[slot]];
    s4u::Actor::create("d" + std::to_string(programs.devices[slot]), host,
                       [&shared, slot] { engine::Runner(&shared, slot, false).Run(); });
    if (!programs.programs[slot].dp_stream.empty()) {
      s4u::Actor::create("dp" + std::to_string(programs.devices[slot]), host,
                         [&shared, slot] { engine::Runner(&shared, slot, true).Run(); });
    }
  }
  s4u::Engine::get_instance()->run();
  if (folded) {
    for (size_t slot = 0; slot < programs.devices.size(); ++slot) {
      if (played(slot)) continue;
      DeviceTrace& rep = result.devices[programs.fold.rep[slot]];
      if (keep.empty() || keep[slot]) {
        result.devices[slot] = rep;
      } else {
        // Everything but the slices (thousands of folded devices would otherwise copy them all).
        std::vector<Slice> slices = std::move(rep.slices);
        result.devices[slot] = rep;
        rep.slices = std::move(slices);
      }
    }
  }
  if (!keep.empty()) {
    for (size_t slot = 0; slot < keep.size(); ++slot) {
      if (!keep[slot]) std::vector<Slice>().swap(result.devices[slot].slices);
    }
  }
  for (const auto& d : result.devices) result.iteration_s = std::max(result.iteration_s, d.end_s);
  return result;
}

}  // namespace hetsim::sim
