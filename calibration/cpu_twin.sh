#!/usr/bin/env bash
# The CPU twin end to end: calibrate this machine (short mode), then run fourteen plans on hetsim-exec and in
# the simulator with that calibration. A round passes when the fourteen plans' mean absolute error (MAPE) is at
# most 6% and no plan is off by more than 25% (the derivation: docs/calibration.md "The CPU twin").
#
# The comparison only means something if the machine runs at one speed while it calibrates and while it
# executes. Shared VMs have slow episodes (another tenant's burst, CPU steal) that move a whole phase by
# 20-45%, and single plans by 10-40% when the episode falls inside one plan's calibration or run (seen: one
# round with cpu-4-tp2 at +12.4%, the next with cpu-twin-dp2-split at -11.1% and tp2 at -6.6%; another with
# tp2 at +40.6%, the next at +3.4%). So a speed probe (the GEMMs of a llama-tiny block, hetsim-kernel-bench)
# runs before the calibration, between the phases and after the validation: a round whose probes differ by
# more than 8% is unsteady. The plans run two ranks on two cores, so a process that holds a core all along
# (a build beside the test) slows them without moving a one-core probe: the probe also runs as two copies at
# once, and a machine whose two copies take more than 25% longer than one is busy.
# Up to four rounds: a passing round passes the test; three failing rounds on a steady, idle machine fail it
# (a real error repeats; a noisy run does not — seen on a fresh clone: two rounds in a row off, one with a
# calibration taken in a slow episode the probes missed (the one-rank plan +44%), then 2.6% on the same
# build); if fewer than three rounds had a steady, idle machine and none passed, the test is skipped (exit 77)
# and says so.
# Mode `shared` (4th argument): the plans that need four ranks — the bundled four-rank plans (cpu-4-hetero,
# cpu-4-dp-split, cpu-4-pp4-gpipe, cpu-4-dp4), the hierarchical all-reduce (two "nodes" of two), the PP
# leader broadcast (two TP-2 stages) and ZeRO-1 over DP 4 — run as four ranks on this machine's cores. With
# fewer cores than ranks, the ranks compute through a pool of all but one core (hetsim-exec --cores: at most
# that many compute at once, a rank that waits gives its core to the next in line; collectives go through
# shared memory) and validate-sim simulates the same pool (SimOptions::shared_cores). The calibration measures
# the collectives with the four ranks and the layer profiles with a busy rank per core (`calibrate --ranks
# 4`). A round passes at MAPE <= 10% (docs/calibration.md "Ranks through a pool of cores").
# Usage: cpu_twin.sh HETSIM SOURCE_DIR WORK_DIR [shared]
set -uo pipefail
hetsim=$1 src=$2 work=$3 mode=${4:-}
bench="$(dirname "$hetsim")/hetsim-kernel-bench"
p="$src/experiments/cpu_twin"
d="$src/tests/executor/data"
ranks=2 mape_limit=6
plans="cpu-4-single,cpu-4-pp2,cpu-4-tp2,$p/dp2.yaml,$p/dp2-split.yaml,$p/pp2-gpipe.yaml,$p/pp2-uneven.yaml,$p/dp2-zero2.yaml,$p/dp2-zero3.yaml,$p/pp2-interleaved.yaml,$p/dp2-overlap.yaml,$p/ulysses2.yaml,$p/cp2.yaml,$p/pp2-staged.yaml"
if [ "$mode" = shared ]; then
  ranks=4 mape_limit=10
  plans="cpu-4-hetero,cpu-4-dp-split,cpu-4-pp4-gpipe,cpu-4-dp4,$d/zero1-dp4.yaml,$d/hier-dp4.yaml,$d/leader-tp2-pp2.yaml"
fi
probe() {
  "$bench" --backend cpu --quick --models llama-tiny --seq-len 64 --tp 1 --micro-batch 4 --reps 5 2>/dev/null |
    awk -F, '$1=="gemm"{s+=$14} END{printf "%.6f\n", s}'
}
probe_pair() {  # two probes at once (the slower one): a core held by another process shows here
  local a b
  a=$(mktemp) b=$(mktemp)
  probe > "$a" & probe > "$b" & wait
  sort -g "$a" "$b" | tail -1
  rm -f "$a" "$b"
}
idle() {  # single pair: pair/single <= 1.25
  awk -v s="$1" -v p="$2" 'BEGIN{r=p/s; printf "two cores at %.0f%% of one\n", 100/r; exit !(r<=1.25)}'
}
steady() {  # probes...: max/min <= 1.08
  printf '%s\n' "$@" | sort -g | awk 'NR==1{lo=$1} {hi=$1} END{r=hi/lo; printf "probe spread %.1f%%\n", (r-1)*100; exit !(r<=1.08)}'
}
steady_failures=0
for round in 1 2 3 4; do
  rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
  p0=$(probe)
  "$hetsim" calibrate --backend cpu --quick --ranks "$ranks" -o cpu.yaml || exit 1
  grep -q "link_bandwidth_gbyte_s" cpu.yaml && grep -q "profiles:" cpu.yaml || { echo "cpu.yaml lacks the link or the profile"; exit 1; }
  p1=$(probe)
  "$hetsim" validate-sim --executor --calibration cpu.yaml --fidelity balanced --tolerance 0.25 --plans "$plans" \
    > >(tee validate.out) 2>&1
  rc=$?
  wait
  p2=$(probe)
  pp=$(probe_pair)
  # "  7 plans: MAPE 2.6%, bias +1.8%, worst 12.4%"
  summary=$(grep -E '^ *[0-9]+ plans: MAPE' validate.out | tail -1 | sed 's/^ *//')
  mape=$(sed -n 's/.*MAPE \([0-9.]*\)%.*/\1/p' <<< "$summary")
  echo "cpu_twin.sh: round $round: $summary; probes $p0 $p1 $p2 s; $(steady "$p0" "$p1" "$p2"); $(idle "$p2" "$pp")"
  if [ -z "$mape" ] || grep -q "were not compared" validate.out; then
    echo "cpu_twin.sh: validate-sim did not compare every plan (see above): a real failure"
    exit 1
  fi
  if [ "$rc" -eq 0 ] && awk -v m="$mape" -v l="$mape_limit" 'BEGIN{exit !(m <= l)}'; then exit 0; fi
  if steady "$p0" "$p1" "$p2" > /dev/null && idle "$p2" "$pp" > /dev/null; then
    steady_failures=$((steady_failures + 1))
    if [ "$steady_failures" -ge 3 ]; then
      echo "cpu_twin.sh: three times the machine ran at one speed with both cores free and the twin is off (MAPE above $mape_limit% or a plan beyond 25%): a real failure"
      exit 1
    fi
    echo "cpu_twin.sh: off on a steady machine (MAPE above $mape_limit% or a plan beyond 25%); once more, as a real error repeats and a noisy run does not"
    continue
  fi
  echo "cpu_twin.sh: the machine's speed changed or another process held a core during round $round; measuring again from scratch"
done
echo "cpu_twin.sh: SKIPPED: no round passed and fewer than three had a steady machine with both cores free (shared machine); no verdict"
exit 77
