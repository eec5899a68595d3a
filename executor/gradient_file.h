// Gradient dumps: every parameter's gradient of one training step in the model's global (unsharded)
// layout, so that runs of the same model and seed under different plans can be compared tensor by
// tensor (the executor's correctness tests compare every plan with a single-rank run).
//
// File format (little-endian): "HSGRAD1\n", u32 tensor count, then per tensor u32 name length, the name,
// i64 rows, i64 cols, rows·cols f32; then the step's loss as f64.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/status.h"

namespace hetsim::executor {

struct GradientTensor {
  std::string name;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> data;
};

struct GradientDump {
  std::vector<GradientTensor> tensors;
  double loss = 0;
};

Status WriteGradientDump(const std::string& path, const GradientDump& dump);
Result<GradientDump> ReadGradientDump(const std::string& path);

struct TensorDifference {
  std::string name;
  double relative_l2 = 0;  // ‖g − g_ref‖₂ / ‖g_ref‖₂ (0 when both are 0)
  double max_abs = 0;      // max |g − g_ref|
  double ref_norm = 0;     // ‖g_ref‖₂
};

struct DumpComparison {
  std::vector<TensorDifference> tensors;
  double loss_relative = 0;  // |loss − loss_ref| / |loss_ref|
  const TensorDifference* worst() const;
  // True when every tensor's relative_l2 and the loss difference are within rtol.
  bool Within(double rtol) const;
};

// Errors when the dumps hold different tensors or shapes (they come from different models).
Result<DumpComparison> CompareGradientDumps(const GradientDump& got, const GradientDump& ref);

}  // namespace hetsim::executor
