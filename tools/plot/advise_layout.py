"""Where things go in advise.py's figure: the axis ranges (what the data spans, whether a deadline or budget joins
it, when an axis turns logarithmic) and their tick labels, the plotting area's fixed height, and the labels of the
recommended configuration and of the deadline and budget, each placed where it covers the fewest points and lines
(_Obstacles: what a label should not cover).
"""
import math
import textwrap

from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, NullFormatter
from matplotlib.transforms import offset_copy

import replay
from advise_input import _bounded, _finite, days, usd

PLOT_HEIGHT_IN = 3.5  # the plotting area; the figure grows around it (title, caption)
STAR_SIZE_PT = 19
LIMIT_COLOUR = "#555555"
# The recommended label goes into the legend when its best place in the plot scores above this: it would cover
# a point (10) or a line (8), or its leader would pass two points (3 each); 0.02 per point of leader length.
MAX_LABEL_SCORE = 6.0
# Room kept around the recommended label's text when scoring a place (pixels at 150 dpi): its box's padding
# and a little air.
LABEL_MARGIN_PX = 10


# --- axes --------------------------------------------------------------------------------------------------


def _plotted(rows):
    """(times, costs) the axes span: the finite means and seed ranges of the drawn rows, the bounds of the
    pruned ones."""
    drawn = [r for r in rows if _finite(r)]
    bounded = [r for r in rows if _bounded(r)]
    xs = [r[c] for r in drawn for c in ("time_days_mean", "time_days_min", "time_days_max")]
    ys = [r[c] for r in drawn for c in ("cost_usd_mean", "cost_usd_min", "cost_usd_max")]
    return xs + [r["time_lb_days"] for r in bounded], ys + [r["cost_lb_usd"] for r in bounded]


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


def _fix_height(fig, ax):
    """Grows or shrinks the figure until the plotting area is PLOT_HEIGHT_IN tall."""
    for _ in range(4):
        fig.canvas.draw()
        h = ax.get_position().height * fig.get_figheight()
        if abs(h - PLOT_HEIGHT_IN) < 0.02:
            return
        fig.set_size_inches(fig.get_figwidth(), fig.get_figheight() + PLOT_HEIGHT_IN - h)


# --- labels ------------------------------------------------------------------------------------------------


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
