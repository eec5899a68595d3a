// The Runner of hetsim-exec (executor/runner.h): everything one MPI rank runs. runner.cc holds the set-up,
// the operations of the rank's lowered list and the training loop; runner_output.cc what is written or
// checked after it (executed operations, gradients, the report, the timeline and the profile).
#pragma once

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
  // The watchdogs' heartbeat folder (rank 0 makes it, every rank learns it), so that the rank that times out
  // names the rank that stopped; "" when there is no watchdog or one rank. Removed at the end of a run.
  std::string ShareHeartbeats();
  double Step(uint32_t step, bool timed, DeviceTiming* timing);
  // Runs the operations of the rank's lowered list (ExecPlan::Ops) in order.
  void RunOps();
  // The pass (forward or backward of one micro-batch over the stage) whose operations start at ops[i]:
  // its layer operations and the TP collectives inside them. Returns the index after them.
  size_t RunPass(const std::vector<models::Op>& ops, size_t i);
  void Forward(uint32_t mb, uint32_t chunk);
  // The backward of `mb` over `chunk` from where it stands down to layer `down_to` (the chunk's first: all).
  void Backward(uint32_t mb, uint32_t chunk, uint32_t down_to);
  // The model chunk of every pipeline operation of the rank's list: a pass's own; a receive's or a
  // broadcast's, that of the next pass of its micro-batch in its direction; a send's, that of the pass
  // before it (interleaved 1F1B moves several chunks of one micro-batch between the same two ranks).
  void MapChunks();
  // Key of micro-batch `mb`'s chunk `chunk` in the pipeline buffers, and the MPI tag of a transfer.
  uint32_t Key(uint32_t mb, uint32_t chunk) const { return mb * role_.num_chunks + chunk; }
  int Tag(const models::Op& op, uint32_t chunk) const;
  void Recv(const models::Op& op, uint32_t chunk);
  // A pipeline receive posted ahead of its pass (interleaved 1F1B); Recv completes it.
  void PostRecv(const models::Op& op, uint32_t chunk);
  // The rows of the receive buffer a pipeline receive fills (allocated on first use) and the message that
  // lands in them (a TP piece of them under scatter-gather).
  std::pair<Tensor, Tensor> RecvTarget(const models::Op& op, uint32_t chunk);
  // PP leader broadcast: the TP group's leader received the micro-batch's boundary tensor; every member
  // gets it from the leader (the pass that follows says which direction).
  void Broadcast(const std::vector<models::Op>& ops, size_t i, uint32_t chunk);
  // comm.pp_scatter_gather (Megatron-LM's scatter-gather of pipeline messages): between stages of equal TP,
  // TP rank k moves only the k-th 1/t of each message (flattened), and the receiving TP group all-gathers
  // the pieces. Scattered: whether `op` (a send or receive) moves a piece; Piece: this rank's piece of a
  // message; GatherPieces: the lowering's all-gather after the receives of micro-batch `op`'s pass.
  bool Scattered(const models::Op& op) const;
  Tensor Piece(Tensor message) const;
  void GatherPieces(const models::Op& op, uint32_t chunk);
  // The communicator of the lowering's collective group `g` (this rank's groups only; `side`: the DP
  // stream's).
  Comm* CommOf(uint32_t g, bool side = false);
  // A gradient-sync or ZeRO collective of the rank's lists, run (`side`: on the DP stream's
  // communicators); returns it as executed.
  models::Op SyncOp(const models::Op& op, bool side);
  // A ZeRO-3 unit's gather or reduce-scatter inside the passes (models::Lowering::zero_units).
  bool ZeroUnit(const models::Op& op) const {
    return plan_.lowering.zero_units && op.kind == models::OpKind::kCollective && !op.in_pass &&
           (op.category == Category::kZero || op.category == Category::kDp) && op.sync_group != models::kNone;
  }
  // comm.dp_overlap: hands the DP stream's next segment (its await and the collectives up to the next
  // await) to the backend's side stream.
  void SubmitDpSegment();
  void Send(const models::Op& op, uint32_t chunk);
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
  // Tokens of each sequence this rank processes (its Ulysses or CP shard's).
  int64_t seq() const { return plan_.seq_len / (role_.ulysses * role_.cp); }
  // Rows of each sequence in the hidden states a stage receives and sends: under sequence parallelism
  // (TP > 1) the rank's 1/t of the positions (StageModel's layout).
  bool sp() const { return plan_.sequence_parallel && role_.tp > 1; }
  int64_t hidden_seq() const { return sp() ? seq() / role_.tp : seq(); }

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
  std::map<std::vector<int>, std::unique_ptr<Comm>> side_comms_;  // the DP stream's (comm.dp_overlap)
  size_t dp_next_ = 0;  // the DP stream's first operation not yet submitted
  Comm* tp_comm_ = nullptr;
  std::unique_ptr<PeerToPeer> p2p_;
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<GradSync> sync_;
  // Per micro-batch and chunk (Key): received activations (forward) or gradients (backward), and the pass
  // outputs that sends read (kept until the sends complete).
  std::map<uint32_t, Buffer> recv_forward_, recv_backward_, out_forward_, out_backward_;
  std::map<uint32_t, Buffer> partial_backward_;  // a backward run in parts: the gradient where it stopped
  std::map<uint32_t, std::vector<Tensor>> pieces_;  // received messages of which only this rank's piece is there
  std::vector<uint32_t> op_chunk_;  // MapChunks
  OpLog log_;
  std::vector<Buffer> inputs_, labels_;  // per micro-batch, for the current step
  std::unique_ptr<SliceRecorder> layer_recorder_;  // profile mode
  std::vector<std::vector<TimedSlice>> layer_steps_;  // per timed step
  Watchdog watchdog_;
  uint32_t step_ = 0;
};

}  // namespace hetsim::executor
