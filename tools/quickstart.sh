#!/usr/bin/env bash
# The README's first command: installs dependencies, builds hetsim, and runs the main job on a bundled
# example — validate and describe the bundled asymmetric plan on HexiScale's case-study cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh release
echo
./build/hetsim validate models/catalog/plans/case-study-asymmetric.yaml
echo
./build/hetsim describe --plan models/catalog/plans/case-study-asymmetric.yaml
