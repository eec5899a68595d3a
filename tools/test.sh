#!/usr/bin/env bash
# The README's second command: installs dependencies, builds, and runs the test suite twice — an optimised
# build with warnings as errors, and a debug build under AddressSanitizer and UBSan. Tests labelled `slow`
# (the CPU twin's timing rounds: tens of minutes on two cores) are left out; `--slow` builds the optimised
# preset and runs only them.
set -euo pipefail
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "${1:-}" in
  "") ;;
  --slow)
    echo "== build (ci)"
    bash tools/build.sh ci
    echo "== slow tests (ci)"
    exec ctest --test-dir build-ci -L slow --output-on-failure
    ;;
  *) echo "usage: tools/test.sh [--slow]" >&2; exit 2 ;;
esac
status=0
for preset in ci ci-asan; do
  echo "== build ($preset)"
  bash tools/build.sh "$preset"
  echo "== tests ($preset)"
  ctest --preset "$preset" -j "$(nproc)" || status=1
done
exit "$status"
