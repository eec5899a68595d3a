#include "planners/hexiscale/pipeline.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>

#include "planners/hexiscale/graph.h"

namespace hetsim::planners::hexiscale {

struct PipelineBuilder::Chunk {
  std::vector<uint32_t> devices;  // the part's GPUs on one machine, in canonical order
  std::vector<uint32_t> choices;  // TP degrees: the locally optimal first, then every larger one
};

struct PipelineBuilder::Part {
  std::vector<Chunk> chunks;
};

PipelineBuilder::PipelineBuilder(const PlanningProblem& problem, const AppendixACost& cost, const MemoryModel& memory)
    : problem_(problem), cost_(cost), memory_(memory) {
  // Identical nodes under the same leaf switch / pod and in the same zone are interchangeable.
  const auto& cluster = problem.cluster;
  const auto& net = cluster.spec().network();
  const uint32_t per_switch = net.has_fat_tree() ? net.fat_tree().nodes_per_leaf()
                              : net.has_pods()   ? net.pods().nodes_per_pod()
                                                 : 0;
  std::map<std::tuple<uint32_t, std::string, uint32_t>, uint32_t> classes;
  for (uint32_t n = 0; n < cluster.nodes().size(); ++n) {
    const auto& node = cluster.node(n);
    const auto key = std::make_tuple(node.group, node.zone, per_switch == 0 ? 0u : n / per_switch);
    auto [it, inserted] = classes.emplace(key, static_cast<uint32_t>(classes.size()));
    node_class_.push_back(it->second);
  }
  const auto& nodes = cluster.nodes();
  node_bandwidth_.assign(nodes.size() * nodes.size(), 0);
  for (uint32_t a = 0; a < nodes.size(); ++a) {
    for (uint32_t b = 0; b < nodes.size(); ++b) {
      const uint32_t x = nodes[a].first_device, y = a == b ? x + 1 : nodes[b].first_device;
      if (a != b || nodes[a].num_gpus > 1) node_bandwidth_[a * nodes.size() + b] = cost.DpLink(x, y).bandwidth_bytes_s;
    }
  }
}

std::vector<uint32_t> PipelineBuilder::Canonical(const std::vector<uint32_t>& devices, std::string* signature) const {
  const auto& cluster = problem_.cluster;
  std::map<uint32_t, std::vector<uint32_t>> by_node;
  for (uint32_t d : devices) by_node[cluster.device(d).node].push_back(d);
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> nodes(by_node.begin(), by_node.end());
  // By class, then by node index: every group lists its machines in the same global order, so parts
  // that tie on bandwidth are ordered alike in every pipeline and a layer tends to sit on the same
  // machine in every pipeline (its DP group then stays inside the machine).
  std::stable_sort(nodes.begin(), nodes.end(), [&](const auto& a, const auto& b) {
    return node_class_[a.first] < node_class_[b.first];
  });
  std::vector<uint32_t> out;
  out.reserve(devices.size());
  signature->clear();
  for (auto& [node, devs] : nodes) {
    std::sort(devs.begin(), devs.end());
    out.insert(out.end(), devs.begin(), devs.end());
    *signature += std::to_string(node_class_[node]) + "x" + std::to_string(devs.size()) + ",";
  }
  return out;
}

std::optional<PipelineTemplate> PipelineBuilder::Build(const std::vector<uint32_t>& devices, uint32_t k,
                                                       const Phase2Params& params, Phase2Counters* counters,
                                                       const std::string& signature) const {
  const auto& cluster = problem_.cluster;
  const auto& model = problem_.model;
  const proto::DType dtype = problem_.training.dtype();
  const proto::Recompute rc = problem_.training.recompute();
  const uint32_t L = model.num_layers(), blocks = model.num_blocks();
  const double b = params.micro_batch;
  const uint32_t n = static_cast<uint32_t>(devices.size());
  if (n == 0 || k == 0 || k > n) return std::nullopt;
  if (counters != nullptr) ++counters->templates;

  // (i) Secondary partition into k parts of well-connected GPUs (§4.3 step i).
  std::vector<std::vector<uint32_t>> part_devices(k);
  if (k == 1) {
    part_devices[0] = devices;
  } else {
    // The partition depends on the group (up to isomorphism), k and the options, not on the micro-batch or
    // D_dp: cached.
    std::optional<std::vector<uint32_t>>* cached = nullptr;
    if (!signature.empty()) {
      auto [it, inserted] = partitions_by_signature_.try_emplace(std::make_pair(signature, k));
      if (!inserted) cached = &it->second;
    } else if (auto it = partitions_.find(std::make_pair(devices, k)); it != partitions_.end()) {
      cached = &it->second;
    }
    if (cached == nullptr) {
      PartitionRequest req;
      for (uint32_t d : devices) req.vertex_weight.push_back(cluster.device(d).gpu->PeakTflops(dtype));
      req.bandwidth = [&](uint32_t i, uint32_t j) { return Bandwidth(devices[i], devices[j]); };
      req.parts = k;
      req.max_balance = params.secondary_balance;
      req.objective = CutObjective::kMinCut;
      req.seed = params.seed;
      for (uint32_t d : devices) req.machine.push_back(cluster.device(d).node);
      req.max_vertices = params.max_graph_vertices;
      auto computed = Partition(req);
      cached = signature.empty() ? &partitions_.emplace(std::make_pair(devices, k), std::move(computed)).first->second
                                 : &(partitions_by_signature_[std::make_pair(signature, k)] = std::move(computed));
    }
    const auto& part = *cached;
    if (!part) return std::nullopt;
    // Parts numbered by their first GPU in the group's (canonical) order, not METIS's labels.
    std::vector<uint32_t> label(k, UINT32_MAX);
    uint32_t next = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (label[(*part)[i]] == UINT32_MAX) label[(*part)[i]] = next++;
      part_devices[label[(*part)[i]]].push_back(devices[i]);
    }
  }

  // (ii) Intra-group strategy per machine: the locally optimal TP degree (§4.3 step ii).
  double total_compute = 0;
  for (uint32_t d : devices) total_compute += cluster.device(d).gpu->PeakTflops(dtype);
  const double m = std::max<uint32_t>(1, params.micro_batches);
  std::vector<Part> parts(k);
  for (uint32_t p = 0; p < k; ++p) {
    for (uint32_t d : part_devices[p]) {
      auto& chunks = parts[p].chunks;
      if (chunks.empty() || cluster.device(chunks.back().devices.front()).node != cluster.device(d).node) {
        chunks.push_back(Chunk{});
      }
      chunks.back().devices.push_back(d);
    }
    for (Chunk& c : parts[p].chunks) {
      const uint32_t nc = static_cast<uint32_t>(c.devices.size());
      const models::GpuSpec& gpu = *cluster.device(c.devices[0]).gpu;
      const double share = blocks * nc * gpu.PeakTflops(dtype) / total_compute;  // blocks of the machine
      std::vector<uint32_t> valid;
      for (uint32_t t : params.tp_degrees) {
        if (t <= nc && nc % t == 0) valid.push_back(t);
      }
      if (valid.empty()) return std::nullopt;  // 1 is always allowed unless the options exclude it
      double best = kInf;
      uint32_t best_t = valid.back();
      for (uint32_t t : valid) {
        const uint32_t s = nc / t;
        const std::span<const uint32_t> group(c.devices.data(), t);
        const double x = std::max(1.0, share / s);
        const double per_block = cost_.LayerSeconds(group, gpu, 1, b);
        const double hop =
            s > 1 ? cost_.PpHopSeconds(group, std::span<const uint32_t>(c.devices.data() + t, t), b,
                                       params.leader_broadcast)
                  : 0;
        const uint32_t nb = static_cast<uint32_t>(std::ceil(x));
        const double in_flight = std::min<double>(params.in_flight_cap, s);
        const double need = memory_.TotalGib(memory_.StaticGib(1, 1 + nb, t, params.zero_stage, params.shard),
                                             memory_.ActivationGibPerSequence(1, 1 + nb, t, params.sequence_parallel, rc),
                                             memory_.PeakLayerGibPerSequence(1, 1 + nb, t, params.sequence_parallel, rc),
                                             b, in_flight);
        if (!FitsIn(need, gpu.memory_gib)) continue;
        const double local = (s + m - 1) * (x * per_block + hop);  // eq. 9 of the machine's own stages
        if (local < best) {
          best = local;
          best_t = t;
        }
      }
      c.choices.push_back(best_t);
      for (uint32_t t : valid) {
        if (t > best_t) c.choices.push_back(t);
      }
    }
  }

  // Pipelines sharing each machine's NIC (eq. 5's hops and eq. 9's NIC floor, cost.h): the groups laid
  // out like this one, as many as the machine has GPUs over this group's GPUs on it.
  const double boundary_bytes =
      models::PipelineBoundaryBytes(problem_.model, b, problem_.training.seq_len(), problem_.training.dtype());
  std::vector<uint32_t> sharing(cluster.nodes().size(), 1);
  {
    std::map<uint32_t, uint32_t> on_node;
    for (uint32_t d : devices) ++on_node[cluster.device(d).node];
    for (const auto& [node, count] : on_node) sharing[node] = (cluster.node(node).num_gpus + count - 1) / count;
  }

  // (iii) Stage orders by the top-τ greedy search over parts (§4.3 step iii).
  std::vector<std::vector<double>> bw(k, std::vector<double>(k, 0));
  for (uint32_t p = 0; p < k; ++p) {
    for (uint32_t q = p + 1; q < k; ++q) {
      double best = 0;
      for (const Chunk& a : parts[p].chunks) {
        for (const Chunk& c : parts[q].chunks) {
          best = std::max(best, cost_.DpLink(a.devices[0], c.devices[0]).bandwidth_bytes_s);
        }
      }
      bw[p][q] = bw[q][p] = best;
    }
  }
  std::vector<std::vector<uint32_t>> orders;
  {
    const uint32_t per_start = std::max<uint32_t>(1, (params.max_orders + k - 1) / k);
    std::vector<uint32_t> path;
    std::vector<char> seen(k, 0);
    uint32_t count = 0;
    std::function<void()> dfs = [&]() {
      if (count >= per_start) return;
      if (path.size() == k) {
        orders.push_back(path);
        ++count;
        return;
      }
      std::vector<uint32_t> next;
      for (uint32_t q = 0; q < k; ++q) {
        if (!seen[q]) next.push_back(q);
      }
      std::stable_sort(next.begin(), next.end(),
                       [&](uint32_t x, uint32_t y) { return bw[path.back()][x] > bw[path.back()][y]; });
      for (size_t i = 0; i < next.size() && i < params.tau; ++i) {
        path.push_back(next[i]);
        seen[next[i]] = 1;
        dfs();
        seen[next[i]] = 0;
        path.pop_back();
      }
    };
    for (uint32_t start = 0; start < k; ++start) {
      count = 0;
      path = {start};
      seen.assign(k, 0);
      seen[start] = 1;
      dfs();
    }
  }

  // Memory cap of a stage: the most blocks it holds at position j of S (nullopt: not even the fewest).
  // Memoised across Build calls (cap_memo_): the cap depends on nothing but the key.
  auto max_blocks = [&](double capacity, uint32_t t, uint32_t j, uint32_t S) -> int64_t {
    const int shape = S == 1 ? 3 : j == 0 ? 0 : j + 1 == S ? 2 : 1;
    const double in_flight =
        MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, j, S, params.in_flight_cap, /*virtual_stages=*/1);
    const CapKey key{capacity, t, shape, in_flight, params.micro_batch, params.zero_stage, params.shard,
                     params.sequence_parallel};
    if (auto it = cap_memo_.find(key); it != cap_memo_.end()) return it->second;
    auto range = [&](uint32_t nb) -> std::pair<uint32_t, uint32_t> {
      switch (shape) {
        case 0:
          return {0, 1 + nb};
        case 2:
          return {L - 1 - nb, L};
        case 3:
          return {0, L};
        default:
          return {1, 1 + nb};
      }
    };
    auto fits = [&](uint32_t nb) {
      const auto [begin, end] = range(nb);
      const double need =
          memory_.TotalGib(memory_.StaticGib(begin, end, t, params.zero_stage, params.shard),
                           memory_.ActivationGibPerSequence(begin, end, t, params.sequence_parallel, rc),
                           memory_.PeakLayerGibPerSequence(begin, end, t, params.sequence_parallel, rc), b, in_flight);
      return FitsIn(need, capacity);
    };
    const uint32_t lo = shape == 3 ? blocks : shape == 1 ? 1 : 0;
    const int64_t result = MostBlocksThatFit(lo, blocks, fits);
    cap_memo_.emplace(key, result);
    return result;
  };

  struct Stage {
    std::vector<uint32_t> devices;
    uint32_t tp = 1;
    const models::GpuSpec* gpu = nullptr;
    double capacity = 0, per_block = 0, embedding = 0, head = 0;
    uint32_t node = 0;
    uint32_t kind = 0;  // index of its (capacity, TP degree) among the level's stages
  };
  // The orders below ask max_blocks for every stage of every order; its answer depends on the stage's
  // (capacity, TP degree), its position's shape and its in-flight micro-batches only, so each level
  // keeps it in a table by (kind, shape, in-flight) in front of cap_memo_ (the same answers, without a
  // search of the memo's map per stage and order).
  std::vector<std::pair<double, uint32_t>> kinds;
  std::vector<int64_t> cap_table;  // [(kind · 4 + shape) · (in-flight bound + 1) + in-flight]; kUnset = not asked yet
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
  std::optional<PipelineTemplate> best;
  const uint32_t max_level = [&] {
    size_t mx = 1;
    for (const Part& p : parts) {
      for (const Chunk& c : p.chunks) mx = std::max(mx, c.choices.size());
    }
    return static_cast<uint32_t>(mx);
  }();
  for (uint32_t level = 0; level < max_level && !best; ++level) {
    // The parts' stages at this escalation level.
    std::vector<std::vector<Stage>> part_stages(k);
    for (uint32_t p = 0; p < k; ++p) {
      for (const Chunk& c : parts[p].chunks) {
        const uint32_t t = c.choices[std::min<size_t>(level, c.choices.size() - 1)];
        for (uint32_t first = 0; first + t <= c.devices.size(); first += t) {
          Stage st;
          st.devices.assign(c.devices.begin() + first, c.devices.begin() + first + t);
          st.tp = t;
          st.gpu = cluster.device(st.devices[0]).gpu;
          st.capacity = st.gpu->memory_gib;
          st.node = cluster.device(st.devices[0]).node;
          st.per_block = cost_.LayerSeconds(st.devices, *st.gpu, 1, b);
          st.embedding = cost_.LayerSeconds(st.devices, *st.gpu, 0, b);
          st.head = cost_.LayerSeconds(st.devices, *st.gpu, L - 1, b);
          const std::pair<double, uint32_t> kind{st.capacity, st.tp};
          auto it = std::find(kinds.begin(), kinds.end(), kind);
          st.kind = static_cast<uint32_t>(it - kinds.begin());
          if (it == kinds.end()) kinds.push_back(kind);
          part_stages[p].push_back(std::move(st));
        }
      }
    }
    uint32_t stages_at_level = 0;
    for (const auto& ps : part_stages) stages_at_level += static_cast<uint32_t>(ps.size());
    // In-flight micro-batches are min(in_flight_cap, S − j) ≤ min(in_flight_cap, stages_at_level).
    const uint32_t flight_bound = std::min(params.in_flight_cap, stages_at_level);
    cap_table.assign(kinds.size() * 4 * (size_t{flight_bound} + 1), kUnset);
    auto stage_cap = [&](const Stage& st, uint32_t j, uint32_t S) -> int64_t {
      const int shape = S == 1 ? 3 : j == 0 ? 0 : j + 1 == S ? 2 : 1;
      const uint32_t in_flight = std::min<uint32_t>(params.in_flight_cap, S - j);  // MemoryModel::InFlight, 1F1B
      int64_t& slot = cap_table[(size_t{st.kind} * 4 + static_cast<size_t>(shape)) * (flight_bound + 1) + in_flight];
      if (slot == kUnset) slot = max_blocks(st.capacity, st.tp, j, S);
      return slot;
    };
    std::set<std::vector<uint64_t>> seen_keys;
    // Eq. 5 between two of this level's stages, as orders put them next to each other again and again.
    std::map<std::pair<const Stage*, const Stage*>, double> hops;
    for (const auto& order : orders) {
      std::vector<const Stage*> stages;
      for (uint32_t p : order) {
        for (const Stage& st : part_stages[p]) stages.push_back(&st);
      }
      const uint32_t S = static_cast<uint32_t>(stages.size());
      // Orders that put the same kinds of stages in the same sequence cost the same: cost one.
      std::vector<uint64_t> key;
      for (uint32_t j = 0; j < S; ++j) {
        const bool same_node = j > 0 && stages[j]->node == stages[j - 1]->node;
        key.push_back((uint64_t{node_class_[stages[j]->node]} << 32) | (uint64_t{stages[j]->tp} << 1) | same_node);
      }
      if (!seen_keys.insert(key).second) continue;
      if (counters != nullptr) ++counters->orders;
      if (S > blocks + 2 || (S == 2 && blocks == 0)) continue;
      std::vector<double> fixed(S, 0), per_block(S, 0);
      std::vector<uint32_t> caps(S, 0);
      bool ok = true;
      for (uint32_t j = 0; j < S && ok; ++j) {
        const Stage& st = *stages[j];
        per_block[j] = st.per_block;
        if (j == 0) fixed[j] += st.embedding;
        if (j + 1 == S) fixed[j] += st.head;
        // Eq. 5's two directions: each stage pays for what it sends (cost.h).
        if (j + 1 < S) {
          auto [it, fresh] = hops.try_emplace(std::make_pair(&st, stages[j + 1]), 0.0);
          if (fresh) {
            it->second =
                cost_.PpHopSeconds(st.devices, stages[j + 1]->devices, b, params.leader_broadcast, &sharing) / 2;
          }
          const double hop = it->second;
          fixed[j] += hop;
          fixed[j + 1] += hop;
        }
        const int64_t cap = stage_cap(st, j, S);
        if (cap < 0) ok = false;
        caps[j] = static_cast<uint32_t>(std::max<int64_t>(0, cap));
      }
      if (!ok) continue;
      const auto ranges = BalanceBlocks(blocks, fixed, per_block, caps);
      if (!ranges) continue;
      PipelineTemplate tpl;
      tpl.parts = k;
      std::map<uint32_t, double> nic_bytes;
      for (uint32_t j = 0; j + 1 < S; ++j) {
        if (stages[j]->node == stages[j + 1]->node) continue;
        nic_bytes[stages[j]->node] += boundary_bytes;
        nic_bytes[stages[j + 1]->node] += boundary_bytes;
      }
      for (const auto& [node, bytes] : nic_bytes) {
        tpl.max_s = std::max(tpl.max_s, cost_.NicSeconds(node, bytes * sharing[node]));
      }

      for (uint32_t j = 0; j < S; ++j) {
        const auto [begin, end] = (*ranges)[j];
        const uint32_t nb = (end - begin) - (begin == 0 ? 1 : 0) - (end == L ? 1 : 0);
        StagePlan sp;
        sp.devices = stages[j]->devices;
        sp.tp = stages[j]->tp;
        sp.layer_begin = begin;
        sp.layer_end = end;
        sp.time_s = fixed[j] + nb * per_block[j];
        tpl.sum_s += sp.time_s;
        tpl.max_s = std::max(tpl.max_s, sp.time_s);
        tpl.stages.push_back(std::move(sp));
      }
      if (!best || tpl.Seconds(params.micro_batches) < best->Seconds(params.micro_batches)) best = std::move(tpl);
    }
  }
  if (!best && counters != nullptr) ++counters->no_fit;
  return best;
}

std::optional<PipelineTemplate> PipelineBuilder::BuildBest(const std::vector<uint32_t>& devices,
                                                           const Phase2Params& params, Phase2Counters* counters) {
  std::string signature;
  const std::vector<uint32_t> canonical = Canonical(devices, &signature);
  const std::string key = signature + "|b" + std::to_string(params.micro_batch) + "|m" +
                          std::to_string(params.micro_batches) + "|c" + std::to_string(params.in_flight_cap) + "|d" +
                          std::to_string(params.shard) + "|z" + std::to_string(params.zero_stage) + "|s" +
                          std::to_string(params.seed);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    std::set<uint32_t> nodes;
    for (uint32_t d : canonical) nodes.insert(problem_.cluster.device(d).node);
    // One part per machine is the finest grouping the order search needs (a machine's GPUs share one
    // fabric); a lone machine may still split in two (two chunks, two TP degrees).
    const uint32_t max_k = std::min<uint32_t>(
        {params.max_parts, std::max<uint32_t>(2, static_cast<uint32_t>(nodes.size())),
         static_cast<uint32_t>(canonical.size())});
    std::optional<PipelineTemplate> best;
    for (uint32_t k = 1; k <= max_k; ++k) {
      auto tpl = Build(canonical, k, params, counters, signature);
      if (tpl && (!best || tpl->Seconds(params.micro_batches) < best->Seconds(params.micro_batches))) {
        best = std::move(tpl);
      }
    }
    // Store positions in the canonical order, so isomorphic groups reuse the template.
    if (best) {
      for (auto& st : best->stages) {
        for (uint32_t& d : st.devices) {
          d = static_cast<uint32_t>(std::find(canonical.begin(), canonical.end(), d) - canonical.begin());
        }
      }
    }
    it = cache_.emplace(key, std::move(best)).first;
  } else if (counters != nullptr) {
    ++counters->cache_hits;
  }
  if (!it->second) return std::nullopt;
  PipelineTemplate out = *it->second;
  for (auto& st : out.stages) {
    for (uint32_t& d : st.devices) d = canonical[d];
  }
  return out;
}

}  // namespace hetsim::planners::hexiscale
