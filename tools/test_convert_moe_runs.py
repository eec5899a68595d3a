#!/usr/bin/env python3
"""Checks tools/convert_moe_runs.py: converting the bundled raw table again gives the bundled set byte for byte,
every written plan passes `hetsim validate`, and bad rows stop the converter with the row named.

Usage: tools/test_convert_moe_runs.py HETSIM
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from converter_check import reconvert_and_validate  # noqa: E402
from converter_check import convert as run_converter  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SET = os.path.join(ROOT, "experiments", "validation", "megatron_bridge_moe_h100")
CONVERTER = os.path.join(ROOT, "tools", "convert_moe_runs.py")


def convert(src, out):
    return run_converter(CONVERTER, src, out)


def main():
    hetsim = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as work:
        failures += reconvert_and_validate(CONVERTER, SET, hetsim, work)
        # A bad row: EP that does not divide a stage's ranks, and an unknown model; each names its row.
        with open(os.path.join(SET, "raw", "runs.csv")) as f:
            lines = f.read().splitlines()
        header = next(i for i, l in enumerate(lines) if not l.startswith("#"))
        first = header + 1
        cells = lines[first].split(",")
        for column, value, expect in (("ep", "7", "EP 7 does not divide"), ("model", "Unknown_MoE", "Unknown_MoE")):
            bad = list(cells)
            bad[lines[header].split(",").index(column)] = value
            path = os.path.join(work, f"bad-{column}.csv")
            with open(path, "w") as f:
                f.write("\n".join(lines[:first] + [",".join(bad)]) + "\n")
            r = convert(path, os.path.join(work, f"out-{column}"))
            if r.returncode == 0 or expect not in r.stderr + r.stdout or f"row {first + 1 - header}" not in r.stderr + r.stdout:
                failures.append(f"a row with {column} {value}: exit {r.returncode}, {r.stderr.strip()}")
    for f in failures:
        print("FAIL", f)
    print(f"{'ok' if not failures else 'FAILED'}: convert_moe_runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
