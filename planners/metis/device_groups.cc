// Metis §4.1 (the hetero-aware device groups) and §4.2.2 1) (pruning combinations of stage-device group
// mapping): the enumeration behind Algorithm 1, line 4 (`for B, Stages, DeviceGroups in
// EnumerateWithPruning`).
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "planners/metis/internal.h"
#include "planners/proto/metis.pb.h"

namespace hetsim::planners::metis {

Knobs KnobsFrom(const proto::MetisOptions& o) {
  Knobs k;
  if (o.has_var()) k.var = o.var();
  k.released_var = o.var_bound() == proto::MetisOptions::VAR_BOUND_RELEASED;
  if (o.max_permutation_length() > 0) k.max_permutation_length = o.max_permutation_length();
  if (o.max_profiled_tp_degree() > 0) k.max_profiled_tp = o.max_profiled_tp_degree();
  if (o.max_profiled_batch_size() > 0) k.max_profiled_batch = o.max_profiled_batch_size();
  if (o.memory_composition_layers() > 0) k.memory_k = o.memory_composition_layers();
  if (o.has_zero_stage()) k.zero_stage = o.zero_stage();
  if (o.max_stages() > 0) k.max_stages = o.max_stages();
  k.any_group_size = o.any_group_size();
  if (o.max_full_assignments() > 0) k.max_full_assignments = o.max_full_assignments();
  if (o.max_dfs_nodes() > 0) k.max_dfs_nodes = o.max_dfs_nodes();
  k.threads = std::max<uint32_t>(1, o.threads());
  k.time_limit_s = o.time_limit_s();
  k.max_orders = o.max_orders();
  return k;
}

// ---- §4.1 ---------------------------------------------------------------------------------------------

std::vector<uint32_t> NodeClasses(const models::Cluster& cluster) {
  const auto& net = cluster.spec().network();
  const uint32_t per_switch = net.has_fat_tree() ? net.fat_tree().nodes_per_leaf()
                              : net.has_pods()   ? net.pods().nodes_per_pod()
                                                 : 0;
  using Key = std::tuple<std::string, uint32_t, std::string, std::string, std::string, uint32_t>;
  std::map<Key, uint32_t> ids;
  std::vector<uint32_t> out;
  for (uint32_t n = 0; n < cluster.nodes().size(); ++n) {
    const auto& node = cluster.nodes()[n];
    const Key key{node.gpu->name,
                  node.num_gpus,
                  node.fabric.SerializeAsString(),
                  node.has_nic ? node.nic.SerializeAsString() : std::string(),
                  node.zone,
                  per_switch == 0 ? 0 : n / per_switch};
    auto [it, inserted] = ids.emplace(key, static_cast<uint32_t>(ids.size()));
    out.push_back(it->second);
  }
  return out;
}

std::string DescribeGroup(const models::Cluster& cluster, const Take& take) {
  uint32_t size = 0;
  std::map<std::string, uint32_t> types;
  std::string where;
  for (uint32_t n = 0; n < take.size(); ++n) {
    if (take[n] == 0) continue;
    size += take[n];
    types[cluster.nodes()[n].gpu->name] += take[n];
    where += (where.empty() ? "" : " + ") + cluster.nodes()[n].name + ":" + std::to_string(take[n]);
  }
  std::string kinds;
  for (const auto& [t, c] : types) kinds += (kinds.empty() ? "" : " + ") + std::to_string(c) + "×" + t;
  return std::to_string(size) + (size == 1 ? " GPU: " : " GPUs: ") + kinds + " on " + where;
}

namespace {

// Chooses how many GPUs each node gives to one device group: k_n ≤ free[n], Σ k_n = size. A node whose
// `twin` is m < n (interchangeable with m: same class and same history) takes no more than m does, so
// each group is produced once up to swapping interchangeable nodes (§4.1: groups differ by size, types
// and node placement, not by which of two identical nodes is used).
class GroupChooser {
 public:
  GroupChooser(const std::vector<uint32_t>& free, const std::vector<int>& twin) : free_(free), twin_(twin) {
    suffix_.assign(free.size() + 1, 0);
    for (size_t n = free.size(); n-- > 0;) suffix_[n] = suffix_[n + 1] + free[n];
  }
  // Calls visit(take) for every group of `size`; visit returns false to stop. Returns false if stopped.
  bool ForEach(uint32_t size, const std::function<bool(const Take&)>& visit) {
    take_.assign(free_.size(), 0);
    return Rec(0, size, visit);
  }

 private:
  bool Rec(uint32_t n, uint32_t left, const std::function<bool(const Take&)>& visit) {
    if (left == 0) return visit(take_);
    if (n == free_.size() || suffix_[n] < left) return true;
    uint32_t most = std::min(free_[n], left);
    if (twin_[n] >= 0) most = std::min(most, take_[static_cast<uint32_t>(twin_[n])]);
    // More GPUs from earlier nodes first: groups come out in node order.
    for (int64_t k = most; k >= 0; --k) {
      if (suffix_[n + 1] + static_cast<uint32_t>(k) < left) break;
      take_[n] = static_cast<uint32_t>(k);
      if (!Rec(n + 1, left - static_cast<uint32_t>(k), visit)) return false;
    }
    take_[n] = 0;
    return true;
  }
  const std::vector<uint32_t>& free_;
  const std::vector<int>& twin_;
  std::vector<uint32_t> suffix_;
  Take take_;
};

// twin[n]: the closest earlier node with the same class and, at every earlier stage, the same number of
// GPUs taken (so the two are still interchangeable), or −1.
std::vector<int> Twins(const std::vector<uint32_t>& classes, const Assignment& history, const std::vector<uint32_t>& free) {
  const size_t N = classes.size();
  std::vector<int> twin(N, -1);
  for (size_t n = 0; n < N; ++n) {
    for (size_t m = n; m-- > 0;) {
      if (classes[m] != classes[n] || free[m] != free[n]) continue;
      bool same = true;
      for (const Take& t : history) same &= t[m] == t[n];
      if (same) {
        twin[n] = static_cast<int>(m);
        break;
      }
    }
  }
  return twin;
}

std::vector<uint32_t> FreeGpus(const models::Cluster& cluster) {
  std::vector<uint32_t> free;
  for (const auto& node : cluster.nodes()) free.push_back(node.num_gpus);
  return free;
}

}  // namespace

std::vector<Take> UniqueDeviceGroups(const models::Cluster& cluster, const std::vector<uint32_t>& sizes) {
  const std::vector<uint32_t> classes = NodeClasses(cluster);
  const std::vector<uint32_t> free = FreeGpus(cluster);
  const std::vector<int> twin = Twins(classes, {}, free);
  std::vector<uint32_t> wanted = sizes;
  if (wanted.empty()) {
    for (uint32_t s = 1; s <= cluster.num_devices(); ++s) wanted.push_back(s);
  }
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<Take> out;
  GroupChooser chooser(free, twin);
  for (uint32_t size : wanted) {
    if (size == 0) continue;
    chooser.ForEach(size, [&](const Take& t) {
      out.push_back(t);
      return true;
    });
  }
  return out;
}

// ---- §4.2.2 1) -------------------------------------------------------------------------------------------

std::vector<std::vector<uint32_t>> StageSizeMultisets(uint32_t gpus, uint32_t stages, double var, bool power_of_two,
                                                      bool released_var) {
  std::vector<std::vector<uint32_t>> out;
  if (stages == 0 || stages > gpus) return out;
  // "Metis explores device groups with sizes only larger than N_GPUs/S · (1 − var)" (kept when equal, so
  // that var = 0 still allows the even split). The released planner reads the knob the other way round:
  // sizes of at least max(N // S, S // N) · var.
  const double lower = released_var ? static_cast<double>(std::max(gpus / stages, stages / gpus)) * var
                                    : static_cast<double>(gpus) / stages * (1.0 - var);
  std::vector<uint32_t> sizes;  // decreasing
  for (uint32_t s = gpus; s >= 1; --s) {
    if (power_of_two && (s & (s - 1)) != 0) continue;
    if (s + 1e-9 < lower) continue;
    sizes.push_back(s);
  }
  if (sizes.empty()) return out;
  std::vector<uint32_t> cur;
  std::function<void(size_t, uint32_t, uint32_t)> rec = [&](size_t i, uint32_t left, uint32_t k) {
    if (k == 0) {
      if (left == 0) out.push_back(cur);
      return;
    }
    for (size_t j = i; j < sizes.size(); ++j) {
      const uint32_t s = sizes[j];
      if (uint64_t{s} * k < left) break;       // even the largest allowed sizes cannot reach the sum
      if (s > left) continue;
      if (uint64_t{sizes.back()} * (k - 1) > left - s) continue;  // the rest would overshoot
      cur.push_back(s);
      rec(j, left - s, k - 1);
      cur.pop_back();
    }
  };
  rec(0, gpus, stages);
  return out;
}

std::vector<std::vector<uint32_t>> MergeSmallest(const std::vector<uint32_t>& sizes, uint32_t max_len) {
  std::vector<std::vector<uint32_t>> units;
  for (uint32_t s : sizes) units.push_back({s});
  auto total = [](const std::vector<uint32_t>& u) {
    uint64_t t = 0;
    for (uint32_t s : u) t += s;
    return t;
  };
  auto by_total = [&](const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) { return total(a) < total(b); };
  std::stable_sort(units.begin(), units.end(), by_total);
  max_len = std::max<uint32_t>(1, max_len);
  while (units.size() > max_len) {
    // §4.2.2 1): "grouping two device groups with smallest size into a pair and iterating this process".
    // As in the authors' planner (search_space/device_group.py, permute), one round pairs up every group
    // of the smallest size ((1),(1),(1),(1),(1),(1),(2) → (1,1),(1,1),(1,1),(2)).
    const uint64_t smallest = total(units[0]);
    size_t count = 0;
    while (count < units.size() && total(units[count]) == smallest) ++count;
    std::vector<std::vector<uint32_t>> next;
    if (count >= 2) {
      size_t i = 0;
      for (; i + 1 < count; i += 2) {
        std::vector<uint32_t> u = units[i];
        u.insert(u.end(), units[i + 1].begin(), units[i + 1].end());
        next.push_back(std::move(u));
      }
      for (; i < units.size(); ++i) next.push_back(units[i]);
    } else {
      // A lone smallest group pairs with the next smallest unit.
      std::vector<uint32_t> u = units[0];
      u.insert(u.end(), units[1].begin(), units[1].end());
      next.push_back(std::move(u));
      for (size_t i = 2; i < units.size(); ++i) next.push_back(units[i]);
    }
    units = std::move(next);
    std::stable_sort(units.begin(), units.end(), by_total);
  }
  return units;
}

void ForEachStageSizeOrder(const std::vector<uint32_t>& sizes, uint32_t max_len,
                           const std::function<bool(const std::vector<uint32_t>&)>& visit) {
  std::vector<std::vector<uint32_t>> units = MergeSmallest(sizes, max_len);
  // Distinct permutations of the units (equal units are interchangeable): "Metis then permutes the
  // elements of G' ... and assigns stages to the device groups in order for each combination".
  std::sort(units.begin(), units.end());
  std::vector<uint32_t> flat;
  do {
    flat.clear();
    for (const auto& u : units) flat.insert(flat.end(), u.begin(), u.end());
    if (!visit(flat)) return;
  } while (std::next_permutation(units.begin(), units.end()));
}

void ForEachStageSizeOrderSkipping(
    const std::vector<uint32_t>& sizes, uint32_t max_len,
    const std::function<std::optional<uint32_t>(const std::vector<uint32_t>&, uint64_t)>& visit) {
  std::vector<std::vector<uint32_t>> units = MergeSmallest(sizes, max_len);
  std::sort(units.begin(), units.end());
  const size_t n = units.size();
  // The rank of a multiset permutation: at each position, the orders that put a smaller remaining unit
  // there, (m − 1)! / Π c! each, with m the units left and c the remaining counts.
  std::vector<std::vector<uint32_t>> distinct = units;
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<uint32_t> total(distinct.size(), 0);
  for (const auto& u : units) ++total[std::lower_bound(distinct.begin(), distinct.end(), u) - distinct.begin()];
  std::vector<uint64_t> fact(n + 1, 1);
  for (size_t i = 1; i <= n; ++i) fact[i] = fact[i - 1] * i;
  auto arrangements = [&](const std::vector<uint32_t>& c, size_t m) {
    uint64_t a = fact[m];
    for (uint32_t k : c) a /= fact[k];
    return a;
  };
  std::vector<uint32_t> left;
  std::vector<uint32_t> flat;
  do {
    left = total;
    uint64_t rank = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t id = static_cast<size_t>(std::lower_bound(distinct.begin(), distinct.end(), units[i]) - distinct.begin());
      for (size_t v = 0; v < id; ++v) {
        if (left[v] == 0) continue;
        --left[v];
        rank += arrangements(left, n - i - 1);
        ++left[v];
      }
      --left[id];
    }
    flat.clear();
    for (const auto& u : units) flat.insert(flat.end(), u.begin(), u.end());
    const std::optional<uint32_t> skip = visit(flat, rank);
    if (!skip) return;
    if (*skip > 0) {
      // Sorting the units after those that cover the first *skip stages in descending order makes the
      // next permutation the first one that changes one of them.
      size_t q = 0, covered = 0;
      while (q < n && covered < *skip) covered += units[q++].size();
      std::sort(units.begin() + static_cast<std::ptrdiff_t>(q), units.end(), std::greater<>());
    }
  } while (std::next_permutation(units.begin(), units.end()));
}

uint64_t OrderCount(const std::vector<uint32_t>& sizes, uint32_t max_len) {
  std::vector<std::vector<uint32_t>> units = MergeSmallest(sizes, max_len);
  std::sort(units.begin(), units.end());
  // n! / Π c! over the multiplicities c of equal units, as a product of binomials (no overflow below the
  // saturation).
  uint64_t count = 1, placed = 0;
  for (size_t i = 0; i < units.size();) {
    size_t j = i;
    while (j < units.size() && units[j] == units[i]) ++j;
    // C(placed + c, c), built one factor at a time: each partial product is itself a binomial.
    uint64_t binom = 1;
    for (uint64_t k = 1; k <= j - i; ++k) {
      uint64_t next = 0;  // C(placed + k − 1, k − 1) · (placed + k), divisible by k
      if (__builtin_mul_overflow(binom, placed + k, &next)) return UINT64_MAX;
      binom = next / k;
    }
    placed += j - i;
    if (__builtin_mul_overflow(count, binom, &count)) return UINT64_MAX;
    i = j;
  }
  return count;
}

std::vector<uint32_t> PermutationLengths(const std::vector<std::vector<uint32_t>>& unit_sizes, uint32_t max_len,
                                         uint64_t max_orders) {
  std::vector<uint32_t> lengths(unit_sizes.size(), max_len);
  std::vector<uint64_t> counts(unit_sizes.size());
  uint64_t total = 0;
  for (size_t u = 0; u < unit_sizes.size(); ++u) {
    counts[u] = OrderCount(unit_sizes[u], max_len);
    total = counts[u] > UINT64_MAX - total ? UINT64_MAX : total + counts[u];
  }
  if (total <= max_orders) return lengths;
  // The largest per-unit count c that keeps Σ min(count, c) within the budget (at least one order each).
  auto spent = [&](uint64_t c) {
    uint64_t sum = 0;
    for (uint64_t n : counts) {
      const uint64_t take = std::min(n, c);
      sum = take > UINT64_MAX - sum ? UINT64_MAX : sum + take;
    }
    return sum;
  };
  uint64_t lo = 1, hi = *std::max_element(counts.begin(), counts.end());
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    if (spent(mid) <= max_orders) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  for (size_t u = 0; u < unit_sizes.size(); ++u) {
    if (counts[u] <= lo) continue;
    uint32_t len = max_len;
    while (len > 1 && OrderCount(unit_sizes[u], len) > lo) --len;
    lengths[u] = len;
  }
  return lengths;
}

std::vector<std::vector<uint32_t>> StageSizeOrders(const std::vector<uint32_t>& sizes, uint32_t max_len) {
  std::vector<std::vector<uint32_t>> out;
  ForEachStageSizeOrder(sizes, max_len, [&](const std::vector<uint32_t>& order) {
    out.push_back(order);
    return true;
  });
  return out;
}

std::vector<std::vector<uint32_t>> NodeOrders(const models::Cluster& cluster, const std::vector<uint32_t>& classes) {
  const uint32_t N = static_cast<uint32_t>(cluster.nodes().size());
  // The key each order permutes: node classes, else GPU types, else nothing.
  std::vector<uint32_t> key = classes;
  uint32_t kinds = classes.empty() ? 0 : *std::max_element(classes.begin(), classes.end()) + 1;
  if (kinds > 6) {
    std::map<std::string, uint32_t> type_ids;
    key.clear();
    for (const auto& node : cluster.nodes()) {
      key.push_back(type_ids.emplace(node.gpu->name, static_cast<uint32_t>(type_ids.size())).first->second);
    }
    kinds = static_cast<uint32_t>(type_ids.size());
    if (kinds > 6) {
      key.assign(N, 0);
      kinds = 1;
    }
  }
  std::vector<uint32_t> perm(kinds);
  for (uint32_t i = 0; i < kinds; ++i) perm[i] = i;
  std::vector<std::vector<uint32_t>> out;
  do {
    std::vector<uint32_t> rank(kinds);
    for (uint32_t i = 0; i < kinds; ++i) rank[perm[i]] = i;
    std::vector<uint32_t> order(N);
    for (uint32_t n = 0; n < N; ++n) order[n] = n;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return rank[key[a]] < rank[key[b]]; });
    out.push_back(std::move(order));
  } while (std::next_permutation(perm.begin(), perm.end()));
  return out;
}

Placement ToPlacement(const Assignment& assignment) {
  Placement p;
  p.stage_begin.push_back(0);
  for (const Take& t : assignment) {
    for (uint32_t n = 0; n < t.size(); ++n) {
      if (t[n] > 0) p.parts.emplace_back(n, t[n]);
    }
    p.stage_begin.push_back(static_cast<uint32_t>(p.parts.size()));
  }
  return p;
}

void ForEachPlacement(const models::Cluster& cluster, const std::vector<uint32_t>& classes,
                      const std::vector<uint32_t>& sizes, bool full,
                      const std::vector<std::vector<uint32_t>>& node_orders,
                      const std::function<bool(const Placement&)>& visit) {
  const uint32_t N = static_cast<uint32_t>(cluster.nodes().size());
  const uint32_t S = static_cast<uint32_t>(sizes.size());
  if (full) {
    Assignment history;
    std::vector<uint32_t> free = FreeGpus(cluster);
    std::function<bool(uint32_t)> rec = [&](uint32_t i) -> bool {
      if (i == S) return visit(ToPlacement(history));
      const std::vector<int> twin = Twins(classes, history, free);
      GroupChooser chooser(free, twin);
      const std::vector<uint32_t> before = free;
      return chooser.ForEach(sizes[i], [&](const Take& t) {
        for (uint32_t n = 0; n < N; ++n) free[n] = before[n] - t[n];
        history.push_back(t);
        const bool go_on = rec(i + 1);
        history.pop_back();
        free = before;
        return go_on;
      });
    };
    rec(0);
    return;
  }
  std::vector<Placement> scratch;
  ForEachConsecutivePlacement(cluster, sizes, node_orders, scratch,
                              [&](const Placement& p, uint32_t) { return visit(p); });
}

void ForEachConsecutivePlacement(const models::Cluster& cluster, const std::vector<uint32_t>& sizes,
                                 const std::vector<std::vector<uint32_t>>& node_orders, std::vector<Placement>& built,
                                 const std::function<bool(const Placement&, uint32_t)>& visit) {
  // Consecutive GPUs of each node order; a placement that an earlier order already produced is skipped.
  const uint32_t S = static_cast<uint32_t>(sizes.size());
  if (built.size() < node_orders.size()) built.resize(node_orders.size());
  for (uint32_t o = 0; o < node_orders.size(); ++o) {
    const auto& order = node_orders[o];
    Placement& p = built[o];
    p.stage_begin.assign(1, 0);
    p.parts.clear();
    size_t pos = 0;             // index into `order`
    uint32_t used_in_node = 0;  // GPUs of order[pos] already given out
    for (uint32_t i = 0; i < S; ++i) {
      uint32_t left = sizes[i];
      const size_t first = p.parts.size();
      while (left > 0 && pos < order.size()) {
        const uint32_t n = order[pos];
        const uint32_t k = std::min(left, cluster.nodes()[n].num_gpus - used_in_node);
        p.parts.emplace_back(n, k);
        left -= k;
        used_in_node += k;
        if (used_in_node == cluster.nodes()[n].num_gpus) {
          ++pos;
          used_in_node = 0;
        }
      }
      std::sort(p.parts.begin() + static_cast<std::ptrdiff_t>(first), p.parts.end());
      p.stage_begin.push_back(static_cast<uint32_t>(p.parts.size()));
    }
    bool duplicate = false;
    for (uint32_t q = 0; q < o && !duplicate; ++q) {
      duplicate = built[q].stage_begin == p.stage_begin && built[q].parts == p.parts;
    }
    if (duplicate) continue;
    if (!visit(p, o)) return;
  }
}

void ForEachAssignment(const models::Cluster& cluster, const std::vector<uint32_t>& classes,
                       const std::vector<uint32_t>& sizes, bool full,
                       const std::vector<std::vector<uint32_t>>& node_orders,
                       const std::function<bool(const Assignment&)>& visit) {
  const uint32_t N = static_cast<uint32_t>(cluster.nodes().size());
  ForEachPlacement(cluster, classes, sizes, full, node_orders, [&](const Placement& p) {
    Assignment a;
    for (size_t s = 0; s + 1 < p.stage_begin.size(); ++s) {
      Take t(N, 0);
      for (uint32_t i = p.stage_begin[s]; i < p.stage_begin[s + 1]; ++i) t[p.parts[i].first] += p.parts[i].second;
      a.push_back(std::move(t));
    }
    return visit(a);
  });
}

uint64_t CountFullAssignments(const models::Cluster& cluster, const std::vector<uint32_t>& classes,
                              const Knobs& knobs, uint32_t max_stages, uint64_t limit) {
  uint64_t count = 0;
  const uint32_t N = cluster.num_devices();
  for (uint32_t S = 1; S <= max_stages && count <= limit; ++S) {
    for (const auto& ms : StageSizeMultisets(N, S, knobs.var, !knobs.any_group_size, knobs.released_var)) {
      ForEachStageSizeOrder(ms, knobs.max_permutation_length, [&](const std::vector<uint32_t>& order) {
        ForEachPlacement(cluster, classes, order, /*full=*/true, {}, [&](const Placement&) { return ++count <= limit; });
        return count <= limit;
      });
      if (count > limit) return count;
    }
  }
  return count;
}

}  // namespace hetsim::planners::metis
