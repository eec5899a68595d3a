#!/usr/bin/python3
"""Converts NVIDIA's NeMo 24.07 pre-training performance table (FP8 on DGX-H100) into hetsim plans, models,
clusters and a runs CSV for `hetsim validate-sim --runs`.

Usage: /usr/bin/python3 tools/convert_nemo_runs.py SOURCE_CSV [OUT_DIR]
  SOURCE_CSV  the table as rows (the project's copy of NVIDIA/NeMo docs/source/performance/
              performance_summary.md, "Pretraining": model, gpus, gbs, mbs, seq_len, tp, pp, cp, vp, precision,
              tokens_per_s_per_gpu, model_tflops_per_gpu); copied unchanged to OUT_DIR/raw/
  OUT_DIR     where raw/, models/, clusters/, plans/ and runs.csv go (default
              experiments/validation/nemo_2407_h100_fp8)

Sources (read at these versions):
  [T]  NVIDIA/NeMo docs/source/performance/performance_summary.md @ 070a0bb (the numbers came in with
       8e3d65d, "24.07 perf numbers", 2024-09-09): the table, NeMo 24.07 container, DGX-H100, FP8.
  [L]  NVIDIA/NeMo-Framework-Launcher tag 24.07 (8325688, 2024-08-01), launcher_scripts/conf/training/
       {gpt3/5b, gpt3/20b, gpt3/175b, llama/llama2_7b, llama/llama2_13b, llama/llama2_70b, llama/llama3_8b,
       llama/llama3_70b, nemotron/nemotron_8b, nemotron/nemotron_22b, nemotron/nemotron_340b}.yaml: the
       training configs of each model, and examples/training/{gpt,llama,nemotron}/h100/*_fp8*.sh: how they
       are run in FP8 (training=<config> with fp8=true, fp8_hybrid, optim.grad_sync_dtype=bf16 and the
       table's GPUs, batch and parallel sizes as overrides).
  [G]  NVIDIA/NeMo examples/nlp/language_modeling/conf/megatron_gpt_config.yaml @ r2.0.0rc1 (the NeMo 24.07
       line): the defaults the GPT3 configs leave unset (bias True, activation gelu, layernorm,
       learned_absolute positions, share_embeddings_and_output_weights True), and
       nemo/collections/nlp/models/language_modeling/megatron_base_model.py `_vocab_size_with_padding`.
  [N]  NVIDIA/NeMo @ 8cfedd7: nemo/collections/llm/gpt/model/nemotron.py (Nemotron3Config8B, Nemotron3Config22B,
       Nemotron4Config340B: the same shapes as [L]) and scripts/performance/llm/pretrain_nemotron{3_8b,3_22b,
       4_340b}.py (NVIDIA's own performance runs of these models: NullTokenizer, vocab_size=256000);
       nemo/utils/flops_formulas.py (the model-FLOP formulas behind the table's TFLOP/s column).

Decisions, each with its source:
- Measured iteration time: gbs·seq_len / (tokens_per_s_per_gpu · gpus), in ms ([T] gives only throughput).
- Models. Bundled where hetsim has them: llama2-7b, llama2-13b, llama2-70b, llama3-8b, llama3-70b (same
  shapes and vocabularies as [L]; 32,000 and 128,256 are already multiples of 128) and gpt3-175b (as [L]'s
  gpt3/175b: 96 layers, 12,288 wide, 96 heads, GELU, biases, learned positions, tied embeddings; its
  vocabulary is GPT-2's 50,257 where NeMo pads to 50,688 at TP 4, 0.003% of the FLOPs, kept as bundled).
  Written here (models/):
  * gpt3-5b-nemo, gpt3-20b-nemo: [L] gpt3/5b.yaml (24 layers, hidden 4,096, 32 heads, ffn 4h) and
    gpt3/20b.yaml (44 layers, 6,144, 48 heads, ffn 4h), sequence 2,048 (the 2023 scale_perf branch's
    5b/20b_fp8_performance.yaml have the same shapes); GPT-2 BPE (50,257) padded as NeMo pads it, to a
    multiple of make_vocab_size_divisible_by (128) × TP ([G]): 50,304 for the 5B (TP 1), 50,432 for the
    20B (TP 2; 0.25% more embedding rows than a plain multiple of 128). Biases, gelu, layernorm, learned
    positions, tied embeddings: [G]'s defaults, which these configs do not override.
  * nemotron3-8b, nemotron3-22b, nemotron4-340b: [L] nemotron_8b/22b/340b.yaml and [N]'s configs: 32 / 40 /
    96 layers, hidden 4,096 / 6,144 / 18,432, ffn 16,384 / 24,576 / 73,728, heads 32 / 48 / 96, kv heads
    32 / 48 / 8 (num_query_groups null / null / 8), squared ReLU, LayerNorm1p (zero-centred gamma; a
    LayerNorm with scale and bias), no linear biases, RoPE on half of each head (no parameters), untied
    embeddings; vocabulary 256,000 ([N]'s performance scripts; the 340B config's tokenizer is
    nemotron_2_256k; a multiple of 128 already). hetsim has no squared-ReLU MLP: `mlp: relu` is the closest
    kind (two matrices h -> ffn -> h, as squared ReLU has; the element-wise square is not costed).
  Check: for every row, the FLOPs per token of [N]'s flops_formulas.py (gpt3 / llama2 / llama3 / nemotron,
  with full, not causal, attention: the 24.07 numbers predate the causal factor) times the table's tokens/s
  must give its model TFLOP/s within 0.1%; all twelve do, which confirms each shape and the Nemotron
  vocabulary (with 128,000 the 8B would be 6% off).
- Machine: DGX-H100 nodes ([T]): 8 `h100` on NVSwitch, eight 400 Gb/s InfiniBand NDR NICs (one per GPU, the
  DGX-H100's ConnectX-7s), one non-blocking switch; one cluster per node count.
- Layout: Megatron-Core's rank order tp-cp-dp-pp: global rank = t + TP·(c + CP·(d + DP·s)); stage s of
  every pipeline is one contiguous block of GPUs (stage-major), TP and TP·CP groups inside a node (TP·CP
  ≤ 8 on every row). DP = gpus / (TP·PP·CP). One hetsim pipeline per DP replica; each stage lists its TP·CP
  GPUs with tp_degree and cp_degree where above 1. micro_batch_size = mbs, num_micro_batches =
  gbs / (mbs·DP).
- Layer split: the blocks evenly over the stages, the embedding on the first, the head on the last
  (Megatron-Core's default; tools/make_fold_plans.py blocks_split). VP > 1: `schedule: interleaved_1f1b`,
  `virtual_stages: VP` (Megatron-Core's interleaved 1F1B); every row's blocks per stage divide by VP and its
  micro-batches by PP, so no row is left out.
- Training: `dtype: fp8` ([T]; [L]'s fp8=true with fp8_hybrid: Transformer Engine's delayed-scaling FP8
  for the blocks' linear layers, bf16 elsewhere); the table's gbs and sequence; Adam (distributed_fused_adam);
  `zero_stage: 1` (NeMo's distributed optimizer shards the fp32 master weights and Adam states over DP;
  [L] optim.name); `sequence_parallel: true` wherever TP > 1 ([L]: true in every config with TP > 1);
  flash attention (hetsim's default: Transformer Engine's fused attention, mcore with transformer_engine
  true in [L]); `dropout`: [L]'s hidden_dropout/attention_dropout: 0.1 for GPT3 (5b, 20b, 175b.yaml), 0.0
  (left out) for Llama and Nemotron.
- Recomputation ([L] activations_checkpoint_granularity): none on every row but Nemotron-340B (`selective`).
  The Llama 2 configs' activations_checkpoint_method block with num_layers 0 recomputes nothing.
- TP communication overlap ([L] ub_tp_comm_overlap -> `comm.tp_overlap`): true for GPT3-20B, Llama2-70B,
  Llama3-70B, Nemotron-8B and Nemotron-22B; false for GPT3-175B (its config names an h100 TP-4 userbuffers
  file in its defaults but sets ub_tp_comm_overlap: False, and the 24.07 example fp8 script does not turn it
  on: the flag is taken), Nemotron-340B (False) and the TP-1 rows.
- Gradient sync: [L] optim overlap_grad_sync true on every config -> `comm.dp_overlap: true`, with
  `comm.dp_bucket_mib` = its bucket_cap_mb (5B 400, 20B and 175B 220, Llama 125, Nemotron-8B/22B 100,
  340B 50); [L] optim overlap_param_sync true on every config -> `comm.param_gather_overlap: true` (the
  weights' all-gathers hidden in the next iteration's forward; session 39). overlap_p2p_comm with
  batch_p2p_comm false (NeMo's pairing for VP > 1) is what hetsim's interleaved schedule does by itself
  (session 39); grad_sync_dtype bf16: hetsim syncs gradients in the training's 2-byte type already.
- Optimizer state: the 340B's config keeps Adam's moments in bf16 ([L] optim.dtype: bf16) ->
  `optimizer_state_dtype: bf16`; its fp32 master weights are kept at 4 bytes (whether the run stored them as
  bf16 plus remainders is not stated in [L]).
- Pipeline sends: Megatron-Core's p2p sends whole (with SP, already sequence-sharded) tensors; no
  `pp_scatter_gather`.
- Where the table and [L] differ (GPUs, gbs, mbs, PP/VP sizes), the table wins: they are what was measured.
- No calibration column or key: every row is simulated with the rule every command uses.
"""
import csv
import os
import shutil
import sys

GPUS_PER_NODE = 8
NIC_GBPS = 400
SEQ_ATTENTION_FULL = 1.0  # the 24.07 TFLOP/s column counts full (non-causal) attention

# Written model files: name -> (layers, hidden, ffn, heads, kv_heads, vocab, max_seq, mlp, norm, position,
# tied, bias, description, sources).
NEW_MODELS = {
    "gpt3-5b-nemo": (24, 4096, 16384, 32, 32, 50304, 2048, "gelu", "layernorm", "learned", True, True,
                     "NeMo's GPT3 5B (24 layers, d_model 4096, 32 heads), GPT-2 BPE padded to 50304",
                     ["NVIDIA/NeMo-Framework-Launcher@24.07 launcher_scripts/conf/training/gpt3/5b.yaml "
                      "(num_layers, hidden_size, ffn 4h, num_attention_heads, seq 2048, make_vocab_size_divisible_by 128)",
                      "NVIDIA/NeMo@r2.0.0rc1 examples/nlp/language_modeling/conf/megatron_gpt_config.yaml (bias, gelu, "
                      "layernorm, learned_absolute, shared embeddings); vocab 50257 padded to 128 x TP 1"]),
    "gpt3-20b-nemo": (44, 6144, 24576, 48, 48, 50432, 2048, "gelu", "layernorm", "learned", True, True,
                      "NeMo's GPT3 20B (44 layers, d_model 6144, 48 heads), GPT-2 BPE padded to 50432 (TP 2)",
                      ["NVIDIA/NeMo-Framework-Launcher@24.07 launcher_scripts/conf/training/gpt3/20b.yaml "
                       "(num_layers, hidden_size, ffn 4h, num_attention_heads, seq 2048, make_vocab_size_divisible_by 128)",
                       "NVIDIA/NeMo@r2.0.0rc1 examples/nlp/language_modeling/conf/megatron_gpt_config.yaml (bias, gelu, "
                       "layernorm, learned_absolute, shared embeddings); vocab 50257 padded to 128 x TP 2"]),
    "nemotron3-8b": (32, 4096, 16384, 32, 32, 256000, 4096, "relu", "layernorm", "rope", False, False,
                     "Nemotron-3 8B (32 layers, d_model 4096, 32 heads, squared ReLU as relu, 256K vocab)",
                     ["NVIDIA/NeMo-Framework-Launcher@24.07 launcher_scripts/conf/training/nemotron/nemotron_8b.yaml",
                      "NVIDIA/NeMo nemo/collections/llm/gpt/model/nemotron.py Nemotron3Config8B; "
                      "scripts/performance/llm/pretrain_nemotron3_8b.py (vocab_size=256000)"]),
    "nemotron3-22b": (40, 6144, 24576, 48, 48, 256000, 4096, "relu", "layernorm", "rope", False, False,
                      "Nemotron-3 22B (40 layers, d_model 6144, 48 heads, squared ReLU as relu, 256K vocab)",
                      ["NVIDIA/NeMo-Framework-Launcher@24.07 launcher_scripts/conf/training/nemotron/nemotron_22b.yaml",
                       "NVIDIA/NeMo nemo/collections/llm/gpt/model/nemotron.py Nemotron3Config22B; "
                       "scripts/performance/llm/pretrain_nemotron3_22b.py (vocab_size=256000)"]),
    "nemotron4-340b": (96, 18432, 73728, 96, 8, 256000, 4096, "relu", "layernorm", "rope", False, False,
                       "Nemotron-4 340B (96 layers, d_model 18432, 96 heads, 8 KV heads, squared ReLU as relu, 256K vocab)",
                       ["NVIDIA/NeMo-Framework-Launcher@24.07 launcher_scripts/conf/training/nemotron/nemotron_340b.yaml "
                        "(tokenizer nemotron_2_256k)",
                        "NVIDIA/NeMo nemo/collections/llm/gpt/model/nemotron.py Nemotron4Config340B; "
                        "scripts/performance/llm/pretrain_nemotron4_340b.py (vocab_size=256000)"]),
}

# Shapes of the bundled models, for the FLOP check (hetsim describe --model NAME).
BUNDLED = {
    "gpt3-175b": (96, 12288, 49152, 96, 96),
    "llama2-7b": (32, 4096, 11008, 32, 32),
    "llama2-13b": (40, 5120, 13824, 40, 40),
    "llama2-70b": (80, 8192, 28672, 64, 8),
    "llama3-8b": (32, 4096, 14336, 32, 8),
    "llama3-70b": (80, 8192, 28672, 64, 8),
}

# Per table model: (hetsim model, FLOP formula of nemo/utils/flops_formulas.py, NeMo-Framework-Launcher
# 24.07 config, recompute, tp_overlap, dropout, bucket_cap_mb).
TABLE = {
    "GPT3-5B": ("gpt3-5b-nemo", "gpt3", "gpt3/5b.yaml", "none", False, 0.1, 400),
    "GPT3-20B": ("gpt3-20b-nemo", "gpt3", "gpt3/20b.yaml", "none", True, 0.1, 220),
    "GPT3-175B": ("gpt3-175b", "gpt3", "gpt3/175b.yaml", "none", False, 0.1, 220),
    "LLAMA2-7B": ("llama2-7b", "llama2", "llama/llama2_7b.yaml", "none", False, 0.0, 125),
    "LLAMA2-13B": ("llama2-13b", "llama2", "llama/llama2_13b.yaml", "none", False, 0.0, 125),
    "LLAMA2-70B": ("llama2-70b", "llama2", "llama/llama2_70b.yaml", "none", True, 0.0, 125),
    "LLAMA3-8B": ("llama3-8b", "llama3", "llama/llama3_8b.yaml", "none", False, 0.0, 125),
    "LLAMA3-70B": ("llama3-70b", "llama3", "llama/llama3_70b.yaml", "none", True, 0.0, 125),
    "Nemotron-8B": ("nemotron3-8b", "nemotron", "nemotron/nemotron_8b.yaml", "none", True, 0.0, 100),
    "Nemotron-22B": ("nemotron3-22b", "nemotron", "nemotron/nemotron_22b.yaml", "none", True, 0.0, 100),
    "Nemotron-340B": ("nemotron4-340b", "nemotron", "nemotron/nemotron_340b.yaml", "selective", False, 0.0, 50),
}
# nemo/utils/flops_formulas.py's vocabulary per family (LLM_VOCAB_SIZE_MAP).
# Rows whose config keeps Adam's moments in bf16 ([L] optim.dtype: bf16): `optimizer_state_dtype: bf16`.
OPTIMIZER_STATE_BF16 = {"Nemotron-340B"}
FORMULA_VOCAB = {"gpt3": 51200, "llama2": 32000, "llama3": 128256, "nemotron": 256000}


def shape(model):
    if model in NEW_MODELS:
        return NEW_MODELS[model][:5]
    return BUNDLED[model]


def flops_per_token(formula, model, seq):
    """Model FLOPs per token by nemo/utils/flops_formulas.py, with full attention."""
    layers, h, ffn, heads, kv = shape(model)
    vocab = FORMULA_VOCAB[formula]
    if formula == "gpt3":
        return (24 * h * h + 4 * seq * h * SEQ_ATTENTION_FULL) * 3 * layers + 6 * h * vocab
    ffn_factor = 12 if formula == "nemotron" else 18  # two matrices (squared ReLU) or three (SwiGLU)
    return layers * h * h * (12 + 12 * kv / heads + ffn_factor * ffn / h + 12 * seq / h * SEQ_ATTENTION_FULL
                             + 6 * vocab / (layers * h))


def blocks_split(layers, pp):
    """Plan layers (embedding, blocks, head) per stage: the blocks evenly, the embedding on the first stage
    and the head on the last (as tools/make_fold_plans.py and models::UniformBlocksSplit)."""
    blocks = layers - 2
    bounds = [0] + [1 + blocks * s // pp for s in range(1, pp)] + [layers]
    return list(zip(bounds[:-1], bounds[1:]))


def write_model(out, name):
    layers, h, ffn, heads, kv, vocab, max_seq, mlp, norm, pos, tied, bias, desc, sources = NEW_MODELS[name]
    with open(os.path.join(out, "models", name + ".yaml"), "w") as f:
        f.write(f"# {desc}.\n# As NVIDIA's NeMo 24.07 performance runs trained it; written by tools/convert_nemo_runs.py")
        if mlp == "relu":
            f.write(" (squared ReLU\n# is written as relu, hetsim's closest MLP kind: two matrices h -> ffn -> h)")
        f.write(".\nkind: model\n"
                f"name: {name}\n"
                f"description: \"{desc}\"\n"
                "sources:\n" + "".join(f"  - \"{s}\"\n" for s in sources) +
                f"num_layers: {layers}\nhidden_size: {h}\nffn_hidden_size: {ffn}\nnum_attention_heads: {heads}\n"
                f"num_kv_heads: {kv}\nvocab_size: {vocab}\nmax_seq_len: {max_seq}\nmlp: {mlp}\nnorm: {norm}\n"
                f"position: {pos}\ntied_embeddings: {str(tied).lower()}\nlinear_bias: {str(bias).lower()}\n")


def write_cluster(out, nodes, table="NVIDIA's NeMo 24.07 performance table",
                  source="NVIDIA/NeMo docs/source/performance/performance_summary.md", script="convert_nemo_runs.py"):
    """A DGX-H100 cluster of `nodes` nodes as `table` ran on them (its sentences and `source` in the header)."""
    name = f"dgx-h100-ndr-n{nodes}"
    with open(os.path.join(out, "clusters", name + ".yaml"), "w") as f:
        f.write(f"# DGX-H100 nodes as {table} ran on them: 8 H100 SXM on NVSwitch,\n"
                "# eight 400 Gb/s InfiniBand NDR NICs (one per GPU), one non-blocking switch (our choice: the\n"
                f"# table does not describe the fabric). Written by tools/{script}.\n"
                "kind: cluster\n"
                f"name: {name}\n"
                f"description: \"{nodes} x DGX-H100 (8 H100 SXM, NVSwitch), 8 x 400 Gb/s InfiniBand NDR per node\"\n"
                "sources:\n"
                f"  - \"{source} (System: DGX-H100)\"\n"
                "nodes:\n"
                "  - name: dgx\n"
                f"    count: {nodes}\n"
                "    gpus: {type: h100, count: 8}\n"
                "    fabric: {kind: nvswitch}\n"
                f"    nic: {{kind: infiniband, bandwidth_gbps: {NIC_GBPS}, attachment: per_gpu}}\n"
                "network: {single_switch: {}}\n")
    return name


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    src = argv[1]
    out = argv[2] if len(argv) > 2 else "experiments/validation/nemo_2407_h100_fp8"
    with open(src) as f:
        header = f.readline().strip()
        rows = list(csv.DictReader(f))
    for sub in ("raw", "models", "clusters", "plans"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    shutil.copyfile(src, os.path.join(out, "raw", "nemo_2407_pretraining_h100_fp8.csv"))
    models, clusters, runs, seen = set(), set(), [], set()
    for i, r in enumerate(rows):
        where = f"{src}: row {i + 2}"
        name = r["model"]
        if name not in TABLE:
            sys.exit(f"{where}: model {name!r} is not one of {sorted(TABLE)}")
        model, formula, config, recompute, tp_overlap, dropout, bucket_mib = TABLE[name]
        gpus, gbs, mbs, seq = int(r["gpus"]), int(r["gbs"]), int(r["mbs"]), int(r["seq_len"])
        tp, pp, cp, vp = int(r["tp"]), int(r["pp"]), int(r["cp"]), int(r["vp"])
        if r["precision"] != "FP8":
            sys.exit(f"{where}: precision {r['precision']!r}, only FP8 rows are converted")
        tokens_s, tflops = float(r["tokens_per_s_per_gpu"]), float(r["model_tflops_per_gpu"])
        predicted = tokens_s * flops_per_token(formula, model, seq) / 1e12
        if abs(predicted - tflops) > 0.001 * tflops:
            sys.exit(f"{where}: {name}'s shape gives {predicted:.1f} model TFLOP/s per GPU at {tokens_s} tokens/s "
                     f"by NeMo's formula, the table says {tflops}")
        if gpus % (tp * pp * cp) or gpus % GPUS_PER_NODE or GPUS_PER_NODE % (tp * cp):
            sys.exit(f"{where}: {gpus} GPUs do not split into TP {tp} x CP {cp} groups inside 8-GPU nodes and PP {pp}")
        dp = gpus // (tp * pp * cp)
        if gbs % (mbs * dp):
            sys.exit(f"{where}: global batch {gbs} is not a multiple of micro-batch {mbs} x DP {dp}")
        micro = gbs // (mbs * dp)
        layers, h = shape(model)[0], shape(model)[1]
        if layers % (pp * vp):
            sys.exit(f"{where}: {layers} blocks do not split into PP {pp} x VP {vp} equal chunks")
        if vp > 1 and micro % pp:
            sys.exit(f"{where}: interleaved 1F1B needs the micro-batches ({micro}) to be a multiple of PP {pp}")
        if model in NEW_MODELS and model not in models:
            write_model(out, model)
        models.add(model)
        nodes = gpus // GPUS_PER_NODE
        cluster = write_cluster(out, nodes) if nodes not in clusters else f"dgx-h100-ndr-n{nodes}"
        clusters.add(nodes)
        slug = f"{name.lower()}-g{gpus}-tp{tp}-pp{pp}-cp{cp}-vp{vp}-mb{mbs}-gbs{gbs}"
        if slug in seen:
            sys.exit(f"{where}: a second row with the same setup {slug}")
        seen.add(slug)
        measured_ms = gbs * seq / (tokens_s * gpus) * 1000
        model_ref = f"../models/{model}.yaml" if model in NEW_MODELS else model
        training = (f"{{global_batch_size: {gbs}, seq_len: {seq}, dtype: fp8, optimizer: adam, recompute: {recompute}"
                    + (f", dropout: {dropout}" if dropout > 0 else "")
                    + (", optimizer_state_dtype: bf16" if name in OPTIMIZER_STATE_BF16 else "") + "}")
        comm = ("{" + ("tp_overlap: true, " if tp_overlap and tp > 1 else "")
                + f"dp_overlap: true, dp_bucket_mib: {bucket_mib}, param_gather_overlap: true}}")
        with open(os.path.join(out, "plans", slug + ".yaml"), "w") as f:
            f.write(f"# NVIDIA's NeMo 24.07 {name} pre-training run on {gpus} H100 (DGX-H100), FP8: TP {tp}, PP {pp}, "
                    f"CP {cp}, VP {vp},\n# DP {dp}, micro-batch {mbs}, global batch {gbs} of {seq} tokens; measured "
                    f"{r['tokens_per_s_per_gpu']} tokens/s/GPU ({measured_ms:.1f} ms per step),\n# {r['model_tflops_per_gpu']} "
                    f"model TFLOP/s/GPU. Settings from NeMo-Framework-Launcher 24.07 conf/training/{config}:\n"
                    f"# recompute {recompute}, ub_tp_comm_overlap {'true' if tp_overlap else 'false'}, dropout {dropout}, "
                    f"distributed optimizer (ZeRO-1)\n# with overlap_grad_sync and overlap_param_sync, bucket_cap_mb {bucket_mib}. Megatron-Core "
                    "rank order tp-cp-dp-pp, stage-major. Written by\n# tools/convert_nemo_runs.py (its docstring says "
                    "every choice and its source).\n"
                    "kind: plan\n"
                    f"name: nemo2407-{slug}\n"
                    f"cluster: ../clusters/{cluster}.yaml\n"
                    f"model: {model_ref}\n"
                    f"training: {training}\n"
                    + (f"schedule: interleaved_1f1b\nvirtual_stages: {vp}\n" if vp > 1 else "schedule: 1f1b\n") +
                    "zero_stage: 1\n"
                    + ("sequence_parallel: true\n" if tp > 1 else "") +
                    f"comm: {comm}\n"
                    "pipelines:\n")
            bounds = blocks_split(layers + 2, pp)
            group = tp * cp
            for d in range(dp):
                f.write(f"  - micro_batch_size: {mbs}\n    num_micro_batches: {micro}\n    stages:\n")
                for s in range(pp):
                    base = group * (d + dp * s)
                    devices = ",".join(str(base + j) for j in range(group))
                    extra = (f", tp_degree: {tp}" if tp > 1 else "") + (f", cp_degree: {cp}" if cp > 1 else "")
                    f.write(f"      - {{devices: [{devices}]{extra}, layer_begin: {bounds[s][0]}, "
                            f"layer_end: {bounds[s][1]}}}\n")
        runs.append([f"plans/{slug}.yaml", name, model, gpus, nodes, dp, pp, tp, cp, vp, mbs, micro, gbs, seq,
                     recompute, str(tp_overlap and tp > 1).lower(), f"{measured_ms:.2f}", r["tokens_per_s_per_gpu"],
                     r["model_tflops_per_gpu"]])
    with open(os.path.join(out, "runs.csv"), "w") as f:
        f.write(f"# NVIDIA's {len(runs)} NeMo 24.07 FP8 pre-training runs on DGX-H100 (8-512 GPUs; GPT3 5B-175B, Llama 2 "
                "7B-70B, Llama 3 8B/70B,\n# Nemotron 8B/22B/340B), converted by tools/convert_nemo_runs.py; measured "
                "iteration = gbs x seq_len / (tokens/s/GPU x GPUs).\n# Every row of the table is here: Nemotron's "
                "shapes are in NVIDIA's public configs (NeMo-Framework-Launcher 24.07, NeMo's\n# nemotron.py and "
                "performance scripts, vocab 256000), squared ReLU simulated as relu. No calibration column: default.\n"
                f"# Source of the table: {header.lstrip('# ')}\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["plan", "model", "hetsim_model", "gpus", "nodes", "dp", "pp", "tp", "cp", "vp", "micro_batch",
                    "num_micro_batches", "global_batch", "seq_len", "recompute", "tp_overlap", "iteration_ms",
                    "tokens_per_s_per_gpu", "model_tflops_per_gpu"])
        w.writerows(runs)
    print(f"{len(runs)} runs, {len(models & set(NEW_MODELS))} models written, {len(clusters)} clusters -> {out}")


if __name__ == "__main__":
    main(sys.argv)
