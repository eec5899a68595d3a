// comm.ep_overlap with the EP dispatcher's kernels holding SMs (docs/moe.md "Overlap"): an overlapped pass of
// compute C beside communication A takes max(A, C + A·σ), σ the share of SMs the communication holds.
// Expected values are derived by hand in the comments.
#include <gtest/gtest.h>

#include <string>

#include "models/lowering.h"
#include "models/op_prices.h"
#include "tests/sim/ep_overlap_world.h"

namespace hetsim::sim {
namespace ep_overlap_test {

using ep_overlap::World;

TEST(EpOverlap, OverlappedSecondsByHand) {
  // Compute 3 s beside 2 s of communication holding a quarter of the SMs: the compute does 1.5 s of its
  // work in those 2 s, then 1.5 s alone: 3.5 s = 3 + 2 · 0.25.
  EXPECT_DOUBLE_EQ(models::OverlappedSeconds(3, 2, 0.25), 3.5);
  EXPECT_DOUBLE_EQ(models::SmContentionSeconds(3, 2, 0.25), 0.5);
  // Compute 1 s: done after 1 / 0.75 = 1.33 s, inside the communication's 2 s.
  EXPECT_DOUBLE_EQ(models::OverlappedSeconds(1, 2, 0.25), 2);
  EXPECT_DOUBLE_EQ(models::SmContentionSeconds(1, 2, 0.25), 0);
  // Compute 1.8 s: 1.5 s of it in the 2 s, 0.3 s after: 2.3 s, 0.3 s beyond the longer of the two.
  EXPECT_NEAR(models::SmContentionSeconds(1.8, 2, 0.25), 0.3, 1e-12);
  // Every SM held: nothing overlaps, C + A.
  EXPECT_DOUBLE_EQ(models::OverlappedSeconds(1, 2, 1), 3);
  EXPECT_DOUBLE_EQ(models::SmContentionSeconds(3, 2, 0), 0);
}

TEST(EpOverlap, TheDispatchersHoldTheirSms) {
  const World w;
  const auto share = [&](uint32_t ep, const std::string& comm) {
    auto l = models::LowerPlan(World::Plan(ep, comm), models::PlanContext{w.cluster, w.model, w.training});
    EXPECT_TRUE(l.ok()) << l.status().message();
    float s = -1;
    for (const models::Op& op : l->ranks[0].ops) {
      if (op.category != models::Category::kEp) continue;
      if (s >= 0) {
        EXPECT_FLOAT_EQ(op.sm_share, s) << comm;  // one value for all of a plan's EP calls here
      }
      s = op.sm_share;
    }
    return s;
  };
  // NCCL's all-to-all: 32 peer-to-peer channels inside a node, 16 across nodes, one SM each, of 132.
  EXPECT_FLOAT_EQ(share(4, "{ep_overlap: true}"), 32.0f / 132);
  EXPECT_FLOAT_EQ(share(16, "{ep_overlap: true}"), 16.0f / 132);
  // DeepEP's 20; a plan's own count; nothing held without overlap (nothing runs beside them).
  EXPECT_FLOAT_EQ(share(16, "{ep_overlap: true, ep_dispatcher: node_dedup}"), 20.0f / 132);
  EXPECT_FLOAT_EQ(share(16, "{ep_overlap: true, ep_sms: 24}"), 24.0f / 132);
  EXPECT_FLOAT_EQ(share(16, "{ep_overlap: false}"), 0.0f);
}

TEST(EpOverlap, HoldingEverySmGivesTheSerialTimeBack) {
  // With every SM held (σ = 1) the compute stops while the all-to-alls run: each pass takes C + A, what the
  // plan takes without overlap. Fewer SMs held let more of the compute run: strictly faster, and the
  // default (16 of 132 across nodes) between one SM and all of them.
  const World w;
  const double serial = w.Simulate(World::Plan(16, "{ep_overlap: false}"));
  const double all = w.Simulate(World::Plan(16, "{ep_overlap: true, ep_sms: 132}"));
  const double one = w.Simulate(World::Plan(16, "{ep_overlap: true, ep_sms: 1}"));
  const double def = w.Simulate(World::Plan(16, "{ep_overlap: true}"));
  ASSERT_GT(serial, 0);
  EXPECT_NEAR(all, serial, 1e-9 * serial);
  EXPECT_LT(one, def);
  EXPECT_LT(def, serial);
}

}  // namespace ep_overlap_test
}  // namespace hetsim::sim
