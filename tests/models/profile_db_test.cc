// ProfileDb: loading and validating profiles, and looking up layer costs at measured and unmeasured
// micro-batch sizes (exact hits, Metis §4.3 composition, interpolation, extrapolation) against
// hand-derived numbers, activations and per-micro-batch overheads by the same rules; the bundled (Sailor)
// profiles load, name bundled models, and keep the source's numbers; what ComputeCost takes from a profile
// (overheads with the embedding's forward and the head's backward pass, the optimizer step per parameter).
#include "models/profile_db.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "models/bundled.h"
#include "models/cost.h"
#include "models/gpu_catalog.h"
#include "models/spec_io.h"
#include "models/training.h"
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

// ---- activations, per-micro-batch overheads --------------------------------------------------------

// Blocks of "toy" with activations at micro-batch 1, 2 and 8, and per-micro-batch overheads at TP 1.
const char kToyMemory[] = R"(kind: profile
gpu: a100-40gb
model: toy
seq_len: 1024
layers:
  - {layer: transformer, tp_degree: 1, micro_batch_size: 1, forward_s: 0.010, backward_s: 0.020, activation_gib: 0.5}
  - {layer: transformer, tp_degree: 1, micro_batch_size: 2, forward_s: 0.018, backward_s: 0.034, activation_gib: 1.0}
  - {layer: transformer, tp_degree: 1, micro_batch_size: 8, forward_s: 0.060, backward_s: 0.130, activation_gib: 3.5}
  - {layer: head, tp_degree: 1, micro_batch_size: 1, forward_s: 0.004, backward_s: 0.005}
  - {layer: head, tp_degree: 1, micro_batch_size: 2, forward_s: 0.006, backward_s: 0.007, activation_gib: 0.25}
micro_batch_overheads:
  - {tp_degree: 1, micro_batch_size: 1, fb_sync_s: 0.010, batch_generation_s: 0.001}
  - {tp_degree: 1, micro_batch_size: 2, fb_sync_s: 0.018, batch_generation_s: 0.002}
  - {tp_degree: 1, micro_batch_size: 8, fb_sync_s: 0.060, batch_generation_s: 0.004}
)";

TEST(ProfileDbLookup, ActivationsComposeAndInterpolateLikeTimes) {
  ProfileDb db;
  ASSERT_TRUE(db.Add(Parse(kToyMemory), "mem.yaml").ok());
  auto at = [&](double mbs, LayerKind kind = LayerKind::kTransformer) {
    auto c = db.Lookup("a100-40gb", "toy", kind, 1, mbs, 1024);
    EXPECT_TRUE(c.has_value());
    return c.value_or(LayerCost{});
  };
  EXPECT_TRUE(at(1).has_activation);
  EXPECT_NEAR(at(1).activation_gib, 0.5, kEps);
  // 3 = 2 + 1: 1.0 + 0.5.
  EXPECT_NEAR(at(3).activation_gib, 1.5, kEps);
  // 4 cannot be composed (4 was not measured): between 2 (1.0) and 8 (3.5), a third of the way: 1.0 + 2.5/3.
  EXPECT_NEAR(at(4).activation_gib, 1.0 + 2.5 / 3, kEps);
  // Beyond 8 along the line through 2 and 8 (slope 2.5/6): 16 → 3.5 + 8·2.5/6.
  EXPECT_NEAR(at(16).activation_gib, 3.5 + 8 * 2.5 / 6, kEps);
  // The head has an activation at 2 but not at 1: not profiled.
  EXPECT_FALSE(at(2, LayerKind::kHead).has_activation);
  EXPECT_EQ(at(2, LayerKind::kHead).activation_gib, 0);
}

TEST(ProfileDbLookup, MicroBatchOverheadsFollowTheSameRules) {
  ProfileDb db;
  ASSERT_TRUE(db.Add(Parse(kToyMemory), "mem.yaml").ok());
  auto at = [&](double mbs) {
    auto o = db.Overhead("a100-40gb", "toy", 1, mbs, 1024);
    EXPECT_TRUE(o.has_value()) << mbs;
    return o.value_or(MicroBatchOverheadCost{-1, -1});
  };
  EXPECT_NEAR(at(2).fb_sync_s, 0.018, kEps);
  EXPECT_NEAR(at(2).batch_generation_s, 0.002, kEps);
  // 3 = 2 + 1.
  EXPECT_NEAR(at(3).fb_sync_s, 0.028, kEps);
  EXPECT_NEAR(at(3).batch_generation_s, 0.003, kEps);
  // 4 between 2 and 8: 0.018 + (0.060 − 0.018)/3 = 0.032; 0.002 + 0.002/3.
  EXPECT_NEAR(at(4).fb_sync_s, 0.032, kEps);
  EXPECT_NEAR(at(4).batch_generation_s, 0.002 + 0.002 / 3, kEps);
  // An alias names the same GPU; another TP degree, model or sequence length has none.
  EXPECT_TRUE(db.Overhead("A100-40", "toy", 1, 1, 1024).has_value());
  EXPECT_FALSE(db.Overhead("a100-40gb", "toy", 2, 1, 1024).has_value());
  EXPECT_FALSE(db.Overhead("a100-40gb", "other", 1, 1, 1024).has_value());
  EXPECT_FALSE(db.Overhead("a100-40gb", "toy", 1, 1, 2048).has_value());
}

TEST(ProfileDbAdd, RejectsBadOverheadsAndActivations) {
  proto::Profile p = Parse(kToyMemory);
  p.mutable_micro_batch_overheads(0)->clear_tp_degree();
  p.mutable_micro_batch_overheads(1)->set_fb_sync_s(-0.5);
  p.mutable_micro_batch_overheads(2)->set_micro_batch_size(2);  // the same as entry 1
  p.mutable_layers(0)->set_activation_gib(-1);
  ProfileDb db;
  const Status s = db.Add(p, "p.yaml");
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("p.yaml: micro_batch_overheads[0].tp_degree: missing"), std::string::npos) << m;
  EXPECT_NE(m.find("p.yaml: micro_batch_overheads[1].fb_sync_s: expected a time in seconds >= 0, found -0.5"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("p.yaml: layers[0].activation_gib: expected GiB >= 0"), std::string::npos) << m;
  EXPECT_TRUE(db.empty());

  // A second file with the same overhead entry names the first.
  ProfileDb two;
  ASSERT_TRUE(two.Add(Parse(kToyMemory), "first.yaml").ok());
  proto::Profile again;
  again.set_gpu("a100-40gb");
  again.set_model("toy");
  again.set_seq_len(1024);
  *again.add_micro_batch_overheads() = Parse(kToyMemory).micro_batch_overheads(1);
  const Status d = two.Add(again, "second.yaml");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("second.yaml: micro_batch_overheads[0]: a100-40gb / toy / seq_len 1024 / tp_degree 1 / "
                             "micro_batch_size 2 is already profiled by first.yaml micro_batch_overheads[1]"),
            std::string::npos)
      << d.message();
}

TEST(ProfileDbLoad, OverheadBoundsAreCheckedAgainstTheSchema) {
  const std::string path = WriteTemp("overhead.yaml", std::string(kToyMemory) +
                                                          "  - {tp_degree: 2, micro_batch_size: 1, fb_sync_s: 2e6}\n");
  auto db = ProfileDb::Load({path});
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.status().message().find("fb_sync_s"), std::string::npos) << db.status().message();
  EXPECT_NE(db.status().message().find(path), std::string::npos) << db.status().message();
}

// llm_info.json (OPT-350, TP 1): act_mem_bytes of the blocks 360,726,528, of the embedding 8,388,608,
// of the head 834,694,144 -- at micro-batch 1, scaled by the micro-batch.
TEST(ProfileDbBundled, SailorActivationsAreLlmInfosMeasurement) {
  auto db = ProfileDb::Load({"sailor-opt-350m-v100"});
  ASSERT_TRUE(db.ok()) << db.status().message();
  const double gib = 1024.0 * 1024 * 1024;
  auto block = db->Lookup("v100", "opt-350m", LayerKind::kTransformer, 1, 1, 2048);
  auto block4 = db->Lookup("v100", "opt-350m", LayerKind::kTransformer, 1, 4, 2048);
  auto emb = db->Lookup("v100", "opt-350m", LayerKind::kEmbedding, 1, 2, 2048);
  auto head = db->Lookup("v100", "opt-350m", LayerKind::kHead, 1, 1, 2048);
  ASSERT_TRUE(block && block4 && emb && head);
  ASSERT_TRUE(block->has_activation && emb->has_activation && head->has_activation);
  EXPECT_NEAR(block->activation_gib, 360726528 / gib, 1e-7);
  EXPECT_NEAR(block4->activation_gib, 4 * 360726528 / gib, 1e-6);
  EXPECT_NEAR(emb->activation_gib, 2 * 8388608 / gib, 1e-8);
  EXPECT_NEAR(head->activation_gib, 834694144 / gib, 1e-7);
  // Sailor measures no per-micro-batch overheads.
  EXPECT_FALSE(db->Overhead("v100", "opt-350m", 1, 1, 2048).has_value());
}

// ---- what ComputeCost takes from a profile --------------------------------------------------------

// llama-tiny on an A100-80GB at TP 1, micro-batch 1: a block 1 ms forward, 2 ms backward, its optimizer
// step 725,504 ns (1 ns per parameter: a block has 725,504); the head 0.5 / 1 ms; per micro-batch 0.2 ms
// of fb_sync and 0.1 ms of batch generation.
const char kTinyProfile[] = R"(kind: profile
gpu: a100-80gb
model: llama-tiny
seq_len: 128
layers:
  - {layer: embedding, tp_degree: 1, micro_batch_size: 1, forward_s: 0, backward_s: 0}
  - {layer: transformer, tp_degree: 1, micro_batch_size: 1, forward_s: 0.001, backward_s: 0.002, optimizer_s: 0.000725504}
  - {layer: head, tp_degree: 1, micro_batch_size: 1, forward_s: 0.0005, backward_s: 0.001}
micro_batch_overheads:
  - {tp_degree: 1, micro_batch_size: 1, fb_sync_s: 0.0002, batch_generation_s: 0.0001}
)";

struct TinyCost {
  TinyCost(proto::Recompute recompute = proto::RECOMPUTE_NONE) {
    auto m = LoadModel("llama-tiny");
    EXPECT_TRUE(m.ok()) << m.status().message();
    model = std::make_unique<TransformerModel>(std::move(m).value());
    proto::Training t;
    t.set_global_batch_size(4);
    t.set_seq_len(128);
    t.set_recompute(recompute);
    auto r = ResolveTraining(t, *model, "training");
    EXPECT_TRUE(r.ok()) << r.status().message();
    training = std::move(r).value();
    EXPECT_TRUE(db.Add(Parse(kTinyProfile), "tiny.yaml").ok());
    auto g = GpuCatalog::Bundled().Find("a100-80gb");
    EXPECT_TRUE(g.ok());
    gpu = *g;
  }
  std::unique_ptr<TransformerModel> model;
  proto::Training training;
  ProfileDb db;
  const GpuSpec* gpu = nullptr;
};

TEST(ComputeCostProfiles, OverheadsRideWithTheEmbeddingForwardAndTheHeadBackward) {
  TinyCost t(proto::RECOMPUTE_FULL);
  const ComputeCost cost(*t.model, t.training, &t.db);
  const uint32_t head = t.model->num_layers() - 1;
  // Batch generation with the embedding's forward pass (first stage), fb_sync with the head's backward
  // pass (last stage); nothing else changes.
  EXPECT_NEAR(cost.ForwardSeconds(*t.gpu, 0, 1, 1), 0.0001, kEps);
  EXPECT_NEAR(cost.BackwardSeconds(*t.gpu, 0, 1, 1), 0, kEps);
  EXPECT_NEAR(cost.ForwardSeconds(*t.gpu, head, 1, 1), 0.0005, kEps);
  EXPECT_NEAR(cost.BackwardSeconds(*t.gpu, head, 1, 1), 0.001 + 0.0002, kEps);
  // A block under full recomputation: backward + forward again, no overhead.
  EXPECT_NEAR(cost.BackwardSeconds(*t.gpu, 1, 1, 1), 0.002 + 0.001, kEps);
  EXPECT_NEAR(cost.OverheadSeconds(*t.gpu, 0, 1, 1, /*backward=*/false), 0.0001, kEps);
  EXPECT_NEAR(cost.OverheadSeconds(*t.gpu, head, 1, 1, /*backward=*/true), 0.0002, kEps);
  EXPECT_EQ(cost.OverheadSeconds(*t.gpu, head, 1, 1, /*backward=*/false), 0);
  EXPECT_EQ(cost.OverheadSeconds(*t.gpu, 1, 1, 1, /*backward=*/true), 0);
  // Two sequences: the single measured size scales in proportion (2 × 0.2 ms).
  EXPECT_NEAR(cost.OverheadSeconds(*t.gpu, head, 1, 2, /*backward=*/true), 0.0004, kEps);
}

// A pass sharded over w ranks (CP or Ulysses) does per rank the work of micro_batch / w whole sequences:
// the profile is read there. Micro-batch 2 at cp 2 or Ulysses 2 is micro-batch 1's 1 ms / 2 ms per block;
// micro-batch 1 at w = 2 is half a sequence: the single measured size scales in proportion, 0.5 ms / 1 ms,
// and the head's fb_sync 0.1 ms.
TEST(ComputeCostProfiles, ShardedPassesReadTheProfileAtTheirShareOfTheMicroBatch) {
  TinyCost t;
  const ComputeCost cost(*t.model, t.training, &t.db);
  const uint32_t head = t.model->num_layers() - 1;
  for (const SequenceSharding shard : {SequenceSharding{2, 1}, SequenceSharding{1, 2}}) {
    EXPECT_NEAR(cost.ForwardSeconds(*t.gpu, 1, 1, 2, shard), 0.001, kEps);
    EXPECT_NEAR(cost.BackwardSeconds(*t.gpu, 1, 1, 2, proto::RECOMPUTE_NONE, shard), 0.002, kEps);
    EXPECT_NEAR(cost.ForwardSeconds(*t.gpu, 1, 1, 1, shard), 0.0005, kEps);
    EXPECT_NEAR(cost.BackwardSeconds(*t.gpu, head, 1, 1, proto::RECOMPUTE_NONE, shard), 0.0005 + 0.0001, kEps);
  }
}

TEST(ComputeCostProfiles, OptimizerStepAtTheProfiledSecondsPerParameter) {
  TinyCost t;
  const ComputeCost profiled(*t.model, t.training, &t.db);
  const ComputeCost analytic(*t.model, t.training, nullptr);
  // 725,504 ns for a block's 725,504 parameters: 1 ns per parameter, whatever the parameter count.
  EXPECT_TRUE(profiled.OptimizerProfiled(*t.gpu));
  EXPECT_NEAR(profiled.OptimizerSeconds(*t.gpu, 1e6), 1e-3, 1e-12);
  // Without the profile: 32 bytes per parameter through HBM (A100-80GB: 2,039 GB/s).
  EXPECT_FALSE(analytic.OptimizerProfiled(*t.gpu));
  EXPECT_NEAR(analytic.OptimizerSeconds(*t.gpu, 1e6), 32e6 / 2039e9, 1e-15);
  // Another GPU has no profile: the HBM model.
  auto h100 = GpuCatalog::Bundled().Find("h100");
  ASSERT_TRUE(h100.ok());
  EXPECT_FALSE(profiled.OptimizerProfiled(**h100));
}

}  // namespace
}  // namespace hetsim::models
