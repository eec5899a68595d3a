#pragma once
// The folding decision (docs/simulator.md, "Folding" and "Folding every plan kind"), defined once for the
// simulator (sim/program.cc, which plays a folded plan with one SimGrid actor per stage) and the planners'
// played estimate (planners/lowering_cost.cc, which plays the same programs analytically). No SimGrid here.
//
// A plan folds when every pipeline (DP replica) plays the same operations as pipeline 0 and every device of a
// stage the same as the stage's first device in pipeline 0, its representative: the same GPU type, TP
// degree, layers and, operation by operation, the same work (kind, pass, micro-batch, layers, rows, bytes,
// FLOPs); collectives whose groups fold onto the representative's (so a group never spans stages);
// point-to-point peers that fold onto the representative's peer. Context parallelism (CP rings),
// DeepSpeed-Ulysses all-to-alls and every schedule fold under these rules: the CP ranks and Ulysses ranks of
// a stage do the same work on other tokens, so they fold onto the stage's representative too. A CP ring's
// message between two devices that both fold onto one representative is played as that representative's
// own send to its ring successor (its "ring peer"): in a symmetric ring every member sends and receives its
// k-th block at the same moment, so the block the representative receives from its predecessor arrives
// when the one it sends arrives at its successor.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/cluster.h"
#include "models/lowering.h"
#include "models/platform_routes.h"
#include "models/proto/plan.pb.h"

namespace hetsim::models {

// Whether two lowered operations are the same work, apart from the devices they name (peer, group, rank).
bool SameWork(const Op& a, const Op& b);

// What a plan must have before its ranks are compared, read from the plan alone (so that a plan that
// cannot fold is lowered once, in full): no CPU staging or offload, every pipeline as deep as pipeline 0
// with stages as wide, and a stage's intra-stage DP replicas computing as many sequences each (they compute
// other rows of the micro-batch: the same work when the shares are even; SameWork compares the number of
// sequences, not which). Empty when the plan may fold, otherwise why not.
std::string FoldShape(const proto::Plan& plan, const Cluster& cluster);

// The devices that represent the others when a plan folds: the first device of each stage of pipeline 0.
std::vector<bool> FoldRepresentatives(const proto::Plan& plan, const Cluster& cluster);

// A folded plan: who plays for whom, and what the representatives' transfers stand for.
struct RankFold {
  std::vector<uint32_t> rep;          // per slot: the slot whose program stands for it (itself: played)
  std::vector<uint32_t> folded_onto;  // per collective group: the played group it folds onto (kNone: none)
  // Per played send stream (sender device, receiver device, channel): the folded devices' copies of it,
  // as (sender device, receiver device). A representative's stream to a device that folds onto it (a CP
  // ring) has the other ring members' messages among its copies.
  std::map<std::tuple<uint32_t, uint32_t, uint8_t>, std::vector<std::pair<uint32_t, uint32_t>>> send_copies;
  // Per (representative device, channel) with ring messages (peers that fold onto the representative
  // itself): the device it sends them to. Its receives on that channel complete as those sends arrive.
  std::map<std::pair<uint32_t, uint8_t>, uint32_t> ring_peer;
  uint32_t played = 0;  // representatives
};

// The comparison FoldRanks makes, rank by rank as a lowering emits them (LoweringOptions::skeleton_done), so
// that a rank's skeleton can be released once compared: a representative comes before the ranks that fold
// onto it (the first device of its stage in pipeline 0, lowered first). `ranks`, `device_slot` and `groups`
// are read at each Add (the lowering may still be growing `groups`); Finish reads nothing of them.
class RankFolder {
 public:
  RankFolder(const Lowering& lw, const std::vector<uint32_t>& device_slot,
             const std::vector<std::vector<uint32_t>>& groups, const Cluster& cluster,
             std::function<const PlatformRoutes&()> routes, bool skeletons);
  // Compares rank `slot` (its skeleton, or its operations) with its representative's.
  void Add(uint32_t slot);
  // Whether `slot` represents others (its skeleton must stay until they are added).
  bool IsRepresentative(uint32_t slot) const { return slot < fold_.rep.size() && fold_.rep[slot] == slot; }
  // Empty and `out` filled when every rank added folds, otherwise why not (`num_groups`: the lowering's
  // collective groups, all made by now).
  std::string Finish(size_t num_groups, RankFold* out);

 private:
  std::string Compare(uint32_t i);
  const Lowering& lw_;
  const std::vector<uint32_t>& device_slot_;
  const std::vector<std::vector<uint32_t>>& groups_;
  const Cluster& cluster_;
  std::function<const PlatformRoutes&()> routes_;
  bool skeletons_;
  std::string note_;  // the first reason not to fold
  RankFold fold_;
  size_t n_ = 0;
  // Per (representative device, channel): where its ring messages come from, and sends minus receives.
  std::map<std::pair<uint32_t, uint8_t>, uint32_t> ring_from_;
  std::map<std::pair<uint32_t, uint8_t>, int64_t> ring_balance_;
};

// Compares every rank of `lw` with its representative (the first device of its stage in pipeline 0), by
// their skeletons (LoweringOptions::skeletons, with their pipelines' stage and micro-batch counts: the
// same decision as comparing every operation, at a few passes per rank) or, without `skeletons`, every
// operation of every rank. `device_slot` and `groups` are the lowering's (callers may have moved them out
// of `lw`). `routes` is asked for the platform's routes at the first folded copy of a send (a copy must
// price as its representative's transfer). Empty and `out` filled when the ranks fold, otherwise why not.
std::string FoldRanks(const Lowering& lw, const std::vector<uint32_t>& device_slot,
                      const std::vector<std::vector<uint32_t>>& groups, const Cluster& cluster,
                      const std::function<const PlatformRoutes&()>& routes, bool skeletons, RankFold* out);

}  // namespace hetsim::models
