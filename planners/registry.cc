// The registry of planners: one line per planner (a later planner adds its line here).
#include "planners/alpa/alpa.h"
#include "planners/autohet/autohet.h"
#include "planners/exhaustive/exhaustive.h"
#include "planners/galvatron/galvatron.h"
#include "planners/hethub/hethub.h"
#include "planners/hetu/hetu.h"
#include "planners/hexiscale/hexiscale.h"
#include "planners/megatron/megatron.h"
#include "planners/metis/metis.h"
#include "planners/planner.h"
#include "planners/twin/twin.h"
#include "planners/whale/whale.h"
#include "planners/zero/zero.h"

namespace hetsim::planners {

const std::vector<PlannerInfo>& Planners() {
  static const std::vector<PlannerInfo> planners = {
      {"megatron", "Megatron-LM symmetric dp×tp×pp, uniform layers, heterogeneity ignored (Narayanan et al. 2021)",
       megatron::NewPlanner},
      {"deepspeed",
       "DeepSpeed ZeRO-1/2/3 data parallelism (+ Ulysses SP), uniform batch split (Rajbhandari et al. 2020)",
       zero::NewDeepSpeedPlanner},
      {"fsdp", "PyTorch FSDP full/grad-op/no sharding, uniform batch split (Zhao et al. 2023)", zero::NewFsdpPlanner},
      {"galvatron", "symmetric dp×tp×pp with layers balanced per stage (Miao et al. 2023; HexiScale App. C)",
       galvatron::NewPlanner},
      {"whale", "speed-proportional batch split over DP replicas, stages placed by memory (Jia et al. 2022)",
       whale::NewPlanner},
      {"alpa", "one pipeline on equal submeshes, per-stage DP×TP, GPUs averaged (Zheng et al. 2022; Metis §3)",
       alpa::NewAlpaPlanner},
      {"amp", "symmetric dp×tp×pp, layers balanced, GPUs averaged (Li et al. 2022; Metis §3)", alpa::NewAmpPlanner},
      {"exhaustive", "the proven best plan under the analytic model for clusters of up to 16 GPUs",
       exhaustive::NewPlanner},
      {"hexiscale", "asymmetric pipelines by METIS graph partitioning, per-stage TP, Appendix A cost (HexiScale)",
       hexiscale::NewPlanner},
      {"metis", "hetero-aware device groups, DP-first DFS, capacity-aware layer/data balancing (Metis, ATC'24)",
       metis::NewPlanner},
      {"autohet",
       "device groups of balanced effective power (eq. 3, CBC), low-end GPUs on early stages, layer partition "
       "(eq. 4), symmetric TP, asymmetric PP (AutoHet)",
       autohet::NewPlanner},
      {"hethub",
       "non-uniform PP over GPU types, uniform DP and TP, DFS under load-balance/bottleneck/stage-order rules, "
       "CPU-staged communicator across vendors (HetHub)",
       hethub::NewPlanner},
      {"hetu",
       "HSPMD strategies: per-type TP groups, pipelines of uneven length, layers and micro-batch counts, "
       "SplitAllReduce across pipelines (Hetu v2)",
       hetu::NewPlanner},
      {"twin",
       "hetsim's own planner, beyond the papers: every planner's candidates confirmed on the simulator, the "
       "fastest polished on the twin (idle machines, recomputation, layer splits, structures); time-limited",
       twin::NewPlanner},
  };
  return planners;
}

}  // namespace hetsim::planners
