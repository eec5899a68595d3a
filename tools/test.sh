#!/usr/bin/env bash
# The README's second command (the fast tier): installs dependencies, builds (unity builds, no benchmarks), and
# runs the test suite twice — an optimised build with warnings as errors, and a debug build under
# AddressSanitizer and UBSan. The sanitised pass leaves out what it cannot check better than the optimised
# one (CMakePresets.json, ci-asan): the Python-only tests
# (label `python`), the multi-step training runs of the executor (label `training`; the one-step gradient runs
# cover their code) and three search-scale result checks (every baseline on every bundled cluster, Hetu's
# bounds against its unbounded search, the exhaustive proof's bounds on a shared slow NIC), whose code the
# smaller planner tests run under the sanitizers. `--slow` runs the slow
# tier instead: every benchmark of tools/bench, the CPU twin's timing rounds included (tens of minutes on two
# cores; speed and the twin's accuracy are benchmark results, never test verdicts).
set -euo pipefail
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "${1:-}" in
  "") ;;
  --slow)
    echo "== benchmarks (release)"
    exec bash tools/bench
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
