// The processes an experiment is spread over: one (default), `--jobs N` forked workers, or the ranks of
// an MPI launch (`mpirun -np N hetsim run …`).
//
// Ranks are read from the launcher's environment (Open MPI's OMPI_COMM_WORLD_RANK/SIZE, or PMI/PMIx),
// not through MPI calls: libsimgrid also exports the MPI API (its SMPI layer), so MPI_Init in a process
// that links SimGrid can bind to the wrong library. Ranks meet through the results folder instead (it
// must be shared between nodes anyway): each rank leaves a marker when its points are done, and rank 0
// merges once every marker of this launch is there.
#pragma once

#include <string>

#include "models/status.h"

namespace hetsim::runner {

class World {
 public:
  static const World& Get();
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool distributed() const { return size_ > 1; }
  // An id shared by every rank of this launch (so markers of an earlier launch are never mistaken).
  const std::string& job() const { return job_; }
  // Marks this rank done in `dir`.
  Status MarkDone(const std::string& dir) const;
  // Rank 0: waits until every rank of this launch marked `dir` done (polling; no time limit, since
  // mpirun ends every rank when one fails).
  void WaitForAll(const std::string& dir) const;

 private:
  World();
  int rank_ = 0;
  int size_ = 1;
  std::string job_;
};

}  // namespace hetsim::runner
