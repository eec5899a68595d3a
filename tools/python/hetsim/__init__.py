"""hetsim: a digital twin of heterogeneous GPU clusters for large-model training, from Python.

The CLI's commands as functions over the same C++ libraries (docs/python.md):

    import hetsim
    r = hetsim.simulate(plan="models/catalog/plans/llama3-405b-16384.yaml")
    r.iteration_time_s, r.devices          # a Report; per-device numbers as a DataFrame
    p = hetsim.plan("metis", cluster="hexiscale-case-study", model="llama2-7b", global_batch_size=32)
    df = hetsim.run("experiments/quickstart.yaml")   # a sweep's results as a DataFrame

Specs are bundled names, YAML files or dicts; mistakes raise hetsim.SpecError (a ValueError) with the file,
line, key and fix the CLI prints. Planners written in Python subclass hetsim.Planner.
"""

from .objects import (Cluster, InfeasibleError, Model, Plan, Planner, Problem, ReplayReport, Report,
                      SimulationError, SpecError)
from .api import (Advice, advise, cluster, describe, list_bundled, lower, model, plan, replay, run, simulate,
                  training, validate)

__all__ = ["Advice", "Cluster", "InfeasibleError", "Model", "Plan", "Planner", "Problem", "ReplayReport", "Report",
           "SimulationError", "SpecError", "advise", "cluster", "describe", "list_bundled", "lower", "model", "plan",
           "replay", "run", "simulate", "training", "validate"]
__version__ = "0.1.0"
