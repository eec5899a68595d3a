#!/usr/bin/env bash
# Profile mode: runs a single-rank plan of llama-tiny at micro-batch sizes 1 and 2 with --profile-out and
# checks that the merged profile is valid (hetsim validate) and has an embedding, transformer and head
# entry per micro-batch size. Usage: check_profile.sh MPIEXEC HETSIM_EXEC HETSIM OUT_DIR
set -euo pipefail
mpiexec=$1 exe=$2 hetsim=$3 out=$4
mkdir -p "$out"
rm -f "$out/profile.yaml"
for mbs in 1 2; do
  cat > "$out/plan-mbs$mbs.yaml" <<PLAN
kind: plan
name: profile-mbs$mbs
cluster: cpu-4
model: llama-tiny
training: {global_batch_size: $mbs, seq_len: 32, dtype: fp32}
pipelines:
  - micro_batch_size: $mbs
    num_micro_batches: 1
    stages:
      - {devices: [0], layer_begin: 0, layer_end: 6}
PLAN
  "$mpiexec" --oversubscribe -np 1 "$exe" --plan "$out/plan-mbs$mbs.yaml" --backend cpu --warmup 1 --iterations 2 \
    --profile-out "$out/profile.yaml"
done
"$hetsim" validate "$out/profile.yaml"
for kind in embedding transformer head; do
  n=$(grep -c "layer: $kind" "$out/profile.yaml" || true)
  [ "$n" -eq 2 ] || { echo "FAIL: expected 2 '$kind' entries, found $n"; cat "$out/profile.yaml"; exit 1; }
done
echo OK
