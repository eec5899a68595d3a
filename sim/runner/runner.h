// `hetsim run`: executes an experiment manifest point by point (plan, then simulate), writes one result
// file per point atomically, merges them into results.jsonl / results.csv, draws the figures and prints a
// summary (docs/manifest.md, docs/results-format.md).
#pragma once

#include <iosfwd>
#include <string>

#include "models/gpu_catalog.h"
#include "sim/runner/manifest.h"

namespace hetsim::runner {

struct RunOptions {
  std::string out_dir;   // default out/<experiment name>
  bool resume = false;   // keep finished points of an earlier (interrupted) run
  int jobs = 1;          // worker processes on this machine
  bool figures = true;   // call tools/plot/figures.py
  bool progress = true;  // progress bar on stderr
};

// Runs every point of `m`; returns non-zero Status only when the run itself could not be carried out
// (a failing point is recorded, not fatal).
Status RunExperiment(const Manifest& m, const RunOptions& options, std::ostream& out, std::ostream& err);

// A string as a JSON string literal (quotes, backslashes and control characters escaped), and as a CSV
// cell (quoted when it holds a comma, a quote or a newline): the results files' writers share them.
std::string JsonString(const std::string& s);
using models::CsvCell;  // models/gpu_catalog.h

// Merges the point files of `dir` into results.jsonl and results.csv (atomically). Deterministic: the
// same points give byte-identical files.
Status MergeResults(const std::string& dir, size_t expected_points);

}  // namespace hetsim::runner
