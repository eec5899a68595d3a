#!/usr/bin/env python3
"""Fig. 14-style timeline of Hetu v2's §7.2 reproduction: per system, the step time (s) while training and the
down phases (detection, restart or graph specialisation, recovery) over the trace, from `hetsim run`'s replay
reports.

Usage: /usr/bin/python3 plot_elastic.py OUT_HOMOGENEOUS OUT_HETEROGENEOUS -o docs/img/hetu-elastic-fig14.png
(OUT_* are the results folders of `hetsim run experiments/hetu/elastic/{homogeneous,heterogeneous}.yaml -o ...`).
"""
import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"Hetu": "tab:red", "Megatron": "tab:blue", "DeepSpeed": "tab:green", "Oobleck": "tab:orange"}
STYLES = {"Oobleck": (0, (4, 3))}  # dashed: it overlaps Megatron where both run the same pipelines


def load(folder):
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "replays", "*.json"))):
        r = json.load(open(f))
        out[r.get("policy", os.path.basename(f))] = r
    return out


def panel(ax, reports, title, labels):
    for name, r in reports.items():
        c = COLORS.get(name, "gray")
        first = True
        for s in r["segments"]:
            t0, t1 = s["start_s"] / 60, s["end_s"] / 60
            if s["phase"] == "train":
                y = s.get("seconds_per_iteration", 0)
                ax.plot([t0, t1], [y, y], color=c, lw=2, ls=STYLES.get(name, "-"), label=name if first else None)
                first = False
            else:
                ax.axvspan(t0, t1, color=c, alpha=0.15)
    for t, text in labels:
        ax.axvline(t / 60, color="k", lw=0.6, ls=":")
        ax.text(t / 60, ax.get_ylim()[1] * 0.98, " " + text, va="top", fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("time (min)")
    ax.set_ylabel("step time (s), lower is better")
    ax.legend(fontsize=8, loc="lower right")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("homogeneous")
    ap.add_argument("heterogeneous")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    h = load(a.homogeneous)
    for ax, rep, title, labels in ((axes[0], h, "32B on H20s: C1 -> C2 -> C3", [(0, "C1"), (1800, "C2"), (3600, "C3")]),
                                   (axes[1], load(a.heterogeneous), "32B on H800+H20: C4 -> C7",
                                    [(0, "C4"), (1800, "C5"), (3600, "C6"), (5400, "C7")])):
        ymax = max((s.get("seconds_per_iteration", 0) for r in rep.values() for s in r["segments"]), default=1)
        ax.set_ylim(0, ymax * 1.25)
        panel(ax, rep, title, labels)
    fig.suptitle("Hetu v2 §7.2 (Fig. 14) in hetsim: step time per system; shaded: down phases", fontsize=10)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)


if __name__ == "__main__":
    main()
