#!/usr/bin/env bash
# Installs dependencies (tools/bootstrap.sh), then configures and builds one CMake preset.
# Usage: tools/build.sh [PRESET]     presets (CMakePresets.json): release (default), asan, ci, ci-asan
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh
preset="${1:-release}"
cmake --preset "$preset" >/dev/null
set +e
cmake --build --preset "$preset" -j "$(nproc)" 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] '
status=${PIPESTATUS[0]}
set -e
exit "$status"
