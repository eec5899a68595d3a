#!/usr/bin/env bash
# The CPU twin end to end: calibrate this machine (short mode), then run seven plans on hetsim-exec and in
# the simulator with that calibration; every plan's simulated iteration must be within 10% of the executed
# one (the tolerance's derivation: docs/calibration.md "The CPU twin").
#
# The comparison only means something if the machine runs at one speed while it calibrates and while it
# executes. Shared VMs have slow episodes (another tenant's burst, CPU steal) that move a whole phase by
# 20-30%. So a speed probe (the GEMMs of a llama-tiny block, hetsim-kernel-bench) runs before the
# calibration, between the phases and after the validation: a failing round whose probes differ by more
# than 8% is measured again from scratch (up to 3 rounds). The plans run two ranks on two cores, so a process
# that holds a core all along (a build beside the test) slows them without moving a one-core probe: the probe
# also runs as two copies at once, and a machine whose two copies take more than 25% longer than one is busy.
# A plan off by more than the tolerance, in the same direction, in two rounds on a steady, idle machine
# fails the test (a real error repeats; noise lands on a different plan each time: a CI run once had
# cpu-4-tp2 at +12.4% in one round and cpu-twin-dp2-split at -11.1% in the next, every other plan within
# 10%). Three rounds at most; if no plan repeats over two or more steady rounds, the test passes and says
# which plans were off once. With fewer than two steady rounds the test is skipped (exit 77) and says so.
# Usage: cpu_twin.sh HETSIM SOURCE_DIR WORK_DIR
set -uo pipefail
hetsim=$1 src=$2 work=$3
bench="$(dirname "$hetsim")/hetsim-kernel-bench"
p="$src/experiments/cpu_twin"
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
steady_rounds=0
off_once=""   # "plan:sign" of every plan beyond the tolerance in an earlier steady round
for round in 1 2 3; do
  rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
  p0=$(probe)
  "$hetsim" calibrate --backend cpu --quick -o cpu.yaml || exit 1
  grep -q "link_bandwidth_gbyte_s" cpu.yaml && grep -q "profiles:" cpu.yaml || { echo "cpu.yaml lacks the link or the profile"; exit 1; }
  p1=$(probe)
  "$hetsim" validate-sim --executor --calibration cpu.yaml --fidelity balanced --tolerance 0.10 \
    --plans "cpu-4-single,cpu-4-pp2,cpu-4-tp2,$p/dp2.yaml,$p/dp2-split.yaml,$p/pp2-gpipe.yaml,$p/pp2-uneven.yaml" \
    2> >(tee validate.err >&2)
  rc=$?
  wait
  # "PLAN: simulated +12.4% off the executor, beyond --tolerance 10.0%" -> "PLAN:+"
  off=$(sed -n 's/^\([^ :]*\): simulated \([+-]\).*beyond --tolerance.*/\1:\2/p' validate.err | sort -u)
  p2=$(probe)
  pp=$(probe_pair)
  echo "cpu_twin.sh: round $round: probes $p0 $p1 $p2 s; $(steady "$p0" "$p1" "$p2"); $(idle "$p2" "$pp")"
  if [ "$rc" -eq 0 ]; then exit 0; fi
  if [ -z "$off" ]; then
    echo "cpu_twin.sh: validate-sim failed without a plan beyond the tolerance (see above)"
    exit 1
  fi
  if steady "$p0" "$p1" "$p2" > /dev/null && idle "$p2" "$pp" > /dev/null; then
    steady_rounds=$((steady_rounds + 1))
    repeated=$(comm -12 <(printf '%s\n' $off_once | sort -u) <(printf '%s\n' $off))
    if [ -n "$repeated" ]; then
      echo "cpu_twin.sh: beyond the tolerance in the same direction in two steady rounds: $(echo $repeated): a real failure"
      exit 1
    fi
    off_once="$off_once $off"
    if [ "$round" -eq 3 ]; then
      echo "cpu_twin.sh: passed: no plan was off twice; off once (noise):$off_once"
      exit 0
    fi
    echo "cpu_twin.sh: off on a steady machine: $(echo $off); once more, as a real error repeats and a noisy run does not"
    continue
  fi
  echo "cpu_twin.sh: the machine's speed changed or another process held a core during round $round; measuring again from scratch"
done
if [ "$steady_rounds" -ge 2 ]; then
  echo "cpu_twin.sh: passed: no plan was off in two steady rounds; off once (noise):$off_once"
  exit 0
fi
echo "cpu_twin.sh: SKIPPED: the machine's speed changed or a core was busy during every round (shared machine); no verdict"
exit 77
