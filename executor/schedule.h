// The order in which one pipeline stage runs the forward and backward passes of its micro-batches.
// The same schedules as the simulator (sim/program.h):
//   1F1B (PipeDream-flush): stage s of S does min(S − s − 1, m) warm-up forwards, then alternates one
//        forward and one backward, then the remaining backwards;
//   GPipe: all m forwards, then all m backwards (micro-batch order 0..m−1 in both phases).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/proto/plan.pb.h"

namespace hetsim::executor {

struct ScheduleStep {
  bool forward = true;
  uint32_t micro_batch = 0;
  bool operator==(const ScheduleStep&) const = default;
};

// Requires stage < num_stages and num_micro_batches >= 1; schedule is 1F1B or GPipe.
std::vector<ScheduleStep> StageSchedule(proto::Plan::Schedule schedule, uint32_t stage, uint32_t num_stages,
                                        uint32_t num_micro_batches);

// "F0 F1 B0 F2 B1 B2" — for messages and tests.
std::string ScheduleString(const std::vector<ScheduleStep>& steps);

}  // namespace hetsim::executor
