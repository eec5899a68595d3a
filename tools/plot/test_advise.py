#!/usr/bin/python3
"""Self-test of tools/plot/advise.py (the Pareto figure of `hetsim advise`): draws testdata/advise (12
configurations: a Pareto front of 3, one recommended, 2 pruned, 2 failed, one that never finishes, a deadline
and a budget) as PNG and PDF, checks the counts it reports against the hand-derived ones, draws crowded (200
points, log axes), tiny and degenerate folders, and checks each malformed-input message.

Usage: /usr/bin/python3 tools/plot/test_advise.py [--keep DIR] [unittest options]   (--keep: write the figures
into DIR and leave them there, to look at). Exit status 0 when every test passes.
"""
import csv
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ADVISE = os.path.join(HERE, "advise.py")
SAMPLE = os.path.join(HERE, "testdata", "advise")
sys.path.insert(0, HERE)
import advise  # noqa: E402
from test_figures import png_info  # noqa: E402  (one PNG reader for both self-tests)

KEEP = None  # --keep DIR


def run_tool(*args):
    return subprocess.run([sys.executable, ADVISE, *args], capture_output=True, text=True)


def read_sample():
    """(header, rows as lists of strings, advice dict) of testdata/advise."""
    with open(os.path.join(SAMPLE, advise.CSV_NAME), newline="") as f:
        table = list(csv.reader(f))
    with open(os.path.join(SAMPLE, advise.ADVICE_NAME)) as f:
        return table[0], table[1:], json.load(f)


def write_folder(d, header, rows, adv):
    """An advise OUT folder d with configurations.csv (header, rows) and advice.json (adv; None: none)."""
    os.makedirs(d, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    with open(os.path.join(d, advise.CSV_NAME), "w", newline="") as f:
        f.write(buf.getvalue())
    if adv is not None:
        with open(os.path.join(d, advise.ADVICE_NAME), "w") as f:
            json.dump(adv, f, indent=1)


def synthetic(n, seed=7):
    """n configurations spread over more than a decade in time and cost (log axes), 5 policies × 4 planners,
    the Pareto front and feasibility computed here, the cheapest feasible one recommended; one in nine is
    pruned, one in thirteen failed."""
    rnd = random.Random(seed)
    header = [c for c, _ in advise.COLUMNS]
    policies = ["checkpoint-restart", "elastic", "hot-spares", "in-memory", "varuna"]
    planners = ["hetu", "megatron", "metis", "my-planner"]
    deadline, budget = 60.0, 900000.0
    pts = []
    for i in range(n):
        gpus = rnd.choice([16, 32, 64, 128, 256])
        t = 2000.0 / gpus * rnd.uniform(0.6, 2.5)
        c = t * gpus * 24 * rnd.uniform(1.5, 4.0)
        status = "pruned" if i % 9 == 4 else "failed" if i % 13 == 6 else "ok"
        pts.append((i, gpus, t, c, status, policies[i % 5], planners[(i // 5) % 4]))
    ok = [p for p in pts if p[4] == "ok"]
    front = {p[0] for p in ok if not any(q[2] <= p[2] and q[3] <= p[3] and (q[2], q[3]) != (p[2], p[3])
                                         for q in ok)}
    feasible = {p[0] for p in ok if p[2] <= deadline and p[3] <= budget}
    rec = min(feasible, key=lambda i: pts[i][3]) if feasible else None
    # a pruned configuration's bounds: dominated by a point of the front, as `hetsim advise` prunes
    front_pts = sorted((pts[i][2], pts[i][3]) for i in front)
    bounds = {p[0]: (lambda f: (f[0] * rnd.uniform(1.05, 3.0), f[1] * rnd.uniform(1.05, 3.0)))(rnd.choice(front_pts))
              for p in pts if p[4] == "pruned"}
    rows = []
    for i, gpus, t, c, status, policy, planner in pts:
        comp = f"{gpus // 8}x8 h100" if i % 2 else f"{gpus // 16}x8 h100 + {gpus // 16}x8 a100-80gb spot"
        label = f"{comp} | {planner} | {policy} | young-daly"
        vals = [f"{v:.6g}" for v in (t, t * 0.93, t * 1.1, c, c * 0.95, c * 1.08)] if status == "ok" else [""] * 6
        lb = [f"{v:.6g}" for v in bounds[i]] if status == "pruned" else \
            [f"{t * 0.8:.6g}", f"{c * 0.8:.6g}"] if status == "ok" else ["", ""]
        rows.append([str(i), label, comp, str(gpus), planner, policy, "young-daly", "", "3" if status == "ok" else "0",
                     status, "no plan fits: out of memory" if status == "failed" else ""] + vals + lb +
                    (["0.8", "0.85"] if status == "ok" else ["", ""]) +
                    [str(int(i in front)), str(int(i in feasible)), str(int(i == rec))])
    adv = {"name": f"Synthetic: {n} configurations", "model": "llama3-8b", "tokens": 1e12, "objective": "cheapest",
           "deadline_days": deadline, "budget_usd": budget, "recommended": rec,
           "summary": "A synthetic sweep for the self-test.", "caption": "tools/plot/test_advise.py"}
    return header, rows, adv, len(front)


class Sample(unittest.TestCase):
    """testdata/advise, drawn and counted."""

    def setUp(self):
        self.tmp = KEEP or tempfile.mkdtemp(prefix="advise-test-")

    def tearDown(self):
        if not KEEP:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def test_png(self):
        png = os.path.join(self.tmp, "sample.png")
        r = run_tool(SAMPLE, "-o", png)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), f"advise figure: {png} (12 configurations, 3 on the Pareto front)")
        self.assertEqual(r.stderr, "")
        self.assertGreater(os.path.getsize(png), 30000)
        w, h, dpi = png_info(png)
        self.assertTrue(dpi is not None and abs(dpi - 150) < 1, dpi)
        self.assertTrue(900 < w < 1400 and 700 < h < 1400, (w, h))
        self.assertEqual([f for f in os.listdir(os.path.dirname(png)) if ".tmp" in f], [])  # no temporary left

    def test_default_output(self):
        d = os.path.join(self.tmp, "out-folder")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(SAMPLE, d)
        r = run_tool(d)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = os.path.join(d, "pareto.png")
        self.assertEqual(r.stdout.strip(), f"advise figure: {out} (12 configurations, 3 on the Pareto front)")
        self.assertGreater(os.path.getsize(out), 30000)

    def test_pdf_is_deterministic(self):
        pdfs = []
        for name in ("a.pdf", "b.pdf"):
            path = os.path.join(self.tmp, name)
            r = run_tool(SAMPLE, "-o", path)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(path, "rb") as f:
                pdfs.append(f.read())
        self.assertEqual(pdfs[0][:5], b"%PDF-")
        self.assertGreater(len(pdfs[0]), 5000)
        self.assertTrue(pdfs[0] == pdfs[1], "the PDF differs between two runs (a date or random id in it?)")
        self.assertIn(b"/FontFile2", pdfs[0])  # TrueType embedded
        self.assertNotIn(b"/Type3", pdfs[0])
        self.assertNotIn(b"/CreationDate", pdfs[0])

    def test_counts(self):
        rows, adv = advise.load(SAMPLE)
        # Hand-derived from the sample: configs 0-6 finish (7 points); 0, 1, 2 are the front; only 1 and 3 meet
        # 30 days and $200k; 7 never finishes; 8, 9 pruned; 10, 11 failed.
        self.assertEqual(advise.counts(rows), {"configurations": 12, "drawn": 7, "pareto": 3, "infeasible": 5,
                                               "pruned": 2, "pruned_drawn": 2, "failed": 2, "never_finishes": 1})
        cap = advise.caption(rows, adv)
        for needle in ("12 configurations: 7 drawn (3 on the Pareto front, 5 miss the deadline or budget)",
                       "2 pruned by their lower bounds", "1 never finishes (infinite time, not drawn)",
                       "2 failed: no plan fits / simulation error.", adv["summary"], adv["caption"]):
            self.assertIn(needle, cap)
        out = os.path.join(self.tmp, "counts.png")
        self.assertEqual(advise.draw(rows, adv, out), advise.counts(rows))

    def test_sample_is_consistent(self):
        """The sample's flags agree with its numbers: the front, feasibility and the recommendation are what the
        definitions give (so the figure's front is a real one)."""
        rows, adv = advise.load(SAMPLE)
        ok = [r for r in rows if r["status"] == "ok" and math.isfinite(r["time_days_mean"])]
        for r in ok:
            # dominated: another is no worse in both and better in one (sim/advise/advise.cc ParetoFront)
            dominated = any(q["time_days_mean"] <= r["time_days_mean"] and q["cost_usd_mean"] <= r["cost_usd_mean"]
                            and (q["time_days_mean"], q["cost_usd_mean"]) != (r["time_days_mean"], r["cost_usd_mean"])
                            for q in ok)
            self.assertEqual(r["pareto"], not dominated, r["config"])
            self.assertEqual(r["feasible"], r["time_days_mean"] <= adv["deadline_days"] and
                             r["cost_usd_mean"] <= adv["budget_usd"], r["config"])
        feasible = [r for r in ok if r["feasible"]]
        self.assertEqual(min(feasible, key=lambda r: r["cost_usd_mean"])["config"], adv["recommended"])
        front = [r for r in ok if r["pareto"]]
        for p in (r for r in rows if r["status"] == "pruned"):  # "bound dominated": by a front point
            self.assertTrue(any(f["time_days_mean"] <= p["time_lb_days"] and f["cost_usd_mean"] <= p["cost_lb_usd"]
                                for f in front), p["config"])

    def test_parsed_values(self):
        rows, adv = advise.load(SAMPLE)
        by = {r["config"]: r for r in rows}
        self.assertEqual(len(by), 12)
        self.assertTrue(math.isinf(by[7]["time_days_mean"]) and by[7]["time_days_min"] == 52.5)
        self.assertEqual(by[9]["reason"], "bounds dominated by configs 1, 2")  # quoted, with a comma
        self.assertIsNone(by[0]["spares"])
        self.assertEqual(by[3]["spares"], 1)
        self.assertIsNone(by[10]["time_lb_days"])
        self.assertEqual(by[1]["checkpoint_interval"], "young-daly")
        self.assertEqual(by[2]["checkpoint_interval"], "3600")
        self.assertTrue(by[1]["recommended"] and not any(r["recommended"] for r in rows if r["config"] != 1))
        self.assertEqual((adv["recommended"], adv["deadline_days"], adv["budget_usd"], adv["objective"]),
                         (1, 30.0, 200000.0, "cheapest"))


class Helpers(unittest.TestCase):
    def test_usd(self):
        self.assertEqual([advise.usd(v) for v in (850, 12000, 12500, 200000, 1.2e6, 999999, 3.4e9)],
                         ["$850", "$12k", "$12.5k", "$200k", "$1.2M", "$1M", "$3.4B"])

    def test_log_scale(self):
        self.assertTrue(advise._use_log([1.0, 10.5, float("inf"), None]))
        self.assertFalse(advise._use_log([1.0, 10.0, float("inf")]))  # exactly 10x: linear
        self.assertFalse(advise._use_log([0.0, 100.0]))  # a zero cannot go on a log axis
        self.assertFalse(advise._use_log([]))

    def test_limit_in_view(self):
        self.assertFalse(advise.limit_in_view(900e3, [100e3, 220e3]))  # 800k above the lowest > 2.5 x 120k
        self.assertTrue(advise.limit_in_view(200e3, [100e3, 220e3]))
        self.assertTrue(advise.limit_in_view(50e3, [100e3, 220e3]))  # below every point: always shown
        self.assertTrue(advise.limit_in_view(60, [12, 47]))  # 48 <= 2.5 x 35
        self.assertFalse(advise.limit_in_view(365, [12, 47]))
        self.assertTrue(advise.limit_in_view(1000, [5, 400]))  # log: 2.3 decades <= 1.5 x 1.9
        self.assertTrue(advise.limit_in_view(30, [20]))  # one point: a span of a quarter of it
        self.assertFalse(advise.limit_in_view(None, [20]))

    def test_wrap_label(self):
        self.assertEqual(advise.wrap_label("2x8 h100 + 4x8 a100-80gb spot | hetu | elastic | young-daly"),
                         "2x8 h100 + 4x8 a100-80gb spot\nhetu · elastic · young-daly")
        self.assertEqual(advise.wrap_label("2x8 h100 + 4x8 a100-80gb spot + 2x8 l40s | hetu | elastic | 3600"),
                         "2x8 h100 + 4x8 a100-80gb spot\n+ 2x8 l40s\nhetu · elastic · 3600")
        self.assertEqual(advise.wrap_label("short"), "short")

    def test_planner_markers(self):
        m = advise._planner_markers(["autohet", "hetu", "megatron", "x", "y"])
        self.assertEqual(len(set(m.values())), 5)
        self.assertNotIn("*", m.values())  # autohet's usual star is the recommendation's here
        self.assertEqual(m["megatron"], "o")

    def test_failed_reasons(self):
        rows = [{"status": "failed", "reason": r} for r in ("no plan fits: 16 GPUs", "no plan fits: 8 GPUs",
                                                             "simulation error: stage 3, micro-batch 7", "")]
        self.assertEqual(advise._failed_reasons(rows), "no plan fits (2) / simulation error / no reason given")


class Shapes(unittest.TestCase):
    """Crowded, tiny and degenerate folders still draw."""

    def setUp(self):
        self.tmp = KEEP or tempfile.mkdtemp(prefix="advise-test-")

    def tearDown(self):
        if not KEEP:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def draw(self, name, header, rows, adv):
        d = os.path.join(self.tmp, name)
        write_folder(d, header, rows, adv)
        r = run_tool(d)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(os.path.getsize(os.path.join(d, "pareto.png")), 20000)
        return d, r.stdout

    def test_200_points_log_axes(self):
        header, rows, adv, front = synthetic(200)
        d, out = self.draw("many", header, rows, adv)
        self.assertIn(f"(200 configurations, {front} on the Pareto front)", out)
        rs, _ = advise.load(d)
        xs = [r["time_days_mean"] for r in rs if r["status"] == "ok"]
        self.assertTrue(advise._use_log(xs), "the synthetic times should span more than 10x")

    def test_five_points(self):
        header, rows, adv, front = synthetic(5, seed=3)
        _, out = self.draw("five", header, rows, adv)
        self.assertIn(f"(5 configurations, {front} on the Pareto front)", out)

    def test_no_limits_no_recommendation(self):
        header, rows, adv = read_sample()
        rec = header.index("recommended")
        rows = [r[:rec] + ["0"] + r[rec + 1:] for r in rows]
        adv = dict(adv, deadline_days=None, budget_usd=None, recommended=None, summary="")
        d, _ = self.draw("open", header, rows, adv)
        rs, a = advise.load(d)
        self.assertNotIn("miss", advise.caption(rs, a))

    def test_flag_warnings(self):
        """Flags that disagree with the numbers are drawn as written, with a warning naming the line."""
        header, rows, adv = read_sample()
        feas, par = header.index("feasible"), header.index("pareto")
        rows[0][feas] = "1"  # config 0: $262k, over the $200k budget
        rows[8][par] = "1"  # config 8 is pruned
        d = os.path.join(self.tmp, "flags")
        write_folder(d, header, rows, adv)
        r = run_tool(d)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 2, r.stderr)
        self.assertTrue(all(ln.startswith("advise.py: warning: ") for ln in lines), r.stderr)
        self.assertIn("configurations.csv:2: config 0: column \"feasible\" is 1", lines[0])  # in row order
        self.assertIn("configurations.csv:10: config 8: column \"pareto\" is 1", lines[1])
        self.assertIn("(12 configurations, 3 on the Pareto front)", r.stdout)  # the pruned row is not counted

    def test_nothing_finished(self):
        header, rows, adv = read_sample()
        st, rec = header.index("status"), header.index("recommended")
        rows = [r[:st] + ["failed" if r[st] == "ok" else r[st]] + r[st + 1:rec] + ["0"] for r in rows]
        d, out = self.draw("none", header, rows, dict(adv, recommended=None))
        self.assertIn("(12 configurations, 0 on the Pareto front)", out)
        self.assertEqual(advise.counts(advise.load(d)[0])["drawn"], 0)


class Malformed(unittest.TestCase):
    """Each malformed input: exit 2, one line naming the file and the column or field, nothing drawn."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="advise-bad-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def expect(self, name, change, *needles):
        """Writes the sample changed by change(header, rows, advice) -> (header, rows, advice), runs the tool and
        checks its error."""
        header, rows, adv = read_sample()
        header, rows, adv = change(header, rows, adv)
        d = os.path.join(self.tmp, name)
        write_folder(d, header, rows, adv)
        out = os.path.join(d, "pareto.png")
        r = run_tool(d, "-o", out)
        self.assertEqual(r.returncode, 2, f"{name}: exit {r.returncode}; stderr {r.stderr!r}")
        self.assertNotIn("Traceback", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("advise.py: error: "), r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr, f"{name}: {n!r} not in the message")
        self.assertFalse(os.path.exists(out), f"{name}: drawn despite the error")
        self.assertEqual(r.stdout, "")
        return r.stderr

    @staticmethod
    def set_cell(config, col, value):
        def change(header, rows, adv):
            i = header.index(col)
            return header, [r[:i] + [value] + r[i + 1:] if r[0] == str(config) else r for r in rows], adv
        return change

    def test_missing_column(self):
        def drop(header, rows, adv):
            i = header.index("cost_usd_mean")
            return header[:i] + header[i + 1:], [r[:i] + r[i + 1:] for r in rows], adv
        self.expect("column", drop, "configurations.csv", '"cost_usd_mean"', "missing")

    def test_misspelt_column(self):
        def rename(header, rows, adv):
            return [("time_day_mean" if h == "time_days_mean" else h) for h in header], rows, adv
        self.expect("spelling", rename, "configurations.csv", '"time_days_mean"', 'did you mean "time_day_mean"')

    def test_bad_float(self):
        # config 3 is the fifth line of the file (header, configs 0, 1, 2, 3)
        self.expect("float", self.set_cell(3, "time_days_mean", "12.x"), "configurations.csv:5",
                    '"time_days_mean"', "12.x", "not a number")
        self.expect("nan", self.set_cell(0, "cost_usd_max", "nan"), "configurations.csv:2", '"cost_usd_max"')
        self.expect("negative", self.set_cell(0, "cost_lb_usd", "-5"), '"cost_lb_usd"', "negative")

    def test_empty_mean_of_ok_row(self):
        self.expect("empty", self.set_cell(2, "cost_usd_mean", ""), "configurations.csv:4", '"cost_usd_mean"',
                    "empty", '"ok"')

    def test_bad_int_flag_status(self):
        self.expect("int", self.set_cell(4, "gpus", "32.5"), "configurations.csv:6", '"gpus"', "integer")
        self.expect("flag", self.set_cell(4, "pareto", "yes"), "configurations.csv:6", '"pareto"', "0 or 1")
        self.expect("status", self.set_cell(4, "status", "okay"), '"status"', "okay", 'did you mean "ok"')
        self.expect("dup", self.set_cell(4, "config", "3"), "configurations.csv:6", '"config"', "line 5")

    def test_short_row(self):
        self.expect("short", lambda h, rows, a: (h, rows[:3] + [rows[3][:-2]] + rows[4:], a),
                    "configurations.csv:5", "fields", "header")

    def test_unknown_recommended_id(self):
        self.expect("rec", lambda h, r, a: (h, r, dict(a, recommended=99)), "advice.json", '"recommended"', "99",
                    "configurations.csv")

    def test_recommended_disagrees(self):
        self.expect("rec2", lambda h, r, a: (h, r, dict(a, recommended=3)), "advice.json", '"recommended"',
                    "config 1")
        self.expect("rec3", self.set_cell(3, "recommended", "1"), "configurations.csv", '"recommended"',
                    "more than one")
        self.expect("rec4", lambda h, r, a: (h, r, dict(a, recommended=None)), "configurations.csv",
                    '"recommended"', "null")

    def test_recommended_not_drawable(self):
        def to_pruned(header, rows, adv):
            rec = header.index("recommended")
            rows = [r[:rec] + ["1" if r[0] == "8" else "0"] for r in rows]
            return header, rows, dict(adv, recommended=8)
        self.expect("rec5", to_pruned, "advice.json", '"recommended" = 8', '"pruned"')

    def test_missing_advice(self):
        self.expect("noadvice", lambda h, r, a: (h, r, None), "advice.json", "missing")

    def test_bad_advice_fields(self):
        self.expect("deadline", lambda h, r, a: (h, r, dict(a, deadline_days="soon")), "advice.json",
                    '"deadline_days"', "not a number")
        self.expect("noname", lambda h, r, a: (h, r, {k: v for k, v in a.items() if k != "name"}), "advice.json",
                    '"name"', "missing")
        self.expect("objective", lambda h, r, a: (h, r, dict(a, objective="fastest")), "advice.json",
                    '"objective"', "cheapest")

    def test_missing_csv_and_folder_and_invalid_json(self):
        d = os.path.join(self.tmp, "nocsv")
        write_folder(d, *read_sample())
        os.remove(os.path.join(d, advise.CSV_NAME))
        r = run_tool(d)
        self.assertEqual(r.returncode, 2)
        self.assertIn("configurations.csv: missing", r.stderr)
        r = run_tool(os.path.join(self.tmp, "no-such-folder"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-such-folder", r.stderr)
        d = os.path.join(self.tmp, "badjson")
        write_folder(d, *read_sample())
        with open(os.path.join(d, advise.ADVICE_NAME), "w") as f:
            f.write('{\n "name": "x",\n "model": }\n')
        r = run_tool(d)
        self.assertEqual(r.returncode, 2)
        self.assertIn("advice.json:3: invalid JSON", r.stderr)

    def test_bad_output_extension(self):
        r = run_tool(SAMPLE, "-o", os.path.join(self.tmp, "x.svg"))
        self.assertEqual(r.returncode, 2)
        self.assertIn(".png or .pdf", r.stderr)


if __name__ == "__main__":
    argv = sys.argv[:]
    if "--keep" in argv:
        i = argv.index("--keep")
        if i + 1 >= len(argv):
            sys.exit(__doc__)
        KEEP = os.path.abspath(argv[i + 1])
        os.makedirs(KEEP, exist_ok=True)
        del argv[i:i + 2]
    unittest.main(argv=argv, verbosity=2)
