// The replay engine (sim/replay.h) against closed forms: one failure with known costs, waiting for a repair,
// elastic recovery from replicas, Young/Daly's interval, determinism, conservation of time.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <string_view>

#include <google/protobuf/util/json_util.h>

#include "models/plan.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/replay.h"
#include "tests/sim/tiny_replay_fixture.h"

namespace hetsim {
namespace {

// 4 nodes × 2 A100s, one 100 Gb/s NIC per node, a slow object store (the checkpoint's bottleneck).
const char* kReplayCluster = R"(
name: replay-test
nodes:
  - name: n
    count: 4
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_node}
network: {single_switch: {}}
storage:
  - {name: store, kind: object_store, read_bandwidth_gbyte_s: 0.5, write_bandwidth_gbyte_s: 0.25, latency_ms: 1}
  - {name: nvme, kind: local_nvme, read_bandwidth_gbyte_s: 4, write_bandwidth_gbyte_s: 2}
)";

// DP 4 × TP 2: every node holds one replica.
const char* kPlanDp4 = R"(
name: dp4-tp2
pipelines:
  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [0, 1], tp_degree: 2, layer_end: 24}]}
  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [2, 3], tp_degree: 2, layer_end: 24}]}
  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [4, 5], tp_degree: 2, layer_end: 24}]}
  - {micro_batch_size: 2, num_micro_batches: 4, stages: [{devices: [6, 7], tp_degree: 2, layer_end: 24}]}
)";

class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    proto::Cluster cp;
    ASSERT_TRUE(models::ParseYaml(kReplayCluster, "cluster", &cp).ok());
    auto c = models::Cluster::Build(cp, "cluster");
    ASSERT_TRUE(c.ok()) << c.status().message();
    cluster_.emplace(std::move(c).value());
    auto m = models::LoadModel("gpt3-350m");
    ASSERT_TRUE(m.ok());
    model_.emplace(std::move(m).value());
    proto::Training t;
    t.set_global_batch_size(32);
    t.set_seq_len(1024);
    auto tr = models::ResolveTraining(t, *model_, "training");
    ASSERT_TRUE(tr.ok());
    training_ = *tr;
    ASSERT_TRUE(models::ParseYaml(kPlanDp4, "plan", &plan_).ok());
  }

  sim::ReplayInputs Inputs(const proto::Trace& trace, const std::string& policy) {
    sim::ReplayInputs in;
    in.cluster = &*cluster_;
    in.model = &*model_;
    in.training = training_;
    in.plan = plan_;
    in.trace = trace;
    in.trace_name = "test";
    in.spec.set_detection_s(60);
    in.spec.set_restart_s(200);
    in.spec.set_checkpoint_interval_s(600);
    in.policy.set_name(policy);
    in.sim.fidelity = sim::Fidelity::Fast();
    in.cache = &cache_;
    return in;
  }

  static proto::Trace Trace(double duration_s) {
    proto::Trace t;
    t.set_name("test");
    t.set_duration_s(duration_s);
    return t;
  }

  static proto::TraceEvent* Add(proto::Trace& t, double time, proto::TraceEvent::Kind kind) {
    auto* e = t.add_events();
    e->set_time_s(time);
    e->set_kind(kind);
    return e;
  }

  // The elastic re-plan of these tests: one TP-2 replica per live node, 32 micro-batches dealt out (11 + 11 + 10
  // on three nodes).
  proto::Plan ReplicaPerNode(const models::Cluster& live) const {
    proto::Plan p;
    p.set_name("dp" + std::to_string(live.nodes().size()));
    const auto replicas = static_cast<uint32_t>(live.nodes().size());
    for (uint32_t n = 0; n < replicas; ++n) {
      auto* pl = p.add_pipelines();
      pl->set_micro_batch_size(1);
      pl->set_num_micro_batches(32 / replicas + (n < 32 % replicas ? 1 : 0));
      auto* s = pl->add_stages();
      s->add_devices(2 * n);
      s->add_devices(2 * n + 1);
      s->set_tp_degree(2);
      s->set_layer_end(model_->num_layers());
    }
    return p;
  }
  static double Downtime(const proto::ReplayReport& r, const std::string& cause) {
    for (const auto& d : r.downtime()) {
      if (d.cause() == cause) return d.seconds();
    }
    return -1;
  }

  std::optional<models::Cluster> cluster_;
  std::optional<models::TransformerModel> model_;
  proto::Training training_;
  proto::Plan plan_;
  sim::ReplayCache cache_;
};

using testing::Progress;
using testing::Train;

TEST_F(ReplayTest, OneSoftwareFailureCostsTheClosedForm) {
  // A crash at t_f: the work since the last checkpoint is lost, then detection D, restart R and the reload L
  // from the object store; training resumes and runs to the end E, where the iterations done count.
  const double E = 20000, tf = 7777;
  proto::Trace trace = Trace(E);
  Add(trace, tf, proto::TraceEvent::KIND_SOFTWARE_FAILURE)->set_cause("Software Bug");
  auto r = sim::ReplayRun(Inputs(trace, "checkpoint-restart"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->configurations_size(), 1);
  const double T = r->configurations(0).iteration_s(), C = r->configurations(0).checkpoint_save_s(),
               L = r->configurations(0).checkpoint_load_s();
  ASSERT_GT(T, 0);
  ASSERT_GT(C, 1);  // the slow store makes saving cost seconds
  ASSERT_GT(L, 1);
  const auto k = static_cast<uint64_t>(std::llround(600 / T));
  const Progress before = Train(tf, T, C, k);
  const double resume = tf + 60 + 200 + L;
  const Progress after = Train(E - resume, T, C, k);
  EXPECT_EQ(r->interruptions(), 1u);
  // Lost: everything since the last checkpoint before t_f, and the unit in progress when the run ends.
  const double unfinished = after.since_commit - static_cast<double>(after.uncommitted) * T;
  EXPECT_NEAR(r->lost_work_s(), before.since_commit + unfinished, 1e-6);
  EXPECT_EQ(r->iterations(), before.committed + after.committed + after.uncommitted);
  EXPECT_NEAR(r->downtime_s(), 60 + 200 + L, 1e-6);
  EXPECT_NEAR(Downtime(*r, "detect"), 60, 1e-9);
  EXPECT_NEAR(Downtime(*r, "restart"), 200, 1e-9);
  EXPECT_NEAR(Downtime(*r, "recover"), L, 1e-9);
  EXPECT_NEAR(r->checkpoint_overhead_s(), (before.checkpoints + after.checkpoints) * C, 1e-6);
  EXPECT_NEAR(r->ettr(), static_cast<double>(r->iterations()) * T / E, 1e-9);
  // Every second is accounted for: kept iterations, checkpoints, lost work, down phases.
  EXPECT_NEAR(r->ettr() * E + r->lost_work_s() + r->checkpoint_overhead_s() + r->downtime_s(), E, 1e-6);
  ASSERT_EQ(r->by_event_cause_size(), 1);
  EXPECT_EQ(r->by_event_cause(0).cause(), "Software Bug");
  EXPECT_NEAR(r->by_event_cause(0).seconds(), before.since_commit + 60 + 200 + L, 1e-6);
}

TEST_F(ReplayTest, CheckpointTransfersAreBoundByTheStore) {
  // Saving writes one copy of the state (parameters + optimizer, the optimizer sharded by ZeRO-1 or not,
  // parameters split over the 4 replicas) through the store's 0.25 GB/s; loading reads every device's state
  // through its 0.5 GB/s.
  proto::Trace trace = Trace(1000);
  auto r = sim::ReplayRun(Inputs(trace, "checkpoint-restart"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  models::PlanContext ctx{*cluster_, *model_, training_};
  double held = 0, written = 0;
  for (const auto& m : models::EstimateMemory(plan_, ctx)) {
    held += (m.params_gib + m.optimizer_gib) * 1024 * 1024 * 1024;
    written += (m.params_gib / 4 + m.optimizer_gib / 4) * 1024 * 1024 * 1024;  // zero_stage 0: one in four writes
  }
  EXPECT_NEAR(r->configurations(0).checkpoint_load_s(), held / 0.5e9, 0.01 * held / 0.5e9);
  EXPECT_NEAR(r->configurations(0).checkpoint_save_s(), written / 0.25e9, 0.01 * written / 0.25e9);
}

TEST_F(ReplayTest, WithoutSparesTheJobWaitsForTheRepair) {
  // The plan uses every node: after a GPU failure the job waits until its node is repaired (3 h); with a hot
  // spare it restarts at once.
  const double E = 40000, tf = 5000, repair = 3 * 3600;
  proto::Trace trace = Trace(E);
  auto* e = Add(trace, tf, proto::TraceEvent::KIND_GPU_FAILURE);
  e->add_devices(3);
  e->set_repair_s(repair);
  auto cr = sim::ReplayRun(Inputs(trace, "checkpoint-restart"));
  ASSERT_TRUE(cr.ok()) << cr.status().message();
  EXPECT_NEAR(Downtime(*cr, "wait"), repair - 60, 1e-6);
  auto hs = sim::ReplayRun(Inputs(trace, "hot-spares"));
  ASSERT_TRUE(hs.ok()) << hs.status().message();
  EXPECT_NEAR(Downtime(*hs, "wait"), 0, 1e-9);
  EXPECT_NEAR(hs->downtime_s(), 60 + 200 + hs->configurations(0).checkpoint_load_s(), 1e-6);
  EXPECT_GT(hs->spares_gpus(), 0);
  EXPECT_GT(hs->ettr(), cr->ettr());
}

TEST_F(ReplayTest, ElasticKeepsTheWorkWhileAReplicaSurvives) {
  // DP 4: a node failure leaves three replicas of every layer, so the elastic policy loses only the
  // iteration in progress (< T) and moves no checkpoint; checkpoint-restart loses everything since the last
  // checkpoint.
  proto::Trace trace = Trace(20000);
  auto* e = Add(trace, 7777, proto::TraceEvent::KIND_NODE_FAILURE);
  e->add_nodes(1);
  e->set_repair_s(3600);
  auto in = Inputs(trace, "elastic");
  in.policy.set_replan_s(5);
  in.replan = [this](const models::Cluster& live, const proto::RecoveryPolicy&) -> Result<sim::Replanned> {
    return sim::Replanned{ReplicaPerNode(live), 0.25};
  };
  auto el = sim::ReplayRun(in);
  ASSERT_TRUE(el.ok()) << el.status().message();
  EXPECT_EQ(el->replan_time(), "fixed");
  const double T = el->configurations(0).iteration_s(), C = el->configurations(0).checkpoint_save_s();
  EXPECT_LT(el->lost_work_s(), 2 * (T + C));  // the unit in progress (an iteration or a save) at each change
  EXPECT_EQ(el->configurations_size(), 2);    // dp4 and dp3
  EXPECT_NEAR(Downtime(*el, "replan"), 5 * 2, 1e-9);  // shrink, then grow back after the repair
  EXPECT_GE(el->configurations_size(), 1);
  auto cr = sim::ReplayRun(Inputs(trace, "checkpoint-restart"));
  ASSERT_TRUE(cr.ok());
  EXPECT_GT(cr->lost_work_s(), el->lost_work_s());
}

TEST_F(ReplayTest, YoungDalyIntervalMinimisesWaste) {
  // Poisson crashes (MTBF 2 h) over 60 days; waste = everything but kept iterations. Young/Daly's interval
  // for the simulated save cost must waste no more than a quarter, half, twice or four times it.
  const double E = 60 * 86400, mtbf = 7200;
  proto::Trace trace = Trace(E);
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> gap(1 / mtbf);
  for (double t = gap(rng); t < E; t += gap(rng)) Add(trace, t, proto::TraceEvent::KIND_SOFTWARE_FAILURE);
  auto base = Inputs(trace, "checkpoint-restart");
  base.spec.set_checkpoint_interval_s(0);  // Young/Daly
  auto yd = sim::ReplayRun(base);
  ASSERT_TRUE(yd.ok()) << yd.status().message();
  EXPECT_EQ(yd->checkpoint_interval_rule(), "young-daly");
  const double C = yd->configurations(0).checkpoint_save_s();
  EXPECT_NEAR(yd->checkpoint_interval_s(), sim::YoungDalyInterval(C, E / trace.events_size()), 1e-9);
  const double waste_yd = E * (1 - yd->ettr());
  for (double f : {0.25, 0.5, 2.0, 4.0}) {
    auto in = base;
    in.spec.set_checkpoint_interval_s(f * yd->checkpoint_interval_s());
    auto r = sim::ReplayRun(in);
    ASSERT_TRUE(r.ok());
    EXPECT_LE(waste_yd, E * (1 - r->ettr())) << "interval × " << f;
  }
}

TEST(YoungDaly, MatchesYoungToFirstOrder) {
  // δ ≪ M: Daly's interval tends to Young's sqrt(2 δ M); δ ≥ 2M: M.
  EXPECT_NEAR(sim::YoungDalyInterval(1, 1e6) / std::sqrt(2e6), 1.0, 1e-3);
  EXPECT_DOUBLE_EQ(sim::YoungDalyInterval(300, 100), 100);
  EXPECT_DOUBLE_EQ(sim::YoungDalyInterval(0, 100), 0);
}

TEST_F(ReplayTest, TheStreamedReportIsTheSameJsonObject) {
  // A replay with segments written in pieces (one segment per piece) parses to the report ReplayReportJson
  // prints whole: same fields, same segments, in order.
  proto::Trace trace = Trace(20000);
  auto* e = Add(trace, 7777, proto::TraceEvent::KIND_NODE_FAILURE);
  e->add_nodes(1);
  e->set_repair_s(3600);
  auto r = sim::ReplayRun(Inputs(trace, "checkpoint-restart"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GT(r->segments_size(), 2);
  std::string streamed;
  int pieces = 0;
  ASSERT_TRUE(sim::WriteReplayReportJson(*r, [&](std::string_view piece) {
                ++pieces;
                streamed.append(piece);
                return Status::Ok();
              }).ok());
  EXPECT_GE(pieces, r->segments_size());
  proto::ReplayReport whole, pieced;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(sim::ReplayReportJson(*r), &whole).ok());
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(streamed, &pieced).ok()) << streamed.substr(0, 400);
  EXPECT_EQ(pieced.SerializeAsString(), whole.SerializeAsString());
  EXPECT_EQ(pieced.segments_size(), r->segments_size());
  // A failing sink stops the writer with its error.
  int calls = 0;
  const Status s = sim::WriteReplayReportJson(*r, [&](std::string_view) {
    return ++calls == 3 ? Status::IoError("disk full") : Status::Ok();
  });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(calls, 3);
}

TEST_F(ReplayTest, ReplanningIsChargedOnlyWhenAskedSoReportsRepeat) {
  // The planner's wall time differs from call to call (here 0.25 s, then 0.5 s, ...): by default no
  // re-planning time is charged and two replays give the same report; with measured_replan the wall time is
  // charged (shrink and grow back: two re-plans, each planned afresh since the caches are separate).
  proto::Trace trace = Trace(20000);
  auto* e = Add(trace, 7777, proto::TraceEvent::KIND_NODE_FAILURE);
  e->add_nodes(1);
  e->set_repair_s(3600);
  double wall = 0;
  auto replan = [this, &wall](const models::Cluster& live, const proto::RecoveryPolicy&) -> Result<sim::Replanned> {
    wall += 0.25;
    return sim::Replanned{ReplicaPerNode(live), wall};
  };
  auto in = Inputs(trace, "elastic");
  in.replan = replan;
  auto a = sim::ReplayRun(in);
  auto b = sim::ReplayRun(in);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(sim::ReplayReportJson(*a), sim::ReplayReportJson(*b));
  EXPECT_EQ(a->replan_time(), "none");
  EXPECT_EQ(Downtime(*a, "replan"), 0);
  wall = 0;
  in.policy.set_measured_replan(true);
  auto m = sim::ReplayRun(in);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->replan_time(), "measured");
  // The starting plan is the fixed one (no planner); the shrink re-plans (0.25 s) and growing back returns
  // to the starting configuration (no planner run, no time).
  EXPECT_NEAR(Downtime(*m, "replan"), 0.25, 1e-9);
  in.policy.set_replan_s(5);
  EXPECT_FALSE(sim::CheckRecoveryPolicy(in.policy, "replay.policies[0]").ok());
}

TEST_F(ReplayTest, SameInputsSameReportByteForByte) {
  proto::Trace trace = Trace(3 * 86400);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> when(0, 3 * 86400);
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) times.push_back(when(rng));
  std::sort(times.begin(), times.end());
  for (size_t i = 0; i < times.size(); ++i) {
    auto* e = Add(trace, times[i], i % 3 == 0 ? proto::TraceEvent::KIND_SOFTWARE_FAILURE
                                              : proto::TraceEvent::KIND_GPU_FAILURE);
    if (i % 3 != 0) {
      e->add_devices(static_cast<uint32_t>(i % 8));
      e->set_repair_s(7200);
    }
  }
  for (const char* policy : {"checkpoint-restart", "hot-spares", "in-memory"}) {
    auto a = sim::ReplayRun(Inputs(trace, policy));
    auto b = sim::ReplayRun(Inputs(trace, policy));
    ASSERT_TRUE(a.ok() && b.ok()) << policy;
    EXPECT_EQ(sim::ReplayReportJson(*a), sim::ReplayReportJson(*b)) << policy;
    EXPECT_NEAR(a->ettr() * a->duration_s() + a->lost_work_s() + a->checkpoint_overhead_s() + a->downtime_s(),
                a->duration_s(), 1e-6)
        << policy;
  }
}

TEST_F(ReplayTest, InMemoryCheckpointsLoseLessThanRemoteOnes) {
  // Gemini: a checkpoint in host memory costs a PCIe copy, so Young/Daly checkpoints far more often and a
  // crash loses little; reloading from host memory beats the object store.
  proto::Trace trace = Trace(86400);
  for (int i = 1; i <= 6; ++i) Add(trace, i * 12000.0 + 321, proto::TraceEvent::KIND_SOFTWARE_FAILURE);
  auto cr_in = Inputs(trace, "checkpoint-restart");
  cr_in.spec.set_checkpoint_interval_s(0);
  auto im_in = Inputs(trace, "in-memory");
  im_in.spec.set_checkpoint_interval_s(0);
  auto cr = sim::ReplayRun(cr_in);
  auto im = sim::ReplayRun(im_in);
  ASSERT_TRUE(cr.ok() && im.ok());
  EXPECT_LT(im->configurations(0).checkpoint_save_s(), cr->configurations(0).checkpoint_save_s() / 10);
  EXPECT_LT(im->checkpoint_interval_s(), cr->checkpoint_interval_s());
  EXPECT_LT(Downtime(*im, "recover"), Downtime(*cr, "recover"));
  EXPECT_GT(im->ettr(), cr->ettr());
}

TEST_F(ReplayTest, SpotTraceWaitsForCapacityAndCostsSpotPrices) {
  // starts_empty: nothing runs until the nodes are added; a preemption with a 120 s notice takes node 2.
  proto::Trace trace = Trace(10000);
  trace.set_starts_empty(true);
  auto* add = Add(trace, 1000, proto::TraceEvent::KIND_CAPACITY_ADDED);
  for (uint32_t n = 0; n < 4; ++n) add->add_nodes(n);
  auto* pre = Add(trace, 5000, proto::TraceEvent::KIND_PREEMPTION);
  pre->add_nodes(2);
  pre->set_notice_s(120);
  auto back = Add(trace, 8000, proto::TraceEvent::KIND_CAPACITY_ADDED);
  back->add_nodes(2);
  auto r = sim::ReplayRun(Inputs(trace, "checkpoint-restart"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GE(r->segments_size(), 2);
  EXPECT_EQ(r->segments(0).phase(), "wait");
  EXPECT_DOUBLE_EQ(r->segments(0).end_s(), 1000);
  EXPECT_EQ(r->interruptions(), 1u);
  // Waiting for node 2 from 5120 s to 8000 s, no detection (the preemption was announced).
  EXPECT_NEAR(Downtime(*r, "wait"), 1000 + (8000 - 5120), 1e-6);
  EXPECT_NEAR(Downtime(*r, "detect"), 0, 1e-9);
  EXPECT_NEAR(r->usd_per_gpu_hour(), sim::OnDemandUsdPerGpuHour("a100-80gb") * 0.35, 1e-9);
}

TEST(ReplayPolicies, CheckNamesTheFieldAndTheFix) {
  proto::RecoveryPolicy p;
  p.set_name("elastc");
  Status s = sim::CheckRecoveryPolicy(p, "replay.policies[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("replay.policies[0].name"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("elastic"), std::string::npos) << s.message();
  p.set_name("elastic");
  p.set_spares(2);
  s = sim::CheckRecoveryPolicy(p, "replay.policies[0]");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("replay.policies[0].spares"), std::string::npos) << s.message();
  EXPECT_EQ(sim::RecoveryPolicies().size(), 7u);  // ... autohet, hetu
}

}  // namespace
}  // namespace hetsim
