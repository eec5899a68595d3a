"""The inputs of advise.py: OUT_DIR/configurations.csv and OUT_DIR/advice.json as `hetsim advise` writes them,
their contract (COLUMNS, ADVICE_FIELDS), loaded and checked against each other (AdviseError names the file and
the column or field); which rows the figure draws (ok with a finite mean; pruned with finite bounds); the warnings
about flags that disagree with the numbers; and the numbers as the figure and the messages show them (days, USD).
"""
import csv
import difflib
import json
import math
import os

import replay

CSV_NAME = "configurations.csv"
ADVICE_NAME = "advice.json"

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


# --- numbers as shown --------------------------------------------------------------------------------------


def usd(v, _pos=None):
    """$850, $12k, $12.5k, $1.2M (three significant digits at most)."""
    a = abs(v)
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if a >= div * 0.9995:
            return f"${v / div:.3g}{suffix}"
    return f"${v:.3g}"


def days(v, _pos=None):
    return f"{v:.3g}"
