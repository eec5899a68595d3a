#include "planners/hexiscale/graph.h"

#include <metis.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace hetsim::planners::hexiscale {
namespace {

static_assert(sizeof(idx_t) == sizeof(int32_t), "hetsim expects libmetis built with 32-bit idx_t");

constexpr double kVertexScale = 10000;

}  // namespace

namespace {

// A graph METIS cuts: vertices (GPUs or bundles of them) with their compute and GPU counts, and the raw
// weight of the edge between two of them — the sum over their GPU pairs of β (min cut) or 1/β (max cut) —
// as a dense symmetric matrix (each pair asked once, for i < j).
struct Graph {
  std::vector<double> compute;
  std::vector<uint32_t> gpus;
  std::vector<double> raw;  // n × n
  size_t n() const { return compute.size(); }
  void Fill(const std::function<double(uint32_t, uint32_t)>& pair) {
    const size_t m = n();
    raw.assign(m * m, 0);
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = i + 1; j < m; ++j) raw[i * m + j] = raw[j * m + i] = pair(i, j);
    }
  }
};

// The integer weights (see graph.h) of the subgraph on `vertices` (increasing indices into `g`): edges in
// CSR order of its complete graph.
MetisWeights Scale(const Graph& g, const std::vector<uint32_t>& vertices) {
  const uint32_t n = static_cast<uint32_t>(vertices.size());
  const size_t stride = g.n();
  MetisWeights w;
  double vmax = 0;
  for (uint32_t v : vertices) vmax = std::max(vmax, g.compute[v]);
  for (uint32_t v : vertices) {
    w.vertex.push_back(
        static_cast<int32_t>(std::max(1.0, std::round(vmax > 0 ? g.compute[v] / vmax * kVertexScale : 1))));
  }
  if (n < 2) return w;
  // The weights in CSR order, gathered once (the rows of `vertices` in the dense matrix), and their sum; a
  // non-finite weight (none between distinct GPUs) counts as the largest finite one.
  const size_t entries_n = size_t{n} * (n - 1);
  std::vector<double> values(entries_n);
  double finite_max = 0, sum = 0;
  bool all_finite = true;
  {
    double* at = values.data();
    for (uint32_t i = 0; i < n; ++i) {
      const double* row = &g.raw[vertices[i] * stride];
      for (uint32_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const double v = row[vertices[j]];
        *at++ = v;
        if (std::isfinite(v)) {
          finite_max = std::max(finite_max, v);
          sum += v;
        } else {
          all_finite = false;
        }
      }
    }
  }
  if (!all_finite) {
    sum = 0;
    for (double& v : values) {
      if (!std::isfinite(v)) v = finite_max;
      sum += v;
    }
  }
  // Linear scaling so that the weights of all nnz entries sum to at most 2³¹ − 1: no sum METIS forms (a
  // vertex's, a part's, the whole graph's) overflows (the −nnz leaves room for the floor-to-1 below).
  const double entries = static_cast<double>(n) * (n - 1);
  const double limit = static_cast<double>(std::numeric_limits<int32_t>::max()) - entries;
  const double scale = sum > 0 ? limit / sum : 1;
  w.edge.resize(entries_n);
  for (size_t e = 0; e < entries_n; ++e) {
    // floor of a non-negative value below 2³¹: its truncation.
    const double x = values[e] * scale;
    w.edge[e] = x >= 1 ? static_cast<int32_t>(x) : 1;
  }
  return w;
}

}  // namespace

MetisWeights ScaleWeights(const PartitionRequest& request) {
  Graph g;
  g.compute = request.vertex_weight;
  g.gpus.assign(request.vertex_weight.size(), 1);
  g.Fill([&](uint32_t i, uint32_t j) {
    const double beta = request.bandwidth(i, j);
    return request.objective == CutObjective::kMinCut ? beta : 1.0 / beta;
  });
  std::vector<uint32_t> all(g.n());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  return Scale(g, all);
}

std::vector<std::vector<uint32_t>> Bundles(const PartitionRequest& request) {
  const uint32_t n = static_cast<uint32_t>(request.vertex_weight.size());
  std::vector<std::vector<uint32_t>> singles(n);
  for (uint32_t i = 0; i < n; ++i) singles[i] = {i};
  if (request.max_vertices == 0 || n <= request.max_vertices || request.machine.size() != n) return singles;
  // Each machine's vertices, machines in order of first appearance.
  std::vector<std::vector<uint32_t>> machines;
  std::vector<uint32_t> index;  // machine id -> position in `machines`
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t m = request.machine[i];
    if (m >= index.size()) index.resize(m + 1, UINT32_MAX);
    if (index[m] == UINT32_MAX) {
      index[m] = static_cast<uint32_t>(machines.size());
      machines.emplace_back();
    }
    machines[index[m]].push_back(i);
  }
  size_t largest = 0;
  for (const auto& m : machines) largest = std::max(largest, m.size());
  auto count = [&](size_t size) {
    size_t c = 0;
    for (const auto& m : machines) c += (m.size() + size - 1) / size;
    return c;
  };
  size_t size = 2;
  while (size < largest && count(size) > request.max_vertices) size *= 2;
  size = std::min(size, largest);
  // Never fewer bundles than parts.
  while (size > 1 && count(size) < request.parts) size /= 2;
  if (size <= 1) return singles;
  std::vector<std::vector<uint32_t>> out;
  for (const auto& m : machines) {
    for (size_t at = 0; at < m.size(); at += size) {
      out.emplace_back(m.begin() + at, m.begin() + std::min(m.size(), at + size));
    }
  }
  return out;
}

namespace {

// One METIS bisection of `vertices` (indices into the request) with target weights k1 : k2; true
// when both sides can take their parts (at least k1 and k2 vertices).
bool Bisect(const PartitionRequest& request, const Graph& graph, const std::vector<uint32_t>& vertices, uint32_t k1,
            uint32_t k2, double ub, std::vector<uint32_t>* side0, std::vector<uint32_t>* side1) {
  const uint32_t n = static_cast<uint32_t>(vertices.size());
  const MetisWeights w = Scale(graph, vertices);
  std::vector<idx_t> xadj(n + 1, 0), adjncy;
  adjncy.reserve(size_t{n} * (n - 1));
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      if (j != i) adjncy.push_back(static_cast<idx_t>(j));
    }
    xadj[i + 1] = static_cast<idx_t>(adjncy.size());
  }
  // Max cut: a second constraint balances the GPU counts too. The cut of 1/β is the number of
  // inter-machine pairs split between parts (the intra-machine terms are tiny); with equal part sizes,
  // minimising it spreads every machine evenly over the parts, which is the max cut of β. Without the
  // count constraint, parts of many weak GPUs would be preferred (they keep more slow pairs inside).
  const bool counts = request.objective == CutObjective::kMaxCut;
  idx_t nvtxs = static_cast<idx_t>(n), ncon = counts ? 2 : 1, nparts = 2, objval = 0;
  std::vector<idx_t> vwgt, adjwgt(w.edge.begin(), w.edge.end());
  for (uint32_t i = 0; i < n; ++i) {
    vwgt.push_back(w.vertex[i]);
    if (counts) vwgt.push_back(static_cast<idx_t>(graph.gpus[vertices[i]]));
  }
  const real_t f1 = static_cast<real_t>(double(k1) / (k1 + k2)), f2 = static_cast<real_t>(double(k2) / (k1 + k2));
  real_t tpwgts[4] = {f1, f1, f2, f2};
  if (!counts) tpwgts[1] = f2;
  // Counts as even as they can be (a spread machine has no slack to give), compute within `ub`.
  real_t ubvec[2] = {static_cast<real_t>(std::max(1.001, ub)), 1.001f};
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = request.seed;
  options[METIS_OPTION_NUMBERING] = 0;
  std::vector<idx_t> part(n, 0);
  const int rc = METIS_PartGraphRecursive(&nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.data(), nullptr,
                                          adjwgt.data(), &nparts, tpwgts, ubvec, options, &objval, part.data());
  if (rc != METIS_OK) return false;
  side0->clear();
  side1->clear();
  for (uint32_t i = 0; i < n; ++i) (part[i] == 0 ? side0 : side1)->push_back(vertices[i]);
  return side0->size() >= k1 && side1->size() >= k2;
}

bool Recurse(const PartitionRequest& request, const Graph& graph, const std::vector<uint32_t>& vertices, uint32_t k,
             uint32_t first, double ub_level, std::vector<uint32_t>* out) {
  if (vertices.size() < k) return false;
  if (k == 1) {
    for (uint32_t v : vertices) (*out)[v] = first;
    return true;
  }
  if (vertices.size() == k) {
    for (uint32_t i = 0; i < k; ++i) (*out)[vertices[i]] = first + i;
    return true;
  }
  const uint32_t k1 = k / 2, k2 = k - k1;
  std::vector<uint32_t> a, b;
  if (!Bisect(request, graph, vertices, k1, k2, ub_level, &a, &b)) return false;
  return Recurse(request, graph, a, k1, first, ub_level, out) &&
         Recurse(request, graph, b, k2, first + k1, ub_level, out);
}

}  // namespace

std::optional<std::vector<uint32_t>> Partition(const PartitionRequest& request) {
  const uint32_t n = static_cast<uint32_t>(request.vertex_weight.size());
  if (request.parts == 0 || request.parts > n) return std::nullopt;
  std::vector<uint32_t> out(n, 0);
  if (request.parts == 1) return out;
  // Recursive bisection (§4.2 step ii), each bisection a METIS multilevel bisection (coarsening by heavy
  // edge matching, initial bisection, projection and FM refinement) with target weights k1 : k2. Driving
  // the recursion here, rather than asking METIS for k parts at once, keeps METIS from ever being asked
  // to split a side into more parts than it has vertices (it prints to stdout then) and lets an
  // impossible split fail cleanly. The tolerance is spread over the ⌈log₂ k⌉ levels.
  const double levels = std::ceil(std::log2(static_cast<double>(request.parts)));
  const double ub_level = std::pow(std::max(1.0, request.max_balance), 1.0 / levels);
  // The graph of bundles (singletons unless the request is large; graph.h).
  const std::vector<std::vector<uint32_t>> bundles = Bundles(request);
  const uint32_t nb = static_cast<uint32_t>(bundles.size());
  Graph graph;
  for (const auto& b : bundles) {
    double c = 0;
    for (uint32_t v : b) c += request.vertex_weight[v];
    graph.compute.push_back(c);
    graph.gpus.push_back(static_cast<uint32_t>(b.size()));
  }
  // β between two GPUs of different machines depends on the machines only, so a bundle pair's sum is
  // |A|·|B| times its first pair's.
  graph.Fill([&](uint32_t i, uint32_t j) {
    const double beta = request.bandwidth(std::min(bundles[i][0], bundles[j][0]), std::max(bundles[i][0], bundles[j][0]));
    const double pairs = static_cast<double>(bundles[i].size()) * static_cast<double>(bundles[j].size());
    const double one = request.objective == CutObjective::kMinCut ? beta : 1.0 / beta;
    return pairs == 1 ? one : pairs * one;
  });
  std::vector<uint32_t> all(nb), part(nb, 0);
  for (uint32_t i = 0; i < nb; ++i) all[i] = i;
  if (!Recurse(request, graph, all, request.parts, 0, ub_level, &part)) return std::nullopt;
  for (uint32_t i = 0; i < nb; ++i) {
    for (uint32_t v : bundles[i]) out[v] = part[i];
  }
  return out;
}

double CutBandwidth(const PartitionRequest& request, const std::vector<uint32_t>& part) {
  double cut = 0;
  const uint32_t n = static_cast<uint32_t>(part.size());
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = i + 1; j < n; ++j) {
      if (part[i] != part[j]) cut += request.bandwidth(i, j);
    }
  }
  return cut;
}

double BalanceFactor(const PartitionRequest& request, const std::vector<uint32_t>& part) {
  std::vector<double> sum(request.parts, 0);
  double total = 0;
  for (size_t i = 0; i < part.size(); ++i) {
    sum[part[i]] += request.vertex_weight[i];
    total += request.vertex_weight[i];
  }
  if (total <= 0 || request.parts == 0) return 1;
  return *std::max_element(sum.begin(), sum.end()) / (total / request.parts);
}

}  // namespace hetsim::planners::hexiscale
