#!/usr/bin/env python3
"""Host<->GPU and GPU<->GPU copy bandwidth of one GPU through PyTorch (cudaMemcpyAsync): pinned and pageable
host memory, 64 KiB to 1 GiB, median of 10 timed copies after 3 warm-ups (CUDA events). The PCIe numbers
are what the simulator's `pcie_bandwidth_gbyte_s` of a GPU and CPU-staged transfers (HetHub §3.1) stand for.

Usage (on the GPU machine): python3 calibration/torch_copy_bandwidth.py OUT.csv
"""
import sys

import torch
from torch_timing import median_seconds


def time_copy(dst, src, reps=10, warmup=3):
    return median_seconds(lambda: dst.copy_(src, non_blocking=True), reps, warmup)


def main():
    out = open(sys.argv[1], "w")
    out.write(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}\n")
    out.write("direction,host_memory,bytes,median_s,gbyte_s\n")
    size = 64 * 1024
    while size <= 1 << 30:
        n = size // 4
        gpu = torch.empty(n, device="cuda")
        gpu2 = torch.empty(n, device="cuda")
        for pinned in (True, False):
            host = torch.empty(n, pin_memory=pinned)
            for direction, dst, src in (("h2d", gpu, host), ("d2h", host, gpu)):
                s = time_copy(dst, src)
                out.write(f"{direction},{'pinned' if pinned else 'pageable'},{size},{s:.9g},{size / s / 1e9:.2f}\n")
        s = time_copy(gpu2, gpu)
        out.write(f"d2d,-,{size},{s:.9g},{size / s / 1e9:.2f}\n")
        out.flush()
        size *= 4
    print(open(sys.argv[1]).read())


if __name__ == "__main__":
    main()
