#include "models/cost.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace hetsim::models {

ComputeCost::ComputeCost(const TransformerModel& model, const proto::Training& training, const ProfileDb* profiles,
                         ComputeOptions options)
    : model_(model), training_(training), profiles_(profiles), options_(options) {}

double ComputeCost::Efficiency(double tokens) const {
  return options_.max_efficiency * tokens / (tokens + options_.half_tokens);
}

std::optional<LayerCost> ComputeCost::Profiled(const GpuSpec& gpu, uint32_t layer, uint32_t tp,
                                               double micro_batch, SequenceSharding shard) const {
  if (profiles_ == nullptr || profiles_->empty()) return std::nullopt;
  // A pass sharded over w = cp · u ranks does, per rank, the work of micro_batch / w whole sequences: its
  // GEMMs see b·s/w tokens, Ulysses' attention runs b sequences with 1/u of the heads, and CP's
  // load-balanced chunks give every rank 1/cp of the causal attention's FLOPs. So the profile, measured at
  // the whole sequence, is read at micro_batch / w (its composition of measured sizes, docs/profiles.md).
  return profiles_->Lookup(gpu.name, model_.name(), model_.kind(layer), tp, micro_batch / shard.ways(),
                           training_.seq_len());
}

bool ComputeCost::TpIncludedInProfile(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch) const {
  auto p = Profiled(gpu, layer, tp, micro_batch);
  return p.has_value() && p->includes_tp_communication;
}

size_t ComputeCost::KeyHash::operator()(const Key& k) const {
  size_t h = std::hash<const void*>()(k.gpu);
  h = h * 31 + static_cast<size_t>(k.kind);
  h = h * 31 + k.block_class;
  h = h * 31 + k.experts.ep * 64 + k.experts.etp;
  h = h * 31 + std::hash<double>()(k.experts.imbalance);
  h = h * 31 + (k.experts.alltoall ? 2 : 0) + (k.experts.dropless ? 1 : 0);
  h = h * 31 + k.tp;
  h = h * 31 + std::hash<double>()(k.micro_batch);
  h = h * 31 + static_cast<size_t>(k.pass);
  return h * 31 + k.shard.cp * 1024 + k.shard.ulysses;
}

KernelShape ComputeCost::ShapeOf(uint32_t tp, double micro_batch, SequenceSharding shard,
                                 const ExpertSharding& experts) const {
  KernelShape shape;
  shape.micro_batch = micro_batch;
  shape.seq_len = training_.seq_len();
  shape.tp = tp;
  shape.dtype = training_.dtype();
  if (training_.fp8_recipe() != proto::FP8_RECIPE_UNSPECIFIED) shape.fp8_recipe = training_.fp8_recipe();
  shape.attention = training_.attention();
  shape.shard = shard;
  shape.experts = experts;
  return shape;
}

double ComputeCost::PassSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                                Pass pass, SequenceSharding shard, const ExpertSharding& experts) const {
  if (options_.model == ComputeModel::kTokenEfficiency) {
    // CP and Ulysses split a layer's FLOPs evenly (load-balanced causal chunks; whole heads).
    const double ways = shard.ways();
    const double flops = (pass == Pass::kForward ? model_.ForwardFlops(layer, micro_batch, training_.seq_len())
                                                 : model_.BackwardFlops(layer, micro_batch, training_.seq_len())) /
                         (tp * ways);
    if (flops == 0) return 0;
    const double peak = gpu.PeakTflops(training_.dtype()) * 1e12;
    const double tokens = micro_batch * training_.seq_len() / (tp * ways);
    return flops / (peak * Efficiency(tokens));
  }
  const bool moe = model_.HasExperts(layer);
  const Key key{&gpu, model_.kind(layer), model_.BlockClass(layer), tp, micro_batch, pass, shard,
                moe ? experts : ExpertSharding{}};
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  const KernelShape shape = ShapeOf(tp, micro_batch, shard, key.experts);
  const double t =
      TimeKernels(LayerKernels(model_, layer, pass, shape), gpu, KernelParamsFor(gpu, options_.calibration), training_.dtype()).seconds();
  std::lock_guard<std::mutex> lock(cache_mu_);
  cache_[key] = t;
  return t;
}

double ComputeCost::OverheadSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                                    bool backward, SequenceSharding shard) const {
  if (profiles_ == nullptr || profiles_->empty() || micro_batch <= 0) return 0;
  const LayerKind kind = model_.kind(layer);
  if (kind != (backward ? LayerKind::kHead : LayerKind::kEmbedding)) return 0;
  // Sequence-sharded passes: the overheads of the tokens the rank holds (as Profiled reads the layers).
  auto o = profiles_->Overhead(gpu.name, model_.name(), tp, micro_batch / shard.ways(), training_.seq_len());
  if (!o) return 0;
  return backward ? o->fb_sync_s : o->batch_generation_s;
}

double ComputeCost::ForwardSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                                   SequenceSharding shard, const ExpertSharding& experts) const {
  if (micro_batch <= 0) return 0;
  const double overhead = OverheadSeconds(gpu, layer, tp, micro_batch, /*backward=*/false, shard);
  if (auto p = Profiled(gpu, layer, tp, micro_batch, shard)) return p->forward_s + overhead;
  return PassSeconds(gpu, layer, tp, micro_batch, Pass::kForward, shard, experts) + overhead;
}

double ComputeCost::BackwardSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                                    proto::Recompute recompute, SequenceSharding shard,
                                    const ExpertSharding& experts) const {
  if (micro_batch <= 0) return 0;
  if (recompute == proto::RECOMPUTE_UNSPECIFIED) recompute = training_.recompute();
  // Recomputation repeats the layer's forward pass, not the per-micro-batch overhead.
  const double fwd = ForwardSeconds(gpu, layer, tp, micro_batch, shard, experts) -
                     OverheadSeconds(gpu, layer, tp, micro_batch, /*backward=*/false, shard);
  double bwd = OverheadSeconds(gpu, layer, tp, micro_batch, /*backward=*/true, shard);
  if (auto p = Profiled(gpu, layer, tp, micro_batch, shard)) {
    bwd += p->backward_s;
  } else {
    bwd += PassSeconds(gpu, layer, tp, micro_batch, Pass::kBackward, shard, experts);
  }
  if (model_.kind(layer) != LayerKind::kTransformer) return bwd;
  if (recompute == proto::RECOMPUTE_FULL) return bwd + fwd;
  if (recompute == proto::RECOMPUTE_OP_SELECTIVE) {
    return bwd + fwd * model_.OpSelectiveRecomputedShare(layer, training_.seq_len());
  }
  if (recompute == proto::RECOMPUTE_SELECTIVE) {
    // The attention core (QK^T and AV: 4·b·s²·h FLOPs) is recomputed unless the modules leave it out, and
    // the other modules' kernels (their share of the forward's kernel time).
    const RecomputeModules modules = ModulesOf(training_);
    double share = RecomputedModuleShare(gpu, layer, tp, micro_batch, shard, experts);
    if (Recomputes(modules, proto::RECOMPUTE_MODULE_CORE_ATTN)) {
      const double s = training_.seq_len();
      const double core = 4.0 * micro_batch * s * s * model_.spec().hidden_size() / tp;
      share += core / (model_.ForwardFlops(layer, micro_batch, training_.seq_len()) / tp);
    }
    return bwd + fwd * share;
  }
  return bwd;
}

double ComputeCost::RecomputedModuleShare(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                                          SequenceSharding shard, const ExpertSharding& experts) const {
  const RecomputeModules modules = ModulesOf(training_) & ~kCoreAttentionOnly;
  if (modules == 0) return 0;
  const bool moe = model_.IsMoe(layer);
  const Key key{&gpu, model_.kind(layer), model_.BlockClass(layer), tp, micro_batch, Pass::kForward, shard,
                moe ? experts : ExpertSharding{}};
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = module_share_.find(key); it != module_share_.end()) return it->second;
  }
  const KernelShape shape = ShapeOf(tp, micro_batch, shard, key.experts);
  const KernelParams& p = KernelParamsFor(gpu, options_.calibration);
  const double all = TimeKernels(LayerKernels(model_, layer, Pass::kForward, shape), gpu, p, training_.dtype()).gpu_s;
  const double part = TimeKernels(RecomputedModuleKernels(model_, layer, shape, modules), gpu, p, training_.dtype()).gpu_s;
  const double share = all > 0 ? part / all : 0;
  std::lock_guard<std::mutex> lock(cache_mu_);
  module_share_[key] = share;
  return share;
}

double ComputeCost::PassOverheadSeconds(const GpuSpec& gpu) const {
  return options_.model == ComputeModel::kKernel ? KernelParamsFor(gpu, options_.calibration).pass_overhead_s : 0;
}

double ComputeCost::StragglerCv(const GpuSpec& gpu) const {
  return KernelParamsFor(gpu, options_.calibration).straggler_cv;
}

double ComputeCost::IterationOverheadSeconds(const GpuSpec& gpu) const {
  return options_.model == ComputeModel::kKernel ? KernelParamsFor(gpu, options_.calibration).iteration_overhead_s : 0;
}

double ComputeCost::CollectiveEfficiency(const GpuSpec& gpu) const {
  return options_.model == ComputeModel::kKernel ? KernelParamsFor(gpu, options_.calibration).collective_efficiency : 1;
}

double ComputeCost::CollectiveLatencySeconds(const GpuSpec& gpu, uint32_t group_size) const {
  return options_.model == ComputeModel::kKernel ? KernelParamsFor(gpu, options_.calibration).CollectiveLatency(group_size) : 0;
}

std::optional<double> ComputeCost::OptimizerSecondsPerParam(const GpuSpec& gpu) const {
  if (profiles_ == nullptr || profiles_->empty()) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = optimizer_rate_.find(&gpu); it != optimizer_rate_.end()) return it->second;
  }
  // A transformer block's step at the smallest profiled TP degree that has one (Adam is memory-bound:
  // its time is proportional to the parameters a rank updates, whatever the TP degree).
  std::optional<double> rate;
  const uint32_t block = model_.num_layers() > 2 ? 1 : 0;
  for (uint32_t tp = 1; tp <= 1024 && !rate; tp *= 2) {
    auto p = profiles_->Lookup(gpu.name, model_.name(), model_.kind(block), tp, 1, training_.seq_len());
    const double params = model_.ParamsPerRank(block, tp, false);
    if (p && p->optimizer_s > 0 && params > 0) rate = p->optimizer_s / params;
  }
  std::lock_guard<std::mutex> lock(cache_mu_);
  optimizer_rate_[&gpu] = rate;
  return rate;
}

bool ComputeCost::OptimizerProfiled(const GpuSpec& gpu) const {
  return OptimizerSecondsPerParam(gpu).has_value();
}

double ComputeCost::OptimizerSeconds(const GpuSpec& gpu, double params) const {
  if (auto rate = OptimizerSecondsPerParam(gpu)) return params * *rate;
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

double HostOptimizerSeconds(double params, uint32_t host_ranks, double cpu_adam_params_per_s) {
  return params * std::max<uint32_t>(1, host_ranks) / cpu_adam_params_per_s;
}

double GradientBytes(const TransformerModel& model, uint32_t layer, uint32_t tp, proto::DType dtype,
                     bool head_holds_embedding_copy) {
  return model.ParamsPerRank(layer, tp, head_holds_embedding_copy) * DTypeBytes(dtype);
}

std::vector<double> GroupCollectiveEfficiencies(const std::vector<std::vector<uint32_t>>& groups,
                                                const std::function<double(uint32_t device)>& efficiency) {
  std::vector<double> out(groups.size(), 1.0);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (uint32_t d : groups[g]) out[g] = std::min(out[g], efficiency(d));
  }
  return out;
}

double MeshFraction(const NodeInfo& node, uint32_t members) {
  if (node.fabric.kind() != proto::IntraNodeFabric::KIND_XGMI || node.num_gpus < 2 || members < 2) return 1;
  // The MI300 series' platform (8 OAMs, 7 links each) only: an MI250X package's two dies share four links.
  if (node.gpu == nullptr || node.gpu->name.rfind("mi3", 0) != 0) return 1;
  return std::min(1.0, static_cast<double>(members - 1) / static_cast<double>(node.num_gpus - 1));
}

std::vector<GroupComm> GroupComms(const Cluster& cluster, const std::vector<std::vector<uint32_t>>& groups,
                                  const std::function<double(uint32_t device)>& efficiency, const ComputeCost& cost) {
  const std::vector<double> eff = GroupCollectiveEfficiencies(groups, efficiency);
  std::vector<GroupComm> out(groups.size());
  const bool kernel = cost.options().model == ComputeModel::kKernel;
  std::unordered_map<const GpuSpec*, const KernelParams*> params;  // one calibration look-up per type
  for (size_t g = 0; g < groups.size(); ++g) {
    out[g].efficiency = eff[g];
    if (!kernel || groups[g].size() < 2) continue;
    out[g].nccl = NcclGroupOf(cluster, groups[g]);
    if (out[g].nccl.nodes >= 2 && out[g].nccl.node_bandwidth_bytes_s > 0) {
      out[g].net = &NetworkParamsFor(out[g].nccl.nic, cost.options().calibration);
    }
    if (out[g].nccl.nodes >= 2) continue;
    // Inside one node: a member type's measured bus bandwidth at this size replaces its efficiency.
    const auto n = static_cast<uint32_t>(groups[g].size());
    double e = std::numeric_limits<double>::infinity();
    bool measured = false;
    for (uint32_t d : groups[g]) {
      const DeviceInfo& dev = cluster.device(d);
      auto it = params.find(dev.gpu);
      if (it == params.end()) it = params.emplace(dev.gpu, &KernelParamsFor(*dev.gpu, cost.options().calibration)).first;
      const double bus = it->second->CollectiveBusBandwidth(n);
      if (bus > 0) {
        measured = true;
        e = std::min(e, bus / IntraNodeLinkBytesPerS(cluster.node(dev.node), *it->second));
      } else {
        e = std::min(e, efficiency(d));
      }
    }
    if (measured) {
      out[g].efficiency = e;
    } else {
      out[g].efficiency *= MeshFraction(cluster.node(cluster.device(groups[g][0]).node), n);
    }
  }
  return out;
}

proto::IntraNodeFabric CalibratedFabric(const NodeInfo& node, const KernelParams& k) {
  proto::IntraNodeFabric f = node.fabric;
  if (k.link_bandwidth_bytes_s > 0) {
    f.set_bandwidth_gbyte_s(k.link_bandwidth_bytes_s / 1e9);
    if (f.kind() == proto::IntraNodeFabric::KIND_PCIE) f.set_pcie_bandwidth_gbyte_s(k.link_bandwidth_bytes_s / 1e9);
  }
  if (k.link_latency_s >= 0) f.set_latency_us(k.link_latency_s * 1e6);
  return f;
}

double IntraNodeLinkBytesPerS(const NodeInfo& node, const KernelParams& k) {
  const proto::IntraNodeFabric f = CalibratedFabric(node, k);
  const double fabric = f.bandwidth_gbyte_s() * 1e9;
  return f.kind() == proto::IntraNodeFabric::KIND_PCIE ? std::min(fabric, f.pcie_bandwidth_gbyte_s() * 1e9) : fabric;
}

CollectivePrice PriceCollective(const Op& lo, const GroupComm& g, double intra_latency_s) {
  const bool nccl_kind = lo.collective == CollectiveKind::kAllReduce || lo.collective == CollectiveKind::kReduceScatter ||
                         lo.collective == CollectiveKind::kAllGather;
  if (g.net != nullptr && nccl_kind && lo.algorithm == Algorithm::kRing && lo.bytes > 0) {
    const uint32_t calls = std::max(1u, lo.calls);
    const NcclCall c = ChooseNccl(lo.collective, lo.bytes / calls, g.nccl, *g.net);
    return {calls * c.latency_s, lo.bytes / c.efficiency};
  }
  return {lo.calls * intra_latency_s, lo.bytes / g.efficiency};
}

}  // namespace hetsim::models
