// The iteration engine's shared pieces (internal to sim/engine*.cc): what the actors of one run share
// (Shared: the programs, the platform, the arrival board, the folded run's flows), the ring flows of a
// collective step, and the Runner, the actor that plays one device's program (or its DP stream). The
// Runner's methods live by concern:
//   engine.cc             — RunEngine and the event loop: each operation played, timed and recorded;
//   engine_collectives.cc — transfers and collectives as SimGrid activities (rings, trees, NVLS,
//                           all-to-all, rail striping, CPU staging) and the analytic TP collective's price;
//   engine_fold.cc        — folded runs: the copies a representative device plays for its folded twins,
//                           and the links scaled instead (docs/simulator.md, "Folding").
#pragma once

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/engine.h"
#include "sim/platform.h"
#include "sim/program.h"

namespace hetsim::sim {

namespace s4u = simgrid::s4u;

namespace engine {

// Mailboxes need a payload pointer; the simulated size is what matters.
extern char g_payload;

struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint32_t>& k) const {
    return std::hash<uint64_t>()(k.first * 0x9E3779B97F4A7C15ull ^ k.second);
  }
};

// Arrival times, so that waiting for a late peer counts as idle and only the transfer itself as
// communication. Actors run one at a time, so plain maps suffice.
struct Board {
  // mailbox key -> when the sender posted each message not yet received, oldest first (a mailbox's
  // messages are received in the order they were sent)
  std::unordered_map<uint64_t, std::deque<double>> posted;
  // mailbox key -> messages received so far by the pipeline receives (kRecv): the sender's n-th message
  // on the key has arrived once this exceeds n.
  std::unordered_map<uint64_t, uint64_t> received;
  // (group, instance number) -> latest arrival among members, members finished
  std::unordered_map<std::pair<uint64_t, uint32_t>, std::pair<double, uint32_t>, PairHash> arrived;
  // Folded runs: mailbox key -> receives blocked before their message was posted (the sender starts the
  // folded copies' flows when it posts; otherwise the receiver does when it arrives).
  std::unordered_map<uint64_t, uint32_t> waiting_recv;
};

// What a folded run plays for the devices it does not play (Programs::fold): per group, the groups whose
// flows it plays alongside its own; per send stream, the copies whose routes share a link with it. Both
// are found once, from the platform's routes.
struct FoldFlows {
  std::unordered_map<uint32_t, std::vector<uint32_t>> groups;
  std::unordered_map<uint32_t, std::vector<uint32_t>> all_to_all_groups;
  std::unordered_map<uint64_t, std::vector<std::pair<uint32_t, uint32_t>>> sends;
  // Per device: who sends over its fabric port (up) and receives over it (down) inside its node, in the
  // whole (unfolded) run: kNoOwner, one collective group, or kManyOwners (several groups, or a pipeline
  // stream). Filled on the first folded collective.
  static constexpr uint32_t kNoOwner = UINT32_MAX, kManyOwners = UINT32_MAX - 1;
  std::vector<uint32_t> port_up, port_down;
  // Per group: whether one flow stands for its whole ring (see Runner::LoneFlow).
  std::unordered_map<uint32_t, bool> lone;
  // Per group: the longest latency of a member's route to its ring successor (Runner::SlowestHopLatency).
  std::unordered_map<uint32_t, double> slowest_hop;
};

// Per-device message and collective counters (shared by the device's main and DP-stream actors).
struct Counters {
  std::unordered_map<uint32_t, uint32_t> collectives;
};

struct Shared {
  const Programs* programs;
  const Platform* platform;
  bool record;
  EngineResult* result;
  // Per slot, with record: whether that actor keeps its slices (empty: every actor does).
  std::vector<char> record_slot;
  std::vector<s4u::SemaphorePtr> ready;  // per slot: DP groups handed to the DP stream
  // per slot: parameters the DP stream has gathered for the main stream (comm.param_gather_overlap)
  std::vector<s4u::SemaphorePtr> gathered;
  std::vector<s4u::SemaphorePtr> done;   // per slot: the DP stream finished
  // SimOptions::shared_cores: the pool of cores (null without one). A main actor holds a core from its start,
  // gives it up while it waits (receives, collectives, its sends, the DP stream) and queues for one after;
  // SimGrid hands a released core to the longest waiter, as the executor's ticket queue does.
  s4u::SemaphorePtr cores;
  std::vector<Counters> counters;        // per slot
  Board board;
  std::vector<uint32_t> group_played;  // per group: members played by an actor (all unless folded)
  FoldFlows fold_flows;
  const ProgressHook* progress = nullptr;
  uint64_t played = 0;  // operations played so far, all actors
  uint64_t total = 0;
  std::chrono::steady_clock::time_point last_report;

  // One operation played; every 4,096 a look at the wall clock, and a report when one is due.
  void Played() {
    if (++played % 4096 != 0 || progress == nullptr || !progress->report) return;
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_report).count() < progress->interval_s) return;
    last_report = now;
    progress->report(EngineProgress{played, total, s4u::Engine::get_clock()});
  }
};

// Mailbox of the ordered message stream from `src` to `dst` on `channel` (p2p channels 0..7,
// collective group g on channel 8 + g).
inline uint64_t MailboxKey(uint32_t src, uint32_t dst, uint32_t channel) { return StreamKey(src, dst, channel); }

// The flows of one ring step of every member of `g` (the unfolded engine's Exchange with rail striping,
// for all members at once): (from, to, fraction of the step's bytes). `stripe` false: one flow per member
// to its successor (NVLS).
struct Flow {
  uint32_t from, to;
  double fraction;
};
std::vector<Flow> RingFlows(const std::vector<uint32_t>& g, const std::vector<uint32_t>& node, bool stripe);
// The flows of a direct all-to-all over `g` (RunCollective's kAllToAll, for all members at once): every
// member to every other, 1/n of the buffer each.
std::vector<Flow> AllToAllFlows(const std::vector<uint32_t>& g);

// The links of the route from device a to device b (appended to `links`).
void LinksOf(const Shared* sh, uint32_t a, uint32_t b, std::vector<s4u::Link*>* links);

// The folded copies of send stream `key` that a folded run plays with it: those whose routes share a link
// with the stream's own (the others run on links of their own). Empty for a stream whose shared links
// were scaled instead (ScaleTwinLinks).
const std::vector<std::pair<uint32_t, uint32_t>>& FoldCopies(Shared* sh, uint64_t key);

// The groups a folded collective over `group` plays: its own and every folded group with a flow on a
// link its flows use (ring flows, striped or not; or, with `all_to_all`, AllToAllFlows).
const std::vector<uint32_t>& FoldPlayedGroups(Shared* sh, uint32_t group, bool stripe, bool all_to_all = false);

// Folded runs: where a pipeline stream's copies meet its own transfer only on links that carry nothing but
// such streams, each with the same number n of copies-plus-itself on the link, the link runs at 1/n of its
// bandwidth and the copies are not played. In a symmetric plan the n twins on such a link start together
// and cross links of equal bandwidth and latency elsewhere, so max-min sharing gives each of them 1/n of
// what the n·k twins of k streams get together: the played transfer ends exactly when it would among its
// copies. (The copies are what the run spends its time on: Llama 3's stage-major layout sends every
// pipeline transfer of 1,024 replicas over the same oversubscribed pod uplinks.) Links that a collective's
// flows cross, or that carry streams with different numbers of copies, keep the copies.
uint32_t ScaleTwinLinks(Shared* sh);

class Runner {
 public:
  // A posted send not yet waited for; pipeline sends carry their mailbox key and number on it (others
  // kUntracked), so that Reap knows which have arrived without asking SimGrid (see Reap). A folded ring
  // message (RingStream) is pending from its send as the unfolded put is, with no transfer until its
  // receive is posted too.
  static constexpr uint64_t kUntracked = UINT64_MAX;
  struct Pending {
    s4u::CommPtr comm;
    uint64_t key = kUntracked;
    uint64_t seq = 0;
  };
  Runner(Shared* shared, uint32_t slot, bool dp_stream)
      : sh_(shared), slot_(slot), self_(shared->programs->devices[slot]), dp_stream_(dp_stream),
        record_(shared->record && (shared->record_slot.empty() || shared->record_slot[slot] != 0)),
        trace_(shared->result->devices[slot]) {}

  void Run();

 private:
  // ---- the event loop (engine.cc) ----

  void Execute(const Op& op);
  void Send(const Op& op, double t0);
  void PostRecv(const Op& op);
  void Recv(const Op& op, double t0);

  Counters& counters() { return sh_->counters[slot_]; }

  void Record(double start, Category cat, uint16_t mb, double end = -1);

  // Until when the compute started by kComputeAsync keeps the device busy (0 when none is running):
  // communication before then is hidden behind it (comm.tp_overlap).
  double HiddenUntil() const { return async_compute_ ? async_end_s_ : 0; }

  void AddComm(Category cat, double seconds);

  void Reap();
  bool Arrived(const Pending& p) const;

  // The device's clock: the simulated clock plus the busy time not yet slept (see Defer).
  double Now() const { return s4u::Engine::get_clock() + deferred_s_; }

  // Compute and analytic TP time only keep this device busy; nobody else sees them until its next
  // transfer, collective or signal. Consecutive ones are slept as one (SimGrid's activities, not the
  // simulated times, are what a large run spends its time on); Flush sleeps them before anything other
  // devices can observe.
  void Defer(double seconds) { deferred_s_ += seconds; }
  void Flush();
  // A compute of `seconds` (alone on one core) started on the platform's shared cores; and one run there to
  // its end, returning how long it took.
  // Whether this actor's compute queues for the pool of cores (SimOptions::shared_cores): the main actors.
  bool pooled() const { return sh_->cores != nullptr && !dp_stream_; }

  void WaitAllSends() {
    for (auto& p : pending_) {
      if (p.comm) p.comm->wait();  // (a ring message not started yet: its receive is not posted)
    }
    pending_.clear();
  }

  // ---- transfers and collectives (engine_collectives.cc) ----

  s4u::Mailbox* Box(uint32_t src, uint32_t dst, uint32_t channel) {
    const uint64_t key = MailboxKey(src, dst, channel);
    auto it = boxes_.find(key);
    if (it != boxes_.end()) return it->second;
    s4u::Mailbox* m = s4u::Mailbox::by_name(std::to_string(key));
    boxes_.emplace(key, m);
    return m;
  }

  s4u::Host* HostOf(uint32_t device) const { return sh_->platform->gpus[device]; }

  // Whether a transfer between this device and `peer` goes through host memory (HetHub §3.1).
  bool Staged(uint32_t peer) const {
    return sh_->programs->StagedBetween(sh_->platform->gpu_node[self_], sh_->platform->gpu_node[peer]);
  }
  s4u::Host* CpuOf(uint32_t device) const { return sh_->platform->cpus[sh_->platform->gpu_node[device]]; }

  // GPU -> host memory -> network -> peer's host memory, store-and-forward; then a zero-byte message tells
  // the peer the data is in its host memory. Blocks this device (a ring step cannot go on before it).
  void StagedSend(uint32_t peer, double bytes, uint32_t channel);
  // A pipeline send staged the same way without holding up the device's stream: the device-to-host copy
  // and the host's network send run on the host (a copy engine and a communicator thread, as HetHub's CPU
  // communicator does), so the GPU goes on computing, as it does after posting a GPU-direct send. The
  // messages of one channel stay in order because each channel's sends are handed to one host actor in
  // sequence through a dedicated mailbox.
  void StagedSendAsync(uint32_t peer, double bytes, uint32_t channel);
  void StopStagers();
  // Waits for the peer's notice, then copies host memory -> GPU.
  void StagedRecv(uint32_t peer, double bytes, uint32_t channel);

  static uint64_t Bytes(double b) { return static_cast<uint64_t>(std::llround(std::max(0.0, b))); }

  // One step of group g's ring with every member sending at once (rail-striped between nodes, as
  // RunCollective plays it): the seconds per byte of a member's step on the most loaded link, and the
  // longest route latency. Computed once per group.
  std::pair<double, double> RingStepCost(uint32_t group);

  // Folded ring and NVLS collectives: the longest latency of a member's route to its successor. Each member
  // of the unfolded ring waits its own hop's latency after its transfers (RunCollective); the folded one
  // stands for the last member to finish, so it waits the longest (a ring with hops inside a node and
  // between nodes: a DP × CP group).
  double SlowestHopLatency(uint32_t group);

  // Bottleneck bandwidth (bytes/s) and latency (s) of the route to `peer`.
  std::pair<double, double> RouteOf(uint32_t peer);

  // One exchange step: send `bytes` to `to` and receive from `from` on the group's channel. Returns
  // when the incoming transfer started. `group` (rings only) stripes a hop between nodes over rails: NCCL
  // runs a collective as several channels, each a ring that crosses from one node to the next at a
  // different member GPU, through that GPU's NIC (rail-optimised networks: NIC i of every node on rail i).
  // With k = min(members on this node, members on the next), the hop is k flows of bytes/k: this device's
  // own to `to` (which the receiver matches), and k − 1 flows between the other members of the two nodes,
  // which this device waits for before its next step.
  double Exchange(uint32_t to, uint32_t from, double bytes, uint32_t channel,
                  const std::vector<uint32_t>* group = nullptr);

  // Starts the other rails' share of a hop from this device's node to `to`'s (see Exchange) and returns the
  // bytes left for this device's own flow.
  double StripeOverRails(uint32_t to, double bytes, const std::vector<uint32_t>& group,
                         std::vector<s4u::CommPtr>* stripes);

  // Runs this member's part of a collective; returns when its communication really started (for rings
  // the first incoming transfer; for trees and broadcasts the call itself).
  double RunCollective(const Op& op);

  // ---- folded runs (engine_fold.cc) ----

  bool folded() const { return sh_->programs->folded; }

  const std::vector<std::pair<uint32_t, uint32_t>>& CopiesOf(uint64_t key) { return FoldCopies(sh_, key); }
  const std::vector<uint32_t>& PlayedGroups(uint32_t group, bool stripe, bool all_to_all = false) {
    return FoldPlayedGroups(sh_, group, stripe, all_to_all);
  }

  // Folded runs: starts the folded devices' copies of the transfer on stream `key` that share a link with
  // it (they leave the others out: those run on links of their own).
  void StartCopies(uint64_t key, double bytes);

  static constexpr size_t kReapFrom = 8;

  // Fills FoldFlows::port_up/port_down: every pair of GPUs of one node that some collective ring step or
  // pipeline stream of the unfolded run connects, with its owner.
  void CountPortOwners();

  // Whether one flow of the ring over `group` finishes when all of them do: every member sits in one node
  // whose GPU-to-GPU routes cross only the GPUs' own fabric ports, and nothing else in the whole run
  // (another group's ring, a pipeline stream) sends or receives over those ports. Then the ring's flows run
  // on disjoint links of one bandwidth and latency and meet no other flow, so each ends at the same time
  // and playing one of them gives the collective's end exactly. (Each detached host-to-host transfer costs
  // SimGrid 3.32 a scan of all of them in flight when it ends: with thousands of TP rings this is the
  // run's time.)
  bool LoneFlow(uint32_t group);

  // A folded ring (or NVLS) collective: every member of the played groups sends its step bytes to its
  // successor at once (all members arrive together in a symmetric plan), and the collective ends when the
  // last flow has arrived, as the slowest member of the unfolded ring does.
  double RunFoldedCollective(const Op& op, double step_bytes, bool stripe);
  // A folded all-to-all: every member of the played groups sends 1/n of its buffer to every other member
  // at once; the collective ends when the last flow has arrived.
  void RunFoldedAllToAll(const Op& op);
  // The flows RunFoldedAllToAll plays for the representative at `rank` of `group` (Flow::fraction: shares of
  // the buffer's S/n), worked out once per group and rank.
  const std::vector<Flow>& FoldedAllToAllFlows(uint32_t group, uint32_t rank);

  // Folded runs: a representative's messages to a device folded onto it (a CP ring inside its stage;
  // FoldMap::ring_peer). In a symmetric ring every member posts its k-th send and receive when the
  // representative does, so the k-th transfer starts when the representative has posted both (its send to
  // its ring peer, its receive from its predecessor) and the block it receives arrives when the one it sends
  // does: the representative plays its send (with the folded copies that share a link with it) and its
  // receive waits for that transfer.
  struct RingStream {
    uint32_t peer = 0;
    std::deque<std::pair<double, double>> unsent;  // (posted at, bytes) of sends not started yet
    uint64_t sent = 0, posted = 0, started = 0, received = 0;  // sends and receives posted, transfers started, received
    std::deque<std::pair<s4u::CommPtr, double>> flows;  // started, not received yet: (transfer, send posted at)
  };
  bool RingMessage(uint32_t peer) const {
    return folded() && peer != self_ && sh_->programs->fold.rep[sh_->programs->device_slot[peer]] == slot_;
  }
  RingStream& Ring(uint32_t channel);
  void RingStart(RingStream& rs, uint32_t channel);
  // kRecv of a ring message: waits for the transfer and returns when its send was posted.
  double RingReceive(uint32_t channel);

  Shared* sh_;
  uint32_t slot_;
  uint32_t self_;
  bool dp_stream_;
  bool record_;  // this actor keeps its slices (Shared::record and record_slot)
  DeviceTrace& trace_;
  double collective_wait_s_ = 0;  // this actor's waiting for late members inside collectives so far
  std::unordered_map<uint64_t, s4u::Mailbox*> boxes_;
  std::map<uint64_t, s4u::Mailbox*> stagers_;  // CPU-staged pipeline sends: the queue of each (peer, channel)
  std::unordered_map<uint32_t, std::pair<double, double>> routes_;
  std::unordered_map<uint32_t, std::pair<double, double>> ring_steps_;  // by group (RingStepCost)
  // Posted sends not yet waited for (see Pending).
  std::deque<Pending> pending_;
  std::unordered_map<uint64_t, uint64_t> sent_;  // mailbox key -> pipeline sends posted on it
  std::deque<s4u::CommPtr> shadows_;  // folded runs: the folded devices' copies of this actor's transfers
  s4u::ExecPtr async_compute_;
  s4u::ExecPtr spin_;  // kComputeAsync's compute, until kComputeJoin
  double async_end_s_ = 0;
  // kComputeAsync's start, seconds and the SM share of the collectives it hides (Op::sm_share), which the
  // join prices (models::SmContentionSeconds).
  double async_start_s_ = 0, async_s_ = 0;
  float async_sm_share_ = 0;
  double deferred_s_ = 0;  // compute and analytic TP time not yet slept (Defer)
  // Receives posted ahead by kPostRecv, per mailbox, in posting order.
  std::unordered_map<uint64_t, std::deque<s4u::CommPtr>> early_recvs_;
  std::unordered_map<uint32_t, RingStream> rings_;  // folded ring messages, by channel
  std::map<std::pair<uint32_t, uint32_t>, std::vector<Flow>> all_to_all_flows_;  // FoldedAllToAllFlows'
  void* early_data_ = nullptr;
};

}  // namespace engine
}  // namespace hetsim::sim
