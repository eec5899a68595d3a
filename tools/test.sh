#!/usr/bin/env bash
# The README's second command: installs dependencies, builds, and runs the whole test suite twice —
# an optimised build with warnings as errors, and a debug build under AddressSanitizer and UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
for preset in ci ci-asan; do
  echo "== build ($preset)"
  bash tools/build.sh "$preset"
  echo "== tests ($preset)"
  ctest --preset "$preset" -j "$(nproc)" || status=1
done
exit "$status"
