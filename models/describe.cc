#include "models/describe.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "models/communicator.h"
#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

// A plain text table: columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render(const std::string& indent) const {
    std::vector<size_t> w;
    for (const auto& r : rows_) {
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], Width(r[i]));
      }
    }
    std::string out;
    for (const auto& r : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - Width(r[i]) + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  // Display width of UTF-8 text (counts code points, not bytes).
  static size_t Width(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
  std::vector<std::vector<std::string>> rows_;
};

std::string LayerRangeText(const TransformerModel& m, uint32_t begin, uint32_t end) {
  const bool emb = begin == 0, head = end == m.num_layers();
  const uint32_t blocks = end - begin - (emb ? 1 : 0) - (head ? 1 : 0);
  std::string s = std::to_string(begin) + "-" + std::to_string(end - 1) + " (";
  if (emb) s += "emb+";
  s += std::to_string(blocks);
  if (head) s += "+head";
  return s + ")";
}

}  // namespace

std::string FormatDeviceList(std::vector<uint32_t> d) {
  std::sort(d.begin(), d.end());
  // A long arithmetic progression (the DP peers of a big plan) reads best as "0-1016 step 8".
  if (d.size() > 4 && d[1] - d[0] > 1) {
    const uint32_t step = d[1] - d[0];
    bool progression = true;
    for (size_t i = 2; i < d.size() && progression; ++i) progression = d[i] - d[i - 1] == step;
    if (progression) return std::to_string(d.front()) + "-" + std::to_string(d.back()) + " step " + std::to_string(step);
  }
  std::string out;
  size_t runs = 0;
  for (size_t i = 0; i < d.size();) {
    size_t j = i;
    while (j + 1 < d.size() && d[j + 1] == d[j] + 1) ++j;
    if (runs++ == 16) {
      out += ",… (" + std::to_string(d.size()) + " devices)";
      break;
    }
    if (!out.empty()) out += ",";
    out += std::to_string(d[i]);
    if (j > i) out += "-" + std::to_string(d[j]);
    i = j + 1;
  }
  return out;
}

std::string DescribeGpu(const GpuSpec& g) {
  std::ostringstream o;
  char line[256];
  o << "GPU type " << g.name << " (" << g.vendor << ", " << g.form_factor << ")";
  if (!g.aliases.empty()) {
    o << "; also";
    for (const auto& a : g.aliases) o << " " << a;
  }
  o << "\n  dense tensor peaks (TFLOPS; 0 = no such mode):\n";
  const std::pair<const char*, double> peaks[] = {
      {"bf16", g.peak_bf16_tflops}, {"fp16", g.peak_fp16_tflops}, {"tf32", g.peak_tf32_tflops},
      {"fp32", g.peak_fp32_tflops}, {"fp8", g.peak_fp8_tflops},   {"fp6", g.PeakFp6Tflops()},
      {"fp4", g.PeakFp4Tflops()}};
  for (const auto& [dtype, peak] : peaks) {
    std::snprintf(line, sizeof line, "    %-6s %10.1f\n", dtype, peak);
    o << line;
  }
  o << "  block-scaled formats run natively:";
  if (g.block_scaled.empty()) o << " none";
  for (BlockScaledFormat f : g.block_scaled) {
    std::snprintf(line, sizeof line, " %s (%.1f)", BlockScaledFormatName(f), g.PeakBlockScaledTflops(f));
    o << line;
  }
  o << "\n";
  std::snprintf(line, sizeof line, "  memory          %.0f GiB at %.0f GB/s\n", g.memory_gib, g.hbm_bandwidth_gbyte_s);
  o << line;
  std::snprintf(line, sizeof line, "  scale-up        %s, %.1f GB/s per GPU one direction\n", g.scale_up.c_str(),
                g.scale_up_bandwidth_gbyte_s);
  o << line;
  std::snprintf(line, sizeof line, "  host link       PCIe Gen%d, %.0f GB/s one direction\n", g.pcie_gen,
                g.pcie_bandwidth_gbyte_s);
  o << line;
  o << "  SMs / CUs       " << (g.sm_count > 0 ? std::to_string(g.sm_count) : "none (no wave quantisation)") << "\n";
  o << "  power           " << (g.tdp_w > 0 ? std::to_string(static_cast<int>(g.tdp_w)) + " W" : "not recorded")
    << "\n";
  o << "  source          " << g.source << "\n";
  return o.str();
}

std::string DescribeCluster(const Cluster& c) {
  std::ostringstream o;
  o << "cluster " << c.name() << ": " << c.Summary() << "\n";
  if (!c.spec().description().empty()) o << "  " << c.spec().description() << "\n";
  Table t({"nodes", "devices", "gpu", "memory", "peak", "fabric", "nic", "zone"});
  const auto& nodes = c.nodes();
  for (size_t i = 0; i < nodes.size();) {
    size_t j = i;
    while (j + 1 < nodes.size() && nodes[j + 1].group == nodes[i].group) ++j;
    const auto& n = nodes[i];
    const uint32_t last_dev = nodes[j].first_device + nodes[j].num_gpus - 1;
    std::string fabric = EnumValueYamlName(proto::IntraNodeFabric::Kind_descriptor()->FindValueByNumber(n.fabric.kind())) +
                         " " + Fmt("%g", n.fabric.bandwidth_gbyte_s()) + " GB/s";
    std::string nic = "-";
    if (n.has_nic) {
      nic = std::to_string(n.nic.count()) + "× " +
            EnumValueYamlName(proto::Nic::Kind_descriptor()->FindValueByNumber(n.nic.kind())) + " " +
            Fmt("%g", n.nic.bandwidth_gbps()) + " Gb/s";
    }
    t.Add({j > i ? nodes[i].name + " .. " + nodes[j].name : n.name,
           std::to_string(n.first_device) + "-" + std::to_string(last_dev), std::to_string(n.num_gpus) + "× " + n.gpu->name,
           Fmt("%g GiB", n.gpu->memory_gib),
           n.gpu->peak_bf16_tflops > 0 ? Fmt("%g TFLOPS", n.gpu->peak_bf16_tflops)
                                       : Fmt("%g TFLOPS fp16", n.gpu->peak_fp16_tflops),
           fabric, nic,
           n.zone.empty() ? "-" : n.zone});
    i = j + 1;
  }
  o << t.Render("  ");
  const auto& net = c.spec().network();
  o << "  network: ";
  if (net.has_fat_tree()) {
    o << "two-level fat-tree, " << net.fat_tree().nodes_per_leaf() << " nodes per leaf, 1:"
      << Fmt("%g", std::max(1.0, net.fat_tree().oversubscription())) << " oversubscription";
  } else if (net.has_pods()) {
    o << "pods of " << net.pods().nodes_per_pod() << " nodes (full bisection), 1:"
      << Fmt("%g", std::max(1.0, net.pods().oversubscription())) << " above";
  } else {
    o << "single non-blocking switch";
  }
  o << "\n";
  for (const auto& s : c.spec().storage()) {
    o << "  storage " << s.name() << ": "
      << EnumValueYamlName(proto::StorageEndpoint::Kind_descriptor()->FindValueByNumber(s.kind())) << ", read "
      << Fmt("%g", s.read_bandwidth_gbyte_s()) << " GB/s\n";
  }
  return o.str();
}

std::string DescribeModel(const TransformerModel& m) {
  const auto& s = m.spec();
  std::ostringstream o;
  o << "model " << m.name() << ": " << Fmt("%.3f", m.TotalParams() / 1e9) << " B parameters";
  if (s.published_params_billion() > 0) o << " (published " << Fmt("%g", s.published_params_billion()) << " B)";
  o << "\n  " << s.num_layers() << " layers, hidden " << s.hidden_size() << ", ffn " << s.ffn_hidden_size() << ", "
    << s.num_attention_heads() << " heads (" << m.kv_heads() << " kv), vocab " << s.vocab_size() << ", max seq "
    << s.max_seq_len() << ", " << EnumValueYamlName(proto::Model::Mlp_descriptor()->FindValueByNumber(s.mlp())) << ", "
    << EnumValueYamlName(proto::Model::Norm_descriptor()->FindValueByNumber(s.norm())) << "\n";
  if (s.has_moe()) {
    const auto& e = s.moe();
    const bool excl = s.published_active_excludes_embedding();
    o << "  active per token: " << Fmt("%.3f", m.TotalActiveParams(true) / 1e9) << " B ("
      << Fmt("%.3f", m.TotalActiveParams(false) / 1e9) << " B without the embedding table)";
    if (s.published_active_params_billion() > 0) {
      o << "; published " << Fmt("%g", s.published_active_params_billion()) << " B"
        << (excl ? " without the embedding" : " with the embedding");
    }
    uint32_t moe_layers = 0;
    for (uint32_t l = 1; l <= s.num_layers(); ++l) moe_layers += m.IsMoe(l) ? 1 : 0;
    o << "\n  MoE: " << moe_layers << " of " << s.num_layers() << " blocks, " << e.num_experts() << " experts (top-"
      << e.top_k() << ", width " << e.expert_ffn_hidden_size() << ")";
    if (e.num_shared_experts() > 0) o << " + " << e.num_shared_experts() << " shared";
    o << ", router " << (e.router() == proto::MoE::ROUTER_SIGMOID ? "sigmoid" : "softmax");
    if (e.mtp_modules() > 0) {
      o << "; " << e.mtp_modules() << " multi-token-prediction module(s): +" << Fmt("%.3f", m.MtpParams() / 1e9)
        << " B";
    }
    o << "\n";
  }
  if (s.has_mla()) {
    const auto& a = s.mla();
    o << "  attention: MLA (q latent " << a.q_lora_rank() << ", kv latent " << a.kv_lora_rank() << ", head dims "
      << a.qk_nope_head_dim() << "+" << a.qk_rope_head_dim() << " / v " << a.v_head_dim() << ")\n";
  } else if (s.head_dim() > 0 || s.sliding_window() > 0) {
    o << "  attention: head dim " << m.head_dim();
    if (s.sliding_window() > 0) {
      o << ", " << s.sliding_window() << "-token window in 1 of every " << std::max(1u, s.sliding_window_every())
        << " blocks";
    }
    if (s.attention_sinks()) o << ", sinks";
    o << "\n";
  }
  return o.str();
}

std::string DescribeTraining(const proto::Training& t) {
  std::ostringstream o;
  o << "global batch " << t.global_batch_size() << " × seq " << t.seq_len() << ", "
    << EnumValueYamlName(proto::DType_descriptor()->FindValueByNumber(t.dtype())) << ", "
    << EnumValueYamlName(proto::Training::Optimizer_descriptor()->FindValueByNumber(t.optimizer()))
    << ", recompute " << EnumValueYamlName(proto::Recompute_descriptor()->FindValueByNumber(t.recompute()));
  return o.str();
}

std::string DescribePlan(const proto::Plan& plan, const PlanContext& ctx) {
  std::ostringstream o;
  const auto mem = EstimateMemory(plan, ctx);
  std::map<std::pair<uint32_t, uint32_t>, std::vector<const DeviceMemory*>> by_stage;
  for (const auto& dm : mem) by_stage[{dm.pipeline, dm.stage}].push_back(&dm);
  o << "plan" << (plan.name().empty() ? "" : " " + plan.name()) << (plan.planner().empty() ? "" : " (by " + plan.planner() + ")")
    << ": " << plan.pipelines_size() << " pipeline" << (plan.pipelines_size() == 1 ? "" : "s") << " on " << ctx.cluster.name()
    << " (" << ctx.cluster.Summary() << ")\n";
  o << "  model " << ctx.model.name() << " (" << Fmt("%.2f", ctx.model.TotalParams() / 1e9) << " B, "
    << ctx.model.num_layers() << " plan layers: embedding, " << ctx.model.num_blocks() << " blocks, head)\n";
  o << "  training: " << DescribeTraining(ctx.training) << "\n";
  o << "  schedule " << EnumValueYamlName(proto::Plan::Schedule_descriptor()->FindValueByNumber(EffectiveSchedule(plan)))
    << ", ZeRO-" << plan.zero_stage() << ", recompute "
    << EnumValueYamlName(proto::Recompute_descriptor()->FindValueByNumber(EffectiveRecompute(plan, ctx.training)))
    << (plan.sequence_parallel() ? ", sequence parallel" : "")
    << (OffloadsOptimizer(plan) ? ", CPU offload " + OffloadName(EffectiveOffload(plan)) : "") << "\n";
  bool any_oom = false;
  // Pipelines of the same shape (micro-batching, stages, degrees, layers, splits) print one table.
  auto shape = [&](int p) {
    const auto& pipe = plan.pipelines(p);
    std::string key = std::to_string(pipe.micro_batch_size()) + "x" + std::to_string(pipe.num_micro_batches());
    for (const auto& st : pipe.stages()) {
      key += "|" + std::to_string(st.devices_size()) + "," + std::to_string(TpDegree(st)) + "," +
             std::to_string(CpDegree(st)) + "," + std::to_string(UlyssesDegree(st)) + "," +
             std::to_string(st.layer_begin()) + "-" + std::to_string(st.layer_end());
      for (uint32_t b : st.micro_batch_split()) key += "," + std::to_string(b);
      for (uint32_t d : st.devices()) key += ":" + ctx.cluster.device(d).gpu->name;
    }
    return key;
  };
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    int last = p;
    while (last + 1 < plan.pipelines_size() && shape(last + 1) == shape(p)) ++last;
    if (last > p) {
      bool oom = false;
      for (const auto& dm : mem) {
        oom |= dm.oom() && dm.pipeline > static_cast<uint32_t>(p) && dm.pipeline <= static_cast<uint32_t>(last);
      }
      any_oom |= oom;
      o << "\npipelines " << p << "-" << last << " (" << last - p + 1 << " of the same shape; the table shows pipeline "
        << p << ")";
    } else {
      o << "\npipeline " << p;
    }
    o << ": micro-batch " << pipe.micro_batch_size() << " × " << pipe.num_micro_batches()
      << " micro-batches = " << pipe.micro_batch_size() * pipe.num_micro_batches() << " sequences\n";
    Table t({"stage", "layers", "devices", "gpus", "TP×DP", "split", "memory GiB (max / capacity)"});
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      std::vector<uint32_t> devs(st.devices().begin(), st.devices().end());
      std::map<std::string, int> types;
      for (uint32_t d : devs) types[ctx.cluster.device(d).gpu->name]++;
      std::string gpus;
      for (const auto& [name, n] : types) gpus += (gpus.empty() ? "" : "+") + std::to_string(n) + "×" + name;
      std::string split;
      for (uint32_t b : MicroBatchSplit(st, pipe.micro_batch_size())) split += (split.empty() ? "" : "/") + std::to_string(b);
      double worst = 0, cap = 0;
      bool oom = false;
      for (const auto* dm : by_stage[{static_cast<uint32_t>(p), static_cast<uint32_t>(s)}]) {
        if (dm->total_gib / dm->capacity_gib > (cap > 0 ? worst / cap : 0)) {
          worst = dm->total_gib;
          cap = dm->capacity_gib;
        }
        oom |= dm->oom();
      }
      any_oom |= oom;
      // Interleaved 1F1B: the stage's model chunks, where Megatron-LM places them (StageChunks).
      std::string layers;
      for (const LayerRange& c : StageChunks(plan, pipe, s, ctx.model)) {
        layers += (layers.empty() ? "" : ", ") + LayerRangeText(ctx.model, c.begin, c.end);
      }
      t.Add({std::to_string(s), layers, FormatDeviceList(devs), gpus,
             std::to_string(TpDegree(st)) + "×" + std::to_string(DpDegree(st)) +
                 (CpDegree(st) > 1 ? " cp" + std::to_string(CpDegree(st)) : "") +
                 (UlyssesDegree(st) > 1 ? " ulysses" + std::to_string(UlyssesDegree(st)) : ""),
             split,
             Fmt("%.1f", worst) + " / " + Fmt("%.0f", cap) + (oom ? "  OUT OF MEMORY" : "")});
    }
    o << t.Render("  ");
    p = last;
  }
  const auto groups = DeriveGradSyncGroups(plan, ctx.model);
  o << "\ngradient sync: " << groups.size() << " group" << (groups.size() == 1 ? "" : "s");
  size_t shown = 0;
  for (const auto& g : groups) {
    if (shown++ == 8) {
      o << "\n  …";
      break;
    }
    o << "\n  layers " << g.layer_begin << "-" << g.layer_end - 1;
    if (g.num_chunks > 1) o << " shard " << g.chunk << "/" << g.num_chunks;
    o << ": devices " << FormatDeviceList(g.devices);
  }
  // The communicator's paths between the node groups the plan uses (HetHub §3.1), when it uses several.
  std::set<uint32_t> used_groups;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) {
        if (d < ctx.cluster.num_devices()) used_groups.insert(ctx.cluster.node(ctx.cluster.device(d).node).group);
      }
    }
  }
  if (used_groups.size() > 1) {
    const Communicator comm(ctx.cluster, plan.comm());
    o << "\ncommunicator (" << EnumValueYamlName(proto::CommOptions::Communicator_descriptor()->FindValueByNumber(
                                  CommunicatorMode(plan.comm())))
      << "):";
    for (uint32_t a : used_groups) {
      for (uint32_t b : used_groups) {
        if (b <= a) continue;
        o << "\n  " << ctx.cluster.spec().nodes(static_cast<int>(a)).name() << " <-> "
          << ctx.cluster.spec().nodes(static_cast<int>(b)).name() << ": "
          << (comm.GroupsStaged(a, b) ? "CPU path" : "GPU RDMA") << " ("
          << comm.Reason(a, b) << ")";
      }
    }
  }
  // CPU offload: the offloaded shards in each node's host memory.
  const auto host = HostMemoryByNode(mem, ctx.cluster);
  if (!host.empty()) o << "\nhost memory (offload: " << OffloadName(EffectiveOffload(plan)) << "):";
  for (const auto& hm : host) {
    any_oom |= hm.oom();
    o << "\n  " << ctx.cluster.node(hm.node).name << ": " << Fmt("%.1f", hm.need_gib) << " GiB"
      << (hm.capacity_gib > 0 ? " of " + Fmt("%.0f", hm.capacity_gib) + (hm.oom() ? "  OUT OF MEMORY" : "")
                              : " (the cluster spec gives no host_memory_gib: assumed enough)");
  }
  // The fullest device's memory, term by term (models/plan.h EstimateMemory; docs/simulator.md "Memory").
  const DeviceMemory* fullest = nullptr;
  for (const auto& dm : mem) {
    if (fullest == nullptr || dm.total_gib / dm.capacity_gib > fullest->total_gib / fullest->capacity_gib) fullest = &dm;
  }
  if (fullest != nullptr) {
    o << "\nfullest device " << fullest->device << " (pipeline " << fullest->pipeline << ", stage " << fullest->stage
      << "): " << Fmt("%.2f", fullest->total_gib) << " of " << Fmt("%.0f", fullest->capacity_gib) << " GiB = weights "
      << Fmt("%.2f", fullest->params_gib) << " + gradients " << Fmt("%.2f", fullest->grads_gib) << " + optimizer "
      << Fmt("%.2f", fullest->optimizer_gib) << " + activations " << Fmt("%.2f", fullest->activations_gib)
      << " + allocator " << Fmt("%.2f", fullest->allocator_gib) << " + workspace " << Fmt("%.2f", fullest->workspace_gib)
      << " + CUDA context " << Fmt("%.2f", fullest->context_gib) << " + NCCL " << Fmt("%.2f", fullest->nccl_gib) << " ("
      << fullest->nccl_communicators << " communicator" << (fullest->nccl_communicators == 1 ? "" : "s") << ")";
  }
  o << "\n" << (any_oom ? "memory: some devices are OUT OF MEMORY\n" : "memory: fits on every device\n");
  return o.str();
}

}  // namespace hetsim::models
