// `hetsim calibrate`'s orchestration: calibration/calibrate.h.
#include "calibration/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "calibration/fit.h"
#include "calibration/network_fit.h"
#include "models/child_process.h"
#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/suggest.h"
#include "models/yaml_proto.h"

namespace hetsim::calibration {
namespace {

namespace fs = std::filesystem;

std::string Today() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  return date;
}

std::string HostDescription(bool cuda) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string cpu;
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  std::string s = std::string(host) + ": " + (cpu.empty() ? "unknown CPU" : cpu) + ", " +
                  std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
  if (cuda) {
    std::string gpus;
    if (FILE* p = ::popen("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null", "r")) {
      char line[256];
      if (std::fgets(line, sizeof line, p) != nullptr) gpus = line;
      ::pclose(p);
    }
    while (!gpus.empty() && (gpus.back() == '\n' || gpus.back() == '\r')) gpus.pop_back();
    s += "; GPU: " + (gpus.empty() ? std::string("unknown (nvidia-smi gave nothing)") : gpus + " (name, driver)");
  }
  return s;
}

// "1x1,1x2,2x4" -> (TP, micro-batch) pairs.
Result<std::vector<std::pair<uint32_t, uint32_t>>> ProfileShapes(const std::string& s) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    unsigned tp = 0, mbs = 0;
    char x = 0;
    std::stringstream one(item);
    if (!(one >> tp >> x >> mbs) || x != 'x' || tp == 0 || mbs == 0) {
      return Status::Invalid("'" + item + "' is not TPxMICRO_BATCH (e.g. 2x4)");
    }
    out.emplace_back(tp, mbs);
  }
  return out;
}

// Profiles the executor's own layers at each (TP, micro-batch) of `shapes` (one stage of TP ranks per
// run, on a one-node cluster of `gpu`), merged by hetsim-exec into `profile_yaml`. Returns the exit code.
int ProfileLayers(const CalibrateOptions& opt, const std::string& backend, const models::GpuSpec& gpu,
                  const std::string& model, const std::string& data_dir, const std::string& profile_yaml,
                  std::ostream& out, std::ostream& err) {
  const bool cuda = backend == "cuda";
  auto exe = opt.find_program("hetsim-exec");
  if (!exe.ok()) {
    err << "hetsim calibrate: " << exe.status().message() << "\n";
    return 1;
  }
  auto shapes = ProfileShapes(opt.profile_shapes);
  if (!shapes.ok()) {
    err << "hetsim calibrate: --profile-shapes: " << shapes.status().message() << "\n";
    return 2;
  }
  std::error_code ec;
  fs::remove(profile_yaml, ec);
  const std::string cluster = (fs::path(data_dir) / "profile-node.yaml").string();
  const std::string cluster_text = "# One node of the device `hetsim calibrate` measured.\nkind: cluster\nname: profile-node\n"
                                   "nodes:\n  - name: node\n    count: 1\n    gpus: {type: " + gpu.name + ", count: 8}\n" +
                                   (cuda ? "" : "    fabric: {kind: pcie}\n") + "network:\n  single_switch: {}\n";
  if (Status s = models::WriteFileAtomically(cluster, cluster_text); !s.ok()) {
    err << "hetsim calibrate: " << s.message() << "\n";
    return 1;
  }
  const uint32_t seq = opt.profile_seq_len;
  auto loaded = models::LoadModel(model);
  if (!loaded.ok()) {
    err << "hetsim calibrate: --profile-model: " << loaded.status().message() << "\n";
    return 2;
  }
  const std::string layers = std::to_string(loaded->num_layers());
  size_t i = 0;
  for (const auto& [tp, mbs] : *shapes) {
    const std::string stem = "profile-tp" + std::to_string(tp) + "-mbs" + std::to_string(mbs);
    const std::string plan = (fs::path(data_dir) / (stem + ".yaml")).string();
    // CPU workers share the host's cores and memory system: a shape is timed with every rank of the
    // calibration busy (data-parallel replicas of the TP group), as in the plans that use them all, but no
    // more ranks than cores — with more, plans run through a pool of the cores (hetsim-exec --cores), so at
    // most a busy rank per core. On GPUs one TP group.
    const uint32_t busy = std::min<uint32_t>(static_cast<uint32_t>(std::max(opt.ranks, 1)),
                                             std::max(1u, std::thread::hardware_concurrency()));
    const uint32_t replicas = cuda ? 1 : std::max<uint32_t>(1, busy / tp);
    std::string devices;
    for (uint32_t d = 0; d < tp * replicas; ++d) devices += (d ? ", " : "") + std::to_string(d);
    const std::string text =
        "# A one-stage plan whose layers `hetsim calibrate` profiles.\nkind: plan\nname: " + stem + "\nmodel: " + model +
        "\ntraining: {global_batch_size: " + std::to_string(2 * mbs * replicas) + ", seq_len: " + std::to_string(seq) +
        ", dtype: " + (!opt.dtype.empty() ? opt.dtype : cuda ? "bf16" : "fp32") + "}\nschedule: 1f1b\npipelines:\n  - micro_batch_size: " +
        std::to_string(mbs * replicas) + "\n    num_micro_batches: 2\n    stages:\n      - {devices: [" + devices +
        "], tp_degree: " + std::to_string(tp) + ", layer_begin: 0, layer_end: " + layers + "}\n";
    if (Status s = models::WriteFileAtomically(plan, text); !s.ok()) {
      err << "hetsim calibrate: " << s.message() << "\n";
      return 1;
    }
    std::vector<std::string> argv = models::MpirunPrefix(opt.mpirun, static_cast<int>(tp * replicas));
    argv.insert(argv.end(), {*exe, "--plan", plan, "--cluster", cluster, "--backend", backend, "--iterations",
                             "10", "--warmup", "1", "--profile-out", profile_yaml});
    out << "      layer profile " << ++i << "/" << shapes->size() << ": TP " << tp << ", micro-batch " << mbs << "\n"
        << std::flush;
    const std::string log = (fs::path(data_dir) / (stem + ".log")).string();
    auto rc = models::RunProgram(argv, log);
    if (!rc.ok() || *rc != 0) {
      err << "hetsim calibrate: profiling failed (" << (rc.ok() ? "exit " + std::to_string(*rc) : rc.status().message())
          << "); its output: " << log << "; command: " << models::JoinArgs(argv) << "\n";
      return 1;
    }
  }
  return 0;
}

// Writes `cal` to `output` with the command in its header, checks that it loads as --calibration does, and
// says how to use it. Returns the exit code.
int WriteCalibration(const proto::Calibration& cal, const std::string& command, const std::string& output,
                     std::ostream& out, std::ostream& err) {
  const std::string yaml = "# Written by `" + command + "`; models/proto/calibration.proto, docs/calibration.md.\n" +
                           models::MessageToYaml(cal);
  if (Status s = models::WriteFileAtomically(output, yaml); !s.ok()) {
    err << "hetsim calibrate: " << s.message() << "\n";
    return 1;
  }
  if (Status s = models::CheckKernelCalibration(output); !s.ok()) {
    err << "hetsim calibrate: the written file does not load: " << s.message() << "\n";
    return 1;
  }
  out << "calibration " << cal.name() << " -> " << output << "\n"
      << "use it: hetsim simulate --plan P --calibration " << output << "\n";
  return 0;
}

}  // namespace

int CalibrateFromProfiles(const FromProfilesOptions& opt, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& m) {
    err << "hetsim calibrate: " << m << "\n";
    return 2;
  };
  if (opt.gpu.empty()) return fail("--from-profiles needs --gpu (the GPU type the profiles measured)");
  if (opt.dtype.empty()) {
    return fail("--from-profiles needs --dtype (the precision the profiled layers ran in: bf16, fp16, tf32, fp32)");
  }
  auto gpu = models::GpuCatalog::Bundled().Find(opt.gpu);
  if (!gpu.ok()) return fail("--gpu: " + gpu.status().message());
  auto dtype = models::ParseEnumFlag("dtype", opt.dtype, proto::DType_descriptor());
  if (!dtype.ok()) return fail(dtype.status().message());
  auto attention = models::ParseEnumFlag("attention", opt.attention, proto::Attention_descriptor());
  if (!attention.ok()) return fail(attention.status().message());
  const std::string& base = opt.base;
  if (Status s = models::CheckKernelCalibration(base, "--base"); !s.ok()) return fail(s.message());
  // A profile's measured blocks, by its bundled name or path.
  const auto observe = [&](const std::string& name) -> Result<std::vector<LayerObservation>> {
    auto profile = models::LoadProfile(name);
    if (!profile.ok()) return profile.status();
    return ProfileObservations(*profile, name, *gpu.value(), static_cast<proto::DType>(*dtype),
                               static_cast<proto::Attention>(*attention));
  };
  std::vector<LayerObservation> obs;
  std::vector<std::string> names;
  std::stringstream list(opt.profiles);
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) continue;
    auto o = observe(name);
    if (!o.ok()) return fail("--from-profiles: " + o.status().message());
    obs.insert(obs.end(), o->begin(), o->end());
    names.push_back(name);
  }
  if (names.empty()) return fail("--from-profiles: no profile named");
  const bool tp_latency = opt.fit_tp_latency, tp_collectives = opt.fit_tp_collectives;
  if (tp_latency && tp_collectives) {
    return fail("--fit-tp-latency and --fit-tp-collectives: name one (--fit-tp-collectives fits the latency too)");
  }
  FitSummary summary;
  const models::KernelParams& base_params = models::KernelParamsFor(*gpu.value(), base);
  auto fitted = FitFromProfiles(*gpu.value(), static_cast<proto::DType>(*dtype), base_params, obs, tp_latency,
                                &summary, tp_collectives);
  if (!fitted.ok()) return fail(fitted.status().message());
  for (const auto& l : summary.lines) out << "  " << l << "\n";
  // Held out: the fitted values on profiles not fitted on (another model, another size).
  if (!opt.check_profiles.empty()) {
    std::stringstream check(opt.check_profiles);
    for (std::string pname; std::getline(check, pname, ',');) {
      if (pname.empty()) continue;
      auto o = observe(pname);
      if (!o.ok()) return fail("--check-profiles: " + o.status().message());
      FitSummary held;
      CheckOnProfiles(*gpu.value(), static_cast<proto::DType>(*dtype), base_params, *fitted, *o, &held);
      out << "  held out, " << pname << " (not fitted on):\n";
      for (const auto& l : held.lines) out << "  " << l << "\n";
    }
  }
  const std::string name = !opt.name.empty() ? opt.name : gpu.value()->name + "-profiles";
  if (!IsPlainName(name)) {
    err << "hetsim calibrate: --name: '" << name << "' is not a plain name: use letters, digits, '-', '_' and '.' "
           "(it names the calibration and, without -o, its file NAME.yaml), e.g. my-h100\n";
    return 2;
  }
  const std::string output = !opt.output.empty() ? opt.output : name + ".yaml";
  std::string joined;
  for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
  const std::string command = "hetsim calibrate --from-profiles " + joined + " --gpu " + gpu.value()->name +
                              " --dtype " + opt.dtype + " --attention " + opt.attention +
                              " --base " + base + (tp_latency ? " --fit-tp-latency" : "") +
                              (tp_collectives ? " --fit-tp-collectives" : "");
  proto::Calibration cal;
  cal.set_kind("calibration");
  cal.set_name(name);
  cal.set_description("Fitted by `hetsim calibrate --from-profiles` on the measured layer times of " + joined + ".");
  cal.set_base(base);
  auto* prov = cal.mutable_provenance();
  prov->set_host("the machines the profiles measured (their `source`)");
  prov->set_date(Today());
  prov->set_command(command);
  prov->set_versions("hetsim 0.1.0 (fit only)");
  prov->set_data(joined);
  *cal.add_gpus() = *fitted;
  cal.mutable_gpus(0)->set_source("fitted on " + std::to_string(obs.size()) + " measured blocks of " + joined);
  return WriteCalibration(cal, command, output, out, err);
}

namespace {

// A measuring or refitting run of `hetsim calibrate`, as its options give it.
struct CalibrateRun {
  std::string backend;
  bool cuda = false;
  const models::GpuSpec* gpu = nullptr;
  std::string name, output, data_dir;
  bool quick = false, refit = false;  // refit: --from-data
  int ranks = 0;
  std::string kernels_csv, comm_csv, network_csv, profile_yaml;
  std::string command;  // the command written into the calibration's provenance
};

// The run's settings from its flags; an exit code (2: a bad flag) when they do not make one.
std::optional<int> SetUpCalibrate(const CalibrateOptions& opt, CalibrateRun* run, std::ostream& out, std::ostream& err) {
  run->backend = opt.backend;
  if (run->backend != "cpu" && run->backend != "cuda") {
    err << "hetsim calibrate: --backend: unknown backend '" << run->backend << "' (expected cpu or cuda)\n";
    return 2;
  }
  run->cuda = run->backend == "cuda";
  const std::string gpu_name = !opt.gpu.empty() ? opt.gpu : (run->cuda ? "h100" : "cpu");
  auto gpu = models::GpuCatalog::Bundled().Find(gpu_name);
  if (!gpu.ok()) {
    err << "hetsim calibrate: --gpu: " << gpu.status().message() << "\n";
    return 2;
  }
  run->gpu = gpu.value();
  run->name = !opt.name.empty() ? opt.name : run->gpu->name + "-measured";
  if (!IsPlainName(run->name)) {
    err << "hetsim calibrate: --name: '" << run->name << "' is not a plain name: use letters, digits, '-', '_' and '.' "
           "(it names the calibration and, without -o, its file NAME.yaml), e.g. my-h100\n";
    return 2;
  }
  run->output = !opt.output.empty() ? opt.output : run->name + ".yaml";
  run->quick = opt.quick;
  run->refit = !opt.from_data.empty();
  run->ranks = opt.ranks;
  if (run->cuda && !opt.ranks_given) {
    // One rank per GPU of this node (NCCL needs two); nvidia-smi counts them.
    run->ranks = 0;
    if (FILE* p = ::popen("nvidia-smi -L 2>/dev/null", "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, p) != nullptr) run->ranks += std::strncmp(line, "GPU ", 4) == 0;
      ::pclose(p);
    }
    out << "GPUs on this node: " << run->ranks << " (nvidia-smi -L; --ranks overrides)\n";
  }
  run->data_dir = !opt.from_data.empty() ? opt.from_data
                  : !opt.data_dir.empty() ? opt.data_dir
                                          : (fs::path(run->output).parent_path() /
                                             (fs::path(run->output).stem().string() + "-data")).string();
  // The folder's name goes into the calibration file's description and command: a control character (a
  // newline) there would break, or inject into, the YAML written.
  for (const auto& [flag, v] : {std::pair<const char*, const std::string&>{"from-data", opt.from_data},
                                {"data-dir", opt.data_dir}, {"output", opt.output}}) {
    if (std::any_of(v.begin(), v.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x20; })) {
      err << "hetsim calibrate: --" << flag << ": the path holds a control character (a newline or a tab); "
          << "rename the folder or file\n";
      return 2;
    }
  }
  run->kernels_csv = (fs::path(run->data_dir) / "kernels.csv").string();
  run->comm_csv = (fs::path(run->data_dir) / "collectives.csv").string();
  run->network_csv = (fs::path(run->data_dir) / "network.csv").string();
  run->profile_yaml = (fs::path(run->data_dir) / "profile.yaml").string();
  run->command = "hetsim calibrate " + (run->refit ? std::string() : "--backend " + run->backend + " ") + "--gpu " +
                 run->gpu->name;
  if (run->quick) run->command += " --quick";
  if (run->refit) run->command += " --from-data " + run->data_dir;
  return std::nullopt;
}

// Steps 1-3: the kernel benchmark, the communication benchmark under mpirun (with two ranks or more) and
// the executor's layer profiles, into the run's data folder. Returns the exit code.
int MeasureCalibrate(const CalibrateOptions& opt, CalibrateRun* run, std::ostream& out, std::ostream& err) {
  // The profiles' flags are checked before the benchmarks run (minutes), not after them.
  if (auto shapes = ProfileShapes(opt.profile_shapes); !shapes.ok()) {
    err << "hetsim calibrate: --profile-shapes: " << shapes.status().message() << "\n";
    return 2;
  }
  if (opt.profile_model && !opt.profile_model->empty()) {
    if (auto m = models::LoadModel(*opt.profile_model); !m.ok()) {
      err << "hetsim calibrate: --profile-model: " << m.status().message() << "\n";
      return 2;
    }
  }
  if (opt.profile_seq_len == 0) {
    err << "hetsim calibrate: --profile-seq-len: 0 is not a sequence length (give 1 or more)\n";
    return 2;
  }
  std::error_code ec;
  fs::create_directories(run->data_dir, ec);
  if (ec) {
    err << "hetsim calibrate: --data-dir: cannot create " << run->data_dir << ": " << ec.message() << "\n";
    return 1;
  }
  auto kbench = opt.find_program("hetsim-kernel-bench");
  auto cbench = opt.find_program("hetsim-coll-bench");
  if (!kbench.ok() || !cbench.ok()) {
    err << "hetsim calibrate: " << (kbench.ok() ? cbench : kbench).status().message() << "\n";
    return 1;
  }
  const bool cuda = run->cuda, quick = run->quick;
  const auto seconds_since = [](auto t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // The shapes: the CPU workers' test model at the CPU plans' sizes; on GPUs the Llama-2 family.
  std::vector<std::string> kargs = {*kbench, "--backend", run->backend, "--gpu", run->gpu->name, "-o", run->kernels_csv};
  const std::string models_arg = !opt.models.empty() ? opt.models : (cuda ? "" : "llama-tiny");
  if (!models_arg.empty()) kargs.insert(kargs.end(), {"--models", models_arg});
  if (!cuda) kargs.insert(kargs.end(), {"--seq-len", "64", "--micro-batch", "1,2,4", "--tp", "1,2,4"});
  if (!opt.dtype.empty()) kargs.insert(kargs.end(), {"--dtype", opt.dtype});
  if (quick) kargs.push_back("--quick");
  out << "[1/4] kernels: " << models::JoinArgs(kargs) << "\n" << std::flush;
  const auto t0 = std::chrono::steady_clock::now();
  auto rc = models::RunProgram(kargs);
  if (!rc.ok() || *rc != 0) {
    err << "hetsim calibrate: the kernel benchmark failed (" << (rc.ok() ? "exit " + std::to_string(*rc) : rc.status().message())
        << "); its command: " << models::JoinArgs(kargs) << "\n";
    return 1;
  }
  out << "      done in " << seconds_since(t0) << " s -> " << run->kernels_csv << "\n";
  if (run->ranks >= 2) {
    std::vector<std::string> cargs = models::MpirunPrefix(opt.mpirun, run->ranks);
    cargs.insert(cargs.end(), {*cbench, "--backend", run->backend, "-o", run->comm_csv});
    if (quick) cargs.push_back("--quick");
    out << "[2/4] communication: " << models::JoinArgs(cargs) << "\n" << std::flush;
    const auto t1 = std::chrono::steady_clock::now();
    rc = models::RunProgram(cargs);
    if (!rc.ok() || *rc != 0) {
      err << "hetsim calibrate: the communication benchmark failed ("
          << (rc.ok() ? "exit " + std::to_string(*rc) : rc.status().message()) << "); its command: " << models::JoinArgs(cargs)
          << " (--ranks 0 skips it)\n";
      return 1;
    }
    out << "      done in " << seconds_since(t1) << " s -> " << run->comm_csv << "\n";
    run->command += " --ranks " + std::to_string(run->ranks);
  } else {
    out << "[2/4] communication: skipped (--ranks " << run->ranks << "; the link values of the base calibration apply)\n";
    fs::remove(run->comm_csv, ec);
  }
  const std::string profile_model = opt.profile_model ? *opt.profile_model : (cuda ? "" : "llama-tiny");
  if (!profile_model.empty()) {
    out << "[3/4] layer profiles of " << profile_model << " (hetsim-exec --profile-out)\n";
    const auto t2 = std::chrono::steady_clock::now();
    if (int prc = ProfileLayers(opt, run->backend, *run->gpu, profile_model, run->data_dir, run->profile_yaml, out, err);
        prc != 0) {
      return prc;
    }
    out << "      done in " << seconds_since(t2) << " s -> " << run->profile_yaml << "\n";
  } else {
    out << "[3/4] layer profiles: skipped (--profile-model names none)\n";
    fs::remove(run->profile_yaml, ec);
  }
  return 0;
}

// Reads one of the data folder's CSVs with `read` when it is there, into *rows. Returns the exit code.
template <class Rows, class Read>
int ReadIfThere(const std::string& path, Read&& read, Rows* rows, std::ostream& err) {
  if (!fs::exists(path)) return 0;
  auto r = read(path);
  if (!r.ok()) {
    err << "hetsim calibrate: " << r.status().message() << "\n";
    return 1;
  }
  *rows = std::move(*r);
  return 0;
}

// Step 4: the fit of the data folder's measurements and the calibration file. Returns the exit code.
int FitCalibrate(const CalibrateOptions& opt, const CalibrateRun& run, std::ostream& out, std::ostream& err) {
  out << "[4/4] fit\n";
  std::vector<KernelRow> kernels;
  std::vector<CommRow> comm;
  std::vector<NetworkRow> network;
  if (ReadIfThere(run.kernels_csv, ReadKernelBench, &kernels, err) != 0 ||
      ReadIfThere(run.comm_csv, ReadCommBench, &comm, err) != 0 ||
      ReadIfThere(run.network_csv, ReadNetworkBench, &network, err) != 0) {
    return 1;
  }
  if (kernels.empty() && comm.empty() && network.empty()) {
    err << "hetsim calibrate: --from-data " << run.data_dir
        << ": none of kernels.csv, collectives.csv or network.csv is there\n";
    return 1;
  }
  std::optional<proto::KernelCalibration> fitted;
  if (!kernels.empty() || !comm.empty()) {
    FitSummary summary;
    auto f = FitCalibration(*run.gpu, kernels, comm, &summary);
    if (!f.ok()) {
      err << "hetsim calibrate: " << f.status().message() << " (data: " << run.data_dir << ")\n";
      return 1;
    }
    for (const auto& l : summary.lines) out << "      " << l << "\n";
    fitted = *f;
  }
  const std::vector<NetworkFit> network_fits =
      FitNetwork(network, opt.base);
  for (const auto& f : network_fits) {
    out << "      network: bus efficiency " << f.entry.bus_efficiency() << ", latency " << f.entry.net_latency_us()
        << " us per inter-node step (" << f.entry.source() << ")\n";
  }

  proto::Calibration cal;
  cal.set_kind("calibration");
  cal.set_name(run.name);
  cal.set_description(run.refit ? "Fitted by `hetsim calibrate --from-data` on the measurements in " + run.data_dir + "."
                                : "Measured on " + HostDescription(run.cuda) + " by `hetsim calibrate` (" + run.backend +
                                      " backend).");
  cal.set_base(opt.base);
  auto* prov = cal.mutable_provenance();
  prov->set_host(run.refit ? "the machine the data files name (their headers)" : HostDescription(run.cuda));
  prov->set_date(Today());
  prov->set_command(run.command);
  prov->set_versions(run.refit ? "hetsim 0.1.0 (fit only)"
                               : "hetsim 0.1.0; " + std::string(run.cuda ? "CUDA backend (cuBLAS, NCCL)"
                                                                         : "CPU backend (Eigen, Open MPI)"));
  std::string data;
  for (const auto& f : {run.kernels_csv, run.comm_csv, run.network_csv}) {
    if (fs::exists(f)) data += (data.empty() ? "" : "; ") + f;
  }
  prov->set_data(data);
  if (fitted) *cal.add_gpus() = *fitted;
  for (const auto& f : network_fits) *cal.add_network() = f.entry;
  if (fs::exists(run.profile_yaml)) {
    // The profile is checked as every simulation will read it, so a bad one fails here, not later.
    if (auto db = models::ProfileDb::Load({run.profile_yaml}); !db.ok()) {
      err << "hetsim calibrate: " << db.status().message() << " (fix or remove " << run.profile_yaml << ")\n";
      return 1;
    }
    // Relative to the calibration file, so the two move together.
    const fs::path base = fs::absolute(run.output).parent_path();
    cal.add_profiles(fs::relative(fs::absolute(run.profile_yaml), base).string());
    prov->set_data(prov->data() + "; " + run.profile_yaml);
  }
  if (fitted) {
    cal.mutable_gpus(0)->set_source("fitted by hetsim calibrate on " + Today() + " (" + std::to_string(kernels.size()) +
                                    " kernel and " + std::to_string(comm.size()) + " communication measurements)");
  }
  return WriteCalibration(cal, run.command, run.output, out, err);
}

}  // namespace

namespace {

std::vector<std::string> SplitKinds(const std::string& list) {
  std::vector<std::string> kinds;
  std::stringstream in(list);
  for (std::string k; std::getline(in, k, ',');) {
    if (!k.empty()) kinds.push_back(k);
  }
  return kinds;
}

// Adds the GPU entries and profiles of the calibration file `part` to `merged` (profiles relative to `output`).
Status MergeKind(const std::string& part, const std::string& output, proto::Calibration* merged) {
  auto cal = models::LoadKernelCalibration(part);
  if (!cal.ok()) return cal.status();
  for (const auto& g : cal->gpus()) *merged->add_gpus() = g;
  const fs::path base = fs::absolute(output).parent_path();
  for (const auto& p : cal->profiles()) {
    const fs::path abs = fs::absolute(fs::path(part).parent_path() / p);
    merged->add_profiles(fs::relative(abs, base).string());
  }
  if (merged->provenance().data().empty()) {
    *merged->mutable_provenance() = cal->provenance();
  } else {
    merged->mutable_provenance()->set_data(merged->provenance().data() + "; " + cal->provenance().data());
  }
  return Status::Ok();
}

// `--gpu A,B`: each kind measured (or refitted) on its own backend (a CPU worker on the CPU backend, a GPU on the
// CUDA backend) into DATA/<kind>/, then one calibration with every kind's entry and profile, so that the twin
// prices each device of a mixed cluster by its own kind (docs/calibration.md "Two kinds on one machine").
int CalibrateKinds(const CalibrateOptions& options, std::ostream& out, std::ostream& err) {
  const std::vector<std::string> kinds = SplitKinds(options.gpu);
  std::string joined;
  for (const auto& k : kinds) joined += (joined.empty() ? "" : "-") + k;
  const std::string name = !options.name.empty() ? options.name : joined + "-measured";
  const std::string output = !options.output.empty() ? options.output : name + ".yaml";
  const std::string data = !options.from_data.empty() ? options.from_data
                           : !options.data_dir.empty() ? options.data_dir
                                                       : (fs::path(output).parent_path() /
                                                          (fs::path(output).stem().string() + "-data")).string();
  proto::Calibration merged;
  merged.set_kind("calibration");
  merged.set_name(name);
  merged.set_base(options.base);
  bool cpu_kind = false;
  for (const auto& kind : kinds) {
    auto gpu = models::GpuCatalog::Bundled().Find(kind);
    cpu_kind = cpu_kind || (gpu.ok() && gpu.value()->form_factor == "CPU worker");
  }
  for (const auto& kind : kinds) {
    auto gpu = models::GpuCatalog::Bundled().Find(kind);
    if (!gpu.ok()) {
      err << "hetsim calibrate: --gpu: " << gpu.status().message() << "\n";
      return 2;
    }
    CalibrateOptions one = options;
    one.gpu = gpu.value()->name;
    one.backend = gpu.value()->form_factor == "CPU worker" ? "cpu" : "cuda";
    one.name = one.gpu + "-measured";
    if (cpu_kind) {
      // A job with CPU workers trains in fp32 on every rank (executor/rank_kinds.h): each kind is measured so,
      // on the CPU workers' model (llama-tiny) unless --profile-model says otherwise.
      one.dtype = "fp32";
      if (!options.profile_model) one.profile_model = "llama-tiny";
      if (options.models.empty()) one.models = "llama-tiny";
    }
    const std::string dir = (fs::path(data) / one.gpu).string();
    (options.from_data.empty() ? one.data_dir : one.from_data) = dir;
    one.output = (fs::path(dir) / (one.name + ".yaml")).string();
    out << "== " << one.gpu << " (" << one.backend << " backend)\n";
    if (int rc = Calibrate(one, out, err); rc != 0) return rc;
    if (Status s = MergeKind(one.output, output, &merged); !s.ok()) {
      err << "hetsim calibrate: " << s.message() << "\n";
      return 1;
    }
  }
  const std::string command = "hetsim calibrate --gpu " + options.gpu +
                              (options.from_data.empty() ? "" : " --from-data " + data) +
                              (options.quick ? " --quick" : "") +
                              (options.ranks_given ? " --ranks " + std::to_string(options.ranks) : "");
  merged.set_description("Each kind of " + options.gpu + " measured on " + merged.provenance().host() +
                         " by `hetsim calibrate`, one entry per kind.");
  merged.mutable_provenance()->set_command(command);
  return WriteCalibration(merged, command, output, out, err);
}

}  // namespace

int Calibrate(const CalibrateOptions& options, std::ostream& out, std::ostream& err) {
  if (options.gpu.find(',') != std::string::npos) return CalibrateKinds(options, out, err);
  CalibrateRun run;
  if (auto rc = SetUpCalibrate(options, &run, out, err)) return *rc;
  if (!run.refit) {
    if (int rc = MeasureCalibrate(options, &run, out, err); rc != 0) return rc;
  }
  return FitCalibrate(options, run, out, err);
}


}  // namespace hetsim::calibration
