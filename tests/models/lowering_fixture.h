// Helpers the lowering's tests share (lowering_test.cc, lowering_zero_test.cc): a resolved training spec for
// a plan's batch at 16 tokens, and a plan lowered on the test world after its structure is checked.
#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "models/lowering.h"
#include "models/training.h"
#include "tests/common/specs.h"

namespace hetsim::models::lowering_fixture {

using testing_util::TheWorld;

inline proto::Training TrainingFor(const proto::Plan& plan, proto::Recompute recompute = proto::RECOMPUTE_NONE) {
  uint32_t batch = 0;
  for (const auto& p : plan.pipelines()) batch += p.micro_batch_size() * p.num_micro_batches();
  proto::Training t;
  t.set_global_batch_size(batch);
  t.set_seq_len(16);
  t.set_recompute(recompute);
  auto r = ResolveTraining(t, TheWorld().model, "t");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

inline Lowering Lower(const proto::Plan& plan, const proto::Training& training, const LoweringOptions& options = {}) {
  const PlanContext ctx{TheWorld().cluster, TheWorld().model, training};
  const Status v = ValidatePlanStructure(plan, ctx, "plan");
  EXPECT_TRUE(v.ok()) << v.message();
  auto l = LowerPlan(plan, ctx, options);
  EXPECT_TRUE(l.ok()) << l.status().message();
  return std::move(l).value();
}

}  // namespace hetsim::models::lowering_fixture
