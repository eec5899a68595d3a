// Stage schedules, hand-written for small pipelines.
#include "executor/schedule.h"

#include <gtest/gtest.h>

namespace hetsim::executor {
namespace {

std::string S(proto::Plan::Schedule sched, uint32_t stage, uint32_t stages, uint32_t m) {
  return ScheduleString(StageSchedule(sched, stage, stages, m));
}

TEST(ScheduleTest, OneFOneBWarmUpSteadyCoolDown) {
  constexpr auto k1F1B = proto::Plan::SCHEDULE_1F1B;
  // 4 stages, 6 micro-batches: stage s warms up with min(3 − s, 6) forwards.
  EXPECT_EQ(S(k1F1B, 0, 4, 6), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(S(k1F1B, 1, 4, 6), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(S(k1F1B, 3, 4, 6), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the warm-up is capped at m.
  EXPECT_EQ(S(k1F1B, 0, 4, 2), "F0 F1 B0 B1");
  EXPECT_EQ(S(k1F1B, 0, 1, 3), "F0 B0 F1 B1 F2 B2");
}

TEST(ScheduleTest, GPipeRunsAllForwardsFirst) {
  EXPECT_EQ(S(proto::Plan::SCHEDULE_GPIPE, 2, 4, 3), "F0 F1 F2 B0 B1 B2");
}

TEST(ScheduleTest, EveryMicroBatchRunsForwardThenBackwardOnce) {
  for (auto sched : {proto::Plan::SCHEDULE_1F1B, proto::Plan::SCHEDULE_GPIPE}) {
    for (uint32_t stages = 1; stages <= 6; ++stages) {
      for (uint32_t m = 1; m <= 9; ++m) {
        for (uint32_t s = 0; s < stages; ++s) {
          const auto steps = StageSchedule(sched, s, stages, m);
          ASSERT_EQ(steps.size(), 2u * m);
          std::vector<int> seen(m, 0);
          for (const auto& st : steps) {
            int& state = seen[st.micro_batch];
            ASSERT_EQ(state, st.forward ? 0 : 1) << ScheduleString(steps);
            ++state;
          }
          // 1F1B keeps at most min(S − s, m) micro-batches in flight (the memory model's assumption).
          if (sched == proto::Plan::SCHEDULE_1F1B) {
            int in_flight = 0, peak = 0;
            for (const auto& st : steps) peak = std::max(peak, in_flight += st.forward ? 1 : -1);
            EXPECT_EQ(static_cast<uint32_t>(peak), std::min(stages - s, m));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace hetsim::executor
