#include "sim/simulator.h"

#include <google/protobuf/util/json_util.h>
#include <simgrid/s4u.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <cstring>
#include <map>
#include <sstream>

#include "sim/platform.h"

namespace hetsim::sim {
namespace {

constexpr const char* kFlopsConvention =
    "model FLOPs = 3 x forward FLOPs (2 per multiply-add of every matmul, plus 4*b*s^2*h attention per layer, "
    "no causal halving, no recomputation) / (iteration time x sum of the plan's devices' dense peak at the "
    "training dtype)";

// Builds the report from the engine's traces.
proto::IterationReport MakeReport(const proto::Plan& plan, const models::PlanContext& ctx, const Programs& programs,
                                  const EngineResult& er) {
  proto::IterationReport rep;
  rep.set_kind("iteration_report");
  rep.set_cluster(ctx.cluster.name());
  rep.set_model(ctx.model.name());
  rep.set_plan(plan.name());
  rep.set_source("simulator");
  const double T = er.iteration_s;
  rep.set_iteration_time_s(T);
  const double seqs = ctx.training.global_batch_size();
  rep.set_tokens_per_s(T > 0 ? seqs * ctx.training.seq_len() / T : 0);
  double peak = 0;
  for (uint32_t d : programs.devices) peak += ctx.cluster.device(d).gpu->PeakTflops(ctx.training.dtype()) * 1e12;
  rep.set_mfu(T > 0 && peak > 0 ? ctx.model.IterationModelFlops(seqs, ctx.training.seq_len()) / (T * peak) : 0);
  rep.set_flops_convention(kFlopsConvention);
  std::map<uint32_t, double> phase_end;  // pipeline -> end of its last backward
  for (size_t i = 0; i < programs.devices.size(); ++i) {
    auto& e = phase_end[programs.programs[i].pipeline];
    e = std::max(e, er.devices[i].pipeline_end_s);
  }
  std::map<uint32_t, const models::DeviceMemory*> mem;
  const auto memory = models::EstimateMemory(plan, ctx);
  for (const auto& m : memory) mem[m.device] = &m;
  double idle_in_phase = 0, phase_total = 0;
  bool any_oom = false;
  for (size_t i = 0; i < programs.devices.size(); ++i) {
    const uint32_t d = programs.devices[i];
    const auto& tr = er.devices[i];
    auto* dr = rep.add_devices();
    dr->set_device(d);
    dr->set_gpu(ctx.cluster.device(d).gpu->name);
    dr->set_node(ctx.cluster.node(ctx.cluster.device(d).node).name);
    dr->set_pipeline(programs.programs[i].pipeline);
    dr->set_stage(programs.programs[i].stage);
    dr->set_compute_s(tr.compute_s);
    const double comm = tr.tp_s + tr.pp_s + tr.dp_s + tr.zero_s;
    dr->set_communication_s(comm);
    dr->set_idle_s(std::max(0.0, T - tr.compute_s - comm));
    dr->set_tp_communication_s(tr.tp_s);
    dr->set_pp_communication_s(tr.pp_s);
    dr->set_dp_communication_s(tr.dp_s + tr.zero_s);
    const auto* m = mem.at(d);
    dr->set_peak_memory_gib(m->total_gib);
    dr->set_capacity_gib(m->capacity_gib);
    dr->set_oom(m->oom());
    any_oom |= m->oom();
    const double phase = phase_end[programs.programs[i].pipeline];
    phase_total += phase;
    idle_in_phase += std::max(0.0, phase - tr.fwd_bwd_s - tr.tp_s - tr.pp_s);
  }
  rep.set_any_oom(any_oom);
  rep.set_bubble_fraction(phase_total > 0 ? idle_in_phase / phase_total : 0);
  return rep;
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

// Runs `work` in a child process; its returned bytes (a status byte, then the payload or an error
// message) come back through a pipe. SimGrid allows one engine per process: this is how hetsim runs
// as many simulations as it likes.
Result<std::string> RunIsolated(const std::function<std::string()>& work) {
  int fds[2];
  if (::pipe(fds) != 0) return Status::Internal("simulator: pipe() failed: " + std::string(std::strerror(errno)));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Internal("simulator: fork() failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::close(fds[0]);
    std::string payload;
    try {
      payload = work();
    } catch (const std::exception& e) {
      payload = std::string(1, '\2') + "simulator: " + e.what();
    }
    const bool ok = WriteAll(fds[1], payload);
    ::close(fds[1]);
    ::_exit(ok ? 0 : 3);
  }
  ::close(fds[1]);
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
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
    PutPod(out, d.pipeline_end_s);
    PutPod(out, d.end_s);
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
        !rd.Pod(&d.zero_s) || !rd.Pod(&d.pipeline_end_s) || !rd.Pod(&d.end_s) || !rd.Pod(&k) ||
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

Result<EngineResult> SimulatePrograms(const Programs& programs, const models::Cluster& cluster, bool record_timeline) {
  HETSIM_ASSIGN_OR_RETURN(std::string payload, RunIsolated([&] {
                            auto engine = MakeEngine();
                            const Platform platform = BuildPlatform(cluster);
                            std::string out(1, '\0');
                            PutTraces(out, RunEngine(programs, platform, record_timeline));
                            return out;
                          }));
  Reader rd(payload);
  EngineResult er;
  if (!GetTraces(rd, &er)) return Status::Internal("simulator: malformed result from the simulation process");
  return er;
}

Result<SimResult> SimulateIteration(const proto::Plan& plan, const models::PlanContext& ctx, const SimOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  HETSIM_ASSIGN_OR_RETURN(std::string payload, RunIsolated([&] {
                            models::ComputeCost cost(ctx.model, ctx.training, options.profiles, options.compute);
                            auto programs = BuildPrograms(plan, ctx, cost,
                                                          ProgramOptions{options.fidelity, options.compute_jitter_cv,
                                                                         options.seed});
                            if (!programs.ok()) return std::string(1, '\1') + programs.status().message();
                            auto engine = MakeEngine();
                            const Platform platform = BuildPlatform(ctx.cluster);
                            const EngineResult er = RunEngine(*programs, platform, options.record_timeline);
                            const std::string rep = MakeReport(plan, ctx, *programs, er).SerializeAsString();
                            std::string out(1, '\0');
                            PutPod(out, static_cast<uint64_t>(rep.size()));
                            out += rep;
                            PutTraces(out, er);
                            return out;
                          }));
  Reader rd(payload);
  uint64_t n = 0;
  std::string bytes;
  SimResult res;
  EngineResult er;
  if (!rd.Pod(&n) || !rd.Bytes(n, &bytes) || !res.report.ParseFromString(bytes) || !GetTraces(rd, &er)) {
    return Status::Internal("simulator: malformed result from the simulation process");
  }
  for (auto& d : er.devices) res.timeline.push_back(std::move(d.slices));
  res.report.set_wall_time_s(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return res;
}

std::string ChromeTraceJson(const SimResult& result, const models::Cluster& cluster) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto add = [&](const std::string& ev) {
    if (!first) out += ",\n";
    first = false;
    out += ev;
  };
  char buf[512];
  std::map<uint32_t, bool> named_nodes;
  const auto& devs = result.report.devices();
  for (int i = 0; i < devs.size(); ++i) {
    const uint32_t d = devs[i].device();
    const uint32_t node = cluster.device(d).node;
    if (!named_nodes[node]) {
      named_nodes[node] = true;
      std::snprintf(buf, sizeof(buf), R"({"name":"process_name","ph":"M","pid":%u,"args":{"name":"%s"}})", node,
                    cluster.node(node).name.c_str());
      add(buf);
    }
    std::snprintf(buf, sizeof(buf),
                  R"({"name":"thread_name","ph":"M","pid":%u,"tid":%u,"args":{"name":"GPU %u (%s) p%u s%u"}})", node, d,
                  d, devs[i].gpu().c_str(), devs[i].pipeline(), devs[i].stage());
    add(buf);
    if (static_cast<size_t>(i) >= result.timeline.size()) continue;
    for (const Slice& s : result.timeline[static_cast<size_t>(i)]) {
      const char* cat = CategoryName(s.category);
      const bool per_mb = s.category != Category::kOptimizer && s.category != Category::kDp;
      std::snprintf(buf, sizeof(buf),
                    R"({"name":"%s%s%s","cat":"%s","ph":"X","ts":%.3f,"dur":%.3f,"pid":%u,"tid":%u,"args":{"micro_batch":%u}})",
                    cat, per_mb ? " mb " : "", per_mb ? std::to_string(s.micro_batch).c_str() : "", cat, s.start_s * 1e6,
                    (s.end_s - s.start_s) * 1e6, node, d, s.micro_batch);
      add(buf);
    }
  }
  out += "\n]}\n";
  return out;
}

std::string ReportJson(const proto::IterationReport& report) {
  std::string json;
  google::protobuf::util::JsonPrintOptions opt;
  opt.add_whitespace = true;
  opt.preserve_proto_field_names = true;
  opt.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(report, &json, opt);
  return json;
}

Result<Fidelity> ParseFidelity(const std::string& name) {
  if (name == "fast") return Fidelity::Fast();
  if (name == "balanced") return Fidelity::Balanced();
  if (name == "full") return Fidelity::Full();
  return Status::Invalid("--fidelity: unknown level '" + name + "' (expected fast, balanced or full)");
}

}  // namespace hetsim::sim
