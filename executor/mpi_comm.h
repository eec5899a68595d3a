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

// A pool of `cores` cores for the node's ranks (the CPU backend with more ranks than cores; 0: none). A rank
// holds a core while it computes and gives it up whenever it waits — for a message, its sends, the members
// of a collective, its DP stream — then queues for one; queued ranks are served in the order they asked, and
// at most `cores` ranks compute at once. Waiting ranks sleep between tests instead of polling, so the ranks
// that compute have the machine. The simulator plays the same pool (SimOptions::shared_cores). Collective
// over MPI_COMM_WORLD; call it before the first communication.
void ShareCores(uint32_t cores);
// The start of a step's operations (every rank of the node, collectively): takes a core, in rank order.
void TakeCoreInRankOrder();
// The end of a step's operations: gives the core back.
void LeaveCore();
// While one lives, the calling thread's core (if it holds one) is given up; the destructor queues for one.
class OffCore {
 public:
  OffCore();
  ~OffCore();
  OffCore(const OffCore&) = delete;
  OffCore& operator=(const OffCore&) = delete;

 private:
  bool released_;
};

}  // namespace hetsim::executor
