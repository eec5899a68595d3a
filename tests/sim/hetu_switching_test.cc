// Hetu v2's graph switching (sim/hetu_switching.h) and the replay policy `hetu` (sim/recovery/hetu.cc) against
// hand-derived numbers: §8 Table 2's shape for C1 -> C2 on 32 H20s, and a policy timeline on a small trace.
#include "sim/hetu_switching.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/replay.h"
#include "tests/sim/tiny_replay_fixture.h"

namespace hetsim {
namespace {

namespace hs = models::hspmd;

struct StageSpec {
  std::vector<uint32_t> devices;
  uint32_t begin, end;  // plan layers
};
proto::Plan MakePlan(const std::vector<std::vector<StageSpec>>& pipelines, uint32_t micro_batches) {
  proto::Plan p;
  for (const auto& stages : pipelines) {
    auto* pl = p.add_pipelines();
    pl->set_micro_batch_size(1);
    pl->set_num_micro_batches(micro_batches);
    for (const auto& s : stages) {
      auto* st = pl->add_stages();
      for (uint32_t d : s.devices) st->add_devices(d);
      st->set_tp_degree(static_cast<uint32_t>(s.devices.size()));
      st->set_layer_begin(s.begin);
      st->set_layer_end(s.end);
    }
  }
  return p;
}
std::vector<uint32_t> Range(uint32_t a, uint32_t b) {  // [a, b]
  std::vector<uint32_t> v;
  for (uint32_t i = a; i <= b; ++i) v.push_back(i);
  return v;
}

// Hetu v2 Table 7, C1 and C2 (blocks Lx-Ly are plan layers x+1 .. y+1; embedding 0, head 61).
proto::Plan C1() {
  std::vector<std::vector<StageSpec>> p(2);
  for (uint32_t k = 0; k < 2; ++k) {
    const uint32_t r = 16 * k;
    p[k] = {{Range(r, r + 3), 0, 16}, {Range(r + 4, r + 7), 16, 31}, {Range(r + 8, r + 11), 31, 46},
            {Range(r + 12, r + 15), 46, 62}};
  }
  return MakePlan(p, 16);
}
proto::Plan C2() {
  return MakePlan({{{Range(0, 3), 0, 16}, {Range(4, 7), 16, 31}, {Range(8, 11), 31, 46}, {Range(12, 15), 46, 62}},
                   {{Range(16, 19), 0, 17}, {Range(20, 23), 17, 33}, {Range(24, 27), 33, 49}, {Range(28, 29), 49, 57},
                    {{30}, 57, 62}}},
                  32);
}

TEST(HetuSwitching, Table2ShapeForC1ToC2) {
  auto cluster = models::LoadCluster("hetu-h20x32");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  auto model = models::LoadModel("llama-30b");  // the 32B shape: 60 blocks, d_model 6656
  ASSERT_TRUE(model.ok()) << model.status().message();
  proto::Training tr;
  tr.set_dtype(proto::DTYPE_BF16);
  sim::HetuSwitchOptions fused;
  fused.bytes_per_param = 6;
  sim::HetuSwitchOptions unfused = fused, plain = fused;
  unfused.fused = false;
  plain.fused = false;
  plain.heuristics = false;
  // The device lost between C1 and C2 is R31: it owned nothing the others lack (pipeline 1 holds it all).
  const std::set<uint32_t> lost = {31};
  const auto f = sim::PlanHetuSwitch(C1(), {}, C2(), {}, *model, tr, *cluster, lost, fused);
  const auto u = sim::PlanHetuSwitch(C1(), {}, C2(), {}, *model, tr, *cluster, lost, unfused);
  const auto n = sim::PlanHetuSwitch(C1(), {}, C2(), {}, *model, tr, *cluster, lost, plain);
  // Bytes each device of pipeline 2 lacks (P = one block's bytes, H = the head's), by hand:
  //   R16-19 gain block L15: 4 · P/4 = P;  R20-23 gain L30-31: 2P;  R24-27 gain L45-47: 3P;
  //   R28 (TP 2 rank 0 of L48-55 = quarters 0-1, holds quarter 0): 8 · P/4 = 2P;  R29 (quarters 2-3, holds
  //   quarter 1): 8 · P/2 = 4P;  R30 (TP 1 of L56-59 and the head, holds quarter 2): 3/4 · (4P + H) = 3P + 3H/4.
  //   Total 15P + 3H/4 (the paper's Table 2 sums to 45.7 GB: 15 · 2,992 MB + 3/4 of a 1.2 GB head).
  const double P = model->Params(1) * 6, H = model->Params(61) * 6;
  EXPECT_NEAR(f.sent_bytes, 15 * P + 0.75 * H, 1);
  EXPECT_NEAR(u.sent_bytes, f.sent_bytes, 1);
  EXPECT_NEAR(n.sent_bytes, f.sent_bytes, 1);
  EXPECT_EQ(f.missing_bytes, 0);
  // Fused: one round, one send per pair.
  ASSERT_EQ(f.rounds.size(), 1u);
  std::set<std::pair<uint32_t, uint32_t>> pairs;
  for (const auto& s : f.rounds[0]) EXPECT_TRUE(pairs.insert({s.from, s.to}).second);
  EXPECT_GT(u.rounds.size(), 1u);
  // More NVLink, and a more even spread with the heuristics, fused: more senders and a lower sum of squared
  // per-sender loads. (The busiest sender is the same in both: quarter 3 of blocks L45-59 has one live owner,
  // R15, since R31 is lost, as Table 2's R15 sends 11,496 MB in every row.)
  auto summary = [&](const hs::SwitchPlan& p) {
    double nvlink = 0, squares = 0;
    size_t senders = 0;
    for (const auto& v : sim::VolumesBySender(p, *cluster)) {
      nvlink += v.intra_node_bytes;
      const double b = (v.intra_node_bytes + v.inter_node_bytes) / 1e9;
      squares += b * b;
      ++senders;
    }
    return std::make_tuple(nvlink, squares, senders);
  };
  for (const auto* p : {&n, &u, &f}) {  // Table 2's rows, MB (printed for docs/reproductions/hetu-elastic.md)
    std::string row;
    for (const auto& v : sim::VolumesBySender(*p, *cluster)) {
      row += " R" + std::to_string(v.device) + ": " + std::to_string(static_cast<int>(v.intra_node_bytes / 1e6)) + " " +
             std::to_string(static_cast<int>(v.inter_node_bytes / 1e6));
    }
    std::printf("%s:%s\n", p == &n ? "unfused, no heuristics" : p == &u ? "unfused" : "fused", row.c_str());
  }
  const auto [f_nv, f_sq, f_senders] = summary(f);
  const auto [n_nv, n_sq, n_senders] = summary(n);
  EXPECT_GT(f_nv, n_nv);
  EXPECT_LT(f_sq, n_sq);
  EXPECT_GT(f_senders, n_senders);
  // Without heuristics the lowest rank (pipeline 1, other nodes) sends everything it owns: no NVLink at all,
  // as in Table 2's first row.
  EXPECT_EQ(n_nv, 0);
  // And it is faster on the platform.
  auto tf = sim::SimulateSwitch(f, *cluster);
  auto tn = sim::SimulateSwitch(n, *cluster);
  ASSERT_TRUE(tf.ok() && tn.ok());
  EXPECT_LT(*tf, *tn);
}

// ---- the replay policy ----

// 2 nodes × 4 A100: node 0 = devices 0-3, node 1 = 4-7.
const char* kHetuSwitchingCluster = R"(
name: hetu-test
nodes:
  - name: n
    count: 2
    gpus: {type: a100-80gb, count: 4}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_node}
network: {single_switch: {}}
storage:
  - {name: store, kind: object_store, read_bandwidth_gbyte_s: 0.25, write_bandwidth_gbyte_s: 0.25}
)";

class HetuPolicyTest : public testing::TinyReplayFixture {
 protected:
  void SetUp() override { Build(kHetuSwitchingCluster); }
  sim::ReplayInputs Inputs(const proto::Plan& plan, const std::vector<proto::Plan>& after) {
    sim::ReplayInputs in;
    in.cluster = &*cluster_;
    in.model = &*model_;
    in.training = training_;
    in.plan = plan;
    in.trace.set_cluster("hetu-test");
    in.trace.set_duration_s(3000);
    auto* e = in.trace.add_events();
    e->set_time_s(1000);
    e->set_kind(proto::TraceEvent::KIND_GPU_FAILURE);
    e->add_devices(7);  // node 1's last GPU
    in.trace_name = "test";
    in.spec.set_detection_s(10);
    in.spec.set_restart_s(100);
    in.spec.set_checkpoint_interval_s(100000);  // no checkpoint within the run
    in.policy.set_name("hetu");
    in.policy.set_specialization_s(5);
    for (const auto& p : after) *in.policy.add_replan_plans() = p;
    in.sim.fidelity = sim::Fidelity::Fast();
    in.cache = &cache_;
    return in;
  }
  uint32_t L() const { return model_->num_layers(); }  // 6

  sim::ReplayCache cache_;
};

TEST_F(HetuPolicyTest, GpuLossKeepsTheNodeAndSwitchesWithoutRollback) {
  // Two pipelines in TP 4, one per node; GPU 7 fails at 1,000 s. Hetu keeps node 1's GPUs 4-6 (7 GPUs live,
  // cluster hetu-test-live-1+3) and switches to the after-plan: pipeline 2 = [4,5] TP 2 layers 0-2, [6] layers
  // 3-5. Timeline by hand: train 0-1000, detect 1000-1010, graph specialisation ("restart") 1010-1015, the
  // switch ("recover") 1015-1015+s with s the simulated fused BSR, train to 3000. No iteration is rolled back
  // (pipeline 1 holds every weight); only the iteration in progress at 1,000 s is lost.
  const proto::Plan before = MakePlan({{{Range(0, 3), 0, L()}}, {{Range(4, 7), 0, L()}}}, 4);
  const proto::Plan after = MakePlan({{{Range(0, 3), 0, L()}}, {{{4, 5}, 0, 3}, {{6}, 3, L()}}}, 4);
  auto r = sim::ReplayRun(Inputs(before, {after}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<std::string> phases;
  for (const auto& s : r->segments()) phases.push_back(s.phase());
  ASSERT_EQ(phases, (std::vector<std::string>{"train", "detect", "restart", "recover", "train"}));
  EXPECT_DOUBLE_EQ(r->segments(1).start_s(), 1000);
  EXPECT_DOUBLE_EQ(r->segments(2).end_s() - r->segments(2).start_s(), 5);
  EXPECT_EQ(r->segments(0).lost_iterations(), 0u);
  EXPECT_EQ(r->segments(4).gpus(), 7u);
  // The recover phase is the fused switch on the platform: device 7 lost (its copies gone).
  sim::HetuSwitchOptions opt;
  const auto plan = sim::PlanHetuSwitch(before, {}, after, {}, *model_, training_, *cluster_, {7}, opt);
  auto t = sim::SimulateSwitch(plan, *cluster_);
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(r->segments(3).end_s() - r->segments(3).start_s(), *t, 1e-9);
  EXPECT_GT(*t, 0);
  // Bytes by hand, 14 per parameter (fp16 weights 2 + fp32 master 4 + Adam's two moments 8, as the memory
  // model counts them): device 4 (TP 2 rank 0 = quarters 0-1 of layers 0-2) holds quarter 0: needs
  // quarter 1 of layers 0-2; device 5 (quarters 2-3) holds quarter 1: needs quarters 2-3; device 6 (layers
  // 3-5 whole) holds quarter 2: needs quarters 0, 1, 3. In parameters: (1/4 + 1/2)·(p0 + p1 + p2) +
  // 3/4·(p3 + p4 + p5) = 3/4 of every layer.
  const double bpp = sim::SwitchBytesPerParam(opt, training_);
  EXPECT_DOUBLE_EQ(bpp, 14);
  double want = 0;
  for (uint32_t l = 0; l < L(); ++l) want += 0.75 * model_->Params(l) * bpp;
  EXPECT_NEAR(plan.sent_bytes, want, 1e-6 * want);
}

TEST_F(HetuPolicyTest, NoSurvivingOwnerFallsBackToTheCheckpoint) {
  // One pipeline: GPU 7's shard has no other owner. Hetu falls back to the checkpoint: everything since the
  // start is rolled back (no checkpoint was saved), the restart costs restart_s (100 s), not the 5 s of
  // graph specialisation.
  const proto::Plan before = MakePlan({{{Range(0, 3), 0, 3}, {Range(4, 7), 3, L()}}}, 8);
  const proto::Plan after = MakePlan({{{Range(0, 3), 0, 3}, {{4, 5}, 3, 5}, {{6}, 5, L()}}}, 8);
  auto r = sim::ReplayRun(Inputs(before, {after}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GE(r->segments_size(), 3);
  EXPECT_GT(r->segments(0).lost_iterations(), 0u);
  EXPECT_EQ(r->segments(0).lost_iterations(), r->segments(0).iterations());
  EXPECT_EQ(r->segments(2).phase(), "restart");
  EXPECT_DOUBLE_EQ(r->segments(2).end_s() - r->segments(2).start_s(), 100);
}

}  // namespace
}  // namespace hetsim
