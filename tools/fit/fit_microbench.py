#!/usr/bin/env python3
"""Fits the compute model's per-GPU parameters (models/kernels.h) to hetsim-kernel-bench output.

Usage: /usr/bin/python3 tools/fit/fit_microbench.py calibration/data/h100/kernels.csv [--peak-tflops 989]
       [--hbm-gbyte-s 3350] [--sm-count 132]   (--sm-count 0: the GEMMs without wave quantisation)

Prints:
- GEMM: the efficiency per full wave of 128x128 tiles and the intercept, by least squares on relative error
  (t = waves * 2*128*128*k / (peak/SMs) / efficiency + latency), the fit's MAPE and its residual by kernel,
  TP degree, micro-batch and sequence length (a trend would mean the shape model misses something);
- memory-bound kernels: the reached HBM bandwidth per kernel (traffic >= 32 MB, where launch costs vanish)
  and the efficiency fitted over all of them;
- launch: GPU time and host issue time per back-to-back one-element kernel.
The values bundled in models/kernels.cc (H100 / ExecH100) come from this script's output.
"""
import argparse
import collections
import csv

import numpy as np

from halves import full_wave_seconds


def load(path):
    rows = [r for r in csv.DictReader(line for line in open(path) if not line.startswith("#"))]
    for r in rows:
        for k in ("m", "n", "k", "batch", "bytes", "flops", "median_s", "min_s", "model_s", "micro_batch", "tp",
                  "seq_len"):
            r[k] = float(r[k])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--hbm-gbyte-s", type=float, default=3350.0)
    ap.add_argument("--sm-count", type=int, default=132)
    a = ap.parse_args()
    rows = load(a.csv)
    peak, sm = a.peak_tflops * 1e12, a.sm_count

    g = [r for r in rows if r["kind"] == "gemm"]
    x = np.array([[full_wave_seconds(r["m"], r["n"], r["k"], 1, peak, sm), 1.0] for r in g])
    y = np.array([r["median_s"] for r in g])
    w = 1 / y
    sol, *_ = np.linalg.lstsq(x * w[:, None], y * w, rcond=None)
    err = (x @ sol - y) / y
    tf = np.array([r["flops"] / r["median_s"] / 1e12 for r in g])
    print(f"GEMM: {len(g)} shapes, {np.median(tf):.0f} TFLOP/s median ({tf.min():.0f}-{tf.max():.0f}); "
          f"efficiency {1 / sol[0]:.4f} per full wave, intercept {sol[1] * 1e6:.2f} us; "
          f"fit MAPE {np.mean(abs(err)) * 100:.1f}%, worst {np.max(abs(err)) * 100:.0f}%")
    for key in ("name", "tp", "micro_batch", "seq_len", "model"):
        d = collections.defaultdict(list)
        for r, e in zip(g, err):
            d[r[key]].append(e)
        print(f"  mean residual by {key}: " +
              ", ".join(f"{k if isinstance(k, str) else int(k)} {np.mean(v) * 100:+.1f}%" for k, v in sorted(d.items())))

    mem = [r for r in rows if r["kind"] == "memory" and r["bytes"] >= 32e6]
    bw = a.hbm_gbyte_s * 1e9
    by = collections.defaultdict(list)
    for r in mem:
        by[r["name"]].append(r["bytes"] / r["median_s"] / bw)
    print("HBM efficiency per kernel (traffic >= 32 MB): " +
          ", ".join(f"{k} {np.mean(v):.2f}" for k, v in sorted(by.items())))
    xm = np.array([[r["bytes"] / bw, 1.0] for r in mem])
    ym = np.array([r["median_s"] for r in mem])
    wm = 1 / ym
    sm_, *_ = np.linalg.lstsq(xm * wm[:, None], ym * wm, rcond=None)
    em = (xm @ sm_ - ym) / ym
    print(f"  all memory kernels: efficiency {1 / sm_[0]:.4f}, intercept {sm_[1] * 1e6:.2f} us, "
          f"MAPE {np.mean(abs(em)) * 100:.1f}%")
    for r in rows:
        if r["kind"] == "launch":
            print(f"launch {r['name']}: {r['median_s'] * 1e6:.2f} us per kernel")


if __name__ == "__main__":
    main()
