#!/usr/bin/env python3
"""Converts an nccl-tests all_reduce_perf table (size_bytes,time_us,algbw_GBps,busbw_GBps) into
hetsim-coll-bench's columns, so that `hetsim calibrate --from-data DIR` fits published curves.

Usage: python3 calibration/nccl_tests_to_csv.py GPUS IN.csv OUT.csv   (GPUS: the all-reduce's group size)
Sizes under 1 KiB are left out (the bench starts there).
"""
import csv
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gpus, src, dst = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    with open(dst, "w") as out:
        out.write(f"# {src} ({gpus} GPUs, nccl-tests all_reduce_perf) in hetsim-coll-bench's columns "
                  "(calibration/nccl_tests_to_csv.py)\n")
        out.write("op,group_size,bytes,median_s,min_s,reps,busbw_gbyte_s\n")
        for r in csv.DictReader(open(src)):
            size, t = float(r["size_bytes"]), float(r["time_us"]) * 1e-6
            if size >= 1024:
                out.write(f"allreduce,{gpus},{size:.0f},{t:.6g},{t:.6g},1,{r['busbw_GBps']}\n")


if __name__ == "__main__":
    main()
