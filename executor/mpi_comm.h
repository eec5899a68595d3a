// The CPU backend's communication: MPI communicators per group (MPI_Comm_create_group, collective over
// the group only) and MPI point-to-point messages for the pipeline (non-blocking sends, so that the
// 1F1B exchange between neighbouring stages cannot deadlock on rendezvous sends). Internal to executor/.
#pragma once

#include <memory>

#include "executor/backend.h"

namespace hetsim::executor {

// Communicators over f32 host tensors.
std::unique_ptr<CommFactory> MakeMpiCommFactory();

// CPU-staged pipeline transfers (comm.cpu_staged, HetHub §3.1's CPU path): every message is copied from the
// device to a host buffer (Backend::Download), sent by MPI from host memory, received into host memory and
// copied up to the device (Backend::Upload), whatever the backend; any dtype (bytes on the wire).
std::unique_ptr<PeerToPeer> MakeStagedPeerToPeer(Backend* backend);

}  // namespace hetsim::executor
