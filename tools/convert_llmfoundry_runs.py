#!/usr/bin/python3
"""Converts llm-foundry's published MPT throughput table (PyTorch FSDP on A100-40GB) into hetsim plans, models,
clusters and a runs CSV for `hetsim validate-sim --runs`.

Usage: /usr/bin/python3 tools/convert_llmfoundry_runs.py SOURCE_CSV [OUT_DIR]
  SOURCE_CSV  the table as rows (the project's copy of llm-foundry's scripts/train/benchmarking/README.md A100
              40GB section: model, seq_len, gpus, micro_batch, grad_accum, global_batch_seqs,
              throughput_tokens_per_s, activation_checkpointing, num_params, ...)
  OUT_DIR     where models/, clusters/, plans/ and runs.csv go (default
              experiments/validation/llmfoundry_a100_40gb_fsdp)

What the table does not say and the conversion decides (each from llm-foundry's own files):
- The model: llm-foundry's MPT yamls (scripts/train/yamls/pretrain/mpt-*.yaml: d_model, n_heads, n_layers,
  expansion_ratio 4, vocab 50,368) with MPTConfig's defaults the benchmark script leaves on: learned position
  embeddings of max_seq_len = the run's sequence, biases in every linear and LayerNorm (no_bias false), the
  embedding tied to the head, GELU. The table's num_params then matches to the parameter: V·h + S·h + L·(12h²
  + 13h) + 2h (checked below for every row; a row that does not match is an error).
- Training: bf16 with FSDP's PURE mixed precision (weights gathered and gradients reduced in bf16, fp32
  master weights and Adam states sharded), FULL_SHARD = ZeRO-3 over every GPU, data parallel only,
  micro-batches of `micro_batch` sequences, `grad_accum` of them per step; activation checkpointing of every
  block when the row says so (full recomputation), FlashAttention's Triton kernel (`attention: flash_triton`:
  submit_benchmarks.py's `--attn_impl triton`, its default).
- The machine: A100-SXM4-40GB nodes of eight GPUs on NVSwitch, 1,600 Gb/s of RoCE per node (eight 200 Gb/s
  NICs, one per GPU, the table's section heading), one non-blocking switch.
- Measured iteration time: global batch in tokens over the whole job's tokens/s (the table's most precise
  throughput column; its sequences/s are rounded to integers).
- No calibration column: every row is simulated with the rule every command uses.
"""
import csv
import os
import sys

# llm-foundry scripts/train/yamls/pretrain/mpt-<size>.yaml: (d_model, n_heads, n_layers).
MPT = {
    "125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24), "1b": (2048, 16, 24),
    "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40), "30b": (7168, 56, 48),
    "70b": (8192, 64, 80),
}
VOCAB = 50368
GPUS_PER_NODE = 8


def mpt_params(h, layers, seq):
    return VOCAB * h + seq * h + layers * (12 * h * h + 13 * h) + 2 * h


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    src = argv[1]
    out = argv[2] if len(argv) > 2 else "experiments/validation/llmfoundry_a100_40gb_fsdp"
    with open(src) as f:
        header = f.readline().strip()
        rows = list(csv.DictReader(f))
    for sub in ("models", "clusters", "plans"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    models, clusters, runs = set(), set(), []
    for i, r in enumerate(rows):
        size, seq, gpus = r["model"], int(r["seq_len"]), int(r["gpus"])
        if size not in MPT:
            sys.exit(f"{src}: row {i + 2}: model {size!r} is not one of llm-foundry's MPT sizes {sorted(MPT)}")
        h, heads, layers = MPT[size]
        if mpt_params(h, layers, seq) != int(r["num_params"]):
            sys.exit(f"{src}: row {i + 2}: MPT-{size} at {seq} tokens has {mpt_params(h, layers, seq)} parameters "
                     f"by its yaml, the table says {r['num_params']}")
        if r["fsdp_sharding"] != "FULL_SHARD" or r["precision"] != "bf16" or r["mp_mode"] != "PURE":
            sys.exit(f"{src}: row {i + 2}: only FULL_SHARD, bf16, PURE runs are converted")
        if r["activation_cpu_offload"] != "False":
            sys.exit(f"{src}: row {i + 2}: activation CPU offload is not converted")
        model = f"mpt-{size}-s{seq}"
        if model not in models:
            models.add(model)
            with open(os.path.join(out, "models", model + ".yaml"), "w") as f:
                f.write(f"# llm-foundry's MPT-{size} (scripts/train/yamls/pretrain/mpt-{size}.yaml) as its throughput\n"
                        f"# benchmark ran it at {seq} tokens; written by tools/convert_llmfoundry_runs.py.\n"
                        "kind: model\n"
                        f"name: {model}\n"
                        f"description: MPT-{size} with learned positions of {seq} tokens, biases, tied embeddings\n"
                        "sources:\n"
                        f"  - \"mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-{size}.yaml (d_model, n_heads, "
                        "n_layers, expansion_ratio 4, vocab 50368); MPTConfig defaults (learned_pos_emb, no_bias "
                        "false, tied embeddings)\"\n"
                        f"num_layers: {layers}\nhidden_size: {h}\nffn_hidden_size: {4 * h}\n"
                        f"num_attention_heads: {heads}\nvocab_size: {VOCAB}\nmax_seq_len: {seq}\n"
                        "mlp: gelu\nnorm: layernorm\nposition: learned\ntied_embeddings: true\nlinear_bias: true\n")
        nodes = gpus // GPUS_PER_NODE
        cluster = f"a100-40gb-roce-n{nodes}"
        if cluster not in clusters:
            clusters.add(cluster)
            with open(os.path.join(out, "clusters", cluster + ".yaml"), "w") as f:
                f.write("# llm-foundry's A100 40GB benchmark machines (its README's section heading: 1600 Gbps\n"
                        "# node-node interconnect, RoCE); written by tools/convert_llmfoundry_runs.py.\n"
                        "kind: cluster\n"
                        f"name: {cluster}\n"
                        f"description: \"{nodes} x 8 A100-SXM4-40GB (NVSwitch), 8 x 200 Gb/s RoCE per node\"\n"
                        "sources:\n"
                        "  - \"mosaicml/llm-foundry scripts/train/benchmarking/README.md: A100 40GB with 1600 Gbps "
                        "node-node interconnect (RoCE)\"\n"
                        "nodes:\n"
                        "  - name: a100\n"
                        f"    count: {nodes}\n"
                        "    gpus: {type: a100-40gb, count: 8}\n"
                        "    fabric: {kind: nvswitch}\n"
                        "    nic: {kind: roce, bandwidth_gbps: 200, attachment: per_gpu}\n"
                        "network: {single_switch: {}}\n")
        micro, accum, global_batch = int(r["micro_batch"]), int(r["grad_accum"]), int(r["global_batch_seqs"])
        if micro * accum * gpus != global_batch:
            sys.exit(f"{src}: row {i + 2}: micro_batch x grad_accum x gpus = {micro * accum * gpus}, "
                     f"global batch {global_batch}")
        recompute = "full" if r["activation_checkpointing"] == "True" else "none"
        measured_s = int(r["global_batch_tokens"]) / float(r["throughput_tokens_per_s"])
        plan = f"{size}-s{seq}-g{gpus}-mb{micro}-acc{accum}-{'ckpt' if recompute == 'full' else 'nockpt'}"
        with open(os.path.join(out, "plans", plan + ".yaml"), "w") as f:
            f.write(f"# llm-foundry's MPT-{size}, {seq} tokens, on {gpus} A100-40GB with PyTorch FSDP (FULL_SHARD):\n"
                    f"# micro-batch {micro}, {accum} per step, activation checkpointing {r['activation_checkpointing']};\n"
                    f"# measured {r['throughput_tokens_per_s']} tokens/s ({measured_s:.4f} s per step), MFU "
                    f"{r['mfu_pct']}%. Written by tools/convert_llmfoundry_runs.py.\n"
                    "kind: plan\n"
                    f"name: llmfoundry-{plan}\n"
                    f"cluster: ../clusters/{cluster}.yaml\n"
                    f"model: ../models/{model}.yaml\n"
                    f"training: {{global_batch_size: {global_batch}, seq_len: {seq}, dtype: bf16, optimizer: adam, "
                    f"recompute: {recompute}, attention: flash_triton}}\n"
                    "zero_stage: 3\n"
                    "pipelines:\n")
            for d in range(gpus):
                f.write(f"  - {{micro_batch_size: {micro}, num_micro_batches: {accum}, "
                        f"stages: [{{devices: [{d}], layer_end: {layers + 2}}}]}}\n")
        runs.append([f"plans/{plan}.yaml", size, seq, gpus, nodes, gpus, 1, 1, micro, accum, global_batch, recompute,
                     f"{measured_s * 1000:.2f}", r["mfu_pct"]])
    with open(os.path.join(out, "runs.csv"), "w") as f:
        f.write("# llm-foundry's 78 MPT throughput runs on A100-40GB with PyTorch FSDP (FULL_SHARD), 8-128 GPUs,\n"
                "# converted by tools/convert_llmfoundry_runs.py; measured iteration = global batch tokens / tokens/s.\n"
                f"# Source of the table: {header.lstrip('# ')}\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["plan", "model", "seq_len", "gpus", "nodes", "dp", "pp", "tp", "micro_batch", "grad_accum", "global_batch", "recompute",
                    "iteration_ms", "mfu_pct"])
        w.writerows(runs)
    print(f"{len(runs)} runs, {len(models)} models, {len(clusters)} clusters -> {out}")


if __name__ == "__main__":
    main(sys.argv)
