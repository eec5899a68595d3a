#include "sim/advise/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>

#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/spec_io.h"
#include "models/suggest.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "planners/planner.h"
#include "sim/replay.h"
#include "sim/simulator.h"
#include "sim/planning/refine.h"
#include "traces/spot.h"

namespace hetsim::advise {
namespace {

// The shortest replayed window advise accepts: an hour.
constexpr double kMinWindowDays = 1.0 / 24;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// One priced GPU type of the config (its `gpus` entry).
struct TypeInfo {
  std::string name;  // canonical catalog name
  double usd = 0, spot_usd = 0;
  double failure_scale = 1;
};

}  // namespace

bool TakesSpares(const std::string& policy) { return sim::PolicyTakesSpares(policy); }

namespace {

// LoadConfig's state while it reads: the config, its YAML tree (for error locations) and the errors found.
struct Reader {
  Config& c;
  YAML::Node root;
  ErrorList errors;
  void Err(const std::string& key, const std::string& what) {
    errors.Add(models::YamlLocationOf(c.file, root, key) + ": " + key + ": " + what);
  }
  std::string Rel(const std::string& ref) const { return models::ResolveRelative(ref, c.file); }
};

// ---- LoadConfig's sections, in the order it reads them ----

void ReadModel(Reader& r) {
  Config& c = r.c;
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  auto rel = [&](const std::string& ref) { return r.Rel(ref); };
  // The model and the training it is trained with.
  if (auto model = models::LoadModel(rel(s.model())); !model.ok()) {
    err("model", model.status().message());
  } else {
    c.model = std::move(model).value();
    auto training = models::ResolveTraining(s.training(), *c.model, c.file);
    if (!training.ok()) {
      err("training", training.status().message());
    } else {
      c.training = std::move(training).value();
    }
  }
}

void ReadObjective(Reader& r) {
  Config& c = r.c;
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  // Objective and limits.
  if (s.objective().empty()) {
    c.objective = s.has_deadline_days() || !s.has_budget_usd() ? "cheapest" : "soonest";
  } else if (s.objective() == "cheapest" || s.objective() == "soonest") {
    c.objective = s.objective();
  } else {
    err("objective", "unknown objective '" + s.objective() + "': cheapest (least cost that meets the deadline) or "
        "soonest (least time that meets the budget)" + DidYouMean(s.objective(), {"cheapest", "soonest"}));
  }
  if (s.max_gpus() > 0 && s.min_gpus() > s.max_gpus()) {
    err("min_gpus", "min_gpus " + std::to_string(s.min_gpus()) + " is above max_gpus " + std::to_string(s.max_gpus()));
  }
  c.seeds = s.seeds() > 0 ? s.seeds() : 3;
  c.seed = s.seed() > 0 ? s.seed() : 1;
  if (s.window_days() > 0 && s.window_days() < kMinWindowDays) {
    char days[32];
    std::snprintf(days, sizeof days, "%g", s.window_days());
    err("window_days", std::string("a window of ") + days +
        " days holds no training run (every configuration's time would be infinite); give at least 1/24 (an hour)"
        ", or leave it out for the default 14 days");
  }
  if (s.window_days() > 0) c.window_s = s.window_days() * 86400;
  if (s.has_spot_price_fraction()) c.spot_price_fraction = s.spot_price_fraction();
}

std::vector<TypeInfo> ReadGpuTypes(Reader& r) {
  Config& c = r.c;
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  // GPU types.
  const auto& catalog = models::GpuCatalog::Bundled();
  std::vector<TypeInfo> types(s.gpus_size());
  std::set<std::string> type_seen;
  c.spot.resize(s.gpus_size());
  for (int i = 0; i < s.gpus_size(); ++i) {
    const auto& g = s.gpus(i);
    const std::string at = "gpus[" + std::to_string(i) + "]";
    auto spec = catalog.Find(g.type());
    if (!spec.ok()) {
      err(at + ".type", spec.status().message());
      continue;
    }
    TypeInfo& t = types[i];
    t.name = (*spec)->name;
    if (!type_seen.insert(t.name).second) err(at + ".type", "'" + t.name + "' is listed twice; give each GPU type one entry");
    if (g.nodes_size() == 0 && g.spot_nodes_size() == 0) {
      err(at + ".nodes", "give the on-demand node counts to try (e.g. `nodes: [0, 1, 2]`) or `spot_nodes`");
    }
    const double list = sim::OnDemandUsdPerGpuHour(t.name);
    t.usd = g.has_usd_per_gpu_hour() ? g.usd_per_gpu_hour() : list;
    if (!g.has_usd_per_gpu_hour() && list <= 0) {
      err(at + ".usd_per_gpu_hour", "no bundled list price for '" + t.name + "' (docs/advise.md lists the bundled "
          "prices); give its on-demand price, e.g. `usd_per_gpu_hour: 2.0`");
    }
    t.spot_usd = g.has_spot_usd_per_gpu_hour() ? g.spot_usd_per_gpu_hour() : t.usd * c.spot_price_fraction;
    t.failure_scale = g.has_failure_rate_scale() ? g.failure_rate_scale() : 1;
    const bool wants_spot = std::any_of(g.spot_nodes().begin(), g.spot_nodes().end(), [](uint32_t n) { return n > 0; });
    if (g.has_spot_trace()) {
      const auto& formats = traces::SpotFormats();
      std::vector<std::string> known(formats.begin(), formats.end());
      known.push_back("trace");
      if (std::find(known.begin(), known.end(), g.spot_trace().format()) == known.end()) {
        std::string list_text;
        for (const auto& f : known) list_text += (list_text.empty() ? "" : ", ") + f;
        err(at + ".spot_trace.format", "unknown format '" + g.spot_trace().format() + "' (expected one of: " +
            list_text + ")" + DidYouMean(g.spot_trace().format(), known));
      } else if (auto series = LoadSpotSeries(g.spot_trace(), c.file); !series.ok()) {
        err(at + ".spot_trace.file", series.status().message());
      } else {
        c.spot[i] = std::make_unique<SpotSeries>(std::move(series).value());
      }
    } else if (wants_spot) {
      err(at + ".spot_trace", "spot nodes need a spot trace for their availability, e.g. `spot_trace: {file: "
          "p3-trace.csv, format: bamboo}` (docs/advise.md lists the bundled ones)");
    }
  }
  return types;
}

std::vector<std::shared_ptr<const models::Cluster>> ReadFixedClusters(Reader& r) {
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  auto rel = [&](const std::string& ref) { return r.Rel(ref); };
  // Fixed clusters.
  std::vector<std::shared_ptr<const models::Cluster>> fixed;
  for (int i = 0; i < s.clusters_size(); ++i) {
    auto cl = models::LoadCluster(rel(s.clusters(i)));
    if (!cl.ok()) {
      err("clusters[" + std::to_string(i) + "]", cl.status().message());
      continue;
    }
    fixed.push_back(std::make_shared<const models::Cluster>(std::move(cl).value()));
  }
  return fixed;
}

proto::AdviseConfig ReadPlanners(Reader& r) {
  Config& c = r.c;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  auto rel = [&](const std::string& ref) { return r.Rel(ref); };
  // Planners (default: the five papers' heterogeneous planners and Megatron-LM as the baseline), each
  // checked now.
  proto::AdviseConfig with_defaults = r.c.spec;
  if (with_defaults.planners_size() == 0) {
    for (const char* n : {"metis", "hexiscale", "autohet", "hethub", "hetu", "megatron"}) {
      with_defaults.add_planners()->set_name(n);
    }
  }
  std::set<std::string> labels;
  for (int i = 0; i < with_defaults.planners_size(); ++i) {
    const auto& pe = with_defaults.planners(i);
    const std::string at = "planners[" + std::to_string(i) + "]";
    const auto named = runner::PlannerEntryName(pe);
    if (!named.ok()) {
      err(at + (pe.python().empty() ? ".name" : ".python"), named.status().message());
      continue;
    }
    const std::string& name = *named;
    const std::string default_label = pe.python().empty() ? name : pe.python();
    runner::PlannerChoice choice{pe.label().empty() ? default_label : pe.label(), name, pe.options(), std::nullopt,
                                 pe.has_refine() ? pe.refine() : planning::kAutoRefine};
    if (!labels.insert(choice.label).second) err(at + ".label", "'" + choice.label + "' names two planners; give each its own label");
    if (pe.name() == "plan") {
      if (pe.plan().empty()) {
        err(at + ".plan", "name 'plan' takes a fixed plan file for a cluster of `clusters`; give its path");
        continue;
      }
      auto plan = models::LoadPlan(rel(pe.plan()));
      if (!plan.ok()) {
        err(at + ".plan", plan.status().message());
        continue;
      }
      choice.plan = std::move(plan).value();
    } else if (auto pl = planners::CreatePlanner(name, pe.options(), c.file + " " + at + ".options"); !pl.ok()) {
      err(at + (pe.python().empty() ? ".name" : ".python"), pl.status().message());
      continue;
    }
    c.planners.push_back(std::move(choice));
  }
  return with_defaults;
}

void ReadPolicies(Reader& r) {
  Config& c = r.c;
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  ErrorList& errors = r.errors;
  const YAML::Node& root = r.root;
  // Policies (default: every one that applies: checkpoint-restart, hot-spares, in-memory, elastic and varuna to
  // every plan, AutoHet's and Hetu's recovery to their own planners' plans).
  if (s.policies_size() == 0) {
    for (const char* n : {"checkpoint-restart", "hot-spares", "in-memory", "elastic", "varuna", "autohet", "hetu"}) {
      c.policies.emplace_back().set_name(n);
      c.policy_planner.push_back(n == std::string("autohet") || n == std::string("hetu") ? n : "");
    }
  } else {
    c.policies.assign(s.policies().begin(), s.policies().end());
    c.policy_planner.assign(c.policies.size(), "");
  }
  std::set<std::string> policy_labels;
  for (size_t i = 0; i < c.policies.size(); ++i) {
    const std::string at = "policies[" + std::to_string(i) + "]";
    if (Status st = sim::CheckRecoveryPolicy(c.policies[i], at); !st.ok()) {
      for (const auto& line : Lines(st.message())) errors.Add(models::YamlLocationOf(c.file, root, at) + ": " + line);
    }
    const std::string label = c.policies[i].label().empty() ? c.policies[i].name() : c.policies[i].label();
    if (!policy_labels.insert(label).second) err(at + ".label", "'" + label + "' names two policies; give each its own label");
  }
}

void ReadIntervals(Reader& r) {
  Config& c = r.c;
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  // Checkpoint intervals and spares.
  if (s.checkpoint_intervals_size() == 0) {
    c.intervals = {{"young-daly", 0}, {"1800", 1800}, {"7200", 7200}};
  }
  for (int i = 0; i < s.checkpoint_intervals_size(); ++i) {
    const std::string& v = s.checkpoint_intervals(i);
    double sec = 0;
    const auto res = std::from_chars(v.data(), v.data() + v.size(), sec);
    if (v == "young-daly") {
      c.intervals.push_back({v, 0});
    } else if (res.ec != std::errc() || res.ptr != v.data() + v.size() || !(sec > 0) || sec > 1e9) {
      err("checkpoint_intervals[" + std::to_string(i) + "]",
          "'" + v + "' is neither seconds between checkpoints (e.g. 1800) nor young-daly");
    } else if (sec < c.window_s / sim::kMaxCheckpointsPerRun) {
      // The bound `hetsim replay` applies to the same interval (sim/replay_engine.h).
      char least[64], days[32];
      std::snprintf(least, sizeof least, "%.3g", c.window_s / sim::kMaxCheckpointsPerRun);
      std::snprintf(days, sizeof days, "%g", c.window_s / 86400);
      err("checkpoint_intervals[" + std::to_string(i) + "]",
          "'" + v + "' s would checkpoint more than ten million times in the " + std::string(days) +
              "-day window; give at least " + least + " s (or young-daly)");
    } else {
      c.intervals.push_back({v, sec});
    }
  }
  for (uint32_t n : s.spares()) c.spares.push_back(n);
  if (c.spares.empty()) c.spares.push_back(-1);
}

void ReadSimulation(Reader& r) {
  Config& c = r.c;
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  auto rel = [&](const std::string& ref) { return r.Rel(ref); };
  // Simulation settings.
  c.fidelity_name = s.simulation().fidelity().empty() ? "fast" : s.simulation().fidelity();
  if (auto fid = sim::ParseFidelity(c.fidelity_name); !fid.ok()) {
    err("simulation.fidelity", "unknown level '" + c.fidelity_name + "' (expected fast, balanced or full)");
  } else {
    c.fidelity = *fid;
  }
  std::vector<std::string> profile_refs;
  for (const auto& p : s.simulation().profiles()) profile_refs.push_back(rel(p));
  if (!s.simulation().calibration().empty()) {
    c.calibration = rel(s.simulation().calibration());
    if (Status st = models::CheckKernelCalibration(c.calibration, "simulation.calibration"); !st.ok()) {
      err("simulation.calibration", st.message());
    } else {
      for (auto& p : models::CalibrationProfiles(c.calibration)) profile_refs.push_back(p);
    }
  }
  if (auto profiles = models::ProfileDb::Load(profile_refs); !profiles.ok()) {
    err("simulation.profiles", profiles.status().message());
  } else {
    c.profiles = std::move(profiles).value();
  }
}

Status BuildCandidates(Reader& r, const std::vector<TypeInfo>& types, const std::vector<std::shared_ptr<const models::Cluster>>& fixed) {
  Config& c = r.c;
  const auto& s = r.c.spec;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  ErrorList& errors = r.errors;
  const auto& catalog = models::GpuCatalog::Bundled();
  // Compositions: every combination of the types' on-demand and spot node counts.
  double combos = 1;
  for (const auto& g : s.gpus()) {
    combos *= std::max(1, g.nodes_size()) * std::max(1, g.spot_nodes_size());
  }
  if (combos > kMaxCandidates) {
    err("gpus", "the node counts combine into " + Num(combos) + " compositions, more than " +
        std::to_string(kMaxCandidates) + "; try fewer counts per type (e.g. powers of two)");
    return errors.ToStatus();
  }
  std::vector<size_t> pick(2 * s.gpus_size(), 0);
  auto count_of = [&](size_t k) -> uint32_t {
    const auto& g = s.gpus(static_cast<int>(k / 2));
    const auto& list = k % 2 == 0 ? g.nodes() : g.spot_nodes();
    return list.empty() ? 0 : list[static_cast<int>(pick[k])];
  };
  auto size_of = [&](size_t k) {
    const auto& g = s.gpus(static_cast<int>(k / 2));
    return static_cast<size_t>(std::max(1, k % 2 == 0 ? g.nodes_size() : g.spot_nodes_size()));
  };
  for (bool more = s.gpus_size() > 0; more;) {
    proto::Cluster cs;
    Candidate cand;
    std::string name = "advise";
    uint64_t gpus = 0;
    for (size_t k = 0; k < pick.size(); ++k) {
      const uint32_t n = count_of(k);
      if (n == 0) continue;
      const auto& g = s.gpus(static_cast<int>(k / 2));
      const TypeInfo& t = types[k / 2];
      const bool spot = k % 2 == 1;
      const uint32_t per = g.gpus_per_node() > 0 ? g.gpus_per_node() : 8;
      auto* ng = cs.add_nodes();
      ng->set_name(t.name + (spot ? "-spot" : ""));
      ng->set_count(n);
      ng->mutable_gpus()->set_type(t.name);
      ng->mutable_gpus()->set_count(per);
      if (g.has_fabric()) *ng->mutable_fabric() = g.fabric();
      if (g.has_nic()) {
        *ng->mutable_nic() = g.nic();
      } else {
        ng->mutable_nic()->set_kind(proto::Nic::KIND_ROCE);
        ng->mutable_nic()->set_bandwidth_gbps(100);
        ng->mutable_nic()->set_attachment(proto::Nic::ATTACHMENT_PER_GPU);
      }
      gpus += static_cast<uint64_t>(n) * per;
      cand.label += (cand.label.empty() ? "" : " + ") + std::to_string(n) + "x" + std::to_string(per) + " " + t.name +
                    (spot ? " spot" : "");
      name += "-" + t.name + "x" + std::to_string(n) + (spot ? "s" : "");
      GroupCost gc;
      gc.nodes = n;
      gc.gpus_per_node = per;
      gc.usd_per_gpu_hour = spot ? t.spot_usd : t.usd;
      gc.on_demand_usd_per_gpu_hour = t.usd;
      gc.spot = spot ? c.spot[k / 2].get() : nullptr;
      gc.failure_rate_scale = t.failure_scale;
      if (!spot) cand.on_demand_usd_per_h += static_cast<double>(n) * per * t.usd;
      cand.groups.push_back(gc);
    }
    // Next combination (odometer).
    more = false;
    for (size_t k = 0; k < pick.size(); ++k) {
      if (++pick[k] < size_of(k)) {
        more = true;
        break;
      }
      pick[k] = 0;
    }
    if (gpus == 0 || gpus < s.min_gpus() || (s.max_gpus() > 0 && gpus > s.max_gpus())) continue;
    cs.set_kind("cluster");
    cs.set_name(name);
    cs.set_description("hetsim advise candidate: " + cand.label);
    cs.mutable_network()->mutable_single_switch();
    cs.mutable_network()->set_switch_latency_us(5);
    if (s.storage_size() > 0) {
      cs.mutable_storage()->CopyFrom(s.storage());
    } else {
      auto* obj = cs.add_storage();
      obj->set_name("object-store");
      obj->set_kind(proto::StorageEndpoint::KIND_OBJECT_STORE);
      obj->set_read_bandwidth_gbyte_s(20);
      obj->set_write_bandwidth_gbyte_s(20);
      obj->set_latency_ms(20);
      auto* nvme = cs.add_storage();
      nvme->set_name("nvme");
      nvme->set_kind(proto::StorageEndpoint::KIND_LOCAL_NVME);
      nvme->set_read_bandwidth_gbyte_s(2);
      nvme->set_write_bandwidth_gbyte_s(1);
      nvme->set_latency_ms(0.1);
      auto* host = cs.add_storage();
      host->set_name("host-memory");
      host->set_kind(proto::StorageEndpoint::KIND_HOST_MEMORY);
      host->set_read_bandwidth_gbyte_s(20);  // a pinned host-to-device copy
      host->set_latency_ms(0.01);
    }
    auto built = models::Cluster::Build(cs, c.file + " (composition " + cand.label + ")");
    if (!built.ok()) {
      err("gpus", built.status().message());
      return errors.ToStatus();
    }
    cand.name = name;
    cand.cluster = std::make_shared<const models::Cluster>(std::move(built).value());
    c.candidates.push_back(std::move(cand));
  }
  for (size_t i = 0; i < fixed.size(); ++i) {
    Candidate cand;
    cand.fixed = true;
    cand.cluster = fixed[i];
    cand.name = fixed[i]->name();
    cand.label = fixed[i]->name() + " (" + std::to_string(fixed[i]->num_devices()) + " GPUs)";
    for (const auto& ng : fixed[i]->spec().nodes()) {
      GroupCost gc;
      gc.nodes = ng.count() > 0 ? ng.count() : 1;
      gc.gpus_per_node = ng.gpus().count();
      auto spec = catalog.Find(ng.gpus().type());
      const std::string type = spec.ok() ? (*spec)->name : ng.gpus().type();
      // A `gpus` entry of the same type prices it; else the bundled list price.
      gc.usd_per_gpu_hour = sim::OnDemandUsdPerGpuHour(type);
      for (size_t t = 0; t < types.size(); ++t) {
        if (types[t].name == type) {
          gc.usd_per_gpu_hour = types[t].usd;
          gc.failure_rate_scale = types[t].failure_scale;
        }
      }
      gc.on_demand_usd_per_gpu_hour = gc.usd_per_gpu_hour;
      if (gc.usd_per_gpu_hour <= 0) {
        err("clusters[" + std::to_string(i) + "]", "no price for its '" + type + "' GPUs: list the type under `gpus` "
            "with its usd_per_gpu_hour (and `nodes: [0]` to add no composition)");
      }
      cand.on_demand_usd_per_h += static_cast<double>(gc.nodes) * gc.gpus_per_node * gc.usd_per_gpu_hour;
      cand.groups.push_back(gc);
    }
    c.candidates.push_back(std::move(cand));
  }
  if (c.candidates.empty()) {
    err(s.gpus_size() > 0 ? "gpus" : "clusters", "no candidate cluster: give GPU types with node counts under `gpus` "
        "(within min_gpus and max_gpus) or fixed `clusters`");
  }
  return Status::Ok();
}

void CheckPlansAndScale(Reader& r, const proto::AdviseConfig& with_defaults) {
  Config& c = r.c;
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };
  auto rel = [&](const std::string& ref) { return r.Rel(ref); };
  // A fixed plan is for the fixed cluster it names.
  for (size_t i = 0; i < c.planners.size(); ++i) {
    if (!c.planners[i].plan) continue;
    const std::string plan_file = rel(with_defaults.planners(static_cast<int>(i)).plan());
    auto cl = models::LoadCluster(models::ResolveRelative(c.planners[i].plan->cluster(), plan_file));
    const std::string want = cl.ok() ? cl->name() : c.planners[i].plan->cluster();
    const bool any = std::any_of(c.candidates.begin(), c.candidates.end(),
                                 [&](const Candidate& k) { return k.fixed && k.name == want; });
    if (!any) {
      err("planners[" + std::to_string(i) + "].plan", "the plan is for cluster '" + want + "', which is not among "
          "`clusters`; add it there");
    }
    c.planners[i].plan->set_cluster(want);
  }
  double per_candidate = 0;
  for (size_t i = 0; i < c.policies.size(); ++i) {
    if (!c.policy_planner[i].empty()) continue;
    per_candidate += TakesSpares(c.policies[i].name()) ? static_cast<double>(c.spares.size()) : 1.0;
  }
  const double replays = static_cast<double>(c.candidates.size()) * c.planners.size() * per_candidate *
                         c.intervals.size() * c.seeds;
  if (replays > kMaxReplays) {
    err("gpus", "the config asks for " + Num(replays) + " replays (candidates x planners x policies x intervals x "
        "seeds), more than " + Num(kMaxReplays) + "; narrow one of them");
  }
}

}  // namespace

Result<Config> LoadConfig(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(models::SpecText src, models::ReadSpec(models::SpecKind::kAdvise, path));
  Config c;
  c.file = src.file;
  HETSIM_RETURN_IF_ERROR(models::ParseSpec(src, models::SpecKind::kAdvise, &c.spec));
  const auto& s = c.spec;
  YAML::Node root;
  try {
    root = YAML::Load(src.text);
  } catch (const YAML::Exception&) {
    // ParseSpec above would have reported it.
  }
  Reader r{c, root, {}};
  auto err = [&](const std::string& key, const std::string& what) { r.Err(key, what); };

  if (s.kind() != "advise") err("kind", "an advise config starts with `kind: advise`");
  if (!IsPlainName(s.name())) {
    err("name", "'" + s.name() + "' is not a plain name: use letters, digits, '-', '_' and '.' (it names the results "
        "folder out/NAME), e.g. llama-13b-spot");
  }

  ReadModel(r);
  ReadObjective(r);
  const std::vector<TypeInfo> types = ReadGpuTypes(r);
  const auto fixed = ReadFixedClusters(r);
  const proto::AdviseConfig with_defaults = ReadPlanners(r);
  ReadPolicies(r);
  ReadIntervals(r);
  ReadSimulation(r);
  if (!r.errors.empty()) return r.errors.ToStatus();
  HETSIM_RETURN_IF_ERROR(BuildCandidates(r, types, fixed));
  CheckPlansAndScale(r, with_defaults);
  if (!r.errors.empty()) return r.errors.ToStatus();
  return c;
}

}  // namespace hetsim::advise
