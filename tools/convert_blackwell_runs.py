#!/usr/bin/env python3
"""Converts Megatron-Bridge's published dense Llama 3 pre-training runs on Blackwell (DGX-B200, DGX-GB200,
DGX-GB300) and, beside them for contrast, the same tables' DGX-H100 Llama rows into hetsim plans and a runs file.

Usage: tools/convert_blackwell_runs.py SOURCE_CSV [OUT_DIR]
  SOURCE_CSV: the table (columns source_file, container, line, section, system, model, gpus, precision, gbs,
              mbs, seq_len, fsdp, tp, pp, cp, vp, ep, ga, tokens_per_s_per_gpu, model_tflops_per_gpu, note), verbatim
              rows of NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (`line` is the row's line there).
  OUT_DIR:    default experiments/validation/megatron_bridge_blackwell

Writes OUT_DIR/raw/runs.csv (the source, unchanged), OUT_DIR/clusters/*.yaml, OUT_DIR/plans/*.yaml and
OUT_DIR/runs.csv in validate-sim's plan-file layout (measured iteration = gbs x seq_len / (tokens/s/GPU x GPUs)).
Nothing here is fitted: the runs are simulated by the one rule (`default`, no flags; docs/calibration.md).

Every choice below and its source. MB = NVIDIA-NeMo/Megatron-Bridge, cited by tag (first hex digits in brackets);
the configs are scripts/performance/configs/llama3/*.yaml (25.09) and scripts/performance/configs/{llama3,llama31,
llama}/*workload_base_configs.py with *_llm_pretrain.py (25.11 on), the recipes src/megatron/bridge/recipes/llama/
llama3.py, the helpers scripts/performance/utils/{helpers,overrides,precision}.py.
- Containers and code. MB docs/releases/software-versions.md: NeMo 25.09 ships MB 0.1.0rc3, 25.11 MB 0.2.0, 26.02
  MB 0.3.0, 26.04 MB 0.4.0, 26.06 MB 0.5.0; the patch containers are not listed, and we read 26.02.01 as v0.3.1
  [9c9dd84] and 26.04.01 as v0.4.2 [c810129] (the release branches' tags before each patch table; our inference).
  Tags: v0.1.0rc3 [bf71eba], v0.2.0 [7af9601], v0.3.0 [21b02e0], v0.4.0 [0fbfe7d], v0.5.0 [fcbb603]. Between
  v0.3.0 and v0.5.1 the Llama pre-training presets used by these rows do not change (git diff of the preset files:
  only SFT/LoRA, R100/VR200 and B300 aliases, CUDA-graph scopes), so the per-tag differences below are the only ones.
- Rows: every dense Llama pre-training row of the archive (LLAMA3_8B, LLAMA3_70B, LLAMA3.1_405B; containers
  25.09 to 26.06), on DGX-GB300, DGX-GB200, DGX-B200 and DGX-H100. The archive has no DGX-B300 Llama row (its B300
  rows are MoE models), so no B300 run is here; docs/performance-summary.md (26.08) has no Llama row. The SFT and
  LoRA rows are left out (fine-tuning, not pre-training). Where the table and the config of the row's tag
  disagree on batch or layout (the 25.11 70B rows' global batch 256 and the 405B rows on 256 GPUs match the v0.3.0
  "V2" presets, not v0.2.0's; 26.02.01's GB300 70B MXFP8 row is PP 4 without VP where every preset has VP 5), the
  table wins: it is what was measured. Rows the twin refuses are listed in LEFT_OUT with the reason.
- Precision (the table's column; 25.09 has none): FP8 and FP8-CS are Transformer Engine's per-tensor current
  scaling (MB utils/precision.py get_precision_config("fp8_cs"): bf16_with_fp8_current_scaling_mixed with
  first_last_layers_bf16 = False, so every block's linears run FP8) -> dtype fp8, fp8_recipe current; MXFP8 and
  FP8-MX -> fp8_recipe mxfp8 (bf16_with_mxfp8_mixed); NVFP4 -> fp8_recipe nvfp4 (bf16_with_nvfp4_mixed: fp4 e2m1,
  fp4_recipe nvfp4, no bf16 first/last layers for Llama, so every block's linears run NVFP4). 25.09: the first
  value is FP8-CS and the parenthesised one FP8-MX: the 25.09 config (MB v0.1.0rc3 llama3_70b_llm_pretrain.yaml,
  gb200 fp8_cs: Megatron-FSDP TP 1 PP 1 mbs 2; fp8_mx: TP 2 PP 4 VP 5) gives exactly the two layouts of the 70B row,
  llama31_405b_llm_pretrain.yaml the two of the 405B row, and 25.11 labels the same rows "FP8-CS (FP8-MX)".
- Micro-batch: the table's MBS, except where its GA column says otherwise: 25.09's GB200 70B row has one MBS cell
  (2) for both layouts, but its parenthesised GA 16 at DP 8 and global batch 128 means micro-batch 1, which is the
  fp8_mx config's mbs 1 (v0.1.0rc3); the converter takes gbs / (DP x GA) whenever the GA cell is given and
  disagrees, and says so in the plan's header.
- Layout: Megatron-Core's rank order tp-cp-dp-pp: stage s holds global ranks [s*TP*CP*DP, (s+1)*TP*CP*DP) with TP
  innermost, one pipeline per DP replica (as tools/convert_nemo_runs.py). Sequence parallelism exactly when TP > 1
  (MB utils/utils.py WorkloadBaseConfig.sequence_parallel = TP > 1). CP as the table's CP (cp_degree).
- Pipeline split: Llama 3.1 405B counts the embedding and the loss as layers (MB recipe llama31_405b_pretrain_config:
  account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split True), 128 units over the stages,
  so the first and last stage hold one block fewer ([15, 16 x 6, 15] at PP 8, [7, 8 x 14, 7] at PP 16); 8B and 70B
  split their blocks evenly with the embedding on the first and the head on the last stage. VP > 1: schedule
  interleaved_1f1b with virtual_stages VP. The GB200 405B rows at PP 16 and VP 8 (MXFP8 and NVFP4, 26.02 on) give
  Megatron-Core 128 chunks of one unit each, so the first chunk holds only the embedding and the last only the
  loss; hetsim needs a transformer block in every chunk (StageChunks), so they run at VP 4 (the first and last
  stage's 7 blocks allow at most 7; 4 divides the other stages' 8): the interleaved bubble, 15 / (VP x 384
  micro-batches) of a step, grows from 0.5% to 1.0%, and twice as many chunk boundaries are crossed per stage.
- Activation offload (OFFLOAD): every Megatron-FSDP row on GB200 and GB300 (70B FP8-CS, 25.09 to 26.04.01, 11
  rows; 405B FP8-CS on GB200 in 25.09) offloads the activations of its first 20-95 blocks to Grace's memory over
  NVLink-C2C (MB cpu_offloading_num_layers: 70B GB300 20, 70B GB200 40, 405B GB200 95): training.
  activation_offload_layers (docs/simulator.md "Activation offload"). Without it they would need 320 GiB (70B at
  micro-batch 2) and 273 GiB (405B) per GPU, more than a GB200 (186) or GB300 (288) has.
- Left out (LEFT_OUT; listed in runs.csv's header): 26.02.01's GB300 70B MXFP8 and NVFP4 rows: layouts no config
  of any tag has, which do not fit a GB300 (the table's cells are likely mistyped).
- Data parallelism: FSDP column 0 (or absent, 26.06) = Megatron-Core's distributed optimizer (zero_stage 1) with
  overlap_grad_reduce and overlap_param_gather (the recipes' DistributedDataParallelConfig in every tag) ->
  dp_overlap and param_gather_overlap; the DDP bucket of Megatron-Core's default, max(40M, 1M x DP) parameters
  (our reading of MLM distributed_data_parallel.py), 40M = 80 MiB of bf16 gradients on every row (DP x CP <= 16);
  grad_reduce_in_fp32 False in every perf config (set_llama3_common_configs), so gradients sync in bf16. FSDP > 0 =
  Megatron-FSDP with data_parallel_sharding_strategy optim_grads_params (MB set_megatron_fsdp_overrides), which
  shards weights, gradients and optimizer state over DP: zero_stage 3, lowered by units (one per layer; docs/
  lowering.md "ZeRO-3 and FSDP by units"), with dp_overlap. MB's fsdp_double_buffer and suggested_communication_
  unit_size (800M) are not modelled; nor is num_distributed_optimizer_instances = 2 (GB200 405B FSDP, MB v0.2.0 on).
- Parameter all-gather overlap turned off where the config turns it off: the 25.11 MXFP8 rows of the 70B and 405B
  configs ("keeping this enabled causes NaN grad norm", MB v0.2.0 llama3_llm_pretrain.py and llama31_llm_pretrain.py;
  the 8B functions do not), and GB200 405B NVFP4 from v0.4.2 (disable_param_gather_overlap for the "v2" variant,
  MB issue 3714: 26.04.01 and 26.06).
- TP communication overlap (comm.tp_overlap): on wherever TP > 1 except NVFP4 (the 70B and 405B recipes'
  CommOverlapConfig(tp_comm_overlap=True) with userbuffers configs; every *_llm_pretrain.py sets tp_comm_overlap
  False for nvfp4; the 8B functions set it to TP > 1, and every 8B row is TP 1).
- Recomputation: none on every row (the recipes set recompute_granularity None and no converted row's preset sets
  recompute_num_layers or recompute_modules), except the 25.11 H100 8B row, whose preset (MB v0.2.0
  LLAMA3_8B_H100_FP8_CS_BASE_CONFIG) recomputes 5 of the 32 blocks in full (recompute_method block): hetsim has no
  per-block policy, so it is converted without recomputation (about 5/32 of a forward more work is missing there).
- Not modelled and kept: CUDA graphs (8B rows, 70B NVFP4: host launch costs, which hetsim takes from the stack's
  calibration), the fused cross-entropy and RoPE kernels.
- Machines (the table names only the system):
  * DGX-GB200 and DGX-GB300: NVL72 racks, each one node of 72 GPUs on one NVLink Switch domain (900 GB/s per GPU
    each way), a NIC per GPU to the scale-out fabric: ConnectX-7 400 Gb/s InfiniBand for GB200 (NVIDIA DGX GB200
    user guide, as models/catalog/clusters/gb200-nvl72-pod-576.yaml), ConnectX-8 SuperNIC 800 Gb/s for GB300 (GB300
    NVL72 specifications, as gb300-nvl72-pod-576.yaml), NIC latency 2 us and a non-blocking switch of 1 us (the
    catalog files' assumptions). A run on fewer GPUs than its racks hold uses the first GPUs of ceil(GPUs/72) racks,
    filled in order: the 8- and 64-GPU runs one rack of which 8 or 64 GPUs train, the 128- and 256-GPU runs two and
    four racks (72+56, 72+72+72+40). Why a 72-GPU node partly used rather than a 64-GPU node: the rack is the
    machine (MB's GB200 configs run 4-GPU compute trays, num_gpus_per_node 4, all in one NVLink domain), its NVLink
    Switch bandwidth per GPU does not depend on how many GPUs a job takes, and a filled-in-order allocation is what a
    scheduler that packs trays does; the other choice would need a node size no rack has. Which trays a job got is
    not published: with another packing, groups that cross a rack boundary would differ.
  * DGX-B200: 8 B200 on NVSwitch, eight ConnectX-7 400 Gb/s InfiniBand NICs (one per GPU; NVIDIA DGX B200
    datasheet, as dgx-b200-superpod-1024.yaml), one non-blocking switch.
  * DGX-H100: as tools/convert_nemo_runs.py writes them (8 H100, eight 400 Gb/s NDR NICs, one switch).
- Check: each row's model TFLOP/s over its tokens/s must be the model's FLOPs per token by Megatron-Bridge's
  formula for Llama 3 (NeMo's flops_formulas.py llama3 with causal attention, forward and backward: L h^2 (12 +
  12 kv/heads + 18 ffn/h + 6 s/h) + 6 h V) within 1%; every row passes, which confirms the model shapes.
"""
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validation_sets import open_set  # noqa: E402
import convert_nemo_runs  # noqa: E402  (the DGX-H100 cluster files, written alike)

BUCKET_MIB = 80
RACK_GPUS = 72

MODELS = {  # table name -> (hetsim model, blocks, hidden, ffn, heads, kv heads)
    "LLAMA3_8B": ("llama3-8b", 32, 4096, 14336, 32, 8),
    "LLAMA3_70B": ("llama3-70b", 80, 8192, 28672, 64, 8),
    "LLAMA3.1_405B": ("llama3-405b", 126, 16384, 53248, 128, 8),
}
VOCAB = 128256
SYSTEMS = {  # table system -> (hetsim GPU, GPUs per node, NIC Gb/s, cluster prefix)
    "DGX-GB300": ("gb300", RACK_GPUS, 800, "gb300-nvl72"),
    "DGX-GB200": ("gb200", RACK_GPUS, 400, "gb200-nvl72"),
    "DGX-B200": ("b200", 8, 400, "dgx-b200"),
    "DGX-H100": ("h100", 8, 400, "dgx-h100-ndr"),
}
RECIPES = {"FP8": "current", "FP8-CS": "current", "MXFP8": "mxfp8", "FP8-MX": "mxfp8", "NVFP4": "nvfp4"}
TAGS = {"25.09": "v0.1.0rc3", "25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "v0.4.0",
        "26.04.01": "v0.4.2", "26.06": "v0.5.0"}
# (system, model) -> host-offloaded layers of the Megatron-FSDP configs (MB cpu_offloading_num_layers).
OFFLOAD = {("DGX-GB300", "LLAMA3_70B"): 20, ("DGX-GB200", "LLAMA3_70B"): 40, ("DGX-GB200", "LLAMA3.1_405B"): 95}
# Rows the twin cannot take as published (see the docstring): (container, system, model, precision) -> why.
LEFT_OUT = {
    ("26.02.01", "DGX-GB300", "LLAMA3_70B", "MXFP8"): "the table's TP 1, PP 4 without VP at micro-batch 2 matches no "
    "preset of any tag (every GB300 70B MXFP8 preset is PP 4 VP 5 at micro-batch 1) and needs 374 GiB of a GB300's 288 "
    "(hetsim validate)",
    ("26.02.01", "DGX-GB300", "LLAMA3_70B", "NVFP4"): "the table's TP 1, PP 1 without FSDP (a whole 70B replica per GPU: "
    "131 GiB of bf16 weights and as much gradient) matches no preset (GB300 70B NVFP4 is PP 4 VP 5) and cannot fit a "
    "GB300 (577 GiB of 288)",
}


def fsdp_of(r):
    return 0 if r["fsdp"] in ("", "n/a") else int(r["fsdp"])


def precision_of(r, where):
    """The row's precision; 25.09's table has none (see the docstring)."""
    if r["precision"]:
        return r["precision"]
    if r["container"] != "25.09":
        raise ValueError(f"{where}: no precision")
    return "FP8-MX" if r["note"].startswith("parenthesised") else "FP8-CS"


def flops_per_token(model, seq):
    """Model FLOPs per token by NeMo/Megatron-Bridge's llama3 formula with causal attention."""
    _, layers, h, ffn, heads, kv = MODELS[model]
    return layers * h * h * (12 + 12 * kv / heads + 18 * ffn / h + 6 * seq / h) + 6 * h * VOCAB


def stage_blocks(model, blocks, pp):
    """Blocks per pipeline stage as the row's stack splits them."""
    if model == "LLAMA3.1_405B" and pp > 1:
        units = blocks + 2  # the embedding and the loss count as layers
        if units % pp:
            raise ValueError(f"{units} units do not split evenly over PP {pp}")
        per = units // pp
        return [per - 1] + [per] * (pp - 2) + [per - 1]
    if blocks % pp:
        raise ValueError(f"{blocks} blocks do not split evenly over PP {pp}")
    return [blocks // pp] * pp


def write_cluster(out, system, nodes):
    gpu, per_node, nic, prefix = SYSTEMS[system]
    if system == "DGX-H100":
        return convert_nemo_runs.write_cluster(out, nodes, "Megatron-Bridge's performance tables",
                                               "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md",
                                               "convert_blackwell_runs.py")
    rack = per_node == RACK_GPUS
    name = f"{prefix}-{'r' if rack else 'n'}{nodes}"
    unit = "rack" if rack else "node"
    if rack:
        what = (f"{nodes} {gpu.upper()} NVL72 rack{'s' if nodes > 1 else ''}: each rack one node of 72 {gpu.upper()} "
                "GPUs on one NVLink Switch domain (900 GB/s per GPU each way)")
        nic_name = "ConnectX-8 SuperNIC" if nic == 800 else "ConnectX-7"
        src = ("NVIDIA GB300 NVL72 specifications: 72 Blackwell Ultra GPUs, 72 ConnectX-8 SuperNICs at 800 Gb/s"
               if gpu == "gb300" else "NVIDIA DGX GB200 user guide, compute tray networking: ConnectX-7 400 Gb/s "
               "InfiniBand, one per GPU")
    else:
        what = f"{nodes} DGX B200 node{'s' if nodes > 1 else ''}: 8 B200 on NVLink 5 / NVSwitch (900 GB/s per GPU each way)"
        nic_name = "ConnectX-7"
        src = "NVIDIA DGX B200 datasheet: 8 B200 GPUs, 8 single-port ConnectX-7 VPI at 400 Gb/s InfiniBand"
    with open(os.path.join(out, "clusters", name + ".yaml"), "w") as f:
        f.write(f"# {what},\n# one {nic} Gb/s {nic_name} InfiniBand NIC per GPU, one non-blocking switch (our choice: the "
                "table names only\n# the system; NIC and switch latencies as the catalog's clusters assume them). "
                f"Written by tools/convert_blackwell_runs.py.\n"
                "kind: cluster\n"
                f"name: {name}\n"
                f"description: \"{nodes} x {system} {unit}{'s' if nodes > 1 else ''} ({per_node} {gpu}), "
                f"{nic} Gb/s InfiniBand per GPU\"\n"
                "sources:\n"
                "  - \"NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md (System: " + system + ")\"\n"
                f"  - \"{src}\"\n"
                "nodes:\n"
                f"  - name: {'nvl72' if rack else 'dgx'}\n"
                f"    count: {nodes}\n"
                f"    gpus: {{type: {gpu}, count: {per_node}}}\n"
                "    fabric: {kind: nvswitch}\n"
                f"    nic: {{kind: infiniband, bandwidth_gbps: {nic}, attachment: per_gpu, latency_us: 2}}\n"
                + ("    host_memory_bandwidth_gbyte_s: 18432   # the rack's 36 Grace CPUs' LPDDR5X, 512 GB/s each\n"
                   if rack else "") +
                "network:\n"
                "  single_switch: {}\n"
                "  switch_latency_us: 1          # assumption, as the catalog's clusters\n")
    return name


def param_gather_overlap(r, precision):
    """Whether the row's config overlaps the parameter all-gathers with the next forward (see the docstring)."""
    if r["container"] == "25.11" and precision in ("FP8-MX", "MXFP8") and r["model"] != "LLAMA3_8B":
        return False
    if (r["system"] == "DGX-GB200" and r["model"] == "LLAMA3.1_405B" and precision == "NVFP4"
            and r["container"] in ("26.04.01", "26.06")):
        return False
    return True


def convert_row(r, where, out, clusters):
    name, system, container = r["model"], r["system"], r["container"]
    model, blocks = MODELS[name][0], MODELS[name][1]
    gpu, per_node = SYSTEMS[system][0], SYSTEMS[system][1]
    precision = precision_of(r, where)
    if precision not in RECIPES:
        raise ValueError(f"{where}: precision {precision!r} is not one of {sorted(RECIPES)}")
    gpus, gbs, mbs, seq = int(r["gpus"]), int(r["gbs"]), int(r["mbs"]), int(r["seq_len"])
    tp, pp, cp = int(r["tp"]), int(r["pp"]), int(r["cp"])
    vp = 1 if r["vp"] in ("", "n/a") else int(r["vp"])
    fsdp = fsdp_of(r)
    tokens_s, tflops = float(r["tokens_per_s_per_gpu"]), float(r["model_tflops_per_gpu"])
    predicted = tokens_s * flops_per_token(name, seq) / 1e12
    if abs(predicted - tflops) > 0.05 * tflops:
        raise ValueError(f"{where}: {name}'s shape gives {predicted:.0f} model TFLOP/s per GPU at {tokens_s:.0f} "
                         f"tokens/s by Megatron-Bridge's formula, the table says {tflops:.0f}")
    if gpus % (tp * cp * pp) or (per_node < RACK_GPUS and gpus % per_node) or per_node % tp:
        raise ValueError(f"{where}: {gpus} GPUs do not split into TP {tp} groups inside {per_node}-GPU nodes, "
                         f"CP {cp} and PP {pp}")
    dp = gpus // (tp * cp * pp)
    note = ""
    if r["ga"] not in ("", "n/a") and gbs != mbs * dp * int(r["ga"]):
        ga = int(r["ga"])
        if gbs % (dp * ga):
            raise ValueError(f"{where}: global batch {gbs} is neither MBS {mbs} nor any micro-batch x DP {dp} x GA {ga}")
        note = f" (the table's MBS {mbs} does not multiply out with its GA {ga}: micro-batch {gbs // (dp * ga)})"
        mbs = gbs // (dp * ga)
    if gbs % (mbs * dp):
        raise ValueError(f"{where}: global batch {gbs} is not a multiple of micro-batch {mbs} x DP {dp}")
    micro = gbs // (mbs * dp)
    if vp > 1 and micro % pp:
        raise ValueError(f"{where}: interleaved 1F1B needs the micro-batches ({micro}) to be a multiple of PP {pp}")
    counts = stage_blocks(name, blocks, pp)
    if vp > min(counts):
        # A chunk of only the embedding (or the loss) is legal in Megatron-Core, not in hetsim (StageChunks): the
        # largest VP that divides the middle stages' blocks and leaves every chunk a block (see the docstring).
        fit = max(v for v in range(1, min(counts) + 1) if counts[len(counts) // 2] % v == 0)
        note += f" (VP {vp} simulated as VP {fit}: hetsim needs a block in every model chunk)"
        vp = fit
    nodes = math.ceil(gpus / per_node)
    key = (system, nodes)
    cluster = write_cluster(out, system, nodes) if key not in clusters else clusters[key]
    clusters[key] = cluster
    recipe = RECIPES[precision]
    pgo = param_gather_overlap(r, precision) and fsdp == 0
    tp_overlap = tp > 1 and precision != "NVFP4"
    offload = OFFLOAD.get((system, name)) if fsdp else None
    slug = (f"{model}-{container}-{gpu}-g{gpus}-{precision.lower()}-{'fsdp-' if fsdp else ''}tp{tp}-pp{pp}-cp{cp}"
            f"-vp{vp}-mb{mbs}-gbs{gbs}")
    measured_ms = gbs * seq / (tokens_s * gpus) * 1000
    offloaded = f", activation_offload_layers: {offload}" if offload else ""
    training = (f"{{global_batch_size: {gbs}, seq_len: {seq}, dtype: fp8, fp8_recipe: {recipe}, optimizer: adam, "
                f"recompute: none{offloaded}}}")
    options = (["tp_overlap: true"] if tp_overlap else []) + ["dp_overlap: true"]
    if not fsdp:
        options += [f"dp_bucket_mib: {BUCKET_MIB}"] + (["param_gather_overlap: true"] if pgo else [])
    unmodelled = []
    if container == "25.11" and system == "DGX-H100" and name == "LLAMA3_8B":
        unmodelled.append("full recomputation of 5 of the 32 blocks (recompute_num_layers 5)")
    used = f"{gpus} of {nodes * per_node} GPUs" if nodes * per_node != gpus else f"{gpus} GPUs"
    with open(os.path.join(out, "plans", slug + ".yaml"), "w") as f:
        f.write(f"# Megatron-Bridge {container} (MB {TAGS[container]}) {name} pre-training on {system}, {used}, {precision}: "
                f"{'Megatron-FSDP, ' if fsdp else ''}TP {tp},\n# PP {pp}, CP {cp}, VP {vp}, DP {dp}, micro-batch {mbs}"
                f"{note}, global batch {gbs} of {seq} tokens;\n# measured {r['tokens_per_s_per_gpu']} tokens/s/GPU "
                f"({measured_ms:.1f} ms per step), {r['model_tflops_per_gpu']} model TFLOP/s/GPU ({r['source_file']} "
                f"line {r['line']}).\n"
                + (f"# Not modelled: {'; '.join(unmodelled)}.\n" if unmodelled else "") +
                "# Written by tools/convert_blackwell_runs.py (its docstring says every choice and its source).\n"
                "kind: plan\n"
                f"name: bridge-{slug}\n"
                f"cluster: ../clusters/{cluster}.yaml\n"
                f"model: {model}\n"
                f"training: {training}\n"
                + (f"schedule: interleaved_1f1b\nvirtual_stages: {vp}\n" if vp > 1 else "schedule: 1f1b\n") +
                f"zero_stage: {3 if fsdp else 1}\n"
                + ("sequence_parallel: true\n" if tp > 1 else "") +
                "comm: {" + ", ".join(options) + "}\n"
                "pipelines:\n")
        group = tp * cp
        bounds, begin = [], 0
        for s in range(pp):
            end = begin + counts[s] + (1 if s == 0 else 0) + (1 if s == pp - 1 else 0)
            bounds.append((begin, end))
            begin = end
        for d in range(dp):
            f.write(f"  - micro_batch_size: {mbs}\n    num_micro_batches: {micro}\n    stages:\n")
            for s in range(pp):
                base = group * (d + dp * s)
                devices = ",".join(str(base + j) for j in range(group))
                extra = (f", tp_degree: {tp}" if tp > 1 else "") + (f", cp_degree: {cp}" if cp > 1 else "")
                f.write(f"      - {{devices: [{devices}]{extra}, layer_begin: {bounds[s][0]}, layer_end: {bounds[s][1]}}}\n")
    return [f"plans/{slug}.yaml", system, name, container, model, gpu, precision, recipe, gpus, nodes, dp, pp, tp, cp,
            vp, int(r["vp"]) if r["vp"] not in ("", "n/a") else 1, "fsdp" if fsdp else "distopt", mbs, micro, gbs, seq, str(tp_overlap).lower(), str(pgo).lower(),
            offload or 0, f"{measured_ms:.2f}", r["tokens_per_s_per_gpu"], r["model_tflops_per_gpu"],
            f"{100 * (tflops / predicted - 1):+.1f}", r["line"]]


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    src = argv[1]
    out = argv[2] if len(argv) > 2 else "experiments/validation/megatron_bridge_blackwell"
    comments, rows = open_set(src, out)
    clusters, runs, left, seen = {}, [], [], set()
    for i, r in enumerate(rows):
        where = f"{src}: row {i + 2}"
        if r["model"] not in MODELS:
            sys.exit(f"{where}: model {r['model']!r} is not one of {sorted(MODELS)}")
        if r["system"] not in SYSTEMS or r["section"] != "Pre-Training":
            sys.exit(f"{where}: only pre-training rows on {sorted(SYSTEMS)} are converted")
        try:
            key = (r["container"], r["system"], r["model"], precision_of(r, where))
            why = LEFT_OUT.get(key)
            if why:
                left.append(f"{' '.join(key)} (line {r['line']}): {why}")
                continue
            run = convert_row(r, where, out, clusters)
        except ValueError as e:
            sys.exit(str(e))
        if run[0] in seen:
            sys.exit(f"{where}: a second row with the same setup {run[0]}")
        seen.add(run[0])
        runs.append(run)
    with open(os.path.join(out, "runs.csv"), "w") as f:
        f.write(f"# Megatron-Bridge's {len(runs)} dense Llama 3 pre-training runs (8B, 70B, 3.1 405B; containers 25.09-26.06) "
                "on DGX-GB300, DGX-GB200 (NVL72 racks),\n# DGX-B200 and, for contrast, DGX-H100, converted by "
                "tools/convert_blackwell_runs.py (choices and sources in its docstring);\n# measured iteration = gbs x "
                "seq_len / (tokens/s/GPU x GPUs). Nothing is fitted on them: simulated by the one rule (default).\n"
                f"# Left out: {len(left)} row(s) (tools/convert_blackwell_runs.py's docstring says why):\n"
                + "".join(f"#   {l}\n" for l in left) +
                "# Rows alternate between validate-sim's development (even) and held-out (odd) halves, in the order below.\n")
        for c in comments:
            f.write("# " + c.lstrip("# ")[:400] + "\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["plan", "system", "model", "container", "hetsim_model", "gpu", "precision", "fp8_recipe", "gpus",
                    "nodes", "dp", "pp", "tp", "cp", "vp", "vp_published", "data_parallel", "micro_batch", "num_micro_batches",
                    "global_batch", "seq_len", "tp_overlap", "param_gather_overlap", "offloaded_layers", "iteration_ms",
                    "tokens_per_s_per_gpu", "model_tflops_per_gpu", "tflops_vs_formula_pct", "source_line"])
        # The smallest runs first (validate-sim reads them in order; the robustness fuzzer mutates the first rows).
        w.writerows(sorted(runs, key=lambda run: (run[8], run[19], run[0])))
    print(f"{len(runs)} runs ({len(left)} left out), {len(clusters)} clusters -> {out}")


if __name__ == "__main__":
    main(sys.argv)
