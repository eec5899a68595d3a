#!/usr/bin/env bash
# Measures per-layer costs of Llama-2 7B on one GPU with hetsim-exec's CUDA backend and writes them as a
# profile (models/proto/profile.proto) that the simulator and the planners can load.
#
# It builds hetsim-exec with the CUDA backend (sm_90 + PTX), then runs, for each micro-batch size, a
# single-GPU plan of a stack of Llama-2-7B-width blocks (hidden 4096, 32 heads, FFN 11008, vocabulary
# 32000; embedding + LAYERS blocks + head) at sequence length SEQ in BF16, two micro-batches per step,
# WARMUP untimed and ITERS timed steps. Every run prints each layer's forward/backward time and achieved
# TFLOP/s (model FLOPs of models/transformer.h: 2 per multiply-add, attention 4·b·s²·h, no causal
# halving) and merges its numbers into OUT (layer kinds embedding / transformer / head, one entry per
# micro-batch size; existing entries of the same size are replaced).
#
# Usage (on a machine with an NVIDIA GPU, CUDA, NCCL and Open MPI):
#   bash executor/gpu_profile.sh [OUT.yaml]
# Environment: GPU (catalog name, default h100), MBS (default "1 2 3 4 5 6 7 8"), SEQ (4096), LAYERS (2),
#   WARMUP (2), ITERS (5), BUILD (build-gpu), CUDA_ARCH ("90-real;90-virtual"), HETSIM_EXEC (a hetsim-exec
#   built elsewhere: skips the build), REPORT_DIR (keeps each run's plan and report there), MPIRUN ("mpirun -np 1" by default; empty: run the one rank directly).
# Memory: the CUDA backend keeps the softmax probabilities (standard attention, BF16: 2·heads·SEQ² bytes per
# sequence and layer, 1 GiB at 4096), so micro-batch 8 with LAYERS=2 needs about 40 GiB.
set -euo pipefail
cd "$(dirname "$0")/.."

gpu=${GPU:-h100}
out=${1:-profile-llama2-7b-${gpu}-s${SEQ:-4096}.yaml}
mbs_list=${MBS:-"1 2 3 4 5 6 7 8"}
seq=${SEQ:-4096}
layers=${LAYERS:-2}
warmup=${WARMUP:-2}
iters=${ITERS:-5}
build=${BUILD:-build-gpu}

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
exe=${HETSIM_EXEC:-}
if [ -z "$exe" ]; then
  echo "== building hetsim-exec (CUDA backend) in $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHETSIM_BUILD_TESTS=OFF -DHETSIM_EXECUTOR_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90-real;90-virtual}" >/dev/null
  cmake --build "$build" --target hetsim-exec
  exe="$build/hetsim-exec"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
reports=${REPORT_DIR:-$work}  # each micro-batch's IterationReport JSON (kept when REPORT_DIR is set)
mkdir -p "$reports"
cat > "$work/cluster.yaml" <<EOF
kind: cluster
name: one-$gpu
description: "One $gpu GPU (executor/gpu_profile.sh)."
nodes:
  - name: gpu
    gpus: {type: $gpu, count: 1}
EOF
# Llama-2 7B's architecture with LAYERS blocks: each block costs what a block of the full model costs.
sed -e "s/^name: llama2-7b\$/name: llama2-7b-stack$layers/" -e "s/^num_layers: 32\$/num_layers: $layers/" \
  -e '/^published_params_billion/d' models/catalog/models/llama2-7b.yaml > "$work/model.yaml"
grep -q "^num_layers: $layers\$" "$work/model.yaml" || { echo "could not derive the layer-stack model" >&2; exit 1; }
[ "$reports" = "$work" ] || cp "$work/cluster.yaml" "$work/model.yaml" "$reports/"

if [ -n "${MPIRUN+set}" ]; then
  read -r -a mpirun <<< "$MPIRUN"
else
  mpirun=(mpirun -np 1)
  [ "$(id -u)" -eq 0 ] && mpirun+=(--allow-run-as-root)
fi
last_layer=$((layers + 2))
for mbs in $mbs_list; do
  cat > "$work/plan.yaml" <<EOF
kind: plan
name: llama2-7b-stack$layers-mbs$mbs
training: {global_batch_size: $((2 * mbs)), seq_len: $seq, dtype: bf16, attention: standard}
schedule: 1f1b
pipelines:
  - micro_batch_size: $mbs
    num_micro_batches: 2
    stages:
      - {devices: [0], layer_begin: 0, layer_end: $last_layer}
EOF
  echo "== micro-batch $mbs"
  cp "$work/plan.yaml" "$reports/plan-mbs$mbs.yaml"
  "${mpirun[@]}" "$exe" --cluster "$work/cluster.yaml" --model "$work/model.yaml" \
    --plan "$work/plan.yaml" --backend cuda --warmup "$warmup" --iterations "$iters" \
    --profile-out "$out" --profile-model llama2-7b --report-out "$reports/report-mbs$mbs.json"
done
echo "== $out"
cat "$out"
