// The exhaustive search's lower bounds (docs/planners.md, "exhaustive"): the batch allocation over the
// pipelines' profiles, the DP gradient sync and optimizer step per stage (floors whatever the layer split,
// and tightened once earlier pipelines' splits are known), and in the simulator-bound mode the gradient
// sync and optimizer step bounded by the platform's routes (RingCap).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "models/topology.h"
#include "planners/exhaustive/search_internal.h"

namespace hetsim::planners::exhaustive {

namespace {

void SortUnique(std::vector<uint32_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

double Search::AllocationBound(const std::vector<Profile*>& profiles, double extra_rate) const {
  double inv = extra_rate, weighted = 0, floor_t = 0;
  for (size_t i = 0; i < profiles.size(); ++i) {
    const Profile& pr = *profiles[i];
    if (!(pr.rho < kInf)) return kInf;  // a pipeline that can never run
    if (pr.rho <= 0) return 0;
    inv += 1.0 / pr.rho;
    weighted += pr.beta / pr.rho;
    floor_t = std::max(floor_t, pr.beta + pr.rho);  // every pipeline takes at least one sequence
  }
  if (inv <= 0) return kInf;
  return std::max(floor_t, (G_ + weighted) / inv);
}

double Search::PartialBound(bool newest_profiled) {
  if (!bounds_ || incumbent_ == kInf) return 0;
  TrimCaches();
  std::vector<Profile*> profiles;
  double rate = 0;
  for (size_t p = 0; p < pipes_.size(); ++p) {
    if (p + 1 == pipes_.size() && !newest_profiled) {
      if (!rate_bounds_) return 0;
      for (const Stage& st : pipes_[p].stages) {
        for (uint32_t d : st.devices) rate += device_rate_[d];
      }
    } else {
      profiles.push_back(&ProfileOf(pipes_[p]));
    }
  }
  if (free_total_ > 0) {
    if (!rate_bounds_) return 0;
    for (uint32_t n = 0; n < cluster_.nodes().size(); ++n) {
      const uint32_t free = cluster_.nodes()[n].num_gpus - used_[n];
      for (uint32_t i = 0; i < free; ++i) rate += device_rate_[cluster_.nodes()[n].first_device + used_[n] + i];
    }
  }
  if (allow_unused_ && profiles.empty()) return 0;
  const double pipelines_lb = AllocationBound(profiles, rate);
  if (pipes_.empty() || sim_ != nullptr) return pipelines_lb;
  // The closed pipelines' DP sync and optimizer floors (the pipelines still to come only add holders).
  PrepareDpLinks(!allow_unused_ && free_total_ > 0 ? 1 : 0);
  double floor = kInf;
  for (uint32_t z : zeros_) {
    zero_ = z;
    SetShardBound(free_total_);
    const Acc a = StructureFloor();
    floor = std::min(floor, a.dp + a.opt);
  }
  return pipelines_lb + floor;
}

double Search::AllocationBoundFor(const std::vector<Profile*>& profiles, size_t first, uint32_t g) const {
  double inv = 0, weighted = 0, floor_t = 0;
  for (size_t i = first; i < profiles.size(); ++i) {
    const Profile* pr = profiles[i];
    if (!(pr->rho < kInf)) return kInf;
    if (pr->rho <= 0) return 0;
    inv += 1.0 / pr->rho;
    weighted += pr->beta / pr->rho;
    floor_t = std::max(floor_t, pr->beta + pr->rho);
  }
  if (inv <= 0) return g == 0 ? 0 : kInf;
  return std::max(floor_t, (g + weighted) / inv);
}

void Search::SetShardBound(uint32_t free) {
  shard_bound_.assign(pipes_.size(), 0);
  uint32_t total_max = 0;
  for (const auto& p : pipes_) total_max += p.max_replicas;
  for (size_t p = 0; p < pipes_.size(); ++p) shard_bound_[p] = total_max - pipes_[p].max_replicas + free;
}

Search::Acc Search::StructureFloor() const {
  Acc a;
  if (sim_ != nullptr) return a;  // the simulator-bound mode charges them per stage (SimStageFloor)
  const double factor = zero_ == 2 ? 2.0 : zero_ == 3 ? 3.0 : 1.0;  // one micro-batch
  for (size_t p = 0; p < pipes_.size(); ++p) {
    const uint32_t S = static_cast<uint32_t>(pipes_[p].stages.size());
    for (uint32_t s = 0; s < S; ++s) {
      const StageN c = ComputeStageN(p, s, LowBlocks(s, S));
      a.dp = std::max(a.dp, factor * c.dp_base);
      a.opt = std::max(a.opt, c.opt);
    }
  }
  return a;
}

void Search::PrepareDpLinks(uint32_t extra_holders) {
  const size_t P = pipes_.size();
  const models::Topology& topo = cost_.topology();
  dp_links_.assign(P, {});
  for (size_t p = 0; p < P; ++p) {
    dp_links_[p].resize(pipes_[p].stages.size());
    for (size_t s = 0; s < pipes_[p].stages.size(); ++s) {
      const Stage& st = pipes_[p].stages[s];
      std::vector<uint32_t> rank0;
      for (uint32_t r = 0; r < st.replicas; ++r) rank0.push_back(st.devices[size_t{r} * st.tp]);
      const models::Link own = topo.Slowest(rank0);
      dp_links_[p][s].assign(st.groups.size(), DpLink{});
      for (uint32_t e = 0; e < st.groups.size(); ++e) {
        uint32_t r = 0;
        while (st.replica_entry[r] != e) ++r;
        const uint32_t d = st.devices[size_t{r} * st.tp];
        DpLink& l = dp_links_[p][s][e];
        l.holders = st.replicas + static_cast<uint32_t>(P - 1) + extra_holders;
        if (st.replicas >= 2) {
          l.bandwidth = own.bandwidth_bytes_s;
          l.latency = own.latency_s;
          if (sim_ != nullptr) {
            for (uint32_t e2 = 0; e2 < st.groups.size(); ++e2) {
              if (e2 != e || st.groups[e].second >= 2) {
                l.sim_bandwidth = std::max(l.sim_bandwidth, RingCap(st.groups[e].first, st.groups[e2].first));
              }
            }
          }
        }
        for (size_t q = 0; q < P; ++q) {
          if (q == p) continue;
          double best_bw = 0, best_lat = kInf;
          for (const auto& other : pipes_[q].stages) {
            for (uint32_t dev : other.devices) {
              const models::Link x = topo.Between(d, dev);
              best_bw = std::max(best_bw, x.bandwidth_bytes_s);
              best_lat = std::min(best_lat, x.latency_s);
            }
          }
          l.bandwidth = std::min(l.bandwidth, best_bw);
          l.latency = std::max(l.latency, best_lat);
          if (sim_ != nullptr) {
            for (const auto& other : pipes_[q].stages) {
              for (const auto& [n2, g2] : other.groups) l.sim_bandwidth = std::max(l.sim_bandwidth, RingCap(st.groups[e].first, n2));
            }
          }
          if (q > p) {
            l.later_bandwidth = std::min(l.later_bandwidth, best_bw);
            l.later_latency = std::max(l.later_latency, best_lat);
          }
        }
      }
    }
  }
}

double Search::RankParams(uint32_t begin, uint32_t end, uint32_t tp) const {
  const bool holds_embedding = begin == 0;
  double n = 0;
  if (begin == 0) n += model_.ParamsPerRank(0, tp, !holds_embedding);
  // Each class of blocks by its first (one class for a dense model; an MoE model's dense and MoE blocks).
  const BlockClasses& classes = cost_.block_classes();
  for (uint32_t c = 0; c < classes.size(); ++c) {
    const uint32_t blocks = classes.Count(c, begin, end);
    if (blocks > 0) n += blocks * model_.ParamsPerRank(classes.first(c), tp, !holds_embedding);
  }
  if (end == L_) n += model_.ParamsPerRank(L_ - 1, tp, !holds_embedding);
  return n;
}

void Search::ResetStageCache() {
  stage_base_.assign(pipes_.size(), 0);
  size_t total = 0;
  for (size_t p = 0; p < pipes_.size(); ++p) {
    stage_base_[p] = total;
    total += pipes_[p].stages.size() * (blocks_ + 1);
  }
  stage_cache_.assign(total, StageN{});
}

Search::StageN Search::ComputeStageN(size_t p, uint32_t s, uint32_t n) const {
  StageN c;
  c.done = true;
  const Stage& st = pipes_[p].stages[s];
  const uint32_t S = static_cast<uint32_t>(pipes_[p].stages.size());
  const auto [begin, end] = Range(s, S, n);
  const double shard = st.replicas + shard_bound_[p];
  const double params = RankParams(begin, end, st.tp) / (zero_ >= 1 ? shard : 1.0);
  // Without a tied head's extra copy: a lower bound whoever leads the group.
  const double bytes = cost_.GradientChunkBytes(begin, end, st.tp, /*holds_embedding=*/true);
  for (uint32_t e = 0; e < st.groups.size(); ++e) {
    uint32_t r = 0;
    while (st.replica_entry[r] != e) ++r;
    const uint32_t d = st.devices[size_t{r} * st.tp];
    const double opt = cost_.OptimizerSeconds(d, params);
    c.opt = std::max(c.opt, opt);
    const DpLink& l = dp_links_[p][s][e];
    if (sim_ != nullptr) {
      // After its last backward pass a device reduce-scatters (ZeRO ≥ 2) or all-reduces (ZeRO 1) its
      // gradients with at least `holders` members: its own ring flow carries at least (n − 1)/n of its
      // bytes over the rails it stripes on, at no more than sim_bandwidth; then it steps.
      // ZeRO-3 at TP 1 may be lowered by units (models/lowering.h), its calls inside the passes and behind
      // their compute: nothing of them is certain to show, so neither term bounds it.
      const bool units = zero_ == 3 && st.tp == 1;
      double sync = 0;
      if (!units && l.holders >= 2 && bytes > 0 && l.sim_bandwidth > 0) {
        sync = (l.holders - 1.0) / l.holders * bytes / l.sim_bandwidth;
      }
      c.sim_floor = e == 0 ? sync + opt : std::min(c.sim_floor, sync + opt);
      // Otherwise ZeRO-3 all-gathers the stage's parameters over the same ring before every pass (the
      // lowering's AddZeroGathers): (n − 1)/n of the bytes into the device each time, at no more than
      // sim_bandwidth.
      const double gather = zero_ == 3 && !units && l.holders >= 2 && bytes > 0 && l.sim_bandwidth > 0
                                ? (l.holders - 1.0) / l.holders * bytes / l.sim_bandwidth
                                : 0;
      c.sim_gather = e == 0 ? gather : std::min(c.sim_gather, gather);
    }
    if (l.holders < 2 || bytes <= 0) continue;
    const models::Link link{models::LinkKind::kInterNode, l.bandwidth, l.latency};
    c.dp_base = std::max(c.dp_base, zero_ >= 2 ? models::RingReduceScatterSeconds(bytes, l.holders, link)
                                               : models::RingAllReduceSeconds(bytes, l.holders, link));
  }
  c.stat = memory_.StaticGib(begin, end, st.tp, zero_, shard);
  c.act = memory_.ActivationGibPerSequence(begin, end, st.tp, true, rc_);
  c.peak = memory_.PeakLayerGibPerSequence(begin, end, st.tp, true, rc_);
  return c;
}

double Search::RingCap(uint32_t a, uint32_t b) {
  const size_t N = cluster_.nodes().size();
  if (ring_cap_.empty()) ring_cap_.assign(N * N, -1);
  double& cap = ring_cap_[a * N + b];
  if (cap >= 0) return cap;
  cap = 0;
  const auto& na = cluster_.nodes()[a];
  const auto& nb = cluster_.nodes()[b];
  bool vendors_differ = false;
  for (uint32_t d = 0; d < cluster_.num_devices(); ++d) {
    vendors_differ = vendors_differ || cluster_.device(d).gpu->vendor != cluster_.device(0).gpu->vendor;
  }
  for (uint32_t i = 0; i < na.num_gpus; ++i) {
    for (uint32_t j = 0; j < nb.num_gpus; ++j) {
      const uint32_t x = na.first_device + i, y = nb.first_device + j;
      if (x == y) continue;
      cap = std::max({cap, routes_->GpuToGpu(x, y).bandwidth_bytes_s, routes_->GpuToGpu(y, x).bandwidth_bytes_s});
      if (vendors_differ && a != b) {
        cap = std::max({cap, routes_->GpuToHost(x).bandwidth_bytes_s, routes_->HostToGpu(x).bandwidth_bytes_s,
                        routes_->HostToHost(a, b).bandwidth_bytes_s});
      }
    }
  }
  if (a != b) cap *= na.num_gpus;
  return cap;
}

double Search::NicBytesPerSecond(uint32_t node) const {
  const auto& n = cluster_.nodes()[node];
  return n.has_nic ? n.nic.bandwidth_gbps() * 1e9 / 8 * std::max(1u, n.nic.count()) : 0;
}

double Search::CrossNodeSyncFloor() {
  cross_tp_ = 0;
  cross_cap_ = 0;
  if (zero_ == 0) return 0;
  const size_t P = pipes_.size();
  uint32_t cuts = 0, tp = 1;
  std::vector<std::vector<uint32_t>> nodes(P);
  for (size_t p = P; p-- > 0;) {
    cuts += static_cast<uint32_t>(pipes_[p].stages.size()) - 1;
    for (const Stage& st : pipes_[p].stages) {
      tp = std::lcm(tp, st.tp);
      for (const auto& [node, count] : st.groups) {
        nodes[p].push_back(node);
        cross_cap_ = std::max(cross_cap_, NicBytesPerSecond(node));
      }
    }
    SortUnique(nodes[p]);
  }
  if (!(cross_cap_ > 0)) return 0;
  cross_tp_ = tp;
  double floor = 0;
  for (size_t p = 0; p < P; ++p) {
    const uint32_t S = static_cast<uint32_t>(pipes_[p].stages.size());
    for (uint32_t s = 0; s < S; ++s) {
      const Stage& st = pipes_[p].stages[s];
      if (st.groups.size() < 2) continue;  // groups are by node: one entry, one node
      const auto [begin, end] = Range(s, S, LowBlocks(s, S));
      floor = std::max(floor, CrossSeconds(begin, end, 1 + cuts - (S - 1), st.replicas + static_cast<uint32_t>(P) - 1,
                                           cross_cap_));
    }
  }
  for (size_t p = 0; p < P; ++p) {
    for (size_t q = p + 1; q < P; ++q) {
      const bool share = std::find_first_of(nodes[p].begin(), nodes[p].end(), nodes[q].begin(), nodes[q].end()) !=
                         nodes[p].end();
      if (!share) floor = std::max(floor, CrossSeconds(0, L_, 1 + cuts, static_cast<uint32_t>(P), cross_cap_));
    }
  }
  return floor;
}

double Search::CrossSeconds(uint32_t begin, uint32_t end, uint32_t groups, uint32_t holders, double cap,
                            uint32_t tp) const {
  if (holders < 2 || cross_tp_ == 0 || !(cap > 0)) return 0;
  const double bytes = cost_.GradientChunkBytes(begin, end, tp > 0 ? tp : cross_tp_, /*holds_embedding=*/true) / groups;
  return 2 * (holders - 1.0) / holders * bytes / cap;
}

uint32_t Search::StageHolding(size_t q, uint32_t layer) const {
  const auto& blocks = choice_[q].blocks;
  const uint32_t S = static_cast<uint32_t>(blocks.size());
  uint32_t end = 0;
  for (uint32_t k = 0; k + 1 < S; ++k) {
    end += blocks[k] + (k == 0 ? 1 : 0);
    if (layer < end) return k;
  }
  return S - 1;
}

void Search::SegmentCuts(size_t pipelines, uint32_t begin, uint32_t end) {
  scratch_cuts_.assign({begin, end});
  for (size_t q = 0; q < pipelines; ++q) {
    uint32_t at = 0;
    const auto& blocks = choice_[q].blocks;
    for (size_t k = 0; k + 1 < blocks.size(); ++k) {
      at += blocks[k] + (k == 0 ? 1 : 0);
      if (at > begin && at < end) scratch_cuts_.push_back(at);
    }
  }
  SortUnique(scratch_cuts_);
}

void Search::AddPipelineMessages(size_t p, uint32_t j, std::vector<double>& in, std::vector<double>& out) const {
  // As models/lowering_passes.cc (AddPp) sends them: sequence x of a micro-batch goes from the replica of
  // stage j whose share holds it to the one of stage j + 1; between stages of one TP degree t > 1 each rank
  // sends 1/t (the whole tensor in all), else every receiving rank takes the whole tensor.
  const auto node_of = [&](const Stage& st, uint32_t r) { return cluster_.device(st.devices[size_t{r} * st.tp]).node; };
  const Choice& c = choice_[p];
  const Stage& a = pipes_[p].stages[j];
  const Stage& z = pipes_[p].stages[j + 1];
  const bool scatter = a.tp == z.tp && a.tp > 1;
  const double fwd = c.m * boundary_bytes_ * (scatter ? 1 : z.tp), bwd = c.m * boundary_bytes_ * (scatter ? 1 : a.tp);
  uint32_t ra = 0, rz = 0, left_a = a.replicas > 1 ? c.splits[j][0] : c.b,
           left_z = z.replicas > 1 ? c.splits[j + 1][0] : c.b;
  for (uint32_t x = 0; x < c.b; ++x) {
    while (left_a == 0) left_a = c.splits[j][++ra];
    while (left_z == 0) left_z = c.splits[j + 1][++rz];
    const uint32_t na = node_of(a, ra), nz = node_of(z, rz);
    if (na != nz) {
      out[na] += fwd;
      in[nz] += fwd;
      out[nz] += bwd;
      in[na] += bwd;
    }
    --left_a;
    --left_z;
  }
}

void Search::AddGradientLoads(size_t known, uint32_t begin, uint32_t end, std::vector<double>& in,
                              std::vector<double>& out) {
  // ZeRO ≥ 1: reduce-scatter and all-gather over one ring per group; a ring over several nodes enters and
  // leaves each of them at least once, each time with (n − 1)/n of the group's bytes per collective. Groups:
  // the model's segments between all pipelines' stage boundaries, one per TP rank (or per chunk when the
  // holders' TP degrees differ, then counted as one chunk: a lower bound). With pipelines not placed yet, a
  // segment of the known pipelines may be cut further (its pieces' rings span the same nodes and carry the
  // same bytes in all), gains at least one holder per such pipeline, and is chunked at most at the
  // structure's lcm of TP degrees.
  if (zero_ == 0) return;
  const uint32_t unknown = static_cast<uint32_t>(pipes_.size() - known);
  if (unknown > 0 && cross_tp_ == 0) return;
  SegmentCuts(known, begin, end);
  for (size_t i = 0; i + 1 < scratch_cuts_.size(); ++i) {
    const uint32_t a = scratch_cuts_[i];
    uint32_t holders = unknown, tp = 0;
    bool uniform = true;
    scratch_nodes_.clear();  // the segment's nodes
    for (size_t q = 0; q < known; ++q) {
      const Stage& st = pipes_[q].stages[StageHolding(q, a)];
      holders += st.replicas;
      uniform = uniform && (tp == 0 || tp == st.tp);
      tp = tp == 0 ? st.tp : std::lcm(tp, st.tp);
      for (const auto& [node, count] : st.groups) scratch_nodes_.push_back(node);
    }
    SortUnique(scratch_nodes_);
    if (scratch_nodes_.size() < 2 || holders < 2) continue;
    const uint32_t e = scratch_cuts_[i + 1];
    const double bytes = unknown > 0 ? cost_.GradientChunkBytes(a, e, cross_tp_, /*holds_embedding=*/true)
                                     : cost_.GradientChunkBytes(a, e, tp, /*holds_embedding=*/true) * (uniform ? tp : 1);
    const double load = 2 * (holders - 1.0) / holders * bytes;
    for (uint32_t node : scratch_nodes_) {
      in[node] += load;
      out[node] += load;
    }
  }
}

double Search::NicFloor(const std::vector<double>& in, const std::vector<double>& out) const {
  double floor = 0;
  for (uint32_t n = 0; n < in.size(); ++n) {
    const double cap = NicBytesPerSecond(n);
    if (cap > 0) floor = std::max(floor, std::max(in[n], out[n]) / cap);
  }
  return floor;
}

void Search::StartNicLoads(size_t p) {
  const size_t N = cluster_.nodes().size(), S = pipes_[p].stages.size();
  nic_in_.resize(pipes_.size());
  nic_out_.resize(pipes_.size());
  auto& in = nic_in_[p];
  auto& out = nic_out_[p];
  in.assign(S + 1, std::vector<double>(N, 0));
  out.assign(S + 1, std::vector<double>(N, 0));
  for (size_t q = 0; q < p; ++q) {
    for (uint32_t j = 0; j + 1 < pipes_[q].stages.size(); ++j) AddPipelineMessages(q, j, in[0], out[0]);
  }
}

double Search::StageNicFloor(size_t p, uint32_t s, uint32_t begin, uint32_t end) {
  auto& in = nic_in_[p];
  auto& out = nic_out_[p];
  in[s + 1] = in[s];
  out[s + 1] = out[s];
  if (s > 0) AddPipelineMessages(p, s - 1, in[s + 1], out[s + 1]);
  AddGradientLoads(p + 1, begin, end, in[s + 1], out[s + 1]);
  return NicFloor(in[s + 1], out[s + 1]);
}

double Search::ScheduleFloor(size_t p, const Profile& pr) {
  const Pipe& pipe = pipes_[p];
  const Choice& c = choice_[p];
  const uint32_t S = static_cast<uint32_t>(pipe.stages.size()), m = c.m;
  ScheduleScratch& k = schedule_;
  k.base.assign(S + 1, 0);
  for (uint32_t s = 0; s < S; ++s) k.base[s + 1] = k.base[s] + pipe.stages[s].replicas;
  const uint32_t R = k.base[S];
  k.fwd.assign(R, 0);
  k.bwd.assign(R, 0);
  k.after.assign(R, 0);
  k.stage.assign(R, 0);
  for (uint32_t s = 0; s < S; ++s) {
    const Stage& st = pipe.stages[s];
    const uint32_t n = c.blocks[s];
    const double gather = StageAt(p, s, n).sim_gather, after = SimStageFloor(p, s, n);
    for (uint32_t r = 0; r < st.replicas; ++r) {
      const uint32_t id = k.base[s] + r, e = st.replica_entry[r], x = st.replicas > 1 ? c.splits[s][r] : c.b;
      k.stage[id] = s;
      k.after[id] = after;
      if (x == 0) continue;  // holds no sequence: its passes are empty
      const double tau = pr.Passes(s, e, x, n), f = pr.Forward(s, e, x, n);
      k.fwd[id] = f + gather;
      k.bwd[id] = tau - f + gather;
    }
  }
  // The messages between stages: sequence x goes from the replica of stage j whose share holds it to the one
  // of stage j + 1 (models/lowering_passes.cc, AddPp), so the shares' contiguous runs make the pairs.
  k.edges.clear();
  k.edge_begin.assign(S, 0);
  for (uint32_t j = 0; j + 1 < S; ++j) {
    k.edge_begin[j] = static_cast<uint32_t>(k.edges.size());
    const Stage& a = pipe.stages[j];
    const Stage& z = pipe.stages[j + 1];
    uint32_t ra = 0, rz = 0, left_a = a.replicas > 1 ? c.splits[j][0] : c.b,
             left_z = z.replicas > 1 ? c.splits[j + 1][0] : c.b, run = 0;
    for (uint32_t x = 0; x < c.b; ++x) {
      while (left_a == 0) left_a = c.splits[j][++ra];
      while (left_z == 0) left_z = c.splits[j + 1][++rz];
      ++run;
      --left_a;
      --left_z;
      if (x + 1 == c.b || left_a == 0 || left_z == 0) {
        const double bytes = run * boundary_bytes_;
        k.edges.push_back({k.base[j] + ra, k.base[j + 1] + rz, MessageFloor(a, z, bytes, ra, rz),
                           MessageFloor(z, a, bytes, rz, ra)});
        run = 0;
      }
    }
  }
  k.edge_begin[S - 1] = static_cast<uint32_t>(k.edges.size());
  k.fend.assign(size_t{R} * m, -1);
  k.bend.assign(size_t{R} * m, -1);
  k.cursor.assign(R, 0);
  k.clock.assign(R, 0);
  // Each replica's passes in the lowering's 1F1B order: w = min(S − s − 1, m) forward passes, then one
  // forward and one backward while forwards are left, then the backward passes. A pass starts once the
  // replica is free and every message it receives has arrived (sends are asynchronous).
  for (bool progress = true; progress;) {
    progress = false;
    for (uint32_t id = 0; id < R; ++id) {
      const uint32_t s = k.stage[id], w = std::min(S - s - 1, m);
      while (k.cursor[id] < 2 * m) {
        const uint32_t op = k.cursor[id];
        bool forward = true;
        uint32_t i = op;
        if (op >= w) {
          const uint32_t t = op - w;
          forward = t < 2 * (m - w) && t % 2 == 0;
          i = t < 2 * (m - w) ? (forward ? w + t / 2 : t / 2) : t - (m - w);
        }
        double ready = k.clock[id];
        bool blocked = false;
        // A forward waits on the boundary before the stage, a backward on the one after it.
        const uint32_t j = forward ? s - 1 : s;
        const bool has = forward ? s > 0 : s + 1 < S;
        for (uint32_t x = has ? k.edge_begin[j] : 0, last = has ? k.edge_begin[j + 1] : 0; x < last; ++x) {
          const ScheduleEdge& edge = k.edges[x];
          if (forward && edge.to == id) {
            const double end = k.fend[size_t{edge.from} * m + i];
            if (end < 0) blocked = true;
            ready = std::max(ready, end + edge.there);
          } else if (!forward && edge.from == id) {
            const double end = k.bend[size_t{edge.to} * m + i];
            if (end < 0) blocked = true;
            ready = std::max(ready, end + edge.back);
          }
        }
        if (blocked) break;
        const double end = ready + (forward ? k.fwd[id] : k.bwd[id]);
        (forward ? k.fend : k.bend)[size_t{id} * m + i] = end;
        k.clock[id] = end;
        ++k.cursor[id];
        progress = true;
      }
    }
  }
  double bound = 0;
  for (uint32_t id = 0; id < R; ++id) {
    if (k.cursor[id] < 2 * m) return 0;  // cannot happen (1F1B does not deadlock); no bound rather than a wrong one
    bound = std::max(bound, k.clock[id] + k.after[id]);
  }
  return bound;
}

double Search::FirstRoundTrip(size_t p, const Profile& pr) const {
  const Choice& c = choice_[p];
  const uint32_t S = static_cast<uint32_t>(pipes_[p].stages.size());
  double bound = 0, later = 0;  // later: the least compute of one micro-batch in the stages after s
  for (uint32_t s = S; s-- > 0;) {
    double least = kInf;
    bound = std::max(bound, ReplicaRoundTrip(p, pr, s, c.blocks[s], c.splits[s], later, &least) + stage_floor_[p][s]);
    if (least < kInf) later += least;
  }
  return bound;
}

double Search::MessageFloor(const Stage& from, const Stage& to, double bytes, uint32_t from_replica,
                            uint32_t to_replica) {
  // As models/lowering_passes.cc (AddPp) sends it: between stages of one TP degree t > 1 each TP rank sends
  // 1/t of the tensor to its peer (the search's plans are sequence parallel, so nothing is gathered after);
  // otherwise receiver rank k takes the whole tensor from sender rank k mod t.
  const bool scatter = from.tp == to.tp && from.tp > 1;
  const double msg = bytes / (scatter ? from.tp : 1);
  double best = kInf;
  for (uint32_t kr = 0; kr < to.tp; ++kr) {
    const uint32_t x = from.devices[size_t{from_replica} * from.tp + kr % from.tp];
    const uint32_t y = to.devices[size_t{to_replica} * to.tp + kr];
    const uint32_t na = routes_->NodeOf(x), nb = routes_->NodeOf(y);
    double t = 0;
    if (comm_->Staged(na, nb)) {
      // GPU -> host -> host -> GPU, each copy whole before the next: at least the slowest copy.
      t = std::max({routes_->GpuToHost(x).Seconds(msg), routes_->HostToHost(na, nb).Seconds(msg),
                    routes_->HostToGpu(y).Seconds(msg)});
    } else {
      t = routes_->GpuToGpu(x, y).Seconds(msg);
    }
    best = std::min(best, t);
  }
  return best < kInf ? best : 0;
}

void Search::PreparePipeline(size_t p, uint32_t b, const Profile& pr) {
  const auto& stages = pipes_[p].stages;
  const uint32_t S = static_cast<uint32_t>(stages.size());
  hop_.resize(pipes_.size());
  hop_suffix_.resize(pipes_.size());
  single_suffix_.resize(pipes_.size());
  hop_[p].assign(S, 0);
  hop_suffix_[p].assign(S + 1, 0);
  single_suffix_[p].assign(S + 1, 1);
  const double bytes = b * boundary_bytes_;
  for (uint32_t j = S; j-- > 0;) {
    single_suffix_[p][j] = single_suffix_[p][j + 1] && stages[j].replicas == 1;
    if (j + 1 < S && stages[j].replicas == 1 && stages[j + 1].replicas == 1) {
      hop_[p][j] = MessageFloor(stages[j], stages[j + 1], bytes) + MessageFloor(stages[j + 1], stages[j], bytes);
    } else if (j + 1 < S) {
      // With several replicas on either side which replica feeds which is not fixed here, but a micro-batch
      // crosses the boundary in at least one message of at least one sequence each way: the least over the
      // replica pairs.
      double there = kInf, back = kInf;
      for (uint32_t a = 0; a < stages[j].replicas; ++a) {
        for (uint32_t z = 0; z < stages[j + 1].replicas; ++z) {
          there = std::min(there, MessageFloor(stages[j], stages[j + 1], boundary_bytes_, a, z));
          back = std::min(back, MessageFloor(stages[j + 1], stages[j], boundary_bytes_, z, a));
        }
      }
      hop_[p][j] = there + back;
    }
    hop_suffix_[p][j] = hop_suffix_[p][j + 1] + hop_[p][j];
  }
  // The least compute of one micro-batch in stages k.. (LeastLater): stage j takes at least
  // F_j + n_j C_j with F and C its entries' least over the shares a replica can have (all b with one
  // replica, one to b with several), n_j ≥ its fewest blocks; the blocks beyond the fewest go where C is
  // least.
  least_fixed_.resize(pipes_.size());
  least_lo_.resize(pipes_.size());
  least_c_.resize(pipes_.size());
  least_fixed_[p].assign(S + 1, 0);
  least_lo_[p].assign(S + 1, 0);
  least_c_[p].assign(S + 1, kInf);
  for (uint32_t j = S; j-- > 0;) {
    const uint32_t lo = LowBlocks(j, S);
    double f = kInf, c = kInf;
    // Any share from one sequence to b (times need not grow with the share: measured profiles).
    for (uint32_t x = stages[j].replicas == 1 ? b : 1; x <= b; ++x) {
      for (uint32_t e = 0; e < stages[j].groups.size(); ++e) {
        f = std::min(f, pr.F(j, e, x));
        c = std::min(c, pr.C(j, e, x));
      }
    }
    least_fixed_[p][j] = least_fixed_[p][j + 1] + f + lo * c;
    least_lo_[p][j] = least_lo_[p][j + 1] + lo;
    least_c_[p][j] = std::min(least_c_[p][j + 1], c);
  }
}

double Search::ReplicaRoundTrip(size_t p, const Profile& pr, uint32_t s, uint32_t n,
                                const std::vector<uint32_t>& split, double later, double* least) const {
  const Stage& st = pipes_[p].stages[s];
  const Choice& c = choice_[p];
  const uint32_t S = static_cast<uint32_t>(pipes_[p].stages.size()), ahead = S - s, m = c.m;
  double worst = 0;
  for (uint32_t r = 0; r < st.replicas; ++r) {
    const uint32_t x = st.replicas > 1 ? split[r] : c.b;
    if (x == 0) continue;
    const uint32_t e = st.replica_entry[r];
    const double tau = pr.Passes(s, e, x, n), f = pr.Forward(s, e, x, n);
    worst = std::max(worst, f + m * (tau - f) + (m > ahead ? m - ahead : 0) * f);
    if (least != nullptr) *least = std::min(*least, tau);
  }
  return worst + later + hop_suffix_[p][s];
}

double Search::KnownDpBound(size_t p, uint32_t s, uint32_t begin, uint32_t end, uint32_t m) {
  const Stage& st = pipes_[p].stages[s];
  const size_t P = pipes_.size();
  const uint32_t unknown = static_cast<uint32_t>(P - 1 - p);
  // Segment boundaries: the earlier pipelines' stage boundaries inside [begin, end).
  SegmentCuts(p, begin, end);
  double worst = 0;
  std::vector<double> per_entry(st.groups.size(), 0);
  for (size_t i = 0; i + 1 < scratch_cuts_.size(); ++i) {
    const uint32_t a = scratch_cuts_[i], e = scratch_cuts_[i + 1];
    scratch_devices_.clear();
    for (uint32_t r = 0; r < st.replicas; ++r) scratch_devices_.push_back(st.devices[size_t{r} * st.tp]);
    uint32_t holders = st.replicas + unknown, group_m = m;
    for (size_t q = 0; q < p; ++q) {
      const Stage& other = pipes_[q].stages[StageHolding(q, a)];
      holders += other.replicas;
      for (uint32_t r = 0; r < other.replicas; ++r) scratch_devices_.push_back(other.devices[size_t{r} * other.tp]);
      group_m = std::max(group_m, choice_[q].m);
    }
    if (holders < 2) continue;
    const models::Link known = cost_.topology().Slowest(scratch_devices_);
    const double bytes = cost_.GradientChunkBytes(a, e, st.tp, /*holds_embedding=*/true);
    const double factor = zero_ == 2 ? group_m + 1.0 : zero_ == 3 ? 3.0 * group_m : 1.0;
    for (uint32_t en = 0; en < st.groups.size(); ++en) {
      const DpLink& l = dp_links_[p][s][en];
      models::Link link = known;
      if (unknown > 0) {
        link.bandwidth_bytes_s = std::min(link.bandwidth_bytes_s, l.later_bandwidth);
        link.latency_s = std::max(link.latency_s, l.later_latency);
      }
      per_entry[en] += factor * (zero_ >= 2 ? models::RingReduceScatterSeconds(bytes, holders, link)
                                            : models::RingAllReduceSeconds(bytes, holders, link));
    }
  }
  for (double t : per_entry) worst = std::max(worst, t);
  return worst;
}

}  // namespace hetsim::planners::exhaustive
