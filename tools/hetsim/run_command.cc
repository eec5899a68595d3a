// `hetsim run MANIFEST`: an experiment from a manifest (sim/runner).
#include <ostream>

#include "planners/planner.h"
#include "tools/hetsim/cli.h"
#include "sim/planning/refine.h"
#include "sim/runner/runner.h"
#include "sim/runner/world.h"

namespace hetsim::cli {
namespace {

int RunRun(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (!vm.count("manifest")) {
    err << "hetsim run: give a manifest (e.g. hetsim run experiments/quickstart.yaml)\n";
    return 2;
  }
  const auto& world = runner::World::Get();
  auto m = runner::LoadManifest(FlagString(vm, "manifest"));
  if (!m.ok()) {
    if (world.rank() == 0) err << m.status().message() << "\n";
    return 1;
  }
  runner::RunOptions opt;
  opt.out_dir = FlagString(vm, "out");
  opt.resume = vm.count("resume") > 0;
  opt.jobs = vm["jobs"].as<int>();
  opt.figures = vm.count("no-figures") == 0;
  opt.progress = vm.count("quiet") == 0;
  if (opt.jobs < 1 || opt.jobs > 256) {
    err << "hetsim run: --jobs: expected 1..256, found " << opt.jobs << "\n";
    return 2;
  }
  if (world.rank() == 0) {
    out << "experiment " << m->spec.name() << ": " << m->points.size() << " points ("
        << m->clusters.size() << " clusters × " << m->models.size() << " models × " << m->planners.size()
        << " planners" << (m->spec.sweep_size() > 0 ? " × sweep" : "")
        << (m->spec.repeats() > 1 ? " × " + std::to_string(m->spec.repeats()) + " repeats" : "") << "), fidelity "
        << m->fidelity_name << (world.distributed() ? ", " + std::to_string(world.size()) + " MPI ranks" : "")
        << (opt.jobs > 1 ? ", " + std::to_string(opt.jobs) + " jobs" : "") << "\n";
  }
  const Status st = runner::RunExperiment(*m, opt, out, err);
  if (!st.ok()) {
    err << st.message() << "\n";
    return 1;  // under mpirun a non-zero exit ends every rank
  }
  return 0;
}

}  // namespace

Result<proto::Plan> PlanWithPlanner(const std::string& planner, const std::string& options_yaml,
                                    const std::string& options_file, const models::Cluster& cluster,
                                    const models::TransformerModel& model, const proto::Training& training,
                                    int refine, int polish, std::vector<std::string>* notes) {
  HETSIM_ASSIGN_OR_RETURN(auto p, planners::CreatePlanner(planner, options_yaml, options_file));
  planners::PlanningProblem problem{cluster, model, training, nullptr, {}};
  planning::RefineOptions options;
  if (refine >= 0) options.k = static_cast<uint32_t>(refine);
  options.polish = polish >= 0 ? static_cast<uint32_t>(polish) : 0;
  HETSIM_ASSIGN_OR_RETURN(planners::PlannerResult res, planning::PlanOnTwin(*p, problem, options));
  if (notes) {
    for (const auto& n : res.stats.notes) {
      if (n.starts_with("twin check") || n.starts_with("polish") || n.starts_with("  ")) notes->push_back(n);
    }
  }
  return res.plan;
}

std::vector<std::pair<std::string, std::string>> ListPlanners() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : planners::Planners()) out.emplace_back(p.name, p.summary);
  return out;
}

Result<std::string> ValidateExperiment(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(runner::Manifest m, runner::LoadManifest(path));
  return "experiment, " + std::to_string(m.points.size()) + " points";
}

std::vector<Command> RunCommands() {
  return {{"run", "run an experiment manifest: plan and simulate every sweep point, write results and figures",
           "hetsim run MANIFEST [-o DIR] [--resume] [--jobs N]   (or: mpirun -np N hetsim run MANIFEST)",
           [](po::options_description& d, po::positional_options_description& p) {
             d.add_options()("manifest", po::value<std::string>(), "experiment manifest (YAML)")
                 ("out,o", po::value<std::string>(), "results folder (default out/<experiment name>)")
                 ("resume", "keep the finished points of an earlier run of the same manifest")
                 ("jobs,j", po::value<int>()->default_value(1), "worker processes")
                 ("no-figures", "do not draw the figures")
                 ("quiet,q", "no progress bar");
             p.add("manifest", 1);
           },
           RunRun},
          ValidateSimCommand()};
}

}  // namespace hetsim::cli
