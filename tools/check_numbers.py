#!/usr/bin/env python3
"""Ties the numbers README and docs/status.md document to the benchmarks that produce them.

docs/numbers.tsv lists each documented number: the file that states it, the phrase around it (`{}` where
the number stands), the benchmark measurement that produces it (a `tools/bench` line, `name value unit`), and
how the value is written (a Python format spec applied to value x scale; a leading `+` keeps the sign; a
minus is written as U+2212, as the docs do). Kinds:
  value   the documented number must be what the benchmark prints, as written (checked with --bench)
  timing  a speed measured on the machine the docs name; the benchmark is named, its value not compared

Usage:
  check_numbers.py                    every phrase still stands in its file, with a number where `{}` is
                                      (the fast tier's test: the docs and the table cannot drift apart)
  check_numbers.py --bench OUT.txt    also: each `value` row's number is the benchmark's (tools/bench's
                                      output; rows whose measurement OUT.txt lacks are listed as not run)
  check_numbers.py --self-test        the checker on hand-made inputs
Exit status 1 when a row fails, 2 on bad usage or a malformed table.
"""
import argparse
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "docs", "numbers.tsv")
NUMBER = r"[+\u2212-]?[0-9][0-9,]*(?:\.[0-9]+)?"
COLUMNS = ["file", "phrase", "measurement", "kind", "format", "scale"]


def read_table(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            cells = line.split("\t")
            if cells == COLUMNS:
                continue
            if len(cells) != len(COLUMNS):
                raise ValueError(f"{path}:{n}: {len(cells)} tab-separated cells, expected {len(COLUMNS)} "
                                 f"({', '.join(COLUMNS)})")
            row = dict(zip(COLUMNS, cells), line=n)
            if row["phrase"].count("{}") != 1:
                raise ValueError(f"{path}:{n}: phrase: mark the number with exactly one {{}}")
            if row["kind"] not in ("value", "timing"):
                raise ValueError(f"{path}:{n}: kind: '{row['kind']}' (expected value or timing)")
            try:
                row["scale"] = float(row["scale"] or 1)
                format(1.0, row["format"] or "g")
            except ValueError as e:
                raise ValueError(f"{path}:{n}: format or scale: {e}") from None
            rows.append(row)
    return rows


def read_bench(path):
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                try:
                    values[parts[0]] = float(parts[1])
                except ValueError:
                    pass
    return values


def written(value, spec):
    text = format(value, spec or "g")
    return text.replace("-", "\u2212")


def phrase_pattern(phrase):
    before, after = phrase.split("{}")
    return re.compile(re.escape(before) + "(" + NUMBER + ")" + re.escape(after))


def check(rows, root, bench=None, out=sys.stdout):
    """Returns the number of failed rows."""
    failed = 0
    texts = {}
    not_run = []
    for row in rows:
        where = f"docs/numbers.tsv:{row['line']}"
        path = os.path.join(root, row["file"])
        if path not in texts:
            try:
                with open(path, encoding="utf-8") as f:
                    texts[path] = f.read()
            except OSError as e:
                print(f"FAIL {where}: {row['file']}: {e.strerror}", file=out)
                failed += 1
                continue
        found = [m.group(1) for m in phrase_pattern(row["phrase"]).finditer(texts[path])]
        if not found:
            print(f"FAIL {where}: {row['file']} no longer says \"{row['phrase']}\" (fix the doc or the table)",
                  file=out)
            failed += 1
            continue
        if bench is None or row["kind"] != "value":
            continue
        if row["measurement"] not in bench:
            not_run.append(row["measurement"])
            continue
        want = written(bench[row["measurement"]] * row["scale"], row["format"])
        if want not in [f.replace("-", "\u2212") for f in found]:
            print(f"FAIL {where}: {row['file']} says {found[0]} in \"{row['phrase']}\"; {row['measurement']} "
                  f"gives {want}", file=out)
            failed += 1
    if not_run:
        print(f"not run ({len(not_run)}): " + ", ".join(sorted(set(not_run))), file=out)
    checked = "phrases" if bench is None else "phrases and benchmark values"
    print(f"{len(rows) - failed} of {len(rows)} documented numbers hold ({checked})", file=out)
    return failed


def self_test():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "doc.md"), "w", encoding="utf-8") as f:
            f.write("held out: 7.4% MAPE, bias \u22123.7%; 80.8% of 834 runs; took 1.4 s\n")
        table = os.path.join(d, "numbers.tsv")
        with open(table, "w", encoding="utf-8") as f:
            f.write("\t".join(COLUMNS) + "\n")
            f.write("doc.md\theld out: {}% MAPE\tv.mape\tvalue\t.1f\t\n")
            f.write("doc.md\tbias {}%\tv.bias\tvalue\t.1f\t\n")
            f.write("doc.md\t{}% of 834\tv.cover\tvalue\t.1f\t100\n")
            f.write("doc.md\ttook {} s\tsim.t\ttiming\t\t\n")
        rows = read_table(table)
        assert len(rows) == 4 and rows[2]["scale"] == 100
        sink = open(os.devnull, "w")
        assert check(rows, d, out=sink) == 0
        assert check(rows, d, {"v.mape": 7.41, "v.bias": -3.66, "v.cover": 0.808, "sim.t": 9}, out=sink) == 0
        assert check(rows, d, {"v.mape": 7.46, "v.bias": -3.66, "v.cover": 0.808}, out=sink) == 1  # 7.5 != 7.4
        assert check(rows, d, {"v.mape": 7.4, "v.bias": 3.7, "v.cover": 0.808}, out=sink) == 1  # sign
        assert check(rows, d, {}, out=sink) == 0  # nothing run: phrases only
        with open(os.path.join(d, "doc.md"), "w", encoding="utf-8") as f:
            f.write("held out: 7.4% MAPE\n")
        assert check(rows, d, out=sink) == 3  # three phrases gone
        with open(table, "a", encoding="utf-8") as f:
            f.write("doc.md\tno number here\tx\tvalue\t.1f\t\n")
        try:
            read_table(table)
            raise AssertionError("a phrase without {} must be refused")
        except ValueError as e:
            assert "exactly one {}" in str(e)
    print("check_numbers self-test: OK")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", help="tools/bench output (`name value unit` lines)")
    p.add_argument("--table", default=TABLE)
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    try:
        rows = read_table(a.table)
    except (OSError, ValueError) as e:
        print(f"check_numbers: {e}", file=sys.stderr)
        return 2
    bench = None
    if a.bench:
        try:
            bench = read_bench(a.bench)
        except OSError as e:
            print(f"check_numbers: --bench {a.bench}: {e.strerror}", file=sys.stderr)
            return 2
    return 1 if check(rows, ROOT, bench) else 0


if __name__ == "__main__":
    sys.exit(main())
