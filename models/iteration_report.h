// The one report writer and the one timeline writer of an iteration, shared by the simulator (sim/) and
// the executor (executor/): both reduce what they measured to per-device times by category and a list
// of timed slices, and these functions turn that into the IterationReport (models/proto/report.proto)
// and a Chrome-trace JSON timeline (open in Perfetto), with the same fields, categories and names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cluster.h"
#include "models/lowering.h"
#include "models/proto/report.pb.h"
#include "models/proto/training.pb.h"
#include "models/transformer.h"

namespace hetsim::models {

// One timed slice of a device's timeline; `micro_batch` is −1 when the slice belongs to none.
struct TimelineSlice {
  double start_s = 0;
  double end_s = 0;
  Category category = Category::kForward;
  int32_t micro_batch = -1;
};

// What one device did in (the average of) the iteration(s).
struct DeviceMeasure {
  uint32_t device = 0;
  uint32_t pipeline = 0;
  uint32_t stage = 0;
  double compute_s = 0;       // forward + backward + optimizer (TP collectives inside a pass excluded)
  double fwd_bwd_s = 0;       // forward + backward only
  double tp_s = 0;            // exposed time of each kind of communication
  double pp_s = 0;
  double dp_s = 0;
  double zero_s = 0;
  double cp_s = 0;            // context-parallel ring and Ulysses all-to-all
  double ep_s = 0;            // expert parallelism's dispatch and combine
  double pipeline_end_s = 0;  // end of the device's last forward/backward compute
  double comm_in_phase_s = 0; // communication and waiting inside collectives before then (not a bubble)
  double peak_memory_gib = 0;
  double capacity_gib = 0;
  std::vector<TimelineSlice> slices;  // the timeline (optional)
};

struct IterationMeasure {
  std::string source;     // "simulator" or "executor"
  std::string plan_name;
  double iteration_s = 0;
  double wall_time_s = 0;
  std::vector<DeviceMeasure> devices;
};

// The MFU convention both writers use.
extern const char* const kFlopsConvention;

// Per device: communication = TP + PP + DP + ZeRO (exposed), idle = iteration − compute − communication.
// bubble_fraction: over every device, the idle time before its pipeline's last forward/backward compute
// ends (the pipeline phase, excluding the gradient sync and optimizer after it), over the phase's length.
// Communication inside the phase (TP, PP, and DP or ZeRO collectives within it) and waiting inside a
// collective for a slower member (a straggler, a load imbalance) are not bubble: a plan without pipeline
// parallelism has none.
// tokens/s from the training spec; MFU = TransformerModel::IterationModelFlops / (time · Σ peak).
proto::IterationReport BuildIterationReport(const IterationMeasure& m, const Cluster& cluster,
                                            const TransformerModel& model, const proto::Training& training);

// Chrome trace (JSON object format): pid = node (named after it), tid = device ("GPU d (type) pP sS"),
// one complete ("X") event per slice with cat = the category and name "forward mb 3" (categories that
// belong to a micro-batch) or "dp". Every string is JSON-escaped.
std::string ChromeTraceJson(const IterationMeasure& m, const Cluster& cluster);

// The report as JSON (proto3 JSON mapping, field names as in the .proto).
std::string ReportJson(const proto::IterationReport& report);
// Any report message as JSON the same way (proto3 JSON mapping, proto field names, every field printed).
std::string MessageJson(const google::protobuf::Message& message);

// Escapes `s` for a JSON string literal (quotes, backslashes, control characters as \uXXXX).
std::string JsonEscape(const std::string& s);

}  // namespace hetsim::models
