// Human-readable tables of clusters, models and plans (what `hetsim describe` prints).
#pragma once

#include <string>
#include <vector>

#include "models/plan.h"

namespace hetsim::models {

// "0-7,12,14-15": sorted device indices as ranges.
std::string FormatDeviceList(std::vector<uint32_t> devices);

// One GPU type's catalog row: dense tensor peaks per dtype (FP6, FP4 and the block-scaled formats it runs
// natively included), memory, HBM/scale-up/PCIe bandwidths, SMs, power and its source.
std::string DescribeGpu(const GpuSpec& gpu);
std::string DescribeCluster(const Cluster& cluster);
std::string DescribeModel(const TransformerModel& model);
std::string DescribeTraining(const proto::Training& training);
// One table per pipeline: stages with devices and their types, TP×DP, layers, micro-batch split and
// memory per device against capacity, then the gradient-sync groups. Requires a structurally valid plan.
std::string DescribePlan(const proto::Plan& plan, const PlanContext& ctx);

}  // namespace hetsim::models
