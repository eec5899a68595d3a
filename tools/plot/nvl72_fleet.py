#!/usr/bin/python3
"""The same plans on 576 H100s, 576 B200s and 576 GB200s in NVL72 racks (docs/formats.md "NVLink domains").

    /usr/bin/python3 tools/plot/nvl72_fleet.py HETSIM OUT.png [--csv OUT.csv]

Llama 3 70B (TP 8, PP 4, DP 18, selective recomputation) and Llama 3 405B (TP 8, PP 8, DP 9, full
recomputation, which it needs to fit in an H100's 80 GiB), BF16, 8,192 tokens, global batch 1,152, micro-batch 1,
ZeRO-1 with the gradient sync overlapped, on three clusters of 576
GPUs with one 400 Gb/s InfiniBand NIC per GPU on one non-blocking fabric: 72 DGX H100 nodes and 72 DGX B200
nodes (experiments/blackwell/clusters; 8-GPU NVLink domains) and eight GB200 NVL72 racks (the bundled
gb200-nvl72-pod-576: 72-GPU NVLink domains). Every plan places the devices alike: stage s of pipeline r is
devices (s * DP + r) * 8 .. + 7, so a stage's data-parallel replicas are neighbours and a TP group is 8 of them.
Compute: the default calibration, no flags: the H100 and the B200 at their measured sustained GEMM efficiencies,
the GB200 (the B200's die) at the B200's.
Left and middle: the slowest device's iteration split into compute, exposed TP, PP and DP communication and
idle time; right: the exposed pipeline and data-parallel communication, which a 72-GPU NVLink domain keeps off
the network.
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
CLUSTERS = [("H100 (8-GPU nodes)", os.path.join(ROOT, "experiments", "blackwell", "clusters", "dgx-h100-576.yaml")),
            ("B200 (8-GPU nodes)", os.path.join(ROOT, "experiments", "blackwell", "clusters", "dgx-b200-576.yaml")),
            ("GB200 NVL72 (72-GPU racks)", "gb200-nvl72-pod-576")]
MODELS = [("llama3-70b", 80, 4, "selective"), ("llama3-405b", 126, 8, "full")]  # model, blocks, PP, recomputation
GPUS, TP, GLOBAL_BATCH = 576, 8, 1152
PARTS = [("compute_s", "compute", "#4c72b0"), ("tp_communication_s", "TP (exposed)", "#55a868"),
         ("pp_communication_s", "PP (exposed)", "#c44e52"), ("dp_communication_s", "DP (exposed)", "#dd8452"),
         ("idle_s", "idle", "#b0b0b0")]


def plan_text(model, blocks, pp, recompute):
    dp = GPUS // (TP * pp)
    layers = blocks + 2  # the embedding and the head
    bounds = [round(i * layers / pp) for i in range(pp + 1)]
    lines = [f"kind: plan\nname: {model}-tp{TP}-pp{pp}-dp{dp}\nmodel: {model}\n",
             f"training: {{global_batch_size: {GLOBAL_BATCH}, seq_len: 8192, recompute: {recompute}}}\n",
             "schedule: 1f1b\nzero_stage: 1\nsequence_parallel: true\n",
             "comm: {dp_overlap: true, param_gather_overlap: true}\npipelines:\n"]
    for r in range(dp):
        lines.append(f"  - micro_batch_size: 1\n    num_micro_batches: {GLOBAL_BATCH // dp}\n    stages:\n")
        for s in range(pp):
            base = (s * dp + r) * TP
            devices = ",".join(str(base + i) for i in range(TP))
            lines.append(f"      - {{devices: [{devices}], tp_degree: {TP}, layer_begin: {bounds[s]}, "
                         f"layer_end: {bounds[s + 1]}}}\n")
    return "".join(lines)


def simulate(hetsim, work, cluster, model, blocks, pp, recompute):
    path = os.path.join(work, f"{model}.yaml")
    with open(path, "w") as f:
        f.write(plan_text(model, blocks, pp, recompute))
    report = os.path.join(work, "report.json")
    r = subprocess.run([hetsim, "simulate", "--plan", path, "--cluster", cluster, "--report-out", report,
                        "--fidelity", "fast"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"hetsim simulate failed on {model} / {cluster}:\n{r.stderr}")
    with open(report) as f:
        rep = json.load(f)
    devices = rep["devices"]
    slowest = max(devices, key=lambda d: d.get("compute_s", 0) + d.get("communication_s", 0) + d.get("idle_s", 0))
    row = {"model": model, "cluster": os.path.basename(cluster), "iteration_s": rep["iteration_time_s"],
           "peak_gib": max(d.get("peak_memory_gib", 0) for d in devices)}
    for key, _, _ in PARTS:
        row[key] = slowest.get(key, 0.0)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hetsim")
    ap.add_argument("out")
    ap.add_argument("--csv")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for model, blocks, pp, recompute in MODELS:
            for _, cluster in CLUSTERS:
                rows.append(simulate(os.path.abspath(a.hetsim), work, cluster, model, blocks, pp, recompute))
                print(f"{model} on {rows[-1]['cluster']}: {rows[-1]['iteration_s']:.2f} s", flush=True)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    plt.rcParams.update(style.STYLE)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8))
    names = [c.replace(" (", "\n(") for c, _ in CLUSTERS]
    for ax, (model, _, pp, recompute) in zip(axes[:2], MODELS):
        mine = [r for r in rows if r["model"] == model]
        bottom = [0.0] * len(mine)
        for key, label, color in PARTS:
            vals = [r[key] for r in mine]
            ax.bar(range(len(mine)), vals, 0.6, bottom=bottom, color=color, edgecolor="white", linewidth=0.5,
                   label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
        for i, r in enumerate(mine):
            ax.text(i, r["iteration_s"], f"{r['iteration_s']:.1f} s", ha="center", va="bottom", fontsize=8)
        ax.set_title(f"{model}: TP 8, PP {pp}, DP {GPUS // (TP * pp)} ({recompute} recomp.)", fontsize=9)
        ax.set_ylabel("iteration time (s), slowest device")
    axes[0].legend(loc="upper right", fontsize=7)
    width = 0.38
    for k, (model, _, _, _) in enumerate(MODELS):
        mine = [r for r in rows if r["model"] == model]
        xs = [i + (k - 0.5) * width for i in range(len(mine))]
        axes[2].bar(xs, [1000 * (r["pp_communication_s"] + r["dp_communication_s"]) for r in mine], width,
                    color="#dd8452", hatch="//" if k else None, edgecolor="white", label=model)
    axes[2].set_title("exposed PP + DP communication", fontsize=9)
    axes[2].set_ylabel("ms per iteration")
    axes[2].legend(loc="upper right", fontsize=7)
    for ax in axes:
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=7)
    fig.tight_layout()
    style.save(fig, a.out)
    print(f"{a.out}: {len(rows)} simulations")


if __name__ == "__main__":
    main()
