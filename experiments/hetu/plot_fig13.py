#!/usr/bin/python3
"""Hetu v2 Figure 13 (§7.1): time per step of the 32B and 70B models on each cluster, per system — the
planners' own strategies (fig13.yaml: Hetu, HexiScale, Megatron tuned, DeepSpeed tuned) next to the
strategies the paper ran (paper_strategies.yaml: Hetu's Table 5, Megatron's and DeepSpeed's Table 4).

Usage: experiments/hetu/plot_fig13.py FIG13_DIR PAPER_DIR -o OUT.png
(FIG13_DIR from `hetsim run experiments/hetu/fig13.yaml -o FIG13_DIR`, PAPER_DIR from
`hetsim run experiments/hetu/paper_strategies.yaml -o PAPER_DIR`). Prints the numbers it draws.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "plot"))
import style  # noqa: E402

CLUSTERS = [("hetu-h800x16", "16 H800"), ("hetu-h20x16", "16 H20"), ("hetu-h800x16-h20x16", "16 H800\n+16 H20"),
            ("hetu-h800x16-h20x24", "16 H800\n+24 H20"), ("hetu-h800x16-h20x32", "16 H800\n+32 H20")]
MODELS = [("llama-32b-4k", "32B"), ("llama2-70b", "70B")]
# (legend, source, label prefix in the results, colour, hatch)
SYSTEMS = [
    ("Hetu (hetsim's hetu planner)", "fig13", "Hetu", "#1b7837", ""),
    ("Hetu (paper's Table 5)", "paper", "Hetu (Table 5)", "#7fbf7b", "//"),
    ("HexiScale (planner)", "fig13", "HexiScale", "#762a83", ""),
    ("Megatron (tuned)", "fig13", "Megatron", "#2166ac", ""),
    ("Megatron (paper's Table 4)", "paper", "Megatron (Table 4)", "#92c5de", "//"),
    ("DeepSpeed (tuned)", "fig13", "DeepSpeed", "#b2182b", ""),
    ("DeepSpeed (paper's Table 4)", "paper", "DeepSpeed (Table 4)", "#f4a582", "//"),
]


def load(path):
    with open(os.path.join(path, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def value(rows, cluster, model, label):
    for r in rows:
        i = r["inputs"]
        if i["cluster"] == cluster and i["model"] == model and (i["planner_label"] == label or
                                                                  i["planner_label"].startswith(label + " ")):
            return r["metrics"]["iteration_time_s"] if r["status"] == "ok" else None
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fig13")
    ap.add_argument("paper")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    rows = {"fig13": load(a.fig13), "paper": load(a.paper)}
    plt.rcParams.update(style.STYLE)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / len(SYSTEMS)
    for ax, (model, mname) in zip(axes, MODELS):
        print("%s: %s" % (mname, " | ".join(s[0] for s in SYSTEMS)))
        for k, (legend, src, label, colour, hatch) in enumerate(SYSTEMS):
            xs, ys = [], []
            for c, (cluster, _) in enumerate(CLUSTERS):
                v = value(rows[src], cluster, model, label)
                if v is not None:
                    xs.append(c - 0.4 + (k + 0.5) * width)
                    ys.append(v)
            ax.bar(xs, ys, width, color=colour, hatch=hatch, edgecolor="white" if not hatch else "#555555",
                   linewidth=0.4, label=legend)
        for cluster, cname in CLUSTERS:
            vals = ["%.2f" % v if v is not None else "-" for v in
                    (value(rows[s[1]], cluster, model, s[2]) for s in SYSTEMS)]
            print("  %-22s %s" % (cname.replace("\n", " "), "  ".join(vals)))
        ax.set_xticks(range(len(CLUSTERS)))
        ax.set_xticklabels([c[1] for c in CLUSTERS])
        ax.set_ylabel("time per step (s)")
        ax.set_title("Llama %s, context 4K, global batch 64" % mname)
        ax.grid(axis="y", linewidth=0.3, alpha=0.6)
    axes[1].set_xlabel("Tables 4-5 list no 70B strategy on 16 GPUs; HexiScale finds no 70B plan on 16 H800",
                       fontsize=8, color="#555555")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle("Hetu v2 Fig. 13 in hetsim: simulated time per step (lower is better)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    style.save(fig, a.output)
    print("wrote", a.output)


if __name__ == "__main__":
    main()
