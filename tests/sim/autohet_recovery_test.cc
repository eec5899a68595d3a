// AutoHet's elastic recovery (sim/recovery/autohet_layers.h, the policy `autohet` in sim/recovery/autohet.cc)
// against hand-derived numbers: which bytes a re-partitioned plan reads (AutoHet §IV-B2), where they come from
// (§IV-C), and how long the recovery takes against Varuna's download of everything from the object store.
#include <gtest/gtest.h>

#include <map>

#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/recovery/autohet_layers.h"
#include "sim/replay.h"
#include "tests/sim/tiny_replay_fixture.h"

namespace hetsim {
namespace {

using sim::Endpoint;
namespace recovery = sim::recovery;
using recovery::LayerPiece;
using recovery::StatePart;

// 3 nodes × 4 A100s: node 0 = devices 0-3, node 1 = 4-7, node 2 = 8-11. NVMe reads at 1 GB/s per node, the
// object store at 0.25 GB/s; PCIe (32 GB/s) and the NIC (12.5 GB/s) are far faster than both.
const char* kAutohetRecoveryCluster = R"(
name: autohet-test
nodes:
  - name: n
    count: 3
    gpus: {type: a100-80gb, count: 4}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_node}
network: {single_switch: {}}
storage:
  - {name: store, kind: object_store, read_bandwidth_gbyte_s: 0.25, write_bandwidth_gbyte_s: 0.25}
  - {name: nvme, kind: local_nvme, read_bandwidth_gbyte_s: 1, write_bandwidth_gbyte_s: 1}
)";

constexpr double kBlockParams = 12 * 64 * 64 + 13 * 64;  // a tiny-GPT block (tiny_replay_fixture.h)
// fp16 weights: 2 bytes per parameter; mixed-precision Adam: fp32 master weights and two moments, 12 bytes.
constexpr double kWeightBytes = 2, kOptimizerBytes = 12;

class AutohetRecoveryTest : public testing::TinyReplayFixture {
 protected:
  void SetUp() override { Build(kAutohetRecoveryCluster); }

  // One pipeline per entry: its stages as (devices, TP degree, layer_begin, layer_end).
  struct StageSpec {
    std::vector<uint32_t> devices;
    uint32_t tp;
    uint32_t begin, end;
  };
  static proto::Plan Plan(const std::string& name, const std::vector<std::vector<StageSpec>>& pipelines,
                          uint32_t zero = 0) {
    proto::Plan p;
    p.set_name(name);
    p.set_zero_stage(zero);
    for (const auto& stages : pipelines) {
      auto* pl = p.add_pipelines();
      pl->set_micro_batch_size(1);
      pl->set_num_micro_batches(8 / static_cast<uint32_t>(pipelines.size()));
      for (const auto& s : stages) {
        auto* st = pl->add_stages();
        for (uint32_t d : s.devices) st->add_devices(d);
        st->set_tp_degree(s.tp);
        st->set_layer_begin(s.begin);
        st->set_layer_end(s.end);
      }
    }
    return p;
  }
  uint32_t L() const { return model_->num_layers(); }  // embedding + 4 blocks + head = 6

  std::vector<LayerPiece> Pieces(const proto::Plan& plan, const std::vector<recovery::DevicePlace>& places) {
    models::PlanContext ctx{*cluster_, *model_, training_};
    EXPECT_TRUE(models::ValidatePlanStructure(plan, ctx, plan.name()).ok()) << plan.name();
    return recovery::LayerPieces(plan, ctx, places);
  }
  std::vector<LayerPiece> Pieces(const proto::Plan& plan) { return Pieces(plan, recovery::PlacesOn(*cluster_)); }

  // Bytes per destination device, per source (kind, index).
  static std::map<uint32_t, std::map<std::pair<int, uint32_t>, double>> ByDevice(const recovery::RecoveryLoad& load) {
    std::map<uint32_t, std::map<std::pair<int, uint32_t>, double>> out;
    for (const auto& t : load.transfers) out[t.to.index][{t.from.kind, t.from.index}] += t.bytes;
    return out;
  }
  static double Total(const std::vector<LayerPiece>& pieces) {
    double s = 0;
    for (const auto& p : pieces) s += p.bytes();
    return s;
  }

};

TEST_F(AutohetRecoveryTest, PiecesAreTpShardsOfEachLayer) {
  // TP 2 on one stage: rank k holds [k/2, (k+1)/2) of every layer's weights and optimizer state; a block's
  // parts are 49,984 parameters × 2 and × 12 bytes.
  const auto pieces = Pieces(Plan("tp2", {{{{0, 1}, 2, 0, L()}}}));
  ASSERT_EQ(pieces.size(), 2u * L() * 2);  // 2 devices × 6 layers × 2 parts
  int blocks = 0;
  for (const auto& p : pieces) {
    const double k = p.device;  // devices 0 and 1 are TP ranks 0 and 1
    EXPECT_DOUBLE_EQ(p.begin, k / 2);
    EXPECT_DOUBLE_EQ(p.end, (k + 1) / 2);
    EXPECT_EQ(p.node, 0u);
    if (p.layer >= 1 && p.layer <= 4) {
      ++blocks;
      EXPECT_DOUBLE_EQ(p.part_bytes, kBlockParams * (p.part == StatePart::kWeights ? kWeightBytes : kOptimizerBytes));
    }
  }
  EXPECT_EQ(blocks, 2 * 4 * 2);
}

TEST_F(AutohetRecoveryTest, ZeroShardsTheOptimizerOverReplicas) {
  // ZeRO-1 with 2 pipelines of TP 2: the optimizer range of TP rank k is halved between the replicas; the
  // weights stay whole TP shards.
  const auto pieces = Pieces(Plan("dp2", {{{{0, 1}, 2, 0, L()}}, {{{4, 5}, 2, 0, L()}}}, 1));
  for (const auto& p : pieces) {
    const double k = p.device % 2, replica = p.device / 4;
    if (p.part == StatePart::kWeights) {
      EXPECT_DOUBLE_EQ(p.begin, k / 2);
      EXPECT_DOUBLE_EQ(p.end, (k + 1) / 2);
    } else {
      EXPECT_DOUBLE_EQ(p.begin, k / 2 + replica / 4);
      EXPECT_DOUBLE_EQ(p.end, k / 2 + (replica + 1) / 4);
    }
  }
}

TEST_F(AutohetRecoveryTest, LargerTpSplitsEachOldShardInHalves) {
  // §IV-B2 ii): TP 2 → 4. Old rank 0's pieces on node 0, old rank 1's on node 1 (placed by hand); the new TP-4
  // group on node 2 reads [k/4, (k+1)/4): ranks 0 and 1 each exactly half of old shard 0 (from node 0), ranks
  // 2 and 3 half of old shard 1 (from node 1). Nothing is local, nothing comes from the cloud.
  auto places = recovery::PlacesOn(*cluster_);
  places[1] = {4, 1};  // old TP rank 1 sits on node 1
  const auto old_pieces = Pieces(Plan("tp2", {{{{0, 1}, 2, 0, L()}}}), places);
  double shard[2] = {0, 0};
  for (const auto& p : old_pieces) shard[p.node] += p.bytes();
  ASSERT_GT(shard[0], 0);
  EXPECT_NEAR(shard[0], shard[1], 1e-6 * shard[0]);
  const auto new_pieces = Pieces(Plan("tp4", {{{{8, 9, 10, 11}, 4, 0, L()}}}));
  const auto load = recovery::PlanRecoveryLoad(recovery::LayerBitmap(old_pieces), new_pieces, Endpoint::kNvme);
  EXPECT_DOUBLE_EQ(load.local_bytes, 0);
  EXPECT_DOUBLE_EQ(load.cloud_bytes, 0);
  EXPECT_NEAR(load.peer_bytes, shard[0] + shard[1], 1e-6 * shard[0]);
  const auto by = ByDevice(load);
  ASSERT_EQ(by.size(), 4u);
  for (uint32_t k = 0; k < 4; ++k) {
    const auto& from = by.at(8 + k);
    ASSERT_EQ(from.size(), 1u) << "rank " << k;
    const uint32_t old_rank = k / 2;
    EXPECT_EQ(from.begin()->first, std::make_pair(static_cast<int>(Endpoint::kNvme), old_rank)) << "rank " << k;
    EXPECT_NEAR(from.begin()->second, shard[old_rank] / 2, 1e-6 * shard[0]) << "rank " << k;
  }
}

TEST_F(AutohetRecoveryTest, SmallerTpConcatenatesOldShards) {
  // §IV-B2 iii): TP 2 → 1. The single new rank on node 2 reads both old shards whole, one from each node.
  auto places = recovery::PlacesOn(*cluster_);
  places[1] = {4, 1};
  const auto old_pieces = Pieces(Plan("tp2", {{{{0, 1}, 2, 0, L()}}}), places);
  const auto load =
      recovery::PlanRecoveryLoad(recovery::LayerBitmap(old_pieces), Pieces(Plan("tp1", {{{{8}, 1, 0, L()}}})),
                                 Endpoint::kNvme);
  const auto by = ByDevice(load);
  ASSERT_EQ(by.size(), 1u);
  ASSERT_EQ(by.at(8).size(), 2u);
  const double half = Total(old_pieces) / 2;
  EXPECT_NEAR((by.at(8).at({Endpoint::kNvme, 0})), half, 1e-6 * half);
  EXPECT_NEAR((by.at(8).at({Endpoint::kNvme, 1})), half, 1e-6 * half);
  EXPECT_DOUBLE_EQ(load.cloud_bytes, 0);
}

TEST_F(AutohetRecoveryTest, UnchangedShardsAreReadLocallyAndLostOnesFromTheCloud) {
  // §IV-B2 i) and §IV-C: two stages (node 0: embedding + 2 blocks, node 1: 2 blocks + head). The same plan reads
  // everything from each device's own node; after node 0 left, a plan on node 1 alone reads stage 1's layers
  // locally and exactly stage 0's bytes from the object store.
  const auto before = Pieces(Plan("pp2", {{{{0, 1}, 2, 0, 3}, {{4, 5}, 2, 3, L()}}}));
  recovery::LayerBitmap bitmap(before);
  const auto same = recovery::PlanRecoveryLoad(bitmap, before, Endpoint::kNvme);
  EXPECT_NEAR(same.local_bytes, Total(before), 1e-9 * Total(before));
  EXPECT_DOUBLE_EQ(same.peer_bytes + same.cloud_bytes, 0);
  for (const auto& t : same.transfers) EXPECT_EQ(t.from.index, t.to.index / 4);  // NVMe of the device's node

  bitmap.Forget(0);
  const auto after = Pieces(Plan("tp2-node1", {{{{4, 5}, 2, 0, L()}}}));
  double stage0 = 0, stage1 = 0;
  for (const auto& p : after) (p.layer < 3 ? stage0 : stage1) += p.bytes();
  const auto load = recovery::PlanRecoveryLoad(bitmap, after, Endpoint::kNvme);
  EXPECT_DOUBLE_EQ(load.peer_bytes, 0);
  EXPECT_NEAR(load.cloud_bytes, stage0, 1e-9 * stage0);
  EXPECT_NEAR(load.local_bytes, stage1, 1e-9 * stage1);
}

// ---- the policy in the replay engine --------------------------------------------------------------------

class AutohetReplayTest : public AutohetRecoveryTest {
 protected:
  // Two TP-2 replicas, on node 0 (devices 0, 1) and node 1 (devices 4, 5); node 2 unused by the plan.
  proto::Plan Dp2() { return Plan("dp2", {{{{0, 1}, 2, 0, L()}}, {{{4, 5}, 2, 0, L()}}}); }

  sim::ReplayInputs Inputs(const proto::Trace& trace, const std::string& policy, const proto::Plan& plan) {
    sim::ReplayInputs in;
    in.cluster = &*cluster_;
    in.model = &*model_;
    in.training = training_;
    in.plan = plan;
    in.trace = trace;
    in.trace_name = "test";
    in.spec.set_detection_s(60);
    in.spec.set_restart_s(100);
    in.spec.set_checkpoint_interval_s(600);
    in.policy.set_name(policy);
    in.policy.set_replan_s(7);
    in.sim.fidelity = sim::Fidelity::Fast();
    in.cache = &cache_;
    // One TP-2 replica per live node, on its first two GPUs (the live cluster numbers 4 GPUs per node).
    in.replan = [this](const models::Cluster& live, const proto::RecoveryPolicy&) -> Result<sim::Replanned> {
      std::vector<std::vector<StageSpec>> pipes;
      for (uint32_t n = 0; n < live.nodes().size(); ++n) pipes.push_back({{{4 * n, 4 * n + 1}, 2, 0, L()}});
      return sim::Replanned{Plan("dp" + std::to_string(pipes.size()), pipes), 0};
    };
    return in;
  }
  static proto::Trace Trace(double duration_s) {
    proto::Trace t;
    t.set_name("test");
    t.set_duration_s(duration_s);
    return t;
  }
  static double Downtime(const proto::ReplayReport& r, const std::string& cause) {
    for (const auto& d : r.downtime()) {
      if (d.cause() == cause) return d.seconds();
    }
    return -1;
  }
  // Bytes of the whole training state (every layer's weights and optimizer state once; the head alone with
  // the embedding holds no copy of the tied matrix), from the plan's pieces on one TP-1 device.
  double StateBytes() { return Total(Pieces(Plan("one", {{{{0}, 1, 0, L()}}}))); }

  sim::ReplayCache cache_;
};

TEST_F(AutohetReplayTest, AllLocalRecoveryReadsNvmeAndNothingFromTheCloud) {
  // Nodes 1 and 2 are preempted at 5000 s: the re-plan keeps one replica on node 0, whose host holds all of it.
  // AutoHet reads the whole state S from node 0's NVMe (1 GB/s): S / 1 GB/s. Varuna downloads what the replica's
  // devices hold, V (S plus the norms every TP rank keeps), from the object store (0.25 GB/s). Both pay the same
  // re-planning and restart.
  proto::Trace trace = Trace(20000);
  auto* e = trace.add_events();
  e->set_time_s(5000);
  e->set_kind(proto::TraceEvent::KIND_PREEMPTION);
  e->add_nodes(1);
  e->add_nodes(2);
  auto ah = sim::ReplayRun(Inputs(trace, "autohet", Dp2()));
  ASSERT_TRUE(ah.ok()) << ah.status().message();
  auto va = sim::ReplayRun(Inputs(trace, "varuna", Dp2()));
  ASSERT_TRUE(va.ok()) << va.status().message();
  const double S = StateBytes();
  double V = 0;
  const proto::Plan dp1 = Plan("dp1", {{{{0, 1}, 2, 0, L()}}});
  for (const auto& m : models::EstimateMemory(dp1, {*cluster_, *model_, training_})) {
    V += (m.params_gib + m.optimizer_gib) * 1024 * 1024 * 1024;
  }
  ASSERT_GT(V, S);
  ASSERT_LT(V, 1.05 * S);
  EXPECT_NEAR(Downtime(*ah, "recover"), S / 1e9, 0.01 * S / 1e9);
  EXPECT_NEAR(Downtime(*va, "recover"), V / 0.25e9, 0.01 * V / 0.25e9);
  EXPECT_NEAR(Downtime(*va, "recover") / Downtime(*ah, "recover"), (V / 0.25) / (S / 1), 0.02 * V / S * 4);
  for (const char* phase : {"detect", "replan", "restart"}) {
    EXPECT_DOUBLE_EQ(Downtime(*ah, phase), Downtime(*va, phase)) << phase;
  }
  EXPECT_DOUBLE_EQ(Downtime(*ah, "replan"), 7);
  EXPECT_DOUBLE_EQ(Downtime(*ah, "restart"), 100);
  // Nothing from the object store: the same recovery with a 1000× slower store takes as long.
  proto::Cluster slow = cluster_->spec();
  slow.mutable_storage(0)->set_read_bandwidth_gbyte_s(0.00025);
  auto sc = models::Cluster::Build(slow, "slow");
  ASSERT_TRUE(sc.ok());
  auto in = Inputs(trace, "autohet", Dp2());
  in.cluster = &*sc;
  auto ah_slow = sim::ReplayRun(in);
  ASSERT_TRUE(ah_slow.ok()) << ah_slow.status().message();
  EXPECT_NEAR(Downtime(*ah_slow, "recover"), Downtime(*ah, "recover"), 1e-6);
  // From host memory instead of NVMe (the process's host memory survived): PCIe-bound, far faster.
  in = Inputs(trace, "autohet", Dp2());
  in.policy.set_load_from_host_memory(true);
  auto ah_mem = sim::ReplayRun(in);
  ASSERT_TRUE(ah_mem.ok()) << ah_mem.status().message();
  EXPECT_LT(Downtime(*ah_mem, "recover"), Downtime(*ah, "recover") / 10);
}

TEST_F(AutohetReplayTest, PartialLocalRecoveryDownloadsOnlyTheMissingLayers) {
  // One pipeline: stage 0 (embedding + 2 blocks) on node 0, stage 1 (2 blocks + head) on node 1. Nodes 0 and 2
  // (unused) fail; the re-plan runs everything on node 1, which holds stage 1's layers: it reads those from its
  // NVMe (1 GB/s) while stage 0's bytes M come from the object store (0.25 GB/s), the longer of the two:
  // M / 0.25 GB/s.
  proto::Trace trace = Trace(20000);
  auto* e = trace.add_events();
  e->set_time_s(5000);
  e->set_kind(proto::TraceEvent::KIND_NODE_FAILURE);
  e->add_nodes(0);
  e->add_nodes(2);
  e->set_repair_s(1e6);
  auto in = Inputs(trace, "autohet", Plan("pp2", {{{{0, 1}, 2, 0, 3}, {{4, 5}, 2, 3, L()}}}));
  in.policy.set_grow(false);
  auto ah = sim::ReplayRun(in);
  ASSERT_TRUE(ah.ok()) << ah.status().message();
  double missing = 0;
  for (const auto& p : Pieces(Plan("one", {{{{0}, 1, 0, L()}}}))) missing += p.layer < 3 ? p.bytes() : 0;
  EXPECT_NEAR(Downtime(*ah, "recover"), missing / 0.25e9, 0.01 * missing / 0.25e9);
  EXPECT_DOUBLE_EQ(Downtime(*ah, "detect"), 60);
}

TEST_F(AutohetReplayTest, NewNodesLoadFromPeersOverTheNetwork) {
  // Growth (§V-C scenario C): the job runs one replica on node 0; nodes 1 and 2 join at 5000 s and the plan
  // becomes DP 3. Node 0, the only holder, serves its own devices (S) and the new nodes' over RDMA (2 S) from its
  // NVMe: 3 S / 1 GB/s. Varuna reads the three replicas from the object store: 3 V / 0.25 GB/s.
  proto::Trace trace = Trace(20000);
  trace.set_starts_empty(true);
  auto* a = trace.add_events();
  a->set_kind(proto::TraceEvent::KIND_CAPACITY_ADDED);
  a->add_nodes(0);
  auto* b = trace.add_events();
  b->set_time_s(5000);
  b->set_kind(proto::TraceEvent::KIND_CAPACITY_ADDED);
  b->add_nodes(1);
  b->add_nodes(2);
  // The starting plan is the one on every node: DP 3 (the replanner's layout on the full cluster).
  const proto::Plan dp3 = Plan("dp3", {{{{0, 1}, 2, 0, L()}}, {{{4, 5}, 2, 0, L()}}, {{{8, 9}, 2, 0, L()}}});
  auto ah = sim::ReplayRun(Inputs(trace, "autohet", dp3));
  ASSERT_TRUE(ah.ok()) << ah.status().message();
  auto va = sim::ReplayRun(Inputs(trace, "varuna", dp3));
  ASSERT_TRUE(va.ok()) << va.status().message();
  const double S = StateBytes();
  double V = 0;
  for (const auto& m : models::EstimateMemory(dp3, {*cluster_, *model_, training_})) {
    V += (m.params_gib + m.optimizer_gib) * 1024 * 1024 * 1024;
  }
  EXPECT_NEAR(Downtime(*ah, "recover"), 3 * S / 1e9, 0.01 * 3 * S / 1e9);
  EXPECT_NEAR(Downtime(*va, "recover"), V / 0.25e9, 0.01 * V / 0.25e9);
  EXPECT_EQ(ah->interruptions(), 0u);  // growing is no interruption
}

TEST_F(AutohetReplayTest, FixedReplanPlansAreTakenWhenTheyFitTheLiveNodes) {
  // replan_plans: the first plan that names the live nodes' cluster (or none), validates on it and uses all
  // its GPUs. After node 1's preemption the live nodes are nodes 0 and 2 (8 GPUs, "autohet-test-live-2"):
  // "tp2-half" uses 2 of the 8 GPUs, "elsewhere" names another cluster, "dp2-tp4" fits.
  proto::Trace trace = Trace(20000);
  auto* e = trace.add_events();
  e->set_time_s(5000);
  e->set_kind(proto::TraceEvent::KIND_PREEMPTION);
  e->add_nodes(1);
  const proto::Plan dp3 = Plan("dp3", {{{{0, 1}, 2, 0, L()}}, {{{4, 5}, 2, 0, L()}}, {{{8, 9}, 2, 0, L()}}});
  auto in = Inputs(trace, "autohet", dp3);
  in.replan = nullptr;
  *in.policy.add_replan_plans() = Plan("tp2-half", {{{{0, 1}, 2, 0, L()}}});
  proto::Plan elsewhere = Plan("elsewhere", {{{{0, 1, 2, 3}, 4, 0, L()}}, {{{4, 5, 6, 7}, 4, 0, L()}}});
  elsewhere.set_cluster("autohet-test-live-1");
  *in.policy.add_replan_plans() = elsewhere;
  proto::Plan fits = Plan("dp2-tp4", {{{{0, 1, 2, 3}, 4, 0, L()}}, {{{4, 5, 6, 7}, 4, 0, L()}}});
  fits.set_cluster("autohet-test-live-2");
  *in.policy.add_replan_plans() = fits;
  in.policy.clear_replan_s();
  auto r = sim::ReplayRun(in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->configurations_size(), 2);
  EXPECT_EQ(r->configurations(1).plan(), "dp2-tp4");
  EXPECT_DOUBLE_EQ(Downtime(*r, "replan"), 0);  // no search
  // TP 2 → 4 on nodes 0 and 2: each node's 4 new ranks read [k/4, (k+1)/4) of the old replica's shards; node 0
  // and node 2 each held one replica, so everything is local: S per node at 1 GB/s, in parallel.
  const double S = StateBytes();
  EXPECT_NEAR(Downtime(*r, "recover"), S / 1e9, 0.01 * S / 1e9);
}

TEST_F(AutohetReplayTest, NodesPreemptedTogetherAreOneInterruption) {
  // One preemption takes nodes 1 and 2 of a DP-3 job: one interruption, one re-plan (7 s) onto node 0, two
  // configurations; node-by-node handling would re-plan onto nodes 0 and 2 first, then again.
  proto::Trace trace = Trace(20000);
  auto* e = trace.add_events();
  e->set_time_s(5000);
  e->set_kind(proto::TraceEvent::KIND_PREEMPTION);
  e->set_notice_s(30);
  e->add_nodes(1);
  e->add_nodes(2);
  const proto::Plan dp3 = Plan("dp3", {{{{0, 1}, 2, 0, L()}}, {{{4, 5}, 2, 0, L()}}, {{{8, 9}, 2, 0, L()}}});
  for (const char* policy : {"autohet", "varuna", "elastic"}) {
    auto r = sim::ReplayRun(Inputs(trace, policy, dp3));
    ASSERT_TRUE(r.ok()) << policy << ": " << r.status().message();
    EXPECT_EQ(r->interruptions(), 1u) << policy;
    EXPECT_DOUBLE_EQ(Downtime(*r, "replan"), 7) << policy;
    EXPECT_EQ(r->configurations_size(), 2) << policy;
  }
}

TEST_F(AutohetReplayTest, PoliciesWithOtherDefaultPlannersShareNoReplan) {
  // autohet re-plans with `autohet`, varuna with `megatron` at TP 1: one cache, two plans.
  proto::Trace trace = Trace(20000);
  auto* e = trace.add_events();
  e->set_time_s(5000);
  e->set_kind(proto::TraceEvent::KIND_PREEMPTION);
  e->add_nodes(1);
  e->add_nodes(2);
  std::vector<std::string> asked;
  for (const char* policy : {"autohet", "varuna"}) {
    auto in = Inputs(trace, policy, Dp2());
    auto inner = in.replan;
    in.replan = [&asked, inner](const models::Cluster& live, const proto::RecoveryPolicy& p) -> Result<sim::Replanned> {
      asked.push_back(sim::DefaultReplanner(p).first);
      HETSIM_ASSIGN_OR_RETURN(sim::Replanned r, inner(live, p));
      r.plan.set_name(asked.back());
      return r;
    };
    auto r = sim::ReplayRun(in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->configurations_size(), 2);
    EXPECT_EQ(r->configurations(1).plan(), policy == std::string("autohet") ? "autohet" : "megatron") << policy;
  }
  EXPECT_EQ(asked, (std::vector<std::string>{"autohet", "megatron"}));
}

TEST(AutohetPolicy, OptionsAreChecked) {
  proto::RecoveryPolicy p;
  p.set_name("autohet");
  p.set_load_from_host_memory(true);
  p.set_planner("metis");
  p.set_replan_s(1);
  *p.add_replan_plans()->add_pipelines() = proto::Pipeline();
  EXPECT_TRUE(sim::CheckRecoveryPolicy(p, "replay.policies[0]").ok());
  p.set_name("varuna");
  Status s = sim::CheckRecoveryPolicy(p, "replay.policies[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("replay.policies[0].load_from_host_memory"), std::string::npos) << s.message();
  p.clear_load_from_host_memory();
  EXPECT_TRUE(sim::CheckRecoveryPolicy(p, "replay.policies[0]").ok());
  p.set_name("checkpoint-restart");
  p.clear_planner();
  p.clear_replan_s();
  s = sim::CheckRecoveryPolicy(p, "replay.policies[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("replay.policies[0].replan_plans"), std::string::npos) << s.message();
  p.set_name("autohet");
  p.add_replan_plans()->add_pipelines();
  s = sim::CheckRecoveryPolicy(p, "replay.policies[0]");
  ASSERT_FALSE(s.ok());  // the same plan twice
  EXPECT_NE(s.message().find("replan_plans[1]"), std::string::npos) << s.message();
  p.clear_replan_plans();
  p.add_replan_plans();
  s = sim::CheckRecoveryPolicy(p, "replay.policies[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("replan_plans[0].pipelines"), std::string::npos) << s.message();
  EXPECT_EQ(sim::DefaultReplanner(p).first, "autohet");
}

}  // namespace
}  // namespace hetsim
