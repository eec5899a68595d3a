// The recovery policies' registry and interface (sim/recovery/policy.h): every policy listed with its source,
// the options each takes (and the refusal that names those that do), the planners they re-plan with, and
// policies' decisions asked directly, without the engine, against hand-derived answers.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sim/recovery/policy.h"
#include "sim/replay.h"
#include "tests/sim/tiny_replay_fixture.h"

namespace hetsim {
namespace {

namespace recovery = sim::recovery;

TEST(RecoveryRegistry, ListsEveryPolicyWithItsSource) {
  const std::vector<std::string> names = {"checkpoint-restart", "hot-spares", "in-memory", "varuna",
                                          "elastic",            "autohet",    "hetu"};
  const auto& listed = sim::RecoveryPolicies();
  ASSERT_EQ(listed.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(listed[i].name, names[i]);
    // Each line ends with the paper or system it follows, in parentheses.
    ASSERT_FALSE(listed[i].summary.empty());
    EXPECT_EQ(listed[i].summary.back(), ')') << listed[i].summary;
    auto policy = recovery::NewPolicy([&] {
      proto::RecoveryPolicy p;
      p.set_name(names[i]);
      return p;
    }());
    ASSERT_TRUE(policy.ok()) << names[i];
  }
  proto::RecoveryPolicy unknown;
  unknown.set_name("gemini");
  EXPECT_FALSE(recovery::NewPolicy(unknown).ok());
}

TEST(RecoveryRegistry, EachOptionIsTakenByThePoliciesItBelongsTo) {
  // A field set on a policy that does not take it is refused, naming the field and the policies that do.
  struct Option {
    const char* field;
    void (*set)(proto::RecoveryPolicy*);
    std::set<std::string> takers;
  };
  const std::set<std::string> replanning = {"varuna", "elastic", "autohet", "hetu"};
  const std::vector<Option> options = {
      {"spares", [](proto::RecoveryPolicy* p) { p->set_spares(2); }, {"hot-spares", "in-memory"}},
      {"replicas", [](proto::RecoveryPolicy* p) { p->set_replicas(3); }, {"in-memory"}},
      {"remote_interval_s", [](proto::RecoveryPolicy* p) { p->set_remote_interval_s(600); }, {"in-memory"}},
      {"planner", [](proto::RecoveryPolicy* p) { p->set_planner("metis"); }, replanning},
      {"replan_s", [](proto::RecoveryPolicy* p) { p->set_replan_s(5); }, replanning},
      {"grow", [](proto::RecoveryPolicy* p) { p->set_grow(false); }, replanning},
      {"measured_replan", [](proto::RecoveryPolicy* p) { p->set_measured_replan(true); }, replanning},
      {"load_from_host_memory", [](proto::RecoveryPolicy* p) { p->set_load_from_host_memory(true); }, {"autohet"}},
      {"specialization_s", [](proto::RecoveryPolicy* p) { p->set_specialization_s(3); }, {"hetu"}},
      {"fused_bsr", [](proto::RecoveryPolicy* p) { p->set_fused_bsr(false); }, {"hetu"}},
      {"checkpoint_on_notice", [](proto::RecoveryPolicy* p) { p->set_checkpoint_on_notice(true); },
       {"checkpoint-restart", "hot-spares", "in-memory", "varuna", "elastic", "autohet", "hetu"}},
  };
  for (const auto& o : options) {
    std::string who;  // registry order
    for (const auto& p : sim::RecoveryPolicies()) {
      if (o.takers.count(p.name) != 0) who += (who.empty() ? "" : ", ") + p.name;
    }
    for (const auto& p : sim::RecoveryPolicies()) {
      proto::RecoveryPolicy policy;
      policy.set_name(p.name);
      o.set(&policy);
      const Status s = sim::CheckRecoveryPolicy(policy, "replay.policies[2]");
      if (o.takers.count(p.name) != 0) {
        EXPECT_TRUE(s.ok()) << p.name << " " << o.field << ": " << s.message();
      } else {
        ASSERT_FALSE(s.ok()) << p.name << " " << o.field;
        EXPECT_EQ(s.message(), std::string("replay.policies[2].") + o.field + ": policy " + p.name +
                                   " does not take it (only " + who + ")");
      }
    }
  }
}

TEST(RecoveryRegistry, ReplannersFollowThePapersUnlessTold) {
  auto replanner = [](const std::string& name, const std::string& planner = "", const std::string& options = "") {
    proto::RecoveryPolicy p;
    p.set_name(name);
    p.set_planner(planner);
    p.set_planner_options(options);
    return sim::DefaultReplanner(p);
  };
  using Pair = std::pair<std::string, std::string>;
  EXPECT_EQ(replanner("varuna"), Pair("megatron", "tp_degrees: [1]"));  // pipeline × data parallelism
  EXPECT_EQ(replanner("elastic"), Pair("megatron", ""));
  EXPECT_EQ(replanner("autohet"), Pair("autohet", ""));
  EXPECT_EQ(replanner("hetu"), Pair("hetu", "{zero_stage: 0}"));
  EXPECT_EQ(replanner("checkpoint-restart"), Pair("", ""));
  // A planner of the user's comes with its own options (or none), never the default planner's.
  EXPECT_EQ(replanner("varuna", "metis"), Pair("metis", ""));
  EXPECT_EQ(replanner("hetu", "hetu", "{zero_stage: 1}"), Pair("hetu", "{zero_stage: 1}"));
}

TEST(RecoveryRegistry, TraitsSayWhereTheJobRestartsAndWhatItKeeps) {
  auto traits = [](const std::string& name) {
    proto::RecoveryPolicy p;
    p.set_name(name);
    return (*recovery::NewPolicy(p))->traits();
  };
  EXPECT_EQ(traits("checkpoint-restart").placement, recovery::Placement::kSamePlan);
  EXPECT_FALSE(traits("checkpoint-restart").spares);
  EXPECT_TRUE(traits("hot-spares").spares);
  EXPECT_TRUE(traits("in-memory").spares);
  for (const char* name : {"varuna", "elastic", "autohet", "hetu"}) {
    EXPECT_EQ(traits(name).placement, recovery::Placement::kReplan) << name;
    EXPECT_TRUE(traits(name).grow) << name;
  }
  EXPECT_TRUE(traits("elastic").checkpoint_on_notice);
  EXPECT_TRUE(traits("hetu").checkpoint_on_notice);
  EXPECT_FALSE(traits("varuna").checkpoint_on_notice);
  EXPECT_TRUE(traits("hetu").gpu_granular);
  EXPECT_FALSE(traits("elastic").gpu_granular);
}

// 4 nodes × 2 A100s.
const char* kRecoveryPoliciesCluster = R"(
name: recovery-test
nodes:
  - name: n
    count: 4
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_node}
network: {single_switch: {}}
storage:
  - {name: store, kind: object_store, read_bandwidth_gbyte_s: 0.5, write_bandwidth_gbyte_s: 0.25}
)";

// An Env with no simulator behind it: a policy that asks for a cost gets 1 s.
class NoCosts : public recovery::Env {
 public:
  NoCosts(const models::Cluster& c, const models::TransformerModel& m, const proto::Training& t)
      : c_(c), m_(m), t_(t) {}
  const models::Cluster& cluster() const override { return c_; }
  const models::TransformerModel& model() const override { return m_; }
  const proto::Training& training() const override { return t_; }
  const std::string& calibration() const override { return calibration_; }
  Result<double> Seconds(const std::string&, const std::function<Result<double>()>&) override { return 1.0; }
  Result<double> PlayTransfers(const models::Cluster&, const std::vector<sim::Transfer>&, const std::string&) override {
    return 1.0;
  }
  void Progress(const std::string&) override {}

 private:
  const models::Cluster& c_;
  const models::TransformerModel& m_;
  const proto::Training& t_;
  std::string calibration_;
};

class RecoveryDecisions : public testing::TinyReplayFixture {
 protected:
  void SetUp() override {
    Build(kRecoveryPoliciesCluster);
    // Two pipelines of two stages: pipeline 0 on nodes 0 (layers [0, 2)) and 1 (the rest), pipeline 1 on
    // nodes 2 and 3, every stage TP 2.
    for (uint32_t p = 0; p < 2; ++p) {
      auto* pl = from_.plan.add_pipelines();
      pl->set_micro_batch_size(1);
      pl->set_num_micro_batches(4);
      for (uint32_t s = 0; s < 2; ++s) {
        auto* st = pl->add_stages();
        st->add_devices(4 * p + 2 * s);
        st->add_devices(4 * p + 2 * s + 1);
        st->set_tp_degree(2);
        st->set_layer_begin(s == 0 ? 0 : 2);
        st->set_layer_end(s == 0 ? 2 : model_->num_layers());
      }
    }
    from_.cluster = std::shared_ptr<const models::Cluster>(&*cluster_, [](const models::Cluster*) {});
    from_.node_map = {0, 1, 2, 3};
    for (uint32_t d = 0; d < 8; ++d) from_.place.push_back(d);
    from_.nodes = {0, 1, 2, 3};
  }

  static std::unique_ptr<recovery::Policy> Make(const proto::RecoveryPolicy& p) {
    auto made = recovery::NewPolicy(p);
    EXPECT_TRUE(made.ok()) << made.status().message();
    return made.ok() ? std::move(made).value() : nullptr;
  }

  // A loss of `failed` nodes (no crash) with the job's slots in node order.
  bool NeedsRollback(recovery::Policy& policy, const std::set<uint32_t>& failed, bool software = false) {
    NoCosts env(*cluster_, *model_, training_);
    const recovery::Loss loss{from_, failed, software, slots_, slot_of_, [] { return std::set<uint32_t>(); }};
    return policy.NeedsRollback(loss, env);
  }

  recovery::Config from_;
  std::vector<uint32_t> slots_ = {0, 1, 2, 3};
  std::vector<int32_t> slot_of_ = {0, 1, 2, 3};
};

TEST_F(RecoveryDecisions, ElasticRollsBackOnlyWhenALayerLostEveryReplica) {
  proto::RecoveryPolicy p;
  p.set_name("elastic");
  auto elastic = Make(p);
  EXPECT_FALSE(NeedsRollback(*elastic, {1}));     // pipeline 1 still holds every layer
  EXPECT_FALSE(NeedsRollback(*elastic, {0, 3}));  // the first layers on node 2, the rest on node 1
  EXPECT_TRUE(NeedsRollback(*elastic, {1, 3}));   // the last layers lost both replicas
  EXPECT_TRUE(NeedsRollback(*elastic, {}, true));  // a crash of the job's processes loses every GPU's state
  EXPECT_TRUE(elastic->ReplicasKeepWork());
  p.set_name("checkpoint-restart");
  EXPECT_TRUE(NeedsRollback(*Make(p), {1}));
}

TEST_F(RecoveryDecisions, GeminiLosesItsCopiesWithAWholeReplicaGroup) {
  // replicas 2: nodes in slots 0-1 and 2-3 keep each other's checkpoints.
  proto::RecoveryPolicy p;
  p.set_name("in-memory");
  auto two = Make(p);
  EXPECT_FALSE(NeedsRollback(*two, {0}));
  EXPECT_FALSE(NeedsRollback(*two, {1, 2}));  // one node of each group
  EXPECT_TRUE(NeedsRollback(*two, {2, 3}));
  EXPECT_FALSE(NeedsRollback(*two, {}, true));  // host memory outlives a crash of the processes
  // A replaced node (slot 0 now holds node 3) counts for its slot's group; a failed node that left the job's
  // slots counts for none.
  slots_ = {3, 1, 2, 0};
  slot_of_ = {3, 1, 2, 0};
  EXPECT_TRUE(NeedsRollback(*two, {3, 1}));
  EXPECT_FALSE(NeedsRollback(*two, {3, 2}));
  p.set_replicas(4);  // one group of four
  EXPECT_FALSE(NeedsRollback(*Make(p), {0, 1, 2}));
  EXPECT_TRUE(NeedsRollback(*Make(p), {0, 1, 2, 3}));
}

TEST_F(RecoveryDecisions, GeminiRollsBackToTheLastRemoteCheckpoint) {
  // Checkpoints every 5 s of training, remote ones every 12 s: the third checkpoint (15 s) goes remote. What
  // was committed after it (4 iterations, 2 s) is what a rollback takes back, once.
  proto::RecoveryPolicy p;
  p.set_name("in-memory");
  p.set_remote_interval_s(12);
  auto gemini = Make(p);
  auto cfg = std::make_shared<const recovery::Config>(from_);
  for (int i = 0; i < 3; ++i) {
    gemini->Committed(10, 5);
    gemini->Saved(cfg, 5);
  }
  gemini->Committed(4, 2);
  const recovery::Work w = gemini->RollBack();
  EXPECT_EQ(w.iterations, 4u);
  EXPECT_DOUBLE_EQ(w.seconds, 2);
  EXPECT_EQ(gemini->RollBack().iterations, 0u);
  // Other policies' checkpoints are all in storage: nothing beyond the last one.
  p.Clear();
  p.set_name("checkpoint-restart");
  auto cr = Make(p);
  cr->Committed(10, 5);
  EXPECT_EQ(cr->RollBack().iterations, 0u);
}

TEST_F(RecoveryDecisions, HetuSpecialisesInPlaceOfARestartUnlessItRollsBack) {
  proto::RecoveryPolicy p;
  p.set_name("hetu");
  p.set_specialization_s(7);
  auto hetu = Make(p);
  EXPECT_DOUBLE_EQ(hetu->RestartSeconds(false, 300), 7);
  EXPECT_DOUBLE_EQ(hetu->RestartSeconds(true, 300), 300);
  p.Clear();
  p.set_name("varuna");
  EXPECT_DOUBLE_EQ(Make(p)->RestartSeconds(false, 300), 300);
}

}  // namespace
}  // namespace hetsim
