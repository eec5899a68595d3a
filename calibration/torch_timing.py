"""One timing loop for the PyTorch measuring scripts in calibration/ (torch_*.py): the median of `reps` runs
of `fn`, each between two CUDA events, after `warmup` untimed runs; `before`, when given, runs before each
timed run outside the events (an L2 flush, say)."""
import statistics

import torch


def median_seconds(fn, reps=10, warmup=3, before=None):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)
