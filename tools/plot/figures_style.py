"""The look of figures.py's figures, the same in every figure of every experiment: each series' colour, hatch,
marker and line style (fixed for the known planners, a stable hash of the name for the others), the stacked
segments' colours, axis labels with units from column names, compact tick labels, and text wrapped to the
figure's width (tools/plot/README.md, "Style").
"""
import re
import textwrap
import zlib

import style
import timeline

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
