#!/usr/bin/env python3
"""GEMM throughput of a GPU per data type, through PyTorch's cuBLAS/cuBLASLt (a cross-check of
hetsim-kernel-bench's BF16 numbers and the source of the FP8 and TF32 efficiencies, which the executor's
backend does not run).

Shapes: the forward GEMMs of Llama-2 7B and 70B blocks at TP 1 and 8 (QKV, output, MLP-in, MLP-out) over
4,096 and 16,384 tokens, plus an 8192^3 square. Operands are random (N(0, 1) scaled to each type's range);
each shape is timed with CUDA events, median of 20 runs after 5 warm-ups.
Types: bf16, fp16, tf32 (fp32 tensors, TF32 tensor-core math), fp32 (strict), fp8 (e4m3 operands, bf16
output, per-tensor scales: torch._scaled_mm, as Transformer Engine runs FP8 GEMMs).

Usage (on the GPU machine): python3 calibration/torch_gemm_dtypes.py OUT.csv
"""
import sys

import torch
from torch_timing import median_seconds


def shapes():
    out = [(8192, 8192, 8192)]
    for h, ffn, heads, kv in ((4096, 11008, 32, 32), (8192, 28672, 64, 8)):
        d = h // heads
        for tp in (1, 8):
            for tokens in (4096, 16384):
                out += [(tokens, (heads + 2 * kv) * d // tp, h), (tokens, h, h // tp),
                        (tokens, 2 * ffn // tp, h), (tokens, h, ffn // tp)]
    return sorted(set(out))


def main():
    out = open(sys.argv[1], "w")
    dev = torch.cuda.get_device_name()
    out.write(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, {dev}\n")
    out.write("dtype,m,n,k,median_s,tflops\n")
    for m, n, k in shapes():
        for dtype in ("bf16", "fp16", "tf32", "fp32", "fp8"):
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            if dtype in ("bf16", "fp16"):
                t = torch.bfloat16 if dtype == "bf16" else torch.float16
                a = torch.randn(m, k, device="cuda", dtype=t)
                b = torch.randn(n, k, device="cuda", dtype=t)
                fn = lambda: a @ b.t()
            elif dtype in ("tf32", "fp32"):
                a = torch.randn(m, k, device="cuda")
                b = torch.randn(n, k, device="cuda")
                fn = lambda: a @ b.t()
            else:
                a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
                one = torch.ones((), device="cuda")
                fn = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            try:
                s = median_seconds(fn, reps=20, warmup=5)
            except Exception as e:  # a type the GPU or this PyTorch does not support
                print(f"{dtype} {m}x{n}x{k}: {e}", file=sys.stderr)
                continue
            out.write(f"{dtype},{m},{n},{k},{s:.9g},{2 * m * n * k / s / 1e12:.1f}\n")
            out.flush()
            del a, b
        print(f"{m}x{n}x{k} done", flush=True)


if __name__ == "__main__":
    main()
