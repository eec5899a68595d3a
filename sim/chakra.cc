#include "sim/chakra.h"

#include <utility>

#include "models/spec_io.h"
#include "sim/engine.h"
#include "sim/simulator.h"

namespace hetsim::sim {

Result<std::vector<models::ChakraTrace>> ExportPlanChakra(const proto::Plan& plan, const models::PlanContext& ctx,
                                                        const ChakraExportRequest& request) {
  // As SimulateIteration: backward passes recompute what the plan says.
  proto::Training training = ctx.training;
  training.set_recompute(models::EffectiveRecompute(plan, ctx.training));
  const models::ComputeCost cost(ctx.model, training, request.profiles, request.compute);
  // As BuildPrograms lowers the plan at this fidelity.
  models::LoweringOptions lo;
  lo.fuse_passes = request.fidelity.tp != TpDetail::kPerLayer;
  lo.tp_in_compute = [&](uint32_t device, uint32_t layer, uint32_t tp, double batch) {
    return cost.TpIncludedInProfile(*ctx.cluster.device(device).gpu, layer, tp, batch);
  };
  HETSIM_ASSIGN_OR_RETURN(const models::Lowering lowering, models::LowerPlan(plan, ctx, lo));
  models::ChakraExportOptions eo;
  eo.metadata = request.metadata;
  ChakraProtoMsg::AttributeProto calibration;
  calibration.set_name("hetsim_calibration");
  calibration.set_string_val(request.compute.calibration);
  eo.metadata.push_back(calibration);
  eo.compute_seconds = [&](uint32_t slot, bool dp, size_t i) {
    const models::RankOps& r = lowering.ranks[slot];
    return PriceComputeOp(dp ? r.dp_stream[i] : r.ops[i], r, ctx, cost, lowering.separate_recompute);
  };
  return models::ExportChakra(lowering, eo);
}

Result<ChakraSimResult> SimulateChakra(models::ImportedChakra&& imported, const models::Cluster& cluster,
                                       const ChakraSimOptions& options) {
  // Collectives are priced by the calibration's constants of each GPU type; the cost model's transformer is
  // never asked (every compute operation's seconds are given), so any bundled model stands in for it.
  HETSIM_ASSIGN_OR_RETURN(const models::TransformerModel stand_in, models::LoadModel("llama-tiny"));
  const proto::Training training;
  models::ComputeOptions compute;
  compute.calibration = options.calibration;
  const models::ComputeCost cost(stand_in, training, nullptr, compute);
  const models::PlanContext ctx{cluster, stand_in, training};
  ProgramOptions po;
  po.fidelity = options.fidelity;
  po.fold = false;
  const auto seconds = std::move(imported.seconds);
  const Programs programs =
      ProgramsFromLowering(std::move(imported.lowering), ctx, cost, po, [&](uint32_t slot, bool dp, size_t i) {
        return seconds[slot][dp ? 1 : 0][i];
      });
  ChakraSimResult out;
  out.operations = CountOperations(programs);
  out.ranks = static_cast<uint32_t>(programs.devices.size());
  HETSIM_ASSIGN_OR_RETURN(out.engine, SimulatePrograms(programs, cluster, false, options.calibration));
  return out;
}

}  // namespace hetsim::sim
