#!/usr/bin/python3
"""Iteration time of an MoE model by expert-parallel degree, and the all-to-alls' share of it (docs/moe.md).

    /usr/bin/python3 tools/plot/moe_ep.py HETSIM OUT.png [--csv OUT.csv]

Simulates Qwen3-30B-A3B (FP8, 4096 tokens, global batch 1024, micro-batch 1) on 8 DGX-H100 nodes (64 GPUs,
experiments/validation/megatron_bridge_moe_h100/clusters/dgx-h100-ndr-n8.yaml) with TP 1, PP 1, DP 64 and EP 2
to 64, under each dispatcher (NCCL all-to-alls; DeepEP/HybridEP's node-deduplicated ones), ZeRO-1 with the
gradient sync overlapped. Left: the slowest device's iteration split into compute, exposed expert-parallel
communication and the rest; right: the all-to-alls' share of the iteration. EP 1 (every expert on every GPU) is
left out; EP 2 does not fit in 80 GiB either and is marked OOM.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import style  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CLUSTER = os.path.join(ROOT, "experiments", "validation", "megatron_bridge_moe_h100", "clusters", "dgx-h100-ndr-n8.yaml")
GPUS = 64
EPS = [2, 4, 8, 16, 32, 64]
DISPATCHERS = [("alltoall", "NCCL all-to-all"), ("node_dedup", "DeepEP / HybridEP (node-deduplicated)")]


def plan_text(ep, dispatcher):
    devices = ",".join(str(i) for i in range(GPUS))
    return (f"kind: plan\nname: qwen3-30b-a3b-ep{ep}-{dispatcher}\ncluster: {CLUSTER}\nmodel: qwen3-30b-a3b\n"
            "training: {global_batch_size: 1024, seq_len: 4096, dtype: fp8, optimizer: adam, recompute: none}\n"
            "zero_stage: 1\n"
            f"comm: {{dp_overlap: true, dp_bucket_mib: 80, param_gather_overlap: true, ep_dispatcher: {dispatcher}}}\n"
            f"pipelines:\n  - micro_batch_size: {GPUS}\n    num_micro_batches: {1024 // GPUS}\n    stages:\n"
            f"      - {{devices: [{devices}], ep_degree: {ep}, expert_tp_degree: 1, layer_begin: 0, layer_end: 50}}\n")


def simulate(hetsim, work, ep, dispatcher):
    path = os.path.join(work, f"ep{ep}-{dispatcher}.yaml")
    with open(path, "w") as f:
        f.write(plan_text(ep, dispatcher))
    report = os.path.join(work, f"ep{ep}-{dispatcher}.json")
    r = subprocess.run([hetsim, "simulate", "--plan", path, "--report-out", report, "--allow-oom"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hetsim simulate failed on EP {ep} ({dispatcher}):\n{r.stderr}")
    with open(report) as f:
        rep = json.load(f)
    devices = rep["devices"]
    slowest = max(devices, key=lambda d: d.get("compute_s", 0) + d.get("communication_s", 0))
    t = rep["iteration_time_s"]
    ep_s = slowest.get("ep_communication_s", 0.0)
    compute = slowest.get("compute_s", 0.0)
    return {"ep": ep, "dispatcher": dispatcher, "iteration_s": t, "compute_s": compute, "ep_s": ep_s,
            "other_s": max(0.0, t - compute - ep_s), "peak_gib": max(d.get("peak_memory_gib", 0) for d in devices),
            "oom": any(d.get("oom", False) for d in devices)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hetsim")
    ap.add_argument("out")
    ap.add_argument("--csv")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for dispatcher, _ in DISPATCHERS:
            for ep in EPS:
                rows.append(simulate(os.path.abspath(a.hetsim), work, ep, dispatcher))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    plt.rcParams.update(style.STYLE)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.6), gridspec_kw={"width_ratios": [1.6, 1]})
    width = 0.38
    colors = {"compute_s": "#4c72b0", "ep_s": "#dd8452", "other_s": "#b0b0b0"}
    labels = {"compute_s": "compute", "ep_s": "EP all-to-all (exposed)", "other_s": "other (DP, idle)"}
    for k, (dispatcher, name) in enumerate(DISPATCHERS):
        mine = [r for r in rows if r["dispatcher"] == dispatcher]
        xs = [i + (k - 0.5) * width for i in range(len(mine))]
        bottom = [0.0] * len(mine)
        for key in ("compute_s", "ep_s", "other_s"):
            vals = [r[key] for r in mine]
            left.bar(xs, vals, width, bottom=bottom, color=colors[key], hatch="//" if k else None,
                     edgecolor="white", linewidth=0.5, label=labels[key] if k == 0 else None)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for x, r in zip(xs, mine):
            if r["oom"]:
                left.text(x, r["iteration_s"], "OOM", ha="center", va="bottom", fontsize=7)
        right.plot(EPS, [100 * r["ep_s"] / r["iteration_s"] for r in mine], marker="o",
                   linestyle="--" if k else "-", color="#dd8452", label=name)
    left.set_xticks(range(len(EPS)))
    left.set_xticklabels([str(e) for e in EPS])
    left.set_xlabel("expert-parallel degree (plain: NCCL all-to-all; hatched: node-deduplicated)")
    left.set_ylabel("iteration time (s)")
    left.set_title("Qwen3-30B-A3B on 64 H100s (8 DGX nodes), TP 1, DP 64")
    left.legend(loc="upper left")
    right.set_xscale("log", base=2)
    right.set_xticks(EPS)
    right.set_xticklabels([str(e) for e in EPS])
    right.set_xlabel("expert-parallel degree")
    right.set_ylabel("exposed all-to-all share of the iteration (%)")
    right.axvline(8, color="#999999", linewidth=0.6, linestyle=":")
    right.text(8, 12, " EP groups\n leave the node", fontsize=8, color="#666666", va="bottom")
    right.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    style.save(fig, a.out)
    print(f"{a.out}: {len(rows)} simulations")


if __name__ == "__main__":
    main()
