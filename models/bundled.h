// Specification files bundled with hetsim (models/catalog/), embedded in the binary at build time so
// that `--cluster hexiscale-240` works from any directory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hetsim::models {

enum class SpecKind { kCluster, kModel, kTraining, kPlan, kProfile, kExperiment, kCalibration, kTrace, kAdvise };

struct BundledFile {
  SpecKind kind;
  std::string_view name;  // file name without .yaml
  std::string_view path;  // path inside the repository, for error messages
  std::string_view text;
};

// Every bundled YAML file.
const std::vector<BundledFile>& BundledFiles();
// The bundled GPU catalog CSV text.
std::string_view BundledGpuCatalogCsv();
// The bundled validation residuals (models/catalog/intervals.csv; models/intervals.h).
std::string_view BundledIntervalResidualsCsv();

}  // namespace hetsim::models
