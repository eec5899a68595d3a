// in-memory (Gemini, Wang et al., SOSP'23): checkpoints in host memory. A save blocks for each device's copy
// of its state to its own node's host memory; replication to `replicas - 1` peers (default 2 copies in all)
// overlaps training (§4), and every `remote_interval_s` of training (default 3 h) a checkpoint also reaches
// the object store, written from host memory in the background (§3). Hot spares as `hot-spares`.
//
// After a loss the job restarts on the same plan and reloads its last in-memory checkpoint: a surviving
// node's devices from its own host memory, a replaced node's devices from a peer's over the network. When
// every node of a replica group is gone, so are its copies: the job rolls back to the last remote
// checkpoint and reads it from the object store.
//
// Choices where the paper is silent (docs/replay.md): replicas are placed in groups of `replicas`
// consecutive nodes of the job (Gemini's group placement); a restore from host memory is costed once per
// number of replaced nodes, on the first groups' nodes (the same links and sizes as any other); a crash of
// the job's processes leaves host memory to the node's daemon.
#include <algorithm>

#include "sim/recovery/policy.h"

namespace hetsim::sim::recovery {
namespace {

constexpr double kDefaultRemoteIntervalS = 3 * 3600;

Traits InMemoryTraits() {
  Traits t;
  t.spares = true;
  t.options = {"replicas", "remote_interval_s"};
  return t;
}

class InMemory : public Policy {
 public:
  explicit InMemory(const proto::RecoveryPolicy& o)
      : Policy(InMemoryTraits()),
        replicas_(o.has_replicas() ? o.replicas() : 2),
        remote_interval_s_(o.has_remote_interval_s() ? o.remote_interval_s() : kDefaultRemoteIntervalS) {}

  Result<double> SaveSeconds(const Config& c, Env& env) override {
    return env.Seconds("save|host-memory|" + c.key, [&] {
      return env.PlayTransfers(*c.cluster, HostMemoryCopies(c), "a checkpoint copy to host memory");
    });
  }

  void Committed(uint64_t iterations, double seconds) override {
    since_remote_.iterations += iterations;
    since_remote_.seconds += seconds;
  }
  void Saved(const std::shared_ptr<const Config>&, double trained_s) override {
    training_since_remote_s_ += trained_s;
    if (training_since_remote_s_ >= remote_interval_s_) {  // a remote checkpoint, from host memory
      training_since_remote_s_ = 0;
      since_remote_ = {};
    }
  }

  // Gemini's group placement: a group all of whose nodes are gone has lost its copies.
  bool NeedsRollback(const Loss& loss, Env&) override {
    for (uint32_t node : loss.failed_nodes) {
      const int32_t slot = node < loss.slot_of.size() ? loss.slot_of[node] : -1;
      if (slot < 0) continue;
      const size_t first = static_cast<size_t>(slot) / replicas_ * replicas_;
      bool all = true;
      for (size_t i = first; i < std::min(loss.slots.size(), first + replicas_) && all; ++i) {
        all = loss.failed_nodes.count(loss.slots[i]) != 0;
      }
      if (all) return true;
    }
    return false;
  }

  // Back to the last remote checkpoint: what was committed since is lost too.
  Work RollBack() override {
    const Work w = since_remote_;
    since_remote_ = {};
    training_since_remote_s_ = 0;
    return w;
  }

  Result<double> RestoreSeconds(const Loss& loss, const Config& to, bool rollback, Env& env) override {
    if (rollback) return to.load_s;
    // Devices of surviving nodes reload from their own host memory, a replaced node's devices from a peer's
    // (the next node of its group) over the network.
    const size_t replaced = loss.software ? 0 : loss.failed_nodes.size();
    const std::string what = "a restore from host memory (" + std::to_string(replaced) + " replaced nodes)";
    const std::string key =
        "restore-host-memory|" + std::to_string(replaced) + "|" + std::to_string(replicas_) + "|" + to.key;
    return env.Seconds(key, [&] {
      const models::Cluster& cl = *to.cluster;
      std::set<uint32_t> replaced_nodes;
      for (size_t i = 0; i < to.nodes.size() && replaced_nodes.size() < replaced; i += replicas_) {
        replaced_nodes.insert(to.nodes[i]);
      }
      std::vector<Transfer> t;
      for (size_t i = 0; i < to.devices.size(); ++i) {
        const uint32_t node = cl.device(to.devices[i]).node;
        uint32_t src = node;
        if (replaced_nodes.count(node) != 0) {
          const auto pos = static_cast<size_t>(std::find(to.nodes.begin(), to.nodes.end(), node) - to.nodes.begin());
          src = to.nodes[pos + 1 < to.nodes.size() ? pos + 1 : (pos > 0 ? pos - 1 : pos)];
        }
        t.push_back({{Endpoint::kHostMemory, src}, {Endpoint::kGpu, to.devices[i]}, to.state_bytes[i]});
      }
      return env.PlayTransfers(cl, t, what);
    });
  }

 private:
  uint32_t replicas_;
  double remote_interval_s_;
  double training_since_remote_s_ = 0;
  Work since_remote_;  // committed since the last remote checkpoint
};

}  // namespace

std::unique_ptr<Policy> NewInMemory(const proto::RecoveryPolicy& options) {
  return std::make_unique<InMemory>(options);
}

}  // namespace hetsim::sim::recovery
