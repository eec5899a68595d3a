#include <iostream>

#include "tools/hetsim/cli.h"

// jemalloc's options (read at its start; CMakeLists.txt links it in where the package is there, else this is
// an unused symbol): give freed virtual memory back instead of keeping it mapped for reuse. With its default
// (retain) a replay of a million-event trace maps 1.2 GB for 0.55 GB of live data and fails under a 1 GB
// address-space limit; with this, 0.59 GB (docs/traces.md). MALLOC_CONF still overrides it.
extern "C" {
// NOLINTNEXTLINE: the name jemalloc looks up
const char* malloc_conf = "retain:false";
}

int main(int argc, char** argv) { return hetsim::cli::Main(argc, argv, std::cout, std::cerr); }
