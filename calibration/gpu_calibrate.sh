#!/usr/bin/env bash
# `hetsim calibrate --backend cuda` and `hetsim validate-sim --executor --backend cuda` on a GPU machine that
# has CUDA but none of hetsim's other dependencies, with binaries built elsewhere (Release,
# HETSIM_EXECUTOR_CUDA=ON) and the Debian packages they need, in DIR:
#   DIR/hetsim, DIR/hetsim-exec, DIR/hetsim-kernel-bench, DIR/hetsim-coll-bench, DIR/deb/*.deb
# (docs/calibration.md "The H100 twin"). The packages, from a Debian 12 build machine (`apt-get download`):
#   openmpi-bin libopenmpi3 openmpi-common libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1
#   libhwloc15 libhwloc-plugins libibverbs1 libmunge2 libnl-3-200 libnl-route-3-200 libpsm-infinipath1
#   libpsm2-2 libucx0 librdmacm1 libsimgrid3.32 libns3.37 libboost-context1.74.0 libboost-stacktrace1.74.0
#   libboost-program-options1.74.0 libprotobuf32 libyaml-cpp0.7 libyaml-0-2 libmetis5 libgsl27 libgslcblas0
#   libgfortran5 libquadmath0 libsqlite3-0
# The model is Llama-2 7B's architecture with 2 blocks
# (each block costs what a block of the full model costs; the whole model does not fit one GPU with Adam).
# Writes into OUT: log.txt, the calibration (h100-measured.yaml and its data folder), the validation's CSV,
# figure and executor logs.
#
# Usage: OUT=/tmp/out bash calibration/gpu_calibrate.sh DIR [GPU]
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$(realpath "${1:?usage: gpu_calibrate.sh DIR [GPU]}")
gpu=${2:-h100}
out=$(realpath -m "${OUT:?set OUT to the output folder}")
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
date -u +%Y-%m-%dT%H:%M:%SZ

binaries="hetsim hetsim-exec hetsim-kernel-bench hetsim-coll-bench"
source calibration/gpu_env.sh
# hetsim finds its sibling binaries and the plotting script next to itself.
mkdir -p "$dir/tools" && ln -sfn "$PWD/tools/plot" "$dir/tools/plot"

work="$out/specs"
mkdir -p "$work"
sed -e 's/^name: llama2-7b$/name: llama2-7b-stack2/' -e 's/^num_layers: 32$/num_layers: 2/' \
  -e '/^published_params_billion/d' models/catalog/models/llama2-7b.yaml > "$work/llama2-7b-stack2.yaml"
printf 'kind: cluster\nname: one-%s\nnodes:\n  - name: gpu\n    gpus: {type: %s, count: 1}\n' "$gpu" "$gpu" > "$work/one-gpu.yaml"

echo "== hetsim calibrate --backend cuda"
cd "$out"
time "$dir/hetsim" calibrate --backend cuda --gpu "$gpu" --ranks 1 --quick --models llama2-7b \
  --profile-model "$work/llama2-7b-stack2.yaml" --profile-shapes 1x1,1x2,1x4 --profile-seq-len 4096 \
  -o "$out/$gpu-measured.yaml"
cd - >/dev/null

echo "== validate-sim --executor --backend cuda"
# Plans of the same 2-block model that the profile did not run as such: more micro-batches, micro-batch 3
# (between profiled sizes), GPipe, full recomputation.
plan() {  # name schedule mbs micro-batches [recompute]
  local rc=${5:-none}
  cat > "$work/$1.yaml" <<EOF
kind: plan
name: $1
cluster: $work/one-gpu.yaml
model: $work/llama2-7b-stack2.yaml
training: {global_batch_size: $(($3 * $4)), seq_len: 4096, dtype: bf16, recompute: $rc}
schedule: $2
pipelines:
  - micro_batch_size: $3
    num_micro_batches: $4
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 4}
EOF
  echo -n "$work/$1.yaml"
}
plans="$(plan h100-mbs2x4 1f1b 2 4),$(plan h100-mbs3x2 1f1b 3 2),$(plan h100-gpipe-mbs1x8 gpipe 1 8),$(plan h100-mbs2x4-recompute 1f1b 2 4 full)"
"$dir/hetsim" validate-sim --executor --backend cuda --calibration "$out/$gpu-measured.yaml" --fidelity balanced \
  --repeats 2 --plans "$plans" --work-dir "$out/validate" -o "$out/exec_vs_sim.csv" --figure "$out/exec_vs_sim.png"
echo "== done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
