#!/usr/bin/env python3
"""Compares hetsim-kernel-bench's MoE rows with the kernel model: how far the twin's price of an MoE block's
expert GEMMs and permutations is from the GPU, and what a dropless dispatcher's device-to-host round trip costs.

Usage: python3 tools/fit/compare_moe_kernels.py KERNELS_CSV

KERNELS_CSV is hetsim-kernel-bench output run with --moe-models (calibration/gpu_session.sh's bench step does).
Prints, per model and EP degree, each expert GEMM's measured time (one GEMM per local expert, in sequence),
the model's price of the batched kernel and their ratio; the permutation rows alike; the round trip's median;
and the ratio of the sums by kind, the number docs/moe.md's "Not modelled yet" asks for.
"""
import csv
import sys
from collections import defaultdict


def read(path):
    with open(path) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        rows = read(argv[1])
    except OSError as e:
        print(f"compare_moe_kernels: cannot read {argv[1]}: {e.strerror}", file=sys.stderr)
        return 1
    if rows and "ep" not in rows[0]:
        print(f"compare_moe_kernels: {argv[1]} has no 'ep' column: written by a hetsim-kernel-bench without "
              "--moe-models; rerun it with --moe-models", file=sys.stderr)
        return 1
    moe = [r for r in rows if r["kind"] in ("moe-gemm", "moe-permute")]
    sync = [r for r in rows if r["kind"] == "sync"]
    if not moe and not sync:
        print(f"compare_moe_kernels: {argv[1]} has no moe-gemm, moe-permute or sync rows "
              "(run hetsim-kernel-bench with --moe-models)", file=sys.stderr)
        return 1
    sums = defaultdict(lambda: [0.0, 0.0])
    print(f"{'model':<18}{'ep':>4}  {'kernel':<22}{'pass':<5}{'experts':>8}{'rows':>8}"
          f"{'measured us':>13}{'model us':>10}{'ratio':>7}")
    for r in moe:
        measured, model = float(r["median_s"]), float(r["model_s"])
        sums[r["kind"]][0] += measured
        sums[r["kind"]][1] += model
        ratio = measured / model if model > 0 else float("nan")
        print(f"{r['model']:<18}{r['ep']:>4}  {r['name']:<22}{r['pass']:<5}{float(r['batch']):>8.0f}"
              f"{float(r['m']):>8.0f}{measured * 1e6:>13.1f}{model * 1e6:>10.1f}{ratio:>7.2f}")
    for kind, (measured, model) in sums.items():
        if model > 0:
            print(f"{kind}: measured / model over every row {measured / model:.3f} "
                  f"({measured * 1e3:.2f} ms against {model * 1e3:.2f} ms)")
    for r in sync:
        print(f"device-to-host round trip: median {float(r['median_s']) * 1e6:.1f} us, "
              f"min {float(r['min_s']) * 1e6:.1f} us over {r['reps']} trips (the model has no such term)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
