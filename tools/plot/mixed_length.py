#!/usr/bin/env python3
"""Figures of `hetsim mixed-length` (Hetu v2 Fig. 15 and 16).

Top row: per-step time of every system, one panel per --steps CSV (e.g. context 32K and 16K), with each
system's mean in the legend. Bottom (when --assignments is given): the sequence lengths of one step
(the step with the longest sequence among the first --assignments file's heterogeneous steps, or --step),
coloured by the Hetu-B pipeline they were assigned to, and each pipeline's simulated time.

  mixed_length.py --steps a.csv [--steps b.csv] [--assignments a-assignments.csv] [--title T] -o f.png
"""
import argparse
import csv
import sys
from collections import OrderedDict, defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_steps(path):
    per = OrderedDict()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            per.setdefault(row["system"], []).append((int(row["step"]), float(row["time_s"])))
    return per


def read_assignments(path):
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", action="append", required=True, help="per-step CSV of hetsim mixed-length")
    ap.add_argument("--label", action="append", default=[], help="panel title per --steps (default: file)")
    ap.add_argument("--assignments", help="the -assignments.csv of the first --steps")
    ap.add_argument("--step", type=int, default=-1, help="the step of the assignment panel")
    ap.add_argument("--title", default="")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()

    assign = read_assignments(a.assignments) if a.assignments else []
    n_top = len(a.steps)
    rows = 2 if assign else 1
    fig, axes = plt.subplots(rows, n_top, figsize=(6.5 * n_top, 4.2 * rows), squeeze=False)
    for i, path in enumerate(a.steps):
        ax = axes[0][i]
        for system, pts in read_steps(path).items():
            xs = [p[0] + 1 for p in pts]
            ys = [p[1] for p in pts]
            ax.plot(xs, ys, lw=1.2, label=f"{system} (mean {sum(ys) / len(ys):.1f} s)")
        ax.set_xlabel("step")
        ax.set_ylabel("simulated step time (s)")
        ax.set_ylim(bottom=0)
        ax.set_title(a.label[i] if i < len(a.label) else path, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")

    if assign:
        system = assign[0]["system"]
        by_step = defaultdict(list)
        for r in assign:
            if r["system"] == system:
                by_step[int(r["step"])].append(r)
        step = a.step if a.step >= 0 else max(by_step, key=lambda s: max(int(r["length"]) for r in by_step[s]))
        seqs = sorted(by_step[step], key=lambda r: -int(r["length"]))
        pipes = sorted({int(r["pipeline"]) for r in seqs})
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        ax = axes[1][0]
        for p in pipes:
            idx = [i for i, r in enumerate(seqs) if int(r["pipeline"]) == p]
            ax.bar(idx, [int(seqs[i]["length"]) for i in idx], color=colors[p % len(colors)], width=1.0,
                   label=f"pipeline {p}" + (" (long-sequence)" if p == 0 else ""))
        under8k = sum(1 for r in seqs if int(r["length"]) < 8192) / len(seqs)
        ax.set_yscale("log")
        ax.set_xlabel(f"sequences of step {step + 1}, longest first ({len(seqs)} sequences, "
                      f"{100 * under8k:.0f}% under 8K)")
        ax.set_ylabel("length (tokens)")
        ax.set_title(f"{system}: {seqs[0]['strategy']}", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        if n_top > 1:
            ax = axes[1][1]
            times = {}
            tokens = defaultdict(int)
            for r in seqs:
                times[int(r["pipeline"])] = float(r["pipeline_time_s"])
                tokens[int(r["pipeline"])] += int(r["length"])
            ax.bar([f"p{p}" for p in pipes], [times[p] for p in pipes], color=[colors[p % len(colors)] for p in pipes])
            for j, p in enumerate(pipes):
                ax.text(j, times[p], f"{tokens[p] / 1000:.0f}K tok", ha="center", va="bottom", fontsize=8)
            ax.set_ylabel("pipeline's forward/backward time (s)")
            ax.set_title(f"step {step + 1}: the balancer's pipeline times", fontsize=10)
            ax.grid(alpha=0.3, axis="y")
            for extra in axes[1][2:]:
                extra.axis("off")
    if a.title:
        fig.suptitle(a.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
