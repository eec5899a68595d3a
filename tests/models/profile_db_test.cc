// ProfileDb: loading and validating profiles, and looking up layer costs at measured and unmeasured
// micro-batch sizes (exact hits, Metis §4.3 composition, interpolation, extrapolation) against
// hand-derived numbers; the bundled (Sailor) profiles load, name bundled models, and keep the source's
// numbers.
#include "models/profile_db.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "models/bundled.h"
#include "models/gpu_catalog.h"
#include "models/spec_io.h"
#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

constexpr double kEps = 1e-12;

proto::Profile Parse(const std::string& yaml) {
  proto::Profile p;
  const Status s = ParseYaml(yaml, "inline.yaml", &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

// Transformer blocks of "toy" on a100-40gb, TP 1, measured at micro-batch 1, 2 and 8 (not 4).
const char kToy[] = R"(kind: profile
gpu: a100-40gb
model: toy
seq_len: 1024
layers:
  - {layer: transformer, tp_degree: 1, micro_batch_size: 1, forward_s: 0.010, backward_s: 0.020, optimizer_s: 0.005}
  - {layer: transformer, tp_degree: 1, micro_batch_size: 2, forward_s: 0.018, backward_s: 0.034, optimizer_s: 0.006}
  - {layer: transformer, tp_degree: 1, micro_batch_size: 8, forward_s: 0.060, backward_s: 0.130, optimizer_s: 0.007}
  - {layer: embedding, tp_degree: 1, micro_batch_size: 1, forward_s: 0.001, backward_s: 0.002, optimizer_s: 0.003}
  - {layer: head, tp_degree: 2, micro_batch_size: 1, forward_s: 0.004, backward_s: 0.005}
)";

ProfileDb Toy() {
  ProfileDb db;
  const Status s = db.Add(Parse(kToy), "toy.yaml");
  EXPECT_TRUE(s.ok()) << s.message();
  return db;
}

LayerCost Get(const ProfileDb& db, double mbs, LayerKind kind = LayerKind::kTransformer, uint32_t tp = 1) {
  auto c = db.Lookup("a100-40gb", "toy", kind, tp, mbs, 1024);
  EXPECT_TRUE(c.has_value()) << "micro-batch " << mbs;
  return c.value_or(LayerCost{-1, -1, -1});
}

void ExpectCost(const LayerCost& c, double fwd, double bwd, double opt) {
  EXPECT_NEAR(c.forward_s, fwd, kEps);
  EXPECT_NEAR(c.backward_s, bwd, kEps);
  EXPECT_NEAR(c.optimizer_s, opt, kEps);
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/profile_db_test_" + name;
  std::ofstream(path) << text;
  return path;
}

// ---- lookups -------------------------------------------------------------------------------------

TEST(ProfileDbLookup, ExactHitReturnsTheFilesNumbers) {
  const ProfileDb db = Toy();
  EXPECT_FALSE(db.empty());
  ExpectCost(Get(db, 1), 0.010, 0.020, 0.005);
  ExpectCost(Get(db, 2), 0.018, 0.034, 0.006);
  ExpectCost(Get(db, 8), 0.060, 0.130, 0.007);
  ExpectCost(Get(db, 1, LayerKind::kEmbedding), 0.001, 0.002, 0.003);
  ExpectCost(Get(db, 1, LayerKind::kHead, 2), 0.004, 0.005, 0.0);
}

TEST(ProfileDbLookup, ComposesUnmeasuredSizesFromTheBinaryDecomposition) {
  const ProfileDb db = Toy();
  // 3 = 2 + 1: times summed; the optimizer step is the nearest measured size's (2).
  ExpectCost(Get(db, 3), 0.018 + 0.010, 0.034 + 0.020, 0.006);
  // 9 = 8 + 1 and 10 = 8 + 2 compose although they lie beyond the largest measured size.
  ExpectCost(Get(db, 9), 0.060 + 0.010, 0.130 + 0.020, 0.007);
  ExpectCost(Get(db, 10), 0.060 + 0.018, 0.130 + 0.034, 0.007);
}

TEST(ProfileDbLookup, ComposesMetisExampleSevenFromFourTwoOne) {
  ProfileDb db;
  ASSERT_TRUE(db.Add(Parse(R"(kind: profile
gpu: v100
model: toy
seq_len: 512
layers:
  - {layer: transformer, tp_degree: 2, micro_batch_size: 1, forward_s: 1, backward_s: 10}
  - {layer: transformer, tp_degree: 2, micro_batch_size: 2, forward_s: 2, backward_s: 20}
  - {layer: transformer, tp_degree: 2, micro_batch_size: 4, forward_s: 4.5, backward_s: 40}
  - {layer: transformer, tp_degree: 2, micro_batch_size: 8, forward_s: 100, backward_s: 100}
)"),
                     "metis.yaml")
                  .ok());
  auto c = db.Lookup("v100", "toy", LayerKind::kTransformer, 2, 7, 512);
  ASSERT_TRUE(c.has_value());
  // 4 + 2 + 1, not the line between 4 and 8 (which would give 4.5 + 3/4 * 95.5).
  EXPECT_NEAR(c->forward_s, 7.5, kEps);
  EXPECT_NEAR(c->backward_s, 70, kEps);
}

TEST(ProfileDbLookup, InterpolatesBetweenTwoAndEightWhenFourIsMissing) {
  const ProfileDb db = Toy();
  // 4 is a single power of two and not measured: on the line through (2, ·) and (8, ·), a third of the way.
  ExpectCost(Get(db, 4), 0.018 + (0.060 - 0.018) * 2 / 6, 0.034 + (0.130 - 0.034) * 2 / 6, 0.006);
  EXPECT_NEAR(Get(db, 4).forward_s, 0.032, kEps);
  EXPECT_NEAR(Get(db, 4).backward_s, 0.066, kEps);
  // 5 = 4 + 1 cannot be composed (4 is missing): halfway between 2 and 8; the optimizer ties 2 and 8
  // (both 3 away) and takes the smaller.
  ExpectCost(Get(db, 5), 0.039, 0.082, 0.006);
  // A fractional micro-batch (an uneven split) lies between 1 and 2.
  ExpectCost(Get(db, 1.5), 0.014, 0.027, 0.005);
}

TEST(ProfileDbLookup, InterpolatesWhenAPartOfTheDecompositionIsMissing) {
  ProfileDb db;
  ASSERT_TRUE(db.Add(Parse(R"(kind: profile
gpu: a100-40gb
model: toy
seq_len: 1024
layers:
  - {layer: transformer, tp_degree: 1, micro_batch_size: 2, forward_s: 0.018, backward_s: 0.034}
  - {layer: transformer, tp_degree: 1, micro_batch_size: 8, forward_s: 0.060, backward_s: 0.130}
)"),
                     "two-eight.yaml")
                  .ok());
  // 3 = 2 + 1 with 1 not measured: a sixth of the way from 2 to 8.
  ExpectCost(Get(db, 3), 0.018 + 0.042 / 6, 0.034 + 0.096 / 6, 0);
  // Below the smallest size: the line through 2 and 8 continued down.
  ExpectCost(Get(db, 1), 0.018 - 0.042 / 6, 0.034 - 0.096 / 6, 0);
}

TEST(ProfileDbLookup, ExtrapolatesFromTheLargestTwo) {
  const ProfileDb db = Toy();
  // 16 is not composable (not measured itself): 14/6 of the 2 -> 8 step past 2.
  ExpectCost(Get(db, 16), 0.018 + 0.042 * 14 / 6, 0.034 + 0.096 * 14 / 6, 0.007);
  EXPECT_NEAR(Get(db, 16).forward_s, 0.116, kEps);
  // 12 = 8 + 4 with 4 missing: extrapolated too.
  ExpectCost(Get(db, 12), 0.018 + 0.042 * 10 / 6, 0.034 + 0.096 * 10 / 6, 0.007);
}

TEST(ProfileDbLookup, ExtrapolationBelowTheSmallestSizeStopsAtZero) {
  ProfileDb db;
  ASSERT_TRUE(db.Add(Parse(R"(kind: profile
gpu: a100-40gb
model: toy
seq_len: 1024
layers:
  - {layer: transformer, tp_degree: 1, micro_batch_size: 1, forward_s: 0.001, backward_s: 0.010}
  - {layer: transformer, tp_degree: 1, micro_batch_size: 2, forward_s: 0.010, backward_s: 0.012}
)"),
                     "steep.yaml")
                  .ok());
  // At 0.5: forward 0.001 - 0.5 * 0.009 < 0 -> 0; backward 0.010 - 0.5 * 0.002 = 0.009.
  ExpectCost(Get(db, 0.5), 0, 0.009, 0);
  // A vanishing micro-batch is not "zero parts composed": backward 0.010 - (1 - 1e-12) * 0.002.
  EXPECT_NEAR(Get(db, 1e-12).backward_s, 0.008, 1e-9);
}

TEST(ProfileDbLookup, OneMeasuredSizeScalesInProportion) {
  ProfileDb db;
  ASSERT_TRUE(db.Add(Parse(R"(kind: profile
gpu: a100-40gb
model: toy
seq_len: 1024
layers:
  - {layer: transformer, tp_degree: 4, micro_batch_size: 4, forward_s: 0.04, backward_s: 0.08, optimizer_s: 0.01}
)"),
                     "one.yaml")
                  .ok());
  ExpectCost(Get(db, 6, LayerKind::kTransformer, 4), 0.06, 0.12, 0.01);
  ExpectCost(Get(db, 1, LayerKind::kTransformer, 4), 0.01, 0.02, 0.01);
}

TEST(ProfileDbLookup, NothingForAnUnprofiledGpuModelTpSeqLenOrKind) {
  const ProfileDb db = Toy();
  EXPECT_FALSE(db.Lookup("v100", "toy", LayerKind::kTransformer, 1, 1, 1024).has_value());
  EXPECT_FALSE(db.Lookup("a100-40gb", "llama3-8b", LayerKind::kTransformer, 1, 1, 1024).has_value());
  EXPECT_FALSE(db.Lookup("a100-40gb", "toy", LayerKind::kTransformer, 2, 1, 1024).has_value());
  EXPECT_FALSE(db.Lookup("a100-40gb", "toy", LayerKind::kTransformer, 1, 1, 2048).has_value());
  EXPECT_FALSE(db.Lookup("a100-40gb", "toy", LayerKind::kHead, 1, 1, 1024).has_value());
  EXPECT_FALSE(db.Lookup("no-such-gpu", "toy", LayerKind::kTransformer, 1, 1, 1024).has_value());
  EXPECT_FALSE(db.Lookup("a100-40gb", "toy", LayerKind::kTransformer, 1, 0, 1024).has_value());
  EXPECT_FALSE(db.Lookup("a100-40gb", "toy", LayerKind::kTransformer, 1, -2, 1024).has_value());
  EXPECT_TRUE(ProfileDb().empty());
  EXPECT_TRUE(ProfileDb().Coverage().empty());
}

// ---- adding and loading --------------------------------------------------------------------------

TEST(ProfileDbAdd, GpuAliasResolvesToTheCatalogName) {
  ProfileDb db;
  proto::Profile p = Parse(kToy);
  p.set_gpu("A100-40");
  ASSERT_TRUE(db.Add(p, "alias.yaml").ok());
  const auto coverage = db.Coverage();
  ASSERT_EQ(coverage.size(), 1u);
  EXPECT_EQ(coverage[0], std::make_pair(std::string("a100-40gb"), std::string("toy")));
  ExpectCost(Get(db, 2), 0.018, 0.034, 0.006);  // looked up by the canonical name
  auto by_alias = db.Lookup("A100-40", "toy", LayerKind::kTransformer, 1, 2, 1024);
  ASSERT_TRUE(by_alias.has_value());
  EXPECT_NEAR(by_alias->forward_s, 0.018, kEps);
}

TEST(ProfileDbAdd, UnknownGpuNamesTheFileAndKey) {
  ProfileDb db;
  proto::Profile p = Parse(kToy);
  p.set_gpu("a100-40gc");
  const Status s = db.Add(p, "my-profile.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("my-profile.yaml: gpu: unknown GPU type 'a100-40gc'; did you mean 'a100-40gb'?"),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(db.empty());
}

TEST(ProfileDbLoad, UnknownGpuInAFileGivesItsLine) {
  std::string text = kToy;
  text.replace(text.find("a100-40gb"), 9, "A100-41");
  const std::string path = WriteTemp("bad-gpu.yaml", text);
  auto db = ProfileDb::Load({path});
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find(path + ":2:6: gpu: unknown GPU type 'A100-41'"), std::string::npos)
      << db.status().message();
}

TEST(ProfileDbAdd, RejectsMissingTpAndMicroBatchAndBadTimes) {
  proto::Profile p = Parse(kToy);
  p.mutable_layers(1)->clear_micro_batch_size();
  p.mutable_layers(2)->clear_tp_degree();
  p.mutable_layers(3)->set_forward_s(-1);
  p.mutable_layers(4)->clear_layer();
  ProfileDb db;
  const Status s = db.Add(p, "p.yaml");
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("p.yaml: layers[1].micro_batch_size: missing"), std::string::npos) << m;
  EXPECT_NE(m.find("p.yaml: layers[2].tp_degree: missing"), std::string::npos) << m;
  EXPECT_NE(m.find("p.yaml: layers[3].forward_s: expected a time in seconds >= 0, found -1"), std::string::npos) << m;
  EXPECT_NE(m.find("p.yaml: layers[4].layer: missing"), std::string::npos) << m;
  EXPECT_TRUE(db.empty()) << "a rejected profile adds nothing";

  proto::Profile q = Parse(kToy);
  q.clear_gpu();
  q.clear_seq_len();
  const Status t = db.Add(q, "q.yaml");
  EXPECT_NE(t.message().find("q.yaml: gpu: missing"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("q.yaml: seq_len: missing"), std::string::npos) << t.message();
}

TEST(ProfileDbAdd, RejectsDuplicatesWithinAndAcrossFiles) {
  proto::Profile p = Parse(kToy);
  *p.add_layers() = p.layers(1);  // a second (transformer, tp 1, micro-batch 2)
  ProfileDb db;
  const Status s = db.Add(p, "dup.yaml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("dup.yaml: layers[5]: duplicate of layers[1] (transformer, tp_degree 1, "
                             "micro_batch_size 2)"),
            std::string::npos)
      << s.message();

  ASSERT_TRUE(db.Add(Parse(kToy), "first.yaml").ok());
  proto::Profile again = Parse(kToy);
  again.set_gpu("A100-40");                          // the same GPU under an alias
  again.mutable_layers(0)->set_micro_batch_size(4);  // new; must not be added either
  const Status t = db.Add(again, "second.yaml");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("second.yaml: layers[1]: a100-40gb / toy / seq_len 1024 / transformer / "
                             "tp_degree 1 / micro_batch_size 2 is already profiled by first.yaml layers[1]"),
            std::string::npos)
      << t.message();
  EXPECT_NEAR(Get(db, 4).forward_s, 0.032, kEps) << "the rejected file's micro-batch 4 was not added";

  // The same (gpu, model, kind, tp, micro-batch) at another sequence length is another measurement.
  proto::Profile longer = Parse(kToy);
  longer.set_seq_len(2048);
  EXPECT_TRUE(db.Add(longer, "longer.yaml").ok());
}

TEST(ProfileDbLoad, LoadsFilesAndReportsEveryBadOne) {
  const std::string good = WriteTemp("good.yaml", kToy);
  auto db = ProfileDb::Load({good});
  ASSERT_TRUE(db.ok()) << db.status().message();
  ExpectCost(Get(*db, 3), 0.028, 0.054, 0.006);

  auto twice = ProfileDb::Load({good, good});
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("is already profiled by " + good + " layers[0]"), std::string::npos)
      << twice.status().message();

  auto missing = ProfileDb::Load({"no-such-profile", good + ".missing.yaml"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no bundled profile named 'no-such-profile'"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find(".missing.yaml: no such file"), std::string::npos)
      << missing.status().message();

  auto none = ProfileDb::Load({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// ---- the bundled profiles ------------------------------------------------------------------------

TEST(ProfileDbBundled, EveryProfileLoadsAndNamesABundledModel) {
  const auto names = BundledNames(SpecKind::kProfile);
  ASSERT_FALSE(names.empty());
  auto db = ProfileDb::Load(names);
  ASSERT_TRUE(db.ok()) << db.status().message();
  std::set<std::pair<std::string, std::string>> pairs;
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    auto p = LoadProfile(name);
    ASSERT_TRUE(p.ok()) << p.status().message();
    auto model = LoadModel(p->model());
    ASSERT_TRUE(model.ok()) << "profile names model '" << p->model() << "': " << model.status().message();
    EXPECT_LE(p->seq_len(), model->spec().max_seq_len());
    auto gpu = GpuCatalog::Bundled().Find(p->gpu());
    ASSERT_TRUE(gpu.ok()) << gpu.status().message();
    EXPECT_EQ((*gpu)->name, p->gpu()) << "bundled profiles use the catalog's canonical GPU name";
    pairs.emplace(p->gpu(), p->model());
    std::set<std::pair<uint32_t, uint32_t>> configs;
    std::map<std::pair<uint32_t, uint32_t>, int> kinds;
    for (const auto& l : p->layers()) {
      configs.emplace(l.tp_degree(), l.micro_batch_size());
      ++kinds[{l.tp_degree(), l.micro_batch_size()}];
      const LayerKind kind = l.layer() == proto::LayerTiming::LAYER_KIND_EMBEDDING ? LayerKind::kEmbedding
                             : l.layer() == proto::LayerTiming::LAYER_KIND_HEAD    ? LayerKind::kHead
                                                                                   : LayerKind::kTransformer;
      auto c = db->Lookup(p->gpu(), p->model(), kind, l.tp_degree(), l.micro_batch_size(), p->seq_len());
      ASSERT_TRUE(c.has_value());
      EXPECT_EQ(c->forward_s, l.forward_s());
      EXPECT_EQ(c->backward_s, l.backward_s());
      EXPECT_EQ(c->optimizer_s, l.optimizer_s());
    }
    for (const auto& [config, n] : kinds) {
      EXPECT_EQ(n, 3) << "tp " << config.first << " micro-batch " << config.second
                      << ": expected an embedding, a transformer and a head entry";
    }
  }
  const auto coverage = db->Coverage();
  const std::set<std::pair<std::string, std::string>> covered(coverage.begin(), coverage.end());
  EXPECT_EQ(covered, pairs);
  EXPECT_EQ(covered.size(), coverage.size()) << "Coverage() lists each pair once";
}

// Numbers read off Sailor's profile.json files by hand (profile[mbs][tp][layer] = [fwd, bwd, update]).
TEST(ProfileDbBundled, SailorNumbersSurviveTheConversion) {
  auto db = ProfileDb::Load({"sailor-opt-350m-a100-40gb", "sailor-llama3-8b-gh200"});
  ASSERT_TRUE(db.ok()) << db.status().message();
  // OPT-350/A100-40, mbs 1, tp 2: layer 0 = [0.000824, 4e-06, 0.001504]; layer 1 = [0.001853, 0.003388, ·]
  // and layers 2..24 = [0.001908, 0.003398, ·] (median 0.001908 / 0.003398); layer 25 = [0.002604, 0.002319, ·].
  auto emb = db->Lookup("a100-40gb", "opt-350m", LayerKind::kEmbedding, 2, 1, 2048);
  auto block = db->Lookup("a100-40gb", "opt-350m", LayerKind::kTransformer, 2, 1, 2048);
  auto head = db->Lookup("a100-40gb", "opt-350m", LayerKind::kHead, 2, 1, 2048);
  ASSERT_TRUE(emb && block && head);
  EXPECT_EQ(emb->forward_s, 0.000824);
  EXPECT_EQ(emb->backward_s, 4e-06);
  EXPECT_EQ(block->forward_s, 0.001908);
  EXPECT_EQ(block->backward_s, 0.003398);
  EXPECT_EQ(head->forward_s, 0.002604);
  EXPECT_EQ(head->backward_s, 0.002319);
  // update_s 0.001504 is the optimizer step of embedding + 2 blocks + head; the shares add back up to it
  // (each rounded to 4 significant digits).
  EXPECT_NEAR(emb->optimizer_s + 2 * block->optimizer_s + head->optimizer_s, 0.001504, 3e-7);
  // LLAMA-3-8/GH-96, mbs 1, tp 1: the head is layer 33 (final RMSNorm) [0.000369, 0.001078] plus layer 34
  // (LM head) [0.016226, 0.0357].
  auto llama_head = db->Lookup("gh200", "llama3-8b", LayerKind::kHead, 1, 1, 8192);
  ASSERT_TRUE(llama_head.has_value());
  EXPECT_NEAR(llama_head->forward_s, 0.016595, 1e-12);
  EXPECT_NEAR(llama_head->backward_s, 0.036778, 1e-12);
  // Composition on real data: 3 = 2 + 1.
  auto one = db->Lookup("a100-40gb", "opt-350m", LayerKind::kTransformer, 2, 1, 2048);
  auto two = db->Lookup("a100-40gb", "opt-350m", LayerKind::kTransformer, 2, 2, 2048);
  auto three = db->Lookup("a100-40gb", "opt-350m", LayerKind::kTransformer, 2, 3, 2048);
  ASSERT_TRUE(one && two && three);
  EXPECT_NEAR(three->forward_s, one->forward_s + two->forward_s, kEps);
}

}  // namespace
}  // namespace hetsim::models
