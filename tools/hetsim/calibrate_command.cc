// `hetsim calibrate`: its flags, turned into calibration/calibrate.h's options (the work is there).
#include <ostream>

#include "calibration/calibrate.h"
#include "tools/hetsim/cli.h"
#include "tools/hetsim/process.h"

namespace hetsim::cli {
namespace {

std::string Flag(const po::variables_map& vm, const char* key) { return vm.count(key) ? FlagString(vm, key) : ""; }

int RunCalibrate(const po::variables_map& vm, std::ostream& out, std::ostream& err) {
  if (vm.count("from-profiles")) {
    calibration::FromProfilesOptions o;
    o.profiles = Flag(vm, "from-profiles");
    o.check_profiles = Flag(vm, "check-profiles");
    o.gpu = Flag(vm, "gpu");
    o.dtype = Flag(vm, "dtype");
    o.attention = Flag(vm, "attention");
    o.base = Flag(vm, "base");
    o.name = Flag(vm, "name");
    o.output = Flag(vm, "output");
    o.fit_tp_latency = vm["fit-tp-latency"].as<bool>();
    o.fit_tp_collectives = vm["fit-tp-collectives"].as<bool>();
    return calibration::CalibrateFromProfiles(o, out, err);
  }
  calibration::CalibrateOptions o;
  o.backend = Flag(vm, "backend");
  o.gpu = Flag(vm, "gpu");
  o.ranks = vm["ranks"].as<int>();
  o.ranks_given = !vm["ranks"].defaulted();
  o.quick = vm["quick"].as<bool>();
  o.output = Flag(vm, "output");
  o.name = Flag(vm, "name");
  o.base = Flag(vm, "base");
  o.data_dir = Flag(vm, "data-dir");
  o.from_data = Flag(vm, "from-data");
  o.models = Flag(vm, "models");
  if (vm.count("profile-model")) o.profile_model = FlagString(vm, "profile-model");
  o.profile_shapes = Flag(vm, "profile-shapes");
  o.profile_seq_len = vm["profile-seq-len"].as<uint32_t>();
  o.mpirun = Flag(vm, "mpirun");
  o.find_program = SiblingBinary;
  return calibration::Calibrate(o, out, err);
}

}  // namespace

std::vector<Command> CalibrationCommands() {
  return {{"calibrate",
          "measure this machine's kernels and links with the executor and fit a calibration file for the simulator",
          "hetsim calibrate --backend cpu|cuda [--gpu TYPE] [--ranks N] [--quick] [-o FILE.yaml] [--from-data DIR]\n"
          "       hetsim calibrate --from-profiles P1,P2 --gpu TYPE --dtype D [--attention standard] [-o FILE.yaml]",
          [](po::options_description& d, po::positional_options_description&) {
            d.add_options()("backend,b", po::value<std::string>()->default_value("cpu"),
                            "cpu (Eigen + MPI, CPU workers) | cuda (cuBLAS + NCCL)")
                ("gpu", po::value<std::string>(), "catalog type of the device measured (default: cpu, or h100 on cuda)")
                ("ranks,r", po::value<int>()->default_value(2),
                 "MPI ranks of the communication benchmark (devices of one node; 0 or 1 skips it); on cuda the "
                 "default is the node's GPU count")
                ("quick", po::bool_switch()->default_value(false), "short benchmarks (about a minute on a CPU)")
                ("output,o", po::value<std::string>(), "calibration file to write (default: NAME.yaml)")
                ("name", po::value<std::string>(), "the calibration's name (default: GPU-measured)")
                ("base", po::value<std::string>()->default_value("default"),
                 "bundled calibration the file layers over (what it does not measure)")
                ("data-dir", po::value<std::string>(), "where the measurements go (default: beside the output, OUTPUT-data/)")
                ("from-data", po::value<std::string>(),
                 "fit DIR/kernels.csv, DIR/collectives.csv and DIR/network.csv (collectives measured across nodes, "
                 "e.g. nccl-tests; calibration/network_fit.h) without measuring")
                ("from-profiles", po::value<std::string>(),
                 "fit the GPU's GEMM efficiency (for --dtype) and memory efficiency to measured layer profiles "
                 "(bundled names or paths, comma-separated; their TP-1 transformer rows), without measuring")
                ("dtype", po::value<std::string>(), "with --from-profiles: the precision the profiled layers ran in")
                ("fit-tp-latency", po::bool_switch()->default_value(false),
                 "with --from-profiles: also fit each TP degree's all-reduce latency from the rows at TP > 1 (their "
                 "time beyond the fitted compute); off by default: profiles that time TP layers in a framework "
                 "carry its overheads, which need not be the collective's")
                ("fit-tp-collectives", po::bool_switch()->default_value(false),
                 "with --from-profiles: also fit each TP degree's all-reduce latency and bus bandwidth inside the "
                 "profiled node from the rows at TP > 1 (their time beyond the fitted compute, as it grows with the "
                 "micro-batch): for boxes whose GPUs talk through host memory or across sockets")
                ("check-profiles", po::value<std::string>(),
                 "with --from-profiles: profiles of the same GPU type to report the fitted values' error on "
                 "(held out: not fitted on)")
                ("attention", po::value<std::string>()->default_value("flash"),
                 "with --from-profiles: the attention the profiled layers ran (flash | standard)")
                ("models", po::value<std::string>(), "models whose GEMM shapes the kernel benchmark times")
                ("profile-model", po::value<std::string>(),
                 "model whose layers the executor profiles into the calibration's profile (default: llama-tiny on cpu, "
                 "none on cuda)")
                ("profile-shapes", po::value<std::string>()->default_value("1x1,1x2,1x4,2x2,2x4"),
                 "TPxMICRO_BATCH shapes to profile")
                ("profile-seq-len", po::value<uint32_t>()->default_value(64), "sequence length of the profiles")
                ("mpirun", po::value<std::string>()->default_value("mpirun"), "the MPI launcher");
          },
          RunCalibrate}};
}

}  // namespace hetsim::cli
