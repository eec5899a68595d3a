// Tensors of the executor: a typed, row-major 2-D view of memory owned by a Backend (host memory for the
// CPU backend, GPU memory for the CUDA backend). A Tensor never owns its memory; a Buffer does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "models/status.h"

namespace hetsim::executor {

enum class DType : uint8_t { kF32, kBF16, kI32 };

inline size_t DTypeSize(DType d) { return d == DType::kBF16 ? 2 : 4; }
inline const char* DTypeName(DType d) { return d == DType::kF32 ? "f32" : d == DType::kBF16 ? "bf16" : "i32"; }

// A row-major [rows, cols] view. Views of row ranges and flat ranges stay contiguous.
struct Tensor {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kF32;

  int64_t numel() const { return rows * cols; }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  bool empty() const { return numel() == 0; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // Rows [begin, end) of this tensor.
  Tensor Rows(int64_t begin, int64_t end) const {
    HETSIM_CHECK(0 <= begin && begin <= end && end <= rows, "Tensor::Rows out of range");
    return {static_cast<char*>(data) + static_cast<size_t>(begin * cols) * DTypeSize(dtype), end - begin, cols,
            dtype};
  }
  // The same memory seen as [r, c]; r·c must equal numel().
  Tensor Reshape(int64_t r, int64_t c) const {
    HETSIM_CHECK(r * c == numel(), "Tensor::Reshape changes the element count");
    return {data, r, c, dtype};
  }
  // Elements [offset, offset + n) of the flattened tensor as an [n, 1] column.
  Tensor Flat(int64_t offset, int64_t n) const {
    HETSIM_CHECK(0 <= offset && offset + n <= numel(), "Tensor::Flat out of range");
    return {static_cast<char*>(data) + static_cast<size_t>(offset) * DTypeSize(dtype), n, 1, dtype};
  }
};

}  // namespace hetsim::executor
