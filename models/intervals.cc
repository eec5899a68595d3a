#include "models/intervals.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "models/bundled.h"
#include "models/cluster.h"
#include "models/gpu_catalog.h"
#include "models/plan.h"

namespace hetsim::models {

std::string GpuFamily(const std::string& gpu) {
  if (gpu.starts_with("a100") || gpu.starts_with("a800")) return "a100";
  if (gpu.starts_with("h100") || gpu.starts_with("h800") || gpu.starts_with("h200") || gpu.starts_with("gh200") ||
      gpu.starts_with("h20")) {
    return "hopper";
  }
  return "other";
}

std::string DtypeClass(proto::DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FP8: return "fp8";
    case proto::DTYPE_FP32:
    case proto::DTYPE_TF32: return "32-bit";
    default: return "16-bit";
  }
}

RunClass ClassOf(const proto::Plan& plan, const Cluster& cluster, const proto::Training& training, bool measured,
                 bool moe) {
  RunClass c;
  std::set<std::string> families;
  uint32_t gpus = 0;
  for (const auto& pipe : plan.pipelines()) {
    c.pp = std::max<uint32_t>(c.pp, static_cast<uint32_t>(pipe.stages_size()));
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) {
        ++gpus;
        if (d < cluster.num_devices()) families.insert(GpuFamily(cluster.device(d).gpu->name));
      }
    }
  }
  c.family = families.size() == 1 ? *families.begin() : "mixed";
  c.gpus = std::max<uint32_t>(1, gpus);
  c.dtype = DtypeClass(training.dtype());
  c.zero3 = plan.zero_stage() >= 3;
  c.measured = measured;
  c.moe = moe;
  return c;
}

namespace {

std::string PpBucket(uint32_t pp) { return pp <= 1 ? "PP 1" : pp <= 8 ? "PP 2-8" : "PP 9+"; }
std::string GpusBucket(uint32_t gpus) {
  return gpus <= 8 ? "1-8 GPUs" : gpus <= 64 ? "9-64 GPUs" : gpus <= 512 ? "65-512 GPUs" : "513+ GPUs";
}

// The classes tried, most specific first: each drops one more feature.
struct Level {
  std::function<bool(const RunClass&, const RunClass&)> same;
  std::function<std::string(const RunClass&)> name;
};
const std::vector<Level>& Levels() {
  static const std::vector<Level> levels = [] {
    auto fam = [](const RunClass& a, const RunClass& b) { return a.family == b.family; };
    auto dt = [](const RunClass& a, const RunClass& b) { return a.dtype == b.dtype; };
    auto z3 = [](const RunClass& a, const RunClass& b) { return a.zero3 == b.zero3; };
    auto pp = [](const RunClass& a, const RunClass& b) { return PpBucket(a.pp) == PpBucket(b.pp); };
    auto n = [](const RunClass& a, const RunClass& b) { return GpusBucket(a.gpus) == GpusBucket(b.gpus); };
    auto z3name = [](const RunClass& c) { return std::string(c.zero3 ? "ZeRO-3" : "no ZeRO-3"); };
    std::vector<Level> l;
    l.push_back({[=](const RunClass& a, const RunClass& b) { return fam(a, b) && dt(a, b) && z3(a, b) && pp(a, b) && n(a, b); },
                 [=](const RunClass& c) { return c.family + ", " + c.dtype + ", " + z3name(c) + ", " + PpBucket(c.pp) + ", " + GpusBucket(c.gpus); }});
    l.push_back({[=](const RunClass& a, const RunClass& b) { return fam(a, b) && dt(a, b) && z3(a, b) && pp(a, b); },
                 [=](const RunClass& c) { return c.family + ", " + c.dtype + ", " + z3name(c) + ", " + PpBucket(c.pp); }});
    l.push_back({[=](const RunClass& a, const RunClass& b) { return fam(a, b) && dt(a, b) && z3(a, b); },
                 [=](const RunClass& c) { return c.family + ", " + c.dtype + ", " + z3name(c); }});
    l.push_back({[=](const RunClass& a, const RunClass& b) { return fam(a, b) && dt(a, b); },
                 [](const RunClass& c) { return c.family + ", " + c.dtype; }});
    l.push_back({fam, [](const RunClass& c) { return c.family; }});
    l.push_back({dt, [](const RunClass& c) { return c.dtype; }});
    l.push_back({[](const RunClass&, const RunClass&) { return true; },
                 [](const RunClass&) { return std::string("every validated run"); }});
    return l;
  }();
  return levels;
}

// The value at 1-based rank r of sorted `v`, r clamped to [1, n].
double AtRank(const std::vector<double>& v, double r) {
  const auto n = static_cast<double>(v.size());
  const double k = std::clamp(r, 1.0, n);
  return v[static_cast<size_t>(k) - 1];
}

}  // namespace

PredictionInterval IntervalFrom(const std::vector<Residual>& residuals, const RunClass& c, double level) {
  PredictionInterval out;
  out.level = level;
  for (const auto& lv : Levels()) {
    std::vector<double> ratios;
    std::set<std::string> sets;
    for (const auto& r : residuals) {
      // A run on a type with no measured basis is priced by generic values: its interval comes from runs
      // priced the same way (the outside checks' development halves), a measured one's from measured runs.
      // A mixture of experts draws on MoE runs only, a dense model on dense runs.
      if (r.cls.measured == c.measured && r.cls.moe == c.moe && lv.same(r.cls, c)) {
        ratios.push_back(r.ratio);
        sets.insert(r.set);
      }
    }
    if (ratios.size() < kMinIntervalRuns && &lv != &Levels().back()) continue;
    if (ratios.empty()) break;
    std::sort(ratios.begin(), ratios.end());
    // Ranks of the empirical quantiles among n + 1 slots (a split-conformal interval: a new run of the
    // class falls inside with probability about `level` when the residuals are exchangeable with it).
    const double n1 = static_cast<double>(ratios.size()) + 1;
    out.lo = AtRank(ratios, std::floor((1 - level) / 2 * n1));
    out.hi = AtRank(ratios, std::ceil((1 + level) / 2 * n1));
    out.runs = ratios.size();
    out.like = (c.moe ? "MoE, " : "") + lv.name(c);
    for (const auto& s : sets) out.sets += (out.sets.empty() ? "" : ", ") + s;
    break;
  }
  if (!c.measured) {
    out.caveat = out.runs > 0 ? "a GPU type of this run has no measured basis: the interval comes from runs on types "
                                "without one, whose generic values were this far off"
                              : "a GPU type of this run has no measured basis and no run on such a type is bundled";
  } else if (c.moe) {
    out.caveat = out.runs > 0 ? "a mixture of experts: the interval comes from measured MoE runs only"
                              : "a mixture of experts and no measured MoE run is bundled";
  } else if (c.family == "mixed") {
    out.caveat = "no validated run mixes GPU families";
  }
  return out;
}

Result<std::vector<Residual>> ParseResiduals(const std::string& csv, const std::string& where) {
  std::vector<Residual> out;
  std::istringstream in(csv);
  std::string line;
  int n = 0;
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const auto cells = SplitCsv(line);
    if (header.empty()) {
      header = cells;
      // Optional trailing columns: the GPU types' compute basis (default: measured), then whether the model is
      // a mixture of experts (default: dense).
      std::vector<std::string> want = {"set", "line", "family", "dtype", "zero3", "pp", "gpus", "ratio"};
      if (header != want) want.push_back("measured");
      if (header != want) want.push_back("moe");
      if (header != want) {
        return Status::Invalid(where + ":" + std::to_string(n) +
                               ": expected the columns set,line,family,dtype,zero3,pp,gpus,ratio[,measured[,moe]]");
      }
      continue;
    }
    if (cells.size() != header.size()) {
      return Status::Invalid(where + ":" + std::to_string(n) + ": expected " + std::to_string(header.size()) + " cells");
    }
    Residual r;
    r.set = cells[0];
    r.cls.family = cells[2];
    r.cls.dtype = cells[3];
    r.cls.zero3 = cells[4] == "1";
    char* end = nullptr;
    const double pp = std::strtod(cells[5].c_str(), &end);
    const double gpus = std::strtod(cells[6].c_str(), &end);
    r.ratio = std::strtod(cells[7].c_str(), &end);
    if (!(pp >= 1) || !(gpus >= 1) || !(r.ratio > 0) || !std::isfinite(r.ratio)) {
      return Status::Invalid(where + ":" + std::to_string(n) + ": pp, gpus and ratio must be positive numbers");
    }
    r.cls.pp = static_cast<uint32_t>(pp);
    r.cls.gpus = static_cast<uint32_t>(gpus);
    r.cls.measured = cells.size() < 9 || cells[8] != "0";
    r.cls.moe = cells.size() >= 10 && cells[9] == "1";
    out.push_back(std::move(r));
  }
  return out;
}

const std::vector<Residual>& BundledResiduals() {
  static const std::vector<Residual> residuals = [] {
    auto r = ParseResiduals(std::string(BundledIntervalResidualsCsv()), "models/catalog/intervals.csv");
    return r.ok() ? *r : std::vector<Residual>{};
  }();
  return residuals;
}

PredictionInterval IntervalFor(const RunClass& c, double level) { return IntervalFrom(BundledResiduals(), c, level); }

std::string DescribeInterval(const PredictionInterval& i, double simulated_s) {
  if (i.runs == 0) return "no interval: " + (i.caveat.empty() ? std::string("no validated runs bundled") : i.caveat);
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.0f%% interval %.4g-%.4g s (%zu measured runs like it: %s; %s)", 100 * i.level,
                simulated_s * i.lo, simulated_s * i.hi, i.runs, i.like.c_str(), i.sets.c_str());
  return std::string(buf) + (i.caveat.empty() ? "" : "; " + i.caveat);
}

bool IntervalCoverage::Add(const PredictionInterval& interval, double simulated, double measured) {
  ++runs;
  const bool in = measured >= simulated * interval.lo && measured <= simulated * interval.hi;
  covered += in ? 1 : 0;
  return in;
}

std::string IntervalCoverage::Line() const {
  if (runs == 0) return "no runs";
  char buf[96];
  std::snprintf(buf, sizeof buf, "cover %.1f%% of %zu runs", 100.0 * static_cast<double>(covered) / static_cast<double>(runs), runs);
  return buf;
}

std::string CoverageSummary(const IntervalCoverage& held_out, const IntervalCoverage& all) {
  return "80% intervals (bundled residuals of runs like each, models/catalog/intervals.csv): " + held_out.Line() +
         " of the held-out half, " + all.Line() + " in all (the development halves of the bundled sets are in the table)";
}

}  // namespace hetsim::models
