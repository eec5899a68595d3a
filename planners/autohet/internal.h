// AutoHet's steps as functions, for planners/autohet/*.cc and their tests.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "planners/cost_model.h"
#include "planners/planner.h"
#include "planners/search.h"

namespace hetsim::planners::autohet {

// ---- §III-B: device grouping (eq. 2-3) -----------------------------------------------------------------

// The TP groups of one GPU type: `count` entities of t GPUs each.
struct EntityType {
  const models::GpuSpec* gpu = nullptr;
  uint32_t count = 0;
  double power = 0;       // c: blocks per second of one entity (forward + backward of one micro-batch)
  double memory_gib = 0;  // m: memory of one entity (t × the GPU's)
};

// 1F1B's bubble ratio of a pipeline of s stages and M micro-batches: (s − 1) / (M + s − 1).
double BubbleRatio(uint32_t stages, uint32_t micro_batches);

// Eq. 2: a group's effective computing power (1 − bubble) · Σ c, its stage count = its entity count.
double EffectivePower(const std::vector<uint32_t>& counts, const std::vector<EntityType>& types,
                      uint32_t micro_batches);

struct GroupingInput {
  std::vector<EntityType> types;
  uint32_t groups = 1;          // D
  uint32_t micro_batches = 1;   // M of every group (the batch is split evenly, §III-B)
  double required_gib = 0;      // eq. 3b: memory one group needs to hold the model
  uint32_t max_stages = 1;      // a group has at most this many stages (one block per stage at least)
  double time_limit_s = 60;
  // Decide the binary search's feasibility questions without CBC where a quick exact argument does (a
  // grouping built outright: yes; the batch share outside the convex hull of the allowed compositions, two
  // GPU types at most, or outside its extent along a few directions: no), give CBC the rest without its
  // preprocessing, and settle the final program that way when its answer is proven the only optimal one.
  // The answers, hence the grouping, are the same; tests turn it off to check.
  bool screen = true;
};

struct Grouping {
  std::vector<std::vector<uint32_t>> counts;  // [group][type]: entities
  double min_power = 0;    // z: the smallest effective computing power
  double objective = 0;    // D · z (eq. 3a)
  bool proven_optimal = false;
  uint64_t nodes = 0;          // branch-and-bound nodes, all programs
  double seconds = 0;          // CBC's time, all programs
  uint64_t programs = 0;       // integer programs solved (the binary search's and the tie-break)
  uint64_t compositions = 0;   // group compositions that satisfy 3b
  uint64_t screened = 0;       // feasibility questions answered without CBC (GroupingInput::screen)
  uint64_t proven_unique = 0;  // 1 when the final program's answer was proven its only optimum (screen)
};

// Eq. 3 for a fixed D, exactly (CBC; grouping.cc explains the formulation). nullopt when no grouping holds
// the model in every group.
Result<std::optional<Grouping>> SolveGrouping(const GroupingInput& in);

// ---- §III-D: binary-decomposition profiles (eq. 5) ------------------------------------------------------

// Stage compute times of 1, 2, 4, ... blocks per (GPU type, TP degree, micro-batch size), measured on the
// problem's cost source (a profile, else the analytic compute model); other counts are sums of these.
class BinaryProfile {
 public:
  BinaryProfile(const AnalyticCostModel& cost, proto::Recompute recompute) : cost_(cost), recompute_(recompute) {}
  // Forward + backward seconds of `blocks` transformer blocks (eq. 5: the sum over the set bits).
  double Blocks(const models::GpuSpec& gpu, uint32_t tp, uint32_t b, uint32_t blocks);
  // The embedding (first stage) and the head (last stage), profiled once each.
  double Embedding(const models::GpuSpec& gpu, uint32_t tp, uint32_t b);
  double Head(const models::GpuSpec& gpu, uint32_t tp, uint32_t b);
  uint64_t measurements() const { return table_.size(); }  // profiled configurations

 private:
  double Measure(const models::GpuSpec& gpu, uint32_t tp, uint32_t b, uint32_t begin, uint32_t end);
  const AnalyticCostModel& cost_;
  proto::Recompute recompute_;
  std::map<std::tuple<std::string, uint32_t, uint32_t, uint32_t, uint32_t>, double> table_;
};

// ---- §III-C: GPU node and stage mapping ------------------------------------------------------------------

struct Entity {
  uint32_t type = 0;               // index into the EntityType list
  uint32_t node = 0;
  std::vector<uint32_t> devices;   // t consecutive GPUs of the node
};

// The TP groups of degree t of the cluster (node by node), and the list of their types (one per GPU type,
// in the order first met) with counts filled in; power and memory are left to the caller.
std::vector<Entity> MakeEntities(const models::Cluster& cluster, uint32_t tp, std::vector<EntityType>* types);

// §III-C's heuristic: each group's stages in ascending order of the entity type's power; then, type by type
// from the weakest, while every group has an unplaced stage of the type and one node has a free entity of
// it for every group, the groups' earliest such stages go to that node; the rest in order. Returns per group
// the entity index of each stage.
std::vector<std::vector<uint32_t>> MapStages(const Grouping& grouping, const std::vector<EntityType>& types,
                                             const std::vector<Entity>& entities);

// ---- §III-C: layer partition (eq. 4) ------------------------------------------------------------------

// Per stage: its time per micro-batch and whether it fits in memory, for 1..blocks blocks (index l − 1).
struct StageTable {
  std::vector<double> seconds;
  std::vector<bool> fits;
};

struct Partition {
  std::vector<uint32_t> blocks;  // per stage
  double objective_s = 0;        // the minimised objective
  bool proven_optimal = false;
  uint64_t nodes = 0;
  double solver_s = 0;           // CBC's wall time
};

// Eq. 4: block counts (≥ 1 each, Σ = blocks, each stage in memory) minimising Σ_s t_s + (M − 1)·max_s t_s
// (bottleneck_only: max_s t_s). nullopt when no split fits. Exact, by enumerating the bottleneck Y over the
// tables' values and, for each, the least Σ_s t_s with every t_s ≤ Y (a dynamic program over stages and
// blocks, O(S·L²)); the optimum's own maximum is one of the Y, so the least (M − 1)·Y + Σ is the optimum.
std::optional<Partition> PartitionLayers(const std::vector<StageTable>& stages, uint32_t blocks,
                                         uint32_t micro_batches, bool bottleneck_only);
// The same program given to CBC (one binary per stage and block count): the reference the dynamic program
// is tested against.
Result<std::optional<Partition>> PartitionLayersMilp(const std::vector<StageTable>& stages, uint32_t blocks,
                                                     uint32_t micro_batches, bool bottleneck_only,
                                                     double time_limit_s);

}  // namespace hetsim::planners::autohet
