#!/usr/bin/env bash
# The README's first command: installs dependencies, builds hetsim, and runs the main job on a bundled
# example — experiments/quickstart.yaml: three planners plan Llama-2 7B on HexiScale's case-study
# machines, every plan is simulated at three inter-node bandwidths (3 repeats), and the results table,
# out/quickstart/results.csv and the figures (out/quickstart/figures/*.png and *.pdf) are written. Also builds
# the Python package and puts it on /usr/bin/python3's path (docs/python.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh release hetsim hetsim_python   # the CLI and the Python package (the tests: tools/test.sh)
# The Python package (docs/python.md): build/python goes on the path of Debian's /usr/bin/python3 through a
# .pth file in its site folder, so that `/usr/bin/python3 -c "import hetsim"` works without PYTHONPATH.
if [ -f build/python/hetsim/__init__.py ]; then
  site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
  if mkdir -p "$site" 2>/dev/null && echo "$PWD/build/python" > "$site/hetsim.pth" 2>/dev/null; then
    echo "python: import hetsim works in /usr/bin/python3 ($site/hetsim.pth -> $PWD/build/python)"
  else
    echo "python: cannot write $site/hetsim.pth; use PYTHONPATH=$PWD/build/python /usr/bin/python3"
  fi
fi
echo
./build/hetsim run experiments/quickstart.yaml -o out/quickstart
echo
echo "results: out/quickstart/results.csv    figures: out/quickstart/figures/ (throughput, breakdown, timeline-galvatron; PNG and PDF)"
