// Polishing's moves (`--polish N`, sim/planning/polish.h): the changes a local search on the twin tries to a
// plan, as a table of named moves. Each move is a function from a plan to its neighbours under that move;
// polishing tries them in the table's order, and each has its own test (tests/sim/planning/moves_test.cc).
//
//   name                    the change
//   layer-boundary          1. one layer moved from a stage to another of its pipeline (the boundaries between
//                              them shifted by one)
//   device-swap             2. the devices of two stages with the same device count and TP, CP and Ulysses
//                              degrees on different GPU types swapped (a faster group to the heavier stage)
//   micro-batch-transfer    3. one micro-batch moved from one pipeline to another of the same micro-batch size
//                              (DP load balance)
//   micro-batch-size        4. a pipeline's micro-batch size doubled or halved, its micro-batch count the
//                              other way
//   pipeline-merge          5. two pipelines merged into one deeper pipeline (the second's stages after the
//                              first's, or the stages of both grouped by machine; each stage keeping about
//                              half its share of the layers, the micro-batches summed)
//   machine-order           6. a pipeline's runs of stages on one machine put in another order (up to 5 runs:
//                              which machine holds the embedding, the head and the middle)
//   zero-stage              7. the plan's ZeRO stage one lower or higher
//   stage-per-machine       8. one pipeline with a stage per machine, all of each machine's GPUs (idle ones
//                              included) as that stage's data-parallel replicas (micro-batches of the least
//                              divisor of the batch at least the widest machine), layers by device count
//   stage-split             9. a stage of several DP replicas split into consecutive stages, one per machine
//                              where it spans several, else two halves of its replicas (data parallelism over
//                              a slow network turned into a pipeline)
//   deep-pipeline          10. one pipeline with a stage per GPU of the cluster (TP 1, micro-batches of one
//                              sequence, layers evenly), its machines in the cluster's order, slowest GPUs
//                              first and fastest first: the deepest pipeline, reached from wide DP or TP
//                              stages otherwise only by a chain of changes each slower on its own; and the
//                              same with stages of g = 2, 4, ... GPUs of one machine as DP replicas, g below
//                              the widest machine (a machine's remainder its first stage; micro-batches of at
//                              least g sequences): the depths between it and stage-per-machine
//   stage-join             11. two adjacent stages with the same TP group shape joined into one stage holding
//                              both as DP replicas (the inverse of stage-split), the micro-batch doubled until
//                              it has a sequence per replica
//   tp-dp-trade            12. a stage's TP degree halved and its DP doubled on the same devices, or the other
//                              way (micro-batch doubled as in stage-join)
//   recompute              13. the plan's recomputation set to each other policy of none, selective and full
//                              than the one it runs with: less recomputation is faster where memory allows it,
//                              more fits a deeper or narrower plan
//   machine-idle           14. machines left idle: per GPU type the last machine of that type the plan uses,
//                              and every machine of the slowest type at once (by FP16 peak; when the plan uses
//                              more than one type). Their GPUs are taken out of every stage that holds them (a
//                              stage whose replicas all sat there is dropped, its layers given to the rest; a
//                              pipeline that lay on it alone is dropped, its sequences given to the others). A
//                              slow GPU on a slow network can cost a plan more than it adds.
//
// Every move keeps a plan's structure well formed (each pipeline covers the model once, each stage at least one
// layer); whether the changed plan fits (models::ValidatePlan) is polishing's to check. None applies to
// interleaved plans (their stages hold several chunks).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"

namespace hetsim::planning {

// One neighbour of a plan: the changed plan, a short description of the change, and whether it is a layer
// move (layer-boundary, judged as it is; every other change is rebalanced first).
struct PlanChange {
  proto::Plan plan;
  std::string change;
  bool layer_move = false;
};

// What every move reads: the plan, its cluster, the model's layer count and the recomputation the plan runs
// with when it names none (the training spec's; none when unspecified).
struct MoveInput {
  const proto::Plan& plan;
  const models::Cluster& cluster;
  uint32_t layers = 0;
  proto::Recompute training_recompute = proto::RECOMPUTE_UNSPECIFIED;
};

struct Move {
  const char* name;  // the table's name above, e.g. "stage-split"
  std::vector<PlanChange> (*neighbours)(const MoveInput& in);
};

// The moves, in the order polishing tries them.
std::span<const Move> PolishMoves();

// The move called `name`, or nullptr.
const Move* FindMove(std::string_view name);

// `move`'s neighbours of `in.plan` (none for interleaved plans).
std::vector<PlanChange> NeighboursBy(const Move& move, const MoveInput& in);

// The neighbours of `plan` on `cluster` under every move, in the table's order; `layers` is the model's layer
// count, `training_recompute` the training spec's policy. None for interleaved plans.
std::vector<PlanChange> PlanNeighbours(const proto::Plan& plan, const models::Cluster& cluster, uint32_t layers,
                                       proto::Recompute training_recompute = proto::RECOMPUTE_UNSPECIFIED);

// The layer moves of `plan` (layer-boundary): one layer from a stage to another of its pipeline, every boundary
// between them shifted by one; only between neighbouring stages when `adjacent_only` (polishing's rebalancing
// climbs with these first).
std::vector<PlanChange> BoundaryMoves(const proto::Plan& plan, bool adjacent_only);

}  // namespace hetsim::planning
