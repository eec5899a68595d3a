#include <iostream>

#include "tools/hetsim/cli.h"

int main(int argc, char** argv) { return hetsim::cli::Main(argc, argv, std::cout, std::cerr); }
