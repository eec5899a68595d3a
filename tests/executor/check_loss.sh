#!/usr/bin/env bash
# Trains llama-tiny for 20 steps (sequences of 32 tokens) under a plan and checks that the loss goes down.
# Usage: check_loss.sh MPIEXEC HETSIM_EXEC NP PLAN OUT_DIR
# Checks (hand-set, not copied from a run): step 1 starts near ln(1024) = 6.93 (random weights predict
# almost uniformly), the last step's loss is below 80% of the first, and the mean of the last five steps
# is below the mean of the first five.
set -euo pipefail
mpiexec=$1 exe=$2 np=$3 plan=$4 out=$5
mkdir -p "$out"
csv="$out/loss.csv"
"$mpiexec" --oversubscribe -np "$np" "$exe" --plan "$plan" --backend cpu --warmup 0 --iterations 20 \
  --cores "$(nproc)" --seq-len 32 --loss-out "$csv"
awk -F, 'NR > 1 { loss[++n] = $2 }
  END {
    if (n != 20) { print "expected 20 steps, got " n; exit 1 }
    first5 = 0; last5 = 0
    for (i = 1; i <= 5; ++i) { first5 += loss[i]; last5 += loss[n - 5 + i] }
    printf "loss: step 1 %.4f, step 20 %.4f, mean of steps 1-5 %.4f, of steps 16-20 %.4f\n", loss[1], loss[n], first5 / 5, last5 / 5
    if (loss[1] < 6.63 || loss[1] > 7.23) { print "FAIL: initial loss is not near ln(1024) = 6.93"; exit 1 }
    if (loss[n] >= 0.8 * loss[1]) { print "FAIL: the loss did not go down by 20%"; exit 1 }
    if (last5 >= first5) { print "FAIL: the last five steps are not below the first five"; exit 1 }
    print "OK"
  }' "$csv"
