// Cost building blocks shared by the simulator and the planners' cost models: how long a layer computes
// on a GPU, and how many bytes each kind of communication moves. Each paper's planner composes these
// into its own cost model; the simulator plays them on the platform.
//
// Compute time of a layer (forward or backward) on one GPU:
//   - from a measured profile (ProfileDb) when one covers (GPU, model, TP, sequence length);
//   - otherwise (the default, ComputeModel::kKernel) from the per-kernel model of models/kernels.h: the
//     layer's kernels after TP sharding, each costed by the GPU type's roofline and fixed costs;
//   - or (ComputeModel::kTokenEfficiency, the closed form the tests and the planners' papers use):
//     FLOPs / TP ÷ (peak × efficiency), where the efficiency saturates with the work per GPU:
//     eff = max_efficiency · t / (t + half_tokens), t = tokens per micro-batch per rank.
// Backward time includes recomputation: + forward (full) or + the attention core's FLOPs (selective).
//
// What else a measured profile supplies (docs/profiles.md):
//   - per-micro-batch overheads (Metis's fb_sync and batch generation): fb_sync is charged with the
//     head's backward pass and batch generation with the embedding's forward pass, so that every consumer
//     of the layer times (the simulator, the analytic model) pays them once per micro-batch on the last and
//     the first pipeline stage, as Metis's estimator does; OverheadSeconds tells them apart;
//   - the optimizer step: a profile's optimizer_s of a transformer block over the block's parameters per
//     TP rank gives the GPU's seconds per parameter, which OptimizerSeconds uses in place of the HBM model.
// (Profiled activations are read by the planners' memory checks, planners::MemoryModel.)
#pragma once

#include <functional>
#include <mutex>
#include <unordered_map>

#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/nccl.h"
#include "models/profile_db.h"
#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"
#include "models/transformer.h"

namespace hetsim::models {

enum class ComputeModel : uint8_t {
  kKernel,           // models/kernels.h, with the GPU type's KernelParams (fixed costs included)
  kTokenEfficiency,  // FLOPs at a token-dependent efficiency; no fixed costs
};

struct ComputeOptions {
  ComputeModel model = ComputeModel::kKernel;
  std::string calibration;  // kKernel: the bundled calibration (models/kernels.h); "" = default
  // kTokenEfficiency:
  double max_efficiency = 0.60;  // fraction of peak a large GEMM-bound layer reaches
  double half_tokens = 256;      // tokens per rank at which half of max_efficiency is reached
  // Optimizer step: a memory-bound pass over this many bytes per parameter (Adam mixed precision:
  // read/write fp32 master, two moments, the gradient and the bf16 weight).
  double optimizer_bytes_per_param = 32;
};

class ComputeCost {
 public:
  ComputeCost(const TransformerModel& model, const proto::Training& training, const ProfileDb* profiles = nullptr,
              ComputeOptions options = {});

  // `shard`: context parallelism / Ulysses (each rank computes seq_len / ways tokens and its share of
  // the attention); measured profiles are taken at the whole sequence, so a sharded pass always uses the
  // configured model.
  // `experts`: an MoE layer's expert layout on the rank (plan.h StageExperts; dense layers ignore it).
  double ForwardSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                        SequenceSharding shard = {}, const ExpertSharding& experts = {}) const;
  // Includes recomputation per the training spec (or `recompute` when given).
  double BackwardSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                         proto::Recompute recompute = proto::RECOMPUTE_UNSPECIFIED, SequenceSharding shard = {},
                         const ExpertSharding& experts = {}) const;
  // The optimizer step over `params` parameters held by one device: the profiled seconds per parameter
  // when a profile of this GPU and model has optimizer_s (OptimizerProfiled), else a memory-bound pass of
  // optimizer_bytes_per_param bytes per parameter through HBM.
  double OptimizerSeconds(const GpuSpec& gpu, double params) const;
  bool OptimizerProfiled(const GpuSpec& gpu) const;
  // The part of ForwardSeconds (`backward` false) or BackwardSeconds (true) of `layer` that is the
  // profile's per-micro-batch overhead: batch generation in the embedding's forward pass, fb_sync in the
  // head's backward pass; 0 for every other pass or without a profiled overhead.
  double OverheadSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch, bool backward,
                         SequenceSharding shard = {}) const;

  // The analytic efficiency at `tokens` tokens per rank (kTokenEfficiency).
  double Efficiency(double tokens) const;
  // Fixed costs of the kernel model (0 under kTokenEfficiency): host time per micro-batch and pass on a
  // stage, per iteration, and the fixed cost α of one collective call over `group_size` devices.
  double PassOverheadSeconds(const GpuSpec& gpu) const;
  double IterationOverheadSeconds(const GpuSpec& gpu) const;
  // The calibration's straggler_cv for this GPU type (models/stragglers.h), whatever the compute model.
  double StragglerCv(const GpuSpec& gpu) const;
  double CollectiveLatencySeconds(const GpuSpec& gpu, uint32_t group_size) const;
  // The fraction of link bandwidth collectives reach on this GPU type (calibration; 1 under
  // kTokenEfficiency).
  double CollectiveEfficiency(const GpuSpec& gpu) const;
  const ComputeOptions& options() const { return options_; }
  // True when a measured profile times this layer and its times already include the layer's TP
  // collectives (so TP communication must not be added again).
  bool TpIncludedInProfile(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch) const;
  // True when a measured profile times this layer on `gpu` at TP tp (ForwardSeconds and BackwardSeconds
  // use it).
  bool IsProfiled(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch) const {
    return Profiled(gpu, layer, tp, micro_batch).has_value();
  }

  const TransformerModel& model() const { return model_; }
  const proto::Training& training() const { return training_; }

 private:
  std::optional<LayerCost> Profiled(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                                    SequenceSharding shard = {}) const;
  // Profiled seconds per parameter of the optimizer step on `gpu`; nullopt without optimizer_s.
  std::optional<double> OptimizerSecondsPerParam(const GpuSpec& gpu) const;
  // One pass of `layer` without recomputation, by the configured model.
  double PassSeconds(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch, Pass pass,
                     SequenceSharding shard, const ExpertSharding& experts = {}) const;
  // The kernel model's shape of a pass under this training.
  KernelShape ShapeOf(uint32_t tp, double micro_batch, SequenceSharding shard, const ExpertSharding& experts) const;
  struct Key {
    const GpuSpec* gpu;
    LayerKind kind;
    uint32_t block_class;  // TransformerModel::BlockClass: blocks of one class cost the same
    uint32_t tp;
    double micro_batch;
    Pass pass;
    SequenceSharding shard;
    ExpertSharding experts;
    bool operator==(const Key& o) const {
      return gpu == o.gpu && kind == o.kind && block_class == o.block_class && tp == o.tp &&
             micro_batch == o.micro_batch && pass == o.pass && shard == o.shard && experts == o.experts;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  // The share of `layer`'s forward GPU time that the training's recompute modules other than the attention
  // core repeat in a selective backward (models/kernels.h RecomputedModuleKernels); 0 without such modules.
  double RecomputedModuleShare(const GpuSpec& gpu, uint32_t layer, uint32_t tp, double micro_batch,
                               SequenceSharding shard, const ExpertSharding& experts) const;
  const TransformerModel& model_;
  const proto::Training& training_;
  const ProfileDb* profiles_;
  ComputeOptions options_;
  // Kernel-model pass times (every block has the same shape); shared by the planners' search threads.
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<Key, double, KeyHash> cache_;
  mutable std::unordered_map<Key, double, KeyHash> module_share_;  // RecomputedModuleShare's, guarded by cache_mu_
  mutable std::unordered_map<const GpuSpec*, std::optional<double>> optimizer_rate_;  // guarded by cache_mu_
};

// The optimizer step of one rank on its node's host CPU under CPU offload (models/lowering.h: the optimizer
// operation's `host_ranks`): the node's CPU updates cpu_adam_params_per_s parameters per second with all
// cores, and its `host_ranks` ranks each get an equal share of them (DeepSpeed gives every local rank its
// own cores; ZeRO-Offload §4.1 runs the CPU-Adam of each rank's partition in parallel), so a rank's
// `params` take params · host_ranks / cpu_adam_params_per_s seconds.
double HostOptimizerSeconds(double params, uint32_t host_ranks, double cpu_adam_params_per_s);

// Bytes each communication of one micro-batch moves (before any algorithm's 2(n−1)/n factors).
// TP (Megatron-LM, Shoeybi et al. 2019 §3): 2 all-reduces of b·s·h activations per block in the forward
// pass and 2 in the backward pass (with sequence parallelism: the same bytes as all-gather +
// reduce-scatter pairs); the embedding and head add one each.
double TpAllReduceBytesPerLayer(const TransformerModel& model, uint32_t layer, double micro_batch, uint32_t seq_len,
                                proto::DType dtype);
// Number of TP all-reduces of that size in the forward (and again in the backward) pass of `layer`.
int TpAllReducesPerLayer(const TransformerModel& model, uint32_t layer);
// PP: the hidden states of a micro-batch (b·s·h elements) cross each stage boundary once per direction.
double PipelineBoundaryBytes(const TransformerModel& model, double micro_batch, uint32_t seq_len, proto::DType dtype);
// DP: gradient bytes of `layer` that one TP rank of degree `tp` synchronises.
double GradientBytes(const TransformerModel& model, uint32_t layer, uint32_t tp, proto::DType dtype,
                     bool head_holds_embedding_copy);

// One collective efficiency per communication group (lists of device ids): the least of its members' GPU
// types' (ComputeCost::CollectiveEfficiency), so that every rank of a ring carries the same bytes and the
// ring runs at its slowest member's fraction. The simulator and the played estimate both use it.
// `efficiency(device)`: the collective efficiency of the GPU type a device computes as.
std::vector<double> GroupCollectiveEfficiencies(const std::vector<std::vector<uint32_t>>& groups,
                                                const std::function<double(uint32_t device)>& efficiency);

// The share of a GPU's fabric bandwidth a collective of `members` GPUs inside `node` can use. An xGMI node of
// the MI300 series (AMD Instinct MI300X, MI325X, MI355X) is a full mesh, not a switch: each GPU has one
// Infinity Fabric link to each of the node's n − 1 others (7 × 64 GB/s per direction on an MI300X; the
// catalog's fabric bandwidth is their sum), and RCCL's rings among k members can only use the k − 1 links
// between them: (k − 1) / (n − 1) of the sum (a TP 2 pair gets one link, 64 GB/s; TP 8 on 8 GPUs all seven).
// All-to-alls among k members alike. Point-to-point transfers (pipeline sends) keep the platform's port. 1 on
// every other fabric (an NVSwitch port reaches every peer at its full bandwidth) and on MI250X nodes (its
// packages' two dies share four links, the packages fewer: not a full mesh; the switch model stays).
double MeshFraction(const NodeInfo& node, uint32_t members);

// How one communication group's collectives are priced, the same in the simulator (sim/program.cc) and the
// played estimate (planners/lowering_programs.cc).
struct GroupComm {
  // The least of the members' GPU collective efficiencies (GroupCollectiveEfficiencies), times MeshFraction
  // for a group inside one xGMI node; for a group inside one node whose members' types have a measured bus
  // bandwidth at its size (KernelParams::CollectiveBusBandwidth), that bandwidth over the node's GPU link
  // (IntraNodeLinkBytesPerS), so that the played ring's steps run at the measured bus bandwidth.
  double efficiency = 1;
  NcclGroup nccl;         // the group's shape; nodes ≥ 2: priced as NCCL runs it (models/nccl.h)
  const NetworkParams* net = nullptr;  // the calibration's network values for its bottleneck NIC (nodes ≥ 2)
};
// `node`'s intra-node fabric under `k`: a measured link (link_bandwidth_bytes_s, link_latency_s) replaces the
// cluster's bandwidth and latency (on a PCIe fabric, the GPUs' PCIe links' bandwidth too). The platform
// (sim/platform.cc) builds its links from it.
proto::IntraNodeFabric CalibratedFabric(const NodeInfo& node, const KernelParams& k);
// The bandwidth one GPU-to-GPU transfer inside `node` gets on the platform's routes under `k`: the fabric
// port's on NVLink-like fabrics; on a PCIe fabric the GPU's PCIe link capped by the fabric's peer-to-peer
// bandwidth (CalibratedFabric's).
double IntraNodeLinkBytesPerS(const NodeInfo& node, const KernelParams& k);
// Every group's GroupComm under `cost`'s calibration. NCCL's model applies under the kernel model only (the
// token-efficiency model has no fixed costs).
std::vector<GroupComm> GroupComms(const Cluster& cluster, const std::vector<std::vector<uint32_t>>& groups,
                                  const std::function<double(uint32_t device)>& efficiency, const ComputeCost& cost);
// A lowered collective's fixed cost (all its calls) and the bytes its played transfers carry. Ring
// all-reduces, reduce-scatters and all-gathers of a group spanning nodes: NCCL's choice for one call's bytes
// (ChooseNccl); every other collective: `intra_latency_s` per call (ComputeCost::CollectiveLatencySeconds of
// the rank's GPU) and the bytes over the group's efficiency. A plan's explicit tree or hierarchical
// algorithm keeps its played algorithm.
struct CollectivePrice {
  double latency_s = 0;
  double bytes = 0;
};
CollectivePrice PriceCollective(const Op& lo, const GroupComm& g, double intra_latency_s);

}  // namespace hetsim::models
