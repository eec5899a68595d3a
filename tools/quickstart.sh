#!/usr/bin/env bash
# The README's first command: installs dependencies, builds hetsim, and runs the main job on a bundled
# example — experiments/quickstart.yaml: three planners plan Llama-2 7B on HexiScale's case-study
# machines, every plan is simulated at three inter-node bandwidths (3 repeats), and the results table,
# out/quickstart/results.csv and the figures (out/quickstart/figures/*.png and *.pdf) are written.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh release hetsim   # only what the quickstart runs (the tests: tools/test.sh)
echo
./build/hetsim run experiments/quickstart.yaml -o out/quickstart
echo
echo "results: out/quickstart/results.csv    figures: out/quickstart/figures/ (throughput, breakdown, timeline-galvatron; PNG and PDF)"
