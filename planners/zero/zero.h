// `deepspeed` and `fsdp`: ZeRO data parallelism (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models", §5; PyTorch FSDP, Zhao et al. 2023) with a uniform batch
// split: every GPU (or every sequence-parallel group) holds the whole model, sharded over the
// data-parallel replicas by the ZeRO stage. deepspeed may add DeepSpeed-Ulysses sequence parallelism
// (Jacobs et al. 2023) inside a node — the strategy Hetu v2 §7.1 and Appendix A.2 report as "DP×SP+AC".
// Ulysses has no weight sharding of its own. Plans can say Ulysses (Stage.ulysses_degree; the lowering and
// the simulator play its all-to-alls), but the planners' analytic model has no Ulysses terms, so this planner
// writes an SP group as a TP group with sequence_parallel and is charged Megatron-SP's communication and
// weight sharding (docs/planners.md); Hetu v2's Table 4 DeepSpeed strategies as real Ulysses plans:
// experiments/hetu/table4-deepspeed-*.yaml.
// Candidates are ranked on the real GPUs (both systems are tuned by hand on the cluster they run on).
// Memory knobs (docs/planners.md): recomputation, the ZeRO stage, the micro-batch size and, as a last
// resort when nothing fits without, CPU offload (Plan.offload): deepspeed ZeRO-Offload's optimizer offload
// (Ren et al., ATC'21) then ZeRO-Infinity's parameter offload (Rajbhandari et al., SC'21); fsdp
// CPUOffload(offload_params=True).
// Mixtures of experts: deepspeed searches DeepSpeed-MoE's ep_size (deepspeed.moe.layer.MoE; EP groups of
// consecutive data-parallel ranks, expert gradients over the strided expert-data-parallel groups) with ZeRO
// 0-2 (its engine refuses stage 3 with MoE layers); fsdp has no EP and plans at EP 1 (docs/planners.md
// "Mixtures of experts").
// Options: planners/proto/zero.proto.
#pragma once

#include <memory>

#include "planners/planner.h"

namespace hetsim::planners::zero {

std::unique_ptr<Planner> NewDeepSpeedPlanner();
std::unique_ptr<Planner> NewFsdpPlanner();

}  // namespace hetsim::planners::zero
