"""What the converters of published tables into validation sets share (tools/convert_moe_runs.py,
tools/convert_blackwell_runs.py): reading the source table and laying out the set's folders.
"""
import csv
import os
import shutil


def open_set(src, out):
    """Reads SRC (a CSV whose '#' lines are comments) and prepares OUT: its raw/, clusters/ and plans/ folders,
    and raw/runs.csv, a copy of SRC (unless SRC is that file). Returns (comment lines, rows as dicts)."""
    with open(src) as f:
        lines = f.read().splitlines()
    comments = [l for l in lines if l.startswith("#")]
    rows = list(csv.DictReader(l for l in lines if not l.startswith("#")))
    for sub in ("raw", "clusters", "plans"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    raw = os.path.join(out, "raw", "runs.csv")
    if os.path.abspath(src) != os.path.abspath(raw):
        shutil.copyfile(src, raw)
    return comments, rows
