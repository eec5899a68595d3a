#!/usr/bin/python3
"""Draws replay reports (`hetsim replay --report-out`): a training run replayed over a failure / spot trace
under one or more recovery policies.

Usage: tools/plot/replay.py -o OUT.png|OUT.pdf [--title TEXT] REPORT.json [REPORT.json ...]
Each REPORT.json holds one report object or a JSON list of them (proto3 JSON mapping: 64-bit integers are
strings). One figure, two panels: (a) training progress, the cumulative tokens kept over time per report
against the ideal line (no failures, no checkpoints), interruptions marked; (b) where the time went, one
horizontal stacked bar per report (productive training, checkpoint, lost work, detect, replan, wait,
restart, recover) annotated with its ETTR. PNG at 150 dpi; PDF with TrueType fonts and no creation date
(the same bytes on every run). Prints "replay figure: OUT (N reports)".

Malformed input (a missing file, invalid JSON, not a replay report, a missing or mistyped field) exits with
status 2 and one line naming the file and the field, before anything is drawn.

As a module: load_reports(path) -> [report dicts] (raises ReportError), check_report(report, where),
draw(reports, out_path, title=None, caption=None), progress(report) and breakdown(report) (the data the
two panels plot), accounting_warnings(reports).
"""
import argparse
import json
import math
import os
import sys
import textwrap
import zlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import style  # noqa: E402

KIND = "replay_report"
# The top-level fields the figure reads, and their types ("str", "num": a number or a numeric string as
# proto3's JSON mapping writes 64-bit integers, "list").
FIELDS = (("cluster", "str"), ("model", "str"), ("trace", "str"), ("policy", "str"), ("duration_s", "num"),
          ("tokens", "num"), ("goodput_tokens_per_s", "num"), ("ideal_tokens_per_s", "num"), ("ettr", "num"),
          ("lost_work_s", "num"), ("checkpoint_overhead_s", "num"), ("downtime_s", "num"),
          ("downtime", "list"), ("segments", "list"))
# Segment phases: train, detect, replan, wait, restart, recover (older reports: checkpoint-on-notice); every
# phase but "train" is flat in the progress panel (an unknown one too).

# Where the time went: (cause in the report's "downtime" list, legend label, colour, hatch), in bar order.
TRAINING = ("training", "productive training", "#55A868", "")
CATEGORIES = (
    ("checkpoint", "checkpoint", "#4C72B0", ""),
    ("lost work", "lost work", "#C44E52", "////"),
    ("detect", "detect", "#DD8452", ""),
    ("replan", "replan", "#8172B3", ""),
    ("wait", "wait", "#A9A9A9", ""),
    ("restart", "restart", "#937860", ""),
    ("recover", "recover", "#64B5CD", ""),
)
OTHER_COLOURS = ("#DA8BC3", "#CCB974", "#8C8C8C", "#4878D0", "#D65F5F")

# One colour per recovery policy (matched on the label's start, ignoring case and punctuation), so that a
# policy looks the same in every replay figure; other labels, and repeats of a colour, take the next unused
# one of Paul Tol's "bright" + "muted" palettes.
POLICY_COLOURS = (("checkpointrestart", "#4477AA"), ("hotspares", "#AA3377"), ("inmemory", "#228833"),
                  ("varuna", "#CCBB44"), ("elastic", "#EE6677"))
SPARE_COLOURS = ("#66CCEE", "#332288", "#882255", "#117733", "#999933", "#44AA99", "#CC6677", "#DDCC77",
                 "#88CCEE", "#AA4499")
IDEAL_COLOUR = "#808080"

STYLE = dict(style.STYLE, **{"axes.titlesize": 10})  # panel titles a point smaller
WIDTH_IN = 7.4  # grows when long row labels would leave the plots under 5 in wide
PROGRESS_IN = 2.7  # the height of panel (a)'s plotting area
ROW_IN = 0.42  # panel (b): inches per report


class ReportError(ValueError):
    """A malformed replay report; the message names the file and the field."""


# --- inputs ------------------------------------------------------------------------------------------------


def as_number(v):
    """float(v) for a JSON number or a numeric string (proto3 writes 64-bit integers as strings), else None."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _field(obj, name, kind, where, prefix=""):
    """obj[name] checked to be of kind; the error names where and the field (prefix + name)."""
    field = prefix + name
    if name not in obj:
        raise ReportError(f"{where}: field \"{field}\" is missing")
    v = obj[name]
    if kind == "str":
        if not isinstance(v, str):
            raise ReportError(f"{where}: field \"{field}\" = {json.dumps(v)} is not a string")
        return v
    if kind == "list":
        if not isinstance(v, list):
            raise ReportError(f"{where}: field \"{field}\" is not a list")
        return v
    f = as_number(v)
    if f is None or math.isnan(f) or math.isinf(f):
        raise ReportError(f"{where}: field \"{field}\" = {json.dumps(v)} is not a number")
    return f


def check_report(rep, where):
    """Checks one report (a dict parsed from JSON); returns it with the numeric fields the figure reads as
    floats. Raises ReportError naming `where` and the field."""
    if not isinstance(rep, dict):
        raise ReportError(f"{where}: expected a replay report (a JSON object), got {type(rep).__name__}")
    if "kind" not in rep:
        raise ReportError(f"{where}: field \"kind\" is missing (expected \"{KIND}\"; is this a replay report?)")
    if rep["kind"] != KIND:
        raise ReportError(f"{where}: field \"kind\" = {json.dumps(rep['kind'])}, expected \"{KIND}\" "
                          "(not a replay report)")
    out = dict(rep)
    for name, kind in FIELDS:
        out[name] = _field(rep, name, kind, where)
    if out["duration_s"] <= 0:
        raise ReportError(f"{where}: field \"duration_s\" = {json.dumps(rep['duration_s'])} must be positive")
    if not 0 <= out["ettr"] <= 1.000001:
        raise ReportError(f"{where}: field \"ettr\" = {json.dumps(rep['ettr'])} is not in [0, 1]")
    downtime = []
    for i, d in enumerate(out["downtime"]):
        p = f"downtime[{i}]."
        if not isinstance(d, dict):
            raise ReportError(f"{where}: field \"downtime[{i}]\": expected an object {{cause, seconds}}")
        downtime.append({"cause": _field(d, "cause", "str", where, p),
                         "seconds": _field(d, "seconds", "num", where, p)})
    out["downtime"] = downtime
    segments = []
    for i, s in enumerate(out["segments"]):
        p = f"segments[{i}]."
        if not isinstance(s, dict):
            raise ReportError(f"{where}: field \"segments[{i}]\": expected an object")
        seg = {"start_s": _field(s, "start_s", "num", where, p), "end_s": _field(s, "end_s", "num", where, p),
               "phase": _field(s, "phase", "str", where, p), "cause": str(s.get("cause", ""))}
        if seg["end_s"] < seg["start_s"]:
            raise ReportError(f"{where}: field \"{p}end_s\" = {s['end_s']} is before start_s = {s['start_s']}")
        # tokens_kept only matters in train segments (proto3 may leave a zero out elsewhere)
        seg["tokens_kept"] = _field(s, "tokens_kept", "num", where, p) if seg["phase"] == "train" else \
            as_number(s.get("tokens_kept", 0)) or 0.0
        segments.append(seg)
    out["segments"] = segments
    return out


def load_reports(path):
    """The checked reports of a file holding one report or a JSON list of them. Raises ReportError."""
    if not os.path.isfile(path):
        raise ReportError(f"{path}: missing (`hetsim replay --report-out FILE` writes it)")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}:{e.lineno}: invalid JSON ({e.msg}, column {e.colno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot read ({e})") from None
    if isinstance(data, list):
        if not data:
            raise ReportError(f"{path}: an empty list, no replay report")
        return [check_report(r, f"{path}: report [{i}]") for i, r in enumerate(data)]
    return [check_report(data, path)]


# --- what the panels plot ----------------------------------------------------------------------------------


# Down phases that are no interruption: growing again when capacity comes back (elastic, varuna), and (older
# reports) the checkpoint saved on a preemption's notice, after which training went on.
NOT_INTERRUPTION_CAUSES = ("capacity added",)


def progress(rep):
    """(times in s, cumulative tokens kept, interruption times in s): a polyline that rises linearly over
    each train segment (from 0 to its tokens_kept) and is flat over the down phases. An interruption starts
    at each "detect" phase, and at a down phase right after training that has none (a preemption); growing
    back to new capacity and checkpoint-on-notice are not interruptions. A preemption that hits the job while
    it is already down (no "detect") gets no mark of its own."""
    ts, ys, marks = [0.0], [0.0], []
    total, prev_phase = 0.0, None
    for seg in rep["segments"]:
        start, end, phase = seg["start_s"], seg["end_s"], seg["phase"]
        if start != ts[-1]:
            ts.append(start)
            ys.append(total)
        if phase == "train":
            total += seg["tokens_kept"]
        elif phase == "detect" or (prev_phase == "train" and phase != "checkpoint-on-notice" and
                                   seg["cause"] not in NOT_INTERRUPTION_CAUSES):
            marks.append(start)
        ts.append(end)
        ys.append(total)
        prev_phase = phase
    return ts, ys, marks


def breakdown(rep):
    """[(key, label, colour, hatch, seconds)] of one report's bar: productive training (ettr × duration), then
    the causes of its "downtime" list in the fixed order (unknown causes after them)."""
    seconds = {}
    for d in rep["downtime"]:
        seconds[d["cause"]] = seconds.get(d["cause"], 0.0) + d["seconds"]
    out = [TRAINING + (rep["ettr"] * rep["duration_s"],)]
    known = [c[0] for c in CATEGORIES]
    for c in CATEGORIES:
        out.append(c + (seconds.get(c[0], 0.0),))
    for cause in seconds:
        if cause not in known:
            colour = OTHER_COLOURS[zlib.crc32(cause.encode()) % len(OTHER_COLOURS)]
            out.append((cause, cause, colour, "xx", seconds[cause]))
    return out


def accounting_warnings(reports):
    """One message per report whose productive training and downtime list do not add up to duration_s (1%)."""
    out = []
    for r in reports:
        accounted = r["ettr"] * r["duration_s"] + sum(d["seconds"] for d in r["downtime"])
        if abs(accounted - r["duration_s"]) > 0.01 * r["duration_s"]:
            out.append(f"{r['policy']}: ettr × duration_s + downtime = {accounted:.0f} s, but duration_s = "
                       f"{r['duration_s']:.0f} s: its bar does not span the run")
    return out


def _norm(s):
    return "".join(ch for ch in s.lower() if ch.isalnum())


def policy_colours(reports):
    """One colour per report: the policy's fixed colour, or the next unused one when taken already."""
    used, out = set(), []
    for rep in reports:
        n = _norm(rep["policy"])
        colour = next((c for key, c in POLICY_COLOURS if n.startswith(key)), None)
        if colour is None or colour in used:
            pool = [c for _, c in POLICY_COLOURS if c not in used] + [c for c in SPARE_COLOURS if c not in used]
            start = zlib.crc32(n.encode()) % len(SPARE_COLOURS) if colour is None else 0
            colour = next((c for c in SPARE_COLOURS[start:] + SPARE_COLOURS[:start] if c not in used), None) or \
                (pool[0] if pool else SPARE_COLOURS[len(out) % len(SPARE_COLOURS)])
        used.add(colour)
        out.append(colour)
    return out


def row_labels(reports):
    """The policy of each report; reports sharing a policy label get the trace appended (or, when that is the
    same too, the first of cluster, model, plan, seed that tells them apart, else #i)."""
    labels = [r["policy"] for r in reports]
    out = list(labels)
    for label in set(labels):
        idx = [i for i, lb in enumerate(labels) if lb == label]
        if len(idx) < 2:
            continue
        for field in ("trace", "cluster", "model", "plan", "seed"):
            vals = [str(reports[i].get(field, "")) for i in idx]
            if len(set(vals)) == len(vals):
                for i, v in zip(idx, vals):
                    out[i] = f"{label} ({field} {v})" if field == "seed" else f"{label} — {v}"
                break
        else:
            for k, i in enumerate(idx):
                out[i] = f"{label} #{k + 1}"
    return out


def wrap_label(label, width=26):
    """A row label on up to three lines: broken at " — ", then at spaces, no line much over width."""
    if len(label) <= width:
        return label
    lines = []
    for part in label.split(" — "):
        lines += textwrap.wrap(part, width, break_on_hyphens=False, break_long_words=False) or [part]
    return "\n".join(lines)


def default_title(reports):
    """"Replay: MODEL on CLUSTER — TRACE" of the first report; a field that differs between the reports
    lists its two values, or says how many there are ("3 traces")."""
    def val(field, plural):
        vals = list(dict.fromkeys(str(r[field]) for r in reports))
        return " / ".join(vals) if len(vals) <= 2 else f"{len(vals)} {plural}"
    return f"Replay: {val('model', 'models')} on {val('cluster', 'clusters')} — {val('trace', 'traces')}"


def time_unit(duration_s):
    """(seconds per unit, name): hours under 3 days, else days."""
    return (3600.0, "hours") if duration_s < 3 * 86400 else (86400.0, "days")


def token_unit(max_tokens):
    for div, name in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if max_tokens >= div:
            return div, name
    return 1e3, "k"


def _pct(v):
    """97.4% (one decimal; 100% exactly only when it is)."""
    s = f"{100 * v:.1f}"
    if s == "100.0" and v < 1:
        s = "99.9"
    return s + "%"


def _fit_width(fig, text, frac=0.97):
    """Wraps a text artist into lines no wider than frac of the figure."""
    renderer = fig.canvas.get_renderer()
    limit = frac * fig.get_figwidth() * fig.dpi
    s = text.get_text()
    width = text.get_window_extent(renderer=renderer).width
    chars = int(len(s) * limit / width) if width > limit else 0
    while chars >= 10:
        text.set_text("\n".join(textwrap.wrap(s, chars, break_on_hyphens=False)))
        if text.get_window_extent(renderer=renderer).width <= limit:
            return
        chars -= 2


# --- drawing -----------------------------------------------------------------------------------------------


def _draw_progress(ax, reports, colours, labels, t_unit):
    div_t, unit_t = t_unit
    curves = [progress(r) for r in reports]
    ideal = reports[0]["ideal_tokens_per_s"]
    end_t = max(r["duration_s"] for r in reports)
    top = max([ideal * end_t] + [max(ys) for _, ys, _ in curves])
    div_y, unit_y = token_unit(top)
    ax.plot([0, end_t / div_t], [0, ideal * end_t / div_y], color=IDEAL_COLOUR, linestyle="--", linewidth=1.2,
            zorder=2)
    handles = [Line2D([], [], color=IDEAL_COLOUR, linestyle="--", linewidth=1.2,
                      label="ideal (no failures, no checkpoints)")]
    for k, (rep, (ts, ys, marks), colour) in enumerate(zip(reports, curves, colours)):
        ax.plot([t / div_t for t in ts], [y / div_y for y in ys], color=colour, linewidth=1.5,
                zorder=3 + k)
        if marks:
            # the cumulative tokens at each interruption (flat there), for the tick on the line
            ym, j = [], 0
            for m in marks:
                while j + 1 < len(ts) and ts[j + 1] <= m:
                    j += 1
                ym.append(ys[j])
            ax.plot([m / div_t for m in marks], [y / div_y for y in ym], linestyle="none", marker="|",
                    markersize=7, markeredgewidth=1.1, color=colour, zorder=3 + k)
        good = rep["goodput_tokens_per_s"] / rep["ideal_tokens_per_s"] if rep["ideal_tokens_per_s"] > 0 else 0.0
        text = f"ETTR {_pct(rep['ettr'])}, goodput {100 * good:.0f}% of ideal"
        sep = " — " if len(labels[k]) <= 28 else "\n"  # a long label: its numbers on a second line
        handles.append(Line2D([], [], color=colour, linewidth=1.5, label=f"{labels[k]}{sep}{text}"))
    if any(c[2] for c in curves):
        handles.append(Line2D([], [], linestyle="none", marker="|", markersize=7, markeredgewidth=1.1,
                              color="#444444", label="interruption"))
    ax.set_xlim(0, end_t / div_t)
    ax.set_ylim(0, top / div_y * 1.04)
    ax.yaxis.grid(True, color="#dddddd", linewidth=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=10, integer=end_t / div_t >= 5))
    ax.set_xlabel(f"{unit_t} since start")
    ax.set_ylabel(f"cumulative tokens kept ({unit_y})")
    ax.set_title("(a) Training progress", loc="left", fontweight="bold")
    return handles


def _draw_breakdown(ax, reports, labels, t_unit):
    div_t, unit_t = t_unit
    bars = [breakdown(r) for r in reports]
    end_t = max(r["duration_s"] for r in reports)
    keys_used, handles = [], {}
    for row, (rep, parts) in enumerate(zip(reports, bars)):
        left = 0.0
        for key, label, colour, hatch, secs in parts:
            if secs <= 0:
                continue
            ax.barh(row, secs / div_t, left=left / div_t, height=0.62, color=colour, edgecolor="white",
                    hatch=hatch, linewidth=0.4, zorder=2)
            left += secs
            if key not in handles:
                handles[key] = Patch(facecolor=colour, edgecolor="white", hatch=hatch, linewidth=0.4, label=label)
                keys_used.append(key)
    order = [TRAINING[0]] + [c[0] for c in CATEGORIES]
    keys_used.sort(key=lambda k: order.index(k) if k in order else len(order))
    ax.set_yticks(range(len(reports)), [wrap_label(lb) for lb in labels])
    ax.set_ylim(len(reports) - 0.5, -0.5)  # the first report on top
    ax.set_xlim(0, end_t / div_t * 1.005)
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)
    # each bar's ETTR as a tick label on the right, so that the layout makes room for it
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(range(len(reports)), [f"ETTR {_pct(r['ettr'])}" for r in reports])
    right.tick_params(axis="y", length=0, pad=3)
    for spine in right.spines.values():
        spine.set_visible(False)
    ax.xaxis.grid(True, color="#dddddd", linewidth=0.6)
    ticks = [t for t in MaxNLocator(nbins=10, integer=end_t / div_t >= 5).tick_values(0, end_t / div_t)
             if 0 <= t <= end_t / div_t * 1.0001]
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.spines["bottom"].set_bounds(0, end_t / div_t)
    ax.set_xlabel(f"time ({unit_t})")
    ax.set_title("(b) Where the time went", loc="left", fontweight="bold")
    return [handles[k] for k in keys_used]


def _legend_above(ax, handles):
    """The legend of (a) above its plotting area, in columns read top to bottom (the reports' order)."""
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.08), ncol=2 if len(handles) > 4 else 1,
              handlelength=1.6, columnspacing=1.2, borderaxespad=0.2)


def _segment_hits_box(p, q, box):
    """Whether the segment p-q meets the box (x0, y0, x1, y1) (Liang-Barsky clipping)."""
    (x0, y0, x1, y1), t0, t1 = box, 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for d, lo_gap, hi_gap in ((dx, p[0] - x0, x1 - p[0]), (dy, p[1] - y0, y1 - p[1])):
        for pk, qk in ((-d, lo_gap), (d, hi_gap)):
            if pk == 0:
                if qk < 0:
                    return False
            else:
                t = qk / pk
                if pk < 0:
                    t0 = max(t0, t)
                else:
                    t1 = min(t1, t)
                if t0 > t1:
                    return False
    return True


def _legend_overlaps(fig, ax):
    """Whether a line or marker of ax runs under its legend (in axes fractions, with a small margin)."""
    leg = ax.get_legend()
    fig.canvas.draw()
    to_axes = ax.transAxes.inverted()
    (lx0, ly0), (lx1, ly1) = to_axes.transform(leg.get_window_extent().get_points())
    box = (lx0 - 0.005, ly0 - 0.01, lx1 + 0.005, ly1 + 0.01)
    for line in ax.lines:
        pts = to_axes.transform(ax.transData.transform(line.get_xydata()))
        if line.get_linestyle() in ("None", "none", ""):
            if any(box[0] <= x <= box[2] and box[1] <= y <= box[3] for x, y in pts):
                return True
        elif any(_segment_hits_box(a, b, box) for a, b in zip(pts, pts[1:])):
            return True
    return False


def _clear_legend(fig, ax):
    """Raises the y limit of (a), a step at a time, until its legend (upper left) covers no line; False when
    half again the height is not enough (then the legend goes above the plot)."""
    lo, top = ax.get_ylim()
    for grow in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5):
        ax.set_ylim(lo, top * grow)
        if not _legend_overlaps(fig, ax):
            if grow > 1.0:  # up to the next tick, so that the axis ends on a labelled value (more room still)
                ticks = [t for t in ax.yaxis.get_major_locator().tick_values(lo, top * grow) if t >= top * grow]
                if ticks:
                    ax.set_ylim(lo, min(ticks))
            return True
    ax.set_ylim(lo, top)
    return False


def _legend_rows(ax, fig, handles, anchor, loc):
    """A legend in as few balanced rows as fit the figure's width, reading left to right."""
    width = fig.get_figwidth() * fig.dpi
    n = len(handles)
    for rows in range(1, n + 1):
        ncol = math.ceil(n / rows)
        order = [handles[r * ncol + c] for c in range(ncol) for r in range(rows) if r * ncol + c < n]
        leg = ax.legend(handles=order, loc=loc, bbox_to_anchor=anchor, ncol=ncol, frameon=False,
                        handlelength=1.6, columnspacing=1.2, borderaxespad=0.2)
        if leg.get_window_extent(renderer=fig.canvas.get_renderer()).width <= 0.97 * width or ncol == 1:
            return leg
    return None


def draw(reports, out_path, title=None, caption=None):
    """Draws the figure of the (checked) reports into out_path (.png at 150 dpi, .pdf with TrueType fonts and
    no creation date). Returns out_path."""
    if not reports:
        raise ValueError("draw: no reports")
    labels = row_labels(reports)
    colours = policy_colours(reports)
    t_unit = time_unit(max(r["duration_s"] for r in reports))
    n = len(reports)
    with plt.rc_context(STYLE):
        bar_in = ROW_IN * n + 0.3
        fig = plt.figure(figsize=(WIDTH_IN, PROGRESS_IN + bar_in + 2.6), layout="constrained")
        fig.get_layout_engine().set(w_pad=0.06, h_pad=0.08, hspace=0.06)
        gs = fig.add_gridspec(2, 1, height_ratios=[PROGRESS_IN, bar_in])
        ax_a, ax_b = fig.add_subplot(gs[0]), fig.add_subplot(gs[1])
        try:
            handles_a = _draw_progress(ax_a, reports, colours, labels, t_unit)
            handles_b = _draw_breakdown(ax_b, reports, labels, t_unit)
            # (a): inside, upper left (the lines run under the ideal diagonal, leaving that corner empty);
            # with many reports, above the plotting area instead.
            inside = n <= 4
            if inside:
                ax_a.legend(handles=handles_a, loc="upper left", frameon=True, framealpha=0.9, edgecolor="none",
                            handlelength=2.2, borderaxespad=0.3)
            else:
                _legend_above(ax_a, handles_a)
            _fix_width(fig, ax_b)
            _legend_rows(ax_b, fig, handles_b, (0.5, -0.3), "upper center")
            fig.canvas.draw()
            # the legend of (b) sits under the axis label: move it just below whatever the x axis takes
            leg_b = ax_b.get_legend()
            if leg_b is not None:
                below = ax_b.xaxis.get_tightbbox(fig.canvas.get_renderer())
                drop_pt = (ax_b.get_window_extent().y0 - below.y0) * 72 / fig.dpi + 4
                leg_b.set_bbox_to_anchor((0.5, 0.0), transform=offset_copy(ax_b.transAxes, fig, y=-drop_pt,
                                                                             units="points"))
            sup = fig.suptitle(title or default_title(reports), fontweight="bold")
            _fit_width(fig, sup)
            if caption:
                _fit_width(fig, fig.supxlabel(caption, fontsize=9, color="#707070"))
            _fix_heights(fig, ax_a, ax_b, bar_in)
            if inside and not _clear_legend(fig, ax_a):
                _legend_above(ax_a, handles_a)
                _fix_heights(fig, ax_a, ax_b, bar_in)
            style.save(fig, out_path)
        finally:
            plt.close(fig)
    return out_path


def _fix_width(fig, ax, min_in=5.0, max_fig_in=11.0):
    """Widens the figure (up to max_fig_in) when long row labels leave the plots narrower than min_in."""
    for _ in range(3):
        fig.canvas.draw()
        w = ax.get_position().width * fig.get_figwidth()
        if w >= min_in - 0.02 or fig.get_figwidth() >= max_fig_in:
            return
        fig.set_size_inches(min(max_fig_in, fig.get_figwidth() + min_in - w), fig.get_figheight())


def _fix_heights(fig, ax_a, ax_b, bar_in):
    """Grows or shrinks the figure until panel (a)'s plotting area is PROGRESS_IN tall."""
    for _ in range(4):
        fig.canvas.draw()
        h = ax_a.get_position().height * fig.get_figheight()
        if abs(h - PROGRESS_IN) < 0.02:
            return
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + (PROGRESS_IN - h) *
                            (PROGRESS_IN + bar_in) / PROGRESS_IN)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True, metavar="OUT.png", help="output file: .png or .pdf")
    ap.add_argument("--title", default=None, help="figure title (default: Replay: MODEL on CLUSTER — TRACE)")
    ap.add_argument("reports", nargs="+", metavar="REPORT.json")
    args = ap.parse_args(argv)
    if not args.out.lower().endswith((".png", ".pdf")):
        print(f"replay.py: error: -o {args.out}: the output must end in .png or .pdf", file=sys.stderr)
        return 2
    try:
        reports = [r for path in args.reports for r in load_reports(path)]
    except ReportError as e:
        print(f"replay.py: error: {e}", file=sys.stderr)
        return 2
    for msg in accounting_warnings(reports):
        print(f"replay.py: warning: {msg}", file=sys.stderr)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    draw(reports, args.out, args.title)
    print(f"replay figure: {args.out} ({len(reports)} report{'s' if len(reports) != 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
