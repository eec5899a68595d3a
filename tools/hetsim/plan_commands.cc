// `hetsim plan`: runs a planner (planners/planner.h) and prints its plan, the analytic estimate and the
// search statistics; `-o` writes the plan as a file that `hetsim describe --plan` and `validate` read.
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "models/describe.h"
#include "models/kernels.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "planners/planner.h"
#include "tools/hetsim/cli.h"
#include "sim/planning/refine.h"

namespace hetsim::cli {
namespace {

std::string PlannerList() {
  std::string out;
  for (const auto& p : planners::Planners()) out += p.name + "\t" + p.summary + "\n";
  return out;
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::IoError(path + ": cannot read the options file (does it exist?)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// How the written plan refers to a cluster or model: a bundled name as is, a file relative to the plan.
std::string Reference(const std::string& ref, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(ref, ec)) return ref;
  const fs::path dir = fs::absolute(fs::path(output)).parent_path();
  fs::path rel = fs::relative(fs::absolute(ref), dir, ec);
  if (ec || rel.empty()) return fs::absolute(ref).string();
  std::string s = rel.string();
  if (s.find('/') == std::string::npos && !s.ends_with(".yaml")) s = "./" + s;  // not a bundled name
  return s;
}

int RunPlan(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (vm.count("list")) {
    out << PlannerList();
    return 0;
  }
  const std::string name = FlagString(vm, "planner");
  if (name.empty()) {
    err << "hetsim plan: give --planner NAME (one of: ";
    bool first = true;
    for (const auto& n : planners::PlannerNames()) {
      err << (first ? "" : ", ") << n;
      first = false;
    }
    err << ")\n";
    return 2;
  }
  auto planner = planners::CreatePlanner(name);
  if (!planner.ok()) return Fail(err, planner.status());
  if (vm.count("options")) {
    const std::string path = FlagString(vm, "options");
    auto text = ReadTextFile(path);
    if (!text.ok()) return Fail(err, text.status());
    const Status s = (*planner)->ConfigureText(*text, path);
    if (!s.ok()) return Fail(err, s);
  }
  auto specs = LoadSpecs(vm, /*need_cluster=*/true, /*need_model=*/true);
  if (!specs.ok()) return Fail(err, specs.status());
  std::optional<models::ProfileDb> profiles;
  models::ComputeOptions compute;
  std::vector<std::string> profile_refs;
  if (vm.count("profile")) profile_refs = vm["profile"].as<std::vector<std::string>>();
  if (vm.count("calibration")) {
    compute.calibration = FlagString(vm, "calibration");
    if (Status c = models::CheckKernelCalibration(compute.calibration); !c.ok()) return Fail(err, c);
    for (auto& p : models::CalibrationProfiles(compute.calibration)) profile_refs.push_back(std::move(p));
  }
  if (!profile_refs.empty()) {
    auto db = models::ProfileDb::Load(profile_refs);
    if (!db.ok()) return Fail(err, db.status());
    profiles = std::move(db).value();
  }
  planners::PlanningProblem problem{*specs->cluster, *specs->model, specs->training,
                                    profiles ? &*profiles : nullptr, compute};
  problem.progress = [&err](const std::string& line) { err << line << std::endl; };
  planning::RefineOptions refine;
  const auto k = RefineFlag(vm);
  if (!k.ok()) {
    err << k.status().message() << "\n";
    return 2;
  }
  if (*k >= 0) refine.k = static_cast<uint32_t>(*k);
  const auto polish = PolishFlag(vm);
  if (!polish.ok()) {
    err << polish.status().message() << "\n";
    return 2;
  }
  if (*polish >= 0) refine.polish = static_cast<uint32_t>(*polish);
  planning::RefineOutcome checked;
  auto result = planning::PlanOnTwin(**planner, problem, refine, &checked);
  if (!result.ok()) return Fail(err, result.status());
  const models::PlanContext ctx{*specs->cluster, *specs->model, specs->training};
  out << "planner " << name << " on " << specs->cluster->name() << " (" << specs->cluster->Summary() << ") for "
      << specs->model->name() << "\n";
  out << models::DescribePlan(result->plan, ctx);
  out << planners::DescribeEstimate(result->estimate);
  out << planners::DescribeStats(result->stats);
  if (vm.count("output")) {
    const std::string path = FlagString(vm, "output");
    char line[160];
    std::snprintf(line, sizeof line, "estimated iteration %.6g s (analytic model), %llu candidates in %.3f s",
                  result->estimate.iteration_s, static_cast<unsigned long long>(result->stats.candidates_evaluated),
                  result->stats.wall_time_s);
    std::string comment = "plan by `hetsim plan --planner " + name + "`; " + line;
    if (!checked.candidates.empty()) {
      const auto& pick = checked.candidates.front();
      const auto& chosen = checked.candidates[checked.chosen];
      auto secs = [](double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%.6g s", v);
        return std::string(b);
      };
      comment += "\ntwin check (--refine " + std::to_string(checked.k) + "): " +
                 std::to_string(checked.candidates.size()) + " simulated; " +
                 (checked.changed() ? "runner-up " + std::to_string(chosen.rank) + " chosen, " + secs(chosen.simulated_s) +
                                          " simulated (the planner's pick: " +
                                          (pick.error.empty() ? secs(pick.simulated_s) : std::string("failed")) + ")"
                                    : "the planner's pick kept, " + secs(chosen.simulated_s) + " simulated");
      if (checked.polished && !checked.polish.kept.empty()) {
        comment += "\npolished on the twin (up to " + std::to_string(checked.polish_budget) +
                   " simulations, beyond the planner's paper): " +
                   secs(checked.polish.start_s) +
                   " -> " + secs(checked.polish.end_s) + " simulated, " + std::to_string(checked.polish.kept.size()) +
                   " changes kept";
      }
    }
    proto::Plan named = result->plan;
    if (named.name().empty()) named.set_name(name + "-" + specs->model->name() + "-" + specs->cluster->name());
    const std::string text = planners::PlanFileYaml(named, Reference(FlagString(vm, "cluster"), path),
                                                    Reference(FlagString(vm, "model"), path), specs->training, comment);
    const Status s = models::WriteFileAtomically(path, text);
    if (!s.ok()) return Fail(err, s);
    out << "wrote " << path << "\n";
  }
  return 0;
}

}  // namespace

std::vector<Command> PlannerCommands() {
  return {
      {"plan", "run a planner: print its plan, the analytic estimate and the search statistics",
       "hetsim plan --planner NAME --cluster C --model M [--training T | --global-batch N ...] [--options FILE.yaml] "
       "[-o plan.yaml]",
       [](po::options_description& d, po::positional_options_description&) {
         d.add_options()("planner", po::value<std::string>(), "planner name (`hetsim plan --list`)")(
             "options", po::value<std::string>(), "the planner's options (YAML; docs/planners.md lists them)")(
             "output,o", po::value<std::string>(), "write the plan here (YAML, with cluster/model/training keys)")(
             "profile", po::value<std::vector<std::string>>()->multitoken(),
             "measured layer profiles (bundled names or paths) instead of the analytic compute model")(
             "calibration", po::value<std::string>(),
             "the compute model's calibration (bundled name or file; `hetsim list calibrations`)")(
             "list", "print the registered planners and exit");
         AddRefineFlags(d);
         AddSpecFlags(d, /*with_plan=*/false);
       },
       RunPlan},
  };
}

}  // namespace hetsim::cli
