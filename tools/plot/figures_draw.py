"""The drawing of figures.py's figure kinds, each into a new Matplotlib figure: bar and grouped_bar (draw_bars),
line (draw_line) and stacked (draw_stacked) from an aggregated Table, timeline (draw_timeline) from a Chrome trace;
and the axes helpers they share (panels.py uses them too): the light y grid, the legend above the plot, the ×
of a failed point, the OOM legend entry, x tick labels turned when crowded, title and caption, and the plotting
area's fixed height.
"""
import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

import timeline  # noqa: E402
from figures_input import as_number, canon  # noqa: E402
from figures_style import (CAPTION_PT, EDGE, FAIL_COLOUR, OOM_HATCH, PLOT_HEIGHT_IN, column_label,  # noqa: E402
                           compact_number, fit_width, fmt_x, segment_style, series_style, short_label, stack_label)

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
