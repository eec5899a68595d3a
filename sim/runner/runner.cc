#include "sim/runner/runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <charconv>
#include <functional>
#include <thread>

#include "models/child_process.h"
#include "models/plan.h"
#include "models/spec_io.h"
#include "planners/planner.h"
#include "sim/replay.h"
#include "sim/simulator.h"
#include "sim/planning/refine.h"
#include "sim/runner/replay_setup.h"
#include "sim/runner/world.h"

namespace hetsim::runner {
namespace {

namespace fs = std::filesystem;

std::string PointFile(const std::string& dir, uint32_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%07u.pb", index);
  return dir + "/points/" + buf;
}

std::string Num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string Short(const char* fmt, double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// An input column of the point; a name already there (a sweep axis such as `policy` or `trace` that the
// replay also records) keeps one entry, with the later value.
void AddInput(proto::PointResult& r, const std::string& name, const std::string& value, bool numeric = false) {
  proto::PointInput* in = nullptr;
  for (auto& existing : *r.mutable_inputs()) {
    if (existing.name() == name) in = &existing;
  }
  if (in == nullptr) in = r.add_inputs();
  in->set_name(name);
  in->set_value(value);
  in->set_numeric(numeric);
}

void AddMetric(proto::PointResult& r, const std::string& name, double value, bool boolean = false) {
  auto* mt = r.add_metrics();
  mt->set_name(name);
  mt->set_value(value);
  mt->set_boolean(boolean);
}

// A replay point: the plan replayed over the point's trace under its policy (docs/replay.md). Iteration
// times and transfer costs are cached across the points a worker runs.
proto::PointResult ReplayPoint(const Manifest& m, const Point& p, const std::string& dir, const PointSetup& setup,
                               const proto::Plan& plan, const sim::SimOptions& opt, proto::PointResult r) {
  static sim::ReplayCache cache;
  const models::Cluster& cluster = *setup.cluster;
  const models::TransformerModel& model = m.models[p.model];
  AddInput(r, "policy", setup.policy.label().empty() ? setup.policy.name() : setup.policy.label());
  auto trace = LoadReplayTrace(*setup.replay, cluster, m.cluster_names[p.cluster], p.seed, m.file);
  if (!trace.ok()) {
    r.set_status("failed");
    r.set_reason(trace.status().message());
    return r;
  }
  AddInput(r, "trace", trace->name);
  sim::ReplayInputs in;
  in.cluster = &cluster;
  in.model = &model;
  in.training = setup.training;
  in.plan = plan;
  in.trace = std::move(trace->trace);
  in.trace_name = trace->name;
  in.spec = *setup.replay;
  in.policy = setup.policy;
  in.sim = opt;
  in.sim.record_timeline = false;
  in.replan = MakeReplanner(model, setup.training, opt.profiles);
  in.cache = &cache;
  const auto t0 = std::chrono::steady_clock::now();
  auto rep = sim::ReplayRun(in);
  r.set_sim_wall_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (!rep.ok()) {
    // A simulation killed from outside is no result: the point is left for --resume to retry.
    r.set_status(rep.status().code() == Status::Code::kAborted ? "killed" : "failed");
    r.set_reason("replay failed: " + rep.status().message());
    return r;
  }
  r.set_status("ok");
  const double base_iteration = rep->configurations_size() > 0 ? rep->configurations(0).iteration_s() : 0;
  AddMetric(r, "iteration_time_s", base_iteration);
  AddMetric(r, "tokens_per_s", rep->ideal_tokens_per_s());
  AddMetric(r, "ettr", rep->ettr());
  AddMetric(r, "goodput_tokens_per_s", rep->goodput_tokens_per_s());
  AddMetric(r, "goodput_fraction",
            rep->ideal_tokens_per_s() > 0 ? rep->goodput_tokens_per_s() / rep->ideal_tokens_per_s() : 0);
  AddMetric(r, "tokens", rep->tokens());
  AddMetric(r, "interruptions", rep->interruptions());
  AddMetric(r, "checkpoint_interval_s", rep->checkpoint_interval_s());
  std::map<std::string, double> down;
  for (const auto& d : rep->downtime()) down[d.cause()] = d.seconds() / 3600;
  AddMetric(r, "checkpoint_h", down["checkpoint"]);
  AddMetric(r, "lost_work_h", down["lost work"]);
  for (const char* phase : {"detect", "replan", "wait", "restart", "recover"}) {
    AddMetric(r, std::string(phase) + "_h", down[phase]);
  }
  AddMetric(r, "downtime_h", rep->downtime_s() / 3600);
  AddMetric(r, "gpu_hours", rep->gpu_hours());
  AddMetric(r, "cost_usd", rep->cost_usd());
  AddMetric(r, "configurations", rep->configurations_size());
  fs::create_directories(dir + "/replays");
  const std::string rel = "replays/point-" + std::to_string(p.index) + ".json";
  const Status written = models::WriteFileAtomically(
      dir + "/" + rel, [&](const models::PieceSink& put) { return sim::WriteReplayReportJson(*rep, put); });
  if (written.ok()) r.set_replay_file(rel);
  return r;
}

// Plans (or loads) and simulates one point.
proto::PointResult RunPoint(const Manifest& m, const Point& p, const std::string& dir, bool want_timeline) {
  proto::PointResult r;
  r.set_point(p.index);
  r.set_id(p.id);
  const auto& planner = m.planners[p.planner];
  AddInput(r, "cluster", m.cluster_names[p.cluster]);
  AddInput(r, "model", m.models[p.model].name());
  AddInput(r, "planner", planner.name);
  AddInput(r, "planner_label", planner.label);
  auto setup = SetupPoint(m, p);
  if (setup.ok()) {
    AddInput(r, "global_batch_size", std::to_string(setup->training.global_batch_size()), true);
    AddInput(r, "seq_len", std::to_string(setup->training.seq_len()), true);
    AddInput(r, "gpus", std::to_string(setup->cluster->num_devices()), true);
  }
  AddInput(r, "repeat", std::to_string(p.repeat), true);
  AddInput(r, "seed", std::to_string(p.seed), true);
  for (const auto& [name, v] : p.axes) {
    double num = 0;
    const auto res = std::from_chars(v.data(), v.data() + v.size(), num);
    AddInput(r, name, v, res.ec == std::errc() && res.ptr == v.data() + v.size());
  }
  auto fail = [&](const std::string& why) {
    r.set_status("failed");
    r.set_reason(why);
    return r;
  };
  if (!setup.ok()) return fail(setup.status().message());
  const models::Cluster& cluster = *setup->cluster;
  const models::TransformerModel& model = m.models[p.model];
  models::PlanContext ctx{cluster, model, setup->training};

  proto::Plan plan;
  double estimate = 0;
  uint64_t candidates = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (planner.plan) {
    plan = *planner.plan;
    const Status st = models::ValidatePlanStructure(plan, ctx, "plan " + planner.label);
    if (!st.ok()) return fail(st.message());
  } else {
    auto pl = planners::CreatePlanner(planner.name, planner.options, m.file);
    if (!pl.ok()) return fail(pl.status().message());
    models::ComputeOptions compute;
    compute.calibration = m.calibration;
    planners::PlanningProblem problem{cluster, model, setup->training, m.profiles.empty() ? nullptr : &m.profiles,
                                      compute};
    planning::RefineOptions refine;
    refine.k = planner.refine;
    refine.polish = planner.polish;
    refine.sim.fidelity = setup->fidelity;
    planning::RefineOutcome checked;
    auto res = planning::PlanOnTwin(**pl, problem, refine, &checked);
    if (!res.ok()) return fail("no feasible plan: " + res.status().message());
    plan = res->plan;
    estimate = res->estimate.iteration_s;
    candidates = res->stats.candidates_evaluated;
    if (!checked.candidates.empty()) {
      const auto& pick = checked.candidates.front();
      AddMetric(r, "refine_candidates", static_cast<double>(checked.candidates.size()));
      AddMetric(r, "refine_chosen_rank", checked.candidates[checked.chosen].rank);
      if (pick.error.empty()) AddMetric(r, "refine_pick_iteration_s", pick.simulated_s);
    }
  }
  r.set_plan_search_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  sim::SimOptions opt;
  opt.fidelity = setup->fidelity;
  opt.profiles = m.profiles.empty() ? nullptr : &m.profiles;
  opt.compute_jitter_cv = m.spec.simulation().compute_jitter_cv();
  // The manifest's simulation.calibration, else a fixed plan's own (its software stack).
  opt.compute.calibration =
      m.calibration.empty() && planner.plan && !plan.calibration().empty() ? plan.calibration() : m.calibration;
  opt.seed = p.seed;
  opt.record_timeline = want_timeline;
  if (want_timeline) opt.timeline_devices = sim::DefaultTimelineDevices(plan, cluster);
  if (setup->replay) return ReplayPoint(m, p, dir, *setup, plan, opt, std::move(r));
  auto sim = sim::SimulateIteration(plan, ctx, opt);
  if (!sim.ok()) {
    fail("simulation failed: " + sim.status().message());
    // A simulation killed from outside is no result: the point is left for --resume to retry.
    if (sim.status().code() == Status::Code::kAborted) r.set_status("killed");
    return r;
  }
  const auto& rep = sim->report;
  r.set_sim_wall_s(rep.wall_time_s());
  double n = std::max(1, rep.devices_size());
  double comp = 0, tp = 0, pp = 0, dp = 0, idle = 0, mem = 0;
  uint32_t stages_max = 0;
  std::string oom_device;
  for (const auto& d : rep.devices()) {
    comp += d.compute_s();
    tp += d.tp_communication_s();
    pp += d.pp_communication_s();
    dp += d.dp_communication_s();
    idle += d.idle_s();
    mem = std::max(mem, d.peak_memory_gib());
    stages_max = std::max(stages_max, d.stage() + 1);
    if (d.oom() && oom_device.empty()) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "device %u (%s) needs %.1f of %.0f GiB", d.device(), d.gpu().c_str(),
                    d.peak_memory_gib(), d.capacity_gib());
      oom_device = buf;
    }
  }
  r.set_status("ok");
  AddMetric(r, "iteration_time_s", rep.iteration_time_s());
  AddMetric(r, "tokens_per_s", rep.tokens_per_s());
  AddMetric(r, "tokens_per_gpu_s", rep.tokens_per_s() / std::max(1, rep.devices_size()));
  AddMetric(r, "mfu", rep.mfu());
  AddMetric(r, "bubble_fraction", rep.bubble_fraction());
  AddMetric(r, "time_compute_s", comp / n);
  AddMetric(r, "time_tp_s", tp / n);
  AddMetric(r, "time_pp_s", pp / n);
  AddMetric(r, "time_dp_s", dp / n);
  AddMetric(r, "time_idle_s", idle / n);
  AddMetric(r, "peak_memory_gib", mem);
  AddMetric(r, "any_oom", rep.any_oom() ? 1 : 0, true);
  if (!planner.plan) {
    AddMetric(r, "estimated_iteration_s", estimate);
    AddMetric(r, "candidates", static_cast<double>(candidates));
  }
  AddMetric(r, "pipelines", plan.pipelines_size());
  AddMetric(r, "stages_max", stages_max);
  if (rep.any_oom()) {
    // Simulated anyway (the metrics are kept), but such a plan would not run.
    r.set_status("failed");
    r.set_reason("out of memory: " + oom_device);
  }
  if (want_timeline) {
    fs::create_directories(dir + "/timelines");
    const std::string rel = "timelines/point-" + std::to_string(p.index) + ".json";
    if (models::WriteFileAtomically(dir + "/" + rel, sim::ChromeTraceJson(*sim, cluster)).ok()) r.set_timeline_file(rel);
  }
  return r;
}

// Whether a figure's filter selects the point.
bool PointMatches(const Manifest& m, const Point& p, const proto::Figure& f) {
  bool match = true;
  for (const auto& [k, v] : f.filter()) {
    std::string have;
    if (k == "cluster") have = m.cluster_names[p.cluster];
    else if (k == "model") have = m.models[p.model].name();
    else if (k == "planner") have = m.planners[p.planner].name;
    else if (k == "planner_label") have = m.planners[p.planner].label;
    else if (k == "repeat") have = std::to_string(p.repeat);
    for (const auto& [an, av] : p.axes) {
      if (an == k) have = av;
    }
    match &= have == v;
  }
  return match;
}

// The first point a timeline figure's filter selects, or -1.
int TimelinePointOf(const Manifest& m, const proto::Figure& f) {
  for (const auto& p : m.points) {
    if (PointMatches(m, p, f)) return static_cast<int>(p.index);
  }
  return -1;
}

// Points a timeline figure asks for.
std::set<uint32_t> TimelinePoints(const Manifest& m) {
  std::set<uint32_t> want;
  for (const auto& f : m.spec.figures()) {
    if (f.kind() != proto::Figure::KIND_TIMELINE) continue;
    const int idx = TimelinePointOf(m, f);
    if (idx >= 0) want.insert(static_cast<uint32_t>(idx));
  }
  return want;
}

bool PointDone(const std::string& dir, const Point& p) {
  std::ifstream in(PointFile(dir, p.index), std::ios::binary);
  proto::PointResult r;
  return in && r.ParseFromIstream(&in) && r.id() == p.id;
}

// Progress on stderr: a bar redrawn in place on a terminal, a line every 10% otherwise.
class Progress {
 public:
  Progress(std::ostream& err, size_t total, bool enabled)
      : err_(err), total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO)), t0_(std::chrono::steady_clock::now()) {}
  void Update(size_t done, size_t failed, size_t skipped) {
    if (!enabled_ || total_ == 0 || done == last_done_) return;
    last_done_ = done;
    const double frac = static_cast<double>(done) / total_;
    const int decile = static_cast<int>(frac * 10);
    if (!tty_ && decile == last_decile_ && done != total_) return;
    last_decile_ = decile;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const size_t fresh = done > skipped ? done - skipped : 0;
    const double eta = fresh > 0 ? elapsed / fresh * (total_ - done) : 0;
    char bar[41];
    const int filled = static_cast<int>(frac * 40);
    for (int i = 0; i < 40; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[40] = 0;
    char line[200];
    std::snprintf(line, sizeof(line), "[%s] %zu/%zu points, %zu failed, elapsed %.0fs, ETA %.0fs", bar, done, total_,
                  failed, elapsed, eta);
    err_ << (tty_ ? "\r" : "") << line << (tty_ && done != total_ ? "" : "\n") << std::flush;
  }

 private:
  std::ostream& err_;
  size_t total_;
  bool enabled_, tty_;
  int last_decile_ = -1;
  size_t last_done_ = SIZE_MAX;
  std::chrono::steady_clock::time_point t0_;
};

size_t CountFiles(const std::string& dir, size_t* failed) {
  size_t n = 0;
  *failed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir + "/points", ec)) {
    if (e.path().extension() != ".pb") continue;
    ++n;
    std::ifstream in(e.path(), std::ios::binary);
    proto::PointResult r;
    if (in && r.ParseFromIstream(&in) && r.status() != "ok") ++*failed;
  }
  return n;
}

// Runs the points with index % shards == shard that are not done yet.
void RunShard(const Manifest& m, const std::string& dir, int shard, int shards, bool resume,
              const std::set<uint32_t>& timelines, const std::function<void()>& after_each) {
  for (const auto& p : m.points) {
    if (static_cast<int>(p.index % static_cast<uint32_t>(shards)) != shard) continue;
    if (resume && PointDone(dir, p)) continue;
    const proto::PointResult r = RunPoint(m, p, dir, timelines.count(p.index) > 0);
    if (r.status() == "killed") {
      // Not written: the run ends with this point missing (non-zero exit) and --resume retries it.
      std::fprintf(stderr, "\nhetsim run: point %zu: %s; it has no result (rerun with --resume to retry it)\n",
                   static_cast<size_t>(p.index), r.reason().c_str());
      if (after_each) after_each();
      continue;
    }
    (void)models::WriteFileAtomically(PointFile(dir, p.index), r.SerializeAsString());
    if (after_each) after_each();
  }
}

std::string FindPlotScript() {
  if (const char* env = std::getenv("HETSIM_PLOT")) return env;
  return models::PlotDir() + "/figures.py";
}

Status WriteFiguresJson(const Manifest& m, const std::string& dir) {
  std::ostringstream o;
  o << "{\"experiment\": " << JsonString(m.spec.name()) << ", \"manifest\": " << JsonString(m.file)
    << ", \"caption\": "
    << JsonString("hetsim run " + m.file + " - " + std::to_string(m.points.size()) + " points, fidelity " +
                  m.fidelity_name + (m.spec.repeats() > 1 ? ", " + std::to_string(m.spec.repeats()) + " repeats" : ""))
    << ", \"figures\": [";
  std::map<uint32_t, std::string> timeline_of, replay_of;
  for (const auto& e : fs::directory_iterator(dir + "/points")) {
    std::ifstream in(e.path(), std::ios::binary);
    proto::PointResult r;
    if (in && r.ParseFromIstream(&in) && !r.timeline_file().empty()) timeline_of[r.point()] = r.timeline_file();
    if (!r.replay_file().empty()) replay_of[r.point()] = r.replay_file();
  }
  for (int i = 0; i < m.spec.figures_size(); ++i) {
    const auto& f = m.spec.figures(i);
    static const char* kKinds[] = {"", "bar", "grouped_bar", "line", "stacked", "timeline", "replay"};
    std::string timeline;
    if (f.kind() == proto::Figure::KIND_TIMELINE) {
      const int idx = TimelinePointOf(m, f);
      if (idx >= 0 && timeline_of.count(static_cast<uint32_t>(idx))) timeline = timeline_of[static_cast<uint32_t>(idx)];
    }
    o << (i ? ", " : "") << "{\"name\": " << JsonString(f.name()) << ", \"kind\": " << JsonString(kKinds[f.kind()])
      << ", \"x\": " << JsonString(f.x()) << ", \"y\": " << JsonString(f.y()) << ", \"y_stack\": [";
    for (int k = 0; k < f.y_stack_size(); ++k) o << (k ? ", " : "") << JsonString(f.y_stack(k));
    o << "], \"group\": " << JsonString(f.group().empty() ? "planner_label" : f.group())
      << ", \"title\": " << JsonString(f.title()) << ", \"xlabel\": " << JsonString(f.xlabel())
      << ", \"ylabel\": " << JsonString(f.ylabel()) << ", \"logx\": " << (f.logx() ? "true" : "false")
      << ", \"logy\": " << (f.logy() ? "true" : "false") << ", \"filter\": {";
    std::map<std::string, std::string> filt(f.filter().begin(), f.filter().end());
    bool first = true;
    for (const auto& [k, v] : filt) {
      o << (first ? "" : ", ") << JsonString(k) << ": " << JsonString(v);
      first = false;
    }
    o << "}, \"timeline\": " << JsonString(timeline);
    if (f.kind() == proto::Figure::KIND_REPLAY) {
      o << ", \"replays\": [";
      bool first_file = true;
      for (const auto& p : m.points) {
        if (!PointMatches(m, p, f) || !replay_of.count(p.index)) continue;
        o << (first_file ? "" : ", ") << JsonString(replay_of[p.index]);
        first_file = false;
      }
      o << "]";
    }
    o << "}";
  }
  o << "]}\n";
  return models::WriteFileAtomically(dir + "/figures.json", o.str());
}

void PrintSummary(const std::string& dir, const Manifest& m, std::ostream& out) {
  std::vector<proto::PointResult> rows;
  for (const auto& p : m.points) {
    std::ifstream in(PointFile(dir, p.index), std::ios::binary);
    proto::PointResult r;
    if (in && r.ParseFromIstream(&in)) rows.push_back(std::move(r));
  }
  std::vector<std::string> axis_cols;
  for (const auto& ax : m.spec.sweep()) {
    if (ax.name() != "cluster" && ax.name() != "model" && ax.name() != "planner") axis_cols.push_back(ax.name());
  }
  const bool replay = m.spec.has_replay();
  if (replay && std::find(axis_cols.begin(), axis_cols.end(), "policy") == axis_cols.end()) {
    axis_cols.insert(axis_cols.begin(), "policy");
  }
  char line[512];
  std::string head = "  point  cluster                     model          planner        ";
  for (const auto& a : axis_cols) head += a.substr(0, 14) + std::string(a.size() < 15 ? 15 - std::min<size_t>(a.size(), 14) : 1, ' ');
  out << head << (replay ? "ETTR %       goodput %    down h  status\n" : "iteration s  tokens/s     MFU %   status\n");
  size_t shown = 0, failed = 0;
  for (const auto& r : rows) {
    if (r.status() != "ok") ++failed;
    if (shown++ >= 60) continue;
    std::map<std::string, std::string> in;
    for (const auto& i : r.inputs()) in[i.name()] = i.value();
    std::map<std::string, double> mt;
    for (const auto& x : r.metrics()) mt[x.name()] = x.value();
    std::string axes;
    for (const auto& a : axis_cols) {
      std::snprintf(line, sizeof(line), "%-15s", in[a].substr(0, 14).c_str());
      axes += line;
    }
    auto col = [&](const char* metric, const char* fmt, double scale) {
      return mt.count(metric) ? Short(fmt, scale * mt[metric]) : std::string("-");
    };
    const std::string c1 = replay ? col("ettr", "%.1f", 100) : col("iteration_time_s", "%.4g", 1);
    const std::string c2 = replay ? col("goodput_fraction", "%.1f", 100) : col("tokens_per_s", "%.0f", 1);
    const std::string c3 = replay ? col("downtime_h", "%.1f", 1) : col("mfu", "%.1f", 100);
    std::snprintf(line, sizeof(line), "  %-6u %-27s %-14s %-14s %s%-12s %-12s %-7s %s\n", r.point(),
                  in["cluster"].substr(0, 27).c_str(), in["model"].substr(0, 14).c_str(),
                  in["planner_label"].substr(0, 14).c_str(), axes.c_str(), c1.c_str(), c2.c_str(), c3.c_str(),
                  r.status() == "ok" ? "ok" : ("FAILED: " + r.reason().substr(0, 70)).c_str());
    out << line;
  }
  if (rows.size() > 60) out << "  … " << rows.size() - 60 << " more rows in results.csv\n";
  out << "\n" << rows.size() << " points, " << failed << " failed; results in " << dir << "/results.{jsonl,csv}\n";
}

}  // namespace

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

Status MergeResults(const std::string& dir, size_t expected_points) {
  std::vector<proto::PointResult> rows;
  for (size_t i = 0; i < expected_points; ++i) {
    std::ifstream in(PointFile(dir, static_cast<uint32_t>(i)), std::ios::binary);
    proto::PointResult r;
    if (in && r.ParseFromIstream(&in)) rows.push_back(std::move(r));
  }
  std::vector<std::string> in_cols, metric_cols;
  for (const auto& r : rows) {
    for (const auto& i : r.inputs()) {
      if (std::find(in_cols.begin(), in_cols.end(), i.name()) == in_cols.end()) in_cols.push_back(i.name());
    }
    for (const auto& mt : r.metrics()) {
      if (std::find(metric_cols.begin(), metric_cols.end(), mt.name()) == metric_cols.end()) metric_cols.push_back(mt.name());
    }
  }
  std::string jsonl, csv = "point,id,status,reason";
  for (const auto& c : in_cols) csv += "," + CsvCell(c);
  for (const auto& c : metric_cols) csv += "," + CsvCell(c);
  csv += "\n";
  for (const auto& r : rows) {
    jsonl += "{\"point\": " + std::to_string(r.point()) + ", \"id\": " + JsonString(r.id()) +
             ", \"status\": " + JsonString(r.status()) + ", \"reason\": " + JsonString(r.reason()) + ", \"inputs\": {";
    std::map<std::string, std::string> in_vals, mt_vals;
    for (int i = 0; i < r.inputs_size(); ++i) {
      const auto& x = r.inputs(i);
      jsonl += (i ? ", " : "") + JsonString(x.name()) + ": " + (x.numeric() ? x.value() : JsonString(x.value()));
      in_vals[x.name()] = x.value();
    }
    jsonl += "}, \"metrics\": {";
    for (int i = 0; i < r.metrics_size(); ++i) {
      const auto& x = r.metrics(i);
      const std::string v = x.boolean() ? (x.value() != 0 ? "true" : "false") : Num(x.value());
      jsonl += (i ? ", " : "") + JsonString(x.name()) + ": " + v;
      mt_vals[x.name()] = v;
    }
    jsonl += "}}\n";
    csv += std::to_string(r.point()) + "," + r.id() + "," + r.status() + "," + CsvCell(r.reason());
    for (const auto& c : in_cols) csv += "," + CsvCell(in_vals.count(c) ? in_vals[c] : "");
    for (const auto& c : metric_cols) csv += "," + (mt_vals.count(c) ? mt_vals[c] : "");
    csv += "\n";
  }
  HETSIM_RETURN_IF_ERROR(models::WriteFileAtomically(dir + "/results.jsonl", jsonl));
  return models::WriteFileAtomically(dir + "/results.csv", csv);
}

Status RunExperiment(const Manifest& m, const RunOptions& options, std::ostream& out, std::ostream& err) {
  const World& world = World::Get();
  const std::string dir = options.out_dir.empty() ? "out/" + m.spec.name() : options.out_dir;
  std::error_code ec;
  fs::create_directories(dir + "/points", ec);
  if (ec) return Status::IoError(dir + ": cannot create the results folder: " + ec.message());
  // Workers each own the points with index % workers == worker; without --resume each clears its own.
  const int workers = world.distributed() ? world.size() : std::max(1, options.jobs);
  if (!options.resume) {
    for (const auto& p : m.points) {
      if (!world.distributed() || static_cast<int>(p.index % static_cast<uint32_t>(world.size())) == world.rank()) {
        fs::remove(PointFile(dir, p.index), ec);
      }
    }
  }
  const auto timelines = TimelinePoints(m);
  const size_t total = m.points.size();
  size_t already = 0;
  if (options.resume) {
    // A point file whose id differs was computed from other inputs (an edited manifest, cluster, plan,
    // profile or trace): it is removed and computed again.
    size_t stale = 0;
    for (const auto& p : m.points) {
      std::ifstream in(PointFile(dir, p.index), std::ios::binary);
      proto::PointResult r;
      if (!in || !r.ParseFromIstream(&in)) continue;
      if (r.id() == p.id) {
        ++already;
      } else if (!world.distributed() || static_cast<int>(p.index % static_cast<uint32_t>(world.size())) == world.rank()) {
        in.close();
        fs::remove(PointFile(dir, p.index), ec);
        ++stale;
      }
    }
    if (world.rank() == 0 && options.progress) {
      err << "resuming: " << already << " of " << total << " points already done";
      if (stale > 0) err << "; " << stale << " points' inputs changed since they ran (computed again)";
      err << "\n";
    }
  }
  Progress progress(err, total, options.progress && world.rank() == 0);
  if (world.distributed()) {
    // Every rank runs its share; rank 0 reports progress as point files appear, then merges.
    RunShard(m, dir, world.rank(), world.size(), options.resume, timelines, [&] {
      if (world.rank() != 0) return;
      size_t failed = 0;
      const size_t done = CountFiles(dir, &failed);
      progress.Update(done, failed, already);
    });
    HETSIM_RETURN_IF_ERROR(world.MarkDone(dir));
    if (world.rank() != 0) return Status::Ok();
    world.WaitForAll(dir);
  } else if (workers > 1) {
    std::fflush(nullptr);
    std::vector<pid_t> pids;
    const pid_t parent = ::getpid();
    for (int w = 0; w < workers; ++w) {
      const pid_t pid = ::fork();
      if (pid < 0) return Status::Internal("hetsim run: fork() failed");
      if (pid == 0) {
        models::TieToParent(parent);
        RunShard(m, dir, w, workers, options.resume, timelines, nullptr);
        ::_exit(0);
      }
      pids.push_back(pid);
    }
    size_t running = pids.size();
    while (running > 0) {
      int status = 0;
      const pid_t done_pid = ::waitpid(-1, &status, WNOHANG);
      if (done_pid > 0) {
        --running;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          err << "hetsim run: a worker process ended abnormally; its unfinished points are missing (rerun with --resume)\n";
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      size_t failed = 0;
      progress.Update(CountFiles(dir, &failed), failed, already);
    }
  } else {
    RunShard(m, dir, 0, 1, options.resume, timelines, [&] {
      size_t failed = 0;
      progress.Update(CountFiles(dir, &failed), failed, already);
    });
  }
  size_t failed = 0;
  const size_t done = CountFiles(dir, &failed);
  progress.Update(done, failed, already);
  HETSIM_RETURN_IF_ERROR(MergeResults(dir, total));
  HETSIM_RETURN_IF_ERROR(WriteFiguresJson(m, dir));
  PrintSummary(dir, m, out);
  if (options.figures && m.spec.figures_size() > 0) {
    // No shell: the folder's name (from the manifest's name or -o) is one argument, whatever it contains.
    const std::vector<std::string> argv = {"/usr/bin/python3", FindPlotScript(), dir};
    auto rc = models::RunProgram(argv);
    if (!rc.ok() || *rc != 0) {
      err << "warning: drawing the figures failed (/usr/bin/python3 " << argv[1] << " " << dir << ")\n";
    }
  }
  if (done < total) {
    return Status::Invalid("hetsim run: " + std::to_string(total - done) + " of " + std::to_string(total) +
                           " points have no result (a worker was killed or stopped); the others are in " + dir +
                           "; run again with --resume to compute the missing ones");
  }
  return Status::Ok();
}

}  // namespace hetsim::runner
