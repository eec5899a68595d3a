// Folded runs of the iteration engine (docs/simulator.md, "Folding"; sim/program.h FoldMap): the flows a
// representative device plays for the twins folded onto it — the copies of its pipeline streams and the
// rings of its collectives' family that share a link with its own — the links scaled instead where only
// twin streams meet (ScaleTwinLinks), and the collectives whose one flow stands for the whole ring.
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/engine_internal.h"

namespace hetsim::sim {
namespace engine {

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

std::vector<Flow> AllToAllFlows(const std::vector<uint32_t>& g) {
  std::vector<Flow> flows;
  const size_t n = g.size();
  for (size_t a = 0; a < n; ++a) {
    for (size_t i = 1; i < n; ++i) flows.push_back({g[a], g[(a + i) % n], 1.0 / static_cast<double>(n)});
  }
  return flows;
}

void LinksOf(const Shared* sh, uint32_t a, uint32_t b, std::vector<s4u::Link*>* links) {
  double lat = 0;
  sh->platform->gpus[a]->route_to(sh->platform->gpus[b], *links, &lat);
}

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

const std::vector<uint32_t>& FoldPlayedGroups(Shared* sh, uint32_t group, bool stripe, bool all_to_all) {
  auto& cache = all_to_all ? sh->fold_flows.all_to_all_groups : sh->fold_flows.groups;
  auto it = cache.find(group);
  if (it != cache.end()) return it->second;
  const auto& groups = sh->programs->groups;
  const auto& node = sh->platform->gpu_node;
  const auto flows_of = [&](uint32_t g) {
    return all_to_all ? AllToAllFlows(groups[g]) : RingFlows(groups[g], node, stripe);
  };
  std::vector<s4u::Link*> used;
  for (const Flow& f : flows_of(group)) LinksOf(sh, f.from, f.to, &used);
  std::sort(used.begin(), used.end());
  std::vector<uint32_t> played{group};
  const auto& family = sh->programs->fold.family[group];
  for (uint32_t h : family) {
    if (h == group) continue;
    bool shares = false;
    for (const Flow& f : flows_of(h)) {
      std::vector<s4u::Link*> links;
      LinksOf(sh, f.from, f.to, &links);
      for (auto* l : links) shares |= std::binary_search(used.begin(), used.end(), l);
      if (shares) break;
    }
    if (shares) played.push_back(h);
  }
  return cache[group] = std::move(played);
}

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
  // Every flow the folded collectives play (RunFoldedCollective: rings stripe over rails, NVLS does not;
  // RunFoldedAllToAll: every member to every other).
  enum : uint8_t { kNvlsFlows, kRingFlows, kAllToAllFlows };
  std::vector<std::pair<uint32_t, uint8_t>> collectives;
  for (size_t slot = 0; slot < programs.devices.size(); ++slot) {
    for (const auto* ops : {&programs.programs[slot].ops, &programs.programs[slot].dp_stream}) {
      for (const Op& o : *ops) {
        // (The analytic TP time reads its route's bandwidth: its links must keep theirs too.)
        if (o.kind != OpKind::kCollective && o.kind != OpKind::kTpAnalytic) continue;
        if (programs.groups[o.group].size() < 2) continue;
        const bool nvls = o.algorithm == Algorithm::kNvls && o.collective == CollectiveKind::kAllReduce;
        const bool a2a = o.kind == OpKind::kCollective && o.collective == CollectiveKind::kAllToAll;
        collectives.push_back({o.group, a2a ? kAllToAllFlows : nvls ? kNvlsFlows : kRingFlows});
      }
    }
  }
  std::sort(collectives.begin(), collectives.end());
  collectives.erase(std::unique(collectives.begin(), collectives.end()), collectives.end());
  for (const auto& [g, mode] : collectives) {
    const bool stripe = mode == kRingFlows, a2a = mode == kAllToAllFlows;
    for (uint32_t h : FoldPlayedGroups(sh, g, stripe, a2a)) {
      for (const Flow& f : a2a ? AllToAllFlows(programs.groups[h]) : RingFlows(programs.groups[h], node, stripe)) {
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

void Runner::StartCopies(uint64_t key, double bytes) {
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

void Runner::CountPortOwners() {
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
        if (o.kind == OpKind::kCollective && o.collective == CollectiveKind::kAllToAll) {
          // An all-to-all group's flows join every pair of its members (and so for its folded groups).
          for (uint32_t h : sh_->programs->fold.family[o.group]) {
            for (const Flow& f : AllToAllFlows(groups[h])) own(f.from, f.to, h);
          }
        }
        if (o.kind == OpKind::kSend) own(devices[slot], o.peer, FoldFlows::kManyOwners);
        if (o.kind == OpKind::kRecv || o.kind == OpKind::kPostRecv) own(o.peer, devices[slot], FoldFlows::kManyOwners);
      }
    }
  }
  for (const auto& [key, copies] : sh_->programs->fold.send_copies) {
    for (const auto& [from, to] : copies) own(from, to, FoldFlows::kManyOwners);
  }
}

bool Runner::LoneFlow(uint32_t group) {
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

void Runner::RunFoldedAllToAll(const Op& op) {
  const double share = op.bytes / static_cast<double>(sh_->programs->groups[op.group].size());
  std::vector<s4u::CommPtr> flows;
  for (const Flow& f : FoldedAllToAllFlows(op.group, op.rank)) {
    flows.push_back(s4u::Comm::sendto_async(HostOf(f.from), HostOf(f.to), Bytes(share * f.fraction)));
  }
  for (auto& c : flows) c->wait();
}

const std::vector<Flow>& Runner::FoldedAllToAllFlows(uint32_t group, uint32_t rank) {
  auto [it, fresh] = all_to_all_flows_.try_emplace({group, rank});
  if (!fresh) return it->second;
  // The flows that load the representative's links in a symmetric all-to-all, not the n·(n − 1) of every
  // member: inside its node, the representative to and from every other member there (its NVLink ports);
  // across nodes, one flow to and one from each other node carrying what the representative exchanges with
  // that node's members (its NIC's two directions), and the same for every member of its node whose
  // route to that node shares a link with the representative's (a NIC the node's GPUs share). Every other
  // node's links carry the same in a symmetric all-to-all; an uplink shared between nodes (pods, an
  // oversubscribed tier) would carry more than is played here (docs/simulator.md "Folding").
  std::vector<Flow>& out = it->second;
  const auto& groups = sh_->programs->groups;
  const auto& node = sh_->platform->gpu_node;
  for (uint32_t h : PlayedGroups(group, false, true)) {
    const auto& g = groups[h];
    if (rank >= g.size()) continue;
    const uint32_t rep = g[rank], at = node[rep];
    std::map<uint32_t, std::vector<uint32_t>> by_node;
    for (uint32_t d : g) by_node[node[d]].push_back(d);
    const auto& local = by_node[at];
    for (uint32_t d : local) {
      if (d == rep) continue;
      out.push_back({rep, d, 1.0});
      out.push_back({d, rep, 1.0});
    }
    for (const auto& [other, members] : by_node) {
      if (other == at) continue;
      const double n = static_cast<double>(members.size());
      std::vector<s4u::Link*> rep_links;
      LinksOf(sh_, rep, members.front(), &rep_links);
      std::sort(rep_links.begin(), rep_links.end());
      for (size_t i = 0; i < local.size(); ++i) {
        const uint32_t d = local[i];
        if (d != rep) {
          std::vector<s4u::Link*> links;
          LinksOf(sh_, d, members.front(), &links);
          if (std::none_of(links.begin(), links.end(),
                           [&](s4u::Link* l) { return std::binary_search(rep_links.begin(), rep_links.end(), l); })) {
            continue;
          }
        }
        const uint32_t peer = members[i % members.size()];  // the same rail where the node has one
        out.push_back({d, peer, n});
        out.push_back({peer, d, n});
      }
    }
  }
  return out;
}

Runner::RingStream& Runner::Ring(uint32_t channel) {
  auto it = rings_.find(channel);
  if (it != rings_.end()) return it->second;
  RingStream& rs = rings_[channel];
  const auto& peers = sh_->programs->fold.ring_peer;
  auto p = peers.find(RingKey(self_, channel));
  HETSIM_CHECK(p != peers.end(), "folded run: device " + std::to_string(self_) + " has ring messages on channel " +
                                     std::to_string(channel) + " but no ring peer (models::FoldRanks)");
  rs.peer = p->second;
  return rs;
}

void Runner::RingStart(RingStream& rs, uint32_t channel) {
  while (rs.started < std::min(rs.sent, rs.posted)) {
    const auto [posted_at, bytes] = rs.unsent.front();
    rs.unsent.pop_front();
    const uint64_t key = MailboxKey(self_, rs.peer, channel);
    s4u::CommPtr flow = s4u::Comm::sendto_async(HostOf(self_), HostOf(rs.peer), Bytes(bytes));
    rs.flows.emplace_back(flow, posted_at);
    for (auto& p : pending_) {  // the send's entry (Reap waits for it as for the unfolded put)
      if (p.key == key && p.seq == rs.started && !p.comm) p.comm = flow;
    }
    StartCopies(key, bytes);
    ++rs.started;
  }
}

double Runner::RingReceive(uint32_t channel) {
  RingStream& rs = Ring(channel);
  if (rs.received == rs.posted) {  // not posted ahead: posted now
    ++rs.posted;
    RingStart(rs, channel);
  }
  HETSIM_CHECK(!rs.flows.empty(), "folded run: device " + std::to_string(self_) + " receives a ring message on channel " +
                                      std::to_string(channel) + " before sending one (models::FoldRanks)");
  auto [flow, posted_at] = rs.flows.front();
  rs.flows.pop_front();
  ++rs.received;
  flow->wait();
  // In a symmetric ring the successor takes this device's message when it takes its own (Reap's Arrived).
  ++sh_->board.received[MailboxKey(self_, rs.peer, channel)];
  return posted_at;
}

double Runner::RunFoldedCollective(const Op& op, double step_bytes, bool stripe) {
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

}  // namespace engine
}  // namespace hetsim::sim
