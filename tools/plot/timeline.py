#!/usr/bin/python3
"""Renders a hetsim Chrome-trace timeline (simulator or executor) as a Gantt chart (PNG/PDF).

Usage: tools/plot/timeline.py TIMELINE.json OUT.png [--max-tracks N] [--title TEXT]
One row per GPU, slices coloured by kind (forward, backward, tp, pp, dp, zero, optimizer, cp: context
parallelism's ring and Ulysses' all-to-alls, ep: expert parallelism's dispatch and combine).

As a module: load(path) reads a trace, draw(ax, trace) draws it into a Matplotlib Axes and returns the
legend handles, render(trace_path, out_path, title, max_tracks) writes a whole figure (what the command
line does). tools/plot/figures.py uses draw() for its `timeline` figures.
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
    "cp": "#8C8C8C",
    "ep": "#CCB974",
}
OTHER = "#999999"


def load(trace_path):
    """The parsed Chrome trace at trace_path (a dict with "traceEvents")."""
    with open(trace_path) as f:
        trace = json.load(f)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError(f"{trace_path}: not a Chrome trace (no \"traceEvents\" list)")
    return trace


def tracks(trace, max_tracks=64):
    """(track ids, {tid: name}, {tid: [slice events]}), the first max_tracks tracks in tid order."""
    names, slices = {}, {}
    for ev in trace["traceEvents"]:
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            names[ev["tid"]] = ev["args"]["name"]
        elif ev.get("ph") == "X":
            slices.setdefault(ev["tid"], []).append(ev)
    return sorted(set(names) | set(slices))[:max_tracks], names, slices


def draw(ax, trace, max_tracks=64, fontsize=8):
    """Draws the Gantt chart into ax; returns the legend handles (one Patch per slice kind used).

    Raises ValueError when the trace has no tracks."""
    ids, names, slices = tracks(trace, max_tracks)
    if not ids:
        raise ValueError("timeline has no tracks")
    end = 0.0
    for row, tid in enumerate(ids):
        for ev in slices.get(tid, []):
            start, dur = ev["ts"] / 1e6, ev["dur"] / 1e6
            end = max(end, start + dur)
            ax.broken_barh([(start, dur)], (row - 0.4, 0.8), facecolors=COLOURS.get(ev["cat"], OTHER),
                           edgecolor="none")
    ax.set_yticks(range(len(ids)))
    ax.set_yticklabels([names.get(t, str(t)) for t in ids], fontsize=fontsize)
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.01)
    ax.set_xlabel("time (s)")
    used = sorted({ev["cat"] for t in ids for ev in slices.get(t, [])})
    return [Patch(color=COLOURS.get(c, OTHER), label=c) for c in used]


def render(trace_path, out_path, title="", max_tracks=64, dpi=110):
    """Writes the Gantt chart of the trace at trace_path to out_path (format from its extension)."""
    trace = load(trace_path)
    n = len(tracks(trace, max_tracks)[0])
    height = 0.35 * n + 1.8
    fig, ax = plt.subplots(figsize=(14, height))
    try:
        handles = draw(ax, trace, max_tracks)
        ax.set_title(title or trace_path, fontsize=10)
        # The legend gets its own strip at the bottom of the figure, below the x-axis label, whatever the
        # number of tracks.
        fig.legend(handles=handles, loc="lower center", ncol=max(1, len(handles)), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.35 / height, 1, 1))
        fig.savefig(out_path, dpi=dpi, **({"metadata": {"CreationDate": None}} if out_path.lower().endswith(".pdf")
                                          else {"metadata": {"Software": "hetsim"}}))
    finally:
        plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline")
    ap.add_argument("out")
    ap.add_argument("--max-tracks", type=int, default=64)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    try:
        render(args.timeline, args.out, args.title, args.max_tracks)
    except ValueError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
