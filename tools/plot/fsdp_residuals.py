#!/usr/bin/python3
"""Draws the simulator's error on llm-foundry's FSDP runs by sequence length and by GPU count.

    /usr/bin/python3 tools/plot/fsdp_residuals.py PER_RUN.csv OUT.png [--runs RUNS.csv] [--compare OTHER.csv]
        [--labels "with,without"]

PER_RUN.csv is `hetsim validate-sim --runs experiments/validation/llmfoundry_a100_40gb_fsdp/runs.csv -o
PER_RUN.csv`; RUNS.csv (default: that runs file) gives each plan's model, sequence length and GPU count.
Left: error against sequence length on 8 GPUs, one line per model; right: error against GPU count at 2,048
tokens. --compare draws a second validate-sim file over the same runs in grey (e.g. another calibration).
"""
import argparse
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RUNS = os.path.join(ROOT, "experiments", "validation", "llmfoundry_a100_40gb_fsdp", "runs.csv")
ORDER = ["125m", "350m", "760m", "1b", "3b", "7b", "13b", "30b", "70b"]


def read(path):
    with open(path) as f:
        return list(csv.DictReader(l for l in f if not l.startswith("#")))


def errors(per_run):
    return {os.path.normpath(r["plan"]).split("plans" + os.sep)[-1]: 100 * float(r["error"]) for r in read(per_run)}


def series(runs, err, key, select):
    out = {}
    for r in runs:
        name = os.path.normpath(r["plan"]).split("plans" + os.sep)[-1]
        if name in err and select(r):
            out.setdefault(r["model"], []).append((int(r[key]), err[name]))
    return {m: sorted(v) for m, v in out.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("per_run")
    ap.add_argument("out")
    ap.add_argument("--runs", default=RUNS)
    ap.add_argument("--compare")
    ap.add_argument("--labels", default="")
    a = ap.parse_args()
    runs = read(a.runs)
    labels = a.labels.split(",") if a.labels else ["", ""]
    files = [(a.per_run, None)] + ([(a.compare, "0.7")] if a.compare else [])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    cmap = plt.get_cmap("viridis")
    panels = [("seq_len", lambda r: r["gpus"] == "8", "sequence length (tokens), 8 GPUs"),
              ("gpus", lambda r: r["seq_len"] == "2048", "GPUs (2,048 tokens)")]
    for ax, (key, select, xlabel) in zip(axes, panels):
        for i, (path, grey) in enumerate(files):
            by_model = series(runs, errors(path), key, select)
            for j, m in enumerate([m for m in ORDER if m in by_model]):
                xs, ys = zip(*by_model[m])
                colour = grey if grey else cmap(j / (len(ORDER) - 1))
                label = None
                if i == 0:
                    label = f"MPT-{m}"
                elif j == 0 and len(labels) > 1 and labels[1]:
                    label = labels[1]
                ax.plot(xs, ys, marker="o" if i == 0 else ".", color=colour, lw=1.2 if i == 0 else 0.8,
                        ls="-" if i == 0 else "--", label=label, zorder=3 - i)
        ax.axhline(0, color="black", lw=0.8)
        for band in (-10, 10):
            ax.axhline(band, color="0.6", lw=0.6, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("simulated − measured iteration time (%)")
    axes[1].legend(fontsize=8, ncol=2, loc="lower left")
    title = "llm-foundry MPT on A100-40GB with PyTorch FSDP (FULL_SHARD)"
    if labels[0]:
        title += f": {labels[0]}"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"fsdp residuals: {a.out}")


if __name__ == "__main__":
    main()
