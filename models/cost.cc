#include "models/cost.h"

#include <algorithm>

namespace hetsim::models {

ComputeCost::ComputeCost(const TransformerModel& model, const proto::Training& training, const ProfileDb* profiles,
                         ComputeOptions options)
    : model_(model), training_(training), profiles_(profiles), options_(options) {}

double ComputeCost::Efficiency(double tokens) const {
  return options_.max_efficiency * tokens / (tokens + options_.half_tokens);
}

std::optional<LayerCost> ComputeCost::Profiled(const GpuSpec& gpu, uint32_t layer, uint32_t tp,
                                               double micro_batch) const {
  if (profiles_ == nullptr || profiles_->empty()) return std::nullopt;
  return profiles_->Lookup(gpu.name, model_.name(), model_.kind(layer), tp, micro_batch, training_.seq_len());
}

bool ComputeCost::TpIncludedInProfile(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch) const {
  auto p = Profiled(gpu, layer, tp, micro_batch);
  return p.has_value() && p->includes_tp_communication;
}

double ComputeCost::ForwardSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch) const {
  if (micro_batch <= 0) return 0;
  if (auto p = Profiled(gpu, layer, tp, micro_batch)) return p->forward_s;
  const double flops = model_.ForwardFlops(layer, micro_batch, training_.seq_len()) / tp;
  if (flops == 0) return 0;
  const double peak = gpu.PeakTflops(training_.dtype()) * 1e12;
  const double tokens = micro_batch * training_.seq_len() / tp;
  return flops / (peak * Efficiency(tokens));
}

double ComputeCost::BackwardSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                                    proto::Recompute recompute) const {
  if (micro_batch <= 0) return 0;
  if (recompute == proto::RECOMPUTE_UNSPECIFIED) recompute = training_.recompute();
  const double fwd = ForwardSeconds(gpu, layer, tp, micro_batch);
  double bwd = 0;
  if (auto p = Profiled(gpu, layer, tp, micro_batch)) {
    bwd = p->backward_s;
  } else {
    const double flops = model_.BackwardFlops(layer, micro_batch, training_.seq_len()) / tp;
    const double peak = gpu.PeakTflops(training_.dtype()) * 1e12;
    const double tokens = micro_batch * training_.seq_len() / tp;
    bwd = flops == 0 ? 0 : flops / (peak * Efficiency(tokens));
  }
  if (model_.kind(layer) != LayerKind::kTransformer) return bwd;
  if (recompute == proto::RECOMPUTE_FULL) return bwd + fwd;
  if (recompute == proto::RECOMPUTE_SELECTIVE) {
    // The attention core (QK^T and AV: 4·b·s²·h FLOPs) is recomputed.
    const double s = training_.seq_len();
    const double core = 4.0 * micro_batch * s * s * model_.spec().hidden_size() / tp;
    const double total = model_.ForwardFlops(layer, micro_batch, training_.seq_len()) / tp;
    return bwd + fwd * core / total;
  }
  return bwd;
}

double ComputeCost::OptimizerSeconds(const GpuSpec& gpu, double params) const {
  return params * options_.optimizer_bytes_per_param / (gpu.hbm_bandwidth_gbyte_s * 1e9);
}

int TpAllReducesPerLayer(const TransformerModel& model, uint32_t layer) {
  return model.kind(layer) == LayerKind::kTransformer ? 2 : 1;
}

double TpAllReduceBytesPerLayer(const TransformerModel& model, uint32_t layer, double micro_batch, uint32_t seq_len,
                                proto::DType dtype) {
  (void)layer;
  return DTypeBytes(dtype) * micro_batch * seq_len * model.spec().hidden_size();
}

double PipelineBoundaryBytes(const TransformerModel& model, double micro_batch, uint32_t seq_len, proto::DType dtype) {
  return model.BoundaryBytes(micro_batch, seq_len, dtype);
}

double GradientBytes(const TransformerModel& model, uint32_t layer, uint32_t tp, proto::DType dtype,
                     bool head_holds_embedding_copy) {
  return model.ParamsPerRank(layer, tp, head_holds_embedding_copy) * DTypeBytes(dtype);
}

}  // namespace hetsim::models
