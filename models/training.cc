#include "models/training.h"

#include <iterator>

namespace hetsim::models {

Result<proto::Training> ResolveTraining(proto::Training t, const TransformerModel& model, const std::string& file) {
  ErrorList errors;
  const auto& defaults = model.spec().defaults();
  if (t.global_batch_size() == 0) t.set_global_batch_size(defaults.global_batch_size());
  if (t.seq_len() == 0) t.set_seq_len(defaults.seq_len());
  if (t.global_batch_size() == 0) {
    errors.Add(file + ": global_batch_size: not given and model '" + model.name() +
               "' has no default; set it (sequences per iteration)");
  }
  if (t.seq_len() == 0) {
    errors.Add(file + ": seq_len: not given and model '" + model.name() + "' has no default; set it");
  } else if (t.seq_len() > model.spec().max_seq_len()) {
    errors.Add(file + ": seq_len: " + std::to_string(t.seq_len()) + " exceeds the model's max_seq_len " +
               std::to_string(model.spec().max_seq_len()));
  }
  if (t.moe_load_imbalance() > 0 && t.moe_load_imbalance() < 1) {
    errors.Add(file + ": moe_load_imbalance: " + std::to_string(t.moe_load_imbalance()) +
               " is below 1 (the busiest rank's routed tokens over its even share); use 1 or more, or 0 for the default");
  }
  if (t.moe_capacity_factor() > 0 && t.moe_capacity_factor() < 1) {
    errors.Add(file + ": moe_capacity_factor: " + std::to_string(t.moe_capacity_factor()) +
               " drops routed tokens even when routing is even; Megatron-Core's drop-and-pad runs 1 or more (0: dropless)");
  }
  if ((t.moe_load_imbalance() > 0 || t.moe_capacity_factor() > 0) && !model.HasMoe()) {
    errors.Add(file + ": " + std::string(t.moe_load_imbalance() > 0 ? "moe_load_imbalance" : "moe_capacity_factor") +
               ": model '" + model.name() + "' has no experts; remove it");
  }
  if (t.fp8_recipe() != proto::FP8_RECIPE_UNSPECIFIED && t.dtype() != proto::DTYPE_FP8) {
    errors.Add(file + ": fp8_recipe: set but dtype is not fp8; remove it or set dtype: fp8");
  }
  if (!t.recompute_modules().empty() && t.recompute() != proto::RECOMPUTE_SELECTIVE) {
    errors.Add(file + ": recompute_modules: apply under recompute: selective (Megatron-Core's "
               "--recompute-granularity selective); set recompute: selective or remove them");
  }
  for (int m : t.recompute_modules()) {
    if (m == proto::RECOMPUTE_MODULE_UNSPECIFIED) {
      errors.Add(file + ": recompute_modules: an unspecified module; name core_attn, layernorm, moe_act, mla_up_proj or mlp");
    } else if (m == proto::RECOMPUTE_MODULE_MOE_ACT && !model.HasMoe()) {
      errors.Add(file + ": recompute_modules: moe_act on model '" + model.name() + "', which has no experts; remove it");
    } else if (m == proto::RECOMPUTE_MODULE_MLA_UP_PROJ && !model.spec().has_mla()) {
      errors.Add(file + ": recompute_modules: mla_up_proj on model '" + model.name() +
                 "', which has no multi-head latent attention; remove it");
    }
  }
  if (t.activation_offload_layers() > 0 && t.activation_offload_layers() >= model.num_blocks()) {
    errors.Add(file + ": activation_offload_layers: " + std::to_string(t.activation_offload_layers()) + ": model '" +
               model.name() + "' has " + std::to_string(model.num_blocks()) +
               " blocks and Megatron-Core offloads fewer than all; set at most " +
               std::to_string(model.num_blocks() - 1));
  }
  if (t.dtype() == proto::DTYPE_UNSPECIFIED) t.set_dtype(proto::DTYPE_BF16);
  if (t.optimizer() == proto::Training::OPTIMIZER_UNSPECIFIED) t.set_optimizer(proto::Training::OPTIMIZER_ADAM);
  if (t.recompute() == proto::RECOMPUTE_UNSPECIFIED) t.set_recompute(proto::RECOMPUTE_NONE);
  if (t.dtype() == proto::DTYPE_FP8 && t.fp8_recipe() == proto::FP8_RECIPE_UNSPECIFIED) {
    t.set_fp8_recipe(proto::FP8_RECIPE_DELAYED);
  }
  if (t.attention() == proto::ATTENTION_UNSPECIFIED) t.set_attention(proto::ATTENTION_FLASH);
  if (t.workspace_gib() == 0) t.set_workspace_gib(kDefaultWorkspaceGib);
  if (t.cuda_context_gib() == 0) t.set_cuda_context_gib(kDefaultCudaContextGib);
  if (t.nccl_communicator_gib() == 0) t.set_nccl_communicator_gib(kDefaultNcclCommunicatorGib);
  if (!errors.empty()) return errors.ToStatus();
  return t;
}

const char* RecomputeName(proto::Recompute recompute) {
  switch (recompute) {
    case proto::RECOMPUTE_NONE: return "none";
    case proto::RECOMPUTE_SELECTIVE: return "selective";
    case proto::RECOMPUTE_FULL: return "full";
    case proto::RECOMPUTE_OP_SELECTIVE: return "op_selective";
    default: return "unspecified";
  }
}

namespace {
constexpr proto::Recompute kPolicies[] = {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL,
                                          proto::RECOMPUTE_OP_SELECTIVE};
}  // namespace

proto::Recompute ParseRecompute(const std::string& name) {
  for (proto::Recompute r : kPolicies) {
    if (name == RecomputeName(r)) return r;
  }
  return proto::RECOMPUTE_UNSPECIFIED;
}

std::string RecomputeNames() {
  std::string out;
  for (size_t i = 0; i < std::size(kPolicies); ++i) {
    out += i == 0 ? "" : i + 1 == std::size(kPolicies) ? " or " : ", ";
    out += RecomputeName(kPolicies[i]);
  }
  return out;
}

}  // namespace hetsim::models
