#!/usr/bin/env python3
"""Converts Sailor's measured per-layer profiles into hetsim profile files (models/proto/profile.proto).

Sailor (Strati et al., "Sailor: Automating Distributed Training over Dynamic, Heterogeneous, and
Geo-distributed Clusters", SOSP 2025; github.com/eth-easl/sailor) publishes, per model and GPU type,
`sailor/Planner/sailor_planner/profiles/<MODEL>/<GPU>/profile.json`:

    profile[micro_batch_size][tp_degree][layer_index] = [forward_s, backward_s, update_s]

and the layer shapes in `sailor/Planner/llm_info.json` (llm_info[MODEL][tp][layer] = parameters and
activation sizes per TP rank at micro-batch 1). Layer 0 is the embedding, then the transformer blocks, then
the head; Sailor's LLAMA-3-8 has one entry more (35 = 1 + 32 + 2): its DeepSpeed pipeline puts the final
RMSNorm (index 33) and the LM head (index 34) in separate layers. Both are hetsim's `head` (final norm +
output projection), so their times are summed.

What is written per (TP degree, micro-batch size):
  - embedding and head: Sailor's numbers (forward_s, backward_s);
  - transformer: the median over the blocks (Sailor profiles two blocks and repeats the second), with the
    min-max spread in a comment when it exceeds 5% of the median;
  - optimizer_s: Sailor's update_s is one number per (TP, micro-batch), repeated on every layer: the
    optimizer step of the whole profiled model (embedding + 2 blocks + head), which is why Sailor's
    simulator takes it once per stage. It is apportioned to the layers by their parameters per TP rank
    (llm_info.json), so that embedding + 2 blocks + head add up to the measurement. Files whose update
    times are all 0 (not measured) get no optimizer_s;
  - activation_gib: llm_info.json's act_mem_bytes of the layer at that TP degree (the growth of
    torch.cuda.memory_allocated() across the layer's forward pass, measured by Sailor's profiler at
    micro-batch 1; the blocks' median, the head's layers summed) times the micro-batch size, as Sailor's
    planner scales it. TP degrees llm_info.json lacks get none.
Not written: per-micro-batch overheads (micro_batch_overheads: Metis's fb_sync and batch generation).
Sailor measures none: its own conversion to Metis's profile format writes batch_generator_time 0 and a
forward-backward time equal to the sum of the layers (fb_sync 0).

Checks: the GPU name resolves in models/catalog/gpus.csv; the number of layers, the hidden size and the
sequence length agree with the hetsim model (models/catalog/models/<model>.yaml); a profile that is a copy
of another one, or has the wrong number of layers, is skipped with the reason printed.

Run with the standard library only: /usr/bin/python3 tools/convert_sailor_profiles.py --date YYYY-MM-DD
(docs/profiles.md has the exact command used for the bundled files). Rewrites models/catalog/profiles/
sailor-*.yaml and removes stale ones.
"""

import argparse
import csv
import datetime
import hashlib
import io
import json
import os
import re
import shlex
import statistics
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SAILOR_DIR = os.path.join(REPO, "third_party", "sailor-profiles")
DEFAULT_OUT_DIR = os.path.join(REPO, "models", "catalog", "profiles")
SAILOR_REPO_PATH = "sailor/Planner/sailor_planner/profiles"  # where the files live in github.com/eth-easl/sailor

# Sailor model name -> hetsim model, the sequence length Sailor profiled with (model_configs in Sailor's
# third_party/Megatron-DeepSpeed/profile_all.py) and how many trailing Sailor layers form hetsim's head.
SAILOR_MODELS = {
    "OPT-350": {"model": "opt-350m", "seq_len": 2048, "head_layers": 1},
    "GPT-Neo-2.7": {"model": "gpt-neo-2.7b", "seq_len": 2048, "head_layers": 1},
    "OPT-30": {"model": "opt-30b", "seq_len": 2048, "head_layers": 1},
    # 33 = final RMSNorm, 34 = LlamaLMHeadPipe (hidden -> padded vocab, untied).
    "LLAMA-3-8": {"model": "llama3-8b", "seq_len": 8192, "head_layers": 2, "lm_head_params_missing": True},
}

SPREAD_COMMENT_THRESHOLD = 0.05


class Skip(Exception):
    """A profile that is not converted; the message says why."""


def sig(x, digits):
    """`x` rounded to `digits` significant digits (strips float noise such as 0.0006119999999999999)."""
    return float("%.*g" % (digits, x)) if x else 0.0


def fmt(x):
    """Shortest text that reads back as the same double."""
    if x == 0:
        return "0"
    return repr(float(x))


def load_gpu_catalog():
    """Catalog name for every spelling (canonical name or alias), lower-cased keys."""
    path = os.path.join(REPO, "models", "catalog", "gpus.csv")
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if not line.startswith("#")]
    names = {}
    for row in csv.DictReader(io.StringIO("".join(lines))):
        canonical = row["name"].strip()
        names[canonical.lower()] = canonical
        for alias in (row.get("aliases") or "").split(";"):
            if alias.strip():
                names[alias.strip().lower()] = canonical
    return names


def load_model(name):
    """Top-level scalar keys of a bundled hetsim model file (a tiny YAML subset: `key: value  # comment`)."""
    path = os.path.join(REPO, "models", "catalog", "models", name + ".yaml")
    if not os.path.exists(path):
        raise Skip("hetsim has no model '%s' (%s missing)" % (name, os.path.relpath(path, REPO)))
    spec = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([a-z_]+):\s*([^#\s][^#]*?)\s*(#.*)?$", line)
            if m:
                spec[m.group(1)] = m.group(2).strip('"')
    return spec


def hetsim_block_params(spec):
    """Parameters of one transformer block by docs/models.md's formula."""
    h = int(spec["hidden_size"])
    f = int(spec["ffn_hidden_size"])
    a = int(spec["num_attention_heads"])
    kv = int(spec.get("num_kv_heads", "0")) or a
    d = h // a
    bias = spec.get("linear_bias", "false") == "true"
    norm = 2 * h if spec.get("norm") == "layernorm" else h
    attention = 2 * h * h + 2 * h * kv * d + ((h + 2 * kv * d + h) if bias else 0)
    if spec.get("mlp") == "swiglu":
        mlp = 3 * h * f + ((2 * f + h) if bias else 0)
    else:
        mlp = 2 * h * f + ((f + h) if bias else 0)
    return attention + mlp + 2 * norm


def check_structure(prof, where):
    """Returns the layer count; raises Skip when the nesting or the values are malformed."""
    count = None
    if not isinstance(prof, dict) or not prof:
        raise Skip("%s: not a {micro_batch_size: {tp: {layer: [f, b, u]}}} object" % where)
    for mbs, by_tp in prof.items():
        if not mbs.isdigit() or int(mbs) < 1 or not isinstance(by_tp, dict):
            raise Skip("%s: bad micro-batch key %r" % (where, mbs))
        for tp, layers in by_tp.items():
            if not tp.isdigit() or int(tp) < 1 or not isinstance(layers, dict):
                raise Skip("%s: [%s]: bad TP key %r" % (where, mbs, tp))
            if sorted(layers, key=int) != [str(i) for i in range(len(layers))]:
                raise Skip("%s: [%s][%s]: layer keys are not 0..%d" % (where, mbs, tp, len(layers) - 1))
            for layer, v in layers.items():
                if (not isinstance(v, list) or len(v) != 3
                        or not all(isinstance(x, (int, float)) and x >= 0 for x in v)):
                    raise Skip("%s: [%s][%s][%s]: expected three non-negative numbers, got %r" %
                               (where, mbs, tp, layer, v))
            if count is None:
                count = len(layers)
            elif count != len(layers):
                raise Skip("%s: [%s][%s] has %d layers, others %d" % (where, mbs, tp, len(layers), count))
    return count


def fingerprint(prof):
    return hashlib.sha256(json.dumps(prof, sort_keys=True).encode()).hexdigest()


def params_per_rank(info, sailor_model, tp, n_layers, head_layers, lm_head_params_missing):
    """(embedding, block, head) parameters per TP rank from llm_info.json, or None without that TP degree."""
    by_layer = info.get(sailor_model, {}).get(str(tp))
    if by_layer is None:
        return None
    p = [by_layer[str(i)]["params_floats"] for i in range(n_layers)]
    embedding = p[0]
    block = statistics.median(p[1:n_layers - head_layers])
    head = sum(p[n_layers - head_layers:])
    if lm_head_params_missing:
        # llm_info lists 4096 parameters for LLAMA-3-8's LM head (a ColumnParallelLinear hidden -> padded
        # vocab, untied): the real count is the embedding's shape, split over TP the same way.
        head += embedding
    return embedding, block, head


def activations_per_rank(info, sailor_model, tp, n_layers, head_layers):
    """(embedding, block, head) activation bytes per TP rank at micro-batch 1 from llm_info.json's
    act_mem_bytes, or None without that TP degree."""
    by_layer = info.get(sailor_model, {}).get(str(tp))
    if by_layer is None:
        return None
    a = [by_layer[str(i)]["act_mem_bytes"] for i in range(n_layers)]
    return a[0], statistics.median(a[1:n_layers - head_layers]), sum(a[n_layers - head_layers:])


def convert(sailor_dir, sailor_model, gpu_dir, info, catalog, args):
    cfg = SAILOR_MODELS[sailor_model]
    rel = "%s/%s/profile.json" % (sailor_model, gpu_dir)
    path = os.path.join(sailor_dir, rel)
    with open(path, encoding="utf-8") as f:
        prof = json.load(f)
    n_layers = check_structure(prof, rel)

    gpu = catalog.get(gpu_dir.lower())
    if gpu is None:
        raise Skip("%s: GPU '%s' is not in models/catalog/gpus.csv" % (rel, gpu_dir))
    model = load_model(cfg["model"])
    num_blocks = int(model["num_layers"])
    head_layers = cfg["head_layers"]
    if n_layers != num_blocks + 1 + head_layers:
        raise Skip("%s: %d layers, but %s has 1 embedding + %d blocks + %d head layer(s) = %d" %
                   (rel, n_layers, cfg["model"], num_blocks, head_layers, num_blocks + 1 + head_layers))

    # Shapes: llm_info's activations at micro-batch 1 must be seq_len x hidden.
    seq_len = cfg["seq_len"]
    hidden = int(model["hidden_size"])
    tp1 = info[sailor_model]["1"]
    act = tp1["1"]["act_output_floats"]
    if act != seq_len * hidden:
        raise Skip("%s: llm_info.json block output %d floats != seq_len %d x hidden %d" %
                   (rel, act, seq_len, hidden))
    if len(tp1) != n_layers:
        raise Skip("%s: llm_info.json has %d layers for %s, the profile %d" %
                   (rel, len(tp1), sailor_model, n_layers))
    sailor_block = tp1["1"]["params_floats"]
    ours_block = hetsim_block_params(model)
    positions = seq_len if model.get("position") == "learned" else 0
    sailor_vocab = tp1["0"]["params_floats"] // hidden - positions

    first_block, last_block = 1, num_blocks
    notes = []
    entries = []  # (tp, mbs, kind, forward, backward, optimizer or None, activation GiB or None, comment or None)
    no_activation = []  # TP degrees llm_info.json has no activations for
    any_update = any(v[2] > 0 for by_tp in prof.values() for layers in by_tp.values() for v in layers.values())
    update_ranges = {}
    for tp in sorted({int(t) for by_tp in prof.values() for t in by_tp}):
        shares = None
        if any_update:
            pp = params_per_rank(info, sailor_model, tp, n_layers, head_layers, cfg.get("lm_head_params_missing"))
            if pp is None:
                raise Skip("%s: update times are measured but llm_info.json has no TP %d to apportion them" %
                           (rel, tp))
            total = pp[0] + 2 * pp[1] + pp[2]
            shares = {"embedding": pp[0] / total, "transformer": pp[1] / total, "head": pp[2] / total}
            update_ranges[tp] = [None, None, total]
        acts = activations_per_rank(info, sailor_model, tp, n_layers, head_layers)
        if acts is None:
            no_activation.append(tp)
        for mbs in sorted(int(m) for m in prof if str(tp) in prof[m]):
            layers = prof[str(mbs)][str(tp)]
            rows = [layers[str(i)] for i in range(n_layers)]
            updates = sorted({r[2] for r in rows})
            if len(updates) > 1:
                notes.append("tp %d, micro-batch %d: update_s differs between layers (%s); the median is used" %
                             (tp, mbs, ", ".join(fmt(u) for u in updates)))
            update = statistics.median(r[2] for r in rows)
            if any_update:
                lo, hi, _ = update_ranges[tp]
                update_ranges[tp][0] = update if lo is None else min(lo, update)
                update_ranges[tp][1] = update if hi is None else max(hi, update)

            def opt(kind):
                return sig(update * shares[kind], 4) if any_update else None

            def act(index):
                # Bytes at micro-batch 1 scaled to this micro-batch, in GiB.
                return sig(acts[index] * mbs / 2 ** 30, 7) if acts is not None else None

            emb = rows[0]
            entries.append((tp, mbs, "embedding", sig(emb[0], 7), sig(emb[1], 7), opt("embedding"), act(0), None))

            blocks = rows[first_block:last_block + 1]
            fwd = [b[0] for b in blocks]
            bwd = [b[1] for b in blocks]
            comment = []
            for name, xs in (("forward_s", fwd), ("backward_s", bwd)):
                med = statistics.median(xs)
                if med > 0 and (max(xs) - min(xs)) / med > SPREAD_COMMENT_THRESHOLD:
                    comment.append("%s %s..%s (spread %.0f%% of the median)" %
                                   (name, fmt(sig(min(xs), 7)), fmt(sig(max(xs), 7)),
                                    100 * (max(xs) - min(xs)) / med))
            entries.append((tp, mbs, "transformer", sig(statistics.median(fwd), 7), sig(statistics.median(bwd), 7),
                            opt("transformer"), act(1),
                            ("blocks %d-%d vary: " % (first_block, last_block) + "; ".join(comment))
                            if comment else None))

            head_rows = rows[n_layers - head_layers:]
            entries.append((tp, mbs, "head", sig(sum(r[0] for r in head_rows), 7),
                            sig(sum(r[1] for r in head_rows), 7), opt("head"), act(2), None))

    # ---- the file ----
    out = []
    w = out.append
    w("# Generated by tools/convert_sailor_profiles.py from Sailor's published profiles; do not edit (see")
    w("# docs/profiles.md). Sailor %s on %s -> hetsim model %s on %s, sequences of %d tokens." %
      (sailor_model, gpu_dir, cfg["model"], gpu, seq_len))
    if head_layers == 1:
        w("# Layers: Sailor index 0 = embedding; %d..%d = transformer blocks (one entry per TP x micro-batch: the" %
          (first_block, last_block))
        w("# median over the blocks); %d = head." % (n_layers - 1))
    else:
        w("# Layers: Sailor index 0 = embedding; %d..%d = transformer blocks (one entry per TP x micro-batch: the" %
          (first_block, last_block))
        w("# median over the blocks); %d (final RMSNorm) + %d (LM head) = head, their times summed." %
          (n_layers - 2, n_layers - 1))
    w("# Times are seconds per micro-batch on one GPU of the TP group, Sailor's TP communication included.")
    w("# Sailor's shapes (llm_info.json): %s parameters per block (hetsim %s: %s), vocabulary %d (hetsim: %s)." %
      ("{:,}".format(sailor_block), cfg["model"], "{:,}".format(ours_block), sailor_vocab, model["vocab_size"]))
    if abs(sailor_block - ours_block) > 0.01 * ours_block or abs(sailor_vocab - int(model["vocab_size"])) > 0.01 * \
            int(model["vocab_size"]):
        w("# NOTE: Sailor's model differs from hetsim's by more than 1% (see docs/profiles.md, 'Oddities').")
    if any_update:
        w("# optimizer_s: Sailor's update_s (one number per TP x micro-batch, repeated on every layer: the optimizer")
        w("# step of the profiled model = embedding + 2 blocks + head) apportioned by parameters per TP rank:")
        for tp, (lo, hi, total) in sorted(update_ranges.items()):
            w("#   tp %d: update_s %s..%s s over %s parameters per rank" %
              (tp, fmt(sig(lo, 7)), fmt(sig(hi, 7)), "{:,}".format(int(total))))
    else:
        w("# optimizer_s: absent -- every update_s in this file is 0 (not measured).")
    w("# activation_gib: llm_info.json's act_mem_bytes (memory allocated across the layer's forward pass at")
    w("# micro-batch 1; blocks: the median) x the micro-batch size, as Sailor's planner scales it.")
    if no_activation:
        w("# No activation_gib at TP %s: llm_info.json has no entry for it." %
          ", ".join(str(t) for t in no_activation))
    w("# micro_batch_overheads: none -- Sailor measures no per-micro-batch overhead (its own conversion to")
    w("# Metis's format writes batch_generator_time 0 and fb_sync 0).")
    for n in notes:
        w("# " + n)
    w("kind: profile")
    w("gpu: %s" % gpu)
    w("model: %s" % cfg["model"])
    w("seq_len: %d" % seq_len)
    # JSON strings are YAML double-quoted scalars.
    w("source: " + json.dumps("Sailor (Strati et al., SOSP 2025) published profiles, github.com/eth-easl/sailor "
                              "%s/%s; layer shapes from sailor/Planner/llm_info.json" % (SAILOR_REPO_PATH, rel)))
    w("date: " + json.dumps(args.date))
    w("command: " + json.dumps(args.command))
    w("includes_tp_communication: true  # Sailor times whole layers, TP all-reduces included")
    w("layers:")
    last = None
    for tp, mbs, kind, fwd, bwd, opt_s, act_gib, comment in entries:
        if (tp, mbs) != last:
            w("  # tp %d, micro-batch %d" % (tp, mbs))
            last = (tp, mbs)
        if comment:
            w("  # " + comment)
        fields = "layer: %s, tp_degree: %d, micro_batch_size: %d, forward_s: %s, backward_s: %s" % (
            kind, tp, mbs, fmt(fwd), fmt(bwd))
        if opt_s is not None:
            fields += ", optimizer_s: %s" % fmt(opt_s)
        if act_gib:
            fields += ", activation_gib: %s" % fmt(act_gib)
        w("  - {%s}" % fields)
    text = "\n".join(out) + "\n"

    coverage = {}
    for tp, mbs, _, _, _, _, _, _ in entries:
        coverage.setdefault(tp, set()).add(mbs)
    name = "sailor-%s-%s.yaml" % (cfg["model"], gpu)
    return name, text, {"model": cfg["model"], "gpu": gpu, "coverage": coverage, "optimizer": any_update,
                        "activation_missing": no_activation, "source": rel}


def write_atomically(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the permissions open() would
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sailor-dir", default=DEFAULT_SAILOR_DIR,
                        help="folder with <MODEL>/<GPU>/profile.json and llm_info.json (default: %(default)s)")
    parser.add_argument("--out-dir", default=DEFAULT_OUT_DIR, help="where to write (default: %(default)s)")
    parser.add_argument("--date", default=datetime.date.today().isoformat(),
                        help="the files' date: field (default: today)")
    args = parser.parse_args()
    argv = sys.argv[1:]
    if not any(a == "--date" or a.startswith("--date=") for a in argv):
        argv += ["--date", args.date]
    args.command = " ".join(["/usr/bin/python3", "tools/convert_sailor_profiles.py"] + [shlex.quote(a) for a in argv])

    with open(os.path.join(args.sailor_dir, "llm_info.json"), encoding="utf-8") as f:
        info = json.load(f)
    catalog = load_gpu_catalog()

    # Identical files under different folders: keep the one whose layer count fits its model.
    seen = {}
    for sailor_model in sorted(os.listdir(args.sailor_dir)):
        if not os.path.isdir(os.path.join(args.sailor_dir, sailor_model)):
            continue
        for gpu_dir in sorted(os.listdir(os.path.join(args.sailor_dir, sailor_model))):
            p = os.path.join(args.sailor_dir, sailor_model, gpu_dir, "profile.json")
            if os.path.exists(p):
                with open(p, encoding="utf-8") as f:
                    seen.setdefault(fingerprint(json.load(f)), []).append("%s/%s" % (sailor_model, gpu_dir))

    written, skipped = [], []
    for sailor_model in sorted(os.listdir(args.sailor_dir)):
        folder = os.path.join(args.sailor_dir, sailor_model)
        if not os.path.isdir(folder):
            continue
        if sailor_model not in SAILOR_MODELS:
            skipped.append((sailor_model, "no hetsim model mapped to Sailor's '%s'" % sailor_model))
            continue
        for gpu_dir in sorted(os.listdir(folder)):
            if not os.path.exists(os.path.join(folder, gpu_dir, "profile.json")):
                continue
            where = "%s/%s" % (sailor_model, gpu_dir)
            try:
                name, text, summary = convert(args.sailor_dir, sailor_model, gpu_dir, info, catalog, args)
            except Skip as e:
                twins = [t for ts in seen.values() if where in ts for t in ts if t != where]
                reason = str(e) + (" -- number for number the same as %s" % ", ".join(twins) if twins else "")
                skipped.append((where, reason))
                continue
            write_atomically(os.path.join(args.out_dir, name), text)
            written.append((name, summary))

    produced = {name for name, _ in written}
    for stale in sorted(os.listdir(args.out_dir)):
        if stale.startswith("sailor-") and stale.endswith(".yaml") and stale not in produced:
            os.remove(os.path.join(args.out_dir, stale))
            print("removed stale %s" % stale)

    for name, s in written:
        cov = "; ".join("tp %d: mbs %s" % (tp, ",".join(str(m) for m in sorted(ms)))
                        for tp, ms in sorted(s["coverage"].items()))
        missing = s["activation_missing"]
        print("wrote %s  (%s)  %s%s%s" % (name, s["source"], cov, "" if s["optimizer"] else "  [no optimizer_s]",
                                          "  [no activation_gib at tp %s]" % ",".join(map(str, missing))
                                          if missing else ""))
    for where, reason in skipped:
        print("skipped %s: %s" % (where, reason))
    return 0


if __name__ == "__main__":
    sys.exit(main())
