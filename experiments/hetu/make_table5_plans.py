#!/usr/bin/env python3
"""Writes Hetu v2's heterogeneous strategies (papers/003, Appendix A.2, Table 5) as hetsim plan files.

Table 5 lists, per pipeline, the number and size of its micro-batches and its tensor-parallel groups in
stage order, each with its ranks (R) and transformer layers (L); ranks 0-15 are the H800s and 16-47 the
H20s, as in the hetu-h800x16-h20x* clusters (H800 nodes first). ZeRO-1 everywhere (§A.2); sequence parallelism in the TP groups (§8: TP by AG and RS). hetsim numbers
a plan's layers with the embedding as 0 and the head after the last block, so blocks Lx-Ly become layers
x+1 .. y+1, the first stage also holding the embedding and the last the head.

The "32B" model has 60 layers and the 70B one 80 (Table 5's layer ids): `llama-32b-4k.yaml` (LLaMA-1 33B's shape at 4K,
32.5B parameters) and `llama2-70b`. Usage: python3 make_table5_plans.py (writes table5-*.yaml next to itself).
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (cluster, model, blocks, [(micro-batches, micro-batch size, [(first rank, last rank, first L, last L)])])
TABLE5 = {
    "32b-h800x16-h20x16": ("hetu-h800x16-h20x16", "llama-32b-4k.yaml", 60, [
        (32, 1, [(16, 19, 0, 6), (20, 23, 7, 13), (0, 3, 14, 36), (4, 7, 37, 59)]),
        (32, 1, [(24, 27, 0, 6), (28, 31, 7, 13), (8, 11, 14, 36), (12, 15, 37, 59)])]),
    "32b-h800x16-h20x24": ("hetu-h800x16-h20x24", "llama-32b-4k.yaml", 60, [
        (32, 1, [(16, 19, 0, 5), (20, 23, 6, 11), (24, 27, 12, 17), (0, 3, 18, 38), (4, 7, 39, 59)]),
        (32, 1, [(28, 31, 0, 5), (32, 35, 6, 11), (36, 39, 12, 17), (8, 11, 18, 38), (12, 15, 39, 59)])]),
    "32b-h800x16-h20x32": ("hetu-h800x16-h20x32", "llama-32b-4k.yaml", 60, [
        (16, 1, [(16 + 8 * k, 19 + 8 * k, 0, 10), (20 + 8 * k, 23 + 8 * k, 11, 21), (4 * k, 4 * k + 3, 22, 59)])
        for k in range(4)]),
    "70b-h800x16-h20x16": ("hetu-h800x16-h20x16", "llama2-70b", 80, [
        (64, 1, [(16, 23, 0, 10), (24, 31, 11, 21), (0, 7, 22, 50), (8, 15, 51, 79)])]),
    "70b-h800x16-h20x24": ("hetu-h800x16-h20x24", "llama2-70b", 80, [
        (64, 1, [(16, 23, 0, 9), (24, 31, 10, 19), (32, 39, 20, 29), (0, 7, 30, 54), (8, 15, 55, 79)])]),
    "70b-h800x16-h20x32": ("hetu-h800x16-h20x32", "llama2-70b", 80, [
        (32, 1, [(16, 23, 0, 16), (24, 31, 17, 33), (0, 7, 34, 79)]),
        (32, 1, [(32, 39, 0, 16), (40, 47, 17, 33), (8, 15, 34, 79)])]),
}


def main():
    for name, (cluster, model, blocks, pipes) in TABLE5.items():
        lines = ["# Hetu v2 (papers/003) Appendix A.2, Table 5: %s. Written by make_table5_plans.py." % name,
                 "kind: plan", "name: hetu-table5-" + name, "cluster: " + cluster, "model: " + model,
                 "training: {global_batch_size: 64, seq_len: 4096}  # §7: context 4K, global batch 64",
                 "zero_stage: 1",
                 "sequence_parallel: true  # §8: Hetu's TP runs its activations through all-gather and reduce-scatter",
                 "pipelines:"]
        for mbs, size, stages in pipes:
            lines += ["  - micro_batch_size: %d" % size, "    num_micro_batches: %d" % mbs, "    stages:"]
            for i, (r0, r1, l0, l1) in enumerate(stages):
                begin = 0 if i == 0 else l0 + 1
                end = blocks + 2 if i == len(stages) - 1 else l1 + 2
                devices = ", ".join(str(r) for r in range(r0, r1 + 1))
                lines.append("      - {devices: [%s], tp_degree: %d, layer_begin: %d, layer_end: %d}  # L%d-%d" % (
                    devices, r1 - r0 + 1, begin, end, l0, l1))
        with open(os.path.join(HERE, "table5-%s.yaml" % name), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
