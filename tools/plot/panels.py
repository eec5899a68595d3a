#!/usr/bin/python3
"""Grouped bars in side-by-side panels, one panel per value of a column (a paper figure with sub-plots, e.g.
AutoHet Fig. 10: one panel per scenario, models on x, one bar per policy).

Usage: tools/plot/panels.py RESULTS_DIR -o OUT.png --panel COL --x COL --y METRIC [--group COL] [--scale F]
                            [--xlabel TEXT] [--ylabel TEXT] [--title TEXT] [--panel-title VALUE=TEXT]...
                            [--ratio NUM/DEN] [--caption TEXT]

Reads RESULTS_DIR/results.jsonl (docs/results-format.md) like figures.py, with its style: one colour and hatch
per series (series_style), repeats averaged with error bars, failed points marked with a × at the base. The y
values are multiplied by --scale (e.g. 3600 turns a *_h metric into seconds). --ratio NUM/DEN writes, above each
x of each panel, the value of series NUM divided by that of series DEN ("4.3×"). Writes OUT (PNG at 150 dpi, or
PDF by the extension) and prints "panels: OUT (N panels)". Malformed input stops it with exit status 2 and one
line naming the file and the field, before anything is drawn.
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures  # noqa: E402
import style  # noqa: E402

PANEL_WIDTH_IN = 3.2


class PanelError(figures.InputError):
    pass


def check_column(rows, col, flag, results_path, metric=False):
    """Every column asked for must be in some row; the error suggests the nearest."""
    if any(r.has(col) for r in rows):
        return
    columns = sorted({c for r in rows for c in r.columns()})
    what = "metric" if metric else "column"
    raise PanelError(f"{results_path}: {flag} {col}: no row has the {what} \"{col}\""
                     f"{figures.hint(col, columns)}")


def parse_titles(items):
    titles = {}
    for item in items or []:
        if "=" not in item:
            raise PanelError(f"--panel-title {item!r}: expected VALUE=TEXT (e.g. autohet-fig10-a='A: preemption')")
        value, text = item.split("=", 1)
        titles[value] = text
    return titles


def load(args):
    """(panels in first-seen order: [(value, Table)], the series order) after every check."""
    results_path = os.path.join(args.results_dir, "results.jsonl")
    if not os.path.isdir(args.results_dir):
        raise PanelError(f"{args.results_dir}: no such directory")
    rows = figures.load_results(results_path)
    if not rows:
        raise PanelError(f"{results_path}: no rows")
    check_column(rows, args.panel, "--panel", results_path)
    check_column(rows, args.x, "--x", results_path)
    check_column(rows, args.group, "--group", results_path)
    if all(r.failed for r in rows):
        raise PanelError(f"{results_path}: every row failed; nothing to draw")
    check_column(rows, args.y, "--y", results_path, metric=True)
    panels = []
    for r in rows:
        v = figures.canon(r.get(args.panel))
        if r.has(args.panel) and v not in panels:
            panels.append(v)
    out, groups = [], []
    for value in panels:
        table = figures.aggregate(figures.filter_rows(rows, {args.panel: value}), args.x, args.group, [args.y],
                                  results_path=results_path)
        for g in table.groups:
            if g not in groups:
                groups.append(g)
        out.append((value, table))
    unknown = [v for v in parse_titles(args.panel_title) if v not in panels]
    if unknown:
        raise PanelError(f"--panel-title {unknown[0]}=…: no panel has that value"
                         f"{figures.hint(unknown[0], panels, 'panels')}")
    if args.ratio:
        if args.ratio.count("/") != 1:
            raise PanelError(f"--ratio {args.ratio}: expected NUM/DEN, two series names (e.g. Varuna/AutoHet)")
        for name in args.ratio.split("/"):
            if name not in groups:
                raise PanelError(f"--ratio {args.ratio}: no series \"{name}\" in --group {args.group}"
                                 f"{figures.hint(name, groups, 'series')}")
    return out, groups


def draw(args, panels, groups):
    titles = parse_titles(args.panel_title)
    num, den = args.ratio.split("/") if args.ratio else (None, None)
    with plt.rc_context(style.STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(PANEL_WIDTH_IN * len(panels), figures.PLOT_HEIGHT_IN + 1.6),
                                 layout="constrained", squeeze=False)
        n = len(groups)
        width = 0.8 / n
        any_failed = False
        for ax, (value, table) in zip(axes[0], panels):
            figures._grid(ax)
            ax.yaxis.set_major_formatter(FuncFormatter(figures.compact_number))
            top = 0.0
            for (x, g), c in table.cells.items():
                pos = table.xs.index(x) + (groups.index(g) - (n - 1) / 2) * width
                st = figures.series_style(g)
                if c.n(args.y) == 0:
                    if c.failed:
                        any_failed = True
                        figures._base_marks(ax, [pos])
                    continue
                mean = c.mean(args.y) * args.scale
                top = max(top, mean)
                ax.bar(pos, mean, width, facecolor=st["colour"], edgecolor=figures.EDGE, hatch=st["hatch"],
                       linewidth=0.6, zorder=2)
                if c.n(args.y) >= 2:
                    ax.errorbar(pos, mean, yerr=c.std(args.y) * args.scale, fmt="none", ecolor="black",
                                elinewidth=0.9, capsize=2.5, capthick=0.9, zorder=3)
            if num:
                for i, x in enumerate(table.xs):
                    a, b = table.cell(x, num), table.cell(x, den)
                    if a is None or b is None or a.n(args.y) == 0 or b.n(args.y) == 0 or b.mean(args.y) == 0:
                        continue
                    hi = max(a.mean(args.y), b.mean(args.y)) * args.scale
                    ax.annotate(f"{a.mean(args.y) / b.mean(args.y):.2f}×", (i, hi), xytext=(0, 3),
                                textcoords="offset points", ha="center", va="bottom", fontsize=figures.CAPTION_PT)
            ax.set_ylim(0, top * 1.15 if top > 0 else 1)
            ax.set_xticks(list(range(len(table.xs))), table.xs)
            ax.set_xlim(-0.6, len(table.xs) - 0.4)
            ax.set_title(titles.get(value, value), fontsize=style.STYLE["axes.titlesize"] - 1)
            ax.set_xlabel(args.xlabel or figures.column_label(args.x))
        axes[0][0].set_ylabel(args.ylabel or figures.column_label(args.y))
        handles = [Patch(facecolor=figures.series_style(g)["colour"], edgecolor=figures.EDGE,
                         hatch=figures.series_style(g)["hatch"], linewidth=0.6, label=g) for g in groups]
        if any_failed:
            handles.append(figures._fail_handle())
        # Above the middle panel's title (a figure legend would not make the constrained layout leave room).
        mid = axes[0][len(panels) // 2]
        mid.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5 if len(panels) % 2 else 0.0, 1.12),
                   ncol=len(handles), frameon=False, handlelength=1.8, handleheight=1.0, columnspacing=1.2)
        for ax in axes[0]:
            figures._rotate_if_crowded(ax, fig)
        figures._titles(fig, args.title, args.caption)
        style.save(fig, args.output)
        plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir", metavar="RESULTS_DIR")
    ap.add_argument("-o", "--output", required=True, help="the figure (.png or .pdf)")
    ap.add_argument("--panel", required=True, help="one panel per value of this column")
    ap.add_argument("--x", required=True, help="the column on each panel's x axis")
    ap.add_argument("--y", required=True, help="the metric drawn")
    ap.add_argument("--group", default="planner_label", help="one bar per value of this column (default planner_label)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the metric (e.g. 3600: hours to seconds)")
    ap.add_argument("--ylabel", default="")
    ap.add_argument("--xlabel", default="")
    ap.add_argument("--title", default="")
    ap.add_argument("--caption", default="")
    ap.add_argument("--panel-title", action="append", metavar="VALUE=TEXT", help="a panel's title (repeatable)")
    ap.add_argument("--ratio", default="", metavar="NUM/DEN", help="label each x with series NUM / series DEN")
    args = ap.parse_args(argv)
    try:
        if not (args.scale > 0):
            raise PanelError(f"--scale {args.scale}: must be a positive factor")
        if not args.output.lower().endswith((".png", ".pdf")):
            raise PanelError(f"-o {args.output}: the figure must be a .png or .pdf file")
        panels, groups = load(args)
    except figures.InputError as e:
        print(f"panels.py: error: {e}", file=sys.stderr)
        return 2
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        print(f"panels.py: error: -o {args.output}: the folder {out_dir} does not exist", file=sys.stderr)
        return 2
    draw(args, panels, groups)
    print(f"panels: {args.output} ({len(panels)} panels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
