// The GPU graphs of HexiScale §4.2-4.3 and their partitioning with METIS (libmetis 5).
//
// A graph has one vertex per GPU, weighted by its compute (peak tensor TFLOPS at the training dtype,
// c_d of Table 1), and an edge between every pair weighted by the bandwidth between them (β_{d,d'}).
// Partition() cuts it into k parts by recursive bisection (§4.2 step ii), each bisection one METIS
// multilevel bisection (METIS_PartGraphRecursive with 2 parts and target weights k1 : k2: heavy-edge-
// matching coarsening, bisection of the coarsest graph, projection, Fiduccia–Mattheyses/Kernighan–Lin
// refinement), with every part's compute within `max_balance` × the average:
//   - kMinCut: edge weight = β, so the cut (Σ of β between parts, eq. 2) is minimised: slow links between
//     parts;
//   - kMaxCut: §4.4's "maximise the inter-group edge weights": edge weight = 1/β (time per byte) and the
//     parts' GPU counts balanced as well (a second METIS constraint); the minimum of that cut splits
//     every machine evenly over the parts, which is where Σ β between parts is largest.
// METIS takes 32-bit integers: edge weights are scaled linearly so that all of them (nnz = 2 × edges
// entries) sum to at most 2³¹ − 1 — no sum METIS forms can overflow, and the slowest links keep as much
// resolution as the range allows (floor; at least 1); vertex weights are scaled so that the largest is
// 10,000 (at least 1 each).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace hetsim::planners::hexiscale {

enum class CutObjective { kMinCut, kMaxCut };

struct PartitionRequest {
  std::vector<double> vertex_weight;                       // c_d per vertex (> 0)
  std::function<double(uint32_t, uint32_t)> bandwidth;     // β between vertices i < j (bytes/s, > 0)
  uint32_t parts = 1;
  double max_balance = 1.1;  // METIS ubvec: max part weight / average
  CutObjective objective = CutObjective::kMinCut;
  int seed = 0;              // METIS_OPTION_SEED
  std::vector<uint32_t> machine;  // machine of each vertex (empty: no bundling)
  uint32_t max_vertices = 0;      // bundle machines' GPUs above this many vertices (0: never)
};

// The METIS integer weights of a request (exposed for tests): edge weights in CSR order of the complete
// graph (for vertex i, its neighbours j ≠ i in increasing order) and vertex weights.
struct MetisWeights {
  std::vector<int32_t> vertex;
  std::vector<int32_t> edge;
};
MetisWeights ScaleWeights(const PartitionRequest& request);

// The bundles Partition() cuts instead of single vertices (each a list of vertices; singletons when the
// request does not ask for bundling or is small enough).
std::vector<std::vector<uint32_t>> Bundles(const PartitionRequest& request);

// Part index (0..parts−1) of each vertex; nullopt when METIS fails or leaves a part empty.
std::optional<std::vector<uint32_t>> Partition(const PartitionRequest& request);

// Σ of β over pairs in different parts (the paper's Cut(P), eq. 2) and max part weight / average.
double CutBandwidth(const PartitionRequest& request, const std::vector<uint32_t>& part);
double BalanceFactor(const PartitionRequest& request, const std::vector<uint32_t>& part);

}  // namespace hetsim::planners::hexiscale
