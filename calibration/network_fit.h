// Fitting a network's values under NCCL's model (models/nccl.h) to collectives measured across nodes
// (`hetsim calibrate --from-data DIR` with DIR/network.csv): the bus efficiency and the network's own
// latency per inter-node step, per NIC kind, that make NCCL's choice for each measured call take the
// measured time.
//
// network.csv (one row per measured call, e.g. nccl-tests' all_reduce_perf run over several nodes: its
// size and time columns):
//   nodes, gpus_per_node, nic (infiniband | roce | ethernet), nic_gbps, bytes, time_us; optional
//   nics_per_node (default: one per GPU), fabric (nvlink | pcie; default nvlink), collective (all_reduce |
//   reduce_scatter | all_gather; default all_reduce), and any other column (ignored).
// The fit minimises the absolute log ratio of modelled to measured time (small and large calls weigh alike;
// a few calls measured far off do not drag it) over bus efficiency in (0, 1] and latency in [0, 500] us: a grid, then a finer grid around the
// best point. NCCL's model picks the algorithm and protocol, so the time is not smooth in the values.
#pragma once

#include <string>
#include <vector>

#include "models/lowering.h"
#include "models/nccl.h"
#include "models/proto/calibration.pb.h"
#include "models/status.h"

namespace hetsim::calibration {

struct NetworkRow {
  int line = 0;
  models::NcclGroup group;
  models::CollectiveKind collective = models::CollectiveKind::kAllReduce;
  double bytes = 0;
  double time_s = 0;
};

Result<std::vector<NetworkRow>> ReadNetworkBench(const std::string& path);

// The model's time for `row` under `net`.
double NetworkModelSeconds(const NetworkRow& row, const models::NetworkParams& net);

struct NetworkFit {
  proto::NetworkCalibration entry;  // one NIC kind's fitted values (source set)
  double mape = 0, worst = 0;       // relative error of the fitted model on the rows
  double base_mape = 0;             // and of the base calibration's values (before the fit)
  size_t n = 0;
};
// One fit per NIC kind among `rows`; `base` supplies what is not fitted (per-call overhead, LL128).
std::vector<NetworkFit> FitNetwork(const std::vector<NetworkRow>& rows, const std::string& base_calibration);

}  // namespace hetsim::calibration
