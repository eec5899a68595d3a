// `hetsim replay`: a whole training run over a failure or spot trace, under one or more recovery policies
// (sim/replay.h, docs/replay.md).
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <ostream>

#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/yaml_proto.h"
#include "sim/replay.h"
#include "tools/hetsim/cli.h"
#include "sim/runner/replay_setup.h"
#include "traces/llama3.h"
#include "traces/trace.h"

namespace hetsim::cli {
namespace {

using runner::CheckReplaySpec;
using runner::LoadReplayTrace;
using runner::MakeReplanner;

// How iterations are simulated, from --fidelity, --profile, --calibration (the profiles live here).
struct SimSetup {
  models::ProfileDb profiles;
  sim::SimOptions options;
};
Result<std::unique_ptr<SimSetup>> SimOptionsFromFlags(const po::variables_map& vm) {
  auto setup = std::make_unique<SimSetup>();
  HETSIM_ASSIGN_OR_RETURN(setup->options.fidelity, sim::ParseFidelity(FlagString(vm, "fidelity")));
  std::vector<std::string> refs;
  if (vm.count("profile")) refs = vm["profile"].as<std::vector<std::string>>();
  const std::string calibration = FlagString(vm, "calibration");
  HETSIM_RETURN_IF_ERROR(models::CheckKernelCalibration(calibration));
  for (auto& p : models::CalibrationProfiles(calibration)) refs.push_back(std::move(p));
  HETSIM_ASSIGN_OR_RETURN(setup->profiles, models::ProfileDb::Load(refs));
  setup->options.profiles = setup->profiles.empty() ? nullptr : &setup->profiles;
  setup->options.compute.calibration = calibration;
  return setup;
}

// "12h 03m", "3.2 d", "45 s".
std::string Duration(double s) {
  if (s >= 2 * 86400) return Fmt("%.1f d", s / 86400);
  if (s >= 3600) return Fmt("%.1f h", s / 3600);
  if (s >= 60) return Fmt("%.1f min", s / 60);
  return Fmt("%.1f s", s);
}

void PrintReport(const proto::ReplayReport& r, std::ostream& out) {
  out << "policy " << r.policy() << ": " << r.interruptions() << " interruptions in " << Duration(r.duration_s())
      << " (mean time between them " << Duration(r.mtbf_s()) << "), checkpoint every "
      << Duration(r.checkpoint_interval_s()) << " (" << r.checkpoint_interval_rule() << ")\n";
  out << "  ETTR " << Fmt("%.1f%%", 100 * r.ettr()) << ", goodput " << Fmt("%.4g", r.goodput_tokens_per_s())
      << " tokens/s of " << Fmt("%.4g", r.ideal_tokens_per_s()) << " ideal, " << Fmt("%.4g", r.tokens())
      << " tokens in " << r.iterations() << " iterations\n";
  out << "  lost:";
  for (const auto& d : r.downtime()) {
    if (d.seconds() > 0) out << " " << d.cause() << " " << Duration(d.seconds()) << ";";
  }
  out << "\n  " << Fmt("%.0f", r.gpu_hours()) << " GPU-hours";
  if (r.cost_usd() > 0) out << ", $" << Fmt("%.0f", r.cost_usd()) << " at $" << Fmt("%.2f", r.usd_per_gpu_hour()) << "/GPU-h";
  if (r.spares_gpus() > 0) out << " (" << Fmt("%.0f", r.spares_gpus()) << " spare GPUs held)";
  out << "\n";
  for (const auto& c : r.configurations()) {
    out << "  configuration " << c.plan() << " on " << c.nodes() << ": " << Fmt("%.3f", c.iteration_s())
        << " s/iteration, checkpoint save " << Fmt("%.2f", c.checkpoint_save_s()) << " s, load "
        << Fmt("%.2f", c.checkpoint_load_s()) << " s, trained " << Duration(c.seconds()) << "\n";
  }
}

int RunReplay(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  auto specs = LoadSpecs(vm, true, true);
  if (!specs.ok()) {
    err << specs.status().message() << "\n";
    return 1;
  }
  if (!vm.count("trace")) {
    err << "hetsim replay: give --trace (a trace file, a bundled trace, or llama3 to draw Llama-3-style failures)\n";
    return 2;
  }
  if (!specs->plan && !vm.count("planner")) {
    err << "hetsim replay: give --plan P or --planner NAME (the plan the run starts with)\n";
    return 2;
  }
  if (!specs->plan) {
    if (Status st = PlanWithFlags(vm, &*specs); !st.ok()) {
      err << st.message() << "\n";
      return 1;
    }
  }
  models::PlanContext ctx{*specs->cluster, *specs->model, specs->training};
  if (Status st = models::ValidatePlanStructure(*specs->plan, ctx, specs->plan_file); !st.ok()) {
    err << st.message() << "\n";
    return 1;
  }

  // The replay settings from the flags.
  proto::Replay spec;
  spec.set_trace(FlagString(vm, "trace"));
  if (spec.trace() == "llama3" || !vm["days"].defaulted()) spec.set_trace_days(vm["days"].as<double>());
  if (spec.trace() == "llama3" || !vm["rate-scale"].defaulted()) spec.set_trace_rate_scale(vm["rate-scale"].as<double>());
  const std::string interval = FlagString(vm, "checkpoint-interval");
  if (interval != "young-daly") {
    char* end = nullptr;
    const double v = std::strtod(interval.c_str(), &end);
    if (end == interval.c_str() || *end != '\0' || !(v > 0) || v > 1e9) {
      err << "hetsim replay: --checkpoint-interval: '" << interval
          << "' is neither seconds (e.g. 1800) nor young-daly\n";
      return 2;
    }
    spec.set_checkpoint_interval_s(v);
  }
  if (vm.count("detection-s")) spec.set_detection_s(vm["detection-s"].as<double>());
  if (vm.count("restart-s")) spec.set_restart_s(vm["restart-s"].as<double>());
  if (vm.count("usd-per-gpu-hour")) spec.set_usd_per_gpu_hour(vm["usd-per-gpu-hour"].as<double>());
  if (vm.count("spot-fraction")) spec.set_spot_price_fraction(vm["spot-fraction"].as<double>());
  std::vector<std::string> names = {"checkpoint-restart"};
  if (vm.count("policy")) names = vm["policy"].as<std::vector<std::string>>();
  for (const auto& name : names) {
    proto::RecoveryPolicy* p = spec.add_policies();
    p->set_name(name);
    // Which flags a policy takes comes from its traits (sim/recovery/policy.h), not from its name.
    const bool spares = sim::PolicyTakesSpares(name);
    const bool elastic = sim::PolicyReplans(name);
    if (vm.count("spares") && spares) p->set_spares(vm["spares"].as<uint32_t>());
    if (vm.count("replicas") && name == "in-memory") p->set_replicas(vm["replicas"].as<uint32_t>());
    if (vm.count("replan-planner") && elastic) p->set_planner(FlagString(vm, "replan-planner"));
    if (vm.count("replan-s") && elastic) p->set_replan_s(vm["replan-s"].as<double>());
    if (vm.count("measured-replan") && elastic) p->set_measured_replan(true);
    if (vm.count("no-grow") && elastic) p->set_grow(false);
  }
  // The flags get the bounds the manifest's `replay:` section has (NaN, infinity and out-of-range values).
  const auto flag_of = [](const std::string& key) -> std::string {
    static const std::map<std::string, std::string> kFlags = {
        {"trace_days", "--days"},           {"trace_rate_scale", "--rate-scale"},
        {"detection_s", "--detection-s"},   {"restart_s", "--restart-s"},
        {"usd_per_gpu_hour", "--usd-per-gpu-hour"}, {"spot_price_fraction", "--spot-fraction"},
        {"spares", "--spares"},             {"replicas", "--replicas"},
        {"replan_s", "--replan-s"},         {"checkpoint_interval_s", "--checkpoint-interval"}};
    const auto it = kFlags.find(key.substr(key.rfind('.') + 1));
    return it == kFlags.end() ? "" : it->second;
  };
  if (Status s = models::CheckRanges(spec, "hetsim replay", flag_of); !s.ok()) {
    err << s.message() << "\n";
    return 2;
  }
  if (Status s = CheckReplaySpec(spec, "hetsim replay"); !s.ok()) {
    err << s.message() << "\n";
    return 2;
  }
  auto sim_opt = SimOptionsFromFlags(vm);
  if (!sim_opt.ok()) {
    err << sim_opt.status().message() << "\n";
    return 2;
  }
  auto trace = LoadReplayTrace(spec, *specs->cluster, FlagString(vm, "cluster").empty() ? specs->cluster->name()
                                                                                       : FlagString(vm, "cluster"),
                               vm["seed"].as<uint64_t>());
  if (!trace.ok()) {
    err << trace.status().message() << "\n";
    return 1;
  }
  out << "trace " << trace->name << ": " << trace->trace.events_size() << " events over "
      << Duration(trace->trace.duration_s()) << " on " << specs->cluster->name() << " (" << specs->cluster->Summary()
      << ")\n";

  sim::ReplayCache cache;
  std::vector<proto::ReplayReport> reports;
  for (const auto& policy : spec.policies()) {
    const auto t0 = std::chrono::steady_clock::now();
    sim::ReplayInputs in;
    in.cluster = &*specs->cluster;
    in.model = &*specs->model;
    in.training = specs->training;
    in.plan = *specs->plan;
    in.trace = trace->trace;
    in.trace_name = trace->name;
    in.spec = spec;
    in.policy = policy;
    in.sim = (*sim_opt)->options;
    in.sim.progress = [&err](const sim::SimProgress& p) {
      if (const std::string line = sim::DescribeProgress(p); !line.empty()) err << "replay:   " << line << std::endl;
    };
    in.replan = MakeReplanner(*specs->model, specs->training, (*sim_opt)->options.profiles);
    in.cache = &cache;
    in.progress = [&err](const std::string& line) { err << line << "\n"; };
    auto rep = sim::ReplayRun(in);
    if (!rep.ok()) {
      err << "hetsim replay: policy " << policy.name() << ": " << rep.status().message() << "\n";
      return 1;
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    PrintReport(*rep, out);
    out << "  (replayed in " << Fmt("%.1f", wall) << " s)\n";
    reports.push_back(std::move(rep).value());
  }
  if (Status s = runner::WriteReplayOutputs(reports, FlagString(vm, "report-out"), FlagString(vm, "figure"), out);
      !s.ok()) {
    err << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

std::vector<Command> ReplayCommands() {
  return {{"replay",
           "replay a whole training run over a failure or spot trace under recovery policies (goodput, ETTR, "
           "downtime, cost)",
           "hetsim replay --cluster C --model M (--plan P | --planner NAME) --trace T|llama3 [--policy NAME]... "
           "[--checkpoint-interval S|young-daly] [--report-out r.json] [--figure f.png]",
           [](po::options_description& d, po::positional_options_description&) {
             AddSpecFlags(d, true);
             AddRefineFlags(d);
             d.add_options()("planner", po::value<std::string>(), "plan with this planner instead of --plan")
                 ("planner-options", po::value<std::string>(), "the planner's options (YAML file)")
                 ("trace", po::value<std::string>(), "trace file or bundled name, or llama3 (drawn for the cluster)")
                 ("days", po::value<double>()->default_value(54), "llama3: days to draw")
                 ("seed", po::value<uint64_t>()->default_value(1), "llama3: random seed")
                 ("rate-scale", po::value<double>()->default_value(1), "llama3: multiplies every failure rate")
                 ("policy", po::value<std::vector<std::string>>()->composing(),
                  "recovery policy (repeatable): checkpoint-restart, hot-spares, in-memory, varuna, elastic, autohet")
                 ("checkpoint-interval", po::value<std::string>()->default_value("young-daly"),
                  "seconds of training between checkpoints, or young-daly")
                 ("detection-s", po::value<double>(), "failure to job stopped (default 120)")
                 ("restart-s", po::value<double>(), "relaunch and communicator set-up (default 300)")
                 ("spares", po::value<uint32_t>(), "hot-spares, in-memory: spare nodes (default 1% of the plan's)")
                 ("replicas", po::value<uint32_t>(), "in-memory: copies of each checkpoint (default 2)")
                 ("replan-planner", po::value<std::string>(), "elastic, varuna, autohet, hetu: the planner that re-plans")
                 ("replan-s", po::value<double>(),
                  "elastic, varuna, autohet, hetu: fixed re-planning time (default: none)")
                 ("measured-replan", "elastic, varuna, autohet, hetu: charge the planner's measured wall time (the "
                                     "report then differs from run to run)")
                 ("no-grow", "elastic, varuna, autohet: do not grow back when nodes return")
                 ("usd-per-gpu-hour", po::value<double>(), "price of a GPU-hour (default: the GPU's on-demand price)")
                 ("spot-fraction", po::value<double>(), "spot traces: spot price / on-demand price (default 0.35)")
                 ("fidelity", po::value<std::string>()->default_value("balanced"), "fast | balanced | full")
                 ("profile", po::value<std::vector<std::string>>()->composing(), "measured layer profile; repeatable")
                 ("calibration", po::value<std::string>()->default_value("default"), "kernel-model calibration")
                 ("report-out", po::value<std::string>(), "write the reports (JSON; a list when several policies)")
                 ("figure", po::value<std::string>(), "draw goodput over time and downtime per policy (PNG)");
           },
           RunReplay}};
}

}  // namespace hetsim::cli
