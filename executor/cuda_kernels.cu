#include "executor/cuda_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "executor/init.h"

namespace hetsim::executor::cuda {
namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float ToF(float v) { return v; }
__device__ __forceinline__ float ToF(bf16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromF(float v);
template <>
__device__ __forceinline__ float FromF<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 FromF<bf16>(float v) {
  return __float2bfloat16(v);
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements.
unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t{1} << 20));
}
// One block per row.
unsigned RowBlocks(int64_t rows) { return static_cast<unsigned>(std::max<int64_t>(rows, 1)); }

// Calls f with a value of the element type `t` stands for.
template <typename F>
void Dispatch(DType t, F f) {
  if (t == DType::kBF16) {
    f(bf16{});
  } else {
    f(float{});
  }
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{blockDim.x} * gridDim.x)

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduction over a block whose size is a multiple of 32; every thread gets the result.
template <typename Op>
__device__ float BlockReduce(float v, Op op, float identity) {
  __shared__ float shared[32];
  __syncthreads();  // the previous call's readers are done with `shared`
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (blockDim.x + 31) >> 5;
    v = lane < nwarps ? shared[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

template <typename T>
__global__ void FillKernel(T* p, int64_t n, float v) {
  GRID_STRIDE(i, n) p[i] = FromF<T>(v);
}

template <typename D, typename S>
__global__ void ConvertKernel(D* dst, const S* src, int64_t n) {
  GRID_STRIDE(i, n) dst[i] = FromF<D>(ToF(src[i]));
}

template <typename T>
__global__ void AddKernel(T* y, const T* x, int64_t n) {
  GRID_STRIDE(i, n) y[i] = FromF<T>(ToF(y[i]) + ToF(x[i]));
}

template <typename T>
__global__ void ScaleKernel(T* p, int64_t n, float a) {
  GRID_STRIDE(i, n) p[i] = FromF<T>(ToF(p[i]) * a);
}

template <typename T>
__global__ void EmbeddingKernel(T* out, const int32_t* tokens, const T* table, int64_t cols, int64_t table_rows,
                                int64_t vocab_begin) {
  const int64_t r = blockIdx.x;
  const int64_t row = tokens[r] - vocab_begin;
  const bool in = row >= 0 && row < table_rows;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    out[r * cols + j] = in ? table[row * cols + j] : FromF<T>(0.0f);
  }
}

template <typename T>
__global__ void EmbeddingBackwardKernel(float* grad, const int32_t* tokens, const T* dout, int64_t cols,
                                        int64_t table_rows, int64_t vocab_begin) {
  const int64_t r = blockIdx.x;
  const int64_t row = tokens[r] - vocab_begin;
  if (row < 0 || row >= table_rows) return;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) atomicAdd(&grad[row * cols + j], ToF(dout[r * cols + j]));
}

template <typename T>
__global__ void RmsNormKernel(T* out, float* inv_rms, const T* x, const T* w, int64_t cols, float eps) {
  const int64_t r = blockIdx.x;
  const T* xr = x + r * cols;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float v = ToF(xr[j]);
    ss += v * v;
  }
  ss = BlockReduce(ss, SumOp{}, 0.0f);
  const float inv = rsqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) inv_rms[r] = inv;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[r * cols + j] = FromF<T>(ToF(xr[j]) * inv * ToF(w[j]));
}

// dx = r · (g − n̂ · mean(g ⊙ n̂)) with n̂ = x·r and g = dy ⊙ w.
template <typename T>
__global__ void RmsNormBackwardKernel(T* dx, const T* x, const T* w, const float* inv_rms, const T* dout, int64_t cols,
                                      bool accumulate) {
  const int64_t r = blockIdx.x;
  const float inv = inv_rms[r];
  const T* xr = x + r * cols;
  const T* dy = dout + r * cols;
  float dot = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += ToF(dy[j]) * ToF(w[j]) * ToF(xr[j]) * inv;
  dot = BlockReduce(dot, SumOp{}, 0.0f);
  const float mean = dot / static_cast<float>(cols);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = inv * (ToF(dy[j]) * ToF(w[j]) - ToF(xr[j]) * inv * mean);
    if (accumulate) v += ToF(dx[r * cols + j]);
    dx[r * cols + j] = FromF<T>(v);
  }
}

constexpr int kRowsPerWeightGradBlock = 64;

// dw[j] += Σ_r dy[r, j] · x[r, j] · inv_rms[r], one column per thread over a chunk of rows.
template <typename T>
__global__ void RmsNormWeightGradKernel(float* dw, const T* x, const float* inv_rms, const T* dout, int64_t rows,
                                        int64_t cols) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= cols) return;
  const int64_t r0 = blockIdx.y * int64_t{kRowsPerWeightGradBlock};
  const int64_t r1 = r0 + kRowsPerWeightGradBlock < rows ? r0 + kRowsPerWeightGradBlock : rows;
  float acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += ToF(dout[r * cols + j]) * ToF(x[r * cols + j]) * inv_rms[r];
  atomicAdd(&dw[j], acc);
}

template <typename T>
__global__ void RopeKernel(T* x, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim, float theta,
                           bool inverse) {
  const int64_t half = head_dim / 2;
  const int64_t n = rows * heads * half;
  GRID_STRIDE(idx, n) {
    const int64_t i = idx % half;
    const int64_t h = (idx / half) % heads;
    const int64_t row = idx / (half * heads);
    const double angle =
        static_cast<double>(row % seq) * pow(static_cast<double>(theta), -2.0 * double(i) / double(head_dim));
    double s = 0, c = 0;
    sincos(angle, &s, &c);
    if (inverse) s = -s;
    T* v = x + row * heads * head_dim + h * head_dim;
    const float a = ToF(v[i]), b = ToF(v[i + half]);
    v[i] = FromF<T>(a * static_cast<float>(c) - b * static_cast<float>(s));
    v[i + half] = FromF<T>(a * static_cast<float>(s) + b * static_cast<float>(c));
  }
}

template <typename T>
__global__ void CausalSoftmaxKernel(T* p, int64_t seq) {
  const int64_t r = blockIdx.x;
  const int64_t last = r % seq;  // positions 0..last are visible
  T* row = p + r * seq;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) mx = fmaxf(mx, ToF(row[j]));
  mx = BlockReduce(mx, MaxOp{}, -INFINITY);
  float sum = 0;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) sum += __expf(ToF(row[j]) - mx);
  sum = BlockReduce(sum, SumOp{}, 0.0f);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
    row[j] = FromF<T>(j <= last ? __expf(ToF(row[j]) - mx) * inv : 0.0f);
  }
}

template <typename T>
__global__ void CausalSoftmaxBackwardKernel(T* dp, const T* p, int64_t seq) {
  const int64_t r = blockIdx.x;
  const int64_t last = r % seq;
  T* drow = dp + r * seq;
  const T* prow = p + r * seq;
  float dot = 0;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) dot += ToF(prow[j]) * ToF(drow[j]);
  dot = BlockReduce(dot, SumOp{}, 0.0f);
  for (int64_t j = threadIdx.x; j < seq; j += blockDim.x) {
    drow[j] = FromF<T>(j <= last ? ToF(prow[j]) * (ToF(drow[j]) - dot) : 0.0f);
  }
}

template <typename T>
__global__ void SwiGluKernel(T* out, const T* gate, const T* up, int64_t n) {
  GRID_STRIDE(i, n) {
    const float g = ToF(gate[i]);
    out[i] = FromF<T>(g / (1.0f + __expf(-g)) * ToF(up[i]));
  }
}

template <typename T>
__global__ void SwiGluBackwardKernel(T* dgate, T* dup, const T* gate, const T* up, const T* dout, int64_t n) {
  GRID_STRIDE(i, n) {
    const float g = ToF(gate[i]), u = ToF(up[i]), d = ToF(dout[i]);
    const float sig = 1.0f / (1.0f + __expf(-g));
    dup[i] = FromF<T>(d * g * sig);
    dgate[i] = FromF<T>(d * u * sig * (1.0f + g * (1.0f - sig)));
  }
}

template <typename T>
__global__ void GatherRowsKernel(T* dst, const T* src, const int64_t* index, const float* scale, int64_t cols) {
  const int64_t i = blockIdx.x, r = index[i];
  const float a = scale != nullptr ? scale[i] : 1.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dst[i * cols + c] = r < 0 ? FromF<T>(0.0f) : FromF<T>(a * ToF(src[r * cols + c]));
  }
}

template <typename T>
__global__ void ScatterAddRowsKernel(T* dst, const T* src, const int64_t* index, const float* scale, int64_t n,
                                     int64_t cols) {
  GRID_STRIDE(c, cols) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = index[i];
      if (r < 0) continue;
      const float a = scale != nullptr ? scale[i] : 1.0f;
      dst[r * cols + c] = FromF<T>(ToF(dst[r * cols + c]) + a * ToF(src[i * cols + c]));
    }
  }
}

template <typename T>
__global__ void RowDotsKernel(float* out, const T* a, const T* b, int64_t cols) {
  const int64_t r = blockIdx.x;
  float sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += ToF(a[r * cols + c]) * ToF(b[r * cols + c]);
  sum = BlockReduce(sum, SumOp{}, 0.0f);
  if (threadIdx.x == 0) out[r] = sum;
}

template <typename T>
__global__ void CrossEntropyMaxKernel(float* row_max, const T* logits, int64_t cols) {
  const int64_t r = blockIdx.x;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, ToF(logits[r * cols + j]));
  mx = BlockReduce(mx, MaxOp{}, -INFINITY);
  if (threadIdx.x == 0) row_max[r] = mx;
}

template <typename T>
__global__ void CrossEntropySumsKernel(float* sums, const float* row_max, const T* logits, const int32_t* labels,
                                       int64_t cols, int64_t vocab_begin) {
  const int64_t r = blockIdx.x;
  const float mx = row_max[r];
  float se = 0;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) se += __expf(ToF(logits[r * cols + j]) - mx);
  se = BlockReduce(se, SumOp{}, 0.0f);
  if (threadIdx.x == 0) {
    const int64_t target = labels[r] - vocab_begin;
    sums[2 * r] = se;
    sums[2 * r + 1] = target >= 0 && target < cols ? ToF(logits[r * cols + target]) : 0.0f;
  }
}

template <typename T>
__global__ void CrossEntropyFinishKernel(T* logits, float* loss, const float* row_max, const float* sums,
                                         const int32_t* labels, int64_t cols, int64_t vocab_begin, float scale,
                                         bool add_loss) {
  const int64_t r = blockIdx.x;
  const float mx = row_max[r], se = sums[2 * r], target_logit = sums[2 * r + 1];
  const int64_t target = labels[r] - vocab_begin;
  if (threadIdx.x == 0 && add_loss) atomicAdd(loss, logf(se) + mx - target_logit);
  const float inv = 1.0f / se;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float g = scale * __expf(ToF(logits[r * cols + j]) - mx) * inv - (j == target ? scale : 0.0f);
    logits[r * cols + j] = FromF<T>(g);
  }
}

template <typename W>
__global__ void AdamKernel(float* p, const float* g, float* m, float* v, W* w, int64_t n, float lr, float b1, float b2,
                           float eps, float c1, float c2) {
  GRID_STRIDE(i, n) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] - lr * (mi / c1) / (sqrtf(vi / c2) + eps);
    p[i] = pi;
    if (w != nullptr) w[i] = FromF<W>(pi);
  }
}

__global__ void InitParamKernel(float* p, int64_t rows, int64_t cols, uint64_t seed, uint64_t tensor_id,
                                int64_t row_begin, float std_dev) {
  GRID_STRIDE(i, rows * cols) p[i] = InitValue(seed, tensor_id, row_begin + i / cols, i % cols, std_dev);
}

}  // namespace

cudaError_t Fill(void* p, DType t, int64_t n, float value, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    FillKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(p), n, value);
  });
  return cudaGetLastError();
}

cudaError_t Convert(void* dst, DType dt, const void* src, DType st, int64_t n, cudaStream_t stream) {
  if (dt == st) return cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * DTypeSize(dt), cudaMemcpyDeviceToDevice, stream);
  Dispatch(dt, [&](auto dtag) {
    Dispatch(st, [&](auto stag) {
      using D = decltype(dtag);
      using S = decltype(stag);
      ConvertKernel<D, S><<<Blocks(n), kThreads, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), n);
    });
  });
  return cudaGetLastError();
}

cudaError_t Add(void* y, const void* x, DType t, int64_t n, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    AddKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), n);
  });
  return cudaGetLastError();
}

cudaError_t Scale(void* p, DType t, int64_t n, float alpha, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    ScaleKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(p), n, alpha);
  });
  return cudaGetLastError();
}

cudaError_t Embedding(void* out, const int32_t* tokens, const void* table, DType t, int64_t rows, int64_t cols,
                      int64_t table_rows, int64_t vocab_begin, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    EmbeddingKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(static_cast<T*>(out), tokens,
                                                                 static_cast<const T*>(table), cols, table_rows,
                                                                 vocab_begin);
  });
  return cudaGetLastError();
}

cudaError_t EmbeddingBackward(float* grad, const int32_t* tokens, const void* dout, DType t, int64_t rows, int64_t cols,
                              int64_t table_rows, int64_t vocab_begin, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    EmbeddingBackwardKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(grad, tokens, static_cast<const T*>(dout),
                                                                         cols, table_rows, vocab_begin);
  });
  return cudaGetLastError();
}

cudaError_t RmsNorm(void* out, float* inv_rms, const void* x, const void* w, DType t, int64_t rows, int64_t cols,
                    float eps, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    RmsNormKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(static_cast<T*>(out), inv_rms,
                                                               static_cast<const T*>(x), static_cast<const T*>(w),
                                                               cols, eps);
  });
  return cudaGetLastError();
}

cudaError_t RmsNormBackward(void* dx, float* dw, const void* x, const void* w, const float* inv_rms, const void* dout,
                            DType t, int64_t rows, int64_t cols, bool accumulate, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    RmsNormBackwardKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(
        static_cast<T*>(dx), static_cast<const T*>(x), static_cast<const T*>(w), inv_rms,
        static_cast<const T*>(dout), cols, accumulate);
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                    static_cast<unsigned>((rows + kRowsPerWeightGradBlock - 1) / kRowsPerWeightGradBlock));
    RmsNormWeightGradKernel<T><<<grid, kThreads, 0, stream>>>(dw, static_cast<const T*>(x), inv_rms,
                                                              static_cast<const T*>(dout), rows, cols);
  });
  return cudaGetLastError();
}

cudaError_t Rope(void* x, DType t, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim, float theta,
                 bool inverse, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    RopeKernel<T><<<Blocks(rows * heads * head_dim / 2), kThreads, 0, stream>>>(static_cast<T*>(x), rows, seq, heads,
                                                                                head_dim, theta, inverse);
  });
  return cudaGetLastError();
}

cudaError_t CausalSoftmax(void* p, DType t, int64_t rows, int64_t seq, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    CausalSoftmaxKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(static_cast<T*>(p), seq);
  });
  return cudaGetLastError();
}

cudaError_t CausalSoftmaxBackward(void* dp, const void* p, DType t, int64_t rows, int64_t seq, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    CausalSoftmaxBackwardKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(static_cast<T*>(dp),
                                                                             static_cast<const T*>(p), seq);
  });
  return cudaGetLastError();
}

cudaError_t SwiGlu(void* out, const void* gate, const void* up, DType t, int64_t n, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    SwiGluKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(gate),
                                                        static_cast<const T*>(up), n);
  });
  return cudaGetLastError();
}

cudaError_t SwiGluBackward(void* dgate, void* dup, const void* gate, const void* up, const void* dout, DType t,
                           int64_t n, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    SwiGluBackwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<T*>(dgate), static_cast<T*>(dup),
                                                                static_cast<const T*>(gate),
                                                                static_cast<const T*>(up),
                                                                static_cast<const T*>(dout), n);
  });
  return cudaGetLastError();
}

cudaError_t GatherRows(void* dst, const void* src, const int64_t* index, const float* scale, DType t, int64_t n,
                       int64_t cols, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    GatherRowsKernel<T><<<RowBlocks(n), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                               index, scale, cols);
  });
  return cudaGetLastError();
}

cudaError_t ScatterAddRows(void* dst, const void* src, const int64_t* index, const float* scale, DType t, int64_t n,
                           int64_t cols, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    ScatterAddRowsKernel<T><<<Blocks(cols), kThreads, 0, stream>>>(static_cast<T*>(dst), static_cast<const T*>(src),
                                                                   index, scale, n, cols);
  });
  return cudaGetLastError();
}

cudaError_t RowDots(float* out, const void* a, const void* b, DType t, int64_t rows, int64_t cols,
                    cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    RowDotsKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(out, static_cast<const T*>(a),
                                                               static_cast<const T*>(b), cols);
  });
  return cudaGetLastError();
}

cudaError_t CrossEntropyMax(float* row_max, const void* logits, DType t, int64_t rows, int64_t cols,
                            cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    CrossEntropyMaxKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(row_max, static_cast<const T*>(logits), cols);
  });
  return cudaGetLastError();
}

cudaError_t CrossEntropySums(float* sums, const float* row_max, const void* logits, const int32_t* labels, DType t,
                             int64_t rows, int64_t cols, int64_t vocab_begin, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    CrossEntropySumsKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(sums, row_max, static_cast<const T*>(logits),
                                                                        labels, cols, vocab_begin);
  });
  return cudaGetLastError();
}

cudaError_t CrossEntropyFinish(void* logits, float* loss, const float* row_max, const float* sums,
                               const int32_t* labels, DType t, int64_t rows, int64_t cols, int64_t vocab_begin,
                               float grad_scale, bool add_loss, cudaStream_t stream) {
  Dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    CrossEntropyFinishKernel<T><<<RowBlocks(rows), kThreads, 0, stream>>>(
        static_cast<T*>(logits), loss, row_max, sums, labels, cols, vocab_begin, grad_scale, add_loss);
  });
  return cudaGetLastError();
}

cudaError_t Adam(float* param, const float* grad, float* m, float* v, void* weight, DType wt, int64_t n, float lr,
                 float beta1, float beta2, float eps, float bias1, float bias2, cudaStream_t stream) {
  Dispatch(wt, [&](auto tag) {
    using W = decltype(tag);
    AdamKernel<W><<<Blocks(n), kThreads, 0, stream>>>(param, grad, m, v, static_cast<W*>(weight), n, lr, beta1, beta2,
                                                      eps, bias1, bias2);
  });
  return cudaGetLastError();
}

cudaError_t InitParam(float* p, int64_t rows, int64_t cols, uint64_t seed, uint64_t tensor_id, int64_t row_begin,
                      float std_dev, cudaStream_t stream) {
  InitParamKernel<<<Blocks(rows * cols), kThreads, 0, stream>>>(p, rows, cols, seed, tensor_id, row_begin, std_dev);
  return cudaGetLastError();
}

}  // namespace hetsim::executor::cuda
