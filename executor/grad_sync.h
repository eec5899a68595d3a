// Gradient synchronisation after the last backward pass of an iteration, for any plan: plain DP,
// intra-stage DP, replicas in pipelines with different layer splits (AutoHet II-C: the groups are cut
// at every stage boundary of every pipeline) and with different TP degrees (HexiScale §3.2: a layer is
// cut into lcm(TP degrees) chunks, chunk c is all-reduced among the ranks that own it).
//
// Three steps, each a sequence of collectives every member issues in the same global order:
//  1. In each TP group, key/value heads shared by several TP ranks (TP > kv heads) sum their partial
//     gradients.
//  2. For each gradient-sync group of this rank (models::DeriveGradSyncGroups, in plan order): the chunk's
//     rows of every parameter of the group's layers — all rows of those replicated over TP (norms, MoE
//     routers) when the members share one TP degree, as Megatron-LM's DDP buffers and the lowering hold
//     them — are packed into one buffer and all-reduced (sum).
//  3. In each TP group, tensors a rank holds beyond its own shard (replicated norms and routers, shared
//     key/value heads) are completed from the owners' synchronised rows, so that the TP ranks' copies stay
//     identical to the bit whatever order each group's reduction summed in.
//
// ZeRO (plan zero_stage 1-3, as the lowering orders it; docs/executor.md "ZeRO"): step 2 reduce-scatters
// instead: each bucket of a group's packed buffer is cut into one equal segment per member (the last padded
// with zeros), and a member keeps the sum of its segments only. The optimizer (ZeroStep) runs Adam on the
// rank's segments of the packed parameters — its optimizer state is those segments', the per-tensor state of
// the synchronised layers is freed — and AllGatherGroup gathers every member's updated segments back into
// the parameters (ZeRO-3 also before every pass). Step 3 then completes the parameters a rank holds beyond
// its shard from their owners (FinishStep), instead of their gradients.
#pragma once

#include <map>
#include <set>
#include <vector>

#include "executor/backend.h"
#include "executor/exec_plan.h"
#include "executor/stage_model.h"
#include "executor/trace.h"

namespace hetsim::executor {

class GradSync {
 public:
  // `group_comms` maps a sync group's rank list to its communicator (this rank's groups only);
  // `tp_comm` is null when tp == 1.
  GradSync(Backend* backend, const ExecPlan& plan, int rank, StageModel* model, Comm* tp_comm,
           std::map<std::vector<int>, Comm*> group_comms, SliceRecorder* recorder);
  // The three steps in the order of the plan's lowering: Begin() (step 1) after the last backward, then
  // RunGroup() for every gradient-sync operation of the rank's list (step 2: bucket `bucket` of
  // `num_buckets` of sync group `index` of ExecPlan::sync_groups; returns the bytes all-reduced), then
  // End() (step 3) before the optimizer step.
  void Begin();
  // Sequence parallelism: the norms' and MoE routers' gradients, partial per TP rank, summed over the TP
  // group (the lowering's TP all-reduce before the gradient sync); returns the bytes all-reduced.
  double SumSequenceParallel();
  double RunGroup(size_t index, uint32_t bucket, uint32_t num_buckets);
  // Hierarchical all-reduce (comm.dp_algorithm: hierarchical, across nodes with equal members each), one of
  // its three collectives on bucket `bucket` of sync group `index`: a reduce-scatter among the node's
  // members (`comm`), an all-reduce of the rank's segment among the members of its position on the other
  // nodes, an all-gather among the node's members; returns the bytes the collective carried.
  double RunHierarchical(size_t index, uint32_t bucket, uint32_t num_buckets, models::CollectiveKind kind, Comm* comm);
  void End();
  // comm.dp_overlap: RunGroup's collectives go to these communicators (the side stream's own, one per
  // group's rank list) instead of the ones ZeRO's parameter all-gathers use on the main stream.
  void UseSideComms(const std::map<std::vector<int>, Comm*>& side_comms);
  // ZeRO: the parameters of sync group `index` from every member's segments (returns the bytes gathered,
  // the group's packed size); Adam on this rank's segments; the end of a step's operations (step 3 on the
  // parameters).
  bool zero() const { return zero_; }
  double AllGatherGroup(size_t index);
  // ZeRO-3 by units (models::Lowering::zero_units): bucket `bucket` of sync group `index` is the group's
  // bucket-th layer. GatherUnit all-gathers that layer's parameters from every member's segment;
  // ReduceUnit reduce-scatters its gradients (of the micro-batch just run) and adds this rank's segment to
  // the accumulated shard, then clears the layer's gradients for the next micro-batch (FSDP frees them).
  // Both return the bytes of the layer's packed rows.
  double GatherUnit(size_t index, uint32_t bucket);
  double ReduceUnit(size_t index, uint32_t bucket);
  // The start of a step's accumulation (ReduceUnit adds): the gradient shards cleared.
  void ClearGradSegments();
  void ZeroStep(const AdamParams& adam);
  void FinishStep();
  // Layers whose parameters ZeroStep updates (the model's own step skips them).
  const std::set<uint32_t>& zero_layers() const { return zero_layers_; }
  // Checks only (--dump-gradients / --compare-gradients): every member's reduced gradient segments gathered
  // back into the gradients, and step 3 on them, so that every rank holds the synchronised gradient.
  void GatherGradientsForCheck();
  // All three steps, groups in plan order (tests).
  void Run();
  // Number of sync groups this rank belongs to.
  size_t num_groups() const { return groups_.size(); }

 private:
  struct Piece {
    size_t param;      // index into the model's params
    RowRange rows;     // local rows of the parameter
    int64_t offset;    // element offset in the packed buffer
  };
  struct Group {
    Comm* comm;       // the main stream's
    Comm* sync_comm;  // RunGroup's: `comm`, or the side stream's (UseSideComms)
    std::vector<Piece> pieces;
    int64_t numel = 0;
    Buffer buffer;  // packed gradients while a bucketed sync is under way
    // ZeRO: buckets [begin, end) of the packed buffer, each cut into `seg` elements per member; this rank's
    // segments of every bucket, concatenated (offset `at`), of gradients, parameters and Adam's moments.
    struct Bucket {
      int64_t begin = 0, end = 0, seg = 0, at = 0;
    };
    std::vector<Bucket> buckets;
    int64_t seg_total = 0;
    Buffer grad_seg, param_seg, m_seg, v_seg;
    Buffer node_seg;  // hierarchical: this rank's reduced segment of the bucket under way
  };
  // Packs the group's gradients at a sync's first bucket and returns the bucket's range; at the last
  // bucket `finish` unpacks them.
  std::pair<int64_t, int64_t> BucketRange(Group& g, uint32_t bucket, uint32_t num_buckets);
  void FinishBuckets(Group& g);
  // Packs `params` rows (masters or gradients) of the group's pieces into `packed`, or unpacks from it.
  void Pack(const Group& g, Tensor packed, bool masters);
  void Unpack(const Group& g, Tensor packed, bool masters);
  // The same for the pieces inside the packed range [begin, end) (a unit's bucket), `packed` holding that
  // range only.
  void PackRange(const Group& g, Tensor packed, int64_t begin, int64_t end, bool masters);
  void UnpackRange(const Group& g, Tensor packed, int64_t begin, int64_t end, bool masters);
  // ZeRO-3 by units: one bucket per layer of the group, cut where its pieces' layers change.
  void UnitBuckets(Group& g, const models::GradSyncGroup& sg);
  // The group of a unit call (checked: this rank shards it, the bucket exists).
  Group& UnitGroup(size_t index, uint32_t bucket, const char* what);
  // Every member's segments of the group into `packed` (the group's full packed layout).
  void GatherSegments(Group& g, Tensor segments, Tensor packed);
  // `src` reduce-scattered over `comm` into `out` (this rank's segment; every member's is out.numel()
  // elements, the tail of the last padded with zeros).
  void ReduceScatterPadded(Comm* comm, Tensor src, Tensor out);
  // All-reduces over the TP group a buffer holding the listed parameters' gradients in their global
  // layout: each rank contributes its held rows (or only its owned shard) and reads back its held rows.
  void TpGlobalExchange(const std::vector<size_t>& params, bool owned_only, bool masters = false);

  Backend* be_;
  const ExecPlan& plan_;
  const RankRole& role_;
  StageModel* model_;
  Comm* tp_comm_;
  SliceRecorder* recorder_;
  std::map<size_t, Group> groups_;  // by index into ExecPlan::sync_groups
  std::vector<size_t> partial_params_;   // step 1
  std::vector<size_t> complete_params_;  // step 3
  bool zero_ = false;
  bool units_ = false;  // ZeRO-3 by units
  std::set<uint32_t> zero_layers_;
};

}  // namespace hetsim::executor
