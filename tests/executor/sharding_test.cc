// Sharding: shards partition every tensor, chunks nest in shards, and initial values depend on global
// coordinates only.
#include "executor/sharding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "executor/cpu_backend.h"
#include "executor/init.h"
#include "models/spec_io.h"

namespace hetsim::executor {
namespace {

TEST(ShardingTest, ShardsAreUnionsOfChunks) {
  // With t | n, shard k of t is chunks [k·n/t, (k+1)·n/t) of n, for any row count (uneven splits too).
  for (int64_t rows : {1, 7, 256, 688, 1000}) {
    for (int64_t t : {1, 2, 4, 8}) {
      for (int64_t n : {t, 2 * t, 4 * t}) {
        for (int64_t k = 0; k < t; ++k) {
          const RowRange shard = SplitRows(rows, k, t);
          EXPECT_EQ(shard.begin, SplitRows(rows, k * n / t, n).begin);
          EXPECT_EQ(shard.end, SplitRows(rows, (k + 1) * n / t - 1, n).end);
        }
      }
    }
  }
}

TEST(ShardingTest, ParameterCountsMatchTheModelAndShardsPartitionRows) {
  auto model = models::LoadModel("llama-tiny");
  ASSERT_TRUE(model.ok());
  for (uint32_t l = 0; l < model->num_layers(); ++l) {
    double params = 0;
    for (const auto& p : LayerParams(*model, l, 1, 0)) params += double(p.global_rows) * double(p.cols);
    EXPECT_EQ(params, model->Params(l)) << "layer " << l;
    for (uint32_t tp : {2u, 4u, 8u}) {
      const auto specs0 = LayerParams(*model, l, tp, 0);
      for (size_t i = 0; i < specs0.size(); ++i) {
        int64_t covered = 0;
        for (uint32_t k = 0; k < tp; ++k) {
          const ParamSpec p = LayerParams(*model, l, tp, k)[i];
          EXPECT_EQ(p.owned.begin, covered) << p.name() << " tp " << tp;
          covered = p.owned.end;
          EXPECT_LE(p.held.begin, p.owned.begin);
          EXPECT_GE(p.held.end, p.owned.end);
        }
        EXPECT_EQ(covered, specs0[i].global_rows);
      }
    }
  }
}

TEST(ShardingTest, SharedKeyValueHeadsWhenTpExceedsThem) {
  auto model = models::LoadModel("llama-tiny");  // 8 heads, 4 kv heads, head_dim 32
  ASSERT_TRUE(model.ok());
  // TP 8: rank k computes query head k and key/value head k·4/8 (shared by ranks 2j and 2j+1).
  for (uint32_t k = 0; k < 8; ++k) {
    const HeadShard h = AttentionHeads(*model, 8, k);
    EXPECT_EQ(h.q_begin, k);
    EXPECT_EQ(h.q_heads, 1);
    EXPECT_EQ(h.kv_begin, k / 2);
    EXPECT_EQ(h.kv_heads, 1);
    const auto specs = LayerParams(*model, 1, 8, k);
    const ParamSpec& wk = specs[2];
    ASSERT_EQ(wk.kind, ParamKind::kWk);
    EXPECT_EQ(wk.replication, Replication::kPartial);
    EXPECT_EQ(wk.held, (RowRange{(k / 2) * 32, (k / 2 + 1) * 32}));
    EXPECT_EQ(wk.owned, (RowRange{k * 16, (k + 1) * 16}));
  }
  // TP 2: two query heads... of four, two kv heads, no sharing.
  const HeadShard h = AttentionHeads(*model, 2, 1);
  EXPECT_EQ(h.q_begin, 4);
  EXPECT_EQ(h.kv_begin, 2);
  EXPECT_EQ(h.kv_heads, 2);
  EXPECT_EQ(LayerParams(*model, 1, 2, 1)[2].replication, Replication::kSharded);
}

TEST(ShardingTest, InitialValuesDependOnGlobalCoordinatesOnly) {
  auto be = MakeCpuBackend();
  auto model = models::LoadModel("llama-tiny");
  ASSERT_TRUE(model.ok());
  const ParamSpec full = LayerParams(*model, 2, 1, 0)[6];  // w_gate [688, 256]
  ASSERT_EQ(full.kind, ParamKind::kWgate);
  Buffer whole(be.get(), full.global_rows, full.cols, DType::kF32);
  be->InitParam(whole.t(), 7, full.tensor_id(), 0, full.init_std);
  double sum2 = 0;
  for (int64_t i = 0; i < whole.t().numel(); ++i) sum2 += double(whole.t().ptr<float>()[i]) * whole.t().ptr<float>()[i];
  // N(0, 0.02²): the sample standard deviation of 176k values is within 1% of 0.02.
  EXPECT_NEAR(std::sqrt(sum2 / double(whole.t().numel())), 0.02, 0.0002);
  for (uint32_t k = 0; k < 4; ++k) {
    const ParamSpec p = LayerParams(*model, 2, 4, k)[6];
    Buffer shard(be.get(), p.held.size(), p.cols, DType::kF32);
    be->InitParam(shard.t(), 7, p.tensor_id(), p.held.begin, p.init_std);
    for (int64_t i = 0; i < shard.t().numel(); ++i) {
      ASSERT_EQ(shard.t().ptr<float>()[i], whole.t().ptr<float>()[p.held.begin * p.cols + i]);
    }
  }
  // Another seed, another tensor: other values.
  EXPECT_NE(InitValue(7, full.tensor_id(), 3, 4, 0.02f), InitValue(8, full.tensor_id(), 3, 4, 0.02f));
  EXPECT_NE(InitValue(7, full.tensor_id(), 3, 4, 0.02f), InitValue(7, full.tensor_id() + 1, 3, 4, 0.02f));
  EXPECT_EQ(InitValue(7, full.tensor_id(), 3, 4, 0.0f), 1.0f);
}

TEST(ShardingTest, ExpertLayoutsHoldEveryExpertRowOnceAndKeepTheRouterWhole) {
  auto model = models::LoadModel("llama-tiny-moe");  // 8 experts of width 128; layer 2 is an MoE block
  ASSERT_TRUE(model.ok());
  const int64_t E = 8, F = 128;
  for (const auto& [ep, etp] : {std::pair{1u, 1u}, {2u, 1u}, {2u, 2u}, {1u, 4u}, {4u, 2u}}) {
    // Per expert tensor: which rank (EP rank, expert-TP rank) holds each global row.
    std::map<ParamKind, std::vector<int>> holder;
    for (uint32_t j = 0; j < ep; ++j) {
      for (uint32_t k = 0; k < etp; ++k) {
        int64_t experts = 0;
        for (const ParamSpec& p : LayerParams(*model, 2, 2, 0, ep, j, etp, k)) {
          if (p.kind == ParamKind::kRouter) {
            EXPECT_TRUE(p.tp_replicated);
            EXPECT_EQ(p.held, (RowRange{0, E}));
          }
          if (!p.expert) continue;
          EXPECT_EQ(p.global_rows, E * F);
          EXPECT_EQ(p.held, p.owned);
          // The (experts-th mod E/ep) local expert's rows on expert-TP rank k: a contiguous F/etp of its F.
          const int64_t e = j * (E / ep) + experts++ % (E / ep);
          EXPECT_EQ(p.held, (RowRange{e * F + k * F / etp, e * F + (k + 1) * F / etp})) << p.name();
          auto& rows = holder.try_emplace(p.kind, E * F, -1).first->second;
          for (int64_t r = p.held.begin; r < p.held.end; ++r) {
            EXPECT_EQ(rows[static_cast<size_t>(r)], -1) << p.name() << " row " << r << " held twice";
            rows[static_cast<size_t>(r)] = static_cast<int>(j * etp + k);
          }
        }
        EXPECT_EQ(experts, 3 * E / ep);  // gate, up and down of each local expert
      }
    }
    ASSERT_EQ(holder.size(), 3u);
    for (const auto& [kind, rows] : holder) {
      EXPECT_EQ(std::count(rows.begin(), rows.end(), -1), 0) << ParamKindName(kind) << " ep " << ep << " etp " << etp;
    }
  }
}

TEST(ShardingTest, SyntheticDataIsDeterministicAndLearnable) {
  std::vector<int32_t> a(65), b(65), c(65);
  SyntheticSequence(1, 5, 65, 1024, a.data());
  SyntheticSequence(1, 5, 65, 1024, b.data());
  SyntheticSequence(1, 6, 65, 1024, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Most transitions follow the fixed bigram function f(prev): the same previous token gives the same
  // next token across sequences far more often than chance (1/1024).
  std::vector<int32_t> next_of(1024, -1);
  int agree = 0, pairs = 0;
  for (uint64_t s = 0; s < 200; ++s) {
    SyntheticSequence(1, s, 65, 1024, a.data());
    for (int i = 1; i < 65; ++i) {
      int32_t& n = next_of[static_cast<size_t>(a[static_cast<size_t>(i - 1)])];
      if (n >= 0) {
        ++pairs;
        agree += n == a[static_cast<size_t>(i)];
      }
      n = a[static_cast<size_t>(i)];
      ASSERT_GE(a[static_cast<size_t>(i)], 0);
      ASSERT_LT(a[static_cast<size_t>(i)], 1024);
    }
  }
  // Both transitions follow f with probability (7/8)², so agreement is about 0.77.
  EXPECT_GT(double(agree) / pairs, 0.7);
}

}  // namespace
}  // namespace hetsim::executor
