#include "planners/exhaustive/exhaustive.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "models/plan.h"
#include "models/platform_routes.h"

#include "planners/proto/exhaustive.pb.h"
#include "planners/symmetric.h"

namespace hetsim::planners::exhaustive {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// A bound prunes only when it exceeds the incumbent by more than rounding could explain.
constexpr double kPruneSlack = 1e-9;

// One stage of a pipeline under construction: TP groups of degree tp taken from nodes.
struct Stage {
  uint32_t tp = 1;
  std::vector<std::pair<uint32_t, uint32_t>> groups;  // (node, TP groups on it), by node
  std::vector<uint32_t> devices;                      // concrete devices, TP groups consecutive
  std::vector<uint32_t> replica_entry;                // replica -> index into groups
  uint32_t replicas = 0;
};

struct Pipe {
  std::vector<Stage> stages;
  std::vector<int> signature;  // invariant under relabelling identical nodes
  std::string key;             // node-level description (costs depend on nodes only)
  uint32_t devices = 0;
  uint32_t max_replicas = 0;
};

// Time tables of one pipeline shape (by Pipe::key). Replica times are affine in the block count,
// τ(n, x) = F(x) + n·C(x), per stage, per node entry, per sequences x (rows shared between shapes).
// Without memory caps, t0(b, s, n) is the min-max split's stage time, non-decreasing in n.
struct Profile {
  uint32_t S = 0, X = 0;                         // stages, bmax + 1
  std::vector<uint32_t> entry_base;              // per stage: its first entry's index
  std::vector<const std::vector<double>*> rows;  // per entry: F at [x], C at [X + x]
  // Blocks each stage can hold at most whatever the rest of the plan (one sequence, one micro-batch in
  // flight, the most ZeRO sharding possible); the shape is infeasible when they cannot hold the model.
  std::vector<uint32_t> max_blocks;
  bool feasible = true;
  std::vector<double> tstar;   // per b: a lower bound of the smallest possible largest stage time
  std::vector<double> sum_lo;  // per b × (S + 1): Σ_{s ≥ k} t0 at the fewest blocks
  double rho = kInf;           // min_b tstar/b: a lower bound on the pipeline's seconds per sequence
  double beta = kInf;          // min_b max(0, sum_lo − tstar): fill-and-drain lower bound
  // rest[b][k·N + B]: the smallest possible largest stage time of stages k.. holding B blocks (lazily).
  std::vector<std::vector<double>> rest;

  double F(uint32_t s, uint32_t e, uint32_t x) const { return (*rows[entry_base[s] + e])[x]; }
  double C(uint32_t s, uint32_t e, uint32_t x) const { return (*rows[entry_base[s] + e])[X + x]; }
  double SumLo(uint32_t b, uint32_t k) const { return sum_lo[size_t{b} * (S + 1) + k]; }
};

// The simulator-bound mode of the search (the proof of the simulator's optimum): every bound is a lower
// bound of the simulated iteration, subtrees are cut against a fixed threshold, and every leaf that
// survives is played at the lower-bound pricing (AnalyticCostModel::LowerBoundSeconds) and kept when that
// is below the threshold.
struct SimBoundMode {
  double threshold_s = 0;   // plans that cannot simulate below this are cut
  uint64_t max_leaves = 0;  // LowerBoundSeconds evaluations before the search stops (0: no limit)
};

// A plan kept by the simulator-bound mode, with its lower bound of the simulated iteration.
struct BoundedPlan {
  double lower_bound_s = 0;
  proto::Plan plan;
};

class Search {
 public:
  // Keeps the exact top `keep_alternatives` + 1 plans under the closed form.
  Search(const PlanningProblem& problem, const proto::ExhaustiveOptions& options, SearchStats& stats,
         uint32_t keep_alternatives, const SimBoundMode* sim = nullptr)
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
    }
    bmax_ = std::min<uint32_t>(G_, options.max_micro_batch_size() > 0 ? options.max_micro_batch_size() : 32);
    zeros_ = options.zero_stages().empty()
                 ? std::vector<uint32_t>{1, 2, 3}
                 : std::vector<uint32_t>(options.zero_stages().begin(), options.zero_stages().end());
    allow_unused_ = options.allow_unused_devices();
    bounds_ = !options.disable_bounds();
    time_limit_s_ = options.time_limit_s() > 0 ? options.time_limit_s() : 300;
    max_evaluations_ = options.max_evaluations();
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
    start_ = std::chrono::steady_clock::now();
  }

  void Run() {
    scratch_caps_by_stage_.assign(L_ + 1, {});
    scratch_split_by_stage_.assign(L_ + 1, {});
    BuildPipelines();
    if (out_of_memory_ > 0) stats_.Reject("out of memory", out_of_memory_);
    stats_.claims_optimal = true;
    stats_.proven_optimal = !stopped_;
    if (stopped_) stats_.notes.push_back(stop_reason_);
    stats_.notes.push_back(std::to_string(structures_) + " structures (pipelines × stages × device groups) visited, " +
                           std::to_string(profiles_.size()) + " distinct pipeline shapes costed, " +
                           std::to_string(layer_nodes_) + " layer-split nodes explored");
  }

  bool found() const { return !kept_.empty(); }
  bool stopped() const { return stopped_; }
  std::vector<BoundedPlan>& bounded() { return bounded_; }
  uint64_t bounded_leaves() const { return bounded_leaves_; }
  uint64_t floor_above_bound() const { return floor_above_bound_; }
  void MoveInto(PlannerResult* result) { kept_.MoveInto(result); }
  InfeasibleTracker& misses() { return misses_; }

 private:
  // ---- limits ----
  bool Stop() {
    if (stopped_) return true;
    if ((++ticks_ & 255) != 0) return false;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (elapsed > time_limit_s_) {
      stopped_ = true;
      stop_reason_ =
          "time limit of " + std::to_string(time_limit_s_) + " s reached: the best plan found is not proven optimal";
    } else if (max_evaluations_ > 0 && stats_.candidates_evaluated >= max_evaluations_) {
      stopped_ = true;
      stop_reason_ = "evaluation budget reached: the best plan found is not proven optimal";
    }
    return stopped_;
  }

  // ---- structure enumeration ----
  void BuildPipelines() {
    if (Stop()) return;
    // The newest pipeline's profile is computed only when its devices' rates alone do not prune.
    if (!pipes_.empty() && Pruned(PartialBound(/*newest_profiled=*/false))) {
      stats_.Reject("structure pruned: bound on its iteration time no better than the best plan");
      return;
    }
    if (!pipes_.empty() && (free_total_ == 0 || allow_unused_)) EvaluateStructure();
    if (free_total_ == 0) return;
    if (Pruned(PartialBound())) {
      stats_.Reject("structure pruned: bound on its iteration time no better than the best plan");
      return;
    }
    current_ = Pipe{};
    BuildStages();
  }

  void BuildStages() {
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

  uint32_t class_count() const {
    return class_of_.empty() ? 0 : *std::max_element(class_of_.begin(), class_of_.end()) + 1;
  }

  // Chooses how many TP groups node n (and the nodes after it) give to the stage being built.
  void ChooseGroups(uint32_t tp, uint32_t n, Stage& st, std::vector<uint32_t>& new_cap, std::vector<char>& skipped) {
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

  void AddStage(Stage st) {
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

  // ---- bounds ----

  // The smallest T with Σ_p G_p = G and every pipeline p within G_p·ρ_p + β_p ≤ T (a relaxation of the
  // batch allocation; see the derivation in docs/planners.md). `extra_rate` adds an optimistic pipeline
  // of that many sequences per second (devices not yet placed).
  double AllocationBound(const std::vector<Profile*>& profiles, double extra_rate) const {
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

  // A lower bound of every structure extending the current one. The newest closed pipeline enters only
  // by its devices' rates when `newest_profiled` is false (its profile is not computed yet).
  double PartialBound(bool newest_profiled = true) {
    if (!bounds_ || incumbent_ == kInf) return 0;
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

  // ---- pipeline profiles ----

  // The canonical layer range of stage s of S holding n blocks.
  std::pair<uint32_t, uint32_t> Range(uint32_t s, uint32_t S, uint32_t n) const {
    if (S == 1) return {0, L_};
    if (s == 0) return {0, 1 + n};
    if (s + 1 == S) return {L_ - 1 - n, L_};
    return {1, 1 + n};
  }
  uint32_t LowBlocks(uint32_t s, uint32_t S) const { return S == 1 ? blocks_ : (s == 0 || s + 1 == S) ? 0 : 1; }

  Profile& ProfileOf(const Pipe& pipe) {
    auto [it, fresh] = profiles_.try_emplace(pipe.key);
    Profile& pr = it->second;
    if (!fresh) return pr;
    const uint32_t S = static_cast<uint32_t>(pipe.stages.size());
    pr.S = S;
    pr.X = bmax_ + 1;
    for (uint32_t s = 0; s < S; ++s) {
      const Stage& st = pipe.stages[s];
      pr.entry_base.push_back(static_cast<uint32_t>(pr.rows.size()));
      const std::span<const uint32_t> next =
          s + 1 < S ? std::span<const uint32_t>(pipe.stages[s + 1].devices) : std::span<const uint32_t>();
      const std::span<const uint32_t> prev =
          s > 0 ? std::span<const uint32_t>(pipe.stages[s - 1].devices) : std::span<const uint32_t>();
      for (uint32_t e = 0; e < st.groups.size(); ++e) {
        // Replica times depend on the entry's node and TP degree, the position (embedding, head) and the
        // nodes of the neighbouring stages: rows are shared on those.
        std::string row_key;
        row_key += static_cast<char>(st.tp);
        row_key += static_cast<char>(st.groups[e].first);
        row_key += static_cast<char>((s == 0 ? 1 : 0) | (s + 1 == S ? 2 : 0));
        if (s + 1 < S) {
          for (const auto& [n, g] : pipe.stages[s + 1].groups) row_key += static_cast<char>(n);
        }
        row_key += '\xff';
        if (s > 0) {
          for (const auto& [n, g] : pipe.stages[s - 1].groups) row_key += static_cast<char>(n);
        }
        auto [row, made] = rows_.try_emplace(row_key);
        if (made) {
          // The first replica of this entry stands for all (same node, same links).
          uint32_t r = 0;
          while (st.replica_entry[r] != e) ++r;
          const std::span<const uint32_t> g(st.devices.data() + size_t{r} * st.tp, st.tp);
          const models::GpuSpec& gpu = cost_.SlowestGpu(g);
          const ReplicaLinks hops = cost_.Links(g, next, prev);
          const ReplicaLinks local = cost_.Links(g, {}, {});
          row->second.assign(2 * size_t{pr.X}, 0);
          for (uint32_t x = 1; x <= bmax_ && sim_ != nullptr; ++x) {
            // The simulator's compute alone (RangeCompute prices each pass as sim/program.cc does: its
            // layers plus one host overhead per pass); communication only adds to it.
            const double overhead = 2 * cost_.compute().PassOverheadSeconds(gpu);
            auto compute = [&](uint32_t begin, uint32_t end) {
              const auto [fw, bw] = cost_.RangeCompute(gpu, begin, end, st.tp, x, rc_);
              return fw + bw - overhead;
            };
            double f = overhead;
            if (s == 0) f += compute(0, 1);
            if (s + 1 == S) f += compute(L_ - 1, L_);
            row->second[x] = f;
            row->second[pr.X + x] = compute(1, 2);
          }
          for (uint32_t x = 1; x <= bmax_ && sim_ == nullptr; ++x) {
            double f = cost_.Replica(gpu, st.tp, 1, 1, x, hops, rc_).total_s();  // PP hops only
            if (s == 0) f += cost_.Replica(gpu, st.tp, 0, 1, x, local, rc_).total_s();
            if (s + 1 == S) f += cost_.Replica(gpu, st.tp, L_ - 1, L_, x, local, rc_).total_s();
            row->second[x] = f;
            row->second[pr.X + x] = cost_.Replica(gpu, st.tp, 1, 2, x, local, rc_).total_s();
          }
        }
        pr.rows.push_back(&row->second);
      }
    }
    // Memory: the most blocks each stage could hold at all.
    uint64_t capacity = 0;
    pr.max_blocks.assign(S, 0);
    for (uint32_t s = 0; s < S && pr.feasible; ++s) {
      const Stage& st = pipe.stages[s];
      double cap_gib = kInf;
      for (const auto& [n, g] : st.groups) cap_gib = std::min(cap_gib, cluster_.nodes()[n].gpu->memory_gib);
      auto fits = [&](uint32_t blocks) {
        const auto [begin, end] = Range(s, S, blocks);
        double least = kInf;
        for (uint32_t z : zeros_) {
          least = std::min(least, memory_.StaticGib(begin, end, st.tp, z, cluster_.num_devices()));
        }
        const double act = memory_.ActivationGibPerSequence(begin, end, st.tp, true, rc_);
        const double peak = memory_.PeakLayerGibPerSequence(begin, end, st.tp, true, rc_);
        return FitsIn(memory_.TotalGib(least, act, peak, 1, 1), cap_gib);
      };
      const int64_t most = MostBlocksThatFit(LowBlocks(s, S), blocks_, fits);
      if (most < 0) {
        pr.feasible = false;
        break;
      }
      pr.max_blocks[s] = static_cast<uint32_t>(most);
      capacity += static_cast<uint32_t>(most);
    }
    if (capacity < blocks_) pr.feasible = false;
    pr.tstar.assign(pr.X, kInf);
    pr.sum_lo.assign(size_t{pr.X} * (S + 1), 0);
    pr.rest.assign(pr.X, {});
    if (!pr.feasible) return pr;
    for (uint32_t b = pipe.max_replicas; b <= bmax_; ++b) {
      // This micro-batch size's stage times, once each.
      const uint32_t N = blocks_ + 1;
      scratch_table_.assign(size_t{S} * N, kInf);
      for (uint32_t s = 0; s < S; ++s) {
        for (uint32_t n = LowBlocks(s, S); n <= std::min(pr.max_blocks[s], blocks_); ++n) {
          scratch_table_[size_t{s} * N + n] = T0(pr, pipe, b, s, n);
        }
      }
      for (uint32_t s = S; s-- > 0;) {
        pr.sum_lo[size_t{b} * (S + 1) + s] =
            pr.sum_lo[size_t{b} * (S + 1) + s + 1] + scratch_table_[size_t{s} * N + LowBlocks(s, S)];
      }
      pr.tstar[b] = SmallestLargest(pr, scratch_table_);
      if (pr.tstar[b] < kInf) {
        pr.rho = std::min(pr.rho, pr.tstar[b] / b);
        pr.beta = std::min(pr.beta, std::max(0.0, pr.SumLo(b, 0) - pr.tstar[b]));
      }
    }
    // A 1F1B pipeline may hide its fill behind the bottleneck stage's work: in the simulator-bound mode the
    // pipeline bound is m·t* alone.
    if (!(pr.beta < kInf) || sim_ != nullptr) pr.beta = 0;
    return pr;
  }

  // Stage s's time with n blocks and b sequences split without memory caps.
  double T0(const Profile& pr, const Pipe& pipe, uint32_t b, uint32_t s, uint32_t n) const {
    const Stage& st = pipe.stages[s];
    scratch_caps_.assign(st.replicas, b);
    return SplitTime(pr, st, s, n, b, scratch_caps_, nullptr);
  }

  // The smallest largest stage time over layer splits respecting the memory caps (without caps on the
  // micro-batch split), from the stage times t[s·(L+1) + n]: binary search over the times that occur.
  double SmallestLargest(const Profile& pr, const std::vector<double>& t) {
    const uint32_t S = pr.S, N = blocks_ + 1;
    scratch_times_.clear();
    for (uint32_t s = 0; s < S; ++s) {
      for (uint32_t n = LowBlocks(s, S); n <= std::min(pr.max_blocks[s], blocks_); ++n) {
        scratch_times_.push_back(t[size_t{s} * N + n]);
      }
    }
    std::sort(scratch_times_.begin(), scratch_times_.end());
    // The most blocks stage s holds within T (non-decreasing times), −1 when not even its fewest.
    auto fit = [&](uint32_t s, double T) -> int64_t {
      const uint32_t lo = LowBlocks(s, S), hi = std::min(pr.max_blocks[s], blocks_);
      if (lo > hi || t[size_t{s} * N + lo] > T) return -1;
      const double* row = t.data() + size_t{s} * N;
      return std::upper_bound(row + lo, row + hi + 1, T) - row - 1;
    };
    auto feasible = [&](double T) {
      uint64_t total = 0;
      for (uint32_t s = 0; s < S; ++s) {
        const int64_t n = fit(s, T);
        if (n < 0) return false;
        total += static_cast<uint64_t>(n);
      }
      return total >= blocks_;
    };
    if (scratch_times_.empty() || !feasible(scratch_times_.back())) return kInf;
    size_t lo = 0, hi = scratch_times_.size() - 1;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (feasible(scratch_times_[mid])) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return scratch_times_[lo];
  }

  // rest(b, k, B) (see Profile), computed for b on first use: entries [0, (S+1)·N) hold the smallest
  // largest stage time, entries [(S+1)·N, 2(S+1)·N) the smallest sum of stage times, of stages k.. holding
  // B blocks; and entries [2(S+1)·N, …) this b's stage times t0(s, n).
  const std::vector<double>& Rest(Profile& pr, const Pipe& pipe, uint32_t b) const {
    auto& rest = pr.rest[b];
    if (!rest.empty()) return rest;
    const uint32_t S = pr.S, N = blocks_ + 1;
    const size_t sums = size_t{S + 1} * N, times = 2 * sums;
    rest.assign(times + size_t{S} * N, kInf);
    for (uint32_t k = 0; k < S; ++k) {
      for (uint32_t n = LowBlocks(k, S); n <= std::min(pr.max_blocks[k], blocks_); ++n) {
        rest[times + size_t{k} * N + n] = T0(pr, pipe, b, k, n);
      }
    }
    rest[size_t{S} * N + 0] = 0;
    rest[sums + size_t{S} * N + 0] = 0;
    for (uint32_t k = S; k-- > 0;) {
      const uint32_t lo = LowBlocks(k, S), hi = std::min(pr.max_blocks[k], blocks_);
      for (uint32_t B = 0; B <= blocks_; ++B) {
        double best = kInf, best_sum = kInf;
        if (k + 1 == S) {
          if (B >= lo && B <= hi) best = best_sum = rest[times + size_t{k} * N + B];
        } else {
          for (uint32_t n = lo; n <= std::min(B, hi); ++n) {
            const double t = rest[times + size_t{k} * N + n];
            best = std::min(best, std::max(t, rest[size_t{k + 1} * N + B - n]));
            best_sum = std::min(best_sum, t + rest[sums + size_t{k + 1} * N + B - n]);
          }
        }
        rest[size_t{k} * N + B] = best;
        rest[sums + size_t{k} * N + B] = best_sum;
      }
    }
    return rest;
  }

  // The min-max split of b sequences over the stage's replicas (caps[r] at most each) for n blocks; its
  // time, and the split in *split when given. kInf when the caps make it impossible.
  double SplitTime(const Profile& pr, const Stage& st, uint32_t s, uint32_t n, uint32_t b,
                   const std::vector<uint32_t>& caps, std::vector<uint32_t>* split) const {
    auto value = [&](uint32_t r, uint32_t x) {
      const uint32_t e = st.replica_entry[r];
      return pr.F(s, e, x) + n * pr.C(s, e, x);
    };
    const uint32_t R = st.replicas;
    if (R == 1) {
      if (caps[0] < b) return kInf;
      if (split != nullptr) split->assign(1, b);
      return value(0, b);
    }
    if (st.groups.size() == 1) {
      // Identical replicas: as even as possible (what the greedy below gives, first replicas first).
      const uint32_t big = (b + R - 1) / R, extra = b % R;
      if (caps[0] < big) return kInf;
      if (split != nullptr) {
        split->assign(R, b / R);
        for (uint32_t r = 0; r < extra; ++r) ++(*split)[r];
      }
      return value(0, big);
    }
    // MinMaxSplit without allocations (R and b are small here): each next sequence goes to the replica
    // whose time after taking it is smallest (optimal for non-decreasing times; ties to the lower index).
    std::vector<uint32_t>& x = split != nullptr ? *split : scratch_split_;
    x.assign(R, 1);
    for (uint32_t r = 0; r < R; ++r) {
      if (caps[r] < 1) return kInf;
    }
    for (uint32_t left = b - R; left > 0; --left) {
      double best = kInf;
      uint32_t pick = R;
      for (uint32_t r = 0; r < R; ++r) {
        if (x[r] >= caps[r]) continue;
        const double v = value(r, x[r] + 1);
        if (v < best) {
          best = v;
          pick = r;
        }
      }
      if (pick == R) return kInf;
      ++x[pick];
    }
    double t = 0;
    for (uint32_t r = 0; r < R; ++r) t = std::max(t, value(r, x[r]));
    return t;
  }

  // ---- one structure ----

  // Lower bounds of the time that does not depend on the pipelines' schedule, accumulated over the
  // devices placed so far: the iteration adds the largest DP sync and the largest optimizer step.
  struct Acc {
    double pipe_max = 0;  // the slowest pipeline so far
    double dp = 0;        // a lower bound of the largest per-device DP sync time
    double opt = 0;       // a lower bound of the largest optimizer step
    double total() const { return pipe_max + dp + opt; }
  };

  // Per stage of the structure and node entry: an upper bound on the bandwidth and a lower bound on the
  // latency of the DP groups its devices join (own stage's replicas and, for P > 1, one holder in each
  // other pipeline).
  struct DpLink {
    double bandwidth = kInf;
    double latency = 0;
    uint32_t holders = 1;  // a lower bound on the group size
    // The same bounds counting only the pipelines after this one (those not placed yet in Layers).
    double later_bandwidth = kInf;
    double later_latency = 0;
    // Simulator-bound mode: the most bandwidth one ring step into or out of this entry's devices can have
    // (route bottlenecks, rail striping counted), 0 without co-holders.
    double sim_bandwidth = 0;
  };

  // The most DP replicas any layer of pipeline p can have (ZeRO's sharding factor), with `free` devices
  // still to be placed.
  void SetShardBound(uint32_t free) {
    shard_bound_.assign(pipes_.size(), 0);
    uint32_t total_max = 0;
    for (const auto& p : pipes_) total_max += p.max_replicas;
    for (size_t p = 0; p < pipes_.size(); ++p) shard_bound_[p] = total_max - pipes_[p].max_replicas + free;
  }

  // Lower bounds of the DP sync and optimizer time whatever the layer split: each stage with its fewest
  // blocks (both grow with the blocks) and one micro-batch.
  Acc StructureFloor() const {
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

  // `extra_holders`: pipelines not built yet that will hold every layer too.
  void PrepareDpLinks(uint32_t extra_holders) {
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

  void EvaluateStructure() {
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
      const Acc floor = StructureFloor();
      if (Pruned(pipelines_lb + floor.dp + floor.opt)) {
        stats_.Reject("structure pruned: bound on its iteration time no better than the best plan");
        continue;
      }
      choice_.assign(pipes_.size(), Choice{});
      Inner(0, G_, floor, profiles);
      if (stopped_) return;
    }
  }

  struct Choice {
    uint32_t b = 0, m = 0;
    std::vector<uint32_t> blocks;               // per stage
    std::vector<std::vector<uint32_t>> splits;  // per stage
  };

  bool Pruned(double lower_bound) const { return bounds_ && lower_bound >= incumbent_ * (1 + kPruneSlack); }

  // Chooses (b, m, layer split) for pipeline p and the ones after it.
  void Inner(size_t p, uint32_t g_left, Acc acc, const std::vector<Profile*>& profiles) {
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
    const uint32_t b_hi = std::min({bmax_, g_left, twin ? prev->b : bmax_});
    for (uint32_t b = b_hi; b >= pipe.max_replicas && b >= 1; --b) {
      if (!(pr.tstar[b] < kInf)) continue;
      uint32_t m_lo = 1, m_hi = (g_left - rest_min) / b;
      if (p + 1 == P) {
        if (g_left % b != 0) continue;
        m_lo = m_hi = g_left / b;
      }
      if (twin && b == prev->b) m_hi = std::min(m_hi, prev->m);
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
        Layers(p, 0, blocks_, 0.0, 0.0, g_left - b * m, with_rest, twin && b == prev->b && m == prev->m, profiles);
        if (stopped_) return;
      }
    }
  }

  // AllocationBound for pipelines first.. sharing g sequences.
  double AllocationBoundFor(const std::vector<Profile*>& profiles, size_t first, uint32_t g) const {
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

  // Parameters one rank of TP degree tp holds for layers [begin, end) (as models::EstimateMemory counts).
  double RankParams(uint32_t begin, uint32_t end, uint32_t tp) const {
    const bool holds_embedding = begin == 0;
    double n = 0;
    uint32_t blocks = 0;
    for (uint32_t l = std::max(begin, 1u); l < std::min(end, L_ - 1); ++l) ++blocks;
    if (begin == 0) n += model_.ParamsPerRank(0, tp, !holds_embedding);
    if (blocks > 0) n += blocks * model_.ParamsPerRank(1, tp, !holds_embedding);
    if (end == L_) n += model_.ParamsPerRank(L_ - 1, tp, !holds_embedding);
    return n;
  }

  // Per (pipeline, stage, blocks) quantities of the current structure and ZeRO stage, computed once.
  struct StageN {
    bool done = false;
    double dp_base = 0;                  // the largest per-device ring time (all-reduce; reduce-scatter for ZeRO 2/3)
    double opt = 0;                      // the largest optimizer step
    double stat = 0, act = 0, peak = 0;  // memory (GiB): static, per sequence in flight, re-materialised
    double sim_floor = 0;                // simulator-bound mode: the least gradient sync + optimizer step
  };

  void ResetStageCache() {
    stage_base_.assign(pipes_.size(), 0);
    size_t total = 0;
    for (size_t p = 0; p < pipes_.size(); ++p) {
      stage_base_[p] = total;
      total += pipes_[p].stages.size() * (blocks_ + 1);
    }
    stage_cache_.assign(total, StageN{});
  }

  const StageN& StageAt(size_t p, uint32_t s, uint32_t n) {
    StageN& c = stage_cache_[stage_base_[p] + size_t{s} * (blocks_ + 1) + n];
    if (!c.done) c = ComputeStageN(p, s, n);
    return c;
  }

  StageN ComputeStageN(size_t p, uint32_t s, uint32_t n) const {
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
        double sync = 0;
        if (l.holders >= 2 && bytes > 0 && l.sim_bandwidth > 0) {
          sync = (l.holders - 1.0) / l.holders * bytes / l.sim_bandwidth;
        }
        c.sim_floor = e == 0 ? sync + opt : std::min(c.sim_floor, sync + opt);
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

  // Simulator-bound mode: a lower bound of what every device of stage s of pipeline p (n blocks) does after
  // its last backward pass (gradient sync and optimizer step).
  double SimStageFloor(size_t p, uint32_t s, uint32_t n) { return StageAt(p, s, n).sim_floor; }

  // The most bandwidth a ring step between a device of node a and one of node b can get (a == b: inside the
  // node): the fastest route either way; across nodes times the node's GPUs (the engine stripes a step over
  // the rails of the members on both nodes) and no slower than the host copies where transfers may be
  // CPU-staged (GPUs of different vendors).
  double RingCap(uint32_t a, uint32_t b) {
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

  // Lower bounds of the DP sync and optimizer time of stage s of pipeline p holding n blocks.
  std::pair<double, double> StageBounds(size_t p, uint32_t s, uint32_t n, uint32_t m) {
    const StageN& c = StageAt(p, s, n);
    const double factor = zero_ == 2 ? m + 1.0 : zero_ == 3 ? 3.0 * m : 1.0;
    return {factor * c.dp_base, c.opt};
  }

  // A lower bound of the DP sync time of stage s of pipeline p holding layers [begin, end), knowing the
  // layer splits of pipelines 0..p−1 (choice_): layer segments with their exact known holders, plus one
  // holder per pipeline still to place (over its best possible link).
  double KnownDpBound(size_t p, uint32_t s, uint32_t begin, uint32_t end, uint32_t m) {
    const Stage& st = pipes_[p].stages[s];
    const size_t P = pipes_.size();
    const uint32_t unknown = static_cast<uint32_t>(P - 1 - p);
    // Segment boundaries: the earlier pipelines' stage boundaries inside [begin, end).
    scratch_cuts_.assign(1, begin);
    scratch_cuts_.push_back(end);
    for (size_t q = 0; q < p; ++q) {
      uint32_t at = 0;
      const auto& blocks = choice_[q].blocks;
      const uint32_t Sq = static_cast<uint32_t>(blocks.size());
      for (uint32_t k = 0; k + 1 < Sq; ++k) {
        at += blocks[k] + (k == 0 ? 1 : 0);
        if (at > begin && at < end) scratch_cuts_.push_back(at);
      }
    }
    std::sort(scratch_cuts_.begin(), scratch_cuts_.end());
    scratch_cuts_.erase(std::unique(scratch_cuts_.begin(), scratch_cuts_.end()), scratch_cuts_.end());
    double worst = 0;
    std::vector<double> per_entry(st.groups.size(), 0);
    for (size_t i = 0; i + 1 < scratch_cuts_.size(); ++i) {
      const uint32_t a = scratch_cuts_[i], e = scratch_cuts_[i + 1];
      scratch_devices_.clear();
      for (uint32_t r = 0; r < st.replicas; ++r) scratch_devices_.push_back(st.devices[size_t{r} * st.tp]);
      uint32_t holders = st.replicas + unknown, group_m = m;
      for (size_t q = 0; q < p; ++q) {
        // The stage of pipeline q that holds layer a.
        const auto& blocks = choice_[q].blocks;
        const uint32_t Sq = static_cast<uint32_t>(blocks.size());
        uint32_t lo = 0;
        for (uint32_t k = 0; k < Sq; ++k) {
          const uint32_t hi = lo + blocks[k] + (k == 0 ? 1 : 0) + (k + 1 == Sq ? 1 : 0);
          if (a >= lo && a < hi) {
            const Stage& other = pipes_[q].stages[k];
            holders += other.replicas;
            for (uint32_t r = 0; r < other.replicas; ++r)
              scratch_devices_.push_back(other.devices[size_t{r} * other.tp]);
            break;
          }
          lo = hi;
        }
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

  // Chooses the blocks of stage s of pipeline p (the stages before it hold the rest). `tied`: every
  // earlier choice equals the identical previous pipeline's, whose blocks then bound this one's. `tsum`:
  // the earlier stages' times per micro-batch summed; in the simulator-bound mode only those of stages with
  // one replica — the pipeline fill: under 1F1B stage s cannot start before micro-batch 0's forward has
  // crossed the stages before it, nor end before its last backward has crossed them back, so its m passes
  // take at least Σ_{j<s} (F_j + B_j) more (a stage split over replicas adds nothing: which replica feeds
  // which is not fixed here).
  void Layers(size_t p, uint32_t s, uint32_t left, double tmax, double tsum, uint32_t g_after, Acc acc, bool tied,
              const std::vector<Profile*>& profiles) {
    const Pipe& pipe = pipes_[p];
    Profile& pr = *profiles[p];
    Choice& c = choice_[p];
    const uint32_t S = pr.S, b = c.b, m = c.m;
    const std::vector<double>& rest = Rest(pr, pipe, b);
    ++layer_nodes_;
    if (s == S) {
      const double t = sim_ != nullptr ? m * tmax : (m - 1) * tmax + tsum;
      Acc next = acc;
      next.pipe_max = std::max(acc.pipe_max, t);
      if (Pruned(next.total())) return;
      Inner(p + 1, g_after, next, profiles);
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
    for (uint32_t n = first; n <= hi; ++n) {
      // Bound: this stage's time without memory caps, the best the later stages can do, and the DP sync
      // and optimizer bounds of this stage's devices.
      const size_t N = blocks_ + 1, sums = size_t{S + 1} * N;
      const double t_free = rest[2 * sums + size_t{s} * N + n];
      if (!(t_free < kInf)) break;  // beyond the stage's memory cap
      const double rest_max = rest[size_t{s + 1} * N + left - n];
      const double rest_sum = rest[sums + size_t{s + 1} * N + left - n];
      if (!(rest_max < kInf)) continue;  // the later stages cannot hold the rest
      Acc here = acc;
      double pipe_lb = 0, grows = 0, stage_floor = 0;
      if (sim_ != nullptr) {
        // The stage's slowest replica computes m micro-batches, then syncs its gradients and steps.
        // After its last backward the stage syncs and steps while the earlier stages drain: the larger of
        // the two follows its m passes.
        stage_floor = std::max(SimStageFloor(p, s, n), tsum);
        pipe_lb = std::max(m * std::max({tmax, t_free, rest_max}), m * t_free + stage_floor);
        grows = std::max(m * std::max(tmax, t_free), m * t_free + stage_floor);
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
        // This stage's actual layers: the stages before it hold the embedding and blocks_ − left blocks.
        const uint32_t first_layer = s == 0 ? 0 : 1 + (blocks_ - left);
        const uint32_t count = n + (s == 0 ? 1 : 0) + (s + 1 == S ? 1 : 0);
        here.dp = std::max(here.dp, KnownDpBound(p, s, first_layer, first_layer + count, m));
        if (Pruned(std::max(acc.pipe_max, pipe_lb) + here.dp + here.opt)) continue;
      }
      // Memory caps per replica (ZeRO shards bounded by the most replicas any layer can have).
      const StageN& mem = StageAt(p, s, n);
      const double stat = mem.stat;
      const double per_seq = mem.act * in_flight + mem.peak;
      std::vector<uint32_t>& caps = scratch_caps_by_stage_[s];
      caps.assign(st.replicas, 0);
      bool fits = true;
      double worst_room = kInf, worst_cap = 0;
      uint32_t worst_device = 0;
      for (uint32_t r = 0; r < st.replicas; ++r) {
        const uint32_t d = st.devices[size_t{r} * st.tp];
        const double cap_gib = cluster_.device(d).gpu->memory_gib;
        const double room =
            cap_gib * (1 - kMemorySafety) - stat - memory_.WorkspaceGib(cluster_.node(cluster_.device(d).node));
        const double x = per_seq > 0 ? std::floor(room / per_seq) : (room >= 0 ? b : -1);
        caps[r] = x < 1 ? 0 : static_cast<uint32_t>(std::min<double>(x, b));
        if (caps[r] == 0) fits = false;
        if (room < worst_room) {
          worst_room = room;
          worst_cap = cap_gib;
          worst_device = d;
        }
      }
      if (!fits) {
        ++out_of_memory_;
        if (kept_.empty()) {
          misses_.Offer(Describe(p, s, n),
                        stat + memory_.WorkspaceGib(cluster_.node(cluster_.device(worst_device).node)) + per_seq,
                        worst_cap,
                        std::to_string(worst_device) + " (" + cluster_.device(worst_device).gpu->name + ")");
        }
        break;  // more blocks need more memory
      }
      std::vector<uint32_t>& split = scratch_split_by_stage_[s];
      const double t = SplitTime(pr, st, s, n, b, caps, &split);
      if (!(t < kInf)) {
        ++out_of_memory_;
        break;
      }
      c.blocks[s] = n;
      c.splits[s].assign(split.begin(), split.end());
      if (sim_ != nullptr) {
        here.pipe_max = std::max(here.pipe_max, m * t + stage_floor);
        if (Pruned(here.total())) continue;
      }
      const double fill = sim_ != nullptr && st.replicas > 1 ? tsum : tsum + t;
      Layers(p, s + 1, left - n, std::max(tmax, t), fill, g_after, here, tied && n == choice_[p - 1].blocks[s],
             profiles);
      if (stopped_) return;
    }
  }

  std::string Describe(size_t p, uint32_t s, uint32_t n) const {
    return "pipeline " + std::to_string(p) + " stage " + std::to_string(s) + " with " + std::to_string(n) +
           " blocks, b=" + std::to_string(choice_[p].b) + " zero=" + std::to_string(zero_);
  }

  void Leaf(const Acc& acc) {
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
    const MemoryCheck mem = CheckMemory(plan, problem_, memory_);
    if (!mem.fits) {
      stats_.Reject("out of memory (with the plan's exact ZeRO sharding)");
      misses_.Offer(std::to_string(pipes_.size()) + " pipelines, zero=" + std::to_string(zero_), mem.need_gib,
                    mem.capacity_gib, std::to_string(mem.device) + " (" + cluster_.device(mem.device).gpu->name + ")");
      return;
    }
    ++stats_.candidates_evaluated;
    if (sim_ != nullptr) {
      // acc.total() is below the threshold (else the subtree was cut): play the plan at the lower-bound
      // pricing, which bounds the simulated iteration far more tightly than the compute alone.
      ++bounded_leaves_;
      const double lb = cost_.LowerBoundSeconds(plan);
      if (!(lb > 0)) {
        // The lowering refuses the plan (ZeRO-3 across pipelines of unlike micro-batch counts): so does the
        // simulator, so it is no candidate.
        stats_.Reject("the simulator refuses the plan (its lowering cannot be played)");
        return;
      }
      if (lb < acc.total() * (1 - 1e-9)) {
        // Cannot happen if the stage floors are sound: say so loudly rather than prune on a wrong bound.
        ++floor_above_bound_;
      }
      if (lb < incumbent_) bounded_.push_back({lb, std::move(plan)});
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
    if (kept_.Offer(t, plan)) incumbent_ = kept_.bar();
  }

  const PlanningProblem& problem_;
  AnalyticCostModel cost_;
  MemoryModel memory_;
  SearchStats& stats_;
  const models::Cluster& cluster_;
  const models::TransformerModel& model_;
  const uint32_t L_, blocks_, G_;
  const proto::Recompute rc_;
  uint32_t bmax_ = 32;
  std::vector<uint32_t> zeros_;
  bool allow_unused_ = false;
  bool bounds_ = true;
  double time_limit_s_ = 300;
  uint64_t max_evaluations_ = 0;
  std::vector<uint32_t> tps_;
  std::vector<uint32_t> class_of_;
  bool rate_bounds_ = true;
  std::vector<double> device_rate_;

  // State of the enumeration.
  std::vector<uint32_t> used_;
  std::vector<char> opened_;
  uint32_t free_total_ = 0;
  std::vector<Pipe> pipes_;
  Pipe current_;
  std::unordered_map<std::string, Profile> profiles_;
  std::unordered_map<std::string, std::vector<double>> rows_;  // F and C rows of one stage entry
  mutable std::vector<uint32_t> scratch_caps_;
  std::vector<double> scratch_times_, scratch_table_;
  std::vector<std::vector<uint32_t>> scratch_caps_by_stage_, scratch_split_by_stage_;
  std::vector<uint32_t> scratch_cuts_, scratch_devices_;
  uint64_t out_of_memory_ = 0;
  uint64_t layer_nodes_ = 0;  // layer choices that did not fit (counted, reported once)
  uint32_t zero_ = 1;
  std::vector<uint32_t> shard_bound_;
  std::vector<Choice> choice_;
  std::vector<std::vector<std::vector<DpLink>>> dp_links_;  // [pipeline][stage][entry]
  std::vector<StageN> stage_cache_;                         // [stage_base_[pipeline] + stage·(blocks + 1) + blocks]
  std::vector<size_t> stage_base_;
  mutable std::vector<uint32_t> scratch_split_;

  double incumbent_ = kInf;
  RankedPlans kept_;
  const SimBoundMode* sim_ = nullptr;
  std::optional<models::PlatformRoutes> routes_;  // simulator-bound mode
  std::vector<double> ring_cap_;                  // RingCap by node pair (−1: not computed)
  std::vector<BoundedPlan> bounded_;              // simulator-bound mode: the leaves kept
  uint64_t bounded_leaves_ = 0;                   // leaves played at the lower-bound pricing
  uint64_t floor_above_bound_ = 0;                // leaves whose cheap floor exceeded the played bound
  InfeasibleTracker misses_;
  uint64_t structures_ = 0;
  uint64_t ticks_ = 0;
  bool stopped_ = false;
  std::string stop_reason_;
  std::chrono::steady_clock::time_point start_;
};

// Runners-up of the top list kept first when the proof search stops unproven (PlanOnTwin's K − 1 for an
// explicit K of 16).
constexpr size_t kUnprovenTopList = 15;

// How many of the closed form's best plans are re-ranked by the played estimate when runners-up are asked for.
constexpr uint32_t kRerankPool = 64;

// Orders the pick and its runners-up by the played estimate (stable: the closed form's order breaks ties),
// keeps problem.alternatives runners-up, and says where the closed form's optimum went.
void Rerank(const PlanningProblem& problem, PlannerResult* result) {
  const AnalyticCostModel cost(problem);
  std::vector<RankedPlan> all;
  all.push_back({std::move(result->plan), 0});
  for (auto& alt : result->alternatives) all.push_back({std::move(alt.plan), 0});
  const size_t pool = all.size();
  // A plan whose lowering cannot be played (its operations wait on each other in a cycle: ZeRO-3 gathers of
  // pipelines of unlike shapes) would not run in the simulator either: it goes last.
  std::vector<char> playable(pool);
  for (size_t i = 0; i < pool; ++i) {
    const PlanEstimate e = cost.Estimate(all[i].plan, /*with_memory=*/false);
    all[i].cost_s = e.iteration_s;
    playable[i] = e.played;
  }
  std::vector<size_t> order(pool);
  for (size_t i = 0; i < pool; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (playable[a] != playable[b]) return playable[a] > playable[b];
    return all[a].cost_s < all[b].cost_s;
  });
  const size_t closed_form_best_at = static_cast<size_t>(std::find(order.begin(), order.end(), 0) - order.begin());
  result->plan = std::move(all[order[0]].plan);
  result->cost_s = all[order[0]].cost_s;
  result->alternatives.clear();
  for (size_t i = 1; i < pool && result->alternatives.size() < problem.alternatives; ++i) {
    result->alternatives.push_back(std::move(all[order[i]]));
  }
  result->stats.notes.push_back(
      "the closed form's " + std::to_string(pool) + " best plans re-ranked by the played lowering (the estimate "
      "that prices what the simulator plays); the closed form's optimum ranks " +
      std::to_string(closed_form_best_at + 1) + " there");
}

class ExhaustivePlanner : public PlannerWithOptions<proto::ExhaustiveOptions> {
 public:
  std::string name() const override { return "exhaustive"; }

  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    const uint32_t limit = options_.max_devices() > 0 ? options_.max_devices() : 16;
    if (problem.cluster.num_devices() > limit) {
      return Status::Invalid("exhaustive: cluster '" + problem.cluster.name() + "' has " +
                             std::to_string(problem.cluster.num_devices()) + " GPUs; the exact search handles up to " +
                             std::to_string(limit) + " (option max_devices raises the limit, at your own peril)");
    }
    PlannerResult result;
    // Asked for runners-up (the simulator-checked choice), the search keeps a pool of the closed form's
    // best plans and the pool is re-ranked by the played lowering (Estimate), the estimate that prices
    // what the simulator plays: the closed form's bounds make the search exact and fast, the played
    // estimate orders what the simulator will then check.
    const uint32_t pool = problem.alternatives == 0 ? 0 : std::max(std::min(problem.alternatives, kRerankPool - 1),
                                                                    kRerankPool - 1);
    Search search(problem, options_, result.stats, pool);
    search.Run();
    if (!search.found()) {
      if (!search.misses().empty()) return search.misses().ToStatus(name(), problem, result.stats);
      return NothingFound(name(), problem, result.stats, "");
    }
    search.MoveInto(&result);
    if (problem.alternatives > 0) Rerank(problem, &result);
    if (problem.alternatives == kEveryCandidate) Prove(problem, &result);
    return result;
  }

 private:
  // The proof list of the simulator's optimum (docs/planners.md, "exhaustive"): the closed form's best
  // by the played estimate is the incumbent; a second search with bounds of the simulated iteration keeps
  // every plan that could simulate below the threshold U, each with its lower bound, for PlanOnTwin to
  // simulate in that order.
  void Prove(const PlanningProblem& problem, PlannerResult* result) const {
    const AnalyticCostModel cost(problem);
    const double margin = options_.proof_margin() > 0 ? options_.proof_margin() : 0.05;
    // The threshold: the sound upper bound of the incumbent's (unfolded) simulation where it is the
    // smaller; else the estimate with a margin, which PlanOnTwin checks against the simulated times.
    PlayOptions upper;
    upper.pricing = Pricing::kUpperBound;
    upper.fold = false;
    auto threshold_of = [&](const proto::Plan& plan, double estimate_s) {
      double t = estimate_s * (1 + margin);
      if (auto ub = cost.Play(plan, upper); ub.ok()) t = std::min(t, ub->iteration_s);
      return t;
    };
    double threshold = threshold_of(result->plan, result->cost_s);
    // Other planners' candidates (PlanningProblem::seeds), a warm start: any plan's threshold is one the
    // optimum is below, so the least over them all cuts the most. The best seed by the played estimate
    // becomes the incumbent (simulated first) when it beats the search's own.
    std::vector<RankedPlan> seeds;
    const models::PlanContext ctx{problem.cluster, problem.model, problem.training};
    for (const proto::Plan& s : problem.seeds) {
      if (!models::ValidatePlan(s, ctx, "seed").ok()) continue;
      const PlanEstimate e = cost.Estimate(s, /*with_memory=*/true);
      if (!e.played || e.oom) continue;
      threshold = std::min(threshold, threshold_of(s, e.iteration_s));
      seeds.push_back({s, e.iteration_s, cost.LowerBoundSeconds(s), s.planner().empty() ? "a seed" : s.planner()});
    }
    std::stable_sort(seeds.begin(), seeds.end(),
                     [](const RankedPlan& a, const RankedPlan& b) { return a.cost_s < b.cost_s; });
    if (!seeds.empty() && seeds.front().cost_s < result->cost_s) {
      RankedPlan own{std::move(result->plan), result->cost_s, cost.LowerBoundSeconds(result->plan)};
      result->plan = std::move(seeds.front().plan);
      result->cost_s = seeds.front().cost_s;
      result->found_by = seeds.front().found_by;
      result->stats.notes.push_back("proof: the incumbent is " + seeds.front().found_by +
                                    "'s candidate (played estimate " + std::to_string(result->cost_s) +
                                    " s), faster than the search's own");
      seeds.front() = std::move(own);
    }
    // Without bounds (testing), nothing is cut: every plan of the space is returned.
    if (options_.disable_bounds()) threshold = kInf;
    SimBoundMode mode;
    mode.threshold_s = threshold;
    mode.max_leaves = options_.max_bound_plays() > 0 ? options_.max_bound_plays() : 200000;
    SearchStats stats;
    Search search(problem, options_, stats, 0, &mode);
    search.Run();
    std::vector<BoundedPlan>& kept = search.bounded();
    std::stable_sort(kept.begin(), kept.end(),
                     [](const BoundedPlan& a, const BoundedPlan& b) { return a.lower_bound_s < b.lower_bound_s; });
    const std::string pick = result->plan.SerializeAsString();
    const bool complete = !search.stopped() && search.floor_above_bound() == 0;
    // Unproven, the top list's runners-up (by the played estimate) come first, as with an explicit K.
    std::vector<RankedPlan> top = std::move(result->alternatives);
    if (complete) top.clear();
    if (top.size() > kUnprovenTopList) top.resize(kUnprovenTopList);
    for (RankedPlan& t : top) t.lower_bound_s = cost.LowerBoundSeconds(t.plan);
    result->alternatives = std::move(top);
    // Seeds come right after the top list; proven, everything is ordered by its bound.
    const size_t seeded = seeds.size();
    for (RankedPlan& s : seeds) result->alternatives.push_back(std::move(s));
    for (BoundedPlan& b : kept) {
      if (b.plan.SerializeAsString() == pick) continue;
      result->alternatives.push_back({std::move(b.plan), 0, b.lower_bound_s});
    }
    if (complete) {
      std::stable_sort(result->alternatives.begin(), result->alternatives.end(),
                       [](const RankedPlan& a, const RankedPlan& b) { return a.lower_bound_s < b.lower_bound_s; });
    }
    result->complete_below_s = complete ? threshold : 0;
    char line[320];
    std::snprintf(line, sizeof line,
                  "proof search (bounds of the simulated iteration, cut at %.4g s): %llu plans played at the "
                  "lower-bound pricing, %zu below the cut (and %zu other planners' candidates)%s",
                  threshold, static_cast<unsigned long long>(search.bounded_leaves()),
                  result->alternatives.size() - seeded, seeded,
                  complete ? "; every other plan of the space is ruled out" : "");
    result->stats.notes.push_back(line);
    for (const std::string& note : stats.notes) result->stats.notes.push_back("proof search: " + note);
    if (search.floor_above_bound() > 0) {
      result->stats.notes.push_back("proof search: " + std::to_string(search.floor_above_bound()) +
                                    " plans whose stage floor exceeds their played lower bound (a bug): not proven");
    }
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<ExhaustivePlanner>();
}

}  // namespace hetsim::planners::exhaustive
