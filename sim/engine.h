// Plays per-device programs (sim/program.h) on a SimGrid platform: one actor per device, plus one
// DP-stream actor per device whose gradient sync overlaps its backward pass.
#pragma once

#include <vector>

#include "sim/platform.h"
#include "sim/program.h"

namespace hetsim::sim {

struct Slice {
  double start_s = 0;
  double end_s = 0;
  Category category = Category::kForward;
  uint16_t micro_batch = 0;
};

// What one device did.
struct DeviceTrace {
  double compute_s = 0;        // forward + backward + optimizer
  double fwd_bwd_s = 0;        // forward + backward only
  double tp_s = 0;             // time inside TP collectives
  double pp_s = 0;             // PP transfer time (after the peer was ready)
  double dp_s = 0;             // gradient sync on the main stream (or the exposed part when overlapped)
  double zero_s = 0;           // ZeRO gathers
  double pipeline_end_s = 0;   // end of the last backward compute
  double end_s = 0;            // end of the device's iteration
  std::vector<Slice> slices;   // filled when recording a timeline
};

struct EngineResult {
  double iteration_s = 0;
  std::vector<DeviceTrace> devices;  // parallel to Programs::devices
};

// Runs one iteration. Must be called in a process that has created exactly one s4u::Engine and built
// `platform` into it; returns after the simulation ends.
EngineResult RunEngine(const Programs& programs, const Platform& platform, bool record_slices);

}  // namespace hetsim::sim
