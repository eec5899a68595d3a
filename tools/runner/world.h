// The processes an experiment is spread over: one (default), `--jobs N` forked workers, or the ranks of
// an MPI launch (`mpirun -np N hetsim run …`). MPI is used only when the process was started by mpirun.
#pragma once

namespace hetsim::runner {

class World {
 public:
  // Initialises MPI when the environment says mpirun started us (OMPI_COMM_WORLD_SIZE or PMI_SIZE).
  static World& Get();
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool mpi() const { return mpi_; }
  void Barrier() const;
  // Aborts every rank (a failure on one rank must not leave the others waiting forever).
  [[noreturn]] void Abort(int code) const;
  ~World();

 private:
  World();
  int rank_ = 0;
  int size_ = 1;
  bool mpi_ = false;
};

}  // namespace hetsim::runner
