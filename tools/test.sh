#!/usr/bin/env bash
# The README's second command (the fast tier): installs dependencies, builds once (preset ci: AddressSanitizer
# and UBSan at -Og, warnings as errors, unity batches, the CUDA backend and its callers compiled but linked into
# nothing, no benchmarks) and runs the test suite on that build. The slow tier is left out: the executor's
# multi-step training runs (label `slow`; the one-step gradient runs cover their code) and seven checks of long
# searches' results (every baseline on every bundled cluster; Hetu's bounds against its unbounded search; the
# exhaustive proof against every plan of its space, also on a shared slow NIC; exhaustive against every
# baseline on random clusters, its estimate of its own plan, HetHub's gap to it: 10-30 s each under the
# sanitizers), whose code the smaller planner tests run here (CMakePresets.json, test presets ci and slow).
# `--slow` runs the slow tier instead: those tests and the Python package's suite unsanitised (its thread-pool
# test) on the release build, then every benchmark of tools/bench, the CPU twin's
# timing rounds included (tens of minutes on two cores; speed and the twin's accuracy are benchmark results,
# never test verdicts), then the documented numbers against the benchmarks' (tools/check_numbers.py).
set -euo pipefail
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case "${1:-}" in
  "") ;;
  --slow)
    echo "== build (release)"
    bash tools/build.sh release
    echo "== slow tests (release)"
    ctest --preset slow -j "$(nproc)"
    echo "== benchmarks (release)"
    bash tools/bench | tee build/bench.txt
    echo "== documented numbers against the benchmarks (docs/numbers.tsv)"
    exec /usr/bin/python3 tools/check_numbers.py --bench build/bench.txt
    ;;
  *) echo "usage: tools/test.sh [--slow]" >&2; exit 2 ;;
esac
echo "== build (ci)"
bash tools/build.sh ci
echo "== tests (ci)"
ctest --preset ci -j "$(nproc)"
