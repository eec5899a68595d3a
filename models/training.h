// Training specs resolved against a model: defaults filled in, limits checked.
#pragma once

#include <string>

#include "models/proto/training.pb.h"
#include "models/transformer.h"

namespace hetsim::models {

inline constexpr double kDefaultWorkspaceGib = 1.0;

// Fills every unset field (global batch and sequence length from the model's defaults; bf16, Adam,
// no recomputation, flash attention, 1 GiB workspace) and checks the result against `model`.
Result<proto::Training> ResolveTraining(proto::Training training, const TransformerModel& model,
                                        const std::string& file);

}  // namespace hetsim::models
