#!/usr/bin/env bash
# Installs dependencies (tools/bootstrap.sh), then configures and builds one CMake preset.
# Usage: tools/build.sh [PRESET [TARGET...]]   presets (CMakePresets.json): release (default), asan, ci;
# targets: what to build (default: everything), e.g. `tools/build.sh release hetsim` for the CLI alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh
preset="${1:-release}"
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --preset "$preset" >/dev/null
set +e
cmake --build --preset "$preset" -j "$(nproc)" "${targets[@]}" 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] '
status=${PIPESTATUS[0]}
set -e
exit "$status"
