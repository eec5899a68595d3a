// Plays per-device programs (sim/program.h) on a SimGrid platform: one actor per device, plus one
// DP-stream actor per device whose gradient sync overlaps its backward pass.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sim/platform.h"
#include "sim/program.h"

namespace hetsim::sim {

// How far a simulation has come: operations played of all devices' programs, and the simulated clock.
struct EngineProgress {
  uint64_t done = 0;
  uint64_t total = 0;
  double simulated_s = 0;
};

// Called from inside the simulation at most every `interval_s` of wall time (checked every few thousand
// operations, so a call may come a little late); for progress lines on long runs.
struct ProgressHook {
  std::function<void(const EngineProgress&)> report;
  double interval_s = 10;
};

// The number of operations RunEngine plays (every device's program and DP stream).
uint64_t CountOperations(const Programs& programs);

// Runs one iteration. Must be called in a process that has created exactly one s4u::Engine and built
// `platform` into it; returns after the simulation ends.
// With record_slices, timeline_devices (device ids) limits the slices kept to those devices (empty: all).
EngineResult RunEngine(const Programs& programs, const Platform& platform, bool record_slices,
                       const ProgressHook& progress = {}, const std::vector<uint32_t>& timeline_devices = {});

}  // namespace hetsim::sim
