// The CPU twin's ranks time-sharing the cores of one machine (SimOptions::shared_cores): busy devices split
// the cores evenly, a device that waits leaves its core to the others. Expectations derived by hand from
// the fixture's exact block costs (1 ms forward, 2 ms backward per block; communication free).
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
  // On one core the two stages never compute at once faster than one core allows, and the core idles only
  // while both wait, which with free transfers never happens: the iteration is all the work added up,
  // 2 stages × 8 micro-batches × (2 + 4) ms = 96 ms (alone on a core each: (m + S − 1)(f + b) = 54 ms).
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
  // free). All four busy all along on two cores: half a core each, 48 ms; the gradient sync is free. A
  // folded run would play one replica alone on the cores and give 24 ms.
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

TEST(SharedCores, AWaitingDeviceLeavesItsCoreToTheOthers) {
  // Replica 0 has 4 micro-batches (48 ms of work), replicas 1 and 2 one each (12 ms) on two cores. For the
  // first 18 ms all three share the two cores (2/3 of a core each): the short replicas finish their 12 ms
  // at t = 18 ms, replica 0 has done 12 ms of its 48; then it runs alone on a core: 36 ms more, 54 ms in
  // all. (Were a finished replica to keep its share, replica 0 would end later.)
  const Setting run = MakeSetting(kFreeNode, 6);
  const auto db = ExactProfile();
  const auto plan = PlanFrom(R"(
pipelines:
  - {micro_batch_size: 1, num_micro_batches: 4, stages: [{devices: [0], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [1], layer_end: 6}]}
  - {micro_batch_size: 1, num_micro_batches: 1, stages: [{devices: [2], layer_end: 6}]}
)");
  EXPECT_NEAR(Simulate(run, plan, db, Fidelity::Balanced(), 2), 0.054, 1e-4);
}

}  // namespace
}  // namespace hetsim::sim
