#include "sim/runner/manifest.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <filesystem>
#include <set>

#include "models/kernels.h"
#include "models/spec_io.h"
#include "models/suggest.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/planner.h"
#include "sim/simulator.h"
#include "sim/planning/refine.h"
#include "sim/runner/replay_setup.h"
#include "traces/trace.h"

namespace hetsim::runner {
namespace {

// Resolves a reference written in a manifest: against the manifest's folder, never the current one.
std::string Relative(const std::string& ref, const std::string& manifest) {
  return models::ResolveRelative(ref, manifest);
}

bool ParsePositive(const std::string& s, double* v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && *v > 0;
}

// FNV-1a, for stable point ids.
// A message's bytes with deterministic serialization (map order fixed): for hashing.
std::string Canonical(const google::protobuf::Message& msg) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream sos(&out);
    google::protobuf::io::CodedOutputStream cos(&sos);
    cos.SetSerializationDeterministic(true);
    msg.SerializeToCodedStream(&cos);
  }
  return out;
}

// A file's bytes, or "" when it cannot be read (a bundled name).
std::string FileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  return text.str();
}


const std::vector<std::string>& MetricNames() {
  static const std::vector<std::string> names = {
      "iteration_time_s", "tokens_per_s", "tokens_per_gpu_s", "mfu", "bubble_fraction", "time_compute_s", "time_tp_s", "time_pp_s",
      "time_dp_s", "time_idle_s", "peak_memory_gib", "any_oom", "estimated_iteration_s", "candidates", "pipelines",
      "stages_max",
      // replay points (docs/replay.md)
      "ettr", "goodput_tokens_per_s", "goodput_fraction", "tokens", "interruptions", "checkpoint_interval_s",
      "checkpoint_h", "lost_work_h", "detect_h", "replan_h", "wait_h", "restart_h", "recover_h", "downtime_h",
      "gpu_hours", "cost_usd", "configurations"};
  return names;
}

// The largest value an axis takes (the schema's bound of the field it sets), or 0 when unbounded here.
double AxisMaximum(const std::string& axis) {
  if (axis == "global_batch_size") return 16777216;
  if (axis == "seq_len") return 1048576;
  if (axis.ends_with("_gbps")) return 1e7;
  if (axis == "oversubscription") return 1000;
  if (axis == "spares") return 1e6;
  if (axis == "detection_s" || axis == "restart_s") return 1e7;
  if (axis == "checkpoint_interval") return 1e9;
  if (axis == "trace_rate_scale") return 1000;
  return 0;
}

std::string FormatLimit(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  return buf;
}

bool IsReplayAxis(const std::string& name) {
  return name == "policy" || name == "trace" || name == "checkpoint_interval" || name == "spares" ||
         name == "detection_s" || name == "restart_s" || name == "trace_rate_scale";
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!line.empty()) lines.push_back(line);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

}  // namespace

uint64_t Fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

const std::vector<std::string>& SweepAxisNames() {
  static const std::vector<std::string> names = {"cluster",         "model",        "planner",
                                                 "global_batch_size", "seq_len",    "recompute",
                                                 "dtype",           "nic_bandwidth_gbps", "zone_link_bandwidth_gbps",
                                                 "oversubscription", "fidelity",
                                                 // replay (docs/replay.md)
                                                 "policy", "trace", "checkpoint_interval", "spares", "detection_s",
                                                 "restart_s", "trace_rate_scale"};
  return names;
}

namespace {

// ---- LoadManifest's sections, in the order it runs them (each adds what it finds wrong to `errors`) ----

// The clusters and models the manifest names or holds inline; `cluster_gpus` gets each cluster's device count.
void LoadSpecs(Manifest& m, std::vector<uint32_t>& cluster_gpus, ErrorList& errors) {
  const auto& e = m.spec;
  const std::string at = m.file + ": ";
  for (int i = 0; i < e.clusters_size(); ++i) {
    const std::string ref = Relative(e.clusters(i), m.file);
    auto text = models::ReadSpec(models::SpecKind::kCluster, ref);
    proto::Cluster c;
    Status st = text.ok() ? models::ParseSpec(*text, models::SpecKind::kCluster, &c) : text.status();
    if (st.ok()) {
      auto built = models::Cluster::Build(c, text->file);
      st = built.status();
      if (built.ok()) cluster_gpus.push_back(built->num_devices());
    }
    if (!st.ok()) {
      errors.Add(at + "clusters[" + std::to_string(i) + "]: " + st.message());
      continue;
    }
    m.cluster_names.push_back(c.name());
    m.cluster_files.push_back(text->file);
    m.clusters.push_back(std::move(c));
  }
  for (int i = 0; i < e.inline_clusters_size(); ++i) {
    auto built = models::Cluster::Build(e.inline_clusters(i), m.file + " inline_clusters[" + std::to_string(i) + "]");
    if (!built.ok()) {
      errors.Add(built.status());
      continue;
    }
    cluster_gpus.push_back(built->num_devices());
    m.cluster_names.push_back(e.inline_clusters(i).name());
    m.cluster_files.push_back(m.file);
    m.clusters.push_back(e.inline_clusters(i));
  }
  if (m.clusters.empty() && errors.empty()) errors.Add(at + "clusters: name at least one cluster");
  for (int i = 0; i < e.models_size(); ++i) {
    auto model = models::LoadModel(Relative(e.models(i), m.file));
    if (!model.ok()) {
      errors.Add(at + "models[" + std::to_string(i) + "]: " + model.status().message());
      continue;
    }
    m.models.push_back(std::move(model).value());
  }
  for (int i = 0; i < e.inline_models_size(); ++i) {
    auto model = models::TransformerModel::Build(e.inline_models(i), m.file + " inline_models[" + std::to_string(i) + "]");
    if (!model.ok()) {
      errors.Add(model.status());
      continue;
    }
    m.models.push_back(std::move(model).value());
  }
  if (m.models.empty() && errors.empty()) errors.Add(at + "models: name at least one model");

}

// The planners (a fixed plan file's calibration resolved and checked now).
void LoadPlanners(Manifest& m, ErrorList& errors) {
  const auto& e = m.spec;
  const std::string at = m.file + ": ";
  std::set<std::string> labels;
  for (int i = 0; i < e.planners_size(); ++i) {
    const auto& pe = e.planners(i);
    const std::string ppath = "planners[" + std::to_string(i) + "]";
    const auto named = PlannerEntryName(pe);
    if (!named.ok()) {
      errors.Add(at + ppath + (pe.python().empty() ? ".name: " : ".python: ") + named.status().message());
      continue;
    }
    const std::string& name = *named;
    const std::string default_label = pe.python().empty() ? name : pe.python();
    PlannerChoice choice{pe.label().empty() ? default_label : pe.label(), name, pe.options(), std::nullopt,
                         pe.has_refine() ? pe.refine() : planning::kAutoRefine, pe.polish()};
    if (!labels.insert(choice.label).second) {
      errors.Add(at + ppath + ".label: '" + choice.label + "' names two planners; give each its own label");
    }
    if (pe.name() == "plan") {
      if (pe.has_refine()) errors.Add(at + ppath + ".refine: a fixed plan is simulated as is; remove refine");
      if (pe.polish() > 0) errors.Add(at + ppath + ".polish: a fixed plan is simulated as is; remove polish");
      if (pe.plan().empty()) {
        errors.Add(at + ppath + ".plan: name 'plan' simulates a fixed plan file; give its path");
        continue;
      }
      auto plan = models::LoadPlan(Relative(pe.plan(), m.file));
      if (!plan.ok()) {
        errors.Add(at + ppath + ".plan: " + plan.status().message());
        continue;
      }
      // A plan naming its software stack's calibration: resolved here, checked before any point runs.
      if (!plan->calibration().empty()) {
        const std::string file = Relative(pe.plan(), m.file);
        plan->set_calibration(models::ResolveRelative(plan->calibration(), file));
        if (Status c = models::CheckKernelCalibration(plan->calibration(), file + ": calibration"); !c.ok()) {
          errors.Add(at + ppath + ".plan: " + c.message());
        }
      }
      choice.plan = std::move(plan).value();
    } else {
      if (!pe.plan().empty()) errors.Add(at + ppath + ".plan: only planner name 'plan' takes a plan file");
      if (pe.polish() > 0 && pe.has_refine() && pe.refine() == 0) {
        errors.Add(at + ppath + ".polish: polishing starts from the twin check's choice; drop refine: 0 or polish");
      }
      auto planner = planners::CreatePlanner(name, pe.options(), m.file + " " + ppath + ".options");
      if (!planner.ok()) {
        errors.Add(at + ppath + (pe.python().empty() ? ".name: " : ".python: ") + planner.status().message());
        continue;
      }
    }
    m.planners.push_back(std::move(choice));
  }
  if (e.planners_size() == 0) errors.Add(at + "planners: the list is empty; name at least one planner (`hetsim list planners`)");
}

// Simulation settings: fidelity, profiles and calibration; returns the profiles' files (they enter the
// points' ids).
std::vector<std::string> LoadSimulation(Manifest& m, ErrorList& errors) {
  const auto& e = m.spec;
  const std::string at = m.file + ": ";
  m.fidelity_name = e.simulation().fidelity().empty() ? "balanced" : e.simulation().fidelity();
  auto fid = sim::ParseFidelity(m.fidelity_name);
  if (!fid.ok()) {
    errors.Add(at + "simulation.fidelity: unknown level '" + m.fidelity_name + "' (expected fast, balanced or full)");
  } else {
    m.fidelity = *fid;
  }
  std::vector<std::string> profile_refs;
  for (const auto& p : e.simulation().profiles()) profile_refs.push_back(Relative(p, m.file));
  auto profiles = models::ProfileDb::Load(profile_refs);
  if (!profiles.ok()) {
    errors.Add(at + "simulation.profiles: " + profiles.status().message());
  } else {
    m.profiles = std::move(profiles).value();
  }

  if (!e.simulation().calibration().empty()) {
    m.calibration = Relative(e.simulation().calibration(), m.file);
    if (Status c = models::CheckKernelCalibration(m.calibration, "simulation.calibration"); !c.ok()) {
      errors.Add(at + c.message());
    } else {
      for (auto& p : models::CalibrationProfiles(m.calibration)) profile_refs.push_back(p);
      auto with = models::ProfileDb::Load(profile_refs);
      if (with.ok()) m.profiles = std::move(with).value();
    }
  }

  return profile_refs;
}

// Replay: policies (default checkpoint-restart) with distinct labels.
void CheckReplay(Manifest& m, ErrorList& errors) {
  const auto& e = m.spec;
  const std::string at = m.file + ": ";
  if (e.has_replay()) {
    auto* rp = m.spec.mutable_replay();
    if (rp->policies_size() == 0) rp->add_policies()->set_name("checkpoint-restart");
    if (Status st = CheckReplaySpec(*rp, "replay"); !st.ok()) {
      for (const auto& line : SplitLines(st.message())) errors.Add(at + line);
    }
    // The trace file must exist and parse now, not fail every point later.
    if (!rp->trace().empty() && rp->trace() != "llama3") {
      if (auto t = traces::LoadTrace(Relative(rp->trace(), m.file)); !t.ok()) {
        errors.Add(at + "replay.trace: " + t.status().message());
      }
    }
    for (const auto& pol : rp->policies()) {
      const std::string label = pol.label().empty() ? pol.name() : pol.label();
      if (std::find(m.policy_labels.begin(), m.policy_labels.end(), label) != m.policy_labels.end()) {
        errors.Add(at + "replay.policies: label '" + label + "' is used twice; give the policies distinct `label`s");
      }
      m.policy_labels.push_back(label);
    }
  }
}

// Sweep axes: names and values checked now; returns the axes the sweep names.
std::set<std::string> CheckSweep(const Manifest& m, ErrorList& errors) {
  const auto& e = m.spec;
  const std::string at = m.file + ": ";
  const auto& axis_names = SweepAxisNames();
  std::set<std::string> axis_seen;
  std::map<std::string, size_t> zip_sizes;
  for (int i = 0; i < e.sweep_size(); ++i) {
    const auto& ax = e.sweep(i);
    const std::string apath = "sweep[" + std::to_string(i) + "]";
    if (std::find(axis_names.begin(), axis_names.end(), ax.name()) == axis_names.end()) {
      errors.Add(at + apath + ".name: unknown axis '" + ax.name() + "'" + DidYouMean(ax.name(), axis_names) +
                 " (axes: cluster, model, planner, global_batch_size, seq_len, recompute, dtype, nic_bandwidth_gbps, "
                 "zone_link_bandwidth_gbps, oversubscription, fidelity; with replay: policy, trace, "
                 "checkpoint_interval, spares, detection_s, restart_s, trace_rate_scale)");
      continue;
    }
    if (!axis_seen.insert(ax.name()).second) errors.Add(at + apath + ".name: axis '" + ax.name() + "' appears twice");
    if (ax.values_size() == 0) errors.Add(at + apath + ".values: the list is empty; give at least one value");
    if (!ax.zip().empty()) {
      auto [it, inserted] = zip_sizes.emplace(ax.zip(), ax.values_size());
      if (!inserted && it->second != static_cast<size_t>(ax.values_size())) {
        errors.Add(at + apath + ".values: zipped axes ('" + ax.zip() + "') need the same number of values (" +
                   std::to_string(it->second) + " vs " + std::to_string(ax.values_size()) + ")");
      }
    }
    for (int v = 0; v < ax.values_size(); ++v) {
      const std::string& val = ax.values(v);
      const std::string vpath = at + apath + ".values[" + std::to_string(v) + "]: ";
      double num = 0;
      if (ax.name() == "cluster" && std::find(m.cluster_names.begin(), m.cluster_names.end(), val) == m.cluster_names.end()) {
        errors.Add(vpath + "cluster '" + val + "' is not in the manifest's clusters" + DidYouMean(val, m.cluster_names));
      } else if (ax.name() == "model") {
        std::vector<std::string> names;
        for (const auto& mm : m.models) names.push_back(mm.name());
        if (std::find(names.begin(), names.end(), val) == names.end()) {
          errors.Add(vpath + "model '" + val + "' is not in the manifest's models" + DidYouMean(val, names));
        }
      } else if (ax.name() == "planner") {
        std::vector<std::string> names;
        for (const auto& p : m.planners) names.push_back(p.label);
        if (std::find(names.begin(), names.end(), val) == names.end()) {
          errors.Add(vpath + "planner '" + val + "' is not one of the manifest's planner labels" + DidYouMean(val, names));
        }
      } else if (ax.name() == "recompute" && models::ParseRecompute(val) == proto::RECOMPUTE_UNSPECIFIED) {
        errors.Add(vpath + "expected " + models::RecomputeNames() + ", found '" + val + "'");
      } else if (ax.name() == "dtype" && val != "bf16" && val != "fp16" && val != "fp32") {
        errors.Add(vpath + "expected bf16, fp16 or fp32, found '" + val + "'");
      } else if (IsReplayAxis(ax.name()) && !e.has_replay()) {
        errors.Add(at + apath + ".name: axis '" + ax.name() + "' needs a `replay:` section");
        break;
      } else if (ax.name() == "policy" &&
                 std::find(m.policy_labels.begin(), m.policy_labels.end(), val) == m.policy_labels.end()) {
        errors.Add(vpath + "policy '" + val + "' is not one of replay.policies' labels" + DidYouMean(val, m.policy_labels));
      } else if (ax.name() == "trace" && val != "llama3") {
        if (auto t = traces::LoadTrace(Relative(val, m.file)); !t.ok()) errors.Add(vpath + t.status().message());
      } else if (ax.name() == "checkpoint_interval" && val != "young-daly" && !ParsePositive(val, &num)) {
        errors.Add(vpath + "expected seconds (e.g. 1800) or young-daly, found '" + val + "'");
      } else if ((ax.name() == "spares" || ax.name() == "detection_s" || ax.name() == "restart_s") &&
                 !(ParsePositive(val, &num) || val == "0")) {
        errors.Add(vpath + "expected a non-negative number, found '" + val + "'");
      } else if (ax.name() == "trace_rate_scale" && !ParsePositive(val, &num)) {
        errors.Add(vpath + "expected a positive number, found '" + val + "'");
      } else if (ax.name() == "fidelity" && !sim::ParseFidelity(val).ok()) {
        errors.Add(vpath + "expected fast, balanced or full, found '" + val + "'");
      } else if ((ax.name() == "global_batch_size" || ax.name() == "seq_len" || ax.name().ends_with("_gbps") ||
                  ax.name() == "oversubscription") &&
                 !ParsePositive(val, &num)) {
        errors.Add(vpath + "expected a positive number, found '" + val + "'");
      } else if (const double most = AxisMaximum(ax.name()); most > 0 && ParsePositive(val, &num) && num > most) {
        errors.Add(vpath + val + " is beyond what hetsim models for " + ax.name() + " (at most " + FormatLimit(most) +
                   ")");
      } else if ((ax.name() == "global_batch_size" || ax.name() == "seq_len" || ax.name() == "spares") &&
                 ParsePositive(val, &num) && num != std::floor(num)) {
        errors.Add(vpath + "expected a whole number, found '" + val + "'");
      }
    }
  }

  return axis_seen;
}

// Figures: columns must exist.
void CheckFigures(const Manifest& m, ErrorList& errors) {
  const auto& e = m.spec;
  const std::string at = m.file + ": ";
  std::vector<std::string> inputs = {"cluster", "model", "planner", "planner_label", "global_batch_size", "seq_len",
                                     "gpus", "repeat", "seed"};
  for (const auto& ax : e.sweep()) inputs.push_back(ax.name());
  if (e.has_replay()) inputs.insert(inputs.end(), {"policy", "trace"});
  const auto& metrics = MetricNames();
  std::set<std::string> figure_names;
  for (int i = 0; i < e.figures_size(); ++i) {
    const auto& f = e.figures(i);
    const std::string fpath = at + "figures[" + std::to_string(i) + "]";
    if (!figure_names.insert(f.name()).second) errors.Add(fpath + ".name: '" + f.name() + "' is used twice");
    auto check_input = [&](const std::string& col, const char* key) {
      if (!col.empty() && std::find(inputs.begin(), inputs.end(), col) == inputs.end()) {
        errors.Add(fpath + "." + key + ": '" + col + "' is not an input column" + DidYouMean(col, inputs));
      }
    };
    auto check_metric = [&](const std::string& col, const std::string& key) {
      if (std::find(metrics.begin(), metrics.end(), col) == metrics.end()) {
        errors.Add(fpath + "." + key + ": '" + col + "' is not a metric" + DidYouMean(col, metrics));
      }
    };
    check_input(f.x(), "x");
    check_input(f.group(), "group");
    for (const auto& [k, v] : f.filter()) check_input(k, ("filter." + k).c_str());
    if (f.kind() == proto::Figure::KIND_REPLAY) {
      if (!e.has_replay()) errors.Add(fpath + ".kind: a replay figure needs a `replay:` section");
      continue;
    }
    if (f.kind() == proto::Figure::KIND_STACKED) {
      if (f.y_stack_size() == 0) errors.Add(fpath + ".y_stack: a stacked figure needs the metrics to stack");
      for (int k = 0; k < f.y_stack_size(); ++k) check_metric(f.y_stack(k), "y_stack[" + std::to_string(k) + "]");
    } else if (f.kind() != proto::Figure::KIND_TIMELINE) {
      if (f.x().empty()) errors.Add(fpath + ".x: missing; name the input column on the x axis");
      if (f.y().empty()) {
        errors.Add(fpath + ".y: missing; name the metric on the y axis");
      } else {
        check_metric(f.y(), "y");
      }
    }
  }
}

// The points: implicit axes for cluster, model and planner unless the sweep names them; zipped axes advance
// together; repeats innermost. Each point's id hashes its axes and the inputs its result depends on.
Status ExpandPoints(Manifest& m, const std::set<std::string>& axis_seen, const std::vector<std::string>& profile_refs) {
  const auto& e = m.spec;
  const std::string at = m.file + ": ";
  struct Dim {
    std::vector<std::pair<std::string, std::vector<std::string>>> axes;  // advance together
    size_t size = 0;
  };
  std::vector<Dim> dims;
  auto implicit = [&](const std::string& name, std::vector<std::string> values) {
    if (!axis_seen.count(name)) dims.push_back({{{name, std::move(values)}}, 0});
  };
  std::vector<std::string> model_names, planner_labels;
  for (const auto& mm : m.models) model_names.push_back(mm.name());
  for (const auto& p : m.planners) planner_labels.push_back(p.label);
  implicit("cluster", m.cluster_names);
  implicit("model", model_names);
  std::map<std::string, size_t> zip_dim;
  for (const auto& ax : e.sweep()) {
    std::vector<std::string> values(ax.values().begin(), ax.values().end());
    if (!ax.zip().empty() && zip_dim.count(ax.zip())) {
      dims[zip_dim[ax.zip()]].axes.emplace_back(ax.name(), values);
      continue;
    }
    if (!ax.zip().empty()) zip_dim[ax.zip()] = dims.size();
    dims.push_back({{{ax.name(), values}}, 0});
  }
  implicit("planner", planner_labels);
  if (e.has_replay()) implicit("policy", m.policy_labels);
  for (auto& d : dims) d.size = d.axes.front().second.size();
  // Count the points before making them.
  double count = std::max<uint32_t>(1, e.repeats());
  for (const auto& d : dims) count *= static_cast<double>(d.size);
  if (count > kMaxPoints) {
    return Status::Invalid(at + "sweep: " + FormatLimit(count) + " points (clusters × models × planners × axes × " +
                           "repeats); hetsim runs at most " + FormatLimit(kMaxPoints) +
                           " per manifest: split the sweep over several manifests, or zip axes that go together");
  }
  // What a point's result depends on besides its axes: the training spec, the simulation and replay settings,
  // the profiles' and the trace's contents (shared), and the point's cluster, model and planner (name,
  // options, plan). Hashed into the point's id, so that --resume recomputes points whose inputs changed.
  std::string shared = Canonical(e.training()) + "|" + Canonical(e.simulation()) + "|" + Canonical(e.replay());
  for (const auto& ref : profile_refs) shared += "|" + FileText(ref);
  if (!m.calibration.empty()) shared += "|" + FileText(m.calibration);
  if (e.has_replay()) shared += "|" + FileText(Relative(e.replay().trace(), m.file));
  std::vector<std::string> cluster_digest, model_digest, planner_digest;
  for (const auto& c : m.clusters) cluster_digest.push_back(Canonical(c));
  for (const auto& mm : m.models) model_digest.push_back(Canonical(mm.spec()));
  for (const auto& pl : m.planners) {
    planner_digest.push_back(pl.name + "|" + pl.options + "|" + (pl.plan ? Canonical(*pl.plan) : std::string()) +
                             // "default": what planning::kAutoRefine means changed in session 33 (the planner's own pick).
                             "|refine " + (pl.refine == planning::kAutoRefine ? std::string("default") : std::to_string(pl.refine)) +
                             (pl.polish > 0 ? "|polish " + std::to_string(pl.polish) : std::string()));
  }
  const uint32_t repeats = std::max<uint32_t>(1, e.repeats());
  const uint64_t seed = e.seed() == 0 ? 1 : e.seed();
  std::vector<size_t> idx(dims.size(), 0);
  bool done = std::any_of(dims.begin(), dims.end(), [](const Dim& d) { return d.size == 0; });
  while (!done) {
    for (uint32_t rep = 0; rep < repeats; ++rep) {
      Point p;
      p.index = static_cast<uint32_t>(m.points.size());
      p.repeat = rep;
      p.seed = seed + rep;
      std::string key = "exp=" + e.name();
      for (size_t d = 0; d < dims.size(); ++d) {
        for (const auto& [name, values] : dims[d].axes) {
          const std::string& v = values[idx[d]];
          key += "|" + name + "=" + v;
          if (name == "cluster") {
            p.cluster = static_cast<uint32_t>(std::find(m.cluster_names.begin(), m.cluster_names.end(), v) - m.cluster_names.begin());
          } else if (name == "model") {
            p.model = static_cast<uint32_t>(std::find(model_names.begin(), model_names.end(), v) - model_names.begin());
          } else if (name == "planner") {
            p.planner = static_cast<uint32_t>(std::find(planner_labels.begin(), planner_labels.end(), v) - planner_labels.begin());
          } else {
            p.axes.emplace_back(name, v);
          }
        }
      }
      key += "|repeat=" + std::to_string(rep) + "|seed=" + std::to_string(p.seed);
      key += "|inputs=" + std::to_string(Fnv(shared + "|" + cluster_digest[p.cluster] + "|" + model_digest[p.model] +
                                              "|" + planner_digest[p.planner]));
      char buf[17];
      std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(Fnv(key)));
      p.id = buf;
      m.points.push_back(std::move(p));
    }
    // Odometer over the dimensions, the last one fastest.
    size_t d = dims.size();
    while (d > 0) {
      --d;
      if (++idx[d] < dims[d].size) break;
      idx[d] = 0;
      if (d == 0) done = true;
    }
    if (dims.empty()) done = true;
  }
  return Status::Ok();
}

// A fixed plan must name devices the clusters it is paired with have (every cluster, unless a zipped sweep
// pairs plans with clusters).
void CheckFixedPlans(const Manifest& m, const std::vector<uint32_t>& cluster_gpus, ErrorList& errors) {
  const std::string at = m.file + ": ";
  std::vector<uint32_t> plan_top(m.planners.size(), 0);
  for (size_t i = 0; i < m.planners.size(); ++i) {
    if (!m.planners[i].plan) continue;
    for (const auto& pl : m.planners[i].plan->pipelines()) {
      for (const auto& st : pl.stages()) {
        for (uint32_t d : st.devices()) plan_top[i] = std::max(plan_top[i], d + 1);
      }
    }
  }
  std::set<std::pair<uint32_t, uint32_t>> checked;
  for (const auto& p : m.points) {
    const uint32_t i = p.planner, c = p.cluster;
    if (!m.planners[i].plan || !checked.emplace(i, c).second || plan_top[i] <= cluster_gpus[c]) continue;
    errors.Add(at + "planners (" + m.planners[i].label + "): the plan uses device " + std::to_string(plan_top[i] - 1) +
               ", but cluster " + m.cluster_names[c] + " has " + std::to_string(cluster_gpus[c]) + " GPUs (0.." +
               std::to_string(cluster_gpus[c] - 1) + "); plan for that cluster, drop it from `clusters`, or zip the " +
               "`planner` and `cluster` axes in `sweep`");
  }
}

}  // namespace

Result<std::string> PlannerEntryName(const proto::PlannerEntry& pe) {
  if (!pe.python().empty() && !pe.name().empty()) {
    return Status::Invalid("a planner entry has `name` or `python`, not both; keep one");
  }
  if (pe.python().empty() && pe.name().empty()) {
    return Status::Invalid("missing key 'name' (a registered planner, `hetsim list planners`; or `python: "
                           "module:Class`, a planner written in Python, from the Python package: docs/python.md)");
  }
  return pe.python().empty() ? pe.name() : "python:" + pe.python();
}

Result<Manifest> LoadManifest(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(models::SpecText src, models::ReadSpec(models::SpecKind::kExperiment, path));
  return LoadManifest(src);
}

Result<Manifest> LoadManifest(const models::SpecText& src) {
  Manifest m;
  m.file = src.file;
  HETSIM_RETURN_IF_ERROR(models::ParseSpec(src, models::SpecKind::kExperiment, &m.spec));
  const auto& e = m.spec;
  ErrorList errors;
  const std::string at = m.file + ": ";

  // The name becomes a folder (out/NAME): one plain component.
  {
    const std::string& n = e.name();
    if (!IsPlainName(n)) {
      errors.Add(at + "name: '" + n + "' is not a plain name: use letters, digits, '-', '_' and '.' (it names the "
                 "results folder out/NAME), e.g. my-experiment");
    }
  }

  std::vector<uint32_t> cluster_gpus;  // parallel to m.clusters
  LoadSpecs(m, cluster_gpus, errors);
  LoadPlanners(m, errors);
  const std::vector<std::string> profile_refs = LoadSimulation(m, errors);
  if (m.spec.has_replay()) CheckReplay(m, errors);
  const std::set<std::string> axis_seen = CheckSweep(m, errors);
  CheckFigures(m, errors);
  if (!errors.empty()) return errors.ToStatus();
  HETSIM_RETURN_IF_ERROR(ExpandPoints(m, axis_seen, profile_refs));
  CheckFixedPlans(m, cluster_gpus, errors);
  if (!errors.empty()) return errors.ToStatus();
  return m;
}

Result<PointSetup> SetupPoint(const Manifest& m, const Point& p) {
  PointSetup out;
  proto::Cluster c = m.clusters[p.cluster];
  proto::Training t = m.spec.training();
  out.fidelity = m.fidelity;
  for (const auto& [name, v] : p.axes) {
    double num = 0;
    ParsePositive(v, &num);
    if (name == "global_batch_size") t.set_global_batch_size(static_cast<uint32_t>(num));
    if (name == "seq_len") t.set_seq_len(static_cast<uint32_t>(num));
    if (name == "recompute") {
      const proto::Recompute r = models::ParseRecompute(v);
      t.set_recompute(r == proto::RECOMPUTE_UNSPECIFIED ? proto::RECOMPUTE_NONE : r);
    }
    if (name == "dtype") {
      t.set_dtype(v == "fp16"   ? proto::DTYPE_FP16
                  : v == "fp32" ? proto::DTYPE_FP32
                  : v == "fp8"  ? proto::DTYPE_FP8
                  : v == "tf32" ? proto::DTYPE_TF32
                                : proto::DTYPE_BF16);
    }
    if (name == "nic_bandwidth_gbps") {
      for (auto& ng : *c.mutable_nodes()) {
        if (ng.has_nic()) ng.mutable_nic()->set_bandwidth_gbps(num);
      }
    }
    if (name == "zone_link_bandwidth_gbps") {
      for (auto& zl : *c.mutable_zone_links()) zl.set_bandwidth_gbps(num);
    }
    if (name == "oversubscription") {
      if (c.network().has_fat_tree()) c.mutable_network()->mutable_fat_tree()->set_oversubscription(num);
      if (c.network().has_pods()) c.mutable_network()->mutable_pods()->set_oversubscription(num);
    }
    if (name == "fidelity") out.fidelity = *sim::ParseFidelity(v);
  }
  if (m.spec.has_replay()) {
    out.replay = m.spec.replay();
    std::string label = m.policy_labels.empty() ? "" : m.policy_labels[0];
    for (const auto& [name, v] : p.axes) {
      double num = 0;
      ParsePositive(v, &num);
      if (name == "policy") label = v;
      if (name == "trace") out.replay->set_trace(v);
      if (name == "checkpoint_interval") out.replay->set_checkpoint_interval_s(v == "young-daly" ? 0 : num);
      if (name == "detection_s") out.replay->set_detection_s(num);
      if (name == "restart_s") out.replay->set_restart_s(num);
      if (name == "trace_rate_scale") out.replay->set_trace_rate_scale(num);
    }
    for (size_t i = 0; i < m.policy_labels.size(); ++i) {
      if (m.policy_labels[i] == label) out.policy = m.spec.replay().policies(static_cast<int>(i));
    }
    if (out.policy.label().empty()) out.policy.set_label(label);
    for (const auto& [name, v] : p.axes) {
      double num = 0;
      ParsePositive(v, &num);
      if (name == "spares") out.policy.set_spares(static_cast<uint32_t>(num));
    }
    HETSIM_RETURN_IF_ERROR(sim::CheckRecoveryPolicy(out.policy, m.file + ": replay.policies (" + label + ")"));
  }
  HETSIM_ASSIGN_OR_RETURN(out.cluster, models::Cluster::Build(std::move(c), m.cluster_files[p.cluster]));
  HETSIM_ASSIGN_OR_RETURN(out.training, models::ResolveTraining(t, m.models[p.model], m.file + " training"));
  return out;
}

}  // namespace hetsim::runner
