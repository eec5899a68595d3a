// bench_planner_scaling: every registered planner's planning time against the cluster's size (issue 30).
//
//   bench_planner_scaling [FILTER] [--sizes 16,64,256,1024,4096] [--planners a,b,...] [--limit-s 60]
//                         [--batch-per-gpu 4]
//
// Clusters: two GPU types, half H800 and half H20 in 8-GPU nodes (NVSwitch inside, one 400 Gb/s InfiniBand
// NIC per GPU, one non-blocking switch between the nodes): the Hetu v2 cluster (`hetu-h800x16-h20x32`) with
// its node counts scaled to the size. Model: Llama-2 70B, 4,096 tokens, full recomputation, BF16; the
// global batch grows with the cluster: `--batch-per-gpu` sequences per GPU (default 4, i.e. 64 sequences
// at 16 GPUs and 16,384 at 4,096). `exhaustive` runs at 16 GPUs only (it refuses larger clusters) with
// its own time_limit_s set to the limit.
//
// Each planning runs in a child process under a CPU-time limit (`--limit-s`, RLIMIT_CPU) and a wall-clock
// limit of three times that (a loaded machine), so the benchmark always finishes. Prints one line per
// measurement, `name value unit` (FILTER keeps the names that contain it):
//   scaling.hetu.4096gpu 12.3 s          wall time of RunPlanner (planning, validation and estimate)
//   scaling.hetu.4096gpu.cpu 12.2 s      the child's CPU time for the same
//   scaling.hetu.4096gpu.status 1 ok     0 = no plan (the reason on stderr), -1 = over the limit
//   scaling.hetu.4096gpu.iteration 9.87 s   the plan's analytic iteration time
//   scaling.hetu.4096gpu.plan 1234567 hash  a fingerprint of the plan (equal plans, equal hashes)
// and at the end a table (planner × size: wall seconds with CPU seconds in brackets, "> limit", or "no plan"),
// each line starting with "#". On a shared machine the CPU time is the steadier figure.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "models/spec_io.h"
#include "models/training.h"
#include "planners/planner.h"
#include "tools/benchmarks/bench_util.h"

namespace {

namespace models = hetsim::models;
namespace planners = hetsim::planners;
namespace proto = hetsim::proto;
namespace bench = hetsim::bench;
using hetsim::bench::Print;

struct Config {
  std::string filter;
  std::vector<uint32_t> sizes = {16, 64, 256, 1024, 4096};
  std::vector<std::string> planners;  // empty = every registered planner
  double limit_s = 60;
  uint32_t batch_per_gpu = 4;
};

// What a child reports back through its pipe.
struct Outcome {
  int status = -1;  // 1 ok, 0 no plan, -1 over the limit (or crashed)
  double wall_s = 0, cpu_s = 0, iteration_s = 0;
  uint64_t plan_hash = 0, candidates = 0;
  std::string message;  // the Status message when there is no plan, or how the child ended
};

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The scaled two-type cluster of `gpus` GPUs (a multiple of 16).
hetsim::Result<models::Cluster> ScaledCluster(const proto::Cluster& base, uint32_t gpus) {
  proto::Cluster spec = base;
  spec.set_name("scaling-h800-h20-" + std::to_string(gpus));
  spec.set_description("half H800, half H20, 8-GPU nodes, InfiniBand, one switch (bench_planner_scaling)");
  for (auto& node : *spec.mutable_nodes()) node.set_count(gpus / 16);
  return models::Cluster::Build(spec, "bench_planner_scaling");
}

// FNV-1a over the plan's deterministic serialisation.
uint64_t PlanHash(const proto::Plan& plan) {
  std::string bytes;
  google::protobuf::io::StringOutputStream raw(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&raw);
    out.SetSerializationDeterministic(true);
    plan.SerializeToCodedStream(&out);
  }
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

double ChildCpu(const rusage& u) {
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

// The child: plans, writes "status wall cpu iteration hash candidates\nmessage" to `fd`, exits.
[[noreturn]] void Child(int fd, const std::string& planner_name, const std::string& options,
                        const planners::PlanningProblem& problem, double limit_s) {
  rlimit cpu{};
  cpu.rlim_cur = static_cast<rlim_t>(limit_s) + 1;  // SIGXCPU, which ends the process
  cpu.rlim_max = cpu.rlim_cur + 5;                  // SIGKILL
  setrlimit(RLIMIT_CPU, &cpu);
  std::string out;
  auto planner = planners::CreatePlanner(planner_name, options, "bench options");
  if (!planner.ok()) {
    out = "0 0 0 0 0 0\n" + planner.status().message();
  } else {
    rusage u0{}, u1{};
    getrusage(RUSAGE_SELF, &u0);
    const auto start = std::chrono::steady_clock::now();
    auto r = planners::RunPlanner(**planner, problem);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    getrusage(RUSAGE_SELF, &u1);
    const double cpu_s = ChildCpu(u1) - ChildCpu(u0);
    char head[256];
    if (r.ok()) {
      std::snprintf(head, sizeof head, "1 %.6f %.6f %.9g %llu %llu\n", wall, cpu_s, r->estimate.iteration_s,
                    static_cast<unsigned long long>(PlanHash(r->plan)),
                    static_cast<unsigned long long>(r->stats.candidates_evaluated));
      out = head;
    } else {
      std::snprintf(head, sizeof head, "0 %.6f %.6f 0 0 0\n", wall, cpu_s);
      out = head + r.status().message();
    }
  }
  size_t at = 0;
  while (at < out.size()) {
    const ssize_t n = write(fd, out.data() + at, out.size() - at);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  close(fd);
  _exit(0);
}

Outcome RunOne(const std::string& planner_name, const std::string& options, const planners::PlanningProblem& problem,
               double limit_s) {
  Outcome o;
  int fds[2];
  if (pipe(fds) != 0) {
    o.message = std::string("pipe: ") + std::strerror(errno);
    return o;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    o.message = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return o;
  }
  if (pid == 0) {
    close(fds[0]);
    Child(fds[1], planner_name, options, problem, limit_s);
  }
  close(fds[1]);
  std::string text;
  const double wall_limit_s = 3 * limit_s + 10;
  bool killed = false;
  for (;;) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > wall_limit_s) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 200);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // the child closed its end (done or dead)
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int wstatus = 0;
  rusage usage{};
  wait4(pid, &wstatus, 0, &usage);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (killed || text.empty()) {
    o.status = -1;
    o.wall_s = wall;
    o.cpu_s = ChildCpu(usage);
    o.message = killed ? "wall-clock limit" : WIFSIGNALED(wstatus) ? std::string("signal ") + strsignal(WTERMSIG(wstatus))
                                                                  : "no report";
    return o;
  }
  unsigned long long hash = 0, candidates = 0;
  int consumed = 0;
  std::sscanf(text.c_str(), "%d %lf %lf %lf %llu %llu\n%n", &o.status, &o.wall_s, &o.cpu_s, &o.iteration_s, &hash,
              &candidates, &consumed);
  o.plan_hash = hash;
  o.candidates = candidates;
  const size_t nl = text.find('\n');
  if (nl != std::string::npos) o.message = text.substr(nl + 1);
  return o;
}

// "12.3 (11.9)": wall seconds (CPU seconds); "> 60"; "no plan 0.12 (0.11)".
std::string Cell(const Outcome& o, double limit_s) {
  char buf[64];
  auto secs = [](double v) {
    char b[24];
    std::snprintf(b, sizeof b, v < 10 ? "%.3f" : "%.1f", v);
    return std::string(b);
  };
  if (o.status < 0) {
    std::snprintf(buf, sizeof buf, "> %.0f", limit_s);
  } else {
    std::snprintf(buf, sizeof buf, "%s%s (%s)", o.status == 0 ? "no plan " : "", secs(o.wall_s).c_str(),
                  secs(o.cpu_s).c_str());
  }
  return buf;
}

int Run(const Config& cfg) {
  auto base = models::LoadCluster("hetu-h800x16-h20x32");
  auto model = models::LoadModel("llama2-70b");
  if (!bench::AllOk(base, model)) return 1;
  // Every registered planner but twin (it runs all of them; name it to measure it).
  std::vector<std::string> names = cfg.planners;
  if (names.empty()) {
    for (const auto& n : planners::PlannerNames()) {
      if (n != "twin") names.push_back(n);
    }
  }
  std::map<std::pair<std::string, uint32_t>, Outcome> table;
  std::vector<std::string> shown;
  for (const auto& name : names) {
    bool any = false;
    for (uint32_t gpus : cfg.sizes) {
      if (name == "exhaustive" && gpus > 16) continue;
      const std::string tag = "scaling." + name + "." + std::to_string(gpus) + "gpu";
      if (!cfg.filter.empty() && tag.find(cfg.filter) == std::string::npos) continue;
      if (gpus % 16 != 0) {
        std::fprintf(stderr, "%s: sizes must be multiples of 16 (two types of 8-GPU nodes)\n", tag.c_str());
        return 1;
      }
      auto cluster = ScaledCluster(base->spec(), gpus);
      auto training = models::ResolveTraining(
          bench::TrainingOf(cfg.batch_per_gpu * gpus, 4096, proto::DTYPE_BF16, proto::RECOMPUTE_FULL), *model,
          "bench_planner_scaling");
      if (!bench::AllOk(cluster, training)) return 1;
      const planners::PlanningProblem problem{*cluster, *model, *training};
      std::string options;
      if (name == "exhaustive") options = "time_limit_s: " + std::to_string(cfg.limit_s);
      const Outcome o = RunOne(name, options, problem, cfg.limit_s);
      Print(tag, o.wall_s, "s");
      Print(tag + ".cpu", o.cpu_s, "s");
      Print(tag + ".status", o.status, "ok");
      if (o.status == 1) {
        Print(tag + ".iteration", o.iteration_s, "s");
        std::printf("%s.plan %016llx hash\n", tag.c_str(), static_cast<unsigned long long>(o.plan_hash));
        Print(tag + ".candidates", static_cast<double>(o.candidates), "count");
      } else {
        std::string first_line = o.message.substr(0, o.message.find('\n'));
        std::fprintf(stderr, "%s: %s\n", tag.c_str(), first_line.c_str());
      }
      std::fflush(stdout);
      table[{name, gpus}] = o;
      any = true;
    }
    if (any) shown.push_back(name);
  }
  if (shown.empty()) return 0;
  // The table: planner × size, wall seconds.
  std::printf("# planning time, wall s (CPU s), CPU limit %.0f s per run, vs cluster size: half H800, half H20, "
              "llama2-70b, %u sequences per GPU\n",
              cfg.limit_s, cfg.batch_per_gpu);
  std::printf("# %-11s", "planner");
  for (uint32_t gpus : cfg.sizes) std::printf(" | %17u", gpus);
  std::printf("\n");
  for (const auto& name : shown) {
    std::printf("# %-11s", name.c_str());
    for (uint32_t gpus : cfg.sizes) {
      auto it = table.find({name, gpus});
      std::printf(" | %17s", it == table.end() ? "-" : Cell(it->second, cfg.limit_s).c_str());
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_planner_scaling: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sizes") {
      cfg.sizes.clear();
      for (const auto& s : SplitComma(value())) cfg.sizes.push_back(static_cast<uint32_t>(std::stoul(s)));
    } else if (a == "--planners") {
      cfg.planners = SplitComma(value());
    } else if (a == "--limit-s") {
      cfg.limit_s = std::stod(value());
    } else if (a == "--batch-per-gpu") {
      cfg.batch_per_gpu = static_cast<uint32_t>(std::stoul(value()));
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr,
                   "usage: bench_planner_scaling [FILTER] [--sizes N,...] [--planners a,...] [--limit-s S] "
                   "[--batch-per-gpu B]\n");
      return 2;
    } else {
      cfg.filter = a;
    }
  }
  return Run(cfg);
}
