// Chakra execution traces and the simulator (docs/chakra.md): a plan exported as one trace per rank with the
// simulator's compute prices (`hetsim export-chakra`), and traces simulated on a cluster (`hetsim
// import-chakra`) by the same machinery that plays a plan: the traces become a lowering (models/chakra.h
// ImportChakra), ProgramsFromLowering prices its collectives and transfers, and the iteration engine plays it.
// No SimGrid in this header.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/chakra.h"
#include "models/cost.h"
#include "models/plan.h"
#include "models/profile_db.h"
#include "sim/program.h"

namespace hetsim::sim {

struct ChakraExportRequest {
  Fidelity fidelity = Fidelity::Balanced();  // fused passes unless full, as SimulateIteration lowers
  models::ComputeOptions compute;            // the calibration (recorded as hetsim_calibration)
  const models::ProfileDb* profiles = nullptr;
  std::vector<ChakraProtoMsg::AttributeProto> metadata;  // more GlobalMetadata attributes for every file
};
// The plan's lowering as SimulateIteration lowers it (not folded), one trace per rank, every compute node
// with the seconds the simulator gives it. The plan must pass ValidatePlanStructure.
Result<std::vector<models::ChakraTrace>> ExportPlanChakra(const proto::Plan& plan, const models::PlanContext& ctx,
                                                        const ChakraExportRequest& request);

struct ChakraSimOptions {
  Fidelity fidelity = Fidelity::Balanced();
  std::string calibration;  // the kernel model's and the platform's ("" = default)
};
struct ChakraSimResult {
  EngineResult engine;      // engine.iteration_s: when the last rank finished
  uint64_t operations = 0;  // played, every device's streams
  uint32_t ranks = 0;
};
// Plays imported traces on the cluster's platform (every device, no folding), in a child process like
// SimulateIteration. Collectives and transfers are priced as for a plan (their fixed cost, NCCL's bus
// bandwidth); compute takes the seconds the import gave it.
Result<ChakraSimResult> SimulateChakra(models::ImportedChakra&& imported, const models::Cluster& cluster,
                                       const ChakraSimOptions& options);

}  // namespace hetsim::sim
