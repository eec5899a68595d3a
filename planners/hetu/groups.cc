// The Hetu planner's TP groups (hetu.h, items 1-3 of the search): each node of a GPU type cut into groups of the type's
// TP degree (the rest into the largest powers of two that fit), grouped into classes that cost the same; their dealing
// to P pipelines longest processing time first, group by group (Deal) or by classes of identical pipelines
// (DealByClass); and the stage order inside a pipeline (OrderStages).
#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

#include "planners/hetu/search_internal.h"

namespace hetsim::planners::hetu {

Combination Search::Groups(std::vector<uint32_t> tps) const {
  Combination c;
  c.tps = std::move(tps);
  const auto& nodes = problem_.cluster.nodes();
  for (size_t k = 0; k < types_.size(); ++k) {
    for (uint32_t n : types_[k].nodes) {
      uint32_t at = 0;
      while (at < nodes[n].num_gpus) {
        uint32_t t = c.tps[k];
        while (t > nodes[n].num_gpus - at || !ModelAllowsTp(problem_.model, t)) t /= 2;
        Group g;
        for (uint32_t i = 0; i < t; ++i) g.devices.push_back(nodes[n].first_device + at + i);
        g.tp = t;
        g.type = k;
        g.speed = 1.0 / cost_.Replica(g.devices, 1, 2, 1, {}, {}, rc_).total_s();
        const models::Link link = t > 1 ? cost_.topology().Slowest(g.devices) : models::Link{};
        auto same = [&](const GroupClass& x) {
          return x.type == k && x.tp == t && x.speed == g.speed && x.tp_link.kind == link.kind &&
                 x.tp_link.bandwidth_bytes_s == link.bandwidth_bytes_s && x.tp_link.latency_s == link.latency_s;
        };
        auto it = std::find_if(c.classes.begin(), c.classes.end(), same);
        if (it == c.classes.end()) {
          c.classes.push_back(GroupClass{k, t, g.speed, link, static_cast<uint32_t>(c.groups.size())});
          it = c.classes.end() - 1;
        }
        g.cls = static_cast<uint32_t>(it - c.classes.begin());
        c.groups.push_back(std::move(g));
        at += t;
      }
    }
  }
  // Longest processing time first: the fastest groups first (ties: device order).
  c.by_speed.resize(c.groups.size());
  std::iota(c.by_speed.begin(), c.by_speed.end(), 0);
  std::stable_sort(c.by_speed.begin(), c.by_speed.end(),
                   [&](size_t a, size_t b) { return c.groups[a].speed > c.groups[b].speed * (1 + 1e-12); });
  std::vector<bool> seen(c.classes.size(), false);
  for (size_t g : c.by_speed) {
    const uint32_t k = c.groups[g].cls;
    if (!c.runs.empty() && c.runs.back().first == k) {
      ++c.runs.back().second;
      continue;
    }
    c.by_class &= !seen[k];  // a class met twice: bins with one content may hold it in different orders
    seen[k] = true;
    c.runs.emplace_back(k, 1);
  }
  // The stage order ranks (type, TP degree), then devices: two classes of one (type, degree) are ordered
  // by their devices, which the classes do not record.
  for (size_t a = 0; a < c.classes.size(); ++a) {
    for (size_t b = a + 1; b < c.classes.size(); ++b) {
      c.by_class &= !(c.classes[a].type == c.classes[b].type && c.classes[a].tp == c.classes[b].tp);
    }
  }
  c.by_class &= !equal_type_speeds_;
  return c;
}

std::vector<std::vector<size_t>> Search::Deal(const Combination& c, uint32_t P) const {
  std::vector<std::vector<size_t>> pipes(P);
  using Load = std::pair<double, uint32_t>;  // (speed so far, pipeline): the least, then the lowest index
  std::priority_queue<Load, std::vector<Load>, std::greater<>> least;
  for (uint32_t p = 0; p < P; ++p) least.emplace(0.0, p);
  for (size_t g : c.by_speed) {
    auto [speed, p] = least.top();
    least.pop();
    pipes[p].push_back(g);
    least.emplace(speed + c.groups[g].speed, p);
  }
  return pipes;
}

void Search::OrderStages(const Combination& c, bool slowest_first, std::vector<size_t>* pipe) const {
  std::stable_sort(pipe->begin(), pipe->end(), [&](size_t a, size_t b) {
    const Group& ga = c.groups[a];
    const Group& gb = c.groups[b];
    const double sa = types_[ga.type].block_s, sb = types_[gb.type].block_s;
    if (ga.type != gb.type) return slowest_first ? sa > sb : sa < sb;
    if (ga.tp != gb.tp) return ga.tp > gb.tp;
    return ga.devices.front() < gb.devices.front();
  });
}

std::optional<std::vector<std::pair<std::vector<uint32_t>, uint32_t>>> Search::DealByClass(const Combination& c,
                                                                                           uint32_t P) const {
  struct Bins {
    std::vector<uint32_t> content;
    double load;
    uint32_t count;
  };
  std::vector<Bins> bins = {{std::vector<uint32_t>(c.classes.size(), 0), 0.0, P}};
  for (const auto& [k, length] : c.runs) {
    uint32_t left = length;
    const double v = c.classes[k].speed;
    while (left > 0) {
      size_t low = bins.size();
      bool tie = false;
      for (size_t i = 0; i < bins.size(); ++i) {
        if (bins[i].count == 0) continue;
        if (low == bins.size() || bins[i].load < bins[low].load) {
          low = i;
          tie = false;
        } else if (bins[i].load == bins[low].load) {
          tie = true;
        }
      }
      if (tie) return std::nullopt;
      const uint32_t take = std::min(left, bins[low].count);
      bins[low].count -= take;
      left -= take;
      std::vector<uint32_t> content = bins[low].content;
      ++content[k];
      const double load = bins[low].load + v;
      auto it = std::find_if(bins.begin(), bins.end(),
                             [&](const Bins& b) { return b.load == load && b.content == content; });
      if (it == bins.end()) {
        bins.push_back(Bins{std::move(content), load, take});
      } else {
        it->count += take;
      }
      std::erase_if(bins, [](const Bins& b) { return b.count == 0; });
    }
  }
  std::vector<std::pair<std::vector<uint32_t>, uint32_t>> out;
  for (auto& b : bins) out.emplace_back(std::move(b.content), b.count);
  return out;
}

}  // namespace hetsim::planners::hetu
