// The advisor's outputs (sim/advise/advise_internal.h): configurations.csv (one row per configuration, the
// figure's input), advice.json, recommendation.md and the summary on stdout.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <ostream>

#include "models/kernels.h"
#include "models/spec_io.h"
#include "sim/advise/advise_internal.h"
#include "sim/runner/runner.h"

namespace hetsim::advise::internal {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string Num(double v) {
  if (std::isinf(v)) return "inf";
  if (std::isnan(v)) return "";
  return Fmt("%.6g", v);
}

std::string Usd(double v) {
  if (!std::isfinite(v)) return "never";
  if (v >= 1e9) return Fmt("$%.2fB", v / 1e9);
  if (v >= 1e6) return Fmt("$%.2fM", v / 1e6);
  if (v >= 1e4) return Fmt("$%.0fk", v / 1e3);
  return Fmt("$%.0f", v);
}

std::string Days(double s) {
  if (!std::isfinite(s)) return "never";
  if (s >= 2 * 86400) return Fmt("%.1f days", s / 86400);
  return Fmt("%.1f h", s / 3600);
}

// The mean of each metric over the recommended configuration's seeds.
std::map<std::string, double> MeanMetrics(const std::string& dir, const ConfigSlot& slot, uint32_t seeds) {
  std::map<std::string, double> mean;
  for (uint32_t s = 0; s < seeds; ++s) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "/points/%07u.pb", slot.first_point + s);
    std::ifstream in(dir + buf, std::ios::binary);
    proto::PointResult r;
    if (!in || !r.ParseFromIstream(&in)) continue;
    for (const auto& m : r.metrics()) mean[m.name()] += m.value() / seeds;
  }
  return mean;
}

// Configurations by status, on the front, meeting the limits.
struct Tally {
  size_t ok = 0, failed = 0, pruned = 0, on_front = 0, feasible = 0;
};

// configurations.csv: one row per configuration.
Status WriteConfigurationsCsv(const Config& c, const std::string& dir, const std::vector<ConfigRow>& rows,
                              Tally* tally) {
  std::string csv =
      "config,label,composition,gpus,planner,policy,checkpoint_interval,spares,seeds,status,reason,time_days_mean,"
      "time_days_min,time_days_max,cost_usd_mean,cost_usd_min,cost_usd_max,time_lb_days,cost_lb_usd,"
      "goodput_fraction_mean,ettr_mean,pareto,feasible,recommended\n";
  for (const auto& r : rows) {
    const Group& g = *r.group;
    const Candidate& cand = c.candidates[g.candidate];
    const bool good = r.status == "ok";
    tally->ok += good;
    tally->failed += r.status == "failed";
    tally->pruned += r.status == "pruned";
    tally->on_front += r.pareto;
    tally->feasible += r.feasible;
    auto val = [&](double v, double scale) { return good ? Num(v / scale) : std::string(); };
    csv += std::to_string(r.config) + "," + runner::CsvCell(ConfigLabel(c, g, *r.slot)) + "," + runner::CsvCell(cand.label) + "," +
           std::to_string(cand.cluster->num_devices()) + "," + runner::CsvCell(c.planners[g.planner].label) + "," +
           runner::CsvCell(PolicyLabel(c, *r.slot)) + "," + runner::CsvCell(c.intervals[r.slot->interval].text) + "," +
           (r.slot->spares >= 0 ? std::to_string(r.slot->spares) : "") + "," + std::to_string(r.seeds_ok) + "," +
           r.status + "," + runner::CsvCell(r.reason) + "," + val(r.time_mean, 86400) + "," + val(r.time_min, 86400) + "," +
           val(r.time_max, 86400) + "," + val(r.cost_mean, 1) + "," + val(r.cost_min, 1) + "," + val(r.cost_max, 1) +
           "," + (r.time_lb >= 0 ? Num(r.time_lb / 86400) : "") + "," + (r.cost_lb >= 0 ? Num(r.cost_lb) : "") + "," +
           (good ? Num(r.goodput_fraction) : "") + "," + (good ? Num(r.ettr) : "") + "," + (r.pareto ? "1" : "0") +
           "," + (r.feasible ? "1" : "0") + "," + (r.recommended ? "1" : "0") + "\n";
  }
  return models::WriteFileAtomically(dir + "/configurations.csv", csv);
}

// "the 30-day deadline and the $1.2M budget", or "".
std::string Limits(const Config& c) {
  std::string limits;
  if (c.spec.has_deadline_days()) limits += Fmt("the %g-day deadline", c.spec.deadline_days());
  if (c.spec.has_budget_usd()) limits += (limits.empty() ? "" : " and ") + ("the " + Usd(c.spec.budget_usd()) + " budget");
  return limits;
}

// Why `r` is recommended: its rank among the feasible configurations, the next best, and the other end of
// the front.
std::string WhyRecommended(const Config& c, const std::vector<ConfigRow>& rows, const ConfigRow& r,
                           const std::string& limits) {
  const bool cheapest = c.objective == "cheapest";
  std::vector<const ConfigRow*> feas;
  for (const auto& x : rows) {
    if (x.feasible) feas.push_back(&x);
  }
  std::sort(feas.begin(), feas.end(), [&](const ConfigRow* a, const ConfigRow* b) {
    return cheapest ? std::make_tuple(a->cost_mean, a->time_mean, a->config) <
                          std::make_tuple(b->cost_mean, b->time_mean, b->config)
                    : std::make_tuple(a->time_mean, a->cost_mean, a->config) <
                          std::make_tuple(b->time_mean, b->cost_mean, b->config);
  });
  feas.erase(std::remove(feas.begin(), feas.end(), &r), feas.end());
  feas.insert(feas.begin(), &r);
  std::string why = std::string(cheapest ? "The cheapest" : "The soonest") + " of " + std::to_string(feas.size()) +
                    " replayed configurations" + (limits.empty() ? "" : " that meet " + limits);
  if (feas.size() > 1) {
    const ConfigRow& n = *feas[1];
    // A relative difference needs a base above zero (a $0 price makes every cost 0): then the absolute one.
    const auto more = [](double next, double best, const char* unit, const char* word) {
      if (best > 0) return Fmt("%.1f%%", 100 * (next / best - 1)) + " " + word;
      return Fmt("%.3g", next - best) + " " + unit + " " + word;
    };
    why += "; the next (" + ConfigLabel(c, *n.group, *n.slot) + ") " +
           (cheapest ? "costs " + more(n.cost_mean, r.cost_mean, "$", "more")
                     : "takes " + more(n.time_mean, r.time_mean, "s", "longer"));
  }
  why += ".";
  const ConfigRow* other = nullptr;
  for (const auto& x : rows) {
    if (!x.pareto) continue;
    if (other == nullptr || (cheapest ? x.time_mean < other->time_mean : x.cost_mean < other->cost_mean)) other = &x;
  }
  if (other != nullptr && other != &r) {
    why += std::string(cheapest ? " The soonest on the front" : " The cheapest on the front") + " is " +
           ConfigLabel(c, *other->group, *other->slot) + ": " + Days(other->time_mean) + " for " +
           Usd(other->cost_mean) + ".";
  }
  return why;
}

// Where the recommended configuration's time goes over a window (its replays' mean metrics).
std::string WhereTimeGoes(const Config& c, const std::string& dir, const ConfigRow& r) {
  const auto mean = MeanMetrics(dir, *r.slot, c.seeds);
  auto m = [&](const char* k) { return mean.count(k) ? mean.at(k) : 0.0; };
  const double window_h = c.window_s / 3600;
  std::string where = Fmt(" Over each %.0f-day window it trains at ", c.window_s / 86400) +
                      Fmt("%.0f%% of its ideal throughput", 100 * m("goodput_fraction")) +
                      Fmt(" (ETTR %.1f%%)", 100 * m("ettr"));
  std::vector<std::pair<double, std::string>> lost;
  for (const auto& [k, name] : std::vector<std::pair<std::string, std::string>>{
           {"wait_h", "waiting for nodes"}, {"lost_work_h", "lost work"}, {"checkpoint_h", "checkpoints"},
           {"restart_h", "restarts"}, {"recover_h", "loading state"}, {"detect_h", "detection"},
           {"replan_h", "re-planning"}}) {
    if (m(k.c_str()) > 0.0005 * window_h) lost.emplace_back(m(k.c_str()), name);
  }
  std::sort(lost.rbegin(), lost.rend());
  if (!lost.empty()) {
    where += "; the rest goes to";
    for (size_t i = 0; i < lost.size() && i < 3; ++i) {
      where += (i ? ", " : " ") + lost[i].second + Fmt(" (%.1f%%)", 100 * lost[i].first / window_h);
    }
  }
  where += Fmt("; %.0f interruptions per window", m("interruptions"));
  if (c.intervals[r.slot->interval].text == "young-daly") {
    where += Fmt(", a checkpoint every %.0f min (Young/Daly for its mean time between interruptions)",
                 m("checkpoint_interval_s") / 60);
  }
  return where + ".";
}

// No configuration meets the limits: say so, and name the nearest miss.
// The GPU types among the candidates whose compute times rest on no measurement under the run's calibration
// (models::ComputeBasisFor): a recommendation that turns on them says so.
std::string BasisCaveat(const Config& c) {
  std::set<std::string> seen, unmeasured;
  for (const Candidate& cand : c.candidates) {
    for (const models::NodeInfo& n : cand.cluster->nodes()) {
      if (n.gpu == nullptr || !seen.insert(n.gpu->name).second) continue;
      if (!models::ComputeBasisFor(*n.gpu, c.calibration, c.training.dtype()).measured()) unmeasured.insert(n.gpu->name);
    }
  }
  if (unmeasured.empty()) return "";
  std::string names;
  for (const auto& n : unmeasured) names += (names.empty() ? "" : ", ") + n;
  return "Compute basis: " + names + (unmeasured.size() == 1 ? " rests" : " rest") +
         " on no measurement under calibration " + (c.calibration.empty() ? "default" : c.calibration) +
         " (generic efficiencies; `hetsim describe --gpu NAME`, docs/calibration.md): " +
         (unmeasured.size() == 1 ? "its times are estimates" : "their times are estimates") +
         ", and so is any choice that turns on them.";
}

std::string NoRecommendation(const Config& c, const std::vector<ConfigRow>& rows, const std::string& limits) {
  const bool cheapest = c.objective == "cheapest";
  const ConfigRow* near = nullptr;
  for (const auto& x : rows) {
    if (x.status != "ok" || !std::isfinite(x.time_mean)) continue;
    if (near == nullptr || (cheapest ? x.time_mean < near->time_mean : x.cost_mean < near->cost_mean)) near = &x;
  }
  std::string summary = "No configuration meets " + (limits.empty() ? std::string("the target (none finishes)") : limits) + ".";
  if (near != nullptr) {
    summary += " The nearest is " + ConfigLabel(c, *near->group, *near->slot) + ": " + Days(near->time_mean) +
               " for " + Usd(near->cost_mean) + ".";
  }
  return summary;
}

// The front's configurations, fastest first.
std::vector<const ConfigRow*> Front(const std::vector<ConfigRow>& rows) {
  std::vector<const ConfigRow*> front;
  for (const auto& x : rows) {
    if (x.pareto) front.push_back(&x);
  }
  std::sort(front.begin(), front.end(), [](const ConfigRow* a, const ConfigRow* b) { return a->time_mean < b->time_mean; });
  return front;
}

// recommendation.md's Pareto table.
std::string FrontTable(const Config& c, const std::vector<const ConfigRow*>& front) {
  std::string md = "## Pareto front (time to train vs cost, mean over seeds)\n\n| configuration | time to train | cost | goodput |\n"
                   "|---|---|---|---|\n";
  for (const auto* x : front) {
    // A label's " | " separators would split the Markdown row: escaped.
    std::string label = ConfigLabel(c, *x->group, *x->slot);
    for (size_t at = label.find('|'); at != std::string::npos; at = label.find('|', at + 2)) label.replace(at, 1, "\\|");
    md += "| " + label + (x->recommended ? " **(recommended)**" : "") + " | " +
          Days(x->time_mean) + " | " + Usd(x->cost_mean) + " | " + Fmt("%.0f%%", 100 * x->goodput_fraction) + " |\n";
  }
  return md;
}

}  // namespace

Status WriteOutputs(const Config& c, const std::string& dir, const std::vector<ConfigRow>& rows, int rec,
                    const std::string& caveat, std::ostream& out) {
  Tally t;
  HETSIM_RETURN_IF_ERROR(WriteConfigurationsCsv(c, dir, rows, &t));

  // The recommendation and why.
  const std::string limits = Limits(c);
  std::string summary, md = "# hetsim advise: " + c.spec.name() + "\n\n";
  md += c.model->name() + " on " + Fmt("%.3g", c.spec.tokens()) + " tokens; objective: " + c.objective +
        (limits.empty() ? "" : " within " + limits) + ". " + std::to_string(rows.size()) + " configurations: " +
        std::to_string(t.ok) + " replayed, " + std::to_string(t.pruned) + " pruned by their bound, " +
        std::to_string(t.failed) + " failed; " + std::to_string(t.on_front) + " on the Pareto front.\n\n";
  if (rec >= 0) {
    const ConfigRow& r = rows[static_cast<size_t>(rec)];
    summary = "Recommended: " + ConfigLabel(c, *r.group, *r.slot) + ": " + Days(r.time_mean) + " (" +
              Days(r.time_min) + " to " + Days(r.time_max) + " over " + std::to_string(c.seeds) + " trace seeds), " +
              Usd(r.cost_mean) + " (" + Usd(r.cost_min) + " to " + Usd(r.cost_max) + ").";
    const std::string why = WhyRecommended(c, rows, r, limits) + WhereTimeGoes(c, dir, r);
    md += "## Recommendation\n\n" + summary + "\n\n" + why + "\n\n";
    summary += " " + why;
  } else {
    summary = NoRecommendation(c, rows, limits);
    md += "## Recommendation\n\n" + summary + "\n\n";
  }
  if (const std::string basis = BasisCaveat(c); !basis.empty()) {
    summary += " " + basis;
    md += basis + "\n\n";
  }
  if (!caveat.empty()) {
    summary = "Partial result: " + caveat + " " + summary;
    md.insert(md.find("\n\n") + 2, "**Partial result**: " + caveat + "\n\n");
  }
  const std::vector<const ConfigRow*> front = Front(rows);
  md += FrontTable(c, front);
  md += "\nEvery configuration: configurations.csv; every replay: results.csv / results.jsonl; figures: pareto.png, "
        "recommended-replay.png.\n";
  HETSIM_RETURN_IF_ERROR(models::WriteFileAtomically(dir + "/recommendation.md", md));

  const std::string caption = "hetsim advise " + c.file + ": " + c.model->name() + ", " + Fmt("%.3g", c.spec.tokens()) +
                              " tokens; " + std::to_string(rows.size()) + " configurations (" + std::to_string(t.pruned) +
                              " pruned), " + std::to_string(c.seeds) + " seeds, " +
                              Fmt("%.0f-day windows", c.window_s / 86400);
  std::string json = "{\"name\": " + runner::JsonString(c.spec.name()) + ", \"model\": " + runner::JsonString(c.model->name()) +
                     ", \"tokens\": " + Num(c.spec.tokens()) + ", \"objective\": " + runner::JsonString(c.objective) +
                     ", \"deadline_days\": " + (c.spec.has_deadline_days() ? Num(c.spec.deadline_days()) : "null") +
                     ", \"budget_usd\": " + (c.spec.has_budget_usd() ? Num(c.spec.budget_usd()) : "null") +
                     ", \"recommended\": " + (rec >= 0 ? std::to_string(rows[static_cast<size_t>(rec)].config) : "null") +
                     ", \"summary\": " + runner::JsonString(summary) + ", \"caption\": " + runner::JsonString(caption) + "}\n";
  HETSIM_RETURN_IF_ERROR(models::WriteFileAtomically(dir + "/advice.json", json));

  // stdout: the front, then the recommendation.
  out << "Pareto front (" << t.on_front << " of " << t.ok << " replayed configurations; " << t.pruned << " pruned, "
      << t.failed << " failed, " << t.feasible << " meet the limits):\n";
  for (const auto* x : front) {
    char cols[64];
    std::snprintf(cols, sizeof(cols), "  %-12s %-10s ", Days(x->time_mean).c_str(), Usd(x->cost_mean).c_str());
    out << cols
        << ConfigLabel(c, *x->group, *x->slot) << (x->recommended ? "  <- recommended" : "") << "\n";
  }
  out << "\n" << summary << "\n\nresults in " << dir << "/ (recommendation.md, configurations.csv, results.csv, "
      << "pareto.png, recommended-replay.png)\n";
  return Status::Ok();
}

}  // namespace hetsim::advise::internal
