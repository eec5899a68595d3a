#!/usr/bin/env python3
"""Fits the compute efficiency of HetHub's stand-in accelerators on the paper's homogeneous runs.

HetHub (papers/001 §4.2) measured each accelerator alone (8 GPUs, DP 2, TP 2, PP 2, Llama2-7B, batch 1024 x
1,024 tokens, FP16) and reports tokens per GPU per second (Fig. 6) or MFU (Fig. 7). The stand-in catalog
parts (docs/clusters.md) have other peaks, so their GEMM and HBM efficiencies are scaled until the
homogeneous simulation reproduces the paper's number: the fit uses the homogeneous runs only, the
heterogeneous pairs are then predicted (experiments/hethub/pair*.yaml, docs/reproductions/hethub.md).

Usage: /usr/bin/python3 experiments/hethub/fit_calibration.py [build/hetsim]
Writes experiments/hethub/calibration-pair{1,2,3}.yaml.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
HETSIM = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build", "hetsim")
BASE = {"a100-80gb": (0.9201, 0.7606), "a100-80gb-pcie": (0.9201, 0.7606), "mi250x": (0.87, 0.84), "h20": (0.7226, 0.84)}

# (pair, cluster of the homogeneous run, GPU type, target kind, target value, where the paper says it)
PAIRS = {
    1: [("hethub-nv-8", "a100-80gb", "mfu", 0.468, "§4.2.3: NV 46.8% MFU"),
        ("hethub-accel1-8", "a100-80gb-pcie", "mfu", 0.587, "§4.2.3: accelerator #1 58.7% MFU")],
    2: [("hethub-amd-8", "mi250x", "tgs", 1478, "§4.2.2: AMD 1478 tokens/GPU/s"),
        ("hethub-accel2-8", "a100-80gb-pcie", "tgs", 673, "§4.2.2: accelerator #2 673 tokens/GPU/s")],
    3: [("hethub-amd-8", "mi250x", "tgs", 1341, "§4.2.2: AMD 1341 tokens/GPU/s (pair 3)"),
        ("hethub-accel3-8", "h20", "tgs", 887, "§4.2.2: accelerator #3 887 tokens/GPU/s")],
}


def calibration_yaml(name, entries, description):
    lines = ["kind: calibration", "name: " + name, "description: >-", "  " + description, "base: default", "gpus:"]
    for gpu, g, m, source in entries:
        lines += ["  - gpus: [%s]" % gpu, '    source: "%s"' % source, "    gemm_efficiency: %.4f" % g,
                  "    memory_efficiency: %.4f" % m]
    return "\n".join(lines) + "\n"


def simulate(cluster, calibration):
    options = os.path.join(tempfile.gettempdir(), "hethub-homogeneous.yaml")
    with open(options, "w") as f:
        f.write("tp_degrees: [2]\ndp_degrees: [2]\nuniform_split: true\n")
    out = subprocess.run([HETSIM, "simulate", "--cluster", os.path.join(HERE, cluster + ".yaml"), "--model", "llama2-7b",
                          "--planner", "hethub", "--planner-options", options, "--global-batch", "1024",
                          "--seq-len", "1024", "--dtype", "fp16", "--calibration", calibration],
                         capture_output=True, text=True, check=True).stdout
    tps = float(re.search(r"throughput\s+([0-9.]+) tokens/s", out).group(1))
    mfu = float(re.search(r"MFU\s+([0-9.]+) %", out).group(1)) / 100
    return tps / 8, mfu


def main():
    for pair, runs in PAIRS.items():
        scale = {gpu: 1.0 for _, gpu, _, _, _ in runs}
        path = os.path.join(HERE, "calibration-pair%d.yaml" % pair)
        for _ in range(4):
            entries = [(gpu, BASE[gpu][0] * scale[gpu], BASE[gpu][1] * scale[gpu], src) for _, gpu, _, _, src in runs]
            with open(path, "w") as f:
                f.write(calibration_yaml("hethub-pair%d" % pair, entries, "placeholder"))
            for cluster, gpu, kind, target, _ in runs:
                tgs, mfu = simulate(cluster, path)
                got = tgs if kind == "tgs" else mfu
                scale[gpu] *= target / got
        entries = [(gpu, BASE[gpu][0] * scale[gpu], BASE[gpu][1] * scale[gpu],
                    "fitted by experiments/hethub/fit_calibration.py on " + src) for _, gpu, _, _, src in runs]
        desc = ("HetHub pair %d: the stand-ins' GEMM and HBM efficiencies scaled so that their homogeneous runs "
                "(8 GPUs, DP 2, TP 2, PP 2, Llama2-7B, 1024 x 1,024 tokens, FP16) reproduce the paper's numbers; "
                "the heterogeneous pair is predicted, not fitted.") % pair
        with open(path, "w") as f:
            f.write("# Written by experiments/hethub/fit_calibration.py; do not edit by hand.\n")
            f.write(calibration_yaml("hethub-pair%d" % pair, entries, desc))
        for cluster, gpu, kind, target, _ in runs:
            tgs, mfu = simulate(cluster, path)
            print("pair %d %s: %.0f tokens/GPU/s, MFU %.1f%% (target %s %s)" % (pair, cluster, tgs, 100 * mfu, kind, target))


if __name__ == "__main__":
    main()
