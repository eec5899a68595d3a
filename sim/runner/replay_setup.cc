#include "sim/runner/replay_setup.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <ostream>

#include "models/child_process.h"
#include "models/spec_io.h"
#include "models/suggest.h"
#include "planners/planner.h"
#include "traces/llama3.h"
#include "traces/trace.h"

namespace hetsim::runner {

namespace fs = std::filesystem;

Status CheckReplaySpec(const proto::Replay& spec, const std::string& where) {
  ErrorList errors;
  if (spec.trace().empty()) {
    errors.Add(where + ".trace: missing; name a trace file, a bundled trace, or llama3 (drawn for the cluster)");
  }
  if (spec.trace() != "llama3" && (spec.trace_days() > 0 || spec.trace_rate_scale() > 0)) {
    errors.Add(where + ".trace_days / trace_rate_scale: only for trace: llama3 (a trace file has its own length)");
  }
  if (!(spec.trace_days() >= 0 && spec.trace_days() <= 3650)) {
    errors.Add(where + ".trace_days: " + std::to_string(spec.trace_days()) + " is not a length in days (0 < days <= 3650)");
  }
  if (!(spec.trace_rate_scale() >= 0 && spec.trace_rate_scale() <= 1000)) {
    errors.Add(where + ".trace_rate_scale: must be a positive factor (at most 1000)");
  }
  for (int i = 0; i < spec.policies_size(); ++i) {
    const std::string at = where + ".policies[" + std::to_string(i) + "]";
    if (Status s = sim::CheckRecoveryPolicy(spec.policies(i), at); !s.ok()) errors.Add(s.message());
    // A re-planner that is not registered would turn every re-plan into waiting for the starting nodes.
    const std::string& planner = spec.policies(i).planner();
    if (!planner.empty()) {
      const auto names = planners::PlannerNames();
      if (std::find(names.begin(), names.end(), planner) == names.end()) {
        errors.Add(at + ".planner: no planner named '" + planner + "'" + DidYouMean(planner, names) +
                   " (`hetsim list planners`)");
      }
    }
  }
  return errors.ToStatus();
}

Result<LoadedTrace> LoadReplayTrace(const proto::Replay& spec, const models::Cluster& cluster,
                                    const std::string& cluster_ref, uint64_t seed, const std::string& relative_to) {
  LoadedTrace out;
  if (spec.trace() == "llama3") {
    traces::FailureTraceOptions o;
    o.days = spec.trace_days() > 0 ? spec.trace_days() : 54;
    o.rate_scale = spec.trace_rate_scale() > 0 ? spec.trace_rate_scale() : 1;
    o.seed = seed;
    HETSIM_RETURN_IF_ERROR(traces::CheckFailureTraceOptions(cluster, o, "replay.trace_days", "trace_rate_scale"));
    out.trace = traces::GenerateLlama3Failures(cluster, cluster_ref, o);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "llama3 (%g days, seed %llu)", o.days, static_cast<unsigned long long>(seed));
    out.name = buf;
    return out;
  }
  const std::string ref = models::ResolveRelative(spec.trace(), relative_to);
  HETSIM_ASSIGN_OR_RETURN(out.trace, traces::LoadTrace(ref));
  out.name = out.trace.name().empty() ? spec.trace() : out.trace.name();
  if (!out.trace.cluster().empty()) {
    auto recorded = models::LoadCluster(models::ResolveRelative(out.trace.cluster(), ref));
    if (recorded.ok() && recorded->name() != cluster.name()) {
      return Status::Invalid(ref + ": cluster: the trace names cluster " + recorded->name() +
                             ", the replay runs on " + cluster.name() +
                             "; replay on that cluster, or draw or convert the trace for this one (`hetsim trace`)");
    }
  }
  HETSIM_RETURN_IF_ERROR(traces::CheckTrace(out.trace, cluster, ref));
  return out;
}

sim::Replanner MakeReplanner(const models::TransformerModel& model, const proto::Training& training,
                             const models::ProfileDb* profiles) {
  return [&model, &training, profiles](const models::Cluster& live,
                                       const proto::RecoveryPolicy& policy) -> Result<sim::Replanned> {
    const auto [name, options] = sim::DefaultReplanner(policy);
    HETSIM_ASSIGN_OR_RETURN(auto planner, planners::CreatePlanner(name, options, "replay policy " + policy.name()));
    planners::PlanningProblem problem{live, model, training, profiles, {}};
    const auto t0 = std::chrono::steady_clock::now();
    auto res = planners::RunPlanner(*planner, problem);
    if (!res.ok()) return Status::Invalid("planner " + name + " found no plan: " + res.status().message());
    sim::Replanned r;
    r.plan = std::move(res->plan);
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
}

Status WriteReplayOutputs(const std::vector<proto::ReplayReport>& reports, const std::string& report_out,
                          const std::string& figure, std::ostream& out) {
  std::vector<std::string> files;
  // Reports stream to their file one segment at a time (a million-event replay's would take gigabytes whole).
  const auto write = [&](const std::string& path, bool list) {
    return models::WriteFileAtomically(path, [&](const models::PieceSink& put) -> Status {
      if (list) HETSIM_RETURN_IF_ERROR(put("[\n"));
      for (size_t i = 0; i < reports.size(); ++i) {
        if (i > 0) HETSIM_RETURN_IF_ERROR(put(",\n"));
        HETSIM_RETURN_IF_ERROR(sim::WriteReplayReportJson(reports[i], put));
      }
      return list ? put("]\n") : Status::Ok();
    });
  };
  if (!report_out.empty()) {
    HETSIM_RETURN_IF_ERROR(write(report_out, reports.size() != 1));
    out << "report: " << report_out << "\n";
    files.push_back(report_out);
  }
  if (figure.empty()) return Status::Ok();
  std::string tmp;
  if (files.empty()) {
    tmp = (fs::temp_directory_path() / ("hetsim-replay-" + std::to_string(::getpid()) + ".json")).string();
    HETSIM_RETURN_IF_ERROR(write(tmp, true));
    files.push_back(tmp);
  }
  std::vector<std::string> argv = {"/usr/bin/python3", models::PlotDir() + "/replay.py", "-o", figure};
  argv.insert(argv.end(), files.begin(), files.end());
  auto rc = models::RunProgram(argv);
  if (!tmp.empty()) fs::remove(tmp);
  if (!rc.ok()) return rc.status();
  if (*rc != 0) return Status::Invalid("tools/plot/replay.py failed (exit " + std::to_string(*rc) + ") drawing " + figure);
  out << "figure: " << figure << "\n";
  return Status::Ok();
}

}  // namespace hetsim::runner
