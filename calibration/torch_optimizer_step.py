#!/usr/bin/env python3
"""Times the mixed-precision optimizer step of Megatron-LM (fp16 weights, fp32 master
weights, Adam) through PyTorch on a GPU, step by step, and writes each step's seconds per parameter and the
bytes per parameter it is worth at the copy bandwidth measured in the same run.

Megatron-LM's Float16OptimizerWithFloat16Params.step (megatron/optimizer/optimizer.py), over the
parameters one rank holds:
  1. the fp16 gradients copied into the fp32 master gradients (read 2 B, write 4 B per parameter);
  2. unscale by the loss scale and check for inf/NaN (torch._amp_foreach_non_finite_check_and_unscale_,
     read and write 4 B);
  3. the gradients' global L2 norm for clipping (read 4 B);
  4. clipping: scale every gradient by max_norm / norm (read and write 4 B; Megatron skips it when the
     norm is under the bound, which the per-step rows let one subtract);
  5. Adam on the fp32 master weights (torch.optim.Adam fused: read weight, gradient and both moments,
     write weight and moments: 28 B);
  6. the updated master weights copied into the fp16 weights (read 4 B, write 2 B);
  7. the fp16 gradients zeroed for the next iteration (write 2 B).
Parameters are held as 64 tensors of 8 Mi elements (512 Mi parameters), as a model's layers are.
Each step: median of 10 timed runs (CUDA events) after 3 warm-ups.

Usage (on the GPU machine): python3 calibration/torch_optimizer_step.py OUT.csv
"""
import sys

import torch
from torch_timing import median_seconds


def main():
    out = sys.argv[1]
    dev = "cuda"
    n_tensors, per = 64, 8 * 1024 * 1024
    params = n_tensors * per
    model = [torch.randn(per, device=dev, dtype=torch.float16) * 0.02 for _ in range(n_tensors)]
    grads16 = [torch.randn(per, device=dev, dtype=torch.float16) * 1e-3 for _ in range(n_tensors)]
    master = [p.float().requires_grad_(False) for p in model]
    for m, g in zip(master, grads16):
        m.grad = g.float()
    mgrads = [m.grad for m in master]
    opt = torch.optim.Adam(master, lr=1e-4, fused=True)
    found_inf = torch.zeros(1, device=dev)
    inv_scale = torch.full((1,), 1.0 / 65536.0, device=dev)

    # Copy bandwidth of this GPU: one 1 GiB device-to-device copy (bytes read plus written).
    src = torch.empty(256 * 1024 * 1024, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_s = median_seconds(lambda: dst.copy_(src))
    copy_bw = 2 * src.numel() * 4 / copy_s
    del src, dst

    def grad_copy():
        torch._foreach_copy_(mgrads, grads16)

    def unscale():
        torch._amp_foreach_non_finite_check_and_unscale_(mgrads, found_inf, inv_scale)

    def norm():
        torch.linalg.vector_norm(torch.stack(torch._foreach_norm(mgrads)))

    def clip():
        torch._foreach_mul_(mgrads, 0.5)

    def adam():
        opt.step()

    def weight_copy():
        torch._foreach_copy_(model, master)

    def zero():
        torch._foreach_zero_(grads16)

    steps = [("grad-copy", 6, grad_copy), ("unscale", 8, unscale), ("grad-norm", 4, norm), ("clip", 8, clip),
             ("adam", 28, adam), ("weight-copy", 6, weight_copy), ("zero-grad", 2, zero)]
    rows = []
    for name, nbytes, fn in steps:
        s = median_seconds(fn)
        rows.append((name, nbytes, s))

    def whole():
        for _, _, fn in steps:
            fn()

    rows.append(("step", sum(b for _, b, _ in steps), median_seconds(whole)))
    with open(out, "w") as fh:
        fh.write("# torch %s, CUDA %s, %s; %d parameters; copy bandwidth %.1f GB/s (read + write)\n" %
                 (torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), params, copy_bw / 1e9))
        fh.write("step,bytes_per_param,seconds,seconds_per_param,bytes_per_param_at_copy_bandwidth\n")
        for name, nbytes, s in rows:
            fh.write("%s,%d,%.6g,%.6g,%.2f\n" % (name, nbytes, s, s / params, s / params * copy_bw))
    for r in rows:
        print(r)


if __name__ == "__main__":
    main()
