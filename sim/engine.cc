#include "sim/engine.h"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <unordered_map>

#include "models/topology.h"

namespace hetsim::sim {
namespace {

namespace s4u = simgrid::s4u;

char g_payload = 0;  // mailboxes need a payload pointer; the simulated size is what matters

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
  std::unordered_map<uint64_t, std::vector<std::pair<uint32_t, uint32_t>>> sends;
  // Per device: who sends over its fabric port (up) and receives over it (down) inside its node, in the
  // whole (unfolded) run: kNoOwner, one collective group, or kManyOwners (several groups, or a pipeline
  // stream). Filled on the first folded collective.
  static constexpr uint32_t kNoOwner = UINT32_MAX, kManyOwners = UINT32_MAX - 1;
  std::vector<uint32_t> port_up, port_down;
  // Per group: whether one flow stands for its whole ring (see Runner::LoneFlow).
  std::unordered_map<uint32_t, bool> lone;
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
  std::vector<s4u::SemaphorePtr> done;   // per slot: the DP stream finished
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
uint64_t MailboxKey(uint32_t src, uint32_t dst, uint32_t channel) { return StreamKey(src, dst, channel); }

// The flows of one ring step of every member of `g` (the unfolded engine's Exchange with rail striping,
// for all members at once): (from, to, fraction of the step's bytes). `stripe` false: one flow per member
// to its successor (NVLS).
struct Flow {
  uint32_t from, to;
  double fraction;
};
std::vector<Flow> RingFlows(const std::vector<uint32_t>& g, const std::vector<uint32_t>& node, bool stripe) {
  std::vector<Flow> flows;
  const size_t n = g.size();
  for (size_t r = 0; r < n; ++r) {
    const uint32_t self = g[r], to = g[(r + 1) % n];
    const uint32_t here = node[self], there = node[to];
    std::vector<uint32_t> mine, theirs;
    if (stripe && here != there) {
      for (uint32_t d : g) {
        if (node[d] == here && d != self) mine.push_back(d);
        if (node[d] == there && d != to) theirs.push_back(d);
      }
    }
    const size_t extra = std::min(mine.size(), theirs.size());
    const double share = 1.0 / static_cast<double>(extra + 1);
    for (size_t i = 0; i < extra; ++i) flows.push_back({mine[i], theirs[i], share});
    flows.push_back({self, to, share});
  }
  return flows;
}

// The links of the route from device a to device b (appended to `links`).
void LinksOf(const Shared* sh, uint32_t a, uint32_t b, std::vector<s4u::Link*>* links) {
  double lat = 0;
  sh->platform->gpus[a]->route_to(sh->platform->gpus[b], *links, &lat);
}

// The folded copies of send stream `key` that a folded run plays with it: those whose routes share a link
// with the stream's own (the others run on links of their own). Empty for a stream whose shared links
// were scaled instead (ScaleTwinLinks).
const std::vector<std::pair<uint32_t, uint32_t>>& FoldCopies(Shared* sh, uint64_t key) {
  auto& cache = sh->fold_flows.sends;
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<std::pair<uint32_t, uint32_t>> sharing;
  auto all = sh->programs->fold.send_copies.find(key);
  if (all != sh->programs->fold.send_copies.end()) {
    // The stream's own route (either end may ask first: the sender or the receiver).
    const uint32_t from = static_cast<uint32_t>(key >> 42);
    const uint32_t to = static_cast<uint32_t>((key >> 20) & ((1u << 22) - 1));
    std::vector<s4u::Link*> mine;
    LinksOf(sh, from, to, &mine);
    std::sort(mine.begin(), mine.end());
    for (const auto& c : all->second) {
      std::vector<s4u::Link*> theirs;
      LinksOf(sh, c.first, c.second, &theirs);
      bool shares = false;
      for (auto* l : theirs) shares |= std::binary_search(mine.begin(), mine.end(), l);
      if (shares) sharing.push_back(c);
    }
  }
  return cache[key] = std::move(sharing);
}

// The groups a folded collective over `group` plays: its own and every folded group with a flow on a
// link its flows use.
const std::vector<uint32_t>& FoldPlayedGroups(Shared* sh, uint32_t group, bool stripe) {
  auto& cache = sh->fold_flows.groups;
  auto it = cache.find(group);
  if (it != cache.end()) return it->second;
  const auto& groups = sh->programs->groups;
  const auto& node = sh->platform->gpu_node;
  std::vector<s4u::Link*> used;
  for (const Flow& f : RingFlows(groups[group], node, stripe)) LinksOf(sh, f.from, f.to, &used);
  std::sort(used.begin(), used.end());
  std::vector<uint32_t> played{group};
  const auto& family = sh->programs->fold.family[group];
  for (uint32_t h : family) {
    if (h == group) continue;
    bool shares = false;
    for (const Flow& f : RingFlows(groups[h], node, stripe)) {
      std::vector<s4u::Link*> links;
      LinksOf(sh, f.from, f.to, &links);
      for (auto* l : links) shares |= std::binary_search(used.begin(), used.end(), l);
      if (shares) break;
    }
    if (shares) played.push_back(h);
  }
  return cache[group] = std::move(played);
}

// Folded runs: where a pipeline stream's copies meet its own transfer only on links that carry nothing but
// such streams, each with the same number n of copies-plus-itself on the link, the link runs at 1/n of its
// bandwidth and the copies are not played. In a symmetric plan the n twins on such a link start together
// and cross links of equal bandwidth and latency elsewhere, so max-min sharing gives each of them 1/n of
// what the n·k twins of k streams get together: the played transfer ends exactly when it would among its
// copies. (The copies are what the run spends its time on: Llama 3's stage-major layout sends every
// pipeline transfer of 1,024 replicas over the same oversubscribed pod uplinks.) Links that a collective's
// flows cross, or that carry streams with different numbers of copies, keep the copies.
uint32_t ScaleTwinLinks(Shared* sh) {
  const Programs& programs = *sh->programs;
  const auto& node = sh->platform->gpu_node;
  // The played send streams.
  std::vector<uint64_t> streams;
  for (size_t slot = 0; slot < programs.devices.size(); ++slot) {
    for (const auto* ops : {&programs.programs[slot].ops, &programs.programs[slot].dp_stream}) {
      for (const Op& o : *ops) {
        if (o.kind == OpKind::kSend) streams.push_back(MailboxKey(programs.devices[slot], o.peer, o.channel));
      }
    }
  }
  std::sort(streams.begin(), streams.end());
  streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
  // Per link: for each stream with a flow on it, whether its own transfer crosses it and how many of its
  // copies do; whether a collective's flow may cross it.
  struct Entry {
    uint32_t stream;
    uint32_t own = 0, copies = 0;
  };
  struct Use {
    std::vector<Entry> streams;
    bool collective = false;
  };
  std::unordered_map<s4u::Link*, Use> use;
  const auto entry = [&](s4u::Link* l, uint32_t k) -> Entry& {
    auto& v = use[l].streams;
    if (v.empty() || v.back().stream != k) v.push_back(Entry{k});
    return v.back();
  };
  std::vector<std::vector<s4u::Link*>> crossed(streams.size());  // every link a flow of the stream crosses
  for (uint32_t k = 0; k < streams.size(); ++k) {
    if (FoldCopies(sh, streams[k]).empty()) continue;
    const uint32_t from = static_cast<uint32_t>(streams[k] >> 42);
    const uint32_t to = static_cast<uint32_t>((streams[k] >> 20) & ((1u << 22) - 1));
    std::vector<s4u::Link*> links;
    LinksOf(sh, from, to, &links);
    std::sort(links.begin(), links.end());
    links.erase(std::unique(links.begin(), links.end()), links.end());
    for (auto* l : links) entry(l, k).own = 1;
    crossed[k] = links;
    for (const auto& [a, b] : FoldCopies(sh, streams[k])) {
      links.clear();
      LinksOf(sh, a, b, &links);
      for (auto* l : links) {
        ++entry(l, k).copies;
        crossed[k].push_back(l);
      }
    }
    std::sort(crossed[k].begin(), crossed[k].end());
    crossed[k].erase(std::unique(crossed[k].begin(), crossed[k].end()), crossed[k].end());
  }
  // The streams without copies count too where they share a link with one that has them.
  for (uint32_t k = 0; k < streams.size(); ++k) {
    if (!crossed[k].empty()) continue;
    const uint32_t from = static_cast<uint32_t>(streams[k] >> 42);
    const uint32_t to = static_cast<uint32_t>((streams[k] >> 20) & ((1u << 22) - 1));
    std::vector<s4u::Link*> links;
    LinksOf(sh, from, to, &links);
    for (auto* l : links) {
      auto it = use.find(l);
      if (it != use.end()) it->second.streams.push_back(Entry{k, 1, 0});
    }
  }
  if (use.empty()) return 0;
  // Every flow the folded collectives play (RunFoldedCollective: rings stripe over rails, NVLS does not).
  std::vector<std::pair<uint32_t, bool>> collectives;
  for (size_t slot = 0; slot < programs.devices.size(); ++slot) {
    for (const auto* ops : {&programs.programs[slot].ops, &programs.programs[slot].dp_stream}) {
      for (const Op& o : *ops) {
        // (The analytic TP time reads its route's bandwidth: its links must keep theirs too.)
        if (o.kind != OpKind::kCollective && o.kind != OpKind::kTpAnalytic) continue;
        if (programs.groups[o.group].size() < 2) continue;
        const bool nvls = o.algorithm == Algorithm::kNvls && o.collective == CollectiveKind::kAllReduce;
        collectives.push_back({o.group, !nvls});
      }
    }
  }
  std::sort(collectives.begin(), collectives.end());
  collectives.erase(std::unique(collectives.begin(), collectives.end()), collectives.end());
  for (const auto& [g, stripe] : collectives) {
    for (uint32_t h : FoldPlayedGroups(sh, g, stripe)) {
      for (const Flow& f : RingFlows(programs.groups[h], node, stripe)) {
        std::vector<s4u::Link*> links;
        LinksOf(sh, f.from, f.to, &links);
        for (auto* l : links) {
          auto it = use.find(l);
          if (it != use.end()) it->second.collective = true;
        }
      }
    }
  }
  // A link scales when only streams cross it, each with its own transfer and the same number of copies.
  std::unordered_map<s4u::Link*, uint32_t> scale;  // link -> n, for the scalable ones
  for (const auto& [l, u] : use) {
    if (u.collective) continue;
    bool same = true;
    for (const Entry& e : u.streams) same = same && e.own == 1 && e.copies == u.streams.front().copies;
    if (same) scale[l] = 1 + u.streams.front().copies;
  }
  // A stream drops its copies when every link where they meet its own transfer scales (the links only its
  // copies cross mirror its own: in a symmetric plan they carry what its own links carry); a stream that
  // keeps its copies keeps those links unscaled, which may stop others: repeat until nothing changes.
  std::vector<uint8_t> drop(streams.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t k = 0; k < streams.size(); ++k) {
      if (crossed[k].empty()) continue;
      std::vector<s4u::Link*> met;  // links with its own transfer and copies
      for (auto* l : crossed[k]) {
        for (const Entry& e : use[l].streams) {
          if (e.stream == k && e.own == 1 && e.copies > 0) met.push_back(l);
        }
      }
      bool ok = true;
      for (auto* l : met) ok = ok && scale.count(l) > 0;
      drop[k] = ok ? 1 : 0;
      if (ok) continue;
      for (auto* l : met) changed |= scale.erase(l) > 0;
    }
  }
  uint32_t scaled = 0;
  for (const auto& [l, n] : scale) {
    if (n < 2) continue;
    l->set_bandwidth(l->get_bandwidth() / n);
    ++scaled;
  }
  for (uint32_t k = 0; k < streams.size(); ++k) {
    if (drop[k] != 0) sh->fold_flows.sends[streams[k]].clear();
  }
  return scaled;
}

class Runner {
 public:
  // A posted send not yet waited for; pipeline sends carry their mailbox key and number on it (others
  // kUntracked), so that Reap knows which have arrived without asking SimGrid (see Reap).
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

  void Run() {
    const DeviceProgram& prog = sh_->programs->programs[slot_];
    const auto& ops = dp_stream_ ? prog.dp_stream : prog.ops;
    for (const Op& op : ops) {
      Execute(op);
      sh_->Played();
    }
    Flush();
    StopStagers();
    WaitAllSends();
    if (dp_stream_) {
      sh_->done[slot_]->release();
    } else {
      trace_.end_s = s4u::Engine::get_clock();
    }
    // The folded devices' copies load links but end nobody's iteration.
    for (auto& c : shadows_) c->wait();
    shadows_.clear();
  }

 private:
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
  void StagedSend(uint32_t peer, double bytes, uint32_t channel) {
    s4u::Comm::sendto(HostOf(self_), CpuOf(self_), Bytes(bytes));
    s4u::Comm::sendto(CpuOf(self_), CpuOf(peer), Bytes(bytes));
    pending_.push_back({Box(self_, peer, channel)->put_async(&g_payload, 0)});
  }
  // A pipeline send staged the same way without holding up the device's stream: the device-to-host copy
  // and the host's network send run on the host (a copy engine and a communicator thread, as HetHub's CPU
  // communicator does), so the GPU goes on computing, as it does after posting a GPU-direct send. The
  // messages of one channel stay in order because each channel's sends are handed to one host actor in
  // sequence through a dedicated mailbox.
  void StagedSendAsync(uint32_t peer, double bytes, uint32_t channel) {
    const uint64_t key = MailboxKey(self_, peer, channel);
    auto it = stagers_.find(key);
    if (it == stagers_.end()) {
      s4u::Mailbox* queue = s4u::Mailbox::by_name("stage:" + std::to_string(key));
      s4u::Host* gpu = HostOf(self_);
      s4u::Host* cpu = CpuOf(self_);
      s4u::Host* peer_cpu = CpuOf(peer);
      s4u::Mailbox* notice = Box(self_, peer, channel);
      // The stager forwards one message per item it gets; a negative size ends it.
      s4u::Actor::create("stage" + std::to_string(self_) + "-" + std::to_string(peer), cpu,
                         [queue, gpu, cpu, peer_cpu, notice] {
                           for (;;) {
                             auto* item = queue->get<double>();
                             const double b = *item;
                             delete item;
                             if (b < 0) return;
                             s4u::Comm::sendto(gpu, cpu, Bytes(b));
                             s4u::Comm::sendto(cpu, peer_cpu, Bytes(b));
                             notice->put(&g_payload, 0);
                           }
                         });
      it = stagers_.emplace(key, queue).first;
    }
    pending_.push_back({it->second->put_async(new double(bytes), 0)});
  }
  void StopStagers() {
    for (auto& [key, queue] : stagers_) queue->put(new double(-1), 0);
    stagers_.clear();
  }
  // Waits for the peer's notice, then copies host memory -> GPU.
  void StagedRecv(uint32_t peer, double bytes, uint32_t channel) {
    void* data = nullptr;
    Box(peer, self_, channel)->get_async(&data)->wait();
    s4u::Comm::sendto(CpuOf(self_), HostOf(self_), Bytes(bytes));
  }
  Counters& counters() { return sh_->counters[slot_]; }

  void Record(double start, Category cat, uint16_t mb, double end = -1) {
    if (!record_) return;
    if (end < 0) end = Now();
    if (end > start) trace_.slices.push_back({start, end, cat, mb});
  }

  // Until when the compute started by kComputeAsync keeps the device busy (0 when none is running):
  // communication before then is hidden behind it (comm.tp_overlap).
  double HiddenUntil() const { return async_compute_ ? async_end_s_ : 0; }

  void AddComm(Category cat, double seconds) {
    switch (cat) {
      case Category::kTp: trace_.tp_s += seconds; break;
      case Category::kPp: trace_.pp_s += seconds; break;
      case Category::kZero: trace_.zero_s += seconds; break;
      case Category::kCp: trace_.cp_s += seconds; break;
      default: trace_.dp_s += seconds; break;
    }
  }

  void Reap() {
    // Finish arrived sends with wait() so they leave the actor's activity list, where each completion of
    // any of the actor's transfers scans them. Not with test(): in SimGrid 3.32 a successful test() marks
    // the s4u Comm finished, so the wait() after it returns at once and the kernel activity stays in the
    // list for good (thousands per actor on long pipelines, most of the run's time). A pipeline send has
    // arrived when its receiver has taken as many messages from the mailbox (Board::received); past 32
    // posted sends the oldest is waited for, arrived or not.
    while (!pending_.empty() && (Arrived(pending_.front()) || pending_.size() > 32)) {
      pending_.front().comm->wait();
      pending_.pop_front();
    }
  }
  bool Arrived(const Pending& p) const {
    if (p.key == kUntracked) return false;
    auto it = sh_->board.received.find(p.key);
    return it != sh_->board.received.end() && it->second > p.seq;
  }

  // Folded runs: starts the folded devices' copies of the transfer on stream `key` that share a link with
  // it (they leave the others out: those run on links of their own).
  void StartCopies(uint64_t key, double bytes) {
    const auto& copies = CopiesOf(key);
    for (const auto& [from, to] : copies) shadows_.push_back(s4u::Comm::sendto_async(HostOf(from), HostOf(to), Bytes(bytes)));
    // Finished copies leave the actor's activity list with wait() (pitfall 1), without waiting for the
    // others: they hold nobody up.
    if (shadows_.size() >= kReapFrom) {
      while (!shadows_.empty() && shadows_.front()->test()) {
        shadows_.front()->wait();
        shadows_.pop_front();
      }
    }
  }

  bool folded() const { return sh_->programs->folded; }

  const std::vector<std::pair<uint32_t, uint32_t>>& CopiesOf(uint64_t key) { return FoldCopies(sh_, key); }
  const std::vector<uint32_t>& PlayedGroups(uint32_t group, bool stripe) { return FoldPlayedGroups(sh_, group, stripe); }

  // Fills FoldFlows::port_up/port_down: every pair of GPUs of one node that some collective ring step or
  // pipeline stream of the unfolded run connects, with its owner.
  void CountPortOwners() {
    auto& ff = sh_->fold_flows;
    const auto& node = sh_->platform->gpu_node;
    ff.port_up.assign(node.size(), FoldFlows::kNoOwner);
    ff.port_down.assign(node.size(), FoldFlows::kNoOwner);
    const auto own = [&](uint32_t from, uint32_t to, uint32_t owner) {
      if (node[from] != node[to]) return;
      for (uint32_t* slot : {&ff.port_up[from], &ff.port_down[to]}) {
        if (*slot == FoldFlows::kNoOwner) {
          *slot = owner;
        } else if (*slot != owner) {
          *slot = FoldFlows::kManyOwners;
        }
      }
    };
    const auto& groups = sh_->programs->groups;
    for (uint32_t g = 0; g < groups.size(); ++g) {
      if (groups[g].size() < 2) continue;
      for (bool stripe : {false, true}) {
        for (const Flow& f : RingFlows(groups[g], node, stripe)) own(f.from, f.to, g);
      }
    }
    const auto& devices = sh_->programs->devices;
    for (size_t slot = 0; slot < devices.size(); ++slot) {
      const DeviceProgram& prog = sh_->programs->programs[slot];
      for (const auto* ops : {&prog.ops, &prog.dp_stream}) {
        for (const Op& o : *ops) {
          if (o.kind == OpKind::kSend) own(devices[slot], o.peer, FoldFlows::kManyOwners);
          if (o.kind == OpKind::kRecv || o.kind == OpKind::kPostRecv) own(o.peer, devices[slot], FoldFlows::kManyOwners);
        }
      }
    }
    for (const auto& [key, copies] : sh_->programs->fold.send_copies) {
      for (const auto& [from, to] : copies) own(from, to, FoldFlows::kManyOwners);
    }
  }

  // Whether one flow of the ring over `group` finishes when all of them do: every member sits in one node
  // whose GPU-to-GPU routes cross only the GPUs' own fabric ports, and nothing else in the whole run
  // (another group's ring, a pipeline stream) sends or receives over those ports. Then the ring's flows run
  // on disjoint links of one bandwidth and latency and meet no other flow, so each ends at the same time
  // and playing one of them gives the collective's end exactly. (Each detached host-to-host transfer costs
  // SimGrid 3.32 a scan of all of them in flight when it ends: with thousands of TP rings this is the
  // run's time.)
  bool LoneFlow(uint32_t group) {
    auto& ff = sh_->fold_flows;
    auto it = ff.lone.find(group);
    if (it != ff.lone.end()) return it->second;
    if (ff.port_up.empty()) CountPortOwners();
    const auto& g = sh_->programs->groups[group];
    const auto& node = sh_->platform->gpu_node;
    bool lone = g.size() >= 2 && sh_->platform->private_fabric[node[g[0]]] != 0;
    for (uint32_t d : g) lone = lone && node[d] == node[g[0]] && ff.port_up[d] == group && ff.port_down[d] == group;
    return ff.lone[group] = lone;
  }

  // A folded ring (or NVLS) collective: every member of the played groups sends its step bytes to its
  // successor at once (all members arrive together in a symmetric plan), and the collective ends when the
  // last flow has arrived, as the slowest member of the unfolded ring does.
  double RunFoldedCollective(const Op& op, double step_bytes, bool stripe) {
    const double called = s4u::Engine::get_clock();
    const auto& groups = sh_->programs->groups;
    const auto& node = sh_->platform->gpu_node;
    if (LoneFlow(op.group)) {
      const auto& g = groups[op.group];
      s4u::Comm::sendto(HostOf(g[0]), HostOf(g[1]), Bytes(step_bytes));
      return called;
    }
    std::vector<s4u::CommPtr> flows;
    for (uint32_t h : PlayedGroups(op.group, stripe)) {
      for (const Flow& f : RingFlows(groups[h], node, stripe)) {
        flows.push_back(s4u::Comm::sendto_async(HostOf(f.from), HostOf(f.to), Bytes(step_bytes * f.fraction)));
      }
    }
    for (auto& c : flows) c->wait();
    return called;
  }

  void WaitAllSends() {
    for (auto& p : pending_) p.comm->wait();
    pending_.clear();
  }

  // The device's clock: the simulated clock plus the busy time not yet slept (see Defer).
  double Now() const { return s4u::Engine::get_clock() + deferred_s_; }

  // Compute and analytic TP time only keep this device busy; nobody else sees them until its next
  // transfer, collective or signal. Consecutive ones are slept as one (SimGrid's activities, not the
  // simulated times, are what a large run spends its time on); Flush sleeps them before anything other
  // devices can observe.
  void Defer(double seconds) { deferred_s_ += seconds; }
  void Flush() {
    if (deferred_s_ <= 0) return;
    const double s = deferred_s_;
    deferred_s_ = 0;
    s4u::this_actor::sleep_for(s);
  }

  void Execute(const Op& op) {
    if (op.kind != OpKind::kCompute && op.kind != OpKind::kTpAnalytic) Flush();
    const double t0 = Now();
    switch (op.kind) {
      case OpKind::kCompute:
        Defer(op.seconds);
        trace_.compute_s += op.seconds;
        if (op.category != Category::kOptimizer) {
          trace_.fwd_bwd_s += op.seconds;
          trace_.pipeline_end_s = t0 + op.seconds;
          trace_.comm_in_phase_s =
              trace_.tp_s + trace_.pp_s + trace_.dp_s + trace_.zero_s + trace_.cp_s + collective_wait_s_;
        }
        Record(t0, op.category, op.micro_batch);
        break;
      case OpKind::kComputeAsync:
        // The GPU host runs nothing else, so an execution of seconds × its speed takes `seconds`.
        async_compute_ = s4u::this_actor::exec_async(op.seconds * s4u::this_actor::get_host()->get_speed());
        async_end_s_ = t0 + op.seconds;
        trace_.compute_s += op.seconds;
        trace_.fwd_bwd_s += op.seconds;
        trace_.pipeline_end_s = async_end_s_;
        Record(t0, op.category, op.micro_batch, async_end_s_);
        break;
      case OpKind::kComputeJoin:
        if (async_compute_) async_compute_->wait();
        async_compute_ = nullptr;
        trace_.comm_in_phase_s =
            trace_.tp_s + trace_.pp_s + trace_.dp_s + trace_.zero_s + trace_.cp_s + collective_wait_s_;
        break;
      case OpKind::kSend: {
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
        break;
      }
      case OpKind::kPostRecv: {
        // SimGrid starts a transfer once both sides are posted: posting the receive early lets a ring
        // attention transfer run during the compute that follows (CPU staging is not used for it).
        auto& posted = early_recvs_[MailboxKey(op.peer, self_, op.channel)];
        posted.push_back(Box(op.peer, self_, op.channel)->get_async(&early_data_));
        break;
      }
      case OpKind::kRecv: {
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
        break;
      }
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
      case OpKind::kSignal:
        sh_->ready[slot_]->release();
        break;
      case OpKind::kAwait:
        sh_->ready[slot_]->acquire();
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
        AddComm(op.category, Now() - t0);
        Record(t0, op.category, op.micro_batch);
        break;
      }
    }
    Reap();
  }

  static constexpr size_t kReapFrom = 8;

  static uint64_t Bytes(double b) { return static_cast<uint64_t>(std::llround(std::max(0.0, b))); }

  // Bottleneck bandwidth (bytes/s) and latency (s) of the route to `peer`.
  // One step of group g's ring with every member sending at once (rail-striped between nodes, as
  // RunCollective plays it): the seconds per byte of a member's step on the most loaded link, and the
  // longest route latency. Computed once per group.
  std::pair<double, double> RingStepCost(uint32_t group) {
    auto it = ring_steps_.find(group);
    if (it != ring_steps_.end()) return it->second;
    std::unordered_map<s4u::Link*, double> load;  // fraction of a member's step bytes, summed
    double lat = 0;
    std::vector<s4u::Link*> links;
    for (const Flow& f : RingFlows(sh_->programs->groups[group], sh_->platform->gpu_node, true)) {
      links.clear();
      double l = 0;
      HostOf(f.from)->route_to(HostOf(f.to), links, &l);
      lat = std::max(lat, l);
      for (auto* link : links) load[link] += f.fraction;
    }
    double s_per_byte = 1e-12;  // an empty route (one host): as RouteOf's 1e12 B/s
    for (const auto& [link, fraction] : load) s_per_byte = std::max(s_per_byte, fraction / link->get_bandwidth());
    return ring_steps_[group] = {s_per_byte, lat};
  }

  std::pair<double, double> RouteOf(uint32_t peer) {
    auto it = routes_.find(peer);
    if (it != routes_.end()) return it->second;
    std::vector<s4u::Link*> links;
    double lat = 0;
    HostOf(self_)->route_to(HostOf(peer), links, &lat);
    double bw = 1e30;
    for (auto* l : links) bw = std::min(bw, l->get_bandwidth());
    if (links.empty()) bw = 1e12;
    return routes_[peer] = {bw, lat};
  }

  // One exchange step: send `bytes` to `to` and receive from `from` on the group's channel. Returns
  // when the incoming transfer started. `group` (rings only) stripes a hop between nodes over rails: NCCL
  // runs a collective as several channels, each a ring that crosses from one node to the next at a
  // different member GPU, through that GPU's NIC (rail-optimised networks: NIC i of every node on rail i).
  // With k = min(members on this node, members on the next), the hop is k flows of bytes/k: this device's
  // own to `to` (which the receiver matches), and k − 1 flows between the other members of the two nodes,
  // which this device waits for before its next step.
  double Exchange(uint32_t to, uint32_t from, double bytes, uint32_t channel,
                  const std::vector<uint32_t>* group = nullptr) {
    if (Staged(to) || Staged(from)) {
      // Staged sends complete on their own (through host memory), so send first, then receive.
      const double t = s4u::Engine::get_clock();
      if (Staged(to)) {
        StagedSend(to, bytes, channel);
      } else {
        pending_.push_back({Box(self_, to, channel)->put_async(&g_payload, Bytes(bytes))});
      }
      if (Staged(from)) {
        StagedRecv(from, bytes, channel);
      } else {
        void* data = nullptr;
        Box(from, self_, channel)->get_async(&data)->wait();
      }
      WaitAllSends();
      return t;
    }
    std::vector<s4u::CommPtr> stripes;
    if (group != nullptr) bytes = StripeOverRails(to, bytes, *group, &stripes);
    void* data = nullptr;
    s4u::CommPtr s = Box(self_, to, channel)->put_async(&g_payload, Bytes(bytes));
    s4u::CommPtr r = Box(from, self_, channel)->get_async(&data);
    r->wait();
    s->wait();
    for (auto& c : stripes) c->wait();
    return r->get_start_time();
  }

  // Starts the other rails' share of a hop from this device's node to `to`'s (see Exchange) and returns the
  // bytes left for this device's own flow.
  double StripeOverRails(uint32_t to, double bytes, const std::vector<uint32_t>& group,
                         std::vector<s4u::CommPtr>* stripes) {
    const auto& node = sh_->platform->gpu_node;
    const uint32_t here = node[self_], there = node[to];
    if (here == there) return bytes;
    std::vector<uint32_t> mine, theirs;  // the other members on each side
    for (uint32_t d : group) {
      if (node[d] == here && d != self_) mine.push_back(d);
      if (node[d] == there && d != to) theirs.push_back(d);
    }
    const size_t extra = std::min(mine.size(), theirs.size());
    if (extra == 0) return bytes;
    const double share = bytes / static_cast<double>(extra + 1);
    for (size_t i = 0; i < extra; ++i) {
      stripes->push_back(s4u::Comm::sendto_async(HostOf(mine[i]), HostOf(theirs[i]), Bytes(share)));
    }
    return share;
  }

  // Runs this member's part of a collective; returns when its communication really started (for rings
  // the first incoming transfer; for trees and broadcasts the call itself).
  double RunCollective(const Op& op) {
    const double called = s4u::Engine::get_clock();
    const auto& g = sh_->programs->groups[op.group];
    const uint32_t n = static_cast<uint32_t>(g.size());
    if (n < 2) return called;
    const uint32_t channel = 8 + op.group;
    const uint32_t r = op.rank;
    const uint32_t next = g[(r + 1) % n], prev = g[(r + n - 1) % n];
    const bool full = sh_->programs->fidelity.collectives == CollectiveDetail::kFull;
    if (op.collective == CollectiveKind::kBroadcast) {
      // Root (rank 0) sends to every member directly (an NVLink/NVSwitch fan-out).
      if (r == 0) {
        std::vector<s4u::CommPtr> sends;
        for (uint32_t i = 1; i < n; ++i) sends.push_back(Box(self_, g[i], channel)->put_async(&g_payload, Bytes(op.bytes)));
        for (auto& c : sends) c->wait();
      } else {
        void* data = nullptr;
        Box(g[0], self_, channel)->get_async(&data)->wait();
      }
      return called;
    }
    if (op.collective == CollectiveKind::kAllToAll) {
      // Direct all-to-all (DeepSpeed-Ulysses): S/n of the buffer to every other member at once, as NCCL's
      // grouped sends and receives do; full and aggregate detail alike.
      std::vector<s4u::CommPtr> comms;
      std::vector<void*> data(n, nullptr);
      for (uint32_t i = 1; i < n; ++i) {
        comms.push_back(Box(self_, g[(r + i) % n], channel)->put_async(&g_payload, Bytes(op.bytes / n)));
        comms.push_back(Box(g[(r + n - i) % n], self_, channel)->get_async(&data[i]));
      }
      for (auto& c : comms) c->wait();
      return called;
    }
    if (folded() && op.algorithm == Algorithm::kNvls && op.collective == CollectiveKind::kAllReduce) {
      const double started = RunFoldedCollective(op, op.bytes / models::kNvlsEfficiency, false);
      s4u::this_actor::sleep_for(RouteOf(next).second);
      return started;
    }
    if (op.algorithm == Algorithm::kNvls && op.collective == CollectiveKind::kAllReduce) {
      // NVLS: each member sends S into the switch and receives the reduced S back, both at the switch's
      // reduction rate (kNvlsEfficiency of its port); one exchange of S / efficiency with the ring
      // neighbour loads every port that way, plus the second hop's latency.
      const double started = Exchange(next, prev, op.bytes / models::kNvlsEfficiency, channel);
      s4u::this_actor::sleep_for(RouteOf(next).second);
      return started;
    }
    if (op.algorithm == Algorithm::kTree && op.collective == CollectiveKind::kAllReduce) {
      // Binary tree by rank: every member sends the (pipelined) buffer to its parent while receiving
      // from its children, then the result flows back down.
      const auto phase = [&](bool up) {
        std::vector<s4u::CommPtr> comms;
        std::vector<void*> data(3, nullptr);
        const uint32_t parent = (r - 1) / 2;
        if (up) {
          if (r > 0) comms.push_back(Box(self_, g[parent], channel)->put_async(&g_payload, Bytes(op.bytes)));
          for (uint32_t c = 2 * r + 1; c <= 2 * r + 2 && c < n; ++c) {
            comms.push_back(Box(g[c], self_, channel)->get_async(&data[c - 2 * r]));
          }
        } else {
          if (r > 0) comms.push_back(Box(g[parent], self_, channel)->get_async(&data[0]));
          for (uint32_t c = 2 * r + 1; c <= 2 * r + 2 && c < n; ++c) {
            comms.push_back(Box(self_, g[c], channel)->put_async(&g_payload, Bytes(op.bytes)));
          }
        }
        for (auto& c : comms) c->wait();
      };
      phase(true);
      phase(false);
      const double depth = std::floor(std::log2(static_cast<double>(n)));
      if (depth > 1) s4u::this_actor::sleep_for(2 * (depth - 1) * RouteOf(next).second);
      return called;
    }
    // Rings: all-reduce = 2(n−1) steps, reduce-scatter / all-gather = n−1 steps, each of S/n bytes.
    const uint32_t steps = op.collective == CollectiveKind::kAllReduce ? 2 * (n - 1) : n - 1;
    const double chunk = op.bytes / n;
    double ready = called;
    if (folded()) {  // never at full detail (ProgramOptions::fold)
      ready = RunFoldedCollective(op, chunk * steps, true);
      if (steps > 1) s4u::this_actor::sleep_for((steps - 1) * RouteOf(next).second);
    } else if (full) {
      for (uint32_t i = 0; i < steps; ++i) {
        const double started = Exchange(next, prev, chunk, channel, &g);
        if (i == 0) ready = started;
      }
    } else {
      ready = Exchange(next, prev, chunk * steps, channel, &g);
      if (steps > 1) s4u::this_actor::sleep_for((steps - 1) * RouteOf(next).second);
    }
    return ready;
  }

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
  s4u::ExecPtr async_compute_;  // kComputeAsync's compute, until kComputeJoin
  double async_end_s_ = 0;
  double deferred_s_ = 0;  // compute and analytic TP time not yet slept (Defer)
  // Receives posted ahead by kPostRecv, per mailbox, in posting order.
  std::unordered_map<uint64_t, std::deque<s4u::CommPtr>> early_recvs_;
  void* early_data_ = nullptr;
};

}  // namespace

uint64_t CountOperations(const Programs& programs) {
  uint64_t n = 0;
  for (const auto& p : programs.programs) n += p.ops.size() + p.dp_stream.size();
  return n;
}

EngineResult RunEngine(const Programs& programs, const Platform& platform, bool record_slices,
                       const ProgressHook& progress, const std::vector<uint32_t>& timeline_devices) {
  EngineResult result;
  result.devices.resize(programs.devices.size());
  Shared shared{&programs, &platform, record_slices, &result, {}, {}, {}, {}, {}, {}, {},
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
  if (folded) result.scaled_links = ScaleTwinLinks(&shared);
  for (size_t slot = 0; slot < programs.devices.size(); ++slot) {
    shared.ready.push_back(s4u::Semaphore::create(0));
    shared.done.push_back(s4u::Semaphore::create(0));
  }
  for (uint32_t slot = 0; slot < programs.devices.size(); ++slot) {
    if (!played(slot)) continue;
    s4u::Host* host = platform.gpus[programs.devices[slot]];
    s4u::Actor::create("d" + std::to_string(programs.devices[slot]), host,
                       [&shared, slot] { Runner(&shared, slot, false).Run(); });
    if (!programs.programs[slot].dp_stream.empty()) {
      s4u::Actor::create("dp" + std::to_string(programs.devices[slot]), host,
                         [&shared, slot] { Runner(&shared, slot, true).Run(); });
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
