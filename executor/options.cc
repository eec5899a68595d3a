#include "executor/options.h"

#include <boost/program_options.hpp>
#include <filesystem>
#include <sstream>
#include <utility>

#include "models/plan.h"
#include "models/spec_io.h"
#include "models/suggest.h"
#include "models/training.h"
#include "models/yaml_proto.h"

namespace hetsim::executor {
namespace po = boost::program_options;
namespace {

// A reference inside a plan (`cluster: ../c.yaml`) is resolved relative to the plan file.
std::string RelativeTo(const std::string& ref, const std::string& plan_file) {
  return models::ResolveRelative(ref, plan_file);
}

}  // namespace

Result<ExecOptions> ParseExecOptions(int argc, const char* const* argv, std::string* help) {
  ExecOptions o;
  po::options_description desc(
      "usage: mpirun -np R hetsim-exec --plan P [--cluster C] [--model M] [--training T] [--backend auto|cpu|cuda]\n\n"
      "Runs a plan for real, one MPI rank per device of the plan, and reports like the simulator.\n\nflags");
  uint64_t seed = o.seed;
  // Counts are read as signed numbers and checked: an unsigned flag would take "-1" as 4,294,967,295.
  int64_t iterations = o.iterations, warmup = o.warmup, global_batch = 0, seq_len = 0, cores = 0;
  desc.add_options()
      ("help,h", "print this help")
      ("plan,p", po::value<std::string>(&o.plan), "plan file (or bundled plan name)")
      ("cluster,c", po::value<std::string>(&o.cluster), "cluster (bundled name or file; default: the plan's)")
      ("model,m", po::value<std::string>(&o.model), "model (bundled name or file; default: the plan's)")
      ("training,t", po::value<std::string>(&o.training), "training spec file (default: the plan's, else the model's)")
      ("backend,b", po::value<std::string>(&o.backend)->default_value("auto"),
       "auto (each rank by its device: a CPU worker runs cpu, a GPU cuda) | cpu (Eigen + MPI, fp32) | cuda "
       "(cuBLAS + NCCL) on every rank")
      ("iterations,n", po::value<int64_t>(&iterations)->default_value(3), "timed training steps (0..1000000)")
      ("warmup,w", po::value<int64_t>(&warmup)->default_value(1), "untimed training steps before them (0..1000000)")
      ("timeout-s", po::value<double>(&o.timeout_s)->default_value(o.timeout_s),
       "end the job when a rank makes no progress for this long (a peer stopped or hangs), naming the rank and "
       "the operation; 0: wait forever")
      ("cores", po::value<int64_t>(&cores),
       "CPU backend: ranks compute through a pool of this many cores, at most that many at once, the others "
       "waiting without polling (0: no pool; default: all but one of this machine's cores when it runs more "
       "ranks than it has cores)")
      ("seed", po::value<uint64_t>(&seed)->default_value(1234), "seed of the weights and the synthetic data")
      ("lr", po::value<double>(&o.lr)->default_value(1e-3), "Adam learning rate")
      ("rope-theta", po::value<double>(&o.rope_theta)->default_value(10000.0), "RoPE base")
      ("report-out", po::value<std::string>(&o.report_out), "write the IterationReport (JSON) here")
      ("timeline-out", po::value<std::string>(&o.timeline_out), "write the Chrome-trace timeline (JSON) here")
      ("ops-out", po::value<std::string>(&o.ops_out),
       "write the operations every rank executed in the first step, one line each as `hetsim lower` prints "
       "the plan's lowering (compare the two with diff)")
      ("loss-out", po::value<std::string>(&o.loss_out), "write step,loss,iteration_s (CSV) here")
      ("dump-gradients", po::value<std::string>(&o.dump_gradients), "write the first step's gradients here")
      ("compare-gradients", po::value<std::string>(&o.compare_gradients),
       "compare the first step's gradients with this dump; exit 1 when they differ by more than --rtol")
      ("rtol", po::value<double>(&o.rtol)->default_value(1e-4), "tolerance of --compare-gradients (per tensor, "
       "‖g − g_ref‖₂ / ‖g_ref‖₂)")
      ("profile-out", po::value<std::string>(&o.profile_out),
       "time every layer of rank 0 and merge the per-layer costs into this profile YAML (models/proto/profile.proto)")
      ("profile-model", po::value<std::string>(&o.profile_model),
       "model name written into the profile (default: the model's; e.g. llama2-7b for a stack of its layers)")
      ("global-batch", po::value<int64_t>(&global_batch), "global batch in sequences (overrides the training spec)")
      ("seq-len", po::value<int64_t>(&seq_len), "sequence length (overrides the training spec)")
      ("dtype", po::value<std::string>(&o.dtype), "bf16 | fp32 (overrides the training spec)")
      ("recompute", po::value<std::string>(&o.recompute), "none | selective | full (overrides the training spec)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    if (vm.count("help")) {
      std::ostringstream ss;
      ss << desc << "\n";
      *help = ss.str();
      return ExecOptions{};
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::vector<std::string> flags;
    for (const auto& opt : desc.options()) flags.push_back("--" + opt->long_name());
    return Status::Invalid("hetsim-exec: unknown flag '" + e.get_option_name() + "'" +
                           DidYouMean(e.get_option_name(), flags) + " (`hetsim-exec --help` lists the flags)");
  } catch (const po::error& e) {
    return Status::Invalid(std::string("hetsim-exec: ") + e.what() + " (`hetsim-exec --help` lists the flags)");
  }
  o.seed = seed;
  auto count = [](const char* flag, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi) {
      return Status::Invalid(std::string("hetsim-exec: --") + flag + ": expected " + std::to_string(lo) + ".." +
                             std::to_string(hi) + ", found " + std::to_string(v));
    }
    return Status::Ok();
  };
  HETSIM_RETURN_IF_ERROR(count("iterations", iterations, 0, 1000000));
  HETSIM_RETURN_IF_ERROR(count("warmup", warmup, 0, 1000000));
  o.iterations = static_cast<uint32_t>(iterations);
  o.warmup = static_cast<uint32_t>(warmup);
  if (vm.count("global-batch")) {
    HETSIM_RETURN_IF_ERROR(count("global-batch", global_batch, 1, 16777216));
    o.global_batch = static_cast<uint32_t>(global_batch);
  }
  if (vm.count("seq-len")) {
    HETSIM_RETURN_IF_ERROR(count("seq-len", seq_len, 1, 1048576));
    o.seq_len = static_cast<uint32_t>(seq_len);
  }
  if (!(o.timeout_s >= 0) || o.timeout_s > 1e7) {
    return Status::Invalid("hetsim-exec: --timeout-s: expected seconds (0 to wait forever), found " +
                           std::to_string(o.timeout_s));
  }
  if (o.plan.empty()) return Status::Invalid("hetsim-exec: --plan is required (`hetsim-exec --help` lists the flags)");
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda") {
    return Status::Invalid("hetsim-exec: --backend: unknown backend '" + o.backend + "' (expected auto, cpu or cuda)" +
                           DidYouMean(o.backend, {"auto", "cpu", "cuda"}));
  }
  if (vm.count("cores")) {
    HETSIM_RETURN_IF_ERROR(count("cores", cores, 0, 65536));
    o.cores = static_cast<uint32_t>(cores);
  }
  if (o.iterations + o.warmup == 0) return Status::Invalid("hetsim-exec: --iterations and --warmup are both 0");
  if (!(o.rtol > 0)) return Status::Invalid("hetsim-exec: --rtol must be positive");
  // Files written at the end are checked before training starts: a long run never ends in "cannot write".
  for (const auto& [flag, path] : {std::pair<const char*, const std::string*>{"report-out", &o.report_out},
                                   {"timeline-out", &o.timeline_out}, {"ops-out", &o.ops_out},
                                   {"loss-out", &o.loss_out}, {"profile-out", &o.profile_out}}) {
    if (path->empty()) continue;
    if (Status st = models::CheckWritable(*path, std::string("--") + flag); !st.ok()) {
      return Status::Invalid("hetsim-exec: " + st.message());
    }
  }
  return o;
}

Result<LoadedSpecs> LoadSpecs(const ExecOptions& o) {
  HETSIM_ASSIGN_OR_RETURN(proto::Plan plan, models::LoadPlan(o.plan));
  HETSIM_ASSIGN_OR_RETURN(models::SpecText plan_text, models::ReadSpec(models::SpecKind::kPlan, o.plan));
  const std::string cref = !o.cluster.empty() ? o.cluster : RelativeTo(plan.cluster(), plan_text.file);
  const std::string mref = !o.model.empty() ? o.model : RelativeTo(plan.model(), plan_text.file);
  if (cref.empty() || mref.empty()) {
    const std::string what = cref.empty() ? "cluster" : "model";
    return Status::Invalid(plan_text.file + ": " + what + ": the plan names no " + what + "; add the key to the plan or pass --" +
                           what);
  }
  HETSIM_ASSIGN_OR_RETURN(models::Cluster cluster, models::LoadCluster(cref));
  HETSIM_ASSIGN_OR_RETURN(models::TransformerModel model, models::LoadModel(mref));
  proto::Training t;
  std::string tfile = "training flags";
  if (!o.training.empty()) {
    HETSIM_ASSIGN_OR_RETURN(t, models::LoadTraining(o.training));
    tfile = o.training;
  } else if (plan.has_training()) {
    t = plan.training();
    tfile = plan_text.file + ": training";
  }
  if (o.global_batch) t.set_global_batch_size(*o.global_batch);
  if (o.seq_len) t.set_seq_len(*o.seq_len);
  if (!o.dtype.empty()) {
    HETSIM_ASSIGN_OR_RETURN(const int d, models::ParseEnumFlag("dtype", o.dtype, proto::DType_descriptor()));
    t.set_dtype(static_cast<proto::DType>(d));
  }
  if (!o.recompute.empty()) {
    HETSIM_ASSIGN_OR_RETURN(const int r, models::ParseEnumFlag("recompute", o.recompute, proto::Recompute_descriptor()));
    t.set_recompute(static_cast<proto::Recompute>(r));
  }
  HETSIM_ASSIGN_OR_RETURN(proto::Training training, models::ResolveTraining(std::move(t), model, tfile));
  models::PlanContext ctx{cluster, model, training};
  HETSIM_RETURN_IF_ERROR(models::ValidatePlan(plan, ctx, plan_text.file));
  std::string name = plan.name();
  if (name.empty()) name = std::filesystem::path(plan_text.file).stem().string();
  return LoadedSpecs{std::move(cluster), std::move(model), std::move(training), std::move(plan), plan_text.file,
                     std::move(name)};
}

}  // namespace hetsim::executor
