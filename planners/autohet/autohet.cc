// AutoHet's Algorithm 1 (papers/000 §III-D's summary): for every TP degree (line 2), micro-batch size and
// number of DP groups D, a device grouping (lines 3-8, eq. 3), its node and stage mapping (line 10), its
// layer partition (line 12, eq. 4); the plans are estimated with eq. 1 and the cheapest kept (lines 14-16).
#include "planners/autohet/autohet.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "planners/autohet/internal.h"
#include "planners/proto/autohet.pb.h"

namespace hetsim::planners::autohet {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Options = proto::AutoHetOptions;

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

struct Candidate {
  proto::Plan plan;
  double eq1_s = kInf;       // eq. 1
  double pipeline_s = 0;     // max_j of the groups' pipeline times
  double sync_s = 0;         // T_sync
  std::string summary;       // "t=2 b=1 D=3: [a100:20 → h800:60] ×2 [h800:80]" (equal groups in a row once)
};

class Search {
 public:
  Search(const PlanningProblem& problem, const Options& options)
      : problem_(problem), options_(options), cost_(problem), memory_(problem),
        profile_(cost_, problem.training.recompute()), blocks_(problem.model.num_blocks()),
        batch_(problem.training.global_batch_size()) {}

  Result<PlannerResult> Run() {
    const uint32_t zero = options_.has_zero_stage() ? options_.zero_stage() : 1;
    const double limit = options_.solver_time_limit_s() > 0 ? options_.solver_time_limit_s() : 60;
    uint32_t node_gcd = 0;
    for (const auto& n : problem_.cluster.nodes()) node_gcd = std::gcd(node_gcd, n.num_gpus);
    const std::vector<uint32_t> tps = TpCandidates(
        problem_, std::vector<uint32_t>(options_.tp_degrees().begin(), options_.tp_degrees().end()), node_gcd, &stats_);
    std::vector<uint32_t> bs(options_.micro_batch_sizes().begin(), options_.micro_batch_sizes().end());
    if (bs.empty()) bs = {1, 2, 4};
    std::sort(bs.begin(), bs.end());
    bs.erase(std::unique(bs.begin(), bs.end()), bs.end());

    Candidate best;
    RankedPlans runners(problem_.alternatives);  // the simulator-checked choice's candidates (planner.h)
    for (uint32_t t : tps) {
      std::vector<EntityType> types;
      const std::vector<Entity> entities = MakeEntities(problem_.cluster, t, &types);
      const uint32_t E = static_cast<uint32_t>(entities.size());
      for (uint32_t b : bs) {
        for (auto& ty : types) {
          ty.power = 1.0 / profile_.Blocks(*ty.gpu, t, b, 1);
          ty.memory_gib = t * ty.gpu->memory_gib;
        }
        const uint32_t max_d = options_.max_dp_groups() > 0 ? std::min(options_.max_dp_groups(), E) : E;
        for (uint32_t D = 1; D <= max_d; ++D) {
          if (batch_ % (static_cast<uint64_t>(D) * b) != 0) {
            stats_.Reject("D × micro-batch size does not divide the global batch");
            continue;
          }
          const uint32_t M = batch_ / (D * b);
          GroupingInput in;
          in.types = types;
          in.groups = D;
          in.micro_batches = M;
          in.required_gib = RequiredGib(t, b, D, zero);
          in.max_stages = blocks_;
          in.time_limit_s = limit;
          HETSIM_ASSIGN_OR_RETURN(std::optional<Grouping> g, SolveGrouping(in));
          ++groupings_;
          if (!g) {
            stats_.Reject("eq. 3: no grouping gives every DP group the memory the model needs");
            continue;
          }
          grouping_nodes_ += g->nodes;
          ++groupings_with_answer_;
          grouping_programs_ += g->programs;
          grouping_screened_ += g->screened;
          grouping_unique_ += g->proven_unique;
          grouping_s_ += g->seconds;
          if (!g->proven_optimal) ++unproven_;
          const auto stages = MapStages(*g, types, entities);
          HETSIM_ASSIGN_OR_RETURN(std::optional<Candidate> c, Partition(*g, types, entities, stages, t, b, M, zero));
          if (!c) {
            stats_.Reject("eq. 4: a pipeline's stages cannot hold the model's layers in memory");
            continue;
          }
          ++stats_.candidates_evaluated;
          runners.Offer(c->eq1_s, c->plan);
          if (c->eq1_s < best.eq1_s) best = std::move(*c);
        }
      }
    }
    if (best.eq1_s == kInf) {
      return NothingFound("autohet", problem_, stats_,
                          "allow more TP degrees or micro-batch sizes, use recomputation, or add GPUs");
    }
    PlannerResult out;
    runners.MoveInto(&out);  // the same pick as `best` (both keep the first of equal costs)
    out.plan = std::move(best.plan);
    out.cost_s = best.eq1_s;
    out.stats = stats_;
    out.stats.notes.push_back("eq. 3 (device grouping): " + std::to_string(groupings_) + " (TP, micro-batch, D) "
                              "solved exactly with " + std::to_string(grouping_programs_) +
                              " integer programs (CBC; " + std::to_string(grouping_screened_) +
                              " feasibility questions of the binary search answered without it; " +
                              std::to_string(grouping_unique_) + " of " + std::to_string(groupings_with_answer_) +
                              " final programs solved by plain branch and bound, their optimum proven the only one), " +
                              std::to_string(grouping_nodes_) +
                              " branch-and-bound nodes, " + Fmt("%.2f", grouping_s_) + " s");
    out.stats.notes.push_back("eq. 4 (layer partition): " + std::to_string(partition_programs_) +
                              " programs solved exactly (bottleneck enumeration + dynamic program; " +
                              std::to_string(partition_reused_) +
                              " groups with the same stage GPUs and links reused one), " +
                              Fmt("%.2f", partition_s_) + " s");
    out.stats.notes.push_back("eq. 5 (binary-decomposition profiling): " + std::to_string(profile_.measurements()) +
                              " profiled configurations (2^k blocks, embedding, head per GPU type, TP degree and "
                              "micro-batch size)");
    if (unproven_ > 0) {
      out.stats.notes.push_back(std::to_string(unproven_) +
                                " integer programs stopped at solver_time_limit_s before proving optimality");
    }
    out.stats.notes.push_back("chosen: " + best.summary + "; eq. 1: " + Fmt("%.4f", best.eq1_s) + " s (pipelines " +
                              Fmt("%.4f", best.pipeline_s) + " s + gradient sync " + Fmt("%.4f", best.sync_s) + " s)");
    return out;
  }

 private:
  // Eq. 3b's requirement of one DP group: the model's weights, gradients and optimizer states (ZeRO sharding
  // over the D groups' replicas) and one micro-batch's activations of every layer, at TP t (§III-B: "we
  // profile the minimum required memory").
  double RequiredGib(uint32_t t, uint32_t b, uint32_t D, uint32_t zero) const {
    const uint32_t L = problem_.model.num_layers();
    const double stat = memory_.StaticGib(0, L, t, zero, D) * t;
    const double act = memory_.ActivationGibPerSequence(0, L, t, false, problem_.training.recompute()) * b * t;
    return stat + act + memory_.WorkspaceGib();
  }

  // Layers [begin, end) of stage s (of S) holding l blocks.
  std::pair<uint32_t, uint32_t> Range(uint32_t s, uint32_t S, uint32_t l) const {
    const uint32_t L = problem_.model.num_layers();
    if (S == 1) return {0, L};
    if (s == 0) return {0, 1 + l};
    if (s + 1 == S) return {L - 1 - l, L};
    return {1, 1 + l};
  }

  Result<std::optional<Candidate>> Partition(const Grouping& g, const std::vector<EntityType>& types,
                                             const std::vector<Entity>& entities,
                                             const std::vector<std::vector<uint32_t>>& stages, uint32_t t, uint32_t b,
                                             uint32_t M, uint32_t zero) {
    const auto recompute = problem_.training.recompute();
    const bool bottleneck = options_.partition_objective() == Options::PARTITION_OBJECTIVE_BOTTLENECK;
    Candidate c;
    c.plan.set_zero_stage(zero);
    c.summary = "t=" + std::to_string(t) + " b=" + std::to_string(b) + " D=" + std::to_string(g.counts.size()) + ":";
    std::vector<std::vector<std::pair<uint32_t, uint32_t>>> ranges(stages.size());
    double slowest = 0;
    std::string last_group;
    uint32_t repeats = 0;
    auto flush = [&]() {
      if (repeats > 0) c.summary += " " + last_group + (repeats > 1 ? " ×" + std::to_string(repeats) : "");
    };
    // Groups whose stages have the same GPU types and links have the same tables, so the same partition:
    // keyed by them, each is computed once per (t, b, D).
    std::map<std::vector<double>, std::pair<std::optional<autohet::Partition>, std::vector<double>>> solved;
    for (size_t j = 0; j < stages.size(); ++j) {
      const uint32_t S = static_cast<uint32_t>(stages[j].size());
      std::vector<ReplicaLinks> stage_links(S);
      std::vector<double> key;
      for (uint32_t s = 0; s < S; ++s) {
        const Entity& e = entities[stages[j][s]];
        static const std::vector<uint32_t> kNone;
        const auto& next = s + 1 < S ? entities[stages[j][s + 1]].devices : kNone;
        const auto& prev = s > 0 ? entities[stages[j][s - 1]].devices : kNone;
        stage_links[s] = cost_.Links(e.devices, next, prev);
        const ReplicaLinks& l = stage_links[s];
        key.insert(key.end(), {static_cast<double>(e.type), static_cast<double>(l.tp.kind), l.tp.bandwidth_bytes_s,
                               l.tp.latency_s, static_cast<double>(l.has_next), static_cast<double>(l.next.kind),
                               l.next.bandwidth_bytes_s, l.next.latency_s, static_cast<double>(l.has_prev),
                               static_cast<double>(l.prev.kind), l.prev.bandwidth_bytes_s, l.prev.latency_s});
      }
      auto found = solved.find(key);
      if (found != solved.end()) {
        ++partition_reused_;
      } else {
        std::vector<StageTable> tables(S);
        for (uint32_t s = 0; s < S; ++s) {
          const Entity& e = entities[stages[j][s]];
          const models::GpuSpec& gpu = *types[e.type].gpu;
          const ReplicaLinks& links = stage_links[s];
          const uint32_t most = S == 1 ? blocks_ : blocks_ - (S - 1);
          tables[s].seconds.assign(most, kInf);
          tables[s].fits.assign(most, false);
          for (uint32_t l = (S == 1 ? blocks_ : 1); l <= most; ++l) {
            const auto [begin, end] = Range(s, S, l);
            // Eq. 1's t_js: compute from the eq. 5 profiles, TP and PP communication from the links.
            const ReplicaTime comm = cost_.Replica(gpu, t, begin, end, b, links, recompute);
            double compute = profile_.Blocks(gpu, t, b, l);
            if (begin == 0) compute += profile_.Embedding(gpu, t, b);
            if (end == problem_.model.num_layers()) compute += profile_.Head(gpu, t, b);
            tables[s].seconds[l - 1] = compute + comm.tp_s + comm.pp_s;
            const double need = memory_.TotalGib(
                memory_.StaticGib(begin, end, t, zero, static_cast<double>(stages.size())),
                memory_.ActivationGibPerSequence(begin, end, t, false, recompute),
                memory_.PeakLayerGibPerSequence(begin, end, t, false, recompute), b,
                MemoryModel::InFlight(proto::Plan::SCHEDULE_1F1B, s, S, M, 1));
            tables[s].fits[l - 1] = FitsIn(need, gpu.memory_gib);
          }
        }
        const auto t0 = std::chrono::steady_clock::now();
        std::optional<autohet::Partition> part = PartitionLayers(tables, blocks_, M, bottleneck);
        partition_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++partition_programs_;
        std::vector<double> seconds;  // each stage's time at the partition
        if (part) {
          for (uint32_t s = 0; s < S; ++s) seconds.push_back(tables[s].seconds[part->blocks[s] - 1]);
        }
        found = solved.emplace(std::move(key), std::make_pair(std::move(part), std::move(seconds))).first;
      }
      const std::optional<autohet::Partition>& part = found->second.first;
      if (!part) return std::optional<Candidate>{};
      // The group's eq. 1 time.
      double sum = 0, max = 0;
      for (uint32_t s = 0; s < S; ++s) {
        const double ts = found->second.second[s];
        sum += ts;
        max = std::max(max, ts);
      }
      slowest = std::max(slowest, sum + (M - 1.0) * max);
      auto* pipe = c.plan.add_pipelines();
      pipe->set_micro_batch_size(b);
      pipe->set_num_micro_batches(M);
      std::string group = "[";
      uint32_t at = 1;
      for (uint32_t s = 0; s < S; ++s) {
        const Entity& e = entities[stages[j][s]];
        auto* st = pipe->add_stages();
        for (uint32_t d : e.devices) st->add_devices(d);
        st->set_tp_degree(t);
        const uint32_t l = part->blocks[s];
        st->set_layer_begin(s == 0 ? 0 : at);
        at += l;
        st->set_layer_end(s + 1 == S ? problem_.model.num_layers() : at);
        ranges[j].push_back({st->layer_begin(), st->layer_end()});
        group += (s ? " → " : "") + types[e.type].gpu->name + ":" + std::to_string(l);
      }
      group += "]";
      if (group == last_group) {
        ++repeats;
      } else {
        flush();
        last_group = std::move(group);
        repeats = 1;
      }
    }
    flush();
    FitMoePlan(&c.plan, problem_.model);  // one TP degree throughout: only sequence parallelism may change
    c.pipeline_s = slowest;
    c.sync_s = SyncSeconds(c.plan, ranges, t);
    c.eq1_s = c.pipeline_s + c.sync_s;
    return std::optional<Candidate>(std::move(c));
  }

  // Eq. 1's T_sync: the model-synchronisation volume of the busiest device (a ring all-reduce over the D
  // groups, 2(D − 1)/D of its gradient bytes) over the lowest bandwidth among the DP groups (per layer,
  // the slowest link among the devices holding it).
  double SyncSeconds(const proto::Plan& plan, const std::vector<std::vector<std::pair<uint32_t, uint32_t>>>& ranges,
                     uint32_t t) const {
    const size_t D = plan.pipelines_size();
    if (D <= 1) return 0;
    double bytes = 0;
    for (const auto& group : ranges) {
      for (const auto& [begin, end] : group) bytes = std::max(bytes, cost_.GradientChunkBytes(begin, end, t, true));
    }
    double bandwidth = kInf;
    for (uint32_t layer = 0; layer < problem_.model.num_layers(); ++layer) {
      std::vector<uint32_t> holders;
      for (size_t j = 0; j < D; ++j) {
        for (size_t s = 0; s < ranges[j].size(); ++s) {
          if (layer >= ranges[j][s].first && layer < ranges[j][s].second) {
            holders.push_back(plan.pipelines(static_cast<int>(j)).stages(static_cast<int>(s)).devices(0));
          }
        }
      }
      bandwidth = std::min(bandwidth, cost_.topology().Slowest(holders).bandwidth_bytes_s);
    }
    return 2.0 * (D - 1.0) / D * bytes / bandwidth;
  }

  const PlanningProblem& problem_;
  const Options& options_;
  AnalyticCostModel cost_;
  MemoryModel memory_;
  BinaryProfile profile_;
  const uint32_t blocks_;
  const uint64_t batch_;
  SearchStats stats_;
  uint64_t groupings_ = 0, groupings_with_answer_ = 0, grouping_programs_ = 0, grouping_nodes_ = 0,
           grouping_screened_ = 0, grouping_unique_ = 0,
           partition_programs_ = 0, partition_reused_ = 0, unproven_ = 0;
  double grouping_s_ = 0, partition_s_ = 0;
};

class AutoHetPlanner : public PlannerWithOptions<Options> {
 public:
  std::string name() const override { return "autohet"; }
  Result<PlannerResult> MakePlan(const PlanningProblem& problem) const override {
    Search search(problem, options_);
    return search.Run();
  }
};

}  // namespace

std::unique_ptr<Planner> NewPlanner() {
  return std::make_unique<AutoHetPlanner>();
}

}  // namespace hetsim::planners::autohet
