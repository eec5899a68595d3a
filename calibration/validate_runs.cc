// Validation against measured runs (calibration/validate_runs.h): reading the runs files, turning each run into a
// Megatron-LM layout on the cluster its columns describe, simulating it and tallying the errors.
//
// Named-layout columns: gpus, global_batch, micro_batch, hidden, heads, layers, seq_len, tp, dp, pp and
// iteration_ms, and optionally gpus_per_node (default: all on one node), nic_gbps (one InfiniBand NIC of that
// bandwidth per GPU; required with more than one node), nics_per_node (instead of one per GPU: that many NICs
// of nic_gbps shared by the node's GPUs), virtual_stages (Megatron-LM's interleaved 1F1B; default 1), gpu
// (default ValidationOptions::gpu), stack (the software stack the run was measured on: megatron-lm,
// megatron-deepspeed, ...; default megatron-lm), tp_backward (blocking: the backward's TP all-reduces block,
// as in Megatron-DeepSpeed and Megatron-LM before late 2021; async: behind the wgrad GEMMs, as in Megatron-LM
// since; default blocking for megatron-deepspeed runs, else async: comm.tp_backward_blocking), and any other
// column (kept for provenance, ignored). vTrain's positional layout is its Megatron-DeepSpeed runs. Each run
// is simulated with the calibration the one rule picks for its stack (models::StackCalibration: `default`'s
// chip values, the stack's host costs) unless the options name one for every run.
#include "calibration/validate_runs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "models/gpu_catalog.h"
#include "models/kernels.h"
#include "models/plan.h"
#include "models/training.h"
#include "planners/search.h"
#include "planners/symmetric.h"

namespace hetsim::calibration {
namespace {

Status CheckRun(const MeasuredRun& r, const std::string& where) {
  if (!(r.measured_ms > 0)) return Status::Invalid(where + ": iteration time must be > 0");
  const uint64_t product = uint64_t{r.tp} * r.dp * r.pp;
  if (product != r.gpus) {
    return Status::Invalid(where + ": TP × DP × PP = " + std::to_string(product) + " but #GPUs is " +
                           std::to_string(r.gpus));
  }
  // Every micro-batch is simulated: bounded before any work, as a plan's num_micro_batches is.
  const uint64_t per_replica = uint64_t{r.dp} * r.micro_batch;
  if (r.global_batch / per_replica > models::kMaxMicroBatches) {
    return Status::Invalid(where + ": global batch " + std::to_string(r.global_batch) + " over DP " +
                           std::to_string(r.dp) + " × micro batch " + std::to_string(r.micro_batch) + " is " +
                           std::to_string(r.global_batch / per_replica) + " micro-batches per pipeline; at most " +
                           std::to_string(models::kMaxMicroBatches) +
                           " are simulated (lower global_batch or raise micro_batch)");
  }
  if (r.gpus_per_node > 0 && r.gpus % r.gpus_per_node != 0) {
    return Status::Invalid(where + ": gpus (" + std::to_string(r.gpus) + ") is not a multiple of gpus_per_node (" +
                           std::to_string(r.gpus_per_node) + ")");
  }
  if (r.gpus_per_node > 0 && r.gpus_per_node < r.gpus && !(r.nic_gbps > 0)) {
    return Status::Invalid(where + ": the run spans " + std::to_string(r.gpus / r.gpus_per_node) +
                           " nodes; give nic_gbps (each GPU's NIC, Gb/s)");
  }
  if (r.nics_per_node > 64) {
    return Status::Invalid(where + ": nics_per_node must be at most 64, found " + std::to_string(r.nics_per_node));
  }
  return Status::Ok();
}

// vTrain's positional layout (11 numbers a row).
Result<MeasuredRun> PositionalRun(const std::vector<std::string>& cells, const std::string& where) {
  std::vector<double> v;
  for (const auto& cell : cells) {
    char* end = nullptr;
    const double x = std::strtod(cell.c_str(), &end);
    while (*end == ' ' || *end == '\t' || *end == '\r') ++end;
    if (end == cell.c_str() || *end != '\0' || !std::isfinite(x) || !(x > 0)) {
      // A unit ("0.37 s") is refused rather than read as milliseconds.
      return Status::Invalid(where + ": '" + cell +
                             "' is not a positive number (columns: #GPUs, global batch, micro batch, hidden size, attention "
                             "heads, #layers, sequence length, TP, DP, PP, iteration time ms; or name the columns "
                             "in a first line: experiments/validation/README.md)");
    }
    v.push_back(x);
  }
  if (v.size() != 11) {
    return Status::Invalid(where + ": expected 11 columns, found " + std::to_string(v.size()));
  }
  MeasuredRun r;
  uint32_t* fields[] = {&r.gpus, &r.global_batch, &r.micro_batch, &r.hidden, &r.heads,
                        &r.layers, &r.seq_len, &r.tp, &r.dp, &r.pp};
  for (int i = 0; i < 10; ++i) {
    if (v[i] < 1 || v[i] != std::floor(v[i]) || v[i] > 1e7) {
      return Status::Invalid(where + ": column " + std::to_string(i + 1) + " must be a positive integer up to 1e7, found " +
                             cells[i]);
    }
    *fields[i] = static_cast<uint32_t>(v[i]);
  }
  r.measured_ms = v[10];
  r.calibration = "megatron-deepspeed";  // vTrain's layout: its runs are Megatron-DeepSpeed's
  r.tp_backward_blocking = true;          // Megatron-DeepSpeed turns the asynchronous TP all-reduce off
  return r;
}

// The named layout: the header's columns, in any order.
Result<MeasuredRun> NamedRun(const std::vector<std::string>& header, const std::vector<std::string>& cells,
                     const std::string& where) {
  if (cells.size() != header.size()) {
    return Status::Invalid(where + ": expected " + std::to_string(header.size()) + " cells (the header's columns), found " +
                           std::to_string(cells.size()));
  }
  MeasuredRun r;
  r.calibration = "default";  // megatron-lm unless the row names its stack
  std::map<std::string, uint32_t*> integers = {
      {"gpus", &r.gpus},       {"global_batch", &r.global_batch}, {"micro_batch", &r.micro_batch},
      {"hidden", &r.hidden},   {"heads", &r.heads},               {"layers", &r.layers},
      {"seq_len", &r.seq_len}, {"tp", &r.tp},                     {"dp", &r.dp},
      {"pp", &r.pp},           {"gpus_per_node", &r.gpus_per_node}, {"virtual_stages", &r.virtual_stages},
      {"nics_per_node", &r.nics_per_node}};
  std::string tp_backward;
  for (size_t i = 0; i < header.size(); ++i) {
    const std::string& name = header[i];
    const std::string cell = models::TrimBlanks(cells[i]);
    if (name == "gpu") {
      r.gpu = cell;
      continue;
    }
    if (name == "tp_backward") {
      if (!cell.empty() && cell != "blocking" && cell != "async") {
        return Status::Invalid(where + ": tp_backward: '" + cell + "' is neither blocking nor async (how the run's "
                               "stack issues the backward's TP all-reduces; empty column: the stack's default)");
      }
      tp_backward = cell;
      continue;
    }
    if (name == "stack") {
      // Checked here so that a typo fails before any simulation.
      auto calibration = models::StackCalibration(cell, where + ": stack");
      if (!calibration.ok()) return calibration.status();
      r.calibration = *calibration;
      continue;
    }
    const bool integer = integers.count(name) > 0;
    if (!integer && name != "iteration_ms" && name != "nic_gbps") continue;  // provenance columns
    char* end = nullptr;
    const double x = std::strtod(cell.c_str(), &end);
    if (cell.empty() || end == cell.c_str() || *end != '\0' || !std::isfinite(x)) {
      return Status::Invalid(where + ": " + name + ": '" + cell + "' is not a number");
    }
    if (integer) {
      if (x < 1 || x != std::floor(x) || x > 1e7) {
        return Status::Invalid(where + ": " + name + " must be a positive integer, found '" + cell + "'");
      }
      *integers[name] = static_cast<uint32_t>(x);
    } else if (name == "iteration_ms") {
      r.measured_ms = x;
    } else {
      if (!(x > 0) || x > 1e7) return Status::Invalid(where + ": nic_gbps must be in (0, 1e7], found '" + cell + "'");
      r.nic_gbps = x;
    }
  }
  // Megatron-DeepSpeed turns Megatron-LM's asynchronous TP all-reduce off under DeepSpeed (its arguments.py).
  r.tp_backward_blocking = tp_backward.empty() ? r.calibration == "megatron-deepspeed" : tp_backward == "blocking";
  return r;
}

}  // namespace

// A device or a huge file is refused before reading (a runs file of measured iterations is small).
Status CheckRunsFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::Invalid(path + ": cannot open the runs file (--runs)");
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::Invalid(path + ": not a regular file (--runs takes a CSV of measured runs)");
  }
  if (const auto bytes = std::filesystem::file_size(path, ec); !ec && bytes > kMaxRunsFileBytes) {
    return Status::Invalid(path + ": " + std::to_string(bytes >> 20) + " MiB is more than a runs file holds (" +
                           std::to_string(kMaxRunsFileBytes >> 20) + " MiB); split it");
  }
  return Status::Ok();
}

Result<std::vector<MeasuredRun>> ReadMeasuredRuns(const std::string& path) {
  HETSIM_RETURN_IF_ERROR(CheckRunsFile(path));
  std::ifstream in(path);
  if (!in) return Status::Invalid(path + ": cannot open the runs file (--runs)");
  std::vector<MeasuredRun> runs;
  std::vector<std::string> header;  // named layout when set
  std::string line;
  int n = 0;
  bool first = true;
  while (std::getline(in, line)) {
    ++n;
    if (line.size() >= 3 && static_cast<unsigned char>(line[0]) == 0xEF) line = line.substr(3);  // UTF-8 BOM
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::vector<std::string> cells = models::SplitCsv(line);
    const std::string where = path + ":" + std::to_string(n);
    if (first) {
      first = false;
      char* end = nullptr;
      const std::string c0 = models::TrimBlanks(cells[0]);
      std::strtod(c0.c_str(), &end);
      if (end == c0.c_str()) {  // a header
        for (const auto& c : cells) header.push_back(models::TrimBlanks(c));
        if (std::find(header.begin(), header.end(), "calibration") != header.end()) {
          return Status::Invalid(where + ": a `calibration` column is no longer read: name each run's software "
                                 "stack in a `stack` column (megatron-lm, megatron-deepspeed, ...), and the one "
                                 "rule picks its calibration (docs/calibration.md \"One rule\"); "
                                 "--calibration applies one to every run");
        }
        for (const char* required : {"gpus", "global_batch", "micro_batch", "hidden", "heads", "layers", "seq_len",
                                     "tp", "dp", "pp", "iteration_ms"}) {
          if (std::find(header.begin(), header.end(), required) == header.end()) {
            return Status::Invalid(where + ": the header names no '" + required +
                                   "' column (required: gpus, global_batch, micro_batch, hidden, heads, layers, "
                                   "seq_len, tp, dp, pp, iteration_ms; experiments/validation/README.md)");
          }
        }
        continue;
      }
    }
    auto r = header.empty() ? PositionalRun(cells, where) : NamedRun(header, cells, where);
    if (!r.ok()) return r.status();
    r->line = n;
    if (Status c = CheckRun(*r, where); !c.ok()) return c;
    runs.push_back(*r);
  }
  if (runs.empty()) return Status::Invalid(path + ": no runs");
  return runs;
}

namespace {

// Simulates one run; sets simulated_ms or error.
void SimulateRun(MeasuredRun& r, const std::string& gpu, uint32_t vocab, proto::DType dtype, proto::Recompute recompute,
                 const sim::Fidelity& fidelity, const std::string& calibration) {
  auto fail = [&](const std::string& why) { r.error = why; };
  proto::Model m;
  m.set_name("gpt-h" + std::to_string(r.hidden) + "-l" + std::to_string(r.layers));
  m.set_num_layers(r.layers);
  m.set_hidden_size(r.hidden);
  m.set_ffn_hidden_size(4 * r.hidden);
  m.set_num_attention_heads(r.heads);
  m.set_num_kv_heads(r.heads);
  m.set_vocab_size(vocab);
  m.set_max_seq_len(r.seq_len);
  m.set_mlp(proto::Model::MLP_GELU);
  m.set_norm(proto::Model::NORM_LAYERNORM);
  m.set_position(proto::Model::POSITION_LEARNED);
  m.set_linear_bias(true);
  auto model = models::TransformerModel::Build(m, "run");
  if (!model.ok()) return fail(model.status().message());
  proto::Cluster c;
  const uint32_t per_node = r.gpus_per_node > 0 ? std::min(r.gpus_per_node, r.gpus) : r.gpus;
  c.set_name(per_node == r.gpus ? "one-node" : "nodes");
  auto* node = c.add_nodes();
  node->set_name("node");
  node->set_count(r.gpus / per_node);
  node->mutable_gpus()->set_type(r.gpu.empty() ? gpu : r.gpu);
  node->mutable_gpus()->set_count(per_node);
  if (r.nic_gbps > 0) {
    // One NIC per GPU on a non-blocking fabric, as DGX SuperPODs (Selene) are built, or the row's NICs
    // shared by the node's GPUs.
    node->mutable_nic()->set_kind(proto::Nic::KIND_INFINIBAND);
    node->mutable_nic()->set_bandwidth_gbps(r.nic_gbps);
    if (r.nics_per_node > 0) {
      node->mutable_nic()->set_attachment(proto::Nic::ATTACHMENT_PER_NODE);
      node->mutable_nic()->set_count(r.nics_per_node);
    } else {
      node->mutable_nic()->set_attachment(proto::Nic::ATTACHMENT_PER_GPU);
    }
  }
  auto cluster = models::Cluster::Build(c, "run");
  if (!cluster.ok()) return fail(cluster.status().message());
  proto::Training t;
  t.set_global_batch_size(r.global_batch);
  t.set_seq_len(r.seq_len);
  t.set_dtype(dtype);
  t.set_recompute(recompute);
  // Megatron-DeepSpeed of vTrain's runs: fused scale-mask-softmax, no flash attention.
  t.set_attention(proto::ATTENTION_STANDARD);
  auto training = models::ResolveTraining(t, *model, "run");
  if (!training.ok()) return fail(training.status().message());
  if (r.global_batch % (r.dp * r.micro_batch) != 0) return fail("global batch not divisible by DP × micro batch");
  std::vector<uint32_t> order(r.gpus);
  for (uint32_t i = 0; i < r.gpus; ++i) order[i] = i;
  const auto split = models::UniformBlocksSplit(*model, r.pp);
  const auto layers = split ? *split : planners::EvenLayerSplit(model->num_layers(), r.pp);
  proto::Plan plan = planners::MegatronLayout(order, r.dp, r.tp, r.pp, layers, r.micro_batch,
                                              r.global_batch / (r.dp * r.micro_batch));
  // Megatron's data-parallel all-reduce: one call over the whole contiguous gradient buffer.
  plan.mutable_comm()->set_dp_bucket_mib(0);
  plan.mutable_comm()->set_pp_scatter_gather(true);  // Megatron's default between equal TP degrees
  plan.mutable_comm()->set_tp_backward_blocking(r.tp_backward_blocking);
  if (r.virtual_stages > 1) {
    plan.set_schedule(proto::Plan::SCHEDULE_INTERLEAVED_1F1B);
    plan.set_virtual_stages(r.virtual_stages);
  }
  const models::PlanContext ctx{*cluster, *model, *training};
  const Status v = models::ValidatePlanStructure(plan, ctx, "run");
  if (!v.ok()) return fail(v.message());
  sim::SimOptions opt;
  opt.fidelity = fidelity;
  opt.compute.calibration = calibration;
  auto res = sim::SimulateIteration(plan, ctx, opt);
  if (!res.ok()) return fail(res.status().message());
  r.simulated_ms = res->report.iteration_time_s() * 1e3;
  if (res->report.devices_size() > 0) {
    const auto& d = res->report.devices(0);
    r.compute_ms = d.compute_s() * 1e3;
    r.tp_ms = d.tp_communication_s() * 1e3;
    r.pp_ms = d.pp_communication_s() * 1e3;
    r.dp_ms = d.dp_communication_s() * 1e3;
    r.idle_ms = d.idle_s() * 1e3;
  }
  for (const auto& d : res->report.devices()) r.peak_memory_gib = std::max(r.peak_memory_gib, d.peak_memory_gib());
  r.cls = models::ClassOf(plan, *cluster, *training, models::AllComputeMeasured(res->report));
  r.ok = true;
}


}  // namespace

Result<ValidationReport> ValidateRuns(const std::string& path, const ValidationOptions& options) {
  HETSIM_ASSIGN_OR_RETURN(std::vector<MeasuredRun> runs, ReadMeasuredRuns(path));
  HETSIM_RETURN_IF_ERROR(models::CheckKernelCalibration(options.calibration));
  ValidationReport rep;
  rep.csv = "line,gpus,global_batch,micro_batch,hidden,heads,layers,seq_len,tp,dp,pp,half,measured_ms,"
            "simulated_ms,error,nodes,compute_ms,tp_ms,pp_ms,dp_ms,idle_ms,peak_memory_gib,calibration,family,dtype,"
            "zero3,interval_lo_ms,interval_hi_ms,in_interval\n";
  const size_t total = std::min(options.limit, runs.size());
  for (size_t i = 0; i < total; ++i) {
    MeasuredRun& r = runs[i];
    const std::string& run_calibration = options.calibration.empty() ? r.calibration : options.calibration;
    SimulateRun(r, options.gpu, options.vocab, options.dtype, options.recompute, options.fidelity, run_calibration);
    ++rep.calibrations[run_calibration];
    if ((i + 1) % 50 == 0 && options.progress) options.progress(i + 1, total);
    rep.runs.push_back(r);
    const bool development = rep.Record(i, path, r.line, r.ok, r.error, r.ok ? r.rel() : 0);
    if (!r.ok) continue;
    auto& by = rep.by_configuration;
    by["tp=" + std::to_string(r.tp)].Add(r.rel());
    by["pp=" + std::to_string(r.pp)].Add(r.rel());
    by["micro_batch=" + std::to_string(r.micro_batch)].Add(r.rel());
    by["hidden=" + std::to_string(r.hidden)].Add(r.rel());
    const uint32_t nodes = r.gpus_per_node > 0 ? std::max(1u, r.gpus / r.gpus_per_node) : 1;
    if (nodes > 1) {
      by["dp=" + std::to_string(r.dp)].Add(r.rel());
      by["nodes=" + std::to_string(nodes)].Add(r.rel());
    }
    char row[384];
    std::snprintf(row, sizeof(row), "%d,%u,%u,%u,%u,%u,%u,%u,%u,%u,%u,%s,%.4f,%.4f,%.6f,%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f,",
                  r.line, r.gpus, r.global_batch, r.micro_batch, r.hidden, r.heads, r.layers, r.seq_len, r.tp, r.dp,
                  r.pp, development ? "development" : "held_out", r.measured_ms, r.simulated_ms, r.rel(), nodes,
                  r.compute_ms, r.tp_ms, r.pp_ms, r.dp_ms, r.idle_ms, r.peak_memory_gib);
    const models::PredictionInterval interval = models::IntervalFor(r.cls);
    const bool in = rep.cover_all.Add(interval, r.simulated_ms, r.measured_ms);
    if (!development) rep.cover_held_out.Add(interval, r.simulated_ms, r.measured_ms);
    char tail[160];
    std::snprintf(tail, sizeof tail, ",%s,%s,%d,%.4f,%.4f,%d", r.cls.family.c_str(), r.cls.dtype.c_str(),
                  r.cls.zero3 ? 1 : 0, r.simulated_ms * interval.lo, r.simulated_ms * interval.hi, in ? 1 : 0);
    rep.csv += row + models::CsvCell(run_calibration) + tail + "\n";
  }
  return rep;
}

}  // namespace hetsim::calibration
