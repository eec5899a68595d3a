#!/usr/bin/env python3
"""Converts Megatron-Bridge's published MoE pre-training runs on DGX-H100 into hetsim plans and a runs file.

Usage: tools/convert_moe_runs.py SOURCE_CSV [OUT_DIR]
  SOURCE_CSV: the development set's table (columns source_file, container, section, system, model, gpus,
              precision, gbs, mbs, seq_len, fsdp, tp, pp, cp, vp, ep, ga, tokens_per_s_per_gpu,
              model_tflops_per_gpu, note), verbatim rows of NVIDIA-NeMo/Megatron-Bridge
              docs/performance-summary.md and docs/performance-summary-archive.md.
  OUT_DIR:    default experiments/validation/megatron_bridge_moe_h100

Writes OUT_DIR/raw/runs.csv (the source, unchanged), OUT_DIR/clusters/*.yaml, OUT_DIR/plans/*.yaml and
OUT_DIR/runs.csv in validate-sim's plan-file layout (measured iteration = gbs x seq_len / (tokens/s/GPU x GPUs)).

Every choice below and its source (Megatron-Bridge commits cited by their first hex digits; MB = Megatron-Bridge,
MLM = Megatron-LM core_v0.14.0):
- Rows: every DGX-H100 pre-training row of the four MoE models hetsim bundles. Nemotron 3 Nano's rows are left
  out: a hybrid Mamba-Transformer MoE, whose Mamba layers hetsim does not model. No other row is left out, the
  slow 25.11 and 26.02 dropless Qwen3-30B rows included.
- Layout: Megatron-Core's rank order tp-cp-dp-pp, so stage s holds global ranks [s*TP*DP, (s+1)*TP*DP) with TP
  innermost; every DP replica of a stage is listed in one pipeline's stage (intra-stage DP), which is how
  expert parallelism can fold EP groups over DP (and TP) ranks as MLM's parallel_state.py does: the expert
  rank order is tp-ep-dp-pp with expert TP 1 in every MB performance config, so an EP group is EP consecutive
  ranks of a stage.
- Settings common to the rows (MB perf configs and recipes): expert TP 1; sequence parallelism exactly when
  TP > 1; grouped GEMMs and permute fusion; distributed optimizer (zero_stage 1) with overlap_grad_reduce and
  overlap_param_gather (dp_overlap, param_gather_overlap) except DeepSeek-V3, whose H100 config turns
  overlap_grad_reduce off; the DDP bucket of Megatron-Core's default 40M parameters (80 MiB of bf16
  gradients; our reading of MLM's DistributedDataParallelConfig); no TP communication overlap on these rows.
- Routing: the dropless benchmarks force-balance the tokens among experts (MB's footnote, "In MoE training
  benchmarks, we force-balance the token distribution among experts"; MLM router.py's
  moe_router_force_load_balancing draws random router logits), so no moe_load_imbalance is set and the twin's
  default (uniform random routing) applies; the 25.09 "tokendrop" rows run with capacity factor 1.0 and
  padding (MB@fa0315a moe_token_drop.py), set as moe_capacity_factor: 1.
- All-to-all overlap with compute (comm.ep_overlap) where the row's config runs MLM's
  overlap_moe_expert_parallel_comm or DeepEP's A2A-1F1B: Qwen3-30B on 26.02/26.02.01 (PP2 VP12, DeepEP,
  MB@c4cc63b), Qwen3-235B on 25.11 and from 26.02 (MB@97ad8cc, MB@c0b9a00), DeepSeek-V3 on 25.09 (H100
  A2A_1F1B, MB@fa0315a run_script.py). The 25.11 Qwen3-30B row's VP24 matches the 25.09 config (no overlap),
  not the 25.11 preset's VP12, so it is converted without overlap.
- Dispatcher (comm.ep_dispatcher): node_dedup where the config runs DeepEP or HybridEP (Megatron-Core's flex
  dispatcher, whose normal kernels send a token once per destination node and forward it over NVLink):
  Qwen3-30B on 26.02/26.02.01 (DeepEP, MB@c4cc63b; its EP 8 stays inside a node, so nothing changes) and from
  26.04 (HybridEP, MB@c0b9a00 and HEAD), DeepSeek-V3 on 25.09 (DeepEP on H100, MB@fa0315a run_script.py);
  every other row runs the alltoall dispatcher (NCCL all-to-alls).
- Recomputation: none on the Qwen3 rows; GPT-OSS recomputes only its norms and the experts' activation
  (recompute_modules [layernorm, moe_act]) and DeepSeek-V3 its MLA up-projections and the dense MLPs
  ([mla_up_proj, mlp]): recompute: selective with those recompute_modules.
- Pipeline splits: Qwen3-235B counts the embedding and the loss as layers in the split (MB recipe
  account_for_embedding/loss_in_pipeline_split), 96 units over PP8 x VP4 = 3 each, so the first and last
  stage hold 11 blocks and the others 12; DeepSeek-V3's layout "Et|(tt|)*30mL" gives stage 0 7 blocks, stage
  7 6 blocks (and the MTP module, which the head layer carries) and the others 8; the rest split the blocks evenly.
- Precision: GPT-OSS rows are BF16; every other row trains as dtype fp8 with the recipe its config names. The
  Qwen3 rows (FP8 and FP8-CS) run Transformer Engine's per-tensor current scaling (fp8_recipe: current): the
  25.09/25.11 configs' perf matrix keys them `fp8_cs` (MB@fa0315a qwen3_30b_a3b_llm_pretrain.yaml,
  qwen3_235b_a22b_llm_pretrain.yaml), the 26.x configs are `..._FP8_CS_V1` / `..._fp8cs_config` (MB@c4cc63b,
  MB@HEAD perf_recipes/qwen/h100/qwen3_moe.py). DeepSeek-V3's two 25.09 rows (block-scaled FP8, and its 32x32
  variant with the same throughput) run the block-scaled recipe (fp8_recipe: blockwise; the table's footnote,
  performance-summary-archive.md L635: 128x128 weights, 1x128 activations).
- gpt-oss-120b on 25.11: the table's micro-batch 4 with gradient accumulation 2 does not multiply out to its
  global batch 512 on 64 GPUs at PP 4 (DP 16); the 25.11 config (MB@97ad8cc gpt_oss_workload_base_configs.py,
  BASE_GPT_OSS_120B_CONFIG) runs micro-batch 1, which is what the plan uses (32 micro-batches).
- Network: DGX-H100 nodes with eight 400 Gb/s InfiniBand NDR NICs (one per GPU) on one non-blocking switch, as
  tools/convert_nemo_runs.py writes them (the table names only the system).
"""
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validation_sets import open_set  # noqa: E402
import convert_nemo_runs  # noqa: E402  (the DGX-H100 cluster files, written alike)

GPUS_PER_NODE = 8
BUCKET_MIB = 80

MODELS = {  # table name -> (hetsim model, blocks)
    "Qwen3_30B_a3B": ("qwen3-30b-a3b", 48),
    "Qwen3_235B_a22B": ("qwen3-235b-a22b", 94),
    "GPT OSS 120B": ("gpt-oss-120b", 36),
    "DeepSeekV3": ("deepseek-v3", 61),
}
SKIPPED = {"Nemotron_3_Nano": "hybrid Mamba-Transformer MoE (Mamba layers are not modelled)"}
# (model, container) pairs whose config overlaps the EP all-to-alls with compute (see the docstring).
EP_OVERLAP = {("Qwen3_30B_a3B", "26.02"), ("Qwen3_30B_a3B", "26.02.01"), ("Qwen3_235B_a22B", "25.11"),
              ("Qwen3_235B_a22B", "26.02"), ("Qwen3_235B_a22B", "26.02.01"), ("Qwen3_235B_a22B", "26.04"),
              ("Qwen3_235B_a22B", "26.04.01"), ("Qwen3_235B_a22B", "26.06"), ("DeepSeekV3", "25.09")}
# (model, container) pairs that dispatch with DeepEP or HybridEP.
NODE_DEDUP = {("Qwen3_30B_a3B", c) for c in ("26.02", "26.02.01", "26.04", "26.04.01", "26.06")} | {
    ("DeepSeekV3", "25.09")}


def stage_blocks(model, blocks, pp):
    """Blocks per pipeline stage as the row's stack splits them."""
    if model == "Qwen3_235B_a22B" and pp == 8:
        return [11] + [12] * 6 + [11]
    if model == "DeepSeekV3" and pp == 8:
        return [7] + [8] * 6 + [6]
    if blocks % pp:
        raise ValueError(f"{blocks} blocks do not split evenly over PP {pp}")
    return [blocks // pp] * pp


def base_name(name):
    """The table's model name without its parenthesised variant, and whether the variant drops tokens."""
    base = name.split(" (")[0].strip()
    return base, "tokendrop" in name


def write_cluster(out, nodes):
    return convert_nemo_runs.write_cluster(out, nodes, "Megatron-Bridge's performance tables",
                                           "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md",
                                           "convert_moe_runs.py")


def convert_row(r, where, out, clusters):
    name = r["model"]
    base, tokendrop = base_name(name)
    model, blocks = MODELS[base]
    container = r["container"]
    gpus, gbs, mbs, seq = int(r["gpus"]), int(r["gbs"]), int(r["mbs"]), int(r["seq_len"])
    if base == "GPT OSS 120B" and container == "25.11":
        mbs = 1  # the config's micro-batch (see the docstring)
    tp, pp, cp, ep = int(r["tp"]), int(r["pp"]), int(r["cp"]), int(r["ep"])
    vp = 1 if r["vp"] in ("", "n/a") else int(r["vp"])
    if cp != 1:
        raise ValueError(f"{where}: CP {cp}: no converted row uses context parallelism")
    if gpus % (tp * pp) or gpus % GPUS_PER_NODE:
        raise ValueError(f"{where}: {gpus} GPUs do not split into TP {tp} x PP {pp} on 8-GPU nodes")
    dp = gpus // (tp * pp)
    if (tp * dp) % ep:
        raise ValueError(f"{where}: EP {ep} does not divide a stage's TP x DP = {tp * dp} ranks")
    if gbs % (mbs * dp):
        raise ValueError(f"{where}: global batch {gbs} is not a multiple of micro-batch {mbs} x DP {dp}")
    micro = gbs // (mbs * dp)
    if vp > 1 and micro % pp:
        raise ValueError(f"{where}: interleaved 1F1B needs the micro-batches ({micro}) to be a multiple of PP {pp}")
    precision = r["precision"]
    dtype = "bf16" if precision == "BF16" else "fp8"
    recipe = "" if dtype == "bf16" else (", fp8_recipe: blockwise" if base == "DeepSeekV3" else ", fp8_recipe: current")
    nodes = gpus // GPUS_PER_NODE
    cluster = write_cluster(out, nodes) if nodes not in clusters else f"dgx-h100-ndr-n{nodes}"
    clusters.add(nodes)
    overlap = (base, container) in EP_OVERLAP
    dedup = (base, container) in NODE_DEDUP
    deepseek = base == "DeepSeekV3"
    slug = (f"{model}{'-tokendrop' if tokendrop else ''}-{container}-g{gpus}-tp{tp}-pp{pp}-vp{vp}-ep{ep}-mb{mbs}"
            f"-gbs{gbs}{'-mx32' if 'MX' in precision else ''}")
    tokens_s = float(r["tokens_per_s_per_gpu"])
    measured_ms = gbs * seq / (tokens_s * gpus) * 1000
    modules = {"GPT OSS 120B": "layernorm, moe_act", "DeepSeekV3": "mla_up_proj, mlp"}.get(base)
    recompute = f"selective, recompute_modules: [{modules}]" if modules else "none"
    training = (f"{{global_batch_size: {gbs}, seq_len: {seq}, dtype: {dtype}{recipe}, optimizer: adam, recompute: {recompute}"
                + (", moe_capacity_factor: 1" if tokendrop else "") + "}")
    options = ([] if deepseek else ["dp_overlap: true", f"dp_bucket_mib: {BUCKET_MIB}", "param_gather_overlap: true"])
    options += (["ep_overlap: true"] if overlap else []) + (["ep_dispatcher: node_dedup"] if dedup else [])
    comm = "{" + ", ".join(options) + "}"
    counts = stage_blocks(base, blocks, pp)
    with open(os.path.join(out, "plans", slug + ".yaml"), "w") as f:
        f.write(f"# Megatron-Bridge {container} {name} pre-training on {gpus} H100 (DGX-H100), {precision}: TP {tp}, "
                f"PP {pp}, VP {vp}, EP {ep},\n# DP {dp}, micro-batch {mbs}, global batch {gbs} of {seq} tokens; "
                f"measured {r['tokens_per_s_per_gpu']} tokens/s/GPU ({measured_ms:.1f} ms per step),\n# "
                f"{r['model_tflops_per_gpu']} model TFLOP/s/GPU ({r['source_file']}). Written by "
                "tools/convert_moe_runs.py (its docstring says\n# every choice and its source).\n"
                "kind: plan\n"
                f"name: bridge-{slug}\n"
                f"cluster: ../clusters/{cluster}.yaml\n"
                f"model: {model}\n"
                f"training: {training}\n"
                + (f"schedule: interleaved_1f1b\nvirtual_stages: {vp}\n" if vp > 1 else "schedule: 1f1b\n") +
                "zero_stage: 1\n"
                + ("sequence_parallel: true\n" if tp > 1 else "") +
                f"comm: {comm}\n"
                "pipelines:\n"
                f"  - micro_batch_size: {mbs * dp}\n    num_micro_batches: {micro}\n    stages:\n")
        begin = 0
        for s in range(pp):
            end = begin + counts[s] + (1 if s == 0 else 0) + (1 if s == pp - 1 else 0)
            devices = ",".join(str(s * tp * dp + j) for j in range(tp * dp))
            extra = (f", tp_degree: {tp}" if tp > 1 else "") + f", ep_degree: {ep}, expert_tp_degree: 1"
            f.write(f"      - {{devices: [{devices}]{extra}, layer_begin: {begin}, layer_end: {end}}}\n")
            begin = end
    return [f"plans/{slug}.yaml", name, container, model, gpus, nodes, dp, pp, tp, vp, ep, mbs, micro, gbs, seq,
            precision, str(tokendrop).lower(), str(overlap).lower(), "node_dedup" if dedup else "alltoall",
            f"{measured_ms:.2f}", r["tokens_per_s_per_gpu"],
            r["model_tflops_per_gpu"]]


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    src = argv[1]
    out = argv[2] if len(argv) > 2 else "experiments/validation/megatron_bridge_moe_h100"
    comments, rows = open_set(src, out)
    clusters, runs, skipped, seen = set(), [], [], set()
    for i, r in enumerate(rows):
        where = f"{src}: row {i + 2}"
        base, _ = base_name(r["model"])
        if base in SKIPPED:
            skipped.append(f"{r['container']} {r['model']}")
            continue
        if base not in MODELS:
            sys.exit(f"{where}: model {r['model']!r} is neither converted ({sorted(MODELS)}) nor skipped")
        if r["system"] != "DGX-H100" or r["section"] != "Pre-Training":
            sys.exit(f"{where}: only DGX-H100 pre-training rows are converted")
        try:
            run = convert_row(r, where, out, clusters)
        except ValueError as e:
            sys.exit(str(e))
        if run[0] in seen:
            sys.exit(f"{where}: a second row with the same setup {run[0]}")
        seen.add(run[0])
        runs.append(run)
    with open(os.path.join(out, "runs.csv"), "w") as f:
        f.write(f"# Megatron-Bridge's {len(runs)} MoE pre-training runs on DGX-H100 (16-1,024 GPUs; Qwen3 30B-A3B and "
                "235B-A22B, gpt-oss-120b, DeepSeek-V3),\n# converted by tools/convert_moe_runs.py (choices and sources "
                "in its docstring); measured iteration = gbs x seq_len / (tokens/s/GPU x GPUs).\n"
                f"# Left out: {len(skipped)} Nemotron 3 Nano rows (hybrid Mamba-Transformer; Mamba is not modelled).\n"
                "# The development set of issue 58: validate-sim's development half may be fitted on, the held-out "
                "half is reported.\n")
        for c in comments:
            f.write("# " + c.lstrip("# ")[:400] + "\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["plan", "model", "container", "hetsim_model", "gpus", "nodes", "dp", "pp", "tp", "vp", "ep",
                    "micro_batch", "num_micro_batches", "global_batch", "seq_len", "precision", "tokendrop",
                    "ep_overlap", "ep_dispatcher", "iteration_ms", "tokens_per_s_per_gpu", "model_tflops_per_gpu"])
        # The smallest runs first (validate-sim reads them in order; the robustness fuzzer mutates the first rows).
        w.writerows(sorted(runs, key=lambda run: (run[4], run[13], run[0])))
    print(f"{len(runs)} runs ({len(skipped)} skipped), {len(clusters)} clusters -> {out}")


if __name__ == "__main__":
    main(sys.argv)
