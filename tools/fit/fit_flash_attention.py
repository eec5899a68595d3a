#!/usr/bin/env python3
"""Flash attention's efficiency curve for a calibration, from published kernel benchmarks.

Reads calibration/data/attention/flash-attention-h100.csv (FlashAttention-3 paper, Figures 5 and 6: H100
SXM5, BF16, head dim 128) and prints the `flash_attention` entries of a calibration: per sequence length,
the forward and backward TFLOPS of one implementation over the GPU's dense BF16 peak.

Training masks causally. The forward is measured with the mask; the backward figure is without it, so the
causal backward is taken at the forward's causal-to-full ratio at the same length (the mask skips the same
blocks in both passes, and what it costs at short lengths is the work split into fewer, emptier tiles).

    python3 tools/fit/fit_flash_attention.py [--implementation flash-attention-2] [--peak-tflops 989]
"""
import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "calibration", "data", "attention", "flash-attention-h100.csv")


def read(path):
    rows = []
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(lines):
        rows.append(r)
    return rows


def curve(rows, implementation, peak_tflops):
    by = {}
    for r in rows:
        if r["implementation"] != implementation or r["head_dim"] != "128":
            continue
        by[(r["pass"], r["causal"] == "true", int(r["seq_len"]))] = float(r["tflops"])
    lengths = sorted({k[2] for k in by})
    out = []
    for s in lengths:
        fwd_causal = by[("forward", True, s)]
        fwd_full = by[("forward", False, s)]
        bwd_full = by[("backward", False, s)]
        bwd_causal = bwd_full * fwd_causal / fwd_full
        out.append((s, fwd_causal / peak_tflops, bwd_causal / peak_tflops))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--implementation", default="flash-attention-2")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense BF16 peak (H100 SXM: 989)")
    a = ap.parse_args()
    rows = read(a.data)
    c = curve(rows, a.implementation, a.peak_tflops)
    if not c:
        sys.exit(f"no rows for {a.implementation} in {a.data}")
    print(f"    flash_attention:  # {a.implementation}, causal, head dim 128 (tools/fit/fit_flash_attention.py)")
    for s, f, b in c:
        print(f"      - {{seq_len: {s}, forward: {f:.3f}, backward: {b:.3f}}}")


if __name__ == "__main__":
    main()
