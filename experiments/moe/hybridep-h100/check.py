#!/usr/bin/env python3
"""The twin's node-deduplicating all-to-all against HybridEP's published H100 measurement (an outside check at
the collective level; nothing is fitted on it).

Usage: python3 experiments/moe/hybridep-h100/check.py [HETSIM] [--tolerance 0.10]
  HETSIM: the hetsim binary (default build/hetsim). Exits 1 when an EP degree is off by more than the tolerance.

The measurement: deepseek-ai/DeepEP@94a9f8f6b146c07d97ec58f67cd6d303296d6098 (branch hybrid-ep)
docs/README_Hybrid-EP.md, "H100 Platform": 4,096 tokens of hidden 7,168 per rank, top-8 of 8 local experts per rank,
random uniform routing, BF16 dispatch and combine through the Torch API with 16 SMs, on 16, 32 and 64 H100s. Its
"IB bandwidth" is the test's rdma_send_bytes over the time (tests/test_hybrid_ep.py, _report_bw): the tokens times
the nodes holding at least one of each token's experts, the local node included (tests/utils.py,
count_rdma_send_from_routing_map), times 7,168 x 2 bytes. With uniform routing over N nodes of E/N experts a token
reaches a node with probability 1 - C(E - E/N, 8) / C(E, 8), so the measured time of one exchange is
4096 · N · p · 7168 · 2 / bandwidth.

The twin: plan-ep16/32/64.yaml, the same layer in BF16 through comm.ep_dispatcher node_dedup on DGX-H100 nodes
with one 400 Gb/s NIC per GPU; its EP time per rank over its 16 exchanges (4 MoE blocks, dispatch and combine,
forward and backward) is one exchange's time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from math import comb

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS, HIDDEN, TOP_K, LOCAL_EXPERTS, GPUS_PER_NODE = 4096, 7168, 8, 8, 8
# EP degree -> (dispatch BF16, combine) GB/s, Torch API, 16 SMs (the table's rows).
MEASURED = {16: (54.47, 53.35), 32: (47.36, 52.53), 64: (41.24, 46.57)}
EXCHANGES = 4 * 4  # MoE blocks x (dispatch, combine) x (forward, backward)


def measured_seconds(ep):
    nodes, experts = ep // GPUS_PER_NODE, ep * LOCAL_EXPERTS
    reach = 1 - comb(experts - experts // nodes, TOP_K) / comb(experts, TOP_K)
    rdma_bytes = TOKENS * nodes * reach * HIDDEN * 2
    dispatch, combine = MEASURED[ep]
    return (rdma_bytes / (dispatch * 1e9) + rdma_bytes / (combine * 1e9)) / 2


def twin_seconds(hetsim, ep):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        subprocess.run([hetsim, "simulate", "--plan", os.path.join(HERE, f"plan-ep{ep}.yaml"), "--fidelity", "full",
                        "--report-out", report], check=True, stdout=subprocess.DEVNULL)
        with open(report) as f:
            return json.load(f)["devices"][0]["ep_communication_s"] / EXCHANGES


def main(argv):
    parser = argparse.ArgumentParser(description="the twin's node-deduplicating all-to-all against HybridEP on H100")
    parser.add_argument("hetsim", nargs="?", default="build/hetsim", help="the hetsim binary")
    parser.add_argument("--tolerance", type=float, default=0.10, help="largest relative error accepted")
    args = parser.parse_args(argv[1:])
    hetsim, tolerance = args.hetsim, args.tolerance
    if not os.access(hetsim, os.X_OK):
        print(f"check.py: no hetsim binary at {hetsim}; build it or pass its path", file=sys.stderr)
        return 2
    worst = 0.0
    print(f"{'EP':>4}{'nodes':>7}{'measured ms':>13}{'twin ms':>10}{'error':>8}")
    for ep in sorted(MEASURED):
        m, t = measured_seconds(ep), twin_seconds(hetsim, ep)
        err = t / m - 1
        worst = max(worst, abs(err))
        print(f"{ep:>4}{ep // GPUS_PER_NODE:>7}{m * 1e3:>13.3f}{t * 1e3:>10.3f}{err * 100:>+7.1f}%")
    print(f"largest error {worst * 100:.1f}% (tolerance {tolerance * 100:.0f}%)")
    return 0 if worst <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
