#!/usr/bin/env bash
# The executor runs the plan's lowering, checked rather than assumed: runs one step of a plan under MPI
# with --ops-out (every operation each rank executed, in order, as it executed it: layer passes and TP
# collectives as the model issued them, transfer and collective sizes from the real buffers) and compares
# it line by line with `hetsim lower` (the lists the simulator plays). Lines must be identical, except that
# a gradient-sync or ZeRO collective's bytes may differ by 0.1%: under mixed TP degrees the executor syncs its
# chunk of the replicated norm weights, the lowering all of them (docs/lowering.md).
# Usage: check_ops.sh MPIEXEC HETSIM_EXEC HETSIM NP OUT_DIR PLAN [FLAGS...] [-- EXEC FLAGS...]
# FLAGS go to both hetsim-exec and `hetsim lower` (e.g. --recompute full). Without `--`, hetsim-exec runs one
# quiet step on the CPU backend at 32 tokens, its ranks computing on all of the machine's cores. With `--`, it
# runs with exactly EXEC FLAGS (which must say --seq-len 32), its output shown: a gradient comparison
# (--compare-gradients) records the same first step, so one run checks both the gradients and the operations.
set -euo pipefail
mpiexec=$1 exe=$2 hetsim=$3 np=$4 out=$5 plan=$6
shift 6
flags=() exec_flags=() quiet=1
while (($#)); do
  if [[ $1 == -- ]]; then
    shift
    exec_flags=("$@") quiet=0
    break
  fi
  flags+=("$1")
  shift
done
((quiet)) && exec_flags=(--backend cpu --cores "$(nproc)" --warmup 0 --iterations 1 --seq-len 32)
mkdir -p "$out"
name=$(basename "$plan" .yaml)
executed="$out/$name-executed.txt" lowered="$out/$name-lowered.txt"
rm -f "$executed" "$lowered"
if ((quiet)); then
  "$mpiexec" --oversubscribe -np "$np" "$exe" --plan "$plan" "${exec_flags[@]}" --ops-out "$executed" "${flags[@]}" \
    >/dev/null
else
  "$mpiexec" --oversubscribe -np "$np" "$exe" --plan "$plan" "${exec_flags[@]}" --ops-out "$executed" "${flags[@]}"
fi
"$hetsim" lower --plan "$plan" --seq-len 32 "${flags[@]}" -o "$lowered" >/dev/null
awk -v lowered="$lowered" '
  function bytes_of(line,   i, n, f) { n = split(line, f, " "); for (i = 1; i < n; i++) if (f[i] == "bytes") return f[i + 1]; return "" }
  function without_bytes(line) { sub(/ bytes [^ ]+/, "", line); return line }
  {
    if ((getline want < lowered) <= 0) { print "FAIL: the executor ran more operations than the lowering has: " $0; bad = 1; exit }
    n++
    if ($0 == want) next
    if ($0 ~ / collective (dp|zero) / && without_bytes($0) == without_bytes(want)) {
      a = bytes_of($0); b = bytes_of(want)
      if (a - b < 1e-3 * b && b - a < 1e-3 * b) next
    }
    print "FAIL: operation " n " differs\n  lowered:  " want "\n  executed: " $0; bad = 1; exit
  }
  END {
    if (bad) exit 1
    if ((getline extra < lowered) > 0) { print "FAIL: the lowering has operations the executor did not run: " extra; exit 1 }
    print "OK: " n " operations match"
  }' "$executed"
