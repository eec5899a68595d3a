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

Split along its concerns: advise_input.py loads and checks the two files, advise_layout.py sets the axis ranges
and places the labels, this module draws the figure; the names above stay importable from here.
"""
import argparse
import math
import os
import re
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Polygon  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures  # noqa: E402
import replay  # noqa: E402
import style  # noqa: E402
from advise_input import (ADVICE_FIELDS, ADVICE_NAME, COLUMNS, CSV_NAME, OBJECTIVES, OK_REQUIRED,  # noqa: E402
                          STATUSES, AdviseError, _bounded, _finite, check_consistent, days, load, load_advice,
                          load_rows, usd, warnings)
from advise_layout import (LABEL_MARGIN_PX, LIMIT_COLOUR, MAX_LABEL_SCORE, PLOT_HEIGHT_IN,  # noqa: E402
                           STAR_SIZE_PT, _axis, _fix_height, _label_limits, _label_recommended, _limits,
                           _obstacles, _plotted, _recommended_text, _use_log, limit_in_view, wrap_label)

DEFAULT_FIGURE = "pareto.png"

WIDTH_IN = 7.4
FRONT_COLOUR = "#222222"
STAR_COLOUR = "#FFC20A"
PRUNED_COLOUR = "#B4B4B4"
SHADE_COLOUR = "#9A9A9A"
CAPTION_COLOUR = "#707070"
# Planner markers in this figure: a known planner keeps figures.py's marker unless it is one this figure uses
# for something else (the star, the pruned crosses); others take the first free one of these.
RESERVED_MARKERS = ("*", "x", "X", "+")
PLANNER_MARKERS = ("o", "s", "^", "D", "v", "P", "<", ">", "h", "p", "d", "8", "H")

# The module's API: what advise_input.py and advise_layout.py hold, as it was before the split (test_advise.py
# uses it), and this module's own.
__all__ = [
    # advise_input.py
    "CSV_NAME", "ADVICE_NAME", "COLUMNS", "STATUSES", "OK_REQUIRED", "ADVICE_FIELDS", "OBJECTIVES", "AdviseError",
    "load_rows", "load_advice", "warnings", "check_consistent", "load", "usd", "days",
    # advise_layout.py
    "PLOT_HEIGHT_IN", "STAR_SIZE_PT", "LIMIT_COLOUR", "MAX_LABEL_SCORE", "LABEL_MARGIN_PX", "limit_in_view",
    "_use_log", "wrap_label",
    # this module
    "DEFAULT_FIGURE", "WIDTH_IN", "FRONT_COLOUR", "STAR_COLOUR", "PRUNED_COLOUR", "SHADE_COLOUR", "CAPTION_COLOUR",
    "RESERVED_MARKERS", "PLANNER_MARKERS", "counts", "caption", "_failed_reasons", "natural_key",
    "_planner_markers", "draw", "main",
]


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


def _plural(n, word, many=None):
    return f"{n} {word if n == 1 else (many or word + 's')}"


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
