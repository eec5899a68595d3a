#include "sim/recovery/policy.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <algorithm>

namespace hetsim::sim::recovery {
namespace {

// The fields every policy takes, and those a re-planning policy takes.
const std::vector<std::string> kEveryPolicy = {"name", "label", "checkpoint_on_notice"};
const std::vector<std::string> kReplanning = {"planner",         "planner_options", "replan_s",
                                              "measured_replan", "grow",            "replan_plans"};

bool Takes(const Traits& t, const std::string& field) {
  auto in = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), field) != v.end(); };
  return in(kEveryPolicy) || (t.placement == Placement::kReplan && in(kReplanning)) ||
         (t.spares && field == "spares") || in(t.options);
}

// The traits of every registered policy, in registry order (a policy configured with no options).
const std::vector<std::pair<std::string, Traits>>& AllTraits() {
  static const std::vector<std::pair<std::string, Traits>> all = [] {
    std::vector<std::pair<std::string, Traits>> v;
    for (const auto& r : Registry()) v.emplace_back(r.name, r.create(proto::RecoveryPolicy())->traits());
    return v;
  }();
  return all;
}

// The traits of the policy named `name` (nullptr: no such policy).
const Traits* TraitsOf(const std::string& name) {
  for (const auto& [n, t] : AllTraits()) {
    if (n == name) return &t;
  }
  return nullptr;
}

}  // namespace

const Registered* FindPolicy(const std::string& name) {
  for (const auto& r : Registry()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

Result<std::unique_ptr<Policy>> NewPolicy(const proto::RecoveryPolicy& options) {
  const Registered* r = FindPolicy(options.name());
  if (r == nullptr) return Status::Invalid("unknown recovery policy '" + options.name() + "'");
  return r->create(options);
}

Status CheckOptions(const proto::RecoveryPolicy& policy, const std::string& where) {
  const Registered* p = FindPolicy(policy.name());
  if (p == nullptr) {
    std::string names;
    for (const auto& r : Registry()) names += (names.empty() ? "" : ", ") + r.name;
    return Status::Invalid(where + ".name: unknown recovery policy '" + policy.name() + "' (policies: " + names + ")");
  }
  const Traits& traits = *TraitsOf(policy.name());
  // Every field that is set, in declaration order, must be one the policy takes; the error lists those that do.
  std::vector<const google::protobuf::FieldDescriptor*> set;
  policy.GetReflection()->ListFields(policy, &set);
  for (const auto* field : set) {
    if (Takes(traits, field->name())) continue;
    std::string who;
    for (const auto& [name, t] : AllTraits()) {
      if (Takes(t, field->name())) who += (who.empty() ? "" : ", ") + name;
    }
    return Status::Invalid(where + "." + field->name() + ": policy " + policy.name() + " does not take it (only " +
                           who + ")");
  }
  if (policy.has_replan_s() && policy.measured_replan()) {
    return Status::Invalid(where + ": replan_s and measured_replan: choose one (a fixed re-planning time, or the "
                                   "planner's measured wall time)");
  }
  for (int i = 0; i < policy.replan_plans_size(); ++i) {
    const auto& plan = policy.replan_plans(i);
    const std::string at = where + ".replan_plans[" + std::to_string(i) + "]";
    if (plan.pipelines_size() == 0) {
      return Status::Invalid(at + ".pipelines: a plan needs at least one pipeline (docs/formats.md, Plan)");
    }
    for (int j = 0; j < i; ++j) {
      if (policy.replan_plans(j).SerializeAsString() == plan.SerializeAsString()) {
        return Status::Invalid(at + ": the same plan as replan_plans[" + std::to_string(j) +
                               "]; list each plan once (the first that fits the live nodes is used)");
      }
    }
  }
  return Status::Ok();
}

std::pair<std::string, std::string> Replanner(const proto::RecoveryPolicy& policy) {
  const Traits* traits = TraitsOf(policy.name());
  if (traits == nullptr) return {"", ""};
  const Traits& t = *traits;
  std::string planner = policy.planner().empty() ? t.planner : policy.planner();
  std::string options =
      policy.planner().empty() && policy.planner_options().empty() ? t.planner_options : policy.planner_options();
  return {planner, options};
}

std::vector<Transfer> CheckpointWrites(const Config& c, Endpoint::Kind to) {
  std::vector<Transfer> t;
  t.reserve(c.devices.size());
  for (size_t i = 0; i < c.devices.size(); ++i) {
    const uint32_t d = c.devices[i];
    const uint32_t index = to == Endpoint::kObjectStore ? 0 : c.cluster->device(d).node;
    t.push_back({{Endpoint::kGpu, d}, {to, index}, c.write_bytes[i]});
  }
  return t;
}

std::vector<Transfer> HostMemoryCopies(const Config& c) {
  std::vector<Transfer> t;
  t.reserve(c.devices.size());
  for (size_t i = 0; i < c.devices.size(); ++i) {
    const uint32_t d = c.devices[i];
    t.push_back({{Endpoint::kGpu, d}, {Endpoint::kHostMemory, c.cluster->device(d).node}, c.state_bytes[i]});
  }
  return t;
}

Result<double> ObjectStoreSaveSeconds(const Config& c, Env& env) {
  return env.Seconds("save|object-store|" + c.key, [&] {
    return env.PlayTransfers(*c.cluster, CheckpointWrites(c, Endpoint::kObjectStore),
                             "a checkpoint save to the object store");
  });
}

std::string PlacementKey(const Config& c) {
  std::string key = c.key + "@";
  for (uint32_t d : c.place) key += std::to_string(d) + ",";
  return key;
}

std::string ShortKey(const std::string& text) {
  return std::to_string(std::hash<std::string>{}(text)) + ":" + std::to_string(text.size());
}

}  // namespace hetsim::sim::recovery
