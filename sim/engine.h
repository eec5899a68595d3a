// Plays per-device programs (sim/program.h) on a SimGrid platform: one actor per device, plus one
// DP-stream actor per device whose gradient sync overlaps its backward pass.
#pragma once

#include <vector>

#include "sim/platform.h"
#include "sim/program.h"

namespace hetsim::sim {

// Runs one iteration. Must be called in a process that has created exactly one s4u::Engine and built
// `platform` into it; returns after the simulation ends.
EngineResult RunEngine(const Programs& programs, const Platform& platform, bool record_slices);

}  // namespace hetsim::sim
