// The Hetu planner's search (internal to planners/hetu): the GPU types, the TP groups of one per-type TP
// combination and their classes, the pipeline shapes and the candidates of the enumeration, and the Search
// (planners/hetu/hetu.h gives the steps). The Search's methods live by concern:
//   hetu.cc      — the driver: step 1 over every TP combination, step 2 in the order of the bounds, the result;
//   groups.cc    — the TP groups of a combination and their dealing to the pipelines (longest processing time
//                  first), group by group or by classes of identical pipelines;
//   enumerate.cc — step 1: the candidates (TP combination, pipeline count, stage order, micro-batch size)
//                  with a lower bound of each one's predicted iteration time;
//   candidate.cc — step 2: a candidate built into a plan (layers balanced, micro-batches split), costed, kept.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "planners/cost_model.h"
#include "planners/proto/hetu.pb.h"
#include "planners/search.h"
#include "planners/symmetric.h"

namespace hetsim::planners::hetu {

using Options = proto::HetuOptions;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The GPUs of one catalog type, in node order.
struct GpuType {
  const models::GpuSpec* gpu = nullptr;
  std::vector<uint32_t> nodes;     // indices into cluster.nodes()
  std::vector<uint32_t> tp_choices;
  uint32_t largest_node = 0;
  double block_s = 0;  // one block, one sequence, forward + backward on one GPU of the type (speed rank)
};

// One TP group: a stage of some pipeline.
struct Group {
  std::vector<uint32_t> devices;
  uint32_t tp = 1;
  size_t type = 0;
  double speed = 0;  // blocks per second at one sequence (1 / the group's per-block time)
  uint32_t cls = 0;  // its GroupClass
};

// TP groups that cost the same as a stage anywhere: one GPU type and degree, the same TP link, the same
// speed. Groups of a class are interchangeable in the lower bound below.
struct GroupClass {
  size_t type = 0;
  uint32_t tp = 1;
  double speed = 0;
  models::Link tp_link;
  uint32_t example = 0;  // a group of the class
};

// The TP groups of one per-type TP combination, dealt longest-processing-time first.
struct Combination {
  std::vector<uint32_t> tps;
  std::vector<Group> groups;
  std::vector<size_t> by_speed;  // the dealing order: fastest first (ties: device order)
  std::vector<GroupClass> classes;
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // the dealing order as (class, how many in a row)
  // The pipelines' shapes can be derived from the classes alone (see DealByClass); otherwise every
  // pipeline count is dealt group by group.
  bool by_class = true;
};

// A pipeline layout (ordered stage classes) and how many pipelines have it; `shard` is the number of
// pipelines with its (GPU type, TP degree) sequence, the ZeRO sharding the layer balance assumes.
struct Shape {
  std::vector<uint32_t> stages;  // classes, stage order
  uint32_t count = 0;
  uint32_t shard = 0;
};

// One candidate of the enumeration: (TP combination, pipeline count, stage order, micro-batch size).
struct Pending {
  uint64_t seq = 0;  // its place in the enumeration order (ties between equal plans go to the earlier)
  uint32_t combination = 0;
  uint32_t pipelines = 0;
  bool slowest_first = true;
  uint32_t micro_batch = 1;
  double bound = 0;  // lower bound of its predicted iteration time
};

class Search {
 public:
  Search(const PlanningProblem& problem, const Options& options);

  Result<PlannerResult> Run();

 private:
  // ---- the groups and their dealing (groups.cc) ----

  // The TP groups of the cluster when type k uses degree tps[k]: each node cut into groups of that degree,
  // the rest into the largest powers of two that fit (7 at TP 4: 4 + 2 + 1).
  Combination Groups(std::vector<uint32_t> tps) const;

  // The groups dealt to P pipelines, longest processing time first: each group, fastest first, to the
  // pipeline with the least speed so far (ties: the lowest index).
  std::vector<std::vector<size_t>> Deal(const Combination& c, uint32_t P) const;

  // Stages ordered by GPU type (slowest or fastest first), larger TP groups first within a type, then by
  // device.
  void OrderStages(const Combination& c, bool slowest_first, std::vector<size_t>* pipe) const;

  // The same dealing on classes of pipelines instead of pipelines: pipelines that hold the same groups
  // (by class) with the same speed sum are taken together, a run of same-class groups filling the least
  // loaded ones k at a time. Exact as long as the least loaded pipelines never tie across two different
  // contents (the tie would be broken by pipeline index); then it returns nullopt and the caller deals
  // group by group. Returns (content: groups per class, pipelines) pairs.
  std::optional<std::vector<std::pair<std::vector<uint32_t>, uint32_t>>> DealByClass(const Combination& c,
                                                                                     uint32_t P) const;

  // ---- step 1: the enumeration and its bounds (enumerate.cc) ----

  void Enumerate(std::vector<uint32_t> tps);

  // The shapes of dealt pipelines (class-level contents), stages in order.
  std::vector<Shape> ShapesByClass(const Combination& c,
                                   const std::vector<std::pair<std::vector<uint32_t>, uint32_t>>& contents,
                                   bool slowest_first) const;

  // The shapes of pipelines dealt group by group.
  std::vector<Shape> ShapesOfPipes(const Combination& c, std::vector<std::vector<size_t>> pipes,
                                   bool slowest_first) const;

  // Layers [begin, end) of stage s of S holding n blocks (as BalancedSplit places them).
  std::pair<uint32_t, uint32_t> Range(uint32_t s, uint32_t S, uint32_t n) const;
  static uint32_t Position(uint32_t s, uint32_t S) { return S == 1 ? 0 : s == 0 ? 1 : s + 1 == S ? 2 : 3; }

  // Seconds per micro-batch of b sequences of a stage of class k at position `pos` holding n blocks,
  // without its pipeline sends (what the analytic model charges on top); index n.
  const std::vector<double>& StageSeconds(const Combination& c, uint32_t k, uint32_t pos, uint32_t b);

  // The most blocks a stage of class k at position s of S holds in memory (BalancedSplit's check, the
  // same arithmetic), with `in_flight` micro-batches of b sequences and ZeRO sharding `shard`; −1 when
  // not even its fewest fit.
  int64_t MostBlocks(const Combination& c, uint32_t k, uint32_t s, uint32_t S, double in_flight, uint32_t shard,
                     uint32_t b);

  // A lower bound of the predicted iteration time of the candidate (c, P, b) with these shapes, or nullopt
  // when its layer balance cannot fit in memory (then the candidate is rejected, as the search would).
  //   - Per shape, the fewest seconds of its slowest stage (T*) and of all its stages (Σ*) over every layer
  //     split that the stages' memory allows, stage times without pipeline sends (the analytic model adds
  //     them): T* by giving each next block to the stage that stays fastest with it (optimal for stage
  //     times that grow with their blocks), Σ* as the fewest blocks everywhere plus the rest at the
  //     cheapest per-block time. The memory caps are BalancedSplit's, with the fewest micro-batches any
  //     pipeline has in flight (larger caps: a relaxation); when even they leave no split, none fits.
  //   - A pipeline of m micro-batches takes at least (m − 1)·T* + Σ* (1F1B, Metis eq. 1); the micro-batch
  //     split over the pipelines is at best the min-max of these (every pipeline at least one).
  //   - DP sync and the optimizer step are at least 0.
  std::optional<double> Bound(const Combination& c, const std::vector<Shape>& shapes, uint32_t P, uint32_t M,
                              uint32_t b);

  // ---- step 2: building and costing a candidate (candidate.cc) ----

  void Evaluate(const Pending& p);

  // One layout at micro-batch size b: layers balanced per pipeline shape, micro-batches over pipelines;
  // nullopt (rejected) when a shape's layers cannot fit in memory.
  std::optional<proto::Plan> Candidate(const std::vector<Group>& groups, const std::vector<std::vector<size_t>>& pipes,
                                       uint32_t b);

  // Memory on the real devices, then the analytic model (BestPlan's ranking); the best is the fastest,
  // ties to the earlier candidate of the enumeration.
  void Consider(proto::Plan plan, const std::string& what, uint64_t seq);

  // "2 pipeline(s), ZeRO-1: [h20 TP4 L0-7 → h800 TP4 L8-81] 32×bs1 ×2" in short form: identical pipelines in a
  // row are written once with their count.
  std::string Describe(const proto::Plan& plan) const;

  const PlanningProblem& problem_;
  const Options& options_;
  AnalyticCostModel cost_;
  MemoryModel memory_;
  const uint32_t blocks_;
  const uint64_t batch_;
  const proto::Recompute rc_;
  const uint32_t zero_;
  const bool sequence_parallel_;
  std::vector<GpuType> types_;
  bool equal_type_speeds_ = false;
  std::vector<uint32_t> bs_;
  std::deque<Combination> combinations_;  // stable addresses (the caches below key on them)
  std::vector<Pending> pending_;
  uint64_t next_seq_ = 0;
  std::map<std::tuple<const Combination*, uint32_t, uint32_t, uint32_t>, std::vector<double>> stage_seconds_;
  std::map<std::tuple<const Combination*, uint32_t, uint32_t, double, uint32_t, uint32_t>, int64_t> most_blocks_;
  SearchStats stats_;
  InfeasibleTracker misses_;
  // The closed form's best candidates (RerankPool of them), by time then enumeration order.
  struct Kept {
    double t;
    uint64_t seq;
    proto::Plan plan;
    std::string key;  // the serialized plan (distinctness)
  };
  // The first played_pool_ are the closed form's best (the bound prunes against the last of them); the
  // rest, runners-up for the simulator-checked choice, the best of the candidates costed.
  const size_t played_pool_ = RerankPool(problem_.cluster.num_devices());
  const size_t pool_size_ = std::max<size_t>(played_pool_, problem_.alternatives + 1);
  std::vector<Kept> pool_;
  uint64_t tp_combinations_ = 0, shapes_ = 0;
};

}  // namespace hetsim::planners::hetu
