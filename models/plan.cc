#include "models/plan.h"

#include "models/communicator.h"
#include "models/kernels.h"
#include "models/spec_io.h"
#include "models/training.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

namespace hetsim::models {

int PipelineOverMicroBatchBound(const proto::Plan& plan) {
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    if (plan.pipelines(p).num_micro_batches() > kMaxMicroBatches) return p;
  }
  return -1;
}
namespace {

std::string StagePath(int p, int s) {
  return "pipelines[" + std::to_string(p) + "].stages[" + std::to_string(s) + "]";
}

std::string Fixed(double v, int digits = 1) {
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(digits);
  o << v;
  return o.str();
}

}  // namespace

uint32_t TpDegree(const proto::Stage& stage) { return stage.tp_degree() == 0 ? 1 : stage.tp_degree(); }

uint32_t CpDegree(const proto::Stage& stage) { return stage.cp_degree() == 0 ? 1 : stage.cp_degree(); }

uint32_t UlyssesDegree(const proto::Stage& stage) { return stage.ulysses_degree() == 0 ? 1 : stage.ulysses_degree(); }

SequenceSharding StageSharding(const proto::Stage& stage) { return {CpDegree(stage), UlyssesDegree(stage)}; }

uint32_t ReplicaWidth(const proto::Stage& stage) { return TpDegree(stage) * UlyssesDegree(stage) * CpDegree(stage); }

uint32_t DpDegree(const proto::Stage& stage) {
  return static_cast<uint32_t>(stage.devices_size()) / ReplicaWidth(stage);
}

uint32_t StageDevice(const proto::Stage& stage, uint32_t r, uint32_t j, uint32_t k) {
  return stage.devices(static_cast<int>(r * ReplicaWidth(stage) + j * TpDegree(stage) + k));
}

std::pair<uint32_t, uint32_t> HeadsPerTpRank(const TransformerModel& model, uint32_t tp) {
  const uint32_t heads = model.spec().num_attention_heads(), kv = model.kv_heads();
  return {heads % tp == 0 ? heads / tp : heads, kv % tp == 0 ? kv / tp : 1};
}

double ContextParallelBufferBytes(const TransformerModel& model, double batch, uint32_t seq_len, uint32_t tp,
                                  uint32_t cp, proto::DType dtype) {
  if (cp <= 1) return 0;
  // K and V of seq_len / cp tokens; with fewer kv heads than TP ranks each rank keeps one kv head.
  const double kv_heads = std::max(1.0, static_cast<double>(model.kv_heads()) / tp);
  const double block = 2.0 * batch * (static_cast<double>(seq_len) / cp) * kv_heads * model.head_dim() * DTypeBytes(dtype);
  return 2 * block;
}

std::vector<uint32_t> MicroBatchSplit(const proto::Stage& stage, uint32_t micro_batch_size) {
  if (stage.micro_batch_split_size() > 0) {
    return {stage.micro_batch_split().begin(), stage.micro_batch_split().end()};
  }
  const uint32_t dp = std::max<uint32_t>(1, DpDegree(stage));
  std::vector<uint32_t> split(dp, micro_batch_size / dp);
  for (uint32_t r = 0; r < micro_batch_size % dp; ++r) split[r] += 1;
  return split;
}

proto::Plan::Schedule EffectiveSchedule(const proto::Plan& plan) {
  return plan.schedule() == proto::Plan::SCHEDULE_UNSPECIFIED ? proto::Plan::SCHEDULE_1F1B : plan.schedule();
}

proto::Recompute EffectiveRecompute(const proto::Plan& plan, const proto::Training& training) {
  return plan.recompute() == proto::RECOMPUTE_UNSPECIFIED ? training.recompute() : plan.recompute();
}

proto::Plan::Offload EffectiveOffload(const proto::Plan& plan) {
  return plan.offload() == proto::Plan::OFFLOAD_UNSPECIFIED ? proto::Plan::OFFLOAD_NONE : plan.offload();
}

bool OffloadsOptimizer(const proto::Plan& plan) { return EffectiveOffload(plan) >= proto::Plan::OFFLOAD_OPTIMIZER; }

bool OffloadsParams(const proto::Plan& plan) {
  return EffectiveOffload(plan) >= proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS;
}

std::string OffloadName(proto::Plan::Offload offload) {
  switch (offload) {
    case proto::Plan::OFFLOAD_OPTIMIZER: return "optimizer";
    case proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS: return "optimizer_and_params";
    default: return "none";
  }
}

double OffloadGradientBufferBytes(double rank_grad_bytes, double largest_layer_grad_bytes, double dp_bucket_mib) {
  const double bucket = dp_bucket_mib > 0 ? dp_bucket_mib * 1024 * 1024 : largest_layer_grad_bytes;
  return std::min(rank_grad_bytes, 2 * bucket);
}

namespace {

// ---- ValidatePlanStructure's checks (each adds what it finds wrong to `errors`, prefixed with `at`) ----

// The plan's own options: offload against the ZeRO stage, and its calibration.
void CheckPlanOptions(const proto::Plan& plan, const std::string& file, ErrorList& errors) {
  const std::string at = file + ": ";
  if (OffloadsParams(plan) && plan.zero_stage() < 3) {
    errors.Add(at + "offload: optimizer_and_params needs zero_stage 3 (the parameter shards that live in host "
               "memory are ZeRO-3's) but zero_stage is " + std::to_string(plan.zero_stage()) +
               "; set zero_stage: 3 or offload: optimizer");
  } else if (OffloadsOptimizer(plan) && plan.zero_stage() < 2) {
    errors.Add(at + "offload: optimizer needs zero_stage 2 or 3 (ZeRO-Offload moves each rank's reduce-scattered "
               "gradient shard and optimizer shard to host memory) but zero_stage is " +
               std::to_string(plan.zero_stage()) + "; set zero_stage: 2 or 3, or offload: none");
  }
  if (!plan.calibration().empty()) {
    if (Status c = CheckKernelCalibration(ResolveRelative(plan.calibration(), file), "calibration"); !c.ok()) {
      errors.Add(at + c.message());
    }
  }
}

// A stage's devices: each exists, is used once, and can train in the training's dtype.
void CheckStageDevices(const proto::Stage& st, const std::string& spath, const PlanContext& ctx, const std::string& at,
                       std::map<uint32_t, std::string>& owner, ErrorList& errors) {
  if (st.devices_size() == 0) errors.Add(at + spath + ".devices: a stage needs at least one device");
  for (int i = 0; i < st.devices_size(); ++i) {
    const uint32_t d = st.devices(i);
    const std::string dpath = spath + ".devices[" + std::to_string(i) + "]";
    if (d >= ctx.cluster.num_devices()) {
      errors.Add(at + dpath + ": device " + std::to_string(d) + " does not exist; cluster '" +
                 ctx.cluster.name() + "' has devices 0.." + std::to_string(ctx.cluster.num_devices() - 1));
      continue;
    }
    auto [it, inserted] = owner.emplace(d, dpath);
    if (!inserted) {
      errors.Add(at + dpath + ": device " + std::to_string(d) + " (" + ctx.cluster.DeviceName(d) +
                 ") is already used by " + it->second + "; every device may appear once");
    }
    const auto* gpu = ctx.cluster.device(d).gpu;
    if (gpu->PeakTflops(ctx.training.dtype()) <= 0) {
      errors.Add(at + dpath + ": device " + std::to_string(d) + " is a " + gpu->name + ", which cannot train in " +
                 DTypeName(ctx.training.dtype()) + "; set the training spec's dtype: " +
                 SuggestedDType(*gpu, ctx.training.dtype()));
    } else if (auto why = RecipeUnsupported(*gpu, ctx.training.dtype(), ctx.training.fp8_recipe()); !why.empty()) {
      errors.Add(at + dpath + ": device " + std::to_string(d) + ": training.fp8_recipe: " + why);
    }
  }
}

// A stage's TP, CP and Ulysses degrees against its devices, the model's heads, the sequence and the
// pipeline's stage 0.
// Expert parallelism (docs/moe.md): the model has experts to spread, EP divides them, and the expert layout
// (etp × ep × edp) fills the stage's devices; Megatron-Core's MoE layer needs sequence parallelism under TP.
void CheckStageExperts(const proto::Plan& plan, const proto::Stage& st, const std::string& spath,
                       const PlanContext& ctx, const std::string& at, ErrorList& errors) {
  const auto& model = ctx.model;
  const uint32_t ep = EpDegree(st), etp = ExpertTpDegree(st), n = static_cast<uint32_t>(st.devices_size());
  if (!model.HasMoe()) {
    if (ep > 1 || st.expert_tp_degree() > 0) {
      errors.Add(at + spath + "." + (ep > 1 ? "ep_degree" : "expert_tp_degree") + ": model '" + model.name() +
                 "' has no experts (no `moe:` section); remove it");
    }
    return;
  }
  bool in_stage = false;
  for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < model.num_layers(); ++l) {
    in_stage |= model.HasExperts(l);
  }
  const uint32_t experts = model.spec().moe().num_experts();
  if (experts % ep != 0) {
    errors.Add(at + spath + ".ep_degree: " + std::to_string(ep) + " does not divide the model's " +
               std::to_string(experts) + " experts (each EP rank holds num_experts / ep_degree of them); use a "
               "divisor of " + std::to_string(experts));
  }
  if (n > 0 && n % (ep * etp) != 0) {
    errors.Add(at + spath + ".ep_degree: expert_tp_degree × ep_degree = " + std::to_string(etp) + " × " +
               std::to_string(ep) + " does not divide the stage's " + std::to_string(n) +
               " devices (an EP group is ep_degree of the stage's devices; data-parallel replicas of one stage "
               "are listed in one pipeline's stage, not as separate pipelines); list a multiple of " +
               std::to_string(ep * etp) + " devices or lower ep_degree");
  }
  const uint32_t ffn = model.spec().moe().expert_ffn_hidden_size();
  if (etp > 1 && ffn % etp != 0) {
    errors.Add(at + spath + ".expert_tp_degree: " + std::to_string(etp) + " does not divide the experts' width " +
               std::to_string(ffn));
  }
  if (in_stage && TpDegree(st) > 1 && !plan.sequence_parallel()) {
    errors.Add(at + "sequence_parallel: " + spath + " runs MoE layers with tp_degree " + std::to_string(TpDegree(st)) +
               " and Megatron-Core's MoE layer routes each TP rank's sequence shard (it refuses TP without sequence "
               "parallelism); set sequence_parallel: true");
  }
  if (in_stage && plan.zero_stage() >= 3) {
    errors.Add(at + "zero_stage: 3 is not lowered for MoE layers (expert and dense parameters shard over different "
               "groups); use zero_stage 1 or 2 (Megatron-Core's distributed optimizer)");
  }
}

void CheckStageParallelism(const proto::Plan& plan, const proto::Pipeline& pipe, int s, const std::string& spath,
                           const PlanContext& ctx, const std::string& at, ErrorList& errors) {
  const auto& st = pipe.stages(s);
  const auto& model = ctx.model;
  const uint32_t heads = model.spec().num_attention_heads();
  const uint32_t kv = model.kv_heads();
  const uint32_t tp = TpDegree(st);
  if (st.devices_size() > 0 && st.devices_size() % tp != 0) {
    errors.Add(at + spath + ".tp_degree: " + std::to_string(tp) + " does not divide the stage's " +
               std::to_string(st.devices_size()) + " devices");
  }
  if (heads % tp != 0) {
    errors.Add(at + spath + ".tp_degree: " + std::to_string(tp) + " does not divide the model's " +
               std::to_string(heads) + " attention heads");
  } else if (kv % tp != 0 && tp % kv != 0) {
    errors.Add(at + spath + ".tp_degree: " + std::to_string(tp) + " and the model's " + std::to_string(kv) +
               " key/value heads do not divide one another");
  }
  const uint32_t cp = CpDegree(st), uly = UlyssesDegree(st), width = ReplicaWidth(st);
  const uint32_t seq = ctx.training.seq_len();
  if ((cp > 1 || uly > 1) && st.devices_size() % tp == 0 && st.devices_size() % width != 0) {
    errors.Add(at + spath + ".devices: " + std::to_string(st.devices_size()) +
               " devices are not a multiple of tp_degree × ulysses_degree × cp_degree = " + std::to_string(tp) +
               " × " + std::to_string(uly) + " × " + std::to_string(cp) + " = " + std::to_string(width) +
               " (the stage's world size is dp × tp × ulysses × cp); list a multiple of " + std::to_string(width) +
               " devices or lower a degree");
  }
  if (cp > 1 && seq % (2 * cp) != 0) {
    errors.Add(at + spath + ".cp_degree: " + std::to_string(cp) + " needs seq_len divisible by 2 × cp_degree = " +
               std::to_string(2 * cp) + " (load-balanced causal attention cuts each sequence into 2·cp chunks) but "
               "seq_len is " + std::to_string(seq) + "; pick a cp_degree with 2·cp dividing " + std::to_string(seq));
  }
  if (uly > 1) {
    if (seq % uly != 0) {
      errors.Add(at + spath + ".ulysses_degree: " + std::to_string(uly) + " does not divide seq_len " +
                 std::to_string(seq) + " (each rank holds seq_len / ulysses_degree tokens)");
    }
    const auto [heads_per_tp, kv_per_tp] = HeadsPerTpRank(model, tp);
    if (heads_per_tp % uly != 0 || kv_per_tp % uly != 0) {
      errors.Add(at + spath + ".ulysses_degree: " + std::to_string(uly) + " must divide the attention heads (" +
                 std::to_string(heads_per_tp) + ") and key/value heads (" + std::to_string(kv_per_tp) +
                 ") per TP rank (the all-to-all hands each Ulysses rank whole heads); use a divisor of " +
                 std::to_string(std::gcd(heads_per_tp, kv_per_tp)));
    }
  }
  CheckStageExperts(plan, st, spath, ctx, at, errors);
  if (plan.comm().tp_algorithm() == proto::CommOptions::ALGORITHM_NVLS && tp > 1 &&
      st.devices_size() % tp == 0) {
    // NVLS reduces in the NVSwitch: every TP group must sit inside one node with an NVSwitch fabric.
    for (int g = 0; g + static_cast<int>(tp) <= st.devices_size(); g += static_cast<int>(tp)) {
      bool ok = true;
      for (int i = g; i < g + static_cast<int>(tp) && ok; ++i) {
        const uint32_t d = st.devices(i), d0 = st.devices(g);
        if (d >= ctx.cluster.num_devices() || d0 >= ctx.cluster.num_devices()) continue;
        const auto& dev = ctx.cluster.device(d);
        ok = dev.node == ctx.cluster.device(d0).node &&
             ctx.cluster.node(dev.node).fabric.kind() == proto::IntraNodeFabric::KIND_NVSWITCH;
      }
      if (!ok) {
        errors.Add(at + "comm.tp_algorithm: nvls needs every TP group inside one NVSwitch node, but " + spath +
                   "'s TP group of devices[" + std::to_string(g) + ".." + std::to_string(g + tp - 1) +
                   "] spans nodes or a node without an NVSwitch fabric; use tp_algorithm: ring");
        break;
      }
    }
  }
  if (cp > 1 && uly > 1) {
    errors.Add(at + spath + ": cp_degree and ulysses_degree cannot both exceed 1 (hierarchical a2a+p2p context "
               "parallelism is not modelled); keep one of them at 1");
  }
  if ((cp > 1 || uly > 1) && ctx.training.attention() == proto::ATTENTION_STANDARD) {
    errors.Add(at + spath + (cp > 1 ? ".cp_degree" : ".ulysses_degree") +
               ": context parallelism and Ulysses are modelled with flash attention only (Megatron-LM's CP "
               "runs on TransformerEngine's fused attention); set the training spec's attention: flash");
  }
  if (s > 0 && (cp != CpDegree(pipe.stages(0)) || uly != UlyssesDegree(pipe.stages(0)))) {
    errors.Add(at + spath + ".cp_degree: every stage of a pipeline needs the same cp_degree and ulysses_degree "
               "(stage 0 has " + std::to_string(CpDegree(pipe.stages(0))) + " and " +
               std::to_string(UlyssesDegree(pipe.stages(0))) + ", this stage " + std::to_string(cp) + " and " +
               std::to_string(uly) + "): activations pass between stages shard by shard");
  }
}

// A stage's micro-batch split over its DP replicas.
void CheckStageBatch(const proto::Pipeline& pipe, const proto::Stage& st, const std::string& spath,
                     const std::string& at, ErrorList& errors) {
  const uint32_t width = ReplicaWidth(st);
  const uint32_t dp = st.devices_size() % width == 0 ? DpDegree(st) : 0;
  if (st.micro_batch_split_size() > 0) {
    if (dp != 0 && static_cast<uint32_t>(st.micro_batch_split_size()) != dp) {
      errors.Add(at + spath + ".micro_batch_split: has " + std::to_string(st.micro_batch_split_size()) +
                 " entries but the stage has " + std::to_string(dp) +
                 " DP replicas (devices / (tp_degree × ulysses_degree × cp_degree))");
    }
    const uint64_t sum = std::accumulate(st.micro_batch_split().begin(), st.micro_batch_split().end(), 0ull);
    if (sum != pipe.micro_batch_size()) {
      errors.Add(at + spath + ".micro_batch_split: sums to " + std::to_string(sum) +
                 " but the pipeline's micro_batch_size is " + std::to_string(pipe.micro_batch_size()));
    }
    for (int r = 0; r < st.micro_batch_split_size(); ++r) {
      if (st.micro_batch_split(r) == 0) {
        errors.Add(at + spath + ".micro_batch_split[" + std::to_string(r) +
                   "]: every DP replica needs at least one sequence; use fewer devices");
      }
    }
  } else if (dp > pipe.micro_batch_size()) {
    errors.Add(at + spath + ": a micro-batch of " + std::to_string(pipe.micro_batch_size()) +
               " sequences cannot be split over " + std::to_string(dp) +
               " DP replicas; raise micro_batch_size or lower the stage's DP degree");
  }
}

// Interleaved 1F1B: micro-batches a multiple of the stages, enough blocks per stage for its chunks.
void CheckInterleavedPipeline(const proto::Plan& plan, const proto::Pipeline& pipe, int p, const TransformerModel& model,
                              const std::string& at, ErrorList& errors) {
  const std::string ppath = "pipelines[" + std::to_string(p) + "]";
  const uint32_t v = std::max<uint32_t>(1, plan.virtual_stages());
  if (pipe.stages_size() > 0 && pipe.num_micro_batches() % pipe.stages_size() != 0) {
    errors.Add(at + ppath + ".num_micro_batches: interleaved 1F1B needs a multiple of the stage count (" +
               std::to_string(pipe.stages_size()) + ")");
  }
  for (int s = 0; s < pipe.stages_size(); ++s) {
    const auto& st = pipe.stages(s);
    const uint32_t first = std::max<uint32_t>(st.layer_begin(), 1);
    const uint32_t last = std::min<uint32_t>(st.layer_end(), model.num_layers() - 1);
    if (st.layer_end() > st.layer_begin() && (last > first ? last - first : 0) < v) {
      errors.Add(at + StagePath(p, s) + ": interleaved 1F1B with " + std::to_string(v) +
                 " virtual stages needs at least that many transformer blocks per stage (each model chunk "
                 "holds one or more; StageChunks); give the stage more layers or lower virtual_stages");
    }
  }
}

}  // namespace

Status ValidatePlanStructure(const proto::Plan& plan, const PlanContext& ctx, const std::string& file) {
  ErrorList errors;
  const std::string at = file + ": ";
  CheckPlanOptions(plan, file, errors);
  const auto& model = ctx.model;
  const uint32_t num_layers = model.num_layers();
  if (plan.pipelines_size() == 0) errors.Add(at + "pipelines: a plan needs at least one pipeline");
  if (plan.comm().dp_algorithm() == proto::CommOptions::ALGORITHM_NVLS) {
    errors.Add(at + "comm.dp_algorithm: nvls is modelled for TP all-reduces inside a node only; use "
               "comm.tp_algorithm: nvls, and ring, tree or hierarchical for the gradient sync");
  }
  if (Status c = Communicator(ctx.cluster, plan.comm()).Check(file); !c.ok()) errors.Add(c.message());
  if (plan.comm().param_gather_overlap()) {
    // Megatron-LM overlaps the distributed optimizer's parameter all-gathers, which it runs with its
    // overlapped gradient reduction (--overlap-param-gather needs --overlap-grad-reduce).
    if (plan.zero_stage() != 1 && plan.zero_stage() != 2) {
      errors.Add(at + "comm.param_gather_overlap: overlaps ZeRO 1-2's parameter all-gathers after the step, but "
                 "zero_stage is " + std::to_string(plan.zero_stage()) +
                 "; set zero_stage: 1 or 2, or comm.param_gather_overlap: false");
    } else if (!plan.comm().dp_overlap()) {
      errors.Add(at + "comm.param_gather_overlap: runs the all-gathers on the overlapped gradient sync's stream; "
                 "set comm.dp_overlap: true, or comm.param_gather_overlap: false");
    } else if (OffloadsOptimizer(plan)) {
      errors.Add(at + "comm.param_gather_overlap: not lowered with CPU offload (the updated shard comes from host "
                 "memory after the step); set offload: none, or comm.param_gather_overlap: false");
    }
  }
  if (plan.comm().tp_backward_blocking() && plan.sequence_parallel()) {
    errors.Add(at + "comm.tp_backward_blocking: Megatron-LM always issues sequence parallelism's backward calls "
               "behind the GEMMs (the option is for the all-reduces without it); set comm.tp_backward_blocking: "
               "false, or sequence_parallel: false");
  }
  std::map<uint32_t, std::string> owner;  // device -> where it is used
  uint64_t sequences = 0;
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    const std::string ppath = "pipelines[" + std::to_string(p) + "]";
    if (pipe.micro_batch_size() == 0) errors.Add(at + ppath + ".micro_batch_size: must be at least 1");
    if (pipe.num_micro_batches() == 0) errors.Add(at + ppath + ".num_micro_batches: must be at least 1");
    if (pipe.num_micro_batches() > kMaxMicroBatches) {
      errors.Add(at + ppath + ".num_micro_batches: " + std::to_string(pipe.num_micro_batches()) + " micro-batches; at " +
                 "most " + std::to_string(kMaxMicroBatches) + " are simulated (lower the global batch or raise " +
                 "micro_batch_size)");
    }
    sequences += uint64_t{pipe.micro_batch_size()} * pipe.num_micro_batches();
    if (pipe.stages_size() == 0) errors.Add(at + ppath + ".stages: a pipeline needs at least one stage");
    uint32_t expected_begin = 0;
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      const std::string spath = StagePath(p, s);
      CheckStageDevices(st, spath, ctx, at, owner, errors);
      CheckStageParallelism(plan, pipe, s, spath, ctx, at, errors);
      CheckStageBatch(pipe, st, spath, at, errors);
      if (st.layer_begin() != expected_begin) {
        errors.Add(at + spath + ".layer_begin: is " + std::to_string(st.layer_begin()) + " but the previous stage " +
                   (s == 0 ? "(none) ends at 0" : "ends at " + std::to_string(expected_begin)) +
                   "; layers " + (st.layer_begin() > expected_begin ? std::to_string(expected_begin) + ".." +
                                                                          std::to_string(st.layer_begin() - 1) +
                                                                          " would be missing"
                                                                    : "would be covered twice"));
      }
      if (st.layer_end() <= st.layer_begin()) {
        errors.Add(at + spath + ".layer_end: " + std::to_string(st.layer_end()) + " must be greater than layer_begin " +
                   std::to_string(st.layer_begin()) + " (every stage holds at least one layer)");
      }
      expected_begin = std::max(st.layer_end(), st.layer_begin());
    }
    if (pipe.stages_size() > 0 && expected_begin != num_layers) {
      errors.Add(at + ppath + ".stages[" + std::to_string(pipe.stages_size() - 1) + "].layer_end: the last stage ends at " +
                 std::to_string(expected_begin) + " but model '" + model.name() + "' has " + std::to_string(num_layers) +
                 " layers (embedding + " + std::to_string(model.num_blocks()) + " blocks + head); it must end at " +
                 std::to_string(num_layers));
    }
    if (EffectiveSchedule(plan) == proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
      CheckInterleavedPipeline(plan, pipe, p, model, at, errors);
    }
  }
  if (model.HasMoe()) {
    // The stages holding one MoE layer (pipelines of DP replicas) share its expert layout: the expert
    // gradients sync between equal places of it.
    std::map<uint32_t, std::pair<std::pair<uint32_t, uint32_t>, std::string>> layout;
    for (int p = 0; p < plan.pipelines_size(); ++p) {
      for (int s = 0; s < plan.pipelines(p).stages_size(); ++s) {
        const auto& st = plan.pipelines(p).stages(s);
        const std::pair<uint32_t, uint32_t> mine{EpDegree(st), ExpertTpDegree(st)};
        for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < num_layers; ++l) {
          if (!model.HasExperts(l)) continue;
          auto [it, fresh] = layout.emplace(l, std::make_pair(mine, StagePath(p, s)));
          if (!fresh && it->second.first != mine) {
            errors.Add(at + StagePath(p, s) + ".ep_degree: layer " + std::to_string(l) + " is held with ep_degree " +
                       std::to_string(mine.first) + " and expert_tp_degree " + std::to_string(mine.second) + " here but " +
                       std::to_string(it->second.first.first) + " and " + std::to_string(it->second.first.second) +
                       " in " + it->second.second + "; give every replica of a layer the same expert layout");
            break;
          }
        }
      }
    }
  }
  if (plan.pipelines_size() > 0 && sequences != ctx.training.global_batch_size()) {
    errors.Add(at + "pipelines: micro_batch_size × num_micro_batches summed over pipelines is " +
               std::to_string(sequences) + " sequences but the global batch is " +
               std::to_string(ctx.training.global_batch_size()));
  }
  if (plan.virtual_stages() > 1 && EffectiveSchedule(plan) != proto::Plan::SCHEDULE_INTERLEAVED_1F1B) {
    errors.Add(at + "virtual_stages: only the interleaved_1f1b schedule uses virtual stages");
  }
  return errors.ToStatus();
}

namespace {

// One holder of a layer range: a TP group (one sequence shard of one intra-stage DP replica of one stage).
struct Holder {
  uint32_t pipeline, stage, replica, shard;
  const proto::Stage* st;
};

// The routed experts' groups of layers [begin, end): for each place (ep rank, expert-TP rank) of the expert
// layout, the devices at that place in every holding stage's expert-DP replicas (validation makes the holders
// of a layer agree on ep_degree and expert_tp_degree).
void AddExpertSyncGroups(const std::vector<Holder>& holders, uint32_t begin, uint32_t end,
                         std::vector<GradSyncGroup>& groups) {
  std::vector<const proto::Stage*> stages;
  for (const auto& h : holders) {
    if (std::find(stages.begin(), stages.end(), h.st) == stages.end()) stages.push_back(h.st);
  }
  if (stages.empty()) return;
  const uint32_t places = EpDegree(*stages[0]) * ExpertTpDegree(*stages[0]);
  for (uint32_t place = 0; place < places; ++place) {
    GradSyncGroup g{begin, end, 0, 1, {}};
    g.part = GradSyncGroup::Part::kExperts;
    g.expert_shards = places;
    for (const proto::Stage* st : stages) {
      for (uint32_t d = 0; d < ExpertDpDegree(*st); ++d) g.devices.push_back(st->devices(static_cast<int>(d * places + place)));
    }
    if (g.devices.size() >= 2) groups.push_back(std::move(g));
  }
}

}  // namespace

std::vector<LayerRange> StageChunks(const proto::Plan& plan, const proto::Pipeline& pipe, int s,
                                    const TransformerModel& model) {
  const auto& st = pipe.stages(s);
  const uint32_t v = std::max<uint32_t>(1, plan.virtual_stages());
  if (EffectiveSchedule(plan) != proto::Plan::SCHEDULE_INTERLEAVED_1F1B || v == 1) {
    return {{st.layer_begin(), st.layer_end()}};
  }
  const uint32_t L = model.num_layers(), S = static_cast<uint32_t>(pipe.stages_size());
  // Blocks of stage t (its range without the embedding and the head), and of its chunk c.
  const auto blocks = [&](uint32_t t) {
    const auto& x = pipe.stages(static_cast<int>(t));
    const uint32_t first = std::max<uint32_t>(x.layer_begin(), 1), last = std::min<uint32_t>(x.layer_end(), L - 1);
    return last > first ? last - first : 0;
  };
  const auto chunk_blocks = [&](uint32_t t, uint32_t c) { return blocks(t) / v + (c < blocks(t) % v ? 1 : 0); };
  std::vector<LayerRange> out(v);
  uint32_t next = 1;  // the first block not yet dealt
  for (uint32_t c = 0; c < v; ++c) {
    for (uint32_t t = 0; t < S; ++t) {
      const uint32_t n = chunk_blocks(t, c);
      if (t == static_cast<uint32_t>(s)) out[c] = {next, next + n};
      next += n;
    }
  }
  if (s == 0) out.front().begin = 0;                                 // the embedding
  if (static_cast<uint32_t>(s) + 1 == S) out.back().end = L;  // the head
  return out;
}

std::vector<GradSyncGroup> DeriveGradSyncGroups(const proto::Plan& plan, const TransformerModel& model) {
  // Breakpoints: every chunk boundary (stage boundary without interleaving) of every pipeline. Between two
  // breakpoints the holders are fixed.
  std::vector<uint32_t> cuts = {0, model.num_layers()};
  std::vector<std::vector<std::vector<LayerRange>>> held_by(static_cast<size_t>(plan.pipelines_size()));
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    for (int s = 0; s < pipe.stages_size(); ++s) {
      held_by[static_cast<size_t>(p)].push_back(StageChunks(plan, pipe, s, model));
      for (const LayerRange& c : held_by[static_cast<size_t>(p)].back()) cuts.push_back(c.begin);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<GradSyncGroup> groups;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const uint32_t begin = cuts[k], end = cuts[k + 1];
    std::vector<Holder> holders;
    uint32_t chunks = 1;
    for (int p = 0; p < plan.pipelines_size(); ++p) {
      const auto& pipe = plan.pipelines(p);
      for (int s = 0; s < pipe.stages_size(); ++s) {
        const auto& st = pipe.stages(s);
        const auto& held = held_by[static_cast<size_t>(p)][static_cast<size_t>(s)];
        if (std::any_of(held.begin(), held.end(), [&](const LayerRange& c) { return c.contains(begin); })) {
          // CP and Ulysses ranks hold the same weights: their gradients are summed with the DP replicas'.
          for (uint32_t r = 0; r < DpDegree(st); ++r) {
            for (uint32_t j = 0; j < StageSharding(st).ways(); ++j) {
              holders.push_back({static_cast<uint32_t>(p), static_cast<uint32_t>(s), r, j, &st});
            }
          }
          chunks = std::lcm(chunks, TpDegree(st));
        }
      }
    }
    bool moe = false;
    for (uint32_t l = begin; l < end; ++l) moe |= model.HasExperts(l);
    if (holders.size() >= 2) {  // a single replica has nothing to synchronise
      for (uint32_t c = 0; c < chunks; ++c) {
        GradSyncGroup g{begin, end, c, chunks, {}};
        if (moe) g.part = GradSyncGroup::Part::kDense;
        for (const auto& h : holders) {
          const uint32_t tp = TpDegree(*h.st);
          const uint32_t rank = c * tp / chunks;  // the TP rank whose shard contains chunk c
          g.devices.push_back(StageDevice(*h.st, h.replica, h.shard, rank));
        }
        groups.push_back(std::move(g));
      }
    }
    if (moe) AddExpertSyncGroups(holders, begin, end, groups);
  }
  return groups;
}


NcclCommunicators CountNcclCommunicators(uint32_t plan_devices, uint32_t tp, uint32_t sequence_ways,
                                         uint32_t dp_replicas, uint32_t stages, bool holds_tied_end) {
  NcclCommunicators c;
  auto add = [&](uint32_t ranks) {
    if (ranks < 2) return;
    ++c.count;
    if (ranks == 2) ++c.two_rank;
  };
  add(plan_devices);
  add(tp);
  add(sequence_ways);
  add(dp_replicas);
  add(stages);
  if (holds_tied_end && stages > 1) add(2);
  return c;
}

uint32_t PlanDevices(const proto::Plan& plan) {
  uint32_t n = 0;
  for (const auto& p : plan.pipelines()) {
    for (const auto& st : p.stages()) n += static_cast<uint32_t>(st.devices_size());
  }
  return n;
}

Status ValidatePlan(const proto::Plan& plan, const PlanContext& ctx, const std::string& file) {
  HETSIM_RETURN_IF_ERROR(ValidatePlanStructure(plan, ctx, file));
  ErrorList errors;
  const auto memory = EstimateMemory(plan, ctx);
  for (const auto& hm : HostMemoryByNode(memory, ctx.cluster)) {
    if (!hm.oom()) continue;
    errors.Add(file + ": offload: node " + ctx.cluster.node(hm.node).name + " needs " + Fixed(hm.need_gib) +
               " GiB of host memory for its ranks' offloaded shards (optimizer states, gradients" +
               (OffloadsParams(plan) ? ", weights" : "") + ") but has " + Fixed(hm.capacity_gib) +
               " GiB (host_memory_gib); use more GPUs, a lower offload level or a node with more memory");
  }
  for (const auto& dm : memory) {
    if (!dm.oom()) continue;
    errors.Add(file + ": " + StagePath(static_cast<int>(dm.pipeline), static_cast<int>(dm.stage)) + ": device " +
               std::to_string(dm.device) + " (" + ctx.cluster.DeviceName(dm.device) + ", " +
               ctx.cluster.device(dm.device).gpu->name + ") needs " + Fixed(dm.total_gib) + " GiB (weights " +
               Fixed(dm.params_gib) + ", gradients " + Fixed(dm.grads_gib) + ", optimizer " + Fixed(dm.optimizer_gib) +
               ", activations " + Fixed(dm.activations_gib) + ", allocator " + Fixed(dm.allocator_gib) +
               ", workspace " + Fixed(dm.workspace_gib) + ", CUDA context " + Fixed(dm.context_gib) + ", NCCL " +
               Fixed(dm.nccl_gib) + ") but has " + Fixed(dm.capacity_gib) +
               " GiB; use more stages or a higher TP degree, ZeRO, recomputation, smaller micro-batches or CPU offload "
               "(offload: optimizer with ZeRO-2/3, optimizer_and_params with ZeRO-3)");
  }
  return errors.ToStatus(Status::Code::kInfeasible);
}

}  // namespace hetsim::models
