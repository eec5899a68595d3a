// How the parameters of each plan layer are laid out and split over a TP group (Megatron-LM,
// Shoeybi et al. 2019 §3): the query/key/value and gate/up projections are column-parallel (split by
// output rows: heads, FFN units), the attention output and down projections are row-parallel (split by
// input features), the embedding and the output head are vocabulary-parallel, and the RMSNorm weights
// are replicated.
//
// Every tensor is stored as a row-major matrix whose ROWS are the dimension TP splits (the row-parallel
// weights are stored transposed, [in, out]), so that every shard, and every gradient-sync chunk
// (HexiScale §3.2: a layer is cut into lcm(TP degrees) chunks), is a contiguous row range. The shard of
// TP rank k of t over D rows is [⌊k·D/t⌋, ⌊(k+1)·D/t⌋); chunk c of n is [⌊c·D/n⌋, ⌊(c+1)·D/n⌋), so with
// t | n the shard of rank k is exactly the chunks k·n/t .. (k+1)·n/t − 1.
//
// A rank can hold more rows than its shard: replicated norms (held whole, identical gradients on every
// TP rank) and, when TP exceeds the number of key/value heads, the one key/value head a rank shares with
// its neighbours (gradients are partial sums over the sharers). `owned` is always the shard.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/transformer.h"

namespace hetsim::executor {

struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

// Rows of part `k` of `n` of a dimension of `rows` rows.
inline RowRange SplitRows(int64_t rows, int64_t k, int64_t n) { return {k * rows / n, (k + 1) * rows / n}; }

enum class ParamKind : uint8_t {
  kEmbedding,   // [vocab, hidden]
  kAttnNorm,    // [hidden, 1]
  kWq,          // [heads·head_dim, hidden]
  kWk,          // [kv_heads·head_dim, hidden]
  kWv,          // [kv_heads·head_dim, hidden]
  kWoT,         // [heads·head_dim, hidden] (the output projection, transposed)
  kMlpNorm,     // [hidden, 1]
  kWgate,       // [ffn, hidden]
  kWup,         // [ffn, hidden]
  kWdownT,      // [ffn, hidden] (the down projection, transposed)
  kFinalNorm,   // [hidden, 1]
  kHead,        // [vocab, hidden]
  // An MoE block (models::TransformerModel::IsMoe): kMlpNorm as above; kWgate, kWup and kWdownT are its
  // shared experts' MLP (width SharedExpertWidth, absent without shared experts); the router and the routed
  // experts, expert e's rows [e·F, (e+1)·F) of each expert tensor (F = moe.expert_ffn_hidden_size). A rank
  // holds each of its local experts' rows as a tensor of its own (Transformer Engine's GroupedLinear keeps
  // one weight per local expert).
  kRouter,        // [experts, hidden] (replicated over TP, like the norms)
  kExpertGate,    // [experts·F, hidden] (column-parallel under expert TP)
  kExpertUp,      // [experts·F, hidden] (column-parallel under expert TP)
  kExpertDownT,   // [experts·F, hidden] (the down projections, transposed: row-parallel under expert TP)
};
const char* ParamKindName(ParamKind kind);

enum class Replication : uint8_t {
  kSharded,  // held == owned
  kCopy,     // held whole by every TP rank; gradients identical across the TP group
  kPartial,  // a key/value head shared by several TP ranks; each computes a partial gradient
};

struct ParamSpec {
  uint32_t layer = 0;
  ParamKind kind = ParamKind::kEmbedding;
  int64_t global_rows = 0;
  int64_t cols = 0;
  RowRange held;   // rows this rank stores
  RowRange owned;  // this rank's shard (⊆ held)
  Replication replication = Replication::kSharded;
  // Replicated over TP at any TP degree, TP 1 included (the norms, an MoE block's router): every rank holds
  // the whole tensor (GradSync synchronises all of it over DP where the group shares one TP degree).
  bool tp_replicated = false;
  float init_std = 0;  // 0 = initialised to ones
  // A routed expert's part of an expert tensor: the experts are split over the EP group (rank j of ep holds
  // experts [j·E/ep, (j+1)·E/ep)) and each expert's F rows over the expert-TP group (rank k of etp holds
  // rows [k·F/etp, (k+1)·F/etp) of each), not over TP; its gradients synchronise over the expert-DP group
  // (models::GradSyncGroup::Part::kExperts).
  bool expert = false;
  uint64_t tensor_id() const { return uint64_t{layer} * 16 + static_cast<uint64_t>(kind); }
  std::string name() const;  // "layer3.wq"
};

// The attention heads TP rank k of t computes: query heads [q_begin, q_begin + q_heads) and key/value
// heads [kv_begin, kv_begin + kv_heads). Requires t | heads and (t | kv or kv | t).
struct HeadShard {
  int64_t q_begin = 0, q_heads = 0, kv_begin = 0, kv_heads = 0;
};
HeadShard AttentionHeads(const models::TransformerModel& model, uint32_t tp, uint32_t tp_rank);

// The parameters of plan layer `layer` held by TP rank `tp_rank` of `tp` and, in an MoE block, EP rank
// `ep_rank` of `ep` and expert-TP rank `etp_rank` of `etp` (Megatron-Core's expert layout), in a fixed
// order: a routed expert tensor comes as one ParamSpec per local expert, in expert order (its `held` rows
// are that expert's rows on this expert-TP rank). Initialisation: N(0, 0.02²) for matrices, 0.02/√(2L) for
// the residual output projections (attention output, down projections; GPT-2 / Megatron-LM), ones for norms.
std::vector<ParamSpec> LayerParams(const models::TransformerModel& model, uint32_t layer, uint32_t tp,
                                   uint32_t tp_rank, uint32_t ep = 1, uint32_t ep_rank = 0, uint32_t etp = 1,
                                   uint32_t etp_rank = 0);

}  // namespace hetsim::executor
