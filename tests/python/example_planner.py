"""A planner written in Python (docs/python.md): pipelines whose layers follow each stage's speed.

Every (TP, DP) pair that divides the cluster is tried: the devices, in id order, form DP pipelines of equal
length, each stage a TP group of neighbouring devices; a stage gets layers in proportion to its GPUs' peak
TFLOPS (the heterogeneity-aware split of Metis and HexiScale, without their searches). The analytic estimate
picks the fastest plan that fits in memory.
"""

import hetsim


class ProportionalPipeline(hetsim.Planner):
    """Speed-proportional layer splits over every (TP, DP) that divides the cluster."""

    def make_plan(self, problem):
        n = len(problem.devices)
        batch = problem.training["global_batch_size"]
        best = None
        for tp in (1, 2, 4, 8):
            for dp in (1, 2, 4, 8):
                stages = n // (tp * dp) if n % (tp * dp) == 0 else 0
                if stages == 0 or stages > problem.model["num_layers"] or batch % dp:
                    continue
                plan = self.layout(problem, tp, dp, stages)
                try:
                    estimate = problem.estimate(plan)
                except hetsim.SpecError:  # e.g. TP does not divide the heads, or a TP group spans nodes
                    continue
                if not estimate["oom"] and (best is None or estimate["iteration_s"] < best[0]):
                    best = (estimate["iteration_s"], plan)
        return best[1] if best else None

    @staticmethod
    def layout(problem, tp, dp, stages):
        devices, layers = problem.devices, problem.model["num_layers"]
        pipelines = []
        for p in range(dp):
            groups = [devices[(p * stages + s) * tp:(p * stages + s + 1) * tp] for s in range(stages)]
            speed = [sum(d["peak_bf16_tflops"] for d in g) for g in groups]
            # Cumulative rounding: stage s ends at its share of the layers, every stage at least one layer.
            ends, total = [], sum(speed)
            for s in range(stages):
                end = round(layers * sum(speed[:s + 1]) / total)
                ends.append(min(max(end, (ends[-1] if ends else 0) + 1), layers - (stages - s - 1)))
            begins = [0] + ends[:-1]
            pipelines.append({
                "micro_batch_size": 1,
                "num_micro_batches": problem.training["global_batch_size"] // dp,
                "stages": [{"devices": [d["device"] for d in g], "tp_degree": tp, "layer_begin": b, "layer_end": e}
                           for g, b, e in zip(groups, begins, ends)],
            })
        return {"pipelines": pipelines}
