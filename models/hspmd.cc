#include "models/hspmd.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "models/plan.h"

namespace hetsim::models::hspmd {
namespace {

constexpr double kEps = 1e-12;

std::vector<std::pair<int, uint32_t>> NonTrivial(const std::vector<std::pair<int, uint32_t>>& e) {
  std::vector<std::pair<int, uint32_t>> out;
  for (const auto& kv : e) {
    if (kv.second != 1) out.push_back(kv);
  }
  return out;
}

std::string KeyName(int key) {
  if (key == kDuplicate) return "D";
  if (key == kPartial) return "P";
  return "S" + std::to_string(key);
}

double Volume(const Box& b) {
  double v = 1;
  for (const auto& [lo, hi] : b) v *= hi - lo;
  return v;
}

bool Contains(const Box& b, const std::vector<double>& point) {
  for (size_t d = 0; d < b.size(); ++d) {
    if (point[d] < b[d].first - kEps || point[d] >= b[d].second - kEps) return false;
  }
  return true;
}

// The grid every box's boundaries cut: per dimension, the sorted distinct boundaries.
std::vector<std::vector<double>> Grid(const std::vector<const std::vector<Shard>*>& sets, uint32_t rank) {
  std::vector<std::vector<double>> cuts(rank, std::vector<double>{0.0, 1.0});
  for (const auto* set : sets) {
    for (const auto& s : *set) {
      for (uint32_t d = 0; d < rank; ++d) {
        cuts[d].push_back(s.box[d].first);
        cuts[d].push_back(s.box[d].second);
      }
    }
  }
  for (auto& c : cuts) {
    std::sort(c.begin(), c.end());
    std::vector<double> u;
    for (double x : c) {
      if (u.empty() || x - u.back() > kEps) u.push_back(x);
    }
    c = std::move(u);
  }
  return cuts;
}

// Calls f(box) for every cell of the grid, dimension 0 slowest.
template <typename F>
void ForEachCell(const std::vector<std::vector<double>>& cuts, F f) {
  const size_t rank = cuts.size();
  std::vector<size_t> idx(rank, 0);
  for (;;) {
    Box box(rank);
    for (size_t d = 0; d < rank; ++d) box[d] = {cuts[d][idx[d]], cuts[d][idx[d] + 1]};
    f(box);
    size_t d = rank;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++idx[d] + 1 < cuts[d].size()) break;
      idx[d] = 0;
    }
  }
}

std::vector<double> Mid(const Box& b) {
  std::vector<double> m;
  for (const auto& [lo, hi] : b) m.push_back(0.5 * (lo + hi));
  return m;
}

// The devices whose shard contains the cell, ascending.
std::vector<uint32_t> Holders(const std::vector<Shard>& shards, const Box& cell) {
  std::vector<uint32_t> out;
  const auto m = Mid(cell);
  for (const auto& s : shards) {
    if (Contains(s.box, m)) out.push_back(s.device);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Collectives of a split op (§4.2 (I), Fig. 6): per finest slice of the subgroups' bottom-tier sharding,
// the devices of every subgroup that hold it.
std::vector<Collective> SliceCollectives(const Annotation& view, double tensor_bytes, uint32_t rank) {
  const auto shards = Shards(view, rank);
  std::vector<Collective> out;
  ForEachCell(Grid({&shards}, rank), [&](const Box& cell) {
    auto members = Holders(shards, cell);
    if (members.size() > 1) out.push_back({std::move(members), tensor_bytes * Volume(cell)});
  });
  return out;
}

Annotation WithHdim(Annotation a, int hdim) {
  a.hdim = hdim;
  a.hsplit.clear();
  return a;
}

// The fraction of the tensor that subgroup i holds along HDim (all of it unless HDim splits).
double SubgroupFraction(const Annotation& a, size_t i) {
  if (a.hdim < 0) return 1.0;
  if (a.hsplit.empty()) return 1.0 / a.hsize();
  const double total = std::accumulate(a.hsplit.begin(), a.hsplit.end(), 0.0);
  return a.hsplit[i] / total;
}

Result<CommStep> BsrStep(const Annotation& src, const Annotation& dst, double bytes, uint32_t rank, int subgroup,
                         const BsrOptions& options) {
  HETSIM_ASSIGN_OR_RETURN(auto table, BsrTable(src, dst, bytes, rank));
  BsrPlanner planner(options);
  planner.Add(table);
  CommStep step;
  step.kind = CommKind::kBsr;
  step.subgroup = subgroup;
  step.sends = planner.sends();
  step.local_copies = planner.local_copies();
  return step;
}

// §4.1: one subgroup, its source and destination (DG, DS), `bytes` = the subgroup's part of the tensor.
Result<CommStep> BottomTier(const DeviceGroup& sdg, const DistState& sds, const DeviceGroup& ddg, const DistState& dds,
                            double bytes, uint32_t rank, int subgroup, const BsrOptions& options) {
  CommStep step;
  step.subgroup = subgroup;
  const Annotation src = Spmd(sdg, sds), dst = Spmd(ddg, dds);
  if (sds == dds) {
    if (sdg == ddg) {
      step.kind = CommKind::kIdentity;
      return step;
    }
    // (I): the same shard moves to the device at the same position.
    step.kind = CommKind::kSendRecv;
    const auto shards = Shards(src, rank);
    for (size_t k = 0; k < sdg.size(); ++k) {
      if (sdg[k] != ddg[k]) step.sends.push_back({sdg[k], ddg[k], bytes * Volume(shards[k].box)});
    }
    return step;
  }
  if (sdg == ddg) {
    // (II), Fig. 5: the same entries but one, whose key turns P->D (AR), P->S(d) (RS) or S(d)->D (AG).
    const auto& a = sds.entries();
    const auto& b = dds.entries();
    int changed = -1;
    bool aligned = a.size() == b.size();
    for (size_t k = 0; aligned && k < a.size(); ++k) {
      if (a[k].second != b[k].second) aligned = false;
      if (a[k].first != b[k].first) {
        if (changed >= 0) aligned = false;
        changed = static_cast<int>(k);
      }
    }
    if (aligned && changed >= 0) {
      const int from = a[static_cast<size_t>(changed)].first, to = b[static_cast<size_t>(changed)].first;
      bool coll = true;
      if (from == kPartial && to == kDuplicate) {
        step.kind = CommKind::kAllReduce;
      } else if (from == kPartial && to >= 0 && sds.shards(to) == 1) {
        step.kind = CommKind::kReduceScatter;
      } else if (from >= 0 && to == kDuplicate) {
        step.kind = CommKind::kAllGather;
      } else {
        coll = false;
      }
      if (coll) {
        // Groups: the positions that differ only in the changed entry's coordinate.
        uint32_t inner = 1;
        for (size_t k = static_cast<size_t>(changed) + 1; k < a.size(); ++k) inner *= a[k].second;
        const uint32_t n = a[static_cast<size_t>(changed)].second;
        // The buffer each group reduces or gathers: the shard with the changed entry's split undone.
        const Annotation full = Spmd(sdg, step.kind == CommKind::kAllGather ? dds : sds);
        const auto shards = Shards(full, rank);
        for (uint32_t p = 0; p < sdg.size(); ++p) {
          if ((p / inner) % n != 0) continue;  // the group's first member
          Collective c;
          for (uint32_t j = 0; j < n; ++j) c.devices.push_back(sdg[p + j * inner]);
          c.bytes = bytes * Volume(shards[p].box);
          step.collectives.push_back(std::move(c));
        }
        return step;
      }
    }
  }
  return BsrStep(src, dst, bytes, rank, subgroup, options);
}

}  // namespace

DistState::DistState(std::initializer_list<std::pair<int, uint32_t>> entries) : entries_(entries) {}

uint32_t DistState::num_devices() const {
  uint32_t n = 1;
  for (const auto& kv : entries_) n *= kv.second;
  return n;
}

uint32_t DistState::shards(int dim) const {
  for (const auto& kv : entries_) {
    if (kv.first == dim) return kv.second;
  }
  return 1;
}

bool DistState::operator==(const DistState& o) const { return NonTrivial(entries_) == NonTrivial(o.entries_); }

std::string DistState::ToString() const {
  std::string s = "{";
  for (size_t k = 0; k < entries_.size(); ++k) {
    s += (k > 0 ? "," : "") + KeyName(entries_[k].first) + ":" + std::to_string(entries_[k].second);
  }
  return s + "}";
}

std::string Annotation::ToString() const {
  std::string s = "DG[";
  for (size_t i = 0; i < dg_union.size(); ++i) {
    s += i > 0 ? " | " : "";
    for (size_t k = 0; k < dg_union[i].size(); ++k) s += (k > 0 ? "," : "") + std::to_string(dg_union[i][k]);
  }
  s += "] DS[";
  for (size_t i = 0; i < ds_union.size(); ++i) s += (i > 0 ? " | " : "") + ds_union[i].ToString();
  return s + "] HDim " + std::to_string(hdim) + " HSize " + std::to_string(hsize());
}

Annotation Spmd(DeviceGroup dg, DistState ds) {
  Annotation a;
  a.dg_union.push_back(std::move(dg));
  a.ds_union.push_back(std::move(ds));
  return a;
}

Status CheckAnnotation(const Annotation& a, uint32_t rank) {
  const std::string what = "HSPMD annotation " + a.ToString() + ": ";
  if (a.dg_union.empty()) return Status::Invalid(what + "the DG Union is empty; give at least one device group");
  if (a.dg_union.size() != a.ds_union.size()) {
    return Status::Invalid(what + "the DG Union has " + std::to_string(a.dg_union.size()) + " groups but the DS Union " +
                           std::to_string(a.ds_union.size()) + " states; give one DS per DG (§3.2)");
  }
  std::set<uint32_t> seen;
  for (size_t i = 0; i < a.dg_union.size(); ++i) {
    const auto& ds = a.ds_union[i];
    if (ds.num_devices() != a.dg_union[i].size()) {
      return Status::Invalid(what + "subgroup " + std::to_string(i) + " has " + std::to_string(a.dg_union[i].size()) +
                             " devices but its DS " + ds.ToString() + " shards over " +
                             std::to_string(ds.num_devices()) + "; make the product of the shard counts the DG's size");
    }
    std::set<int> keys;
    for (const auto& [key, n] : ds.entries()) {
      if (n == 0) return Status::Invalid(what + "a DS entry has 0 shards; use at least 1");
      if (key < kPartial || key >= static_cast<int>(rank)) {
        return Status::Invalid(what + "DS key " + std::to_string(key) + " is not a dimension of a rank-" +
                               std::to_string(rank) + " tensor, Duplicate (-1) or Partial (-2)");
      }
      if (!keys.insert(key).second) return Status::Invalid(what + "DS key " + KeyName(key) + " repeats; merge the entries");
    }
    for (uint32_t d : a.dg_union[i]) {
      if (!seen.insert(d).second) {
        return Status::Invalid(what + "device " + std::to_string(d) +
                               " is in two sharding subgroups (or twice in one); subgroups must be disjoint (§3.2)");
      }
    }
  }
  if (a.hdim < kPartial || a.hdim >= static_cast<int>(rank)) {
    return Status::Invalid(what + "HDim " + std::to_string(a.hdim) + " is not a dimension, -1 or -2");
  }
  if (!a.hsplit.empty()) {
    if (a.hsplit.size() != a.dg_union.size() || a.hdim < 0) {
      return Status::Invalid(what + "hsplit needs one weight per subgroup and a split HDim");
    }
    for (double w : a.hsplit) {
      if (!(w > 0) || !std::isfinite(w)) return Status::Invalid(what + "hsplit weights must be positive");
    }
  }
  return Status::Ok();
}

std::vector<Shard> Shards(const Annotation& a, uint32_t rank) {
  std::vector<Shard> out;
  double hpos = 0;
  for (size_t i = 0; i < a.dg_union.size(); ++i) {
    Box base(rank, {0.0, 1.0});
    if (a.hdim >= 0) {
      const double f = SubgroupFraction(a, i);
      base[static_cast<size_t>(a.hdim)] = {hpos, std::min(1.0, hpos + f)};
      hpos += f;
    }
    const auto& e = a.ds_union[i].entries();
    for (uint32_t p = 0; p < a.dg_union[i].size(); ++p) {
      Shard s{a.dg_union[i][p], base, a.hdim == kPartial};
      // Coordinates: p in mixed radix, the last entry fastest; a split narrows outer entries first.
      std::vector<uint32_t> coord(e.size());
      uint32_t rest = p;
      for (size_t k = e.size(); k-- > 0;) {
        coord[k] = rest % e[k].second;
        rest /= e[k].second;
      }
      for (size_t k = 0; k < e.size(); ++k) {
        const auto [key, n] = e[k];
        if (key == kPartial && n > 1) s.partial = true;
        if (key < 0) continue;
        auto& [lo, hi] = s.box[static_cast<size_t>(key)];
        const double w = (hi - lo) / n;
        lo = lo + w * coord[k];
        hi = lo + w;
      }
      out.push_back(std::move(s));
    }
  }
  return out;
}

const char* CommKindName(CommKind k) {
  switch (k) {
    case CommKind::kIdentity: return "identity";
    case CommKind::kSendRecv: return "SR";
    case CommKind::kAllReduce: return "AR";
    case CommKind::kReduceScatter: return "RS";
    case CommKind::kAllGather: return "AG";
    case CommKind::kSplitAllReduce: return "SplitAR";
    case CommKind::kSplitReduceScatter: return "SplitRS";
    case CommKind::kSplitAllGather: return "SplitAG";
    case CommKind::kBsr: return "BSR";
  }
  return "?";
}

std::vector<CommKind> Resolution::kinds() const {
  std::vector<CommKind> k;
  for (const auto& s : steps) k.push_back(s.kind);
  return k;
}

double Resolution::sent_bytes() const {
  double b = 0;
  for (const auto& s : steps) {
    for (const auto& x : s.sends) b += x.bytes;
  }
  return b;
}

Result<Resolution> Resolve(const Annotation& src, const Annotation& dst, double tensor_bytes, uint32_t rank,
                           const BsrOptions& options) {
  HETSIM_RETURN_IF_ERROR(CheckAnnotation(src, rank));
  HETSIM_RETURN_IF_ERROR(CheckAnnotation(dst, rank));
  Resolution r;
  const bool same_hsize = src.hsize() == dst.hsize();
  if (same_hsize && src.hdim == dst.hdim && src.hsplit == dst.hsplit) {
    // §4.1: the top tier is unchanged; every subgroup on its own.
    for (size_t i = 0; i < src.hsize(); ++i) {
      HETSIM_ASSIGN_OR_RETURN(CommStep s, BottomTier(src.dg_union[i], src.ds_union[i], dst.dg_union[i], dst.ds_union[i],
                                                     tensor_bytes * SubgroupFraction(src, i), rank,
                                                     static_cast<int>(i), options));
      r.steps.push_back(std::move(s));
    }
    return r;
  }
  if (same_hsize && src.dg_union == dst.dg_union) {
    // §4.2: the same DG Union, another HDim. (II) first: bottom-tier steps to the destination's DS Union.
    if (src.ds_union != dst.ds_union) {
      for (size_t i = 0; i < src.hsize(); ++i) {
        HETSIM_ASSIGN_OR_RETURN(CommStep s,
                                BottomTier(src.dg_union[i], src.ds_union[i], src.dg_union[i], dst.ds_union[i],
                                           tensor_bytes * SubgroupFraction(src, i), rank, static_cast<int>(i), options));
        r.steps.push_back(std::move(s));
      }
    }
    Annotation mid = src;
    mid.ds_union = dst.ds_union;
    // (I): per finest slice, a collective across the subgroups.
    CommStep top;
    if (src.hdim == kPartial && dst.hdim == kDuplicate) {
      top.kind = CommKind::kSplitAllReduce;
      top.collectives = SliceCollectives(WithHdim(mid, kDuplicate), tensor_bytes, rank);
    } else if (src.hdim == kPartial && dst.hdim >= 0) {
      top.kind = CommKind::kSplitReduceScatter;
      top.collectives = SliceCollectives(WithHdim(mid, kDuplicate), tensor_bytes, rank);
    } else if (src.hdim >= 0 && dst.hdim == kDuplicate) {
      top.kind = CommKind::kSplitAllGather;
      top.collectives = SliceCollectives(dst, tensor_bytes, rank);
    } else {
      HETSIM_ASSIGN_OR_RETURN(top, BsrStep(mid, dst, tensor_bytes, rank, -1, options));
    }
    r.steps.push_back(std::move(top));
    return r;
  }
  // Another HSize or DG Union: BSR over the whole union.
  HETSIM_ASSIGN_OR_RETURN(CommStep s, BsrStep(src, dst, tensor_bytes, rank, -1, options));
  r.steps.push_back(std::move(s));
  return r;
}

Result<std::vector<BsrSlice>> BsrTable(const Annotation& src, const Annotation& dst, double tensor_bytes,
                                       uint32_t rank) {
  HETSIM_RETURN_IF_ERROR(CheckAnnotation(src, rank));
  HETSIM_RETURN_IF_ERROR(CheckAnnotation(dst, rank));
  const auto s = Shards(src, rank), d = Shards(dst, rank);
  for (const auto* set : {&s, &d}) {
    for (const auto& sh : *set) {
      if (sh.partial) {
        return Status::Invalid("BSR from " + src.ToString() + " to " + dst.ToString() +
                               ": batched send-receive cannot move Partial values (Hetu v2 §4.3); reduce them with "
                               "an all-reduce or reduce-scatter first");
      }
    }
  }
  std::vector<BsrSlice> table;
  ForEachCell(Grid({&s, &d}, rank), [&](const Box& cell) {
    BsrSlice slice{cell, tensor_bytes * Volume(cell), Holders(s, cell), Holders(d, cell)};
    if (!slice.requirers.empty()) table.push_back(std::move(slice));
  });
  return table;
}

void BsrPlanner::Add(const std::vector<BsrSlice>& table) {
  for (const auto& slice : table) {
    std::vector<uint32_t> live;
    for (uint32_t o : slice.owners) {
      if (options_.lost.count(o) == 0) live.push_back(o);
    }
    for (uint32_t r : slice.requirers) {
      // (I) local copy.
      if (std::find(live.begin(), live.end(), r) != live.end()) {
        copies_.push_back({r, r, slice.bytes});
        continue;
      }
      if (live.empty()) {
        missing_bytes_ += slice.bytes;
        continue;
      }
      uint32_t sender = live.front();  // the lowest id (owners are ascending)
      if (options_.heuristics) {
        // (II) the highest bandwidth to the receiver, then (III) the least cumulative send load, then the
        // lowest id.
        double best_bw = -1, best_load = 0;
        for (uint32_t o : live) {
          const double bw = options_.topology != nullptr ? options_.topology->Between(o, r).bandwidth_bytes_s : 1.0;
          const double load = o < load_.size() ? load_[o] : 0.0;
          const bool better = bw > best_bw * (1 + 1e-9) ||
                              (bw >= best_bw * (1 - 1e-9) && load < best_load - 1e-6 * std::max(1.0, slice.bytes));
          if (best_bw < 0 || better) {
            sender = o;
            best_bw = bw;
            best_load = load;
          }
        }
      }
      if (sender >= load_.size()) load_.resize(sender + 1, 0.0);
      load_[sender] += slice.bytes;
      sends_.push_back({sender, r, slice.bytes});
    }
  }
}

std::vector<Send> FuseSends(const std::vector<Send>& sends) {
  std::map<std::pair<uint32_t, uint32_t>, double> pair;
  for (const auto& s : sends) pair[{s.from, s.to}] += s.bytes;
  std::vector<Send> out;
  for (const auto& [k, b] : pair) out.push_back({k.first, k.second, b});
  return out;
}

namespace {

const proto::Stage* StageOf(const proto::Pipeline& p, uint32_t layer) {
  for (const auto& s : p.stages()) {
    if (s.layer_begin() <= layer && layer < s.layer_end()) return &s;
  }
  return nullptr;
}

DeviceGroup Mapped(const proto::Stage& s, const std::vector<uint32_t>& place) {
  DeviceGroup dg;
  for (uint32_t d : s.devices()) dg.push_back(place.empty() ? d : place.at(d));
  return dg;
}

DistState StageState(const proto::Stage& s, int replica_key) {
  const uint32_t tp = TpDegree(s);
  const uint32_t reps = static_cast<uint32_t>(s.devices_size()) / tp;
  if (reps > 1) return DistState({{replica_key, reps}, {0, tp}});
  return DistState({{0, tp}});
}

}  // namespace

std::vector<PlanTensor> WeightTensors(const proto::Plan& plan, const TransformerModel& model, double bytes_per_param,
                                      const std::vector<uint32_t>& place) {
  std::vector<PlanTensor> out;
  for (uint32_t l = 0; l < model.num_layers(); ++l) {
    PlanTensor t;
    t.layer = l;
    t.bytes = model.Params(l) * bytes_per_param;
    t.annotation.hdim = kDuplicate;
    for (const auto& p : plan.pipelines()) {
      const proto::Stage* s = StageOf(p, l);
      if (s == nullptr) continue;
      t.annotation.dg_union.push_back(Mapped(*s, place));
      t.annotation.ds_union.push_back(StageState(*s, kDuplicate));
    }
    if (!t.annotation.dg_union.empty()) out.push_back(std::move(t));
  }
  return out;
}

Annotation GradientAnnotation(const proto::Plan& plan, uint32_t layer) {
  Annotation a;
  a.hdim = kPartial;
  for (const auto& p : plan.pipelines()) {
    const proto::Stage* s = StageOf(p, layer);
    if (s == nullptr) continue;
    a.dg_union.push_back(Mapped(*s, {}));
    a.ds_union.push_back(StageState(*s, kPartial));
  }
  return a;
}

std::pair<Annotation, Annotation> StageBoundary(const proto::Plan& plan, uint32_t pipeline, uint32_t stage) {
  const auto& p = plan.pipelines(static_cast<int>(pipeline));
  auto side = [&](const proto::Stage& s) {
    // Intra-stage replicas split the micro-batch (dimension 0); a replica's TP/CP/Ulysses ranks hold it all.
    const uint32_t width = ReplicaWidth(s);
    const uint32_t reps = static_cast<uint32_t>(s.devices_size()) / width;
    return Spmd(Mapped(s, {}), reps > 1 ? DistState({{0, reps}, {kDuplicate, width}}) : DistState::Duplicate(width));
  };
  return {side(p.stages(static_cast<int>(stage))), side(p.stages(static_cast<int>(stage) + 1))};
}

Result<proto::Plan> LowerToPlan(const std::vector<PlanTensor>& weights, const std::vector<PipelineData>& data,
                                uint32_t num_layers) {
  if (weights.size() != num_layers) {
    return Status::Invalid("hspmd: " + std::to_string(weights.size()) + " weight annotations for a model of " +
                           std::to_string(num_layers) + " plan layers; annotate every layer once");
  }
  const size_t P = data.size();
  proto::Plan plan;
  for (const PipelineData& d : data) {
    auto* pipe = plan.add_pipelines();
    pipe->set_micro_batch_size(d.micro_batch_size);
    pipe->set_num_micro_batches(d.num_micro_batches);
  }
  for (uint32_t l = 0; l < num_layers; ++l) {
    const PlanTensor& t = weights[l];
    const std::string at = "hspmd: layer " + std::to_string(l) + ": ";
    if (t.layer != l) return Status::Invalid(at + "annotations out of order (found layer " + std::to_string(t.layer) + ")");
    const Annotation& a = t.annotation;
    if (a.hsize() != P || a.ds_union.size() != P) {
      return Status::Invalid(at + "HSize " + std::to_string(a.hsize()) + " but the data names " + std::to_string(P) +
                             " pipelines; one sharding subgroup per pipeline");
    }
    if (a.hdim != kDuplicate) return Status::Invalid(at + "weights must be duplicated across pipelines (HDim -1)");
    HETSIM_RETURN_IF_ERROR(CheckAnnotation(a, 1));
    for (size_t k = 0; k < P; ++k) {
      const DistState& ds = a.ds_union[k];
      for (const auto& [key, n] : ds.entries()) {
        if (key != 0 && key != kDuplicate && n > 1) {
          return Status::Invalid(at + "subgroup " + std::to_string(k) + " has DS " + ds.ToString() +
                                 "; weights take {D: replicas, S0: tp}");
        }
      }
      const uint32_t tp = ds.shards(0);
      auto* pipe = plan.mutable_pipelines(static_cast<int>(k));
      proto::Stage* last = pipe->stages_size() > 0 ? pipe->mutable_stages(pipe->stages_size() - 1) : nullptr;
      const bool same = last != nullptr && last->tp_degree() == tp &&
                        std::equal(last->devices().begin(), last->devices().end(), a.dg_union[k].begin(),
                                   a.dg_union[k].end());
      if (same) {
        last->set_layer_end(l + 1);
        continue;
      }
      for (const auto& st : pipe->stages()) {
        if (std::equal(st.devices().begin(), st.devices().end(), a.dg_union[k].begin(), a.dg_union[k].end())) {
          return Status::Invalid(at + "pipeline " + std::to_string(k) + " returns to the devices of its stage at layers " +
                                 std::to_string(st.layer_begin()) + "-" + std::to_string(st.layer_end() - 1) +
                                 "; a stage holds contiguous layers");
        }
      }
      auto* st = pipe->add_stages();
      for (uint32_t d : a.dg_union[k]) st->add_devices(d);
      st->set_tp_degree(tp);
      st->set_layer_begin(l);
      st->set_layer_end(l + 1);
    }
  }
  return plan;
}

std::string DescribeAnnotations(const proto::Plan& plan, const TransformerModel& model) {
  const auto weights = WeightTensors(plan, model, 2);
  std::string out = "HSPMD annotations (papers/003 §3; docs/hspmd.md): " + std::to_string(plan.pipelines_size()) +
                    " sharding subgroup(s) per weight, one per pipeline\n";
  for (size_t i = 0; i < weights.size();) {
    size_t j = i + 1;
    const std::string text = weights[i].annotation.ToString();
    while (j < weights.size() && weights[j].annotation.ToString() == text) ++j;
    auto sync = Resolve(GradientAnnotation(plan, weights[i].layer), weights[i].annotation, weights[i].bytes, 1);
    std::string kinds;
    if (sync.ok()) {
      for (CommKind k : sync->kinds()) kinds += std::string(kinds.empty() ? "" : " + ") + CommKindName(k);
    } else {
      kinds = sync.status().message();
    }
    out += "  layers " + std::to_string(weights[i].layer) + "-" + std::to_string(weights[j - 1].layer) + ": " + text +
           "\n    gradient sync: " + (kinds.empty() ? "none" : kinds) + "\n";
    i = j;
  }
  return out;
}

SwitchPlan PlanSwitch(const std::vector<PlanTensor>& from, const std::vector<PlanTensor>& to, bool fused,
                      const BsrOptions& options) {
  SwitchPlan plan;
  std::map<uint32_t, const PlanTensor*> by_layer;
  for (const auto& t : from) by_layer[t.layer] = &t;
  BsrPlanner global(options);
  for (const auto& t : to) {
    auto it = by_layer.find(t.layer);
    std::vector<BsrSlice> table;
    if (it != by_layer.end()) {
      auto tab = BsrTable(it->second->annotation, t.annotation, t.bytes, 1);
      if (tab.ok()) table = std::move(tab).value();  // weights carry no Partial (§6.2)
    } else {
      // No source: every requirer's shard is missing.
      auto tab = BsrTable(Spmd({~0u}, DistState()), t.annotation, t.bytes, 1);
      if (tab.ok()) table = std::move(tab).value();
      for (auto& s : table) s.owners.clear();
    }
    if (fused) {
      global.Add(table);
      continue;
    }
    BsrPlanner one(options);
    one.Add(table);
    plan.rounds.push_back(FuseSends(one.sends()));
    for (const auto& s : one.sends()) plan.sent_bytes += s.bytes;
    for (const auto& s : one.local_copies()) plan.local_bytes += s.bytes;
    plan.missing_bytes += one.missing_bytes();
  }
  if (fused) {
    plan.rounds.push_back(FuseSends(global.sends()));
    for (const auto& s : global.sends()) plan.sent_bytes += s.bytes;
    for (const auto& s : global.local_copies()) plan.local_bytes += s.bytes;
    plan.missing_bytes = global.missing_bytes();
  }
  return plan;
}

}  // namespace hetsim::models::hspmd
