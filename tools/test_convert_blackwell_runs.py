#!/usr/bin/env python3
"""Checks tools/convert_blackwell_runs.py: converting the bundled raw table again gives the bundled set byte for byte,
every written plan passes `hetsim validate`, hand-derived numbers of two rows hold, and bad rows stop the converter with
the row named.

Usage: tools/test_convert_blackwell_runs.py HETSIM
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from converter_check import reconvert_and_validate  # noqa: E402
from converter_check import convert as run_converter  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SET = os.path.join(ROOT, "experiments", "validation", "megatron_bridge_blackwell")
CONVERTER = os.path.join(ROOT, "tools", "convert_blackwell_runs.py")


def convert(src, out):
    return run_converter(CONVERTER, src, out)


def main():
    hetsim = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory() as work:
        failures += reconvert_and_validate(CONVERTER, SET, hetsim, work)
        # By hand: DGX-B200 8B, 25.09 (line 618): 128 x 8,192 tokens / (29,994 tokens/s x 8 GPUs) = 4,369.94 ms; the
        # 405B at PP 8 counts the embedding and the loss as layers: 128 units / 8 = 16, so stage 0 is the embedding
        # and 15 blocks (layers 0-15) and the last stage 15 blocks and the head (layers 112-127).
        with open(os.path.join(SET, "runs.csv")) as f:
            text = f.read()
        if "plans/llama3-8b-25.09-b200-g8-fp8-cs-tp1-pp1-cp1-vp1-mb2-gbs128.yaml,DGX-B200" not in text or ",4369.94," not in text:
            failures.append("the 25.09 DGX-B200 8B row is not 4369.94 ms")
        with open(os.path.join(SET, "plans", "llama3-405b-26.06-gb300-g256-fp8-tp4-pp8-cp1-vp4-mb1-gbs1536.yaml")) as f:
            plan = f.read()
        if "layer_begin: 0, layer_end: 16}" not in plan or "layer_begin: 112, layer_end: 128}" not in plan:
            failures.append("the 405B PP 8 split is not [embedding + 15, 16 x 6, 15 + head]")
        # Bad rows: a pipeline depth the 8B's 32 blocks do not split into, an unknown model, and a throughput
        # that disagrees with the model TFLOP/s by Megatron-Bridge's FLOP formula; each names its row.
        with open(os.path.join(SET, "raw", "runs.csv")) as f:
            lines = f.read().splitlines()
        header = next(i for i, l in enumerate(lines) if not l.startswith("#"))
        first = next(i for i in range(header + 1, len(lines)) if ",LLAMA3_8B," in lines[i])
        cells = lines[first].split(",")
        for column, value, expect in (("pp", "3", "PP 3"), ("model", "LLAMA9_1B", "LLAMA9_1B"),
                                      ("tokens_per_s_per_gpu", "20000", "model TFLOP/s")):
            bad = list(cells)
            bad[lines[header].split(",").index(column)] = value
            path = os.path.join(work, f"bad-{column}.csv")
            with open(path, "w") as f:
                f.write("\n".join(lines[:header + 1] + [",".join(bad)]) + "\n")
            r = convert(path, os.path.join(work, f"out-{column}"))
            if r.returncode == 0 or expect not in r.stderr + r.stdout or "row 2" not in r.stderr + r.stdout:
                failures.append(f"a row with {column} {value}: exit {r.returncode}, {r.stderr.strip()}")
    for f in failures:
        print("FAIL", f)
    print(f"{'ok' if not failures else 'FAILED'}: convert_blackwell_runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
