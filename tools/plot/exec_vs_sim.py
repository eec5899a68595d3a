#!/usr/bin/env python3
"""Executed vs simulated iteration time per plan, split by operation class (hetsim validate-sim --executor).

Usage: /usr/bin/python3 tools/plot/exec_vs_sim.py exec_vs_sim.csv out.png

For each plan two stacked bars (left: hetsim-exec, right: the simulator) of the mean time per device in
compute, TP, PP, CP (ring, all-to-alls) and DP communication and idle; the simulator's error on the iteration time above them.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CLASSES = [("compute", "#4c72b0"), ("tp", "#dd8452"), ("pp", "#55a868"), ("cp", "#8172b3"), ("dp", "#c44e52"),
           ("idle", "#bbbbbb")]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(sys.argv[1])))
    if not rows:
        sys.exit(f"{sys.argv[1]}: no plans")
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows) + 2), 4.5))
    width = 0.38
    for i, r in enumerate(rows):
        for side, off in (("exec", -width / 2), ("sim", width / 2)):
            bottom = 0
            for name, color in CLASSES:
                v = float(r[f"{side}_{name}_s"]) * 1e3
                ax.bar(i + off, v, width, bottom=bottom, color=color, edgecolor="white", linewidth=0.5,
                       hatch="//" if side == "sim" else None, label=name if i == 0 and side == "exec" else None)
                bottom += v
        top = max(float(r["executed_s"]), float(r["simulated_s"])) * 1e3
        ax.text(i, top * 1.02, f"{float(r['error']) * 100:+.1f}%", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["plan"] for r in rows], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("time per iteration, mean over devices (ms)")
    ax.set_title("hetsim-exec (left, plain) vs simulator (right, hatched)\nerror of the simulated iteration above")
    ax.title.set_fontsize(10)
    ax.legend(fontsize=8, ncol=len(CLASSES), loc="lower center", bbox_to_anchor=(0.5, -0.42))
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=130, metadata={"Software": "hetsim"})


if __name__ == "__main__":
    main()
