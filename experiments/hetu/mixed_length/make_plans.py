#!/usr/bin/env python3
"""Writes Hetu v2 (papers/003) Appendix A.4's strategies (Tables 9-12) as hetsim plan files.

Layers: 0 is the embedding, 1..60 the blocks, 61 the head (plan.proto), so "L0-29 | L30-59" is
[0, 31) + [31, 62). Devices R0-R31 are hetu-h20x32's GPUs (4 nodes of 8). The context length and the
micro-batch counts are set by `hetsim mixed-length` per run; the values here are placeholders that validate.
Run from this folder: /usr/bin/python3 make_plans.py
"""

HEADER = """# Hetu v2 (papers/003) Appendix A.4, {table}: {what}. Written by make_plans.py.
kind: plan
name: {name}
cluster: hetu-h20x32
model: llama-32b-32k.yaml
training: {{global_batch_size: {gbs}, seq_len: {seq}, recompute: {recompute}}}
zero_stage: {zero}
{sp}pipelines:
"""


def stage(devs, lb, le, tp=1, cp=1, ulysses=1):
    extra = ""
    if tp > 1:
        extra += f", tp_degree: {tp}"
    if cp > 1:
        extra += f", cp_degree: {cp}"
    if ulysses > 1:
        extra += f", ulysses_degree: {ulysses}"
    return f"      - {{devices: {list(devs)}{extra}, layer_begin: {lb}, layer_end: {le}}}\n"


def pipeline(stages):
    return "  - micro_batch_size: 1\n    num_micro_batches: 1\n    stages:\n" + "".join(stages)


def write(name, table, what, pipes, seq, zero, recompute):
    # Tensor parallelism runs with Megatron-LM's sequence parallelism (Korthikanti et al. 2022, which Hetu
    # v2 §7.1 cites for its Megatron baseline; as experiments/hetu/table4-*.yaml): without it a 16K-token
    # shard at TP 8 keeps every norm and dropout input whole on each rank and no 32K strategy of Table 9
    # would fit in an H20's 96 GB.
    sp = "sequence_parallel: true\n" if any("tp_degree" in p for p in pipes) else ""
    text = HEADER.format(table=table, what=what, name=name, gbs=len(pipes), seq=seq, zero=zero,
                         recompute=recompute, sp=sp)
    text += "".join(pipes)
    with open(name + ".yaml", "w") as f:
        f.write(text)


R = lambda a, b: range(a, b + 1)  # R(a, b) = ranks Ra-Rb

# Table 9: DeepSpeed (Ulysses SP + ZeRO-3, activation checkpointing "AC") and Megatron-LM.
write("t9-deepspeed-32k", "Table 9", "DeepSpeed at 32K, DP4SP8AC bs1",
      [pipeline([stage(R(8 * i, 8 * i + 7), 0, 62, ulysses=8)]) for i in range(4)], 32768, 3, "full")
write("t9-deepspeed-16k", "Table 9", "DeepSpeed at 16K, DP8SP4AC bs1",
      [pipeline([stage(R(4 * i, 4 * i + 3), 0, 62, ulysses=4)]) for i in range(8)], 16384, 3, "full")
write("t9-megatron-32k", "Table 9", "Megatron-LM at 32K, DP2TP8CP2 bs1",
      [pipeline([stage(R(16 * i, 16 * i + 15), 0, 62, tp=8, cp=2)]) for i in range(2)], 32768, 1, "selective")
write("t9-megatron-16k", "Table 9", "Megatron-LM at 16K, TP8PP4 bs1",
      [pipeline([stage(R(0, 7), 0, 16, tp=8), stage(R(8, 15), 16, 31, tp=8), stage(R(16, 23), 31, 46, tp=8),
                 stage(R(24, 31), 46, 62, tp=8)])], 16384, 1, "selective")

# Table 10: HotSPa's and Hetu-A's per-interval homogeneous strategies.
write("t10-dp2tp16", "Table 10", "interval 16K-32K, DP2TP16 bs1",
      [pipeline([stage(R(16 * i, 16 * i + 15), 0, 62, tp=16)]) for i in range(2)], 32768, 1, "full")
write("t10-dp2tp8pp2", "Table 10", "interval 4K-16K, DP2TP8PP2 bs1",
      [pipeline([stage(R(16 * i, 16 * i + 7), 0, 31, tp=8), stage(R(16 * i + 8, 16 * i + 15), 31, 62, tp=8)])
       for i in range(2)], 16384, 1, "selective")
write("t10-dp4tp4pp2", "Table 10", "interval 0-4K, DP4TP4PP2 bs1",
      [pipeline([stage(R(8 * i, 8 * i + 3), 0, 31, tp=4), stage(R(8 * i + 4, 8 * i + 7), 31, 62, tp=4)])
       for i in range(4)], 4096, 1, "selective")

# Table 11 Strategy 1 (max length in (16K, 32K]): a TP16 long-sequence pipeline on R0-15 and four TP4
# short-sequence pipelines (one stage each) on R16-31.
write("t11-strategy1", "Table 11", "Hetu-B Strategy 1, max length (16K, 32K]",
      [pipeline([stage(R(0, 15), 0, 62, tp=16)])] +
      [pipeline([stage(R(16 + 4 * i, 19 + 4 * i), 0, 62, tp=4)]) for i in range(4)], 32768, 1, "full")
# Table 11 Strategy 2 (max length in (0, 16K]) = Table 12 Strategy 1 (max length in (4K, 16K]): a TP8
# long-sequence pipeline on R0-7 and three TP4 PP2 short-sequence pipelines on R8-31.
write("t11-strategy2", "Tables 11 and 12", "Hetu-B Table 11 Strategy 2 = Table 12 Strategy 1, max length (0/4K, 16K]",
      [pipeline([stage(R(0, 7), 0, 62, tp=8)])] +
      [pipeline([stage(R(8 + 8 * i, 11 + 8 * i), 0, 31, tp=4), stage(R(12 + 8 * i, 15 + 8 * i), 31, 62, tp=4)])
       for i in range(3)], 16384, 1, "selective")
# Table 12 Strategy 2 (max length in (0, 4K]) is not in the paper's text (the table is cut off after its
# title); our choice is Table 10's 0-4K strategy, DP4TP4PP2, i.e. t10-dp4tp4pp2.yaml.
