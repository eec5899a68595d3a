// `hetsim advise CONFIG`: which GPUs to rent, which plan and which recovery policy (sim/advise/advise.h,
// docs/advise.md).
#include <ostream>

#include "sim/advise/advise.h"
#include "sim/advise/config.h"
#include "tools/hetsim/cli.h"
#include "sim/runner/world.h"

namespace hetsim::cli {
namespace {

int RunAdviseCommand(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (!vm.count("config")) {
    err << "hetsim advise: give an advise config (e.g. hetsim advise experiments/advise/13b-spot-mix.yaml)\n";
    return 2;
  }
  const auto& world = runner::World::Get();
  auto c = advise::LoadConfig(FlagString(vm, "config"));
  if (!c.ok()) {
    if (world.rank() == 0) err << c.status().message() << "\n";
    return 1;
  }
  advise::AdviseOptions opt;
  opt.out_dir = FlagString(vm, "out");
  opt.resume = vm.count("resume") > 0;
  opt.jobs = vm["jobs"].as<int>();
  opt.prune = vm.count("no-prune") == 0;
  opt.figures = vm.count("no-figures") == 0;
  opt.progress = vm.count("quiet") == 0;
  if (opt.jobs < 1 || opt.jobs > 256) {
    err << "hetsim advise: --jobs: expected 1..256, found " << opt.jobs << "\n";
    return 2;
  }
  const double minutes = vm["time-limit"].as<double>();
  if (!(minutes >= 0 && minutes <= 10080)) {
    err << "hetsim advise: --time-limit: expected minutes from 0 (no limit) to 10080 (a week), found " << minutes
        << "\n";
    return 2;
  }
  opt.time_limit_s = minutes * 60;
  const Status st = advise::RunAdvise(*c, opt, out, err);
  if (!st.ok()) {
    err << st.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

Result<std::string> ValidateAdviseConfig(const std::string& path) {
  HETSIM_ASSIGN_OR_RETURN(advise::Config c, advise::LoadConfig(path));
  return "advise config, " + std::to_string(c.candidates.size()) + " candidate clusters x " +
         std::to_string(c.planners.size()) + " planners";
}

std::vector<Command> AdviseCommands() {
  return {{"advise",
           "which GPUs to rent, which plan, recovery policy and checkpoint interval: the Pareto front of time to train "
           "vs cost under real availability",
           "hetsim advise CONFIG [-o DIR] [--resume] [--jobs N] [--time-limit MIN] [--no-prune]   (or: mpirun -np N hetsim "
           "advise CONFIG)",
           [](po::options_description& d, po::positional_options_description& p) {
             d.add_options()("config", po::value<std::string>(), "advise config (YAML, kind: advise; docs/advise.md)")
                 ("out,o", po::value<std::string>(), "results folder (default out/<config name>)")
                 ("resume", "keep the plans and replays of an earlier run of the same config")
                 ("jobs,j", po::value<int>()->default_value(1), "worker processes")
                 ("time-limit", po::value<double>()->default_value(10),
                  "minutes after which the run stops and reports what it computed, marked partial (0: no limit; "
                  "--resume continues)")
                 ("no-prune", "replay every configuration (default: skip those whose bound is dominated)")
                 ("no-figures", "do not draw the figures")
                 ("quiet,q", "no progress lines");
             p.add("config", 1);
           },
           RunAdviseCommand}};
}

}  // namespace hetsim::cli
