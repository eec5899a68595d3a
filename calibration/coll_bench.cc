// hetsim-coll-bench: times the communication hetsim-exec runs (all-reduces of TP and DP groups, pipeline
// point-to-point messages) through the executor's own communicators (MPI on the CPU backend, NCCL on the
// CUDA backend), and writes one CSV row per (operation, group size, message size). `hetsim calibrate` fits
// the link model's α–β and the per-call collective latency to it (calibration/fit.h).
//
//   mpirun -np R hetsim-coll-bench --backend cpu|cuda [-o collectives.csv] [--quick] [--max-bytes N]
//
// What it measures (rank 0 writes; every rank takes part):
// - allreduce: MPI_Allreduce / ncclAllReduce (sum, f32) among ranks [0, g) for g = 2, 4, 8, … and R, at
//   message sizes from 1 KiB to --max-bytes in steps of 4x. Each call starts after a world barrier, so its
//   time is the collective's own (the slowest member's entry to rank 0's exit). Bus bandwidth as
//   nccl-tests defines it: 2(g−1)/g · bytes / time.
// - p2p: a ping-pong between ranks 0 and 1 with the pipeline's PeerToPeer (asynchronous send, blocking
//   receive); one-way time = round trip / 2.
// Each row: the median and minimum over --reps timed calls (fewer for slow sizes) after two untimed ones.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "executor/backend.h"
#include "executor/cpu_backend.h"
#include "executor/mpi_comm.h"
#if HETSIM_EXECUTOR_CUDA
#include "executor/cuda_backend.h"
#endif

namespace {

using hetsim::executor::Backend;
using hetsim::executor::Buffer;
using hetsim::executor::CommFactory;
using hetsim::executor::DType;
namespace po = boost::program_options;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Stats {
  double median_s = 0, min_s = 0;
  int reps = 0;
};

Stats Summarise(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t.front(), static_cast<int>(t.size())};
}

// Timed calls: at most `reps`, fewer when one call is slow (about 0.5 s per row), at least 5.
int RepsFor(double first_s, int reps) {
  if (first_s <= 0) return reps;
  return std::clamp(static_cast<int>(0.5 / first_s), 5, reps);
}

// Times `op` (every rank calls it; ranks outside the operation pass a no-op): two untimed calls, then up to
// `reps` timed ones (fewer when a call is slow), each started after a world barrier and divided by `per`
// (2 for a ping-pong's round trip). Rank 0's time is broadcast, so every rank makes the same number of calls.
template <typename Op>
Stats TimeCalls(Backend* be, int reps, double per, Op op) {
  std::vector<double> times;
  int want = 2 + reps;
  for (int i = 0; i < want; ++i) {
    be->Synchronize();
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = Now();
    op();
    be->Synchronize();
    double dt = (Now() - t0) / per;
    MPI_Bcast(&dt, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (i == 2) want = 2 + RepsFor(dt, reps);
    if (i >= 2) times.push_back(dt);
  }
  return Summarise(times);
}

int Main(int argc, char** argv) {
  std::string backend_name = "cpu", out_path;
  int reps = 30;
  double max_bytes = 64.0 * (1 << 20);
  bool quick = false;
  po::options_description desc(
      "usage: mpirun -np R hetsim-coll-bench [--backend cpu|cuda] [-o FILE.csv] [--quick]\n\n"
      "Times all-reduces per group size and message size and point-to-point messages through hetsim-exec's "
      "communicators (MPI or NCCL); writes a CSV for `hetsim calibrate`.\n\nflags");
  desc.add_options()("help,h", "print this help")
      ("backend,b", po::value<std::string>(&backend_name)->default_value("cpu"), "cpu (MPI, f32) | cuda (NCCL)")
      ("out,o", po::value<std::string>(&out_path), "CSV file (default: standard output)")
      ("reps", po::value<int>(&reps)->default_value(30), "timed calls per row (at most)")
      ("max-bytes", po::value<double>(&max_bytes)->default_value(max_bytes), "largest message")
      ("quick", po::bool_switch(&quick), "a short run: messages up to 4 MiB, at most 10 calls per row");
  po::variables_map vm;
  int rank = 0, world = 1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto fail = [&](const std::string& msg, int code) {
    if (rank == 0) std::cerr << "hetsim-coll-bench: " << msg << "\n";
    MPI_Finalize();
    return code;
  };
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    return fail(std::string(e.what()) + " (--help lists the flags)", 2);
  }
  if (vm.count("help")) {
    if (rank == 0) std::cout << desc << "\n";
    MPI_Finalize();
    return 0;
  }
  if (quick) max_bytes = std::min(max_bytes, 4.0 * (1 << 20)), reps = std::min(reps, 10);
  if (world < 2) return fail("needs at least 2 ranks (mpirun -np 2 or more)", 2);
  if (reps < 1 || !(max_bytes >= 1024)) return fail("--reps must be >= 1 and --max-bytes >= 1024", 2);

  std::unique_ptr<Backend> be;
  std::unique_ptr<CommFactory> factory;
  if (backend_name == "cpu") {
    be = hetsim::executor::MakeCpuBackend();
    factory = hetsim::executor::MakeMpiCommFactory();
  } else if (backend_name == "cuda") {
#if HETSIM_EXECUTOR_CUDA
    MPI_Comm local;
    int local_rank = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    be = hetsim::executor::MakeCudaBackend(local_rank, DType::kF32);
    factory = hetsim::executor::MakeNcclCommFactory(be.get());
#else
    return fail("--backend cuda: this build has no CUDA backend", 2);
#endif
  } else {
    return fail("--backend: unknown backend '" + backend_name + "' (expected cpu or cuda)", 2);
  }

  std::ofstream file;
  if (rank == 0 && !out_path.empty()) {
    file.open(out_path);
    if (!file) return fail(out_path + ": cannot write (--out)", 1);
  }
  std::ostream& out = out_path.empty() ? std::cout : file;
  if (rank == 0) {
    char host[MPI_MAX_PROCESSOR_NAME] = {};
    int host_len = 0;
    MPI_Get_processor_name(host, &host_len);
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    out << "# hetsim-coll-bench --backend " << backend_name << (quick ? " --quick" : "") << " (" << world
        << " ranks, host " << host << ", " << date << ")\n";
    out << "op,group_size,bytes,median_s,min_s,reps,busbw_gbyte_s\n";
  }

  std::vector<int> sizes;
  for (int g = 2; g < world; g *= 2) sizes.push_back(g);
  sizes.push_back(world);
  std::vector<double> messages;
  for (double b = 1024; b <= max_bytes; b *= 4) messages.push_back(b);

  // ---- all-reduce per group size ----
  int index = 0;
  for (int g : sizes) {
    std::vector<int> members(static_cast<size_t>(g));
    for (int i = 0; i < g; ++i) members[static_cast<size_t>(i)] = i;
    std::unique_ptr<hetsim::executor::Comm> comm;
    if (rank < g) comm = factory->CreateGroup(members, index);
    ++index;
    for (double bytes : messages) {
      const auto numel = static_cast<int64_t>(bytes / 4);
      Buffer buf;
      if (comm) buf = Buffer(be.get(), 1, numel, DType::kF32), be->Fill(buf.t(), 1.0f);
      const Stats s = TimeCalls(be.get(), reps, 1, [&] {
        if (comm) comm->AllReduce(buf.t(), hetsim::executor::ReduceOp::kSum);
      });
      if (rank == 0) {
        out << "allreduce," << g << "," << bytes << "," << s.median_s << "," << s.min_s << "," << s.reps << ","
            << 2.0 * (g - 1) / g * bytes / s.median_s / 1e9 << "\n";
        std::cerr << "hetsim-coll-bench: allreduce g=" << g << " " << bytes << " B: " << s.median_s * 1e6
                  << " us\n";
      }
    }
  }

  // ---- point-to-point between ranks 0 and 1 ----
  auto p2p = factory->CreatePeerToPeer({{0, 1}, {1, 0}});
  for (double bytes : messages) {
    const auto numel = static_cast<int64_t>(bytes / 4);
    Buffer buf(be.get(), 1, numel, DType::kF32);
    be->Fill(buf.t(), 1.0f);
    const Stats s = TimeCalls(be.get(), reps, 2, [&] {
      if (rank == 0) {
        p2p->Send(1, buf.t(), 7);
        p2p->WaitSends();
        p2p->Recv(1, buf.t(), 8);
      } else if (rank == 1) {
        p2p->Recv(0, buf.t(), 7);
        p2p->Send(0, buf.t(), 8);
        p2p->WaitSends();
      }
    });
    if (rank == 0) {
      out << "p2p,2," << bytes << "," << s.median_s << "," << s.min_s << "," << s.reps << ","
          << bytes / s.median_s / 1e9 << "\n";
      std::cerr << "hetsim-coll-bench: p2p " << bytes << " B: " << s.median_s * 1e6 << " us\n";
    }
  }
  p2p.reset();
  factory.reset();
  be.reset();
  MPI_Finalize();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "hetsim-coll-bench: " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
