"""What the fit scripts share: the error of one half of a `hetsim validate-sim --runs` output, as a line; a
GEMM's time at the peak in whole waves of tiles, as models/kernels.cc prices it."""
import math

import numpy as np

TILE = 128  # models/kernels.h KernelParams::tile_m, tile_n

HALVES = ("development", "held_out")


def half_line(rows, half, prefix="", errors=False):
    """rows: [(half, relative error)]; the half's run count, MAPE and bias (and each error when asked)."""
    e = np.array([err for h, err in rows if h == half])
    line = f"  {prefix}{half:11s} {len(e):4d} runs  MAPE {100 * np.mean(abs(e)):5.2f}%  bias {100 * np.mean(e):+6.2f}%"
    if errors:
        line += f"  errors {' '.join(f'{100 * v:+.1f}' for v in e)}"
    return line


def full_wave_seconds(m, n, k, batch, peak_flops, sms):
    """A GEMM's compute time at `peak_flops`, rounded up to whole waves of TILE x TILE output tiles over `sms`
    multiprocessors (divide by the GEMM efficiency per full wave for the model's time); `sms` 0: no wave
    quantisation (the GEMM's own FLOPs), as the model runs with sm_count 0."""
    if sms <= 0:
        return 2 * m * n * k * batch / peak_flops
    waves = math.ceil(batch * math.ceil(m / TILE) * math.ceil(n / TILE) / sms)
    return waves * 2 * TILE * TILE * k / (peak_flops / sms)
