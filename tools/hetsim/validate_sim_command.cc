// `hetsim validate-sim`: the simulator's error on measured runs (--runs: calibration/validate_runs.h, or plan-file
// runs with a `plan` column: calibration/validate_plan_runs.h) or against plans run on hetsim-exec (--executor:
// validate_exec_command.cc over calibration/validate_exec.h). This file parses the flags and prints the reports.
#include <algorithm>
#include <cctype>
#include <ostream>

#include <cmath>
#include <cstdio>

#include "calibration/validate_plan_runs.h"
#include "calibration/validate_runs.h"
#include "models/kernels.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "sim/simulator.h"
#include "tools/hetsim/cli.h"

namespace hetsim::cli {
namespace {

// validate-sim --runs with a CSV that names a plan file per run: calibration::ValidatePlanRuns, printed.
int RunValidatePlanRuns(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  const std::string path = FlagString(vm, "runs");
  calibration::PlanRunsOptions options;
  auto fid = sim::ParseFidelity(vm["fidelity"].as<std::string>());
  if (!fid.ok()) {
    err << fid.status().message() << "\n";
    return 2;
  }
  options.fidelity = *fid;
  const bool flag_given = vm.count("calibration") > 0;
  if (flag_given) {
    options.calibration = vm["calibration"].as<std::string>();
    if (Status c = models::CheckKernelCalibration(options.calibration); !c.ok()) {
      err << c.message() << "\n";
      return 2;
    }
  }
  if (vm.count("profile")) options.profiles = vm["profile"].as<std::vector<std::string>>();
  if (vm.count("limit")) options.limit = vm["limit"].as<size_t>();
  auto rep = calibration::ValidatePlanRuns(path, options);
  if (!rep.ok()) {
    err << rep.status().message() << "\n";
    return 1;
  }
  for (const auto& f : rep->failures) err << f << "\n";
  std::string names;
  for (const auto& c : rep->calibrations) names += (names.empty() ? "" : ", ") + c;
  out << "simulated " << rep->all.count() << " of " << rep->attempted << " plans of " << path << " (calibration "
      << names << (flag_given ? "" : ", as each run's row or plan names it") << ", fidelity "
      << vm["fidelity"].as<std::string>() << ")\n";
  out << "  iteration time, development half  " << rep->development_half.Line() << "\n";
  out << "  iteration time, held-out half     " << rep->held_out_half.Line() << "\n";
  out << "  iteration time, all               " << rep->all.Line() << "\n";
  out << "  " << models::CoverageSummary(rep->cover_held_out, rep->cover_all) << "\n";
  if (rep->grad_sync.count() > 0) out << "  gradient sync, all                " << rep->grad_sync.Line() << "\n";
  if (rep->peak_memory.count() > 0) out << "  peak memory, all                  " << rep->peak_memory.Line() << "\n";
  out << "\n  iteration-time error by configuration (a trend means a missing effect, not a wrong scale):\n";
  const auto print = [&](const std::map<calibration::PlanRunsReport::Key, calibration::ErrorTally>& tallies) {
    for (const auto& [key, e] : tallies) {
      char value[48];
      std::snprintf(value, sizeof value, "%.*f", key.second == std::floor(key.second) ? 0 : 2, key.second);
      const std::string name = key.first + "=" + value;
      out << "    " << name << std::string(name.size() < 16 ? 16 - name.size() : 1, ' ') << e.Line() << "\n";
    }
  };
  print(rep->by_configuration);
  if (!rep->memory_by_configuration.empty()) {
    out << "\n  peak-memory error by configuration:\n";
    print(rep->memory_by_configuration);
  }
  if (vm.count("output")) {
    if (Status s = models::WriteFileAtomically(FlagString(vm, "output"), rep->csv); !s.ok()) {
      err << s.message() << "\n";
      return 1;
    }
    out << "\nper-run results: " << FlagString(vm, "output") << "\n";
  }
  return rep->failed > 0 ? 1 : 0;
}

int RunValidateSim(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (vm["executor"].as<bool>()) return RunValidateExecutor(vm, out, err);
  if (!vm.count("runs")) {
    err << "hetsim validate-sim: give --runs FILE.csv (e.g. experiments/validation/vtrain_a100_single_node.csv), or "
           "--executor --plans P1,P2,... to compare with runs of hetsim-exec\n";
    return 2;
  }
  if (Status c = calibration::CheckRunsFile(FlagString(vm, "runs")); !c.ok()) {
    err << "hetsim validate-sim: " << c.message() << "\n";
    return 1;
  }
  if (calibration::IsPlanRunsCsv(FlagString(vm, "runs"))) return RunValidatePlanRuns(vm, out, err);
  if (vm.count("profile")) {
    err << "hetsim validate-sim: --profile applies to plan-file runs (a `plan` column); these runs' models are "
           "built from the CSV's columns, which no measured profile names\n";
    return 2;
  }
  auto fid = sim::ParseFidelity(vm["fidelity"].as<std::string>());
  if (!fid.ok()) {
    err << fid.status().message() << "\n";
    return 2;
  }
  proto::DType dtype;
  if (!proto::DType_Parse("DTYPE_" + [&] {
        std::string s = vm["dtype"].as<std::string>();
        for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        return s;
      }(), &dtype)) {
    err << "--dtype: unknown value '" << vm["dtype"].as<std::string>() << "' (expected fp16, bf16, fp32)\n";
    return 2;
  }
  const std::string rc = vm["recompute"].as<std::string>();
  const proto::Recompute recompute = models::ParseRecompute(rc);
  if (recompute == proto::RECOMPUTE_UNSPECIFIED) {
    err << "--recompute: unknown value '" << rc << "' (expected " << models::RecomputeNames() << ")\n";
    return 2;
  }
  // Each run's calibration: --calibration, when given, for every run; else the one rule's pick for the run's
  // software stack (its row's `stack`, megatron-lm by default; vTrain's layout: megatron-deepspeed).
  const bool flag_given = vm.count("calibration") > 0;
  const std::string calibration = flag_given ? vm["calibration"].as<std::string>() : "";
  if (Status c = models::CheckKernelCalibration(calibration); !c.ok()) {
    err << c.message() << "\n";
    return 2;
  }
  calibration::ValidationOptions opt;
  opt.gpu = vm["gpu"].as<std::string>();
  opt.vocab = vm["vocab"].as<uint32_t>();
  opt.dtype = dtype;
  opt.recompute = recompute;
  opt.fidelity = *fid;
  opt.calibration = calibration;
  if (vm.count("limit")) opt.limit = vm["limit"].as<size_t>();
  opt.progress = [&](size_t done, size_t total) { err << "validate-sim: " << done << "/" << total << " runs\n"; };
  auto report = calibration::ValidateRuns(FlagString(vm, "runs"), opt);
  if (!report.ok()) {
    err << report.status().message() << "\n";
    return 1;
  }
  const calibration::ValidationReport& rep = *report;
  for (const auto& f : rep.failures) err << f << "\n";
  std::string names;
  for (const auto& [name, n] : rep.calibrations) {
    names += (names.empty() ? "" : ", ") + name;
    if (rep.calibrations.size() > 1) names += " (" + std::to_string(n) + " runs)";
  }
  const bool from_rows = !flag_given;
  out << "simulated " << rep.all.count() << " of " << rep.runs.size() << " runs of " << FlagString(vm, "runs")
      << " (" << opt.gpu << ", calibration " << names << (from_rows ? ", the one rule's pick for the runs' software stack" : "")
      << ", fidelity " << vm["fidelity"].as<std::string>()
      << ")\n";
  out << "  development half  " << rep.development_half.Line() << "\n";
  out << "  held-out half     " << rep.held_out_half.Line() << "\n";
  out << "  all               " << rep.all.Line() << "\n";
  out << "  " << models::CoverageSummary(rep.cover_held_out, rep.cover_all) << "\n";
  out << "\n  error by configuration (a trend means a missing effect, not a wrong scale):\n";
  for (const auto& [key, e] : rep.by_configuration) out << "    " << key << std::string(key.size() < 16 ? 16 - key.size() : 1, ' ') << e.Line() << "\n";
  if (vm.count("output")) {
    const Status s = models::WriteFileAtomically(FlagString(vm, "output"), rep.csv);
    if (!s.ok()) {
      err << s.message() << "\n";
      return 1;
    }
    out << "\nper-run results: " << FlagString(vm, "output") << "\n";
  }
  return rep.failed > 0 ? 1 : 0;
}

}  // namespace

Command ValidateSimCommand() {
  return {"validate-sim",
          "simulate measured training runs (CSV), or run plans on the executor and in the simulator, and report the "
          "simulator's error: MAPE and bias, by configuration or by operation",
          "hetsim validate-sim --runs FILE.csv [--gpu a100-80gb] [--calibration NAME|FILE] [--fidelity fast] [-o per-run.csv]\n"
          "       hetsim validate-sim --executor --plans P1,P2,... --calibration FILE [--backend cpu] [--figure F.png]",
          [](po::options_description& d, po::positional_options_description&) {
            d.add_options()("runs", po::value<std::string>(),
                            "measured runs: vTrain's CSV columns, or named columns with runs over several nodes "
                            "(experiments/validation/README.md)")
                ("gpu", po::value<std::string>()->default_value("a100-80gb"),
                 "GPU type of the nodes, unless a run's gpu column says (`hetsim list gpus`)")
                ("vocab", po::value<uint32_t>()->default_value(51200), "vocabulary of the runs' models")
                ("dtype", po::value<std::string>()->default_value("fp16"), "training dtype of the runs")
                ("recompute", po::value<std::string>()->default_value("full"), "activation recomputation of the runs")
                ("fidelity", po::value<std::string>()->default_value("fast"), "fast | balanced | full")
                ("calibration", po::value<std::string>(),
                 "kernel-model calibration for every run (bundled name or file); unless given, each run gets the one "
                 "rule's pick: `default`'s chip values with its software stack's host costs (the row's `stack`; "
                 "vTrain's layout: megatron-deepspeed)")
                ("limit", po::value<size_t>(), "simulate only the first N runs")
                ("profile", po::value<std::vector<std::string>>()->composing(),
                 "plan-file runs: a measured layer profile to simulate with (bundled name or path); repeatable")
                ("output,o", po::value<std::string>(), "write every run's (or plan's) simulated time and error (CSV)")
                ("executor", po::bool_switch()->default_value(false),
                 "compare with plans run on hetsim-exec (mpirun) instead of a CSV of measured runs")
                ("plans", po::value<std::string>(), "--executor: comma-separated plan files or bundled names")
                ("backend", po::value<std::string>()->default_value("cpu"),
                 "--executor: cpu | cuda | auto (each rank by its device: CPU workers cpu, GPUs cuda; plans of several "
                 "kinds)")
                ("iterations", po::value<uint32_t>()->default_value(5), "--executor: timed iterations per run")
                ("warmup", po::value<uint32_t>()->default_value(2), "--executor: untimed iterations before them")
                ("repeats", po::value<int>()->default_value(1), "--executor: runs per plan (the median run is compared)")
                ("tolerance", po::value<double>(), "--executor: exit 1 when a plan's error exceeds this fraction (e.g. 0.1)")
                ("figure", po::value<std::string>(), "--executor: draw executed vs simulated time per operation (PNG)")
                ("work-dir", po::value<std::string>(), "--executor: the executor's reports and logs (default validate-exec/)")
                ("mpirun", po::value<std::string>()->default_value("mpirun"), "--executor: the MPI launcher")
                ("cores", po::value<uint32_t>(),
                 "--executor --backend cpu: cores the ranks share on this machine (default: its hardware threads); a "
                 "plan with more ranks than cores is executed and simulated with its ranks computing through a pool "
                 "of all but one of them (hetsim-exec --cores)");
          },
          RunValidateSim};
}

}  // namespace hetsim::cli
