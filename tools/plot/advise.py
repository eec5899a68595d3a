#!/usr/bin/python3
"""Draws the Pareto front of `hetsim advise`: time to train against cost of every configuration it evaluated.

Usage: tools/plot/advise.py OUT_DIR [-o OUT.png|OUT.pdf]        (default: OUT_DIR/pareto.png)

Reads OUT_DIR/configurations.csv (one row per configuration) and OUT_DIR/advice.json (the recommendation), as
`hetsim advise` writes them. One figure: x the time to train (days), y the cost (USD, "$12k", "$1.2M"); an axis
turns logarithmic when its finite values (means, seed ranges, pruned bounds, a deadline or budget in view) span
more than 10x. Every "ok" configuration with a finite mean is a point, coloured by recovery policy, shaped by
planner, with thin error bars over its seeds (min to max); the Pareto rows (column pareto = 1) are joined by a
step line (sorted by time); the recommended one is a large star with its label in a box where it covers no
point or line (in its legend entry when the plot is too crowded for that); the deadline and the budget are
dashed lines and what lies beyond them is shaded (a limit far beyond every point is left out of the axis range
and the caption says so); "pruned" configurations are small grey crosses at their lower bounds (time_lb_days,
cost_lb_usd). Failed configurations and those that never finish (infinite time) are not drawn but counted in
the caption, after advice.json's caption and summary. The legend sits to the right of the plot.
PNG at 150 dpi; PDF with TrueType fonts and no creation date (the same bytes on every run). Prints
"advise figure: OUT (N configurations, M on the Pareto front)".

Malformed input (a missing file, a missing column or field, a value that is not a number where one is expected,
a recommended id that is not in the CSV) exits with status 2 and one line naming the file and the column or
field, before anything is drawn.

Flags that disagree with the numbers (pareto = 1 on a row not drawn, feasible against the deadline and
budget) are drawn as the CSV says, with a warning on stderr.

As a module: load(out_dir) -> (rows, advice) (raises AdviseError), draw(rows, advice, out_path) -> counts,
counts(rows) (what the caption and the printed line report), caption(rows, advice), warnings(rows, advice,
csv_path).
"""
import argparse
import csv
import difflib
import json
import math
import re
import os
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Polygon  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures  # noqa: E402
import replay  # noqa: E402
import style  # noqa: E402

CSV_NAME = "configurations.csv"
ADVICE_NAME = "advice.json"
DEFAULT_FIGURE = "pareto.png"

# The columns of configurations.csv, in the order `hetsim advise` writes them, and what each holds: "int",
# "int?" (an integer or empty), "str", "status", "float?" (a number, "inf", or empty), "flag" (0 or 1).
# Further columns are allowed and ignored.
COLUMNS = (("config", "int"), ("label", "str"), ("composition", "str"), ("gpus", "int"), ("planner", "str"),
           ("policy", "str"), ("checkpoint_interval", "str"), ("spares", "int?"), ("seeds", "int"),
           ("status", "status"), ("reason", "str"),
           ("time_days_mean", "float?"), ("time_days_min", "float?"), ("time_days_max", "float?"),
           ("cost_usd_mean", "float?"), ("cost_usd_min", "float?"), ("cost_usd_max", "float?"),
           ("time_lb_days", "float?"), ("cost_lb_usd", "float?"),
           ("goodput_fraction_mean", "float?"), ("ettr_mean", "float?"),
           ("pareto", "flag"), ("feasible", "flag"), ("recommended", "flag"))
STATUSES = ("ok", "failed", "pruned")
# An "ok" row must have these (they may be "inf": the run never finishes).
OK_REQUIRED = ("time_days_mean", "cost_usd_mean")
# The fields of advice.json: "str", "num", "num?" (a number or null), "id?" (an integer or null), "objective".
ADVICE_FIELDS = (("name", "str"), ("model", "str"), ("tokens", "num"), ("objective", "objective"),
                 ("deadline_days", "num?"), ("budget_usd", "num?"), ("recommended", "id?"), ("summary", "str"),
                 ("caption", "str"))
OBJECTIVES = ("cheapest", "soonest")

WIDTH_IN = 7.4
PLOT_HEIGHT_IN = 3.5  # the plotting area; the figure grows around it (title, caption)
FRONT_COLOUR = "#222222"
STAR_COLOUR = "#FFC20A"
STAR_SIZE_PT = 19
PRUNED_COLOUR = "#B4B4B4"
LIMIT_COLOUR = "#555555"
SHADE_COLOUR = "#9A9A9A"
CAPTION_COLOUR = "#707070"
# The recommended label goes into the legend when its best place in the plot scores above this: it would cover
# a point (10) or a line (8), or its leader would pass two points (3 each); 0.02 per point of leader length.
MAX_LABEL_SCORE = 6.0
# Room kept around the recommended label's text when scoring a place (pixels at 150 dpi): its box's padding
# and a little air.
LABEL_MARGIN_PX = 10
# Planner markers in this figure: a known planner keeps figures.py's marker unless it is one this figure uses
# for something else (the star, the pruned crosses); others take the first free one of these.
RESERVED_MARKERS = ("*", "x", "X", "+")
PLANNER_MARKERS = ("o", "s", "^", "D", "v", "P", "<", ">", "h", "p", "d", "8", "H")


class AdviseError(ValueError):
    """Malformed `hetsim advise` output; the message names the file and the column or field."""


# --- inputs ------------------------------------------------------------------------------------------------


def _parse_float(s):
    """float(s) for a number or "inf" (any case), None for an empty cell; raises ValueError otherwise (NaN too)."""
    s = s.strip()
    if s == "":
        return None
    v = float(s)
    if math.isnan(v):
        raise ValueError(s)
    return v


def _cell(raw, col, kind, where):
    """The typed value of one CSV cell; where is "FILE:LINE"."""
    s = raw.strip()
    if kind == "str":
        return raw
    if kind == "status":
        if s not in STATUSES:
            near = difflib.get_close_matches(s, STATUSES, n=1)
            hint = f" (did you mean \"{near[0]}\"?)" if near else ""
            raise AdviseError(f"{where}: column \"{col}\" = \"{raw}\" is not one of {', '.join(STATUSES)}{hint}")
        return s
    if kind in ("int", "int?"):
        if s == "" and kind == "int?":
            return None
        try:
            return int(s)
        except ValueError:
            raise AdviseError(f"{where}: column \"{col}\" = \"{raw}\" is not an integer") from None
    if kind == "flag":
        if s not in ("0", "1"):
            raise AdviseError(f"{where}: column \"{col}\" = \"{raw}\" is not 0 or 1")
        return s == "1"
    try:
        v = _parse_float(s)
    except ValueError:
        raise AdviseError(f"{where}: column \"{col}\" = \"{raw}\" is not a number (expected a float, \"inf\" "
                          "or empty)") from None
    if v is not None and v < 0:
        raise AdviseError(f"{where}: column \"{col}\" = \"{raw}\" is negative")
    return v


def load_rows(path):
    """The rows of configurations.csv as dicts of typed values (None for an empty cell). Raises AdviseError."""
    if not os.path.isfile(path):
        raise AdviseError(f"{path}: missing (`hetsim advise` writes it)")
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                raise AdviseError(f"{path}: empty (expected a header line: {','.join(c for c, _ in COLUMNS)})")
            header = [h.strip() for h in header]
            dup = [h for i, h in enumerate(header) if h in header[:i]]
            if dup:
                raise AdviseError(f"{path}: column \"{dup[0]}\" appears twice in the header")
            for col, _ in COLUMNS:
                if col not in header:
                    near = difflib.get_close_matches(col, [h for h in header if h not in dict(COLUMNS)], n=1)
                    hint = f" (did you mean \"{near[0]}\"?)" if near else ""
                    raise AdviseError(f"{path}: column \"{col}\" is missing from the header{hint}")
            index = {h: i for i, h in enumerate(header)}
            rows, seen = [], {}
            for fields in reader:
                where = f"{path}:{reader.line_num}"
                if not fields or (len(fields) == 1 and not fields[0].strip()):
                    continue  # a blank line
                if len(fields) != len(header):
                    raise AdviseError(f"{where}: {len(fields)} fields, but the header has {len(header)} columns")
                row = {"line": reader.line_num}
                for col, kind in COLUMNS:
                    row[col] = _cell(fields[index[col]], col, kind, where)
                if row["config"] in seen:
                    raise AdviseError(f"{where}: column \"config\" = {row['config']} repeats the row of line "
                                      f"{seen[row['config']]}")
                seen[row["config"]] = reader.line_num
                if row["status"] == "ok":
                    for col in OK_REQUIRED:
                        if row[col] is None:
                            raise AdviseError(f"{where}: column \"{col}\" is empty, but status is \"ok\"")
                rows.append(row)
    except csv.Error as e:
        raise AdviseError(f"{path}: invalid CSV ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AdviseError(f"{path}: cannot read ({e})") from None
    if not rows:
        raise AdviseError(f"{path}: no configurations (a header line only)")
    flagged = [r for r in rows if r["recommended"]]
    if len(flagged) > 1:
        raise AdviseError(f"{path}:{flagged[1]['line']}: column \"recommended\" is 1 in more than one row "
                          f"(configs {', '.join(str(r['config']) for r in flagged)})")
    return rows


def _advice_field(obj, name, kind, path):
    if name not in obj:
        raise AdviseError(f"{path}: field \"{name}\" is missing")
    v = obj[name]
    if kind == "str":
        if not isinstance(v, str):
            raise AdviseError(f"{path}: field \"{name}\" = {json.dumps(v)} is not a string")
        return v
    if kind == "objective":
        if v not in OBJECTIVES:
            raise AdviseError(f"{path}: field \"{name}\" = {json.dumps(v)} is not one of "
                              f"{', '.join(json.dumps(o) for o in OBJECTIVES)}")
        return v
    if v is None and kind.endswith("?"):
        return None
    if kind == "id?":
        f = replay.as_number(v)
        if f is None or not math.isfinite(f) or f != int(f) or f < 0:
            raise AdviseError(f"{path}: field \"{name}\" = {json.dumps(v)} is not a config id (an integer or "
                              "null)")
        return int(f)
    f = replay.as_number(v)
    if f is None or not math.isfinite(f):
        raise AdviseError(f"{path}: field \"{name}\" = {json.dumps(v)} is not a number"
                          + (" or null" if kind.endswith("?") else ""))
    if f <= 0 and name != "tokens":
        raise AdviseError(f"{path}: field \"{name}\" = {json.dumps(v)} must be positive")
    return f


def load_advice(path):
    """advice.json checked, with its numbers as floats (recommended: an int or None). Raises AdviseError."""
    if not os.path.isfile(path):
        raise AdviseError(f"{path}: missing (`hetsim advise` writes it)")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise AdviseError(f"{path}:{e.lineno}: invalid JSON ({e.msg}, column {e.colno})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AdviseError(f"{path}: cannot read ({e})") from None
    if not isinstance(data, dict):
        raise AdviseError(f"{path}: expected a JSON object, got {type(data).__name__}")
    out = dict(data)
    for name, kind in ADVICE_FIELDS:
        out[name] = _advice_field(data, name, kind, path)
    return out


def _finite(row):
    """Whether an "ok" row has a finite mean time and cost (is drawn as a point)."""
    return (row["status"] == "ok" and row["time_days_mean"] is not None and row["cost_usd_mean"] is not None
            and math.isfinite(row["time_days_mean"]) and math.isfinite(row["cost_usd_mean"]))


def _bounded(row):
    """Whether a "pruned" row has finite lower bounds (is drawn as a cross)."""
    return (row["status"] == "pruned" and row["time_lb_days"] is not None and row["cost_lb_usd"] is not None
            and math.isfinite(row["time_lb_days"]) and math.isfinite(row["cost_lb_usd"]))


def warnings(rows, advice, csv_path):
    """Messages about flags that disagree with the numbers (drawn anyway, as the CSV says): pareto = 1 on a row
    that is not drawn; feasible differing from the deadline and budget (0.5% slack for rounding)."""
    out = []
    deadline, budget = advice["deadline_days"], advice["budget_usd"]
    for r in rows:
        where = f"{csv_path}:{r['line']}: config {r['config']}"
        if r["pareto"] and not _finite(r):
            out.append(f"{where}: column \"pareto\" is 1, but the row is not drawn (status \"{r['status']}\", "
                       "or an infinite time or cost)")
        if not _finite(r):
            continue
        t, c = r["time_days_mean"], r["cost_usd_mean"]
        fits = [(not deadline or t <= deadline * (1 + s)) and (not budget or c <= budget * (1 + s))
                for s in (-0.005, 0.005)]
        if fits[0] == fits[1] and r["feasible"] != fits[0]:
            out.append(f"{where}: column \"feasible\" is {int(r['feasible'])}, but {days(t)} days and {usd(c)} "
                       f"{'meet' if fits[0] else 'miss'} the deadline and budget of {ADVICE_NAME}")
    return out


def check_consistent(rows, advice, csv_path, advice_path):
    """The recommendation of advice.json against the CSV: its id is a row, that row (and only it) is marked
    recommended, and it is drawable ("ok", finite). Raises AdviseError naming the field."""
    rec = advice["recommended"]
    flagged = [r for r in rows if r["recommended"]]
    if rec is None:
        if flagged:
            raise AdviseError(f"{csv_path}:{flagged[0]['line']}: column \"recommended\" is 1 for config "
                              f"{flagged[0]['config']}, but {advice_path} field \"recommended\" is null")
        return
    by_id = {r["config"]: r for r in rows}
    if rec not in by_id:
        ids = sorted(by_id)
        shown = ", ".join(str(i) for i in ids[:12]) + (", …" if len(ids) > 12 else "")
        raise AdviseError(f"{advice_path}: field \"recommended\" = {rec} is not a config of {csv_path} "
                          f"(configs: {shown})")
    row = by_id[rec]
    if not row["recommended"]:
        other = f"config {flagged[0]['config']}" if flagged else "no row"
        raise AdviseError(f"{advice_path}: field \"recommended\" = {rec}, but {csv_path} column \"recommended\" "
                          f"marks {other}")
    if not _finite(row):
        what = f"status \"{row['status']}\"" if row["status"] != "ok" else "an infinite time or cost"
        raise AdviseError(f"{advice_path}: field \"recommended\" = {rec}: that config has {what} in {csv_path} "
                          f"(line {row['line']})")


def load(out_dir):
    """(rows, advice) of a `hetsim advise` output folder, checked. Raises AdviseError."""
    if not os.path.isdir(out_dir):
        raise AdviseError(f"{out_dir}: no such folder (the OUT folder of `hetsim advise`)")
    csv_path, advice_path = os.path.join(out_dir, CSV_NAME), os.path.join(out_dir, ADVICE_NAME)
    rows = load_rows(csv_path)
    advice = load_advice(advice_path)
    check_consistent(rows, advice, csv_path, advice_path)
    return rows, advice


# --- what the figure reports -------------------------------------------------------------------------------


def counts(rows):
    """{configurations, drawn (ok, finite), pareto (drawn with pareto = 1), infeasible (drawn with feasible =
    0), pruned, pruned_drawn (with finite bounds), failed, never_finishes (ok, infinite mean time or cost)}."""
    drawn = [r for r in rows if _finite(r)]
    return {"configurations": len(rows), "drawn": len(drawn), "pareto": sum(r["pareto"] for r in drawn),
            "infeasible": sum(not r["feasible"] for r in drawn),
            "pruned": sum(r["status"] == "pruned" for r in rows), "pruned_drawn": sum(_bounded(r) for r in rows),
            "failed": sum(r["status"] == "failed" for r in rows),
            "never_finishes": sum(r["status"] == "ok" and not _finite(r) for r in rows)}


def usd(v, _pos=None):
    """$850, $12k, $12.5k, $1.2M (three significant digits at most)."""
    a = abs(v)
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= div * 0.9995:
            return f"${v / div:.3g}{suffix}"
    return f"${v:.3g}"


def days(v, _pos=None):
    return f"{v:.3g}"


def _plural(n, word, many=None):
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _plotted(rows):
    """(times, costs) the axes span: the finite means and seed ranges of the drawn rows, the bounds of the
    pruned ones."""
    drawn = [r for r in rows if _finite(r)]
    bounded = [r for r in rows if _bounded(r)]
    xs = [r[c] for r in drawn for c in ("time_days_mean", "time_days_min", "time_days_max")]
    ys = [r[c] for r in drawn for c in ("cost_usd_mean", "cost_usd_min", "cost_usd_max")]
    return xs + [r["time_lb_days"] for r in bounded], ys + [r["cost_lb_usd"] for r in bounded]


def _reason_head(reason):
    """"no plan fits" of "no plan fits: 16 GPUs hold 1280 GiB …": the part before the first colon, shortened."""
    head = reason.strip().split(":", 1)[0].strip() or "no reason given"
    return textwrap.shorten(head, 40, placeholder="…")


def _failed_reasons(rows):
    """"no plan fits / simulation error (2)": the distinct reasons of the failed rows (their heads)."""
    reasons = {}
    for r in rows:
        if r["status"] == "failed":
            key = _reason_head(r["reason"])
            reasons[key] = reasons.get(key, 0) + 1
    parts = [f"{k} ({n})" if n > 1 and len(reasons) > 1 else k for k, n in reasons.items()]
    return " / ".join(parts[:3]) + (f" / {len(parts) - 3} more" if len(parts) > 3 else "")


def caption(rows, advice):
    """advice.json's caption and summary, then what the figure shows and what it leaves out ("12
    configurations: 7 drawn (3 on the Pareto front, 5 miss the deadline or budget), 2 pruned by their lower
    bounds, 1 never finishes (infinite time, not drawn), 2 failed: no plan fits / simulation error.")."""
    c = counts(rows)
    limits = [w for w, v in (("deadline", advice["deadline_days"]), ("budget", advice["budget_usd"])) if v]
    drawn = f"{c['drawn']} drawn ({c['pareto']} on the Pareto front"
    if limits:
        drawn += f", {c['infeasible']} miss{'es' if c['infeasible'] == 1 else ''} the {' or '.join(limits)}"
    parts = [drawn + ")" if c["drawn"] else "none finished"]
    if c["pruned"]:
        p = f"{c['pruned']} pruned by their lower bounds"
        if c["pruned_drawn"] < c["pruned"]:
            p += f" ({c['pruned'] - c['pruned_drawn']} without bounds, not drawn)"
        parts.append(p)
    if c["never_finishes"]:
        parts.append(f"{c['never_finishes']} never finish{'es' if c['never_finishes'] == 1 else ''} (infinite "
                     "time, not drawn)")
    if c["failed"]:
        parts.append(f"{c['failed']} failed: {_failed_reasons(rows)}")
    counted = f"{_plural(c['configurations'], 'configuration')}: {', '.join(parts)}."
    if c["drawn"]:
        counted += " Bars: min to max over the seeds."
    xs, ys = _plotted(rows)
    if advice["deadline_days"] and not limit_in_view(advice["deadline_days"], xs):
        counted += f" The {advice['deadline_days']:g}-day deadline lies beyond the plotted range."
    if advice["budget_usd"] and not limit_in_view(advice["budget_usd"], ys):
        counted += f" The {usd(advice['budget_usd'])} budget lies above the plotted range."
    texts = [t.strip() for t in (advice["caption"], advice["summary"], counted) if t.strip()]
    return " ".join(t if t[-1] in ".!?:;" or k == len(texts) - 1 else t + "." for k, t in enumerate(texts))


# --- drawing -----------------------------------------------------------------------------------------------


def _pack(pieces, joiner, width, prefix=""):
    """pieces joined by joiner on as few lines of about width characters as whole pieces allow; a line after the
    first starts with prefix; a piece longer than width is wrapped at its spaces."""
    out = []
    for piece in pieces:
        if out and len(out[-1]) + len(joiner) + len(piece) <= width:
            out[-1] += joiner + piece
        else:
            out += textwrap.wrap((prefix if out else "") + piece, width, break_on_hyphens=False,
                                 break_long_words=False) or [piece]
    return out


def wrap_label(label, width=32):
    """A configuration label on a few lines: broken at " | " (the composition, then planner · policy ·
    interval); a long composition between node groups (the next line starts with "+"), the rest between its
    parts, anything longer at spaces."""
    parts = [p.strip() for p in label.split("|")]
    out = _pack(parts[0].split(" + "), " + ", width, "+ ")
    if len(parts) > 1:
        out += _pack(parts[1:], " · ", width)
    return "\n".join(out)


def limit_in_view(limit, values):
    """Whether the deadline or budget `limit` joins the axis range of the data `values`: always when it is at or
    below their largest; above it, while it stays within 2.5 spans of the data (1.5 decades' worth on data
    spanning more than 10x), so that a far-off limit does not squeeze the points into a corner."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if limit is None:
        return False
    if not finite:
        return True
    lo, hi = min(finite), max(finite)
    if limit <= hi:
        return True
    if lo > 0 and hi / lo > 10:
        return math.log10(limit / lo) <= 1.5 * math.log10(hi / lo)
    return limit - lo <= 2.5 * max(hi - lo, 0.25 * abs(hi))


def _use_log(values):
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 10


def _limits(values, log, margin=0.06):
    finite = [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
    if not finite:
        return (0.1, 10.0) if log else (0.0, 1.0)
    lo, hi = min(finite), max(finite)
    if log:
        a, b = math.log10(lo), math.log10(hi)
        pad = max(b - a, 0.3) * margin
        return 10 ** (a - pad), 10 ** (b + pad)
    pad = (hi - lo) * margin if hi > lo else max(abs(hi) * 0.1, 1.0)
    return max(lo - pad, 0.0) if lo >= 0 else lo - pad, hi + pad


def _axis(axis, log, formatter):
    axis.set_major_formatter(FuncFormatter(formatter))
    if not log:
        return
    lo, hi = axis.get_view_interval()
    if lo > 0 and math.log10(hi / lo) < 2.2:  # too few powers of ten: label the 2x and 5x ticks too
        def minor(v, _pos=None):
            lead = v / 10 ** math.floor(math.log10(v) + 1e-9)
            return formatter(v) if round(lead) in (2, 5) and abs(lead - round(lead)) < 1e-6 else ""
        axis.set_minor_formatter(FuncFormatter(minor))
    else:
        axis.set_minor_formatter(NullFormatter())


def _planner_markers(planners):
    """{planner: marker}: a known planner's usual marker (figures.MARKERS) where free and not reserved here,
    then the first free one of PLANNER_MARKERS for the others."""
    out, used = {}, set()
    for p in planners:
        i = figures.planner_index(p)
        m = figures.MARKERS[i % len(figures.MARKERS)] if i is not None else None
        if m is not None and m not in RESERVED_MARKERS and m not in used:
            out[p] = m
            used.add(m)
    for p in planners:
        if p not in out:
            m = next((c for c in PLANNER_MARKERS if c not in used), PLANNER_MARKERS[len(out) % len(PLANNER_MARKERS)])
            out[p] = m
            used.add(m)
    return {p: out[p] for p in planners}


def _policy_colours(policies):
    return dict(zip(policies, replay.policy_colours([{"policy": p} for p in policies])))


def _sizes(n):
    """(marker size, error bar alpha) by the number of points: smaller and lighter when crowded."""
    if n <= 30:
        return 6.5, 0.55
    if n <= 80:
        return 5.0, 0.4
    return 4.0, 0.28


class _Obstacles:
    """What a label should not cover, in display coordinates: points and segments."""

    def __init__(self):
        self.points, self.segments, self.boxes = [], [], []

    def score(self, box, axes_box):
        x0, y0, x1, y1 = box
        s = sum(10 for (x, y) in self.points if x0 <= x <= x1 and y0 <= y <= y1)
        s += sum(8 for (p, q) in self.segments if replay._segment_hits_box(p, q, box))
        s += sum(60 for b in self.boxes if not (b[2] < x0 or x1 < b[0] or b[3] < y0 or y1 < b[1]))
        ax0, ay0, ax1, ay1 = axes_box
        outside = max(0, ax0 - x0) + max(0, x1 - ax1) + max(0, ay0 - y0) + max(0, y1 - ay1)
        return s + (200 + outside if outside > 0 else 0)


def _place(fig, ax, obstacles, make, candidates):
    """Adds the text artist make(candidate) whose box covers the fewest obstacles (the first of the best);
    records its box as an obstacle and returns it."""
    renderer = fig.canvas.get_renderer()
    ab = ax.get_window_extent(renderer)
    axes_box = (ab.x0, ab.y0, ab.x1, ab.y1)
    best = None
    for k, cand in enumerate(candidates):
        artist = make(cand)
        bb = artist.get_window_extent(renderer)
        box = (bb.x0 - 6, bb.y0 - 6, bb.x1 + 6, bb.y1 + 6)  # a marker's radius
        score = obstacles.score(box, axes_box) + 0.01 * k
        artist.remove()
        if best is None or score < best[0]:
            best = (score, cand, box)
    artist = make(best[1])
    artist.set_in_layout(False)  # inside the plotting area: no reason to move the layout
    obstacles.boxes.append(best[2])
    return artist


def natural_key(text):
    """Sorts "hot-spares (2 spares)" before "hot-spares (16 spares)": digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text)]


def draw(rows, advice, out_path):
    """Draws the figure of checked rows and advice into out_path (.png at 150 dpi, .pdf with TrueType fonts and
    no creation date), written atomically. Returns counts(rows)."""
    drawn = [r for r in rows if _finite(r)]
    pruned = [r for r in rows if _bounded(r)]
    deadline, budget = advice["deadline_days"], advice["budget_usd"]
    rec = next((r for r in drawn if r["config"] == advice["recommended"]), None)

    xs, ys = _plotted(rows)
    xs += [deadline] if limit_in_view(deadline, xs) else []
    ys += [budget] if limit_in_view(budget, ys) else []
    logx, logy = _use_log(xs), _use_log(ys)
    policies = sorted({r["policy"] for r in drawn}, key=natural_key)
    planners = sorted({r["planner"] for r in drawn}, key=natural_key)
    colours, markers = _policy_colours(policies), _planner_markers(planners)
    size, bar_alpha = _sizes(len(drawn))

    with plt.rc_context(style.STYLE):
        fig = plt.figure(figsize=(WIDTH_IN, PLOT_HEIGHT_IN + 1.8), layout="constrained")
        fig.get_layout_engine().set(w_pad=0.06, h_pad=0.08)
        ax = fig.add_subplot()
        try:
            if logx:
                ax.set_xscale("log")
            if logy:
                ax.set_yscale("log")
            xlim, ylim = _limits(xs, logx), _limits(ys, logy)
            ax.set_xlim(*xlim)
            ax.set_ylim(*ylim)
            ax.grid(True, which="major", color="#e4e4e4", linewidth=0.6)
            handles = _draw_points(ax, drawn, colours, markers, size, bar_alpha)
            if pruned:
                ax.plot([r["time_lb_days"] for r in pruned], [r["cost_lb_usd"] for r in pruned], linestyle="none",
                        marker="x", markersize=max(size - 2, 3.5), markeredgewidth=0.9, color=PRUNED_COLOUR,
                        zorder=1.5)
            front = sorted((r for r in drawn if r["pareto"]), key=lambda r: (r["time_days_mean"], r["cost_usd_mean"]))
            if front:
                ax.step([r["time_days_mean"] for r in front], [r["cost_usd_mean"] for r in front], where="post",
                        color=FRONT_COLOUR, linewidth=1.5, zorder=2.5, solid_joinstyle="miter")
            if rec is not None:
                ax.plot([rec["time_days_mean"]], [rec["cost_usd_mean"]], linestyle="none", marker="*",
                        markersize=STAR_SIZE_PT, markerfacecolor=STAR_COLOUR, markeredgecolor="#222222",
                        markeredgewidth=0.9, zorder=6)
            shade = _draw_limits(ax, deadline, budget, xlim, ylim)
            ax.set_xlim(*xlim)
            ax.set_ylim(*ylim)
            _axis(ax.xaxis, logx, days)
            _axis(ax.yaxis, logy, usd)
            ax.set_xlabel("time to train (days)")
            ax.set_ylabel("cost (USD)")
            if not drawn:
                ax.text(0.5, 0.5, "no configuration finished", transform=ax.transAxes, ha="center", va="center",
                        color=CAPTION_COLOUR, zorder=5, bbox=dict(boxstyle="square,pad=0.3", facecolor="white",
                                                                   edgecolor="none"))

            legend = _legend_handles(handles, len(front), rec is not None, bool(pruned),
                                     _shade_label(deadline, budget) if shade else None)
            leg = ax.legend(handles=[h for h, _ in legend], labels=[lb for _, lb in legend], loc="upper left",
                            bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, handlelength=1.8, labelspacing=0.45)
            for text, (h, _) in zip(leg.get_texts(), legend):
                if getattr(h, "_heading", False):
                    text.set_fontweight("bold")
            sup = fig.suptitle(advice["name"], fontweight="bold")
            cap = fig.supxlabel(caption(rows, advice), fontsize=9, color=CAPTION_COLOUR)
            fig.canvas.draw()
            figures.fit_width(fig, sup)
            figures.fit_width(fig, cap)
            _fix_height(fig, ax)

            # Labels last, once the layout is settled: each where it covers the fewest points and lines.
            obstacles = _obstacles(ax, drawn, pruned, front, deadline, budget)
            # the recommendation first: the limits' short labels fit in more places
            if rec is not None and not _label_recommended(fig, ax, obstacles, rec):
                # too crowded to label it beside its star without covering points: its legend entry says it
                k = [lb for _, lb in legend].index("recommended")
                leg.get_texts()[k].set_text(_recommended_text(rec))
                _fix_height(fig, ax)
                obstacles = _obstacles(ax, drawn, pruned, front, deadline, budget)
            _label_limits(fig, ax, obstacles, deadline, budget)
            _save(fig, out_path)
        finally:
            plt.close(fig)
    return counts(rows)


def _draw_points(ax, drawn, colours, markers, size, bar_alpha):
    """One errorbar call per (policy, planner); returns {"policy": [(policy, colour)], "planner": [...]}."""
    groups = {}
    for r in drawn:
        groups.setdefault((r["policy"], r["planner"]), []).append(r)
    for (policy, planner), rs in sorted(groups.items()):
        x = [r["time_days_mean"] for r in rs]
        y = [r["cost_usd_mean"] for r in rs]

        def err(col, means):
            lo = [m - r[col + "_min"] if r[col + "_min"] is not None and math.isfinite(r[col + "_min"]) else 0.0
                  for r, m in zip(rs, means)]
            hi = [r[col + "_max"] - m if r[col + "_max"] is not None and math.isfinite(r[col + "_max"]) else 0.0
                  for r, m in zip(rs, means)]
            return [max(v, 0.0) for v in lo], [max(v, 0.0) for v in hi]
        colour = colours[policy]
        bars = ax.errorbar(x, y, xerr=err("time_days", x), yerr=err("cost_usd", y), linestyle="none",
                           marker=markers[planner], markersize=size, markerfacecolor=colour,
                           markeredgecolor="white", markeredgewidth=0.6, ecolor=colour, elinewidth=0.7, capsize=0,
                           zorder=3)
        for line in bars.lines[2]:
            line.set_alpha(bar_alpha)
        front = [r for r in rs if r["pareto"]]
        if front:  # front points get a dark ring
            ax.plot([r["time_days_mean"] for r in front], [r["cost_usd_mean"] for r in front], linestyle="none",
                    marker=markers[planner], markersize=size, markerfacecolor=colour,
                    markeredgecolor=FRONT_COLOUR, markeredgewidth=1.1, zorder=4)
    return {"policy": [(p, colours[p]) for p in colours], "planner": [(p, markers[p]) for p in markers]}


def _draw_limits(ax, deadline, budget, xlim, ylim):
    """The deadline and budget lines and the shaded region beyond them; returns whether anything is shaded."""
    (x0, x1), (y0, y1) = xlim, ylim
    d = min(max(deadline, x0), x1) if deadline else x1
    b = min(max(budget, y0), y1) if budget else y1
    if deadline:
        ax.axvline(deadline, color=LIMIT_COLOUR, linestyle="--", linewidth=1.0, zorder=1.8)
    if budget:
        ax.axhline(budget, color=LIMIT_COLOUR, linestyle="--", linewidth=1.0, zorder=1.8)
    if d >= x1 and b >= y1:
        return False  # no limit, or both beyond the plotted range
    # everything outside [x0, d] x [y0, b]: an L shape (a band when only one limit is set)
    ax.add_patch(Polygon([(x0, b), (d, b), (d, y0), (x1, y0), (x1, y1), (x0, y1)], closed=True,
                         facecolor=SHADE_COLOUR, alpha=0.10, edgecolor="none", zorder=0.5))
    return True


def _shade_label(deadline, budget):
    return "misses deadline or budget" if deadline and budget else "misses the deadline" if deadline else \
        "over budget"


def _legend_handles(handles, front, rec, pruned, shade):
    """[(handle, label)]: the marks (front: its number of points; shade: the shaded region's label or None),
    then a "policy" heading and its colours, then "planner" and its markers."""
    def heading(text):
        h = Line2D([], [], linestyle="none")
        h._heading = True
        return h, text
    out = []
    if front:  # a line through ringed points; a ringed point alone when the front is one point
        out.append((Line2D([], [], color=FRONT_COLOUR, linewidth=1.5 if front > 1 else 0, marker="o",
                           markersize=5, markerfacecolor="white", markeredgecolor=FRONT_COLOUR,
                           markeredgewidth=1.1), "Pareto front"))
    if rec:
        out.append((Line2D([], [], linestyle="none", marker="*", markersize=13, markerfacecolor=STAR_COLOUR,
                           markeredgecolor="#222222", markeredgewidth=0.8), "recommended"))
    if pruned:
        out.append((Line2D([], [], linestyle="none", marker="x", markersize=5, markeredgewidth=0.9,
                           color=PRUNED_COLOUR), "pruned (bound dominated)"))
    if shade:
        out.append((Patch(facecolor=SHADE_COLOUR, alpha=0.25, edgecolor="none"), shade))
    if handles["policy"]:
        out.append(heading("policy"))
        out += [(Line2D([], [], linestyle="none", marker="s", markersize=7, markerfacecolor=c, markeredgecolor=c),
                 "\n".join(textwrap.wrap(p, 24)) or p) for p, c in handles["policy"]]
    if handles["planner"]:
        out.append(heading("planner"))
        out += [(Line2D([], [], linestyle="none", marker=m, markersize=6, markerfacecolor="#666666",
                        markeredgecolor="white", markeredgewidth=0.5), "\n".join(textwrap.wrap(p, 24)) or p)
                for p, m in handles["planner"]]
    return out


def _fix_height(fig, ax):
    """Grows or shrinks the figure until the plotting area is PLOT_HEIGHT_IN tall."""
    for _ in range(4):
        fig.canvas.draw()
        h = ax.get_position().height * fig.get_figheight()
        if abs(h - PLOT_HEIGHT_IN) < 0.02:
            return
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + PLOT_HEIGHT_IN - h)


def _obstacles(ax, drawn, pruned, front, deadline, budget):
    """The points, error bars, the front's steps and the deadline and budget lines, in display coordinates."""
    to_px = ax.transData.transform
    obs = _Obstacles()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    if deadline:
        obs.segments.append((tuple(to_px((deadline, y0))), tuple(to_px((deadline, y1)))))
    if budget:
        obs.segments.append((tuple(to_px((x0, budget))), tuple(to_px((x1, budget)))))
    for r in drawn:
        obs.points.append(tuple(to_px((r["time_days_mean"], r["cost_usd_mean"]))))
        for col, other, horizontal in (("time_days", "cost_usd_mean", True), ("cost_usd", "time_days_mean", False)):
            lo, hi = r[col + "_min"], r[col + "_max"]
            if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
                continue
            a = (lo, r[other]) if horizontal else (r[other], lo)
            b = (hi, r[other]) if horizontal else (r[other], hi)
            obs.segments.append((tuple(to_px(a)), tuple(to_px(b))))
    obs.points += [tuple(to_px((r["time_lb_days"], r["cost_lb_usd"]))) for r in pruned]
    pts = [(r["time_days_mean"], r["cost_usd_mean"]) for r in front]
    for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
        obs.segments += [(tuple(to_px((xa, ya))), tuple(to_px((xb, ya)))),
                         (tuple(to_px((xb, ya))), tuple(to_px((xb, yb))))]
    return obs


def _label_limits(fig, ax, obstacles, deadline, budget):
    """"deadline 30 d" along its line (top or bottom, or beside the budget line), "budget $200k" along its (at
    either end, or beside the deadline), each where it covers the fewest points and lines."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    kw = dict(fontsize=8.5, color=LIMIT_COLOUR, zorder=5,
              bbox=dict(boxstyle="square,pad=0.15", facecolor="white", edgecolor="none", alpha=0.8))
    show_d, show_b = bool(deadline) and x0 < deadline < x1, bool(budget) and y0 < budget < y1
    if show_d:
        def make_d(c):
            side, where = c
            if where in ("top", "bottom"):
                tr = offset_copy(ax.get_xaxis_transform(), fig, x=4 * side, units="points")
                y, va = (0.98, "top") if where == "top" else (0.02, "bottom")
            else:  # beside the budget line: just below or just above it
                sign = -1 if where == "below budget" else 1
                tr = offset_copy(ax.transData, fig, x=4 * side, y=4 * sign, units="points")
                y, va = budget, "top" if sign < 0 else "bottom"
            return ax.text(deadline, y, f"deadline {deadline:g} d", transform=tr, rotation=90,
                           ha="left" if side > 0 else "right", va=va, **kw)
        wheres = ["top", "bottom"] + (["below budget", "above budget"] if show_b else [])
        _place(fig, ax, obstacles, make_d, [(side, w) for w in wheres for side in (1, -1)])
    if show_b:
        def make_b(c):
            where, side = c
            if where in ("right", "left"):
                tr = offset_copy(ax.get_yaxis_transform(), fig, y=3 * side, units="points")
                x, ha = (0.99, "right") if where == "right" else (0.01, "left")
            else:  # beside the deadline line
                sign = -1 if where == "left of deadline" else 1
                tr = offset_copy(ax.transData, fig, x=4 * sign, y=3 * side, units="points")
                x, ha = deadline, "right" if sign < 0 else "left"
            return ax.text(x, budget, f"budget {usd(budget)}", transform=tr, ha=ha,
                           va="bottom" if side > 0 else "top", **kw)
        wheres = ["right", "left"] + (["left of deadline", "right of deadline"] if show_d else [])
        _place(fig, ax, obstacles, make_b, [(w, side) for w in wheres for side in (1, -1)])


def _leader_cost(obstacles, star, anchor, radius=7.0):
    """3 per point the line from the star to its label passes within radius pixels of (the star itself and
    the label's own corner left out)."""
    (x0, y0), (x1, y1) = star, anchor
    dx, dy = x1 - x0, y1 - y0
    length2 = dx * dx + dy * dy
    if length2 == 0:
        return 0.0
    cost = 0.0
    for (px, py) in obstacles.points:
        t = ((px - x0) * dx + (py - y0) * dy) / length2
        if 0.0 <= t <= 1.0 and math.hypot(px - x0, py - y0) > 2 * radius and \
                math.hypot(x0 + t * dx - px, y0 + t * dy - py) < radius:
            cost += 3
    return cost


def _recommended_text(rec, width=32):
    return (f"recommended: config {rec['config']}\n{wrap_label(rec['label'], width)}\n"
            f"{days(rec['time_days_mean'])} days, {usd(rec['cost_usd_mean'])}")


def _label_recommended(fig, ax, obstacles, rec):
    """The recommended configuration's label in a box, joined to its star by a thin line. Of the places on a
    10-pixel grid over the plotting area, the one whose box covers the fewest points and lines, whose line
    passes the fewest points, and that is nearest the star. False, and nothing drawn, when every place covers
    something (a crowded plot)."""
    text = _recommended_text(rec)
    xy = (rec["time_days_mean"], rec["cost_usd_mean"])
    px = fig.dpi / 72.0
    sx, sy = ax.transData.transform(xy)

    def make(x, y):  # the text's lower left corner at display (x, y)
        return ax.annotate(text, xy, xytext=((x - sx) / px, (y - sy) / px), textcoords="offset points",
                           fontsize=8.5, zorder=7, ha="left", va="bottom", annotation_clip=False,
                           bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="#999999",
                                     linewidth=0.6, alpha=0.92),
                           arrowprops=dict(arrowstyle="-", color="#444444", linewidth=0.8, shrinkA=0, shrinkB=8))
    # The box's size does not depend on where it goes: measure it once, then score every place by arithmetic.
    renderer = fig.canvas.get_renderer()
    probe = make(sx, sy)
    probe.update_positions(renderer)
    bb = Text.get_window_extent(probe, renderer)
    probe.remove()
    m = LABEL_MARGIN_PX
    w, h = bb.width + 2 * m, bb.height + 2 * m
    ab = ax.get_window_extent(renderer)
    axes_box = (ab.x0 + 4, ab.y0 + 4, ab.x1 - 4, ab.y1 - 4)  # off the spines a little
    star_px = STAR_SIZE_PT * px / 2 + 4  # the star's radius and some air
    best = None
    x0 = axes_box[0]
    while x0 + w <= axes_box[2]:
        y0 = axes_box[1]
        while y0 + h <= axes_box[3]:
            # where the line from the star meets the box (its nearest point), and how far that is
            nx, ny = min(max(sx, x0), x0 + w), min(max(sy, y0), y0 + h)
            dist = math.hypot(nx - sx, ny - sy)
            if dist >= star_px:
                box = (x0, y0, x0 + w, y0 + h)
                score = obstacles.score(box, axes_box) + 0.02 * dist / px + \
                    _leader_cost(obstacles, (sx, sy), (nx, ny))
                if best is None or score < best[0]:
                    best = (score, box)
            y0 += 10
        x0 += 10
    if best is None or best[0] > MAX_LABEL_SCORE:
        return False
    ann = make(best[1][0] + m, best[1][1] + m)
    ann.set_in_layout(False)
    obstacles.boxes.append(best[1])
    return True


def _save(fig, out_path):
    """style.save to a temporary file beside out_path, then renamed: a reader never sees half a figure."""
    d, base = os.path.split(os.path.abspath(out_path))
    stem, ext = os.path.splitext(base)
    tmp = os.path.join(d, f".{stem}.tmp{os.getpid()}{ext}")
    try:
        style.save(fig, tmp)
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", metavar="OUT_DIR", help="the output folder of `hetsim advise`")
    ap.add_argument("-o", "--out", default=None, metavar="OUT.png",
                    help=f"output file: .png or .pdf (default: OUT_DIR/{DEFAULT_FIGURE})")
    args = ap.parse_args(argv)
    out = args.out or os.path.join(args.out_dir, DEFAULT_FIGURE)
    if not out.lower().endswith((".png", ".pdf")):
        print(f"advise.py: error: -o {out}: the output must end in .png or .pdf", file=sys.stderr)
        return 2
    try:
        rows, advice = load(args.out_dir)
    except AdviseError as e:
        print(f"advise.py: error: {e}", file=sys.stderr)
        return 2
    for msg in warnings(rows, advice, os.path.join(args.out_dir, CSV_NAME)):
        print(f"advise.py: warning: {msg}", file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    c = draw(rows, advice, out)
    print(f"advise figure: {out} ({_plural(c['configurations'], 'configuration')}, {c['pareto']} on the Pareto "
          "front)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
