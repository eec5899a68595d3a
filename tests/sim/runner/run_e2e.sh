#!/usr/bin/env bash
# End-to-end checks of `hetsim run` (issue "Experiments"): the same manifest gives byte-identical results;
# a run killed with -9 half-way and resumed equals an uninterrupted run and does not redo finished points;
# a simulation killed by a signal is retried by --resume; --jobs 2 and `mpirun -np 2` equal a single process.
set -euo pipefail
hetsim="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
manifest=tests/data/experiments/resume.yaml
fail() { echo "FAIL: $*"; exit 1; }

"$hetsim" run "$manifest" -o "$tmp/ref" --no-figures -q > /dev/null
"$hetsim" run "$manifest" -o "$tmp/again" --no-figures -q > /dev/null
cmp -s "$tmp/ref/results.jsonl" "$tmp/again/results.jsonl" || fail "two runs differ (results.jsonl)"
cmp -s "$tmp/ref/results.csv" "$tmp/again/results.csv" || fail "two runs differ (results.csv)"
[ "$(wc -l < "$tmp/ref/results.jsonl")" -eq 40 ] || fail "expected 40 result rows"
echo "ok: deterministic"

# kill -9 part-way, then resume.
"$hetsim" run "$manifest" -o "$tmp/killed" --no-figures -q > /dev/null &
pid=$!
for _ in $(seq 1 400); do
  n=$( (find "$tmp/killed/points" -name '*.pb' 2>/dev/null || true) | wc -l)
  [ "$n" -ge 8 ] && break
  sleep 0.02
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
done_before=$(find "$tmp/killed/points" -name '*.pb' | wc -l)
[ "$done_before" -ge 1 ] || fail "the run was killed before any point finished"
find "$tmp/killed/points" -name '*.tmp.*' -delete
stamp="$tmp/stamp"; touch "$stamp"; sleep 1.1
"$hetsim" run "$manifest" -o "$tmp/killed" --resume --no-figures -q > /dev/null
redone=$(find "$tmp/killed/points" -name '*.pb' ! -newer "$stamp" | wc -l)
[ "$redone" -eq "$done_before" ] || fail "resume rewrote finished points ($redone of $done_before kept)"
cmp -s "$tmp/ref/results.jsonl" "$tmp/killed/results.jsonl" || fail "killed + resumed run differs from the reference"
echo "ok: kill -9 after $done_before points, resume finished the rest and matches"

# A simulation killed by a signal (as the out-of-memory killer ends it) leaves its point without a result:
# the run exits non-zero, and --resume retries the point.
if HETSIM_TEST_KILL_SIMULATIONS=1 "$hetsim" run "$manifest" -o "$tmp/oom" --no-figures -q > "$tmp/oom.log" 2>&1; then
  fail "a run whose simulations were killed exited 0"
fi
grep -q "killed by signal 9" "$tmp/oom.log" || fail "the run did not say its simulations were killed"
[ "$(find "$tmp/oom/points" -name '*.pb' 2>/dev/null | wc -l)" -eq 0 ] || fail "a killed simulation left a point result"
"$hetsim" run "$manifest" -o "$tmp/oom" --resume --no-figures -q > /dev/null
cmp -s "$tmp/ref/results.jsonl" "$tmp/oom/results.jsonl" || fail "resume after killed simulations differs from the reference"
echo "ok: killed simulations are retried by --resume"

"$hetsim" run "$manifest" -o "$tmp/jobs" --jobs 2 --no-figures -q > /dev/null
cmp -s "$tmp/ref/results.jsonl" "$tmp/jobs/results.jsonl" || fail "--jobs 2 differs from a single process"
echo "ok: --jobs 2"

if command -v mpirun > /dev/null; then
  mpirun --oversubscribe -np 2 "$hetsim" run "$manifest" -o "$tmp/mpi" --no-figures -q > /dev/null
  cmp -s "$tmp/ref/results.jsonl" "$tmp/mpi/results.jsonl" || fail "mpirun -np 2 differs from a single process"
  cmp -s "$tmp/ref/results.csv" "$tmp/mpi/results.csv" || fail "mpirun -np 2 differs from a single process (csv)"
  echo "ok: mpirun -np 2"
fi
echo "5 passed, 0 failed"
