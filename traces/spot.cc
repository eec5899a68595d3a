#include "traces/spot.h"
#include "traces/trace.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace hetsim::traces {
namespace {

// One change of the instance set: a named instance comes or goes, or the count becomes `count`.
struct Change {
  double time_s = 0;
  int line = 0;
  bool add = false;
  std::string name;  // named formats
  int count = -1;    // count formats
};

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string c; std::getline(ss, c, ',');) out.push_back(Trim(c));
  return out;
}

Result<double> Num(const std::string& s, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return Status::Invalid(where + ": '" + s + "' is not a number");
  }
  return v;
}

// Plays the changes over node indices; returns the events.
Result<std::vector<Event>> Assign(const std::vector<Change>& changes, uint32_t nodes, const std::string& file,
                                  double notice_s) {
  std::set<uint32_t> live;
  std::map<std::string, uint32_t> by_name;
  std::vector<Event> out;
  size_t peak = 0;
  auto lowest_free = [&]() -> int64_t {
    for (uint32_t i = 0; i < nodes; ++i) {
      if (!live.count(i)) return i;
    }
    return -1;
  };
  auto too_many = [&](const Change& c, size_t want) {
    return Status::Invalid(file + ":" + std::to_string(c.line) + ": " + std::to_string(want) +
                           " instances alive at once but the cluster has " + std::to_string(nodes) +
                           " nodes; give a cluster with at least that many nodes (one per instance)");
  };
  for (const Change& c : changes) {
    Event e;
    e.set_time_s(c.time_s);
    if (c.count >= 0) {
      const auto want = static_cast<size_t>(c.count);
      if (want > nodes) return too_many(c, want);
      if (want > live.size()) {
        e.set_kind(Event::KIND_CAPACITY_ADDED);
        while (live.size() < want) {
          const auto i = static_cast<uint32_t>(lowest_free());
          live.insert(i);
          e.add_nodes(i);
        }
      } else if (want < live.size()) {
        e.set_kind(Event::KIND_PREEMPTION);
        e.set_notice_s(notice_s);
        while (live.size() > want) {
          const uint32_t i = *live.rbegin();
          live.erase(i);
          e.add_nodes(i);
        }
        std::sort(e.mutable_nodes()->begin(), e.mutable_nodes()->end());
      } else {
        continue;
      }
    } else if (c.add) {
      if (by_name.count(c.name)) continue;  // already there
      const int64_t i = lowest_free();
      if (i < 0) return too_many(c, live.size() + 1);
      live.insert(static_cast<uint32_t>(i));
      by_name[c.name] = static_cast<uint32_t>(i);
      e.set_kind(Event::KIND_CAPACITY_ADDED);
      e.add_nodes(static_cast<uint32_t>(i));
    } else {
      auto it = by_name.find(c.name);
      if (it == by_name.end()) {
        return Status::Invalid(file + ":" + std::to_string(c.line) + ": removes '" + c.name +
                               "', which was never added (or was removed before)");
      }
      live.erase(it->second);
      e.set_kind(Event::KIND_PREEMPTION);
      e.set_notice_s(notice_s);
      e.add_nodes(it->second);
      by_name.erase(it);
    }
    peak = std::max(peak, live.size());
    // Same time and kind as the previous event: one event.
    if (!out.empty() && out.back().time_s() == e.time_s() && out.back().kind() == e.kind()) {
      for (uint32_t n : e.nodes()) out.back().add_nodes(n);
    } else {
      out.push_back(std::move(e));
    }
  }
  return out;
}

Result<std::vector<Change>> ReadChanges(const std::string& path, const std::string& format, double* duration_s) {
  std::ifstream in(path);
  if (!in) return Status::Invalid(path + ": cannot open the trace");
  std::vector<Change> out;
  if (format == "skypilot") {
    std::stringstream text;
    text << in.rdbuf();
    YAML::Node root;
    try {
      root = YAML::Load(text.str());
    } catch (const YAML::Exception& e) {
      return Status::Invalid(path + ": not JSON: " + e.what());
    }
    if (!root["metadata"] || !root["metadata"]["gap_seconds"] || !root["data"] || !root["data"].IsSequence()) {
      return Status::Invalid(path + ": expected {\"metadata\": {\"gap_seconds\": G}, \"data\": [...]} (SkyPilot's format)");
    }
    const double gap = root["metadata"]["gap_seconds"].as<double>();
    for (size_t i = 0; i < root["data"].size(); ++i) {
      Change c;
      c.time_s = gap * static_cast<double>(i), c.line = 1, c.count = root["data"][i].as<int>();
      out.push_back(c);
    }
    *duration_s = gap * static_cast<double>(root["data"].size());
    return out;
  }
  std::string line;
  int n = 0;
  double t0 = -1;
  while (std::getline(in, line)) {
    ++n;
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    const std::string at = path + ":" + std::to_string(n);
    Change c;
    c.line = n;
    if (format == "bamboo") {
      const auto v = Cells(line);
      if (v.size() != 3 || (v[1] != "add" && v[1] != "remove")) {
        return Status::Invalid(at + ": expected time_ms,add|remove,NAME (Bamboo's format), found '" + line + "'");
      }
      HETSIM_ASSIGN_OR_RETURN(double ms, Num(v[0], at));
      c.time_s = ms / 1e3, c.add = v[1] == "add", c.name = v[2];
      out.push_back(c);
    } else if (format == "parcae") {
      YAML::Node row;
      try {
        row = YAML::Load(line);
      } catch (const YAML::Exception& e) {
        return Status::Invalid(at + ": not a JSON array: " + e.what());
      }
      if (!row.IsSequence() || row.size() < 3 || !row[2]["nodes"]) {
        return Status::Invalid(at + ": expected [time_ms, \"add\"|\"remove\"|\"no-op\", {\"nodes\": [...]}] (Parcae's format)");
      }
      const std::string op = row[1].as<std::string>();
      // "no-op" and "migration" (Parcae re-planning its strategy) change no availability.
      if (op != "add" && op != "remove" && op != "no-op" && op != "migration") {
        return Status::Invalid(at + ": unknown operation '" + op + "' (add, remove, no-op, migration)");
      }
      c.time_s = row[0].as<double>() / 1e3;
      if (row[2]["duration"]) *duration_s = std::max(*duration_s, c.time_s + row[2]["duration"].as<double>() / 1e3);
      for (const auto& node : row[2]["nodes"]) {
        Change one = c;
        one.add = op == "add", one.name = node.as<std::string>();
        if (op == "add" || op == "remove") out.push_back(one);
      }
    } else if (format == "hours-count") {
      const auto v = Cells(line);
      if (v.size() != 2) return Status::Invalid(at + ": expected hours,instances, found '" + line + "'");
      HETSIM_ASSIGN_OR_RETURN(double h, Num(v[0], at));
      HETSIM_ASSIGN_OR_RETURN(double k, Num(v[1], at));
      c.time_s = h * 3600, c.count = static_cast<int>(k);
      out.push_back(c);
    } else if (format == "dated-count") {
      const auto v = Cells(line);
      std::tm tm{};
      if (v.size() != 3 || std::sscanf((v[0] + " " + v[1]).c_str(), "%d-%d-%d %d:%d:%d", &tm.tm_year, &tm.tm_mon,
                                       &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
        return Status::Invalid(at + ": expected YYYY-MM-DD, HH:MM:SS, instances, found '" + line + "'");
      }
      tm.tm_year -= 1900, tm.tm_mon -= 1;
      const double t = static_cast<double>(timegm(&tm));
      if (t0 < 0) t0 = t;
      HETSIM_ASSIGN_OR_RETURN(double k, Num(v[2], at));
      c.time_s = t - t0, c.count = static_cast<int>(k);
      out.push_back(c);
    } else {
      std::string names;
      for (const auto& f : SpotFormats()) names += (names.empty() ? "" : ", ") + f;
      return Status::Invalid("--format: unknown spot trace format '" + format + "' (" + names + ")");
    }
  }
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].time_s < out[i - 1].time_s) {
      return Status::Invalid(path + ":" + std::to_string(out[i].line) + ": time goes backwards");
    }
  }
  if (!out.empty()) *duration_s = std::max(*duration_s, out.back().time_s);
  return out;
}

}  // namespace

const std::vector<std::string>& SpotFormats() {
  static const std::vector<std::string> f = {"bamboo", "parcae", "hours-count", "dated-count", "skypilot"};
  return f;
}

Result<proto::Trace> ConvertSpotTrace(const std::string& path, const models::Cluster& cluster,
                                      const std::string& cluster_ref, const SpotOptions& options) {
  if (std::find(SpotFormats().begin(), SpotFormats().end(), options.format) == SpotFormats().end()) {
    std::string names;
    for (const auto& f : SpotFormats()) names += (names.empty() ? "" : ", ") + f;
    return Status::Invalid("--format: unknown spot trace format '" + options.format + "' (" + names + ")");
  }
  double duration = 0;
  HETSIM_ASSIGN_OR_RETURN(auto changes, ReadChanges(path, options.format, &duration));
  HETSIM_ASSIGN_OR_RETURN(auto events,
                          Assign(changes, static_cast<uint32_t>(cluster.nodes().size()), path, options.notice_s));
  proto::Trace t;
  t.set_kind("trace");
  t.set_name(std::filesystem::path(path).stem().string());
  t.set_description("Spot availability of " + std::filesystem::path(path).filename().string() + " (" + options.format +
                    " format) on " + cluster.spec().name() + ", one node per instance.");
  t.add_sources(path + " (converted by `hetsim trace convert --format " + options.format + "`)");
  t.set_cluster(cluster_ref);
  t.set_duration_s(duration);
  t.set_starts_empty(true);
  for (auto& e : events) *t.add_events() = std::move(e);
  return t;
}

}  // namespace hetsim::traces
