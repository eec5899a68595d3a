// HetHub §3.1's distributed unified communicator in the executor: a job whose ranks are of several kinds
// (rank_kinds.h: CUDA and CPU ranks, or devices whose vendors' libraries do not talk) keeps each backend's own
// communicators for the groups and pipeline channels of one kind, and moves everything else through host memory
// and MPI — the paper's CPU-based path: the tensor is copied from the device into host memory, the MPI collective
// or message runs on the host copies, and the result is copied back up. Internal to executor/.
#pragma once

#include <memory>

#include "executor/backend.h"
#include "executor/rank_kinds.h"

namespace hetsim::executor {

// A communicator over the group's host copies: each call downloads its input(s) from `backend`, runs `host` (an
// MPI communicator of the group, mpi_comm.h) on them and uploads the result. Tensors must be f32 (MPI's reduction
// type; the precision rule of rank_kinds.h).
std::unique_ptr<Comm> MakeHostStagedComm(Backend* backend, std::unique_ptr<Comm> host);

// The factory of a job of several kinds: CreateGroup gives groups that mix kinds (RankKinds::Mixed) a
// host-staged MPI communicator and the others `native`'s; CreatePeerToPeer sends the messages of mixed channels
// through host memory (MakeStagedPeerToPeer) and the rest through `native`'s. `kinds` must outlive the factory.
std::unique_ptr<CommFactory> MakeUnifiedCommFactory(Backend* backend, std::unique_ptr<CommFactory> native,
                                                    const RankKinds* kinds);

}  // namespace hetsim::executor
