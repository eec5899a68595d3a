// The compute and communication interfaces the executor's model code is written against.
//
// The layer logic (executor/stage_model.h) is written once against these interfaces; each backend supplies
// the kernels: the CPU backend (executor/cpu_backend.h) in FP32 with Eigen, the CUDA backend
// (executor/cuda_backend.h) with cuBLAS BF16 GEMMs and its own kernels. Communication is a Comm per group
// (MPI on the CPU backend, NCCL on the CUDA backend) and a PeerToPeer for the pipeline transfers.
//
// Conventions of every op:
// - Tensors are row-major; activations are [tokens, features] with token = sequence · seq_len + position.
// - Ops are enqueued in program order on the backend's compute stream and may run asynchronously
//   (CUDA); Download() and Synchronize() wait. The CPU backend runs every op immediately.
// - Parameters: FP32 master values and FP32 gradients; the compute copy of a weight has act_dtype()
//   (BF16 on CUDA when training in bf16, the master itself otherwise). Activations have act_dtype().
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/tensor.h"

namespace hetsim::executor {

// The geometry of one attention call. q is [batch·seq, q_heads·head_dim], k and v are
// [batch·seq, kv_heads·head_dim]; query head i uses key/value head i / (q_heads / kv_heads).
struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;  // applied to q·kᵀ (1/√head_dim)
  // Context parallelism (load-balanced ring attention): the sequence is cut into 2·cp chunks and only the
  // query rows of chunks cp_rank and 2·cp − 1 − cp_rank are this rank's; the other query rows are zero and
  // their outputs unused (their gradients come out zero). A backend may skip them.
  int64_t cp = 1;
  int64_t cp_rank = 0;
  // Elements of the saved softmax probabilities: batch · q_heads · seq · seq.
  int64_t probs_numel() const { return batch * q_heads * seq * seq; }
  // The live query rows of a sequence as (first row, rows) ranges: the whole sequence without CP.
  std::vector<std::pair<int64_t, int64_t>> live_rows() const;
};

// Context parallelism's load-balanced causal split: of a sequence of `seq` tokens cut into 2·cp chunks,
// CP rank `rank` holds chunks rank and 2·cp − 1 − rank, as (first position, tokens) runs in that order.
inline std::array<std::pair<int64_t, int64_t>, 2> CpRuns(int64_t cp, int64_t rank, int64_t seq) {
  const int64_t c = seq / (2 * cp);
  return {{{rank * c, c}, {(2 * cp - 1 - rank) * c, c}}};
}

inline std::vector<std::pair<int64_t, int64_t>> AttentionShape::live_rows() const {
  if (cp <= 1) return {{0, seq}};
  const auto runs = CpRuns(cp, cp_rank, seq);
  return {runs.begin(), runs.end()};
}

struct AdamParams {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  int step = 1;  // 1-based, for the bias correction
};

class Backend {
 public:
  using Mark = uint32_t;

  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Element type of activations and of the compute copies of weights.
  virtual DType act_dtype() const = 0;
  // True when the compute copy of a weight is a separate tensor (else the FP32 master is used directly).
  bool separate_weight_copy() const { return act_dtype() != DType::kF32; }

  // ---- memory (uninitialised; Free accepts what Alloc returned) ----
  virtual Tensor Alloc(int64_t rows, int64_t cols, DType dtype) = 0;
  virtual void Free(Tensor t) = 0;
  virtual size_t bytes_in_use() const = 0;
  virtual size_t peak_bytes() const = 0;
  virtual void ResetPeak() = 0;

  // ---- data movement ----
  virtual void Upload(Tensor dst, const void* host) = 0;    // host holds dst.bytes() of dst.dtype
  virtual void Download(void* host, Tensor src) = 0;        // waits for the compute stream
  virtual void Fill(Tensor t, float value) = 0;             // f32 or act dtype
  virtual void Copy(Tensor dst, Tensor src) = 0;            // equal numel; converts between f32 and bf16
  virtual void Add(Tensor y, Tensor x) = 0;                 // y += x (equal numel)
  virtual void Scale(Tensor t, float alpha) = 0;            // t *= alpha
  // dst[:, dst_col, +cols) = src[:, src_col, +cols) (equal rows and dtype; Ulysses' head blocks).
  virtual void CopyColumns(Tensor dst, int64_t dst_col, Tensor src, int64_t src_col, int64_t cols) = 0;

  // ---- token routing (the MoE layer's permutations; small host-side index lists) ----
  // dst[i] = scale[i] · src[index[i]] (scale empty: 1); a zero row where index[i] < 0 (a padded slot).
  // dst and src have the same dtype and columns.
  virtual void GatherRows(Tensor dst, Tensor src, const std::vector<int64_t>& index,
                          const std::vector<float>& scale) = 0;
  // dst[index[i]] += scale[i] · src[i] for every i with index[i] ≥ 0 (scale empty: 1), each row's additions
  // in order of i (deterministic).
  virtual void ScatterAddRows(Tensor dst, Tensor src, const std::vector<int64_t>& index,
                              const std::vector<float>& scale) = 0;
  // out (f32 [rows, 1]) = the row-wise dot products of a and b (same shape and dtype).
  virtual void RowDots(Tensor out, Tensor a, Tensor b) = 0;

  // ---- dense math ----
  // c = alpha · op(a) · op(b) + beta · c, op = transpose when the flag is set. op(a) is [M, K], op(b) is
  // [K, N], c is [M, N]. c may be f32 (gradients) or act dtype; a and b have the same dtype.
  virtual void Gemm(Tensor c, Tensor a, bool trans_a, Tensor b, bool trans_b, float alpha, float beta) = 0;

  // ---- layers ----
  // out[t] = table[tokens[t] − vocab_begin] when the token falls in the table's rows, else 0.
  virtual void Embedding(Tensor out, Tensor tokens, Tensor table, int64_t vocab_begin) = 0;
  // grad_table[tokens[t] − vocab_begin] += dout[t] for tokens in range (grad_table is f32).
  virtual void EmbeddingBackward(Tensor grad_table, Tensor tokens, Tensor dout, int64_t vocab_begin) = 0;
  // out = x / rms(x) ⊙ w; inv_rms [T, 1] f32 is saved for the backward pass.
  virtual void RmsNorm(Tensor out, Tensor inv_rms, Tensor x, Tensor w, float eps) = 0;
  // dx (= or += when accumulate_dx) and grad_w (f32, +=) from dout.
  virtual void RmsNormBackward(Tensor dx, Tensor grad_w, Tensor x, Tensor w, Tensor inv_rms, Tensor dout,
                               bool accumulate_dx) = 0;
  // Rotary position embedding in place on [batch·seq, heads·head_dim] (pairs i and i + head_dim/2, as in
  // Llama); inverse = rotate by −θ (the backward pass).
  virtual void Rope(Tensor x, int64_t seq, int64_t heads, int64_t head_dim, float theta, bool inverse) = 0;
  // Causal softmax attention; saves the probabilities ([probs_numel] elements of act dtype).
  virtual void Attention(Tensor out, Tensor probs, Tensor q, Tensor k, Tensor v, const AttentionShape& s) = 0;
  virtual void AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v,
                                 Tensor probs, const AttentionShape& s) = 0;
  // out = silu(gate) ⊙ up and its backward.
  virtual void SwiGlu(Tensor out, Tensor gate, Tensor up) = 0;
  virtual void SwiGluBackward(Tensor dgate, Tensor dup, Tensor gate, Tensor up, Tensor dout) = 0;
  // Vocabulary-parallel cross-entropy in three steps with all-reduces in between (Megatron-LM):
  // row_max [T,1] f32 = local max of each row; (all-reduce max)
  virtual void CrossEntropyMax(Tensor row_max, Tensor logits) = 0;
  // sums [T,2] f32 = (Σ exp(logit − max), the target's logit when it falls in this shard else 0);
  // (all-reduce sum)
  virtual void CrossEntropySums(Tensor sums, Tensor row_max, Tensor logits, Tensor labels, int64_t vocab_begin) = 0;
  // loss [1,1] f32 += Σ_t (log Σexp + max − target) when add_loss; logits becomes
  // grad_scale · (softmax − onehot) in place.
  virtual void CrossEntropyFinish(Tensor logits, Tensor loss, Tensor row_max, Tensor sums, Tensor labels,
                                  int64_t vocab_begin, float grad_scale, bool add_loss) = 0;
  // t (f32, rows [row_begin, row_begin + t.rows) of a parameter tensor) = InitValue(seed, tensor_id, row,
  // col, std_dev) of executor/init.h: the same values whatever the sharding.
  virtual void InitParam(Tensor t, uint64_t seed, uint64_t tensor_id, int64_t row_begin, float std_dev) = 0;
  // Adam with bias correction on the f32 master; refreshes the compute copy `weight` when it is separate.
  virtual void Adam(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor weight, const AdamParams& p) = 0;

  // ---- ordering and timing ----
  virtual void Synchronize() = 0;
  // Records a point on the compute stream; Elapsed() between two marks is valid after Synchronize().
  virtual Mark Record() = 0;
  virtual double Elapsed(Mark from, Mark to) = 0;
  virtual void ClearMarks() = 0;
  // Called by a host-synchronous backend (CPU) after each GEMM and attention, so that pending pipeline
  // sends progress while the rank computes, as NCCL's do on a GPU (MPI moves a large message only inside
  // MPI calls of both ranks). GPU backends ignore it.
  virtual void SetProgressHook(std::function<void()> hook) { (void)hook; }

  // ---- the side stream (comm.dp_overlap: the lowering's DP stream) ----
  // SideSubmit runs `work` after everything issued so far on the compute stream and concurrently with what
  // is issued after it; SideJoin makes the compute stream wait until every submitted work has run. Work runs
  // in submission order. The CPU backend runs it on one worker thread (its communicators must be the
  // worker's own, and MPI must provide MPI_THREAD_MULTIPLE); the CUDA backend issues it on a second stream,
  // after an event of the compute stream (its kernels and NCCL calls go to that stream while `work` runs).
  // Marks recorded inside `work` time the side stream.
  virtual void SideSubmit(std::function<void()> work) = 0;
  virtual void SideJoin() = 0;
};

// A Backend allocation, freed when it goes out of scope.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* be, int64_t rows, int64_t cols, DType dtype) : be_(be), t_(be->Alloc(rows, cols, dtype)) {}
  Buffer(Buffer&& o) noexcept : be_(o.be_), t_(o.t_) { o.be_ = nullptr, o.t_ = {}; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      Reset();
      be_ = o.be_, t_ = o.t_;
      o.be_ = nullptr, o.t_ = {};
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }
  void Reset() {
    if (be_ != nullptr && t_.data != nullptr) be_->Free(t_);
    be_ = nullptr, t_ = {};
  }
  const Tensor& t() const { return t_; }
  bool empty() const { return t_.data == nullptr; }

 private:
  Backend* be_ = nullptr;
  Tensor t_;
};

enum class ReduceOp { kSum, kMax };

// A communicator over a fixed group of ranks. Collectives are called by every member in the same order.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In place over f32 or act-dtype tensors.
  virtual void AllReduce(Tensor t, ReduceOp op) = 0;
  // ZeRO (f32): `in` holds size() equal segments; this rank's segment of their sum goes to `out`
  // (out.numel() · size() == in.numel()).
  virtual void ReduceScatter(Tensor in, Tensor out) = 0;
  // ZeRO (f32): every rank's `in` segment, in rank order, into `out` (in.numel() · size() == out.numel()).
  virtual void AllGather(Tensor in, Tensor out) = 0;
  // Ulysses (f32 or act dtype): `in` holds size() equal blocks; block j goes to member j, and member j's
  // block for this rank lands in block j of `out` (in.numel() == out.numel()).
  virtual void AllToAll(Tensor in, Tensor out) = 0;
  // `t` of group rank `root` to every member, in place (PP leader broadcast).
  virtual void Broadcast(Tensor t, int root) = 0;
  // One step of a ring (context parallelism's K/V ring): `send` to group rank `dst` while `recv` arrives
  // from group rank `src`; returns when both are done.
  virtual void SendRecv(Tensor send, int dst, Tensor recv, int src) = 0;
};

// Pipeline transfers between ranks (world ranks). Messages between two ranks with the same tag are
// matched in order.
class PeerToPeer {
 public:
  virtual ~PeerToPeer() = default;
  // Asynchronous: `t` must stay valid until WaitSends().
  virtual void Send(int peer, Tensor t, int tag) = 0;
  // Blocks until the message is available, without receiving it (a no-op where that cannot be observed,
  // e.g. NCCL). Lets the caller count the wait as idle time rather than transfer time.
  virtual void WaitForMessage(int peer, int tag) = 0;
  virtual void Recv(int peer, Tensor t, int tag) = 0;
  // Posts the receive of the next message from `peer` with `tag` into `t` ahead (Megatron-LM's
  // overlap_p2p_comm); the Recv of the same peer, tag and tensor completes it. By default nothing is posted
  // ahead and Recv receives where the pass needs the data (NCCL, CPU-staged transfers).
  virtual void PostRecv(int /*peer*/, Tensor /*t*/, int /*tag*/) {}
  virtual void WaitSends() = 0;
  // Lets pending sends advance without blocking (Backend::SetProgressHook); a no-op by default.
  virtual void Progress() {}
};

// Creates the communicators of one backend. Every rank calls CreateGroup for the groups it belongs to in
// one global order (creation is collective over the group's members and may block until all join).
class CommFactory {
 public:
  virtual ~CommFactory() = default;
  // `ranks` are world ranks in the group's rank order and include the caller; `index` is the group's
  // position in the global order (distinct per group).
  virtual std::unique_ptr<Comm> CreateGroup(const std::vector<int>& ranks, int index) = 0;
  // `channels`: every directed (sender, receiver) pair of the plan, the same list on every rank.
  virtual std::unique_ptr<PeerToPeer> CreatePeerToPeer(const std::vector<std::pair<int, int>>& channels) = 0;
};

}  // namespace hetsim::executor
