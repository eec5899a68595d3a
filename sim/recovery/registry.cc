// The registry of recovery policies: one line per policy, in the order `hetsim list policies` shows them.
// A policy's file (sim/recovery/<policy>.cc) defines its factory; adding a policy is that file and its
// line here (the factory's declaration and its entry).
#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {

std::unique_ptr<Policy> NewCheckpointRestart(const proto::RecoveryPolicy& options);
std::unique_ptr<Policy> NewHotSpares(const proto::RecoveryPolicy& options);
std::unique_ptr<Policy> NewInMemory(const proto::RecoveryPolicy& options);
std::unique_ptr<Policy> NewVaruna(const proto::RecoveryPolicy& options);
std::unique_ptr<Policy> NewElastic(const proto::RecoveryPolicy& options);
std::unique_ptr<Policy> NewAutohet(const proto::RecoveryPolicy& options);
std::unique_ptr<Policy> NewHetu(const proto::RecoveryPolicy& options);

const std::vector<Registered>& Registry() {
  static const std::vector<Registered> registry = {
      {"checkpoint-restart",
       "checkpoints to the object store; restart the same plan on free or repaired nodes and reload "
       "(Megatron-LM, DeepSpeed)",
       NewCheckpointRestart},
      {"hot-spares",
       "checkpoint-restart with spare nodes that replace failed ones at once (Llama 3, Dubey et al. 2024 §3.3.4)",
       NewHotSpares},
      {"in-memory",
       "checkpoints in host memory of the node and replicas-1 peers, remote ones every remote_interval_s; "
       "reload from memory (Gemini, Wang et al. SOSP'23)",
       NewInMemory},
      {"varuna",
       "re-plan pipeline x data parallelism on the live nodes; checkpoints to local NVMe, restore from the "
       "object store (Varuna, Athlur et al. EuroSys'22)",
       NewVaruna},
      {"elastic",
       "re-plan with any registered planner on the live nodes; state from surviving replicas, no rollback "
       "while every layer has one (Oobleck, Jang et al. SOSP'23; Bamboo, NSDI'23)",
       NewElastic},
      {"autohet",
       "re-plan on the live nodes; layer-wise checkpoints in host memory, local NVMe and the cloud; restore "
       "local-first, then from peers over RDMA, the missing pieces from the cloud (AutoHet §IV)",
       NewAutohet},
      {"hetu",
       "re-plan on every live GPU; graph specialisation, then fused-BSR graph switching of the weights from "
       "surviving replicas, no restart (Hetu v2 §6, §7.2)",
       NewHetu},
  };
  return registry;
}

}  // namespace hetsim::sim::recovery
