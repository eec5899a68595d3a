// hetsim-exec's process: MPI start-up, each rank's kind and backend from its device (rank_kinds.h), the core
// pool of CPU ranks, and the Runner that executes the plan (runner.h). Split from runner.cc, which holds the
// Runner's execution of the lowering.
#include <unistd.h>

#include <numeric>
#include <string>
#include <vector>

#include "executor/rank_kinds.h"
#include "executor/runner.h"
#include "executor/runner_internal.h"
#include "executor/unified_comm.h"

namespace hetsim::executor {

namespace {

int g_mpi_thread_level = MPI_THREAD_SINGLE;  // what MPI_Init_thread provided

// How many of the job's ranks run on this machine.
int LocalRanks(int rank) {
  MPI_Comm local;
  int local_size = 1;
  HETSIM_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  HETSIM_MPI_CHECK(MPI_Comm_size(local, &local_size));
  MPI_Comm_free(&local);
  return local_size;
}

// --cores' default: when the whole job runs here with more ranks than this machine has cores, a pool of all
// but one of them (at least one): the CPU backend's communication moves data with the CPU, so it keeps a core.
uint32_t AutoCorePool(int rank, int world) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int local = LocalRanks(rank);
  return cores > 0 && local == world && local > cores ? static_cast<uint32_t>(std::max(1L, cores - 1)) : 0;
}

// What a job of these rank kinds needs from this build and this MPI, checked the same on every rank.
Status CheckRankKinds(const RankKinds& kinds, const ExecPlan& plan, const std::string& file) {
#ifndef HETSIM_EXECUTOR_CUDA
  if (kinds.has(BackendKind::kCuda)) {
    return Status::Invalid("hetsim-exec: " + kinds.Describe() +
                           ": this build has no CUDA backend (it is built when CMake finds the CUDA toolkit, nvcc and "
                           "nccl.h); run CPU workers only, or pass --backend cpu");
  }
#endif
  if (plan.lowering.comm.dp_overlap() && kinds.has(BackendKind::kCpu) && g_mpi_thread_level < MPI_THREAD_MULTIPLE) {
    return Status::Invalid(file + ": comm.dp_overlap: the CPU backend overlaps the gradient sync on a second thread, "
                           "and this MPI library does not provide MPI_THREAD_MULTIPLE; use an MPI built with thread "
                           "support or set comm.dp_overlap: false");
  }
  if (plan.lowering.comm.dp_overlap() && kinds.has(BackendKind::kCpu) && kinds.has(BackendKind::kCuda)) {
    return Status::Invalid(file + ": comm.dp_overlap: a job of CPU and CUDA ranks runs its gradient sync on the main "
                           "stream (the host-staged collectives of the CUDA side stream are not implemented); set "
                           "comm.dp_overlap: false");
  }
  return Status::Ok();
}

// --cores, or its default: a pool only for jobs of CPU ranks (a CUDA rank would hold its core through its NCCL
// waits, which a pool of fewer cores than ranks cannot give).
Result<uint32_t> CorePoolOf(const ExecOptions& o, const RankKinds& kinds, int rank, int world) {
  const bool cuda = kinds.has(BackendKind::kCuda);
  const uint32_t cores = o.cores ? *o.cores : cuda ? 0 : AutoCorePool(rank, world);
  if (cores > 0 && cuda) {
    return Status::Invalid("hetsim-exec: --cores " + std::to_string(cores) +
                           ": a pool of cores is for jobs of CPU ranks only, and this one has CUDA ranks; pass --cores 0");
  }
  if (cores > 0 && LocalRanks(rank) != world) {
    return Status::Invalid("hetsim-exec: --cores " + std::to_string(cores) +
                           ": a pool of cores is shared by ranks of one machine, and this job spans several; pass "
                           "--cores 0");
  }
  return cores;
}

// This rank's GPU on its machine: how many of the machine's CUDA ranks come before it (collective over
// MPI_COMM_WORLD: every rank calls it).
int LocalCudaIndex(const RankKinds& kinds, int rank) {
  MPI_Comm local;
  int size = 1;
  HETSIM_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  HETSIM_MPI_CHECK(MPI_Comm_size(local, &size));
  std::vector<int> ranks(static_cast<size_t>(size));
  HETSIM_MPI_CHECK(MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, local));
  MPI_Comm_free(&local);
  int index = 0;
  for (int r : ranks) index += r < rank && kinds.of(r).backend == BackendKind::kCuda;
  return index;
}

int Fail(int rank, const Status& s, int code) {
  if (rank == 0) std::fprintf(stderr, "%s\n", s.message().c_str());
  return code;
}

int Run(int rank, int world, int argc, char** argv) {
  std::string help;
  auto options = ParseExecOptions(argc, argv, &help);
  if (!help.empty()) {
    if (rank == 0) std::printf("%s", help.c_str());
    return 0;
  }
  if (!options.ok()) return Fail(rank, options.status(), 2);
  auto specs = LoadSpecs(*options);
  if (!specs.ok()) return Fail(rank, specs.status(), 1);
  const models::PlanContext ctx{specs->cluster, specs->model, specs->training};
  auto plan = BuildExecPlan(specs->plan, ctx, specs->plan_file);
  if (!plan.ok()) return Fail(rank, plan.status(), 1);
  if (plan->world_size() != world) {
    std::string devices;
    for (uint32_t d : plan->devices) devices += (devices.empty() ? "" : ", ") + std::to_string(d);
    return Fail(rank,
                Status::Invalid(specs->plan_file + ": the plan uses " + std::to_string(plan->world_size()) +
                                " devices (" + devices + ") but mpirun started " + std::to_string(world) +
                                " ranks; run `mpirun -np " + std::to_string(plan->world_size()) +
                                " hetsim-exec ...` (rank r runs the r-th smallest device)"),
                1);
  }
  if (!options->profile_out.empty() && plan->roles.front().num_chunks > 1) {
    return Fail(rank,
                Status::Invalid(specs->plan_file + ": --profile-out measures one contiguous range of layers per "
                                "rank; profile a plan without virtual stages (schedule: 1f1b)"),
                1);
  }
  auto kinds = RankKinds::Choose(*plan, specs->cluster, options->backend, specs->training.dtype(), specs->plan_file);
  if (!kinds.ok()) return Fail(rank, kinds.status(), 1);
  if (Status s = CheckRankKinds(*kinds, *plan, specs->plan_file); !s.ok()) return Fail(rank, s, 1);
  auto cores = CorePoolOf(*options, *kinds, rank, world);
  if (!cores.ok()) return Fail(rank, cores.status(), 2);
  ShareCores(*cores);
  if (rank == 0 && *cores > 0) {
    std::printf("hetsim-exec: %d ranks share a pool of %u cores: at most %u compute at once, the others wait "
                "(--cores)\n", world, *cores, *cores);
  }
  // Collective (every rank, whatever its backend): this rank's GPU among the machine's CUDA ranks.
  const int gpu_index = LocalCudaIndex(*kinds, rank);
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CommFactory> factory;
  const RankKind& mine = kinds->of(rank);
  if (mine.backend == BackendKind::kCpu) {
    backend = MakeCpuBackend(mine.slowdown);
    factory = MakeMpiCommFactory();
  } else {
#ifdef HETSIM_EXECUTOR_CUDA
    const auto dtype = specs->training.dtype();
    backend = MakeCudaBackend(gpu_index, dtype == proto::DTYPE_BF16 ? DType::kBF16 : DType::kF32);
    factory = MakeNcclCommFactory(backend.get());
#else
    (void)gpu_index;
#endif
  }
  std::vector<int> everyone(static_cast<size_t>(world));
  std::iota(everyone.begin(), everyone.end(), 0);
  if (kinds->Mixed(everyone)) {
    // HetHub §3.1's unified communicator: groups and channels that mix kinds go through host memory and MPI.
    factory = MakeUnifiedCommFactory(backend.get(), std::move(factory), &*kinds);
    if (rank == 0) std::printf("hetsim-exec: ranks of several kinds: %s\n", kinds->Describe().c_str());
  }
  if (rank == 0) {
    std::printf("hetsim-exec: plan %s (%s on %s), %d ranks, backend %s (%s), %u sequences x %u tokens per step, "
                "schedule %s\n",
                specs->plan_name.c_str(), specs->model.name().c_str(), specs->cluster.name().c_str(), world,
                kinds->Mixed(everyone) ? "mixed" : backend->name().c_str(), DTypeName(backend->act_dtype()), plan->global_batch, plan->seq_len,
                plan->schedule == proto::Plan::SCHEDULE_GPIPE                ? "gpipe"
                : plan->schedule == proto::Plan::SCHEDULE_INTERLEAVED_1F1B ? "interleaved 1f1b"
                                                                             : "1f1b");
    std::fflush(stdout);
  }
  std::string command_line = "hetsim-exec";
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  Runner runner(*options, *specs, *plan, rank, backend.get(), factory.get(), command_line);
  return runner.Run();
}

}  // namespace

int ExecMain(int argc, char** argv) {
  // The CPU backend's side stream (comm.dp_overlap) calls MPI from a second thread.
  HETSIM_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &g_mpi_thread_level));
  int rank = 0, world = 0;
  HETSIM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HETSIM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  const int code = Run(rank, world, argc, argv);
  ShareCores(0);  // the pool's shared window goes before MPI does
  MPI_Finalize();
  return code;
}

}  // namespace hetsim::executor
