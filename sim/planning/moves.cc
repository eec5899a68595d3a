// Polishing's moves: the table in moves.h, one function per move.
#include "sim/planning/moves.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "models/training.h"

namespace hetsim::planning {
namespace {

// Pipelines over at most this many machine runs have their runs' orders tried (5! = 120 orders).
constexpr size_t kMaxMachineRuns = 5;

std::string StageName(size_t p, size_t s) { return "pipeline " + std::to_string(p) + " stage " + std::to_string(s); }

uint32_t Layers(const proto::Stage& s) { return s.layer_end() - s.layer_begin(); }

// The GPU types of a stage's devices, in order (two stages with the same list swap to an equivalent plan).
std::vector<const models::GpuSpec*> Types(const proto::Stage& s, const models::Cluster& cluster) {
  std::vector<const models::GpuSpec*> t;
  for (uint32_t d : s.devices()) t.push_back(d < cluster.num_devices() ? cluster.device(d).gpu : nullptr);
  return t;
}

// The devices of one of a stage's replicas: its TP × CP × Ulysses group.
uint32_t ReplicaWidth(const proto::Stage& s) {
  return std::max(1u, s.tp_degree()) * std::max(1u, s.cp_degree()) * std::max(1u, s.ulysses_degree());
}

// Whether two stages' replicas have the same TP, CP and Ulysses degrees.
bool SameGroupShape(const proto::Stage& a, const proto::Stage& b) {
  return a.tp_degree() == b.tp_degree() && a.cp_degree() == b.cp_degree() && a.ulysses_degree() == b.ulysses_degree();
}

// Lays stages first .. first + weights.size() − 1 of `stages` over layers [begin, end), each stage's share in
// proportion to its weight (cumulative shares rounded to the nearest layer), every stage at least one layer.
void SplitLayers(google::protobuf::RepeatedPtrField<proto::Stage>* stages, int first,
                 const std::vector<double>& weights, uint32_t begin, uint32_t end) {
  double total = 0, before = 0;
  for (double w : weights) total += w;
  const size_t n = weights.size();
  const uint32_t from = begin;
  for (size_t k = 0; k < n; ++k) {
    before += weights[k];
    auto stop = static_cast<uint32_t>(from + std::lround(double(end - from) * before / total));
    stop = std::max(stop, begin + 1);                                    // at least one layer
    stop = std::min<uint32_t>(stop, end - static_cast<uint32_t>(n - 1 - k));  // room for the rest
    if (k + 1 == n) stop = end;
    proto::Stage* s = stages->Mutable(first + static_cast<int>(k));
    s->set_layer_begin(begin);
    s->set_layer_end(stop);
    begin = stop;
  }
}

void ClearSplits(proto::Pipeline* p) {
  for (auto& s : *p->mutable_stages()) s.clear_micro_batch_split();
}

// `plan` with pipeline `p`'s micro-batch doubled (its count halved) until it holds at least `replicas`
// sequences, so that a stage of that many DP replicas gives each one; its splits cleared. Empty when the
// count runs out of factors of two first.
std::optional<proto::Plan> WithSequencePerReplica(const proto::Plan& plan, int p, uint32_t replicas) {
  uint32_t micro = plan.pipelines(p).micro_batch_size(), count = plan.pipelines(p).num_micro_batches();
  while (micro < replicas && count % 2 == 0) {
    micro *= 2;
    count /= 2;
  }
  if (micro < replicas) return std::nullopt;
  proto::Plan n = plan;
  auto* m = n.mutable_pipelines(p);
  m->set_micro_batch_size(micro);
  m->set_num_micro_batches(count);
  ClearSplits(m);
  return n;
}

// `a` followed by `b` as one pipeline: each stage keeps about half its share of the layers (its count over
// both pipelines' 2·layers), every stage at least one. Empty when there are more stages than layers.
std::optional<proto::Pipeline> Merged(const proto::Pipeline& a, const proto::Pipeline& b, uint32_t layers) {
  const size_t n = static_cast<size_t>(a.stages_size() + b.stages_size());
  if (n > layers || a.micro_batch_size() != b.micro_batch_size()) return std::nullopt;
  proto::Pipeline m;
  m.set_micro_batch_size(a.micro_batch_size());
  m.set_num_micro_batches(a.num_micro_batches() + b.num_micro_batches());
  for (const auto& s : a.stages()) *m.add_stages() = s;
  for (const auto& s : b.stages()) *m.add_stages() = s;
  std::vector<double> weights;
  for (const auto& s : m.stages()) weights.push_back(Layers(s));
  SplitLayers(m.mutable_stages(), 0, weights, 0, layers);
  return m;
}

// `plan` without the GPUs of `nodes` (machine-idle): each stage keeps its replicas that lie elsewhere (none
// when a replica straddles a left machine: nullopt); a stage left without replicas is dropped and its layers
// go to the stage before it (the first stage's to the one after); a pipeline left without stages is dropped
// and its sequences go to the first other pipeline whose micro-batch size divides them (none: nullopt).
std::optional<proto::Plan> WithoutMachines(const proto::Plan& plan, const models::Cluster& cluster,
                                           const std::set<uint32_t>& nodes) {
  proto::Plan n = plan;
  n.clear_pipelines();
  uint32_t orphaned = 0;  // sequences of dropped pipelines
  for (const auto& pipe : plan.pipelines()) {
    proto::Pipeline kept = pipe;
    kept.clear_stages();
    uint32_t pending_begin = UINT32_MAX;  // layers of dropped stages waiting for the next kept stage
    for (const auto& st : pipe.stages()) {
      const uint32_t group = ReplicaWidth(st);
      proto::Stage s = st;
      s.clear_devices();
      const auto replicas = static_cast<uint32_t>(st.devices_size()) / group;
      bool changed = false;
      for (uint32_t r = 0; r < replicas; ++r) {
        uint32_t inside = 0;
        for (uint32_t i = 0; i < group; ++i) {
          inside += nodes.count(cluster.device(st.devices(static_cast<int>(r * group + i))).node) ? 1 : 0;
        }
        if (inside != 0 && inside != group) return std::nullopt;
        if (inside == group) {
          changed = true;
          continue;
        }
        for (uint32_t i = 0; i < group; ++i) s.add_devices(st.devices(static_cast<int>(r * group + i)));
      }
      if (changed) s.clear_micro_batch_split();
      if (s.devices_size() == 0) {
        if (kept.stages_size() > 0) {
          kept.mutable_stages(kept.stages_size() - 1)->set_layer_end(st.layer_end());
        } else if (pending_begin == UINT32_MAX) {
          pending_begin = st.layer_begin();
        }
        continue;
      }
      if (pending_begin != UINT32_MAX) {
        s.set_layer_begin(pending_begin);
        pending_begin = UINT32_MAX;
      }
      *kept.add_stages() = std::move(s);
    }
    if (kept.stages_size() == 0) {
      orphaned += pipe.micro_batch_size() * pipe.num_micro_batches();
      continue;
    }
    *n.add_pipelines() = std::move(kept);
  }
  if (n.pipelines_size() == 0) return std::nullopt;
  if (orphaned > 0) {
    bool placed = false;
    for (auto& pipe : *n.mutable_pipelines()) {
      if (pipe.micro_batch_size() > 0 && orphaned % pipe.micro_batch_size() == 0) {
        pipe.set_num_micro_batches(pipe.num_micro_batches() + orphaned / pipe.micro_batch_size());
        placed = true;
        break;
      }
    }
    if (!placed) return std::nullopt;
  }
  return n;
}

// The sequences of `plan`'s batch (every pipeline's micro-batch size × count).
uint32_t Sequences(const proto::Plan& plan) {
  uint32_t sequences = 0;
  for (const auto& pipe : plan.pipelines()) sequences += pipe.micro_batch_size() * pipe.num_micro_batches();
  return sequences;
}

// The cluster's devices machine by machine, in machine order.
std::vector<std::vector<uint32_t>> Machines(const models::Cluster& cluster) {
  std::map<uint32_t, std::vector<uint32_t>> by_machine;
  for (uint32_t d = 0; d < cluster.num_devices(); ++d) by_machine[cluster.device(d).node].push_back(d);
  std::vector<std::vector<uint32_t>> machines;
  for (auto& [node, ds] : by_machine) machines.push_back(std::move(ds));
  return machines;
}

// `plan` as one pipeline of a stage per device group of `groups` (each group's devices its DP replicas, TP 1),
// `sequences` in micro-batches of `micro`, the layers split by device count.
proto::Plan OnePipeline(const proto::Plan& plan, const std::vector<std::vector<uint32_t>>& groups, uint32_t micro,
                        uint32_t sequences, uint32_t layers) {
  proto::Plan n = plan;
  n.clear_pipelines();
  auto* m = n.add_pipelines();
  m->set_micro_batch_size(micro);
  m->set_num_micro_batches(sequences / micro);
  std::vector<double> weights;
  for (const auto& ds : groups) {
    auto* st = m->add_stages();
    for (uint32_t d : ds) st->add_devices(d);
    weights.push_back(static_cast<double>(ds.size()));
  }
  SplitLayers(m->mutable_stages(), 0, weights, 0, layers);
  return n;
}

// The machine of a stage's first device (0 when it has none or names a device the cluster lacks).
uint32_t MachineOf(const proto::Stage& st, const models::Cluster& cluster) {
  return st.devices_size() > 0 && st.devices(0) < cluster.num_devices() ? cluster.device(st.devices(0)).node : 0u;
}

// Every layer move (BoundaryMoves), between any two stages of a pipeline.
std::vector<PlanChange> LayerBoundary(const MoveInput& in) { return BoundaryMoves(in.plan, /*adjacent_only=*/false); }

// Device swaps between stages of the same shape on different GPU types.
std::vector<PlanChange> DeviceSwap(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const models::Cluster& cluster = in.cluster;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  std::vector<std::pair<int, int>> stages;
  for (int p = 0; p < np; ++p) {
    for (int s = 0; s < plan.pipelines(p).stages_size(); ++s) stages.emplace_back(p, s);
  }
  for (size_t i = 0; i < stages.size(); ++i) {
    for (size_t j = i + 1; j < stages.size(); ++j) {
      const proto::Stage& a = plan.pipelines(stages[i].first).stages(stages[i].second);
      const proto::Stage& b = plan.pipelines(stages[j].first).stages(stages[j].second);
      if (a.devices_size() != b.devices_size() || !SameGroupShape(a, b) || Types(a, cluster) == Types(b, cluster)) {
        continue;
      }
      proto::Plan n = plan;
      proto::Stage* x = n.mutable_pipelines(stages[i].first)->mutable_stages(stages[i].second);
      proto::Stage* y = n.mutable_pipelines(stages[j].first)->mutable_stages(stages[j].second);
      x->mutable_devices()->Swap(y->mutable_devices());
      x->mutable_micro_batch_split()->Swap(y->mutable_micro_batch_split());
      out.emplace_back(std::move(n), "devices of " + StageName(stages[i].first, stages[i].second) + " and " +
                                         StageName(stages[j].first, stages[j].second) + " swapped");
    }
  }
  return out;
}

// One micro-batch from one pipeline to another.
std::vector<PlanChange> MicroBatchTransfer(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  for (int p = 0; p < np; ++p) {
    for (int q = 0; q < np; ++q) {
      const auto& a = plan.pipelines(p);
      const auto& b = plan.pipelines(q);
      if (p == q || a.num_micro_batches() < 2 || a.micro_batch_size() != b.micro_batch_size()) continue;
      proto::Plan n = plan;
      n.mutable_pipelines(p)->set_num_micro_batches(a.num_micro_batches() - 1);
      n.mutable_pipelines(q)->set_num_micro_batches(b.num_micro_batches() + 1);
      out.emplace_back(std::move(n), "one micro-batch from pipeline " + std::to_string(p) + " to pipeline " +
                                         std::to_string(q));
    }
  }
  return out;
}

// Micro-batch size doubled or halved.
std::vector<PlanChange> MicroBatchSize(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  for (int p = 0; p < np; ++p) {
    const auto& a = plan.pipelines(p);
    if (a.num_micro_batches() % 2 == 0) {
      proto::Plan n = plan;
      auto* m = n.mutable_pipelines(p);
      m->set_micro_batch_size(a.micro_batch_size() * 2);
      m->set_num_micro_batches(a.num_micro_batches() / 2);
      ClearSplits(m);
      out.emplace_back(std::move(n), "pipeline " + std::to_string(p) + "'s micro-batches of " +
                                         std::to_string(a.micro_batch_size() * 2) + " sequences");
    }
    if (a.micro_batch_size() % 2 == 0) {
      proto::Plan n = plan;
      auto* m = n.mutable_pipelines(p);
      m->set_micro_batch_size(a.micro_batch_size() / 2);
      m->set_num_micro_batches(a.num_micro_batches() * 2);
      ClearSplits(m);
      out.emplace_back(std::move(n), "pipeline " + std::to_string(p) + "'s micro-batches of " +
                                         std::to_string(a.micro_batch_size() / 2) + " sequences");
    }
  }
  return out;
}

// Two pipelines merged into one: the second's stages after the first's, and the same stages grouped by
// machine (in machine order, each machine's stages in their order), which crosses each machine boundary
// once where the concatenation crosses them twice.
std::vector<PlanChange> PipelineMerge(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const models::Cluster& cluster = in.cluster;
  const uint32_t layers = in.layers;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  const auto node_of = [&](const proto::Stage& st) { return MachineOf(st, cluster); };
  for (int p = 0; p < np; ++p) {
    for (int q = 0; q < np; ++q) {
      if (p == q) continue;
      for (bool grouped : {false, true}) {
        proto::Pipeline a = plan.pipelines(p), b = plan.pipelines(q);
        if (grouped) {
          std::vector<proto::Stage> all(a.stages().begin(), a.stages().end());
          all.insert(all.end(), b.stages().begin(), b.stages().end());
          std::stable_sort(all.begin(), all.end(),
                           [&](const proto::Stage& x, const proto::Stage& y) { return node_of(x) < node_of(y); });
          // The grouped order as one pipeline: `a` takes every stage, `b` none.
          a.clear_stages();
          for (auto& st : all) *a.add_stages() = std::move(st);
          const auto half = static_cast<int>(a.stages_size() / 2);
          b.clear_stages();
          for (int k = half; k < a.stages_size(); ++k) *b.add_stages() = a.stages(k);
          a.mutable_stages()->DeleteSubrange(half, a.stages_size() - half);
        }
        auto m = Merged(a, b, layers);
        if (!m) continue;
        proto::Plan n = plan;
        n.clear_pipelines();
        for (int r = 0; r < np; ++r) {
          if (r == p) *n.add_pipelines() = *m;
          if (r != p && r != q) *n.add_pipelines() = plan.pipelines(r);
        }
        out.emplace_back(std::move(n), "pipelines " + std::to_string(p) + " and " + std::to_string(q) +
                                           " merged into one of " + std::to_string(m->stages_size()) + " stages" +
                                           (grouped ? ", grouped by machine" : ""));
      }
    }
  }
  return out;
}

// A pipeline's runs of stages on one machine put in another order (each stage keeps its layer count,
// the boundaries follow): which machine holds the embedding, the head and the middle.
std::vector<PlanChange> MachineOrder(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const models::Cluster& cluster = in.cluster;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  const auto node_of = [&](const proto::Stage& st) { return MachineOf(st, cluster); };
  for (int p = 0; p < np; ++p) {
    const auto& pipe = plan.pipelines(p);
    std::vector<std::vector<int>> runs;
    for (int k = 0; k < pipe.stages_size(); ++k) {
      if (runs.empty() || node_of(pipe.stages(k)) != node_of(pipe.stages(runs.back().back()))) runs.emplace_back();
      runs.back().push_back(k);
    }
    if (runs.size() < 2 || runs.size() > kMaxMachineRuns) continue;
    std::vector<size_t> order(runs.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    while (std::next_permutation(order.begin(), order.end())) {
      proto::Plan n = plan;
      auto* m = n.mutable_pipelines(p);
      m->clear_stages();
      std::string desc;
      for (size_t r : order) {
        for (int k : runs[r]) *m->add_stages() = pipe.stages(k);
        desc += (desc.empty() ? "" : ", ") + std::to_string(node_of(pipe.stages(runs[r].front())));
      }
      uint32_t begin = 0;
      for (auto& st : *m->mutable_stages()) {
        const uint32_t count = Layers(st);
        st.set_layer_begin(begin);
        st.set_layer_end(begin + count);
        begin += count;
      }
      out.emplace_back(std::move(n), "pipeline " + std::to_string(p) + "'s machines in the order " + desc);
    }
  }
  return out;
}

// The ZeRO stage one lower or higher:
// less sharding communicates less where memory allows it, more fits a deeper pipeline's first stages.
std::vector<PlanChange> ZeroStage(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  std::vector<PlanChange> out;
  for (int dz : {-1, +1}) {
    const int z = static_cast<int>(plan.zero_stage()) + dz;
    if (z < 0 || z > 3) continue;
    proto::Plan n = plan;
    n.set_zero_stage(static_cast<uint32_t>(z));
    out.emplace_back(std::move(n), "ZeRO stage " + std::to_string(z));
  }
  return out;
}

// One pipeline with a stage per machine, all of the machine's GPUs as that stage's data-parallel
// replicas (TP 1; GPUs the plan left idle included), layers by device count: the structure that keeps data
// parallelism off the network. Micro-batches of the least divisor of the batch that is at least the widest
// machine (each replica gets a sequence or more).
std::vector<PlanChange> StagePerMachine(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const models::Cluster& cluster = in.cluster;
  const uint32_t layers = in.layers;
  std::vector<PlanChange> out;
  const std::vector<std::vector<uint32_t>> machines = Machines(cluster);
  const uint32_t sequences = Sequences(plan);
  uint32_t widest = 0;
  for (const auto& ds : machines) widest = std::max(widest, static_cast<uint32_t>(ds.size()));
  uint32_t micro = widest;
  while (micro > 0 && micro <= sequences && sequences % micro != 0) ++micro;
  if (machines.size() >= 2 && machines.size() <= layers && micro > 0 && micro <= sequences) {
    out.emplace_back(OnePipeline(plan, machines, micro, sequences, layers),
                     "one pipeline, a stage per machine (" + std::to_string(machines.size()) +
                         " stages, data parallelism inside each)");
  }
  return out;
}

// A stage of several DP replicas split into consecutive stages: by machine where it spans several
// (each machine's devices one stage, in machine order), else its replicas halved; the layers split by
// device count (then rebalanced). Turns data parallelism over a slow network into a pipeline.
std::vector<PlanChange> StageSplit(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const models::Cluster& cluster = in.cluster;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  for (int p = 0; p < np; ++p) {
    const auto& pipe = plan.pipelines(p);
    for (int k = 0; k < pipe.stages_size(); ++k) {
      const proto::Stage& st = pipe.stages(k);
      const uint32_t group = ReplicaWidth(st);
      const auto replicas = static_cast<uint32_t>(st.devices_size()) / group;
      if (replicas < 2 || Layers(st) < 2) continue;
      // Groups of whole replicas: by machine of each replica's first device, else two halves.
      const auto machine_of = [&](uint32_t r) { return cluster.device(st.devices(static_cast<int>(r * group))).node; };
      std::vector<std::vector<uint32_t>> parts;
      for (uint32_t r = 0; r < replicas; ++r) {
        if (parts.empty() || machine_of(r) != machine_of(r - 1)) parts.emplace_back();
        for (uint32_t d = 0; d < group; ++d) parts.back().push_back(st.devices(static_cast<int>(r * group + d)));
      }
      std::string how = "by machine";
      if (parts.size() < 2 || parts.size() > Layers(st)) {
        parts.assign(2, {});
        for (uint32_t r = 0; r < replicas; ++r) {
          for (uint32_t d = 0; d < group; ++d) {
            parts[r < replicas / 2 ? 0 : 1].push_back(st.devices(static_cast<int>(r * group + d)));
          }
        }
        how = "in halves";
        if (replicas % 2 != 0) continue;
      }
      proto::Plan n = plan;
      auto* m = n.mutable_pipelines(p);
      m->clear_stages();
      for (int j = 0; j < k; ++j) *m->add_stages() = pipe.stages(j);
      std::vector<double> weights;
      for (const auto& devices : parts) {
        proto::Stage part = st;
        part.clear_devices();
        part.clear_micro_batch_split();
        for (uint32_t d : devices) part.add_devices(d);
        *m->add_stages() = std::move(part);
        weights.push_back(static_cast<double>(devices.size()));
      }
      SplitLayers(m->mutable_stages(), k, weights, st.layer_begin(), st.layer_end());
      for (int j = k + 1; j < pipe.stages_size(); ++j) *m->add_stages() = pipe.stages(j);
      out.emplace_back(std::move(n), StageName(p, k) + " split " + how + " into " + std::to_string(parts.size()) +
                                         " stages");
    }
  }
  return out;
}

// One pipeline with a stage per GPU, every GPU of the cluster, TP 1, micro-batches of one sequence,
// layers evenly (then rebalanced): the deepest pipeline, which a plan of wide data-parallel or TP stages
// reaches only through a chain of changes each slower on its own. Three orders of the machines: as the
// cluster lists them, slowest GPUs first and fastest first (by FP16 peak; the order fixes which GPUs hold
// the embedding and which the head); orders that coincide are listed once. Then the same with stages of g
// GPUs of one machine as DP replicas, for g = 2, 4, ... below the widest machine (a machine's remainder,
// fewer than g, its first stage; micro-batches of the least divisor of the batch that is at least g): the
// depths between this pipeline and stage-per-machine.
std::vector<PlanChange> DeepPipeline(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const models::Cluster& cluster = in.cluster;
  const uint32_t layers = in.layers;
  std::vector<PlanChange> out;
  const uint32_t sequences = Sequences(plan);
  const std::vector<std::vector<uint32_t>> machines = Machines(cluster);
  uint32_t widest = 0;
  for (const auto& ds : machines) widest = std::max(widest, static_cast<uint32_t>(ds.size()));
  const auto speed = [&](const std::vector<uint32_t>& ds) {
    const models::GpuSpec* g = cluster.device(ds.front()).gpu;
    return g ? g->peak_fp16_tflops : 0.0;
  };
  auto slow_first = machines, fast_first = machines;
  std::stable_sort(slow_first.begin(), slow_first.end(),
                   [&](const auto& a, const auto& b) { return speed(a) < speed(b); });
  std::stable_sort(fast_first.begin(), fast_first.end(),
                   [&](const auto& a, const auto& b) { return speed(a) > speed(b); });
  const std::pair<const char*, const std::vector<std::vector<uint32_t>>*> kinds[] = {
      {"", &machines}, {", slowest GPUs first", &slow_first}, {", fastest GPUs first", &fast_first}};
  for (uint32_t g = 1; g == 1 || g < widest; g *= 2) {
    uint32_t micro = g;
    while (micro <= sequences && sequences % micro != 0) ++micro;
    if (sequences == 0 || micro > sequences) break;
    std::vector<std::vector<std::vector<uint32_t>>> orders;  // stages' devices, per order listed
    for (const auto& [how, order] : kinds) {
      std::vector<std::vector<uint32_t>> groups;
      for (const auto& ds : *order) {
        const size_t rest = ds.size() % g;
        if (rest > 0) groups.emplace_back(ds.begin(), ds.begin() + static_cast<std::ptrdiff_t>(rest));
        for (size_t i = rest; i < ds.size(); i += g) {
          groups.emplace_back(ds.begin() + static_cast<std::ptrdiff_t>(i),
                              ds.begin() + static_cast<std::ptrdiff_t>(i + g));
        }
      }
      if (groups.size() < 2 || groups.size() > layers) continue;
      if (std::find(orders.begin(), orders.end(), groups) != orders.end()) continue;
      orders.push_back(groups);
      proto::Plan n = OnePipeline(plan, groups, micro, sequences, layers);
      const std::string count = std::to_string(groups.size()) + " stages";
      out.emplace_back(std::move(n), g == 1 ? "one pipeline, a stage per GPU (" + count +
                                                  ", micro-batches of one sequence" + how + ")"
                                            : "one pipeline, stages of " + std::to_string(g) +
                                                  " GPUs of a machine (" + count + ", micro-batches of " +
                                                  std::to_string(micro) + " sequences" + how + ")");
    }
  }
  return out;
}

// Two adjacent stages of one pipeline with the same TP group shape joined into one stage that holds both as
// data-parallel replicas, their layers together (the inverse of stage-split); when the pipeline's micro-batch
// has fewer sequences than the joined stage has replicas it is doubled (its count halved) until it has
// enough, where the count allows.
std::vector<PlanChange> StageJoin(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  for (int p = 0; p < np; ++p) {
    const auto& pipe = plan.pipelines(p);
    for (int k = 0; k + 1 < pipe.stages_size(); ++k) {
      const proto::Stage& a = pipe.stages(k);
      const proto::Stage& b = pipe.stages(k + 1);
      if (!SameGroupShape(a, b)) continue;
      const auto replicas = static_cast<uint32_t>(a.devices_size() + b.devices_size()) / ReplicaWidth(a);
      auto widened = WithSequencePerReplica(plan, p, replicas);
      if (!widened) continue;
      proto::Plan n = std::move(*widened);
      auto* m = n.mutable_pipelines(p);
      proto::Stage joined = a;
      joined.clear_micro_batch_split();
      for (uint32_t d : b.devices()) joined.add_devices(d);
      joined.set_layer_end(b.layer_end());
      auto* st = m->mutable_stages();
      *st->Mutable(k) = std::move(joined);
      st->DeleteSubrange(k + 1, 1);
      out.emplace_back(std::move(n), StageName(static_cast<size_t>(p), static_cast<size_t>(k)) + " and stage " +
                                         std::to_string(k + 1) + " joined into one data-parallel stage");
    }
  }
  return out;
}

// A stage's TP degree halved, its data parallelism doubled on the same devices (or the other way):
// the micro-batch doubled, its count halved, while it has fewer sequences than the stage has replicas.
std::vector<PlanChange> TpDpTrade(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const int np = plan.pipelines_size();
  std::vector<PlanChange> out;
  for (int p = 0; p < np; ++p) {
    const auto& pipe = plan.pipelines(p);
    for (int k = 0; k < pipe.stages_size(); ++k) {
      const proto::Stage& st = pipe.stages(k);
      const uint32_t tp = std::max(1u, st.tp_degree());
      const uint32_t group = ReplicaWidth(st);
      const auto replicas = static_cast<uint32_t>(st.devices_size()) / group;
      for (const uint32_t to : {tp / 2, replicas % 2 == 0 ? tp * 2 : 0u}) {
        if (to == 0 || to == tp) continue;
        const uint32_t dp = replicas * tp / to;
        auto widened = WithSequencePerReplica(plan, p, dp);
        if (!widened) continue;
        proto::Plan n = std::move(*widened);
        n.mutable_pipelines(p)->mutable_stages(k)->set_tp_degree(to);
        out.emplace_back(std::move(n), StageName(static_cast<size_t>(p), static_cast<size_t>(k)) + " at TP " +
                                           std::to_string(to) + " × DP " + std::to_string(dp));
      }
    }
  }
  return out;
}

// The plan's recomputation set to each other policy (the one it runs with: its own, else the training
// spec's, else none).
std::vector<PlanChange> Recompute(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const proto::Recompute training_recompute = in.training_recompute;
  std::vector<PlanChange> out;
  proto::Recompute current = plan.recompute() != proto::RECOMPUTE_UNSPECIFIED ? plan.recompute() : training_recompute;
  if (current == proto::RECOMPUTE_UNSPECIFIED) current = proto::RECOMPUTE_NONE;
  for (proto::Recompute policy : {proto::RECOMPUTE_NONE, proto::RECOMPUTE_SELECTIVE, proto::RECOMPUTE_FULL}) {
    if (policy == current) continue;
    proto::Plan n = plan;
    n.set_recompute(policy);
    out.emplace_back(std::move(n), std::string("recomputation ") + models::RecomputeName(policy));
  }
  return out;
}

// Machines left idle: per GPU type the last machine of that type the plan uses, and every machine of the
// slowest type at once (by FP16 peak; when the plan uses more than one type).
std::vector<PlanChange> MachineIdle(const MoveInput& in) {
  const proto::Plan& plan = in.plan;
  const models::Cluster& cluster = in.cluster;
  std::vector<PlanChange> out;
  std::map<uint32_t, const models::GpuSpec*> used;  // machine -> its GPU type
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t d : st.devices()) used[cluster.device(d).node] = cluster.device(d).gpu;
    }
  }
  std::map<const models::GpuSpec*, uint32_t> last_of_type;
  for (const auto& [node, gpu] : used) last_of_type[gpu] = node;
  std::vector<std::pair<std::set<uint32_t>, std::string>> idle;
  if (used.size() >= 2) {
    for (const auto& [gpu, node] : last_of_type) {
      idle.push_back({{node}, "machine " + std::to_string(node) + " (" + (gpu ? gpu->name : "?") + ") left idle"});
    }
  }
  if (last_of_type.size() >= 2) {
    const models::GpuSpec* slowest = nullptr;
    for (const auto& [gpu, node] : last_of_type) {
      if (slowest == nullptr || (gpu && gpu->peak_fp16_tflops < slowest->peak_fp16_tflops)) slowest = gpu;
    }
    std::set<uint32_t> nodes;
    for (const auto& [node, gpu] : used) {
      if (gpu == slowest) nodes.insert(node);
    }
    if (nodes.size() >= 2) {
      idle.push_back({nodes, "every " + (slowest ? slowest->name : std::string("?")) + " left idle"});
    }
  }
  for (const auto& [nodes, change] : idle) {
    if (auto n = WithoutMachines(plan, cluster, nodes)) out.emplace_back(std::move(*n), change);
  }
  return out;
}

constexpr Move kMoves[] = {
    {"layer-boundary", LayerBoundary},
    {"device-swap", DeviceSwap},
    {"micro-batch-transfer", MicroBatchTransfer},
    {"micro-batch-size", MicroBatchSize},
    {"pipeline-merge", PipelineMerge},
    {"machine-order", MachineOrder},
    {"zero-stage", ZeroStage},
    {"stage-per-machine", StagePerMachine},
    {"stage-split", StageSplit},
    {"deep-pipeline", DeepPipeline},
    {"stage-join", StageJoin},
    {"tp-dp-trade", TpDpTrade},
    {"recompute", Recompute},
    {"machine-idle", MachineIdle},
};

}  // namespace

std::span<const Move> PolishMoves() { return kMoves; }

const Move* FindMove(std::string_view name) {
  for (const Move& m : kMoves) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

std::vector<PlanChange> NeighboursBy(const Move& move, const MoveInput& in) {
  // Interleaved stages hold several chunks each: their layer ranges are not moved here.
  if (in.plan.schedule() == proto::Plan::SCHEDULE_INTERLEAVED_1F1B) return {};
  return move.neighbours(in);
}

std::vector<PlanChange> PlanNeighbours(const proto::Plan& plan, const models::Cluster& cluster, uint32_t layers,
                                       proto::Recompute training_recompute) {
  const MoveInput in{plan, cluster, layers, training_recompute};
  std::vector<PlanChange> out;
  for (const Move& m : kMoves) {
    for (auto& c : NeighboursBy(m, in)) out.push_back(std::move(c));
  }
  return out;
}

std::vector<PlanChange> BoundaryMoves(const proto::Plan& plan, bool adjacent_only) {
  std::vector<PlanChange> out;
  for (int p = 0; p < plan.pipelines_size(); ++p) {
    const auto& pipe = plan.pipelines(p);
    const int n = pipe.stages_size();
    for (int from = 0; from < n; ++from) {
      if (Layers(pipe.stages(from)) < 2) continue;
      for (int to = 0; to < n; ++to) {
        if (to == from || (adjacent_only && std::abs(to - from) != 1)) continue;
        proto::Plan next = plan;
        auto* st = next.mutable_pipelines(p)->mutable_stages();
        // The boundaries after stages min(from, to) .. max(from, to) − 1 move one layer towards `from`.
        const int shift = from < to ? -1 : +1;
        for (int b = std::min(from, to); b < std::max(from, to); ++b) {
          const uint32_t edge = static_cast<uint32_t>(static_cast<int>(st->Get(b).layer_end()) + shift);
          st->Mutable(b)->set_layer_end(edge);
          st->Mutable(b + 1)->set_layer_begin(edge);
        }
        bool empty = false;
        for (const auto& stage : *st) empty = empty || stage.layer_end() <= stage.layer_begin();
        if (empty) continue;
        out.push_back({std::move(next), "one layer from " + StageName(p, from) + " to " + StageName(p, to), true});
      }
    }
  }
  return out;
}

}  // namespace hetsim::planning
