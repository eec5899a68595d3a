#include "executor/schedule.h"

#include <algorithm>

#include "models/status.h"

namespace hetsim::executor {

std::vector<ScheduleStep> StageSchedule(proto::Plan::Schedule schedule, uint32_t stage, uint32_t num_stages,
                                        uint32_t num_micro_batches) {
  HETSIM_CHECK(stage < num_stages && num_micro_batches >= 1, "StageSchedule: bad stage or micro-batch count");
  const uint32_t m = num_micro_batches;
  std::vector<ScheduleStep> steps;
  steps.reserve(2 * m);
  if (schedule == proto::Plan::SCHEDULE_GPIPE) {
    for (uint32_t j = 0; j < m; ++j) steps.push_back({true, j});
    for (uint32_t j = 0; j < m; ++j) steps.push_back({false, j});
    return steps;
  }
  HETSIM_CHECK(schedule == proto::Plan::SCHEDULE_1F1B || schedule == proto::Plan::SCHEDULE_UNSPECIFIED,
               "StageSchedule: only 1F1B and GPipe are executable");
  const uint32_t warmup = std::min(num_stages - stage - 1, m);
  uint32_t next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) steps.push_back({true, next_f});
  while (next_f < m) {
    steps.push_back({true, next_f++});
    steps.push_back({false, next_b++});
  }
  while (next_b < m) steps.push_back({false, next_b++});
  return steps;
}

std::string ScheduleString(const std::vector<ScheduleStep>& steps) {
  std::string s;
  for (const auto& st : steps) {
    if (!s.empty()) s += ' ';
    s += (st.forward ? 'F' : 'B') + std::to_string(st.micro_batch);
  }
  return s;
}

}  // namespace hetsim::executor
