#!/usr/bin/env python3
"""What the Python package adds to a simulation's wall time (docs/python.md, "Overhead").

For each plan, the median of N runs of three measures:
  cli_s     `build/hetsim simulate --plan P` as a process (start, spec loading, simulation, printing);
  python_s  one hetsim.simulate(plan=P) call in this process (spec loading, simulation, the Report);
  engine_s  the simulation alone (sim::SimulateIteration, the report's wall_time_s, from the Python calls);
and the overheads in percent: python over the CLI, and python over the simulation alone (what the binding
layer itself costs: loading the specs, the GIL, JSON, the Report). Lines: `name value unit` (tools/bench).
Usage: PYTHONPATH=build/python /usr/bin/python3 tools/benchmarks/python_bench.py [FILTER]
"""

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


def median_time(fn, runs):
    fn()  # warm-up: page cache, the bundled catalog, lazily built tables
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    os.chdir(ROOT)
    sys.path.insert(0, os.path.join(ROOT, "build", "python"))
    import hetsim
    filt = sys.argv[1] if len(sys.argv) > 1 else ""
    cli = os.path.join(ROOT, "build", "hetsim")
    for name, plan, runs in CASES:
        prefix = f"python.simulate.{name}"
        if filt not in prefix + ".overhead_pct":
            continue
        cli_s = median_time(lambda: subprocess.run([cli, "simulate", "--plan", plan], check=True,
                                                   stdout=subprocess.DEVNULL), runs)
        engine = []
        python_s = median_time(lambda: engine.append(hetsim.simulate(plan=plan).wall_time_s), runs)
        engine_s = statistics.median(engine[1:])
        for key, value, unit in [("cli_s", cli_s, "s"), ("python_s", python_s, "s"), ("engine_s", engine_s, "s"),
                                 ("overhead_vs_cli_pct", 100 * (python_s - cli_s) / cli_s, "%"),
                                 ("overhead_pct", 100 * (python_s - engine_s) / engine_s, "%")]:
            print(f"{prefix}.{key} {value:.6g} {unit}", flush=True)


if __name__ == "__main__":
    main()
