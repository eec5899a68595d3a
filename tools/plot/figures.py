#!/usr/bin/python3
"""Draws the figures of a hetsim experiment (RESULTS_DIR/figures.json over RESULTS_DIR/results.jsonl).

Usage: tools/plot/figures.py RESULTS_DIR [--only NAME]...
Writes RESULTS_DIR/figures/NAME.png (150 dpi) and NAME.pdf for every figure (or only the named ones) and
prints one line per figure written (a `replay` figure draws the replay reports it lists through replay.py,
not results.jsonl rows). The input contract is docs/results-format.md; the style (one fixed
colour, hatch and marker per planner, error bars over repeats, failed/OOM marks) is in tools/plot/README.md.
Exits with status 2 and a message naming the file and field when the inputs are malformed.
"""
import argparse
import difflib
import json
import math
import os
import re
import statistics
import sys
import textwrap
import zlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay  # noqa: E402
import style  # noqa: E402
import timeline  # noqa: E402

KINDS = ("bar", "grouped_bar", "line", "stacked", "timeline", "replay")
NO_ROWS = ("timeline", "replay")  # kinds drawn from their own files, not from results.jsonl
TOP_LEVEL = ("point", "id", "status", "reason")
# The metrics the contract names; a figure may ask for one even when every row failed (so none has metrics).
KNOWN_METRICS = ("iteration_time_s", "tokens_per_s", "mfu", "bubble_fraction", "time_compute_s", "time_tp_s",
                 "time_pp_s", "time_dp_s", "time_idle_s", "peak_memory_gib", "any_oom", "estimated_iteration_s",
                 "plan_search_s", "candidates", "pipelines", "stages_max", "sim_wall_s")
PLANNER_COLUMNS = ("planner_label", "planner")

# --- style -------------------------------------------------------------------------------------------------

# Known planners: (aliases after normalisation, colour). The index also picks the hatch and the marker, so a
# planner looks the same in every figure of every experiment.
PLANNERS = (
    (("megatron", "megatronlm"), "#1f77b4"),
    (("deepspeed",), "#ff7f0e"),
    (("fsdp",), "#2ca02c"),
    (("galvatron",), "#d62728"),
    (("whale",), "#9467bd"),
    (("alpa",), "#8c564b"),
    (("amp",), "#e377c2"),
    (("exhaustive",), "#7f7f7f"),
    (("metis",), "#bcbd22"),
    (("hexiscale",), "#17becf"),
    (("autohet",), "#393b79"),
    (("hethub",), "#637939"),
    (("hetu",), "#b5882c"),
    (("varuna",), "#843c39"),
    (("oobleck",), "#7b4173"),
)
# Paul Tol's colour-blind-safe "muted" scheme, for series that are not a known planner.
FALLBACK_COLOURS = ("#CC6677", "#332288", "#DDCC77", "#117733", "#88CCEE", "#882255", "#44AA99", "#999933",
                    "#AA4499")
HATCHES = ("", "///", "\\\\\\", "...", "xxx", "---", "+++", "ooo", "|||", "//..", "\\\\..", "xx..", "--..", "||..",
           "++..")
# Series that are not a known planner: hatches no known planner uses, and dashed lines.
OTHER_HATCHES = ("**", "OO", "/|", "\\|", "-/", "+/", "x-", "o-", "*-")
OTHER_LINESTYLES = ("--", "-.", ":")
OTHER_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p", "d", "8", "H")
EDGE = "#333333"
FAIL_COLOUR = "#222222"
OOM_HATCH = "////"

# Stacked-bar segments: fixed colour and hatch per metric (the colours match the timeline renderer's kinds).
SEGMENTS = {
    "time_compute_s": ("compute", timeline.COLOURS["forward"], ""),
    "time_forward_s": ("forward", timeline.COLOURS["forward"], ""),
    "time_backward_s": ("backward", timeline.COLOURS["backward"], ""),
    "time_tp_s": ("TP comm.", timeline.COLOURS["tp"], "///"),
    "time_pp_s": ("PP comm.", timeline.COLOURS["pp"], "\\\\\\"),
    "time_dp_s": ("DP comm.", timeline.COLOURS["dp"], "..."),
    "time_zero_s": ("ZeRO comm.", timeline.COLOURS["zero"], "xxx"),
    "time_optimizer_s": ("optimizer", timeline.COLOURS["optimizer"], "---"),
    "time_idle_s": ("idle", "#D3D3D3", ""),
}

METRIC_LABELS = {
    "tokens_per_s": "throughput (tokens/s)",
    "iteration_time_s": "iteration time (s)",
    "mfu": "MFU (%)",
    "bubble_fraction": "pipeline bubble (%)",
    "peak_memory_gib": "peak memory (GiB)",
    "estimated_iteration_s": "estimated iteration time (s)",
    "plan_search_s": "plan search time (s)",
    "sim_wall_s": "simulation wall time (s)",
    "candidates": "candidate plans",
    "pipelines": "pipelines",
    "stages_max": "pipeline stages (max.)",
    "planner_label": "planner",
    "planner": "planner",
    "global_batch_size": "global batch size (sequences)",
    "seq_len": "sequence length (tokens)",
    "gpus": "GPUs",
}
UNIT_SUFFIXES = (("_per_s", "/s"), ("_gib", "GiB"), ("_gb", "GB"), ("_gbps", "Gbit/s"), ("_ms", "ms"),
                 ("_us", "µs"), ("_s", "s"), ("_fraction", "%"), ("_pct", "%"), ("_w", "W"))

STYLE = style.STYLE
CAPTION_PT = 9
PLOT_HEIGHT_IN = 2.5  # the height of the plotting area; the figure grows around it


class InputError(Exception):
    """Malformed inputs; the message names the file and the field."""


# --- inputs ------------------------------------------------------------------------------------------------


class Row:
    """One line of results.jsonl."""

    def __init__(self, raw, line=0):
        self.raw, self.line = raw, line
        self.inputs = raw.get("inputs") or {}
        self.metrics = raw.get("metrics") or {}
        self.status = str(raw.get("status", "ok"))
        self.failed = self.status != "ok"
        # hetsim run marks an OOM point failed ("out of memory: …") but keeps its metrics: it is drawn as OOM.
        self.oom = bool(self.metrics.get("any_oom"))

    def columns(self):
        return list(self.inputs) + list(self.metrics) + [k for k in TOP_LEVEL if k in self.raw]

    def has(self, col):
        return col in self.inputs or col in self.metrics or col in TOP_LEVEL and col in self.raw

    def get(self, col, default=None):
        for d in (self.inputs, self.metrics):
            if col in d:
                return d[col]
        if col in TOP_LEVEL:
            return self.raw.get(col, default)
        return default


def load_results(path):
    if not os.path.isfile(path):
        raise InputError(f"{path}: missing (hetsim run writes it; is RESULTS_DIR the run's output directory?)")
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: invalid JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(raw, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(raw).__name__}")
            for field in ("inputs", "metrics"):
                if raw.get(field) is not None and not isinstance(raw[field], dict):
                    raise InputError(f"{path}:{lineno}: field \"{field}\" must be an object")
            rows.append(Row(raw, lineno))
    return rows


def load_spec(path):
    if not os.path.isfile(path):
        raise InputError(f"{path}: missing (hetsim run writes it next to results.jsonl)")
    with open(path, encoding="utf-8") as f:
        try:
            spec = json.load(f)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{e.lineno}: invalid JSON ({e.msg}, column {e.colno})") from None
    if not isinstance(spec, dict):
        raise InputError(f"{path}: expected a JSON object with a \"figures\" list")
    if not isinstance(spec.get("figures"), list):
        raise InputError(f"{path}: field \"figures\" is missing or not a list")
    if not isinstance(spec.get("caption", ""), str):
        raise InputError(f"{path}: field \"caption\" must be a string")
    figures, seen = [], set()
    for i, raw in enumerate(spec["figures"]):
        where = f"{path}: figures[{i}]"
        if not isinstance(raw, dict):
            raise InputError(f"{where}: expected an object")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise InputError(f"{where}: field \"name\" is missing or empty")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", name):
            raise InputError(f"{where}: field \"name\" = {name!r} is not a plain file name "
                             "(letters, digits, . _ + -)")
        if name in seen:
            raise InputError(f"{where}: field \"name\": a second figure named \"{name}\"")
        seen.add(name)
        figures.append(normalise_figure(raw, f"{path}: figure \"{name}\""))
    return spec, figures


def normalise_figure(raw, where):
    """The figure spec with defaults filled in and the field types checked."""
    fig = {"name": raw["name"], "kind": raw.get("kind"), "x": raw.get("x") or "", "y": raw.get("y") or "",
           "group": raw.get("group") or "", "y_stack": raw.get("y_stack") or [], "title": raw.get("title") or "",
           "xlabel": raw.get("xlabel") or "", "ylabel": raw.get("ylabel") or "", "logx": raw.get("logx", False),
           "logy": raw.get("logy", False), "filter": raw.get("filter") or {}, "timeline": raw.get("timeline") or "",
           "max_tracks": raw.get("max_tracks", 64), "replays": raw["replays"] if raw.get("replays") is not None else [],
           "where": where}
    if not isinstance(fig["kind"], str) or not fig["kind"]:
        raise InputError(f"{where}: field \"kind\" is missing (one of {', '.join(KINDS)})")
    if fig["kind"] not in KINDS:
        raise InputError(f"{where}: field \"kind\": unknown kind \"{fig['kind']}\"{hint(fig['kind'], KINDS, 'kinds')}")
    for field in ("x", "y", "group", "title", "xlabel", "ylabel", "timeline"):
        if not isinstance(fig[field], str):
            raise InputError(f"{where}: field \"{field}\" must be a string")
    for field in ("logx", "logy"):
        if not isinstance(fig[field], bool):
            raise InputError(f"{where}: field \"{field}\" must be true or false")
    if not isinstance(fig["y_stack"], list) or not all(isinstance(m, str) and m for m in fig["y_stack"]):
        raise InputError(f"{where}: field \"y_stack\" must be a list of metric names")
    if not isinstance(fig["filter"], dict):
        raise InputError(f"{where}: field \"filter\" must be an object (input name -> value)")
    if not isinstance(fig["max_tracks"], int) or fig["max_tracks"] < 1:
        raise InputError(f"{where}: field \"max_tracks\" must be a positive integer")
    if not isinstance(fig["replays"], list) or not all(isinstance(p, str) and p for p in fig["replays"]):
        raise InputError(f"{where}: field \"replays\" must be a list of file paths (relative to RESULTS_DIR)")
    return fig


def hint(word, choices, what="columns"):
    """' (did you mean "X"?)' with the nearest of choices, and the choices when none is close."""
    choices = list(dict.fromkeys(choices))
    if not choices:
        return ""
    best = max(choices, key=lambda c: (difflib.SequenceMatcher(None, word.lower(), c.lower()).ratio(), -len(c)))
    close = difflib.SequenceMatcher(None, word.lower(), best.lower()).ratio() >= 0.6
    out = f" (did you mean \"{best}\"?"
    if not close:
        shown = ", ".join(choices[:30]) + (", …" if len(choices) > 30 else "")
        out += f" {what}: {shown}"
    return out + ")"


def canon(v):
    """A value as the string it is compared and shown as (JSON spelling; 4096.0 -> 4096)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else repr(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def as_number(v):
    """float(v) for numbers and numeric strings, else None."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def scale_of(metric):
    """Fractions are plotted as percentages."""
    return 100.0 if metric in ("mfu", "bubble_fraction") or metric.endswith("_fraction") else 1.0


def filter_rows(rows, flt):
    """The rows whose inputs[k] equals v for every (k, v) of flt, compared as strings."""
    want = {k: canon(v) for k, v in flt.items()}
    return [r for r in rows if all(r.has(k) and canon(r.get(k)) == v for k, v in want.items())]


def resolve(fig, rows, results_dir, results_path="results.jsonl"):
    """Checks the figure's columns against the rows; returns (figure with its group resolved, its rows)."""
    where = fig["where"]
    if fig["kind"] == "timeline":
        if not fig["timeline"]:
            return dict(fig, trace=None), []  # no trace (its point failed): skipped with a warning
        path = os.path.join(results_dir, fig["timeline"])
        if not os.path.isfile(path):
            raise InputError(f"{where}: field \"timeline\": {path} does not exist")
        try:
            trace = timeline.load(path)
        except ValueError as e:
            raise InputError(f"{where}: field \"timeline\": {path}: {e}") from None
        if not timeline.tracks(trace, fig["max_tracks"])[0]:
            raise InputError(f"{where}: field \"timeline\": {path} has no tracks")
        return dict(fig, trace=trace, trace_path=path), []
    if fig["kind"] == "replay":
        if not fig["replays"]:
            return dict(fig, reports=None), []  # no report (its points failed): skipped with a warning
        reports = []
        for i, rel in enumerate(fig["replays"]):
            path = os.path.join(results_dir, rel)
            if not os.path.isfile(path):
                raise InputError(f"{where}: field \"replays[{i}]\": {path} does not exist")
            try:
                reports += replay.load_reports(path)
            except replay.ReportError as e:
                raise InputError(f"{where}: field \"replays[{i}]\": {e}") from None
        return dict(fig, reports=reports), []

    if not rows:
        raise InputError(f"{results_path}: no rows, but {fig['kind']} figure \"{fig['name']}\" needs some")
    columns = list(dict.fromkeys(c for r in rows for c in r.columns()))
    inputs = list(dict.fromkeys(c for r in rows for c in r.inputs))
    any_metrics = any(r.metrics for r in rows)

    def check(field, col, metric=False):
        if col in columns or metric and not any_metrics and col in KNOWN_METRICS:
            return
        raise InputError(f"{where}: field \"{field}\": column \"{col}\" is not in any row of {results_path}"
                         f"{hint(col, columns)}")

    if not fig["x"]:
        raise InputError(f"{where}: field \"x\" is missing (the column on the x axis)")
    check("x", fig["x"])
    if fig["kind"] == "stacked":
        if not fig["y_stack"]:
            raise InputError(f"{where}: field \"y_stack\" is empty (a stacked figure needs the metrics to stack)")
        for i, m in enumerate(fig["y_stack"]):
            check(f"y_stack[{i}]", m, metric=True)
    else:
        if not fig["y"]:
            raise InputError(f"{where}: field \"y\" is missing (the metric on the y axis)")
        check("y", fig["y"], metric=True)
    group = fig["group"]
    if group:
        check("group", group)
    else:  # the default, planner_label, falling back to planner, then to one series
        group = next((c for c in PLANNER_COLUMNS if c in columns), "")
    for k in fig["filter"]:
        if k not in columns:
            raise InputError(f"{where}: field \"filter\": input \"{k}\" is not in any row of {results_path}"
                             f"{hint(k, inputs or columns)}")
    kept = rows
    for k, v in fig["filter"].items():
        narrowed = filter_rows(kept, {k: v})
        if not narrowed:
            values = list(dict.fromkeys(canon(r.get(k)) for r in kept if r.has(k)))
            raise InputError(f"{where}: field \"filter\": no row of {results_path} has {k} = \"{canon(v)}\"" +
                             hint(canon(v), values, "values"))
        kept = narrowed
    return dict(fig, group=group), kept


# --- aggregation -------------------------------------------------------------------------------------------


class Cell:
    """The rows that share one (x, group): per-metric values of the successful ones, failures, OOM."""

    def __init__(self, x, group):
        self.x, self.group = x, group
        self.rows = 0
        self.failed = 0
        self.oom = False
        self.values = {}  # metric -> [scaled values of the ok rows that have it]
        self.totals = []  # stacked: per ok row, the sum of the stacked metrics

    @property
    def ok(self):
        return any(self.values.values())

    @property
    def all_failed(self):
        return self.failed > 0 and self.failed == self.rows

    def n(self, metric):
        return len(self.values.get(metric, []))

    def mean(self, metric):
        v = self.values.get(metric, [])
        return statistics.fmean(v) if v else math.nan

    def std(self, metric):
        """Sample standard deviation over the repeats; 0 for a single value."""
        v = self.values.get(metric, [])
        return statistics.stdev(v) if len(v) >= 2 else 0.0

    def total_std(self):
        return statistics.stdev(self.totals) if len(self.totals) >= 2 else 0.0


class Table:
    """Cells keyed by (x, group), with the x and group values in first-seen order."""

    def __init__(self):
        self.xs, self.groups, self.cells = [], [], {}
        self.planner = {}  # group value -> the planner name of its first row (for the colour)
        self.skipped = 0  # rows without the x column

    def cell(self, x, g):
        return self.cells.get((x, g))


def aggregate(rows, x, group, metrics, stacked=False, results_path="results.jsonl"):
    """Groups rows by (x, group) and collects the metrics (scaled: fractions become %)."""
    t = Table()
    for r in rows:
        if r.get(x) is None:
            t.skipped += 1
            continue
        xv = canon(r.get(x))
        if group:
            gv = r.get(group)
            if gv is None and group == "planner_label":
                gv = r.get("planner")
            gv = canon(gv) if gv is not None else "(none)"
        else:
            gv = ""
        if xv not in t.xs:
            t.xs.append(xv)
        if gv not in t.groups:
            t.groups.append(gv)
            t.planner[gv] = canon(r.get("planner")) if group in PLANNER_COLUMNS and r.has("planner") else ""
        c = t.cells.setdefault((xv, gv), Cell(xv, gv))
        c.rows += 1
        if r.failed and not r.oom:
            c.failed += 1
            continue
        total, present = 0.0, False
        for m in metrics:
            raw = r.get(m)
            if raw is None or isinstance(raw, float) and math.isnan(raw):
                continue  # missing
            v = float(raw) if isinstance(raw, bool) else as_number(raw)
            if v is None:
                raise InputError(f"{results_path}:{r.line}: field \"{m}\" = {json.dumps(raw)} is not a number")
            v *= scale_of(m)
            c.values.setdefault(m, []).append(v)
            total, present = total + v, True
        if r.failed and not present:
            c.failed += 1  # an OOM point without the metrics asked for
            continue
        c.oom = c.oom or r.oom
        if stacked and present:
            c.totals.append(total)
    return t


# --- style helpers ------------------------------------------------------------------------------------------


def _norm(s):
    return re.sub(r"[^a-z0-9]", "", str(s).lower())


_ALIASES = sorted(((a, i) for i, (aliases, _) in enumerate(PLANNERS) for a in aliases), key=lambda p: -len(p[0]))


def planner_index(*names):
    """The index of the known planner that one of names (a planner name or label) is, else None."""
    normed = [_norm(n) for n in names if n]
    for n in normed:
        for alias, i in _ALIASES:
            if n == alias:
                return i
    for n in normed:
        for alias, i in _ALIASES:
            if n.startswith(alias):
                return i
    return None


def series_style(label, planner=""):
    """{colour, hatch, marker} of a series: fixed for a known planner, a stable hash otherwise."""
    i = planner_index(label, planner)
    if i is not None:
        return {"colour": PLANNERS[i][1], "hatch": HATCHES[i % len(HATCHES)], "marker": MARKERS[i % len(MARKERS)],
                "linestyle": "-"}
    h = zlib.crc32((_norm(planner) or _norm(label) or str(label)).encode())
    return {"colour": FALLBACK_COLOURS[h % len(FALLBACK_COLOURS)],
            "hatch": OTHER_HATCHES[(h >> 8) % len(OTHER_HATCHES)],
            "marker": OTHER_MARKERS[(h >> 16) % len(OTHER_MARKERS)],
            "linestyle": OTHER_LINESTYLES[(h >> 24) % len(OTHER_LINESTYLES)]}


def segment_style(metric):
    """(label, colour, hatch) of a stacked segment."""
    if metric in SEGMENTS:
        return SEGMENTS[metric]
    h = zlib.crc32(metric.encode())
    name = re.sub(r"^time_|_s$", "", metric).replace("_", " ")
    return name, FALLBACK_COLOURS[h % len(FALLBACK_COLOURS)], OTHER_HATCHES[(h >> 8) % len(OTHER_HATCHES)]


def column_label(col):
    """A label with units for a column name: tokens_per_s -> 'throughput (tokens/s)', time_tp_s -> 'time (s)'."""
    if col in METRIC_LABELS:
        return METRIC_LABELS[col]
    if re.fullmatch(r"time_\w+_s", col):
        return "time (s)"
    for suffix, unit in UNIT_SUFFIXES:
        if col.endswith(suffix) and len(col) > len(suffix):
            base = col[: -len(suffix)].replace("_", " ")
            return f"{base}/s" if suffix == "_per_s" else f"{base} ({unit})"
    return col.replace("_", " ")


def short_label(col):
    return re.sub(r"\s*\([^)]*\)$", "", column_label(col))


def stack_label(metrics):
    labels = {column_label(m) for m in metrics}
    if len(labels) == 1:
        return labels.pop()
    units = {re.search(r"\(([^)]*)\)$", lbl).group(1) if "(" in lbl else "" for lbl in labels}
    return f"value ({units.pop()})" if len(units) == 1 and "" not in units else "value"


def compact_number(v, _pos=None):
    """Tick labels without an offset text: 170000 -> 170k, 2500000 -> 2.5M, 0.30000000000000004 -> 0.3."""
    a = abs(v)
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.4g}{suffix}"
    return f"{v:.6g}" if a >= 1e-4 or v == 0 else f"{v:.2g}"


def fmt_x(v):
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def fit_width(fig, text_artist, frac=0.97):
    """Wraps a text artist's text into lines no wider than frac of the figure (measured, not guessed)."""
    text = text_artist.get_text()
    renderer = fig.canvas.get_renderer()
    limit = frac * fig.get_figwidth() * fig.dpi
    width = text_artist.get_window_extent(renderer=renderer).width
    chars = int(len(text) * limit / width) if width > limit else 0
    while chars >= 10:
        text_artist.set_text("\n".join(textwrap.wrap(text, chars, break_on_hyphens=False)))
        if text_artist.get_window_extent(renderer=renderer).width <= limit:
            return
        chars -= 2


# --- drawing -----------------------------------------------------------------------------------------------


def _new_figure(width):
    fig = plt.figure(figsize=(width, PLOT_HEIGHT_IN + 1.5), layout="constrained")
    fig.get_layout_engine().set(w_pad=0.06, h_pad=0.06, hspace=0.0, wspace=0.0)
    ax = fig.add_subplot()
    return fig, ax


def _grid(ax):
    ax.yaxis.grid(True, color="#dddddd", linewidth=0.6)
    ax.xaxis.grid(False)


def _y_axis(ax, fig_spec):
    if fig_spec["logy"]:
        ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(compact_number))


def _log_minor_labels(ax):
    """A log y axis spanning under ~2 decades has too few powers of ten: label its 2× and 5× minor ticks."""
    if ax.get_yscale() != "log":
        return
    lo, hi = ax.get_ylim()
    if lo > 0 and math.log10(hi / lo) < 2.2:
        def minor(v, _pos=None):
            lead = v / 10 ** math.floor(math.log10(v) + 1e-9)
            return compact_number(v) if round(lead) in (2, 5) and abs(lead - round(lead)) < 1e-6 else ""
        ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def _base_marks(ax, positions, colour=FAIL_COLOUR, height=0.035):
    """Failed points: a small × at the base of the plot (height: in axes fractions)."""
    if positions:
        trans = blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(positions, [height] * len(positions), linestyle="none", marker="x", markersize=6, mew=1.6,
                color=colour, transform=trans, clip_on=False, zorder=5)


def _fail_handle():
    return Line2D([], [], linestyle="none", marker="x", markersize=6, mew=1.6, color=FAIL_COLOUR,
                  label="no feasible plan / failed")


def _oom_bar_handle():
    return Patch(facecolor="white", edgecolor=EDGE, hatch=OOM_HATCH, linewidth=0.8, label="out of memory (OOM)")


def _rotate_if_crowded(ax, fig, which="major"):
    """Rotates the x tick labels 30° when neighbours would touch."""
    fig.canvas.draw()
    labels = ax.get_xticklabels(minor=which == "minor")
    boxes = sorted((t.get_window_extent() for t in labels if t.get_text()), key=lambda b: b.x0)
    gap = 4 * fig.dpi / 72
    if any(a.x1 + gap > b.x0 for a, b in zip(boxes, boxes[1:])):
        for t in labels:
            t.set_rotation(30)
            t.set_ha("right")
            t.set_rotation_mode("anchor")
        return True
    return False


def _legend(ax, fig, handles):
    """The legend above the plotting area, in as many columns as fit the figure's width."""
    if not handles:
        return None
    width = fig.get_figwidth() * fig.dpi
    n = len(handles)
    for rows in range(1, n + 1):
        ncol = math.ceil(n / rows)  # as few rows as fit, balanced
        # Matplotlib fills columns first; order the handles so that the legend reads row by row.
        order = [handles[r * ncol + c] for c in range(ncol) for r in range(rows) if r * ncol + c < n]
        leg = ax.legend(handles=order, loc="lower center", bbox_to_anchor=(0.5, 1.02), ncol=ncol,
                        frameon=False, handlelength=1.8, handleheight=1.0, columnspacing=1.2, borderaxespad=0.2)
        if leg.get_window_extent(renderer=fig.canvas.get_renderer()).width <= 0.97 * width or ncol == 1:
            return leg
    return None


def _finish(fig, ax, fig_spec, title, xlabel, ylabel, caption):
    """Title, labels, caption; then grows the figure so that the plotting area keeps its height."""
    ax.set_xlabel(fig_spec["xlabel"] or xlabel)
    ax.set_ylabel(fig_spec["ylabel"] or ylabel)
    _titles(fig, fig_spec["title"] or title, caption)
    _log_minor_labels(ax)
    for _ in range(3):
        fig.canvas.draw()
        plot_h = ax.get_position().height * fig.get_figheight()
        if abs(plot_h - PLOT_HEIGHT_IN) < 0.02:
            break
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + PLOT_HEIGHT_IN - plot_h)


def _titles(fig, title, caption):
    """The title above everything and the caption line under the plot (small, gray), wrapped to fit."""
    if title:
        fit_width(fig, fig.suptitle(title, fontweight="bold"))
    if caption:
        fit_width(fig, fig.supxlabel(caption, fontsize=CAPTION_PT, color="#707070"))


def _bar_width_in(n_bars, n_x):
    return min(12.0, max(4.6, 1.4 + 0.34 * n_bars + 0.2 * n_x))


def _default_title(fig_spec, what):
    by = short_label(fig_spec["x"])
    flt = ", ".join(f"{k}={canon(v)}" for k, v in fig_spec["filter"].items())
    return f"{what} by {by}" + (f" ({flt})" if flt else "")


def _compact(table):
    """True when every x has at most one group: one bar per x, coloured by its group."""
    per_x = {}
    for (x, g) in table.cells:
        per_x.setdefault(x, set()).add(g)
    return all(len(gs) <= 1 for gs in per_x.values())


def _slots(table):
    """{(x, group): (position, width)} for bars, and whether the layout is compact."""
    compact = _compact(table)
    out = {}
    if compact:
        for (x, g) in table.cells:
            out[(x, g)] = (float(table.xs.index(x)), 0.62)
        return out, compact
    n = len(table.groups)
    width = 0.8 / n
    for (x, g) in table.cells:
        out[(x, g)] = (table.xs.index(x) + (table.groups.index(g) - (n - 1) / 2) * width, width)
    return out, compact


def draw_bars(fig_spec, table, caption):
    y = fig_spec["y"]
    slots, compact = _slots(table)
    n_bars = len(table.xs) if compact else len(table.xs) * len(table.groups)
    fig, ax = _new_figure(_bar_width_in(n_bars, len(table.xs)))
    _grid(ax)
    _y_axis(ax, fig_spec)
    failed, any_oom, used_groups = [], False, []
    for key, c in table.cells.items():
        pos, width = slots[key]
        st = series_style(c.group, table.planner.get(c.group, ""))
        if c.group not in used_groups:
            used_groups.append(c.group)
        if c.n(y) == 0:
            if c.failed:
                failed.append(pos)
            continue
        mean, std = c.mean(y), c.std(y)
        if c.oom:
            any_oom = True
            ax.bar(pos, mean, width, facecolor="white", edgecolor=st["colour"], hatch=OOM_HATCH, linewidth=1.1,
                   zorder=2)
        else:
            ax.bar(pos, mean, width, facecolor=st["colour"], edgecolor=EDGE, hatch=st["hatch"], linewidth=0.6,
                   zorder=2)
        if c.n(y) >= 2:
            ax.errorbar(pos, mean, yerr=std, fmt="none", ecolor="black", elinewidth=0.9, capsize=2.5,
                        capthick=0.9, zorder=3)
    _base_marks(ax, failed)
    ax.set_xticks(list(range(len(table.xs))), table.xs)
    ax.set_xlim(-0.6, len(table.xs) - 0.4)
    handles = []
    show_groups = table.groups != [""] and fig_spec["group"] != fig_spec["x"]
    if show_groups:
        for g in [g for g in table.groups if g in used_groups]:
            st = series_style(g, table.planner.get(g, ""))
            handles.append(Patch(facecolor=st["colour"], edgecolor=EDGE, hatch=st["hatch"], linewidth=0.6, label=g))
    if failed:
        handles.append(_fail_handle())
    if any_oom:
        handles.append(_oom_bar_handle())
    _legend(ax, fig, handles)
    _rotate_if_crowded(ax, fig)
    _finish(fig, ax, fig_spec, _default_title(fig_spec, short_label(y)), column_label(fig_spec["x"]),
            column_label(y), caption)
    return fig


def x_positions(xs):
    """(xs in plotting order, {x: position}, numeric): numbers sorted when every x parses as one, else the
    categories in first-seen order at 0, 1, 2, …"""
    numeric = bool(xs) and all(as_number(x) is not None for x in xs)
    pos_of = {x: as_number(x) for x in xs} if numeric else {x: float(i) for i, x in enumerate(xs)}
    return sorted(xs, key=lambda x: pos_of[x]), pos_of, numeric


def draw_line(fig_spec, table, caption):
    y = fig_spec["y"]
    order, pos_of, numeric = x_positions(table.xs)
    fig, ax = _new_figure(5.6 if len(table.groups) <= 4 else 6.6)
    _grid(ax)
    _y_axis(ax, fig_spec)
    if fig_spec["logx"]:
        vals = [pos_of[x] for x in order]
        pow2 = numeric and all(v > 0 and math.log2(v).is_integer() for v in vals)
        ax.set_xscale("log", base=2 if pow2 else 10)
    handles, any_fail, any_oom = [], False, False
    for g in table.groups:
        st = series_style(g, table.planner.get(g, ""))
        xs, ys, errs, oom_x, oom_y, failed = [], [], [], [], [], []
        for x in order:
            c = table.cell(x, g)
            if c is None:
                continue
            if c.n(y) == 0:
                if c.failed:
                    failed.append(pos_of[x])
                    xs.append(pos_of[x])  # a gap in the line
                    ys.append(math.nan)
                    errs.append(0.0)
                continue
            xs.append(pos_of[x])
            ys.append(c.mean(y))
            errs.append(c.std(y))
            if c.oom:
                oom_x.append(pos_of[x])
                oom_y.append(c.mean(y))
        if not xs:
            continue
        has_err = any(e > 0 for e in errs) or any(table.cell(x, g) and table.cell(x, g).n(y) >= 2 for x in order)
        ax.errorbar(xs, ys, yerr=errs if has_err else None, color=st["colour"], marker=st["marker"], markersize=5,
                    linestyle=st["linestyle"],
                    linewidth=1.6, elinewidth=0.9, capsize=2.5, capthick=0.9, markeredgecolor=st["colour"], zorder=3)
        if oom_x:
            any_oom = True
            ax.plot(oom_x, oom_y, linestyle="none", marker=st["marker"], markersize=6, markerfacecolor="white",
                    markeredgecolor=st["colour"], markeredgewidth=1.4, zorder=4)
        if failed:
            any_fail = True
            _base_marks(ax, failed, st["colour"], height=0.0)  # on the axis line, in the series' colour
        if g != "":
            handles.append(Line2D([], [], color=st["colour"], marker=st["marker"], markersize=5, linewidth=1.6,
                                  linestyle=st["linestyle"], label=g))
    if numeric:
        vals = sorted({pos_of[x] for x in order})
        if len(vals) <= 12:
            ax.xaxis.set_major_locator(FixedLocator(vals))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: fmt_x(v)))
            ax.xaxis.set_minor_locator(NullLocator())
        else:
            ax.xaxis.set_major_formatter(FuncFormatter(compact_number))
    else:
        ax.set_xticks([pos_of[x] for x in order], order)
        ax.set_xlim(-0.4, len(order) - 0.6)
    if any_fail:
        handles.append(_fail_handle())
    if any_oom:
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=6, markerfacecolor="white",
                              markeredgecolor=EDGE, markeredgewidth=1.4, label="out of memory (OOM)"))
    _legend(ax, fig, handles)
    _rotate_if_crowded(ax, fig)
    _finish(fig, ax, fig_spec, _default_title(fig_spec, short_label(y)), column_label(fig_spec["x"]),
            column_label(y), caption)
    return fig


def draw_stacked(fig_spec, table, caption):
    metrics = fig_spec["y_stack"]
    slots, compact = _slots(table)
    two_level = not compact and len(table.groups) > 1
    n_bars = len(table.xs) if compact else len(table.xs) * len(table.groups)
    width_in = _bar_width_in(n_bars, len(table.xs))
    if two_level:
        width_in = min(14.0, max(width_in, 0.5 * n_bars + 1.2))
    fig, ax = _new_figure(width_in)
    _grid(ax)
    _y_axis(ax, fig_spec)
    failed, any_oom = [], False
    for key, c in table.cells.items():
        pos, width = slots[key]
        if not c.ok:
            if c.failed:
                failed.append(pos)
            continue
        bottom = 0.0
        for m in metrics:
            _, colour, hatch = segment_style(m)
            h = c.mean(m) if c.n(m) else 0.0
            ax.bar(pos, h, width * 0.9, bottom=bottom, facecolor=colour, edgecolor="white", hatch=hatch,
                   linewidth=0.5, zorder=2)
            bottom += h
        if c.oom:
            any_oom = True
            ax.bar(pos, bottom, width * 0.9, fill=False, edgecolor=EDGE, hatch=OOM_HATCH, linewidth=0.9, zorder=3)
        if len(c.totals) >= 2:
            ax.errorbar(pos, bottom, yerr=c.total_std(), fmt="none", ecolor="black", elinewidth=0.9, capsize=2.5,
                        capthick=0.9, zorder=4)
    _base_marks(ax, failed)
    ax.set_xlim(-0.6, len(table.xs) - 0.4)
    if two_level:
        keys = sorted(slots, key=lambda k: slots[k][0])
        ax.set_xticks([slots[k][0] for k in keys], [k[1] for k in keys], minor=True)
        ax.set_xticks(list(range(len(table.xs))), table.xs)
        ax.tick_params(axis="x", which="minor", length=3, labelsize=9)
        ax.tick_params(axis="x", which="major", length=0)
        long = max(len(k[1]) for k in keys) > 3
        if long:
            for t in ax.get_xticklabels(minor=True):
                t.set_rotation(90)
        fig.canvas.draw()
        h = max(t.get_window_extent().height for t in ax.get_xticklabels(minor=True)) * 72 / fig.dpi
        ax.tick_params(axis="x", which="major", pad=h + 7)
        for t in ax.get_xticklabels():
            t.set_fontweight("bold")
    else:
        ax.set_xticks(list(range(len(table.xs))), table.xs)
    handles = []
    for m in metrics:
        label, colour, hatch = segment_style(m)
        handles.append(Patch(facecolor=colour, edgecolor="white", hatch=hatch, linewidth=0.5, label=label))
    if failed:
        handles.append(_fail_handle())
    if any_oom:
        handles.append(_oom_bar_handle())
    _legend(ax, fig, handles)
    if not two_level:
        _rotate_if_crowded(ax, fig)
    what = "time breakdown" if all(re.fullmatch(r"time_\w+_s", m) for m in metrics) else "breakdown"
    if compact and table.groups != [""] and fig_spec["group"] != fig_spec["x"] and len(table.groups) == 1:
        what += f" of {table.groups[0]}"
    _finish(fig, ax, fig_spec, _default_title(fig_spec, what), column_label(fig_spec["x"]), stack_label(metrics),
            caption)
    return fig


def draw_timeline(fig_spec, caption):
    trace = fig_spec["trace"]
    n = len(timeline.tracks(trace, fig_spec["max_tracks"])[0])
    fig = plt.figure(figsize=(10, 0.28 * n + 2.0), layout="constrained")
    fig.get_layout_engine().set(w_pad=0.06, h_pad=0.06)
    ax = fig.add_subplot()
    handles = timeline.draw(ax, trace, fig_spec["max_tracks"], fontsize=9)
    kinds = list(timeline.COLOURS)  # forward, backward, … rather than alphabetical
    handles.sort(key=lambda h: kinds.index(h.get_label()) if h.get_label() in kinds else len(kinds))
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)
    ax.xaxis.grid(True, color="#dddddd", linewidth=0.6)
    _legend(ax, fig, handles)
    if fig_spec["xlabel"]:
        ax.set_xlabel(fig_spec["xlabel"])
    if fig_spec["ylabel"]:
        ax.set_ylabel(fig_spec["ylabel"])
    _titles(fig, fig_spec["title"] or f"timeline: {fig_spec['timeline']}", caption)
    return fig


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
