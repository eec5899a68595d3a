#!/usr/bin/env bash
# Two hangs that must not happen: (1) a hetsim-exec rank whose peer stopped waits forever — the watchdog must
# end the job within --timeout-s and name the waiting rank, its operation and the rank that stopped; (2) killing `hetsim simulate` must not
# leave its SimGrid child running.
# Usage: lifetimes.sh BUILD_DIR
set -uo pipefail
build=$(realpath "$1")
tmp=$(mktemp -d)
trap 'pkill -CONT -x hetsim-exec 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0

# (1) Stop one rank of a 2-rank pipeline; the other must give up after 3 s of no progress and name the
# stopped rank (its heartbeat goes stale).
timeout 120 mpirun --oversubscribe -np 2 "$build/hetsim-exec" --plan cpu-4-pp2 --backend cpu --iterations 100000 \
  --timeout-s 3 > "$tmp/exec.log" 2>&1 &
job=$!
# This job's ranks only (another build's hetsim-exec may run on a shared machine).
mine="^$build/hetsim-exec --plan cpu-4-pp2 --backend cpu --iterations 100000"
for _ in $(seq 1 100); do
  [ "$(pgrep -f "$mine" | wc -l)" -ge 2 ] && grep -q "^step" "$tmp/exec.log" && break
  sleep 0.2
done
victim=$(pgrep -f "$mine" | tail -1)
# The victim's MPI rank (Open MPI puts it in each rank's environment).
victim_rank=$(tr '\0' '\n' < "/proc/$victim/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
kill -STOP "$victim"
start=$(date +%s)
wait "$job"
rc=$?
took=$(( $(date +%s) - start ))
kill -CONT "$victim" 2>/dev/null
if [ "$rc" -eq 0 ] || ! grep -q "no progress for [0-9]* s in .* (operation [0-9]* of step [0-9]*)" "$tmp/exec.log"; then
  echo "FAIL: a stopped rank did not end the job with the watchdog's message (exit $rc):"; tail -5 "$tmp/exec.log"
  fail=1
elif [ -n "$victim_rank" ] && ! grep -q "rank $victim_rank stopped: no heartbeat for [0-9]* s" "$tmp/exec.log"; then
  echo "FAIL: the watchdog did not name the stopped rank $victim_rank:"; tail -5 "$tmp/exec.log"
  fail=1
elif [ "$took" -gt 60 ]; then
  echo "FAIL: the watchdog took $took s (limit 3 s)"; fail=1
else
  echo "lifetimes.sh: watchdog: $(grep -o 'rank [0-9]*: no progress.*step [0-9]*)' "$tmp/exec.log") after $took s;" \
    "$(grep -o 'rank [0-9]* stopped: no heartbeat.*' "$tmp/exec.log")"
fi

# (2) Kill hetsim simulate while its child simulates 16,384 GPUs.
"$build/hetsim" simulate --plan llama3-405b-16384 --fidelity fast > /dev/null 2>&1 &
parent=$!
for _ in $(seq 1 100); do [ -n "$(pgrep -P "$parent")" ] && break; sleep 0.1; done
child=$(pgrep -P "$parent" | head -1)
kill -9 "$parent"
alive() {  # running (a zombie waiting for its reaper is dead)
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ -n "$st" && "$st" != Z* ]]
}
for _ in $(seq 1 30); do alive "$child" || break; sleep 0.1; done
if [ -n "$child" ] && alive "$child"; then
  echo "FAIL: the simulation child $child outlived its killed parent"; kill -9 "$child"; fail=1
else
  echo "lifetimes.sh: the simulation child ended with its parent"
fi
exit $fail
