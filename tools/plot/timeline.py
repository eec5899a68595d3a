#!/usr/bin/python3
"""Renders a hetsim Chrome-trace timeline (simulator or executor) as a Gantt chart (PNG/PDF).

Usage: tools/plot/timeline.py TIMELINE.json OUT.png [--max-tracks N] [--title TEXT]
One row per GPU, slices coloured by kind (forward, backward, tp, pp, dp, zero, optimizer).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "optimizer": "#8172B3",
    "tp": "#55A868",
    "pp": "#C44E52",
    "dp": "#937860",
    "zero": "#DA8BC3",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("out")
    ap.add_argument("--max-tracks", type=int, default=64)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    with open(args.timeline) as f:
        trace = json.load(f)
    names, slices = {}, {}
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            names[ev["tid"]] = ev["args"]["name"]
        elif ev.get("ph") == "X":
            slices.setdefault(ev["tid"], []).append(ev)
    tracks = sorted(set(names) | set(slices))[: args.max_tracks]
    if not tracks:
        sys.exit("timeline has no tracks")
    fig, ax = plt.subplots(figsize=(14, 0.35 * len(tracks) + 1.5))
    end = 0.0
    for row, tid in enumerate(tracks):
        for ev in slices.get(tid, []):
            start, dur = ev["ts"] / 1e6, ev["dur"] / 1e6
            end = max(end, start + dur)
            ax.broken_barh([(start, dur)], (row - 0.4, 0.8), facecolors=COLOURS.get(ev["cat"], "#999999"),
                           edgecolor="none")
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([names.get(t, str(t)) for t in tracks], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.01)
    ax.set_xlabel("time (s)")
    ax.set_title(args.title or args.timeline, fontsize=10)
    used = sorted({ev["cat"] for t in tracks for ev in slices.get(t, [])})
    ax.legend(handles=[Patch(color=COLOURS.get(c, "#999999"), label=c) for c in used], loc="upper center",
              bbox_to_anchor=(0.5, -0.12), ncol=len(used), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
