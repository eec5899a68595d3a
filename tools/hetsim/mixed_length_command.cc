// `hetsim mixed-length CONFIG.yaml`: steps over mixed-length data per system (Hetu v2 §7.3;
// sim/mixed_length.h), per-step CSV, Hetu-B assignments, a Fig. 15/16-style figure.
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>

#include "models/child_process.h"
#include "models/spec_io.h"
#include "sim/mixed_length.h"
#include "tools/hetsim/cli.h"

namespace hetsim::cli {
namespace {

namespace fs = std::filesystem;

// "steps.csv" -> "steps-assignments.csv".
std::string AssignmentsPath(const std::string& steps) {
  const fs::path p(steps);
  return (p.parent_path() / (p.stem().string() + "-assignments.csv")).string();
}

int RunMixedLength(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  const std::string file = FlagString(vm, "config");
  if (file.empty()) {
    err << "hetsim mixed-length: give the config file (docs/formats.md \"Mixed-length\")\n";
    return 2;
  }
  auto config = sim::mixed::LoadConfig(file);
  if (!config.ok()) {
    err << config.status().message() << "\n";
    return 1;
  }
  std::string csv = FlagString(vm, "output");
  const std::string figure = FlagString(vm, "figure");
  for (const auto& [flag, path] : {std::pair<const char*, std::string>{"--output", csv}, {"--figure", figure}}) {
    if (path.empty()) continue;
    if (Status s = models::CheckWritable(path, flag); !s.ok()) {
      err << s.message() << "\n";
      return 1;
    }
  }
  std::string tmp_dir;
  if (csv.empty() && !figure.empty()) {
    // The figure reads the CSVs: put them in a temporary folder.
    std::string tmpl = (fs::temp_directory_path() / "hetsim-mixed-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      err << "hetsim mixed-length: cannot create a temporary folder for the figure's data\n";
      return 1;
    }
    tmp_dir = tmpl;
    csv = tmp_dir + "/steps.csv";
  }
  sim::mixed::RunOptions opt;
  opt.progress = [&err](const std::string& line) { err << "mixed-length: " << line << std::endl; };
  auto res = sim::mixed::RunMixedLength(*config, file, opt);
  if (!res.ok()) {
    err << res.status().message() << "\n";
    return 1;
  }
  // Summary: mean per-step time per system, in config order.
  std::map<std::string, std::array<double, 5>> sums;  // time, compute, sync, switch, count
  for (const auto& r : res->rows) {
    auto& s = sums[r.system];
    s[0] += r.time_s;
    s[1] += r.compute_s;
    s[2] += r.sync_s;
    s[3] += r.switch_s;
    s[4] += 1;
  }
  uint64_t tokens = 0;
  size_t seqs = 0;
  for (const auto& step : res->step_lengths) {
    seqs += step.size();
    for (uint32_t l : step) tokens += l;
  }
  out << "mixed-length " << (config->name().empty() ? file : config->name()) << ": " << res->step_lengths.size()
      << " steps, " << tokens / std::max<size_t>(res->step_lengths.size(), 1) << " tokens and "
      << seqs / std::max<size_t>(res->step_lengths.size(), 1) << " sequences per step (context "
      << config->context_tokens() << "), " << res->simulations << " simulations\n";
  out << "  system            mean step s   compute s   sync s   switch s\n";
  for (const auto& s : config->systems()) {
    const auto& v = sums[s.name()];
    const double n = std::max(v[4], 1.0);
    char line[160];
    std::snprintf(line, sizeof(line), "  %-17s %-13.3f %-11.3f %-8.3f %.3f\n", s.name().c_str(), v[0] / n, v[1] / n,
                  v[2] / n, v[3] / n);
    out << line;
  }
  for (const auto& note : res->oom_notes) out << "warning: out of memory on some devices: " << note << "\n";
  if (!csv.empty()) {
    if (Status w = models::WriteFileAtomically(csv, sim::mixed::RowsCsv(*res)); !w.ok()) {
      err << w.message() << "\n";
      return 1;
    }
    if (Status w = models::WriteFileAtomically(AssignmentsPath(csv), sim::mixed::AssignmentsCsv(*res)); !w.ok()) {
      err << w.message() << "\n";
      return 1;
    }
    if (tmp_dir.empty()) out << "per-step rows: " << csv << "; Hetu-B assignments: " << AssignmentsPath(csv) << "\n";
  }
  int rc = 0;
  if (!figure.empty()) {
    const std::vector<std::string> argv = {"/usr/bin/python3", models::PlotDir() + "/mixed_length.py",
                                           "--steps", csv, "--assignments", AssignmentsPath(csv), "--label",
                                           "context " + std::to_string(config->context_tokens()) + " tokens",
                                           "--title", config->name().empty() ? file : config->name(), "-o", figure};
    auto r = models::RunProgram(argv);
    if (!r.ok() || *r != 0) {
      err << "hetsim mixed-length: drawing the figure failed (/usr/bin/python3 " << argv[1] << ")\n";
      rc = 1;
    } else {
      out << "figure: " << figure << "\n";
    }
  }
  if (!tmp_dir.empty()) {
    std::error_code ec;
    fs::remove_all(tmp_dir, ec);
  }
  return rc;
}

}  // namespace

std::vector<Command> MixedLengthCommands() {
  return {{"mixed-length",
           "train steps of mixed-length data with packed, interval (HotSPa/Hetu-A) and heterogeneous (Hetu-B) "
           "strategies; per-step times from simulated iterations",
           "hetsim mixed-length CONFIG.yaml [-o steps.csv] [--figure f.png]",
           [](po::options_description& d, po::positional_options_description& p) {
             d.add_options()("config", po::value<std::string>(), "the mixed-length config (docs/formats.md)")
                 ("output,o", po::value<std::string>(),
                  "write one row per step and system (CSV), and Hetu-B's assignments next to it (-assignments.csv)")
                 ("figure", po::value<std::string>(), "draw per-step times and a Hetu-B step's assignment (PNG)");
             p.add("config", 1);
           },
           RunMixedLength}};
}

}  // namespace hetsim::cli
