"""What every converter test of a bundled validation set checks first (tools/test_convert_*_runs.py): converting
the set's raw table again gives the bundled set byte for byte, and every bundled plan passes `hetsim validate`.
"""
import filecmp
import os
import subprocess
import sys


def convert(converter, src, out):
    """Runs `converter SRC OUT` with this interpreter; the CompletedProcess."""
    return subprocess.run([sys.executable, converter, src, out], capture_output=True, text=True)


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    return all(same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def reconvert_and_validate(converter, set_dir, hetsim, work):
    """The failures (strings) of re-converting SET_DIR/raw/runs.csv into WORK and validating SET_DIR's plans."""
    failures = []
    out = os.path.join(work, "set")
    r = convert(converter, os.path.join(set_dir, "raw", "runs.csv"), out)
    if r.returncode != 0:
        failures.append(f"the bundled table did not convert: {r.stderr}")
    elif not same_tree(out, set_dir):
        failures.append("converting the bundled raw table again differs from the bundled set "
                        f"(run {os.path.relpath(converter)} and commit its output)")
    plan_dir = os.path.join(set_dir, "plans")
    plans = sorted(os.path.join(plan_dir, p) for p in os.listdir(plan_dir))
    v = subprocess.run([hetsim, "validate"] + plans, capture_output=True, text=True, cwd=plan_dir)
    if v.returncode != 0:
        failures.append(f"hetsim validate on the bundled plans: {v.stdout}{v.stderr}")
    return failures
