#!/usr/bin/env bash
# One measuring session on a GPU machine that has CUDA but none of hetsim's other dependencies, with binaries
# built elsewhere (Release, HETSIM_EXECUTOR_CUDA=ON) and the Debian packages they need, in DIR:
#   DIR/hetsim-exec, DIR/hetsim-kernel-bench, DIR/deb/*.deb (Open MPI, PMIx, hwloc, libevent, protobuf,
#   yaml-cpp, libyaml (libyaml-0-2), boost program_options: `apt-get download` on the build machine).
# Writes into OUT: log.txt (everything printed), kernels-<gpu>.csv (hetsim-kernel-bench), moe-kernels-<gpu>.csv
# (the bundled MoE models' expert GEMMs and permutations and the device-to-host round trip), profile-<gpu>.yaml
# and exec-<gpu>.tar.gz (executor/gpu_profile.sh's plans and reports, the gradient checks' output).
#
# Usage: OUT=/tmp/out bash calibration/gpu_session.sh DIR [GPU]
#   GPU: the catalog name of the machine's GPU (default h100). STEPS: which steps to run (default
#   "bench moe grad profile").
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: gpu_session.sh DIR [GPU]}
gpu=${2:-h100}
out=${OUT:?set OUT to the output folder}
steps=${STEPS:-bench moe grad profile}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
grep PRETTY_NAME /etc/os-release
nvcc --version 2>/dev/null | tail -2
date -u +%Y-%m-%dT%H:%M:%SZ

binaries="hetsim-exec hetsim-kernel-bench"
source calibration/gpu_env.sh
work=$(mktemp -d)

if [[ " $steps " == *" bench "* ]]; then
  echo "== kernel microbenchmarks"
  time "$dir/hetsim-kernel-bench" --backend cuda --gpu "$gpu" \
    --models llama2-7b,llama2-13b,llama2-70b,llama3-8b,llama3-70b --tp 1,2,4,8 --micro-batch 1,2,4 \
    --seq-len 2048,4096,8192 -o "$out/kernels-$gpu.csv"
fi

if [[ " $steps " == *" moe "* ]]; then
  echo "== MoE blocks (docs/moe.md): expert GEMMs one per local expert, permutation, device-to-host round trip"
  time "$dir/hetsim-kernel-bench" --backend cuda --gpu "$gpu" --models "" \
    --moe-models qwen3-30b-a3b,qwen3-235b-a22b,gpt-oss-120b,deepseek-v3,mixtral-8x7b --ep 8,16,32,64 \
    --seq-len 4096 -o "$out/moe-kernels-$gpu.csv"
  python3 tools/fit/compare_moe_kernels.py "$out/moe-kernels-$gpu.csv"
fi

if [[ " $steps " == *" grad "* ]]; then
  echo "== gradient checks: CUDA against the CPU backend (llama-tiny, one rank, same seed)"
  plan=models/catalog/plans/cpu-4-single.yaml
  common=(--warmup 1 --iterations 0 --seq-len 32)
  mpirun -np 1 "$dir/hetsim-exec" --plan "$plan" --backend cpu --dtype fp32 "${common[@]}" \
    --dump-gradients "$work/cpu-fp32.grad"
  mpirun -np 1 "$dir/hetsim-exec" --plan "$plan" --backend cuda --dtype fp32 "${common[@]}" \
    --compare-gradients "$work/cpu-fp32.grad" --rtol 1e-4
  # BF16 needs a GPU in the cluster spec (a cpu device cannot train in bf16): the same plan on one GPU.
  printf 'kind: cluster\nname: one-%s\nnodes:\n  - name: gpu\n    gpus: {type: %s, count: 1}\n' "$gpu" "$gpu" \
    > "$work/one-gpu.yaml"
  mpirun -np 1 "$dir/hetsim-exec" --plan "$plan" --cluster "$work/one-gpu.yaml" --backend cuda --dtype bf16 \
    "${common[@]}" --compare-gradients "$work/cpu-fp32.grad" --rtol 3e-2
  echo "== loss over 20 steps on the GPU (llama-tiny, bf16)"
  mpirun -np 1 "$dir/hetsim-exec" --plan "$plan" --cluster "$work/one-gpu.yaml" --backend cuda --dtype bf16 \
    --warmup 0 --iterations 20 --seq-len 64 --loss-out "$work/loss-cuda-bf16.csv"
  cat "$work/loss-cuda-bf16.csv"
fi

if [[ " $steps " == *" profile "* ]]; then
  echo "== executor/gpu_profile.sh (Llama-2 7B layers, sequence 4096)"
  HETSIM_EXEC="$dir/hetsim-exec" REPORT_DIR="$work/profile" GPU="$gpu" \
    bash executor/gpu_profile.sh "$out/profile-llama2-7b-$gpu-s4096.yaml"
fi
tar -czf "$out/exec-$gpu.tar.gz" -C "$work" .
echo "== done"
