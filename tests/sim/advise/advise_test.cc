// `hetsim advise` (sim/advise/advise.h): the decision on hand-made outcomes, spot series and composed
// traces derived by hand, config errors with their lines, and on a small space the pruned search's
// recommendation against the exhaustive evaluation of the same space.
#include "sim/advise/advise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "models/cluster.h"
#include "sim/advise/advise_internal.h"
#include "sim/advise/availability.h"
#include "sim/advise/config.h"
#include "traces/trace.h"

namespace hetsim::advise {
namespace {

namespace fs = std::filesystem;

std::string Dir() {
  const auto dir = fs::temp_directory_path() / ("hetsim-advise-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir.string();
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = Dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

Outcome O(double t, double c) {
  Outcome o;
  o.ok = true;
  o.time_s = t;
  o.cost_usd = c;
  return o;
}

TEST(AdviseDecision, ParetoFrontKeepsTheUndominatedAndTies) {
  // A (10, 100) and B (20, 50) trade off; C (15, 120) is dominated by A; D ties B exactly (neither better);
  // E failed; F never finishes.
  Outcome e;
  std::vector<Outcome> o = {O(10, 100), O(20, 50), O(15, 120), O(20, 50), e, O(INFINITY, INFINITY)};
  EXPECT_EQ(ParetoFront(o), (std::vector<bool>{true, true, false, true, false, false}));
}

TEST(AdviseDecision, ABoundIsDominatedOnlyWithOneStrictImprovement) {
  const std::vector<Outcome> o = {O(10, 100), O(20, 50)};
  EXPECT_FALSE(BoundDominated(12, 60, o));  // faster than B, cheaper than A
  EXPECT_TRUE(BoundDominated(25, 60, o));   // B is no slower and no costlier, and better in both
  EXPECT_TRUE(BoundDominated(20, 51, o));   // B: equal time, cheaper
  EXPECT_FALSE(BoundDominated(20, 50, o));  // B equals the bound: a configuration there could tie it
}

TEST(AdviseDecision, RecommendationMeetsTheLimitsThenBreaksTiesOnTheOtherMetric) {
  const std::vector<Outcome> o = {O(10, 100), O(20, 50), O(15, 120), O(20, 50), O(18, 50)};
  // Cheapest overall: 50 three times; the shortest of those is index 4 (18 s).
  EXPECT_EQ(Recommend(o, "cheapest", INFINITY, INFINITY), 4);
  // Within a 16 s deadline only A and C: A is cheaper.
  EXPECT_EQ(Recommend(o, "cheapest", 16, INFINITY), 0);
  // Soonest within a budget of 60: 18 s (index 4) beats the two 20 s ones.
  EXPECT_EQ(Recommend(o, "soonest", INFINITY, 60), 4);
  EXPECT_EQ(Recommend(o, "soonest", INFINITY, INFINITY), 0);
  EXPECT_EQ(Recommend(o, "cheapest", 5, INFINITY), -1);
}

proto::Trace HandSpotTrace() {
  // Nodes 0-1 from 0 s, 2-3 from 100 s, node 0 warned at 200 s and gone at 210 s; 400 s long.
  proto::Trace t;
  t.set_starts_empty(true);
  t.set_duration_s(400);
  auto add = [&](double time, std::vector<uint32_t> nodes, proto::TraceEvent::Kind kind, double notice = 0) {
    auto* e = t.add_events();
    e->set_time_s(time);
    e->set_kind(kind);
    e->set_notice_s(notice);
    for (uint32_t n : nodes) e->add_nodes(n);
  };
  add(0, {0, 1}, proto::TraceEvent::KIND_CAPACITY_ADDED);
  add(100, {2, 3}, proto::TraceEvent::KIND_CAPACITY_ADDED);
  add(200, {0}, proto::TraceEvent::KIND_PREEMPTION, 10);
  return t;
}

TEST(AdviseAvailability, SpotSeriesIsTheFractionOfThePeakAlive) {
  const SpotSeries s = SeriesOfTrace(HandSpotTrace());
  EXPECT_EQ(s.peak, 4u);
  EXPECT_EQ(s.duration_s, 400);
  EXPECT_EQ(s.notice_s, 10);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0], std::make_pair(0.0, 0.5));
  EXPECT_EQ(s.steps[1], std::make_pair(100.0, 1.0));
  EXPECT_EQ(s.steps[2], std::make_pair(210.0, 0.75));
  EXPECT_EQ(s.FractionAt(150, 0), 1.0);
  EXPECT_EQ(s.FractionAt(50, 380), 0.5);   // 430 wraps to 30
  EXPECT_EQ(s.FractionAt(0, 300), 0.75);
}

models::Cluster TwoGroupCluster() {
  proto::Cluster c;
  c.set_name("hand");
  auto* a = c.add_nodes();
  a->set_name("od");
  a->set_count(2);
  a->mutable_gpus()->set_type("a100-80gb");
  a->mutable_gpus()->set_count(1);
  a->mutable_nic()->set_kind(proto::Nic::KIND_ROCE);
  a->mutable_nic()->set_bandwidth_gbps(100);
  auto* b = c.add_nodes();
  b->set_name("spot");
  b->set_count(4);
  b->mutable_gpus()->set_type("v100");
  b->mutable_gpus()->set_count(2);
  b->mutable_nic()->set_kind(proto::Nic::KIND_ROCE);
  b->mutable_nic()->set_bandwidth_gbps(100);
  auto built = models::Cluster::Build(c, "hand");
  EXPECT_TRUE(built.ok()) << built.status().message();
  return std::move(built).value();
}

TEST(AdviseAvailability, ComposedTraceRentsOnDemandAlwaysAndSpotWhileGranted) {
  const models::Cluster cluster = TwoGroupCluster();
  // The spot series: all 4 nodes for the first 100 s of every 200 s, then half. Over a window of two whole
  // periods the mean is 3 nodes whatever the offset: 3 nodes x 2 GPUs x $1 + 2 on-demand GPUs x $2 = $10/h.
  SpotSeries s;
  s.steps = {{0, 1.0}, {100, 0.5}};
  s.duration_s = 200;
  s.notice_s = 30;
  s.peak = 4;
  std::vector<GroupCost> groups(2);
  groups[0] = {2, 1, 2.0, 2.0, nullptr, 0};
  groups[1] = {4, 2, 1.0, 3.0, &s, 0};
  for (uint64_t seed : {1, 2, 3}) {
    double rent = 0;
    auto t = ComposeTrace(cluster, "hand", groups, seed, 400, &rent);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_NEAR(rent, 10.0, 1e-9) << "seed " << seed;
    EXPECT_TRUE(t->starts_empty());
    // The on-demand nodes are added at 0; spot nodes are 2..5 and only ever 2..5.
    ASSERT_GT(t->events_size(), 0);
    EXPECT_EQ(t->events(0).time_s(), 0);
    for (const auto& e : t->events()) {
      for (uint32_t n : e.nodes()) {
        if (e.kind() == proto::TraceEvent::KIND_PREEMPTION) {
          EXPECT_GE(n, 2u);
          EXPECT_LE(e.notice_s(), 30.0);
        }
        EXPECT_LT(n, 6u);
      }
    }
    EXPECT_TRUE(traces::CheckTrace(*t, cluster, "composed").ok());
  }
}

TEST(AdviseAvailability, FailuresFollowEachGroupsRateScale) {
  const models::Cluster cluster = TwoGroupCluster();
  std::vector<GroupCost> groups(2);
  groups[0] = {2, 1, 2.0, 2.0, nullptr, 0};     // no failures
  groups[1] = {4, 2, 1.0, 1.0, nullptr, 1000};  // 8 GPUs at 1000x Llama 3's rates
  auto t = ComposeTrace(cluster, "hand", groups, 7, 10 * 86400, nullptr);
  ASSERT_TRUE(t.ok()) << t.status().message();
  // 419 interruptions per 16,384 GPUs per 54 days x 1000 x 8 GPUs x 10 days = 37.9 expected.
  EXPECT_GT(t->events_size(), 15);
  EXPECT_LT(t->events_size(), 70);
  for (const auto& e : t->events()) {
    for (uint32_t n : e.nodes()) EXPECT_GE(n, 2u) << "a failure on the failure-free group";
    for (uint32_t d : e.devices()) EXPECT_GE(d, 2u) << "a failure on the failure-free group";
  }
}

TEST(AdviseConfig, ErrorsNameFileLineAndKey) {
  const std::string path = Write("bad.yaml",
                                 "kind: advise\n"                              // 1
                                 "name: bad\n"                                 // 2
                                 "model: gpt3-1.3b\n"                          // 3
                                 "tokens: 1e9\n"                               // 4
                                 "objective: fastest\n"                        // 5
                                 "gpus:\n"                                     // 6
                                 "  - {type: v100, nodes: [1]}\n"              // 7
                                 "  - {type: h1000, nodes: [1]}\n"             // 8
                                 "  - {type: t4, spot_nodes: [2]}\n"           // 9
                                 "checkpoint_intervals: [young-daly, soon]\n"  // 10
                                 "policies: [{name: hot-spare}]\n");           // 11
  auto c = LoadConfig(path);
  ASSERT_FALSE(c.ok());
  const std::string msg = c.status().message();
  EXPECT_NE(msg.find(path + ":5:12: objective: unknown objective 'fastest'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":8:12: gpus[1].type: unknown GPU type 'h1000'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":9:5: gpus[2].spot_trace: spot nodes need a spot trace"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":10:36: checkpoint_intervals[1]: 'soon'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path + ":11:12: policies[0].name: unknown recovery policy 'hot-spare'"), std::string::npos) << msg;
}

TEST(AdviseConfig, SchemaErrorsAndSizeLimits) {
  auto c = LoadConfig(Write("schema.yaml", "kind: advise\nname: s\nmodel: gpt3-1.3b\ntokens: -1\ngpus: [{type: v100, nodes: [1]}]\n"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(":4:9: tokens:"), std::string::npos) << c.status().message();
  // 40 x 40 x 40 compositions.
  std::string counts = "[";
  for (int i = 0; i < 40; ++i) counts += (i ? ", " : "") + std::to_string(i);
  counts += "]";
  auto big = LoadConfig(Write("big.yaml", "kind: advise\nname: b\nmodel: gpt3-1.3b\ntokens: 1e9\ngpus:\n  - {type: v100, nodes: " +
                                              counts + "}\n  - {type: t4, nodes: " + counts + "}\n  - {type: a10, nodes: " +
                                              counts + "}\n"));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("64000 compositions"), std::string::npos) << big.status().message();
}

TEST(AdviseConfig, DefaultsAreEveryPlannerAndPolicyThatApplies) {
  auto c = LoadConfig(Write("defaults.yaml", "kind: advise\nname: d\nmodel: gpt3-1.3b\ntokens: 1e9\n"
                                             "gpus: [{type: v100, nodes: [1, 2]}]\n"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  std::vector<std::string> planners;
  for (const auto& p : c->planners) planners.push_back(p.name);
  EXPECT_EQ(planners, (std::vector<std::string>{"metis", "hexiscale", "autohet", "hethub", "hetu", "megatron"}));
  EXPECT_EQ(c->objective, "cheapest");
  EXPECT_EQ(c->seeds, 3u);
  EXPECT_EQ(c->window_s, 14 * 86400.0);
  // Per pair: checkpoint-restart, hot-spares, in-memory, elastic, varuna (5) plus its planner's own recovery for
  // autohet and hetu, each at the three default intervals.
  const internal::Space space = internal::Enumerate(*c);
  ASSERT_EQ(space.groups.size(), 2u * 6);
  std::map<std::string, size_t> configs_of;
  for (const auto& g : space.groups) configs_of[c->planners[g.planner].name] = g.configs.size();
  EXPECT_EQ(configs_of["megatron"], 15u);
  EXPECT_EQ(configs_of["metis"], 15u);
  EXPECT_EQ(configs_of["autohet"], 18u);
  EXPECT_EQ(configs_of["hetu"], 18u);
  EXPECT_EQ(space.points, (4u * 15 + 2 * 18) * 2 * 3);
}

// The small space: two GPU types (a V100 node always, 0 or 1 more V100 nodes, 0 or 1 spot T4 node on a hand
// spot trace), megatron, two policies, two intervals, two seeds.
std::string SmallConfig() {
  const std::string trace = Write("spot.csv",
                                  "0,add,i-1\n0,add,i-2\n3600000,remove,i-2\n7200000,add,i-2\n9000000,remove,i-1\n"
                                  "10800000,add,i-1\n14400000,remove,i-2\n");
  return Write("small.yaml", "kind: advise\n"
                             "name: small\n"
                             "model: gpt3-1.3b\n"
                             "tokens: 2e9\n"
                             "training: {global_batch_size: 32, seq_len: 1024, dtype: fp16}\n"
                             "gpus:\n"
                             "  - {type: v100, gpus_per_node: 4, nodes: [1, 2], failure_rate_scale: 200}\n"
                             "  - {type: t4, gpus_per_node: 4, nodes: [0], spot_nodes: [0, 1], failure_rate_scale: 200,\n"
                             "     spot_trace: {file: spot.csv, format: bamboo}}\n"
                             "planners: [{name: megatron, refine: 1}]\n"
                             "policies: [{name: checkpoint-restart}, {name: hot-spares}]\n"
                             "spares: [1]\n"
                             "checkpoint_intervals: [young-daly, '3600']\n"
                             "seeds: 2\n"
                             "window_days: 2\n"
                             "restart_s: 60\n");
}

std::map<std::string, std::string> Column(const std::string& csv_path, const std::string& key, const std::string& col) {
  std::ifstream in(csv_path);
  std::string header;
  std::getline(in, header);
  auto split = [](const std::string& line) {
    std::vector<std::string> out;
    std::string cur;
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"') quoted = !quoted;
      else if (ch == ',' && !quoted) {
        out.push_back(cur);
        cur.clear();
      } else {
        cur += ch;
      }
    }
    out.push_back(cur);
    return out;
  };
  const auto names = split(header);
  const size_t k = std::find(names.begin(), names.end(), key) - names.begin();
  const size_t v = std::find(names.begin(), names.end(), col) - names.begin();
  std::map<std::string, std::string> out;
  for (std::string line; std::getline(in, line);) {
    const auto cells = split(line);
    if (k < cells.size() && v < cells.size()) out[cells[k]] = cells[v];
  }
  return out;
}

TEST(AdviseSearch, PruningKeepsTheRecommendationAndTheFrontOfTheExhaustiveEvaluation) {
  auto c = LoadConfig(SmallConfig());
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->candidates.size(), 4u);  // {1, 2} V100 nodes x {0, 1} T4 spot nodes
  AdviseOptions opt;
  opt.figures = false;
  opt.progress = false;
  std::ostringstream out, err;
  opt.out_dir = Dir() + "/pruned";
  ASSERT_TRUE(RunAdvise(*c, opt, out, err).ok()) << err.str();
  opt.out_dir = Dir() + "/all";
  opt.prune = false;
  ASSERT_TRUE(RunAdvise(*c, opt, out, err).ok()) << err.str();
  const std::string pruned = Dir() + "/pruned/configurations.csv", all = Dir() + "/all/configurations.csv";
  const auto rec_p = Column(pruned, "config", "recommended"), rec_a = Column(all, "config", "recommended");
  const auto front_p = Column(pruned, "config", "pareto"), front_a = Column(all, "config", "pareto");
  const auto status_p = Column(pruned, "config", "status"), status_a = Column(all, "config", "status");
  const auto cost_p = Column(pruned, "config", "cost_usd_mean"), cost_a = Column(all, "config", "cost_usd_mean");
  ASSERT_EQ(rec_a.size(), 4u * 2 * 2);  // candidates x policies x intervals
  EXPECT_EQ(rec_p, rec_a) << "the pruned search recommends what the exhaustive evaluation does";
  EXPECT_EQ(front_p, front_a) << "and finds the same Pareto front";
  size_t n_pruned = 0, recommended = 0;
  for (const auto& [config, status] : status_p) {
    EXPECT_EQ(status_a.at(config), "ok");
    if (status == "pruned") ++n_pruned;
    if (status == "ok") {
      EXPECT_EQ(cost_p.at(config), cost_a.at(config)) << "config " << config;
    }
    recommended += rec_p.at(config) == "1";
  }
  EXPECT_EQ(recommended, 1u);
  EXPECT_GT(n_pruned, 0u) << "the bound prunes something on this space";
  // The advice names the one type with no measured basis in fp16 (the V100; the T4 has a measured profile).
  std::ifstream md(Dir() + "/pruned/recommendation.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Compute basis: v100 rests on no measurement under calibration default"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("t4 rest"), std::string::npos) << text;
  // A rerun with --resume replays nothing new and gives the same table.
  opt.out_dir = Dir() + "/pruned";
  opt.prune = true;
  opt.resume = true;
  ASSERT_TRUE(RunAdvise(*c, opt, out, err).ok()) << err.str();
  EXPECT_EQ(Column(pruned, "config", "cost_usd_mean"), cost_p);
}

// At its time limit a run stops planning and replaying, reports what it computed marked partial, fails, and
// --resume (without the limit) finishes it with the results of a run that had none.
TEST(AdviseSearch, ATimeLimitStopsTheRunAndResumeFinishesIt) {
  auto c = LoadConfig(SmallConfig());
  ASSERT_TRUE(c.ok()) << c.status().message();
  AdviseOptions opt;
  opt.figures = false;
  opt.progress = false;
  opt.prune = false;
  opt.out_dir = Dir() + "/limited";
  opt.time_limit_s = 1e-6;  // over before the first plan starts
  std::ostringstream out, err;
  const Status s = RunAdvise(*c, opt, out, err);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("stopped at the time limit"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("16 of 16 configurations not computed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--resume"), std::string::npos) << s.message();
  std::ifstream md(opt.out_dir + "/recommendation.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("**Partial result**: the run stopped at its time limit"), std::string::npos) << text;
  const auto reason = Column(opt.out_dir + "/configurations.csv", "config", "reason");
  ASSERT_EQ(reason.size(), 16u);
  EXPECT_NE(reason.at("0").find("not computed before the time limit"), std::string::npos) << reason.at("0");
  // Resumed without a limit: every configuration, as a run without a limit gives them.
  opt.time_limit_s = 0;
  opt.resume = true;
  ASSERT_TRUE(RunAdvise(*c, opt, out, err).ok()) << err.str();
  opt.out_dir = Dir() + "/unlimited";
  opt.resume = false;
  ASSERT_TRUE(RunAdvise(*c, opt, out, err).ok()) << err.str();
  EXPECT_EQ(Column(Dir() + "/limited/configurations.csv", "config", "cost_usd_mean"),
            Column(Dir() + "/unlimited/configurations.csv", "config", "cost_usd_mean"));
}

// --resume keys a point by what its files hold, not by their names: rewriting the spot trace under the same
// name changes the ids of the points that rent spot nodes, and only theirs.
TEST(AdviseResume, AnEditedSpotTraceChangesThePointsThatUseIt) {
  const auto ids = [] {
    auto c = LoadConfig(SmallConfig());
    EXPECT_TRUE(c.ok()) << c.status().message();
    std::map<std::string, bool> out;  // id -> whether its candidate rents spot nodes
    if (!c.ok()) return out;
    const internal::Space space = internal::Enumerate(*c);
    for (const auto& g : space.groups) {
      bool spot = false;
      for (const auto& grp : c->candidates[g.candidate].groups) spot = spot || grp.spot != nullptr;
      for (const auto& slot : g.configs) out[internal::PointId(*c, g, slot, 0)] = spot;
    }
    return out;
  };
  const auto before = ids();
  // SmallConfig writes spot.csv; the same name with another preemption time:
  const std::string config = SmallConfig();
  Write("spot.csv", "0,add,i-1\n0,add,i-2\n3000000,remove,i-2\n7200000,add,i-2\n9000000,remove,i-1\n"
                    "10800000,add,i-1\n14400000,remove,i-2\n");
  auto c = LoadConfig(config);
  ASSERT_TRUE(c.ok()) << c.status().message();
  const internal::Space space = internal::Enumerate(*c);
  size_t spot_points = 0, kept = 0;
  for (const auto& g : space.groups) {
    bool spot = false;
    for (const auto& grp : c->candidates[g.candidate].groups) spot = spot || grp.spot != nullptr;
    for (const auto& slot : g.configs) {
      const std::string id = internal::PointId(*c, g, slot, 0);
      if (spot) {
        ++spot_points;
        EXPECT_EQ(before.count(id), 0u) << "a spot point kept its id after its trace changed";
      } else {
        kept += before.count(id);
        EXPECT_EQ(before.count(id), 1u) << "a point without spot nodes changed its id";
      }
    }
  }
  EXPECT_GT(spot_points, 0u);
  EXPECT_GT(kept, 0u);
}

}  // namespace
}  // namespace hetsim::advise
