#!/usr/bin/env python3
"""Test of calibration/vtrain_lut_to_csv.py on a made-up table (ctest calibration.vtrain_lut_to_csv).

The table: 4 GPUs, 1 MiB to 1 GiB in 1 MiB steps, out-of-place 10 us + 1 ns per KiB, in-place 2 us more.
Expected, by hand: the quarter octaves 2^(k/4) MiB, k = 0..40, land on 36 distinct rows (k = 0-2 on 1 MiB,
3-5 on 2 MiB, 6-7 on 3 MiB; from k = 8 on each its own); each time is the mean of the two columns.
"""
import csv
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vtrain_lut_to_csv.py")


def main():
    with tempfile.TemporaryDirectory() as d:
        lut = os.path.join(d, "AR_GPU4_1M_1024M_LUT")
        with open(lut, "w", encoding="utf-8") as f:
            f.write("size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n")
            for mib in range(1, 1025):
                size = mib << 20
                t = 10000 + size / 1024
                f.write(f"{size},{size // 4},float,{t},1.0,{t + 2000},3.0\n")
        out = os.path.join(d, "collectives.csv")
        subprocess.run([sys.executable, SCRIPT, out, lut], check=True)
        with open(out, encoding="utf-8") as f:
            rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
        assert len(rows) == 36, len(rows)
        sizes = [int(r["bytes"]) for r in rows]
        assert sizes[:4] == [1 << 20, 2 << 20, 3 << 20, 4 << 20], sizes[:4]
        assert sizes[-1] == 1 << 30, sizes[-1]
        assert all(r["op"] == "allreduce" and r["group_size"] == "4" for r in rows)
        first = rows[0]
        assert abs(float(first["median_s"]) - (10000 + 1024 + 1000) * 1e-9) < 1e-12, first
        assert float(first["busbw_gbyte_s"]) == 2.0, first
        bad = os.path.join(d, "table.csv")
        os.rename(lut, bad)
        r = subprocess.run([sys.executable, SCRIPT, out, bad], capture_output=True, text=True)
        assert r.returncode != 0 and "does not say the group size" in r.stderr, r.stderr
    print("vtrain_lut_to_csv: ok")


if __name__ == "__main__":
    main()
