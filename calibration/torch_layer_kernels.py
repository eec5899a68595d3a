#!/usr/bin/env python3
"""Times every kernel of a Megatron-LM GPT block with standard attention (no flash attention), one at a
time, through PyTorch on a GPU: the four linear layers' forward, input-gradient and weight-gradient GEMMs,
the attention's batched GEMMs in Megatron's strided layout (torch.baddbmm / torch.bmm over [s, b*np, hn]
views), the softmax and its gradient, the attention dropout and its gradient, layer norm and GeLU.

Shapes: the blocks of vTrain's measured runs (experiments/validation/vtrain_a100_*.csv): GPT with hidden
1,024 to 12,288 at their TP degrees and micro-batches, sequence 2,048 (multi-node) and 1,024 (single node),
fp16. The point is the kernel model's error by kernel class and shape on a real GPU, not the GPU's speed.

Each kernel: median of 10 timed runs (CUDA events) after 3 warm-ups, the L2 cache flushed before each run.

Usage (on the GPU machine): python3 calibration/torch_layer_kernels.py OUT.csv
"""
import sys

import torch
from torch_timing import median_seconds

# (hidden, heads, seq_len, tp, micro_batch): every block shape of vTrain's multi-node set, and the
# single-node set's at micro-batch 1, 4 and 8.
MULTI = """3072,32,1,2 3072,32,1,4 3072,32,1,8 3072,32,2,2 3072,32,2,8 3072,32,2,16 3072,32,4,2 3072,32,4,8
3072,32,4,32 3072,32,8,2 3072,32,8,8 3072,32,8,32 3072,32,8,64 3072,32,16,4 3072,32,16,32 6144,48,1,4
6144,48,2,4 6144,48,4,2 6144,48,4,8 6144,48,8,2 6144,48,8,8 6144,48,8,32 6144,48,16,2 8192,64,1,3
8192,64,2,2 8192,64,2,6 8192,64,4,2 8192,64,4,6 8192,64,4,12 8192,64,8,2 8192,64,8,6 8192,64,8,24
12288,96,2,2 12288,96,2,3 12288,96,4,2 12288,96,4,6 12288,96,8,2 12288,96,8,6"""


def configs():
    out = []
    for item in MULTI.split():
        h, heads, tp, mb = (int(x) for x in item.split(","))
        out.append((h, heads, 2048, tp, mb))
    for h in (1024, 2048):
        for tp in (1, 2, 4, 8):
            for mb in (1, 4, 8):
                out.append((h, 16, 1024, tp, mb))
    return out


FLUSH = None


def timed(fn):
    return median_seconds(fn, before=FLUSH.zero_)


def block(h, heads, s, tp, mb, rows):
    dt, dev = torch.float16, "cuda"
    np_ = heads // tp
    hn = h // heads
    bs = mb * s
    B = mb * np_
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=dt, generator=g) * 0.02

    def add(kind, name, m, n, k, batch, nbytes, flops, fn):
        rows.append((h, heads, s, tp, mb, kind, name, m, n, k, batch, nbytes, flops, timed(fn)))

    e = 2
    for name, n, kk in (("qkv", 3 * h // tp, h), ("attention-out", h, h // tp), ("mlp-in", 4 * h // tp, h),
                        ("mlp-out", h, 4 * h // tp)):
        x, w, dy = rnd(bs, kk), rnd(n, kk), rnd(bs, n)
        fl = 2.0 * bs * n * kk
        add("gemm", name, bs, n, kk, 1, e * (bs * kk + kk * n + bs * n), fl,
            lambda: torch.nn.functional.linear(x, w))
        add("gemm", name + "-dgrad", bs, kk, n, 1, e * (bs * n + n * kk + bs * kk), fl, lambda: torch.matmul(dy, w))
        add("gemm", name + "-wgrad", n, kk, bs, 1, e * (bs * n + bs * kk + n * kk), fl,
            lambda: torch.matmul(dy.t(), x))
        del x, w, dy
    # Megatron's CoreAttention: query/key/value as [s, b*np, hn] views, scores [b*np, s, s].
    q, kx, v = rnd(s, B, hn), rnd(s, B, hn), rnd(s, B, hn)
    buf = torch.empty(B, s, s, device=dev, dtype=dt)
    sc = B * s * s
    qk = 2.0 * B * s * s * hn
    small = e * 2 * B * s * hn  # the two [b*np, s, hn] operands or operand and result

    # Each kernel is timed, then run once more for the tensors the next kernels read.
    def scores_fn():
        return torch.baddbmm(buf, q.transpose(0, 1), kx.transpose(0, 1).transpose(1, 2), beta=0.0, alpha=0.125)
    add("bmm", "scores", s, s, hn, B, small + e * sc, qk, scores_fn)
    scores = scores_fn()
    add("memory", "softmax", 0, 0, 0, B, 2 * sc * e, 0, lambda: torch.softmax(scores, dim=-1))
    probs = torch.softmax(scores, dim=-1)

    def dropout_fn():
        return torch.ops.aten.native_dropout(probs, 0.1, True)
    add("memory", "attention-dropout", 0, 0, 0, B, sc * (2 * e + 1), 0, dropout_fn)
    dropped, mask = dropout_fn()
    add("bmm", "context", s, hn, s, B, e * sc + small, qk, lambda: torch.bmm(dropped, v.transpose(0, 1)))
    dctx = rnd(B, s, hn)

    def dprobs_fn():
        return torch.bmm(dctx, v.transpose(0, 1).transpose(1, 2))
    add("bmm", "context-dgrad", s, s, hn, B, small + e * sc, qk, dprobs_fn)
    add("bmm", "context-wgrad", s, hn, s, B, e * sc + small, qk, lambda: torch.bmm(dropped.transpose(1, 2), dctx))
    dprobs = dprobs_fn()
    add("memory", "attention-dropout-grad", 0, 0, 0, B, sc * (2 * e + 1), 0,
        lambda: torch.ops.aten.native_dropout_backward(dprobs, mask, 1.0 / 0.9))
    add("memory", "softmax-grad", 0, 0, 0, B, 3 * sc * e, 0,
        lambda: torch.ops.aten._softmax_backward_data(dprobs, probs, -1, dt))
    add("bmm", "scores-dgrad-q", s, hn, s, B, e * sc + small, qk, lambda: torch.bmm(dprobs, kx.transpose(0, 1)))
    add("bmm", "scores-dgrad-k", hn, s, s, B, e * sc + small, qk,
        lambda: torch.bmm(dprobs.transpose(1, 2), q.transpose(0, 1)))
    del q, kx, v, buf, scores, probs, dropped, mask, dctx, dprobs
    x = rnd(bs, h)
    ln = torch.nn.LayerNorm(h, device=dev, dtype=dt)
    add("memory", "layernorm", 0, 0, 0, 1, 2 * bs * h * e, 0, lambda: ln(x))
    f = rnd(bs, 4 * h // tp)
    add("memory", "gelu", 0, 0, 0, 1, 2 * bs * (4 * h // tp) * e, 0, lambda: torch.nn.functional.gelu(f))
    del x, f


def main():
    global FLUSH
    out = sys.argv[1]
    FLUSH = torch.empty(256 * 1024 * 1024 // 4, device="cuda", dtype=torch.float32)
    rows = []
    for c in configs():
        block(*c, rows)
        torch.cuda.empty_cache()
    with open(out, "w") as fh:
        fh.write("# torch %s, CUDA %s, %s\n" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name()))
        fh.write("hidden,heads,seq_len,tp,micro_batch,kind,name,m,n,k,batch,bytes,flops,median_s\n")
        for r in rows:
            fh.write(",".join(str(x) for x in r[:-1]) + ",%.9g\n" % r[-1])
    print("wrote %d kernels to %s" % (len(rows), out))


if __name__ == "__main__":
    main()
