#!/usr/bin/python3
"""Fits a software stack's host costs on one GPU type's host to the development half of measured runs,
with the simulator itself as the model.

Usage: /usr/bin/python3 tools/fit/fit_stack_costs.py --runs RUNS.csv --gpus gh200 [--base megatron-deepspeed]
           [--hetsim build/hetsim] [--out FILE.yaml]

A calibration's host costs — `host_overhead_us` (CPU time to issue one kernel) and `pass_overhead_ms` (the
framework's work per micro-batch and pass) — belong to the software stack *on its host CPU*: the bundled
`megatron-deepspeed` values were fitted on vTrain's x86 hosts, and a GH200 node issues its kernels from a
Grace (Arm Neoverse V2) CPU. This fits those two values for the GPU types given (`--gpus`) on the
development half of a runs CSV (`hetsim validate-sim` splits it: even data rows development, odd held out)
and writes a calibration layered on `--base` with the fitted entry; the rows are simulated as validate-sim
simulates them, each with `--calibration` set to the candidate file. It prints both halves' MAPE and bias
before and after, so the held-out half is the report.
"""
import argparse
import csv
import os
import subprocess
import tempfile

import numpy as np
from scipy.optimize import least_squares

from halves import HALVES, half_line

NAMES = ["host_overhead_us", "pass_overhead_ms"]


def calibration_yaml(x, base, gpus, runs):
    v = dict(zip(NAMES, x))
    return f"""kind: calibration
name: stack-fit
description: >-
  {base}'s values with the stack's host costs on the {', '.join(gpus)} host refitted on the development half
  of {os.path.basename(runs)} (tools/fit/fit_stack_costs.py).
provenance:
  host: "the runs' own machines (published measurements)"
  date: 2026-11-25
  command: "/usr/bin/python3 tools/fit/fit_stack_costs.py --runs {runs} --gpus {','.join(gpus)} --base {base}"
  data: {runs}
base: {base}
gpus:
  - gpus: [{', '.join(gpus)}]
    source: >-
      host costs of the runs' software stack on this GPU type's host, fitted on the development half of
      {runs} (tools/fit/fit_stack_costs.py)
    host_overhead_us: {v['host_overhead_us']:.2f}
    pass_overhead_ms: {v['pass_overhead_ms']:.4f}
"""


def simulate(hetsim, runs, cal, work):
    out = os.path.join(work, "runs-out.csv")
    p = subprocess.run([hetsim, "validate-sim", "--runs", runs, "--calibration", cal, "-o", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if p.returncode != 0:
        raise SystemExit(f"validate-sim failed: {p.stderr.decode()[-2000:]}")
    with open(out, encoding="utf-8") as f:
        return [(r["half"], float(r["error"])) for r in csv.DictReader(f)]


def report(rows, label):
    print(label)
    for half in HALVES:
        print(half_line(rows, half, errors=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--gpus", required=True, help="comma-separated GPU types whose host costs are fitted")
    ap.add_argument("--base", default="megatron-deepspeed")
    ap.add_argument("--start", default="60.86,1.194", help="starting host_overhead_us,pass_overhead_ms")
    ap.add_argument("--hetsim", default="build/hetsim")
    ap.add_argument("--out", default="stack-fit.yaml")
    args = ap.parse_args()
    gpus = args.gpus.split(",")
    x0 = [float(v) for v in args.start.split(",")]
    with tempfile.TemporaryDirectory() as work:
        cal = os.path.join(work, "cal.yaml")

        def rows_for(x):
            with open(cal, "w", encoding="utf-8") as f:
                f.write(calibration_yaml(x, args.base, gpus, args.runs))
            return simulate(args.hetsim, args.runs, cal, work)

        report(rows_for(x0), f"start ({args.base}'s values):")
        fit = least_squares(lambda x: np.array([e for h, e in rows_for(x) if h == "development"]), x0,
                            bounds=([0, 0], [1000, 100]), x_scale=np.maximum(np.abs(x0), 1.0), diff_step=0.01)
        report(rows_for(fit.x), f"fitted ({fit.nfev} evaluations):")
        for n, v in zip(NAMES, fit.x):
            print(f"  {n} = {v:.6g}")
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(calibration_yaml(fit.x, args.base, gpus, args.runs))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
