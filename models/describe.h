// Human-readable tables of clusters, models and plans (what `hetsim describe` prints).
#pragma once

#include <string>
#include <vector>

#include "models/plan.h"

namespace hetsim::models {

// "0-7,12,14-15": sorted device indices as ranges.
std::string FormatDeviceList(std::vector<uint32_t> devices);

std::string DescribeCluster(const Cluster& cluster);
std::string DescribeModel(const TransformerModel& model);
std::string DescribeTraining(const proto::Training& training);
// One table per pipeline: stages with devices and their types, TP×DP, layers, micro-batch split and
// memory per device against capacity, then the gradient-sync groups. Requires a structurally valid plan.
std::string DescribePlan(const proto::Plan& plan, const PlanContext& ctx);

}  // namespace hetsim::models
