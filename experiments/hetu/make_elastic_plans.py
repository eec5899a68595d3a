#!/usr/bin/env python3
"""Writes Hetu v2's elastic-training setup (papers/003 §7.2, Appendix A.3) under elastic/: plan files, traces
and manifests (docs/reproductions/hetu-elastic.md).

Plans. Tables 7 (C1-C3, 32 H20) and 8 (C4-C7, H800 + H20) give Hetu's strategies per pipeline: the number and
size of its micro-batches and its TP groups in stage order, each with ranks (R) and transformer blocks (L);
ZeRO off (§7.2: two pipelines, no optimizer sharding, so that a failure loses no weight). Table 6 gives the
DeepSpeed (DP·SP(Ulysses)·ZeRO-3·AC) and Megatron (DP·TP·PP, ZeRO-1) strategies. hetsim numbers a plan's
layers with the embedding as 0 and the head after the last block (blocks Lx-Ly = layers x+1 .. y+1).

Ranks. The paper keeps rank ids across configurations (C6's H20s stay R16-39 after R15 failed); hetsim numbers
the live devices contiguously in the live nodes' order: each node group's whole nodes, then its nodes with
failed GPUs (as the bundled hetu-elastic-c* clusters and the replay engine's live clusters do). So a paper rank
maps to its position among the configuration's live paper ranks.

Megatron's rank order is TP innermost, then DP, then PP (stage s of replica r: devices s·DP·TP + r·TP + k).
DeepSpeed: one stage over every GPU, Ulysses 2, ZeRO-3, full recompute; Table 6's per-GPU batch does not
always divide the global batch of 64 (12 or 24 replicas): we keep 64 sequences per step, 32 per micro-batch
spread as evenly as possible over the replicas (2 micro-batches).

Usage: python3 make_elastic_plans.py   (writes elastic/*.yaml next to itself)
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "elastic")
BLOCKS = 60
MODEL = "../llama-32b-4k.yaml"
TRAINING = "training: {global_batch_size: 64, seq_len: 4096}  # §7: context 4K, global batch 64"

# Live paper ranks per configuration (H800 R0-15 first, H20 after, as hetu-h800x16-h20x32 numbers them).
LIVE = {
    "c1": list(range(32)), "c2": list(range(31)), "c3": list(range(24)),
    "c4": list(range(48)), "c5": list(range(40)),
    "c6": list(range(15)) + list(range(16, 40)), "c7": list(range(8)) + list(range(16, 40)),
}
GPUS = {"c1": "32 H20", "c2": "31 H20", "c3": "24 H20", "c4": "16 H800, 32 H20", "c5": "16 H800, 24 H20",
        "c6": "15 H800, 24 H20", "c7": "8 H800, 24 H20"}

# Tables 7-8: per pipeline (micro-batches, micro-batch size, [(first rank, last rank, first L, last L)]).
HETU = {
    "c1": [(16, 2, [(0, 3, 0, 14), (4, 7, 15, 29), (8, 11, 30, 44), (12, 15, 45, 59)]),
           (16, 2, [(16, 19, 0, 14), (20, 23, 15, 29), (24, 27, 30, 44), (28, 31, 45, 59)])],
    "c2": [(33, 1, [(0, 3, 0, 14), (4, 7, 15, 29), (8, 11, 30, 44), (12, 15, 45, 59)]),
           (31, 1, [(16, 19, 0, 15), (20, 23, 16, 31), (24, 27, 32, 47), (28, 29, 48, 55), (30, 30, 56, 59)])],
    "c3": [(32, 1, [(0, 3, 0, 19), (4, 7, 20, 39), (8, 11, 40, 59)]),
           (32, 1, [(12, 15, 0, 19), (16, 19, 20, 39), (20, 23, 40, 59)])],
    "c4": [(32, 1, [(16, 19, 0, 4), (20, 23, 5, 10), (24, 27, 11, 16), (28, 31, 17, 22), (0, 3, 23, 40),
                    (4, 7, 41, 59)]),
           (32, 1, [(32, 35, 0, 4), (36, 39, 5, 10), (40, 43, 11, 16), (44, 47, 17, 22), (8, 11, 23, 40),
                    (12, 15, 41, 59)])],
    "c5": [(32, 1, [(16, 19, 0, 5), (20, 23, 6, 11), (24, 27, 12, 17), (0, 3, 18, 38), (4, 7, 39, 59)]),
           (32, 1, [(28, 31, 0, 5), (32, 35, 6, 11), (36, 39, 12, 17), (8, 11, 18, 38), (12, 15, 39, 59)])],
    "c6": [(33, 1, [(16, 19, 0, 5), (20, 23, 6, 11), (24, 27, 12, 17), (0, 3, 18, 38), (4, 7, 39, 59)]),
           (31, 1, [(28, 31, 0, 5), (32, 35, 6, 11), (36, 39, 12, 17), (8, 11, 18, 39), (12, 13, 40, 52),
                    (14, 14, 53, 59)])],
    "c7": [(32, 1, [(16, 19, 0, 8), (20, 23, 9, 18), (24, 27, 19, 28), (0, 3, 29, 59)]),
           (32, 1, [(28, 31, 0, 8), (32, 35, 9, 18), (36, 39, 19, 28), (4, 7, 29, 59)])],
}

# Table 6. Megatron: (DP, TP, PP, micro-batch size); DeepSpeed: (DP, micro-batch size). C2 = C3 and C6 = C7
# (a GPU failure discards its whole node: uniform sharding cannot use the other seven). Megatron's C5 is
# TP8PP5 in Table 6, but TP 8 does not divide the 32B model's 52 heads (hetsim refuses it): we use Table 4's
# strategy for the same GPUs, DP2TP4PP5 bs2.
MEGATRON = {"c1": (2, 4, 4, 2), "c3": (1, 4, 6, 1), "c4": (4, 4, 3, 2), "c5": (2, 4, 5, 2), "c7": (2, 4, 4, 2)}
DEEPSPEED = {"c1": (16, 2), "c3": (12, 2), "c4": (24, 1), "c5": (20, 2), "c7": (16, 2)}
# Oobleck's stand-in runs Megatron's pipelines with optimizer sharding off (§7.2), which does not fit C4's
# DP4TP4PP3 (its H800 stage needs 87.5 of 80 GiB; Appendix A.3: "disabling ZeRO-1 increases memory overhead,
# precluding the use of the optimal parallel strategy", Hetu itself drops to DP 2 there). There it runs two
# pipelines of six TP-4 stages with Megatron's uniform 10 blocks a stage, each pipeline on its own nodes as
# Oobleck instantiates its templates (so that a node's failure leaves the other pipeline whole): Table 8's
# C4 device groups, bs2 (our choice).
OOBLECK = {"c4": [(16, 2, [(16, 19), (20, 23), (24, 27), (28, 31), (0, 3), (4, 7)]),
                  (16, 2, [(32, 35), (36, 39), (40, 43), (44, 47), (8, 11), (12, 15)])]}


def layers(i, n, l0, l1):
    return (0 if i == 0 else l0 + 1), (BLOCKS + 2 if i == n - 1 else l1 + 2)


def hetu_plan(c):
    pos = {r: i for i, r in enumerate(LIVE[c])}
    lines = ["zero_stage: 0  # §7.2: optimizer sharding off for fault isolation", "pipelines:"]
    for mbs, size, stages in HETU[c]:
        lines += ["  - micro_batch_size: %d" % size, "    num_micro_batches: %d" % mbs, "    stages:"]
        for i, (r0, r1, l0, l1) in enumerate(stages):
            b, e = layers(i, len(stages), l0, l1)
            devs = ", ".join(str(pos[r]) for r in range(r0, r1 + 1))
            lines.append("      - {devices: [%s], tp_degree: %d, layer_begin: %d, layer_end: %d}  # R%d-%d L%d-%d"
                         % (devs, r1 - r0 + 1, b, e, r0, r1, l0, l1))
    return lines


def megatron_plan(c, zero=1):
    dp, tp, pp, size = MEGATRON[c]
    per = BLOCKS // pp
    lines = ["zero_stage: %d" % zero, "pipelines:"]
    for r in range(dp):
        lines += ["  - micro_batch_size: %d" % size, "    num_micro_batches: %d" % (64 // dp // size), "    stages:"]
        for s in range(pp):
            b, e = layers(s, pp, s * per, (s + 1) * per - 1)
            devs = ", ".join(str(s * dp * tp + r * tp + k) for k in range(tp))
            lines.append("      - {devices: [%s], tp_degree: %d, layer_begin: %d, layer_end: %d}" % (devs, tp, b, e))
    return lines


def oobleck_plan(c):
    if c not in OOBLECK:
        return megatron_plan(c, zero=0)
    pos = {r: i for i, r in enumerate(LIVE[c])}
    lines = ["zero_stage: 0", "pipelines:"]
    for mbs, size, stages in OOBLECK[c]:
        per = BLOCKS // len(stages)
        lines += ["  - micro_batch_size: %d" % size, "    num_micro_batches: %d" % mbs, "    stages:"]
        for i, (r0, r1) in enumerate(stages):
            b, e = layers(i, len(stages), i * per, (i + 1) * per - 1)
            devs = ", ".join(str(pos[r]) for r in range(r0, r1 + 1))
            lines.append("      - {devices: [%s], tp_degree: %d, layer_begin: %d, layer_end: %d}" % (devs, r1 - r0 + 1, b, e))
    return lines


def deepspeed_plan(c):
    dp, _ = DEEPSPEED[c]
    devs = ", ".join(str(d) for d in range(dp * 2))
    return ["zero_stage: 3", "recompute: full",
            "pipelines:",
            "  - micro_batch_size: 32  # Table 6: bs%d per replica; 32 sequences over %d replicas" % (DEEPSPEED[c][1], dp),
            "    num_micro_batches: 2",
            "    stages:",
            "      - {devices: [%s], ulysses_degree: 2, layer_begin: 0, layer_end: %d}" % (devs, BLOCKS + 2)]


def write(name, lines):
    with open(os.path.join(OUT, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def plan_file(system, c, body, cluster, name=None):
    return (["# Hetu v2 (papers/003) Appendix A.3: %s's strategy for %s (%s). Written by make_elastic_plans.py."
             % (system, c.upper(), GPUS[c]),
             "kind: plan", "name: %s-%s" % (name or system.lower(), c), "cluster: " + cluster, "model: " + MODEL, TRAINING]
            + body)


def inline(body, name, indent):
    """A plan inlined in a manifest's replan_plans (no cluster: it fits the live nodes by its GPU count)."""
    pad = " " * indent
    out = [pad + "- name: " + name]
    for line in body:
        out.append(pad + "  " + line.split("  #")[0].rstrip())
    return out


# The traces (§7.2: "GPU failures (removal of one GPU) and node failures (removal of eight GPUs from a single
# machine)"). The paper gives no times: one change per 30 minutes, 2.5 hours in all.
TRACES = {
    "homogeneous": ("hetu-h20x32", "C1 (32 H20) -> GPU R31 fails (C2, 31 H20) -> its node fails (C3, 24 H20)",
                    [(1800, "gpu_failure", "devices: [31]", "C1 -> C2: one H20 fails"),
                     (3600, "node_failure", "nodes: [3]", "C2 -> C3: its machine fails")], 5400),
    "heterogeneous": ("hetu-h800x16-h20x32",
                      "C4 (16 H800 + 32 H20) -> an H20 node fails (C5) -> H800 R15 fails (C6) -> its node fails (C7)",
                      [(1800, "node_failure", "nodes: [5]", "C4 -> C5: an H20 machine (R40-47) fails"),
                       (3600, "gpu_failure", "devices: [15]", "C5 -> C6: H800 R15 fails"),
                       (5400, "node_failure", "nodes: [1]", "C6 -> C7: its H800 machine fails")], 7200),
}
SCENARIOS = {"homogeneous": ["c1", "c2", "c3"], "heterogeneous": ["c4", "c5", "c6", "c7"]}
MEGATRON_OF = {"c1": "c1", "c2": "c3", "c3": "c3", "c4": "c4", "c5": "c5", "c6": "c7", "c7": "c7"}


def main():
    os.makedirs(OUT, exist_ok=True)
    for c in HETU:
        write("hetu-%s.yaml" % c, plan_file("Hetu", c, hetu_plan(c), "hetu-elastic-" + c))
    for c in MEGATRON:
        write("megatron-%s.yaml" % c, plan_file("Megatron", c, megatron_plan(c), "hetu-elastic-" + c))
        write("deepspeed-%s.yaml" % c, plan_file("DeepSpeed", c, deepspeed_plan(c), "hetu-elastic-" + c))
    for scen, (cluster, what, events, duration) in TRACES.items():
        lines = ["# Hetu v2 §7.2, Fig. 14 (%s): %s. Written by make_elastic_plans.py." % (scen, what),
                 "kind: trace", "name: hetu-elastic-" + scen, "description: \"%s\"" % what,
                 "sources: [\"Hetu v2 §7.2 and Appendix A.3 (configurations C1-C7); times assumed\"]",
                 "cluster: " + cluster, "duration_s: %d" % duration, "events:"]
        for t, kind, who, cause in events:
            lines.append("  - {time_s: %d, kind: %s, %s, cause: \"%s\"}" % (t, kind, who, cause))
        write(scen + ".trace.yaml", lines)
        cs = SCENARIOS[scen]
        first = cs[0]
        man = ["# Hetu v2 §7.2, Fig. 14 (%s): Hetu (graph switching), Megatron and DeepSpeed (checkpoint and" % scen,
               "# restart with Table 6's strategies: policy varuna with fixed plans), Oobleck's stand-in (policy elastic:",
               "# state from surviving replicas, Megatron's pipelines without ZeRO). Written by make_elastic_plans.py.",
               "#   build/hetsim run experiments/hetu/elastic/%s.yaml" % scen,
               "kind: experiment", "name: hetu-elastic-" + scen,
               "description: Hetu v2 elastic training (%s)" % what,
               "reproduces: [\"Hetu v2 Figure 14 (§7.2)\"]",
               "clusters: [%s]" % cluster, "models: [%s]" % MODEL, TRAINING,
               "planners:",
               "  - {name: plan, label: Hetu, plan: hetu-%s.yaml}" % first,
               "  - {name: plan, label: Megatron, plan: megatron-%s.yaml}" % MEGATRON_OF[first],
               "  - {name: plan, label: DeepSpeed, plan: deepspeed-%s.yaml}" % MEGATRON_OF[first],
               "  - {name: plan, label: Oobleck, plan: oobleck-%s.yaml}" % MEGATRON_OF[first],
               "sweep:",
               "  - {name: planner, zip: system, values: [Hetu, Megatron, DeepSpeed, Oobleck]}",
               "  - {name: policy, zip: system, values: [Hetu, Megatron, DeepSpeed, Oobleck]}",
               "simulation: {fidelity: fast}",
               "replay:",
               "  trace: %s.trace.yaml" % scen,
               "  checkpoint_interval_s: 1800",
               "  detection_s: 30  # assumed: the same for every system",
               "  restart_s: 300",
               "  policies:",
               "    - name: hetu", "      label: Hetu", "      specialization_s: 10  # §8: within 10 seconds",
               "      replan_plans:"]
        for c in cs[1:]:
            man += inline(hetu_plan(c), "hetu-" + c, 8)
        for system, body in (("Megatron", megatron_plan), ("DeepSpeed", deepspeed_plan)):
            man += ["    - name: varuna", "      label: " + system, "      replan_plans:"]
            for c in sorted({MEGATRON_OF[c] for c in cs[1:]}):
                man += inline(body(c), system.lower() + "-" + c, 8)
        man += ["    - name: elastic", "      label: Oobleck", "      replan_plans:"]
        for c in sorted({MEGATRON_OF[c] for c in cs[1:]}):
            man += inline(oobleck_plan(c), "oobleck-" + c, 8)
        write(scen + ".yaml", man)
    for c in MEGATRON:
        write("oobleck-%s.yaml" % c, plan_file("Oobleck stand-in (Megatron's pipelines, ZeRO off)", c,
                                               oobleck_plan(c), "hetu-elastic-" + c, "oobleck"))


if __name__ == "__main__":
    main()
