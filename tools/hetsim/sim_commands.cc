// `hetsim simulate`: one iteration of a plan on the simulated cluster; `hetsim lower`: the plan's lowering.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <ostream>
#include <sstream>
#include <utility>
#include <vector>

#include "models/describe.h"
#include "models/intervals.h"
#include "models/kernels.h"
#include "models/lowering.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "sim/simulator.h"
#include "tools/hetsim/cli.h"

namespace hetsim::cli {
namespace {

// The human summary printed after a simulation.
void PrintSummary(const proto::IterationReport& r, const std::string& fidelity, std::ostream& out,
                  const sim::SimResult* played = nullptr) {
  out << "simulated one iteration of " << (r.plan().empty() ? "the plan" : "plan " + r.plan()) << " (" << r.model()
      << " on " << r.cluster() << ", fidelity " << fidelity << ") in " << Fmt("%.2f", r.wall_time_s()) << " s\n";
  out << "  iteration time  " << Fmt("%.4f", r.iteration_time_s()) << " s\n";
  out << "  throughput      " << Fmt("%.0f", r.tokens_per_s()) << " tokens/s\n";
  out << "  MFU             " << Fmt("%.1f", 100 * r.mfu()) << " %\n";
  out << "  pipeline bubble " << Fmt("%.1f", 100 * r.bubble_fraction()) << " %\n";
  // How the simulator played the plan: folded to one device per stage, or every device and why.
  if (played != nullptr) {
    const auto devices = static_cast<uint32_t>(r.devices_size());
    if (played->played_devices < devices) {
      out << "  folded          " << played->played_devices << " of " << devices
          << " devices played (the others are identical replicas; --no-fold plays every one)";
      if (played->scaled_links > 0) {
        out << "; " << played->scaled_links << " links stand for the replicas' pipeline transfers";
      }
      out << "\n";
    } else if (!played->fold_note.empty() && devices > 1) {
      out << "  not folded      " << played->fold_note << "\n";
    }
  }
  // The communicator's paths between node groups (HetHub §3.1), when any transfer leaves a node.
  for (const auto& c : r.comm_paths()) {
    out << "  communicator    " << c.from() << (c.from() == c.to() ? " (node to node)" : " <-> " + c.to()) << ": "
        << (c.path() == "cpu_staged" ? "CPU-staged (GPU -> host -> network -> host -> GPU)" : "GPU RDMA") << " — "
        << c.reason() << "\n";
  }
  // NCCL's choice for the largest collective calls between nodes (models/nccl.h), at most four.
  for (int i = 0; i < r.nccl_calls_size() && i < 4; ++i) {
    const auto& c = r.nccl_calls(i);
    char size[32], line[320];
    if (c.bytes() >= 1e9) {
      std::snprintf(size, sizeof size, "%.2f GB", c.bytes() / 1e9);
    } else {
      std::snprintf(size, sizeof size, "%.1f MB", c.bytes() / 1e6);
    }
    std::snprintf(line, sizeof line,
                  "  between nodes   %s %s of %u ranks on %u nodes, %s a call: NCCL %s/%s, %.0f us + bytes at "
                  "%.3g GB/s (%s)\n",
                  c.category().c_str(), c.collective().c_str(), c.ranks(), c.nodes(), size, c.algorithm().c_str(),
                  c.protocol().c_str(), c.latency_us(), c.algorithm_gbyte_s(), c.nic().c_str());
    out << line;
  }
  if (r.straggler_wait_s() > 0) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "  stragglers      the slowest of %u nodes finishes %.0f ms after the mean one (straggler_cv %.1f%%; "
                  "included in the iteration)\n",
                  r.straggler_nodes(), r.straggler_wait_s() * 1e3, 100 * r.straggler_cv());
    out << line;
  }
  // What each GPU type's compute times rest on; a type without measurements is said to be a guess.
  for (const auto& b : r.compute_basis()) {
    out << "  compute basis   " << b.gpu() << ": " << ComputeBasisText(b, r.model()) << "\n";
  }
  // One line per (pipeline, stage): the slowest device's numbers.
  struct Row {
    int devices = 0;
    double compute = 0, tp = 0, cp = 0, ep = 0, pp = 0, dp = 0, idle = 0, mem = 0, cap = 0;
    bool oom = false;
    std::string gpus;
  };
  std::map<std::pair<uint32_t, uint32_t>, Row> rows;
  for (const auto& d : r.devices()) {
    Row& row = rows[{d.pipeline(), d.stage()}];
    row.devices++;
    row.compute = std::max(row.compute, d.compute_s());
    row.tp = std::max(row.tp, d.tp_communication_s());
    row.pp = std::max(row.pp, d.pp_communication_s());
    row.dp = std::max(row.dp, d.dp_communication_s());
    row.cp = std::max(row.cp, d.cp_communication_s());
    row.ep = std::max(row.ep, d.ep_communication_s());
    row.idle = std::max(row.idle, d.idle_s());
    row.mem = std::max(row.mem, d.peak_memory_gib());
    row.cap = d.capacity_gib();
    row.oom |= d.oom();
    if (row.gpus.find(d.gpu()) == std::string::npos) row.gpus += (row.gpus.empty() ? "" : "+") + d.gpu();
  }
  // The context-parallel and expert-parallel columns only for plans that have such communication.
  bool any_cp = false, any_ep = false;
  for (const auto& [key, row] : rows) any_cp |= row.cp > 0, any_ep |= row.ep > 0;
  out << "\n  pipe stage  devices  gpus          compute s   tp s      " << (any_cp ? "cp s      " : "")
      << (any_ep ? "ep s      " : "") << "pp s      dp s      idle s    memory GiB\n";
  size_t shown = 0;
  for (const auto& [key, row] : rows) {
    if (shown++ == 40) {
      out << "  … " << rows.size() - 40 << " more stages (see --report-out)\n";
      break;
    }
    char line[288], cp[16] = "", ep[16] = "";
    if (any_cp) std::snprintf(cp, sizeof(cp), "%-9.3f ", row.cp);
    if (any_ep) std::snprintf(ep, sizeof(ep), "%-9.3f ", row.ep);
    std::snprintf(line, sizeof(line), "  %-4u %-6u %-8d %-13s %-11.3f %-9.3f %s%s%-9.3f %-9.3f %-9.3f %.1f / %.0f%s\n",
                  key.first, key.second, row.devices, row.gpus.c_str(), row.compute, row.tp, cp, ep, row.pp, row.dp,
                  row.idle, row.mem, row.cap, row.oom ? "  OUT OF MEMORY" : "");
    out << line;
  }
  if (r.any_oom()) out << "\nwarning: some devices run out of memory under this plan (see the memory column)\n";
}

// The plan's devices: which ids it uses, how many, and the lowest and highest.
struct UsedDevices {
  std::vector<char> used;
  uint32_t count = 0, lo = UINT32_MAX, hi = 0;
};

UsedDevices PlanDevices(const proto::Plan& plan, const models::Cluster& cluster) {
  UsedDevices u;
  u.used.assign(cluster.num_devices(), 0);
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) {
        if (d >= u.used.size() || u.used[d]) continue;
        u.used[d] = 1;
        ++u.count;
        u.lo = std::min(u.lo, d);
        u.hi = std::max(u.hi, d);
      }
    }
  }
  return u;
}

// Device ids such as 0,8,16-23, each used by the plan; `flag` and `expected` go into the errors.
Result<std::vector<uint32_t>> ParseDeviceIds(const std::string& spec, const UsedDevices& u, const std::string& flag,
                                             const std::string& expected) {
  std::vector<uint32_t> ids;
  std::stringstream ss(spec);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    const size_t dash = tok.find('-');
    char* end = nullptr;
    const unsigned long a = std::strtoul(tok.c_str(), &end, 10);
    bool ok = !tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0])) &&
              end == tok.c_str() + (dash == std::string::npos ? tok.size() : dash);
    unsigned long b = a;
    if (ok && dash != std::string::npos) {
      const std::string rest = tok.substr(dash + 1);
      b = std::strtoul(rest.c_str(), &end, 10);
      ok = !rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0])) && *end == '\0' && b >= a;
    }
    if (!ok) return Status::Invalid(flag + ": '" + tok + "' is not a device id or range" + expected);
    for (unsigned long d = a; d <= b; ++d) {
      if (d >= u.used.size() || !u.used[d]) {
        return Status::Invalid(flag + ": device " + std::to_string(d) + " is not used by the plan (it uses " +
                               std::to_string(u.count) + " devices, ids " + std::to_string(u.lo) + " to " +
                               std::to_string(u.hi) + "; `hetsim describe --plan P` lists them)");
      }
      ids.push_back(static_cast<uint32_t>(d));
    }
  }
  if (ids.empty()) return Status::Invalid(flag + ": no device given" + expected);
  return ids;
}

// --timeline-devices: the device ids whose slices the timeline keeps (empty: all) and a note for the
// summary line when that is not every device.
Result<std::pair<std::vector<uint32_t>, std::string>> TimelineDevices(const std::string& spec, const proto::Plan& plan,
                                                                      const models::Cluster& cluster) {
  const UsedDevices u = PlanDevices(plan, cluster);
  auto note = [&](const std::vector<uint32_t>& ids, const std::string& which) {
    return std::to_string(ids.size()) + " of " + std::to_string(u.count) + " devices (" + which +
           "; --timeline-devices all for every one)";
  };
  if (spec == "all") return std::pair<std::vector<uint32_t>, std::string>{};
  if (spec == "auto") {
    auto ids = sim::DefaultTimelineDevices(plan, cluster);
    std::string why = ids.empty() ? "" : note(ids, "one per stage of each distinct pipeline");
    return std::pair{std::move(ids), std::move(why)};
  }
  if (spec == "stages") {
    auto ids = sim::StageTimelineDevices(plan);
    std::string why = note(ids, "the first device of every stage");
    return std::pair{std::move(ids), std::move(why)};
  }
  HETSIM_ASSIGN_OR_RETURN(
      std::vector<uint32_t> ids,
      ParseDeviceIds(spec, u, "--timeline-devices", " (expected auto, all, stages, or device ids such as 0,8,16-23)"));
  std::string why = note(ids, "those asked for");
  return std::pair{std::move(ids), std::move(why)};
}

int RunSimulate(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (vm.count("plan") == vm.count("planner")) {
    err << "hetsim simulate: give either --plan FILE or --planner NAME (`hetsim list planners`)\n";
    return 2;
  }
  auto specs = LoadSpecs(vm, true, true);
  if (!specs.ok()) {
    err << specs.status().message() << "\n";
    return 1;
  }
  if (vm.count("planner")) {
    if (Status st = PlanWithFlags(vm, &*specs); !st.ok()) {
      err << st.message() << "\n";
      return 1;
    }
    out << "planned with " << FlagString(vm, "planner") << ": " << specs->plan->pipelines_size() << " pipeline"
        << (specs->plan->pipelines_size() == 1 ? "" : "s") << "\n";
    for (const auto& n : specs->plan_notes) out << "  " << n << "\n";
  }
  models::PlanContext ctx{*specs->cluster, *specs->model, specs->training};
  Status st = models::ValidatePlanStructure(*specs->plan, ctx, specs->plan_file);
  if (!st.ok()) {
    err << st.message() << "\n";
    return 1;
  }
  const std::string fid_name = vm["fidelity"].as<std::string>();
  auto fid = sim::ParseFidelity(fid_name);
  if (!fid.ok()) {
    err << fid.status().message() << "\n";
    return 2;
  }
  // The calibration: --calibration, else the one the plan names (its software stack), else `default`.
  const bool plan_names_calibration = vm["calibration"].defaulted() && !specs->plan->calibration().empty();
  const std::string calibration = plan_names_calibration
                                      ? models::ResolveRelative(specs->plan->calibration(), specs->plan_file)
                                      : FlagString(vm, "calibration");
  std::vector<std::string> profile_refs;
  if (vm.count("profile")) profile_refs = vm["profile"].as<std::vector<std::string>>();
  for (auto& p : models::CalibrationProfiles(calibration)) profile_refs.push_back(std::move(p));
  auto profiles = models::ProfileDb::Load(profile_refs);
  if (!profiles.ok()) {
    err << profiles.status().message() << "\n";
    return 1;
  }
  if (Status c = plan_names_calibration ? models::CheckKernelCalibration(calibration, specs->plan_file + ": calibration")
                                        : models::CheckKernelCalibration(calibration);
      !c.ok()) {
    err << c.message() << "\n";
    return 2;
  }
  sim::SimOptions opt;
  opt.fidelity = *fid;
  opt.record_timeline = vm.count("timeline-out") > 0;
  std::string timeline_note;
  if (opt.record_timeline) {
    auto chosen = TimelineDevices(FlagString(vm, "timeline-devices"), *specs->plan, *specs->cluster);
    if (!chosen.ok()) {
      err << chosen.status().message() << "\n";
      return 2;
    }
    opt.timeline_devices = std::move(chosen->first);
    timeline_note = std::move(chosen->second);
  }
  opt.fold = vm.count("no-fold") == 0;
  if (vm.count("shared-cores")) {
    opt.shared_cores = vm["shared-cores"].as<uint32_t>();
    if (Status c = sim::CheckSharedCores(opt.shared_cores, "hetsim simulate: --shared-cores"); !c.ok()) {
      err << c.message() << "\n";
      return 2;
    }
    // Cores are shared by CPU workers (the CPU twin); GPUs compute on their own chips.
    for (uint32_t d = 0; d < specs->cluster->num_devices(); ++d) {
      const models::GpuSpec& gpu = *specs->cluster->device(d).gpu;
      if (gpu.name != "cpu") {
        err << "hetsim simulate: --shared-cores: device " << d << " of cluster '" << specs->cluster->name()
            << "' is a " << gpu.name
            << " GPU; --shared-cores models CPU workers sharing a machine's cores (the CPU twin, a cluster of "
               "`cpu` devices); drop the flag for a GPU cluster\n";
        return 2;
      }
    }
  }
  opt.profiles = &*profiles;
  opt.compute.calibration = calibration;
  opt.progress = [&err](const sim::SimProgress& p) {
    if (const std::string line = sim::DescribeProgress(p); !line.empty()) err << "simulate: " << line << std::endl;
  };
  auto res = sim::SimulateIteration(*specs->plan, ctx, opt);
  if (!res.ok()) {
    err << res.status().message() << "\n";
    return 1;
  }
  if (specs->plan->name().empty()) res->report.set_plan(specs->plan_file);
  PrintSummary(res->report, fid_name, out, &*res);
  // How sure: the spread of measured / simulated over the validated runs most like this one.
  const models::PredictionInterval interval = models::IntervalFor(
      models::ClassOf(*specs->plan, ctx.cluster, ctx.training, models::AllComputeMeasured(res->report),
                      ctx.model.HasMoe()));
  out << "  interval        " << models::DescribeInterval(interval, res->report.iteration_time_s())
      << " (docs/calibration.md \"Intervals\")\n";
  if (vm.count("report-out")) {
    Status w = models::WriteFileAtomically(FlagString(vm, "report-out"), sim::ReportJson(res->report));
    if (!w.ok()) {
      err << w.message() << "\n";
      return 1;
    }
    out << "report: " << FlagString(vm, "report-out") << "\n";
  }
  if (vm.count("timeline-out")) {
    Status w = models::WriteFileAtomically(FlagString(vm, "timeline-out"), sim::ChromeTraceJson(*res, *specs->cluster));
    if (!w.ok()) {
      err << w.message() << "\n";
      return 1;
    }
    out << "timeline: " << FlagString(vm, "timeline-out") << " (open in https://ui.perfetto.dev)"
        << (timeline_note.empty() ? "" : "; " + timeline_note) << "\n";
  }
  if (res->report.any_oom() && !vm.count("allow-oom")) {
    // The numbers above and the files are kept; the exit status says such a plan would not run.
    err << "hetsim simulate: the plan does not fit in memory on some devices (the memory column above); fix the "
           "plan (more pipeline stages, TP, ZeRO, recomputation, a smaller micro-batch, CPU offload) or pass "
           "--allow-oom to accept it\n";
    return 1;
  }
  return 0;
}

// `lower` prints every operation; past this many the text alone is gigabytes.
constexpr double kMaxLoweredOps = 8e6;

int RunLower(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  auto specs = LoadSpecs(vm, true, true);
  if (!specs.ok()) {
    err << specs.status().message() << "\n";
    return 1;
  }
  if (!specs->plan) {
    err << "hetsim lower: give --plan FILE\n";
    return 2;
  }
  models::PlanContext ctx{*specs->cluster, *specs->model, specs->training};
  Status st = models::ValidatePlanStructure(*specs->plan, ctx, specs->plan_file);
  if (!st.ok()) {
    err << st.message() << "\n";
    return 1;
  }
  models::LoweringOptions lo;
  lo.fuse_passes = vm.count("fused") > 0;
  const UsedDevices used = PlanDevices(*specs->plan, *specs->cluster);
  if (vm.count("devices")) {
    auto ids = ParseDeviceIds(FlagString(vm, "devices"), used, "--devices", " (expected device ids such as 0,8,16-23)");
    if (!ids.ok()) {
      err << ids.status().message() << "\n";
      return 2;
    }
    lo.lower_devices.assign(used.used.size(), false);
    for (uint32_t d : *ids) lo.lower_devices[d] = true;
  } else {
    // Every rank's list in memory and as text: estimated from the first device's before lowering them all.
    models::LoweringOptions one = lo;
    one.lower_devices.assign(used.used.size(), false);
    one.lower_devices[used.lo] = true;
    auto first = models::LowerPlan(*specs->plan, ctx, one);
    if (first.ok()) {
      size_t ops = 0;
      for (const auto& r : first->ranks) ops += r.ops.size() + r.dp_stream.size();
      const double total = static_cast<double>(ops) * used.count;
      if (total > kMaxLoweredOps) {
        err << "hetsim lower: " << specs->plan_file << ": every rank's operations would be about "
            << Fmt("%.3g", total) << " (" << ops << " on device " << used.lo << " times " << used.count
            << " devices), more than `lower` writes at once (" << Fmt("%.3g", kMaxLoweredOps)
            << "); choose devices with --devices (e.g. --devices " << used.lo << "-" << std::min(used.hi, used.lo + 7)
            << ")" << (lo.fuse_passes ? "" : " or use --fused") << "\n";
        return 1;
      }
    }
  }
  auto lowering = models::LowerPlan(*specs->plan, ctx, lo);
  if (!lowering.ok()) {
    err << specs->plan_file << ": " << lowering.status().message() << "\n";
    return 1;
  }
  const std::string text = models::FormatLowering(*lowering);
  if (vm.count("output")) {
    Status w = models::WriteFileAtomically(FlagString(vm, "output"), text);
    if (!w.ok()) {
      err << w.message() << "\n";
      return 1;
    }
    size_t ops = 0;
    for (const auto& r : lowering->ranks) ops += r.ops.size() + r.dp_stream.size();
    const auto totals = models::TotalOps(*lowering);
    size_t lowered = 0;
    for (const auto& r : lowering->ranks) lowered += !r.ops.empty() || !r.dp_stream.empty();
    out << "lowered " << specs->plan_file << ": " << (lowering->partial ? std::to_string(lowered) + " of " : "")
        << lowering->ranks.size() << " ranks, " << ops << " operations, "
        << Fmt("%.4g", totals.flops) << " FLOPs, " << Fmt("%.4g", totals.send_bytes) << " bytes sent point-to-point -> "
        << FlagString(vm, "output") << "\n";
  } else {
    out << text;
  }
  return 0;
}

}  // namespace

std::vector<Command> SimCommands() {
  return {{"simulate", "simulate one training iteration of a plan on the cluster (SimGrid)",
           "hetsim simulate --cluster C --model M (--plan P | --planner NAME) [--training T] [--report-out r.json] "
           "[--timeline-out t.json]",
           [](po::options_description& d, po::positional_options_description&) {
             AddSpecFlags(d, true);
             AddRefineFlags(d);
             d.add_options()("planner", po::value<std::string>(), "plan with this planner instead of --plan")
                 ("planner-options", po::value<std::string>(), "the planner's options (YAML file)")
                 ("fidelity", po::value<std::string>()->default_value("balanced"),
                             "fast | balanced | full (docs/simulator.md)")
                 ("no-fold", "play every device even when pipelines and TP ranks are identical (docs/simulator.md, "
                             "\"Folding\")")
                 ("shared-cores", po::value<uint32_t>(),
                  "the CPU twin: the devices compute through a pool of N cores (at most N at once; a device gives "
                  "its core up while it waits and queues for one after), as hetsim-exec --cores N runs its ranks "
                  "(docs/calibration.md)")
                 ("profile", po::value<std::vector<std::string>>()->composing(),
                  "measured layer profile (bundled name or path); repeatable")
                 ("calibration", po::value<std::string>()->default_value("default"),
                  "kernel-model calibration (bundled name or file; `hetsim list calibrations`); default: the "
                 "plan's own `calibration`, else default")
                 ("report-out", po::value<std::string>(), "write the iteration report (JSON)")
                 ("timeline-out", po::value<std::string>(), "write a Chrome-trace timeline (JSON, opens in Perfetto)")
                ("timeline-devices", po::value<std::string>()->default_value("auto"),
                 "devices the timeline shows: auto (all up to 256 devices, else one per stage of each distinct "
                 "pipeline), all, stages (the first device of every stage), or ids: 0,8,16-23")
                 ("allow-oom", "exit 0 even when the plan does not fit in memory (the report flags the devices)");
           },
           RunSimulate},
          {"lower", "print the plan's lowering: every rank's operations in order (what the simulator plays and "
                    "hetsim-exec runs)",
           "hetsim lower --plan P [--cluster C --model M --training T] [--fused] [--devices 0-7] [-o ops.txt]",
           [](po::options_description& d, po::positional_options_description&) {
             AddSpecFlags(d, true);
             d.add_options()("fused", "one operation per pass and micro-batch, as the simulator's balanced and fast "
                                      "fidelities play it (default: per layer, as hetsim-exec runs it)")
                 ("devices", po::value<std::string>(), "only these devices' operations, e.g. 0,8,16-23 (default: every "
                                                       "device, up to 8 million operations)")
                 ("output,o", po::value<std::string>(), "write the operations here instead of standard output");
           },
           RunLower}};
}

}  // namespace hetsim::cli
