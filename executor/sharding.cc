#include "executor/sharding.h"

#include <cmath>

namespace hetsim::executor {

const char* ParamKindName(ParamKind kind) {
  switch (kind) {
    case ParamKind::kEmbedding: return "embedding";
    case ParamKind::kAttnNorm: return "attn_norm";
    case ParamKind::kWq: return "wq";
    case ParamKind::kWk: return "wk";
    case ParamKind::kWv: return "wv";
    case ParamKind::kWoT: return "wo_t";
    case ParamKind::kMlpNorm: return "mlp_norm";
    case ParamKind::kWgate: return "w_gate";
    case ParamKind::kWup: return "w_up";
    case ParamKind::kWdownT: return "w_down_t";
    case ParamKind::kFinalNorm: return "final_norm";
    case ParamKind::kHead: return "head";
    case ParamKind::kRouter: return "router";
    case ParamKind::kExpertGate: return "expert_gate";
    case ParamKind::kExpertUp: return "expert_up";
    case ParamKind::kExpertDownT: return "expert_down_t";
  }
  return "?";
}

std::string ParamSpec::name() const { return "layer" + std::to_string(layer) + "." + ParamKindName(kind); }

HeadShard AttentionHeads(const models::TransformerModel& model, uint32_t tp, uint32_t tp_rank) {
  const int64_t heads = model.spec().num_attention_heads(), kv = model.kv_heads();
  HETSIM_CHECK(heads % tp == 0 && (kv % tp == 0 || tp % kv == 0), "AttentionHeads: TP degree does not divide heads");
  HeadShard h;
  h.q_heads = heads / tp;
  h.q_begin = tp_rank * h.q_heads;
  if (kv >= tp) {
    h.kv_heads = kv / tp;
    h.kv_begin = tp_rank * h.kv_heads;
  } else {
    h.kv_heads = 1;
    h.kv_begin = tp_rank * kv / tp;
  }
  return h;
}

std::vector<ParamSpec> LayerParams(const models::TransformerModel& model, uint32_t layer, uint32_t tp,
                                   uint32_t tp_rank, uint32_t ep, uint32_t ep_rank, uint32_t etp,
                                   uint32_t etp_rank) {
  const auto& m = model.spec();
  const int64_t h = m.hidden_size(), f = m.ffn_hidden_size(), v = m.vocab_size();
  const int64_t hd = model.head_dim(), heads = m.num_attention_heads(), kv = model.kv_heads();
  constexpr float kStd = 0.02f;
  const float out_std = kStd / std::sqrt(2.0f * static_cast<float>(model.num_blocks()));
  std::vector<ParamSpec> out;
  auto add = [&](ParamKind kind, int64_t rows, int64_t cols, Replication rep, float std_dev) {
    ParamSpec p;
    p.layer = layer;
    p.kind = kind;
    p.global_rows = rows;
    p.cols = cols;
    p.owned = SplitRows(rows, tp_rank, tp);
    p.held = rep == Replication::kCopy ? RowRange{0, rows} : p.owned;
    p.replication = tp == 1 ? Replication::kSharded : rep;
    p.tp_replicated = rep == Replication::kCopy;
    p.init_std = std_dev;
    if (p.replication == Replication::kSharded) p.held = p.owned;
    out.push_back(p);
  };
  switch (model.kind(layer)) {
    case models::LayerKind::kEmbedding:
      add(ParamKind::kEmbedding, v, h, Replication::kSharded, kStd);
      break;
    case models::LayerKind::kTransformer: {
      add(ParamKind::kAttnNorm, h, 1, Replication::kCopy, 0);
      add(ParamKind::kWq, heads * hd, h, Replication::kSharded, kStd);
      const Replication kv_rep = kv >= tp ? Replication::kSharded : Replication::kPartial;
      for (ParamKind kind : {ParamKind::kWk, ParamKind::kWv}) {
        add(kind, kv * hd, h, kv_rep, kStd);
        if (kv_rep == Replication::kPartial) {
          const HeadShard hs = AttentionHeads(model, tp, tp_rank);
          out.back().held = {hs.kv_begin * hd, (hs.kv_begin + 1) * hd};
        }
      }
      add(ParamKind::kWoT, heads * hd, h, Replication::kSharded, out_std);
      add(ParamKind::kMlpNorm, h, 1, Replication::kCopy, 0);
      if (!model.IsMoe(layer)) {
        add(ParamKind::kWgate, f, h, Replication::kSharded, kStd);
        add(ParamKind::kWup, f, h, Replication::kSharded, kStd);
        add(ParamKind::kWdownT, f, h, Replication::kSharded, out_std);
        break;
      }
      // MoE: the router (replicated over TP), the shared experts' TP-split MLP, the EP rank's experts.
      const auto& moe = m.moe();
      const auto shared = static_cast<int64_t>(model.SharedExpertWidth());
      add(ParamKind::kRouter, moe.num_experts(), h, Replication::kCopy, kStd);
      if (shared > 0) {
        add(ParamKind::kWgate, shared, h, Replication::kSharded, kStd);
        add(ParamKind::kWup, shared, h, Replication::kSharded, kStd);
        add(ParamKind::kWdownT, shared, h, Replication::kSharded, out_std);
      }
      // Expert e's rows on expert-TP rank k: [e·F + k·F/etp, e·F + (k+1)·F/etp) (column-parallel gate and up,
      // row-parallel down: the same rows of the transposed tensor).
      const int64_t E = moe.num_experts(), F = moe.expert_ffn_hidden_size(), local = E / ep;
      const RowRange part = SplitRows(F, etp_rank, etp);
      for (ParamKind kind : {ParamKind::kExpertGate, ParamKind::kExpertUp, ParamKind::kExpertDownT}) {
        for (int64_t e = ep_rank * local; e < (ep_rank + 1) * local; ++e) {
          add(kind, E * F, h, Replication::kSharded, kind == ParamKind::kExpertDownT ? out_std : kStd);
          out.back().held = out.back().owned = {e * F + part.begin, e * F + part.end};
          out.back().replication = Replication::kSharded;
          out.back().expert = true;
        }
      }
      break;
    }
    case models::LayerKind::kHead:
      add(ParamKind::kFinalNorm, h, 1, Replication::kCopy, 0);
      add(ParamKind::kHead, v, h, Replication::kSharded, kStd);
      break;
  }
  return out;
}

}  // namespace hetsim::executor
