// The replay's public API (sim/replay.h): the run goes to the engine (sim/replay_engine.h) with the policy
// the registry makes (sim/recovery/); prices, Young/Daly, the report as JSON.
#include "sim/replay.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <google/protobuf/field_mask.pb.h>
#include <google/protobuf/util/field_mask_util.h>
#include <google/protobuf/util/json_util.h>

#include "models/iteration_report.h"
#include "sim/recovery/policy.h"
#include "sim/replay_engine.h"

namespace hetsim::sim {

Result<proto::ReplayReport> ReplayRun(const ReplayInputs& in) {
  if (in.cluster == nullptr || in.model == nullptr) return Status::Invalid("replay: no cluster or model");
  HETSIM_RETURN_IF_ERROR(CheckRecoveryPolicy(in.policy, "policy"));
  HETSIM_ASSIGN_OR_RETURN(auto policy, recovery::NewPolicy(in.policy));
  replay_internal::Engine engine(in, std::move(policy));
  return engine.Run();
}

const std::vector<PolicyInfo>& RecoveryPolicies() {
  static const std::vector<PolicyInfo> list = [] {
    std::vector<PolicyInfo> l;
    for (const auto& p : recovery::Registry()) l.push_back({p.name, p.summary});
    return l;
  }();
  return list;
}

Status CheckRecoveryPolicy(const proto::RecoveryPolicy& policy, const std::string& where) {
  return recovery::CheckOptions(policy, where);
}

namespace {
const recovery::Traits* TraitsOf(const std::string& policy) {
  // Policies are built from their defaults once per name (traits do not depend on the options).
  static std::map<std::string, std::unique_ptr<recovery::Policy>> made;
  auto it = made.find(policy);
  if (it == made.end()) {
    proto::RecoveryPolicy o;
    o.set_name(policy);
    auto p = recovery::NewPolicy(o);
    it = made.emplace(policy, p.ok() ? std::move(p).value() : nullptr).first;
  }
  return it->second ? &it->second->traits() : nullptr;
}
}  // namespace

bool PolicyTakesSpares(const std::string& policy) {
  const auto* t = TraitsOf(policy);
  return t != nullptr && t->spares;
}

bool PolicyReplans(const std::string& policy) {
  const auto* t = TraitsOf(policy);
  return t != nullptr && t->placement == recovery::Placement::kReplan;
}

std::pair<std::string, std::string> DefaultReplanner(const proto::RecoveryPolicy& policy) {
  return recovery::Replanner(policy);
}

double YoungDalyInterval(double delta, double m) {
  if (m <= 0) return 0;
  if (delta <= 0) return 0;
  if (delta >= 2 * m) return m;
  const double x = delta / (2 * m);
  return std::sqrt(2 * delta * m) * (1 + std::sqrt(x) / 3 + x / 9) - delta;
}

// AWS on-demand list prices (us-east-1) per instance-hour divided by the instance's GPUs: p5.48xlarge
// (8×H100, $98.32), p4de.24xlarge (8×A100 80 GB, $40.97), p4d.24xlarge (8×A100 40 GB, $32.77), p3.16xlarge
// (8×V100, $24.48), p3dn.24xlarge (8×V100 32 GB, $31.21), g4dn.12xlarge (4×T4, $3.91), g5.48xlarge (8×A10G,
// $16.29), g6e.xlarge (1×L40S, $1.861). Other types (consumer GPUs, parts no cloud rents by the hour): 0 (set
// replay.usd_per_gpu_hour, or an advise config's usd_per_gpu_hour). List prices change: check them.
double OnDemandUsdPerGpuHour(const std::string& gpu) {
  static const std::map<std::string, double> price = {
      {"h100", 98.32 / 8},     {"a100-80gb", 40.97 / 8}, {"a100-40gb", 32.77 / 8}, {"v100", 24.48 / 8},
      {"v100-32gb", 31.21 / 8}, {"t4", 3.912 / 4},        {"a10", 16.29 / 8},       {"l40s", 1.861},
  };
  auto it = price.find(gpu);
  return it == price.end() ? 0 : it->second;
}

std::string ReplayReportJson(const proto::ReplayReport& report) { return models::MessageJson(report); }

Status WriteReplayReportJson(const proto::ReplayReport& report, const models::PieceSink& put) {
  if (report.segments_size() == 0) return put(models::MessageJson(report));
  // Everything but the segments, printed by protobuf: the segments' place is an empty list there.
  google::protobuf::FieldMask mask;
  const auto* descriptor = report.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    if (descriptor->field(i)->number() != proto::ReplayReport::kSegmentsFieldNumber) {
      mask.add_paths(descriptor->field(i)->name());
    }
  }
  proto::ReplayReport head;
  google::protobuf::util::FieldMaskUtil::MergeMessageTo(report, mask, {}, &head);
  const std::string json = models::MessageJson(head);
  const std::string empty = "\"segments\": []";
  const size_t at = json.find(empty);
  if (at == std::string::npos) return put(models::MessageJson(report));
  HETSIM_RETURN_IF_ERROR(put(std::string_view(json).substr(0, at)));
  HETSIM_RETURN_IF_ERROR(put("\"segments\": ["));
  google::protobuf::util::JsonPrintOptions opt;
  opt.preserve_proto_field_names = true;
  opt.always_print_primitive_fields = true;
  std::string one;
  for (int i = 0; i < report.segments_size(); ++i) {
    one.assign(i == 0 ? "\n  " : ",\n  ");
    std::string segment;
    (void)google::protobuf::util::MessageToJsonString(report.segments(i), &segment, opt);
    one += segment;
    HETSIM_RETURN_IF_ERROR(put(one));
  }
  HETSIM_RETURN_IF_ERROR(put("\n ]"));
  return put(std::string_view(json).substr(at + empty.size()));
}

}  // namespace hetsim::sim
