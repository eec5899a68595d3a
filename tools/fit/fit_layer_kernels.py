#!/usr/bin/python3
"""Judges the kernel model's shape (models/kernels.cc: one GEMM efficiency per full wave of 128x128 tiles, a
memory-bound roofline, a fixed latency per kernel) on every kernel of Megatron GPT blocks timed on a GPU
(calibration/torch_layer_kernels.py), block shape by block shape.

Usage: /usr/bin/python3 tools/fit/fit_layer_kernels.py [calibration/data/layer-kernels-h200.csv]
           [--peak-tflops 989] [--hbm-gbyte-s 4800] [--sms 132] [--check PCT]

Fits the three values on the blocks' summed times (forward plus backward kernels of each shape, relative
error, scipy least squares), then prints the residual per hidden size and the time-weighted GEMM efficiency
(per full wave) per hidden size. With --check PCT it exits 1 when a hidden size's mean residual is beyond
PCT percent. The defaults are the H200's catalog numbers (models/catalog/gpus.csv).
"""
import argparse
import collections
import csv
import sys

import numpy as np
from scipy.optimize import least_squares

from halves import full_wave_seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="?", default="calibration/data/layer-kernels-h200.csv")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--hbm-gbyte-s", type=float, default=4800.0)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--check", type=float, default=None)
    a = ap.parse_args()
    peak, hbm = a.peak_tflops * 1e12, a.hbm_gbyte_s * 1e9
    with open(a.csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    if not rows:
        sys.exit(f"{a.csv}: no kernels")

    # Each kernel's terms, once: compute at the peak in whole waves (0 for memory-bound kernels) and HBM
    # bytes at the catalog bandwidth; and the block shape it belongs to.
    keys = sorted({tuple(int(r[c]) for c in ("hidden", "heads", "seq_len", "tp", "micro_batch")) for r in rows})
    index = {k: i for i, k in enumerate(keys)}
    block = np.array([index[tuple(int(r[c]) for c in ("hidden", "heads", "seq_len", "tp", "micro_batch"))]
                      for r in rows])
    wave = np.array([0.0 if r["kind"] == "memory" else
                     full_wave_seconds(*(float(r[c]) for c in ("m", "n", "k", "batch")), peak, a.sms) for r in rows])
    memory = np.array([float(r["bytes"]) / hbm for r in rows])
    measured_s = np.array([float(r["median_s"]) for r in rows])
    measured = np.bincount(block, weights=measured_s, minlength=len(keys))

    def residual(x):
        gemm_eff, mem_eff, latency = x
        t = np.maximum(wave / gemm_eff, memory / mem_eff) + latency
        return np.bincount(block, weights=t, minlength=len(keys)) / measured - 1

    fit = least_squares(residual, [0.7, 0.7, 5e-6], bounds=([0.05, 0.05, 0], [1.5, 1.5, 1e-3]), x_scale="jac")
    e = residual(fit.x)
    print(f"{a.csv}: {len(rows)} kernels, {len(keys)} block shapes")
    print(f"fitted on the blocks' summed times: GEMM efficiency {fit.x[0]:.4f}, memory efficiency {fit.x[1]:.4f}, "
          f"latency {fit.x[2] * 1e6:.2f} us; MAPE {100 * np.mean(abs(e)):.2f}%, bias {100 * np.mean(e):+.2f}%")
    by_h = collections.defaultdict(list)
    for k, x in zip(keys, e):
        by_h[k[0]].append(x)
    gemm = collections.defaultdict(lambda: [0.0, 0.0])
    for r, w, t in zip(rows, wave, measured_s):
        if r["kind"] == "gemm":
            gemm[int(r["hidden"])][0] += w
            gemm[int(r["hidden"])][1] += t
    worst = 0.0
    print("hidden  blocks  mean residual  linear layers' GEMM efficiency per full wave (time-weighted)")
    for h in sorted(by_h):
        mean = 100 * float(np.mean(by_h[h]))
        worst = max(worst, abs(mean))
        print(f"{h:6d}  {len(by_h[h]):6d}  {mean:+12.2f}%  {gemm[h][0] / gemm[h][1]:.3f}")
    if a.check is not None and worst > a.check:
        print(f"a hidden size's mean residual is {worst:.2f}%, beyond {a.check}%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
