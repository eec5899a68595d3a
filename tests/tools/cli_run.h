// Running the hetsim command line in-process for tests: its exit code and what it printed.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/hetsim/cli.h"

namespace hetsim::testing_cli {

struct CliResult {
  int code = 0;
  std::string out;
  std::string err;
};

inline CliResult RunCli(const std::vector<std::string>& args) {
  std::vector<const char*> argv = {"hetsim"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  CliResult r;
  r.code = cli::Main(static_cast<int>(argv.size()), argv.data(), out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// Writes `text` to a file named `name` in the test's temporary folder; returns its path.
inline std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace hetsim::testing_cli
