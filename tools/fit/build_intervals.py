"""Writes models/catalog/intervals.csv: the residuals prediction intervals are drawn from (models/intervals.h).

Every bundled validation set is simulated by `hetsim validate-sim --runs SET` with no flags, i.e. with the
calibration the one rule picks for each run (docs/calibration.md "One rule"), exactly what a user who passes
no flags gets. From each set only the development half is kept (even data rows, as validate-sim splits
them); the held-out halves stay out of the table so that `validate-sim` can report how many of their runs
the intervals cover. A residual is measured / simulated, with the run's class (GPU family, dtype, ZeRO-3,
pipeline depth, GPU count, whether its GPU types rest on measurements, whether the model is a mixture of
experts) as validate-sim's per-run CSV gives it.

Usage: /usr/bin/python3 tools/fit/build_intervals.py [--hetsim build/hetsim] [--out models/catalog/intervals.csv]
(about two minutes on two cores). Rebuild hetsim afterwards: the table is embedded in the binary.
"""
import argparse
import csv
import datetime
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (name in the table, runs CSV relative to the repository)
SETS = [
    ("vtrain-single", "experiments/validation/vtrain_a100_single_node.csv"),
    ("vtrain-multi", "experiments/validation/vtrain_a100_multi_node.csv"),
    ("megatron-table1", "experiments/validation/megatron_sc21_table1.csv"),
    ("llmfoundry-fsdp", "experiments/validation/llmfoundry_a100_40gb_fsdp/runs.csv"),
    ("nemo-fp8", "experiments/validation/nemo_2407_h100_fp8/runs.csv"),
    ("sailor-gh200", "experiments/validation/sailor_gh200_opt350/runs.csv"),
    ("torchtitan-fsdp", "experiments/validation/torchtitan_a100_fsdp/runs.csv"),
    # Mixtures of experts (moe: 1): an MoE run's interval draws on these alone, a dense run's never does.
    ("moe-bridge", "experiments/validation/megatron_bridge_moe_h100/runs.csv"),
]
# Outside checks of today's fleets (docs/fleets.md), never fitted on: the development-half runs on the types that
# rested on generic values until their GEMMs were measured (B300, GB300, MI355X), simulated with those types'
# values generic again (tools/fit/generic-basis.yaml, `measured: false`): how far generic values are off on a new
# type, which an interval for a type with no measured basis draws on. Their measured runs stay out, so the seven
# sets' intervals are as before.
GENERIC_BASIS = os.path.join("tools", "fit", "generic-basis.yaml")
UNMEASURED_ONLY = [
    ("blackwell-bridge", "experiments/validation/megatron_bridge_blackwell/runs.csv"),
    ("amd-instinct", "experiments/validation/amd_instinct_llama31_8b/runs.csv"),
]


def residuals(hetsim, name, runs, unmeasured_only=False):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "per-run.csv")
        cmd = [hetsim, "validate-sim", "--runs", os.path.join(ROOT, runs), "-o", out]
        if unmeasured_only:
            cmd += ["--calibration", os.path.join(ROOT, GENERIC_BASIS)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if not os.path.exists(out):
            sys.exit(f"validate-sim failed on {runs}:\n{p.stdout}{p.stderr[-3000:]}")
        rows = list(csv.DictReader(open(out)))
    kept = []
    for r in rows:
        if r["half"] != "development" or (unmeasured_only and r.get("measured") != "0"):
            continue
        ratio = float(r["measured_ms"]) / float(r["simulated_ms"])
        kept.append({"set": name, "line": r["line"], "family": r["family"], "dtype": r["dtype"],
                     "zero3": r["zero3"], "pp": r.get("pp") or "1", "gpus": r["gpus"],
                     "ratio": f"{ratio:.5f}", "measured": r.get("measured") or "1", "moe": r.get("moe") or "0"})
    print(f"{name}: {len(kept)} development runs of {len(rows)}", file=sys.stderr)
    return kept


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hetsim", default=os.path.join(ROOT, "build", "hetsim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "catalog", "intervals.csv"))
    args = ap.parse_args()
    table = []
    for name, runs in SETS:
        table += residuals(args.hetsim, name, runs)
    for name, runs in UNMEASURED_ONLY:
        table += residuals(args.hetsim, name, runs, unmeasured_only=True)
    with open(args.out, "w", newline="") as fh:
        fh.write("# Validation residuals for prediction intervals (models/intervals.h, docs/calibration.md \"Intervals\").\n")
        fh.write("# One row per run of the development half (even data rows) of each bundled validation set, simulated by\n")
        fh.write("# `hetsim validate-sim --runs SET` with no flags (the one rule's calibration); ratio = measured / simulated.\n")
        fh.write(f"# Written by tools/fit/build_intervals.py on {datetime.date.today().isoformat()}; the held-out halves are not here.\n")
        fh.write("# measured: 0 where a GPU type of the run has no measured basis (its interval draws on those runs only).\n")
        fh.write("# moe: 1 where the model is a mixture of experts (an MoE run's interval draws on those runs only).\n")
        w = csv.DictWriter(fh, fieldnames=["set", "line", "family", "dtype", "zero3", "pp", "gpus", "ratio", "measured",
                                           "moe"], lineterminator="\n")
        w.writeheader()
        w.writerows(table)
    print(f"wrote {args.out}: {len(table)} residuals", file=sys.stderr)


if __name__ == "__main__":
    main()
