#!/usr/bin/env python3
"""Writes the baselines' strategies of Hetu v2 §7.1 (papers/003, Appendix A.2, Table 4) as hetsim plan files.

Table 4 gives, per model and cluster, DeepSpeed's and Megatron's tuned strategies:
  - Megatron "DPdTPtPPp, bs b": Megatron-LM's rank order (TP fastest, then DP, then PP) over the cluster's
    devices (the H800 nodes first, as in the hetu-* clusters), the blocks split as evenly as possible over the
    stages (the first stages take the remainder: 80 blocks over 6 stages are 14,14,13,13,13,13; Megatron-LM
    would need --decoder-first-pipeline-num-layers), ZeRO-1 (the distributed optimizer, §7.1), sequence
    parallelism in TP groups;
  - DeepSpeed "DPdSPuAC, bs b": d data-parallel replicas of u GPUs running DeepSpeed-Ulysses sequence
    parallelism (Stage.ulysses_degree), ZeRO-3 (DeepSpeed's "ZeRO-series"; Table 4 does not say which stage:
    we take 3, the one that lets a 32B/70B model fit on u GPUs), AC = full activation recomputation.
§7: global batch 64, context 4K. Where d × b does not divide 64 (DP24 bs1, DP20 bs4, DP20 bs2), the 64
sequences are dealt as evenly as possible over the replicas and each runs its share as one micro-batch
(ZeRO-3 gathers weights per micro-batch in lockstep, so replicas need equal micro-batch counts; said in each
file's comment).
Usage: python3 make_table4_plans.py (writes table4-*.yaml next to itself).
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 64

# (model tag, model, blocks, cluster, H800 count, H20 count, DeepSpeed (d, u, b), Megatron (d, t, p, b))
TABLE4 = [
    ("32b", "llama-32b-4k.yaml", 60, "hetu-h800x16", 16, 0, (8, 2, 2), (1, 4, 4, 1)),
    ("32b", "llama-32b-4k.yaml", 60, "hetu-h20x16", 0, 16, (8, 2, 2), (1, 4, 4, 1)),
    ("32b", "llama-32b-4k.yaml", 60, "hetu-h800x16-h20x16", 16, 16, (16, 2, 2), (2, 4, 4, 2)),
    ("32b", "llama-32b-4k.yaml", 60, "hetu-h800x16-h20x24", 16, 24, (20, 2, 4), (2, 4, 5, 2)),
    ("32b", "llama-32b-4k.yaml", 60, "hetu-h800x16-h20x32", 16, 32, (24, 2, 1), (4, 4, 3, 2)),
    ("70b", "llama2-70b", 80, "hetu-h800x16-h20x16", 16, 16, (16, 2, 1), (1, 8, 4, 1)),
    ("70b", "llama2-70b", 80, "hetu-h800x16-h20x24", 16, 24, (20, 2, 2), (1, 8, 5, 1)),
    ("70b", "llama2-70b", 80, "hetu-h800x16-h20x32", 16, 32, (24, 2, 1), (1, 8, 6, 1)),
]


def even(total, parts):
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def header(kind, tag, cluster, model, text, extra):
    return ["# Hetu v2 (papers/003) Appendix A.2, Table 4: %s %s on %s, %s. Written by make_table4_plans.py."
            % (kind, tag, cluster, text)] + extra + [
        "kind: plan", "name: hetu-table4-%s-%s-%s" % (kind.lower(), tag, cluster), "cluster: " + cluster,
        "model: " + model, "training: {global_batch_size: %d, seq_len: 4096}  # §7: context 4K, global batch 64" % BATCH]


def megatron(tag, model, blocks, cluster, gpus, d, t, p, b):
    assert d * t * p == gpus, (cluster, d, t, p)
    m = BATCH // (d * b)
    assert m * d * b == BATCH
    counts = even(blocks, p)
    lines = header("Megatron", tag, cluster, model, "DP%dTP%dPP%d, bs%d" % (d, t, p, b), []) + [
        "zero_stage: 1", "sequence_parallel: true", "pipelines:"]
    for j in range(d):
        lines += ["  - micro_batch_size: %d" % b, "    num_micro_batches: %d" % m, "    stages:"]
        at = 0
        for s in range(p):
            begin = 0 if s == 0 else at + 1
            at += counts[s]
            end = blocks + 2 if s == p - 1 else at + 1
            first = s * d * t + j * t
            devices = ", ".join(str(x) for x in range(first, first + t))
            lines.append("      - {devices: [%s], tp_degree: %d, layer_begin: %d, layer_end: %d}" % (devices, t, begin, end))
    return lines


def deepspeed(tag, model, blocks, cluster, gpus, d, u, b):
    assert d * u == gpus, (cluster, d, u)
    # Replica j gets n_j of the 64 sequences (as even as possible). ZeRO-3 gathers each layer's weights for
    # every micro-batch in lockstep across the replicas, so all replicas run the same number of micro-batches:
    # 64 / (d·b) of size b when it divides, else one micro-batch of n_j sequences.
    shares = even(BATCH, d)
    sizes = [b] * d if BATCH % (d * b) == 0 else shares
    note = []
    if BATCH % (d * b) != 0:
        note = ["# %d replicas x bs%d does not divide 64: each replica runs one micro-batch of its %d or %d "
                "sequences (ZeRO-3 needs equal micro-batch counts)." % (d, b, min(shares), max(shares))]
    lines = header("DeepSpeed", tag, cluster, model, "DP%dSP%dAC, bs%d" % (d, u, b), note) + [
        "zero_stage: 3", "recompute: full", "pipelines:"]
    for j in range(d):
        devices = ", ".join(str(x) for x in range(j * u, j * u + u))
        lines += ["  - micro_batch_size: %d" % sizes[j], "    num_micro_batches: %d" % (shares[j] // sizes[j]),
                  "    stages:",
                  "      - {devices: [%s], ulysses_degree: %d, layer_begin: 0, layer_end: %d}" % (devices, u, blocks + 2)]
    return lines


def main():
    for tag, model, blocks, cluster, h800, h20, ds, mg in TABLE4:
        gpus = h800 + h20
        for kind, lines in (("megatron", megatron(tag, model, blocks, cluster, gpus, *mg)),
                            ("deepspeed", deepspeed(tag, model, blocks, cluster, gpus, *ds))):
            with open(os.path.join(HERE, "table4-%s-%s-%s.yaml" % (kind, tag, cluster.replace("hetu-", ""))), "w") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
