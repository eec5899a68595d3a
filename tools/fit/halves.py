"""What the fit scripts share: the error of one half of a `hetsim validate-sim --runs` output, as a line."""
import numpy as np

HALVES = ("development", "held_out")


def half_line(rows, half, prefix="", errors=False):
    """rows: [(half, relative error)]; the half's run count, MAPE and bias (and each error when asked)."""
    e = np.array([err for h, err in rows if h == half])
    line = f"  {prefix}{half:11s} {len(e):4d} runs  MAPE {100 * np.mean(abs(e)):5.2f}%  bias {100 * np.mean(e):+6.2f}%"
    if errors:
        line += f"  errors {' '.join(f'{100 * v:+.1f}' for v in e)}"
    return line
