#!/usr/bin/python3
"""Converts Sailor's measured plans into hetsim plans, clusters and a runs CSV for `hetsim validate-sim --runs`.

Usage: /usr/bin/python3 tools/convert_sailor_plans.py [RAW_DIR] [OUT_DIR] [--model NAME] [--label TEXT]
           [--model-label TEXT] [--source DIR] [--network SAILOR_REPO/sailor/providers] [--calibration NAME]
  RAW_DIR  Sailor's plan_config_*.json files, in it or its subfolders (default
           experiments/validation/sailor_gh200_opt350/raw)
  OUT_DIR  where plans/, clusters/ and runs.csv go (default experiments/validation/sailor_gh200_opt350)
  --model  the hetsim model the plans train (default opt-350m; GPT-Neo-2.7B plans: gpt-neo-2.7b)
  --label, --model-label  what the runs are and which model, for the files' headers (defaults "GH200
           OPT-350M" and "OPT-350M")
  --network  Sailor's measured bandwidths (intra_node_bandwidths.json, multizone_bandwidths_het.json in this
           folder), needed for plans on GPU types other than the GH200
  --calibration  the calibration each plan names (default megatron-deepspeed, the runs' software stack;
           Sailor's RTX 3090 / RTX 2080 / Titan RTX machines: sailor-mit, which adds their boxes' measured
           intra-node all-reduces)

Plans on Clariden's GH200 nodes (the bundled set, and Sailor's GPT-Neo-2.7B plans on the same machine) get
the GH200 node below. Plans on other GPU types (Sailor's heterogeneous RTX 3090 / RTX 2080 / Titan RTX
cluster) get one cluster per plan built from Sailor's own measurements of that cluster (--network): each
GPU type's node holds Sailor's GPU count (8 for the RTX and Titan nodes), its GPUs talk at Sailor's measured
intra-node bandwidth for the plan's TP degree, and each node has one Ethernet NIC at the standard rate just
above Sailor's measured node-to-node rate between two nodes of that type (1 Gb/s where it measured 0.92,
25 Gb/s where it measured 22.9; a pair of types meets at the slower NIC, as Sailor's pairwise table says
for all but a few single-GPU entries). Stages of one pipeline may sit on different GPU types, and replicas
of one stage too (each replica r of every stage forms pipeline r).

Source: eth-easl/sailor @ cf2c8e3 (Sailor, SOSP'25 artifact), clariden/OPT-350 (raw/SOURCE.md says how the
plans were run). Each JSON holds one plan: `pipeline_list` (one entry per pipeline shape: stages, Sailor's
layer indices per stage — 0 the embedding, 1-24 the blocks, 25 the head, as hetsim numbers them —, per stage
and replica the node's [GPU, TP, zone] and the TP degree, and `dp` replicas per stage), `mbs`, `gbs`, and the
measurements `real` (s per iteration), `red_grads` (s of the gradient all-reduce) and `max_mem` (peak bytes
on the fullest GPU).

What the conversion decides (Sailor's files are silent on it):
- Placement: every stage replica of these plans is TP 4 on one whole 4-GPU node; replica r of stage s gets
  node r·S + s (pipeline-major). Every pair of nodes is joined the same way, so the order does not change
  the simulated time.
- Cluster: Clariden's GH200 nodes as Sailor measured them: 4 GPUs on an NVLink fabric of about 250 GB/s, one
  Slingshot-11 NIC per GPU (200 Gb/s line rate; Sailor measured about 183 Gb/s), one non-blocking switch.
- Training: sequence 2,048, FP32 weights with TF32 tensor cores (dtype tf32), no recomputation, no ZeRO,
  standard attention (no flash attention), 1F1B: Megatron-DeepSpeed's pipeline engine as Sailor ran it.
  The gradient all-reduce runs after the pipeline flush (DeepSpeed's pipeline engine does not overlap it).
- Pipeline sends: DeepSpeed's pipeline engine partitions activations and gradients over the TP group
  (`is_pipe_partitioned = is_model_parallel`): each TP rank sends 1/4 of the tensor and the receivers
  all-gather it, hetsim's `comm.pp_scatter_gather`.
- TP backward: Megatron-DeepSpeed turns Megatron-LM's asynchronous TP all-reduce (behind the wgrad GEMM) off
  under DeepSpeed, so the backward's TP all-reduces block: `comm.tp_backward_blocking: true`.
"""
import argparse
import csv
import json
import os
import sys

NIC_GBPS = 200
FABRIC_GBYTE_S = 250
# Sailor's GPU names -> hetsim's, with the GPUs per node of Sailor's clusters
# (sailor/Planner/simulations/configs/basic_cluster_config.json).
SAILOR_GPUS = {"GH-96": ("gh200", 4), "RTX-3090": ("rtx3090", 8), "RTX-2080": ("rtx2080", 8),
               "Titan-RTX": ("titan-rtx", 8), "A100-40": ("a100-40gb", 4), "A100-80": ("a100-80gb", 4),
               "V100-16": ("v100", 4)}
ETHERNET_GBPS = [1, 10, 25, 40, 50, 100, 200, 400, 800]
CALIBRATION = "megatron-deepspeed"  # what each plan names (--calibration)


def cluster_yaml(nodes):
    return f"""# Clariden (CSCS Alps) as Sailor's GH200 OPT-350M runs used it: {nodes} node(s) of 4 GH200 (96 GB).
# Written by tools/convert_sailor_plans.py; numbers from Sailor's measurements (raw/SOURCE.md).
kind: cluster
name: clariden-gh200-n{nodes}
description: "{nodes} x 4 GH200 (NVLink ~{FABRIC_GBYTE_S} GB/s), one {NIC_GBPS} Gb/s Slingshot-11 NIC per GPU"
sources:
  - "eth-easl/sailor @ cf2c8e3, clariden/OPT-350 (Sailor, SOSP'25): ~250 GB/s NVLink, ~183 Gb/s per GPU measured"
nodes:
  - name: gh200
    count: {nodes}
    gpus: {{type: gh200, count: 4}}
    fabric: {{kind: nvlink, bandwidth_gbyte_s: {FABRIC_GBYTE_S}}}
    nic: {{kind: roce, bandwidth_gbps: {NIC_GBPS}, attachment: per_gpu}}
network: {{single_switch: {{}}}}
"""


class Network:
    """Sailor's measured bandwidths of a cluster (its providers/ JSON files)."""

    def __init__(self, folder):
        self.folder = folder
        with open(os.path.join(folder, "intra_node_bandwidths.json")) as f:
            self.intra = json.load(f)
        with open(os.path.join(folder, "multizone_bandwidths_het.json")) as f:
            self.zones = json.load(f)

    def fabric_gbyte_s(self, gpu, tp):
        rows = self.intra.get(gpu)
        if rows is None or str(tp) not in rows:
            raise SystemExit(f"{self.folder}/intra_node_bandwidths.json: no {gpu} entry for {tp} GPUs")
        return rows[str(tp)][1] / 1e9

    def nic_gbps(self, gpu, zone):
        """The standard Ethernet rate at or above Sailor's node-to-node rate between two `gpu` nodes in `zone`."""
        if zone not in self.zones:
            raise SystemExit(f"{self.folder}/multizone_bandwidths_het.json: no zone '{zone}' "
                             f"(has {', '.join(self.zones)})")
        rows = self.zones[zone].get(gpu)
        if rows is None:
            raise SystemExit(f"{self.folder}/multizone_bandwidths_het.json: no {gpu} entry in {zone}")
        rates = [v[1] for n in rows.values() for g, e in n.get(zone, {}).items() if g == gpu
                 for v in e.values()]
        if not rates:
            raise SystemExit(f"{self.folder}/multizone_bandwidths_het.json: no {gpu}-to-{gpu} entry")
        measured = max(rates) * 8 / 1e9
        return measured, next(r for r in ETHERNET_GBPS if r >= measured)


def hetero_cluster_yaml(name, groups, network, zone, source):
    """groups: [(sailor gpu, node count, tp degree)] in device order."""
    lines = [f"# The cluster of Sailor's measured plan {source}, from Sailor's own measurements of it",
             f"# ({os.path.basename(network.folder)}/intra_node_bandwidths.json, multizone_bandwidths_het.json).",
             "# Written by tools/convert_sailor_plans.py.",
             "kind: cluster", f"name: {name}",
             f"description: \"Sailor's {' + '.join(f'{n} x {SAILOR_GPUS[g][1]} {g}' for g, n, _ in groups)}\"",
             "sources:", "  - \"eth-easl/sailor @ cf2c8e3 (Sailor, SOSP'25): sailor/providers/ bandwidth tables\"",
             "nodes:"]
    for g, count, tp in groups:
        gpu, per_node = SAILOR_GPUS[g]
        fabric = network.fabric_gbyte_s(g, tp)
        measured, nic = network.nic_gbps(g, zone)
        lines += [f"  - name: {gpu}", f"    count: {count}", f"    gpus: {{type: {gpu}, count: {per_node}}}",
                  f"    # Sailor measured {fabric:.2f} GB/s among {tp} of these GPUs and {measured:.2f} Gb/s "
                  "between two such nodes",
                  f"    fabric: {{kind: pcie, bandwidth_gbyte_s: {fabric:.2f}}}",
                  f"    nic: {{kind: ethernet, bandwidth_gbps: {nic}}}"]
    lines.append("network: {single_switch: {}}")
    return "\n".join(lines) + "\n"


def replicas(p, path):
    """[(stage, replica, sailor gpu, tp)] of one pipeline_list entry, pipeline-major."""
    stages, dps = p["num_stages"], p["dp"]
    if any(x != dps[0] for x in dps):
        raise SystemExit(f"{path}: stages with different DP degrees are not converted")
    out = []
    for r in range(dps[0]):
        for s in range(stages):
            entry = p["tmp_per_stage"][s][r]
            gpu, tp = entry[0][0][0], entry[1]
            if gpu not in SAILOR_GPUS:
                raise SystemExit(f"{path}: GPU type '{gpu}' is not one of {', '.join(SAILOR_GPUS)}")
            if tp > SAILOR_GPUS[gpu][1]:
                raise SystemExit(f"{path}: TP {tp} on a {SAILOR_GPUS[gpu][1]}-GPU {gpu} node")
            out.append((s, r, gpu, tp))
    return out


def layer_ranges(stage_layers, path):
    """Each stage's [begin, end): contiguous layers, stage after stage. A stage whose list is not a run of
    consecutive layers but starts where the previous stage ended and ends before the next one starts is a typo
    in Sailor's file (clariden/GPT-NEO N4_D1 lists 16, 17, 18, 29, 20, ...): its range is taken from its first
    and last entries, with a warning."""
    out, expect = [], 0
    for s, layers in enumerate(stage_layers):
        begin, end = layers[0], layers[-1] + 1
        if begin != expect or end <= begin:
            raise SystemExit(f"{path}: stage {s} starts at layer {begin}, not {expect} where the previous one ended")
        if layers != list(range(begin, end)):
            print(f"warning: {path}: stage {s} lists layers {layers}; taking {begin}..{end - 1} (a typo: the list "
                  "is not consecutive but starts and ends where the stages around it say)", file=sys.stderr)
        out.append((begin, end))
        expect = end
    return out


def convert(path, name, model, model_label, network):
    d = json.load(open(path))
    if len(d["pipeline_list"]) != 1:
        raise SystemExit(f"{path}: expected one pipeline shape, found {len(d['pipeline_list'])}")
    p = d["pipeline_list"][0]
    stages = p["num_stages"]
    dp = p["dp"][0]
    placed = replicas(p, path)
    tps = {tp for _, _, _, tp in placed}
    gpus = {g for _, _, g, _ in placed}
    if len(tps) != 1:
        raise SystemExit(f"{path}: stages with different TP degrees ({sorted(tps)}) are not converted")
    tp = tps.pop()
    nodes = d["N"]
    if nodes != stages * dp:
        raise SystemExit(f"{path}: {nodes} nodes for {stages} stages x {dp} replicas")
    mbs, gbs = d["mbs"], d["gbs"]
    if gbs % (mbs * dp):
        raise SystemExit(f"{path}: global batch {gbs} not divisible by micro-batch {mbs} x DP {dp}")
    m = gbs // (mbs * dp)
    bounds = layer_ranges(p["layers_per_stage"], path)
    clariden = gpus == {"GH-96"} and tp == 4
    device = {}
    if clariden:  # the bundled layout: replica r of stage s on node r * S + s
        for s, r, _, _ in placed:
            device[(s, r)] = 4 * (r * stages + s)
        cluster_ref, cluster = f"clariden-gh200-n{nodes}", None
    else:
        if network is None:
            raise SystemExit(f"{path}: plans on {', '.join(sorted(gpus))} need Sailor's measured bandwidths: "
                             "give --network SAILOR_REPO/sailor/providers")
        # Nodes grouped by GPU type in SAILOR_GPUS's order; within a type, replicas in pipeline-major order.
        order = [g for g in SAILOR_GPUS if g in gpus]
        counts, next_device = {}, 0
        for g in order:
            for s, r, x, _ in placed:
                if x == g:
                    device[(s, r)] = next_device
                    next_device += SAILOR_GPUS[g][1]
                    counts[g] = counts.get(g, 0) + 1
        cluster_ref = f"sailor-{name}"
        try:
            cluster = hetero_cluster_yaml(cluster_ref, [(g, counts[g], tp) for g in order], network,
                                          d.get("zone", "us-central1-a"), os.path.basename(path))
        except SystemExit as e:
            raise SystemExit(f"{path}: {e}") from None
    gpu_text = "GH200" if clariden else " + ".join(SAILOR_GPUS[g][0] for g in order)
    lines = [
        f"# Sailor's measured plan {os.path.basename(path)} ({gpu_text}, {model_label}): "
        f"{stages} stage(s) x DP {dp} x TP {tp}",
        f"# on {nodes} node(s); measured {d['real']} s per iteration, gradient all-reduce {d['red_grads']} s,",
        f"# peak {d['max_mem'] / 2**30:.2f} GiB. Written by tools/convert_sailor_plans.py.",
        "kind: plan",
        f"name: sailor-{name}",
        f"cluster: ../clusters/{cluster_ref}.yaml",
        f"model: {model}",
        # DeepSpeed's engine keeps 8 more bytes per parameter than weights + gradients + Adam: a flat fp32
        # gradient buffer for its all-reduce and the model copies it makes at the start of training (Sailor's
        # own memory model, sailor/Planner/simulations/runtime_simulator.py: `comm` and
        # `additional_ds_copies`, 4 bytes each).
        "# DeepSpeed's engine: 8 bytes per parameter more (its flat gradient buffer and start-up model copies,",
        "# as Sailor's own memory model counts them).",
        f"training: {{global_batch_size: {gbs}, seq_len: 2048, dtype: tf32, recompute: none, attention: standard, "
        "optimizer_extra_bytes_per_param: 8}",
        f"calibration: {CALIBRATION}  # the runs' software stack"
        + (": its host costs" if CALIBRATION == "megatron-deepspeed" else " and machines") + " (docs/calibration.md)",
        "schedule: 1f1b",
        "zero_stage: 0",
        # Megatron-DeepSpeed turns Megatron-LM's asynchronous TP all-reduce off under DeepSpeed (its
        # arguments.py: `if args.deepspeed: args.async_tensor_model_parallel_allreduce = False`).
        "comm: {pp_scatter_gather: true, tp_backward_blocking: true}  # DeepSpeed's partitioned pipeline sends "
        "(1/TP per rank); Megatron-DeepSpeed's blocking backward TP all-reduces",
        "pipelines:",
    ]
    for r in range(dp):
        lines.append(f"  - micro_batch_size: {mbs}")
        lines.append(f"    num_micro_batches: {m}")
        lines.append("    stages:")
        for s in range(stages):
            begin, end = bounds[s]
            devs = ", ".join(str(device[(s, r)] + k) for k in range(tp))
            lines.append(f"      - {{devices: [{devs}], tp_degree: {tp}, layer_begin: {begin}, layer_end: {end}}}")
    row = {
        "plan": f"plans/{name}.yaml",
        "nodes": nodes,
        "dp": dp,
        "pp": stages,
        "tp": tp,
        "micro_batch": mbs,
        "global_batch": gbs,
        "iteration_ms": round(d["real"] * 1e3, 3),
        "grad_sync_ms": round(d["red_grads"] * 1e3, 3),
        "peak_memory_gib": round(d["max_mem"] / 2**30, 4),
        "source": os.path.basename(path),
    }
    return "\n".join(lines) + "\n", nodes if clariden else None, cluster, cluster_ref, row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("raw", nargs="?", default="experiments/validation/sailor_gh200_opt350/raw")
    ap.add_argument("out", nargs="?", default="experiments/validation/sailor_gh200_opt350")
    ap.add_argument("--model", default="opt-350m")
    ap.add_argument("--label", default="GH200 OPT-350M")
    ap.add_argument("--model-label", default="OPT-350M")
    ap.add_argument("--source", default="clariden/OPT-350", help="where in Sailor's repository the plans are")
    ap.add_argument("--network", default=None)
    ap.add_argument("--calibration", default="megatron-deepspeed")
    args = ap.parse_args()
    global CALIBRATION
    CALIBRATION = args.calibration
    raw, out = args.raw, args.out
    network = Network(args.network) if args.network else None
    os.makedirs(os.path.join(out, "plans"), exist_ok=True)
    os.makedirs(os.path.join(out, "clusters"), exist_ok=True)
    # RAW_DIR itself or its subfolders (Sailor keeps one folder per node count: N2/, N4/, ...).
    where = {}
    for folder, _, names in os.walk(raw):
        for f in names:
            if f.startswith("plan_config_") and f.endswith(".json"):
                if f in where:
                    raise SystemExit(f"{raw}: {f} is in both {where[f]} and {folder}")
                where[f] = folder
    files = sorted(where)
    if not files:
        raise SystemExit(f"{raw}: no plan_config_*.json files")

    def key(f):  # by node count, then DP, then the rest
        parts = f[len("plan_config_"):-len(".json")].split("_")
        return (int(parts[0][1:]), int(parts[1][1:]), f)

    rows, node_counts, own = [], set(), 0
    for f in sorted(files, key=key):
        name = f[len("plan_config_"):-len(".json")].lower().replace("_", "-")
        text, nodes, cluster, cluster_ref, row = convert(os.path.join(where[f], f), name, args.model,
                                                         args.model_label, network)
        with open(os.path.join(out, "plans", name + ".yaml"), "w") as fh:
            fh.write(text)
        if cluster is None:
            node_counts.add(nodes)
        else:
            with open(os.path.join(out, "clusters", cluster_ref + ".yaml"), "w") as fh:
                fh.write(cluster)
            own += 1
        rows.append(row)
    for n in sorted(node_counts):
        with open(os.path.join(out, "clusters", f"clariden-gh200-n{n}.yaml"), "w") as fh:
            fh.write(cluster_yaml(n))
    with open(os.path.join(out, "runs.csv"), "w", newline="") as fh:
        fh.write(f"# Sailor's {len(rows)} measured {args.label} plans (eth-easl/sailor @ cf2c8e3, {args.source}),\n")
        fh.write("# converted by tools/convert_sailor_plans.py: one plan file per run; measured iteration time,\n")
        fh.write("# gradient all-reduce time and peak GPU memory (GiB) of the fullest GPU. Each plan names its\n")
        fh.write(f"# software stack's calibration ({CALIBRATION}), which validate-sim and simulate use.\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} plans, {len(node_counts) + own} clusters and runs.csv under {out}")


if __name__ == "__main__":
    main()
