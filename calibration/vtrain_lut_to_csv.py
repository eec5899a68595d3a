#!/usr/bin/env python3
"""Converts vTrain's measured all-reduce tables (trace/<gpu>/AR_GPU<N>_1M_1024M_LUT: nccl-tests
all_reduce_perf rows `size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)`, out-of-place then
in-place, 1 MiB to 1 GiB in 1 MiB steps) into hetsim-coll-bench's columns, so that `hetsim calibrate
--from-data DIR` fits each group size's per-call latency and bus bandwidth.

Usage: python3 calibration/vtrain_lut_to_csv.py OUT.csv LUT...   (the group size is read from AR_GPU<N>)

The tables step linearly in size, so a fit over every row would see almost only messages above 100 MiB.
Kept: the row nearest each quarter octave from 1 MiB to 1 GiB (36 sizes per group), so that the sizes a
tensor-parallel all-reduce sends (a few MiB to a few hundred) weigh as much as the largest. The time is the
mean of the out-of-place and in-place columns.
"""
import csv
import math
import os
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    dst, sources = sys.argv[1], sys.argv[2:]
    tables = []
    for src in sources:
        m = re.search(r"AR_GPU(\d+)_", os.path.basename(src))
        if not m:
            sys.exit(f"{src}: the file name does not say the group size (expected AR_GPU<N>_...)")
        tables.append((src, int(m.group(1))))
    with open(dst, "w", encoding="utf-8") as out:
        groups = ", ".join(str(gpus) for _, gpus in tables)
        out.write(f"# vTrain's measured all-reduce tables AR_GPU<N>_1M_1024M_LUT, N = {groups}, in "
                  "hetsim-coll-bench's\n# columns at quarter-octave sizes (calibration/vtrain_lut_to_csv.py)\n")
        out.write("op,group_size,bytes,median_s,min_s,reps,busbw_gbyte_s\n")
        for src, gpus in tables:
            rows = {}
            with open(src, encoding="utf-8") as f:
                reader = csv.reader(f)
                next(reader)
                for r in reader:
                    if len(r) < 7:
                        continue
                    rows[int(r[0])] = ((float(r[3]) + float(r[5])) / 2e9, (float(r[4]) + float(r[6])) / 2)
            if not rows:
                sys.exit(f"{src}: no rows")
            sizes = sorted(rows)
            kept = sorted({min(sizes, key=lambda s, t=2 ** (20 + k / 4): abs(math.log(s / t))) for k in range(41)})
            for size in kept:
                t, busbw = rows[size]
                out.write(f"allreduce,{gpus},{size},{t:.6g},{t:.6g},1,{busbw:.2f}\n")


if __name__ == "__main__":
    main()
