"""hetsim's functions: the CLI's commands as Python calls over the same C++ libraries (docs/python.md)."""

import dataclasses
import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import _hetsim
from .objects import Cluster, Model, Plan, Planner, ReplayReport, Report, SpecError, _source

Progress = Optional[Callable[[Any], None]]


def list_bundled(what: str = "clusters") -> List[str]:
    """Bundled names of a kind, as `hetsim list` prints them: clusters, models, gpus, planners, plans,
    trainings, profiles, calibrations, traces or policies."""
    return list(_hetsim.list_bundled(what))


def cluster(spec) -> Cluster:
    """A cluster from a bundled name, a YAML file or a dict of the cluster file's keys; SpecError when invalid."""
    return Cluster(spec)


def model(spec) -> Model:
    """A model from a bundled name, a YAML file or a dict of the model file's keys; SpecError when invalid."""
    return Model(spec)


def _sources(cluster=None, model=None, training=None, plan=None, keywords=None) -> "_hetsim.SpecSources":
    """The specs a call names; a hetsim.Plan brings the cluster, model and training it was made for."""
    s = _hetsim.SpecSources()
    if isinstance(plan, Plan):
        cluster = plan.cluster if cluster is None else cluster
        model = plan.model if model is None else model
        training = plan.training if training is None else training
    s.cluster = _source(cluster, "cluster")
    s.model = _source(model, "model")
    s.training = _source(training, "training")
    s.plan = _source(plan, "plan")
    if keywords:
        s.training_overrides = json.dumps(keywords)
    return s


def training(model, training=None, **keywords) -> Dict[str, Any]:
    """The training spec resolved against a model (its defaults filled in), with keyword overrides such as
    global_batch_size=64, seq_len=4096, dtype="bf16", recompute="full"."""
    return _hetsim.resolved_training(_sources(model=model, training=training, keywords=keywords))


def describe(cluster=None, model=None, plan=None, training=None, gpu: Optional[str] = None, hspmd: bool = False,
             **keywords) -> str:
    """What `hetsim describe` prints: a GPU type, a cluster and/or a model, or a plan (validated in full)."""
    if gpu is not None:
        return _hetsim.describe_gpu(gpu)
    return _hetsim.describe(_sources(cluster, model, training, plan, keywords), hspmd)


def validate(plan, cluster=None, model=None, training=None, **keywords) -> str:
    """Checks a plan against its cluster, model and training spec (memory included), as `hetsim validate`;
    returns a one-line description or raises SpecError naming the file, the key and the fix."""
    return _hetsim.validate_plan(_sources(cluster, model, training, plan, keywords))


def _planner_args(planner, options, refine, polish, calibration, profiles, progress) -> "_hetsim.PlanArgs":
    a = _hetsim.PlanArgs()
    if isinstance(planner, type) and issubclass(planner, Planner):
        planner = planner()
    if isinstance(planner, Planner):
        a.instance = planner
    elif isinstance(planner, str):
        a.planner = planner
    else:
        raise TypeError(f"planner: expected a planner name or a hetsim.Planner, got {type(planner).__name__}")
    if isinstance(options, dict):
        options = json.dumps(options)
    a.options = options or ""
    a.refine = -1 if refine is None else int(refine)
    a.polish = -1 if polish is None else int(polish)
    a.calibration = calibration or ""
    a.profiles = list(profiles or [])
    a.progress = progress
    return a


def plan(planner: Union[str, Planner, type], cluster, model, training=None, options=None, refine: Optional[int] = None,
         polish: Optional[int] = None, calibration: Optional[str] = None, profiles: Sequence[str] = (),
         progress: Progress = None, **keywords) -> Plan:
    """Runs a planner, as `hetsim plan`: a registered name (hetsim.list_bundled("planners")) or a hetsim.Planner
    (instance or subclass). `options`: the planner's options (dict or YAML text); `refine`, `polish`: the twin
    check and polish (docs/planners.md); training keywords (global_batch_size=..., seq_len=...) override the
    training spec; `progress(line)` receives long searches' progress lines. Returns the Plan."""
    s = _sources(cluster, model, training, None, keywords)
    out = _hetsim.plan(s, _planner_args(planner, options, refine, polish, calibration, profiles, progress))
    return Plan(out["plan"], out["plan_yaml"], cluster=cluster, model=model, training=out["training"], info=out)


_make_plan = plan  # for the functions below, whose `plan` argument hides it


def _sim_args(fidelity, calibration, profiles, fold, timeline_out, timeline_devices, shared_cores, progress):
    a = _hetsim.SimArgs()
    a.fidelity = fidelity
    a.calibration = calibration or ""
    a.profiles = list(profiles or [])
    a.fold = bool(fold)
    a.shared_cores = int(shared_cores)
    a.timeline_out = os.fspath(timeline_out) if timeline_out else ""
    if isinstance(timeline_devices, str):
        a.timeline_devices = timeline_devices
    else:
        a.timeline_device_ids = [int(d) for d in timeline_devices]
    a.progress = progress
    return a


def simulate(plan=None, cluster=None, model=None, training=None, planner=None, fidelity: str = "balanced",
             calibration: Optional[str] = None, profiles: Sequence[str] = (), fold: bool = True,
             timeline_out=None, timeline_devices: Union[str, Sequence[int]] = "auto", shared_cores: int = 0,
             progress: Progress = None, **keywords) -> Report:
    """Simulates one training iteration, as `hetsim simulate`: `plan` is a plan file, a dict or a hetsim.Plan
    (its own cluster:, model: and training: keys fill in what is not given), or `planner` plans first.
    `timeline_out` writes a Chrome-trace timeline; `progress(dict)` receives long simulations' progress
    (phase, done, total, simulated_s, wall_s, line). The GIL is released while it simulates."""
    if (plan is None) == (planner is None):
        raise SpecError("simulate: give either plan= or planner=")
    if planner is not None:
        plan = _make_plan(planner, cluster, model, training, **keywords)
    s = _sources(cluster, model, training, plan, keywords)
    out = _hetsim.simulate(s, _sim_args(fidelity, calibration, profiles, fold, timeline_out, timeline_devices,
                                        shared_cores, progress))
    return Report._from(out, os.fspath(timeline_out) if timeline_out else None)


def lower(plan, cluster=None, model=None, training=None, fused: bool = False, devices: Sequence[int] = (),
          output=None, **keywords) -> str:
    """The plan's lowering, as `hetsim lower`: every rank's operations in order (`devices`: only these;
    `fused`: one operation per pass and micro-batch). Written to `output` when given; returned as text."""
    text = _hetsim.lower(_sources(cluster, model, training, plan, keywords), fused, [int(d) for d in devices])
    if output:
        with open(output, "w") as f:
            f.write(text)
    return text


def replay(trace: str, plan=None, cluster=None, model=None, training=None, planner=None,
           policies: Sequence[Union[str, Dict[str, Any]]] = ("checkpoint-restart",),
           checkpoint_interval_s: Optional[float] = None, days: Optional[float] = None,
           rate_scale: Optional[float] = None, seed: int = 1, fidelity: str = "balanced",
           calibration: Optional[str] = None, report_out=None, figure=None, progress: Progress = None,
           settings: Optional[Dict[str, Any]] = None, **keywords) -> List[ReplayReport]:
    """Replays a whole training run over a trace (a file, a bundled trace, or "llama3" to draw Llama-3-style
    failures for `days`), once per recovery policy, as `hetsim replay`. `policies`: names or dicts of a
    policy's keys (name, spares, planner, ...); `checkpoint_interval_s`: None for Young-Daly; `settings`: any
    other key of a manifest's replay: section (detection_s, restart_s, usd_per_gpu_hour, ...)."""
    if plan is None and planner is None:
        raise SpecError("replay: give plan= or planner= (the plan the run starts with)")
    if planner is not None and plan is None:
        plan = _make_plan(planner, cluster, model, training, **keywords)
    spec: Dict[str, Any] = dict(settings or {})
    spec["trace"] = trace
    if trace == "llama3" or days is not None:
        spec["trace_days"] = 54.0 if days is None else float(days)
    if trace == "llama3" or rate_scale is not None:
        spec["trace_rate_scale"] = 1.0 if rate_scale is None else float(rate_scale)
    if checkpoint_interval_s is not None:
        spec["checkpoint_interval_s"] = float(checkpoint_interval_s)
    spec["policies"] = [p if isinstance(p, dict) else {"name": p} for p in policies]
    s = _sources(cluster, model, training, plan, keywords)
    args = _sim_args(fidelity, calibration, (), True, None, "auto", 0, progress)
    out = _hetsim.replay(s, json.dumps(spec), args, int(seed), os.fspath(report_out) if report_out else "",
                         os.fspath(figure) if figure else "")
    return [ReplayReport._from(t) for t in out]


def _manifest_source(manifest) -> "_hetsim.Source":
    """A manifest path, or a dict whose `planners` may name Planner subclasses directly ({"python": MyPlanner})."""
    if not isinstance(manifest, dict):
        return _source(manifest, "experiment")
    m = json.loads(json.dumps(manifest, default=_class_reference))
    return _source(m, "experiment")


def _class_reference(value):
    if isinstance(value, type) and issubclass(value, Planner):
        return f"{value.__module__}:{value.__qualname__}"
    raise TypeError(f"manifest: cannot write a {type(value).__name__} into a manifest")


def run(manifest, out_dir=None, resume: bool = False, jobs: int = 1, figures: bool = False,
        progress: Progress = None):
    """Runs an experiment manifest (a file or a dict of its keys), as `hetsim run`: every sweep point planned and
    simulated, the results folder written (out/<name> unless `out_dir`). Returns the results table
    (results.csv) as a pandas DataFrame, one row per point; `df.attrs` holds out_dir and the printed summary.
    Planners written in Python: `planners: [{python: "module:Class"}]` (or the class itself in a dict); they
    run in this process (jobs=1). `progress(line)` receives the progress lines."""
    import pandas as pd
    a = _hetsim.RunArgs()
    a.out_dir = os.fspath(out_dir) if out_dir else ""
    a.resume, a.jobs, a.figures, a.progress = bool(resume), int(jobs), bool(figures), progress
    out = _hetsim.run(_manifest_source(manifest), a)
    df = pd.read_csv(os.path.join(out["out_dir"], "results.csv"))
    df.attrs.update(out_dir=out["out_dir"], summary=out["summary"])
    return df


@dataclasses.dataclass
class Advice:
    """What hetsim.advise found: `results` (every replayed configuration), `configurations` (the table of
    configurations.csv), `advice` (advice.json: the Pareto front and the recommendation), the folder and
    the printed summary."""

    out_dir: str
    summary: str
    results: Any
    configurations: Any
    advice: Dict[str, Any]


def advise(config, out_dir=None, resume: bool = False, jobs: int = 1, prune: bool = True, figures: bool = False,
           time_limit_s: float = 600, progress: Progress = None) -> Advice:
    """Runs an advise config (a file: kind: advise, docs/advise.md), as `hetsim advise`: which GPUs, plan and
    recovery policy train fastest and cheapest. Returns the tables as DataFrames (Advice)."""
    import pandas as pd
    a = _hetsim.RunArgs()
    a.out_dir = os.fspath(out_dir) if out_dir else ""
    a.resume, a.jobs, a.prune, a.figures = bool(resume), int(jobs), bool(prune), bool(figures)
    a.time_limit_s, a.progress = float(time_limit_s), progress
    out = _hetsim.advise(os.fspath(config), a)
    folder = out["out_dir"]

    def table(name):
        path = os.path.join(folder, name)
        return pd.read_csv(path) if os.path.exists(path) else pd.DataFrame()

    advice = {}
    if os.path.exists(os.path.join(folder, "advice.json")):
        with open(os.path.join(folder, "advice.json")) as f:
            advice = json.load(f)
    return Advice(folder, out["summary"], table("results.csv"), table("configurations.csv"), advice)
