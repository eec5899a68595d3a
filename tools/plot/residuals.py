#!/usr/bin/python3
"""Draws the residuals of `hetsim validate-sim -o RUNS.csv`: the simulator's relative error per run against
the measured time, and by TP, micro-batch and model width, so that a trend (a missing effect) is seen at a
glance rather than read from a table.

Usage: tools/plot/residuals.py RUNS.csv OUT.png [--title TEXT]   (also writes OUT.pdf); runs over several
           nodes (a `nodes` column above 1) add a row: the residual in ms against the simulated exposed
           communication, and the error by DP width, PP depth and node count
       tools/plot/residuals.py RUNS.csv OUT.png --per-run [--compare OTHER.csv] [--labels A,B]
           one point per run against its GPU count, labelled TP·PP·DP, for small sets such as Megatron-LM's
           Table 1 (experiments/validation/megatron_sc21_table1.csv); --compare adds a second calibration's
           errors on the same runs.
       tools/plot/residuals.py RUNS.csv OUT.png   with a plan-file runs CSV (validate-sim of a CSV with a `plan`
           column, e.g. experiments/validation/sailor_gh200_opt350/runs.csv): iteration-time, gradient-sync and
           peak-memory errors by DP width, PP depth, node count and micro-batch size (one row each).
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if rows and "memory_error" in rows[0]:
        return rows
    needed = {"measured_ms", "simulated_ms", "error", "tp", "micro_batch", "hidden", "half"}
    if not rows or not needed.issubset(rows[0].keys()):
        raise ValueError(f"{path}: not a `hetsim validate-sim -o` file (columns {sorted(needed)})")
    return rows


def mape(values):
    return 100 * sum(abs(v) for v in values) / len(values) if values else 0.0


def boxes_by(axes, rows, keys, labels):
    """One box plot of the error per value of each key, on its own axes."""
    for ax, key, label in zip(axes, keys, labels):
        groups = sorted({int(r[key]) for r in rows})
        data = [[100 * float(r["error"]) for r in rows if int(r[key]) == g] for g in groups]
        ax.boxplot(data, showfliers=False)
        ax.set_xticks(range(1, len(groups) + 1), [str(g) for g in groups])
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel(label)


def render(rows, out, title):
    multi = any(int(r.get("nodes", "1") or 1) > 1 for r in rows)
    if multi:
        fig, grid = plt.subplots(2, 4, figsize=(16, 8.4), gridspec_kw={"width_ratios": [2, 1, 1, 1]})
        axes = grid[0]
    else:
        fig, axes = plt.subplots(1, 4, figsize=(16, 4.2), gridspec_kw={"width_ratios": [2, 1, 1, 1]})
    ax = axes[0]
    for half, colour in (("development", "#4C72B0"), ("held_out", "#DD8452")):
        part = [r for r in rows if r["half"] == half]
        ax.scatter([float(r["measured_ms"]) for r in part], [100 * float(r["error"]) for r in part], s=8,
                   alpha=0.6, color=colour,
                   label=f"{half.replace('_', '-')} (MAPE {mape([float(r['error']) for r in part]):.1f}%)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("simulated − measured (%)")
    ax.legend(frameon=False, fontsize=9)
    boxes_by(axes[1:], rows, ("tp", "micro_batch", "hidden"), ("TP degree", "micro-batch", "hidden size"))
    if multi:
        # Runs over several nodes: what the residual (in ms) does against the simulated exposed communication
        # of the first device, and the error by DP width, PP depth and node count.
        ax = grid[1][0]
        comm = [sum(float(r.get(k, 0) or 0) for k in ("tp_ms", "pp_ms", "dp_ms")) for r in rows]
        resid = [float(r["measured_ms"]) - float(r["simulated_ms"]) for r in rows]
        tps = sorted({int(r["tp"]) for r in rows})
        for tp in tps:
            idx = [i for i, r in enumerate(rows) if int(r["tp"]) == tp]
            ax.scatter([comm[i] for i in idx], [resid[i] for i in idx], s=10, alpha=0.7, label=f"TP {tp}")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("simulated exposed TP + PP + DP communication (ms, first device)")
        ax.set_ylabel("measured − simulated (ms)")
        ax.legend(frameon=False, fontsize=8, ncol=2)
        boxes_by(grid[1][1:], rows, ("dp", "pp", "nodes"), ("DP width", "PP depth", "nodes"))
    fig.suptitle(title, fontweight="bold")
    fig.tight_layout()
    fig.savefig(out, dpi=120, metadata={"Software": "hetsim"})
    fig.savefig(out.rsplit(".", 1)[0] + ".pdf", metadata={"CreationDate": None, "Producer": "hetsim"})


def render_plan_runs(rows, out, title):
    """Rows: iteration time, gradient sync, peak memory; columns: DP width, PP depth, nodes, and the
    micro-batch size where the runs give it."""
    metrics = [("error", "iteration time"), ("grad_sync_error", "gradient sync"), ("memory_error", "peak memory")]
    # Only the measures the runs give (a set with times alone draws one row, not two empty ones).
    metrics = [m for m in metrics if m[0] == "error" or any(r.get(m[0], "") != "" for r in rows)]
    keys = [("dp", "DP width"), ("pp", "PP depth"), ("nodes", "nodes")]
    if any(r.get("micro_batch", "") != "" for r in rows):
        keys.append(("micro_batch", "micro-batch size"))
    fig, axes = plt.subplots(len(metrics), len(keys), figsize=(4 * len(keys), 3 * len(metrics)), sharey="row",
                             squeeze=False)
    for i, (metric, mlabel) in enumerate(metrics):
        have = [r for r in rows if r.get(metric, "") != ""]
        for j, (key, klabel) in enumerate(keys):
            ax = axes[i][j]
            for half, colour, marker in (("development", "#4C72B0", "o"), ("held_out", "#DD8452", "s")):
                part = [r for r in have if r["half"] == half and r.get(key, "") != ""]
                ax.scatter([float(r[key]) for r in part], [100 * float(r[metric]) for r in part], color=colour,
                           marker=marker, s=22, alpha=0.8, label=half.replace("_", "-"))
            values = sorted({float(r[key]) for r in have if r.get(key, "") != ""})
            if len(values) > 2 and values[0] > 0:
                ax.set_xscale("log", base=2)
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.axhline(0, color="black", linewidth=0.8)
            if i == len(metrics) - 1:
                ax.set_xlabel(klabel)
            if j == 0:
                ax.set_ylabel(f"{mlabel}: sim − measured (%)\nMAPE {mape([float(r[metric]) for r in have]):.1f}%")
    axes[0][0].legend(frameon=False, fontsize=8)
    fig.suptitle(title, fontweight="bold")
    fig.tight_layout()
    fig.savefig(out, dpi=120, metadata={"Software": "hetsim"})
    fig.savefig(out.rsplit(".", 1)[0] + ".pdf", metadata={"CreationDate": None, "Producer": "hetsim"})


def render_per_run(series, out, title):
    fig, ax = plt.subplots(figsize=(8, 4.2))
    markers = ("o", "s", "^", "D")
    for i, (label, rows) in enumerate(series):
        gpus = [int(r["gpus"]) for r in rows]
        errors = [100 * float(r["error"]) for r in rows]
        ax.plot(gpus, errors, marker=markers[i % len(markers)], linewidth=1,
                label=f"{label} (MAPE {mape([e / 100 for e in errors]):.1f}%)")
        if i == 0:
            for r, x, y in zip(rows, gpus, errors):
                ax.annotate(f"{r['tp']}·{r['pp']}·{r['dp']}", (x, y), textcoords="offset points", xytext=(0, 7),
                            ha="center", fontsize=7)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs (labels: TP·PP·DP)")
    ax.set_ylabel("simulated − measured (%)")
    ax.legend(frameon=False, fontsize=9)
    ax.set_title(title, fontweight="bold")
    fig.tight_layout()
    fig.savefig(out, dpi=120, metadata={"Software": "hetsim"})
    fig.savefig(out.rsplit(".", 1)[0] + ".pdf", metadata={"CreationDate": None, "Producer": "hetsim"})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs")
    p.add_argument("out")
    p.add_argument("--title", default="Simulator error on measured runs")
    p.add_argument("--per-run", action="store_true", help="one point per run against its GPU count")
    p.add_argument("--compare", help="--per-run: a second validate-sim -o file over the same runs")
    p.add_argument("--labels", default="", help="--per-run: comma-separated series labels")
    a = p.parse_args()
    try:
        if a.per_run:
            files = [a.runs] + ([a.compare] if a.compare else [])
            labels = [x for x in a.labels.split(",") if x] or files
            if len(labels) != len(files):
                raise ValueError(f"--labels: {len(labels)} labels for {len(files)} files")
            render_per_run([(label, load(f)) for label, f in zip(labels, files)], a.out, a.title)
        else:
            rows = load(a.runs)
            if "memory_error" in rows[0]:
                render_plan_runs(rows, a.out, a.title)
            else:
                render(rows, a.out, a.title)
    except (OSError, ValueError) as e:
        print(f"residuals.py: {e}", file=sys.stderr)
        return 1
    print(f"residuals: {a.out} {a.out.rsplit('.', 1)[0]}.pdf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
