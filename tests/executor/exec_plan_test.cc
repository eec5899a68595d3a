// ExecPlan: ranks, shares of micro-batches, pipeline transfers and sync groups, derived by hand for the
// bundled cpu-4 plans.
#include "executor/exec_plan.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <tuple>

#include "tests/executor/loaded_plan.h"

namespace hetsim::executor {
namespace {

using test_plans::Load;
using test_plans::Loaded;

Result<ExecPlan> Build(const Loaded& l) {
  const models::PlanContext ctx{l.cluster, l.model, l.training};
  EXPECT_TRUE(models::ValidatePlanStructure(l.plan, ctx, "plan").ok());
  return BuildExecPlan(l.plan, ctx, "plan");
}

bool SameTransfer(const Transfer& t, int peer, uint32_t begin, uint32_t end) {
  return t.peer == peer && t.begin == begin && t.end == end;
}

TEST(ExecPlanTest, PureDataParallelHasOneSyncGroupAndNoTransfers) {
  const Loaded l = Load("cpu-4-dp4");
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->world_size(), 4);
  for (int r = 0; r < 4; ++r) {
    const RankRole& role = ep->roles[static_cast<size_t>(r)];
    EXPECT_EQ(role.device, static_cast<uint32_t>(r));
    EXPECT_EQ(role.pipeline, static_cast<uint32_t>(r));
    // Pipelines of 2 x 2 sequences: pipeline p starts at sequence 4p.
    EXPECT_EQ(role.first_sequence, 4u * static_cast<uint32_t>(r));
    EXPECT_EQ(role.FirstSequence(1), 4u * static_cast<uint32_t>(r) + 2);
    EXPECT_TRUE(role.send_forward.empty() && role.recv_backward.empty());
  }
  // One segment (no stage boundaries) held by 4 replicas with TP 1: one group of all ranks.
  ASSERT_EQ(ep->sync_groups.size(), 1u);
  EXPECT_EQ(ep->sync_groups[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(ep->tp_groups.empty());
  EXPECT_TRUE(ep->channels.empty());
}

TEST(ExecPlanTest, AsymmetricPipelinesSyncInChunks) {
  const Loaded l = Load("cpu-4-hetero");
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->world_size(), 4);
  const auto& r0 = ep->roles[0];
  const auto& r1 = ep->roles[1];
  const auto& r2 = ep->roles[2];
  const auto& r3 = ep->roles[3];
  EXPECT_EQ(r0.tp, 2u);
  EXPECT_EQ(r1.tp_rank, 1u);
  EXPECT_EQ(r0.tp_group, (std::vector<int>{0, 1}));
  EXPECT_EQ(r2.stage, 1u);
  EXPECT_EQ(r2.layer_begin, 2u);
  // Pipeline 1 starts after pipeline 0's 5 x 2 sequences.
  EXPECT_EQ(r3.pipeline, 1u);
  EXPECT_EQ(r3.first_sequence, 10u);
  EXPECT_EQ(r3.share.size(), 3u);
  // Forward: stage 1 (TP 1) receives all 2 sequences from TP rank 0 mod 2 = rank 0.
  ASSERT_EQ(r0.send_forward.size(), 1u);
  EXPECT_TRUE(SameTransfer(r0.send_forward[0], 2, 0, 2));
  EXPECT_TRUE(r1.send_forward.empty());
  ASSERT_EQ(r2.recv_forward.size(), 1u);
  EXPECT_TRUE(SameTransfer(r2.recv_forward[0], 0, 0, 2));
  // Backward: both TP ranks of stage 0 receive the gradients from rank 2.
  ASSERT_EQ(r2.send_backward.size(), 2u);
  EXPECT_TRUE(SameTransfer(r2.send_backward[0], 0, 0, 2));
  EXPECT_TRUE(SameTransfer(r2.send_backward[1], 1, 0, 2));
  EXPECT_EQ(ep->channels, (std::vector<std::pair<int, int>>{{0, 2}, {2, 0}, {2, 1}}));
  // Layers 0-1: TP degrees 2 and 1, lcm 2: chunk 0 {0, 3}, chunk 1 {1, 3}. Layers 2-5: {2, 3}.
  ASSERT_EQ(ep->sync_groups.size(), 3u);
  EXPECT_EQ(ep->sync_groups[0].ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(ep->sync_groups[0].group.num_chunks, 2u);
  EXPECT_EQ(ep->sync_groups[1].ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(ep->sync_groups[1].group.chunk, 1u);
  EXPECT_EQ(ep->sync_groups[2].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(ep->sync_groups[2].group.layer_begin, 2u);
  EXPECT_EQ(ep->sync_groups[2].group.layer_end, 6u);
  // Canonical copies: pipeline 0's holders.
  EXPECT_EQ(ep->canonical_holder[1], (std::array<uint32_t, 3>{0, 0, 0}));
  EXPECT_EQ(ep->canonical_holder[5], (std::array<uint32_t, 3>{0, 1, 0}));
}

TEST(ExecPlanTest, NonUniformSplitRedistributesBetweenStages) {
  const Loaded l = Load("cpu-4-dp-split");
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto& r0 = ep->roles[0];
  const auto& r1 = ep->roles[1];
  const auto& r2 = ep->roles[2];
  const auto& r3 = ep->roles[3];
  EXPECT_EQ(r0.share.begin, 0u);
  EXPECT_EQ(r0.share.end, 3u);
  EXPECT_EQ(r1.share.begin, 3u);
  EXPECT_EQ(r1.share.end, 4u);
  EXPECT_EQ(r1.FirstSequence(2), 2u * 4 + 3);
  EXPECT_EQ(r2.share.size(), 4u);
  // Forward: each TP rank of stage 1 gets sequences 0-2 from replica 0 and 3 from replica 1.
  ASSERT_EQ(r0.send_forward.size(), 2u);
  EXPECT_TRUE(SameTransfer(r0.send_forward[0], 2, 0, 3));
  EXPECT_TRUE(SameTransfer(r0.send_forward[1], 3, 0, 3));
  ASSERT_EQ(r3.recv_forward.size(), 2u);
  EXPECT_TRUE(SameTransfer(r3.recv_forward[0], 0, 0, 3));
  EXPECT_TRUE(SameTransfer(r3.recv_forward[1], 1, 3, 4));
  // Backward: replica r of stage 0 (TP 1) gets its rows from TP rank 0 mod 2 = rank 2.
  ASSERT_EQ(r2.send_backward.size(), 2u);
  EXPECT_TRUE(SameTransfer(r2.send_backward[0], 0, 0, 3));
  EXPECT_TRUE(SameTransfer(r2.send_backward[1], 1, 3, 4));
  EXPECT_TRUE(r3.send_backward.empty());
  ASSERT_EQ(r1.recv_backward.size(), 1u);
  EXPECT_TRUE(SameTransfer(r1.recv_backward[0], 2, 0, 1));
  // Only stage 0 has replicas: one group {0, 1} over layers 0-2.
  ASSERT_EQ(ep->sync_groups.size(), 1u);
  EXPECT_EQ(ep->sync_groups[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(ep->sync_groups[0].group.layer_end, 3u);
}

TEST(ExecPlanTest, RanksFollowSortedDevices) {
  Loaded l = Load("cpu-4-pp2");
  // Move the pipeline to devices 3 and 1: rank 0 = device 1 (stage 1), rank 1 = device 3 (stage 0).
  l.plan.mutable_pipelines(0)->mutable_stages(0)->set_devices(0, 3);
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->devices, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(ep->roles[0].stage, 1u);
  EXPECT_EQ(ep->roles[1].stage, 0u);
  EXPECT_EQ(ep->RankOfDevice(3), 1);
  EXPECT_EQ(ep->RankOfDevice(0), -1);
}

// Interleaved 1F1B runs each stage's model chunks where Megatron-LM places them: on cpu-4-pp2 (stage 0
// [0,3), stage 1 [3,6)) with two virtual stages, rank 0 computes {embedding, block 1} and {block 3}, rank 1
// {block 2} and {block 4, head}; block 3's canonical holder is then stage 0.
TEST(ExecPlanTest, InterleavedRanksHoldMegatronsChunks) {
  Loaded l = Load("cpu-4-pp2");
  l.plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
  l.plan.set_virtual_stages(2);
  const models::PlanContext ctx{l.cluster, l.model, l.training};
  auto ep = BuildExecPlan(l.plan, ctx, "p.yaml");
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto& r0 = ep->roles[0];
  const auto& r1 = ep->roles[1];
  ASSERT_EQ(r0.chunks.size(), 2u);
  ASSERT_EQ(r1.chunks.size(), 2u);
  EXPECT_EQ(r0.num_chunks, 2u);
  EXPECT_EQ(r0.chunks[0].begin, 0u);
  EXPECT_EQ(r0.chunks[0].end, 2u);
  EXPECT_EQ(r0.chunks[1].begin, 3u);
  EXPECT_EQ(r0.chunks[1].end, 4u);
  EXPECT_EQ(r1.chunks[0].begin, 2u);
  EXPECT_EQ(r1.chunks[0].end, 3u);
  EXPECT_EQ(r1.chunks[1].begin, 4u);
  EXPECT_EQ(r1.chunks[1].end, 6u);
  EXPECT_EQ(ep->canonical_holder[3][1], 0u);
  EXPECT_EQ(ep->canonical_holder[2][1], 1u);
}

TEST(ExecPlanTest, RejectsNonLlamaModels) {
  Loaded l = Load("cpu-4-pp2");
  auto gpt = models::LoadModel("gpt3-350m");
  ASSERT_TRUE(gpt.ok());
  const Status s = CheckExecutableModel(*gpt);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rmsnorm"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckExecutableModel(l.model).ok());
  // The tiny MoE model with a multi-token-prediction module: refused with the field.
  proto::Model moe = models::LoadModel("llama-tiny-moe")->spec();
  moe.mutable_moe()->set_mtp_modules(1);
  auto mtp = models::TransformerModel::Build(moe, "mtp.yaml");
  ASSERT_TRUE(mtp.ok()) << mtp.status().message();
  const Status m = CheckExecutableModel(*mtp);
  EXPECT_NE(m.message().find("moe.mtp_modules must be 0"), std::string::npos) << m.message();
}

// Context parallelism on cpu-4-tp2 widened to four devices: TP innermost, then the CP rank, so devices 0-1
// are CP rank 0's TP group and 2-3 CP rank 1's; the rings pair equal TP ranks, and each rank processes
// seq_len / 2 tokens of every sequence.
TEST(ExecPlanTest, CpRanksHoldTheirChunksAndRings) {
  Loaded l = Load("cpu-4-tp2");
  auto* st = l.plan.mutable_pipelines(0)->mutable_stages(0);
  st->add_devices(2);
  st->add_devices(3);
  st->set_cp_degree(2);
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->world_size(), 4);
  EXPECT_EQ(ep->tp_groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(ep->cp_groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_TRUE(ep->uly_groups.empty());
  EXPECT_EQ(ep->roles[3].cp, 2u);
  EXPECT_EQ(ep->roles[3].shard, 1u);
  EXPECT_EQ(ep->roles[3].tp_rank, 1u);
  EXPECT_EQ(ep->roles[1].cp_group, (std::vector<int>{1, 3}));
  // The ring's messages stay inside the pass: no pipeline channels.
  EXPECT_TRUE(ep->channels.empty());
}

// Ulysses on cpu-4-tp2 widened to four devices: TP innermost, then the sequence shard (models::StageDevice),
// so devices 0-1 are shard 0's TP group and 2-3 shard 1's; the Ulysses groups pair equal TP ranks.
TEST(ExecPlanTest, UlyssesRanksHoldTheirShardAndGroups) {
  Loaded l = Load("cpu-4-tp2");
  auto* st = l.plan.mutable_pipelines(0)->mutable_stages(0);
  st->add_devices(2);
  st->add_devices(3);
  st->set_ulysses_degree(2);
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->world_size(), 4);
  EXPECT_EQ(ep->tp_groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(ep->uly_groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(ep->roles[2].shard, 1u);
  EXPECT_EQ(ep->roles[2].tp_rank, 0u);
  EXPECT_EQ(ep->roles[3].uly_group, (std::vector<int>{1, 3}));
  EXPECT_EQ(ep->roles[1].ulysses, 2u);
  // Every shard holds the same weights: one sync group of the four ranks' TP rank 0 ... per TP chunk.
  for (const auto& sg : ep->sync_groups) EXPECT_EQ(sg.ranks.size(), 2u);
}

// A key/value head cannot be split over Ulysses ranks: llama-tiny with one kv head and u = 2 is refused.
TEST(ExecPlanTest, RefusesUlyssesThatSplitsAHead) {
  Loaded l = Load("cpu-4-dp4");
  proto::Model spec = l.model.spec();
  spec.set_num_kv_heads(1);
  auto mqa = models::TransformerModel::Build(spec, "mqa.yaml");
  ASSERT_TRUE(mqa.ok());
  l.model = *mqa;
  auto* pipe = l.plan.mutable_pipelines(0);
  pipe->mutable_stages(0)->add_devices(1);
  pipe->mutable_stages(0)->set_ulysses_degree(2);
  l.plan.mutable_pipelines()->DeleteSubrange(1, 3);
  const models::PlanContext ctx{l.cluster, l.model, l.training};
  auto ep = BuildExecPlan(l.plan, ctx, "p.yaml");
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("p.yaml: pipelines[0].stages[0].ulysses_degree: 2 does not divide the 8 "
                                       "query and 1 key/value heads"),
            std::string::npos)
      << ep.status().message();
}

// CPU offload (ZeRO-Offload, ZeRO-Infinity, FSDP CPUOffload) has no host optimizer or host-resident shards
// here: refused with the field to change, never run with everything on the GPU.
TEST(ExecPlanTest, RefusesCpuOffload) {
  for (const auto& [zero, offload, name] :
       {std::tuple{2u, proto::Plan::OFFLOAD_OPTIMIZER, "optimizer"},
        std::tuple{3u, proto::Plan::OFFLOAD_OPTIMIZER_AND_PARAMS, "optimizer_and_params"}}) {
    Loaded l = Load("cpu-4-dp4");
    l.plan.set_zero_stage(zero);
    l.plan.set_offload(offload);
    const models::PlanContext ctx{l.cluster, l.model, l.training};
    auto ep = BuildExecPlan(l.plan, ctx, "p.yaml");
    ASSERT_FALSE(ep.ok()) << name;
    EXPECT_NE(ep.status().message().find(std::string("p.yaml: offload: ") + name), std::string::npos)
        << ep.status().message();
    EXPECT_NE(ep.status().message().find("set offload: none"), std::string::npos) << ep.status().message();
  }
  Loaded l = Load("cpu-4-dp4");
  l.plan.set_offload(proto::Plan::OFFLOAD_NONE);
  EXPECT_TRUE(Build(l).ok());
}

// What the executor has no implementation of is refused with the field to change, never run in another
// form; where the option changes nothing (TP 1), the plan runs.
TEST(ExecPlanTest, RefusesFeaturesItDoesNotRun) {
  const auto refused = [](Loaded l, const std::string& field) {
    auto ep = Build(l);
    ASSERT_FALSE(ep.ok()) << field;
    EXPECT_NE(ep.status().message().find(": " + field + ": "), std::string::npos) << ep.status().message();
    EXPECT_NE(ep.status().message().find("simulate this plan"), std::string::npos) << ep.status().message();
  };
  // Sequence parallelism runs where every pipeline keeps one TP degree (cpu-4-tp2), not where it changes.
  Loaded sp = Load("cpu-4-tp2");
  sp.plan.set_sequence_parallel(true);
  auto runs = Build(sp);
  ASSERT_TRUE(runs.ok()) << runs.status().message();
  EXPECT_TRUE(runs->sequence_parallel);
  Loaded mixed = Load("cpu-4-pp2");
  mixed.plan.set_sequence_parallel(true);
  mixed.plan.mutable_pipelines(0)->mutable_stages(0)->add_devices(2);
  mixed.plan.mutable_pipelines(0)->mutable_stages(0)->set_tp_degree(2);
  refused(mixed, "sequence_parallel");
  Loaded overlap = Load("cpu-4-tp2");
  overlap.plan.mutable_comm()->set_tp_overlap(true);
  refused(overlap, "comm.tp_overlap");
  Loaded op = Load("cpu-4-dp4");
  op.plan.set_recompute(proto::RECOMPUTE_OP_SELECTIVE);  // torchtitan's per-operation policy
  refused(op, "recompute");
  Loaded tp1 = Load("cpu-4-dp4");
  tp1.plan.set_sequence_parallel(true);
  tp1.plan.mutable_comm()->set_tp_overlap(true);
  auto plain = Build(tp1);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(plain->sequence_parallel);  // no TP stage: nothing to shard
}

// Megatron-LM's scatter-gather between two TP-2 stages runs: each TP rank sends half of every message and
// the receiving TP group all-gathers it (the lowering's sends of half the bytes and its all-gather).
TEST(ExecPlanTest, RunsPipelineScatterGatherBetweenStagesOfEqualTp) {
  Loaded sg = Load("cpu-4-pp2");
  auto* stages = sg.plan.mutable_pipelines(0)->mutable_stages();
  stages->Mutable(0)->add_devices(2);
  stages->Mutable(0)->set_tp_degree(2);
  stages->Mutable(1)->add_devices(3);
  stages->Mutable(1)->set_tp_degree(2);
  sg.plan.mutable_comm()->set_pp_scatter_gather(true);
  auto ep = Build(sg);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_TRUE(ep->pp_scatter_gather);
  size_t gathers = 0;
  for (const auto& op : ep->Ops(3)) {
    gathers += op.kind == models::OpKind::kCollective && op.category == models::Category::kPp &&
               op.collective == models::CollectiveKind::kAllGather;
  }
  EXPECT_EQ(gathers, 8u);  // rank 3 (stage 1, TP rank 1): one per forward receive of the 8 micro-batches
}

// Selective recomputation runs (the attention probabilities recomputed in the backward).
TEST(ExecPlanTest, RunsSelectiveRecomputation) {
  Loaded l = Load("cpu-4-hetero");
  l.plan.set_recompute(proto::RECOMPUTE_SELECTIVE);
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_TRUE(ep->selective_recompute);
  EXPECT_FALSE(ep->full_recompute);
}

// DP overlap runs as lowered: the ranks keep the DP stream (an await and an all-reduce per gradient group on
// cpu-4-dp4's one group) and the main stream's signal and join.
TEST(ExecPlanTest, KeepsTheDpStreamOfOverlappedPlans) {
  Loaded l = Load("cpu-4-dp4");
  l.plan.mutable_comm()->set_dp_overlap(true);
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  for (int r = 0; r < 4; ++r) {
    const auto& dp = ep->DpOps(r);
    ASSERT_EQ(dp.size(), 2u);
    EXPECT_EQ(dp[0].kind, models::OpKind::kAwait);
    EXPECT_EQ(dp[1].collective, models::CollectiveKind::kAllReduce);
    size_t signals = 0, joins = 0;
    for (const auto& op : ep->Ops(r)) {
      signals += op.kind == models::OpKind::kSignal;
      joins += op.kind == models::OpKind::kJoin;
    }
    EXPECT_EQ(signals, 1u);
    EXPECT_EQ(joins, 1u);
  }
}

// Shared key/value heads (TP 2 over one kv head) sum their gradients over TP before the whole sync: the
// executor cannot overlap that, and says so.
TEST(ExecPlanTest, RefusesOverlapWithSharedKeyValueHeads) {
  Loaded l = Load("cpu-4-tp2");
  proto::Model spec = l.model.spec();
  spec.set_num_kv_heads(1);
  auto mqa = models::TransformerModel::Build(spec, "mqa.yaml");
  ASSERT_TRUE(mqa.ok()) << mqa.status().message();
  l.model = *mqa;
  l.plan.mutable_comm()->set_dp_overlap(true);
  const models::PlanContext ctx{l.cluster, l.model, l.training};
  auto ep = BuildExecPlan(l.plan, ctx, "p.yaml");
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("p.yaml: comm.dp_overlap: a stage with TP 2 > 1 key/value heads"),
            std::string::npos)
      << ep.status().message();
}

// ZeRO, hierarchical all-reduces and the PP leader broadcast run as lowered: no warning, and the lowering the
// ranks run keeps them (reduce-scatters, the broadcast).
TEST(ExecPlanTest, RunsZeroHierarchicalAndLeaderBroadcastAsLowered) {
  Loaded l = Load("cpu-4-dp4");
  l.plan.set_zero_stage(2);
  l.plan.mutable_comm()->set_dp_algorithm(proto::CommOptions::ALGORITHM_HIERARCHICAL);
  l.plan.mutable_comm()->set_pp_leader_broadcast(true);
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->zero_stage, 2u);
  bool reduce_scatter = false;
  for (const auto& op : ep->Ops(0)) reduce_scatter |= op.collective == models::CollectiveKind::kReduceScatter;
  EXPECT_TRUE(reduce_scatter);
}

TEST(ExecPlanTest, ExpertParallelGroupsAndSyncParts) {
  // cpu-4-ep4: one stage of four replicas, EP 4: one EP group of every rank, EP rank = position; no expert-DP
  // group (each expert on one rank), so the only sync group is the dense part's over the four replicas.
  Loaded l = Load("cpu-4-ep4");
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->ep_groups.size(), 1u);
  EXPECT_EQ(ep->ep_groups[0], (std::vector<int>{0, 1, 2, 3}));
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(ep->roles[r].ep, 4u);
    EXPECT_EQ(ep->roles[r].ep_rank, r);
    EXPECT_EQ(ep->roles[r].edp_rank, 0u);
  }
  ASSERT_EQ(ep->sync_groups.size(), 1u);
  EXPECT_EQ(ep->sync_groups[0].group.part, models::GradSyncGroup::Part::kDense);
  EXPECT_DOUBLE_EQ(ep->moe_capacity_factor, 4.0);
  // EP 2 of the same stage: groups {0, 1} and {2, 3}; experts synchronise over expert DP {0, 2} and {1, 3}.
  l.plan.mutable_pipelines(0)->mutable_stages(0)->set_ep_degree(2);
  ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->ep_groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(ep->roles[3].ep_rank, 1u);
  EXPECT_EQ(ep->roles[3].edp_rank, 1u);
  std::vector<std::vector<int>> expert_groups;
  for (const auto& sg : ep->sync_groups) {
    if (sg.group.part == models::GradSyncGroup::Part::kExperts) expert_groups.push_back(sg.ranks);
  }
  EXPECT_EQ(expert_groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  // Every lowered sync group maps to the plan's group of the same part and members.
  for (uint32_t g = 0; g < ep->lowering.sync_groups.size(); ++g) {
    const auto& sg = ep->sync_groups[ep->SyncGroupOfLowering(g)].group;
    EXPECT_EQ(sg.part, ep->lowering.sync_groups[g].part);
    EXPECT_EQ(sg.devices, ep->lowering.sync_groups[g].devices);
  }
}

// The lowering's EP and expert-TP groups of a rank's MoE collectives, as world ranks: (all-to-all groups,
// all-gather and reduce-scatter groups).
std::pair<std::set<std::vector<int>>, std::set<std::vector<int>>> ExpertGroupsOfOps(const ExecPlan& ep, int rank) {
  std::set<std::vector<int>> a2a, etp;
  for (const auto& op : ep.Ops(rank)) {
    if (op.kind != models::OpKind::kCollective || op.category != models::Category::kEp) continue;
    std::vector<int> ranks;
    for (uint32_t d : ep.lowering.groups.at(op.group)) ranks.push_back(ep.RankOfDevice(d));
    (op.collective == models::CollectiveKind::kAllToAll ? a2a : etp).insert(ranks);
  }
  return {a2a, etp};
}

TEST(ExecPlanTest, ExpertTensorParallelFoldsTheStageAsTheLoweringDoes) {
  // cpu-4-ep4 as two TP-2 replicas with sequence parallelism and EP 2, expert TP 2 (the default, the stage's
  // TP): Megatron-Core's folding of devices 0-3, expert TP fastest: expert-TP groups {0, 1}, {2, 3}, EP groups
  // {0, 2}, {1, 3}, expert DP 1 (no expert sync group).
  Loaded l = Load("cpu-4-ep4");
  l.plan.set_sequence_parallel(true);
  auto* st = l.plan.mutable_pipelines(0)->mutable_stages(0);
  st->set_tp_degree(2);
  st->set_ep_degree(2);
  auto ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->etp_groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(ep->ep_groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  const uint32_t ep_rank[] = {0, 0, 1, 1}, etp_rank[] = {0, 1, 0, 1};
  for (int r = 0; r < 4; ++r) {
    const RankRole& role = ep->roles[static_cast<size_t>(r)];
    EXPECT_EQ(role.etp, 2u);
    EXPECT_EQ(role.ep_rank, ep_rank[r]) << r;
    EXPECT_EQ(role.etp_rank, etp_rank[r]) << r;
    EXPECT_EQ(role.edp_rank, 0u);
    // The groups the lowering's MoE collectives name are the rank's.
    const auto [a2a, gathers] = ExpertGroupsOfOps(*ep, r);
    EXPECT_EQ(a2a, std::set<std::vector<int>>{role.ep_group}) << r;
    EXPECT_EQ(gathers, std::set<std::vector<int>>{role.etp_group}) << r;
  }
  for (const auto& sg : ep->sync_groups) EXPECT_NE(sg.group.part, models::GradSyncGroup::Part::kExperts);
  // The sequence-parallel all-reduce before the sync sums the norms' and the routers' gradients: 4 blocks ×
  // 2 norms of 256, 3 routers of 8 × 256 and the final norm's 256, in fp32.
  double sp_bytes = 0;
  for (const auto& op : ep->Ops(0)) {
    if (op.kind == models::OpKind::kCollective && op.category == models::Category::kTp && !op.in_pass) {
      sp_bytes += op.bytes;
    }
  }
  EXPECT_DOUBLE_EQ(sp_bytes, (4 * 2 * 256 + 3 * 8 * 256 + 256) * 4.0);
  // Expert TP 1 under TP 2: EP groups {0, 1}, {2, 3} (the TP groups), no expert-TP group, the experts'
  // gradients over expert DP {0, 2}, {1, 3}.
  st->set_expert_tp_degree(1);
  ep = Build(l);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_TRUE(ep->etp_groups.empty());
  EXPECT_EQ(ep->ep_groups, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  std::vector<std::vector<int>> expert_groups;
  for (const auto& sg : ep->sync_groups) {
    if (sg.group.part == models::GradSyncGroup::Part::kExperts) expert_groups.push_back(sg.ranks);
  }
  EXPECT_EQ(expert_groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_TRUE(ExpertGroupsOfOps(*ep, 1).second.empty());
}

TEST(ExecPlanTest, WhatTheMoeLayerDoesNotRunIsRefusedWithItsField) {
  const auto refused = [](const std::function<void(Loaded&)>& change, const std::string& field) {
    Loaded l = Load("cpu-4-ep4");
    change(l);
    const models::PlanContext ctx{l.cluster, l.model, l.training};
    auto ep = BuildExecPlan(l.plan, ctx, "plan");
    ASSERT_FALSE(ep.ok()) << field;
    EXPECT_NE(ep.status().message().find(field), std::string::npos) << ep.status().message();
  };
  refused([](Loaded& l) { l.plan.mutable_comm()->set_ep_dispatcher(proto::CommOptions::EP_DISPATCHER_NODE_DEDUP); },
          "comm.ep_dispatcher: node_dedup");
  refused([](Loaded& l) { l.plan.mutable_comm()->set_ep_overlap(true); }, "comm.ep_overlap");
  refused([](Loaded& l) { l.training.set_moe_capacity_factor(0); }, "training.moe_capacity_factor");
  refused([](Loaded& l) { l.plan.set_zero_stage(1); }, "zero_stage: 1");
  // ZeRO stays refused under TP and expert TP, naming the file and the fix.
  refused(
      [](Loaded& l) {
        l.plan.set_sequence_parallel(true);
        l.plan.mutable_pipelines(0)->mutable_stages(0)->set_tp_degree(2);
        l.plan.mutable_pipelines(0)->mutable_stages(0)->set_ep_degree(2);
        l.plan.set_zero_stage(1);
      },
      "plan: zero_stage: 1: the executor's ZeRO shards whole layers");
  refused(
      [](Loaded& l) {
        proto::Model m = l.model.spec();
        m.mutable_moe()->set_router(proto::MoE::ROUTER_SIGMOID);
        l.model = *models::TransformerModel::Build(m, "m.yaml");
      },
      "moe.router must be softmax");
}

}  // namespace
}  // namespace hetsim::executor
