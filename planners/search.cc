#include "planners/search.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <queue>

#include "models/training.h"

namespace hetsim::planners {
namespace {

constexpr double kGib = 1024.0 * 1024.0 * 1024.0;

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string ProblemSummary(const PlanningProblem& problem) {
  const auto& t = problem.training;
  const char* dtype = models::DTypeName(t.dtype());
  return "cluster '" + problem.cluster.name() + "' (" + std::to_string(problem.cluster.num_devices()) +
         " GPUs) for model '" + problem.model.name() + "' (global batch " + std::to_string(t.global_batch_size()) +
         ", seq_len " + std::to_string(t.seq_len()) + ", " + dtype + ", recompute " + models::RecomputeName(t.recompute()) + ")";
}

std::string Rejections(const SearchStats& stats) {
  std::string out;
  for (const auto& [reason, n] : stats.rejected) {
    out += "\n  rejected " + std::to_string(n) + "× : " + reason;
  }
  return out;
}

}  // namespace

std::vector<uint32_t> Divisors(uint32_t n) {
  std::vector<uint32_t> out;
  for (uint32_t d = 1; uint64_t{d} * d <= n; ++d) {
    if (n % d != 0) continue;
    out.push_back(d);
    if (d != n / d) out.push_back(n / d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ModelAllowsTp(const models::TransformerModel& model, uint32_t tp) {
  const uint32_t heads = model.spec().num_attention_heads(), kv = model.kv_heads();
  return tp >= 1 && heads % tp == 0 && (kv % tp == 0 || tp % kv == 0);
}

std::vector<uint32_t> TpCandidates(const PlanningProblem& problem, const std::vector<uint32_t>& requested,
                                   uint32_t node_gcd, SearchStats* stats) {
  const uint32_t g = std::max<uint32_t>(1, node_gcd);
  std::vector<uint32_t> all = requested.empty() ? Divisors(std::max<uint32_t>(1, g)) : requested;
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  std::vector<uint32_t> out;
  for (uint32_t tp : all) {
    if (g % tp != 0) {
      if (stats != nullptr) stats->Reject("TP degree does not divide the GPUs of every node (TP stays inside a node)");
      continue;
    }
    if (!ModelAllowsTp(problem.model, tp)) {
      if (stats != nullptr) stats->Reject("TP degree does not divide the model's attention or key/value heads");
      continue;
    }
    out.push_back(tp);
  }
  return out;
}

std::vector<uint32_t> MicroBatchCandidates(uint32_t batch, const std::vector<uint32_t>& requested, uint32_t max_size) {
  std::vector<uint32_t> out;
  if (!requested.empty()) {
    for (uint32_t b : requested) {
      if (b >= 1 && b <= batch && batch % b == 0) out.push_back(b);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  for (uint32_t b = 1; b <= std::min(batch, max_size); ++b) {
    if (batch % b == 0) out.push_back(b);
  }
  return out;
}

// ---- memory ----------------------------------------------------------------------------------------

MemoryModel::MemoryModel(const PlanningProblem& problem)
    : model_(problem.model), training_(problem.training), cluster_(problem.cluster), classes_(problem.model) {
  // Runtime memory (models::EstimateMemory's CUDA context and NCCL buffers) at its most for this cluster:
  // the world group, one group per parallel dimension a plan of n devices can have (TP, DP and PP, which
  // planners search; a heterogeneous plan of n devices can have n - 1 of them above 1: three devices make
  // a two-stage pipeline beside a one-device replica) and the tied-embedding group, each of >= 3 ranks
  // unless n = 2, on the
  // node kind with the most NCCL channels. Planners do not know a candidate's groups where they check
  // memory, so they charge the most; models::ValidatePlan charges the plan's own groups, never more, so
  // a planner's plan always passes it (docs/simulator.md "Peak memory, term by term").
  const uint32_t n = problem.cluster.num_devices();
  if (n >= 2) {
    const uint32_t dims = std::min(3u, n - 1);
    most_.count = 1 + dims + (model_.spec().tied_embeddings() ? 1 : 0);
    most_.two_rank = n == 2 ? most_.count : (model_.spec().tied_embeddings() ? 1 : 0);
  }
  for (const auto& node : problem.cluster.nodes()) {
    widest_channels_ = std::max(widest_channels_, models::NcclChannelFraction(node));
  }
  if (problem.profiles == nullptr || problem.profiles->empty()) return;
  std::vector<const models::GpuSpec*> types;
  for (const auto& node : problem.cluster.nodes()) {
    if (std::find(types.begin(), types.end(), node.gpu) == types.end()) types.push_back(node.gpu);
  }
  const uint32_t L = model_.num_layers();
  const uint32_t rep[3] = {0, L > 2 ? 1u : 0u, L - 1};  // a layer of each kind (models::LayerKind order)
  profiled_bytes_.assign(3 * (kMaxProfiledTp + 1), -1);
  bool any = false;
  for (int k = 0; k < 3; ++k) {
    if (model_.kind(rep[k]) != static_cast<models::LayerKind>(k)) continue;
    for (uint32_t tp = 1; tp <= kMaxProfiledTp; ++tp) {
      for (const models::GpuSpec* gpu : types) {
        auto p = problem.profiles->Lookup(gpu->name, model_.name(), model_.kind(rep[k]), tp, 1, training_.seq_len());
        if (!p || !p->has_activation) continue;
        double& slot = profiled_bytes_[k * (kMaxProfiledTp + 1) + tp];
        slot = std::max(slot, p->activation_gib * kGib);
        any = true;
      }
    }
  }
  if (!any) profiled_bytes_.clear();
}

bool FitMoePlan(proto::Plan* plan, const models::TransformerModel& model) {
  if (!model.HasMoe()) return true;
  const uint32_t L = model.num_layers();
  std::vector<uint32_t> tp_of(L, 0);  // the TP degree of the stages holding each MoE layer (0: none yet)
  bool under_tp = false, unlike = false;
  for (const auto& pipe : plan->pipelines()) {
    for (const auto& st : pipe.stages()) {
      const uint32_t tp = models::TpDegree(st);
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < L; ++l) {
        if (!model.HasExperts(l)) continue;
        under_tp |= tp > 1;
        if (tp_of[l] == 0) tp_of[l] = tp;
        unlike |= tp_of[l] != tp;
      }
    }
  }
  if (under_tp) plan->set_sequence_parallel(true);
  return !unlike;
}

double MemoryModel::ProfiledBytes(models::LayerKind kind, uint32_t tp) const {
  if (profiled_bytes_.empty() || tp > kMaxProfiledTp) return -1;
  return profiled_bytes_[static_cast<int>(kind) * (kMaxProfiledTp + 1) + tp];
}

double MemoryModel::StaticGib(uint32_t begin, uint32_t end, uint32_t tp, uint32_t zero_stage, double shard,
                              proto::Plan::Offload offload, double dp_bucket_mib) const {
  const double wb = models::DTypeBytes(training_.dtype());
  const double ob = models::OptimizerBytesPerParam(training_);
  const bool holds_embedding = begin == 0;
  shard = std::max(1.0, shard);
  double params = 0, largest = 0;
  auto add = [&](uint32_t layer, double count) {
    const double n = model_.ParamsPerRank(layer, tp, !holds_embedding);
    params += count * n;
    largest = std::max(largest, n * wb);
  };
  const uint32_t L = model_.num_layers();
  if (begin == 0 && end > 0) add(0, 1);
  for (uint32_t c = 0; c < classes_.size(); ++c) {
    const uint32_t blocks = classes_.Count(c, begin, end);
    if (blocks > 0) add(classes_.first(c), blocks);
  }
  if (end == L && begin < end) add(L - 1, 1);
  double w = params * wb / (zero_stage >= 3 ? shard : 1.0) + (zero_stage >= 3 ? largest : 0.0);
  double g = params * wb / (zero_stage >= 2 ? shard : 1.0);
  double o = params * ob / (zero_stage >= 1 ? shard : 1.0);
  // CPU offload (models/plan.h): gradient buckets and no optimizer states; with the parameters offloaded,
  // the layer being computed and the next one.
  if (offload >= proto::Plan::OFFLOAD_OPTIMIZER) {
    g = models::OffloadGradientBufferBytes(params * wb, largest, dp_bucket_mib);
    o = 0;
  }
  if (offload >= proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS) w = 2 * largest;
  return (w + g + o) * (1 + training_.allocator_overhead()) / kGib;
}

double MemoryModel::StaticGibByLayer(uint32_t begin, uint32_t end, uint32_t tp, uint32_t zero_stage,
                                     const std::vector<uint32_t>& replicas, proto::Plan::Offload offload,
                                     double dp_bucket_mib) const {
  const double wb = models::DTypeBytes(training_.dtype());
  const double ob = models::OptimizerBytesPerParam(training_);
  const bool holds_embedding = begin == 0;
  double w = 0, g = 0, o = 0, largest = 0, all_grads = 0;
  for (uint32_t l = begin; l < end && l < model_.num_layers(); ++l) {
    const double n = model_.ParamsPerRank(l, tp, !holds_embedding);
    const double shard = std::max<uint32_t>(1, l < replicas.size() ? replicas[l] : 1);
    w += n * wb / (zero_stage >= 3 ? shard : 1.0);
    g += n * wb / (zero_stage >= 2 ? shard : 1.0);
    o += n * ob / (zero_stage >= 1 ? shard : 1.0);
    largest = std::max(largest, n * wb);
    all_grads += n * wb;
  }
  if (zero_stage >= 3) w += largest;
  if (offload >= proto::Plan::OFFLOAD_OPTIMIZER) {
    g = models::OffloadGradientBufferBytes(all_grads, largest, dp_bucket_mib);
    o = 0;
  }
  if (offload >= proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS) w = 2 * largest;
  return (w + g + o) * (1 + training_.allocator_overhead()) / kGib;
}

double MemoryModel::HostGib(uint32_t begin, uint32_t end, uint32_t tp, proto::Plan::Offload offload,
                            const std::vector<uint32_t>& replicas) const {
  if (offload < proto::Plan::OFFLOAD_OPTIMIZER) return 0;
  const double wb = models::DTypeBytes(training_.dtype());
  const double ob = models::OptimizerBytesPerParam(training_);
  // fp32 master weights and optimizer states and the fp16 gradients; the fp16 weights too with params.
  const double per_param = ob + wb + (offload >= proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS ? wb : 0.0);
  double bytes = 0;
  for (uint32_t l = begin; l < end && l < model_.num_layers(); ++l) {
    const double shard = std::max<uint32_t>(1, l < replicas.size() ? replicas[l] : 1);
    bytes += model_.ParamsPerRank(l, tp, begin != 0) * per_param / shard;
  }
  return bytes / kGib;
}

double MemoryModel::ActivationGibPerSequence(uint32_t begin, uint32_t end, uint32_t tp, bool sequence_parallel,
                                             proto::Recompute recompute, models::SequenceSharding shard) const {
  const uint32_t local_seq = training_.seq_len() / shard.ways();
  double bytes = 0;
  const uint32_t L = model_.num_layers();
  // Profiles measure whole sequences without recomputation.
  const bool profiled = (recompute == proto::RECOMPUTE_NONE || recompute == proto::RECOMPUTE_UNSPECIFIED) &&
                        shard.ways() == 1 && !profiled_bytes_.empty();
  auto act = [&](uint32_t layer) {
    const double arithmetic =
        model_.ActivationBytes(layer, 1, local_seq, tp, sequence_parallel, recompute, training_.dtype(),
                               training_.attention(), training_.dropout(), EpOneExperts(tp));
    return profiled ? std::max(arithmetic, ProfiledBytes(model_.kind(layer), tp)) : arithmetic;
  };
  if (begin == 0 && end > 0) bytes += act(0);
  for (uint32_t c = 0; c < classes_.size(); ++c) {
    const uint32_t blocks = classes_.Count(c, begin, end);
    if (blocks > 0) bytes += blocks * act(classes_.first(c));
  }
  if (end == L && begin < end) bytes += act(L - 1);
  return bytes * (1 + training_.allocator_overhead()) / kGib;
}

models::ExpertSharding MemoryModel::EpOneExperts(uint32_t tp) const {
  models::ExpertSharding x;
  if (!model_.HasMoe()) return x;
  // models::StageExperts of a stage with EP 1: expert TP = TP (each rank routes its TP group's tokens
  // through 1/tp of every expert); one EP rank is never busier than the mean, unless the spec says so.
  x.etp = tp;
  if (training_.moe_load_imbalance() > 0) x.imbalance = training_.moe_load_imbalance();
  if (training_.moe_capacity_factor() > 0) x.imbalance = training_.moe_capacity_factor();
  x.dropless = training_.moe_capacity_factor() <= 0;
  return x;
}

double MemoryModel::PeakLayerGibPerSequence(uint32_t begin, uint32_t end, uint32_t tp, bool sequence_parallel,
                                            proto::Recompute recompute, models::SequenceSharding shard) const {
  const uint32_t L = model_.num_layers();
  const bool any_block = std::max(1u, begin) < std::min(end, L - 1);
  // Ring attention's receive buffers while a block runs (models::EstimateMemory adds the same).
  const double ring = any_block ? models::ContextParallelBufferBytes(model_, 1, training_.seq_len(), tp, shard.cp,
                                                                     training_.dtype())
                                : 0.0;
  const uint32_t local_seq = training_.seq_len() / shard.ways();
  double peak = 0;
  auto consider = [&](uint32_t layer) {
    peak = std::max(peak, model_.RecomputedPeakBytes(layer, 1, local_seq, tp, sequence_parallel, recompute,
                                                     training_.dtype(), training_.attention(), training_.dropout(),
                                                     EpOneExperts(tp)));
  };
  // Only the layer kinds (and block classes) the range holds.
  if (begin == 0 && end > 0) consider(0);
  for (uint32_t c = 0; c < classes_.size(); ++c) {
    if (classes_.Count(c, begin, end) > 0) consider(classes_.first(c));
  }
  if (end == L && begin < end) consider(L - 1);
  return (peak + ring) * (1 + training_.allocator_overhead()) / kGib;
}

double MemoryModel::RuntimeGib(const models::NcclCommunicators& comms, uint32_t device) const {
  const auto& node = cluster_.node(cluster_.device(device).node);
  return models::ContextGib(training_) + models::NcclGib(comms, training_, models::NcclChannelFraction(node));
}

double MemoryModel::WorkspaceGib() const {
  return training_.workspace_gib() + models::ContextGib(training_) + models::NcclGib(most_, training_, widest_channels_);
}

double MemoryModel::WorkspaceGib(const models::NodeInfo& node) const {
  return training_.workspace_gib() + models::ContextGib(training_) +
         models::NcclGib(most_, training_, models::NcclChannelFraction(node));
}

double MemoryModel::InFlight(proto::Plan::Schedule schedule, uint32_t stage, uint32_t stages, uint32_t m,
                             uint32_t virtual_stages) {
  switch (schedule) {
    case proto::Plan::SCHEDULE_GPIPE:
      return m;
    case proto::Plan::SCHEDULE_INTERLEAVED_1F1B: {
      return models::InterleavedInFlight(stage, stages, m, virtual_stages);
    }
    default:
      return std::min<uint32_t>(m, stages - stage);
  }
}

// ---- infeasible attempts ---------------------------------------------------------------------------

void InfeasibleTracker::Offer(const std::string& what, double need_gib, double capacity_gib,
                              const std::string& device) {
  for (const auto& a : best_) {
    if (a.what == what) return;
  }
  best_.push_back({what, device, need_gib, capacity_gib});
  std::stable_sort(best_.begin(), best_.end(), [](const Attempt& a, const Attempt& b) {
    return a.need_gib - a.capacity_gib < b.need_gib - b.capacity_gib;
  });
  if (best_.size() > 3) best_.resize(3);
}

Status InfeasibleTracker::ToStatus(const std::string& planner, const PlanningProblem& problem,
                                   const SearchStats& stats) const {
  std::string msg = planner + ": no plan in its search space fits in memory on " + ProblemSummary(problem) +
                    "; the closest attempts:";
  for (const auto& a : best_) {
    msg += "\n  " + a.what + ": device " + a.device + " needs " + Fixed(a.need_gib) + " GiB of " +
           Fixed(a.capacity_gib) + " GiB (short by " + Fixed(a.need_gib - a.capacity_gib) + " GiB)";
  }
  msg += Rejections(stats);
  msg +=
      "\n  try: recompute (--recompute full), ZeRO stages in the planner's options, a smaller global batch, or more "
      "GPUs";
  return Status::Infeasible(msg);
}

Status NothingFound(const std::string& planner, const PlanningProblem& problem, const SearchStats& stats,
                    const std::string& hint) {
  std::string msg = planner + ": its search space holds no valid plan on " + ProblemSummary(problem);
  msg += Rejections(stats);
  if (!hint.empty()) msg += "\n  " + hint;
  return Status::Infeasible(msg);
}

// ---- layers ----------------------------------------------------------------------------------------

std::vector<std::pair<uint32_t, uint32_t>> EvenLayerSplit(uint32_t layers, uint32_t stages) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  if (stages == 0) return out;
  const uint32_t base = layers / stages, extra = layers % stages;
  uint32_t begin = 0;
  for (uint32_t s = 0; s < stages; ++s) {
    const uint32_t n = base + (s < extra ? 1 : 0);
    out.emplace_back(begin, begin + n);
    begin += n;
  }
  return out;
}

namespace {

using LayerRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// BalanceBlocks's problem: per stage the least and most blocks it may hold and its time with n blocks.
class BlockSplit {
 public:
  BlockSplit(uint32_t blocks, const std::vector<double>& fixed_s, const std::vector<double>& per_block_s,
             const std::vector<uint32_t>& max_blocks)
      : blocks_(blocks), S_(static_cast<uint32_t>(fixed_s.size())), fixed_(fixed_s), per_block_(per_block_s),
        lo_(S_), hi_(S_) {
    for (uint32_t s = 0; s < S_; ++s) {
      lo_[s] = S_ == 1 ? blocks : (s == 0 || s == S_ - 1) ? 0 : 1;
      hi_[s] = std::min(max_blocks[s], blocks);
      empty_ = empty_ || lo_[s] > hi_[s];
      sum_lo_ += lo_[s];
      sum_hi_ += hi_[s];
    }
    empty_ = empty_ || sum_lo_ > blocks || sum_hi_ < blocks;
  }

  // Whether the caps leave no split at all.
  bool Empty() const { return empty_; }
  double Value(uint32_t s, uint32_t n) const { return fixed_[s] + n * per_block_[s]; }

  // Whether every time is finite and non-negative (what the greedy search needs).
  bool Finite() const {
    for (uint32_t s = 0; s < S_; ++s) {
      if (!std::isfinite(fixed_[s]) || !std::isfinite(per_block_[s]) || fixed_[s] < 0 || per_block_[s] < 0) {
        return false;
      }
    }
    return true;
  }

  // Largest block count of stage s whose time stays within T (−1 when even lo[s] exceeds it).
  int64_t Cap(uint32_t s, double T) const {
    const double limit = T * (1 + kTol) + 1e-300;
    if (Value(s, lo_[s]) > limit) return -1;
    return per_block_[s] <= 0 ? hi_[s] : LargestWithin(s, limit);
  }

  // Whether every stage within T holds the blocks.
  bool Feasible(double T) const {
    uint64_t total = 0;
    for (uint32_t s = 0; s < S_; ++s) {
      const int64_t c = Cap(s, T);
      if (c < 0) return false;
      total += static_cast<uint64_t>(c);
    }
    return total >= blocks_;
  }

  // The least feasible largest stage time, found by sorting every (stage, block count) time; nullopt when
  // none is feasible.
  std::optional<double> LeastTimeBySorting() const {
    std::vector<double> values;
    for (uint32_t s = 0; s < S_; ++s) {
      for (uint32_t n = lo_[s]; n <= hi_[s]; ++n) values.push_back(Value(s, n));
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    size_t a = 0, b = values.size() - 1;
    if (!Feasible(values[b])) return std::nullopt;
    while (a < b) {
      const size_t mid = (a + b) / 2;
      if (Feasible(values[mid])) {
        b = mid;
      } else {
        a = mid + 1;
      }
    }
    return values[a];
  }

  // The same time found faster (finite, non-negative times only): the greedy allocation (each next block to
  // the stage that stays fastest with it) gives the min-max time T_g, and T is the least feasible time among
  // the few within the tolerance below T_g (a feasible time admits an allocation within it, so it is at
  // least T_g up to that tolerance).
  std::optional<double> LeastTimeByGreedy() const {
    double largest = 0;
    for (uint32_t s = 0; s < S_; ++s) largest = std::max(largest, Value(s, hi_[s]));
    if (!Feasible(largest)) return std::nullopt;
    double tg = 0;
    std::vector<uint32_t> n = lo_;
    using Next = std::pair<double, uint32_t>;
    std::priority_queue<Next, std::vector<Next>, std::greater<>> next;
    for (uint32_t s = 0; s < S_; ++s) {
      tg = std::max(tg, Value(s, n[s]));
      if (n[s] < hi_[s]) next.emplace(Value(s, n[s] + 1), s);
    }
    for (uint64_t left = blocks_ - sum_lo_; left > 0; --left) {
      const auto [v, s] = next.top();
      next.pop();
      tg = std::max(tg, v);
      if (++n[s] < hi_[s]) next.emplace(Value(s, n[s] + 1), s);
    }
    // The times within the tolerance below T_g, ascending; the first feasible one is T.
    const double floor_t = (tg - 1e-300) / (1 + kTol) * (1 - 4 * kTol);
    std::vector<double> near;
    for (uint32_t s = 0; s < S_; ++s) {
      if (per_block_[s] <= 0) {
        if (Value(s, lo_[s]) <= tg && Value(s, lo_[s]) >= floor_t) near.push_back(Value(s, lo_[s]));
        continue;
      }
      for (int64_t k = LargestWithin(s, tg); k >= lo_[s] && Value(s, static_cast<uint32_t>(k)) >= floor_t; --k) {
        if (Value(s, static_cast<uint32_t>(k)) <= tg) near.push_back(Value(s, static_cast<uint32_t>(k)));
      }
    }
    std::sort(near.begin(), near.end());
    for (double v : near) {
      if (Feasible(v)) return v;
    }
    return tg;
  }

  // The split within largest stage time T with the least sum: the cheapest stages filled first.
  std::optional<LayerRanges> Fill(double T) const {
    std::vector<uint32_t> n = lo_, order(S_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) { return per_block_[x] < per_block_[y]; });
    uint64_t left = blocks_ - sum_lo_;
    for (uint32_t s : order) {
      const uint64_t room = static_cast<uint64_t>(Cap(s, T)) - n[s];
      const uint64_t take = std::min(room, left);
      n[s] += static_cast<uint32_t>(take);
      left -= take;
    }
    if (left != 0) return std::nullopt;
    LayerRanges out;
    uint32_t begin = 0;
    for (uint32_t s = 0; s < S_; ++s) {
      const uint32_t count = n[s] + (s == 0 ? 1 : 0) + (s == S_ - 1 ? 1 : 0);
      out.emplace_back(begin, begin + count);
      begin += count;
    }
    return out;
  }

 private:
  static constexpr double kTol = 1e-12;

  // Largest block count of stage s (per_block > 0) in [lo, hi] whose time stays within `limit`; lo when none.
  int64_t LargestWithin(uint32_t s, double limit) const {
    int64_t n = static_cast<int64_t>(std::floor((limit - fixed_[s]) / per_block_[s]));
    n = std::clamp<int64_t>(n, lo_[s], hi_[s]);
    while (n < hi_[s] && Value(s, static_cast<uint32_t>(n + 1)) <= limit) ++n;
    while (n > lo_[s] && Value(s, static_cast<uint32_t>(n)) > limit) --n;
    return n;
  }

  uint32_t blocks_, S_;
  const std::vector<double>& fixed_;
  const std::vector<double>& per_block_;
  std::vector<uint32_t> lo_, hi_;
  uint64_t sum_lo_ = 0, sum_hi_ = 0;
  bool empty_ = false;
};

bool Valid(const std::vector<double>& fixed_s, const std::vector<double>& per_block_s,
           const std::vector<uint32_t>& max_blocks) {
  return !fixed_s.empty() && per_block_s.size() == fixed_s.size() && max_blocks.size() == fixed_s.size();
}

// The split; the least largest stage time found by the greedy search where `greedy` and the times allow it,
// else by sorting.
std::optional<LayerRanges> Balance(uint32_t blocks, const std::vector<double>& fixed_s,
                                   const std::vector<double>& per_block_s, const std::vector<uint32_t>& max_blocks,
                                   bool greedy) {
  if (!Valid(fixed_s, per_block_s, max_blocks)) return std::nullopt;
  const BlockSplit split(blocks, fixed_s, per_block_s, max_blocks);
  if (split.Empty()) return std::nullopt;
  const std::optional<double> T = greedy && split.Finite() ? split.LeastTimeByGreedy() : split.LeastTimeBySorting();
  if (!T) return std::nullopt;
  return split.Fill(*T);
}

}  // namespace

std::optional<LayerRanges> BalanceBlocks(uint32_t blocks, const std::vector<double>& fixed_s,
                                         const std::vector<double>& per_block_s,
                                         const std::vector<uint32_t>& max_blocks) {
  return Balance(blocks, fixed_s, per_block_s, max_blocks, true);
}

std::optional<LayerRanges> BalanceBlocksBySorting(uint32_t blocks, const std::vector<double>& fixed_s,
                                                  const std::vector<double>& per_block_s,
                                                  const std::vector<uint32_t>& max_blocks) {
  return Balance(blocks, fixed_s, per_block_s, max_blocks, false);
}

// ---- batch -----------------------------------------------------------------------------------------

std::optional<std::vector<uint32_t>> ProportionalSplit(uint32_t total, const std::vector<double>& weights,
                                                       const std::vector<uint32_t>& caps) {
  const size_t R = weights.size();
  if (R == 0 || total < R || caps.size() != R) return std::nullopt;
  uint64_t cap_sum = 0;
  for (uint32_t c : caps) {
    if (c < 1) return std::nullopt;
    cap_sum += c;
  }
  if (cap_sum < total) return std::nullopt;
  double wsum = 0;
  for (double w : weights) wsum += std::max(0.0, w);
  std::vector<uint32_t> x(R, 1);
  uint32_t left = total - static_cast<uint32_t>(R);
  // Each next sequence goes to the replica furthest below its proportional share (largest remainder).
  while (left > 0) {
    size_t best = R;
    double deficit = -std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < R; ++r) {
      if (x[r] >= caps[r]) continue;
      const double share = wsum > 0 ? total * std::max(0.0, weights[r]) / wsum : double(total) / R;
      const double d = share - x[r];
      if (d > deficit + 1e-12) {
        deficit = d;
        best = r;
      }
    }
    if (best == R) return std::nullopt;
    ++x[best];
    --left;
  }
  return x;
}

std::optional<std::vector<uint32_t>> MinMaxSplit(uint32_t total, uint32_t replicas,
                                                 const std::function<double(uint32_t, uint32_t)>& value,
                                                 const std::vector<uint32_t>& caps) {
  if (replicas == 0 || total < replicas || caps.size() != replicas) return std::nullopt;
  std::vector<uint32_t> x(replicas, 1);
  for (uint32_t r = 0; r < replicas; ++r) {
    if (caps[r] < 1) return std::nullopt;
  }
  using Entry = std::pair<double, uint32_t>;  // value after one more sequence, replica
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> next;
  for (uint32_t r = 0; r < replicas; ++r) {
    if (caps[r] > 1) next.emplace(value(r, 2), r);
  }
  for (uint32_t left = total - replicas; left > 0; --left) {
    if (next.empty()) return std::nullopt;
    const auto [v, r] = next.top();
    next.pop();
    ++x[r];
    if (x[r] < caps[r]) next.emplace(value(r, x[r] + 1), r);
  }
  return x;
}

}  // namespace hetsim::planners
