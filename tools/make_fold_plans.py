#!/usr/bin/env python3
"""Writes the large plans of docs/simulator.md "Folding every plan kind" (experiments/llama3/ and
experiments/fold/): Llama 3 405B with context parallelism on 16,384 GPUs, an interleaved 405B plan on 2,304
GPUs, and a heterogeneous 16,384-GPU plan that does not fold. Run from the repository root:

    python3 tools/make_fold_plans.py

Layouts are stage-major, as the bundled llama3-405b-16384 plan: a stage's devices of every pipeline sit in
one block of nodes, so a stage's gradient ring stays in its block and every pipeline's sends cross the same
kind of route (the condition for folding, docs/simulator.md "Folding").
"""
import os


def blocks_split(layers, pp):
    """Plan layers (embedding, blocks, head) per stage: the blocks evenly, the embedding on the first stage
    and the head on the last (as models::UniformBlocksSplit)."""
    blocks = layers - 2
    bounds = [0] + [1 + blocks * s // pp for s in range(1, pp)] + [layers]
    return list(zip(bounds[:-1], bounds[1:]))


def llama3_bounds(pp):
    """The bundled Llama 3 405B plans' split of the 128 plan layers: 8 per stage, the embedding with the
    first 7 blocks and the head with the last 7."""
    return [(8 * s, 8 * s + 8) for s in range(pp)]


def stage_line(devices, tp, bounds, cp=1, ulysses=1):
    extra = (f", cp_degree: {cp}" if cp > 1 else "") + (f", ulysses_degree: {ulysses}" if ulysses > 1 else "")
    return (f"      - {{devices: [{','.join(map(str, devices))}], tp_degree: {tp}{extra}, "
            f"layer_begin: {bounds[0]}, layer_end: {bounds[1]}}}\n")


def llama3_cp16():
    # TP 8 inside a node, CP 16, PP 16, DP 8 (Llama 3 Table 4, long-context row). Pipeline p, stage s, CP
    # rank c on node s*128 + p*16 + c: a stage's 8 x 16 CP ranks fill one block of 128 nodes, each CP ring
    # runs over 16 consecutive nodes of one pod.
    tp, cp, pp, dp = 8, 16, 16, 8
    bounds = llama3_bounds(pp)
    y = """# Llama 3 405B's long-context pre-training layout on the 16,384-GPU H100 cluster (Dubey et al. 2024, "The
# Llama 3 Herd of Models", Table 4, the row with context parallelism; §3.3.2 4D parallelism; §3.4.2
# long-context pre-training): TP 8, CP 16, PP 16, DP 8, sequences of 131,072 tokens, 16 sequences per DP
# rank (16 M tokens per step). Context parallelism as the paper's all-gather-based CP is modelled by the
# lowering's ring attention (docs/lowering.md "Context parallelism and Ulysses": the same K/V bytes per
# rank). Schedule, virtual stages, ZeRO-2 and the layer split as llama3-405b-16384-interleaved.yaml (the
# 8K-context plan). Stage-major layout: pipeline p, stage s, CP rank c on node s*128 + p*16 + c, so each
# CP ring spans 16 consecutive nodes of one pod and each stage's DP x CP gradient ring one 128-node block.
# Written by tools/make_fold_plans.py.
kind: plan
name: llama3-405b-16384-cp16
cluster: llama3-16384
model: llama3-405b
training: {global_batch_size: 128, seq_len: 131072, recompute: selective}
schedule: interleaved_1f1b
virtual_stages: 4
zero_stage: 2
sequence_parallel: true
pipelines:
"""
    for p in range(dp):
        y += "  - micro_batch_size: 1\n    num_micro_batches: 16\n    stages:\n"
        for s in range(pp):
            devs = [8 * (s * 128 + p * 16 + c) + k for c in range(cp) for k in range(tp)]
            y += stage_line(devs, tp, bounds[s], cp=cp)
    return y


def llama3_interleaved_2304():
    # TP 8, PP 16, DP 18 on the first 288 nodes (one pod) of the 16,384-GPU cluster: pipeline p, stage s on
    # node s*18 + p.
    tp, pp, dp = 8, 16, 18
    bounds = llama3_bounds(pp)
    y = """# Llama 3 405B on 2,304 H100s of the llama3-16384 cluster (its first 288 nodes, all in one pod): TP 8 inside a
# node, PP 16, DP 18, the interleaved 1F1B schedule with 4 virtual stages and 16 micro-batches per pipeline
# (288 sequences of 8,192 tokens per step), otherwise as llama3-405b-16384-interleaved.yaml (ZeRO-2,
# sequence parallelism, selective recomputation, 8 plan layers per stage): our construction, a slice of
# the paper's 8K-context layout (32 micro-batches would not fit in 80 GB with DP 18's larger optimizer
# shards and the deeper warm-up). Stage-major: pipeline p, stage s on node s*18 + p. Written by
# tools/make_fold_plans.py.
kind: plan
name: llama3-405b-2304-interleaved
cluster: llama3-16384
model: llama3-405b
training: {global_batch_size: 288, seq_len: 8192, recompute: selective}
schedule: interleaved_1f1b
virtual_stages: 4
zero_stage: 2
sequence_parallel: true
pipelines:
"""
    for p in range(dp):
        y += "  - micro_batch_size: 1\n    num_micro_batches: 16\n    stages:\n"
        for s in range(pp):
            node = s * dp + p
            y += stage_line([8 * node + k for k in range(tp)], tp, bounds[s])
    return y


HETERO_CLUSTER = """# 16,384 GPUs of two generations: 1,024 nodes of 8 H100 SXM and 1,024 nodes of 8 A100 80GB, NVSwitch inside
# each node, one 400 Gb/s RoCE NIC per GPU, pods of 384 nodes with 1:7 oversubscription between pods (the
# llama3-16384 network). Our construction, for the simulator's speed on plans that do not fold
# (docs/simulator.md "Folding every plan kind").
kind: cluster
name: hetero-16384
nodes:
  - name: h
    count: 1024
    gpus: {type: h100, count: 8}
    nic: {kind: roce, bandwidth_gbps: 400, attachment: per_gpu, latency_us: 3}
  - name: a
    count: 1024
    gpus: {type: a100-80gb, count: 8}
    nic: {kind: roce, bandwidth_gbps: 400, attachment: per_gpu, latency_us: 3}
network:
  pods: {nodes_per_pod: 384, oversubscription: 7}
  switch_latency_us: 2
"""


def hetero_16384():
    # Llama 3 70B (82 plan layers). 128 H100 pipelines of TP 8 x PP 8 (nodes 0-1023: pipeline p, stage s on
    # node s*128 + p) and 128 A100 pipelines of TP 4 x PP 16 (nodes 1024-2047: two stages per node, pipeline
    # q, stage s on node 1024 + (s // 2)*128 + q, GPUs 4*(s % 2) ... + 3), 8 micro-batches of 1 sequence each.
    y = """# A heterogeneous plan on 16,384 GPUs that does not fold: Llama 3 70B on hetero-16384 (1,024 H100 nodes and
# 1,024 A100 nodes), 128 pipelines of TP 8 x PP 8 on the H100s and 128 pipelines of TP 4 x PP 16 on the
# A100s (pipelines of different depths, TP degrees and GPU types; the gradients of the two kinds are
# synchronised layer by layer across TP 8 and TP 4 shards, HexiScale §3.2), 8 micro-batches of one
# 8,192-token sequence per pipeline. Our construction, to measure the simulator on a plan every device of
# which must be played (docs/simulator.md "Folding every plan kind"). Written by tools/make_fold_plans.py.
kind: plan
name: hetero-16384-llama3-70b
cluster: hetero-16384.yaml
model: llama3-70b
training: {global_batch_size: 2048, seq_len: 8192, recompute: selective}
schedule: 1f1b
zero_stage: 1
sequence_parallel: true
pipelines:
"""
    layers = 82
    h_bounds = blocks_split(layers, 8)
    a_bounds = blocks_split(layers, 16)
    for p in range(128):
        y += "  - micro_batch_size: 1\n    num_micro_batches: 8\n    stages:\n"
        for s in range(8):
            node = s * 128 + p
            y += stage_line([8 * node + k for k in range(8)], 8, h_bounds[s])
    for q in range(128):
        y += "  - micro_batch_size: 1\n    num_micro_batches: 8\n    stages:\n"
        for s in range(16):
            node = 1024 + (s // 2) * 128 + q
            y += stage_line([8 * node + 4 * (s % 2) + k for k in range(4)], 4, a_bounds[s])
    return y


def main():
    os.makedirs("experiments/fold", exist_ok=True)
    files = {
        "experiments/llama3/llama3-405b-16384-cp16.yaml": llama3_cp16(),
        "experiments/llama3/llama3-405b-2304-interleaved.yaml": llama3_interleaved_2304(),
        "experiments/fold/hetero-16384.yaml": HETERO_CLUSTER,
        "experiments/fold/hetero-16384-llama3-70b.yaml": hetero_16384(),
    }
    for path, text in files.items():
        with open(path, "w") as f:
            f.write(text)
        print(path)


if __name__ == "__main__":
    main()
