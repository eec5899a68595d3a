// hetsim-exec: runs a Plan for real. See executor/runner.h and docs/executor.md.
#include "executor/runner.h"

int main(int argc, char** argv) { return hetsim::executor::ExecMain(argc, argv); }
