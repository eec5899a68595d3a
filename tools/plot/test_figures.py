#!/usr/bin/python3
"""Self-test of tools/plot/figures.py and tools/plot/replay.py: builds a small fake results directory covering
every figure kind, runs the tool on it, checks the PNG and PDF files and a few aggregated values, and checks the
error messages; draws the replay figure of testdata/replay-sample.json (two policies, as `hetsim replay`
writes it) and checks its inputs' error messages.

Usage: /usr/bin/python3 tools/plot/test_figures.py [--keep DIR]   (--keep: build the fake results in DIR and
leave them there, figures included, to look at). Prints one line per test and then "N passed, M failed".
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = os.path.join(HERE, "figures.py")
TIMELINE = os.path.join(HERE, "timeline.py")
REPLAY = os.path.join(HERE, "replay.py")
REPLAY_SAMPLE = os.path.join(HERE, "testdata", "replay-sample.json")
sys.path.insert(0, HERE)
import figures  # noqa: E402
import replay  # noqa: E402

PLANNERS = [("megatron", "Megatron-LM", 100.0), ("deepspeed", "DeepSpeed", 90.0), ("hexiscale", "HexiScale", 130.0),
            ("myplanner", "MyPlanner", 115.0)]
CLUSTERS = [("hexiscale-setting1", 1.0), ("hexiscale-setting2", 0.8), ("hexiscale-setting3", 0.6)]
GPUS = [64, 8, 32, 16]  # not sorted: the line figure must sort them
CAPTION = "hetsim run experiments/selftest.yaml — fake results for the plotting self-test, fidelity balanced"


def metrics_of(tokens, oom=False, stages=4):
    it = 1.0e6 / tokens
    parts = {"time_compute_s": 0.6 * it, "time_tp_s": 0.05 * it, "time_pp_s": 0.05 * it, "time_dp_s": 0.1 * it,
             "time_idle_s": 0.2 * it}
    return dict(parts, iteration_time_s=it, tokens_per_s=tokens, mfu=tokens / 400.0,
                bubble_fraction=2.0 / tokens ** 0.5, peak_memory_gib=90.0 if oom else 60.0, any_oom=oom,
                estimated_iteration_s=it * 0.95, plan_search_s=0.02, candidates=1234, pipelines=2, stages_max=stages,
                sim_wall_s=0.3)


def fake_rows():
    """Sweep A: cluster x planner x 3 repeats (llama2-7b); sweep B: gpus x planner (llama2-13b)."""
    rows = []

    def add(status, inputs, metrics=None, reason=""):
        row = {"point": len(rows), "id": f"{len(rows):08x}", "status": status, "reason": reason, "inputs": inputs}
        if metrics is not None:
            row["metrics"] = metrics
        rows.append(row)

    for cluster, factor in CLUSTERS:
        for planner, label, base in PLANNERS:
            for repeat, delta in enumerate((-10.0, 0.0, 10.0)):
                inputs = {"cluster": cluster, "model": "llama2-7b", "planner": planner, "planner_label": label,
                          "global_batch_size": 512, "seq_len": 4096, "gpus": 40, "repeat": repeat, "seed": repeat + 1}
                if planner == "deepspeed" and cluster == "hexiscale-setting3":
                    add("failed", inputs, reason="no feasible plan")
                elif planner == "myplanner" and cluster == "hexiscale-setting2" and repeat == 2:
                    add("failed", inputs, reason="simulation error")  # one repeat of three fails
                else:
                    oom = planner == "megatron" and cluster == "hexiscale-setting2"
                    add("ok", inputs, metrics_of(base * factor + delta, oom=oom))
    for gpus in GPUS:
        for planner, label, base in PLANNERS[:3]:
            inputs = {"cluster": "scale-a800", "model": "llama2-13b", "planner": planner, "planner_label": label,
                      "global_batch_size": 512, "seq_len": 4096, "gpus": gpus, "repeat": 0, "seed": 1}
            if planner == "deepspeed" and gpus == 64:
                add("failed", inputs, reason="no feasible plan")
            else:
                oom = planner == "megatron" and gpus == 8  # as hetsim run writes it: failed, with metrics
                add("failed" if oom else "ok", inputs, metrics_of(base * gpus * (1.0 - gpus / 400.0), oom=oom),
                    reason="out of memory: GPU 3" if oom else "")
    return rows


FIGURE_SPECS = [
    {"name": "throughput", "kind": "grouped_bar", "x": "cluster", "y": "tokens_per_s", "group": "planner_label",
     "title": "Throughput on the HexiScale settings", "filter": {"model": "llama2-7b"}},
    {"name": "mfu", "kind": "bar", "x": "cluster", "y": "mfu", "filter": {"model": "llama2-7b"}},
    {"name": "mfu_hexiscale", "kind": "bar", "x": "cluster", "y": "mfu",
     "filter": {"model": "llama2-7b", "planner": "hexiscale"}},
    {"name": "iteration_by_planner", "kind": "bar", "x": "planner_label", "y": "iteration_time_s",
     "filter": {"cluster": "hexiscale-setting1"}},
    {"name": "scaling", "kind": "line", "x": "gpus", "y": "tokens_per_s", "logx": True, "logy": True,
     "filter": {"model": "llama2-13b"}},
    {"name": "bubble_line", "kind": "line", "x": "cluster", "y": "bubble_fraction", "filter": {"gpus": "40"}},
    {"name": "breakdown", "kind": "stacked", "x": "cluster", "group": "planner_label",
     "y_stack": ["time_compute_s", "time_tp_s", "time_pp_s", "time_dp_s", "time_idle_s"],
     "filter": {"model": "llama2-7b"}},
    {"name": "breakdown_hexiscale", "kind": "stacked", "x": "cluster",
     "y_stack": ["time_compute_s", "time_tp_s", "time_pp_s", "time_dp_s", "time_idle_s"],
     "filter": {"model": "llama2-7b", "planner_label": "HexiScale"}, "ylabel": "time per iteration (s)"},
    {"name": "timeline", "kind": "timeline", "timeline": "timelines/point-0.json", "title": "Point 0, simulated"},
    # as hetsim run writes a replay figure: the usual keys (empty) and the reports of its points
    {"name": "replay", "kind": "replay", "x": "", "y": "", "y_stack": [], "group": "planner_label", "title": "",
     "filter": {}, "timeline": "", "replays": ["replays/point-0.json", "replays/point-1.json"]},
]


def fake_trace():
    ev = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "node0"}}]
    for d in range(4):
        ev.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": d, "args": {"name": f"GPU {d} (a800) p0 s{d}"}})
        t = d * 1.0e5
        for mb in range(4):
            for cat, dur in (("forward", 1.0e5), ("tp", 1.0e4), ("pp", 2.0e4)):
                ev.append({"name": f"{cat} mb {mb}", "cat": cat, "ph": "X", "ts": t, "dur": dur, "pid": 0, "tid": d})
                t += dur
        for mb in range(4):
            ev.append({"name": f"backward mb {mb}", "cat": "backward", "ph": "X", "ts": t, "dur": 2.0e5, "pid": 0,
                       "tid": d})
            t += 2.0e5
        ev.append({"name": "dp", "cat": "dp", "ph": "X", "ts": t, "dur": 1.5e5, "pid": 0, "tid": d})
        ev.append({"name": "optimizer", "cat": "optimizer", "ph": "X", "ts": t + 1.5e5, "dur": 5.0e4, "pid": 0,
                   "tid": d})
    return {"displayTimeUnit": "ms", "traceEvents": ev}


def build(d, specs=None, rows=None):
    os.makedirs(os.path.join(d, "timelines"), exist_ok=True)
    with open(os.path.join(d, "results.jsonl"), "w") as f:
        for row in fake_rows() if rows is None else rows:
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(d, "figures.json"), "w") as f:
        json.dump({"experiment": "selftest", "manifest": "experiments/selftest.yaml", "caption": CAPTION,
                   "figures": FIGURE_SPECS if specs is None else specs}, f, indent=1)
    with open(os.path.join(d, "timelines", "point-0.json"), "w") as f:
        json.dump(fake_trace(), f)
    os.makedirs(os.path.join(d, "replays"), exist_ok=True)
    shutil.copyfile(REPLAY_SAMPLE, os.path.join(d, "replays", "point-0.json"))  # a list of two reports
    with open(REPLAY_SAMPLE) as f:
        one = json.load(f)[0]
    with open(os.path.join(d, "replays", "point-1.json"), "w") as f:  # a single report object
        json.dump(dict(one, trace="llama3 (30 days, seed 2)"), f)


def run_tool(*args):
    return subprocess.run([sys.executable, FIGURES, *args], capture_output=True, text=True)


def table_for(d, name):
    """The aggregation figures.py does for figure NAME of the fake results in d."""
    spec, figs = figures.load_spec(os.path.join(d, "figures.json"))
    rows = figures.load_results(os.path.join(d, "results.jsonl"))
    fig = next(f for f in figs if f["name"] == name)
    fig, kept = figures.resolve(fig, rows, d)
    metrics = fig["y_stack"] if fig["kind"] == "stacked" else [fig["y"]]
    return figures.aggregate(kept, fig["x"], fig["group"], metrics, stacked=fig["kind"] == "stacked")


def close(a, b, tol=1e-9):
    return math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def png_info(path):
    """(width, height, dpi or None) from a PNG's IHDR and pHYs chunks."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, dpi, size = 8, None, None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"pHYs":
            ppm_x, _, unit = struct.unpack(">IIB", body)
            dpi = ppm_x * 0.0254 if unit == 1 else None
        pos += 12 + n
    return size[0], size[1], dpi


# --- tests -------------------------------------------------------------------------------------------------


def test_renders_every_figure(d):
    out = os.path.join(d, "figures")
    shutil.rmtree(out, ignore_errors=True)
    r = run_tool(d)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == len(FIGURE_SPECS), f"expected one line per figure, got:\n{r.stdout}"
    kinds = {s["kind"] for s in FIGURE_SPECS}
    assert kinds == set(figures.KINDS), f"the fake figures.json misses kinds {set(figures.KINDS) - kinds}"
    for s in FIGURE_SPECS:
        for ext, magic in (("png", b"\x89PNG"), ("pdf", b"%PDF")):
            p = os.path.join(out, f"{s['name']}.{ext}")
            assert os.path.isfile(p), f"{p} not written"
            assert os.path.getsize(p) > 1000, f"{p} is (nearly) empty"
            with open(p, "rb") as f:
                assert f.read(4) == magic, f"{p} is not a {ext}"
    assert "1 of 3 rows failed" in r.stderr, f"no warning about the partly failed repeats: {r.stderr!r}"


def test_png_resolution(d):
    w, h, dpi = png_info(os.path.join(d, "figures", "throughput.png"))
    assert dpi is not None and abs(dpi - 150) < 1, f"dpi {dpi}"
    assert 600 < w < 2200 and 400 < h < 1600, f"size {w}x{h} px"


def test_only(d):
    with tempfile.TemporaryDirectory() as t:
        build(t)
        r = run_tool(t, "--only", "scaling")
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(os.path.join(t, "figures"))) == ["scaling.pdf", "scaling.png"], \
            os.listdir(os.path.join(t, "figures"))
        assert len(r.stdout.splitlines()) == 1, r.stdout


def test_mean_and_std_over_repeats(d):
    t = table_for(d, "throughput")
    c = t.cell("hexiscale-setting1", "HexiScale")
    assert c.n("tokens_per_s") == 3
    assert close(c.mean("tokens_per_s"), 130.0), c.mean("tokens_per_s")
    assert close(c.std("tokens_per_s"), 10.0), c.std("tokens_per_s")  # sample std of 120, 130, 140
    c = t.cell("hexiscale-setting2", "Megatron-LM")
    assert close(c.mean("tokens_per_s"), 80.0) and c.oom, (c.mean("tokens_per_s"), c.oom)


def test_single_value_has_no_spread(d):
    t = table_for(d, "scaling")
    c = t.cell("16", "HexiScale")
    assert c.n("tokens_per_s") == 1 and c.std("tokens_per_s") == 0.0
    assert close(c.mean("tokens_per_s"), 130.0 * 16 * (1 - 16 / 400.0))
    c = t.cell("8", "Megatron-LM")  # status "failed" for out of memory, metrics kept: an OOM value
    assert c.oom and c.failed == 0 and close(c.mean("tokens_per_s"), 100.0 * 8 * (1 - 8 / 400.0))


def test_failed_points(d):
    t = table_for(d, "throughput")
    c = t.cell("hexiscale-setting3", "DeepSpeed")
    assert c.all_failed and c.failed == 3 and c.n("tokens_per_s") == 0 and math.isnan(c.mean("tokens_per_s"))
    c = t.cell("hexiscale-setting2", "MyPlanner")  # 2 of 3 repeats succeeded: their mean is plotted
    assert c.failed == 1 and not c.all_failed and c.n("tokens_per_s") == 2
    assert close(c.mean("tokens_per_s"), 115.0 * 0.8 - 5.0), c.mean("tokens_per_s")
    assert close(c.std("tokens_per_s"), math.sqrt(50.0)), c.std("tokens_per_s")


def test_mfu_in_percent(d):
    t = table_for(d, "mfu")
    c = t.cell("hexiscale-setting1", "DeepSpeed")
    assert close(c.mean("mfu"), 90.0 / 400.0 * 100.0), c.mean("mfu")
    assert figures.column_label("mfu") == "MFU (%)"


def test_first_seen_order_and_filter(d):
    t = table_for(d, "throughput")
    assert t.xs == [c for c, _ in CLUSTERS], t.xs
    assert t.groups == [label for _, label, _ in PLANNERS], t.groups
    t = table_for(d, "scaling")
    assert t.xs == ["64", "8", "32", "16"], t.xs  # first seen; the line figure sorts numerically
    assert figures.x_positions(t.xs)[0] == ["8", "16", "32", "64"]
    assert figures.x_positions(["b", "a", "c"]) == (["b", "a", "c"], {"b": 0.0, "a": 1.0, "c": 2.0}, False)
    t = table_for(d, "bubble_line")  # filter {"gpus": "40"} matches the integer 40
    assert set(t.xs) == {c for c, _ in CLUSTERS} and sum(c.rows for c in t.cells.values()) == 36
    rows = [figures.Row({"inputs": {"a": 4096.0, "b": True}}), figures.Row({"inputs": {"a": "4096", "b": "x"}})]
    assert len(figures.filter_rows(rows, {"a": 4096})) == 2 and len(figures.filter_rows(rows, {"b": "true"})) == 1


def test_stacked_totals(d):
    t = table_for(d, "breakdown")
    c = t.cell("hexiscale-setting1", "Megatron-LM")
    its = [1.0e6 / v for v in (90.0, 100.0, 110.0)]
    assert close(c.mean("time_idle_s"), 0.2 * sum(its) / 3), c.mean("time_idle_s")
    assert len(c.totals) == 3 and close(sum(c.totals) / 3, sum(its) / 3)
    mean = sum(its) / 3
    assert close(c.total_std(), math.sqrt(sum((v - mean) ** 2 for v in its) / 2))


def test_planner_styles():
    a = figures.series_style("Megatron-LM")
    assert a == figures.series_style("megatron") == figures.series_style("MEGATRON-LM (1F1B)")
    assert figures.series_style("whatever", "megatron") == a  # the planner name when the label is unknown
    assert figures.series_style("HexiScale")["colour"] == figures.series_style("hexiscale")["colour"]
    assert figures.series_style("Hetu") != figures.series_style("HetHub")
    colours = [c for _, c in figures.PLANNERS]
    assert len(set(colours)) == len(colours), "two known planners share a colour"
    names = ["Megatron-LM", "DeepSpeed", "FSDP", "Galvatron", "Whale", "Alpa", "AMP", "exhaustive", "Metis",
             "HexiScale", "AutoHet", "HetHub", "Hetu", "Varuna", "Oobleck"]
    styles = [figures.series_style(n) for n in names]
    assert len({s["colour"] for s in styles}) == len(names)
    assert len({(s["hatch"], s["marker"]) for s in styles}) == len(names)
    u = figures.series_style("MyPlanner")
    assert u == figures.series_style("myplanner") and u["colour"] in figures.FALLBACK_COLOURS
    # the same colour in a second run (the hash is not Python's randomised hash())
    code = "import figures; print(figures.series_style('MyPlanner')['colour'])"
    r = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONHASHSEED="123"))
    assert r.stdout.strip() == u["colour"], (r.stdout, r.stderr)


def test_labels():
    want = {"tokens_per_s": "throughput (tokens/s)", "iteration_time_s": "iteration time (s)", "mfu": "MFU (%)",
            "bubble_fraction": "pipeline bubble (%)", "time_compute_s": "time (s)", "time_idle_s": "time (s)",
            "peak_memory_gib": "peak memory (GiB)", "samples_per_s": "samples/s", "link_gbps": "link (Gbit/s)",
            "nic_count": "nic count"}
    for col, label in want.items():
        assert figures.column_label(col) == label, (col, figures.column_label(col))
    assert figures.compact_number(170000.0) == "170k" and figures.compact_number(0.30000000000000004) == "0.3"


def _expect_error(d, *needles, args=()):
    r = run_tool(d, *args)
    assert r.returncode != 0, f"exit 0 for malformed inputs; stdout {r.stdout!r}"
    assert "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, f"{n!r} not in the message: {r.stderr!r}"


def _with_spec(fig):
    t = tempfile.mkdtemp(prefix="figtest-")
    build(t, specs=[fig])
    return t


def test_error_missing_files(d):
    with tempfile.TemporaryDirectory() as t:
        build(t)
        os.remove(os.path.join(t, "results.jsonl"))
        _expect_error(t, "results.jsonl", "missing")
        os.remove(os.path.join(t, "figures.json"))
        _expect_error(t, "figures.json", "missing")
    _expect_error(os.path.join(d, "no-such-dir"), "no-such-dir")


def test_error_unknown_kind(d):
    t = _with_spec({"name": "f", "kind": "grouped-bar", "x": "cluster", "y": "tokens_per_s"})
    try:
        _expect_error(t, "figures.json", '"kind"', "grouped-bar", 'did you mean "grouped_bar"')
    finally:
        shutil.rmtree(t)


def test_error_unknown_columns(d):
    cases = [({"x": "clustr"}, ['"x"', '"clustr"', 'did you mean "cluster"', "results.jsonl"]),
             ({"y": "tokens_per_sec"}, ['"y"', 'did you mean "tokens_per_s"']),
             ({"group": "planer"}, ['"group"', 'did you mean "planner"']),
             ({"filter": {"modle": "llama2-7b"}}, ['"filter"', 'did you mean "model"']),
             ({"filter": {"model": "llama2-7x"}}, ['"filter"', "llama2-7x", 'did you mean "llama2-7b"'])]
    for change, needles in cases:
        t = _with_spec(dict({"name": "f", "kind": "grouped_bar", "x": "cluster", "y": "tokens_per_s"}, **change))
        try:
            _expect_error(t, "figures.json", 'figure "f"', *needles)
        finally:
            shutil.rmtree(t)
    t = _with_spec({"name": "s", "kind": "stacked", "x": "cluster", "y_stack": ["time_compute_s", "time_pp"]})
    try:
        _expect_error(t, '"y_stack[1]"', 'did you mean "time_pp_s"')
    finally:
        shutil.rmtree(t)


def test_error_bad_inputs(d):
    t = _with_spec({"name": "t", "kind": "timeline", "timeline": "timelines/nope.json"})
    try:
        _expect_error(t, '"timeline"', "nope.json")
        _expect_error(t, "--only", '"throughput"', args=("--only", "throughput"))
        with open(os.path.join(t, "results.jsonl"), "a") as f:
            f.write("{not json\n")
        with open(os.path.join(t, "figures.json"), "w") as f:
            json.dump({"figures": [{"name": "g", "kind": "bar", "x": "cluster", "y": "tokens_per_s"}]}, f)
        _expect_error(t, "results.jsonl:", "invalid JSON")
        build(t, rows=[{"status": "ok", "inputs": {"cluster": "c"}, "metrics": {"tokens_per_s": "fast"}}])
        with open(os.path.join(t, "figures.json"), "w") as f:
            json.dump({"figures": [{"name": "g", "kind": "bar", "x": "cluster", "y": "tokens_per_s"}]}, f)
        _expect_error(t, "results.jsonl:1", '"tokens_per_s"', "not a number")
    finally:
        shutil.rmtree(t)


def test_oom_marked_failed(d):
    """hetsim run marks OOM points status "failed" but keeps their metrics: they are OOM values, not ×."""
    rows = [{"status": "failed", "reason": "out of memory: GPU 3", "inputs": {"cluster": "a", "planner": "fsdp"},
             "metrics": {"tokens_per_s": 50.0, "any_oom": True}},
            {"status": "failed", "reason": "no feasible plan", "inputs": {"cluster": "a", "planner": "alpa"}},
            {"status": "ok", "inputs": {"cluster": "a", "planner": "amp"}, "metrics": {"tokens_per_s": 70.0}}]
    t = figures.aggregate([figures.Row(r) for r in rows], "cluster", "planner", ["tokens_per_s"])
    c = t.cell("a", "fsdp")
    assert c.oom and c.failed == 0 and c.mean("tokens_per_s") == 50.0, (c.oom, c.failed)
    assert t.cell("a", "alpa").all_failed and not t.cell("a", "amp").oom


def test_empty_timeline_is_skipped(d):
    with tempfile.TemporaryDirectory() as t:
        build(t, specs=[{"name": "t", "kind": "timeline", "timeline": ""},
                        {"name": "b", "kind": "bar", "x": "cluster", "y": "mfu"}])
        r = run_tool(t)
        assert r.returncode == 0, r.stderr
        assert "skipped" in r.stderr and sorted(os.listdir(os.path.join(t, "figures"))) == ["b.pdf", "b.png"]


def test_all_failed_rows(d):
    """Every point failed: no row has metrics, yet the figure is drawn (× marks only)."""
    rows = [{"status": "failed", "reason": "no feasible plan",
             "inputs": {"cluster": c, "planner": "alpa", "planner_label": "Alpa"}} for c in ("a", "b")]
    with tempfile.TemporaryDirectory() as t:
        build(t, specs=[{"name": "f", "kind": "grouped_bar", "x": "cluster", "y": "tokens_per_s"},
                        {"name": "g", "kind": "line", "x": "cluster", "y": "mfu"}], rows=rows)
        r = run_tool(t)
        assert r.returncode == 0, r.stderr
        assert os.path.getsize(os.path.join(t, "figures", "f.png")) > 1000


def test_timeline_command_line(d):
    out = os.path.join(d, "timeline-cli.png")
    r = subprocess.run([sys.executable, TIMELINE, os.path.join(d, "timelines", "point-0.json"), out, "--title", "t"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and os.path.getsize(out) > 1000, r.stderr


# --- replay.py ---------------------------------------------------------------------------------------------


def run_replay(*args):
    return subprocess.run([sys.executable, REPLAY, *args], capture_output=True, text=True)


def test_replay_png_and_pdf(d):
    out = os.path.join(d, "replay-cli")
    os.makedirs(out, exist_ok=True)
    png = os.path.join(out, "replay.png")
    r = run_replay("-o", png, REPLAY_SAMPLE)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    assert r.stdout.strip() == f"replay figure: {png} (2 reports)", r.stdout
    assert os.path.getsize(png) > 20000, os.path.getsize(png)
    w, h, dpi = png_info(png)
    assert dpi is not None and abs(dpi - 150) < 1 and 900 < w < 1400 and 800 < h < 1600, (w, h, dpi)
    pdfs = []
    for name in ("a.pdf", "b.pdf"):
        pdf = os.path.join(out, name)
        r = run_replay("-o", pdf, "--title", "Two policies", REPLAY_SAMPLE)
        assert r.returncode == 0, r.stderr
        with open(pdf, "rb") as f:
            pdfs.append(f.read())
    assert pdfs[0][:5] == b"%PDF-" and len(pdfs[0]) > 5000, len(pdfs[0])
    assert pdfs[0] == pdfs[1], "the PDF differs between two runs (a date or random id in it?)"
    assert b"/FontFile2" in pdfs[0] and b"/Type3" not in pdfs[0], "fonts are not embedded as TrueType"
    assert b"/CreationDate" not in pdfs[0]


def test_replay_reads_the_sample():
    reports = replay.load_reports(REPLAY_SAMPLE)
    assert [r["policy"] for r in reports] == ["checkpoint-restart", "elastic"], [r["policy"] for r in reports]
    for rep in reports:
        ts, ys, marks = replay.progress(rep)
        assert ts[0] == 0.0 and close(ts[-1], rep["duration_s"]), (ts[0], ts[-1])
        assert all(a <= b for a, b in zip(ts, ts[1:])) and all(a <= b for a, b in zip(ys, ys[1:]))
        assert close(ys[-1], rep["tokens"], 1e-9), (ys[-1], rep["tokens"])  # every token kept, once
        assert len(marks) == rep["interruptions"], (rep["policy"], len(marks), rep["interruptions"])
        parts = replay.breakdown(rep)
        assert [p[0] for p in parts] == ["training", "checkpoint", "lost work", "detect", "replan", "wait",
                                         "restart", "recover"], [p[0] for p in parts]
        assert close(parts[0][4], rep["ettr"] * rep["duration_s"])
        assert close(sum(p[4] for p in parts), rep["duration_s"], 1e-6), sum(p[4] for p in parts)
    # the elastic run grows back 27 times ("capacity added"): a restart, but no interruption
    assert len(replay.progress(reports[1])[2]) == 30
    assert replay.accounting_warnings(reports) == []
    short = dict(reports[0], downtime=[d for d in reports[0]["downtime"] if d["cause"] != "wait"])
    assert len(replay.accounting_warnings([short, reports[1]])) == 1
    # a single report object; 64-bit integers as strings
    with open(REPLAY_SAMPLE) as f:
        one = json.load(f)[1]
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(dict(one, duration_s=str(one["duration_s"])), f)
        f.flush()
        (rep,) = replay.load_reports(f.name)
        assert rep["duration_s"] == 2592000.0 and rep["policy"] == "elastic"


def test_replay_labels_and_units():
    a = {"policy": "elastic", "trace": "t1", "cluster": "c", "model": "m", "plan": "p", "seed": "1"}
    b = dict(a, trace="t2")
    c = dict(a, policy="checkpoint-restart")
    assert replay.row_labels([a, c]) == ["elastic", "checkpoint-restart"]
    assert replay.row_labels([a, b, c]) == ["elastic — t1", "elastic — t2", "checkpoint-restart"]
    assert replay.row_labels([a, dict(a, seed="2")]) == ["elastic (seed 1)", "elastic (seed 2)"]
    assert replay.default_title([a, c]) == "Replay: m on c — t1"
    assert replay.default_title([a, b, dict(a, trace="t3")]) == "Replay: m on c — 3 traces"
    assert replay.time_unit(2 * 86400) == (3600.0, "hours") and replay.time_unit(3 * 86400) == (86400.0, "days")
    assert replay.token_unit(2.4e11) == (1e9, "B") and replay.token_unit(3e12) == (1e12, "T")
    cols = replay.policy_colours([a, c, b])
    assert len(set(cols)) == 3 and cols[0] == replay.policy_colours([a])[0], cols  # elastic keeps its colour


def _write_reports(path, change):
    """testdata/replay-sample.json with change(reports) applied, written to path."""
    with open(REPLAY_SAMPLE) as f:
        reports = json.load(f)
    reports = change(reports)
    with open(path, "w") as f:
        if isinstance(reports, str):
            f.write(reports)
        else:
            json.dump(reports, f, indent=1)


def test_replay_malformed_inputs(d):
    def drop(i, *path):
        def change(reports):
            obj = reports[i]
            for k in path[:-1]:
                obj = obj[k]
            del obj[path[-1]]
            return reports
        return change

    cases = [
        ("invalid.json", lambda r: '[\n{"kind": "replay_report",\n "policy": }\n]\n',
         ["invalid.json:3:", "invalid JSON"]),
        ("kind.json", lambda r: [r[0], dict(r[1], kind="run_report")],
         ["kind.json", "report [1]", '"kind"', "run_report", "replay_report"]),
        ("nokind.json", lambda r: {"policy": "x"}, ["nokind.json", '"kind"']),
        ("ettr.json", drop(1, "ettr"), ["ettr.json", "report [1]", '"ettr"', "missing"]),
        ("segment.json", drop(0, "segments", 3, "phase"), ["segment.json", "report [0]", '"segments[3].phase"']),
        ("tokens.json", lambda r: [r[0], dict(r[1], tokens="many")], ["tokens.json", '"tokens"', "not a number"]),
        ("downtime.json", lambda r: [dict(r[0], downtime={"wait": 1})], ["downtime.json", '"downtime"', "list"]),
        ("empty.json", lambda r: [], ["empty.json", "empty"]),
    ]
    bad = os.path.join(d, "replay-bad")
    os.makedirs(bad, exist_ok=True)
    for name, change, needles in cases:
        path = os.path.join(bad, name)
        _write_reports(path, change)
        out = os.path.join(bad, name + ".png")
        r = run_replay("-o", out, REPLAY_SAMPLE, path)
        assert r.returncode == 2, f"{name}: exit {r.returncode}; stderr {r.stderr!r}"
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, f"{name}: {r.stderr!r}"
        for n in needles:
            assert n in r.stderr, f"{name}: {n!r} not in the message: {r.stderr!r}"
        assert not os.path.exists(out), f"{name}: {out} drawn despite the error"
        assert r.stdout == "", r.stdout
    r = run_replay("-o", os.path.join(bad, "x.png"), os.path.join(bad, "no-such-report.json"))
    assert r.returncode == 2 and "no-such-report.json" in r.stderr and "missing" in r.stderr, r.stderr
    r = run_replay("-o", os.path.join(bad, "x.svg"), REPLAY_SAMPLE)
    assert r.returncode == 2 and ".png or .pdf" in r.stderr, r.stderr


def test_replay_figure_kind(d):
    """A results directory with only a replay figure (no results.jsonl) is drawn; its errors name the field."""
    with tempfile.TemporaryDirectory() as t:
        spec = {"name": "rep", "kind": "replay", "title": "Policies on the Llama 3 trace",
                "replays": ["replays/point-0.json"]}
        build(t, specs=[spec])
        os.remove(os.path.join(t, "results.jsonl"))
        r = run_tool(t)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["rep", "(replay):", os.path.join(t, "figures", "rep.png"),
                                    os.path.join(t, "figures", "rep.pdf")], r.stdout
        for ext in ("png", "pdf"):
            assert os.path.getsize(os.path.join(t, "figures", f"rep.{ext}")) > 5000
        build(t, specs=[dict(spec, replays=[])])
        shutil.rmtree(os.path.join(t, "figures"), ignore_errors=True)
        r = run_tool(t)
        assert r.returncode == 0 and "rep: skipped" in r.stderr and '"replays" field is empty' in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(t, "figures", "rep.png")), "an empty replay figure was drawn"
        for change, needles in (
                ({"replays": ["replays/point-9.json"]}, ['"replays[0]"', "point-9.json", "does not exist"]),
                ({"replays": "replays/point-0.json"}, ['"replays"', "list"])):
            build(t, specs=[dict(spec, **change)])
            shutil.rmtree(os.path.join(t, "figures"), ignore_errors=True)
            _expect_error(t, "figures.json", *needles)
            assert not os.path.exists(os.path.join(t, "figures")), "drawn despite the error"
        build(t, specs=[dict(spec, replays=["replays/point-0.json", "replays/point-1.json"])])
        _write_reports(os.path.join(t, "replays", "point-1.json"), drop_ettr)
        _expect_error(t, "figures.json", '"replays[1]"', "point-1.json", "report [0]", '"ettr"')


def drop_ettr(reports):
    del reports[0]["ettr"]
    return reports


RESIDUALS = os.path.join(HERE, "residuals.py")
VALIDATION_HEADER = ("line,gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,half,measured_ms,"
                     "simulated_ms,error\n")


def test_residuals_both_modes(d):
    # Two `hetsim validate-sim -o` files over the same three runs (two calibrations): the default figure and the
    # per-run comparison, PNG and PDF each; mismatched labels are an error naming the counts.
    a, b = os.path.join(d, "val-a.csv"), os.path.join(d, "val-b.csv")
    rows = [(32, 1, 1, 32), (512, 8, 2, 32), (3072, 8, 64, 6)]
    for path, errors in ((a, (-0.02, -0.03, -0.2)), (b, (-0.13, -0.18, -0.23))):
        with open(path, "w") as f:
            f.write(VALIDATION_HEADER)
            for i, ((gpus, tp, pp, dp), e) in enumerate(zip(rows, errors)):
                half = "development" if i % 2 == 0 else "held_out"
                f.write(f"{i + 9},{gpus},512,1,2304,24,24,2048,{tp},{dp},{pp},{half},1000.0,{1000 * (1 + e):.4f},{e}\n")
    for args, out in (([a], "res.png"), ([a, os.path.join(d, "cmp.png"), "--per-run", "--compare", b, "--labels",
                                           "tuned,generic"], None)):
        cmd = [sys.executable, RESIDUALS] + (args + [os.path.join(d, out)] if out else args)
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        png = os.path.join(d, out or "cmp.png")
        for path in (png, png[:-4] + ".pdf"):
            assert os.path.getsize(path) > 1000, path
    bad = subprocess.run([sys.executable, RESIDUALS, a, os.path.join(d, "bad.png"), "--per-run", "--compare", b,
                          "--labels", "only-one"], capture_output=True, text=True)
    assert bad.returncode == 1 and "--labels: 1 labels for 2 files" in bad.stderr, bad.stderr


def main():
    keep = None
    if len(sys.argv) == 3 and sys.argv[1] == "--keep":
        keep = sys.argv[2]
    elif len(sys.argv) != 1:
        sys.exit(__doc__)
    d = keep or tempfile.mkdtemp(prefix="figures-selftest-")
    if keep:
        shutil.rmtree(d, ignore_errors=True)
    build(d)
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    try:
        for name, fn in tests:
            try:
                fn(d) if fn.__code__.co_argcount else fn()
                passed += 1
                print(f"PASS {name}")
            except Exception:  # noqa: BLE001 - report and go on
                failed += 1
                print(f"FAIL {name}\n" + "".join("    " + ln for ln in traceback.format_exc().splitlines(True)))
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)
    if keep:
        print(f"results and figures kept in {d}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
