#!/usr/bin/python3
"""Self-test of tools/convert_sailor_plans.py: the bundled GH200 OPT-350M set converts to exactly the bundled
plans, clusters and runs.csv; a small heterogeneous plan (RTX 3090 / RTX 2080 / Titan RTX nodes, replicas of one
stage on different GPU types) converts to the placement, TP degree and cluster derived by hand from Sailor's
bandwidth tables, and `hetsim validate` accepts what it writes; a stage list with a typo is taken by its ends
with a warning; missing bandwidth tables, unknown GPU types and stages that do not follow each other are refused
with the file named.

Usage: /usr/bin/python3 tools/test_convert_sailor_plans.py HETSIM   (exit status 0 when every test passes)
"""
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERT = os.path.join(ROOT, "tools", "convert_sailor_plans.py")
BUNDLED = os.path.join(ROOT, "experiments", "validation", "sailor_gh200_opt350")
HETSIM = None


def run(*args):
    return subprocess.run([sys.executable, CONVERT, *args], capture_output=True, text=True, check=False)


def plan(stages, mbs=2, gbs=64, n=None, zone="zone-a"):
    """A Sailor plan_config: stages = [(layers, [(gpu, tp) per replica])]."""
    dp = len(stages[0][1])
    return {"zone": zone, "pipeline_list": [{
        "num_stages": len(stages), "layers_per_stage": [layers for layers, _ in stages],
        "tmp_per_stage": [[[[[g, tp, zone]], tp] for g, tp in reps] for _, reps in stages],
        "dp": [dp] * len(stages)}],
        "mbs": mbs, "gbs": gbs, "real": 10.0, "red_grads": 1.0, "max_mem": 2**32,
        "N": n if n is not None else len(stages) * dp}


def providers(folder):
    # Sailor's table layout: [fit coefficients, bandwidth in bytes/s]; node-to-node per (GPU, count, zone, GPU).
    intra = {"RTX-3090": {"2": [[0, 0, 0], 49.77e9], "8": [[0, 0, 0], 5.33e9]},
             "RTX-2080": {"8": [[0, 0, 0], 24.55e9]}, "Titan-RTX": {"8": [[0, 0, 0], 24.3e9]}}
    inter = {"zone-a": {
        "RTX-3090": {"8": {"zone-a": {"RTX-3090": {"8": [[0, 0, 0], 115.7e6]}, "RTX-2080": {"8": [[0, 0, 0], 114e6]}}}},
        "RTX-2080": {"8": {"zone-a": {"RTX-2080": {"8": [[0, 0, 0], 2.857e9]}}}},
        "Titan-RTX": {"8": {"zone-a": {"Titan-RTX": {"8": [[0, 0, 0], 2.858e9]}}}}}}
    with open(os.path.join(folder, "intra_node_bandwidths.json"), "w") as f:
        json.dump(intra, f)
    with open(os.path.join(folder, "multizone_bandwidths_het.json"), "w") as f:
        json.dump(inter, f)


class Convert(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        os.makedirs(os.path.join(self.dir, "raw"))
        os.makedirs(os.path.join(self.dir, "prov"))
        providers(os.path.join(self.dir, "prov"))

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, content):
        with open(os.path.join(self.dir, "raw", f"plan_config_{name}.json"), "w") as f:
            json.dump(content, f)

    def test_the_bundled_set_converts_to_the_bundled_files(self):
        out = os.path.join(self.dir, "out")
        r = run(os.path.join(BUNDLED, "raw"), out)
        self.assertEqual(r.returncode, 0, r.stderr)
        for sub in ("plans", "clusters"):
            cmp = filecmp.dircmp(os.path.join(out, sub), os.path.join(BUNDLED, sub))
            self.assertEqual((cmp.left_only, cmp.right_only, cmp.diff_files), ([], [], []), sub)
        self.assertTrue(filecmp.cmp(os.path.join(out, "runs.csv"), os.path.join(BUNDLED, "runs.csv"), shallow=False))

    def test_a_heterogeneous_plan(self):
        # Stage 0: replica 0 on an RTX 3090 node, replica 1 on an RTX 2080 node; stage 1: Titan RTX, RTX 2080.
        # OPT-350M's 26 layers split 12 + 14; TP 8 everywhere; 64 sequences / (2 x DP 2) = 16 micro-batches.
        self.write("N4_D2", plan([(list(range(12)), [("RTX-3090", 8), ("RTX-2080", 8)]),
                                  (list(range(12, 26)), [("Titan-RTX", 8), ("RTX-2080", 8)])]))
        out = os.path.join(self.dir, "out")
        r = run(os.path.join(self.dir, "raw"), out, "--network", os.path.join(self.dir, "prov"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "plans", "n4-d2.yaml")) as f:
            text = f.read()
        # Devices by GPU type in Sailor's order (3090, 2080, Titan), 8 per node: the 3090 node 0-7, the two
        # 2080 nodes 8-15 and 16-23 (stage 0's replica first), the Titan node 24-31.
        self.assertIn("num_micro_batches: 16", text)
        self.assertIn("{devices: [0, 1, 2, 3, 4, 5, 6, 7], tp_degree: 8, layer_begin: 0, layer_end: 12}", text)
        self.assertIn("{devices: [24, 25, 26, 27, 28, 29, 30, 31], tp_degree: 8, layer_begin: 12, layer_end: 26}",
                      text)
        self.assertIn("{devices: [8, 9, 10, 11, 12, 13, 14, 15], tp_degree: 8, layer_begin: 0, layer_end: 12}", text)
        self.assertIn("{devices: [16, 17, 18, 19, 20, 21, 22, 23], tp_degree: 8, layer_begin: 12, layer_end: 26}",
                      text)
        self.assertIn("dtype: tf32", text)
        with open(os.path.join(out, "clusters", "sailor-n4-d2.yaml")) as f:
            cluster = f.read()
        # 0.93 Gb/s measured between 3090 nodes -> a 1 Gb/s NIC; 22.86 Gb/s between 2080 nodes -> 25 Gb/s; the
        # fabric at Sailor's 8-GPU intra-node rate of each type.
        self.assertIn("gpus: {type: rtx3090, count: 8}", cluster)
        self.assertIn("fabric: {kind: pcie, bandwidth_gbyte_s: 5.33}", cluster)
        self.assertIn("nic: {kind: ethernet, bandwidth_gbps: 1}", cluster)
        self.assertIn("name: rtx2080\n    count: 2", cluster)
        self.assertIn("fabric: {kind: pcie, bandwidth_gbyte_s: 24.55}", cluster)
        self.assertEqual(cluster.count("bandwidth_gbps: 25"), 2)
        with open(os.path.join(out, "runs.csv")) as f:
            rows = f.read().splitlines()
        self.assertEqual(rows[-1], "plans/n4-d2.yaml,4,2,2,8,2,64,10000.0,1000.0,4.0,plan_config_N4_D2.json")
        if HETSIM:
            v = subprocess.run([HETSIM, "validate", os.path.join(out, "plans", "n4-d2.yaml")], capture_output=True,
                               text=True, check=False)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_the_calibration_named_in_the_plans(self):
        # --calibration names the runs' calibration in every plan and in the runs CSV's header (the default,
        # megatron-deepspeed, is what the bundled set's files say).
        self.write("N2_D1", plan([(list(range(26)), [("RTX-2080", 8)])]))
        out = os.path.join(self.dir, "out")
        r = run(os.path.join(self.dir, "raw"), out, "--network", os.path.join(self.dir, "prov"),
                "--calibration", "sailor-mit")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "plans", "n2-d1.yaml")) as f:
            self.assertIn("calibration: sailor-mit  # the runs' software stack and machines", f.read())
        with open(os.path.join(out, "runs.csv")) as f:
            self.assertIn("software stack's calibration (sailor-mit)", f.read())
        if HETSIM:
            v = subprocess.run([HETSIM, "validate", os.path.join(out, "plans", "n2-d1.yaml")], capture_output=True,
                               text=True, check=False)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_a_typo_in_a_stage_list_is_taken_by_its_ends(self):
        self.write("N2_D1", plan([(list(range(13)), [("GH-96", 4)]),
                                  ([13, 14, 15, 61, 17] + list(range(18, 26)), [("GH-96", 4)])]))
        out = os.path.join(self.dir, "out")
        r = run(os.path.join(self.dir, "raw"), out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("stage 1 lists layers", r.stderr)
        with open(os.path.join(out, "plans", "n2-d1.yaml")) as f:
            self.assertIn("layer_begin: 13, layer_end: 26}", f.read())

    def test_bad_inputs_are_refused_with_the_file(self):
        cases = [
            ("N2_D1", plan([(list(range(13)), [("RTX-3090", 8)]), (list(range(13, 26)), [("RTX-3090", 8)])]),
             [], "need Sailor's measured bandwidths: give --network"),
            ("N2_D1", plan([(list(range(13)), [("H100-80", 8)]), (list(range(13, 26)), [("GH-96", 4)])]),
             [], "GPU type 'H100-80' is not one of"),
            ("N2_D1", plan([(list(range(13)), [("GH-96", 4)]), (list(range(14, 26)), [("GH-96", 4)])]),
             [], "stage 1 starts at layer 14, not 13"),
            ("N2_D1", plan([(list(range(13)), [("RTX-3090", 4)]), (list(range(13, 26)), [("RTX-3090", 4)])]),
             ["--network", "prov"], "no RTX-3090 entry for 4 GPUs"),
        ]
        for name, content, extra, message in cases:
            for f in os.listdir(os.path.join(self.dir, "raw")):
                os.remove(os.path.join(self.dir, "raw", f))
            self.write(name, content)
            extra = [os.path.join(self.dir, e) if e == "prov" else e for e in extra]
            r = run(os.path.join(self.dir, "raw"), os.path.join(self.dir, "out"), *extra)
            self.assertNotEqual(r.returncode, 0, message)
            self.assertIn(message, r.stderr)
            self.assertIn("plan_config_N2_D1.json", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        HETSIM = sys.argv.pop(1)
    unittest.main()
