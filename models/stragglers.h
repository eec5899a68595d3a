// Stragglers: the wait for the slowest node.
//
// Nodes that run the same work do not keep the same pace: from one iteration to the next each one's time
// varies (its host's Python and launch path, GPU clocks under power and thermal management, its NICs). A
// pipeline runs at the pace of its slowest stage and the gradient all-reduce starts when the last replica
// arrives, so an iteration lasts the slowest node's time, not the mean one's. With each node's time
// T·(1 + cv·Z), Z standard normal and independent across nodes, the slowest of N arrives on average
// E[max of N standard normals]·cv·T after the mean: cv·T/sqrt(pi) for two nodes, growing like
// cv·T·sqrt(2 ln N). The GPUs of one node move together (one host; vTrain's one-node runs show no wait
// growing with the data-parallel degree), so a plan on one node waits for nobody.
//
// The simulator and the played estimate add this wait to the iteration when the plan spans nodes and its
// calibration gives a straggler_cv: as exposed data-parallel time when the plan has data-parallel replicas
// (where a framework's gradient-reduction timer sees it), else as idle time. docs/simulator.md "Stragglers"
// says where cv comes from.
#pragma once

#include <cstdint>

#include "models/cluster.h"
#include "models/cost.h"
#include "models/proto/plan.pb.h"

namespace hetsim::models {

// E[max(Z_1, ..., Z_n)] for n independent standard normals (0 for n <= 1; 1/sqrt(pi) for 2).
double ExpectedMaxOfStandardNormals(uint32_t n);

struct StragglerWait {
  double seconds = 0;          // cv · iteration_s · E[max of N standard normals]; 0 on one node or with cv 0
  uint32_t nodes = 0;          // N: the nodes the plan's devices occupy
  bool data_parallel = false;  // the plan has data-parallel replicas (the wait then falls in the gradient sync)
  double cv = 0;               // the largest straggler_cv the calibration gives the plan's GPU types
};

// The wait for the slowest node after `iteration_s` seconds of work.
StragglerWait StragglerWaitFor(const proto::Plan& plan, const Cluster& cluster, const ComputeCost& cost,
                               double iteration_s);

}  // namespace hetsim::models
