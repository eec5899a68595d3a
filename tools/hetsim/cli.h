// The `hetsim` command line: subcommands, flags with --help and "did you mean" errors.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "models/status.h"

namespace hetsim::cli {

namespace po = boost::program_options;

struct Command {
  std::string name;
  std::string summary;  // one line for `hetsim --help`
  std::string usage;    // "hetsim describe --cluster C --model M --plan P"
  // Declares the command's flags.
  std::function<void(po::options_description&, po::positional_options_description&)> flags;
  // Runs with parsed flags; prints results to `out`, returns the exit code.
  std::function<int(const po::variables_map&, std::ostream& out, std::ostream& err)> run;
};

// All registered subcommands.
const std::vector<Command>& Commands();

// Entry point: parses argv, dispatches, prints errors to `err`. Returns the process exit code
// (0 success, 1 the command found problems, 2 a usage error).
int Main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace hetsim::cli
