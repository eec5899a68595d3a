#!/usr/bin/env python3
"""What the Python package adds to a simulation's wall time (docs/python.md, "Overhead").

For each plan, medians over N runs (after one warm-up):
  cli_s           `build/hetsim simulate --plan P` as a process (start, specs, simulation, printing);
  python_s        one hetsim.simulate(plan=P) call under Debian's /usr/bin/python3 (glibc's malloc);
  cpp_s           the C++ part of that call (specs loaded, plan checked, simulated: what the CLI does);
  layer_pct       (python_s - cpp_s) / cpp_s: the Python layer itself (arguments, GIL, the Report);
  jemalloc_python_s, jemalloc_vs_cli_pct  the same call with jemalloc preloaded, the allocator the CLI links:
                  the package against the CLI with the allocator taken out of the comparison;
  glibc_malloc_pct  python_s over jemalloc_python_s: what glibc's malloc costs the simulation.
Lines: `name value unit` (tools/bench). Usage: /usr/bin/python3 tools/benchmarks/python_bench.py [FILTER]
"""

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = [  # name, plan, runs
    ("llama3_405b_16384", "models/catalog/plans/llama3-405b-16384.yaml", 5),
    ("case_study", "models/catalog/plans/case-study-asymmetric.yaml", 20),
]
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def median_time(fn, runs):
    fn()  # warm-up: page cache, the bundled catalog, lazily built tables
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def python_times(plan, runs):
    """(python_s, cpp_s) of hetsim.simulate(plan) in this process."""
    import hetsim
    cpp = []
    python_s = median_time(lambda: cpp.append(hetsim.simulate(plan=plan).cpp_s), runs)
    return python_s, statistics.median(cpp[1:])


def main():
    os.chdir(ROOT)
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    if len(sys.argv) > 1 and sys.argv[1] == "--child":  # the jemalloc run: one case, times as JSON
        print(json.dumps(python_times(sys.argv[2], int(sys.argv[3]))))
        return
    filt = sys.argv[1] if len(sys.argv) > 1 else ""
    cli = os.path.join(ROOT, "build", "hetsim")
    for name, plan, runs in CASES:
        prefix = f"python.simulate.{name}"
        if filt not in prefix + ".layer_pct":
            continue
        lines = []
        cli_s = median_time(lambda: subprocess.run([cli, "simulate", "--plan", plan], check=True,
                                                   stdout=subprocess.DEVNULL), runs)
        python_s, cpp_s = python_times(plan, runs)
        lines += [("cli_s", cli_s, "s"), ("python_s", python_s, "s"), ("cpp_s", cpp_s, "s"),
                  ("layer_pct", 100 * (python_s - cpp_s) / cpp_s, "%")]
        if os.path.exists(JEMALLOC):
            env = dict(os.environ, LD_PRELOAD=JEMALLOC)
            child = subprocess.run([sys.executable, __file__, "--child", plan, str(runs)], env=env, check=True,
                                   capture_output=True, text=True)
            je_s, _ = json.loads(child.stdout)
            lines += [("jemalloc_python_s", je_s, "s"), ("jemalloc_vs_cli_pct", 100 * (je_s - cli_s) / cli_s, "%"),
                      ("glibc_malloc_pct", 100 * (python_s - je_s) / je_s, "%")]
        for key, value, unit in lines:
            print(f"{prefix}.{key} {value:.6g} {unit}", flush=True)


if __name__ == "__main__":
    main()
