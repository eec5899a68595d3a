#include "executor/runner.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>

#include "executor/cpu_backend.h"
#include "executor/exec_plan.h"
#include "executor/grad_sync.h"
#include "executor/gradient_file.h"
#include "executor/init.h"
#include "executor/mpi_comm.h"
#include "executor/mpi_util.h"
#include "executor/op_log.h"
#include "executor/options.h"
#include "executor/stage_model.h"
#include "executor/trace.h"
#include "executor/watchdog.h"
#include "models/spec_io.h"
#include "models/yaml_proto.h"
#ifdef HETSIM_EXECUTOR_CUDA
#include "executor/cuda_backend.h"
#endif

namespace hetsim::executor {
namespace {

// Everything rank `rank` runs.
class Runner {
 public:
  Runner(const ExecOptions& options, const LoadedSpecs& specs, const ExecPlan& plan, int rank, Backend* backend,
         CommFactory* factory, std::string command_line)
      : command_line_(std::move(command_line)),
        o_(options),
        specs_(specs),
        plan_(plan),
        rank_(rank),
        role_(plan.roles.at(static_cast<size_t>(rank))),
        be_(backend),
        factory_(factory),
        recorder_(backend),
        log_(plan, role_, specs.model, plan.seq_len),
        watchdog_(rank, options.timeout_s) {}

  int Run();

 private:
  void SetupComms();
  double Step(uint32_t step, bool timed, DeviceTiming* timing);
  // Runs the operations of the rank's lowered list (ExecPlan::Ops) in order.
  void RunOps();
  // The pass (forward or backward of one micro-batch over the stage) whose operations start at ops[i]:
  // its layer operations and the TP collectives inside them. Returns the index after them.
  size_t RunPass(const std::vector<models::Op>& ops, size_t i);
  void Forward(uint32_t mb);
  void Backward(uint32_t mb);
  void Recv(const models::Op& op);
  // PP leader broadcast: the TP group's leader received the micro-batch's boundary tensor; every member
  // gets it from the leader (the pass that follows says which direction).
  void Broadcast(const std::vector<models::Op>& ops, size_t i);
  // The communicator of the lowering's collective group `g` (this rank's groups only).
  Comm* CommOf(uint32_t g);
  void Send(const models::Op& op);
  // Token ids of this rank's share of micro-batch `mb` of step `step` (inputs, or labels = inputs
  // shifted by one).
  Buffer Tokens(uint32_t step, uint32_t mb, bool labels);
  // Uploads the step's inputs and labels of every micro-batch before the step's clock starts.
  void PrepareData(uint32_t step);
  // Merges rank 0's per-layer timings into --profile-out.
  void WriteProfile(const std::vector<std::vector<TimedSlice>>& layer_steps);
  // The gradients in the global layout (complete on rank 0 only), from the canonical holder of each
  // layer; sets the largest relative difference of any rank's held rows from them (and its rank).
  // Gathers every rank's executed operations (--ops-out) on rank 0, which writes them.
  void WriteOps();
  GradientDump CollectGradients(double loss, double* disagreement, int* disagreeing_rank);
  int CheckGradients(double loss);
  // Gathers every rank's timing on rank 0, which prints the summary and writes the report and timeline.
  void Report(const DeviceTiming& mine, double wall_s);
  bool root() const { return rank_ == 0; }
  int64_t seq() const { return plan_.seq_len; }

  std::string command_line_;
  const ExecOptions& o_;
  const LoadedSpecs& specs_;
  const ExecPlan& plan_;
  int rank_;
  const RankRole& role_;
  Backend* be_;
  CommFactory* factory_;
  SliceRecorder recorder_;
  std::map<std::vector<int>, std::unique_ptr<Comm>> comms_;
  Comm* tp_comm_ = nullptr;
  std::unique_ptr<PeerToPeer> p2p_;
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<GradSync> sync_;
  // Per micro-batch: received activations (forward) or gradients (backward), and the pass outputs that
  // sends read (kept until the sends complete).
  std::map<uint32_t, Buffer> recv_forward_, recv_backward_, out_forward_, out_backward_;
  OpLog log_;
  std::vector<Buffer> inputs_, labels_;  // per micro-batch, for the current step
  std::unique_ptr<SliceRecorder> layer_recorder_;  // profile mode
  std::vector<std::vector<TimedSlice>> layer_steps_;  // per timed step
  Watchdog watchdog_;
  uint32_t step_ = 0;
};

void Runner::SetupComms() {
  // One global order of groups on every rank: TP groups, then gradient-sync groups (deduplicated).
  std::vector<std::vector<int>> groups;
  auto add = [&](const std::vector<int>& g) {
    if (g.size() > 1 && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  };
  for (const auto& g : plan_.tp_groups) add(g);
  for (const auto& sg : plan_.sync_groups) add(sg.ranks);
  // Hierarchical all-reduces: the node's members and the members of one position across nodes (every
  // rank scans every rank's operations, so that all create them in one order).
  for (const auto& r : plan_.lowering.ranks) {
    for (const auto& op : r.ops) {
      if (op.kind != models::OpKind::kCollective || op.category != Category::kDp || op.group == models::kNone) continue;
      std::vector<int> ranks;
      for (uint32_t d : plan_.lowering.groups.at(op.group)) ranks.push_back(plan_.RankOfDevice(d));
      add(ranks);
    }
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    if (std::find(g.begin(), g.end(), rank_) == g.end()) continue;
    comms_[g] = factory_->CreateGroup(g, static_cast<int>(i));
  }
  if (role_.tp > 1) tp_comm_ = comms_.at(role_.tp_group).get();
  // CPU-staged transfers go through host memory and MPI on every backend; otherwise the backend's own.
  p2p_ = plan_.cpu_staged ? MakeStagedPeerToPeer(be_) : factory_->CreatePeerToPeer(plan_.channels);
  be_->SetProgressHook([this] { p2p_->Progress(); });
}

Buffer Runner::Tokens(uint32_t step, uint32_t mb, bool labels) {
  const uint32_t n = role_.share.size(), s = plan_.seq_len;
  std::vector<int32_t> host(static_cast<size_t>(n) * s), seqbuf(s + 1);
  const uint32_t vocab = specs_.model.spec().vocab_size();
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t id = uint64_t{step} * plan_.global_batch + role_.FirstSequence(mb) + i;
    SyntheticSequence(o_.seed, id, s + 1, vocab, seqbuf.data());
    std::copy_n(seqbuf.begin() + (labels ? 1 : 0), s, host.begin() + static_cast<ptrdiff_t>(i) * s);
  }
  Buffer b(be_, static_cast<int64_t>(host.size()), 1, DType::kI32);
  be_->Upload(b.t(), host.data());
  return b;
}

void Runner::PrepareData(uint32_t step) {
  inputs_.clear();
  labels_.clear();
  inputs_.resize(role_.num_micro_batches);
  labels_.resize(role_.num_micro_batches);
  for (uint32_t mb = 0; mb < role_.num_micro_batches; ++mb) {
    if (role_.first_stage()) inputs_[mb] = Tokens(step, mb, false);
    if (role_.last_stage()) labels_[mb] = Tokens(step, mb, true);
  }
}

void Runner::Recv(const models::Op& op) {
  const int64_t T = role_.share.size() * seq(), h = specs_.model.spec().hidden_size();
  const bool backward = op.channel == models::kChanPpBackward;
  Buffer& buf = (backward ? recv_backward_ : recv_forward_)[op.micro_batch];
  if (buf.empty()) buf = Buffer(be_, T, h, be_->act_dtype());
  const int peer = plan_.RankOfDevice(op.peer), tag = PipelineTag(op.micro_batch, backward);
  p2p_->WaitForMessage(peer, tag);  // waiting for the other stage is idle time, not transfer
  const Tensor rows = buf.t().Rows(op.seq_begin * seq(), op.seq_end * seq());
  {
    SliceRecorder::Scope pp(&recorder_, Category::kPp, static_cast<int32_t>(op.micro_batch));
    p2p_->Recv(peer, rows, tag);
  }
  models::Op done = op;
  done.bytes = static_cast<double>(rows.bytes());
  log_.Add(done);
}

Comm* Runner::CommOf(uint32_t g) {
  std::vector<int> ranks;
  for (uint32_t d : plan_.lowering.groups.at(g)) ranks.push_back(plan_.RankOfDevice(d));
  const auto it = comms_.find(ranks);
  HETSIM_CHECK(it != comms_.end(), "hetsim-exec: no communicator for the lowering's group " + std::to_string(g));
  return it->second.get();
}

void Runner::Broadcast(const std::vector<models::Op>& ops, size_t i) {
  const models::Op& op = ops[i];
  bool backward = false;
  for (size_t j = i + 1; j < ops.size(); ++j) {
    const auto& next = ops[j];
    if (next.kind == models::OpKind::kCompute &&
        (next.category == Category::kForward || next.category == Category::kBackward)) {
      backward = next.category == Category::kBackward;
      break;
    }
  }
  const int64_t T = role_.share.size() * seq(), h = specs_.model.spec().hidden_size();
  Buffer& buf = (backward ? recv_backward_ : recv_forward_)[op.micro_batch];
  if (buf.empty()) buf = Buffer(be_, T, h, be_->act_dtype());
  {
    SliceRecorder::Scope pp(&recorder_, Category::kPp, static_cast<int32_t>(op.micro_batch));
    CommOf(op.group)->Broadcast(buf.t(), 0);  // the leader is TP rank 0 of the receiving stage
  }
  models::Op done = op;
  done.bytes = static_cast<double>(buf.t().bytes());
  log_.Add(done);
}

void Runner::Send(const models::Op& op) {
  const bool backward = op.channel == models::kChanPpBackward;
  auto& outs = backward ? out_backward_ : out_forward_;
  const auto it = outs.find(op.micro_batch);
  HETSIM_CHECK(it != outs.end() && !it->second.empty(),
               "hetsim-exec: send of micro-batch " + std::to_string(op.micro_batch) + " before its pass");
  const Tensor rows = it->second.t().Rows(op.seq_begin * seq(), op.seq_end * seq());
  p2p_->Send(plan_.RankOfDevice(op.peer), rows, PipelineTag(op.micro_batch, backward));
  models::Op done = op;
  done.bytes = static_cast<double>(rows.bytes());
  log_.Add(done);
}

void Runner::Forward(uint32_t mb) {
  Buffer input;
  if (role_.first_stage()) {
    input = std::move(inputs_[mb]);
  } else {
    input = std::move(recv_forward_.at(mb));
    recv_forward_.erase(mb);
  }
  Buffer labels = std::move(labels_[mb]);
  const float grad_scale = 1.0f / (static_cast<float>(plan_.global_batch) * static_cast<float>(plan_.seq_len));
  SliceRecorder::Scope f(&recorder_, Category::kForward, static_cast<int32_t>(mb));
  Buffer out = model_->Forward(mb, role_.share.size(), seq(), std::move(input), std::move(labels), grad_scale,
                               plan_.full_recompute);
  if (!role_.last_stage()) out_forward_[mb] = std::move(out);
}

void Runner::Backward(uint32_t mb) {
  Buffer dout;
  if (!role_.last_stage()) {
    dout = std::move(recv_backward_.at(mb));
    recv_backward_.erase(mb);
  }
  SliceRecorder::Scope b(&recorder_, Category::kBackward, static_cast<int32_t>(mb));
  Buffer dx = model_->Backward(mb, std::move(dout));
  if (!role_.first_stage()) out_backward_[mb] = std::move(dx);
}

size_t Runner::RunPass(const std::vector<models::Op>& ops, size_t i) {
  const models::Op& first = ops[i];
  uint32_t lo = first.layer_begin, hi = first.layer_end;
  size_t j = i;
  for (; j < ops.size(); ++j) {
    const models::Op& op = ops[j];
    const bool layer = op.kind == models::OpKind::kCompute && op.category == first.category;
    const bool tp = op.kind == models::OpKind::kCollective && op.in_pass;
    if (!(layer || tp) || op.micro_batch != first.micro_batch) break;
    if (layer) lo = std::min(lo, op.layer_begin), hi = std::max(hi, op.layer_end);
  }
  // The model runs a pass over the whole stage; the lowering of the executor's plans has nothing else.
  HETSIM_CHECK(lo == role_.layer_begin && hi == role_.layer_end,
               "hetsim-exec: a pass over layers " + std::to_string(lo) + "-" + std::to_string(hi) +
                   " is not the stage's " + std::to_string(role_.layer_begin) + "-" + std::to_string(role_.layer_end));
  if (first.category == Category::kForward) {
    Forward(first.micro_batch);
  } else {
    Backward(first.micro_batch);
  }
  return j;
}

void Runner::RunOps() {
  const std::vector<models::Op>& ops = plan_.Ops(rank_);
  for (size_t i = 0; i < ops.size();) {
    const models::Op& op = ops[i];
    const auto at = static_cast<int64_t>(i);
    switch (op.kind) {
      case models::OpKind::kRecv: watchdog_.Beat("a receive", op.peer, at, step_); break;
      case models::OpKind::kSend: watchdog_.Beat("a send", op.peer, at, step_); break;
      case models::OpKind::kCollective: watchdog_.Beat("a gradient all-reduce", -1, at, step_); break;
      case models::OpKind::kWaitSends: watchdog_.Beat("waiting for its sends", -1, at, step_); break;
      default: watchdog_.Beat("a pass or the optimizer", -1, at, step_); break;
    }
    switch (op.kind) {
      case models::OpKind::kRecv:
        Recv(op);
        ++i;
        break;
      case models::OpKind::kSend:
        Send(op);
        ++i;
        break;
      case models::OpKind::kCompute:
        if (op.category != Category::kOptimizer) {
          i = RunPass(ops, i);
          break;
        }
        sync_->End();
        {
          SliceRecorder::Scope opt(&recorder_, Category::kOptimizer, -1);
          AdamParams adam;
          adam.lr = static_cast<float>(o_.lr);
          adam.step = static_cast<int>(step_) + 1;
          // ZeRO: the synchronised layers' shards here, the others (no replica to shard with) as usual.
          sync_->ZeroStep(adam);
          model_->OptimizerStep(adam, sync_->zero_layers());
        }
        log_.Add(op);
        ++i;
        break;
      case models::OpKind::kWaitSends:
        p2p_->WaitSends();
        out_forward_.clear();
        out_backward_.clear();
        log_.Add(op);
        sync_->Begin();
        ++i;
        break;
      case models::OpKind::kCollective: {
        if (op.category == Category::kPp && op.collective == models::CollectiveKind::kBroadcast) {
          Broadcast(ops, i);
          ++i;
          break;
        }
        HETSIM_CHECK((op.category == Category::kDp || op.category == Category::kZero) && op.sync_group != models::kNone,
                     "hetsim-exec: the executor's lowering has a collective outside a pass that is not a gradient "
                     "sync or a ZeRO gather");
        const size_t index = plan_.SyncGroupOfLowering(op.sync_group);
        models::Op done = op;
        const uint32_t own = log_.GroupOf(plan_.sync_groups[index].ranks);
        if (op.category == Category::kZero) {
          done.bytes = sync_->AllGatherGroup(index);
        } else if (op.group != own) {
          // One of a hierarchical all-reduce's three collectives (over the node, or across nodes).
          done.bytes = sync_->RunHierarchical(index, op.bucket, op.num_buckets, op.collective, CommOf(op.group));
        } else {
          done.bytes = sync_->RunGroup(index, op.bucket, op.num_buckets);
        }
        done.group = op.category == Category::kDp && op.group != own ? op.group : own;
        log_.Add(done);
        ++i;
        break;
      }
      default:
        HETSIM_CHECK(false, "hetsim-exec: the executor's lowering has a stream operation (no DP overlap here)");
    }
  }
}

double Runner::Step(uint32_t step, bool timed, DeviceTiming* timing) {
  PrepareData(step);
  be_->Synchronize();
  watchdog_.Beat("the barrier before a step", -1, -1, step);
  HETSIM_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  be_->ClearMarks();
  const Backend::Mark origin = be_->Record();
  model_->ZeroLoss();
  step_ = step;
  log_.active = step == 0 && !o_.ops_out.empty();
  RunOps();
  sync_->FinishStep();
  log_.active = false;
  const Backend::Mark end = be_->Record();
  watchdog_.Beat("the end of a step (device work or loss all-reduce)", -1, -1, step);
  be_->Synchronize();
  const double seconds = be_->Elapsed(origin, end);
  auto slices = recorder_.Resolve(origin);
  if (timed) {
    timing->iteration_s.push_back(seconds);
    timing->slices.push_back(std::move(slices));
  }
  if (layer_recorder_ != nullptr) {
    auto layer_slices = layer_recorder_->Resolve(origin);
    if (timed) layer_steps_.push_back(std::move(layer_slices));
  }
  float local_loss = 0;
  if (model_->holds_head() && role_.tp_rank == 0) be_->Download(&local_loss, model_->loss());
  double loss = local_loss;
  HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  loss /= double(plan_.global_batch) * plan_.seq_len;
  double max_seconds = seconds;
  HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &max_seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  if (root()) {
    std::printf("step %3u%s  loss %.6f  %.4f s\n", step + 1, timed ? "" : " (warm-up)", loss, max_seconds);
    std::fflush(stdout);
  }
  return loss;
}

void Runner::WriteOps() {
  // Rank r runs the r-th smallest device: rank order is the device order `hetsim lower` prints.
  const int n = static_cast<int>(log_.text.size()), world = plan_.world_size();
  std::vector<int> counts(root() ? world : 0), displs(root() ? world : 0);
  HETSIM_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string all;
  if (root()) {
    int total = 0;
    for (int r = 0; r < world; ++r) displs[static_cast<size_t>(r)] = total, total += counts[static_cast<size_t>(r)];
    all.resize(static_cast<size_t>(total));
  }
  HETSIM_MPI_CHECK(MPI_Gatherv(log_.text.data(), n, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0,
                               MPI_COMM_WORLD));
  if (!root()) return;
  const Status s = models::WriteFileAtomically(o_.ops_out, all);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
  } else {
    std::printf("executed operations of step 1 written to %s\n", o_.ops_out.c_str());
  }
}

GradientDump Runner::CollectGradients(double loss, double* disagreement, int* disagreeing_rank) {
  const auto& model = specs_.model;
  GradientDump dump;
  dump.loss = loss;
  std::vector<int64_t> offsets;
  std::map<std::pair<uint32_t, ParamKind>, size_t> index;  // (layer, kind) -> tensor
  int64_t total = 0;
  for (uint32_t l = 0; l < model.num_layers(); ++l) {
    for (const auto& spec : LayerParams(model, l, 1, 0)) {
      index[{l, spec.kind}] = offsets.size();
      offsets.push_back(total);
      total += spec.global_rows * spec.cols;
      dump.tensors.push_back({spec.name(), spec.global_rows, spec.cols, {}});
    }
  }
  // The canonical holder of each layer contributes its shards; every rank then gets the sum.
  std::vector<float> global(static_cast<size_t>(total), 0.0f);
  std::vector<std::vector<float>> mine;
  for (const auto& p : model_->params()) {
    mine.emplace_back(static_cast<size_t>(p.grad.t().numel()));
    be_->Download(mine.back().data(), p.grad.t());
    const auto& holder = plan_.canonical_holder.at(p.spec.layer);
    if (holder[0] != role_.pipeline || holder[1] != role_.stage || holder[2] != role_.replica) continue;
    const int64_t cols = p.spec.cols, first = p.spec.owned.begin - p.spec.held.begin;
    std::copy_n(mine.back().begin() + first * cols, p.spec.owned.size() * cols,
                global.begin() + offsets[index.at({p.spec.layer, p.spec.kind})] + p.spec.owned.begin * cols);
  }
  constexpr int64_t kChunk = int64_t{1} << 28;
  for (int64_t off = 0; off < total; off += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, total - off));
    HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, global.data() + off, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }
  // Every replica and every TP rank must hold the same synchronised gradient in all the rows it holds
  // (this checks the gradient sync, including the completion of replicated rows, not just the shards).
  struct {
    double value;
    int rank;
  } worst{0.0, rank_};
  for (size_t i = 0; i < mine.size(); ++i) {
    const ParamSpec& spec = model_->params()[i].spec;
    const float* ref = global.data() + offsets[index.at({spec.layer, spec.kind})] + spec.held.begin * spec.cols;
    double d2 = 0, r2 = 0;
    for (size_t k = 0; k < mine[i].size(); ++k) {
      d2 += std::pow(double(mine[i][k]) - ref[k], 2);
      r2 += double(ref[k]) * ref[k];
    }
    const double rel = d2 == 0 ? 0.0 : (r2 > 0 ? std::sqrt(d2 / r2) : INFINITY);
    worst.value = std::max(worst.value, rel);
  }
  HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
  *disagreement = worst.value;
  *disagreeing_rank = worst.rank;
  if (root()) {
    for (size_t i = 0; i < dump.tensors.size(); ++i) {
      auto& t = dump.tensors[i];
      t.data.assign(global.begin() + offsets[i], global.begin() + offsets[i] + t.rows * t.cols);
    }
  }
  return dump;
}

int Runner::CheckGradients(double loss) {
  sync_->GatherGradientsForCheck();
  double disagreement = 0;
  int disagreeing_rank = 0;
  GradientDump dump = CollectGradients(loss, &disagreement, &disagreeing_rank);
  int status = 0;
  if (root()) {
    const bool agree = disagreement <= o_.rtol;
    std::printf("replicas agree: every rank's gradients match the canonical copy within %.3e (worst: rank %d)%s\n",
                disagreement, disagreeing_rank, agree ? "" : ": MISMATCH");
    if (!agree) status = 1;
    if (!o_.dump_gradients.empty()) {
      const Status s = WriteGradientDump(o_.dump_gradients, dump);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        status = 1;
      } else {
        std::printf("gradients of step 1 written to %s\n", o_.dump_gradients.c_str());
      }
    }
    if (!o_.compare_gradients.empty()) {
      auto ref = ReadGradientDump(o_.compare_gradients);
      Result<DumpComparison> cmp = ref.ok() ? CompareGradientDumps(dump, *ref) : Result<DumpComparison>(ref.status());
      if (!cmp.ok()) {
        std::fprintf(stderr, "hetsim-exec: --compare-gradients: %s\n", cmp.status().message().c_str());
        status = 1;
      } else {
        const auto* w = cmp->worst();
        const bool ok = cmp->Within(o_.rtol);
        std::printf("gradients vs %s: %zu tensors, worst %s relative L2 error %.3e (max abs %.3e), loss relative "
                    "error %.3e; tolerance %.1e: %s\n",
                    o_.compare_gradients.c_str(), cmp->tensors.size(), w ? w->name.c_str() : "-",
                    w ? w->relative_l2 : 0.0, w ? w->max_abs : 0.0, cmp->loss_relative, o_.rtol,
                    ok ? "MATCH" : "MISMATCH");
        if (!ok) {
          for (const auto& t : cmp->tensors) {
            if (!(t.relative_l2 <= o_.rtol)) {
              std::printf("  %-24s relative L2 error %.3e (reference norm %.3e)\n", t.name.c_str(), t.relative_l2,
                          t.ref_norm);
            }
          }
          status = 1;
        }
      }
    }
  }
  HETSIM_MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD));
  return status;
}

void Runner::Report(const DeviceTiming& mine, double wall_s) {
  // Serialise this rank's timing: [iterations, peak, per iteration: seconds, n, (category, mb, b, e)·n].
  std::vector<double> buf = {double(mine.iteration_s.size()), mine.peak_memory_bytes};
  for (size_t i = 0; i < mine.iteration_s.size(); ++i) {
    buf.push_back(mine.iteration_s[i]);
    buf.push_back(double(mine.slices[i].size()));
    for (const auto& s : mine.slices[i]) {
      buf.insert(buf.end(), {double(static_cast<int>(s.category)), double(s.micro_batch), s.begin_s, s.end_s});
    }
  }
  int n = static_cast<int>(buf.size()), world = plan_.world_size();
  std::vector<int> counts(root() ? world : 0), displs(root() ? world : 0);
  HETSIM_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::vector<double> all;
  if (root()) {
    int total = 0;
    for (int r = 0; r < world; ++r) displs[static_cast<size_t>(r)] = total, total += counts[static_cast<size_t>(r)];
    all.resize(static_cast<size_t>(total));
  }
  HETSIM_MPI_CHECK(MPI_Gatherv(buf.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0,
                               MPI_COMM_WORLD));
  if (!root()) return;
  std::vector<DeviceTiming> devices(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const double* p = all.data() + displs[static_cast<size_t>(r)];
    DeviceTiming& d = devices[static_cast<size_t>(r)];
    d.rank = r;
    const auto iters = static_cast<size_t>(*p++);
    d.peak_memory_bytes = *p++;
    for (size_t i = 0; i < iters; ++i) {
      d.iteration_s.push_back(*p++);
      const auto ns = static_cast<size_t>(*p++);
      std::vector<TimedSlice> sl;
      for (size_t k = 0; k < ns; ++k, p += 4) {
        sl.push_back({static_cast<Category>(static_cast<int>(p[0])), static_cast<int32_t>(p[1]), p[2], p[3]});
      }
      d.slices.push_back(std::move(sl));
    }
  }
  ReportContext ctx{plan_, specs_.cluster, specs_.model, specs_.training, specs_.plan_name, wall_s};
  const proto::IterationReport report = BuildReport(ctx, devices);
  std::printf("iteration %.4f s (mean of %zu timed), %.0f tokens/s, MFU %.2f%%, bubble %.1f%%\n",
              report.iteration_time_s(), mine.iteration_s.size(), report.tokens_per_s(), 100 * report.mfu(),
              100 * report.bubble_fraction());
  if (!o_.report_out.empty()) {
    const Status s = models::WriteFileAtomically(o_.report_out, models::ReportJson(report));
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  }
  if (!o_.timeline_out.empty()) {
    const Status s = models::WriteFileAtomically(o_.timeline_out, BuildChromeTrace(ctx, devices));
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  }
}

void Runner::WriteProfile(const std::vector<std::vector<TimedSlice>>& layer_steps) {
  const auto layers = MeasureLayers(layer_steps, model_->activation_bytes(), role_.layer_begin, role_.layer_end,
                                    role_.num_micro_batches);
  const auto& model = specs_.model;
  std::printf("per-layer costs of rank 0 (TP %u, micro-batch %u x %u tokens):\n", role_.tp, role_.share.size(),
              plan_.seq_len);
  for (const auto& m : layers) {
    const double fwd = model.ForwardFlops(m.layer, role_.share.size(), plan_.seq_len) / role_.tp;
    const double bwd = model.BackwardFlops(m.layer, role_.share.size(), plan_.seq_len) / role_.tp;
    std::printf("  layer %3u %-11s forward %9.3f ms (%7.1f TFLOP/s)  backward %9.3f ms (%7.1f TFLOP/s)  optimizer "
                "%8.3f ms  activations %.3f GiB\n",
                m.layer,
                model.kind(m.layer) == models::LayerKind::kEmbedding   ? "embedding"
                : model.kind(m.layer) == models::LayerKind::kHead      ? "head"
                                                                        : "transformer",
                m.forward_s * 1e3, m.forward_s > 0 ? fwd / m.forward_s / 1e12 : 0.0, m.backward_s * 1e3,
                m.backward_s > 0 ? bwd / m.backward_s / 1e12 : 0.0, m.optimizer_s * 1e3,
                m.activation_bytes / (1024.0 * 1024.0 * 1024.0));
  }
  // Merge into an existing profile of the same GPU, model and sequence length (replacing equal keys).
  proto::Profile profile;
  const std::string gpu = specs_.cluster.device(role_.device).gpu->name;
  const std::string model_name = o_.profile_model.empty() ? model.name() : o_.profile_model;
  if (std::filesystem::exists(o_.profile_out)) {
    auto old = models::LoadProfile(o_.profile_out);
    if (!old.ok()) {
      std::fprintf(stderr, "hetsim-exec: --profile-out: %s\n", old.status().message().c_str());
      return;
    }
    if (old->gpu() != gpu || old->model() != model_name || old->seq_len() != plan_.seq_len) {
      std::fprintf(stderr, "hetsim-exec: --profile-out %s holds gpu %s, model %s, seq_len %u; this run is %s, %s, %u\n",
                   o_.profile_out.c_str(), old->gpu().c_str(), old->model().c_str(), old->seq_len(), gpu.c_str(),
                   model_name.c_str(), plan_.seq_len);
      return;
    }
    profile = *old;
  }
  profile.set_kind("profile");
  profile.set_gpu(gpu);
  profile.set_model(model_name);
  profile.set_seq_len(plan_.seq_len);
  profile.set_source("hetsim-exec (" + be_->name() + ", " + DTypeName(be_->act_dtype()) + "), measured");
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  profile.set_date(date);
  profile.set_command(command_line_);
  for (const auto& t : ProfileLayers(model, layers, role_.tp, role_.share.size())) {
    bool replaced = false;
    for (auto& old : *profile.mutable_layers()) {
      if (old.layer() == t.layer() && old.tp_degree() == t.tp_degree() &&
          old.micro_batch_size() == t.micro_batch_size()) {
        old = t;
        replaced = true;
      }
    }
    if (!replaced) *profile.add_layers() = t;
  }
  const Status s = models::WriteFileAtomically(o_.profile_out, models::MessageToYaml(profile));
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
  } else {
    std::printf("profile written to %s\n", o_.profile_out.c_str());
  }
}

int Runner::Run() {
  const auto start = std::chrono::steady_clock::now();
  SetupComms();
  ModelOptions mo;
  mo.seed = o_.seed;
  mo.rope_theta = static_cast<float>(o_.rope_theta);
  model_ = std::make_unique<StageModel>(be_, specs_.model, role_.layer_begin, role_.layer_end, role_.tp, role_.tp_rank,
                                        tp_comm_, mo, &recorder_);
  model_->SetOpObserver(&log_);
  if (!o_.profile_out.empty()) {
    layer_recorder_ = std::make_unique<SliceRecorder>(be_);
    model_->SetLayerRecorder(layer_recorder_.get());
  }
  std::map<std::vector<int>, Comm*> group_comms;
  for (auto& [ranks, comm] : comms_) group_comms[ranks] = comm.get();
  sync_ = std::make_unique<GradSync>(be_, plan_, rank_, model_.get(), tp_comm_, group_comms, &recorder_);
  DeviceTiming timing;
  timing.rank = rank_;
  std::string loss_csv = "step,loss,iteration_s\n";
  int status = 0;
  const uint32_t steps = o_.warmup + o_.iterations;
  for (uint32_t step = 0; step < steps; ++step) {
    const bool timed = step >= o_.warmup;
    if (step == o_.warmup) be_->ResetPeak();
    const double loss = Step(step, timed, &timing);
    char line[96];
    std::snprintf(line, sizeof(line), "%u,%.8f,%.6f\n", step + 1, loss, timed ? timing.iteration_s.back() : 0.0);
    loss_csv += line;
    if (step == 0 && !o_.ops_out.empty()) WriteOps();
    if (step == 0 && (!o_.dump_gradients.empty() || !o_.compare_gradients.empty())) status |= CheckGradients(loss);
    model_->ZeroGrads();
  }
  if (root() && !o_.loss_out.empty()) {
    const Status s = models::WriteFileAtomically(o_.loss_out, loss_csv);
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  }
  timing.peak_memory_bytes = static_cast<double>(be_->peak_bytes());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o_.iterations > 0) Report(timing, wall);
  if (layer_recorder_ != nullptr && o_.iterations > 0 && root()) WriteProfile(layer_steps_);
  sync_.reset();
  model_.reset();
  be_->SetProgressHook({});
  p2p_.reset();
  comms_.clear();
  return status;
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
  const auto dtype = specs->training.dtype();
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CommFactory> factory;
  if (options->backend == "cpu") {
    if (dtype != proto::DTYPE_FP32) {
      return Fail(rank,
                  Status::Invalid(specs->plan_file + ": training.dtype: the CPU backend computes in fp32; set "
                                  "`training: {dtype: fp32}` in the plan or pass --dtype fp32"),
                  1);
    }
    backend = MakeCpuBackend();
    factory = MakeMpiCommFactory();
  } else {
#ifdef HETSIM_EXECUTOR_CUDA
    if (dtype != proto::DTYPE_BF16 && dtype != proto::DTYPE_FP32) {
      return Fail(rank,
                  Status::Invalid(specs->plan_file + ": training.dtype: the CUDA backend runs bf16 or fp32, not " +
                                  models::DTypeName(dtype) +
                                  " (fp16 would need loss scaling; fp8 and tf32 GEMMs are not implemented); set "
                                  "`training: {dtype: bf16}` or pass --dtype bf16"),
                  1);
    }
    MPI_Comm local;
    int local_rank = 0;
    HETSIM_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
    HETSIM_MPI_CHECK(MPI_Comm_rank(local, &local_rank));
    MPI_Comm_free(&local);
    backend = MakeCudaBackend(local_rank, dtype == proto::DTYPE_BF16 ? DType::kBF16 : DType::kF32);
    factory = MakeNcclCommFactory(backend.get());
#else
    return Fail(rank,
                Status::Invalid("hetsim-exec: --backend cuda: this build has no CUDA backend (it is built when CMake "
                                "finds the CUDA toolkit, nvcc and nccl.h)"),
                1);
#endif
  }
  if (rank == 0) {
    std::printf("hetsim-exec: plan %s (%s on %s), %d ranks, backend %s (%s), %u sequences x %u tokens per step, "
                "schedule %s\n",
                specs->plan_name.c_str(), specs->model.name().c_str(), specs->cluster.name().c_str(), world,
                backend->name().c_str(), DTypeName(backend->act_dtype()), plan->global_batch, plan->seq_len,
                plan->schedule == proto::Plan::SCHEDULE_GPIPE ? "gpipe" : "1f1b");
    for (const auto& w : plan->warnings) std::printf("warning: %s\n", w.c_str());
    std::fflush(stdout);
  }
  std::string command_line = "hetsim-exec";
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];
  Runner runner(*options, *specs, *plan, rank, backend.get(), factory.get(), command_line);
  return runner.Run();
}

}  // namespace

int ExecMain(int argc, char** argv) {
  HETSIM_MPI_CHECK(MPI_Init(&argc, &argv));
  int rank = 0, world = 0;
  HETSIM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  HETSIM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  const int code = Run(rank, world, argc, argv);
  MPI_Finalize();
  return code;
}

}  // namespace hetsim::executor
