// AutoHet §III-C and §III-D: GPU node and stage mapping, the layer partition (eq. 4), and the
// binary-decomposition profiles (eq. 5) it is computed on.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "planners/autohet/internal.h"
#include "planners/milp.h"

namespace hetsim::planners::autohet {

// ---- eq. 5 ------------------------------------------------------------------------------------------------

double BinaryProfile::Measure(const models::GpuSpec& gpu, uint32_t tp, uint32_t b, uint32_t begin, uint32_t end) {
  const auto key = std::make_tuple(gpu.name, tp, b, begin, end);
  auto it = table_.find(key);
  if (it != table_.end()) return it->second;
  const auto [f, bw] = cost_.RangeCompute(gpu, begin, end, tp, b, recompute_);
  return table_[key] = f + bw;
}

double BinaryProfile::Blocks(const models::GpuSpec& gpu, uint32_t tp, uint32_t b, uint32_t blocks) {
  // T(n) = Σ_k a_k T(2^k) with n = Σ_k a_k 2^k; the profiled runs are 2^k consecutive blocks from the first
  // (§III-D: in repetitive models a run's time depends on its length only).
  double t = 0;
  for (uint32_t k = 0; (1u << k) <= blocks; ++k) {
    if (blocks & (1u << k)) t += Measure(gpu, tp, b, 1, 1 + (1u << k));
  }
  return t;
}

double BinaryProfile::Embedding(const models::GpuSpec& gpu, uint32_t tp, uint32_t b) {
  return Measure(gpu, tp, b, 0, 1);
}

double BinaryProfile::Head(const models::GpuSpec& gpu, uint32_t tp, uint32_t b) {
  const uint32_t last = cost_.model().num_layers() - 1;
  return Measure(gpu, tp, b, last, last + 1);
}

// ---- node and stage mapping -----------------------------------------------------------------------------

std::vector<Entity> MakeEntities(const models::Cluster& cluster, uint32_t tp, std::vector<EntityType>* types) {
  std::vector<Entity> out;
  types->clear();
  for (uint32_t n = 0; n < cluster.nodes().size(); ++n) {
    const auto& node = cluster.node(n);
    uint32_t type = 0;
    while (type < types->size() && (*types)[type].gpu->name != node.gpu->name) ++type;
    if (type == types->size()) types->push_back(EntityType{node.gpu, 0, 0, 0});
    for (uint32_t g = 0; g + tp <= node.num_gpus; g += tp) {
      Entity e;
      e.type = type;
      e.node = n;
      for (uint32_t i = 0; i < tp; ++i) e.devices.push_back(node.first_device + g + i);
      out.push_back(std::move(e));
      ++(*types)[type].count;
    }
  }
  return out;
}

std::vector<std::vector<uint32_t>> MapStages(const Grouping& grouping, const std::vector<EntityType>& types,
                                             const std::vector<Entity>& entities) {
  const size_t D = grouping.counts.size();
  // Types from the weakest (ties: first met).
  std::vector<uint32_t> by_power(types.size());
  std::iota(by_power.begin(), by_power.end(), 0);
  std::stable_sort(by_power.begin(), by_power.end(),
                   [&](uint32_t a, uint32_t b) { return types[a].power < types[b].power; });
  // Each group's stages: lower-end GPUs first (§III-C "pipeline stage mapping").
  std::vector<std::vector<uint32_t>> stage_type(D);
  for (size_t j = 0; j < D; ++j) {
    for (uint32_t k : by_power) stage_type[j].insert(stage_type[j].end(), grouping.counts[j][k], k);
  }
  uint32_t nodes = 0;
  for (const auto& e : entities) nodes = std::max(nodes, e.node + 1);
  // free[node][type]: unplaced entities, in node order.
  std::vector<std::vector<std::vector<uint32_t>>> free(nodes, std::vector<std::vector<uint32_t>>(types.size()));
  for (uint32_t i = static_cast<uint32_t>(entities.size()); i-- > 0;) free[entities[i].node][entities[i].type].push_back(i);
  auto take = [&](uint32_t node, uint32_t type) {
    const uint32_t e = free[node][type].back();
    free[node][type].pop_back();
    return e;
  };
  constexpr uint32_t kUnplaced = ~0u;
  std::vector<std::vector<uint32_t>> placed(D);
  for (size_t j = 0; j < D; ++j) placed[j].assign(stage_type[j].size(), kUnplaced);
  auto earliest = [&](size_t j, uint32_t k) -> int {
    for (size_t s = 0; s < stage_type[j].size(); ++s) {
      if (stage_type[j][s] == k && placed[j][s] == kUnplaced) return static_cast<int>(s);
    }
    return -1;
  };
  // The same stage of every group on one node, type by type from the weakest, while (i) every group has an
  // unplaced stage of the type and (ii) one node has a free entity of it for every group.
  for (uint32_t k : by_power) {
    for (;;) {
      std::vector<int> at(D);
      bool all = true;
      for (size_t j = 0; j < D && all; ++j) all = (at[j] = earliest(j, k)) >= 0;
      if (!all) break;
      uint32_t node = nodes;
      for (uint32_t n = 0; n < nodes && node == nodes; ++n) {
        if (free[n][k].size() >= D) node = n;
      }
      if (node == nodes) break;
      for (size_t j = 0; j < D; ++j) placed[j][static_cast<size_t>(at[j])] = take(node, k);
    }
  }
  // The rest in order; a stage goes next to its predecessor when that node has one free (PP over NVLink).
  for (size_t j = 0; j < D; ++j) {
    for (size_t s = 0; s < stage_type[j].size(); ++s) {
      if (placed[j][s] != kUnplaced) continue;
      const uint32_t k = stage_type[j][s];
      uint32_t node = nodes;
      if (s > 0 && placed[j][s - 1] != kUnplaced && !free[entities[placed[j][s - 1]].node][k].empty()) {
        node = entities[placed[j][s - 1]].node;
      }
      for (uint32_t n = 0; n < nodes && node == nodes; ++n) {
        if (!free[n][k].empty()) node = n;
      }
      placed[j][s] = take(node, k);  // counts come from the entities, so one is always free
    }
  }
  return placed;
}

// ---- eq. 4 ------------------------------------------------------------------------------------------------

std::optional<Partition> PartitionLayers(const std::vector<StageTable>& stages, uint32_t blocks,
                                         uint32_t micro_batches, bool bottleneck_only) {
  const size_t S = stages.size();
  if (S == 0 || S > blocks) return std::nullopt;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  auto usable = [&](size_t s, uint32_t l) {
    return l >= 1 && l <= stages[s].seconds.size() && stages[s].fits[l - 1] && std::isfinite(stages[s].seconds[l - 1]);
  };
  std::vector<double> caps;
  for (size_t s = 0; s < S; ++s) {
    for (uint32_t l = 1; l <= stages[s].seconds.size(); ++l) {
      if (usable(s, l)) caps.push_back(stages[s].seconds[l - 1]);
    }
  }
  std::sort(caps.begin(), caps.end());
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  const double weight = bottleneck_only ? 1.0 : micro_batches - 1.0;
  std::optional<Partition> best;
  double best_obj = kNone;
  // f[s][n]: the least Σ t of the first s stages holding n blocks, each t ≤ Y; choice[s][n]: stage s−1's count.
  std::vector<std::vector<double>> f(S + 1, std::vector<double>(blocks + 1));
  std::vector<std::vector<uint32_t>> choice(S + 1, std::vector<uint32_t>(blocks + 1));
  for (double Y : caps) {
    if (best && weight * Y >= best_obj) break;  // larger caps cannot do better (Σ ≥ 0)
    for (auto& row : f) std::fill(row.begin(), row.end(), kNone);
    f[0][0] = 0;
    for (size_t s = 0; s < S; ++s) {
      for (uint32_t n = 0; n <= blocks; ++n) {
        if (f[s][n] == kNone) continue;
        for (uint32_t l = 1; n + l <= blocks && l <= stages[s].seconds.size(); ++l) {
          if (!usable(s, l) || stages[s].seconds[l - 1] > Y) continue;
          const double v = f[s][n] + stages[s].seconds[l - 1];
          if (v < f[s + 1][n + l]) {
            f[s + 1][n + l] = v;
            choice[s + 1][n + l] = l;
          }
        }
      }
    }
    if (f[S][blocks] == kNone) continue;
    const double obj = weight * Y + (bottleneck_only ? 0.0 : f[S][blocks]);
    if (obj < best_obj) {
      best_obj = obj;
      Partition p;
      p.blocks.assign(S, 0);
      for (size_t s = S, n = blocks; s > 0; --s) {
        p.blocks[s - 1] = choice[s][n];
        n -= choice[s][n];
      }
      p.objective_s = obj;
      p.proven_optimal = true;
      best = std::move(p);
    }
    if (bottleneck_only) break;  // the smallest feasible cap is the optimum
  }
  return best;
}

Result<std::optional<Partition>> PartitionLayersMilp(const std::vector<StageTable>& stages, uint32_t blocks,
                                                     uint32_t micro_batches, bool bottleneck_only,
                                                     double time_limit_s) {
  const size_t S = stages.size();
  if (S == 0 || S > blocks) return std::optional<Partition>{};
  // Milliseconds keep the solver's tolerances meaningful.
  constexpr double kScale = 1e3;
  Milp p(Milp::kMinimize);
  const int y = p.AddVar(0, kMilpInf, bottleneck_only ? 1.0 : micro_batches - 1.0, false);
  std::vector<std::vector<std::pair<int, uint32_t>>> u(S);  // (variable, blocks)
  std::vector<std::pair<int, double>> total;
  for (size_t s = 0; s < S; ++s) {
    // A stage holds 1..blocks − (S − 1) blocks; counts that do not fit in memory are left out (eq. 4c).
    const uint32_t most = blocks - static_cast<uint32_t>(S - 1);
    std::vector<std::pair<int, double>> one, time{{y, -1}};
    for (uint32_t l = 1; l <= most && l <= stages[s].seconds.size(); ++l) {
      if (!stages[s].fits[l - 1]) continue;
      const double t = stages[s].seconds[l - 1] * kScale;
      const int v = p.AddVar(0, 1, bottleneck_only ? 0.0 : t, true);
      u[s].push_back({v, l});
      one.push_back({v, 1});
      time.push_back({v, t});
      total.push_back({v, static_cast<double>(l)});
    }
    if (one.empty()) return std::optional<Partition>{};
    p.AddRow(one, 1, 1);
    p.AddRow(time, -kMilpInf, 0);  // y ≥ t_s
  }
  p.AddRow(total, blocks, blocks);  // eq. 4b
  HETSIM_ASSIGN_OR_RETURN(MilpSolution sol, p.Solve(time_limit_s));
  if (!sol.has_solution()) {
    if (sol.outcome == MilpSolution::kInfeasible) return std::optional<Partition>{};
    return Status::Infeasible("autohet: the layer-partition program (eq. 4) found no solution within "
                              "solver_time_limit_s; raise it");
  }
  Partition out;
  out.blocks.assign(S, 0);
  for (size_t s = 0; s < S; ++s) {
    for (const auto& [v, l] : u[s]) {
      if (sol.values[static_cast<size_t>(v)] > 0.5) out.blocks[s] = l;
    }
  }
  out.objective_s = sol.objective / kScale;
  out.solver_s = sol.seconds;
  out.proven_optimal = sol.outcome == MilpSolution::kOptimal;
  out.nodes = sol.nodes;
  return std::optional<Partition>(std::move(out));
}

}  // namespace hetsim::planners::autohet
