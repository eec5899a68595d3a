// Planning a group and replaying a point (sim/advise/advise_internal.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "models/kernels.h"
#include "models/plan.h"
#include "planners/planner.h"
#include "sim/replay.h"
#include "sim/simulator.h"
#include "sim/advise/advise_internal.h"
#include "sim/planning/refine.h"
#include "sim/runner/replay_setup.h"

namespace hetsim::advise::internal {
namespace {

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void Input(proto::PointResult& r, const std::string& name, const std::string& value, bool numeric = false) {
  auto* in = r.add_inputs();
  in->set_name(name);
  in->set_value(value);
  in->set_numeric(numeric);
}

void Metric(proto::PointResult& r, const std::string& name, double value) {
  auto* m = r.add_metrics();
  m->set_name(name);
  m->set_value(value);
}

sim::SimOptions SimOptionsOf(const Config& c) {
  sim::SimOptions o;
  o.fidelity = c.fidelity;
  o.profiles = c.profiles.empty() ? nullptr : &c.profiles;
  o.compute.calibration = c.calibration;
  o.record_timeline = false;
  return o;
}

}  // namespace

uint64_t SeedOf(const Config& c, uint32_t seed_index) { return c.seed + seed_index; }

Space Enumerate(const Config& c) {
  Space s;
  // What every plan depends on besides its candidate and planner.
  // Files are keyed by their content, not their names, so that --resume notices an edit (the model's spec,
  // a calibration file's values).
  std::string calibration = c.calibration;
  if (auto cal = models::LoadKernelCalibration(c.calibration); cal.ok()) calibration += "|" + cal->SerializeAsString();
  const std::string common = c.model->spec().SerializeAsString() + "|" + c.training.SerializeAsString() + "|" +
                             c.fidelity_name + "|" + calibration;
  for (size_t ci = 0; ci < c.candidates.size(); ++ci) {
    const Candidate& cand = c.candidates[ci];
    for (size_t pi = 0; pi < c.planners.size(); ++pi) {
      const auto& pl = c.planners[pi];
      // A fixed plan goes with the fixed cluster it names; a planner with every candidate.
      if (pl.plan && !(cand.fixed && cand.name == pl.plan->cluster())) continue;
      Group g;
      g.index = static_cast<uint32_t>(s.groups.size());
      g.candidate = ci;
      g.planner = pi;
      std::string key = common + "|" + cand.cluster->spec().SerializeAsString() + "|" + pl.name + "|" + pl.options +
                        "|" + (pl.refine == planning::kAutoRefine ? std::string("default") : std::to_string(pl.refine));
      if (pl.plan) key += "|" + pl.plan->SerializeAsString();
      g.id = Hex(runner::Fnv(key));
      for (size_t p = 0; p < c.policies.size(); ++p) {
        if (!c.policy_planner[p].empty() && (pl.plan || c.policy_planner[p] != pl.name)) continue;
        const bool spares = TakesSpares(c.policies[p].name());
        const size_t n_spares = spares ? c.spares.size() : 1;
        for (size_t sp = 0; sp < n_spares; ++sp) {
          for (size_t iv = 0; iv < c.intervals.size(); ++iv) {
            ConfigSlot slot;
            slot.index = s.configs++;
            slot.policy = p;
            slot.spares = spares ? c.spares[sp] : -1;
            slot.interval = iv;
            slot.first_point = s.points;
            s.points += c.seeds;
            g.configs.push_back(slot);
          }
        }
      }
      s.groups.push_back(std::move(g));
    }
  }
  return s;
}

std::string PolicyLabel(const Config& c, const ConfigSlot& slot) {
  const auto& pol = c.policies[slot.policy];
  std::string label = pol.label().empty() ? pol.name() : pol.label();
  if (slot.spares >= 0) label += " (" + std::to_string(slot.spares) + " spares)";
  return label;
}

std::string ConfigLabel(const Config& c, const Group& g, const ConfigSlot& slot) {
  const std::string& interval = c.intervals[slot.interval].text;
  return c.candidates[g.candidate].label + " | " + c.planners[g.planner].label + " | " + PolicyLabel(c, slot) +
         " | " + (interval == "young-daly" ? interval : "ckpt " + interval + " s");
}

std::string PointId(const Config& c, const Group& g, const ConfigSlot& slot, uint32_t seed_index) {
  const Candidate& cand = c.candidates[g.candidate];
  std::string key = g.id + "|" + c.policies[slot.policy].SerializeAsString() + "|" + std::to_string(slot.spares) + "|" +
                    c.intervals[slot.interval].text + "|" + std::to_string(SeedOf(c, seed_index)) + "|" +
                    std::to_string(c.window_s) + "|" + std::to_string(c.spec.detection_s()) + "|" +
                    std::to_string(c.spec.restart_s()) + "|" + std::to_string(c.spec.tokens());
  // What the trace depends on: prices, spot series and failure rates of the groups.
  for (const auto& grp : cand.groups) {
    key += "|" + std::to_string(grp.usd_per_gpu_hour) + "," + std::to_string(grp.on_demand_usd_per_gpu_hour) + "," +
           std::to_string(grp.failure_rate_scale) + "," + (grp.spot ? grp.spot->source : std::string("-"));
    if (grp.spot) key += "," + std::to_string(grp.spot->digest) + "," + std::to_string(grp.spot->notice_s);
  }
  return Hex(runner::Fnv(key));
}

PlannedGroup PlanGroup(const Config& c, const Group& g) {
  PlannedGroup out;
  const Candidate& cand = c.candidates[g.candidate];
  const auto& pl = c.planners[g.planner];
  models::PlanContext ctx{*cand.cluster, *c.model, c.training};
  const auto t0 = std::chrono::steady_clock::now();
  if (pl.plan) {
    out.plan = *pl.plan;
    if (Status st = models::ValidatePlanStructure(out.plan, ctx, "plan " + pl.label); !st.ok()) {
      out.reason = st.message();
      return out;
    }
  } else {
    auto planner = planners::CreatePlanner(pl.name, pl.options, c.file);
    if (!planner.ok()) {
      out.reason = planner.status().message();
      return out;
    }
    models::ComputeOptions compute;
    compute.calibration = c.calibration;
    planners::PlanningProblem problem{*cand.cluster, *c.model, c.training, c.profiles.empty() ? nullptr : &c.profiles,
                                      compute};
    planning::RefineOptions refine;
    refine.k = pl.refine;
    refine.sim = SimOptionsOf(c);
    auto res = planning::PlanOnTwin(**planner, problem, refine);
    if (!res.ok()) {
      out.reason = "no plan: " + res.status().message();
      return out;
    }
    out.plan = res->plan;
  }
  out.plan_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto sim = sim::SimulateIteration(out.plan, ctx, SimOptionsOf(c));
  if (!sim.ok()) {
    out.reason = "simulation failed: " + sim.status().message();
    return out;
  }
  if (sim->report.any_oom()) {
    out.reason = "the plan does not fit in memory";
    return out;
  }
  out.iteration_s = sim->report.iteration_time_s();
  out.ideal_tokens_per_s = sim->report.tokens_per_s();
  out.ok = out.ideal_tokens_per_s > 0;
  if (!out.ok) out.reason = "the plan trains no tokens";
  return out;
}

namespace {
// A candidate's composed trace for a seed and its mean rent, composed once per process (the bounds need the
// rent, the replays both; workers forked later inherit what the parent composed).
struct Composed {
  Result<proto::Trace> trace = Status::Internal("not composed");
  double rent_usd_per_h = 0;
};
const Composed& TraceOf(const Config& c, size_t cand, uint64_t seed) {
  static std::map<std::pair<size_t, uint64_t>, Composed> cache;
  auto [it, fresh] = cache.try_emplace({cand, seed});
  if (fresh) {
    const Candidate& k = c.candidates[cand];
    it->second.trace = ComposeTrace(*k.cluster, k.name, k.groups, seed, c.window_s, &it->second.rent_usd_per_h);
  }
  return it->second;
}
}  // namespace

std::vector<double> RentPerSeed(const Config& c, size_t cand) {
  std::vector<double> rent;
  for (uint32_t i = 0; i < c.seeds; ++i) {
    const Composed& t = TraceOf(c, cand, SeedOf(c, i));
    rent.push_back(t.trace.ok() ? t.rent_usd_per_h : c.candidates[cand].on_demand_usd_per_h);
  }
  return rent;
}

proto::PointResult ReplayPoint(const Config& c, const Group& g, const PlannedGroup& planned, const ConfigSlot& slot,
                               uint32_t seed_index, proto::ReplayReport* report) {
  // Iteration times and transfer costs are shared by the points a process replays; traces by candidate and seed.
  static sim::ReplayCache cache;
  const Candidate& cand = c.candidates[g.candidate];
  const auto& pl = c.planners[g.planner];
  const uint64_t seed = SeedOf(c, seed_index);
  proto::PointResult r;
  r.set_point(slot.first_point + seed_index);
  r.set_id(PointId(c, g, slot, seed_index));
  Input(r, "config", std::to_string(slot.index), true);
  Input(r, "composition", cand.label);
  Input(r, "gpus", std::to_string(cand.cluster->num_devices()), true);
  Input(r, "planner", pl.label);
  Input(r, "policy", PolicyLabel(c, slot));
  Input(r, "checkpoint_interval", c.intervals[slot.interval].text);
  Input(r, "seed", std::to_string(seed), true);
  const Composed& composed = TraceOf(c, g.candidate, seed);
  if (!composed.trace.ok()) {
    r.set_status("failed");
    r.set_reason(composed.trace.status().message());
    return r;
  }
  sim::ReplayInputs in;
  in.cluster = cand.cluster.get();
  in.model = &*c.model;
  in.training = c.training;
  in.plan = planned.plan;
  in.trace = *composed.trace;
  in.trace_name = in.trace.name();
  in.spec.set_trace(in.trace.name());
  in.spec.set_checkpoint_interval_s(c.intervals[slot.interval].seconds);
  if (c.spec.has_detection_s()) in.spec.set_detection_s(c.spec.detection_s());
  if (c.spec.has_restart_s()) in.spec.set_restart_s(c.spec.restart_s());
  in.policy = c.policies[slot.policy];
  if (slot.spares >= 0) in.policy.set_spares(static_cast<uint32_t>(slot.spares));
  // An elastic policy re-plans with the planner that made the plan unless it names its own.
  if (in.policy.name() == "elastic" && in.policy.planner().empty() && !pl.plan) {
    in.policy.set_planner(pl.name);
    in.policy.set_planner_options(pl.options);
  }
  in.sim = SimOptionsOf(c);
  in.replan = runner::MakeReplanner(*c.model, c.training, c.profiles.empty() ? nullptr : &c.profiles);
  in.cache = &cache;
  auto rep = sim::ReplayRun(in);
  if (!rep.ok()) {
    r.set_status(rep.status().code() == Status::Code::kAborted ? "killed" : "failed");
    r.set_reason("replay failed: " + rep.status().message());
    return r;
  }
  // The spares' price: the on-demand price of the type of the plan's first node.
  double spare_price = 0;
  if (planned.plan.pipelines_size() > 0 && planned.plan.pipelines(0).stages_size() > 0 &&
      planned.plan.pipelines(0).stages(0).devices_size() > 0) {
    uint32_t node = cand.cluster->device(planned.plan.pipelines(0).stages(0).devices(0)).node;
    for (const auto& grp : cand.groups) {
      if (node < grp.nodes) {
        spare_price = grp.on_demand_usd_per_gpu_hour;
        break;
      }
      node -= grp.nodes;
    }
  }
  const double rent = composed.rent_usd_per_h + rep->spares_gpus() * spare_price;
  const double goodput = rep->goodput_tokens_per_s();
  const double time_s = goodput > 0 ? c.spec.tokens() / goodput : std::numeric_limits<double>::infinity();
  r.set_status("ok");
  Metric(r, "time_to_train_days", time_s / 86400);
  Metric(r, "cost_usd", std::isfinite(time_s) ? time_s / 3600 * rent : std::numeric_limits<double>::infinity());
  Metric(r, "rent_usd_per_h", rent);
  Metric(r, "iteration_time_s", planned.iteration_s);
  Metric(r, "ideal_tokens_per_s", planned.ideal_tokens_per_s);
  Metric(r, "goodput_tokens_per_s", goodput);
  Metric(r, "goodput_fraction", planned.ideal_tokens_per_s > 0 ? goodput / planned.ideal_tokens_per_s : 0);
  Metric(r, "ettr", rep->ettr());
  Metric(r, "interruptions", rep->interruptions());
  Metric(r, "checkpoint_interval_s", rep->checkpoint_interval_s());
  Metric(r, "spares_gpus", rep->spares_gpus());
  std::map<std::string, double> down;
  for (const auto& d : rep->downtime()) down[d.cause()] = d.seconds() / 3600;
  for (const char* phase : {"checkpoint", "lost work", "detect", "replan", "wait", "restart", "recover"}) {
    std::string name = std::string(phase) + "_h";
    if (name == "lost work_h") name = "lost_work_h";
    Metric(r, name, down[phase]);
  }
  Metric(r, "window_days", c.window_s / 86400);
  if (report != nullptr) *report = std::move(rep).value();
  return r;
}

}  // namespace hetsim::advise::internal
