// The only MPI code outside executor/: the experiment runner's scale-out (DESIGN.md "Scaling out").
#include "tools/runner/world.h"

// Only the C API: skip the (deprecated) C++ bindings that Open MPI and MPICH would pull in.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>

namespace hetsim::runner {

World& World::Get() {
  static World world;
  return world;
}

World::World() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMI_SIZE") == nullptr) return;
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) MPI_Init(nullptr, nullptr);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  mpi_ = true;
}

World::~World() {
  if (!mpi_) return;
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (!finalised) MPI_Finalize();
}

void World::Barrier() const {
  if (mpi_) MPI_Barrier(MPI_COMM_WORLD);
}

void World::Abort(int code) const {
  if (mpi_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace hetsim::runner
