"""The inputs of figures.py: RESULTS_DIR/results.jsonl (a Row per line) and RESULTS_DIR/figures.json (the figure
specs), loaded and checked; each figure resolved against the rows (its columns, default group and filter, or the
timeline trace and replay reports it draws); and a figure's rows aggregated into a Table of Cells, one per (x,
group): the values over the repeats, failures and OOM. Malformed inputs raise InputError, whose message names the
file and the field. The contract is docs/results-format.md.
"""
import difflib
import json
import math
import os
import re
import statistics

import replay
import timeline

KINDS = ("bar", "grouped_bar", "line", "stacked", "timeline", "replay")
NO_ROWS = ("timeline", "replay")  # kinds drawn from their own files, not from results.jsonl
TOP_LEVEL = ("point", "id", "status", "reason")
# The metrics the contract names; a figure may ask for one even when every row failed (so none has metrics).
KNOWN_METRICS = ("iteration_time_s", "tokens_per_s", "mfu", "bubble_fraction", "time_compute_s", "time_tp_s",
                 "time_pp_s", "time_dp_s", "time_idle_s", "peak_memory_gib", "any_oom", "estimated_iteration_s",
                 "plan_search_s", "candidates", "pipelines", "stages_max", "sim_wall_s")
PLANNER_COLUMNS = ("planner_label", "planner")


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
