#include "models/fold.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>

#include "models/communicator.h"
#include "models/plan.h"

namespace hetsim::models {

bool SameWork(const Op& a, const Op& b) {
  return a.kind == b.kind && a.category == b.category && a.collective == b.collective && a.algorithm == b.algorithm &&
         a.reduce == b.reduce && a.channel == b.channel && a.recompute == b.recompute && a.in_pass == b.in_pass &&
         a.hide_share == b.hide_share && a.sm_share == b.sm_share && a.micro_batch == b.micro_batch &&
         a.bucket == b.bucket && a.num_buckets == b.num_buckets &&
         a.calls == b.calls && a.layer_begin == b.layer_begin && a.layer_end == b.layer_end &&
         a.sequences() == b.sequences() && a.bytes == b.bytes && a.flops == b.flops &&
         a.params == b.params && a.host_ranks == b.host_ranks && a.to_host == b.to_host;
}

std::string FoldShape(const proto::Plan& plan, const Cluster& cluster) {
  if (plan.comm().cpu_staged() || Communicator(cluster, plan.comm()).any_staged()) return "CPU-staged transfers";
  // A node's host copies share its host memory link, which folding does not replay.
  if (OffloadsOptimizer(plan)) return "CPU offload (host copies)";
  if (plan.pipelines_size() == 0) return "no pipelines";
  const auto& p0 = plan.pipelines(0);
  for (const auto& pipe : plan.pipelines()) {
    if (pipe.stages_size() != p0.stages_size()) return "pipelines of different depths";
    for (int s = 0; s < pipe.stages_size(); ++s) {
      const auto& st = pipe.stages(s);
      if (st.devices_size() != p0.stages(s).devices_size()) return "stages of different widths";
      // Intra-stage DP replicas fold onto the stage's first device when they compute as many sequences each.
      const auto split = MicroBatchSplit(st, pipe.micro_batch_size());
      if (std::adjacent_find(split.begin(), split.end(), std::not_equal_to<>()) != split.end()) {
        return "data-parallel replicas of a stage with uneven micro-batch shares";
      }
    }
  }
  return "";
}

std::vector<bool> FoldRepresentatives(const proto::Plan& plan, const Cluster& cluster) {
  std::vector<bool> out(cluster.num_devices(), false);
  for (const auto& st : plan.pipelines(0).stages()) {
    if (st.devices_size() > 0) out[st.devices(0)] = true;
  }
  return out;
}

RankFolder::RankFolder(const Lowering& lw, const std::vector<uint32_t>& device_slot,
                       const std::vector<std::vector<uint32_t>>& groups, const Cluster& cluster,
                       std::function<const PlatformRoutes&()> routes, bool skeletons)
    : lw_(lw), device_slot_(device_slot), groups_(groups), cluster_(cluster), routes_(std::move(routes)),
      skeletons_(skeletons), n_(lw.ranks.size()) {
  if (lw.cpu_staged || Communicator(cluster, lw.comm).any_staged()) {
    note_ = "CPU-staged transfers";
    return;
  }
  std::unordered_map<uint64_t, uint32_t> first;  // (pipeline, stage) -> first slot
  std::unordered_map<uint64_t, uint32_t> count;  // (pipeline, stage) -> devices
  const auto key = [](uint32_t p, uint32_t s) { return (uint64_t{p} << 32) | s; };
  for (uint32_t i = 0; i < n_; ++i) {
    const auto k = key(lw.ranks[i].pipeline, lw.ranks[i].stage);
    first.emplace(k, i);
    ++count[k];
  }
  fold_.rep.resize(n_);
  for (uint32_t i = 0; i < n_; ++i) {
    const auto& r = lw.ranks[i];
    auto it = first.find(key(0, r.stage));
    if (it == first.end()) {
      note_ = "pipeline 0 has no stage " + std::to_string(r.stage);
      return;
    }
    if (count[key(r.pipeline, r.stage)] != count[it->first]) {
      note_ = "stages of different widths";
      return;
    }
    fold_.rep[i] = it->second;
  }
}

void RankFolder::Add(uint32_t slot) {
  if (note_.empty()) note_ = Compare(slot);
}

std::string RankFolder::Compare(uint32_t i) {
  const auto slot_of = [&](uint32_t device) { return device_slot_[device]; };
  auto& fold = fold_;
  if (fold.folded_onto.size() < groups_.size()) fold.folded_onto.resize(groups_.size(), kNone);
  const uint32_t rep = fold.rep[i];
  const auto& a = lw_.ranks[rep];
  const auto& b = lw_.ranks[i];
  if (cluster_.device(a.device).gpu != cluster_.device(b.device).gpu) return "different GPU types";
  const bool same_size = skeletons_ ? a.skeleton.size() == b.skeleton.size() && a.num_stages == b.num_stages &&
                                          a.num_micro_batches == b.num_micro_batches
                                    : a.ops.size() == b.ops.size() && a.dp_stream.size() == b.dp_stream.size();
  if (a.tp != b.tp || a.layer_begin != b.layer_begin || a.layer_end != b.layer_end || !(a.shard == b.shard) ||
      !same_size) {
    return "devices " + std::to_string(a.device) + " and " + std::to_string(b.device) + " do different work";
  }
  for (const bool dp : {false, true}) {
    if (skeletons_ && dp) break;  // a skeleton has its DP stream inline
    const auto& xs = skeletons_ ? a.skeleton : dp ? a.dp_stream : a.ops;
    const auto& ys = skeletons_ ? b.skeleton : dp ? b.dp_stream : b.ops;
    for (size_t k = 0; k < xs.size(); ++k) {
      const Op& x = xs[k];
      const Op& y = ys[k];
      if (!SameWork(x, y)) {
        return "devices " + std::to_string(a.device) + " and " + std::to_string(b.device) + " differ at operation " +
               std::to_string(k) + " (" + FormatOp(lw_, a.device, "", k, x) + " / " + FormatOp(lw_, b.device, "", k, y) +
               ")";
      }
      switch (x.kind) {
        case OpKind::kHostCopy: return "CPU offload (host copies)";
        case OpKind::kSend:
        case OpKind::kRecv:
        case OpKind::kPostRecv: {
          const uint32_t xp = slot_of(x.peer), yp = slot_of(y.peer);
          const bool ring = fold.rep[xp] == rep && xp != rep;  // a peer folded onto this representative
          if (ring) {
            // A CP ring inside the stage: the copy's peer folds onto this representative too.
            if (fold.rep[yp] != rep) return "point-to-point peers that do not fold";
            if (i == rep) {
              const auto rk = std::make_pair(a.device, x.channel);
              auto& peers = x.kind == OpKind::kSend ? fold.ring_peer : ring_from_;
              auto [it, inserted] = peers.emplace(rk, x.peer);
              if (!inserted && it->second != x.peer) return "ring messages to or from several peers";
              if (x.kind == OpKind::kSend) ++ring_balance_[rk];
              if (x.kind == OpKind::kRecv) --ring_balance_[rk];
            }
          } else {
            // The representative talks to another stage's representative, and the copy to a device that
            // folds onto it.
            if (fold.rep[xp] != xp || fold.rep[yp] != xp) return "point-to-point peers that do not fold";
          }
          if (x.kind == OpKind::kSend && i != rep) {
            auto& copies = fold.send_copies[std::make_tuple(a.device, x.peer, x.channel)];
            const auto c = std::make_pair(b.device, y.peer);
            if (copies.empty() || copies.back() != c) {
              if (std::find(copies.begin(), copies.end(), c) == copies.end()) {
                // The copy is played as the representative's send: its own route must price the same
                // (pipelines in other zones, pods or over other NICs, ring members whose hop leaves the
                // node where the representative's does not, do not fold).
                const PlatformRoutes& pr = routes_();
                if (!pr.GpuToGpu(b.device, y.peer).PricesAs(pr.GpuToGpu(a.device, x.peer))) {
                  return std::string(ring ? "ring" : "pipeline") + " sends over unlike routes (devices " +
                         std::to_string(b.device) + " → " + std::to_string(y.peer) + " and " +
                         std::to_string(a.device) + " → " + std::to_string(x.peer) + ")";
                }
                copies.push_back(c);
              }
            }
          }
          break;
        }
        case OpKind::kCollective: {
          if (x.collective == CollectiveKind::kBroadcast) return std::string(CollectiveName(x.collective)) + " collectives";
          if (x.algorithm == Algorithm::kTree) return "tree collectives";
          const auto& gx = groups_[x.group];
          const auto& gy = groups_[y.group];
          if (gx.size() != gy.size()) return "collective groups of different sizes";
          if (fold.folded_onto[y.group] != kNone && fold.folded_onto[y.group] != x.group) {
            return "a collective group folds onto two groups";
          }
          fold.folded_onto[y.group] = x.group;
          // Every member of both groups folds onto this representative: one played member per group.
          for (const auto* g : {&gx, &gy}) {
            for (uint32_t d : *g) {
              if (fold.rep[slot_of(d)] != rep) return "collective groups spanning stages";
            }
          }
          break;
        }
        default: break;
      }
    }
  }
  return "";
}

std::string RankFolder::Finish(size_t num_groups, RankFold* out) {
  if (!note_.empty()) return note_;
  for (const auto& [rk, balance] : ring_balance_) {
    if (balance != 0) return "ring messages sent and received in different numbers";
  }
  for (const auto& [rk, peer] : ring_from_) {
    if (!fold_.ring_peer.count(rk)) return "ring messages received but not sent";
  }
  fold_.folded_onto.resize(num_groups, kNone);
  for (uint32_t i = 0; i < n_; ++i) fold_.played += fold_.rep[i] == i ? 1 : 0;
  if (fold_.played == n_) return "no two devices do the same work";
  *out = std::move(fold_);
  return "";
}

std::string FoldRanks(const Lowering& lw, const std::vector<uint32_t>& device_slot,
                      const std::vector<std::vector<uint32_t>>& groups, const Cluster& cluster,
                      const std::function<const PlatformRoutes&()>& routes, bool skeletons, RankFold* out) {
  RankFolder folder(lw, device_slot, groups, cluster, routes, skeletons);
  for (uint32_t i = 0; i < lw.ranks.size(); ++i) folder.Add(i);
  return folder.Finish(groups.size(), out);
}

}  // namespace hetsim::models
