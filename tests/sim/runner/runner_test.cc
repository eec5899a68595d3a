// Manifest loading, validation errors and sweep expansion (sim/runner/manifest.h).
#include "sim/runner/manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace hetsim::runner {
namespace {

std::string Write(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "hetsim-runner-test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

const char* kBase = R"(kind: experiment
name: t
clusters: [hexiscale-case-study]
models: [llama-tiny]
training: {global_batch_size: 8, seq_len: 128}
planners: [{name: megatron}]
)";

TEST(Manifest, SweepExpandsCartesianWithZipsAndRepeats) {
  // 2 planners × 3 zipped (batch, seq) pairs × 2 bandwidths × 2 repeats = 24 points.
  auto m = LoadManifest(std::string(HETSIM_SOURCE_DIR) + "/tests/data/experiments/sweep.yaml");
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->points.size(), 24u);
  // Order: cluster, model, then the sweep axes in manifest order, planner, repeat innermost.
  EXPECT_EQ(m->points[0].axes, (std::vector<std::pair<std::string, std::string>>{
                                   {"global_batch_size", "8"}, {"seq_len", "64"}, {"nic_bandwidth_gbps", "10"}}));
  EXPECT_EQ(m->points[0].planner, 0u);
  EXPECT_EQ(m->points[0].repeat, 0u);
  EXPECT_EQ(m->points[1].repeat, 1u);
  EXPECT_EQ(m->points[1].seed, m->points[0].seed + 1);
  EXPECT_EQ(m->points[2].planner, 1u);
  EXPECT_EQ(m->points[4].axes[2].second, "100");
  EXPECT_EQ(m->points[8].axes[0].second, "16");
  EXPECT_EQ(m->points[8].axes[1].second, "128");  // zipped with the batch
  std::set<std::string> ids;
  for (const auto& p : m->points) ids.insert(p.id);
  EXPECT_EQ(ids.size(), 24u) << "point ids must be unique";
  auto again = LoadManifest(std::string(HETSIM_SOURCE_DIR) + "/tests/data/experiments/sweep.yaml");
  EXPECT_EQ(again->points[17].id, m->points[17].id) << "ids must be stable";
}

TEST(Manifest, AxesApplyToThePoint) {
  auto m = LoadManifest(std::string(HETSIM_SOURCE_DIR) + "/tests/data/experiments/sweep.yaml");
  ASSERT_TRUE(m.ok());
  auto s = SetupPoint(*m, m->points[23]);  // batch 32, seq 256, 100 Gb/s
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->training.global_batch_size(), 32u);
  EXPECT_EQ(s->training.seq_len(), 256u);
  for (const auto& n : s->cluster->nodes()) EXPECT_EQ(n.nic.bandwidth_gbps(), 100.0);
}

struct BadCase {
  const char* name;
  std::string extra;    // appended to kBase
  const char* expect;   // substring of the error
};

TEST(Manifest, InvalidManifestsAreRejectedBeforeAnythingRuns) {
  const std::vector<BadCase> cases = {
      {"unknown-key", "sweeep: []\n", "unknown key 'sweeep'; did you mean 'sweep'?"},
      {"unknown-axis", "sweep: [{name: nic_bandwith_gbps, values: ['1']}]\n",
       "sweep[0].name: unknown axis 'nic_bandwith_gbps'; did you mean 'nic_bandwidth_gbps'?"},
      {"bad-number", "sweep: [{name: global_batch_size, values: ['many']}]\n",
       "sweep[0].values[0]: expected a positive number, found 'many'"},
      {"zip-lengths", "sweep: [{name: global_batch_size, values: ['8', '16'], zip: a}, {name: seq_len, values: ['64'], zip: a}]\n",
       "zipped axes ('a') need the same number of values"},
      {"unknown-cluster-value", "sweep: [{name: cluster, values: [hexiscale-setting9]}]\n", "is not in the manifest's clusters"},
      {"figure-metric", "figures: [{name: f, kind: bar, x: cluster, y: tokens_per_sec}]\n",
       "figures[0].y: 'tokens_per_sec' is not a metric; did you mean 'tokens_per_s'?"},
      {"figure-column", "figures: [{name: f, kind: bar, x: clustr, y: mfu}]\n",
       "figures[0].x: 'clustr' is not an input column; did you mean 'cluster'?"},
      {"fidelity", "simulation: {fidelity: medium}\n", "simulation.fidelity: unknown level 'medium'"},
      {"duplicate-axis", "sweep: [{name: seq_len, values: ['64']}, {name: seq_len, values: ['128']}]\n",
       "axis 'seq_len' appears twice"},
      {"recompute", "sweep: [{name: recompute, values: [partial]}]\n", "expected none, selective, full or op_selective"},
      {"replay-axis-alone", "sweep: [{name: policy, values: [elastic]}]\n",
       "sweep[0].name: axis 'policy' needs a `replay:` section"},
      {"replay-policy", "replay: {trace: llama3, policies: [{name: hotspares}]}\n",
       "replay.policies[0].name: unknown recovery policy 'hotspares'"},
      {"replay-option", "replay: {trace: llama3, policies: [{name: checkpoint-restart, spares: 4}]}\n",
       "replay.policies[0].spares: policy checkpoint-restart does not take it"},
      {"replay-label", "replay: {trace: llama3, policies: [{name: elastic}, {name: varuna, label: elastic}]}\n",
       "label 'elastic' is used twice"},
      {"replay-policy-value", "replay: {trace: llama3, policies: [{name: elastic}]}\nsweep: [{name: policy, values: [varuna]}]\n",
       "policy 'varuna' is not one of replay.policies' labels"},
      {"replay-interval", "replay: {trace: llama3}\nsweep: [{name: checkpoint_interval, values: [often]}]\n",
       "expected seconds (e.g. 1800) or young-daly"},
      {"replay-figure", "figures: [{name: f, kind: replay}]\n", "a replay figure needs a `replay:` section"},
      {"empty-axis", "sweep: [{name: seq_len, values: []}]\n", "sweep[0].values: the list is empty"},
      {"huge-batch", "sweep: [{name: global_batch_size, values: ['2147483648']}]\n",
       "2147483648 is beyond what hetsim models for global_batch_size (at most 16777216)"},
      {"fractional-batch", "sweep: [{name: global_batch_size, values: ['8.5']}]\n", "expected a whole number"},
  };
  for (const auto& c : cases) {
    auto m = LoadManifest(Write(std::string(c.name) + ".yaml", kBase + c.extra));
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << c.name << ":\n" << m.status().message();
    EXPECT_NE(m.status().message().find(c.name), std::string::npos) << c.name << ": the error must name the file";
  }
}

TEST(Manifest, UnknownPlannerAndBadOptionsAreNamed) {
  auto m = LoadManifest(Write("planner.yaml", std::string(kBase).replace(std::string(kBase).find("planners: [{name: megatron}]"),
                                                                          28, "planners: [{name: megatorn}]")));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("planners[0].name"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("megatron"), std::string::npos) << m.status().message();
  auto o = LoadManifest(Write("options.yaml", std::string(kBase).replace(std::string(kBase).find("planners: [{name: megatron}]"),
                                                                          28, "planners: [{name: megatron, options: {no_such_knob: 1}}]")));
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("no_such_knob"), std::string::npos) << o.status().message();
}

// A fixed plan is checked against the clusters its points run on: every cluster when nothing pairs them, only
// its partner when a zipped sweep pairs planners with clusters (experiments/hetu/paper_strategies.yaml). The
// case-study plan uses devices up to 7 and cpu-4 has 4 GPUs.
TEST(Manifest, APlannerEntryHasANameOrAPythonClassNotBothNorNeither) {
  const std::string base(kBase);
  const size_t at = base.find("planners: [{name: megatron}]");
  auto with = [&](const std::string& planners) { return std::string(base).replace(at, 28, planners); };
  auto both = LoadManifest(Write("both.yaml", with("planners: [{name: megatron, python: 'm:C'}]")));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("planners[0].python: a planner entry has `name` or `python`, not both"),
            std::string::npos) << both.status().message();
  auto neither = LoadManifest(Write("neither.yaml", with("planners: [{label: x}]")));
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find("planners[0].name: missing key 'name'"), std::string::npos)
      << neither.status().message();
  // No Python in this process: the entry is refused, named by its key.
  auto python = LoadManifest(Write("python.yaml", with("planners: [{python: 'm:C'}]")));
  ASSERT_FALSE(python.ok());
  EXPECT_NE(python.status().message().find("planners[0].python: planner 'python:m:C'"), std::string::npos)
      << python.status().message();
}

TEST(Manifest, LoadsFromTextWithReferencesAsWritten) {
  auto m = LoadManifest(models::SpecText{"<manifest dict>", kBase});
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->file, "<manifest dict>");
  EXPECT_EQ(m->points.size(), 1u);
}

TEST(Manifest, FixedPlansAreCheckedAgainstTheirPairedClustersOnly) {
  const std::string plans = std::string(HETSIM_SOURCE_DIR) + "/models/catalog/plans/";
  const std::string head = "kind: experiment\nname: pairs\nclusters: [hexiscale-case-study, cpu-4]\nmodels: [llama-tiny]\n"
                           "planners:\n  - {name: plan, label: big, plan: " + plans + "case-study-asymmetric.yaml}\n"
                           "  - {name: plan, label: small, plan: " + plans + "cpu-4-tp2.yaml}\n";
  auto crossed = LoadManifest(Write("crossed.yaml", head));
  ASSERT_FALSE(crossed.ok());
  EXPECT_NE(crossed.status().message().find("planners (big): the plan uses device 7, but cluster cpu-4 has 4 GPUs"),
            std::string::npos) << crossed.status().message();
  EXPECT_NE(crossed.status().message().find("zip"), std::string::npos) << "the fix names the zipped sweep";
  auto zipped = LoadManifest(Write("zipped.yaml", head + "sweep:\n  - {name: cluster, zip: p, values: [hexiscale-case-study, cpu-4]}\n"
                                                         "  - {name: planner, zip: p, values: [big, small]}\n"));
  ASSERT_TRUE(zipped.ok()) << zipped.status().message();
  EXPECT_EQ(zipped->points.size(), 2u);
}

TEST(Manifest, ReplayPoliciesAreAnImplicitAxis) {
  // Two policies × two intervals × two repeats = 8 points; the axes reach the point's replay settings.
  auto m = LoadManifest(Write("replay.yaml", std::string(kBase) +
                                                 "replay: {trace: llama3, trace_days: 2, policies: [{name: hot-spares, "
                                                 "spares: 3}, {name: elastic, label: oobleck, replan_s: 4}]}\n"
                                                 "sweep: [{name: checkpoint_interval, values: [young-daly, '900']}]\n"
                                                 "repeats: 2\n"));
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->points.size(), 8u);
  std::set<std::string> policies;
  for (const auto& p : m->points) {
    auto setup = SetupPoint(*m, p);
    ASSERT_TRUE(setup.ok()) << setup.status().message();
    ASSERT_TRUE(setup->replay.has_value());
    policies.insert(setup->policy.label().empty() ? setup->policy.name() : setup->policy.label());
    for (const auto& [name, v] : p.axes) {
      if (name == "checkpoint_interval") {
        EXPECT_DOUBLE_EQ(setup->replay->checkpoint_interval_s(), v == "900" ? 900 : 0);
      }
    }
    if (setup->policy.name() == "hot-spares") {
      EXPECT_EQ(setup->policy.spares(), 3u);
    }
    if (setup->policy.name() == "elastic") {
      EXPECT_EQ(setup->policy.label(), "oobleck");
    }
  }
  EXPECT_EQ(policies, (std::set<std::string>{"hot-spares", "oobleck"}));
}

TEST(Manifest, NamesThatAreNotPlainFoldersAreRefused) {
  // The name becomes out/NAME: a shell metacharacter, a path separator or '..' must not get there.
  for (const char* name : {"'q;touch X;'", "../up", "a/b", "\"\""}) {
    std::string text = kBase;
    text.replace(text.find("name: t"), 7, std::string("name: ") + name);
    auto m = LoadManifest(Write("bad-name.yaml", text));
    ASSERT_FALSE(m.ok()) << name;
    EXPECT_NE(m.status().message().find("name: '"), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("is not a plain name"), std::string::npos) << m.status().message();
  }
}

TEST(Manifest, WorkIsCountedBeforeAnythingIsExpanded) {
  // 5 axes of 20 values × 2 repeats = 6.4 million points: refused at once, naming the limit.
  std::string sweep = "sweep:\n";
  for (const char* axis : {"global_batch_size", "seq_len", "nic_bandwidth_gbps", "oversubscription", "detection_s"}) {
    sweep += std::string("  - {name: ") + axis + ", values: [";
    for (int v = 1; v <= 20; ++v) sweep += (v > 1 ? ", '" : "'") + std::to_string(v) + "'";
    sweep += "]}\n";
  }
  auto m = LoadManifest(Write("huge.yaml", std::string(kBase) + "replay: {trace: llama3}\nrepeats: 2\n" + sweep));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("6400000 points"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("at most 100000"), std::string::npos) << m.status().message();
}

TEST(Manifest, EmptyPlannerListAndPlansBeyondTheClusterAreNamed) {
  std::string none = kBase;
  none.replace(none.find("planners: [{name: megatron}]"), 28, "planners: []");
  auto m = LoadManifest(Write("no-planners.yaml", none));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("planners"), std::string::npos) << m.status().message();
  // A fixed plan on devices 4-7 fits the 16-GPU cluster, not the 4-GPU one.
  const std::string plan = Write("p4.yaml", "kind: plan\npipelines: [{micro_batch_size: 1, num_micro_batches: 8, "
                                            "stages: [{devices: [4, 5, 6, 7], tp_degree: 4, layer_end: 2}]}]\n");
  std::string fixed = kBase;
  fixed.replace(fixed.find("planners: [{name: megatron}]"), 28, "planners: [{name: plan, plan: " + plan + "}]");
  fixed.replace(fixed.find("clusters: [hexiscale-case-study]"), 32, "clusters: [hetu-h20x16, cpu-4]");
  auto f = LoadManifest(Write("fixed.yaml", fixed));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("the plan uses device 7, but cluster cpu-4 has 4 GPUs"), std::string::npos) << f.status().message();
}

TEST(Manifest, PointIdsChangeWithEveryInput) {
  // --resume keeps a point only when its id matches: the id must change with the training spec, the
  // simulation settings, a planner's options and the plan behind a label.
  auto ids = [](const std::string& text) {
    auto m = LoadManifest(Write("ids.yaml", text));
    EXPECT_TRUE(m.ok()) << m.status().message();
    std::vector<std::string> out;
    if (m.ok()) {
      for (const auto& p : m->points) out.push_back(p.id);
    }
    return out;
  };
  const auto base = ids(kBase);
  std::string training = kBase;
  training.replace(training.find("seq_len: 128"), 12, "seq_len: 256");
  std::string sim = std::string(kBase) + "simulation: {fidelity: fast}\n";
  std::string options = kBase;
  options.replace(options.find("planners: [{name: megatron}]"), 28,
                  "planners: [{name: megatron, options: {tp_degrees: [1]}}]");
  std::string polish = kBase;
  polish.replace(polish.find("planners: [{name: megatron}]"), 28, "planners: [{name: megatron, polish: 5}]");
  for (const auto& edited : {training, sim, options, polish}) EXPECT_NE(ids(edited), base);
  EXPECT_EQ(ids(kBase), base);  // and nothing else moves it
}

// A planner entry's polish needs the twin check (refine unset or ≥ 1) and a registered planner: both are
// refused with the field named.
TEST(Manifest, PolishNeedsTheTwinCheckAndAPlanner) {
  auto with = [](const std::string& entry) {
    std::string text = kBase;
    text.replace(text.find("planners: [{name: megatron}]"), 28, "planners: [" + entry + "]");
    return LoadManifest(Write("polish.yaml", text));
  };
  EXPECT_TRUE(with("{name: megatron, polish: 5}").ok());
  auto zero = with("{name: megatron, refine: 0, polish: 5}");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("planners[0].polish"), std::string::npos) << zero.status().message();
  auto fixed = with("{name: plan, plan: cpu-4-dp4, polish: 5}");
  ASSERT_FALSE(fixed.ok());
  EXPECT_NE(fixed.status().message().find("planners[0].polish: a fixed plan"), std::string::npos)
      << fixed.status().message();
}

TEST(Manifest, BundledExperimentsValidate) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(std::string(HETSIM_SOURCE_DIR) + "/experiments")) {
    if (e.path().extension() != ".yaml") continue;
    std::ifstream in(e.path());
    std::string first;
    bool is_experiment = false;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("kind: experiment", 0) == 0) is_experiment = true;
    }
    if (!is_experiment) continue;
    auto m = LoadManifest(e.path().string());
    EXPECT_TRUE(m.ok()) << e.path() << ": " << m.status().message();
  }
}

}  // namespace
}  // namespace hetsim::runner

namespace hetsim::runner {
namespace {

// simulation.calibration: resolved against the manifest, checked, and part of every point's id — also when
// only the calibration file's contents change.
TEST(Manifest, CalibrationIsResolvedCheckedAndHashed) {
  const std::string calib = "kind: calibration\nname: c\nbase: default\ngeneric: {gemm_efficiency: 0.5}\n";
  Write("calib.yaml", calib);
  const std::string with = std::string(kBase) + "simulation: {calibration: calib.yaml}\n";
  auto a = LoadManifest(Write("calibrated.yaml", with));
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_TRUE(a->calibration.ends_with("calib.yaml")) << a->calibration;
  auto plain = LoadManifest(Write("plain.yaml", kBase));
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(a->points[0].id, plain->points[0].id);
  Write("calib.yaml", "kind: calibration\nname: c\nbase: default\ngeneric: {gemm_efficiency: 0.6}\n");
  auto edited = LoadManifest(Write("calibrated.yaml", with));
  ASSERT_TRUE(edited.ok());
  EXPECT_NE(edited->points[0].id, a->points[0].id) << "the calibration's contents are part of the id";
  auto bad = LoadManifest(Write("badcalib.yaml", std::string(kBase) + "simulation: {calibration: no-such-calibration}\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("simulation.calibration"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace hetsim::runner
