#include "executor/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/cuda_kernels.h"
#include "executor/mpi_util.h"

// Checks that name host, rank, file and line (executor/mpi_util.h), as nccl-tests' CUDACHECK/NCCLCHECK.
#define HETSIM_CUDA_CHECK(call)                                                                          \
  do {                                                                                                   \
    const cudaError_t _e = (call);                                                                       \
    if (_e != cudaSuccess) ::hetsim::executor::FatalError(__FILE__, __LINE__, #call, cudaGetErrorString(_e)); \
  } while (0)
#define HETSIM_CUBLAS_CHECK(call)                                                                       \
  do {                                                                                                  \
    const cublasStatus_t _s = (call);                                                                   \
    if (_s != CUBLAS_STATUS_SUCCESS) {                                                                  \
      ::hetsim::executor::FatalError(__FILE__, __LINE__, #call, cublasGetStatusString(_s));             \
    }                                                                                                   \
  } while (0)
#define HETSIM_NCCL_CHECK(call)                                                                             \
  do {                                                                                                      \
    const ncclResult_t _r = (call);                                                                         \
    if (_r != ncclSuccess) ::hetsim::executor::FatalError(__FILE__, __LINE__, #call, ncclGetErrorString(_r)); \
  } while (0)

namespace hetsim::executor {
namespace {

cudaDataType_t CudaType(DType t) { return t == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F; }
ncclDataType_t NcclType(DType t) { return t == DType::kBF16 ? ncclBfloat16 : ncclFloat32; }

// A row-major operand of a (batched) GEMM: base pointer, row stride and batch stride in elements.
struct Operand {
  const void* data;
  int64_t ld;
  int64_t stride = 0;
};

// A routing call's host index and scale lists uploaded to the device for the call (freed, stream-ordered,
// when it goes out of scope).
class RoutingLists {
 public:
  RoutingLists(Backend* be, const std::vector<int64_t>& index, const std::vector<float>& scale) {
    if (index.empty()) return;
    // int64 entries in twice as many f32 slots' bytes: the buffer is raw device memory.
    index_ = Buffer(be, static_cast<int64_t>(index.size()) * 2, 1, DType::kF32);
    be->Upload(index_.t(), index.data());
    if (scale.empty()) return;
    scale_ = Buffer(be, static_cast<int64_t>(scale.size()), 1, DType::kF32);
    be->Upload(scale_.t(), scale.data());
  }
  const int64_t* index() const { return static_cast<const int64_t*>(index_.t().data); }
  const float* scale() const { return scale_.empty() ? nullptr : static_cast<const float*>(scale_.t().data); }

 private:
  Buffer index_, scale_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int local_rank, DType act) : act_(act) {
    int count = 0;
    HETSIM_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (count == 0) FatalError(__FILE__, __LINE__, "cudaGetDeviceCount", "no CUDA device is visible");
    device_ = local_rank % count;
    HETSIM_CUDA_CHECK(cudaSetDevice(device_));
    HETSIM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    HETSIM_CUDA_CHECK(cudaStreamCreateWithFlags(&send_stream_, cudaStreamNonBlocking));
    HETSIM_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
    HETSIM_CUDA_CHECK(cudaEventCreateWithFlags(&side_ready_, cudaEventDisableTiming));
    HETSIM_CUDA_CHECK(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
    HETSIM_CUBLAS_CHECK(cublasCreate(&cublas_));
    HETSIM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Keep freed memory in the stream-ordered pool instead of returning it to the driver every step.
    cudaMemPool_t pool;
    HETSIM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    uint64_t threshold = UINT64_MAX;
    HETSIM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(send_stream_);
    cudaStreamSynchronize(side_stream_);
    for (auto& [p, n] : sizes_) cudaFree(p);
    for (auto ev : events_) cudaEventDestroy(ev);
    cudaEventDestroy(side_ready_);
    cudaEventDestroy(side_done_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(side_stream_);
    cudaStreamDestroy(send_stream_);
    cudaStreamDestroy(stream_);
  }

  // The stream work is issued on: the compute stream, or the side stream while SideSubmit's work runs.
  cudaStream_t stream() const { return stream_; }
  cudaStream_t send_stream() const { return send_stream_; }

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  DType act_dtype() const override { return act_; }

  Tensor Alloc(int64_t rows, int64_t cols, DType dtype) override {
    Tensor t{nullptr, rows, cols, dtype};
    const size_t n = std::max<size_t>(t.bytes(), 256);
    HETSIM_CUDA_CHECK(cudaMallocAsync(&t.data, n, stream_));
    sizes_[t.data] = n;
    in_use_ += n;
    peak_ = std::max(peak_, in_use_);
    return t;
  }
  void Free(Tensor t) override {
    auto it = sizes_.find(t.data);
    HETSIM_CHECK(it != sizes_.end(), "cuda backend: Free of memory it did not allocate");
    in_use_ -= it->second;
    sizes_.erase(it);
    HETSIM_CUDA_CHECK(cudaFreeAsync(t.data, stream_));
  }
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }
  void ResetPeak() override { peak_ = in_use_; }

  void Upload(Tensor dst, const void* host) override {
    HETSIM_CUDA_CHECK(cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, stream_));
    HETSIM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go away after the call
  }
  void Download(void* host, Tensor src) override {
    HETSIM_CUDA_CHECK(cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
    HETSIM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void Fill(Tensor t, float value) override { HETSIM_CUDA_CHECK(cuda::Fill(t.data, t.dtype, t.numel(), value, stream_)); }
  void Copy(Tensor dst, Tensor src) override {
    HETSIM_CHECK(dst.numel() == src.numel(), "cuda backend: Copy size mismatch");
    HETSIM_CUDA_CHECK(cuda::Convert(dst.data, dst.dtype, src.data, src.dtype, dst.numel(), stream_));
  }
  void CopyColumns(Tensor dst, int64_t dst_col, Tensor src, int64_t src_col, int64_t cols) override {
    HETSIM_CHECK(dst.rows == src.rows && dst.dtype == src.dtype && dst_col + cols <= dst.cols &&
                     src_col + cols <= src.cols,
                 "cuda backend: CopyColumns shape mismatch");
    if (dst.rows == 0 || cols == 0) return;
    const size_t e = DTypeSize(dst.dtype);
    HETSIM_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(dst.data) + dst_col * e, dst.cols * e,
                                        static_cast<const char*>(src.data) + src_col * e, src.cols * e, cols * e,
                                        dst.rows, cudaMemcpyDeviceToDevice, stream_));
  }
  void GatherRows(Tensor dst, Tensor src, const std::vector<int64_t>& index, const std::vector<float>& scale) override {
    HETSIM_CHECK(src.dtype == dst.dtype && src.cols == dst.cols && static_cast<int64_t>(index.size()) == dst.rows &&
                     (scale.empty() || scale.size() == index.size()),
                 "cuda backend: GatherRows shape mismatch");
    const RoutingLists lists(this, index, scale);
    HETSIM_CUDA_CHECK(cuda::GatherRows(dst.data, src.data, lists.index(), lists.scale(), dst.dtype, dst.rows, dst.cols,
                                       stream_));
  }
  void ScatterAddRows(Tensor dst, Tensor src, const std::vector<int64_t>& index,
                      const std::vector<float>& scale) override {
    HETSIM_CHECK(src.dtype == dst.dtype && src.cols == dst.cols && static_cast<int64_t>(index.size()) == src.rows &&
                     (scale.empty() || scale.size() == index.size()),
                 "cuda backend: ScatterAddRows shape mismatch");
    const RoutingLists lists(this, index, scale);
    HETSIM_CUDA_CHECK(cuda::ScatterAddRows(dst.data, src.data, lists.index(), lists.scale(), dst.dtype, src.rows,
                                           dst.cols, stream_));
  }
  void RowDots(Tensor out, Tensor a, Tensor b) override {
    HETSIM_CHECK(a.rows == b.rows && a.cols == b.cols && b.dtype == a.dtype && out.numel() == a.rows &&
                     out.dtype == DType::kF32,
                 "cuda backend: RowDots shape mismatch");
    HETSIM_CUDA_CHECK(cuda::RowDots(out.ptr<float>(), a.data, b.data, a.dtype, a.rows, a.cols, stream_));
  }
  void Add(Tensor y, Tensor x) override {
    HETSIM_CHECK(y.numel() == x.numel() && y.dtype == x.dtype, "cuda backend: Add shape or dtype mismatch");
    HETSIM_CUDA_CHECK(cuda::Add(y.data, x.data, y.dtype, y.numel(), stream_));
  }
  void Scale(Tensor t, float alpha) override { HETSIM_CUDA_CHECK(cuda::Scale(t.data, t.dtype, t.numel(), alpha, stream_)); }

  void Gemm(Tensor c, Tensor a, bool ta, Tensor b, bool tb, float alpha, float beta) override {
    const int64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
    const int64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
    HETSIM_CHECK(k == kb && c.rows == m && c.cols == n && a.dtype == b.dtype, "cuda backend: Gemm shape mismatch");
    GemmBatched(m, n, k, alpha, {a.data, a.cols}, ta, {b.data, b.cols}, tb, beta, c.data, c.cols, 0, 1, a.dtype,
                c.dtype);
  }

  void Embedding(Tensor out, Tensor tokens, Tensor table, int64_t vocab_begin) override {
    HETSIM_CUDA_CHECK(cuda::Embedding(out.data, tokens.ptr<int32_t>(), table.data, out.dtype, out.rows, out.cols,
                                      table.rows, vocab_begin, stream_));
  }
  void EmbeddingBackward(Tensor grad_table, Tensor tokens, Tensor dout, int64_t vocab_begin) override {
    HETSIM_CUDA_CHECK(cuda::EmbeddingBackward(grad_table.ptr<float>(), tokens.ptr<int32_t>(), dout.data, dout.dtype,
                                              dout.rows, dout.cols, grad_table.rows, vocab_begin, stream_));
  }
  void RmsNorm(Tensor out, Tensor inv_rms, Tensor x, Tensor w, float eps) override {
    HETSIM_CUDA_CHECK(cuda::RmsNorm(out.data, inv_rms.ptr<float>(), x.data, w.data, x.dtype, x.rows, x.cols, eps,
                                    stream_));
  }
  void RmsNormBackward(Tensor dx, Tensor grad_w, Tensor x, Tensor w, Tensor inv_rms, Tensor dout,
                       bool accumulate_dx) override {
    HETSIM_CUDA_CHECK(cuda::RmsNormBackward(dx.data, grad_w.ptr<float>(), x.data, w.data, inv_rms.ptr<float>(),
                                            dout.data, x.dtype, x.rows, x.cols, accumulate_dx, stream_));
  }
  void Rope(Tensor x, int64_t seq, int64_t heads, int64_t head_dim, float theta, bool inverse) override {
    HETSIM_CUDA_CHECK(cuda::Rope(x.data, x.dtype, x.rows, seq, heads, head_dim, theta, inverse, stream_));
  }

  // Per sequence b and query head i of each group: S = scale·Q·Kᵀ batched over the key/value heads j
  // (query head j·g + i), the causal softmax over every row, then O = P·V.
  void Attention(Tensor out, Tensor probs, Tensor q, Tensor k, Tensor v, const AttentionShape& s) override {
    const int64_t g = s.q_heads / s.kv_heads, S = s.seq, hd = s.head_dim;
    const int64_t ldq = s.q_heads * hd, ldk = s.kv_heads * hd;
    const size_t e = DTypeSize(q.dtype);
    auto at = [&](const Tensor& t, int64_t offset) { return static_cast<const char*>(t.data) + offset * e; };
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t i = 0; i < g; ++i) {
        GemmBatched(S, S, hd, s.scale, {at(q, b * S * ldq + i * hd), ldq, g * hd}, false,
                    {at(k, b * S * ldk), ldk, hd}, true, 0.0f,
                    const_cast<char*>(at(probs, (b * s.q_heads + i) * S * S)), S, g * S * S, s.kv_heads, q.dtype,
                    probs.dtype);
      }
    }
    HETSIM_CUDA_CHECK(cuda::CausalSoftmax(probs.data, probs.dtype, s.batch * s.q_heads * S, S, stream_));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t i = 0; i < g; ++i) {
        GemmBatched(S, hd, S, 1.0f, {at(probs, (b * s.q_heads + i) * S * S), S, g * S * S}, false,
                    {at(v, b * S * ldk), ldk, hd}, false, 0.0f, const_cast<char*>(at(out, b * S * ldq + i * hd)),
                    ldq, g * hd, s.kv_heads, q.dtype, out.dtype);
      }
    }
  }

  void AttentionBackward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor q, Tensor k, Tensor v, Tensor probs,
                         const AttentionShape& s) override {
    const int64_t g = s.q_heads / s.kv_heads, S = s.seq, hd = s.head_dim;
    const int64_t ldq = s.q_heads * hd, ldk = s.kv_heads * hd;
    const size_t e = DTypeSize(q.dtype);
    auto at = [&](const Tensor& t, int64_t offset) { return static_cast<const char*>(t.data) + offset * e; };
    auto mut = [&](const Tensor& t, int64_t offset) { return const_cast<char*>(at(t, offset)); };
    // dP for one sequence at a time: [q_heads, S, S].
    Tensor dp = Alloc(s.q_heads * S, S, probs.dtype);
    for (int64_t b = 0; b < s.batch; ++b) {
      const int64_t p0 = b * s.q_heads * S * S;
      for (int64_t i = 0; i < g; ++i) {
        const float acc = i == 0 ? 0.0f : 1.0f;  // key/value gradients sum over the group's query heads
        // dV_j += P_hᵀ · dO_h
        GemmBatched(S, hd, S, 1.0f, {at(probs, p0 + i * S * S), S, g * S * S}, true,
                    {at(dout, b * S * ldq + i * hd), ldq, g * hd}, false, acc, mut(dv, b * S * ldk), ldk, hd,
                    s.kv_heads, q.dtype, dv.dtype);
        // dP_h = dO_h · V_jᵀ
        GemmBatched(S, S, hd, 1.0f, {at(dout, b * S * ldq + i * hd), ldq, g * hd}, false,
                    {at(v, b * S * ldk), ldk, hd}, true, 0.0f, mut(dp, i * S * S), S, g * S * S, s.kv_heads,
                    q.dtype, dp.dtype);
      }
      HETSIM_CUDA_CHECK(cuda::CausalSoftmaxBackward(dp.data, at(probs, p0), dp.dtype, s.q_heads * S, S, stream_));
      for (int64_t i = 0; i < g; ++i) {
        const float acc = i == 0 ? 0.0f : 1.0f;
        // dQ_h = scale · dS_h · K_j
        GemmBatched(S, hd, S, s.scale, {at(dp, i * S * S), S, g * S * S}, false, {at(k, b * S * ldk), ldk, hd}, false,
                    0.0f, mut(dq, b * S * ldq + i * hd), ldq, g * hd, s.kv_heads, q.dtype, dq.dtype);
        // dK_j += scale · dS_hᵀ · Q_h
        GemmBatched(S, hd, S, s.scale, {at(dp, i * S * S), S, g * S * S}, true,
                    {at(q, b * S * ldq + i * hd), ldq, g * hd}, false, acc, mut(dk, b * S * ldk), ldk, hd,
                    s.kv_heads, q.dtype, dk.dtype);
      }
    }
    Free(dp);
  }

  void SwiGlu(Tensor out, Tensor gate, Tensor up) override {
    HETSIM_CUDA_CHECK(cuda::SwiGlu(out.data, gate.data, up.data, out.dtype, out.numel(), stream_));
  }
  void SwiGluBackward(Tensor dgate, Tensor dup, Tensor gate, Tensor up, Tensor dout) override {
    HETSIM_CUDA_CHECK(
        cuda::SwiGluBackward(dgate.data, dup.data, gate.data, up.data, dout.data, dout.dtype, dout.numel(), stream_));
  }
  void CrossEntropyMax(Tensor row_max, Tensor logits) override {
    HETSIM_CUDA_CHECK(
        cuda::CrossEntropyMax(row_max.ptr<float>(), logits.data, logits.dtype, logits.rows, logits.cols, stream_));
  }
  void CrossEntropySums(Tensor sums, Tensor row_max, Tensor logits, Tensor labels, int64_t vocab_begin) override {
    HETSIM_CUDA_CHECK(cuda::CrossEntropySums(sums.ptr<float>(), row_max.ptr<float>(), logits.data,
                                             labels.ptr<int32_t>(), logits.dtype, logits.rows, logits.cols,
                                             vocab_begin, stream_));
  }
  void CrossEntropyFinish(Tensor logits, Tensor loss, Tensor row_max, Tensor sums, Tensor labels, int64_t vocab_begin,
                          float grad_scale, bool add_loss) override {
    HETSIM_CUDA_CHECK(cuda::CrossEntropyFinish(logits.data, loss.ptr<float>(), row_max.ptr<float>(),
                                               sums.ptr<float>(), labels.ptr<int32_t>(), logits.dtype, logits.rows,
                                               logits.cols, vocab_begin, grad_scale, add_loss, stream_));
  }
  void InitParam(Tensor t, uint64_t seed, uint64_t tensor_id, int64_t row_begin, float std_dev) override {
    HETSIM_CUDA_CHECK(cuda::InitParam(t.ptr<float>(), t.rows, t.cols, seed, tensor_id, row_begin, std_dev, stream_));
  }
  void Adam(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor weight, const AdamParams& p) override {
    const float c1 = 1.0f - std::pow(p.beta1, float(p.step)), c2 = 1.0f - std::pow(p.beta2, float(p.step));
    const bool copy = !weight.empty() && weight.data != param.data;
    HETSIM_CUDA_CHECK(cuda::Adam(param.ptr<float>(), grad.ptr<float>(), m.ptr<float>(), v.ptr<float>(),
                                 copy ? weight.data : nullptr, copy ? weight.dtype : DType::kF32, param.numel(), p.lr,
                                 p.beta1, p.beta2, p.eps, c1, c2, stream_));
  }

  void Synchronize() override { HETSIM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // The side stream waits for the compute stream's work so far; `work` then issues its kernels and NCCL
  // calls (NcclComm reads stream() at each call) on the side stream, from this thread, without blocking.
  void SideSubmit(std::function<void()> work) override {
    HETSIM_CUDA_CHECK(cudaEventRecord(side_ready_, stream_));
    HETSIM_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, side_ready_, 0));
    std::swap(stream_, side_stream_);
    HETSIM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    work();
    std::swap(stream_, side_stream_);
    HETSIM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  }
  void SideJoin() override {
    HETSIM_CUDA_CHECK(cudaEventRecord(side_done_, side_stream_));
    HETSIM_CUDA_CHECK(cudaStreamWaitEvent(stream_, side_done_, 0));
  }
  Mark Record() override {
    if (next_mark_ == events_.size()) {
      cudaEvent_t ev;
      HETSIM_CUDA_CHECK(cudaEventCreate(&ev));
      events_.push_back(ev);
    }
    HETSIM_CUDA_CHECK(cudaEventRecord(events_[next_mark_], stream_));
    return static_cast<Mark>(next_mark_++);
  }
  double Elapsed(Mark from, Mark to) override {
    float ms = 0;
    HETSIM_CUDA_CHECK(cudaEventElapsedTime(&ms, events_.at(from), events_.at(to)));
    return ms * 1e-3;
  }
  void ClearMarks() override { next_mark_ = 0; }

 private:
  // Row-major batched C = alpha·op(A)·op(B) + beta·C with M, N, K of op(A) [M, K] and op(B) [K, N]. cuBLAS is
  // column-major, so it computes Cᵀ = op(B)ᵀ·op(A)ᵀ on the same memory.
  void GemmBatched(int64_t m, int64_t n, int64_t k, float alpha, Operand a, bool ta, Operand b, bool tb, float beta,
                   void* c, int64_t ldc, int64_t stride_c, int64_t batch, DType in, DType out) {
    const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    // FP32 inputs stay FP32 (no TF32): the CUDA backend's fp32 mode is the accuracy reference.
    const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    if (batch == 1) {
      HETSIM_CUBLAS_CHECK(cublasGemmEx(cublas_, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                       static_cast<int>(k), &alpha, b.data, CudaType(in), static_cast<int>(b.ld),
                                       a.data, CudaType(in), static_cast<int>(a.ld), &beta, c, CudaType(out),
                                       static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT));
    } else {
      HETSIM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          cublas_, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b.data,
          CudaType(in), static_cast<int>(b.ld), b.stride, a.data, CudaType(in), static_cast<int>(a.ld), a.stride,
          &beta, c, CudaType(out), static_cast<int>(ldc), stride_c, static_cast<int>(batch), compute,
          CUBLAS_GEMM_DEFAULT));
    }
  }

  DType act_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr, send_stream_ = nullptr, side_stream_ = nullptr;
  cudaEvent_t side_ready_ = nullptr, side_done_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unordered_map<void*, size_t> sizes_;
  size_t in_use_ = 0, peak_ = 0;
  std::vector<cudaEvent_t> events_;
  size_t next_mark_ = 0;
};

// ---- NCCL ----------------------------------------------------------------------------------------

class NcclComm final : public Comm {
 public:
  // Collectives go to the backend's current stream (the side stream inside SideSubmit's work).
  NcclComm(ncclComm_t comm, int size, int rank, const CudaBackend* be) : comm_(comm), size_(size), rank_(rank), be_(be) {}
  ~NcclComm() override { ncclCommDestroy(comm_); }
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void AllReduce(Tensor t, ReduceOp op) override {
    HETSIM_NCCL_CHECK(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), NcclType(t.dtype),
                                    op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, be_->stream()));
  }
  void ReduceScatter(Tensor in, Tensor out) override {
    HETSIM_CHECK(out.numel() * size_ == in.numel(), "NCCL reduce-scatter: bad segment");
    HETSIM_NCCL_CHECK(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), NcclType(in.dtype),
                                        ncclSum, comm_, be_->stream()));
  }
  void Broadcast(Tensor t, int root) override {
    HETSIM_NCCL_CHECK(ncclBroadcast(t.data, t.data, static_cast<size_t>(t.numel()), NcclType(t.dtype), root, comm_,
                                    be_->stream()));
  }
  // Grouped sends and receives of one block per member (NCCL has no all-to-all of its own).
  void AllToAll(Tensor in, Tensor out) override {
    HETSIM_CHECK(in.numel() == out.numel() && in.numel() % size_ == 0 && in.dtype == out.dtype,
                 "NCCL all-to-all: bad blocks");
    const size_t n = static_cast<size_t>(in.numel() / size_), e = DTypeSize(in.dtype);
    HETSIM_NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < size_; ++j) {
      HETSIM_NCCL_CHECK(ncclSend(static_cast<const char*>(in.data) + j * n * e, n, NcclType(in.dtype), j, comm_,
                                 be_->stream()));
      HETSIM_NCCL_CHECK(ncclRecv(static_cast<char*>(out.data) + j * n * e, n, NcclType(out.dtype), j, comm_,
                                 be_->stream()));
    }
    HETSIM_NCCL_CHECK(ncclGroupEnd());
  }
  void SendRecv(Tensor send, int dst, Tensor recv, int src) override {
    HETSIM_CHECK(send.dtype == recv.dtype && dst >= 0 && dst < size_ && src >= 0 && src < size_,
                 "NCCL ring step: bad tensors or peers");
    HETSIM_NCCL_CHECK(ncclGroupStart());
    HETSIM_NCCL_CHECK(ncclSend(send.data, static_cast<size_t>(send.numel()), NcclType(send.dtype), dst, comm_,
                               be_->stream()));
    HETSIM_NCCL_CHECK(ncclRecv(recv.data, static_cast<size_t>(recv.numel()), NcclType(recv.dtype), src, comm_,
                               be_->stream()));
    HETSIM_NCCL_CHECK(ncclGroupEnd());
  }
  void AllGather(Tensor in, Tensor out) override {
    HETSIM_CHECK(in.numel() * size_ == out.numel(), "NCCL all-gather: bad segment");
    HETSIM_NCCL_CHECK(ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), NcclType(in.dtype), comm_,
                                    be_->stream()));
  }

 private:
  ncclComm_t comm_;
  int size_, rank_;
  const CudaBackend* be_;
};

// Creates an NCCL communicator over `ranks` (world ranks, in group order; the caller is one of them).
// The first rank makes the unique id and broadcasts it over an MPI communicator of the group.
ncclComm_t InitNcclGroup(const std::vector<int>& ranks, int tag, int* my_rank) {
  MPI_Group world, group;
  HETSIM_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  HETSIM_MPI_CHECK(MPI_Group_incl(world, static_cast<int>(ranks.size()), ranks.data(), &group));
  MPI_Comm mpi;
  HETSIM_MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &mpi));
  HETSIM_MPI_CHECK(MPI_Comm_rank(mpi, my_rank));
  ncclUniqueId id;
  if (*my_rank == 0) HETSIM_NCCL_CHECK(ncclGetUniqueId(&id));
  HETSIM_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi));
  ncclComm_t comm;
  HETSIM_NCCL_CHECK(ncclCommInitRank(&comm, static_cast<int>(ranks.size()), id, *my_rank));
  MPI_Comm_free(&mpi);
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return comm;
}

class NcclPeerToPeer final : public PeerToPeer {
 public:
  NcclPeerToPeer(CudaBackend* be, std::map<std::pair<int, int>, ncclComm_t> channels, int me)
      : be_(be), channels_(std::move(channels)), me_(me) {
    HETSIM_CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming));
    HETSIM_CUDA_CHECK(cudaEventCreateWithFlags(&sent_, cudaEventDisableTiming));
  }
  ~NcclPeerToPeer() override {
    WaitSends();
    cudaStreamSynchronize(be_->stream());
    for (auto& [key, comm] : channels_) ncclCommDestroy(comm);
    cudaEventDestroy(produced_);
    cudaEventDestroy(sent_);
  }
  // In the channel me -> peer, the sender is rank 0 and the receiver rank 1.
  void Send(int peer, Tensor t, int) override {
    HETSIM_CUDA_CHECK(cudaEventRecord(produced_, be_->stream()));
    HETSIM_CUDA_CHECK(cudaStreamWaitEvent(be_->send_stream(), produced_, 0));
    HETSIM_NCCL_CHECK(ncclSend(t.data, static_cast<size_t>(t.numel()), NcclType(t.dtype), 1, Channel(me_, peer),
                               be_->send_stream()));
  }
  void WaitForMessage(int, int) override {}
  void Recv(int peer, Tensor t, int) override {
    HETSIM_NCCL_CHECK(ncclRecv(t.data, static_cast<size_t>(t.numel()), NcclType(t.dtype), 0, Channel(peer, me_),
                               be_->stream()));
  }
  void WaitSends() override {
    HETSIM_CUDA_CHECK(cudaEventRecord(sent_, be_->send_stream()));
    HETSIM_CUDA_CHECK(cudaStreamWaitEvent(be_->stream(), sent_, 0));
  }

 private:
  ncclComm_t Channel(int from, int to) {
    auto it = channels_.find({from, to});
    HETSIM_CHECK(it != channels_.end(), "no pipeline channel " + std::to_string(from) + " -> " + std::to_string(to));
    return it->second;
  }
  CudaBackend* be_;
  std::map<std::pair<int, int>, ncclComm_t> channels_;
  int me_;
  cudaEvent_t produced_ = nullptr, sent_ = nullptr;
};

class NcclCommFactory final : public CommFactory {
 public:
  explicit NcclCommFactory(CudaBackend* be) : be_(be) {}
  std::unique_ptr<Comm> CreateGroup(const std::vector<int>& ranks, int index) override {
    int my_rank = 0;
    ncclComm_t comm = InitNcclGroup(ranks, index, &my_rank);
    return std::make_unique<NcclComm>(comm, static_cast<int>(ranks.size()), my_rank, be_);
  }
  std::unique_ptr<PeerToPeer> CreatePeerToPeer(const std::vector<std::pair<int, int>>& channels) override {
    int me = 0;
    HETSIM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    std::map<std::pair<int, int>, ncclComm_t> comms;
    // Every rank walks the same list, so the blocking initialisations happen in one global order.
    for (size_t c = 0; c < channels.size(); ++c) {
      const auto [from, to] = channels[c];
      if (from != me && to != me) continue;
      int my_rank = 0;
      comms[channels[c]] = InitNcclGroup({from, to}, kChannelTagBase + static_cast<int>(c % kChannelTagBase), &my_rank);
    }
    return std::make_unique<NcclPeerToPeer>(be_, std::move(comms), me);
  }

 private:
  static constexpr int kChannelTagBase = 16384;
  CudaBackend* be_;
};

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(int local_rank, DType act_dtype) {
  return std::make_unique<CudaBackend>(local_rank, act_dtype);
}

std::unique_ptr<CommFactory> MakeNcclCommFactory(Backend* backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  HETSIM_CHECK(cuda != nullptr, "MakeNcclCommFactory needs the CUDA backend");
  return std::make_unique<NcclCommFactory>(cuda);
}

}  // namespace hetsim::executor
