#!/usr/bin/python3
"""Draws the figures of a hetsim experiment (RESULTS_DIR/figures.json over RESULTS_DIR/results.jsonl).

Usage: tools/plot/figures.py RESULTS_DIR [--only NAME]...
Writes RESULTS_DIR/figures/NAME.png (150 dpi) and NAME.pdf for every figure (or only the named ones) and
prints one line per figure written (a `replay` figure draws the replay reports it lists through replay.py,
not results.jsonl rows). The input contract is docs/results-format.md; the style (one fixed
colour, hatch and marker per planner, error bars over repeats, failed/OOM marks) is in tools/plot/README.md.
Exits with status 2 and a message naming the file and field when the inputs are malformed.

The work is split along its concerns: figures_input.py loads, checks and aggregates the inputs, figures_style.py
holds the series' colours and the labels, figures_draw.py draws each figure kind. Their names stay importable from
this module (panels.py, advise.py and test_figures.py use them as figures.NAME).
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402
import style  # noqa: E402
from figures_draw import (_base_marks, _fail_handle, _grid, _rotate_if_crowded, _titles, draw_bars,  # noqa: E402
                          draw_line, draw_stacked, draw_timeline, x_positions)
from figures_input import (KINDS, KNOWN_METRICS, NO_ROWS, PLANNER_COLUMNS, TOP_LEVEL, Cell, InputError,  # noqa: E402
                           Row, Table, aggregate, as_number, canon, filter_rows, hint, load_results, load_spec,
                           normalise_figure, resolve, scale_of)
from figures_style import (CAPTION_PT, EDGE, FAIL_COLOUR, FALLBACK_COLOURS, HATCHES, MARKERS,  # noqa: E402
                           METRIC_LABELS, OOM_HATCH, OTHER_HATCHES, OTHER_LINESTYLES, OTHER_MARKERS, PLANNERS,
                           PLOT_HEIGHT_IN, SEGMENTS, STYLE, UNIT_SUFFIXES, column_label, compact_number, fit_width,
                           fmt_x, planner_index, segment_style, series_style, short_label, stack_label)

# The module's API: what the three modules above hold, as it was before the split (panels.py, advise.py and
# test_figures.py use it), and this module's own.
__all__ = [
    # figures_input.py
    "KINDS", "NO_ROWS", "TOP_LEVEL", "KNOWN_METRICS", "PLANNER_COLUMNS", "InputError", "Row", "load_results",
    "load_spec", "normalise_figure", "hint", "canon", "as_number", "scale_of", "filter_rows", "resolve", "Cell",
    "Table", "aggregate",
    # figures_style.py
    "PLANNERS", "FALLBACK_COLOURS", "HATCHES", "OTHER_HATCHES", "OTHER_LINESTYLES", "OTHER_MARKERS", "MARKERS",
    "EDGE", "FAIL_COLOUR", "OOM_HATCH", "SEGMENTS", "METRIC_LABELS", "UNIT_SUFFIXES", "STYLE", "CAPTION_PT",
    "PLOT_HEIGHT_IN", "planner_index", "series_style", "segment_style", "column_label", "short_label",
    "stack_label", "compact_number", "fmt_x", "fit_width",
    # figures_draw.py (and the axes helpers panels.py draws with)
    "draw_bars", "x_positions", "draw_line", "draw_stacked", "draw_timeline", "_grid", "_base_marks",
    "_fail_handle", "_rotate_if_crowded", "_titles",
    # this module
    "render", "main",
]


def render(fig_spec, rows, out_dir, caption="", results_path="results.jsonl"):
    """Draws one resolved figure (see resolve()) and writes NAME.png and NAME.pdf into out_dir."""
    with plt.rc_context(STYLE):
        kind = fig_spec["kind"]
        if kind == "replay":  # replay.draw() makes its own figure, one file at a time
            os.makedirs(out_dir, exist_ok=True)
            png = os.path.join(out_dir, fig_spec["name"] + ".png")
            pdf = os.path.join(out_dir, fig_spec["name"] + ".pdf")
            for msg in replay.accounting_warnings(fig_spec["reports"]):
                print(f"figures.py: {fig_spec['name']}: {msg}", file=sys.stderr)
            for path in (png, pdf):
                replay.draw(fig_spec["reports"], path, fig_spec["title"] or None, caption or None)
            return png, pdf
        if kind == "timeline":
            fig = draw_timeline(fig_spec, caption)
        else:
            metrics = fig_spec["y_stack"] if kind == "stacked" else [fig_spec["y"]]
            table = aggregate(rows, fig_spec["x"], fig_spec["group"], metrics, stacked=kind == "stacked",
                              results_path=results_path)
            if table.skipped:
                print(f"figures.py: {fig_spec['name']}: {table.skipped} rows have no \"{fig_spec['x']}\"; left out",
                      file=sys.stderr)
            for c in table.cells.values():
                if c.failed and not c.all_failed:
                    ok = c.rows - c.failed
                    print(f"figures.py: {fig_spec['name']}: {fig_spec['x']}={c.x}, {fig_spec['group'] or 'series'}"
                          f"={c.group}: {c.failed} of {c.rows} rows failed; plotting the {ok} that succeeded",
                          file=sys.stderr)
            draw = {"bar": draw_bars, "grouped_bar": draw_bars, "line": draw_line, "stacked": draw_stacked}[kind]
            fig = draw(fig_spec, table, caption)
        try:
            os.makedirs(out_dir, exist_ok=True)
            png = os.path.join(out_dir, fig_spec["name"] + ".png")
            pdf = os.path.join(out_dir, fig_spec["name"] + ".pdf")
            style.save(fig, png)
            style.save(fig, pdf)
        finally:
            plt.close(fig)
    return png, pdf


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results_dir", metavar="RESULTS_DIR")
    ap.add_argument("--only", action="append", metavar="NAME", help="draw only this figure (repeatable)")
    args = ap.parse_args(argv)
    results_dir = args.results_dir
    try:
        if not os.path.isdir(results_dir):
            raise InputError(f"{results_dir}: no such directory")
        spec_path = os.path.join(results_dir, "figures.json")
        results_path = os.path.join(results_dir, "results.jsonl")
        spec, figures = load_spec(spec_path)
        if args.only:
            names = [f["name"] for f in figures]
            for name in args.only:
                if name not in names:
                    raise InputError(f"--only {name}: {spec_path} has no figure named \"{name}\""
                                     f"{hint(name, names, 'figures')}")
            figures = [f for f in figures if f["name"] in args.only]
        needs_rows = any(f["kind"] not in NO_ROWS for f in figures)
        rows = load_results(results_path) if needs_rows else []
        resolved = [resolve(f, rows, results_dir, results_path) for f in figures]  # all checked before drawing
    except InputError as e:
        print(f"figures.py: error: {e}", file=sys.stderr)
        return 2
    out_dir = os.path.join(results_dir, "figures")
    for fig_spec, fig_rows in resolved:
        if fig_spec["kind"] == "timeline" and fig_spec["trace"] is None:
            print(f"figures.py: {fig_spec['name']}: skipped: its \"timeline\" field is empty (the runner writes "
                  "no trace for a point that failed)", file=sys.stderr)
            continue
        if fig_spec["kind"] == "replay" and fig_spec["reports"] is None:
            print(f"figures.py: {fig_spec['name']}: skipped: its \"replays\" field is empty (no point its filter "
                  "selects has a replay report: they failed, or the filter matches none)", file=sys.stderr)
            continue
        try:
            png, pdf = render(fig_spec, fig_rows, out_dir, spec.get("caption", ""), results_path)
        except InputError as e:
            print(f"figures.py: error: {e}", file=sys.stderr)
            return 2
        print(f"{fig_spec['name']} ({fig_spec['kind']}): {png} {pdf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
