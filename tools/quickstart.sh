#!/usr/bin/env bash
# The README's first command: installs dependencies, builds hetsim, and runs the main job on a bundled
# example: validate, describe and simulate the bundled asymmetric plan on HexiScale's case-study cluster,
# writing the report, the timeline and a picture of it to out/quickstart/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh release
echo
./build/hetsim validate models/catalog/plans/case-study-asymmetric.yaml
echo
./build/hetsim describe --plan models/catalog/plans/case-study-asymmetric.yaml
echo
mkdir -p out/quickstart
./build/hetsim simulate --plan models/catalog/plans/case-study-asymmetric.yaml \
  --report-out out/quickstart/report.json --timeline-out out/quickstart/timeline.json
/usr/bin/python3 tools/plot/timeline.py out/quickstart/timeline.json out/quickstart/timeline.png \
  --title "case-study-asymmetric: Llama-2 7B on 3xA800 + 3xRTX4090 + 2xRTX3090 (simulated)"
echo "figure: out/quickstart/timeline.png"
