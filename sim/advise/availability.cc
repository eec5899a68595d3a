#include "sim/advise/availability.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "models/spec_io.h"
#include "sim/runner/manifest.h"
#include "traces/llama3.h"
#include "traces/spot.h"
#include "traces/trace.h"

namespace hetsim::advise {
namespace {

using Event = proto::TraceEvent;

// Nodes of the stand-in cluster a published spot trace is converted onto (one per instance): more than any
// bundled trace has alive at once (Bamboo's p3 trace: 177 instances in all).
constexpr uint32_t kSpotStandInNodes = 4096;

// A seed per purpose and group, so that adding a group does not change the others' draws.
uint64_t Mix(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (salt + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

double SpotSeries::FractionAt(double t, double offset) const {
  if (steps.empty()) return 0;
  double x = t + offset;
  if (duration_s > 0) x = std::fmod(x, duration_s);
  // The last step at or before x.
  auto it = std::upper_bound(steps.begin(), steps.end(), x,
                             [](double v, const std::pair<double, double>& s) { return v < s.first; });
  return it == steps.begin() ? steps.front().second : std::prev(it)->second;
}

SpotSeries SeriesOfTrace(const proto::Trace& trace) {
  // Changes of the alive count: +1 at an addition, -1 when a preempted node goes (notice after the warning).
  std::map<double, int64_t> delta;
  double notice = 120;
  for (const auto& e : trace.events()) {
    if (e.kind() == Event::KIND_CAPACITY_ADDED) {
      delta[e.time_s()] += e.nodes_size();
    } else if (e.kind() == Event::KIND_PREEMPTION) {
      notice = e.notice_s();
      delta[e.time_s() + e.notice_s()] -= e.nodes_size();
    }
  }
  SpotSeries s;
  s.notice_s = notice;
  s.duration_s = trace.duration_s();
  int64_t count = 0;
  std::vector<std::pair<double, int64_t>> counts = {{0.0, 0}};
  for (const auto& [t, d] : delta) {
    count += d;
    if (t <= 0) {
      counts.front().second = count;
    } else {
      counts.emplace_back(t, count);
    }
    s.peak = static_cast<uint32_t>(std::max<int64_t>(s.peak, count));
  }
  if (s.duration_s <= 0) s.duration_s = counts.back().first;
  for (const auto& [t, c] : counts) {
    const double f = s.peak > 0 ? static_cast<double>(std::max<int64_t>(c, 0)) / s.peak : 0;
    if (!s.steps.empty() && s.steps.back().second == f) continue;
    s.steps.emplace_back(t, f);
  }
  return s;
}

Result<SpotSeries> LoadSpotSeries(const proto::AdviseSpotTrace& spec, const std::string& config_file) {
  const std::string path = models::ResolveRelative(spec.file(), config_file);
  proto::Trace trace;
  if (spec.format() == "trace") {
    HETSIM_ASSIGN_OR_RETURN(trace, traces::LoadTrace(path));
    if (!trace.starts_empty()) {
      return Status::Invalid(path + ": starts_empty: a spot trace starts empty (nodes exist once added); this "
                             "one is a failure trace");
    }
  } else {
    // One stand-in node per instance: only the count over time is kept.
    proto::Cluster stand_in;
    stand_in.set_name("spot-stand-in");
    auto* g = stand_in.add_nodes();
    g->set_name("instance");
    g->set_count(kSpotStandInNodes);
    g->mutable_gpus()->set_type("v100");
    g->mutable_gpus()->set_count(1);
    g->mutable_nic()->set_kind(proto::Nic::KIND_ETHERNET);
    g->mutable_nic()->set_bandwidth_gbps(10);
    HETSIM_ASSIGN_OR_RETURN(auto cluster, models::Cluster::Build(stand_in, "spot stand-in"));
    traces::SpotOptions so;
    so.format = spec.format();
    if (spec.has_notice_s()) so.notice_s = spec.notice_s();
    HETSIM_ASSIGN_OR_RETURN(trace, traces::ConvertSpotTrace(path, cluster, "spot-stand-in", so));
  }
  SpotSeries s = SeriesOfTrace(trace);
  if (spec.has_notice_s()) s.notice_s = spec.notice_s();
  s.source = path;
  s.digest = runner::Fnv(trace.SerializeAsString());
  if (s.peak == 0 || !(s.duration_s > 0)) {
    return Status::Invalid(path + ": no instance is ever alive in this spot trace (nothing to rent)");
  }
  return s;
}

Result<proto::Trace> ComposeTrace(const models::Cluster& cluster, const std::string& cluster_ref,
                                  const std::vector<GroupCost>& groups, uint64_t seed, double window_s,
                                  double* rent_usd_per_h) {
  const auto& spec = cluster.spec();
  if (static_cast<int>(groups.size()) != spec.nodes_size()) {
    return Status::Internal("advise: " + std::to_string(groups.size()) + " group costs for a cluster of " +
                            std::to_string(spec.nodes_size()) + " node groups");
  }
  proto::Trace t;
  t.set_kind("trace");
  t.set_name(spec.name() + "-seed" + std::to_string(seed));
  t.set_description("hetsim advise: spot availability and Llama-3-rate failures of " + cluster.Summary());
  t.set_cluster(cluster_ref);
  t.set_duration_s(window_s);
  t.set_seed(seed);
  bool any_spot = false;
  for (const auto& g : groups) any_spot |= g.spot != nullptr;
  t.set_starts_empty(any_spot);
  std::vector<Event> events;
  uint32_t node0 = 0, device0 = 0;
  double rent_gpu_seconds_usd = 0;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const GroupCost& g = groups[gi];
    const uint32_t gpus = g.gpus_per_node;
    if (g.spot == nullptr) {
      rent_gpu_seconds_usd += static_cast<double>(g.nodes) * gpus * g.usd_per_gpu_hour * window_s;
      if (any_spot) {
        Event e;
        e.set_time_s(0);
        e.set_kind(Event::KIND_CAPACITY_ADDED);
        for (uint32_t n = 0; n < g.nodes; ++n) e.add_nodes(node0 + n);
        events.push_back(std::move(e));
      }
    } else {
      // The group follows the series from an offset of the seed's drawing; counts change at its steps.
      std::mt19937_64 rng(Mix(seed, 2 * gi));
      const SpotSeries& s = *g.spot;
      const double offset = std::uniform_real_distribution<double>(0, s.duration_s)(rng);
      auto want = [&](double at) {
        return static_cast<uint32_t>(std::lround(s.FractionAt(at, offset) * g.nodes));
      };
      // Change times in the window: the series' steps shifted by the offset, over as many repeats as needed.
      std::vector<double> times = {0};
      for (double base = -offset; base < window_s; base += s.duration_s) {
        for (const auto& [st, f] : s.steps) {
          const double at = base + st;
          if (at > 0 && at < window_s) times.push_back(at);
        }
        if (s.duration_s <= 0) break;
      }
      std::sort(times.begin(), times.end());
      uint32_t alive = 0;
      double since = 0;
      for (double at : times) {
        const uint32_t w = want(at);
        if (w == alive) continue;
        rent_gpu_seconds_usd += static_cast<double>(alive) * gpus * g.usd_per_gpu_hour * (at - since);
        const double previous_change = since;
        since = at;
        Event e;
        e.set_time_s(std::round(at * 1e3) / 1e3);
        if (w > alive) {
          e.set_kind(Event::KIND_CAPACITY_ADDED);
          for (uint32_t n = alive; n < w; ++n) e.add_nodes(node0 + n);
        } else {
          // The warning comes notice_s before the nodes go, but not before the previous change (a short
          // step gets a shorter notice).
          e.set_kind(Event::KIND_PREEMPTION);
          const double warn = std::max(previous_change, at - s.notice_s);
          e.set_time_s(std::round(warn * 1e3) / 1e3);
          e.set_notice_s(at - warn);
          e.set_cause("preemption");
          for (uint32_t n = w; n < alive; ++n) e.add_nodes(node0 + n);
        }
        events.push_back(std::move(e));
        alive = w;
      }
      rent_gpu_seconds_usd += static_cast<double>(alive) * gpus * g.usd_per_gpu_hour * (window_s - since);
    }
    // Failures of the group's nodes at Llama 3's per-GPU rates, drawn on the group alone.
    if (g.failure_rate_scale > 0 && g.nodes > 0) {
      proto::Cluster one;
      one.set_name(spec.name() + "-" + spec.nodes(static_cast<int>(gi)).name());
      *one.add_nodes() = spec.nodes(static_cast<int>(gi));
      HETSIM_ASSIGN_OR_RETURN(auto sub, models::Cluster::Build(one, "advise group"));
      traces::FailureTraceOptions fo;
      fo.days = window_s / 86400;
      fo.seed = Mix(seed, 2 * gi + 1);
      fo.rate_scale = g.failure_rate_scale;
      HETSIM_RETURN_IF_ERROR(traces::CheckFailureTraceOptions(sub, fo, "window_days", "failure_rate_scale"));
      const proto::Trace f = traces::GenerateLlama3Failures(sub, one.name(), fo);
      for (auto e : f.events()) {
        for (auto& n : *e.mutable_nodes()) n += node0;
        for (auto& d : *e.mutable_devices()) d += device0;
        events.push_back(std::move(e));
      }
    }
    node0 += g.nodes;
    device0 += g.nodes * gpus;
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time_s() < b.time_s(); });
  for (auto& e : events) *t.add_events() = std::move(e);
  if (rent_usd_per_h != nullptr) *rent_usd_per_h = window_s > 0 ? rent_gpu_seconds_usd / window_s : 0;
  return t;
}

}  // namespace hetsim::advise
