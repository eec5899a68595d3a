// How the iteration engine plays a device's transfers and collectives as SimGrid activities: pipeline sends
// staged through host memory (HetHub §3.1), one exchange step of a ring with its hop between nodes striped
// over the members' rails, ring / tree / NVLS all-reduces, broadcasts and all-to-alls at full or aggregate
// detail; and the prices of the analytic TP collective (a ring step on its most loaded link, a route's
// bottleneck).
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "models/topology.h"
#include "sim/engine_internal.h"

namespace hetsim::sim {
namespace engine {

void Runner::StagedSend(uint32_t peer, double bytes, uint32_t channel) {
  s4u::Comm::sendto(HostOf(self_), CpuOf(self_), Bytes(bytes));
  s4u::Comm::sendto(CpuOf(self_), CpuOf(peer), Bytes(bytes));
  pending_.push_back({Box(self_, peer, channel)->put_async(&g_payload, 0)});
}

void Runner::StagedSendAsync(uint32_t peer, double bytes, uint32_t channel) {
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

void Runner::StopStagers() {
  for (auto& [key, queue] : stagers_) queue->put(new double(-1), 0);
  stagers_.clear();
}

void Runner::StagedRecv(uint32_t peer, double bytes, uint32_t channel) {
  void* data = nullptr;
  Box(peer, self_, channel)->get_async(&data)->wait();
  s4u::Comm::sendto(CpuOf(self_), HostOf(self_), Bytes(bytes));
}

std::pair<double, double> Runner::RingStepCost(uint32_t group) {
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

double Runner::SlowestHopLatency(uint32_t group) {
  auto& cache = sh_->fold_flows.slowest_hop;
  auto it = cache.find(group);
  if (it != cache.end()) return it->second;
  const auto& g = sh_->programs->groups[group];
  double lat = 0;
  std::vector<s4u::Link*> links;
  for (size_t r = 0; r < g.size(); ++r) {
    links.clear();
    double l = 0;
    HostOf(g[r])->route_to(HostOf(g[(r + 1) % g.size()]), links, &l);
    lat = std::max(lat, l);
  }
  return cache[group] = lat;
}

std::pair<double, double> Runner::RouteOf(uint32_t peer) {
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

double Runner::Exchange(uint32_t to, uint32_t from, double bytes, uint32_t channel,
                        const std::vector<uint32_t>* group) {
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

double Runner::StripeOverRails(uint32_t to, double bytes, const std::vector<uint32_t>& group,
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

double Runner::RunCollective(const Op& op) {
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
    if (folded()) {
      RunFoldedAllToAll(op);
      return called;
    }
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
    s4u::this_actor::sleep_for(SlowestHopLatency(op.group));
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
    if (steps > 1) s4u::this_actor::sleep_for((steps - 1) * SlowestHopLatency(op.group));
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

}  // namespace engine
}  // namespace hetsim::sim
