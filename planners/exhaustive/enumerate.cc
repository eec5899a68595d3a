// The exhaustive search's enumeration: every structure (pipelines of stages of TP groups, identical nodes
// and pipelines taken in one canonical order), then per structure every ZeRO stage, per pipeline every
// (micro-batch size, count) and every layer split, each subtree cut when its lower bound (bounds.cc) is no
// better than the best plan; a leaf is costed by the closed form, or in the simulator-bound mode played at
// the lower-bound pricing. The stop on the time limit and the evaluation budget.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "models/cost.h"
#include "models/plan.h"
#include "planners/exhaustive/exhaustive.h"
#include "planners/exhaustive/search_internal.h"

namespace hetsim::planners::exhaustive {

Search::Search(const PlanningProblem& problem, const proto::ExhaustiveOptions& options, SearchStats& stats,
               uint32_t keep_alternatives, const SimBoundMode* sim)
    : problem_(problem),
      cost_(problem),
      memory_(problem),
      stats_(stats),
      cluster_(problem.cluster),
      model_(problem.model),
      L_(problem.model.num_layers()),
      blocks_(problem.model.num_blocks()),
      G_(problem.training.global_batch_size()),
      rc_(problem.training.recompute()),
      kept_(keep_alternatives),
      sim_(sim) {
  if (sim_ != nullptr) {
    incumbent_ = sim_->threshold_s;
    routes_.emplace(cluster_, problem.compute.calibration);
    comm_.emplace(cluster_);
    boundary_bytes_ = models::PipelineBoundaryBytes(model_, 1, problem.training.seq_len(), problem.training.dtype());
  }
  bmax_ = std::min<uint32_t>(G_, options.max_micro_batch_size() > 0 ? options.max_micro_batch_size() : 32);
  zeros_ = options.zero_stages().empty()
               ? std::vector<uint32_t>{1, 2, 3}
               : std::vector<uint32_t>(options.zero_stages().begin(), options.zero_stages().end());
  if (sim_ != nullptr && std::find(zeros_.begin(), zeros_.end(), 1u) != zeros_.end() &&
      std::find(zeros_.begin(), zeros_.end(), 2u) != zeros_.end()) {
    // ZeRO-1 and ZeRO-2 lower to the same operations (models/lowering_sync.cc: both reduce-scatter the
    // gradients, step the shard and all-gather it), so a plan simulates the same under either; ZeRO-2 needs
    // no more memory. The proof covers ZeRO-1's plans by their ZeRO-2 twins.
    zeros_.erase(std::find(zeros_.begin(), zeros_.end(), 1u));
  }
  allow_unused_ = options.allow_unused_devices();
  bounds_ = !options.disable_bounds();
  time_limit_s_ = options.time_limit_s() > 0                      ? options.time_limit_s()
                  : problem.alternatives == kEveryCandidate ? kWarmStartTimeLimitS
                                                            : 300;
  max_evaluations_ = options.max_evaluations();
  if (sim_ != nullptr) {
    time_limit_s_ = options.proof_time_limit_s() > 0 ? options.proof_time_limit_s() : 300;
    max_nodes_ = options.max_proof_nodes() > 0 ? options.max_proof_nodes() : 20000000;
    max_evaluations_ = 0;  // the closed form's budget; the proof has its own counted ones
  }
  const uint32_t max_node = [&] {
    uint32_t m = 1;
    for (const auto& n : cluster_.nodes()) m = std::max(m, n.num_gpus);
    return m;
  }();
  for (uint32_t tp = 1; tp <= max_node; ++tp) {
    if (!ModelAllowsTp(model_, tp)) continue;
    if (!options.tp_degrees().empty() &&
        std::find(options.tp_degrees().begin(), options.tp_degrees().end(), tp) == options.tp_degrees().end()) {
      continue;
    }
    tps_.push_back(tp);
  }
  // Identical nodes under the same switch are interchangeable (symmetry classes).
  const auto& nodes = cluster_.nodes();
  const auto& net = cluster_.spec().network();
  const uint32_t per_switch = net.has_fat_tree() ? net.fat_tree().nodes_per_leaf()
                              : net.has_pods()   ? net.pods().nodes_per_pod()
                                                 : 0;
  std::map<std::tuple<uint32_t, uint32_t, std::string, uint32_t>, uint32_t> classes;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    const uint32_t where = per_switch == 0 ? 0 : n / per_switch;
    const auto key = std::make_tuple(nodes[n].group, nodes[n].num_gpus, nodes[n].zone, where);
    auto [it, inserted] = classes.emplace(key, static_cast<uint32_t>(classes.size()));
    class_of_.push_back(it->second);
  }
  used_.assign(nodes.size(), 0);
  opened_.assign(nodes.size(), 0);
  free_total_ = cluster_.num_devices();
  // Seconds per sequence of each device at its best (tp 1, the largest micro-batch): rate bounds.
  rate_bounds_ = problem.profiles == nullptr || problem.profiles->empty();
  for (uint32_t d = 0; d < cluster_.num_devices(); ++d) {
    const auto& gpu = *cluster_.device(d).gpu;
    const auto [f, b] = cost_.RangeCompute(gpu, 0, L_, 1, bmax_, rc_);
    device_rate_.push_back(bmax_ / (f + b));  // sequences per second, an upper bound
  }
  // Whole nodes left idle: of the k identical nodes of a class, the first j (any j nodes give equivalent
  // plans); every combination of the classes' counts but the empty one. Where that makes more than
  // kMaxNodeSets sets (many unlike nodes), the nested sets instead: the slowest class's nodes left out,
  // then the two slowest classes', and so on (slowest by the device rate below).
  node_sets_.push_back(std::vector<char>(nodes.size(), 1));
  if (!allow_unused_ && !options.use_every_device()) {
    const uint32_t C = class_count();
    std::vector<std::vector<uint32_t>> members(C);
    for (uint32_t n = 0; n < nodes.size(); ++n) members[class_of_[n]].push_back(n);
    double combinations = 1;
    for (const auto& m : members) combinations *= m.size() + 1.0;
    std::vector<std::pair<uint32_t, std::vector<char>>> sets;  // (devices, active)
    auto add = [&](const std::vector<uint32_t>& take) {
      std::vector<char> active(nodes.size(), 0);
      uint32_t devices = 0;
      for (uint32_t k = 0; k < C; ++k) {
        for (uint32_t i = 0; i < take[k]; ++i) {
          active[members[k][i]] = 1;
          devices += nodes[members[k][i]].num_gpus;
        }
      }
      if (devices > 0 && devices < cluster_.num_devices()) sets.emplace_back(devices, std::move(active));
    };
    std::vector<uint32_t> take(C, 0);
    if (combinations - 1 <= kMaxNodeSets) {
      for (;;) {
        // The next combination (mixed radix over the classes' counts).
        uint32_t c = 0;
        while (c < C && take[c] == members[c].size()) take[c++] = 0;
        if (c == C) break;
        ++take[c];
        add(take);
      }
    } else {
      std::vector<std::pair<double, uint32_t>> by_rate;  // (a device's rate, class), slowest first
      for (uint32_t c = 0; c < C; ++c) {
        by_rate.emplace_back(device_rate_[nodes[members[c][0]].first_device], c);
        take[c] = static_cast<uint32_t>(members[c].size());
      }
      std::sort(by_rate.begin(), by_rate.end());
      for (uint32_t k = 0; k + 1 < C; ++k) {
        take[by_rate[k].second] = 0;
        add(take);
      }
    }
    // Larger sets first (the closed form's incumbent comes from the fullest plans); ties in a fixed order.
    std::stable_sort(sets.begin(), sets.end(), [](const auto& x, const auto& y) {
      if (x.first != y.first) return x.first > y.first;
      return x.second > y.second;
    });
    for (auto& [devices, active] : sets) node_sets_.push_back(std::move(active));
  }
  scratch_caps_by_stage_.assign(L_ + 1, {});
  scratch_split_by_stage_.assign(L_ + 1, {});
  start_ = std::chrono::steady_clock::now();
}

double Search::RateFloor() const {
  if (!rate_bounds_) return 0;
  double rate = 0;
  for (double r : device_rate_) rate += r;
  return rate > 0 ? G_ / rate : 0;
}

void Search::RestrictTo(const std::vector<char>& active) {
  const auto& nodes = cluster_.nodes();
  free_total_ = 0;
  for (uint32_t n = 0; n < nodes.size(); ++n) {
    used_[n] = active[n] ? 0 : nodes[n].num_gpus;
    if (active[n]) free_total_ += nodes[n].num_gpus;
  }
}

void Search::Run() {
  for (const auto& active : node_sets_) {
    RestrictTo(active);
    BuildPipelines();
    if (stopped_) break;
  }
  RestrictTo(node_sets_.front());
  if (out_of_memory_ > 0) stats_.Reject("out of memory", out_of_memory_);
  if (network_pruned_ > 0) {
    stats_.Reject("pruned: traffic through a node's NICs no faster than the best plan", network_pruned_);
  }
  stats_.claims_optimal = true;
  stats_.proven_optimal = !stopped_;
  if (stopped_) stats_.notes.push_back(stop_reason_);
  if (node_sets_.size() > 1) {
    stats_.notes.push_back("the space includes plans that leave whole nodes idle: " + std::to_string(node_sets_.size()) +
                           " sets of nodes (of identical nodes, the first j), every node first");
  }
  stats_.notes.push_back(std::to_string(structures_) + " structures (pipelines × stages × device groups) visited, " +
                         std::to_string(profiles_costed_ + profiles_.size()) + " pipeline shapes costed, " +
                         std::to_string(layer_nodes_) + " layer-split nodes explored");
}

bool Search::Stop() {
  if (stopped_) return true;
  if ((++ticks_ & 255) != 0) return false;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (cancel_ != nullptr && cancel_->load(std::memory_order_relaxed)) {
    stopped_ = true;
    stop_reason_ = "cancelled";
  } else if (elapsed > time_limit_s_) {
    stopped_ = true;
    stop_reason_ =
        "time limit of " + std::to_string(time_limit_s_) + " s reached: the best plan found is not proven optimal" +
        (sim_ != nullptr ? " (where time stops the search, another machine may return another plan)" : "");
  } else if (max_evaluations_ > 0 && stats_.candidates_evaluated >= max_evaluations_) {
    stopped_ = true;
    stop_reason_ = "evaluation budget reached: the best plan found is not proven optimal";
  }
  return stopped_;
}

void Search::BuildPipelines() {
  if (Stop()) return;
  // The newest pipeline's profile is computed only when its devices' rates alone do not prune.
  if (!pipes_.empty() && Pruned(PartialBound(/*newest_profiled=*/false))) {
    stats_.Reject("structure pruned: bound on its iteration time no better than the best plan");
    return;
  }
  if (!pipes_.empty() && (free_total_ == 0 || allow_unused_)) {
    if (!sink_) {
      EvaluateStructure();
    } else if (!sink_(pipes_)) {
      stopped_ = true;
      stop_reason_ = "cancelled";
      return;
    }
  }
  if (free_total_ == 0) return;
  if (Pruned(PartialBound())) {
    stats_.Reject("structure pruned: bound on its iteration time no better than the best plan");
    return;
  }
  current_ = Pipe{};
  BuildStages();
}

void Search::BuildStages() {
  if (Stop()) return;
  // Close the pipeline here (canonical order: signatures non-increasing).
  if (!current_.stages.empty() && (pipes_.empty() || current_.signature <= pipes_.back().signature)) {
    pipes_.push_back(std::move(current_));
    ++structures_;
    BuildPipelines();
    current_ = std::move(pipes_.back());
    pipes_.pop_back();
  }
  if (current_.stages.size() >= L_ || free_total_ == 0) return;
  for (uint32_t tp : tps_) {
    Stage st;
    st.tp = tp;
    std::vector<uint32_t> new_cap(class_count(), UINT32_MAX);
    std::vector<char> skipped(class_count(), 0);
    ChooseGroups(tp, 0, st, new_cap, skipped);
    if (stopped_) return;
  }
}

void Search::ChooseGroups(uint32_t tp, uint32_t n, Stage& st, std::vector<uint32_t>& new_cap,
                          std::vector<char>& skipped) {
  const auto& nodes = cluster_.nodes();
  if (n == nodes.size()) {
    if (st.replicas == 0 || st.replicas > bmax_) return;
    AddStage(st);
    return;
  }
  const uint32_t free = nodes[n].num_gpus - used_[n];
  uint32_t most = free / tp;
  const uint32_t c = class_of_[n];
  const bool fresh = !opened_[n];
  if (fresh) {
    // Identical unopened nodes are used in index order with non-increasing counts.
    if (skipped[c]) most = 0;
    most = std::min(most, new_cap[c]);
  }
  most = std::min(most, bmax_ - std::min(bmax_, st.replicas));
  const uint32_t saved_cap = new_cap[c];
  const char saved_skip = skipped[c];
  for (int64_t g = most; g >= 0; --g) {
    if (fresh) {
      if (g == 0) {
        skipped[c] = 1;
      } else {
        new_cap[c] = static_cast<uint32_t>(g);
      }
    }
    if (g > 0) st.groups.emplace_back(n, static_cast<uint32_t>(g));
    st.replicas += static_cast<uint32_t>(g);
    ChooseGroups(tp, n + 1, st, new_cap, skipped);
    st.replicas -= static_cast<uint32_t>(g);
    if (g > 0) st.groups.pop_back();
    new_cap[c] = saved_cap;
    skipped[c] = saved_skip;
    if (stopped_) return;
  }
}

void Search::AddStage(Stage st) {
  const auto& nodes = cluster_.nodes();
  std::vector<uint32_t> newly_opened;
  for (uint32_t e = 0; e < st.groups.size(); ++e) {
    const auto [n, g] = st.groups[e];
    for (uint32_t k = 0; k < g; ++k) {
      for (uint32_t i = 0; i < st.tp; ++i) st.devices.push_back(nodes[n].first_device + used_[n]++);
      st.replica_entry.push_back(e);
    }
    if (!opened_[n]) {
      opened_[n] = 1;
      newly_opened.push_back(n);
    }
  }
  const uint32_t count = static_cast<uint32_t>(st.devices.size());
  free_total_ -= count;
  // Signature and key.
  std::vector<std::pair<uint32_t, uint32_t>> cls;
  for (const auto& [n, g] : st.groups) cls.emplace_back(class_of_[n], g);
  std::sort(cls.rbegin(), cls.rend());
  const size_t sig_size = current_.signature.size();
  const size_t key_size = current_.key.size();
  current_.signature.push_back(static_cast<int>(st.tp));
  for (const auto& [c, g] : cls) {
    current_.signature.push_back(static_cast<int>(c));
    current_.signature.push_back(static_cast<int>(g));
  }
  current_.signature.push_back(-1);
  // Fixed-width key items: (tp) then (node, groups) pairs, 0xff between stages.
  current_.key += static_cast<char>(st.tp);
  for (const auto& [n, g] : st.groups) {
    current_.key += static_cast<char>(n);
    current_.key += static_cast<char>(g);
  }
  current_.key += '\xff';
  current_.devices += count;
  const uint32_t prev_max = current_.max_replicas;
  current_.max_replicas = std::max(current_.max_replicas, st.replicas);
  current_.stages.push_back(std::move(st));

  BuildStages();

  Stage back = std::move(current_.stages.back());
  current_.stages.pop_back();
  current_.max_replicas = prev_max;
  current_.devices -= count;
  current_.signature.resize(sig_size);
  current_.key.resize(key_size);
  free_total_ += count;
  for (const auto& [n, g] : back.groups) used_[n] -= g * back.tp;
  for (uint32_t n : newly_opened) opened_[n] = 0;
}

void Search::EvaluateStructure() {
  TrimCaches();
  std::vector<Profile*> profiles;
  for (auto& p : pipes_) {
    profiles.push_back(&ProfileOf(p));
    if (!profiles.back()->feasible) {
      stats_.Reject("structure pruned: a pipeline cannot hold the model in memory");
      return;
    }
  }
  uint32_t bmin_sum = 0;
  for (const auto& p : pipes_) bmin_sum += p.max_replicas;
  if (bmin_sum > G_) {
    stats_.Reject("structure needs more sequences than the global batch (each replica takes at least one)");
    return;
  }
  const double pipelines_lb = AllocationBound(profiles, 0);
  if (Pruned(pipelines_lb)) {
    stats_.Reject("structure pruned: bound on its iteration time no better than the best plan");
    return;
  }
  PrepareDpLinks(0);
  for (uint32_t z : zeros_) {
    zero_ = z;
    // The most DP replicas any layer can have: the ZeRO sharding bound used before the exact check.
    SetShardBound(0);
    ResetStageCache();
    Acc floor = StructureFloor();
    if (sim_ != nullptr) floor.cross = CrossNodeSyncFloor();
    if (Pruned(std::max(pipelines_lb + floor.dp + floor.opt, floor.cross))) {
      stats_.Reject("structure pruned: bound on its iteration time no better than the best plan");
      continue;
    }
    choice_.assign(pipes_.size(), Choice{});
    Inner(0, G_, floor, profiles);
    if (stopped_) return;
  }
}

void Search::Inner(size_t p, uint32_t g_left, Acc acc, const std::vector<Profile*>& profiles) {
  if (Stop()) return;
  const size_t P = pipes_.size();
  if (p == P) {
    if (g_left == 0) Leaf(acc);
    return;
  }
  if (Pruned(std::max(acc.pipe_max, AllocationBoundFor(profiles, p, g_left)) + acc.dp + acc.opt)) return;
  uint32_t rest_min = 0;
  for (size_t q = p + 1; q < P; ++q) rest_min += pipes_[q].max_replicas;
  const Pipe& pipe = pipes_[p];
  Profile& pr = *profiles[p];
  // Identical pipelines are interchangeable: their (b, m, blocks) choices are taken non-increasing.
  const bool twin = p > 0 && pipes_[p - 1].key == pipe.key;
  const Choice* prev = twin ? &choice_[p - 1] : nullptr;
  if (sim_ != nullptr) StartNicLoads(p);  // the earlier pipelines' messages: fixed from here on
  const uint32_t b_hi = std::min({bmax_, g_left, twin ? prev->b : bmax_});
  for (uint32_t b = b_hi; b >= pipe.max_replicas && b >= 1; --b) {
    if (!(pr.tstar[b] < kInf)) continue;
    uint32_t m_lo = 1, m_hi = (g_left - rest_min) / b;
    if (p + 1 == P) {
      if (g_left % b != 0) continue;
      m_lo = m_hi = g_left / b;
    }
    if (twin && b == prev->b) m_hi = std::min(m_hi, prev->m);
    if (sim_ != nullptr) PreparePipeline(p, b, pr);
    ResetSplitCache(p, pr.S);
    for (uint32_t m = m_lo; m <= m_hi && m >= 1; ++m) {
      const double lb = sim_ != nullptr ? m * pr.tstar[b]
                                        : (m - 1) * pr.tstar[b] + std::max(pr.tstar[b], pr.SumLo(b, 0));
      if (Pruned(std::max(acc.pipe_max, lb) + acc.dp + acc.opt)) break;  // grows with m
      // The later pipelines share the sequences left: their time is at least their allocation bound.
      Acc with_rest = acc;
      if (p + 1 < P) with_rest.pipe_max = std::max(acc.pipe_max, AllocationBoundFor(profiles, p + 1, g_left - b * m));
      if (Pruned(std::max(with_rest.pipe_max, lb) + acc.dp + acc.opt)) continue;
      Choice& c = choice_[p];
      c.b = b;
      c.m = m;
      c.blocks.assign(pr.S, 0);
      c.splits.assign(pr.S, {});
      if (sim_ != nullptr) {
        stage_t_.resize(P);
        stage_floor_.resize(P);
        stage_t_[p].assign(pr.S, 0);
        stage_floor_[p].assign(pr.S, 0);
      }
      Layers(p, 0, blocks_, 0.0, 0.0, g_left - b * m, with_rest, twin && b == prev->b && m == prev->m, profiles);
      if (stopped_) return;
    }
  }
}

void Search::Layers(size_t p, uint32_t s, uint32_t left, double tmax, double tsum, uint32_t g_after, Acc acc, bool tied,
                    const std::vector<Profile*>& profiles) {
  const Pipe& pipe = pipes_[p];
  Profile& pr = *profiles[p];
  Choice& c = choice_[p];
  const uint32_t S = pr.S, b = c.b, m = c.m;
  const std::vector<double>& rest = Rest(pr, pipe, b);
  if (++layer_nodes_ > max_nodes_ && max_nodes_ > 0 && !stopped_) {
    stopped_ = true;
    stop_reason_ = "budget of " + std::to_string(max_nodes_) + " layer-split nodes reached: the space is not covered";
  }
  if (stopped_) return;
  if (s == S) {
    PipelineSplit(p, tmax, tsum, g_after, acc, profiles);
    return;
  }
  const Stage& st = pipe.stages[s];
  const uint32_t lo = LowBlocks(s, S);
  uint32_t lo_after = 0;
  for (uint32_t k = s + 1; k < S; ++k) lo_after += LowBlocks(k, S);
  if (left < lo + lo_after) return;
  uint32_t hi = s + 1 == S ? left : left - lo_after;
  if (tied) hi = std::min(hi, choice_[p - 1].blocks[s]);
  const uint32_t first = s + 1 == S ? left : lo;
  const double in_flight = MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, s, S, m, 1);
  // This stage's first layer: the stages before it hold the embedding and blocks_ − left blocks.
  const uint32_t first_layer = s == 0 ? 0 : 1 + (blocks_ - left);
  for (uint32_t n = first; n <= hi; ++n) {
    const uint32_t end_layer = first_layer + n + (s == 0 ? 1 : 0) + (s + 1 == S ? 1 : 0);
    // Bound: this stage's time without memory caps, the best the later stages can do, and the DP sync
    // and optimizer bounds of this stage's devices.
    const size_t N = blocks_ + 1, sums = size_t{S + 1} * N;
    const double t_free = rest[2 * sums + size_t{s} * N + n];
    if (!(t_free < kInf)) break;  // beyond the stage's memory cap
    const double rest_max = rest[size_t{s + 1} * N + left - n];
    const double rest_sum = rest[sums + size_t{s + 1} * N + left - n];
    if (!(rest_max < kInf)) continue;  // the later stages cannot hold the rest
    Acc here = acc;
    double pipe_lb = 0, grows = 0, stage_floor = 0, gathers = 0;
    if (sim_ != nullptr) {
      // The stage's slowest replica computes m micro-batches, then syncs its gradients and steps.
      // After its last backward the stage syncs and steps while the earlier stages drain: the larger of
      // the two follows its m passes.
      stage_floor = std::max(SimStageFloor(p, s, n), tsum);
      gathers = 2.0 * m * StageAt(p, s, n).sim_gather;  // ZeRO-3: one before each of its 2m passes
      pipe_lb = std::max({m * std::max({tmax, t_free, rest_max}), m * t_free + gathers + stage_floor,
                          RoundTrips(p, s, m, t_free + rest_sum) + stage_floor});
      grows = std::max(m * std::max(tmax, t_free), m * t_free + gathers + stage_floor);
    } else {
      const auto [dp_lb, opt_lb] = StageBounds(p, s, n, m);
      here.dp = std::max(acc.dp, dp_lb);
      here.opt = std::max(acc.opt, opt_lb);
      pipe_lb = (m - 1) * std::max({tmax, t_free, rest_max}) + tsum + t_free + rest_sum;
      grows = (m - 1) * std::max(tmax, t_free) + tsum + t_free;
    }
    if (Pruned(std::max(acc.pipe_max, pipe_lb) + here.dp + here.opt)) {
      // More blocks here make this stage (and its DP sync and optimizer step) slower: stop when the
      // terms that only grow with n already exceed.
      if (Pruned(std::max(acc.pipe_max, grows) + here.dp + here.opt)) break;
      continue;
    }
    if (p > 0 && sim_ == nullptr) {
      // With the earlier pipelines' splits known, the DP sync bound of this stage tightens.
      here.dp = std::max(here.dp, KnownDpBound(p, s, first_layer, end_layer, m));
      if (Pruned(std::max(acc.pipe_max, pipe_lb) + here.dp + here.opt)) continue;
    }
    std::vector<uint32_t>& caps = scratch_caps_by_stage_[s];
    if (!ReplicaCaps(p, s, n, b, in_flight, &caps)) {
      ++out_of_memory_;
      break;  // more blocks need more memory
    }
    std::vector<uint32_t>& split = scratch_split_by_stage_[s];
    const double t = CachedSplitTime(p, pr, st, s, n, b, caps, split);
    if (!(t < kInf)) {
      ++out_of_memory_;
      break;
    }
    c.blocks[s] = n;
    c.splits[s].assign(split.begin(), split.end());
    if (sim_ != nullptr) {
      // The NIC loads so far (the earlier pipelines' splits known), the plan's own at the last stage.
      here.cross = std::max(here.cross, StageNicFloor(p, s, first_layer, end_layer));
      if (Pruned(here.total())) {
        if (s + 1 == S && p + 1 == pipes_.size()) ++network_pruned_;
        continue;
      }
    }
    if (sim_ != nullptr) {
      here.pipe_max = std::max({here.pipe_max, m * t + gathers + stage_floor,
                                RoundTrips(p, s, m, t + rest_sum) + stage_floor,
                                ReplicaRoundTrip(p, pr, s, n, split, LeastLater(p, s + 1, left - n)) + stage_floor});
      if (Pruned(here.total())) continue;
      stage_t_[p][s] = t;
      stage_floor_[p][s] = stage_floor;
    }
    // The fill goes on through a stage of one replica and, when the next has one too, the hop between them;
    // through a stage of several replicas when the next has one (it waits for every replica's share, and
    // the last backward returns to every replica: the slowest replica's passes, t, lie on the path).
    // Otherwise the sequences a later replica waits for passed at least one replica of this stage each way:
    // its least forward and its least backward (not their sum on one replica: the two may differ).
    const bool chained = st.replicas == 1 || (s + 1 < S && pipe.stages[s + 1].replicas == 1);
    double fill = tsum + t;
    if (sim_ != nullptr) {
      double through = t;
      if (!chained) {
        double least_f = kInf, least_b = kInf;
        for (uint32_t r = 0; r < st.replicas; ++r) {
          const uint32_t e = st.replica_entry[r], x = split[r];
          if (x == 0) continue;
          const double f = pr.Forward(s, e, x, n);
          least_f = std::min(least_f, f);
          least_b = std::min(least_b, pr.Passes(s, e, x, n) - f);
        }
        through = least_f < kInf ? least_f + least_b : 0;
      }
      fill = tsum + through + hop_[p][s];
    }
    Layers(p, s + 1, left - n, std::max(tmax, t), fill, g_after, here, tied && n == choice_[p - 1].blocks[s],
           profiles);
    if (stopped_) return;
  }
}

void Search::PipelineSplit(size_t p, double tmax, double tsum, uint32_t g_after, const Acc& acc,
                           const std::vector<Profile*>& profiles) {
  Profile& pr = *profiles[p];
  const uint32_t S = pr.S, m = choice_[p].m;
  const double t = sim_ != nullptr ? m * tmax : (m - 1) * tmax + tsum;
  Acc next = acc;
  next.pipe_max = std::max(acc.pipe_max, t);
  if (sim_ != nullptr) {
    // The round trips with every stage's time known (Layers bounded the later stages' by their least).
    double later = 0;
    for (uint32_t k = S; k-- > 0;) {
      later += stage_t_[p][k];
      next.pipe_max = std::max(next.pipe_max, RoundTrips(p, k, m, later) + stage_floor_[p][k]);
    }
    next.pipe_max = std::max(next.pipe_max, FirstRoundTrip(p, pr));
  }
  if (Pruned(next.total())) return;
  if (sim_ != nullptr) {
    // The pipeline's stage-level 1F1B schedule (before the later pipelines, and the far dearer play).
    next.pipe_max = std::max(next.pipe_max, ScheduleFloor(p, pr));
    if (Pruned(next.total())) {
      ++schedule_pruned_;
      return;
    }
  }
  Inner(p + 1, g_after, next, profiles);
}

bool Search::ReplicaCaps(size_t p, uint32_t s, uint32_t n, uint32_t b, double in_flight, std::vector<uint32_t>* caps) {
  // ZeRO shards are bounded by the most replicas any layer can have.
  const Stage& st = pipes_[p].stages[s];
  const StageN& mem = StageAt(p, s, n);
  const double stat = mem.stat;
  const double per_seq = mem.act * in_flight + mem.peak;
  caps->assign(st.replicas, 0);
  bool fits = true;
  double worst_room = kInf, worst_cap = 0;
  uint32_t worst_device = 0;
  for (uint32_t r = 0; r < st.replicas; ++r) {
    const uint32_t d = st.devices[size_t{r} * st.tp];
    const double cap_gib = cluster_.device(d).gpu->memory_gib;
    const double room =
        cap_gib * (1 - kMemorySafety) - stat - memory_.WorkspaceGib(cluster_.node(cluster_.device(d).node));
    const double x = per_seq > 0 ? std::floor(room / per_seq) : (room >= 0 ? b : -1);
    (*caps)[r] = x < 1 ? 0 : static_cast<uint32_t>(std::min<double>(x, b));
    if ((*caps)[r] == 0) fits = false;
    if (room < worst_room) {
      worst_room = room;
      worst_cap = cap_gib;
      worst_device = d;
    }
  }
  if (!fits && kept_.empty()) {
    misses_.Offer(Describe(p, s, n),
                  stat + memory_.WorkspaceGib(cluster_.node(cluster_.device(worst_device).node)) + per_seq,
                  worst_cap, std::to_string(worst_device) + " (" + cluster_.device(worst_device).gpu->name + ")");
  }
  return fits;
}

std::string Search::Describe(size_t p, uint32_t s, uint32_t n) const {
  return "pipeline " + std::to_string(p) + " stage " + std::to_string(s) + " with " + std::to_string(n) +
         " blocks, b=" + std::to_string(choice_[p].b) + " zero=" + std::to_string(zero_);
}

void Search::Leaf(const Acc& acc) {
  proto::Plan plan;
  plan.set_zero_stage(zero_);
  plan.set_sequence_parallel(true);
  for (size_t p = 0; p < pipes_.size(); ++p) {
    const Pipe& pipe = pipes_[p];
    const Choice& c = choice_[p];
    auto* pp = plan.add_pipelines();
    pp->set_micro_batch_size(c.b);
    pp->set_num_micro_batches(c.m);
    const uint32_t S = static_cast<uint32_t>(pipe.stages.size());
    uint32_t begin = 0;
    for (uint32_t s = 0; s < S; ++s) {
      const Stage& st = pipe.stages[s];
      auto* ps = pp->add_stages();
      for (uint32_t d : st.devices) ps->add_devices(d);
      if (st.tp > 1) ps->set_tp_degree(st.tp);
      if (st.replicas > 1) {
        for (uint32_t x : c.splits[s]) ps->add_micro_batch_split(x);
      }
      const uint32_t count = c.blocks[s] + (s == 0 ? 1 : 0) + (s + 1 == S ? 1 : 0);
      ps->set_layer_begin(begin);
      ps->set_layer_end(begin + count);
      begin += count;
    }
  }
  if (!FitMoePlan(&plan, problem_.model)) {
    stats_.Reject(kUnlikeMoeTp);
    return;
  }
  const MemoryCheck mem = CheckMemory(plan, problem_, memory_);
  if (!mem.fits) {
    stats_.Reject("out of memory (with the plan's exact ZeRO sharding)");
    misses_.Offer(std::to_string(pipes_.size()) + " pipelines, zero=" + std::to_string(zero_), mem.need_gib,
                  mem.capacity_gib, std::to_string(mem.device) + " (" + cluster_.device(mem.device).gpu->name + ")");
    return;
  }
  ++stats_.candidates_evaluated;
  if (sim_ != nullptr) {
    // acc.total(), NIC loads included, is below the threshold (else the subtree was cut): play the plan at
    // the lower-bound pricing, which bounds the simulated iteration far more tightly than the compute alone.
    ++bounded_leaves_;
    play_nodes_.push_back(layer_nodes_);
    const double lb = cost_.LowerBoundSeconds(plan);
    if (!(lb > 0)) {
      // The lowering refuses the plan (ZeRO-3 across pipelines of unlike micro-batch counts): so does the
      // simulator, so it is no candidate.
      stats_.Reject("the simulator refuses the plan (its lowering cannot be played)");
      return;
    }
    if (lb < acc.played() * (1 - 1e-9)) {
      // Cannot happen if the stage floors are sound: say so loudly rather than prune on a wrong bound.
      ++floor_above_bound_;
    }
    // acc.cross holds the plan's NIC-load floor (StageNicFloor at its last stage).
    const double bound = std::max(lb, acc.cross);
    if (bound < incumbent_) {
      bounded_.push_back({bound, std::move(plan)});
      kept_plays_.push_back(bounded_leaves_);
    }
    if (sim_->max_leaves > 0 && bounded_leaves_ >= sim_->max_leaves && !stopped_) {
      stopped_ = true;
      stop_reason_ = "budget of " + std::to_string(sim_->max_leaves) +
                     " lower-bound plays reached: the space is not covered";
    }
    return;
  }
  // The closed form: the bounds above are bounds of it, so the search is exact under it.
  const double t = cost_.ClosedFormEstimate(plan, /*with_memory=*/false).iteration_s;
  // The bar a subtree must beat: the best plan's cost, or with runners-up asked for the worst kept one
  // (so that the kept list is the exact top of the space under the analytic model).
  if (kept_.Offer(t, plan)) incumbent_ = std::min(kept_.bar(), warm_bar_);
}

StructureOutcome Search::EvaluateOne(const std::vector<Pipe>& pipes) {
  pipes_ = pipes;
  layer_nodes_ = bounded_leaves_ = floor_above_bound_ = network_pruned_ = schedule_pruned_ = out_of_memory_ = 0;
  bounded_.clear();
  play_nodes_.clear();
  kept_plays_.clear();
  stopped_ = false;
  stop_reason_.clear();
  EvaluateStructure();
  StructureOutcome o;
  o.nodes = layer_nodes_;
  o.complete = !stopped_;
  o.stop_reason = stop_reason_;
  o.play_nodes = std::move(play_nodes_);
  o.kept_plays = std::move(kept_plays_);
  o.kept = std::move(bounded_);
  o.floor_above_bound = floor_above_bound_;
  o.network_pruned = network_pruned_;
  o.schedule_pruned = schedule_pruned_;
  o.out_of_memory = out_of_memory_;
  return o;
}

}  // namespace hetsim::planners::exhaustive
