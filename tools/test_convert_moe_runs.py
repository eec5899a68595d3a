#!/usr/bin/env python3
"""Checks tools/convert_moe_runs.py: converting the bundled raw table again gives the bundled set byte for byte,
every written plan passes `hetsim validate`, and bad rows stop the converter with the row named.

Usage: tools/test_convert_moe_runs.py HETSIM
"""
import filecmp
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SET = os.path.join(ROOT, "experiments", "validation", "megatron_bridge_moe_h100")
CONVERTER = os.path.join(ROOT, "tools", "convert_moe_runs.py")


def convert(src, out):
    return subprocess.run([sys.executable, CONVERTER, src, out], capture_output=True, text=True)


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def main():
    hetsim = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "set")
        r = convert(os.path.join(SET, "raw", "runs.csv"), out)
        if r.returncode != 0:
            failures.append(f"the bundled table did not convert: {r.stderr}")
        elif not same_tree(out, SET):
            failures.append("converting the bundled raw table again differs from the bundled set "
                            "(run tools/convert_moe_runs.py and commit its output)")
        plans = sorted(os.path.join(SET, "plans", p) for p in os.listdir(os.path.join(SET, "plans")))
        v = subprocess.run([hetsim, "validate"] + plans, capture_output=True, text=True, cwd=os.path.join(SET, "plans"))
        if v.returncode != 0:
            failures.append(f"hetsim validate on the bundled plans: {v.stdout}{v.stderr}")
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
