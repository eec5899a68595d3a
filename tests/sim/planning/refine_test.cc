// Simulator-checked choice (sim/planning/refine.h): the planner's pick and its runners-up are simulated and
// the fastest that fits is returned; --refine 0 keeps the planner's pick. exhaustive's default is the proof of
// the simulator's optimum: checked here against every plan of its space on a small cluster.
#include "sim/planning/refine.h"

#include <gtest/gtest.h>

#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include <cstdio>
#include <limits>

#include "planners/exhaustive/exhaustive.h"
#include "planners/proto/exhaustive.pb.h"
#include "sim/simulator.h"
#include "tests/sim/planning/two_gpu_problem.h"

namespace hetsim::planning {
namespace {

// Plans of llama-tiny (every layer on one stage) with global batch 8.
proto::Plan OneDevice() {
  proto::Plan p;
  auto* pipe = p.add_pipelines();
  pipe->set_micro_batch_size(1);
  pipe->set_num_micro_batches(8);
  auto* st = pipe->add_stages();
  st->add_devices(0);
  st->set_layer_end(6);  // llama-tiny: embedding, 4 blocks, head
  return p;
}
proto::Plan TwoReplicas() {  // data parallelism over both GPUs: half the batch each
  proto::Plan p;
  for (uint32_t d = 0; d < 2; ++d) {
    auto* pipe = p.add_pipelines();
    pipe->set_micro_batch_size(1);
    pipe->set_num_micro_batches(4);
    auto* st = pipe->add_stages();
    st->add_devices(d);
    st->set_layer_end(6);
  }
  return p;
}

// A planner that ranks one device first (cost 1 s) and two replicas second (cost 2 s): wrong on purpose, since
// two GPUs each doing half the compute of one are faster in any simulator that charges compute.
class WrongRanking : public planners::PlannerWithOptions<proto::ExhaustiveOptions> {
 public:
  std::string name() const override { return "wrong-ranking"; }
  Result<planners::PlannerResult> MakePlan(const planners::PlanningProblem& problem) const override {
    planners::PlannerResult r;
    r.plan = OneDevice();
    r.cost_s = 1;
    if (problem.alternatives > 0) r.alternatives.push_back({TwoReplicas(), 2});
    return r;
  }
};

using Problem = testing_refine::TwoGpuProblem;

TEST(Refine, ZeroKeepsThePlannersPickAndSimulatesNothing) {
  const Problem p;
  RefineOptions o;
  o.k = 0;
  RefineOutcome out;
  auto r = PlanOnTwin(WrongRanking(), p.get(), o, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.pipelines_size(), 1);
  EXPECT_TRUE(out.candidates.empty());
  EXPECT_TRUE(r->alternatives.empty());
}

// A planner's name means its plan: by default (no K, no polish) the planner's own pick comes back although
// its runner-up simulates faster; asking for a polish simulates the pick once (K = 1) and polishes that.
TEST(Refine, TheDefaultIsThePlannersOwnPick) {
  const Problem p;
  RefineOutcome out;
  auto r = PlanOnTwin(WrongRanking(), p.get(), RefineOptions{}, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.pipelines_size(), 1);  // the one-device pick, not the faster two replicas
  EXPECT_EQ(out.k, 0u);
  EXPECT_TRUE(out.candidates.empty());
  EXPECT_FALSE(out.polished);
  RefineOptions polish;
  polish.polish = 1;
  auto q = PlanOnTwin(WrongRanking(), p.get(), polish, &out);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(out.k, 1u);
  ASSERT_EQ(out.candidates.size(), 1u);
  EXPECT_TRUE(out.polished);
  EXPECT_LE(out.polish.simulated, 1u);  // a budget of one simulation
}

TEST(Refine, OneSimulatesOnlyThePick) {
  const Problem p;
  RefineOptions o;
  o.k = 1;
  RefineOutcome out;
  auto r = PlanOnTwin(WrongRanking(), p.get(), o, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->plan.pipelines_size(), 1);
  ASSERT_EQ(out.candidates.size(), 1u);
  EXPECT_GT(out.candidates[0].simulated_s, 0);
  EXPECT_FALSE(out.changed());
}

TEST(Refine, TheFasterRunnerUpInTheSimulatorIsReturnedAndTheNotesSayBoth) {
  const Problem p;
  RefineOptions o;
  o.k = 4;  // more runners-up than the planner has: it gives one
  RefineOutcome out;
  auto r = PlanOnTwin(WrongRanking(), p.get(), o, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(out.candidates.size(), 2u);
  EXPECT_TRUE(out.changed());
  EXPECT_EQ(out.candidates[out.chosen].rank, 1u);
  EXPECT_EQ(r->plan.pipelines_size(), 2);
  EXPECT_EQ(r->cost_s, 2);
  EXPECT_EQ(r->plan.planner(), "wrong-ranking");
  // Each replica computes half the batch: well under the single device's time (within the DP sync).
  EXPECT_LT(out.candidates[1].simulated_s, 0.75 * out.candidates[0].simulated_s);
  std::string notes;
  for (const auto& n : r->stats.notes) notes += n + "\n";
  EXPECT_NE(notes.find("runner-up 1 simulates"), std::string::npos) << notes;
  EXPECT_NE(notes.find("instead of the planner's pick"), std::string::npos) << notes;
  EXPECT_TRUE(r->alternatives.empty());
}

// A runner-up that does not validate (a planner bug) is dropped with a note; the pick still comes back.
class BuggyRunnerUp : public planners::PlannerWithOptions<proto::ExhaustiveOptions> {
 public:
  std::string name() const override { return "buggy"; }
  Result<planners::PlannerResult> MakePlan(const planners::PlanningProblem&) const override {
    planners::PlannerResult r;
    r.plan = OneDevice();
    proto::Plan bad = OneDevice();
    bad.mutable_pipelines(0)->mutable_stages(0)->set_devices(0, 7);  // the cluster has devices 0 and 1
    r.alternatives.push_back({bad, 0.5});
    return r;
  }
};

TEST(Refine, ARunnerUpThatDoesNotValidateIsDroppedWithANote) {
  const Problem p;
  RefineOutcome out;
  RefineOptions o;
  o.k = 2;
  auto r = PlanOnTwin(BuggyRunnerUp(), p.get(), o, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(out.candidates.size(), 1u);
  EXPECT_EQ(r->plan.pipelines(0).stages(0).devices(0), 0u);
  std::string notes;
  for (const auto& n : r->stats.notes) notes += n + "\n";
  EXPECT_NE(notes.find("dropped runner-up 2"), std::string::npos) << notes;
}

// ---- exhaustive's proof of the simulator's optimum ----


// Two unlike machines over slow Ethernet, so that DP sync, pipelining and intra-stage DP all compete.
const char* kProofCluster = R"(kind: cluster
name: proof-three
nodes:
  - name: a100
    gpus: {type: a100-80gb, count: 2}
    fabric: {kind: nvlink}
    nic: {kind: ethernet, bandwidth_gbps: 10, latency_us: 20}
  - name: rtx3090
    gpus: {type: rtx3090, count: 1}
    fabric: {kind: pcie, bandwidth_gbyte_s: 24}
    nic: {kind: ethernet, bandwidth_gbps: 10, latency_us: 20}
network: {single_switch: {}}
)";

// Two nodes of two GPUs, each node behind one slow NIC: pipelines and gradient rings that cross nodes share
// it, so the search's NIC-load floors and pipeline round trips bind (planners/exhaustive/bounds.cc).
const char* kProofSharedNics = R"(kind: cluster
name: proof-shared-nics
nodes:
  - name: rtx3090
    gpus: {type: rtx3090, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 24}
    nic: {kind: ethernet, bandwidth_gbps: 1, latency_us: 20}
  - name: rtx4090
    gpus: {type: rtx4090, count: 2}
    fabric: {kind: pcie, bandwidth_gbyte_s: 32}
    nic: {kind: ethernet, bandwidth_gbps: 1, latency_us: 20}
network: {single_switch: {}}
)";

// An H100 and a T4 in two machines joined by 10 Mb/s: a GPU so far away that any plan using it is slower than
// the H100 alone (ExhaustiveProof.AGpuTooSlowToHelpIsLeftIdle derives it).
const char* kProofFarGpu = R"(kind: cluster
name: proof-far-gpu
nodes:
  - name: h100
    gpus: {type: h100, count: 1}
    nic: {kind: ethernet, bandwidth_gbps: 0.01, latency_us: 20}
  - name: t4
    gpus: {type: t4, count: 1}
    fabric: {kind: pcie, bandwidth_gbyte_s: 16}
    nic: {kind: ethernet, bandwidth_gbps: 0.01, latency_us: 20}
network: {single_switch: {}}
)";

struct ProofProblem {
  explicit ProofProblem(const char* yaml = kProofCluster, proto::DType dtype = proto::DTYPE_UNSPECIFIED)
      : cluster(Cluster(yaml)), model(Model()), training(Training(model, dtype)) {}
  static models::Cluster Cluster(const char* yaml) { return fixtures::ClusterFrom(yaml); }
  static models::TransformerModel Model() { return fixtures::LlamaTiny(); }
  static proto::Training Training(const models::TransformerModel& m, proto::DType dtype) {
    return fixtures::Resolved(m, 4, 128, dtype);
  }
  planners::PlanningProblem get() const { return {cluster, model, training, nullptr, {}}; }
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
};

double Simulate(const ProofProblem& p, const proto::Plan& plan) {
  sim::SimOptions so;
  auto r = sim::SimulateIteration(plan, {p.cluster, p.model, p.training}, so);
  if (!r.ok() || r->report.any_oom()) return std::numeric_limits<double>::infinity();
  return r->report.iteration_time_s();
}

uint32_t DevicesUsed(const proto::Plan& plan) {
  uint32_t n = 0;
  for (const auto& pipe : plan.pipelines()) {
    for (const auto& st : pipe.stages()) n += static_cast<uint32_t>(st.devices_size());
  }
  return n;
}

// `space`: the planner's options that set its space (default: plans may leave whole machines idle).
void CheckTheProofAgainstEveryPlan(const ProofProblem& p, const std::string& space = "") {
  auto planner = planners::CreatePlanner("exhaustive", space, "test options");
  ASSERT_TRUE(planner.ok());
  RefineOutcome out;
  auto proven = PlanOnTwin(**planner, p.get(), RefineOptions{}, &out);
  ASSERT_TRUE(proven.ok()) << proven.status().message();
  std::string notes;
  for (const auto& n : proven->stats.notes) notes += n + "\n";
  EXPECT_TRUE(out.proof);
  EXPECT_TRUE(out.proven) << notes;
  EXPECT_NE(notes.find("is the simulated optimum over exhaustive's space"), std::string::npos) << notes;
  const double best = Simulate(p, proven->plan);
  ASSERT_LT(best, std::numeric_limits<double>::infinity());
  EXPECT_GT(proven->space_lower_bound_s, 0) << notes;
  EXPECT_NE(notes.find("space bound: no plan of exhaustive's space simulates faster than"), std::string::npos);

  // Brute force: without bounds the proof search cuts nothing and returns every plan of the space with
  // its lower bound; each is simulated.
  auto all_planner = planners::CreatePlanner("exhaustive", space + "disable_bounds: true\n", "test options");
  ASSERT_TRUE(all_planner.ok());
  planners::PlanningProblem every = p.get();
  every.alternatives = planners::exhaustive::kEveryCandidate;
  auto all = planners::RunPlanner(**all_planner, every);
  ASSERT_TRUE(all.ok()) << all.status().message();
  std::string all_notes;
  for (const auto& n : all->stats.notes) all_notes += n + "\n";
  // The search's own floor (compute, gradient sync, optimizer step) never exceeded a plan's played bound.
  EXPECT_EQ(all_notes.find("stage floor exceeds"), std::string::npos) << all_notes;
  ASSERT_GT(all->alternatives.size(), 20u) << all_notes;
  size_t simulated = 0, idle = 0;
  for (const auto& alt : all->alternatives) {
    const double t = Simulate(p, alt.plan);
    if (t == std::numeric_limits<double>::infinity()) continue;
    ++simulated;
    // The space holds plans that leave whole machines idle: their bounds are checked like the others'.
    idle += DevicesUsed(alt.plan) < p.cluster.num_devices() ? 1 : 0;
    // The bound the proof prunes with is never above the simulated time, nor is the space's lower bound.
    EXPECT_LE(alt.lower_bound_s, t * (1 + 1e-9));
    EXPECT_LE(proven->space_lower_bound_s, t * (1 + 1e-9));
    EXPECT_GE(t, best * (1 - 1e-6)) << "a plan of the space simulates faster than the proven optimum";
  }
  EXPECT_GT(simulated, 20u);
  if (space.empty()) {
    EXPECT_GT(idle, 0u);
    EXPECT_LT(idle, simulated);
  }
  EXPECT_GT(out.ruled_out + static_cast<uint32_t>(all->alternatives.size()), out.simulated);
}

TEST(ExhaustiveProof, TheProvenPlanSimulatesNoSlowerThanEveryPlanOfTheSpace) {
  CheckTheProofAgainstEveryPlan(ProofProblem());
}

TEST(ExhaustiveProof, TheBoundsHoldWhereNodesShareOneSlowNic) {
  // Every device busy (the plans where both nodes' traffic meets the NICs; the idle ones are checked above).
  CheckTheProofAgainstEveryPlan(ProofProblem(kProofSharedNics), "use_every_device: true\n");
}

// Any plan that uses both machines of kProofFarGpu moves data over the 10 Mb/s link (1.25e6 B/s), each way:
//  - a pipeline across them sends each sequence's boundary tensor (128 tokens x 256 hidden x 2 bytes = 65,536 B)
//    forward and its gradient back, one after the other: at least 2 x 65,536 / 1.25e6 = 104.9 ms;
//  - pipelines on both machines hold every layer twice: the gradient rings carry half of the 3,426,560
//    parameters' 2-byte gradients out of each machine twice (reduce-scatter and all-gather, or the
//    all-reduce's two halves): at least 6,853,120 / 1.25e6 = 5.5 s.
// The H100 alone computes 4 x 128 tokens of a 3.4 M-parameter model (6 x 3.4 M x 512 = 10.5 GFLOP, 1 ms at
// 1% of its 989 TFLOPS) far faster. So the optimum leaves the T4 idle, and the space without idle machines
// cannot do better than 104.9 ms.
TEST(ExhaustiveProof, AGpuTooSlowToHelpIsLeftIdle) {
  const ProofProblem p(kProofFarGpu, proto::DTYPE_FP16);  // the T4 has no bf16
  constexpr double kTwoMachineFloor_s = 2 * 65536 / 1.25e6;
  auto planner = planners::CreatePlanner("exhaustive");
  ASSERT_TRUE(planner.ok());
  RefineOutcome out;
  auto r = PlanOnTwin(**planner, p.get(), RefineOptions{}, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::string notes;
  for (const auto& n : r->stats.notes) notes += n + "\n";
  EXPECT_TRUE(out.proven) << notes;
  EXPECT_EQ(DevicesUsed(r->plan), 1u) << notes;
  EXPECT_EQ(r->plan.pipelines(0).stages(0).devices(0), 0u) << notes;  // the H100
  const double alone = Simulate(p, r->plan);
  EXPECT_LT(alone, kTwoMachineFloor_s) << notes;

  auto every = planners::CreatePlanner("exhaustive", "use_every_device: true\n", "test options");
  ASSERT_TRUE(every.ok());
  RefineOutcome every_out;
  auto busy = PlanOnTwin(**every, p.get(), RefineOptions{}, &every_out);
  ASSERT_TRUE(busy.ok()) << busy.status().message();
  EXPECT_EQ(DevicesUsed(busy->plan), 2u);
  EXPECT_GE(Simulate(p, busy->plan), kTwoMachineFloor_s);
  // The proof over the space with idle machines, checked against every plan of it simulated.
  CheckTheProofAgainstEveryPlan(p);
}

// Where the proof does not cover the space (a node budget stops it) and beyond max_devices (here 2 of the 3
// GPUs), the space's lower bound comes from probe searches with fixed cuts: it is positive and no faster than
// the space's optimum (the full proof's, itself checked against every plan above).
TEST(ExhaustiveProof, TheSpaceBoundHoldsWhereTheProofStopsAndBeyondItsRange) {
  const ProofProblem p;
  auto full = planners::CreatePlanner("exhaustive");
  ASSERT_TRUE(full.ok());
  RefineOutcome proof;
  auto optimum = PlanOnTwin(**full, p.get(), RefineOptions{}, &proof);
  ASSERT_TRUE(optimum.ok()) << optimum.status().message();
  ASSERT_TRUE(proof.proven);
  const double fastest = Simulate(p, optimum->plan);
  for (const char* options : {"max_proof_nodes: 10\n", "max_devices: 2\n"}) {
    auto planner = planners::CreatePlanner("exhaustive", options, "test options");
    ASSERT_TRUE(planner.ok());
    RefineOutcome out;
    auto r = PlanOnTwin(**planner, p.get(), RefineOptions{}, &out);
    ASSERT_TRUE(r.ok()) << options << r.status().message();
    std::string notes;
    for (const auto& n : r->stats.notes) notes += n + "\n";
    EXPECT_FALSE(out.proven) << options << notes;
    EXPECT_GT(r->space_lower_bound_s, 0) << options << notes;
    EXPECT_LE(r->space_lower_bound_s, fastest * (1 + 1e-9)) << options << notes;
    EXPECT_NE(notes.find("probe cuts: "), std::string::npos) << options << notes;
    EXPECT_NE(notes.find("gap bound: "), std::string::npos) << options << notes;
  }
}

// Seeds (other planners' candidates) warm-start the proof and are candidates beside the space's plans. With
// the space narrowed (ZeRO-3 only, micro-batches of one sequence) the other planners' plans simulate faster
// than anything in it: the fastest seed is returned and named, and nothing simulated beats the result.
TEST(ExhaustiveProof, ASeedFasterThanTheSpaceIsReturnedAndNamed) {
  const ProofProblem p;
  auto planner = planners::CreatePlanner("exhaustive", "zero_stages: [3]\nmax_micro_batch_size: 1\n", "test options");
  ASSERT_TRUE(planner.ok()) << planner.status().message();
  auto megatron = planners::CreatePlanner("megatron");
  ASSERT_TRUE(megatron.ok());
  auto m = planners::RunPlanner(**megatron, p.get());
  ASSERT_TRUE(m.ok()) << m.status().message();
  proto::Plan seed = m->plan;
  seed.set_planner("a-user's-plan");
  planners::PlanningProblem seeded = p.get();
  seeded.seeds.push_back(seed);
  RefineOutcome out;
  auto r = PlanOnTwin(**planner, seeded, RefineOptions{}, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::string notes;
  for (const auto& n : r->stats.notes) notes += n + "\n";
  EXPECT_NE(notes.find("proof warm start: "), std::string::npos) << notes;
  const double got = Simulate(p, r->plan);
  double own = std::numeric_limits<double>::infinity(), seeds = own;
  size_t users = 0;
  for (const auto& c : out.candidates) {
    users += c.found_by == "a-user's-plan" ? 1 : 0;
    if (c.ruled_out || c.not_reached || !c.error.empty() || c.oom) continue;
    EXPECT_LE(got, c.simulated_s * (1 + 1e-9)) << notes;
    (c.found_by.empty() ? own : seeds) = std::min(c.found_by.empty() ? own : seeds, c.simulated_s);
  }
  EXPECT_EQ(users, 1u) << notes;  // the given seed, beside the registered planners' candidates
  // The proof's cut is the seeds' (the narrowed closed form finds nothing under them), never 0.
  EXPECT_EQ(notes.find("cut at 0 s"), std::string::npos) << notes;
  EXPECT_GT(r->space_lower_bound_s, 0.0) << notes;
  ASSERT_LT(seeds, own * (1 - 1e-6)) << "the narrowed space should lose to the other planners' plans\n" << notes;
  EXPECT_FALSE(out.candidates[out.chosen].found_by.empty()) << notes;
  EXPECT_NE(notes.find("(from "), std::string::npos) << notes;
  EXPECT_NEAR(got, seeds, seeds * 1e-9);
}

// With polishing on (as `hetsim plan` asks by default), exhaustive's proof is warm-started with every other
// planner's polished plan and its own choice is polished too: no planner's polished plan simulates faster
// than the reference. Without the polished seeds a planner whose polish leaves exhaustive's space (an
// uneven micro-batch count, a ZeRO stage with another layout) could beat it; on this 3-GPU problem
// exhaustive's own polish reaches as far, so the test checks the seeds are there and the order holds.
TEST(ExhaustiveProof, NoPlannersPolishedPlanBeatsThePolishedReference) {
  const ProofProblem p;
  RefineOptions options;
  options.polish = 30;
  auto exhaustive = planners::CreatePlanner("exhaustive");
  ASSERT_TRUE(exhaustive.ok());
  RefineOutcome out;
  auto r = PlanOnTwin(**exhaustive, p.get(), options, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::string notes;
  for (const auto& n : r->stats.notes) notes += n + "\n";
  // The warm start names how many polished plans it added: at least the one improved below.
  const auto at = notes.find(" polished plans");
  ASSERT_NE(at, std::string::npos) << notes;
  const auto from = notes.rfind("and ", at);
  ASSERT_NE(from, std::string::npos) << notes;
  EXPECT_GT(std::stoi(notes.substr(from + 4, at - from - 4)), 0) << notes;
  EXPECT_TRUE(out.polished) << notes;
  const double reference = Simulate(p, r->plan);
  EXPECT_NEAR(reference, out.polish.end_s, reference * 1e-9) << notes;
  size_t polished = 0;
  for (const std::string& name : planners::PlannerNames()) {
    if (name == "exhaustive" || name == "twin") continue;  // twin: its own search, not a warm-start seed
    auto planner = planners::CreatePlanner(name);
    ASSERT_TRUE(planner.ok());
    RefineOutcome theirs;
    auto q = PlanOnTwin(**planner, p.get(), options, &theirs);
    if (!q.ok()) continue;
    polished += theirs.polished && !theirs.polish.kept.empty() ? 1 : 0;
    EXPECT_LE(reference, Simulate(p, q->plan) * (1 + 1e-9)) << name << "\n" << notes;
  }
  EXPECT_GT(polished, 0u);  // some planner's plan was improved by polishing, so the seeds mattered
}

// The proof search's work budget is counted, not timed: a tiny one stops it unproven, says so, and gives the
// same plan on every run.
TEST(ExhaustiveProof, ANodeBudgetStopsTheProofTheSameWayEveryTime) {
  const ProofProblem p;
  auto planner = planners::CreatePlanner("exhaustive", "max_proof_nodes: 10\n", "test options");
  ASSERT_TRUE(planner.ok()) << planner.status().message();
  std::string first;
  for (int run = 0; run < 2; ++run) {
    RefineOutcome out;
    auto r = PlanOnTwin(**planner, p.get(), RefineOptions{}, &out);
    ASSERT_TRUE(r.ok()) << r.status().message();
    std::string notes;
    for (const auto& n : r->stats.notes) notes += n + "\n";
    EXPECT_FALSE(out.proven) << notes;
    EXPECT_NE(notes.find("budget of 10 layer-split nodes reached"), std::string::npos) << notes;
    if (run == 0) first = r->plan.SerializeAsString();
    else EXPECT_EQ(r->plan.SerializeAsString(), first);
  }
}

// The proof search runs its structures on threads and takes them in the enumeration's order, budgets
// included: the proof list (its plans, their order and bounds) and every count are the same for any thread
// count, whether the proof completes or a node or play budget stops it part-way through a structure.
std::string ProofList(const ProofProblem& p, const std::string& options, uint64_t* nodes = nullptr,
                      uint64_t* plays = nullptr) {
  auto planner = planners::CreatePlanner("exhaustive", options, "test options");
  EXPECT_TRUE(planner.ok()) << planner.status().message();
  if (!planner.ok()) return "";
  planners::PlanningProblem problem = p.get();
  problem.alternatives = planners::exhaustive::kEveryCandidate;
  auto r = (*planner)->MakePlan(problem);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return "";
  std::string list = r->plan.SerializeAsString() + "|" + std::to_string(r->complete_below_s) + "\n";
  for (const auto& alt : r->alternatives) {
    list += alt.plan.SerializeAsString() + "|" + std::to_string(alt.lower_bound_s) + "\n";
  }
  for (const auto& n : r->stats.notes) {
    if (n.find("proof search") == std::string::npos) continue;
    // "... 123 layer-split nodes explored (2 threads; ...)": the thread count is the one thing that differs.
    const size_t threads = n.find(" threads;");
    list += threads == std::string::npos ? n : n.substr(0, n.rfind('(', threads));
    list += "\n";
    unsigned long long v = 0;
    const size_t covered = n.find("covered, ");
    if (nodes && covered != std::string::npos && std::sscanf(n.c_str() + covered + 9, "%llu layer-split", &v) == 1) {
      *nodes = v;
    }
    const size_t cut = n.find("s): ");
    if (plays && cut != std::string::npos && std::sscanf(n.c_str() + cut + 4, "%llu plans played", &v) == 1) {
      *plays = v;
    }
  }
  return list;
}

TEST(ExhaustiveProof, TheResultIsTheSameOnEveryThreadCount) {
  const ProofProblem p(kProofSharedNics);
  // The default space (the node sets one after another: both nodes, then each alone) proven complete.
  const std::string idle = ProofList(p, "proof_threads: 1\n");
  ASSERT_NE(idle.find("every other plan of the space is ruled out"), std::string::npos) << idle;
  for (const char* threads : {"2", "5"}) {
    EXPECT_EQ(ProofList(p, std::string("proof_threads: ") + threads + "\n"), idle) << threads << " threads";
  }
  // Every device busy: the incumbent is slower, so the proof plays enough plans that halving the budgets
  // stops it part-way through a structure.
  const std::string space = "use_every_device: true\n";
  uint64_t nodes = 0, plays = 0;
  const std::string complete = ProofList(p, space + "proof_threads: 1\n", &nodes, &plays);
  ASSERT_NE(complete.find("every other plan of the space is ruled out"), std::string::npos) << complete;
  ASSERT_GT(nodes, 100u);
  ASSERT_GT(plays, 10u) << nodes << " nodes, " << plays << " plays";
  for (const char* threads : {"2", "5"}) {
    EXPECT_EQ(ProofList(p, space + "proof_threads: " + threads + "\n"), complete) << threads << " threads";
  }
  // Budgets that stop the search part-way: the same plans kept, the same counts, on every thread count.
  for (const std::string& budget : {space + "max_proof_nodes: " + std::to_string(nodes / 2) + "\n",
                                   space + "max_bound_plays: " + std::to_string(plays / 2) + "\n"}) {
    const std::string one = ProofList(p, budget + "proof_threads: 1\n");
    EXPECT_NE(one.find("reached: the space is not covered"), std::string::npos) << one;
    for (const char* threads : {"2", "5"}) {
      EXPECT_EQ(ProofList(p, budget + "proof_threads: " + threads + "\n"), one) << budget << threads << " threads";
    }
  }
}

TEST(ExhaustiveProof, AnExplicitKKeepsTheTopListMeaning) {
  const ProofProblem p;
  auto planner = planners::CreatePlanner("exhaustive");
  ASSERT_TRUE(planner.ok());
  RefineOptions o;
  o.k = 4;
  RefineOutcome out;
  auto r = PlanOnTwin(**planner, p.get(), o, &out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(out.proof);
  EXPECT_LE(out.candidates.size(), 4u);
}

}  // namespace
}  // namespace hetsim::planning
