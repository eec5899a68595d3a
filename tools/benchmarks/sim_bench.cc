// Simulator benchmarks: one line per measurement, `name value unit`. Usage: bench_sim [FILTER]
// (substring match on the names). Targets (issue "Simulator core"): the 240-GPU HexiScale cluster with
// Llama-2-70B at >= 8 stages and >= 32 micro-batches in <= 1 s; Llama-3 405B on 16,384 H100s in <= 60 s
// and <= 4 GiB; the error of the faster fidelity levels against full detail at 1,024 GPUs; the largest
// configuration of Megatron-LM SC'21 Table 1 (1T parameters on 3,072 A100s, interleaved) and Llama 3 405B on
// 16,384 GPUs interleaved in <= 10 s each at the default fidelity, with the error against the unfolded run
// and against full fidelity (docs/simulator.md, "Folding", "Session 10"). The large cases run only when
// FILTER names them (`bench_sim sim.megatron`, `bench_sim interleaved`); `bench_sim FILTER --nofold` adds the
// unfolded references, `bench_sim FILTER --full` the full-fidelity ones (minutes: 10 for the 1T case).
// Folding every plan kind (docs/simulator.md): `bench_sim sim.llama3-cp16` (Llama 3 405B with CP 16 on 16,384
// GPUs, <= 5 s), `sim.llama3-2304-interleaved`, `sim.hetero-16384` (a plan that does not fold, <= 10 s).
// The Table 1 rows here measure speed (benchmark settings, layers split evenly with the embedding and head
// counted as layers); their fidelity against the published runs is `hetsim validate-sim --runs
// experiments/validation/megatron_sc21_table1.csv`.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "models/gpu_catalog.h"
#include "models/spec_io.h"
#include "models/transformer.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/simulator.h"

namespace {

using namespace hetsim;

// Megatron-style uniform plan: TP innermost, then DP, then PP (device = (s·dp + p)·tp + k); the blocks
// evenly with the embedding and head at the ends where pp divides them (Megatron-LM's split, which the
// interleaved schedule's chunks need), else every layer as evenly as possible.
proto::Plan UniformPlan(const models::TransformerModel& m, uint32_t tp, uint32_t pp, uint32_t dp, uint32_t mbs,
                        uint32_t micro_batches, uint32_t zero) {
  proto::Plan plan;
  plan.set_name("uniform-tp" + std::to_string(tp) + "-pp" + std::to_string(pp) + "-dp" + std::to_string(dp));
  plan.set_zero_stage(zero);
  plan.set_sequence_parallel(tp > 1);
  const uint32_t L = m.num_layers();
  const auto blocks = models::UniformBlocksSplit(m, pp);
  for (uint32_t p = 0; p < dp; ++p) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(mbs);
    pipe->set_num_micro_batches(micro_batches);
    for (uint32_t s = 0; s < pp; ++s) {
      auto* st = pipe->add_stages();
      st->set_tp_degree(tp);
      st->set_layer_begin(blocks ? (*blocks)[s].first : L * s / pp);
      st->set_layer_end(blocks ? (*blocks)[s].second : L * (s + 1) / pp);
      for (uint32_t k = 0; k < tp; ++k) st->add_devices((s * dp + p) * tp + k);
    }
  }
  return plan;
}

// A GPT of Narayanan et al., SC'21 (Megatron-LM), Table 1 (e.g. 1T parameters: 128 layers, hidden 25,600,
// 160 heads), sequence 2,048, FFN 4·hidden; GPT-3's vocabulary and layout otherwise.
models::TransformerModel Gpt(const std::string& name, uint32_t layers, uint32_t hidden, uint32_t heads) {
  proto::Model m;
  const std::string yaml =
      "kind: model\nname: " + name + "\nnum_layers: " + std::to_string(layers) + "\nhidden_size: " +
      std::to_string(hidden) + "\nffn_hidden_size: " + std::to_string(4 * hidden) + "\nnum_attention_heads: " +
      std::to_string(heads) + "\nnum_kv_heads: " + std::to_string(heads) +
      "\nvocab_size: 51200\nmax_seq_len: 2048\nmlp: gelu\n"
      "norm: layernorm\nposition: learned\ntied_embeddings: true\nlinear_bias: true\n";
  Status s = models::ParseYaml(yaml, "bench-model", &m);
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return std::move(models::TransformerModel::Build(m, "bench-model")).value();
}

// Selene as SC'21 ran it: DGX A100 (80 GB) nodes, eight 200 Gb/s HDR InfiniBand NICs each, a full fat tree.
models::Cluster A100Cluster(uint32_t nodes) {
  proto::Cluster c;
  const std::string yaml = "name: a100-" + std::to_string(nodes * 8) + "\nnodes: [{name: n, count: " +
                           std::to_string(nodes) +
                           ", gpus: {type: a100-80gb, count: 8}, nic: {kind: infiniband, bandwidth_gbps: 200, "
                           "attachment: per_gpu}}]\n";
  Status s = models::ParseYaml(yaml, "bench-cluster", &c);
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return std::move(models::Cluster::Build(c, "bench-cluster")).value();
}

models::Cluster H100Cluster(uint32_t nodes, uint32_t nodes_per_pod, double oversubscription) {
  proto::Cluster c;
  const std::string yaml = "name: h100-" + std::to_string(nodes * 8) +
                           "\nnodes: [{name: n, count: " + std::to_string(nodes) +
                           ", gpus: {type: h100, count: 8}, nic: {kind: roce, bandwidth_gbps: 400, attachment: per_gpu}}]\n"
                           "network: {pods: {nodes_per_pod: " +
                           std::to_string(nodes_per_pod) + ", oversubscription: " + std::to_string(oversubscription) + "}}\n";
  Status s = models::ParseYaml(yaml, "bench-cluster", &c);
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return std::move(models::Cluster::Build(c, "bench-cluster")).value();
}

// DeepSeek-V3 as Megatron-Bridge runs it on DGX-H100 (experiments/validation/megatron_bridge_moe_h100, the
// 25.09 layout): TP 2, PP 8 with 4 virtual stages, EP 64 folded over each stage's TP × DP ranks, expert TP 1,
// stage blocks 7 / 8 × 6 / 6, DeepEP's node-deduplicated dispatch overlapped with compute, ZeRO-1; `dp` DP
// replicas inside each stage, a global batch of 8·dp·16 sequences of 4096 tokens in micro-batches of one.
proto::Plan DeepSeekPlan(uint32_t dp) {
  proto::Plan plan;
  plan.set_name("deepseek-v3-dp" + std::to_string(dp));
  plan.set_zero_stage(1);
  plan.set_sequence_parallel(true);
  plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
  plan.set_virtual_stages(4);
  plan.mutable_comm()->set_ep_overlap(true);
  plan.mutable_comm()->set_ep_dispatcher(proto::CommOptions::EP_DISPATCHER_NODE_DEDUP);
  const uint32_t tp = 2, pp = 8, blocks[] = {7, 8, 8, 8, 8, 8, 8, 6};
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(dp);
  pipe->set_num_micro_batches(128);
  uint32_t begin = 0;
  for (uint32_t s = 0; s < pp; ++s) {
    auto* st = pipe->add_stages();
    st->set_tp_degree(tp);
    st->set_ep_degree(64);
    st->set_expert_tp_degree(1);
    const uint32_t end = begin + blocks[s] + (s == 0 ? 1 : 0) + (s + 1 == pp ? 1 : 0);
    st->set_layer_begin(begin);
    st->set_layer_end(end);
    begin = end;
    for (uint32_t k = 0; k < tp * dp; ++k) st->add_devices(s * tp * dp + k);
  }
  return plan;
}

// Llama 3 405B with context parallelism as experiments/llama3/llama3-405b-16384-cp16.yaml (Llama 3 Table 4,
// long context): TP 8, CP `cp`, PP 16, DP `dp`, 16 micro-batches of one sequence, interleaved with 4 virtual
// stages, ZeRO-2; stage-major (pipeline p, stage s, CP rank c on node (s·dp + p)·cp + c), 8 plan layers
// per stage.
proto::Plan Llama3CpPlan(uint32_t cp, uint32_t dp) {
  proto::Plan plan;
  plan.set_name("llama3-405b-cp" + std::to_string(cp) + "-dp" + std::to_string(dp));
  plan.set_zero_stage(2);
  plan.set_sequence_parallel(true);
  plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
  plan.set_virtual_stages(4);
  const uint32_t tp = 8, pp = 16;
  for (uint32_t p = 0; p < dp; ++p) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(16);
    for (uint32_t s = 0; s < pp; ++s) {
      auto* st = pipe->add_stages();
      st->set_tp_degree(tp);
      st->set_cp_degree(cp);
      st->set_layer_begin(8 * s);
      st->set_layer_end(8 * s + 8);
      for (uint32_t c = 0; c < cp; ++c) {
        for (uint32_t k = 0; k < tp; ++k) st->add_devices(((s * dp + p) * cp + c) * tp + k);
      }
    }
  }
  return plan;
}

// experiments/fold/hetero-16384.yaml: 1,024 nodes of 8 H100s and 1,024 of 8 A100s (80 GB), 400 Gb/s RoCE per
// GPU, pods of 384 nodes at 1:7.
models::Cluster HeteroCluster() {
  proto::Cluster c;
  const std::string yaml =
      "name: hetero-16384\nnodes:\n"
      "  - {name: h, count: 1024, gpus: {type: h100, count: 8}, nic: {kind: roce, bandwidth_gbps: 400, attachment: per_gpu, latency_us: 3}}\n"
      "  - {name: a, count: 1024, gpus: {type: a100-80gb, count: 8}, nic: {kind: roce, bandwidth_gbps: 400, attachment: per_gpu, latency_us: 3}}\n"
      "network: {pods: {nodes_per_pod: 384, oversubscription: 7}, switch_latency_us: 2}\n";
  Status s = models::ParseYaml(yaml, "bench-cluster", &c);
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  return std::move(models::Cluster::Build(c, "bench-cluster")).value();
}

// experiments/fold/hetero-16384-llama3-70b.yaml: 128 H100 pipelines of TP 8 × PP 8 and 128 A100 pipelines of
// TP 4 × PP 16 (two stages per node), 8 micro-batches each, ZeRO-1: a plan that does not fold.
proto::Plan HeteroPlan(const models::TransformerModel& m) {
  proto::Plan plan;
  plan.set_name("hetero-16384-llama3-70b");
  plan.set_zero_stage(1);
  plan.set_sequence_parallel(true);
  const auto h = models::UniformBlocksSplit(m, 8);
  const auto a = models::UniformBlocksSplit(m, 16);
  for (uint32_t p = 0; p < 128; ++p) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(8);
    for (uint32_t s = 0; s < 8; ++s) {
      auto* st = pipe->add_stages();
      st->set_tp_degree(8);
      st->set_layer_begin((*h)[s].first);
      st->set_layer_end((*h)[s].second);
      for (uint32_t k = 0; k < 8; ++k) st->add_devices(8 * (s * 128 + p) + k);
    }
  }
  for (uint32_t q = 0; q < 128; ++q) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(8);
    for (uint32_t s = 0; s < 16; ++s) {
      auto* st = pipe->add_stages();
      st->set_tp_degree(4);
      st->set_layer_begin((*a)[s].first);
      st->set_layer_end((*a)[s].second);
      for (uint32_t k = 0; k < 4; ++k) st->add_devices(8 * (1024 + (s / 2) * 128 + q) + 4 * (s % 2) + k);
    }
  }
  return plan;
}

struct Outcome {
  double wall_s = 0;
  double iteration_s = 0;
  uint32_t played = 0;  // devices played by an actor (fewer than the plan's when folded)
  uint32_t scaled_links = 0;  // links standing for folded copies of pipeline transfers
};

Outcome Run(const proto::Plan& plan, const models::Cluster& cluster, const models::TransformerModel& model,
            uint32_t seq_len, sim::Fidelity fid, bool fold = true) {
  proto::Training t;
  uint32_t batch = 0;
  for (const auto& p : plan.pipelines()) batch += p.micro_batch_size() * p.num_micro_batches();
  t.set_global_batch_size(batch);
  t.set_seq_len(seq_len);
  t.set_recompute(proto::RECOMPUTE_SELECTIVE);
  auto tr = models::ResolveTraining(t, model, "bench");
  models::PlanContext ctx{cluster, model, *tr};
  const Status v = models::ValidatePlanStructure(plan, ctx, plan.name());
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", v.message().c_str());
    return {};
  }
  sim::SimOptions opt;
  opt.fidelity = fid;
  opt.fold = fold;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = sim::SimulateIteration(plan, ctx, opt);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    return {};
  }
  return {wall, r->report.iteration_time_s(), r->played_devices, r->scaled_links};
}

double ChildPeakGib() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);
}

void Line(const std::string& name, double v, const char* unit) { std::printf("%s %.6g %s\n", name.c_str(), v, unit); }

// wall, iteration and played devices of one run, and its error against a reference iteration (if any).
void Lines(const std::string& name, const Outcome& o, double reference_s = 0) {
  Line(name + ".wall", o.wall_s, "s");
  Line(name + ".iteration", o.iteration_s, "s");
  Line(name + ".played_devices", o.played, "devices");
  if (o.scaled_links > 0) Line(name + ".scaled_links", o.scaled_links, "links");
  if (reference_s > 0) Line(name + ".error_vs_unfolded", 100 * (o.iteration_s - reference_s) / reference_s, "%");
}

// The full-fidelity reference of a run and the run's error against it.
void FullLines(const std::string& name, const Outcome& o, const Outcome& reference) {
  Line(name + ".full.wall", reference.wall_s, "s");
  Line(name + ".full.iteration", reference.iteration_s, "s");
  Line(name + ".error_vs_full", 100 * (o.iteration_s - reference.iteration_s) / reference.iteration_s, "%");
}

// Which cases run: `want` (the filter matches or is empty), `named` (the filter names them: cases of
// minutes), and the references asked for (`--nofold`, `--full`).
struct Selection {
  std::function<bool(const std::string&)> want, named;
  bool nofold = false, full_reference = false;
};

// Llama 3 405B on the 16,384-GPU cluster: 1F1B, interleaved, context parallel (16) and the 2,304-GPU
// interleaved plan.
void Llama3Cases(const Selection& sel) {
  const auto& want = sel.want;
  const auto& named = sel.named;
  const bool nofold = sel.nofold, full_reference = sel.full_reference;
  if (want("sim.llama3-16384")) {
    auto cluster = std::move(models::LoadCluster("llama3-16384")).value();
    auto model = std::move(models::LoadModel("llama3-405b")).value();
    const auto plan = UniformPlan(model, 8, 16, 128, 1, 16, 1);
    const Outcome o = Run(plan, cluster, model, 8192, sim::Fidelity::Fast());
    Lines("sim.llama3-16384.llama3-405b.tp8pp16dp128.fast", o);
    Line("sim.llama3-16384.peak_memory", ChildPeakGib(), "GiB");
    if (nofold) {
      const Outcome b = Run(plan, cluster, model, 8192, *sim::ParseFidelity("balanced"));
      const Outcome u = Run(plan, cluster, model, 8192, *sim::ParseFidelity("balanced"), false);
      Lines("sim.llama3-16384.llama3-405b.tp8pp16dp128.balanced", b, u.iteration_s);
      Lines("sim.llama3-16384.llama3-405b.tp8pp16dp128.balanced.nofold", u);
    }
  }
  if (named("sim.llama3-16384-interleaved")) {
    // The same layout with Megatron-LM's interleaved schedule (4 virtual stages, as
    // experiments/llama3/llama3-405b-16384-interleaved.yaml) at the default fidelity.
    auto cluster = std::move(models::LoadCluster("llama3-16384")).value();
    auto model = std::move(models::LoadModel("llama3-405b")).value();
    auto plan = UniformPlan(model, 8, 16, 128, 1, 16, 1);
    plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
    plan.set_virtual_stages(4);
    Outcome reference;
    if (full_reference) reference = Run(plan, cluster, model, 8192, sim::Fidelity::Full());
    for (const char* level : {"balanced", "fast"}) {
      const Outcome o = Run(plan, cluster, model, 8192, *sim::ParseFidelity(level));
      const std::string name = std::string("sim.llama3-16384-interleaved.llama3-405b.tp8pp16dp128.v4.") + level;
      if (nofold) {
        const Outcome u = Run(plan, cluster, model, 8192, *sim::ParseFidelity(level), false);
        Lines(name, o, u.iteration_s);
        Lines(name + ".nofold", u);
      } else {
        Lines(name, o);
      }
      if (full_reference) FullLines(name, o, reference);
    }
  }
  // Folding every plan kind (docs/simulator.md): context parallelism, a deep interleaved schedule at 2,304
  // GPUs, and a heterogeneous plan that does not fold. `--nofold` adds the unfolded references of the
  // foldable ones (for CP at DP 1: 2,048 GPUs, the 16,384-GPU plan takes minutes unfolded).
  if (named("sim.llama3-cp16")) {
    auto cluster = std::move(models::LoadCluster("llama3-16384")).value();
    auto model = std::move(models::LoadModel("llama3-405b")).value();
    for (const uint32_t dp : {8u, 1u}) {
      const auto plan = Llama3CpPlan(16, dp);
      const std::string name = "sim.llama3-cp16.llama3-405b.tp8cp16pp16dp" + std::to_string(dp) + ".v4.balanced";
      const Outcome o = Run(plan, cluster, model, 131072, sim::Fidelity::Balanced());
      if (nofold && dp == 1) {
        const Outcome u = Run(plan, cluster, model, 131072, sim::Fidelity::Balanced(), false);
        Lines(name, o, u.iteration_s);
        Lines(name + ".nofold", u);
      } else {
        Lines(name, o);
      }
    }
  }
  if (named("sim.llama3-2304-interleaved")) {
    // experiments/llama3/llama3-405b-2304-interleaved.yaml: TP 8, PP 16, DP 18, v = 4, 16 micro-batches.
    auto cluster = std::move(models::LoadCluster("llama3-16384")).value();
    auto model = std::move(models::LoadModel("llama3-405b")).value();
    auto plan = UniformPlan(model, 8, 16, 18, 1, 16, 2);
    plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
    plan.set_virtual_stages(4);
    const std::string name = "sim.llama3-2304-interleaved.llama3-405b.tp8pp16dp18.v4.balanced";
    const Outcome o = Run(plan, cluster, model, 8192, sim::Fidelity::Balanced());
    if (nofold) {
      const Outcome u = Run(plan, cluster, model, 8192, sim::Fidelity::Balanced(), false);
      Lines(name, o, u.iteration_s);
      Lines(name + ".nofold", u);
    } else {
      Lines(name, o);
    }
  }
}

// Megatron-LM SC'21 Table 1, every row (A100s, micro-batch 1, TP/PP degrees, batch and GPUs as published;
// the interleaved schedule with 2 virtual stages where a stage's blocks split evenly, else 1F1B), balanced
// fidelity. `bench_sim sim.megatron-table1` runs them all.
void MegatronTable1(const Selection& sel) {
  const auto& named = sel.named;
  const bool nofold = sel.nofold, full_reference = sel.full_reference;
  struct Row {
    const char* name;
    uint32_t layers, hidden, heads, tp, pp, gpus, batch;
  };
  const Row rows[] = {{"gpt-1.7b", 24, 2304, 24, 1, 1, 32, 512},      {"gpt-3.6b", 30, 3072, 32, 2, 1, 64, 512},
                      {"gpt-7.5b", 36, 4096, 32, 4, 1, 128, 512},     {"gpt-18b", 40, 6144, 48, 8, 1, 256, 1024},
                      {"gpt-39b", 48, 8192, 64, 8, 2, 512, 1536},     {"gpt-76b", 60, 10240, 80, 8, 4, 1024, 1792},
                      {"gpt-145b", 80, 12288, 96, 8, 8, 1536, 2304},  {"gpt-310b", 96, 16384, 128, 8, 16, 1920, 2160},
                      {"gpt-530b", 105, 20480, 128, 8, 35, 2520, 2520}, {"gpt-1t", 128, 25600, 160, 8, 64, 3072, 3072}};
  for (const Row& row : rows) {
    const std::string base = std::string("sim.megatron-table1.") + row.name;
    const bool is_1t = std::string(row.name) == "gpt-1t";
    if (!named(base) && !(is_1t && named("sim.megatron1t"))) continue;
    const uint32_t dp = row.gpus / (row.tp * row.pp);
    const auto cluster = A100Cluster(row.gpus / 8);
    const auto model = Gpt(row.name, row.layers, row.hidden, row.heads);
    auto plan = UniformPlan(model, row.tp, row.pp, dp, 1, row.batch / dp, 1);
    const bool interleave = row.pp > 1 && (row.layers / row.pp) % 2 == 0 && row.layers % row.pp == 0;
    if (interleave) {
      plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
      plan.set_virtual_stages(2);
    }
    const std::string name = (is_1t ? std::string("sim.megatron1t.gpt-1t") : base) + ".tp" + std::to_string(row.tp) +
                             "pp" + std::to_string(row.pp) + "dp" + std::to_string(dp) + ".m" +
                             std::to_string(row.batch / dp) +
                             (interleave ? ".interleaved" : ".1f1b") + ".balanced";
    const Outcome o = Run(plan, cluster, model, 2048, sim::Fidelity::Balanced());
    if (nofold) {
      const Outcome u = Run(plan, cluster, model, 2048, sim::Fidelity::Balanced(), false);
      Lines(name, o, u.iteration_s);
      Lines(name + ".nofold", u);
    } else {
      Lines(name, o);
    }
    if (full_reference) FullLines(name, o, Run(plan, cluster, model, 2048, sim::Fidelity::Full()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  auto want = [&](const std::string& name) { return filter.empty() || name.find(filter) != std::string::npos; };
  // Cases that take minutes: only when the filter names them.
  auto named = [&](const std::string& name) { return !filter.empty() && name.find(filter) != std::string::npos; };
  // `bench_sim FILTER --nofold`: the large cases also run unfolded, as the reference of the folding error.
  const bool nofold = argc > 2 && std::string(argv[2]) == "--nofold";
  // `bench_sim FILTER --full`: the Megatron-LM Table 1 and Llama 3 cases also run at full fidelity (every
  // layer's TP collective and every ring step played, nothing folded), the reference of the default level.
  const bool full_reference = argc > 2 && std::string(argv[2]) == "--full";
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  // What is bundled (README's counts): GPU types, clusters, models.
  if (want("catalog.")) {
    Line("catalog.gpu_types", static_cast<double>(models::GpuCatalog::Bundled().gpus().size()), "types");
    Line("catalog.clusters", static_cast<double>(models::BundledNames(models::SpecKind::kCluster).size()), "specs");
    Line("catalog.models", static_cast<double>(models::BundledNames(models::SpecKind::kModel).size()), "specs");
  }

  if (want("sim.moe")) {
    // Mixtures of experts (docs/moe.md): DeepSeek-V3 on 1,024 and 2,048 H100s (target: <= 10 s at 2,048),
    // fast fidelity, folded; `--nofold` adds the 1,024-GPU plan played unfolded (minutes).
    auto model = std::move(models::LoadModel("deepseek-v3")).value();
    for (const uint32_t dp : {64u, 128u}) {
      const auto cluster = H100Cluster(2 * dp, 2 * dp, 1);
      const auto plan = DeepSeekPlan(dp);
      const std::string name = "sim.moe.deepseek-v3-" + std::to_string(16 * dp) + ".tp2pp8v4ep64.fast";
      const Outcome o = Run(plan, cluster, model, 4096, sim::Fidelity::Fast());
      if (nofold && dp == 64) {
        const Outcome u = Run(plan, cluster, model, 4096, sim::Fidelity::Fast(), false);
        Lines(name, o, u.iteration_s);
        Lines(name + ".nofold", u);
      } else {
        Lines(name, o);
      }
    }
  }
  if (want("sim.hexiscale240")) {
    auto cluster = std::move(models::LoadCluster("hexiscale-240")).value();
    auto model = std::move(models::LoadModel("llama2-70b")).value();
    const auto plan = UniformPlan(model, 4, 10, 6, 1, 32, 1);  // 240 GPUs, 10 stages, 32 micro-batches
    for (const char* level : {"balanced", "fast"}) {
      const auto o = Run(plan, cluster, model, 4096, *sim::ParseFidelity(level));
      Line(std::string("sim.hexiscale240.llama2-70b.tp4pp10dp6.m32.") + level + ".wall", o.wall_s, "s");
      Line(std::string("sim.hexiscale240.llama2-70b.tp4pp10dp6.m32.") + level + ".iteration", o.iteration_s, "s");
    }
  }
  if (want("sim.fidelity1024")) {
    // 1,024 H100s in pods of 32 nodes with 1:4 oversubscription (so that contention matters), Llama-3 70B,
    // TP 8, PP 4, DP 32, 16 micro-batches: each level against full detail.
    const auto cluster = H100Cluster(128, 32, 4);
    auto model = std::move(models::LoadModel("llama3-70b")).value();
    const auto plan = UniformPlan(model, 8, 4, 32, 1, 16, 1);
    const Outcome full = Run(plan, cluster, model, 8192, sim::Fidelity::Full());
    Line("sim.fidelity1024.full.wall", full.wall_s, "s");
    Line("sim.fidelity1024.full.iteration", full.iteration_s, "s");
    for (const char* level : {"balanced", "fast"}) {
      const Outcome o = Run(plan, cluster, model, 8192, *sim::ParseFidelity(level));
      Line(std::string("sim.fidelity1024.") + level + ".wall", o.wall_s, "s");
      Line(std::string("sim.fidelity1024.") + level + ".iteration", o.iteration_s, "s");
      Line(std::string("sim.fidelity1024.") + level + ".error_vs_full",
           full.iteration_s > 0 ? 100 * (o.iteration_s - full.iteration_s) / full.iteration_s : 0, "%");
    }
  }
  if (want("sim.h100x4096")) {
    const auto cluster = H100Cluster(512, 384, 7);
    auto model = std::move(models::LoadModel("llama3-70b")).value();
    const auto plan = UniformPlan(model, 8, 8, 64, 1, 16, 1);
    for (const char* level : {"balanced", "fast"}) {
      const Outcome o = Run(plan, cluster, model, 8192, *sim::ParseFidelity(level));
      Line(std::string("sim.h100x4096.llama3-70b.tp8pp8dp64.") + level + ".wall", o.wall_s, "s");
      Line(std::string("sim.h100x4096.llama3-70b.tp8pp8dp64.") + level + ".iteration", o.iteration_s, "s");
    }
  }
  const Selection sel{want, named, nofold, full_reference};
  Llama3Cases(sel);
  if (named("sim.hetero-16384")) {
    const auto cluster = HeteroCluster();
    auto model = std::move(models::LoadModel("llama3-70b")).value();
    for (const char* level : {"balanced", "fast"}) {
      const Outcome o = Run(HeteroPlan(model), cluster, model, 8192, *sim::ParseFidelity(level));
      Lines(std::string("sim.hetero-16384.llama3-70b.h100-tp8pp8x128.a100-tp4pp16x128.") + level, o);
    }
  }
  MegatronTable1(sel);
  return 0;
}
