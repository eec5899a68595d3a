#!/usr/bin/python3
"""Measures a stack's straggler spread (calibration `straggler_cv`) from a framework's gradient-reduction
timer: the wait for the slowest node, on the development half of measured plans.

Usage: /usr/bin/python3 tools/fit/fit_straggler_cv.py [--runs RUNS.csv] [--base megatron-deepspeed]
           [--hetsim build/hetsim]

Why: DeepSpeed's `reduce_gradients` timer (Sailor's `grad_sync_ms`) runs from a rank's call to the end of
its gradient all-reduce, so it holds (a) the framework's own work around the reduction, which the runs with
one replica show alone (nothing to reduce: 4-8 ms), (b) NCCL's all-reduce, which the simulator plays, and
(c) the wait for the last replica. With each node's time T·(1 + cv·Z) (models/stragglers.h) every replica
runs at the pace of the slowest node it spans, and the iteration at the slowest of all N: the timer of the
first replica, itself spread over n = N / R nodes, sees on average cv·T·(E[max of N] − E[max of n]) standard
normals' worth of waiting, so

    cv_i = (measured sync − median one-replica sync − simulated all-reduce) / (T_i · (E[max of N] − E[max of n]))

for each run with more than one replica, T_i its simulated iteration without the wait. The estimate is the
median over the development half's runs (even data rows, as `hetsim validate-sim` splits them; robust to a
run whose timer caught a one-off stall), and the held-out half is the check: its measured timers against
the simulated all-reduce plus the framework's work plus the predicted wait. The runs are simulated under `--base` with
straggler_cv forced to 0.
"""
import argparse
import csv
import os
import subprocess
import tempfile

import numpy as np
from scipy.integrate import quad
from scipy.stats import norm


def expected_max(n):
    """E[max of n independent standard normals], as models/stragglers.cc integrates it."""
    if n <= 1:
        return 0.0
    upper = quad(lambda x: 1 - norm.cdf(x) ** n, 0, 12, limit=200)[0]
    lower = quad(lambda x: norm.cdf(x) ** n, -12, 0, limit=200)[0]
    return upper - lower


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="experiments/validation/sailor_gh200_opt350/runs.csv")
    ap.add_argument("--base", default="megatron-deepspeed")
    ap.add_argument("--hetsim", default="build/hetsim")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        cal = os.path.join(work, "no-stragglers.yaml")
        with open(cal, "w", encoding="utf-8") as f:
            f.write(f"kind: calibration\nname: no-stragglers\ndescription: {args.base} without stragglers\n"
                    f"base: {args.base}\ngeneric:\n  source: no straggler wait\n  straggler_cv: 0\n")
        out = os.path.join(work, "runs.csv")
        p = subprocess.run([args.hetsim, "validate-sim", "--runs", args.runs, "--calibration", cal, "-o", out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        if p.returncode != 0:
            raise SystemExit(f"validate-sim failed: {p.stderr.decode()[-2000:]}")
        with open(out, encoding="utf-8") as f:
            rows = [r for r in csv.DictReader(f) if r["measured_grad_sync_ms"]]
    for r in rows:
        r["R"] = int(r["dp"])
        r["N"] = int(r["nodes"])
        r["measured"] = float(r["measured_grad_sync_ms"])
        r["allreduce"] = float(r["simulated_grad_sync_ms"])
        r["T"] = float(r["simulated_ms"])
    dev = [r for r in rows if r["half"] == "development"]
    alone = [r["measured"] for r in dev if r["R"] == 1]
    if not alone:
        raise SystemExit("no one-replica run in the development half: the framework's own work is unknown")
    base_ms = float(np.median(alone))
    print(f"framework's work with nothing to reduce (median of {len(alone)} one-replica development runs): "
          f"{base_ms:.2f} ms")
    print(f"{'plan':24s} {'half':12s} {'R':>3s} {'N':>3s} {'E diff':>7s} {'T ms':>8s} {'timer':>8s} "
          f"{'all-red.':>8s} cv")
    estimates = []
    for r in rows:
        if r["R"] <= 1:
            continue
        r["E"] = expected_max(r["N"]) - expected_max(max(1, r["N"] // r["R"]))
        r["cv"] = (r["measured"] - base_ms - r["allreduce"]) / (r["T"] * r["E"])
        print(f"{r['plan']:24s} {r['half']:12s} {r['R']:3d} {r['N']:3d} {r['E']:7.3f} {r['T']:8.1f} "
              f"{r['measured']:8.2f} {r['allreduce']:8.2f} {r['cv']:.4f}")
        if r["half"] == "development":
            estimates.append(r["cv"])
    cv = float(np.median(estimates))
    print(f"straggler_cv = {cv:.4f} (median of {len(estimates)} development runs)")
    held = [r for r in rows if r["half"] == "held_out" and r["R"] > 1]
    for label, extra in (("the all-reduce alone", lambda r: 0.0),
                         ("+ the framework's work + the wait", lambda r: base_ms + cv * r["T"] * r["E"])):
        e = np.array([(r["allreduce"] + extra(r)) / r["measured"] - 1 for r in held])
        print(f"held-out timers ({len(held)} runs with R > 1), {label}: MAPE {100 * np.mean(abs(e)):.1f}%, "
              f"bias {100 * np.mean(e):+.1f}%; errors {' '.join(f'{100 * v:+.0f}' for v in e)}")


if __name__ == "__main__":
    main()
