// Hetu v2's HSPMD annotations and communication resolution (models/hspmd.h) against hand-derived cases: one
// per branch of Fig. 4's classification, SplitAR for two pipelines of TP 4 and TP 2 (the same groups as the
// lowering's chunked gradient sync), the BSR heuristics on the example of Fig. 8, and fusion (§6.2).
#include "models/hspmd.h"

#include <gtest/gtest.h>

#include <set>

#include "models/plan.h"
#include "models/spec_io.h"
#include "models/yaml_proto.h"

namespace hetsim::models::hspmd {
namespace {

using K = CommKind;

std::set<std::vector<uint32_t>> Groups(const CommStep& s) {
  std::set<std::vector<uint32_t>> g;
  for (const auto& c : s.collectives) g.insert(c.devices);
  return g;
}

Resolution Must(const Annotation& a, const Annotation& b, double bytes, uint32_t rank = 1,
                const BsrOptions& o = {}) {
  auto r = Resolve(a, b, bytes, rank, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : Resolution{};
}

TEST(Hspmd, ShardsFollowMixedRadixTpInnermost) {
  // {D:2, S0:2} over [0,1,2,3]: position p = 2·c_D + c_S, so devices 0 and 2 hold the first half, 1 and 3 the
  // second (TP innermost, as plan.proto numbers a stage's devices).
  const auto s = Shards(Spmd({0, 1, 2, 3}, DistState({{kDuplicate, 2}, {0, 2}})), 1);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_DOUBLE_EQ(s[0].box[0].second, 0.5);
  EXPECT_DOUBLE_EQ(s[1].box[0].first, 0.5);
  EXPECT_DOUBLE_EQ(s[2].box[0].second, 0.5);
  EXPECT_DOUBLE_EQ(s[3].box[0].first, 0.5);
}

TEST(Hspmd, CheckNamesTheProblem) {
  Annotation a = Spmd({0, 1, 2}, DistState::Split(0, 2));
  auto st = CheckAnnotation(a, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("3 devices"), std::string::npos) << st.message();
  Annotation b;
  b.dg_union = {{0, 1}, {1, 2}};
  b.ds_union = {DistState::Split(0, 2), DistState::Split(0, 2)};
  st = CheckAnnotation(b, 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("disjoint"), std::string::npos) << st.message();
}

// ---- Fig. 4, bottom tier (§4.1) ----

TEST(Hspmd, BottomTierIdentity) {
  const auto a = Spmd({0, 1}, DistState::Split(0, 2));
  const auto r = Must(a, a, 100);
  EXPECT_EQ(r.kinds(), std::vector<K>{K::kIdentity});
  EXPECT_EQ(r.sent_bytes(), 0);
}

TEST(Hspmd, BottomTierSendRecv) {
  // Same DS, other devices: each position's shard (100/2 bytes) moves to the device at the same position.
  const auto r = Must(Spmd({0, 1}, DistState::Split(0, 2)), Spmd({2, 1}, DistState::Split(0, 2)), 100);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kSendRecv});
  ASSERT_EQ(r.steps[0].sends.size(), 1u);  // device 1 keeps its shard
  EXPECT_EQ(r.steps[0].sends[0].from, 0u);
  EXPECT_EQ(r.steps[0].sends[0].to, 2u);
  EXPECT_DOUBLE_EQ(r.steps[0].sends[0].bytes, 50);
}

TEST(Hspmd, BottomTierCollectives) {
  // {P:2, S0:2} -> {D:2, S0:2} on [0,1,2,3]: the P entry (outer) turns D: all-reduce among positions that
  // differ only in it, {0,2} and {1,3}, each over its half of the tensor (50 of 100 bytes).
  const DeviceGroup dg = {0, 1, 2, 3};
  auto r = Must(Spmd(dg, DistState({{kPartial, 2}, {0, 2}})), Spmd(dg, DistState({{kDuplicate, 2}, {0, 2}})), 100);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kAllReduce});
  EXPECT_EQ(Groups(r.steps[0]), (std::set<std::vector<uint32_t>>{{0, 2}, {1, 3}}));
  EXPECT_DOUBLE_EQ(r.steps[0].collectives[0].bytes, 50);

  r = Must(Spmd({0, 1}, DistState::Partial(2)), Spmd({0, 1}, DistState::Split(0, 2)), 100);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kReduceScatter});
  EXPECT_DOUBLE_EQ(r.steps[0].collectives[0].bytes, 100);  // the buffer reduced, each keeps 50

  r = Must(Spmd({0, 1}, DistState::Split(0, 2)), Spmd({0, 1}, DistState::Duplicate(2)), 100);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kAllGather});
  EXPECT_DOUBLE_EQ(r.steps[0].collectives[0].bytes, 100);
}

TEST(Hspmd, BottomTierBsrWhenNoCollectiveFits) {
  // Rows -> columns of a 2-D tensor on the same two devices: not AR/RS/AG. Finest slices: four quarters of 25
  // bytes; (row 0, col 0) and (row 1, col 1) stay (local copies), (row 0, col 1) goes 0 -> 1, (row 1, col 0)
  // goes 1 -> 0.
  const auto r = Must(Spmd({0, 1}, DistState::Split(0, 2)), Spmd({0, 1}, DistState::Split(1, 2)), 100, 2);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kBsr});
  EXPECT_EQ(r.steps[0].local_copies.size(), 2u);
  ASSERT_EQ(r.steps[0].sends.size(), 2u);
  EXPECT_DOUBLE_EQ(r.sent_bytes(), 50);
  // Another DG and DS: [0,1] halves -> [2,3,4,5] quarters, every quarter sent by the half that holds it.
  const auto r2 = Must(Spmd({0, 1}, DistState::Split(0, 2)), Spmd({2, 3, 4, 5}, DistState::Split(0, 4)), 100);
  ASSERT_EQ(r2.kinds(), std::vector<K>{K::kBsr});
  ASSERT_EQ(r2.steps[0].sends.size(), 4u);
  EXPECT_EQ(r2.steps[0].sends[1].from, 0u);  // quarter 1 (to device 3) lies in half 0
  EXPECT_EQ(r2.steps[0].sends[2].from, 1u);  // quarter 2 (to device 4) in half 1
  EXPECT_DOUBLE_EQ(r2.sent_bytes(), 100);
}

TEST(Hspmd, BsrRefusesPartial) {
  auto r = Resolve(Spmd({0, 1}, DistState::Partial(2)), Spmd({2, 3}, DistState::Duplicate(2)), 100, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Partial"), std::string::npos) << r.status().message();
}

// ---- Fig. 4, top tier (§4.2) ----

Annotation TwoPipelines(int hdim) {
  // Pipeline 0 in TP 4 on devices 0-3, pipeline 1 in TP 2 on devices 4-5.
  Annotation a;
  a.dg_union = {{0, 1, 2, 3}, {4, 5}};
  a.ds_union = {DistState::Split(0, 4), DistState::Split(0, 2)};
  a.hdim = hdim;
  return a;
}

TEST(Hspmd, SplitAllReduceTp4VsTp2) {
  // Finest slices: the quarters. Quarter q is held by TP rank q of pipeline 0 (device q) and by TP rank q/2
  // of pipeline 1 (device 4 + q/2): groups {0,4} {1,4} {2,5} {3,5}, each all-reducing 1/4 of 400 bytes.
  const auto r = Must(TwoPipelines(kPartial), TwoPipelines(kDuplicate), 400);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kSplitAllReduce});
  EXPECT_EQ(Groups(r.steps[0]), (std::set<std::vector<uint32_t>>{{0, 4}, {1, 4}, {2, 5}, {3, 5}}));
  for (const auto& c : r.steps[0].collectives) EXPECT_DOUBLE_EQ(c.bytes, 100);
  // ZeRO-1's pair (§8 footnote): Partial -> Split is SplitRS, Split -> Duplicate SplitAG, the same groups.
  const auto rs = Must(TwoPipelines(kPartial), TwoPipelines(0), 400);
  ASSERT_EQ(rs.kinds(), std::vector<K>{K::kSplitReduceScatter});
  EXPECT_EQ(Groups(rs.steps[0]), Groups(r.steps[0]));
  const auto ag = Must(TwoPipelines(0), TwoPipelines(kDuplicate), 400);
  ASSERT_EQ(ag.kinds(), std::vector<K>{K::kSplitAllGather});
  EXPECT_EQ(Groups(ag.steps[0]), Groups(r.steps[0]));
}

TEST(Hspmd, SplitAllReduceEqualsTheLoweringsChunkedGradientSync) {
  // The same two pipelines as a Plan: GradientAnnotation + Resolve give SplitAR, whose groups are the chunked
  // gradient-sync groups the lowering plays (models/plan.h DeriveGradSyncGroups, lcm(4, 2) = 4 chunks).
  auto model = LoadModel("llama-tiny");
  ASSERT_TRUE(model.ok()) << model.status().message();
  proto::Plan plan;
  const uint32_t L = model->num_layers();
  auto* p0 = plan.add_pipelines()->add_stages();
  for (uint32_t d : {0, 1, 2, 3}) p0->add_devices(d);
  p0->set_tp_degree(4);
  p0->set_layer_end(L);
  auto* p1 = plan.add_pipelines()->add_stages();
  for (uint32_t d : {4, 5}) p1->add_devices(d);
  p1->set_tp_degree(2);
  p1->set_layer_end(L);
  for (auto& p : *plan.mutable_pipelines()) {
    p.set_micro_batch_size(1);
    p.set_num_micro_batches(1);
  }
  std::set<std::vector<uint32_t>> lowering;
  for (const auto& g : DeriveGradSyncGroups(plan, *model)) {
    EXPECT_EQ(g.num_chunks, 4u);
    auto d = g.devices;
    std::sort(d.begin(), d.end());
    lowering.insert(d);
  }
  const Annotation grad = GradientAnnotation(plan, 1);
  Annotation synced = grad;
  synced.hdim = kDuplicate;
  const auto r = Must(grad, synced, 1);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kSplitAllReduce});
  EXPECT_EQ(Groups(r.steps[0]), lowering);
}

TEST(Hspmd, TopTierWithDifferentDsUnionsReshardsFirst) {
  // Fig. 7: subgroup 0 holds partial sums {P:2}, subgroup 1 already {S0:2}; the destination is {S0:2} in
  // both, duplicated across subgroups. Steps: RS in subgroup 0, identity in subgroup 1, then SplitAR per
  // half: {0,2} and {1,3}, 50 bytes each.
  Annotation src, dst;
  src.dg_union = dst.dg_union = {{0, 1}, {2, 3}};
  src.ds_union = {DistState::Partial(2), DistState::Split(0, 2)};
  src.hdim = kPartial;
  dst.ds_union = {DistState::Split(0, 2), DistState::Split(0, 2)};
  dst.hdim = kDuplicate;
  const auto r = Must(src, dst, 100);
  EXPECT_EQ(r.kinds(), (std::vector<K>{K::kReduceScatter, K::kIdentity, K::kSplitAllReduce}));
  EXPECT_EQ(Groups(r.steps[2]), (std::set<std::vector<uint32_t>>{{0, 2}, {1, 3}}));
  EXPECT_DOUBLE_EQ(r.steps[2].collectives[0].bytes, 50);
}

TEST(Hspmd, OtherHsizeOrDgUnionIsBsr) {
  // HSize 1 -> 2: BSR. Devices 0-3 hold quarters; 4 and 5 need halves 0 and 1, 0 and 1 keep theirs.
  Annotation dst;
  dst.dg_union = {{0, 4}, {1, 5}};
  dst.ds_union = {DistState::Split(0, 2), DistState::Split(0, 2)};
  const auto r = Must(Spmd({0, 1, 2, 3}, DistState::Split(0, 4)), dst, 400);
  ASSERT_EQ(r.kinds(), std::vector<K>{K::kBsr});
  EXPECT_EQ(r.steps[0].subgroup, -1);
  // Device 0 needs quarter 0 (local) and quarter 1 (from 1); device 1 quarter 0 (from 0) and 1 (local);
  // device 4 quarters 2, 3 (from 2, 3); device 5 the same: 6 sends of 100 bytes.
  EXPECT_DOUBLE_EQ(r.sent_bytes(), 600);
  // Same HSize, another HDim, another DG Union: BSR as well.
  Annotation a = TwoPipelines(0), b = TwoPipelines(kDuplicate);
  b.dg_union[1] = {6, 7};
  EXPECT_EQ(Must(a, b, 400).kinds(), std::vector<K>{K::kBsr});
}

// ---- BSR heuristics (§4.3, Fig. 8) ----

TEST(Hspmd, BsrHeuristicsOnFigure8) {
  // hetu-h20x32: devices 0-7 on node 0, 8-15 on node 1 (NVLink inside a node, InfiniBand across).
  auto cluster = LoadCluster("hetu-h20x32");
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  const Topology topo(*cluster);
  // Fig. 8's table as the text describes it: slice 1 owned and needed by GPU1; slice 2 owned by GPU1 and GPU9,
  // needed by GPU8; slices 3 and 4 owned by GPU1 and GPU2 (same NVLink bandwidth to the receivers 3 and 0).
  const std::vector<BsrSlice> table = {
      {{{0.00, 0.25}}, 10, {1}, {1}},
      {{{0.25, 0.50}}, 10, {1, 9}, {8}},
      {{{0.50, 0.75}}, 10, {1, 2}, {3}},
      {{{0.75, 1.00}}, 10, {1, 2}, {0}},
  };
  BsrOptions with;
  with.topology = &topo;
  BsrPlanner h(with);
  h.Add(table);
  // (I) slice 1: a local copy on GPU1. (II) slice 2: GPU9 (NVLink to GPU8) beats GPU1 (InfiniBand).
  // (III) slice 3: GPU1 and GPU2 tie on bandwidth and load (0): the lower id, GPU1; slice 4: GPU1 has sent
  // 10 bytes, GPU2 none: GPU2.
  ASSERT_EQ(h.local_copies().size(), 1u);
  EXPECT_EQ(h.local_copies()[0].to, 1u);
  ASSERT_EQ(h.sends().size(), 3u);
  EXPECT_EQ(h.sends()[0].from, 9u);
  EXPECT_EQ(h.sends()[1].from, 1u);
  EXPECT_EQ(h.sends()[2].from, 2u);
  // Without heuristics: the lowest owner id sends every slice (GPU1), the local copy stays.
  BsrOptions without;
  without.heuristics = false;
  without.topology = &topo;
  BsrPlanner n(without);
  n.Add(table);
  ASSERT_EQ(n.sends().size(), 3u);
  for (const auto& s : n.sends()) EXPECT_EQ(s.from, 1u);
  EXPECT_EQ(n.local_copies().size(), 1u);
  // A lost owner sends nothing: with GPU9 lost slice 2 comes from GPU1; with both lost it is missing.
  BsrOptions lost = with;
  lost.lost = {9};
  BsrPlanner l(lost);
  l.Add(table);
  EXPECT_EQ(l.sends()[0].from, 1u);
  lost.lost = {1, 9};
  BsrPlanner m(lost);
  m.Add(table);
  EXPECT_DOUBLE_EQ(m.missing_bytes(), 20);  // slice 1 (GPU1 needs it, nobody holds it) and slice 2
}

TEST(Hspmd, FusedBsrBalancesAcrossTensorsAndSendsOncePerPair) {
  // Two tensors, each owned by devices 0 and 1 (whole) and needed by device 2 (whole), 100 bytes each. Per
  // tensor (unfused) each fresh plan picks device 0; fused, device 1 sends the second (its load is lower).
  PlanTensor a{1, Spmd({0, 1}, DistState::Duplicate(2)), 100};
  PlanTensor b{2, Spmd({0, 1}, DistState::Duplicate(2)), 100};
  PlanTensor a2{1, Spmd({2}, DistState()), 100};
  PlanTensor b2{2, Spmd({2}, DistState()), 100};
  const auto unfused = PlanSwitch({a, b}, {a2, b2}, false, {});
  const auto fused = PlanSwitch({a, b}, {a2, b2}, true, {});
  ASSERT_EQ(unfused.rounds.size(), 2u);
  EXPECT_EQ(unfused.rounds[0][0].from, 0u);
  EXPECT_EQ(unfused.rounds[1][0].from, 0u);
  ASSERT_EQ(fused.rounds.size(), 1u);
  ASSERT_EQ(fused.rounds[0].size(), 2u);  // pairs 0->2 and 1->2, one send each
  EXPECT_EQ(fused.rounds[0][0].from, 0u);
  EXPECT_EQ(fused.rounds[0][1].from, 1u);
  EXPECT_DOUBLE_EQ(fused.sent_bytes, unfused.sent_bytes);
  EXPECT_DOUBLE_EQ(fused.sent_bytes, 200);
  // Many slices between one pair fuse into one send with the summed bytes.
  const auto f = FuseSends({{0, 1, 5}, {0, 1, 7}, {2, 1, 1}});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_DOUBLE_EQ(f[0].bytes, 12);
}

TEST(Hspmd, StageBoundaryIsSendRecvOrBsr) {
  // §8: inter-stage activations use SR (equal TP, other devices) or BSR (another TP degree).
  proto::Plan plan;
  auto* p = plan.add_pipelines();
  auto add = [&](std::vector<uint32_t> devs, uint32_t tp) {
    auto* s = p->add_stages();
    for (uint32_t d : devs) s->add_devices(d);
    s->set_tp_degree(tp);
  };
  add({0, 1}, 2);
  add({2, 3}, 2);
  add({4}, 1);
  auto [a, b] = StageBoundary(plan, 0, 0);
  EXPECT_EQ(Must(a, b, 10).kinds(), std::vector<K>{K::kSendRecv});
  auto [c, d] = StageBoundary(plan, 0, 1);
  const auto r = Must(c, d, 10);
  EXPECT_EQ(r.kinds(), std::vector<K>{K::kBsr});
  EXPECT_DOUBLE_EQ(r.sent_bytes(), 10);  // device 4 needs the whole activation once
}

// Annotations lowered to Plans: the weights' annotations of Table 5's and Table 7's strategies (Appendix A) and
// each pipeline's micro-batches give back the same pipelines — devices, TP degrees, layer ranges — so an
// HSPMD strategy and a hetsim plan say the same thing.
TEST(Hspmd, AnnotationsLowerBackToThePlan) {
  const std::string dir = std::string(HETSIM_SOURCE_DIR) + "/experiments/hetu/";
  for (const char* file : {"table5-32b-h800x16-h20x32.yaml", "table5-70b-h800x16-h20x24.yaml", "elastic/hetu-c2.yaml",
                           "elastic/hetu-c6.yaml"}) {
    SCOPED_TRACE(file);
    auto plan = LoadPlan(dir + file);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    auto model = LoadModel(std::string(file).find("70b") != std::string::npos ? "llama2-70b"
                                                                               : dir + "llama-32b-4k.yaml");
    ASSERT_TRUE(model.ok()) << model.status().message();
    std::vector<PipelineData> data;
    for (const auto& p : plan->pipelines()) data.push_back({p.micro_batch_size(), p.num_micro_batches()});
    auto back = LowerToPlan(WeightTensors(*plan, *model, 2), data, model->num_layers());
    ASSERT_TRUE(back.ok()) << back.status().message();
    ASSERT_EQ(back->pipelines_size(), plan->pipelines_size());
    for (int k = 0; k < plan->pipelines_size(); ++k) {
      const auto& a = plan->pipelines(k);
      const auto& b = back->pipelines(k);
      EXPECT_EQ(b.num_micro_batches(), a.num_micro_batches());
      ASSERT_EQ(b.stages_size(), a.stages_size()) << "pipeline " << k;
      for (int s = 0; s < a.stages_size(); ++s) {
        EXPECT_EQ(std::vector<uint32_t>(b.stages(s).devices().begin(), b.stages(s).devices().end()),
                  std::vector<uint32_t>(a.stages(s).devices().begin(), a.stages(s).devices().end()));
        EXPECT_EQ(b.stages(s).tp_degree(), std::max(1u, a.stages(s).tp_degree()));
        EXPECT_EQ(b.stages(s).layer_begin(), a.stages(s).layer_begin());
        EXPECT_EQ(b.stages(s).layer_end(), a.stages(s).layer_end());
      }
    }
  }
}

// What cannot be a plan is refused with the layer and the reason: a pipeline that comes back to devices it
// left (non-contiguous layers), and weights split across pipelines.
TEST(Hspmd, LoweringRefusesAnnotationsNoPlanExpresses) {
  auto tensor = [](uint32_t layer, DeviceGroup dg) {
    PlanTensor t;
    t.layer = layer;
    t.annotation = Spmd(std::move(dg), DistState::Split(0, 2));
    t.bytes = 8;
    return t;
  };
  std::vector<PlanTensor> w = {tensor(0, {0, 1}), tensor(1, {2, 3}), tensor(2, {0, 1})};
  auto r = LowerToPlan(w, {{1, 4}}, 3);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer 2"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("contiguous"), std::string::npos) << r.status().message();
  w[2] = tensor(2, {4, 5});
  w[1].annotation.hdim = 0;
  auto split = LowerToPlan(w, {{1, 4}}, 3);
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("layer 1"), std::string::npos) << split.status().message();
  auto ok = LowerToPlan({tensor(0, {0, 1}), tensor(1, {2, 3}), tensor(2, {4, 5})}, {{1, 4}}, 3);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->pipelines(0).stages_size(), 3);
}

}  // namespace
}  // namespace hetsim::models::hspmd
