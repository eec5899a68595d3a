#include "models/profile_db.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <array>
#include <set>

#include "models/gpu_catalog.h"
#include "models/spec_io.h"
#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

std::optional<LayerKind> ToLayerKind(proto::LayerTiming::LayerKind k) {
  switch (k) {
    case proto::LayerTiming::LAYER_KIND_EMBEDDING: return LayerKind::kEmbedding;
    case proto::LayerTiming::LAYER_KIND_TRANSFORMER: return LayerKind::kTransformer;
    case proto::LayerTiming::LAYER_KIND_HEAD: return LayerKind::kHead;
    default: return std::nullopt;
  }
}

std::string KindName(LayerKind k) {
  switch (k) {
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kTransformer: return "transformer";
    case LayerKind::kHead: return "head";
  }
  return "?";
}

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// "FILE:LINE:COL" of root[key] (or root[key][index]) when the parsed YAML is at hand, else "FILE".
std::string Where(const std::string& file, const YAML::Node* root, const char* key, int index = -1) {
  if (root == nullptr || !root->IsMap()) return file;
  const YAML::Node node = (*root)[key];
  if (!node) return file;
  if (index < 0) return YamlLocation(file, node);
  if (!node.IsSequence() || index >= static_cast<int>(node.size())) return file;
  return YamlLocation(file, node[static_cast<size_t>(index)]);
}

using Measured = std::map<uint32_t, LayerCost>;

// The optimizer step of a layer does not depend on the micro-batch size: a size that was not measured
// takes it from the nearest measured size (the smaller one on a tie).
double NearestOptimizer(const Measured& measured, double mbs) {
  double best = std::numeric_limits<double>::infinity(), value = 0;
  for (const auto& [m, cost] : measured) {
    const double d = std::abs(static_cast<double>(m) - mbs);
    if (d < best) {
      best = d;
      value = cost.optimizer_s;
    }
  }
  return value;
}

// Values that grow with the micro-batch (times, activations) of one measured size, as a fixed-size array
// so that one estimator serves layers and per-micro-batch overheads.
template <size_t N>
using Row = std::array<double, N>;

// Metis §4.3 (last paragraph): "for mbs = 7, Metis sums the profiled results of mbs = 1, mbs = 2, and
// mbs = 4" -- the binary decomposition of the size, each part a measured size. nullopt when a part was
// not measured.
template <size_t N>
std::optional<Row<N>> Compose(const std::map<uint32_t, Row<N>>& measured, uint64_t n) {
  Row<N> sum{};
  for (uint64_t bit = 1; bit <= n; bit <<= 1) {
    if ((n & bit) == 0) continue;
    if (bit > std::numeric_limits<uint32_t>::max()) return std::nullopt;
    auto it = measured.find(static_cast<uint32_t>(bit));
    if (it == measured.end()) return std::nullopt;
    for (size_t i = 0; i < N; ++i) sum[i] += it->second[i];
  }
  return sum;
}

// The line through (xa, a) and (xb, b) at x, each value clamped at 0 (extrapolating downwards can cross it).
template <size_t N>
Row<N> Line(double xa, const Row<N>& a, double xb, const Row<N>& b, double x) {
  const double w = (x - xa) / (xb - xa);
  Row<N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = std::max(0.0, a[i] + (b[i] - a[i]) * w);
  return out;
}

// The lookup rules of the header comment for one (GPU, model, seq_len, kind or overhead, TP) key.
template <size_t N>
Row<N> Estimate(const std::map<uint32_t, Row<N>>& measured, double mbs) {
  const double rounded = std::nearbyint(mbs);
  if (rounded >= 1 && rounded <= 1e18 && std::abs(mbs - rounded) <= 1e-9 * rounded) {
    const auto n = static_cast<uint64_t>(rounded);
    if (n <= std::numeric_limits<uint32_t>::max()) {
      auto it = measured.find(static_cast<uint32_t>(n));
      if (it != measured.end()) return it->second;
    }
    if (auto composed = Compose(measured, n)) return *composed;
  }
  if (measured.size() == 1) {
    const auto& [m, row] = *measured.begin();
    Row<N> out{};
    for (size_t i = 0; i < N; ++i) out[i] = row[i] * mbs / m;
    return out;
  }
  // Linear in the micro-batch size between the nearest measured sizes around it; beyond the largest
  // (smallest) measured size along the line through the largest (smallest) two.
  using Entry = typename std::map<uint32_t, Row<N>>::value_type;
  const Entry* below = nullptr;  // largest measured size < mbs
  const Entry* above = nullptr;  // smallest measured size > mbs
  for (const auto& entry : measured) {
    if (entry.first < mbs) below = &entry;
    if (entry.first > mbs && above == nullptr) above = &entry;
  }
  if (below != nullptr && above != nullptr) return Line(below->first, below->second, above->first, above->second, mbs);
  if (below != nullptr) {
    const auto last = std::prev(measured.end()), second = std::prev(last);
    return Line<N>(second->first, second->second, last->first, last->second, mbs);
  }
  const auto first = measured.begin(), second = std::next(first);
  return Line<N>(first->first, first->second, second->first, second->second, mbs);
}

LayerCost EstimateLayer(const Measured& measured, double mbs) {
  std::map<uint32_t, Row<3>> rows;
  bool activation = true;
  for (const auto& [m, c] : measured) {
    rows[m] = {c.forward_s, c.backward_s, c.activation_gib};
    activation &= c.activation_gib > 0;
  }
  const Row<3> r = Estimate(rows, mbs);
  LayerCost cost;
  cost.forward_s = r[0];
  cost.backward_s = r[1];
  cost.optimizer_s = NearestOptimizer(measured, mbs);
  cost.includes_tp_communication = measured.begin()->second.includes_tp_communication;
  cost.has_activation = activation;
  cost.activation_gib = activation ? r[2] : 0;
  return cost;
}

}  // namespace

Result<ProfileDb> ProfileDb::Load(const std::vector<std::string>& names_or_paths) {
  ProfileDb db;
  ErrorList errors;
  for (const auto& name : names_or_paths) {
    auto src = ReadSpec(SpecKind::kProfile, name);
    if (!src.ok()) {
      errors.Add(src.status());
      continue;
    }
    proto::Profile profile;
    const Status parsed = ParseSpec(*src, SpecKind::kProfile, &profile);
    if (!parsed.ok()) {
      errors.Add(parsed);
      continue;
    }
    YAML::Node root;
    try {
      root = YAML::Load(src->text);  // parsed once already: only for line numbers in the messages below
    } catch (const YAML::Exception&) {
      root = YAML::Node();
    }
    errors.Add(db.AddParsed(profile, src->file, &root));
  }
  if (!errors.empty()) return errors.ToStatus();
  return db;
}

Status ProfileDb::Add(const proto::Profile& profile, const std::string& file) {
  return AddParsed(profile, file, nullptr);
}

Status ProfileDb::AddParsed(const proto::Profile& profile, const std::string& file, const YAML::Node* root) {
  ErrorList errors;
  if (!profile.kind().empty() && profile.kind() != "profile") {
    errors.Add(Where(file, root, "kind") + ": kind: this is a '" + profile.kind() + "' file, not a profile");
  }
  std::string gpu;
  if (profile.gpu().empty()) {
    errors.Add(file + ": gpu: missing; expected a GPU catalog name (`hetsim list gpus` prints them)");
  } else {
    auto found = GpuCatalog::Bundled().Find(profile.gpu());
    if (found.ok()) {
      gpu = (*found)->name;
    } else {
      errors.Add(Where(file, root, "gpu") + ": gpu: " + found.status().message());
    }
  }
  if (profile.model().empty()) errors.Add(file + ": model: missing; expected the model's name");
  if (profile.seq_len() == 0) errors.Add(file + ": seq_len: missing; expected the sequence length (>= 1)");
  if (profile.layers().empty() && profile.micro_batch_overheads().empty()) {
    errors.Add(file + ": layers: empty; a profile needs at least one layer (or micro_batch_overheads entry)");
  }

  struct Row {
    Key key;
    uint32_t mbs;
    LayerCost cost;
    int index;  // in profile.layers
  };
  std::vector<Row> rows;
  std::map<std::tuple<int, uint32_t, uint32_t>, int> first_in_file;
  for (int i = 0; i < profile.layers_size(); ++i) {
    const auto& l = profile.layers(i);
    const std::string path = "layers[" + std::to_string(i) + "]";
    const std::string at = Where(file, root, "layers", i) + ": " + path;
    const auto kind = ToLayerKind(l.layer());
    bool ok = true;
    if (!kind) {
      errors.Add(at + ".layer: missing; expected embedding, transformer or head");
      ok = false;
    }
    if (l.tp_degree() == 0) {
      errors.Add(at + ".tp_degree: missing; expected the TP degree (>= 1)");
      ok = false;
    }
    if (l.micro_batch_size() == 0) {
      errors.Add(at + ".micro_batch_size: missing; expected the micro-batch size in sequences (>= 1)");
      ok = false;
    }
    const std::pair<const char*, double> times[] = {
        {"forward_s", l.forward_s()}, {"backward_s", l.backward_s()}, {"optimizer_s", l.optimizer_s()}};
    for (const auto& [name, value] : times) {
      if (!std::isfinite(value) || value < 0) {
        errors.Add(at + "." + name + ": expected a time in seconds >= 0, found " + Num(value));
        ok = false;
      }
    }
    if (!std::isfinite(l.activation_gib()) || l.activation_gib() < 0) {
      errors.Add(at + ".activation_gib: expected GiB >= 0 (0 = not profiled), found " + Num(l.activation_gib()));
      ok = false;
    }
    if (!ok) continue;
    const auto in_file = std::make_tuple(static_cast<int>(*kind), l.tp_degree(), l.micro_batch_size());
    if (auto [it, inserted] = first_in_file.emplace(in_file, i); !inserted) {
      errors.Add(at + ": duplicate of layers[" + std::to_string(it->second) + "] (" + KindName(*kind) + ", tp_degree " +
                 std::to_string(l.tp_degree()) + ", micro_batch_size " + std::to_string(l.micro_batch_size()) + ")");
      continue;
    }
    LayerCost cost{l.forward_s(), l.backward_s(), l.optimizer_s(), profile.includes_tp_communication()};
    cost.activation_gib = l.activation_gib();
    cost.has_activation = l.activation_gib() > 0;
    rows.push_back({Key{gpu, profile.model(), profile.seq_len(), static_cast<int>(*kind), l.tp_degree()},
                    l.micro_batch_size(), cost, i});
  }
  struct OverheadRow {
    OverheadKey key;
    uint32_t mbs;
    MicroBatchOverheadCost cost;
    int index;  // in profile.micro_batch_overheads
  };
  std::vector<OverheadRow> overhead_rows;
  std::map<std::pair<uint32_t, uint32_t>, int> first_overhead;
  for (int i = 0; i < profile.micro_batch_overheads_size(); ++i) {
    const auto& o = profile.micro_batch_overheads(i);
    const std::string at =
        Where(file, root, "micro_batch_overheads", i) + ": micro_batch_overheads[" + std::to_string(i) + "]";
    bool ok = true;
    if (o.tp_degree() == 0) {
      errors.Add(at + ".tp_degree: missing; expected the TP degree (>= 1)");
      ok = false;
    }
    if (o.micro_batch_size() == 0) {
      errors.Add(at + ".micro_batch_size: missing; expected the micro-batch size in sequences (>= 1)");
      ok = false;
    }
    const std::pair<const char*, double> times[] = {{"fb_sync_s", o.fb_sync_s()},
                                                    {"batch_generation_s", o.batch_generation_s()}};
    for (const auto& [name, value] : times) {
      if (!std::isfinite(value) || value < 0) {
        errors.Add(at + "." + name + ": expected a time in seconds >= 0, found " + Num(value));
        ok = false;
      }
    }
    if (!ok) continue;
    if (auto [it, inserted] = first_overhead.emplace(std::make_pair(o.tp_degree(), o.micro_batch_size()), i);
        !inserted) {
      errors.Add(at + ": duplicate of micro_batch_overheads[" + std::to_string(it->second) + "] (tp_degree " +
                 std::to_string(o.tp_degree()) + ", micro_batch_size " + std::to_string(o.micro_batch_size()) + ")");
      continue;
    }
    overhead_rows.push_back({OverheadKey{gpu, profile.model(), profile.seq_len(), o.tp_degree()},
                             o.micro_batch_size(), MicroBatchOverheadCost{o.fb_sync_s(), o.batch_generation_s()}, i});
  }
  if (!errors.empty()) return errors.ToStatus();

  // Across files: one measurement per (gpu, model, seq_len, kind, tp, micro-batch). Nothing is added
  // unless the whole profile is accepted.
  for (const auto& row : rows) {
    auto known = origin_.find(row.key);
    if (known == origin_.end()) continue;
    auto prev = known->second.find(row.mbs);
    if (prev == known->second.end()) continue;
    const auto& [g, model, seq_len, kind, tp] = row.key;
    errors.Add(Where(file, root, "layers", row.index) + ": layers[" + std::to_string(row.index) + "]: " + g + " / " +
               model + " / seq_len " + std::to_string(seq_len) + " / " + KindName(static_cast<LayerKind>(kind)) +
               " / tp_degree " + std::to_string(tp) + " / micro_batch_size " + std::to_string(row.mbs) +
               " is already profiled by " + prev->second);
  }
  for (const auto& row : overhead_rows) {
    auto known = overhead_origin_.find(row.key);
    if (known == overhead_origin_.end()) continue;
    auto prev = known->second.find(row.mbs);
    if (prev == known->second.end()) continue;
    const auto& [g, model, seq_len, tp] = row.key;
    errors.Add(Where(file, root, "micro_batch_overheads", row.index) + ": micro_batch_overheads[" +
               std::to_string(row.index) + "]: " + g + " / " + model + " / seq_len " + std::to_string(seq_len) +
               " / tp_degree " + std::to_string(tp) + " / micro_batch_size " + std::to_string(row.mbs) +
               " is already profiled by " + prev->second);
  }
  if (!errors.empty()) return errors.ToStatus();
  for (const auto& row : rows) {
    table_[row.key][row.mbs] = row.cost;
    origin_[row.key][row.mbs] = file + " layers[" + std::to_string(row.index) + "]";
  }
  for (const auto& row : overhead_rows) {
    overheads_[row.key][row.mbs] = row.cost;
    overhead_origin_[row.key][row.mbs] = file + " micro_batch_overheads[" + std::to_string(row.index) + "]";
  }
  return Status::Ok();
}

std::optional<LayerCost> ProfileDb::Lookup(const std::string& gpu, const std::string& model, LayerKind kind,
                                           uint32_t tp, double micro_batch_size, uint32_t seq_len) const {
  if (!std::isfinite(micro_batch_size) || micro_batch_size <= 0) return std::nullopt;
  auto it = table_.find(Key{gpu, model, seq_len, static_cast<int>(kind), tp});
  if (it == table_.end()) {
    // Callers pass the canonical name; accept an alias too.
    auto found = GpuCatalog::Bundled().Find(gpu);
    if (!found.ok() || (*found)->name == gpu) return std::nullopt;
    it = table_.find(Key{(*found)->name, model, seq_len, static_cast<int>(kind), tp});
    if (it == table_.end()) return std::nullopt;
  }
  return EstimateLayer(it->second, micro_batch_size);
}

std::string ProfileDb::Canonical(const std::string& gpu) {
  auto found = GpuCatalog::Bundled().Find(gpu);
  return found.ok() ? (*found)->name : std::string();
}

std::optional<MicroBatchOverheadCost> ProfileDb::Overhead(const std::string& gpu, const std::string& model,
                                                          uint32_t tp, double micro_batch_size,
                                                          uint32_t seq_len) const {
  if (overheads_.empty() || !std::isfinite(micro_batch_size) || micro_batch_size <= 0) return std::nullopt;
  auto it = overheads_.find(OverheadKey{gpu, model, seq_len, tp});
  if (it == overheads_.end()) {
    const std::string canonical = Canonical(gpu);
    if (canonical.empty() || canonical == gpu) return std::nullopt;
    it = overheads_.find(OverheadKey{canonical, model, seq_len, tp});
    if (it == overheads_.end()) return std::nullopt;
  }
  std::map<uint32_t, Row<2>> rows;
  for (const auto& [m, o] : it->second) rows[m] = {o.fb_sync_s, o.batch_generation_s};
  const Row<2> r = Estimate(rows, micro_batch_size);
  return MicroBatchOverheadCost{r[0], r[1]};
}

std::vector<std::pair<std::string, std::string>> ProfileDb::Coverage() const {
  std::set<std::pair<std::string, std::string>> pairs;
  for (const auto& [key, measured] : table_) pairs.emplace(std::get<0>(key), std::get<1>(key));
  return {pairs.begin(), pairs.end()};
}

}  // namespace hetsim::models
