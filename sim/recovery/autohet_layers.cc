#include "sim/recovery/autohet_layers.h"

#include <algorithm>
#include <tuple>

namespace hetsim::sim::recovery {
namespace {

constexpr double kTiny = 1e-12;  // ranges are fractions of a layer part; shorter pieces are rounding

using Ranges = LayerBitmap::Ranges;

void Merge(Ranges& r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [b, e] : r) {
    if (e - b <= kTiny) continue;
    if (!out.empty() && b <= out.back().second + kTiny) {
      out.back().second = std::max(out.back().second, e);
    } else {
      out.emplace_back(b, e);
    }
  }
  r = std::move(out);
}

// `want` ∩ `have`, and `want` minus `have` (both sorted and disjoint).
Ranges Intersect(const Ranges& want, const Ranges& have) {
  Ranges out;
  for (const auto& [wb, we] : want) {
    for (const auto& [hb, he] : have) {
      const double b = std::max(wb, hb), e = std::min(we, he);
      if (e - b > kTiny) out.emplace_back(b, e);
    }
  }
  Merge(out);
  return out;
}
Ranges Subtract(const Ranges& want, const Ranges& have) {
  Ranges out;
  for (auto [b, e] : want) {
    for (const auto& [hb, he] : have) {
      if (he <= b || hb >= e) continue;
      if (hb - b > kTiny) out.emplace_back(b, hb);
      b = std::max(b, he);
      if (b >= e) break;
    }
    if (e - b > kTiny) out.emplace_back(b, e);
  }
  return out;
}
double Length(const Ranges& r) {
  double s = 0;
  for (const auto& [b, e] : r) s += e - b;
  return s;
}

}  // namespace

std::vector<DevicePlace> PlacesOn(const models::Cluster& cluster) {
  std::vector<DevicePlace> out(cluster.num_devices());
  for (uint32_t d = 0; d < cluster.num_devices(); ++d) out[d] = {d, cluster.device(d).node};
  return out;
}

std::vector<LayerPiece> LayerPieces(const proto::Plan& plan, const models::PlanContext& ctx,
                                    const std::vector<DevicePlace>& places) {
  const auto& model = ctx.model;
  const auto& tr = ctx.training;
  const double weight_bytes = models::DTypeBytes(tr.dtype());
  const double optimizer_bytes = models::OptimizerBytesPerParam(tr);
  const uint32_t zero = plan.zero_stage();
  const uint32_t layers = model.num_layers();
  // ZeRO shards over every data-parallel holder of a layer (DP × CP, as models::EstimateMemory counts them);
  // holder j of R keeps the j-th R-th of its TP range.
  std::vector<uint32_t> holders(layers, 0), next(layers, 0);
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < layers; ++l) {
        holders[l] += models::DpDegree(st) * models::StageSharding(st).ways();
      }
    }
  }
  std::vector<LayerPiece> out;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) {
      const uint32_t tp = models::TpDegree(st);
      const uint32_t ways = models::StageSharding(st).ways();
      const bool head_copy = st.layer_begin() > 0;  // the head's tied matrix, when the embedding is elsewhere
      for (uint32_t r = 0; r < models::DpDegree(st); ++r) {
        for (uint32_t j = 0; j < ways; ++j) {
          std::vector<uint32_t> index;  // this replica's ZeRO index per layer of the stage
          for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < layers; ++l) index.push_back(next[l]++);
          for (uint32_t k = 0; k < tp; ++k) {
            const DevicePlace& at = places.at(models::StageDevice(st, r, j, k));
            for (uint32_t l = st.layer_begin(); l < st.layer_end() && l < layers; ++l) {
              const double params = model.ParamsPerRank(l, 1, head_copy);
              const double b = static_cast<double>(k) / tp, e = static_cast<double>(k + 1) / tp;
              const double R = std::max<uint32_t>(1, holders[l]);
              const double i = index[l - st.layer_begin()];
              auto piece = [&](StatePart part, bool sharded, double bytes_per_param) {
                LayerPiece p;
                p.device = at.device;
                p.node = at.node;
                p.layer = l;
                p.part = part;
                p.begin = sharded ? b + (e - b) * i / R : b;
                p.end = sharded ? b + (e - b) * (i + 1) / R : e;
                p.part_bytes = params * bytes_per_param;
                out.push_back(p);
              };
              piece(StatePart::kWeights, zero >= 3, weight_bytes);
              piece(StatePart::kOptimizer, zero >= 1, optimizer_bytes);
            }
          }
        }
      }
    }
  }
  return out;
}

LayerBitmap::LayerBitmap(const std::vector<LayerPiece>& saved) {
  for (const auto& p : saved) held_[{p.layer, p.part}][p.node].emplace_back(p.begin, p.end);
  for (auto& [_, nodes] : held_) {
    for (auto& [_n, ranges] : nodes) Merge(ranges);
  }
}

void LayerBitmap::Forget(uint32_t node) {
  for (auto& [_, nodes] : held_) nodes.erase(node);
}

const Ranges& LayerBitmap::Held(uint32_t node, uint32_t layer, StatePart part) const {
  static const Ranges kNone;
  auto it = held_.find({layer, part});
  if (it == held_.end()) return kNone;
  auto n = it->second.find(node);
  return n == it->second.end() ? kNone : n->second;
}

std::vector<uint32_t> LayerBitmap::Holders(uint32_t layer, StatePart part) const {
  std::vector<uint32_t> out;
  auto it = held_.find({layer, part});
  if (it == held_.end()) return out;
  for (const auto& [node, ranges] : it->second) {
    if (!ranges.empty()) out.push_back(node);
  }
  return out;
}

RecoveryLoad PlanRecoveryLoad(const LayerBitmap& bitmap, const std::vector<LayerPiece>& needed,
                              Endpoint::Kind local_tier) {
  RecoveryLoad load;
  // (source kind, source index, destination device) -> bytes; the object store's index is 0.
  std::map<std::tuple<int, uint32_t, uint32_t>, double> moved;
  for (const auto& p : needed) {
    Ranges want = {{p.begin, p.end}};
    // 1. The device's own node (§IV-C: "prioritizes to load those checkpoints stored at the local disk or
    //    CPU memory").
    const Ranges& own = bitmap.Held(p.node, p.layer, p.part);
    const double local = Length(Intersect(want, own)) * p.part_bytes;
    if (local > 0) {
      moved[{local_tier, p.node, p.device}] += local;
      load.local_bytes += local;
      want = Subtract(want, own);
    }
    // 2. Other live nodes over RDMA (§IV-C's second scenario), their turn starting at the device's index.
    const std::vector<uint32_t> holders = bitmap.Holders(p.layer, p.part);
    for (size_t i = 0; i < holders.size() && !want.empty(); ++i) {
      const uint32_t node = holders[(p.device + i) % holders.size()];
      if (node == p.node) continue;
      const Ranges& theirs = bitmap.Held(node, p.layer, p.part);
      const double bytes = Length(Intersect(want, theirs)) * p.part_bytes;
      if (bytes <= 0) continue;
      moved[{local_tier, node, p.device}] += bytes;
      load.peer_bytes += bytes;
      want = Subtract(want, theirs);
    }
    // 3. The object store: only the missing pieces (§IV-C's first scenario).
    const double missing = Length(want) * p.part_bytes;
    if (missing > 0) {
      moved[{Endpoint::kObjectStore, 0, p.device}] += missing;
      load.cloud_bytes += missing;
    }
  }
  for (const auto& [key, bytes] : moved) {
    const auto& [kind, index, device] = key;
    load.transfers.push_back({{static_cast<Endpoint::Kind>(kind), index}, {Endpoint::kGpu, device}, bytes});
  }
  return load;
}

}  // namespace hetsim::sim::recovery
