// Error checks of hetsim-exec that name host, rank, file and line (as NVIDIA/nccl-tests does, without its
// global variables: host and rank are looked up when a check fails). Internal to executor/.
#pragma once

#include <mpi.h>

#include <string>

namespace hetsim::executor {

// This process's host name and world rank (−1 before MPI_Init).
std::string HostName();
int WorldRank();

// Prints "hetsim-exec: host H rank R: FILE:LINE: WHAT: DETAIL" to stderr and aborts the MPI job.
[[noreturn]] void FatalError(const char* file, int line, const std::string& what, const std::string& detail);

std::string MpiErrorString(int code);

}  // namespace hetsim::executor

#define HETSIM_MPI_CHECK(call)                                                                          \
  do {                                                                                                  \
    const int _rc = (call);                                                                             \
    if (_rc != MPI_SUCCESS) ::hetsim::executor::FatalError(__FILE__, __LINE__, #call,                   \
                                                           ::hetsim::executor::MpiErrorString(_rc));   \
  } while (0)
