#include "sim/simulator.h"

#include <simgrid/s4u.hpp>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <new>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "models/child_process.h"
#include "models/communicator.h"
#include "models/iteration_report.h"
#include "models/stragglers.h"
#include "sim/engine.h"
#include "sim/platform.h"

namespace hetsim::sim {
namespace {

// The report from the engine's traces (models/iteration_report.h, shared with the executor); memory is
// the estimate of models::EstimateMemory. The wait for the slowest node (models/stragglers.h) lengthens the
// iteration, and every device's exposed data-parallel time when the plan has replicas (else its idle time).
proto::IterationReport MakeReport(const proto::Plan& plan, const models::PlanContext& ctx, const Programs& programs,
                                  const EngineResult& er, const models::ComputeCost& cost) {
  models::IterationMeasure m;
  m.source = "simulator";
  m.plan_name = plan.name();
  const models::StragglerWait straggle = models::StragglerWaitFor(plan, ctx.cluster, cost, er.iteration_s);
  const double wait = straggle.seconds;
  m.iteration_s = er.iteration_s + wait;
  std::map<uint32_t, const models::DeviceMemory*> mem;
  const auto memory = models::EstimateMemory(plan, ctx);
  for (const auto& dm : memory) mem[dm.device] = &dm;
  for (size_t i = 0; i < programs.devices.size(); ++i) {
    const auto& tr = er.devices[i];
    models::DeviceMeasure d;
    d.device = programs.devices[i];
    d.pipeline = programs.programs[i].pipeline;
    d.stage = programs.programs[i].stage;
    d.compute_s = tr.compute_s;
    d.fwd_bwd_s = tr.fwd_bwd_s;
    d.tp_s = tr.tp_s;
    d.pp_s = tr.pp_s;
    d.dp_s = tr.dp_s + (straggle.data_parallel ? wait : 0);
    d.zero_s = tr.zero_s;
    d.cp_s = tr.cp_s;
    d.ep_s = tr.ep_s;
    d.pipeline_end_s = tr.pipeline_end_s;
    d.comm_in_phase_s = tr.comm_in_phase_s;
    d.peak_memory_gib = mem.at(d.device)->total_gib;
    d.capacity_gib = mem.at(d.device)->capacity_gib;
    m.devices.push_back(std::move(d));
  }
  proto::IterationReport report = models::BuildIterationReport(m, ctx.cluster, ctx.model, ctx.training);
  report.set_straggler_wait_s(wait);
  report.set_straggler_nodes(straggle.nodes);
  report.set_straggler_cv(straggle.cv);
  return report;
}

// The communicator's path between each pair of node groups the programs' transfers cross (HetHub §3.1).
void AddCommPaths(const Programs& programs, const models::Cluster& cluster, const proto::CommOptions& comm,
                  proto::IterationReport* report) {
  const models::Communicator paths(cluster, comm);
  std::set<std::pair<uint32_t, uint32_t>> crossed;  // (group, group), group a ≤ b
  auto cross = [&](uint32_t da, uint32_t db) {
    const auto& na = cluster.node(cluster.device(da).node);
    const auto& nb = cluster.node(cluster.device(db).node);
    if (cluster.device(da).node == cluster.device(db).node) return;
    crossed.insert({std::min(na.group, nb.group), std::max(na.group, nb.group)});
  };
  for (size_t i = 0; i < programs.devices.size(); ++i) {
    for (const auto* ops : {&programs.programs[i].ops, &programs.programs[i].dp_stream}) {
      for (const Op& op : *ops) {
        if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) cross(programs.devices[i], op.peer);
      }
    }
  }
  for (const auto& g : programs.groups) {
    for (size_t r = 0; r + 1 < g.size(); ++r) cross(g[r], g[r + 1]);
    if (g.size() > 2) cross(g.back(), g.front());
  }
  for (const auto& [a, b] : crossed) {
    auto* p = report->add_comm_paths();
    p->set_from(cluster.spec().nodes(static_cast<int>(a)).name());
    p->set_to(cluster.spec().nodes(static_cast<int>(b)).name());
    p->set_path(paths.GroupsStaged(a, b) ? "cpu_staged" : "gpu_rdma");
    p->set_reason(paths.Reason(a, b));
  }
}

// NCCL's choice for the collectives between nodes (Programs::nccl_calls).
void AddNcclCalls(const Programs& programs, proto::IterationReport* report) {
  for (const NcclCallNote& n : programs.nccl_calls) {
    auto* c = report->add_nccl_calls();
    c->set_category(models::CategoryName(n.category));
    c->set_collective(models::CollectiveName(n.kind));
    c->set_ranks(n.ranks);
    c->set_nodes(n.nodes);
    c->set_bytes(n.bytes);
    c->set_algorithm(models::NcclAlgoName(n.call.algo));
    c->set_protocol(models::NcclProtoName(n.call.proto));
    c->set_latency_us(n.call.latency_s * 1e6);
    c->set_algorithm_gbyte_s(n.call.bandwidth_bytes_s * 1e-9);
    c->set_nic(n.nic == proto::Nic::KIND_ROCE ? "roce" : n.nic == proto::Nic::KIND_ETHERNET ? "ethernet" : "infiniband");
  }
}

// One line per GPU type of the cluster: what its compute times rest on.
void AddComputeBasis(const models::PlanContext& ctx, const SimOptions& options, proto::IterationReport* report) {
  std::set<std::string> seen;
  const std::string calibration = options.compute.calibration.empty() ? "default" : options.compute.calibration;
  std::set<std::string> profiled;
  if (options.profiles != nullptr) {
    for (const auto& [gpu, model] : options.profiles->Coverage()) {
      if (model == ctx.model.name()) profiled.insert(gpu);
    }
  }
  for (uint32_t d = 0; d < ctx.cluster.num_devices(); ++d) {
    const models::GpuSpec& gpu = *ctx.cluster.node(ctx.cluster.device(d).node).gpu;
    if (!seen.insert(gpu.name).second) continue;
    auto* b = report->add_compute_basis();
    if (options.compute.model == models::ComputeModel::kKernel) {
      *b = models::ComputeBasisFor(gpu, options.compute.calibration, ctx.training.dtype());
    } else {
      b->set_gpu(gpu.name);
      b->set_calibration(calibration);
      b->set_source("token-efficiency model (not measured)");
    }
    b->set_profiled(profiled.count(gpu.name) > 0);
  }
}

// ---- child <-> parent transport --------------------------------------------------------------------

void Put(std::string& buf, const void* p, size_t n) { buf.append(static_cast<const char*>(p), n); }
template <typename T>
void PutPod(std::string& buf, const T& v) {
  Put(buf, &v, sizeof(T));
}

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <typename T>
  bool Pod(T* v) {
    if (at_ + sizeof(T) > s_.size()) return false;
    std::memcpy(v, s_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    if (at_ + n > s_.size()) return false;
    out->assign(s_.data() + at_, n);
    at_ += n;
    return true;
  }

 private:
  const std::string& s_;
  size_t at_ = 0;
};

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Progress records from the simulation process: fixed-size, each written whole (smaller than PIPE_BUF,
// so never split or interleaved).
struct ProgressRecord {
  uint8_t phase;
  uint64_t done, total;
  double simulated_s;
};

// The child's end of the progress pipe (-1: nobody listens).
int g_progress_fd = -1;

void SendProgress(SimProgress::Phase phase, uint64_t done, uint64_t total, double simulated_s) {
  if (g_progress_fd < 0) return;
  ProgressRecord r{};
  r.phase = phase;
  r.done = done;
  r.total = total;
  r.simulated_s = simulated_s;
  (void)!::write(g_progress_fd, &r, sizeof(r));
}

// Runs `work` in a child process; its returned bytes (a status byte, then the payload or an error
// message) come back through a pipe. SimGrid allows one engine per process: this is how hetsim runs
// as many simulations as it likes. With `progress`, the child's SendProgress records come back through a
// second pipe and are handed to it as they arrive.
Result<std::string> RunIsolated(const std::function<std::string()>& work,
                                const std::function<void(const ProgressRecord&)>& progress = {}) {
  int fds[2];
  int pfds[2] = {-1, -1};
  if (::pipe(fds) != 0) return Status::Internal("simulator: pipe() failed: " + std::string(std::strerror(errno)));
  if (progress && ::pipe(pfds) != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::Internal("simulator: pipe() failed: " + std::string(std::strerror(errno)));
  }
  std::fflush(nullptr);
  models::ReleaseFreeHeap();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Internal("simulator: fork() failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    models::TieToParent(parent);
    ::close(fds[0]);
    if (pfds[0] >= 0) ::close(pfds[0]);
    g_progress_fd = pfds[1];
    // For the runner's tests (tests/sim/runner/run_e2e.sh): the child dies as the out-of-memory killer would end it.
    if (std::getenv("HETSIM_TEST_KILL_SIMULATIONS") != nullptr) ::raise(SIGKILL);
    std::string payload;
    try {
      payload = work();
    } catch (const std::bad_alloc&) {
      payload = std::string(1, '\2') +
                "simulator: out of memory while simulating (the plan's operations need more than this machine "
                "gives: keep folding on, simulate fewer devices, or run where more memory is free)";
    } catch (const std::exception& e) {
      payload = std::string(1, '\2') + "simulator: " + e.what();
    }
    const bool ok = WriteAll(fds[1], payload);
    ::close(fds[1]);
    ::_exit(ok ? 0 : 3);
  }
  ::close(fds[1]);
  if (pfds[1] >= 0) ::close(pfds[1]);
  std::string data;
  std::string records;  // progress bytes not yet making a whole record
  char buf[1 << 16];
  struct pollfd watch[2] = {{fds[0], POLLIN, 0}, {pfds[0], POLLIN, 0}};
  bool live[2] = {true, pfds[0] >= 0};
  while (live[0]) {
    if (::poll(watch, live[1] ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 1; i >= 0; --i) {  // progress first: its records precede the result
      if (!live[i] || watch[i].revents == 0) continue;
      const ssize_t n = ::read(watch[i].fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        live[i] = false;
        continue;
      }
      if (i == 0) {
        data.append(buf, static_cast<size_t>(n));
        continue;
      }
      records.append(buf, static_cast<size_t>(n));
      size_t at = 0;
      for (; at + sizeof(ProgressRecord) <= records.size(); at += sizeof(ProgressRecord)) {
        ProgressRecord r;
        std::memcpy(&r, records.data() + at, sizeof(r));
        progress(r);
      }
      records.erase(0, at);
    }
  }
  ::close(fds[0]);
  if (pfds[0] >= 0) ::close(pfds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  if (data.empty() && WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    return Status::Aborted("simulator: the simulation process was killed by signal " + std::to_string(sig) + " (" +
                           strsignal(sig) + (sig == SIGKILL ? "; the out-of-memory killer?" : "") + ")");
  }
  if (data.empty()) {
    return Status::Internal("simulator: the simulation process ended without a result (" +
                            (WIFSIGNALED(wstatus) ? "signal " + std::to_string(WTERMSIG(wstatus))
                                                  : "exit " + std::to_string(WEXITSTATUS(wstatus))) +
                            ")");
  }
  if (data[0] != 0) return Status::Invalid(data.substr(1));
  return data.substr(1);
}

void PutTraces(std::string& out, const EngineResult& er) {
  PutPod(out, er.iteration_s);
  PutPod(out, static_cast<uint64_t>(er.devices.size()));
  for (const auto& d : er.devices) {
    PutPod(out, d.compute_s);
    PutPod(out, d.fwd_bwd_s);
    PutPod(out, d.tp_s);
    PutPod(out, d.pp_s);
    PutPod(out, d.dp_s);
    PutPod(out, d.zero_s);
    PutPod(out, d.cp_s);
    PutPod(out, d.ep_s);
    PutPod(out, d.pipeline_end_s);
    PutPod(out, d.end_s);
    PutPod(out, d.comm_in_phase_s);
    PutPod(out, static_cast<uint64_t>(d.slices.size()));
    if (!d.slices.empty()) Put(out, d.slices.data(), d.slices.size() * sizeof(Slice));
  }
}

bool GetTraces(Reader& rd, EngineResult* er) {
  uint64_t n = 0;
  if (!rd.Pod(&er->iteration_s) || !rd.Pod(&n)) return false;
  er->devices.resize(n);
  std::string bytes;
  for (auto& d : er->devices) {
    uint64_t k = 0;
    if (!rd.Pod(&d.compute_s) || !rd.Pod(&d.fwd_bwd_s) || !rd.Pod(&d.tp_s) || !rd.Pod(&d.pp_s) || !rd.Pod(&d.dp_s) ||
        !rd.Pod(&d.zero_s) || !rd.Pod(&d.cp_s) || !rd.Pod(&d.ep_s) || !rd.Pod(&d.pipeline_end_s) || !rd.Pod(&d.end_s) || !rd.Pod(&d.comm_in_phase_s) ||
        !rd.Pod(&k) ||
        !rd.Bytes(k * sizeof(Slice), &bytes)) {
      return false;
    }
    d.slices.resize(k);
    if (k > 0) std::memcpy(d.slices.data(), bytes.data(), bytes.size());
  }
  return true;
}

// The SimGrid engine of a child process, configured for GPU fabrics (shared/notes: CM02 without
// cross-traffic or TCP windows; small actor stacks for 16k-actor runs).
std::unique_ptr<simgrid::s4u::Engine> MakeEngine() {
  int argc = 7;
  const char* args[] = {"hetsim",
                        "--log=root.thres:critical",
                        "--cfg=network/model:CM02",
                        "--cfg=network/crosstraffic:0",
                        "--cfg=network/TCP-gamma:0",
                        "--cfg=contexts/stack-size:128",
                        "--cfg=network/maxmin-selective-update:yes",
                        nullptr};
  return std::make_unique<simgrid::s4u::Engine>(&argc, const_cast<char**>(args));
}

}  // namespace

Result<EngineResult> SimulatePrograms(const Programs& programs, const models::Cluster& cluster, bool record_timeline,
                                      const std::string& calibration) {
  HETSIM_ASSIGN_OR_RETURN(std::string payload, RunIsolated([&] {
                            auto engine = MakeEngine();
                            const Platform platform = BuildPlatform(cluster, calibration);
                            std::string out(1, '\0');
                            PutTraces(out, RunEngine(programs, platform, record_timeline));
                            return out;
                          }));
  Reader rd(payload);
  EngineResult er;
  if (!GetTraces(rd, &er)) return Status::Internal("simulator: malformed result from the simulation process");
  return er;
}

Result<double> SimulateTransfers(const std::vector<Transfer>& transfers, const models::Cluster& cluster,
                                 const std::string& calibration) {
  bool nvme = false, store = false;
  for (const auto& s : cluster.spec().storage()) {
    nvme |= s.kind() == proto::StorageEndpoint::KIND_LOCAL_NVME;
    store |= s.kind() == proto::StorageEndpoint::KIND_OBJECT_STORE;
  }
  for (const auto& t : transfers) {
    for (const Endpoint& e : {t.from, t.to}) {
      if (e.kind == Endpoint::kNvme && !nvme) {
        return Status::Invalid("cluster " + cluster.name() +
                               " has no local NVMe: add `storage: [{name: nvme, kind: local_nvme, "
                               "read_bandwidth_gbyte_s: ...}]` to the cluster");
      }
      if (e.kind == Endpoint::kObjectStore && !store) {
        return Status::Invalid("cluster " + cluster.name() +
                               " has no object store: add `storage: [{name: store, kind: object_store, "
                               "read_bandwidth_gbyte_s: ...}]` to the cluster");
      }
      const uint32_t limit = e.kind == Endpoint::kGpu ? cluster.num_devices() : static_cast<uint32_t>(cluster.nodes().size());
      if (e.kind != Endpoint::kObjectStore && e.index >= limit) {
        return Status::Invalid("transfer endpoint " + std::to_string(e.index) + " is not in cluster " + cluster.name());
      }
    }
  }
  if (transfers.empty()) return 0.0;
  HETSIM_ASSIGN_OR_RETURN(std::string payload, RunIsolated([&] {
                            auto engine = MakeEngine();
                            const Platform platform = BuildPlatform(cluster, calibration);
                            auto host = [&](const Endpoint& e) {
                              switch (e.kind) {
                                case Endpoint::kGpu: return platform.gpus[e.index];
                                case Endpoint::kHostMemory: return platform.cpus[e.index];
                                case Endpoint::kNvme: return platform.nvmes[e.index];
                                case Endpoint::kObjectStore: break;
                              }
                              return platform.object_store;
                            };
                            double end = 0;
                            simgrid::s4u::Actor::create("transfers", platform.object_store != nullptr
                                                                         ? platform.object_store
                                                                         : platform.cpus[0],
                                                        [&] {
                                                          std::vector<simgrid::s4u::CommPtr> comms;
                                                          comms.reserve(transfers.size());
                                                          for (const auto& t : transfers) {
                                                            auto* a = host(t.from);
                                                            auto* b = host(t.to);
                                                            if (a == b || t.bytes <= 0) continue;
                                                            comms.push_back(simgrid::s4u::Comm::sendto_async(
                                                                a, b, static_cast<uint64_t>(std::llround(t.bytes))));
                                                          }
                                                          for (auto& c : comms) c->wait();
                                                          end = simgrid::s4u::Engine::get_clock();
                                                        });
                            engine->run();
                            std::string out(1, '\0');
                            PutPod(out, end);
                            return out;
                          }));
  Reader rd(payload);
  double end = 0;
  if (!rd.Pod(&end)) return Status::Internal("simulator: malformed result from the transfer simulation");
  return end;
}

Status CheckSharedCores(uint32_t cores, const std::string& what) {
  if (cores >= 1 && cores <= kMaxSharedCores) return Status::Ok();
  return Status::Invalid(what + ": " + std::to_string(cores) + " is not a machine's core count (give 1 to " +
                         std::to_string(kMaxSharedCores) + ")");
}

Result<SimResult> SimulateIteration(const proto::Plan& plan, const models::PlanContext& ctx, const SimOptions& options) {
  if (options.shared_cores > 0) HETSIM_RETURN_IF_ERROR(CheckSharedCores(options.shared_cores, "shared cores"));
  const auto t0 = std::chrono::steady_clock::now();
  std::function<void(const ProgressRecord&)> relay;
  ProgressHook hook;
  if (options.progress) {
    relay = [&](const ProgressRecord& r) {
      SimProgress p;
      p.phase = r.phase == SimProgress::kBuilt ? SimProgress::kBuilt : SimProgress::kPlaying;
      p.done = r.done;
      p.total = r.total;
      p.simulated_s = r.simulated_s;
      p.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      options.progress(p);
    };
    hook.interval_s = options.progress_interval_s;
    hook.report = [](const EngineProgress& p) { SendProgress(SimProgress::kPlaying, p.done, p.total, p.simulated_s); };
  }
  HETSIM_ASSIGN_OR_RETURN(std::string payload, RunIsolated([&] {
                            // Backward passes recompute what the plan says (a plan may recompute where the
                            // training spec does not: the baselines' memory knobs).
                            proto::Training training = ctx.training;
                            training.set_recompute(models::EffectiveRecompute(plan, ctx.training));
                            models::ComputeCost cost(ctx.model, training, options.profiles, options.compute);
                            auto programs = BuildPrograms(plan, ctx, cost,
                                                          ProgramOptions{options.fidelity, options.compute_jitter_cv,
                                                                         options.seed,
                                                                         options.fold && options.shared_cores == 0,
                                                                         options.verify_fold});
                            if (!programs.ok()) return std::string(1, '\1') + programs.status().message();
                            SendProgress(SimProgress::kBuilt, 0, CountOperations(*programs), 0);
                            auto engine = MakeEngine();
                            const Platform platform =
                                BuildPlatform(ctx.cluster, options.compute.calibration, options.shared_cores);
                            const EngineResult er =
                                RunEngine(*programs, platform, options.record_timeline, hook, options.timeline_devices);
                            // A device whose main stream never reached its end: SimGrid stopped on a deadlock
                            // (operations no order of events can complete). An error, never an iteration of 0 s.
                            for (size_t slot = 0; slot < programs->devices.size(); ++slot) {
                              if (programs->programs[slot].ops.empty() || er.devices[slot].end_s > 0) continue;
                              return std::string(1, '\1') + "the simulation deadlocked: device " +
                                     std::to_string(programs->devices[slot]) +
                                     " never finished its operations (the plan's operations wait on each other in "
                                     "a cycle; `hetsim lower --plan P` lists them)";
                            }
                            proto::IterationReport report = MakeReport(plan, ctx, *programs, er, cost);
                            AddCommPaths(*programs, ctx.cluster, plan.comm(), &report);
                            AddComputeBasis(ctx, options, &report);
                            AddNcclCalls(*programs, &report);
                            const std::string rep = report.SerializeAsString();
                            std::string out(1, '\0');
                            PutPod(out, static_cast<uint64_t>(rep.size()));
                            out += rep;
                            PutTraces(out, er);
                            const uint32_t played = programs->folded ? programs->fold.played
                                                                     : static_cast<uint32_t>(programs->devices.size());
                            PutPod(out, played);
                            PutPod(out, er.scaled_links);
                            PutPod(out, static_cast<uint64_t>(programs->fold_note.size()));
                            out += programs->fold_note;
                            return out;
                          }, relay));
  Reader rd(payload);
  uint64_t n = 0;
  std::string bytes;
  SimResult res;
  EngineResult er;
  uint64_t note = 0;
  if (!rd.Pod(&n) || !rd.Bytes(n, &bytes) || !res.report.ParseFromString(bytes) || !GetTraces(rd, &er) ||
      !rd.Pod(&res.played_devices) || !rd.Pod(&res.scaled_links) || !rd.Pod(&note) || !rd.Bytes(note, &res.fold_note)) {
    return Status::Internal("simulator: malformed result from the simulation process");
  }
  for (auto& d : er.devices) res.timeline.push_back(std::move(d.slices));
  res.timeline_partial = options.record_timeline && !options.timeline_devices.empty();
  res.report.set_wall_time_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return res;
}

namespace {
// The first device of each of a pipeline's stages.
void AppendStageHeads(const proto::Pipeline& pipe, std::vector<uint32_t>* out) {
  for (const auto& st : pipe.stages()) {
    if (st.devices_size() > 0) out->push_back(st.devices(0));
  }
}
}  // namespace

std::vector<uint32_t> StageTimelineDevices(const proto::Plan& plan) {
  std::vector<uint32_t> out;
  for (const auto& pipe : plan.pipelines()) AppendStageHeads(pipe, &out);
  return out;
}

std::vector<uint32_t> DefaultTimelineDevices(const proto::Plan& plan, const models::Cluster& cluster,
                                             uint32_t max_devices) {
  uint64_t total = 0;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) total += static_cast<uint64_t>(st.devices_size());
  }
  if (total <= max_devices) return {};
  std::set<std::string> shapes;
  std::vector<uint32_t> out;
  for (const auto& pipe : plan.pipelines()) {
    std::string shape = std::to_string(pipe.micro_batch_size()) + "x" + std::to_string(pipe.num_micro_batches());
    for (const auto& st : pipe.stages()) {
      shape += "|" + std::to_string(st.devices_size()) + "," + std::to_string(models::TpDegree(st)) + "," +
               std::to_string(st.layer_begin()) + "-" + std::to_string(st.layer_end());
      for (uint32_t d : st.devices()) {
        if (d < cluster.num_devices()) shape += "," + cluster.device(d).gpu->name;
      }
    }
    if (!shapes.insert(shape).second) continue;
    AppendStageHeads(pipe, &out);
    if (out.size() >= max_devices) break;
  }
  return out;
}

std::string ChromeTraceJson(const SimResult& result, const models::Cluster& cluster) {
  models::IterationMeasure m;
  m.source = "simulator";
  m.plan_name = result.report.plan();
  m.iteration_s = result.report.iteration_time_s();
  const auto& devs = result.report.devices();
  for (int i = 0; i < devs.size(); ++i) {
    const bool has = static_cast<size_t>(i) < result.timeline.size() && !result.timeline[static_cast<size_t>(i)].empty();
    if (result.timeline_partial && !has) continue;  // a device the timeline was not asked to show
    models::DeviceMeasure d;
    d.device = devs[i].device();
    d.pipeline = devs[i].pipeline();
    d.stage = devs[i].stage();
    if (static_cast<size_t>(i) < result.timeline.size()) {
      for (const Slice& s : result.timeline[static_cast<size_t>(i)]) {
        d.slices.push_back({s.start_s, s.end_s, s.category, s.micro_batch});
      }
    }
    m.devices.push_back(std::move(d));
  }
  return models::ChromeTraceJson(m, cluster);
}

Result<Fidelity> ParseFidelity(const std::string& name) {
  if (name == "fast") return Fidelity::Fast();
  if (name == "balanced") return Fidelity::Balanced();
  if (name == "full") return Fidelity::Full();
  return Status::Invalid("--fidelity: unknown level '" + name + "' (expected fast, balanced or full)");
}

std::string DescribeProgress(const SimProgress& p) {
  auto grouped = [](uint64_t n) {
    std::string d = std::to_string(n);
    for (int i = static_cast<int>(d.size()) - 3; i > 0; i -= 3) d.insert(static_cast<size_t>(i), ",");
    return d;
  };
  char line[256];
  if (p.phase == SimProgress::kBuilt) {
    if (p.total < 1000000) return "";
    std::snprintf(line, sizeof(line), "playing %s operations (programs built in %.1f s)", grouped(p.total).c_str(),
                  p.wall_s);
    return line;
  }
  const double pct = p.total == 0 ? 100.0 : 100.0 * static_cast<double>(p.done) / static_cast<double>(p.total);
  std::snprintf(line, sizeof(line), "%.0f%% of %s operations played, simulated clock %.3f s, %.0f s elapsed", pct,
                grouped(p.total).c_str(), p.simulated_s, p.wall_s);
  return line;
}

}  // namespace hetsim::sim
