#!/usr/bin/python3
"""Mutation fuzzer of hetsim's spec parsing and checking (`hetsim validate`).

Takes the bundled specs (clusters, models, trainings, plans, calibrations, experiments and advise configs),
mutates their text (numbers made extreme, keys dropped or duplicated, values of the wrong type, truncation,
stray bytes and tabs), and runs `hetsim validate` on each mutant; and the first rows of the bundled
validation sets (measured runs, CSV), mutated the same way and cell by cell, through `hetsim validate-sim
--runs`. Every mutant must end in exit status 0 (still valid) or 1 (problems found), never a crash, a
signal, a hang or a silent failure: a non-zero exit names the file.

Usage: fuzz.py HETSIM [--count N] [--seed S] [--keep DIR]
A short run (ctest robustness.fuzz) and a long one (tools/fuzz.sh) use it; a failing mutant is written
to --keep (default: a temporary folder) to reproduce with `hetsim validate FILE`.
"""
import argparse
import glob
import os
import random
import re
import subprocess
import sys
import tempfile

EXTREMES = [".inf", "-.inf", ".nan", "1e308", "-1e308", "1e-320", "-1", "0", "4294967296", "18446744073709551616",
            "-0", "1.5", "NaN", "''", "~", "[]", "{}", "[1, [2, [3]]]", "yes", "\"\\u0000\"", "9" * 40, "0x10"]


def sources(root):
    pats = ["models/catalog/clusters/*.yaml", "models/catalog/models/*.yaml", "models/catalog/trainings/*.yaml",
            "models/catalog/plans/*.yaml", "models/catalog/calibrations/*.yaml", "experiments/**/*.yaml",
            "experiments/validation/**/*.csv"]
    files = []
    for p in pats:
        files += sorted(glob.glob(os.path.join(root, p), recursive=True))
    return [f for f in files if (f.endswith(".csv") and "/raw/" not in f) or
            (f.endswith(".yaml") and os.path.getsize(f) < 200_000)]


def read_source(path):
    """A spec's text; a validation set's comments, header and first five rows (each row is a simulation)."""
    with open(path, encoding="utf-8") as f:
        if not path.endswith(".csv"):
            return f.read()
        lines, rows = [], 0
        for line in f:
            lines.append(line)
            if line.strip() and not line.startswith("#"):
                rows += 1
                if rows > 6:
                    break
        return "".join(lines)


def mutate_cell(text, rng):
    """One CSV cell replaced by an extreme or a word."""
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")]
    if len(rows) < 2:
        return text
    i = rng.choice(rows)
    cells = lines[i].split(",")
    j = rng.randrange(len(cells))
    cells[j] = rng.choice(EXTREMES + ["", "x", "1 s", "-0.0", "1e7", "2147483648", "../x.yaml"])
    lines[i] = ",".join(cells)
    return "\n".join(lines)

def mutate(text, rng):
    lines = text.split("\n")
    kind = rng.randrange(8)
    if kind == 0:  # a number made extreme
        spots = [m for m in re.finditer(r"(?<=[:\[, ])-?\d+(\.\d+)?(e-?\d+)?(?=[\s,\]}]|$)", text)]
        if spots:
            m = rng.choice(spots)
            return text[:m.start()] + rng.choice(EXTREMES) + text[m.end():], "number"
    if kind == 1 and len(lines) > 3:  # a line dropped
        i = rng.randrange(len(lines))
        return "\n".join(lines[:i] + lines[i + 1:]), "drop line"
    if kind == 2 and lines:  # a line duplicated (duplicate keys)
        i = rng.randrange(len(lines))
        return "\n".join(lines[:i + 1] + lines[i:]), "duplicate line"
    if kind == 3:  # a value of the wrong type
        spots = list(re.finditer(r": ([^\s#][^\n#]*)", text))
        if spots:
            m = rng.choice(spots)
            return text[:m.start(1)] + rng.choice(EXTREMES + ["{a: 1}", "[x, y]", "text"]) + text[m.end(1):], "type"
    if kind == 4:  # truncated
        return text[:rng.randrange(len(text) + 1)], "truncate"
    if kind == 5:  # stray bytes
        i = rng.randrange(len(text) + 1)
        junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4))).decode("latin-1")
        return text[:i] + junk + text[i:], "bytes"
    if kind == 6 and lines:  # a tab in the indentation
        i = rng.randrange(len(lines))
        return "\n".join(lines[:i] + ["\t" + lines[i].lstrip(" ")] + lines[i + 1:]), "tab"
    # deep nesting where a value was
    depth = rng.choice([10, 100, 1000, 20000])
    spots = list(re.finditer(r": ([^\s#][^\n#]*)", text))
    if spots:
        m = rng.choice(spots)
        return text[:m.start(1)] + "[" * depth + "]" * depth + text[m.end(1):], "nesting"
    return text + "\n", "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hetsim")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    a.hetsim = os.path.abspath(a.hetsim)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    files = sources(root)
    csvs = [f for f in files if f.endswith(".csv")]
    specs = [f for f in files if not f.endswith(".csv")]
    rng = random.Random(a.seed)
    keep = a.keep or tempfile.mkdtemp(prefix="hetsim-fuzz-")
    failures, valid, invalid = 0, 0, 0
    with tempfile.TemporaryDirectory() as work:
        for n in range(a.count):
            # A quarter of the mutants are validation sets (a handful of files beside hundreds of specs).
            src = rng.choice(csvs if csvs and rng.random() < 0.25 else specs)
            csv = src.endswith(".csv")
            text = read_source(src)
            if csv and rng.random() < 0.5:
                text, how = mutate_cell(text, rng), "cell"
            else:
                text, how = mutate(text, rng)
            # Keep the folder: relative references (plans, traces) resolve as in the original.
            path = os.path.join(os.path.dirname(src), f".fuzz-{os.getpid()}-{n}" + (".csv" if csv else ".yaml"))
            with open(path, "w", encoding="latin-1", errors="replace") as f:
                f.write(text)
            command = ([a.hetsim, "validate-sim", "--runs", path, "-o", os.path.join(work, "runs.csv")] if csv
                       else [a.hetsim, "validate", path])
            try:
                r = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=60, cwd=work)
                rc, out = r.returncode, r.stdout + r.stderr
            except subprocess.TimeoutExpired:
                rc, out = "timeout", ""
            bad = ""
            if rc not in (0, 1):
                bad = f"exit {rc}"
            elif rc == 1 and os.path.basename(path) not in out:
                bad = "an error that does not name the file"
            elif rc == 1 and ("Success" in out or "terminate called" in out):
                bad = "a meaningless error"
            if bad:
                failures += 1
                kept = os.path.join(keep, f"mutant-{n}" + (".csv" if csv else ".yaml"))
                with open(kept, "w", encoding="latin-1", errors="replace") as f:
                    f.write(text)
                print(f"FAIL ({how} of {os.path.relpath(src, root)}): {bad}; reproduce: hetsim "
                      f"{'validate-sim --runs' if csv else 'validate'} {kept} (beside the original)\n"
                      f"    {out.strip()[:300]}")
            else:
                valid += rc == 0
                invalid += rc == 1
            os.remove(path)
    print(f"fuzz.py: {a.count} mutants (seed {a.seed}): {valid} still valid, {invalid} refused with a message, "
          f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
