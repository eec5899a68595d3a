#!/usr/bin/python3
"""Fits the A100 parameters of hetsim's per-kernel compute model (models/kernels.{h,cc}) to measured runs.

Usage: /usr/bin/python3 tools/fit/fit_kernel_model.py [experiments/validation/vtrain_a100_single_node.csv]

A closed-form twin of what `hetsim validate-sim` simulates for a single-node Megatron run (1F1B pipeline,
kernel lists and roofline of models/kernels.cc, collective alpha per group size, ring all-reduce over
NVSwitch at the catalog's 300 GB/s, p2p at the same bandwidth) so that scipy's least squares can fit the
parameters in seconds; `hetsim validate-sim` then reports the simulator's own error with them. Fits on the
development half (even data rows), prints the error on both halves and the fitted values to paste into
models/kernels.cc (A100()).
"""
import csv
import sys

import numpy as np
from scipy.optimize import least_squares

from halves import full_wave_seconds

PATH = sys.argv[1] if len(sys.argv) > 1 else "experiments/validation/vtrain_a100_single_node.csv"
PEAK, HBM, SMS, VOCAB, LINK = 312e12, 2039e9, 108, 51200, 300e9
E = 2.0  # fp16
OPT_BYTES = 32


def gemm(m, n, k, batch, P):
    compute = full_wave_seconds(m, n, k, batch, PEAK * P["ge"], SMS)
    memory = E * batch * (m * k + k * n + m * n) / (HBM * P["me"])
    return max(compute, memory) + P["glat"]


def mem(b, P):
    return b / (HBM * P["me"]) + P["glat"]


def linear(fwd, m, n, k, P):
    return [gemm(m, n, k, 1, P)] if fwd else [gemm(m, k, n, 1, P), gemm(n, k, m, 1, P)]


def block(fwd, b, s, h, a, t, P):
    bs, hd, sc = b * s, h / a, b * a / t * s * s
    ks = [mem((2 if fwd else 3) * bs * h * E, P)]
    ks += linear(fwd, bs, 3 * h / t, h, P)
    ks.append(mem((2 if fwd else 3) * bs * h / t * E, P))
    if fwd:
        ks += [gemm(s, s, hd, b * a / t, P), mem(2 * sc * E, P), mem(sc * (2 * E + 1), P),
               gemm(s, hd, s, b * a / t, P)]
    else:
        ks += [gemm(s, s, hd, b * a / t, P), gemm(s, hd, s, b * a / t, P), gemm(s, hd, s, b * a / t, P),
               gemm(hd, s, s, b * a / t, P), mem(3 * sc * E, P), mem(sc * (2 * E + 1), P)]
    ks.append(mem((2 if fwd else 3) * bs * h / t * E, P))
    ks += linear(fwd, bs, h, h / t, P)
    ks.append(mem((3 * E + 1 if fwd else 4 * E) * bs * h, P))
    ks.append(mem((2 if fwd else 3) * bs * h * E, P))
    ks += linear(fwd, bs, 4 * h / t, h, P)
    ks.append(mem(2 * (1 if fwd else 1.5) * bs * 4 * h / t * E, P))
    ks += linear(fwd, bs, h, 4 * h / t, P)
    ks.append(mem((3 * E + 1 if fwd else 4 * E) * bs * h, P))
    return ks


def head(fwd, b, s, h, t, P):
    bs, v = b * s, VOCAB / t
    return [mem((2 if fwd else 3) * bs * h * E, P)] + linear(fwd, bs, v, h, P) + [
        mem((3 if fwd else 2) * bs * v * 4, P)]


def embedding(fwd, b, s, h, P):
    return [mem((3 if fwd else 2) * b * s * h * E, P)]


def pass_time(ks, P):
    return max(sum(ks), P["host"] * len(ks))


def alpha(n, P):
    return {1: 0.0, 2: P["a2"], 4: P["a4"], 8: P["a8"]}[n]


def allreduce(nbytes, n, P):
    return 0.0 if n == 1 else alpha(n, P) + 2 * (n - 1) / n * nbytes / LINK


def predict(r, P):
    _, gb, mb, h, a, layers, s, tp, dp, pp = (int(x) for x in r[:10])
    m = gb // (dp * mb)
    lps = layers / pp
    f = pass_time(block(True, mb, s, h, a, tp, P), P)
    bwd = pass_time(block(False, mb, s, h, a, tp, P), P)
    tpc = allreduce(mb * s * h * E, tp, P)
    stage = lps * (2 * f + bwd + 6 * tpc) + 2 * P["pass"]  # forward, recompute, backward
    first = stage + pass_time(embedding(True, mb, s, h, P), P) + pass_time(embedding(False, mb, s, h, P), P) + tpc
    hf = pass_time(head(True, mb, s, h, tp, P), P)
    hb = pass_time(head(False, mb, s, h, tp, P), P) + tpc
    last = stage + hf + hb
    if pp == 1:
        slowest = first + hf + hb
        t = m * slowest
    else:
        p2p = mb * s * h * E / LINK
        slowest = max(first, last)
        t = (m - 1) * slowest + first + (pp - 2) * stage + last + 2 * (pp - 1) * p2p
    params = (12 * h * h + 13 * h) * lps / tp + (VOCAB * h / tp + s * h)
    return t + allreduce(params * E, dp, P) + params * OPT_BYTES / HBM + P["iter"]


NAMES = ["ge", "me", "glat", "host", "pass", "iter", "a2", "a4", "a8"]
X0 = [0.8, 0.8, 5e-6, 30e-6, 1e-3, 1e-3, 20e-6, 20e-6, 20e-6]
LO = [0.2, 0.2, 0, 0, 0, 0, 0, 0, 0]
HI = [1.0, 1.0, 1e-3, 1e-3, 0.1, 1.0, 1e-3, 1e-3, 1e-3]


def main():
    with open(PATH, encoding="utf-8-sig") as f:
        rows = [[float(x) for x in r] for r in csv.reader(f) if r and not r[0].startswith("#")]
    dev, held = rows[0::2], rows[1::2]

    def rel(x, rs):
        P = dict(zip(NAMES, x))
        return np.array([(predict(r, P) * 1e3 - r[10]) / r[10] for r in rs])

    fit = least_squares(lambda x: rel(x, dev), X0, bounds=(LO, HI), x_scale="jac")
    for name, rs in (("development", dev), ("held-out", held)):
        e = rel(fit.x, rs)
        print(f"{name}: MAPE {100 * np.mean(abs(e)):.2f}%  bias {100 * np.mean(e):+.2f}%  ({len(rs)} runs)")
    for n, v in zip(NAMES, fit.x):
        print(f"  {n} = {v:.6g}")


if __name__ == "__main__":
    main()
