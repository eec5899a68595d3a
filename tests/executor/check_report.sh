#!/usr/bin/env bash
# Runs a plan for two timed iterations and checks the report and timeline files it writes: the report is
# an executor IterationReport with one entry per device, the timeline has a track per device and the
# forward, backward, pp, dp and optimizer slices of a pipelined plan.
# Usage: check_report.sh MPIEXEC HETSIM_EXEC NP PLAN OUT_DIR
set -euo pipefail
mpiexec=$1 exe=$2 np=$3 plan=$4 out=$5
mkdir -p "$out"
rm -f "$out/report.json" "$out/timeline.json"
"$mpiexec" --oversubscribe -np "$np" "$exe" --plan "$plan" --backend cpu --cores "$(nproc)" --warmup 1 --iterations 2 \
  --seq-len 32 --report-out "$out/report.json" --timeline-out "$out/timeline.json"
fail() { echo "FAIL: $*"; exit 1; }
grep -q '"kind": "iteration_report"' "$out/report.json" || fail "report kind"
grep -q '"source": "executor"' "$out/report.json" || fail "report source"
[ "$(grep -c '"device":' "$out/report.json")" -eq "$np" ] || fail "report should list $np devices"
grep -q '"iteration_time_s": 0\.[0-9]*[1-9]' "$out/report.json" || \
  grep -q '"iteration_time_s": [1-9]' "$out/report.json" || fail "iteration time is not positive"
for name in forward backward pp dp optimizer; do
  grep -q "\"cat\": \"$name\"" "$out/timeline.json" || fail "timeline has no $name slice"
done
[ "$(grep -c '"thread_name"' "$out/timeline.json")" -eq "$np" ] || fail "timeline should have $np tracks"
echo OK
