#!/usr/bin/python3
"""Converts Sailor's measured GH200 OPT-350M plans into hetsim plans, clusters and a runs CSV.

Usage: /usr/bin/python3 tools/convert_sailor_plans.py [RAW_DIR] [OUT_DIR]
  RAW_DIR  Sailor's plan_config_*.json files (default experiments/validation/sailor_gh200_opt350/raw)
  OUT_DIR  where plans/, clusters/ and runs.csv go (default experiments/validation/sailor_gh200_opt350)

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
"""
import csv
import json
import os
import sys

NIC_GBPS = 200
FABRIC_GBYTE_S = 250


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


def convert(path, name):
    d = json.load(open(path))
    if len(d["pipeline_list"]) != 1:
        raise SystemExit(f"{path}: expected one pipeline shape, found {len(d['pipeline_list'])}")
    p = d["pipeline_list"][0]
    stages = p["num_stages"]
    dp = p["dp"][0]
    if any(x != dp for x in p["dp"]):
        raise SystemExit(f"{path}: stages with different DP degrees are not converted")
    tps = {t[1] for st in p["tmp_per_stage"] for t in st}
    gpus = {t[0][0][0] for st in p["tmp_per_stage"] for t in st}
    if tps != {4} or gpus != {"GH-96"}:
        raise SystemExit(f"{path}: expected TP 4 on GH-96 nodes, found TP {tps} on {gpus}")
    nodes = d["N"]
    if nodes != stages * dp:
        raise SystemExit(f"{path}: {nodes} nodes for {stages} stages x {dp} replicas")
    mbs, gbs = d["mbs"], d["gbs"]
    if gbs % (mbs * dp):
        raise SystemExit(f"{path}: global batch {gbs} not divisible by micro-batch {mbs} x DP {dp}")
    m = gbs // (mbs * dp)
    lines = [
        f"# Sailor's measured plan {os.path.basename(path)} (GH200, OPT-350M): {stages} stage(s) x DP {dp} x TP 4",
        f"# on {nodes} node(s); measured {d['real']} s per iteration, gradient all-reduce {d['red_grads']} s,",
        f"# peak {d['max_mem'] / 2**30:.2f} GiB. Written by tools/convert_sailor_plans.py.",
        "kind: plan",
        f"name: sailor-{name}",
        f"cluster: ../clusters/clariden-gh200-n{nodes}.yaml",
        "model: opt-350m",
        # DeepSpeed's engine keeps 8 more bytes per parameter than weights + gradients + Adam: a flat fp32
        # gradient buffer for its all-reduce and the model copies it makes at the start of training (Sailor's
        # own memory model, sailor/Planner/simulations/runtime_simulator.py: `comm` and
        # `additional_ds_copies`, 4 bytes each).
        "# DeepSpeed's engine: 8 bytes per parameter more (its flat gradient buffer and start-up model copies,",
        "# as Sailor's own memory model counts them).",
        f"training: {{global_batch_size: {gbs}, seq_len: 2048, dtype: tf32, recompute: none, attention: standard, "
        "optimizer_extra_bytes_per_param: 8}",
        "calibration: megatron-deepspeed  # the runs' software stack: its host costs (docs/calibration.md)",
        "schedule: 1f1b",
        "zero_stage: 0",
        "comm: {pp_scatter_gather: true}  # DeepSpeed's partitioned pipeline sends (1/TP per rank)",
        "pipelines:",
    ]
    for r in range(dp):
        lines.append(f"  - micro_batch_size: {mbs}")
        lines.append(f"    num_micro_batches: {m}")
        lines.append("    stages:")
        for s in range(stages):
            layers = p["layers_per_stage"][s]
            begin, end = layers[0], layers[-1] + 1
            if layers != list(range(begin, end)):
                raise SystemExit(f"{path}: stage {s} holds non-contiguous layers")
            node = r * stages + s
            devs = ", ".join(str(4 * node + k) for k in range(4))
            lines.append(f"      - {{devices: [{devs}], tp_degree: 4, layer_begin: {begin}, layer_end: {end}}}")
    row = {
        "plan": f"plans/{name}.yaml",
        "nodes": nodes,
        "dp": dp,
        "pp": stages,
        "tp": 4,
        "micro_batch": mbs,
        "global_batch": gbs,
        "iteration_ms": round(d["real"] * 1e3, 3),
        "grad_sync_ms": round(d["red_grads"] * 1e3, 3),
        "peak_memory_gib": round(d["max_mem"] / 2**30, 4),
        "source": os.path.basename(path),
    }
    return "\n".join(lines) + "\n", nodes, row


def main():
    raw = sys.argv[1] if len(sys.argv) > 1 else "experiments/validation/sailor_gh200_opt350/raw"
    out = sys.argv[2] if len(sys.argv) > 2 else "experiments/validation/sailor_gh200_opt350"
    os.makedirs(os.path.join(out, "plans"), exist_ok=True)
    os.makedirs(os.path.join(out, "clusters"), exist_ok=True)
    files = sorted(f for f in os.listdir(raw) if f.startswith("plan_config_") and f.endswith(".json"))
    if not files:
        raise SystemExit(f"{raw}: no plan_config_*.json files")

    def key(f):  # by node count, then DP, then the rest
        parts = f[len("plan_config_"):-len(".json")].split("_")
        return (int(parts[0][1:]), int(parts[1][1:]), f)

    rows, node_counts = [], set()
    for f in sorted(files, key=key):
        name = f[len("plan_config_"):-len(".json")].lower().replace("_", "-")
        text, nodes, row = convert(os.path.join(raw, f), name)
        with open(os.path.join(out, "plans", name + ".yaml"), "w") as fh:
            fh.write(text)
        node_counts.add(nodes)
        rows.append(row)
    for n in sorted(node_counts):
        with open(os.path.join(out, "clusters", f"clariden-gh200-n{n}.yaml"), "w") as fh:
            fh.write(cluster_yaml(n))
    with open(os.path.join(out, "runs.csv"), "w", newline="") as fh:
        fh.write("# Sailor's 15 measured GH200 OPT-350M plans (eth-easl/sailor @ cf2c8e3, clariden/OPT-350),\n")
        fh.write("# converted by tools/convert_sailor_plans.py: one plan file per run; measured iteration time,\n")
        fh.write("# gradient all-reduce time and peak GPU memory (GiB) of the fullest GPU. Each plan names its\n")
        fh.write("# software stack's calibration (megatron-deepspeed), which validate-sim and simulate use.\n")
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} plans, {len(node_counts)} clusters and runs.csv under {out}")


if __name__ == "__main__":
    main()
