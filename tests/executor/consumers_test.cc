// The simulator and the executor consume the same operation lists, checked for every bundled plan:
// the simulator's programs (sim/program.h) are the lowering's operations one for one (compute merged
// where consecutive, durations added), and the executor's ranks run the lowering of the plan (the same
// lists when the plan needs no simplification for the executor). What each executor rank actually runs
// is compared with the lowering operation by operation under MPI (check_ops.sh).
#include <gtest/gtest.h>

#include "executor/exec_plan.h"
#include "models/lowering.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "sim/program.h"

namespace hetsim {
namespace {

struct Bundled {
  std::string name;
  proto::Plan plan;
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
};

std::vector<Bundled> BundledPlans() {
  std::vector<Bundled> out;
  for (const auto& name : models::BundledNames(models::SpecKind::kPlan)) {
    auto plan = models::LoadPlan(name);
    EXPECT_TRUE(plan.ok()) << name;
    auto c = models::LoadCluster(plan->cluster());
    auto m = models::LoadModel(plan->model());
    EXPECT_TRUE(c.ok() && m.ok()) << name;
    auto t = models::ResolveTraining(plan->training(), *m, name);
    EXPECT_TRUE(t.ok()) << name;
    out.push_back({name, std::move(plan).value(), std::move(c).value(), std::move(m).value(), std::move(t).value()});
  }
  return out;
}

sim::OpKind PlayKind(models::OpKind k) {
  switch (k) {
    case models::OpKind::kSend: return sim::OpKind::kSend;
    case models::OpKind::kRecv: return sim::OpKind::kRecv;
    case models::OpKind::kPostRecv: return sim::OpKind::kPostRecv;
    case models::OpKind::kCollective: return sim::OpKind::kCollective;
    case models::OpKind::kSignal: return sim::OpKind::kSignal;
    case models::OpKind::kAwait: return sim::OpKind::kAwait;
    case models::OpKind::kJoin: return sim::OpKind::kJoin;
    case models::OpKind::kWaitSends: return sim::OpKind::kWaitSends;
    case models::OpKind::kCompute: return sim::OpKind::kCompute;
    case models::OpKind::kHostCopy: return sim::OpKind::kHostCopy;
  }
  return sim::OpKind::kCompute;
}

// Every non-compute operation of `lowered` appears in `played` in the same order with the same peer,
// group, size and micro-batch; compute operations appear as compute of the same pass in between. A
// collective's played bytes are its lowered bytes as models::PriceCollective scales them (the group's
// collective efficiency, or NCCL's choice between nodes).
// The simulator moves a backward compute's hidden TP calls (hide_share > 0) right behind it, before the
// other operations up to the next compute (models::HideBehindGemms): the lowering's order, so rewritten.
std::vector<models::Op> HiddenFirst(const std::vector<models::Op>& lowered) {
  std::vector<models::Op> out;
  for (size_t i = 0; i < lowered.size(); ++i) {
    out.push_back(lowered[i]);
    if (lowered[i].kind != models::OpKind::kCompute || lowered[i].category != models::Category::kBackward) continue;
    size_t j = i + 1;
    while (j < lowered.size() && lowered[j].kind != models::OpKind::kCompute) ++j;
    for (size_t c = i + 1; c < j; ++c) {
      if (lowered[c].hide_share > 0 && lowered[c].micro_batch == lowered[i].micro_batch) out.push_back(lowered[c]);
    }
    for (size_t c = i + 1; c < j; ++c) {
      if (!(lowered[c].hide_share > 0 && lowered[c].micro_batch == lowered[i].micro_batch)) out.push_back(lowered[c]);
    }
    i = j - 1;
  }
  return out;
}

// Compute slices of the played stream, started asynchronously and joined (HideBehindGemms) or not.
bool PlayedCompute(const sim::Op& op) {
  return op.kind == sim::OpKind::kCompute || op.kind == sim::OpKind::kComputeAsync ||
         op.kind == sim::OpKind::kComputeJoin;
}

void ExpectSameStream(const models::Lowering& lowering, const std::vector<models::Op>& lowered_in,
                      const sim::Programs& programs, const std::vector<sim::Op>& played,
                      const std::vector<models::GroupComm>& comm, const std::string& where) {
  const std::vector<models::Op> lowered = HiddenFirst(lowered_in);
  size_t j = 0;
  for (const models::Op& op : lowered) {
    if (op.kind == models::OpKind::kCompute) {
      // Merged with the compute before it, or its own slice.
      if (j < played.size() && PlayedCompute(played[j]) && played[j].category == op.category &&
          played[j].micro_batch == op.micro_batch) {
        ++j;
      }
      continue;
    }
    while (j < played.size() && PlayedCompute(played[j])) ++j;
    ASSERT_LT(j, played.size()) << where << ": the simulator's program ends early";
    const sim::Op& p = played[j++];
    ASSERT_EQ(p.kind, PlayKind(op.kind)) << where;
    ASSERT_EQ(p.category, op.category) << where;
    ASSERT_EQ(p.micro_batch, op.micro_batch) << where;
    const double bytes =
        op.kind == models::OpKind::kCollective ? models::PriceCollective(op, comm.at(op.group), 0).bytes : op.bytes;
    ASSERT_EQ(p.bytes, bytes) << where;
    if (op.kind == models::OpKind::kSend || op.kind == models::OpKind::kRecv) {
      ASSERT_EQ(p.peer, op.peer) << where;
    }
    if (op.kind == models::OpKind::kCollective) {
      ASSERT_EQ(programs.groups.at(p.group), lowering.groups.at(op.group)) << where;
      ASSERT_EQ(p.rank, op.rank) << where;
      ASSERT_EQ(p.collective, op.collective) << where;
    }
  }
  while (j < played.size() && PlayedCompute(played[j])) ++j;
  EXPECT_EQ(j, played.size()) << where << ": the simulator plays operations the lowering does not have";
}

TEST(Consumers, SimulatorPlaysTheLoweringOfEveryBundledPlan) {
  for (const auto& b : BundledPlans()) {
    const models::PlanContext ctx{b.cluster, b.model, b.training};
    // Per layer where the plan is small enough to keep every layer apart (what full fidelity plays), per
    // pass otherwise (balanced).
    const bool per_layer = b.cluster.num_devices() <= 1024;
    const sim::Fidelity fid = per_layer ? sim::Fidelity::Full() : sim::Fidelity::Balanced();
    models::LoweringOptions lo;
    lo.fuse_passes = !per_layer;
    auto lowering = models::LowerPlan(b.plan, ctx, lo);
    ASSERT_TRUE(lowering.ok()) << b.name << ": " << lowering.status().message();
    const models::ComputeCost cost(b.model, b.training);
    auto programs = sim::BuildPrograms(b.plan, ctx, cost, sim::ProgramOptions{fid, 0, 1});
    ASSERT_TRUE(programs.ok()) << b.name;
    ASSERT_EQ(programs->devices, lowering->devices) << b.name;
    const auto comm = models::GroupComms(
        b.cluster, lowering->groups,
        [&](uint32_t d) { return cost.CollectiveEfficiency(*b.cluster.device(d).gpu); }, cost);
    for (size_t i = 0; i < lowering->ranks.size(); ++i) {
      const std::string where = b.name + " device " + std::to_string(lowering->devices[i]);
      ExpectSameStream(*lowering, lowering->ranks[i].ops, *programs, programs->programs[i].ops, comm, where + " main");
      ExpectSameStream(*lowering, lowering->ranks[i].dp_stream, *programs, programs->programs[i].dp_stream, comm, where + " dp");
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(Consumers, ExecutorRunsTheLoweringOfEveryExecutableBundledPlan) {
  int executable = 0;
  for (const auto& b : BundledPlans()) {
    if (!executor::CheckExecutableModel(b.model).ok() || b.cluster.num_devices() > 1024) continue;
    const models::PlanContext ctx{b.cluster, b.model, b.training};
    auto ep = executor::BuildExecPlan(b.plan, ctx, b.name);
    if (!ep.ok()) continue;  // a schedule the executor does not run (its error is tested in exec_plan_test)
    ++executable;
    auto lowering = models::LowerPlan(b.plan, ctx);
    ASSERT_TRUE(lowering.ok()) << b.name;
    // NVLS is NCCL's choice on NVSwitch nodes; the executor's all-reduces are lowered as the ring's.
    if (b.plan.comm().tp_algorithm() == proto::CommOptions::ALGORITHM_NVLS) continue;
    EXPECT_EQ(models::FormatLowering(ep->lowering), models::FormatLowering(*lowering)) << b.name;
    for (int r = 0; r < ep->world_size(); ++r) {
      const auto& role = ep->roles[static_cast<size_t>(r)];
      EXPECT_EQ(&ep->Ops(r), &ep->lowering.ranks[ep->lowering.device_slot[role.device]].ops) << b.name;
    }
  }
  EXPECT_GE(executable, 7);  // the cpu-4 plans at least
}

}  // namespace
}  // namespace hetsim
