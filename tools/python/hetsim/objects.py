"""The objects hetsim's Python API returns and takes: specs, plans, reports, and the planner interface."""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

from . import _hetsim

SpecError = _hetsim.SpecError
InfeasibleError = _hetsim.InfeasibleError
SimulationError = _hetsim.SimulationError


def _source(value, kind: str) -> "_hetsim.Source":
    """A spec argument as the extension takes it: a bundled name or path, a dict, or a hetsim object."""
    if value is None:
        return _hetsim.Source()
    if hasattr(value, "_source"):
        return value._source
    if isinstance(value, (str, os.PathLike)):
        return _hetsim.Source(ref=os.fspath(value))
    if isinstance(value, dict):
        spec = dict(value)
        spec.setdefault("kind", kind)
        name = spec.get("name", "")
        label = f"<{kind} dict{' ' + name if name else ''}>"
        return _hetsim.Source(text=json.dumps(spec, indent=1), label=label)
    raise TypeError(f"{kind}: expected a bundled name, a path, a dict or a hetsim object, got {type(value).__name__}")


class Cluster:
    """A cluster spec, loaded and checked (hetsim.cluster()). `devices` is a DataFrame, one row per GPU."""

    def __init__(self, spec):
        self._source = _source(spec, "cluster")
        self._info = _hetsim.cluster_info(self._source)
        self.name: str = self._info["name"]
        self.num_devices: int = self._info["num_devices"]
        self.num_nodes: int = self._info["num_nodes"]
        self.summary: str = self._info["summary"]

    @property
    def devices(self):
        import pandas as pd
        return pd.DataFrame(self._info["devices"])

    def to_dict(self) -> Dict[str, Any]:
        """The spec as a dict of its YAML keys (what hetsim.cluster(dict) takes back)."""
        return dict(self._info["spec"])

    def describe(self) -> str:
        return self._info["description"]

    def __repr__(self) -> str:
        return f"Cluster({self.name!r}: {self.summary})"


class Model:
    """A model spec, loaded and checked (hetsim.model())."""

    def __init__(self, spec):
        self._source = _source(spec, "model")
        self._info = _hetsim.model_info(self._source)
        self.name: str = self._info["name"]
        self.num_blocks: int = self._info["num_blocks"]
        self.num_layers: int = self._info["num_layers"]  # blocks + embedding + head: how plans count layers
        self.params: float = self._info["params"]

    def to_dict(self) -> Dict[str, Any]:
        return dict(self._info["spec"])

    def describe(self) -> str:
        return self._info["description"]

    def __repr__(self) -> str:
        return f"Model({self.name!r}: {self.params / 1e9:.3f} B parameters)"


class Plan:
    """A parallelism plan: the plan file's keys as a dict, with the cluster, model and training it was made for.

    hetsim.plan() returns one; hetsim.simulate(plan=p) simulates it on the cluster and model it remembers
    (keywords override them). `to_dict()` gives the plan file's keys, `save(path)` writes a plan file that
    `hetsim simulate --plan` reads.
    """

    def __init__(self, plan: Dict[str, Any], yaml_text: str = "", cluster=None, model=None,
                 training: Optional[Dict[str, Any]] = None, info: Optional[Dict[str, Any]] = None):
        self._plan = plan
        self._yaml = yaml_text
        self.cluster = cluster
        self.model = model
        self.training = training
        self.info = info or {}
        self.name: str = plan.get("name", "")
        self.planner: str = plan.get("planner", "")
        self.estimated_iteration_s: Optional[float] = self.info.get("estimated_iteration_s")
        label = f"<plan {self.name or self.planner or 'dict'}>"
        self._source = _hetsim.Source(text=json.dumps(self.to_dict(), indent=1), label=label)

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self._plan))

    def to_yaml(self) -> str:
        """The plan file as `hetsim plan -o` writes it (cluster, model and training keys included)."""
        return self._yaml

    def save(self, path) -> None:
        with open(path, "w") as f:
            f.write(self._yaml)

    def describe(self) -> str:
        """What `hetsim plan` prints: the plan's tables, the analytic estimate and the search statistics."""
        return self.info.get("description", "")

    @property
    def num_pipelines(self) -> int:
        return len(self._plan.get("pipelines", []))

    def __repr__(self) -> str:
        est = f", estimated {self.estimated_iteration_s:.4g} s" if self.estimated_iteration_s else ""
        n = self.num_pipelines
        return f"Plan({self.name or self.planner!r}: {n} pipeline{'' if n == 1 else 's'}{est})"


@dataclasses.dataclass(frozen=True)
class Report:
    """One simulated iteration (hetsim.simulate): the headline numbers as attributes, every field of the
    iteration report (docs/results-format.md) in to_dict(), one row per device in `devices` (a DataFrame).
    The full report is kept as protobuf and turned into dicts only when asked (a 16,384-GPU report is 8 MB
    of JSON)."""

    iteration_time_s: float
    tokens_per_s: float
    mfu: float
    bubble_fraction: float
    any_oom: bool
    wall_time_s: float
    plan: str
    model: str
    cluster: str
    interval: str
    interval_lo_s: float
    interval_hi_s: float
    played_devices: int
    timeline_file: Optional[str]
    cpp_s: float  # of wall_time_s and more: the C++ side's whole call (specs loaded, plan checked, simulated)
    _report_bytes: bytes = dataclasses.field(repr=False, compare=False)
    _cache: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def _from(cls, out: Dict[str, Any], timeline_file: Optional[str]) -> "Report":
        names = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_") and f.name != "timeline_file"]
        return cls(timeline_file=timeline_file, _report_bytes=out["report_bytes"], **{n: out[n] for n in names})

    def _raw(self) -> Dict[str, Any]:
        if "raw" not in self._cache:
            self._cache["raw"] = json.loads(_hetsim.report_json(self._report_bytes))
        return self._cache["raw"]

    def to_dict(self) -> Dict[str, Any]:
        """The iteration report as `hetsim simulate --report-out` writes it."""
        return json.loads(json.dumps(self._raw()))

    def to_json(self) -> str:
        """The iteration report's JSON text, as `hetsim simulate --report-out` writes it."""
        return _hetsim.report_json(self._report_bytes)

    @property
    def devices(self):
        """Per device: pipeline, stage, GPU, compute/communication/idle seconds, peak memory, OOM."""
        import pandas as pd
        return pd.DataFrame(self._raw().get("devices", []))


@dataclasses.dataclass(frozen=True)
class ReplayReport:
    """One policy's replay over a trace (hetsim.replay): headline numbers, the full report in to_dict()."""

    policy: str
    ettr: float
    goodput_tokens_per_s: float
    interruptions: int
    gpu_hours: float
    cost_usd: float
    _raw: Dict[str, Any] = dataclasses.field(repr=False, compare=False)

    @classmethod
    def _from(cls, text: str) -> "ReplayReport":
        raw = json.loads(text)
        return cls(policy=raw["policy"], ettr=raw["ettr"], goodput_tokens_per_s=raw["goodput_tokens_per_s"],
                   interruptions=raw["interruptions"], gpu_hours=raw["gpu_hours"], cost_usd=raw["cost_usd"],
                   _raw=raw)

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(json.dumps(self._raw))

    @property
    def downtime(self):
        import pandas as pd
        return pd.DataFrame(self._raw.get("downtime", []))


class Problem:
    """What a Planner's make_plan receives: the cluster (`cluster`, with a `devices` list of dicts: device, node,
    gpu, memory_gib, peak_bf16_tflops), the model (`model`: name, num_layers, params, spec) and the resolved
    training spec (`training`: global_batch_size, seq_len, dtype, ...), plus two helpers: `estimate(plan)` (the
    analytic cost model the baselines use: iteration_s, oom, ...) and `validate(plan)` (raises SpecError).
    Valid during the make_plan call only."""

    def __init__(self, view):
        self._view = view
        self.cluster: Dict[str, Any] = view.cluster()
        self.model: Dict[str, Any] = view.model()
        self.training: Dict[str, Any] = view.training()

    @property
    def devices(self) -> List[Dict[str, Any]]:
        return self.cluster["devices"]

    def estimate(self, plan) -> Dict[str, Any]:
        return self._view.estimate(plan)

    def validate(self, plan) -> None:
        self._view.validate(plan)


class Planner:
    """A planner written in Python. Subclass it and implement make_plan(problem) -> plan (a dict of the plan
    file's keys, or a hetsim.Plan); return None or raise hetsim.InfeasibleError when nothing fits.

    The plan is validated (memory included) and then treated exactly as a built-in planner's: hetsim.plan(
    planner=MyPlanner()) checks it on the twin, hetsim.simulate simulates it, and manifests run it with
    `planners: [{python: "my_module:MyPlanner"}]` (hetsim.run; the module must be importable). Options from a
    manifest entry's `options:` arrive in configure(options) as a dict.
    """

    def configure(self, options: Dict[str, Any]) -> None:
        if options:
            raise SpecError(f"planner {type(self).__name__} takes no options, got {', '.join(map(str, options))} "
                            "(define configure(options) to take them)")

    def make_plan(self, problem: Problem):
        raise NotImplementedError(f"{type(self).__name__}.make_plan(problem) is not implemented")
