// Rules the SimGrid engine (sim/) and the planners' played estimate (planners/lowering_play.h) both follow,
// kept here, free of SimGrid, so that the two cannot drift apart.
#pragma once

#include <cstddef>

namespace hetsim::models {

// The engine's Reap: an actor with more than this many posted sends waits for the oldest before it posts
// another (bounds the number of live comms SimGrid tracks; sim/engine.cc).
inline constexpr size_t kMaxPendingSends = 32;

// A node's host memory link (CPU-staged transfers cross it twice; sim/platform.cc builds it,
// models/platform_routes.cc routes over it).
inline constexpr double kHostMemoryBytesS = 200e9;

}  // namespace hetsim::models
