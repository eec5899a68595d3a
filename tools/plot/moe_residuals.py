#!/usr/bin/python3
"""The simulator's error on Megatron-Bridge's MoE runs, one bar per run, grouped by model (docs/moe.md).

    /usr/bin/python3 tools/plot/moe_residuals.py PER_RUN.csv OUT.png [--runs RUNS.csv]

PER_RUN.csv is `hetsim validate-sim --runs experiments/validation/megatron_bridge_moe_h100/runs.csv -o PER_RUN.csv`;
RUNS.csv (default: that runs file) gives each plan's model, container, EP degree, dispatcher and overlap. A bar's
label is the container and the parallel layout; hatched bars are the development half, plain the held-out one.
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import style  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RUNS = os.path.join(ROOT, "experiments", "validation", "megatron_bridge_moe_h100", "runs.csv")
COLORS = {"alltoall": "#4c72b0", "node_dedup": "#55a868"}


def read(path):
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("per_run")
    ap.add_argument("out")
    ap.add_argument("--runs", default=RUNS)
    a = ap.parse_args()
    runs = {r["plan"]: r for r in read(a.runs)}
    rows = []
    for r in read(a.per_run):
        run = runs.get(r["plan"])
        if run is None or not r.get("error"):
            continue
        rows.append((run["hetsim_model"], run["container"], run, r))
    if not rows:
        sys.exit(f"{a.per_run}: no run of {a.runs} with an error column")
    rows.sort(key=lambda x: (int(x[2]["gpus"]), x[0], x[1]))
    plt.rcParams.update(style.STYLE)
    fig, ax = plt.subplots(figsize=(10, 3.8))
    labels = []
    for i, (model, container, run, r) in enumerate(rows):
        err = 100 * float(r["error"])
        ax.bar(i, err, 0.7, color=COLORS.get(run["ep_dispatcher"], "#999999"),
               hatch="//" if r["half"] == "development" else None, edgecolor="white", linewidth=0.5)
        if run["ep_overlap"] == "true":
            ax.text(i, err - 1.5, "ov", ha="center", va="top", fontsize=7)
        layout = f"tp{run['tp']} pp{run['pp']} ep{run['ep']}" + (" drop" if run["tokendrop"] == "true" else "")
        labels.append(f"{model}\n{container} {layout}")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=70, ha="right", fontsize=6.5)
    ax.set_ylabel("simulated − measured (%)")
    mape = sum(abs(float(r["error"])) for *_, r in rows) / len(rows) * 100
    ax.set_title(f"Megatron-Bridge's MoE runs on DGX-H100: {len(rows)} runs, MAPE {mape:.1f}%\n"
                 "blue: NCCL all-to-all, green: DeepEP/HybridEP; hatched: development half; ov: all-to-all overlap",
                 fontsize=9)
    fig.tight_layout()
    style.save(fig, a.out)
    print(f"{a.out}: {len(rows)} runs")


if __name__ == "__main__":
    main()
