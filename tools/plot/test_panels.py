#!/usr/bin/python3
"""Self-test of tools/plot/panels.py: a fake results directory (2 scenarios × 2 models × 2 policies, one point
failed, repeats), the figure it draws, the values and ratios it computes, and its error messages.

Usage: /usr/bin/python3 tools/plot/test_panels.py   Prints one line per test, then "N passed, M failed".
"""
import json
import os
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
PANELS = os.path.join(HERE, "panels.py")
sys.path.insert(0, HERE)
import panels  # noqa: E402

# recover_h by (scenario, model, policy); Varuna / AutoHet is 4 in a, 1.5 in b.
VALUES = {("a", "3b", "Varuna"): 0.02, ("a", "3b", "AutoHet"): 0.005, ("a", "7b", "Varuna"): 0.04,
          ("a", "7b", "AutoHet"): 0.01, ("b", "3b", "Varuna"): 0.03, ("b", "3b", "AutoHet"): 0.02,
          ("b", "7b", "Varuna"): 0.06, ("b", "7b", "AutoHet"): None}  # None: the point failed


def write_results(folder):
    with open(os.path.join(folder, "results.jsonl"), "w", encoding="utf-8") as f:
        point = 0
        for (scenario, model, policy), v in VALUES.items():
            for repeat in (0, 1):
                row = {"point": point, "status": "ok" if v is not None else "failed",
                       "inputs": {"cluster": scenario, "model": model, "policy": policy, "repeat": repeat},
                       "metrics": {"recover_h": v} if v is not None else {}}
                f.write(json.dumps(row) + "\n")
                point += 1


def run(args):
    p = subprocess.run(["/usr/bin/python3", PANELS] + args, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    passed = failed = 0

    def check(name, ok, detail=""):
        nonlocal passed, failed
        print(("ok    " if ok else "FAIL  ") + name + ("" if ok else f": {detail}"))
        passed, failed = passed + bool(ok), failed + (not ok)

    with tempfile.TemporaryDirectory() as d:
        write_results(d)
        out = os.path.join(d, "fig.png")
        base = [d, "-o", out, "--panel", "cluster", "--x", "model", "--y", "recover_h", "--group", "policy"]
        rc, text = run(base + ["--scale", "3600", "--ratio", "Varuna/AutoHet", "--panel-title", "a=A: preempted"])
        check("draws a PNG", rc == 0 and os.path.getsize(out) > 10000 and "panels: " in text and "(2 panels)" in text,
              text)
        args = types.SimpleNamespace(results_dir=d, panel="cluster", x="model", y="recover_h", group="policy",
                                     panel_title=[], ratio="Varuna/AutoHet")
        tables, groups = panels.load(args)
        check("panels in first-seen order", [v for v, _ in tables] == ["a", "b"], tables)
        check("series in first-seen order", groups == ["Varuna", "AutoHet"], groups)
        a = dict(tables)["a"]
        ratio = a.cell("7b", "Varuna").mean("recover_h") / a.cell("7b", "AutoHet").mean("recover_h")
        check("ratio of the means", abs(ratio - 4.0) < 1e-12, ratio)
        b = dict(tables)["b"]
        check("a failed point is failed", b.cell("7b", "AutoHet").failed == 2 and b.cell("7b", "AutoHet").n(
            "recover_h") == 0)
        for name, extra, want in [
            ("unknown column suggests", ["--x", "modle"], 'did you mean "model"'),
            ("unknown series in --ratio", ["--ratio", "Varuna/Autohet"], 'did you mean "AutoHet"'),
            ("--ratio needs NUM/DEN", ["--ratio", "Varuna"], "expected NUM/DEN"),
            ("unknown panel title value", ["--panel-title", "c=C"], "no panel has that value"),
            ("panel title needs VALUE=TEXT", ["--panel-title", "C"], "expected VALUE=TEXT"),
            ("scale must be positive", ["--scale", "0"], "must be a positive factor"),
        ]:
            rc, text = run(base + extra)
            check(name, rc == 2 and want in text and "Traceback" not in text, text)
        rc, text = run([d, "-o", os.path.join(d, "fig.svg"), "--panel", "cluster", "--x", "model", "--y", "recover_h"])
        check("output must be png or pdf", rc == 2 and ".png or .pdf" in text, text)
        rc, text = run([os.path.join(d, "none"), "-o", out, "--panel", "cluster", "--x", "model", "--y", "recover_h"])
        check("missing results folder", rc == 2 and "no such directory" in text, text)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
