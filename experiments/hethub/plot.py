#!/usr/bin/python3
"""HetHub Fig. 6 and Fig. 7 from the three pair runs: tokens per GPU per second (with eq. 3's additive
homogeneous bound) and MFU, per pair: the two accelerators alone, the pair with uniform slicing, the pair with
HetHub's non-uniform split.

Usage: experiments/hethub/plot.py OUT_DIR_PAIR1 OUT_DIR_PAIR2 OUT_DIR_PAIR3 -o OUT.png
(each OUT_DIR is `hetsim run experiments/hethub/pairN.yaml -o OUT_DIR`). Prints the numbers it draws.
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

PAIRS = [("pair 1: NV + accel. #1", "NV", "accel. #1"), ("pair 2: AMD + accel. #2", "AMD", "accel. #2"),
         ("pair 3: AMD + accel. #3", "AMD", "accel. #3")]
PAPER = [  # §4.2.2-4.2.3: tokens/GPU/s (None: not given) and MFU %: A alone, B alone, uniform, HetHub
    ((None, None, None, None), (46.8, 58.7, 51.0, 51.0)),
    ((1478, 673, 748, 985), (38.0, 21.7, 21.1, 28.5)),
    ((1341, 887, 795, 1044), (None, 50.5, 32.3, 42.4)),
]


def load(path):
    rows = []
    with open(os.path.join(path, "results.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            rows.append(r)
    if len(rows) != 4:
        sys.exit("plot.py: %s/results.jsonl: expected 4 points, found %d" % (path, len(rows)))
    rows.sort(key=lambda r: r["point"])
    return [(r["metrics"]["tokens_per_gpu_s"], 100 * r["metrics"]["mfu"]) for r in rows]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs=3)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    plt.rcParams.update(style.STYLE)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    labels = None
    for i, (d, (title, na, nb)) in enumerate(zip(a.dirs, PAIRS)):
        vals = load(d)
        labels = [na + " alone", nb + " alone", "uniform slicing", "HetHub"]
        tgs = [v[0] for v in vals]
        mfu = [v[1] for v in vals]
        bound = (tgs[0] + tgs[1]) / 2  # eq. 3 with 8 + 8 GPUs
        colors = ["#9e9e9e", "#cfcfcf", "#7fa7d9", "#2f4b7c"]
        ax = axes[0][i]
        ax.bar(range(4), tgs, color=colors, edgecolor="black", linewidth=0.6)
        ax.axhline(bound, color="#c0392b", linestyle="--", linewidth=1)
        ax.text(-0.45, bound, "eq. 3 bound", color="#c0392b", ha="left", va="bottom", fontsize=8)
        for x in (2, 3):
            ax.text(x, tgs[x], "%.0f%%" % (100 * tgs[x] / bound), ha="center", va="bottom", fontsize=8)
        ax.set_title(title)
        ax.set_xticks(range(4))
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        if i == 0:
            ax.set_ylabel("tokens / GPU / s")
        ax2 = axes[1][i]
        ax2.bar(range(4), mfu, color=colors, edgecolor="black", linewidth=0.6)
        ax2.set_xticks(range(4))
        ax2.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        if i == 0:
            ax2.set_ylabel("MFU (%)")
        paper_tgs, paper_mfu = PAPER[i]
        print("%s: tokens/GPU/s %s (paper %s), bound %.0f, uniform %.1f%%, HetHub %.1f%% of it; MFU %s (paper %s)" % (
            title, ["%.0f" % v for v in tgs], list(paper_tgs), bound, 100 * tgs[2] / bound, 100 * tgs[3] / bound,
            ["%.1f" % v for v in mfu], list(paper_mfu)))
    fig.suptitle("HetHub Fig. 6 (top) and Fig. 7 (bottom): Llama2-7B, 8 + 8 accelerators, stand-ins calibrated alone")
    fig.tight_layout()
    style.save(fig, a.output)
    print("figure: " + a.output)


if __name__ == "__main__":
    main()
