// The CUDA backend's own kernels (executor/cuda_kernels.cu): elementwise and row-wise ops in bf16 or fp32
// with fp32 arithmetic. Each launcher enqueues on `stream` and returns cudaGetLastError(). The GEMMs are
// cuBLAS calls in executor/cuda_backend.cc. Internal to executor/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "executor/tensor.h"

namespace hetsim::executor::cuda {

cudaError_t Fill(void* p, DType t, int64_t n, float value, cudaStream_t stream);
// dst = src converted (f32 <-> bf16, or a copy of the same type).
cudaError_t Convert(void* dst, DType dt, const void* src, DType st, int64_t n, cudaStream_t stream);
cudaError_t Add(void* y, const void* x, DType t, int64_t n, cudaStream_t stream);
cudaError_t Scale(void* p, DType t, int64_t n, float alpha, cudaStream_t stream);

// out[r] = table[tok[r] − vocab_begin] (or 0 outside [0, table_rows)); out and table have type t.
cudaError_t Embedding(void* out, const int32_t* tokens, const void* table, DType t, int64_t rows, int64_t cols,
                      int64_t table_rows, int64_t vocab_begin, cudaStream_t stream);
// grad[tok[r] − vocab_begin] += dout[r] (atomic f32 adds).
cudaError_t EmbeddingBackward(float* grad, const int32_t* tokens, const void* dout, DType t, int64_t rows, int64_t cols,
                              int64_t table_rows, int64_t vocab_begin, cudaStream_t stream);

cudaError_t RmsNorm(void* out, float* inv_rms, const void* x, const void* w, DType t, int64_t rows, int64_t cols,
                    float eps, cudaStream_t stream);
// dx (= or += when accumulate) and dw (f32, +=).
cudaError_t RmsNormBackward(void* dx, float* dw, const void* x, const void* w, const float* inv_rms, const void* dout,
                            DType t, int64_t rows, int64_t cols, bool accumulate, cudaStream_t stream);

// Llama rotary embedding on [rows, heads·head_dim] (position = row % seq; pairs i, i + head_dim/2).
cudaError_t Rope(void* x, DType t, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim, float theta,
                 bool inverse, cudaStream_t stream);

// Causal softmax in place over `rows` rows of `seq` scores; the query position of row r is r % seq.
cudaError_t CausalSoftmax(void* p, DType t, int64_t rows, int64_t seq, cudaStream_t stream);
// dp (the gradient of the probabilities) becomes the gradient of the scores: p ⊙ (dp − Σ p ⊙ dp).
cudaError_t CausalSoftmaxBackward(void* dp, const void* p, DType t, int64_t rows, int64_t seq, cudaStream_t stream);

cudaError_t SwiGlu(void* out, const void* gate, const void* up, DType t, int64_t n, cudaStream_t stream);
cudaError_t SwiGluBackward(void* dgate, void* dup, const void* gate, const void* up, const void* dout, DType t,
                           int64_t n, cudaStream_t stream);

cudaError_t CrossEntropyMax(float* row_max, const void* logits, DType t, int64_t rows, int64_t cols,
                            cudaStream_t stream);
cudaError_t CrossEntropySums(float* sums, const float* row_max, const void* logits, const int32_t* labels, DType t,
                             int64_t rows, int64_t cols, int64_t vocab_begin, cudaStream_t stream);
cudaError_t CrossEntropyFinish(void* logits, float* loss, const float* row_max, const float* sums,
                               const int32_t* labels, DType t, int64_t rows, int64_t cols, int64_t vocab_begin,
                               float grad_scale, bool add_loss, cudaStream_t stream);

// The MoE layer's row permutations (Backend::GatherRows, ScatterAddRows, RowDots); `index` and `scale` are
// device arrays of `n` entries (`scale` may be null: 1). ScatterAddRows gives each column to one thread, which
// adds the rows in order of i (deterministic without atomics).
cudaError_t GatherRows(void* dst, const void* src, const int64_t* index, const float* scale, DType t, int64_t n,
                       int64_t cols, cudaStream_t stream);
cudaError_t ScatterAddRows(void* dst, const void* src, const int64_t* index, const float* scale, DType t, int64_t n,
                           int64_t cols, cudaStream_t stream);
cudaError_t RowDots(float* out, const void* a, const void* b, DType t, int64_t rows, int64_t cols,
                    cudaStream_t stream);

// Adam on f32 master weights; `weight` (type wt, may be null) receives the updated compute copy.
cudaError_t Adam(float* param, const float* grad, float* m, float* v, void* weight, DType wt, int64_t n, float lr,
                 float beta1, float beta2, float eps, float bias1, float bias2, cudaStream_t stream);

// p[i, j] = InitValue(seed, tensor_id, row_begin + i, j, std_dev) (executor/init.h).
cudaError_t InitParam(float* p, int64_t rows, int64_t cols, uint64_t seed, uint64_t tensor_id, int64_t row_begin,
                      float std_dev, cudaStream_t stream);

}  // namespace hetsim::executor::cuda
