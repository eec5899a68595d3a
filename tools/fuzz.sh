#!/usr/bin/env bash
# The long run of the spec fuzzer (tests/robustness/fuzz.py): N mutants of the bundled specs through
# `hetsim validate` (default 6000, a few minutes on 2 cores); failing mutants are kept in out/fuzz/.
# Usage: tools/fuzz.sh [N] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/hetsim ] || bash tools/build.sh release > /dev/null
mkdir -p out/fuzz
exec /usr/bin/python3 tests/robustness/fuzz.py build/hetsim --count "${1:-6000}" --seed "${2:-1}" --keep out/fuzz
