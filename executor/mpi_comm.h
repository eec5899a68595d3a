// The CPU backend's communication: MPI communicators per group (MPI_Comm_create_group, collective over
// the group only) and MPI point-to-point messages for the pipeline (non-blocking sends, so that the
// 1F1B exchange between neighbouring stages cannot deadlock on rendezvous sends). Internal to executor/.
#pragma once

#include <memory>

#include "executor/backend.h"

namespace hetsim::executor {

// Communicators over f32 host tensors.
std::unique_ptr<CommFactory> MakeMpiCommFactory();

}  // namespace hetsim::executor
