// The replay engine on long traces, against closed forms: a million events (a thousand interruptions among
// them) and a hundred thousand node replacements give the report hand-derived below; a fixed checkpoint
// interval that would checkpoint more than ten million times is refused, naming the field and the least
// interval that fits, and that interval replays. The engine's speed on such traces is in docs/replay.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "sim/replay.h"
#include "tests/sim/tiny_replay_fixture.h"

namespace hetsim {
namespace {

// 5 nodes × 2 A100s; the plans below use nodes 0-3, node 4 is free.
const char* kReplayScaleCluster = R"(
name: replay-scale
nodes:
  - name: n
    count: 5
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_node}
network: {single_switch: {}}
storage:
  - {name: store, kind: object_store, read_bandwidth_gbyte_s: 0.5, write_bandwidth_gbyte_s: 0.25, latency_ms: 1}
)";

constexpr double kDetectS = 60, kRestartS = 200;

class ReplayScaleTest : public testing::TinyReplayFixture {
 protected:
  void SetUp() override {
    Build(kReplayScaleCluster);
    // DP 4 × TP 2 on nodes 0-3.
    for (uint32_t r = 0; r < 4; ++r) {
      auto* pl = plan_.add_pipelines();
      pl->set_micro_batch_size(2);
      pl->set_num_micro_batches(1);
      auto* s = pl->add_stages();
      s->add_devices(2 * r);
      s->add_devices(2 * r + 1);
      s->set_tp_degree(2);
      s->set_layer_end(model_->num_layers());
    }
  }

  sim::ReplayInputs Inputs(const std::string& policy, double interval_s) {
    sim::ReplayInputs in;
    in.cluster = &*cluster_;
    in.model = &*model_;
    in.training = training_;
    in.plan = plan_;
    in.trace_name = "scale";
    in.spec.set_detection_s(kDetectS);
    in.spec.set_restart_s(kRestartS);
    in.spec.set_checkpoint_interval_s(interval_s);
    in.policy.set_name(policy);
    in.sim.fidelity = sim::Fidelity::Fast();
    in.cache = &cache_;
    return in;
  }

  // A run's first configuration (iteration T, save C, load L): a replay of a trace without events.
  struct Costs {
    double T, C, L;
  };
  Costs CostsOf(const std::string& policy) {
    auto in = Inputs(policy, 600);
    in.trace.set_duration_s(1000);
    auto r = sim::ReplayRun(in);
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return {1, 1, 1};
    const auto& c = r->configurations(0);
    return {c.iteration_s(), c.checkpoint_save_s(), c.checkpoint_load_s()};
  }

  static double Downtime(const proto::ReplayReport& r, const std::string& cause) {
    for (const auto& d : r.downtime()) {
      if (d.cause() == cause) return d.seconds();
    }
    return -1;
  }

  proto::Plan plan_;
  sim::ReplayCache cache_;
};

using testing::Progress;
using testing::Train;

// Whether x is within `tol` of a whole number (a boundary where rounding could flip the count).
bool NearWhole(double x, double tol) { return std::abs(x - std::round(x)) < tol; }

TEST_F(ReplayScaleTest, AMillionEventsGiveTheClosedForm) {
  // 1,000 crashes of the job, one every 1,000 s, and between them 999,000 failures of the free node 4, each
  // repaired within half a second: those change no GPU the job holds. Every crash loses the work since the
  // last checkpoint, then detection D, restart R and the reload L; every training stretch is the same.
  const Costs c = CostsOf("checkpoint-restart");
  const double T = c.T, C = c.C, L = c.L;
  ASSERT_GT(T, 0);
  ASSERT_GT(L, 0);
  constexpr int kCrashes = 1000, kNodeFailures = 999000;
  constexpr double kGap = 1000;
  const double E = (kCrashes + 1) * kGap;
  std::vector<std::pair<double, bool>> when;  // (time, crash)
  for (int j = 1; j <= kCrashes; ++j) when.emplace_back(j * kGap, true);
  const double spacing = E / (kNodeFailures + 1);
  for (int m = 0; m < kNodeFailures; ++m) when.emplace_back((m + 0.5) * spacing, false);
  std::sort(when.begin(), when.end());
  auto in = Inputs("checkpoint-restart", 100);
  in.trace.set_duration_s(E);
  in.trace.mutable_events()->Reserve(static_cast<int>(when.size()));
  for (const auto& [t, crash] : when) {
    auto* e = in.trace.add_events();
    e->set_time_s(t);
    if (crash) {
      e->set_kind(proto::TraceEvent::KIND_SOFTWARE_FAILURE);
      e->set_cause("Software Bug");
    } else {
      e->set_kind(proto::TraceEvent::KIND_NODE_FAILURE);
      e->add_nodes(4);
      e->set_repair_s(0.5);
      e->set_cause("Host Maintenance");
    }
  }
  ASSERT_EQ(in.trace.events_size(), 1000000);
  const auto k = static_cast<uint64_t>(std::max<int64_t>(1, std::llround(100 / T)));
  const double down = kDetectS + kRestartS + L;
  const Progress first = Train(kGap, T, C, k), later = Train(kGap - down, T, C, k);
  // The counts below hold unless a stretch ends within rounding of a whole cycle or iteration.
  ASSERT_FALSE(NearWhole(kGap / (static_cast<double>(k) * T + C), 1e-6));
  ASSERT_FALSE(NearWhole((kGap - down) / (static_cast<double>(k) * T + C), 1e-6));
  ASSERT_FALSE(NearWhole(later.since_commit / T, 1e-6));

  auto r = sim::ReplayRun(in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->events(), 1000000u);
  EXPECT_EQ(r->interruptions(), static_cast<uint32_t>(kCrashes));
  ASSERT_EQ(r->configurations_size(), 1);
  // The last stretch ends with the run: its iterations since the checkpoint count, the unit in progress not.
  const uint64_t iterations = first.committed + (kCrashes - 1) * later.committed + later.committed + later.uncommitted;
  EXPECT_EQ(r->iterations(), iterations);
  const double unfinished = later.since_commit - static_cast<double>(later.uncommitted) * T;
  const double lost = first.since_commit + (kCrashes - 1) * later.since_commit + unfinished;
  EXPECT_NEAR(r->lost_work_s(), lost, 1e-6 * E);
  EXPECT_NEAR(r->downtime_s(), kCrashes * down, 1e-6 * E);
  EXPECT_NEAR(Downtime(*r, "detect"), kCrashes * kDetectS, 1e-6);
  EXPECT_NEAR(Downtime(*r, "restart"), kCrashes * kRestartS, 1e-6);
  EXPECT_NEAR(Downtime(*r, "wait"), 0, 1e-9);
  const uint64_t checkpoints = first.checkpoints + kCrashes * later.checkpoints;
  EXPECT_NEAR(r->checkpoint_overhead_s(), static_cast<double>(checkpoints) * C, 1e-6 * E);
  EXPECT_NEAR(r->ettr(), static_cast<double>(iterations) * T / E, 1e-9);
  EXPECT_NEAR(r->ettr() * E + r->lost_work_s() + r->checkpoint_overhead_s() + r->downtime_s(), E, 1e-6 * E);
  // The job holds its 8 GPUs throughout; node 4's failures change nothing it pays for.
  EXPECT_NEAR(r->gpu_hours(), 8 * E / 3600, 1e-9 * E);
  // A training segment per stretch, and detect, restart, recover per crash.
  EXPECT_EQ(r->segments_size(), (kCrashes + 1) + 3 * kCrashes);
  ASSERT_EQ(r->by_event_cause_size(), 1);
  EXPECT_EQ(r->by_event_cause(0).cause(), "Software Bug");
}

TEST_F(ReplayScaleTest, AHundredThousandReplacementsNeverWait) {
  // Hot spares, node failures in turn (node i mod 5 at the i-th): each hits a node of the job, whose slot
  // takes the free node (the one that failed before, repaired in 100 s), so every failure costs D + R + L and
  // the job never waits. The job holds 8 GPUs all the time (the replacement is taken when the failure
  // happens; detection is the first of its down phases) and the spare node 2 more.
  const Costs c = CostsOf("hot-spares");
  const double T = c.T, C = c.C, L = c.L;
  constexpr int kFailures = 100000;
  constexpr double kGap = 1000;
  const double E = (kFailures + 1) * kGap;
  auto in = Inputs("hot-spares", 100);
  in.trace.set_duration_s(E);
  for (int i = 0; i < kFailures; ++i) {
    auto* e = in.trace.add_events();
    e->set_time_s((i + 1) * kGap);
    e->set_kind(proto::TraceEvent::KIND_NODE_FAILURE);
    e->add_nodes(static_cast<uint32_t>(i % 5));
    e->set_repair_s(100);
  }
  const auto k = static_cast<uint64_t>(std::max<int64_t>(1, std::llround(100 / T)));
  const double down = kDetectS + kRestartS + L;
  const Progress first = Train(kGap, T, C, k), later = Train(kGap - down, T, C, k);
  ASSERT_FALSE(NearWhole(kGap / (static_cast<double>(k) * T + C), 1e-6));
  ASSERT_FALSE(NearWhole((kGap - down) / (static_cast<double>(k) * T + C), 1e-6));
  ASSERT_FALSE(NearWhole(later.since_commit / T, 1e-6));

  auto r = sim::ReplayRun(in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->interruptions(), static_cast<uint32_t>(kFailures));
  EXPECT_NEAR(Downtime(*r, "wait"), 0, 1e-9);
  EXPECT_NEAR(r->downtime_s(), kFailures * down, 1e-6 * E);
  EXPECT_EQ(r->iterations(), first.committed + kFailures * later.committed + later.uncommitted);
  EXPECT_DOUBLE_EQ(r->spares_gpus(), 2);
  EXPECT_NEAR(r->gpu_hours(), 10 * E / 3600, 1e-9 * E);
  EXPECT_NEAR(r->ettr() * E + r->lost_work_s() + r->checkpoint_overhead_s() + r->downtime_s(), E, 1e-6 * E);
}

TEST_F(ReplayScaleTest, ATinyIntervalIsRefusedWithTheLeastThatFits) {
  // Ten years: at most 10^7 checkpoints means at least 315,360,000 s / 10^7 = 31.536 s, said as 31.6 s (three
  // significant digits, rounded up).
  const double E = 3650 * 86400.0;
  auto in = Inputs("checkpoint-restart", 0.001);
  in.trace.set_duration_s(E);
  auto r = sim::ReplayRun(in);
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("replay.checkpoint_interval_s"), std::string::npos) << m;
  EXPECT_NE(m.find("at least 31.6 s"), std::string::npos) << m;
  EXPECT_NE(m.find("315,360,000,000 times"), std::string::npos) << m;

  // The least interval replays: whole checkpoint cycles of k iterations and a save each, as in the closed form.
  const Costs c = CostsOf("checkpoint-restart");
  in.spec.set_checkpoint_interval_s(31.6);
  r = sim::ReplayRun(in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const auto k = static_cast<uint64_t>(std::max<int64_t>(1, std::llround(31.6 / c.T)));
  const Progress p = Train(E, c.T, c.C, k);
  // Ten million cycles accumulate rounding in the simulated clock: at most one cycle either way.
  EXPECT_NEAR(static_cast<double>(r->iterations()), static_cast<double>(p.committed + p.uncommitted),
              static_cast<double>(k));
  EXPECT_NEAR(r->checkpoint_overhead_s(), static_cast<double>(p.checkpoints) * c.C, c.C * 1.5);
  EXPECT_LE(r->checkpoint_overhead_s() / c.C, 1e7 + 1);
  EXPECT_NEAR(r->ettr() * E + r->lost_work_s() + r->checkpoint_overhead_s() + r->downtime_s(), E, 1e-6 * E);
  // Young/Daly's interval (0) is never refused.
  in.spec.set_checkpoint_interval_s(0);
  EXPECT_TRUE(sim::ReplayRun(in).ok());
}

}  // namespace
}  // namespace hetsim
