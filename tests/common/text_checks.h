// Checks on error messages shared by the test suites that feed hetsim bad input (tests/models,
// tests/tools): the file a test input lives in, "the message contains", "every line names the file".
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace hetsim::testing_util {

// A file under tests/data/bad/ (HETSIM_SOURCE_DIR is the repository root, defined by the test target).
inline std::string BadFile(const std::string& name) {
  return std::string(HETSIM_SOURCE_DIR) + "/tests/data/bad/" + name;
}

inline testing::AssertionResult Has(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "expected to find\n  [" << needle << "]\nin\n  [" << text << "]";
}

// The non-empty lines of `text`.
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// Every line of a multi-line error names the file it is about.
inline testing::AssertionResult EveryLineNames(const std::string& text, const std::string& file) {
  const auto lines = Lines(text);
  if (lines.empty()) return testing::AssertionFailure() << "empty message";
  for (const auto& l : lines) {
    if (l.rfind(file, 0) != 0) {
      return testing::AssertionFailure() << "line does not start with '" << file << "': [" << l << "]\nin\n["
                                         << text << "]";
    }
  }
  return testing::AssertionSuccess();
}

}  // namespace hetsim::testing_util
