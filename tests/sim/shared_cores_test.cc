// The CPU twin's ranks computing through a pool of cores (SimOptions::shared_cores, hetsim-exec --cores): a
// device holds a core from its start, gives it up while it waits (a receive, a collective, its sends) and
// queues for one after, served in the order asked; at most that many devices compute at once. Expectations
// derived by hand from the fixture's exact block costs (1 ms forward, 2 ms backward per block; communication
// free).
#include <gtest/gtest.h>

#include "sim/simulator.h"
#include "tests/common/specs.h"
#include "tests/sim/simulator_fixture.h"

namespace hetsim::sim {
namespace {

using fixture::ExactProfile;
using fixture::kFreeNode;
using fixture::MakeSetting;
using fixture::Setting;
using fixture::Simulate;
using testing_util::PlanFrom;

// Two stages [emb, b1, b2] and [b3, b4, head], f = 2 ms and b = 4 ms each, 8 micro-batches.
constexpr const char* kTwoStages = R"(
pipelines:
  - micro_batch_size: 1
    num_micro_batches: 8
    stages: [{devices: [0], layer_end: 3}, {devices: [1], layer_begin: 3, layer_end: 6}]
)";

TEST(SharedCores, OneCoreRunsAPipelinesStagesOneAfterAnother) {
  // On one core the two stages never compute at once, and the core idles only while both wait, which with
  // free transfers never happens (a stage that waits for the other gives it the core): the iteration is all
  // the work added up, 2 stages × 8 micro-batches × (2 + 4) ms = 96 ms (a core each: (m + S − 1)(f + b) =
  // 54 ms).
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(kTwoStages);
  EXPECT_NEAR(Simulate(run, plan, db, Fidelity::Balanced(), 1), 0.096, 1e-6);
}

TEST(SharedCores, AsManyCoresAsDevicesChangeNothing) {
  // A core per device: the 1F1B closed form, (m + S − 1)(f + b) = 9 × 6 ms = 54 ms.
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(kTwoStages);
  EXPECT_NEAR(Simulate(run, plan, db, Fidelity::Balanced(), 2), 0.054, 1e-6);
}

TEST(SharedCores, FourBusyReplicasOnTwoCoresTakeTwiceAsLongAndAreNotFolded) {
  // Four one-stage replicas, 2 micro-batches each: alone, 2 × 4 blocks × 3 ms = 24 ms (embedding and head
  // free). On two cores replicas 0 and 1 compute first; at 24 ms they reach the gradient sync and give their
  // cores to replicas 2 and 3, which end at 48 ms; the sync is free. A folded run would play one replica
  // alone and give 24 ms.
  const Setting run = MakeSetting(kFreeNode, 8);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 2, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 2, stages: [{devices: [1], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 2, stages: [{devices: [2], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 2, stages: [{devices: [3], layer_end: 6}]}
)");
  EXPECT_NEAR(Simulate(run, plan, db), 0.024, 1e-4);
  EXPECT_NEAR(Simulate(run, plan, db, Fidelity::Balanced(), 2), 0.048, 1e-4);
}

TEST(SharedCores, AWaitingDeviceGivesItsCoreToTheNextInLine) {
  // Replica 0 has 4 micro-batches (48 ms of work), replicas 1 and 2 one each (12 ms), on two cores.
  // Replicas 0 and 1 take the cores; replica 2 waits in line until replica 1 reaches the gradient sync at
  // 12 ms, then computes from 12 to 24 ms; replica 0 keeps its core to 48 ms, when the sync ends: 48 ms.
  // (Were a waiting replica to keep its core, replica 2 would start at 48 ms and end at 60; shared evenly
  // among the busy ones, as the OS would, 54 ms.)
  const Setting run = MakeSetting(kFreeNode, 6);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [1], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [2], layer_end: 6}]}
)");
  EXPECT_NEAR(Simulate(run, plan, db, Fidelity::Balanced(), 2), 0.048, 1e-4);
}

}  // namespace
}  // namespace hetsim::sim
