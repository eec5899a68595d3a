#!/usr/bin/env bash
# The GPU + CPU session (issue 61) on a lent machine with one GPU and a few cores for CPU workers, with binaries
# built elsewhere (Release, HETSIM_EXECUTOR_CUDA=ON: hetsim-exec, hetsim-kernel-bench, hetsim-coll-bench, hetsim)
# and the Debian packages they need in DIR (as calibration/gpu_session.sh). In one call it:
#   1. checks gradients: the GPU + CPU plans (one H200 rank on the CUDA backend in fp32, CPU workers on the CPU
#      backend, transfers and collectives across kinds through host memory and MPI) against the single-rank CPU
#      reference, and their executed operations against `hetsim lower`;
#   2. measures both kinds on this machine: `hetsim calibrate --gpu GPU,cpu` (each kind on its own backend, one
#      calibration with both entries);
#   3. validates the twin on the mixed plans: `hetsim validate-sim --executor --backend auto` under that
#      calibration, failing when a plan's iteration time is off by more than TOL (default 0.10).
# Writes into OUT: log.txt, the calibration (mixed-measured.yaml and its data), validate.csv, the runs' logs.
#
# Usage: OUT=/tmp/out bash calibration/mixed_session.sh DIR [GPU]     (GPU: default h200, cluster cpu-h200-mixed)
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: mixed_session.sh DIR [GPU]}
gpu=${2:-h200}
out=${OUT:?set OUT to the output folder}
tol=${TOL:-0.10}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
binaries="hetsim-exec hetsim-kernel-bench hetsim-coll-bench hetsim"
source calibration/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
plans=(models/catalog/plans/h200-cpu-mixed-pp.yaml models/catalog/plans/h200-cpu-mixed-dp.yaml)
np_of() { grep -o 'devices: \[[^]]*\]' "$1" | grep -o '[0-9]\+' | sort -u | wc -l; }
status=0

echo "== 1. gradients and operations of the GPU + CPU plans"
mpirun -np 1 "$dir/hetsim-exec" --plan models/catalog/plans/cpu-4-single.yaml --backend cpu --warmup 1 \
  --iterations 0 --seq-len 32 --dump-gradients "$out/reference.grad" || status=1
for plan in "${plans[@]}"; do
  name=$(basename "$plan" .yaml)
  bash tests/executor/check_ops.sh mpirun "$dir/hetsim-exec" "$dir/hetsim" "$(np_of "$plan")" "$out/ops-$name" \
    "$plan" -- --warmup 1 --iterations 0 --seq-len 32 --rtol 1e-4 --compare-gradients "$out/reference.grad" \
    || status=1
done

echo "== 2. both kinds measured on this machine"
"$dir/hetsim" calibrate --gpu "$gpu,cpu" --ranks 2 --quick -o "$out/mixed-measured.yaml" || status=1

echo "== 3. the twin on the mixed plans (tolerance $tol)"
joined=$(IFS=,; echo "${plans[*]}")
"$dir/hetsim" validate-sim --executor --backend auto --plans "$joined" --calibration "$out/mixed-measured.yaml" \
  --repeats 3 --iterations 5 --warmup 2 --tolerance "$tol" --work-dir "$out/validate" -o "$out/validate.csv" \
  || status=1
echo "== done (status $status)"
exit $status
