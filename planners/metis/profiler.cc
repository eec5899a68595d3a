// Metis §4.3, "Cost Estimation with Profiling": what Metis profiles before it searches, and how it
// estimates the execution time and the peak memory of any stage from those few profiles.
#include <algorithm>
#include <cmath>

#include "planners/metis/internal.h"

namespace hetsim::planners::metis {
namespace {

constexpr int kKinds = 3;  // embedding, transformer block, head (models::LayerKind order)
// Profiled slots: the three kinds (the block slot is the first block class's), then one slot per further
// block class (BlockClasses: an MoE model's dense and MoE blocks, sliding-window and full attention).

int Log2(uint32_t p) {
  int l = 0;
  while ((1u << (l + 1)) <= p) ++l;
  return l;
}

}  // namespace

Profiler::Profiler(const PlanningProblem& problem, const Knobs& knobs)
    : problem_(problem),
      knobs_(knobs),
      cost_(problem),
      memory_(problem),
      topology_(problem.cluster),
      layers_(problem.model.num_layers()),
      max_batch_(std::max<uint32_t>(1, knobs.max_profiled_batch)),
      block_classes_(problem.model) {
  const auto& cluster = problem.cluster;
  const auto& model = problem.model;
  // "Metis profiles representative numbers of tp and mbs, such as tp = 1, 2, 4, 8 and mbs = 1, 2, 4, 8,
  // 16 ..." — powers of two up to the knobs (TP degrees the model's heads allow).
  for (uint32_t t = 1; t <= std::clamp<uint32_t>(knobs.max_profiled_tp, 1, 128); t *= 2) {
    if (ModelAllowsTp(model, t)) tps_.push_back(t);
  }
  for (uint32_t p = 1; p <= max_batch_; p *= 2) profiled_sizes_.push_back(p);
  // "while skipping repetitive layers": one layer of each kind, and of each kind of block.
  slot_layer_ = {0, 1, layers_ - 1};
  for (uint32_t c = 1; c < block_classes_.size(); ++c) slot_layer_.push_back(block_classes_.first(c));
  if (block_classes_.size() > 0) slot_layer_[1] = block_classes_.first(0);

  // GPU types and node classes.
  node_class_ = NodeClasses(cluster);
  for (const auto& node : cluster.nodes()) {
    auto it = std::find(types_.begin(), types_.end(), node.gpu);
    if (it == types_.end()) {
      types_.push_back(node.gpu);
      it = types_.end() - 1;
    }
    node_type_.push_back(static_cast<uint32_t>(it - types_.begin()));
  }
  ProfileTime();
  ProfileOverheads();
  ProfileTp();
  ProfileMemory(std::max<uint32_t>(1, knobs.memory_k));
}

// Time: "Metis profiles the execution time of individual layers for each GPU type with various tp
// degree and micro-batch sizes (mbs), while skipping repetitive layers" — one layer of each kind.
void Profiler::ProfileTime() {
  const size_t T = tps_.size(), P = profiled_sizes_.size(), X = max_batch_ + 1;
  const size_t K = slot_layer_.size();
  const std::vector<uint32_t>& rep = slot_layer_;
  const auto& compute = cost_.compute();
  profiled_.assign(types_.size() * T * K * P, 0);
  time_.assign(types_.size() * T * K * X, 0);
  for (uint32_t g = 0; g < types_.size(); ++g) {
    for (size_t ti = 0; ti < T; ++ti) {
      for (size_t k = 0; k < K; ++k) {
        for (size_t pi = 0; pi < P; ++pi) {
          const double p = profiled_sizes_[pi];
          // The layer alone: the profile's per-micro-batch overheads (which ComputeCost charges with the
          // embedding's forward and the head's backward pass) are eq. 1's own terms.
          profiled_[((g * T + ti) * K + k) * P + pi] =
              compute.ForwardSeconds(*types_[g], rep[k], tps_[ti], p) +
              compute.BackwardSeconds(*types_[g], rep[k], tps_[ti], p, problem_.training.recompute()) -
              compute.OverheadSeconds(*types_[g], rep[k], tps_[ti], p, /*backward=*/false) -
              compute.OverheadSeconds(*types_[g], rep[k], tps_[ti], p, /*backward=*/true);
        }
        // "for mbs = 7, Metis sums the profiled results of mbs = 1, mbs = 2, and mbs = 4".
        for (uint32_t n = 1; n < X; ++n) {
          double t = 0;
          for (size_t pi = 0; pi < P; ++pi) {
            if (n & profiled_sizes_[pi]) t += profiled_[((g * T + ti) * K + k) * P + pi];
          }
          time_[((g * T + ti) * K + k) * X + n] = t;
        }
      }
    }
  }
}

// Per-micro-batch overheads outside the layers (the released estimator's fb_sync and batch_generator:
// forward_backward_time − Σ layer compute, and the batch generator's time), per GPU type, TP degree and
// sequences per replica.
void Profiler::ProfileOverheads() {
  const size_t T = tps_.size(), X = max_batch_ + 1;
  const auto& compute = cost_.compute();
  fb_sync_.assign(types_.size() * T * X, 0);
  batch_gen_.assign(types_.size() * T * X, 0);
  for (uint32_t g = 0; g < types_.size(); ++g) {
    for (size_t ti = 0; ti < T; ++ti) {
      for (uint32_t n = 1; n < X; ++n) {
        const size_t at = (g * T + ti) * X + n;
        fb_sync_[at] = compute.OverheadSeconds(*types_[g], layers_ - 1, tps_[ti], n, /*backward=*/true);
        batch_gen_[at] = compute.OverheadSeconds(*types_[g], 0, tps_[ti], n, /*backward=*/false);
      }
    }
  }
}

// TP communication: "Metis profiles the TP communication cost ... Since TP typically occurs within a
// single node ... heterogeneities in network bandwidth between nodes do not impact" it: one profile per
// node class, measured on its first node (our measurement: an α–β ring all-reduce over the node's
// fabric, 2 per block and 1 per embedding/head in each pass, Megatron-LM; none when the compute profile
// already includes the layer's TP collectives).
void Profiler::ProfileTp() {
  const auto& cluster = problem_.cluster;
  const auto& model = problem_.model;
  const auto& training = problem_.training;
  const auto& compute = cost_.compute();
  const size_t T = tps_.size(), P = profiled_sizes_.size(), X = max_batch_ + 1;
  const uint32_t rep[kKinds] = {0, 1, layers_ - 1};
  const uint32_t num_classes =
      node_class_.empty() ? 0 : *std::max_element(node_class_.begin(), node_class_.end()) + 1;
  tp_link_ok_.assign(size_t{num_classes} * T, 0);
  tp_time_.assign(size_t{num_classes} * T * kKinds * X, 0);
  for (uint32_t c = 0; c < num_classes; ++c) {
    uint32_t node = 0;
    while (node_class_[node] != c) ++node;
    const auto& info = cluster.nodes()[node];
    for (size_t ti = 0; ti < T; ++ti) {
      const uint32_t tp = tps_[ti];
      if (info.num_gpus < tp) continue;
      tp_link_ok_[c * T + ti] = 1;
      if (tp == 1) continue;
      std::vector<uint32_t> group(tp);
      for (uint32_t i = 0; i < tp; ++i) group[i] = info.first_device + i;
      const models::Link link = topology_.Slowest(group);
      for (int k = 0; k < kKinds; ++k) {
        std::vector<double> at(P, 0);
        for (size_t pi = 0; pi < P; ++pi) {
          const double p = profiled_sizes_[pi];
          if (compute.TpIncludedInProfile(*info.gpu, rep[k], tp, p)) continue;
          const double bytes =
              models::TpAllReduceBytesPerLayer(model, rep[k], p, training.seq_len(), training.dtype());
          const double one = models::RingAllReduceSeconds(bytes, tp, link);
          const int per_pass = models::TpAllReducesPerLayer(model, rep[k]);
          const bool recomputed = training.recompute() == proto::RECOMPUTE_FULL && k == 1;
          at[pi] = (2 + (recomputed ? 1 : 0)) * per_pass * one;
        }
        for (uint32_t n = 1; n < X; ++n) {
          double t = 0;
          for (size_t pi = 0; pi < P; ++pi) {
            if (n & profiled_sizes_[pi]) t += at[pi];
          }
          tp_time_[((size_t{c} * T + ti) * kKinds + k) * X + n] = t;
        }
      }
    }
  }
}

// Memory: "Metis profiles the memory usage of the following layers: Mem(L(i, j)) ∀ 0 ≤ i ≤ L − k and
// i ≤ j ≤ i + k" (we measure every start i, so that the last layers have their single-layer entries);
// "Metis profiles the memory usage for one GPU type and reuses them for different types of GPUs".
// Our measurement: the activation bytes one micro-batch keeps through layers i..j (models::
// TransformerModel, Korthikanti et al. 2022), with Megatron sequence parallelism when tp > 1.
void Profiler::ProfileMemory(uint32_t k) {
  const auto& model = problem_.model;
  const auto& training = problem_.training;
  const size_t T = tps_.size(), P = profiled_sizes_.size();
  const uint32_t L = layers_;
  mem_.assign(T * P, {});
  for (size_t ti = 0; ti < T; ++ti) {
    const uint32_t tp = tps_[ti];
    for (size_t pi = 0; pi < P; ++pi) {
      MemoryProfile& m = mem_[ti * P + pi];
      const double p = profiled_sizes_[pi];
      m.measured.assign(size_t{L} * (k + 1), 0);
      for (uint32_t i = 0; i < L; ++i) {
        for (uint32_t d = 0; d <= k && i + d < L; ++d) {
          m.measured[size_t{i} * (k + 1) + d] =
              memory_.ActivationGibPerSequence(i, i + d + 1, tp, tp > 1, training.recompute()) * p;
        }
      }
      auto measured = [&](uint32_t i, uint32_t j) { return m.measured[size_t{i} * (k + 1) + (j - i)]; };
      // Mem(L(m)) = Σ_{n=m−k}^{m−1} (Mem(L(n, m)) − Mem(L(n, m−1))) / k; the first layers average over
      // the compositions that exist (n ≥ 0).
      m.per_layer.assign(L, 0);
      m.per_layer[0] = measured(0, 0);
      for (uint32_t l = 1; l < L; ++l) {
        const uint32_t from = l >= k ? l - k : 0;
        double sum = 0;
        for (uint32_t n = from; n < l; ++n) sum += measured(n, l) - measured(n, l - 1);
        m.per_layer[l] = sum / (l - from);
      }
      m.prefix.assign(L + 1, 0);
      for (uint32_t l = 0; l < L; ++l) m.prefix[l + 1] = m.prefix[l] + m.per_layer[l];
    }
  }
  // The layer re-materialised at a time under full recomputation, per kinds a range holds.
  peak_.assign(T * 8, 0);
  class_peak_.clear();  // [tpi][further class]
  const size_t C = block_classes_.size() > 1 ? block_classes_.size() - 1 : 0;  // further block classes
  params_.assign(T * (4 + C), 0);
  for (size_t ti = 0; ti < T; ++ti) {
    const uint32_t tp = tps_[ti];
    for (uint32_t mask = 1; mask < 8; ++mask) {
      // A range holding those kinds: the embedding [0, 1), a block [1, 2), the head [L − 1, L).
      const uint32_t begin = (mask & 1) ? 0 : (mask & 2) ? 1 : L - 1;
      const uint32_t end = (mask & 4) ? L : (mask & 2) ? 2 : 1;
      if ((mask & 1) && (mask & 4) && !(mask & 2)) continue;  // embedding and head without blocks: never
      peak_[ti * 8 + mask] = memory_.PeakLayerGibPerSequence(begin, end, tp, tp > 1, training.recompute());
    }
    // Each further block class's re-materialised layer (the block bit of peak_ is the first class's).
    for (size_t c = 0; c < C; ++c) {
      const uint32_t l = slot_layer_[3 + c];
      class_peak_.push_back(memory_.PeakLayerGibPerSequence(l, l + 1, tp, tp > 1, training.recompute()));
    }
    double* p = &params_[ti * (4 + C)];
    p[0] = model.ParamsPerRank(0, tp, false);
    p[1] = model.ParamsPerRank(slot_layer_[1], tp, false);
    p[2] = model.ParamsPerRank(L - 1, tp, false);
    p[3] = model.ParamsPerRank(L - 1, tp, true);
    for (size_t c = 0; c < C; ++c) p[4 + c] = model.ParamsPerRank(slot_layer_[3 + c], tp, false);
  }
}

int Profiler::TpIndex(uint32_t tp) const {
  for (size_t i = 0; i < tps_.size(); ++i) {
    if (tps_[i] == tp) return static_cast<int>(i);
  }
  return -1;
}

double Profiler::ProfiledLayerSeconds(uint32_t type, int tpi, models::LayerKind kind, uint32_t p) const {
  const size_t P = profiled_sizes_.size();
  return profiled_[((size_t{type} * tps_.size() + tpi) * slot_layer_.size() + static_cast<int>(kind)) * P + Log2(p)];
}

double Profiler::RangeSeconds(uint32_t type, int tpi, uint32_t n, uint32_t begin, uint32_t end) const {
  if (end <= begin || n == 0) return 0;
  const bool emb = begin == 0, head = end == layers_;
  const uint32_t blocks = end - begin - (emb ? 1 : 0) - (head ? 1 : 0);
  const size_t X = max_batch_ + 1;
  const double* t = &time_[(size_t{type} * tps_.size() + tpi) * slot_layer_.size() * X];
  if (block_classes_.size() <= 1) return (emb ? t[n] : 0) + blocks * t[X + n] + (head ? t[2 * X + n] : 0);
  // Each block class at its own profile (§4.3 sums the layers' times).
  double sum = (emb ? t[n] : 0) + block_classes_.Count(0, begin, end) * t[X + n] + (head ? t[2 * X + n] : 0);
  for (uint32_t c = 1; c < block_classes_.size(); ++c) sum += block_classes_.Count(c, begin, end) * t[(2 + c) * X + n];
  return sum;
}

double Profiler::RangeTpSeconds(uint32_t cls, int tpi, uint32_t n, uint32_t begin, uint32_t end) const {
  if (end <= begin || n == 0 || tps_[tpi] == 1) return 0;
  const bool emb = begin == 0, head = end == layers_;
  const uint32_t blocks = end - begin - (emb ? 1 : 0) - (head ? 1 : 0);
  const size_t X = max_batch_ + 1;
  const double* t = &tp_time_[(size_t{cls} * tps_.size() + tpi) * kKinds * X];
  return (emb ? t[n] : 0) + blocks * t[X + n] + (head ? t[2 * X + n] : 0);
}

double Profiler::MeasuredActivationGib(int tpi, uint32_t p, uint32_t i, uint32_t j) const {
  const uint32_t k = std::max<uint32_t>(1, knobs_.memory_k);
  return mem_[size_t(tpi) * profiled_sizes_.size() + Log2(p)].measured[size_t{i} * (k + 1) + (j - i)];
}

double Profiler::LayerActivationGib(int tpi, uint32_t p, uint32_t m) const {
  return mem_[size_t(tpi) * profiled_sizes_.size() + Log2(p)].per_layer[m];
}

double Profiler::ActivationGib(int tpi, uint32_t n, uint32_t begin, uint32_t end) const {
  if (end <= begin || n == 0) return 0;
  double gib = 0;
  for (size_t pi = 0; pi < profiled_sizes_.size(); ++pi) {
    if ((n & profiled_sizes_[pi]) == 0) continue;
    const MemoryProfile& m = mem_[size_t(tpi) * profiled_sizes_.size() + pi];
    const uint32_t k = std::max<uint32_t>(1, knobs_.memory_k);
    // Mem(L(i, j)) = Mem(L(i, j − 1)) + Mem(L(j)), from the measured single layer L(i, i).
    gib += m.measured[size_t{begin} * (k + 1)] + (m.prefix[end] - m.prefix[begin + 1]);
  }
  return gib;
}

double Profiler::RangeParams(int tpi, uint32_t begin, uint32_t end) const {
  if (end <= begin) return 0;
  const bool emb = begin == 0, head = end == layers_;
  const uint32_t blocks = end - begin - (emb ? 1 : 0) - (head ? 1 : 0);
  const size_t C = block_classes_.size() > 1 ? block_classes_.size() - 1 : 0;
  const double* p = &params_[size_t(tpi) * (4 + C)];
  if (C == 0) return (emb ? p[0] : 0) + blocks * p[1] + (head ? p[emb ? 2 : 3] : 0);
  double sum = (emb ? p[0] : 0) + block_classes_.Count(0, begin, end) * p[1] + (head ? p[emb ? 2 : 3] : 0);
  for (size_t c = 0; c < C; ++c) sum += block_classes_.Count(static_cast<uint32_t>(c + 1), begin, end) * p[4 + c];
  return sum;
}

double Profiler::StaticGib(int tpi, uint32_t begin, uint32_t end, uint32_t dp) const {
  // The arithmetic of planners::MemoryModel::StaticGib (blocks are identical).
  if (end <= begin) return 0;
  const auto& training = problem_.training;
  const double wb = models::DTypeBytes(training.dtype());
  // (It left out optimizer_extra_bytes_per_param before session 35, unlike MemoryModel.)
  const double ob = models::OptimizerBytesPerParam(training);
  const bool emb = begin == 0, head = end == layers_;
  const uint32_t blocks = end - begin - (emb ? 1 : 0) - (head ? 1 : 0);
  const size_t C = block_classes_.size() > 1 ? block_classes_.size() - 1 : 0;
  const double* p = &params_[size_t(tpi) * (4 + C)];
  const double params = RangeParams(tpi, begin, end);
  double largest = 0;
  if (emb) largest = std::max(largest, p[0] * wb);
  if (C == 0 ? blocks > 0 : block_classes_.Count(0, begin, end) > 0) largest = std::max(largest, p[1] * wb);
  for (size_t c = 0; c < C; ++c) {
    if (block_classes_.Count(static_cast<uint32_t>(c + 1), begin, end) > 0) largest = std::max(largest, p[4 + c] * wb);
  }
  if (head) largest = std::max(largest, p[emb ? 2 : 3] * wb);
  const double shard = std::max<uint32_t>(1, dp);
  const uint32_t z = knobs_.zero_stage;
  const double w = params * wb / (z >= 3 ? shard : 1.0) + (z >= 3 ? largest : 0.0);
  const double g = params * wb / (z >= 2 ? shard : 1.0);
  const double o = params * ob / (z >= 1 ? shard : 1.0);
  return (w + g + o) / (1024.0 * 1024.0 * 1024.0);
}

double Profiler::DeviceGib(int tpi, uint32_t begin, uint32_t end, uint32_t dp, uint32_t n, double in_flight) const {
  if (end <= begin) return memory_.WorkspaceGib();
  const bool emb = begin == 0, head = end == layers_;
  const bool blocks = end - begin > (emb ? 1u : 0u) + (head ? 1u : 0u);
  double peak = peak_[size_t(tpi) * 8 + (emb ? 1 : 0) + (blocks ? 2 : 0) + (head ? 4 : 0)];
  const size_t C = block_classes_.size() > 1 ? block_classes_.size() - 1 : 0;
  if (C > 0 && blocks) {
    // The block bit is the first class's: the classes the range holds instead.
    peak = 0;
    if (emb) peak = std::max(peak, peak_[size_t(tpi) * 8 + 1]);
    if (head) peak = std::max(peak, peak_[size_t(tpi) * 8 + 4]);
    if (block_classes_.Count(0, begin, end) > 0) peak = std::max(peak, peak_[size_t(tpi) * 8 + 2]);
    for (size_t c = 0; c < C; ++c) {
      if (block_classes_.Count(static_cast<uint32_t>(c + 1), begin, end) > 0) {
        peak = std::max(peak, class_peak_[size_t(tpi) * C + c]);
      }
    }
  }
  return StaticGib(tpi, begin, end, dp) + ActivationGib(tpi, n, begin, end) * in_flight + peak * n +
         memory_.WorkspaceGib();
}

}  // namespace hetsim::planners::metis
