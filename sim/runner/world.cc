#include "sim/runner/world.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "models/spec_io.h"

namespace hetsim::runner {
namespace {

int EnvInt(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n)) return std::atoi(v);
  }
  return fallback;
}

std::string Marker(const std::string& dir, const std::string& job, int rank) {
  return dir + "/.done-" + job + "-" + std::to_string(rank);
}

}  // namespace

const World& World::Get() {
  static const World world;
  return world;
}

World::World() {
  size_ = EnvInt({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}, 1);
  rank_ = EnvInt({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}, 0);
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
    size_ = 1;
    rank_ = 0;
  }
  for (const char* n : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMI_JOBID"}) {
    if (const char* v = std::getenv(n)) {
      job_ = v;
      break;
    }
  }
  if (job_.empty()) job_ = std::to_string(::getppid());  // the launcher is every rank's parent
  for (char& c : job_) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
}

Status World::MarkDone(const std::string& dir) const {
  return models::WriteFileAtomically(Marker(dir, job_, rank_), "done\n");
}

void World::WaitForAll(const std::string& dir) const {
  for (;;) {
    int done = 0;
    for (int r = 0; r < size_; ++r) done += std::filesystem::exists(Marker(dir, job_, r));
    if (done == size_) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (int r = 0; r < size_; ++r) std::filesystem::remove(Marker(dir, job_, r));
}

}  // namespace hetsim::runner
