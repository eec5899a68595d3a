// The routed experts of an MoE block (StageModel::MoeForward / MoeBackward; docs/executor.md "Mixture of
// experts"): a softmax router with top-k, Megatron-Core's drop-and-pad dispatch with a fixed capacity per
// expert, the all-to-all exchange of token copies in the EP group, under expert TP the all-gather of the
// expert-TP group's received copies and the reduce-scatter of the experts' partial outputs, the local
// experts' SwiGLU MLPs, and the weighted un-permutation; the backward is the exact gradient of all of it,
// the router's included.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "executor/stage_model.h"

namespace hetsim::executor {

void StageModel::SetExpertParallel(Comm* ep_comm, Comm* etp_comm) {
  HETSIM_CHECK(ep_comm == nullptr ? options_.ep == 1 : ep_comm->size() == static_cast<int>(options_.ep) &&
                                                           ep_comm->rank() == static_cast<int>(options_.ep_rank),
               "StageModel: the EP communicator does not match ModelOptions::ep and ep_rank");
  HETSIM_CHECK(etp_comm == nullptr ? options_.etp == 1
                                   : etp_comm->size() == static_cast<int>(options_.etp) &&
                                         etp_comm->rank() == static_cast<int>(options_.etp_rank),
               "StageModel: the expert-TP communicator does not match ModelOptions::etp and etp_rank");
  ep_comm_ = ep_comm;
  etp_comm_ = etp_comm;
}

StageModel::MoeRoute StageModel::Route(const std::vector<float>& logits, int64_t tokens) const {
  const auto& moe = model_.spec().moe();
  const int64_t E = moe.num_experts(), k = moe.top_k();
  MoeRoute r;
  // Megatron-Core's drop-and-pad capacity of one rank's tokens: ceil(cf · tokens · top_k / E) per expert.
  r.capacity = static_cast<int64_t>(std::ceil(options_.capacity_factor * static_cast<double>(tokens * k) /
                                              static_cast<double>(E) - 1e-9));
  r.slot_token.assign(static_cast<size_t>(E * r.capacity), -1);
  r.slot_weight.assign(r.slot_token.size(), 0.0f);
  r.copy_slot.assign(static_cast<size_t>(tokens * k), -1);
  r.weight.assign(r.copy_slot.size(), 0.0f);
  r.expert.assign(r.copy_slot.size(), 0);
  std::vector<int64_t> filled(static_cast<size_t>(E), 0);
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data() + t * E;
    // Top-k by logit, ties to the lower expert index (deterministic); then the softmax over the chosen
    // logits, which equals the softmax over all experts renormalised over the top k (Mixtral, Qwen3).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    const float top = row[order[0]];
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(row[order[static_cast<size_t>(j)]] - top);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      const size_t c = static_cast<size_t>(t * k + j);
      r.expert[c] = e;
      r.weight[c] = std::exp(row[e] - top) / sum;
      // Slots in token order (Megatron-Core's "position" drop policy): copies beyond the capacity are
      // dropped (their weight multiplies nothing), empty slots stay padding.
      int64_t& n = filled[static_cast<size_t>(e)];
      if (n == r.capacity) continue;
      const int64_t slot = e * r.capacity + n++;
      r.copy_slot[c] = slot;
      r.slot_token[static_cast<size_t>(slot)] = t;
      r.slot_weight[static_cast<size_t>(slot)] = r.weight[c];
    }
  }
  return r;
}

void StageModel::EpAllToAll(Tensor in, Tensor out, int32_t mb) {
  if (ep_comm_ == nullptr) {
    be_->Copy(out, in);  // EP 1: the exchange is the identity (the lowering has no all-to-all)
    return;
  }
  pending_ep_.emplace_back(models::CollectiveKind::kAllToAll, static_cast<double>(in.bytes()));
  SliceRecorder::Scope scope(recorder_, Category::kEp, mb);
  ep_comm_->AllToAll(in, out);
}

Buffer StageModel::GatherExperts(Buffer grouped, int32_t mb) {
  if (etp_comm_ == nullptr) return grouped;
  const int64_t etp = options_.etp, local = model_.spec().moe().num_experts() / options_.ep;
  const int64_t rows = grouped.t().rows, h = grouped.t().cols;
  Buffer members = NewAct(etp * rows, h), out = NewAct(etp * rows, h);
  pending_ep_.emplace_back(models::CollectiveKind::kAllGather, static_cast<double>(out.t().bytes()));
  {
    SliceRecorder::Scope scope(recorder_, Category::kEp, mb);
    etp_comm_->AllGather(grouped.t(), members.t());
  }
  // [etp][local experts][rows / local] → [local experts][etp][rows / local]: each expert's rows together.
  Regroup(members.t(), out.t(), local, etp, true);
  return out;
}

Buffer StageModel::ScatterExperts(Buffer partial, int32_t mb) {
  if (etp_comm_ == nullptr) return partial;
  const int64_t etp = options_.etp, local = model_.spec().moe().num_experts() / options_.ep;
  const int64_t rows = partial.t().rows, h = partial.t().cols;
  Buffer members = NewAct(rows, h), mine = NewAct(rows / etp, h);
  Regroup(members.t(), partial.t(), local, etp, false);
  partial.Reset();
  pending_ep_.emplace_back(models::CollectiveKind::kReduceScatter, static_cast<double>(members.t().bytes()));
  SliceRecorder::Scope scope(recorder_, Category::kEp, mb);
  etp_comm_->ReduceScatter(members.t(), mine.t());
  return mine;
}

Buffer StageModel::ToExperts(Tensor slots, int64_t capacity, int32_t mb) {
  const int64_t ep = options_.ep, local = model_.spec().moe().num_experts() / ep, h = slots.cols;
  // Slots are expert-major, so EP rank j's experts are the j-th block of the send buffer as it is.
  Buffer recv = NewAct(slots.rows, h);
  EpAllToAll(slots, recv.t(), mb);
  // Received: block j (source rank j) holds [local experts][C]; the experts want [local experts][ep][C].
  Buffer grouped = NewAct(slots.rows, h);
  for (int64_t j = 0; j < ep; ++j) {
    for (int64_t e = 0; e < local; ++e) {
      const int64_t from = (j * local + e) * capacity, to = (e * ep + j) * capacity;
      be_->Copy(grouped.t().Rows(to, to + capacity), recv.t().Rows(from, from + capacity));
    }
  }
  return grouped;
}

Buffer StageModel::ToSlots(Tensor grouped, int64_t capacity, int32_t mb) {
  const int64_t ep = options_.ep, local = model_.spec().moe().num_experts() / ep, h = grouped.cols;
  Buffer send = NewAct(grouped.rows, h);
  for (int64_t j = 0; j < ep; ++j) {
    for (int64_t e = 0; e < local; ++e) {
      const int64_t to = (j * local + e) * capacity, from = (e * ep + j) * capacity;
      be_->Copy(send.t().Rows(to, to + capacity), grouped.Rows(from, from + capacity));
    }
  }
  Buffer slots = NewAct(grouped.rows, h);
  EpAllToAll(send.t(), slots.t(), mb);
  return slots;
}

Buffer StageModel::ExpertsForward(uint32_t layer, BlockSaved& s, int64_t rows) {
  const auto& moe = model_.spec().moe();
  const int64_t local = moe.num_experts() / options_.ep, F = moe.expert_ffn_hidden_size() / options_.etp;
  const int64_t h = model_.spec().hidden_size();
  s.e_gate = NewAct(local * rows, F);
  s.e_up = NewAct(local * rows, F);
  s.e_act = NewAct(local * rows, F);
  Buffer out = NewAct(local * rows, h);
  for (int64_t e = 0; e < local; ++e) {
    const Tensor x = s.e_in.t().Rows(e * rows, (e + 1) * rows);
    be_->Gemm(s.e_gate.t().Rows(e * rows, (e + 1) * rows), x, false, P(layer, ParamKind::kExpertGate, e).w(), true,
              1, 0);
    be_->Gemm(s.e_up.t().Rows(e * rows, (e + 1) * rows), x, false, P(layer, ParamKind::kExpertUp, e).w(), true, 1, 0);
  }
  be_->SwiGlu(s.e_act.t(), s.e_gate.t(), s.e_up.t());
  for (int64_t e = 0; e < local; ++e) {
    be_->Gemm(out.t().Rows(e * rows, (e + 1) * rows), s.e_act.t().Rows(e * rows, (e + 1) * rows), false,
              P(layer, ParamKind::kExpertDownT, e).w(), false, 1, 0);
  }
  return out;
}

Buffer StageModel::ExpertsBackward(uint32_t layer, BlockSaved& s, Tensor dout, int64_t rows) {
  const auto& moe = model_.spec().moe();
  const int64_t local = moe.num_experts() / options_.ep, F = moe.expert_ffn_hidden_size() / options_.etp;
  const int64_t h = model_.spec().hidden_size();
  Buffer dact = NewAct(local * rows, F);
  for (int64_t e = 0; e < local; ++e) {
    Param& wd = P(layer, ParamKind::kExpertDownT, e);
    const Tensor d = dout.Rows(e * rows, (e + 1) * rows);
    be_->Gemm(dact.t().Rows(e * rows, (e + 1) * rows), d, false, wd.w(), true, 1, 0);
    be_->Gemm(wd.grad.t(), s.e_act.t().Rows(e * rows, (e + 1) * rows), true, d, false, 1, 1);
  }
  s.e_act.Reset();
  Buffer dgate = NewAct(local * rows, F), dup = NewAct(local * rows, F);
  be_->SwiGluBackward(dgate.t(), dup.t(), s.e_gate.t(), s.e_up.t(), dact.t());
  dact.Reset();
  s.e_gate.Reset();
  s.e_up.Reset();
  Buffer dx = NewAct(local * rows, h);
  for (int64_t e = 0; e < local; ++e) {
    Param& wg = P(layer, ParamKind::kExpertGate, e);
    Param& wu = P(layer, ParamKind::kExpertUp, e);
    const Tensor g = dgate.t().Rows(e * rows, (e + 1) * rows), u = dup.t().Rows(e * rows, (e + 1) * rows);
    const Tensor x = s.e_in.t().Rows(e * rows, (e + 1) * rows), out = dx.t().Rows(e * rows, (e + 1) * rows);
    be_->Gemm(out, g, false, wg.w(), false, 1, 0);
    be_->Gemm(out, u, false, wu.w(), false, 1, 1);
    be_->Gemm(wg.grad.t(), g, true, x, false, 1, 1);
    be_->Gemm(wu.grad.t(), u, true, x, false, 1, 1);
  }
  s.e_in.Reset();
  return dx;
}

Buffer StageModel::MoeForward(uint32_t layer, uint32_t mb, BlockSaved& s, Tensor n2) {
  const auto imb = static_cast<int32_t>(mb);
  const int64_t tokens = n2.rows, h = n2.cols, E = model_.spec().moe().num_experts();
  // Router: logits = n2 · W_rᵀ, routed on the host (a few values per token).
  Buffer logits = New(tokens, E, DType::kF32);
  be_->Gemm(logits.t(), n2, false, P(layer, ParamKind::kRouter).w(), true, 1, 0);
  std::vector<float> host(static_cast<size_t>(tokens * E));
  be_->Download(host.data(), logits.t());
  s.route = Route(host, tokens);
  const int64_t C = s.route.capacity;
  // Dispatch: each slot gets its token's row (padding: zeros), the slots go to their experts' EP ranks.
  // Expert TP: every member of the group computes its F/etp units of each local expert for the group's
  // copies (gathered), and the partial outputs are summed back onto the members that received them.
  Buffer slots = NewAct(E * C, h);
  be_->GatherRows(slots.t(), n2, s.route.slot_token, {});
  s.e_in = GatherExperts(ToExperts(slots.t(), C, imb), imb);
  slots.Reset();
  Buffer out = ScatterExperts(ExpertsForward(layer, s, options_.etp * options_.ep * C), imb);
  // Combine: the outputs back to the slots' owners, each added to its token weighted by its router weight.
  s.e_out = ToSlots(out.t(), C, imb);
  Buffer y = NewAct(tokens, h);
  be_->Fill(y.t(), 0);
  be_->ScatterAddRows(y.t(), s.e_out.t(), s.route.slot_token, s.route.slot_weight);
  return y;
}

Buffer StageModel::MoeBackward(uint32_t layer, uint32_t mb, BlockSaved& s, Tensor n2, Tensor dy) {
  const auto imb = static_cast<int32_t>(mb);
  const auto& moe = model_.spec().moe();
  const int64_t tokens = n2.rows, h = n2.cols, E = moe.num_experts(), k = moe.top_k();
  const MoeRoute& r = s.route;
  const int64_t C = r.capacity;
  // y[t] = Σ_j w_tj · out[slot_tj]: d out[slot] = w · dy[t], and d w_tj = dy[t] · out[slot_tj].
  Buffer dslots = NewAct(E * C, h);
  be_->GatherRows(dslots.t(), dy, r.slot_token, {});
  Buffer dots = New(E * C, 1, DType::kF32);
  be_->RowDots(dots.t(), dslots.t(), s.e_out.t());
  s.e_out.Reset();
  std::vector<float> slot_dw(static_cast<size_t>(E * C));
  be_->Download(slot_dw.data(), dots.t());
  be_->GatherRows(dslots.t(), dy, r.slot_token, r.slot_weight);
  // The combine's gradient goes to the experts (gathered over expert TP: the reduce-scatter's gradient), theirs
  // back to the slots (the dispatch's gradient; partial under expert TP, summed by the all-gather's gradient).
  Buffer dout = GatherExperts(ToExperts(dslots.t(), C, imb), imb);
  dslots.Reset();
  Buffer dx = ScatterExperts(ExpertsBackward(layer, s, dout.t(), options_.etp * options_.ep * C), imb);
  dout.Reset();
  Buffer dx_slots = ToSlots(dx.t(), C, imb);
  dx.Reset();
  Buffer dn2 = NewAct(tokens, h);
  be_->Fill(dn2.t(), 0);
  be_->ScatterAddRows(dn2.t(), dx_slots.t(), r.slot_token, {});
  dx_slots.Reset();
  // The router: w = softmax over the chosen logits, so d logit_e = w_e · (d w_e − Σ_j w_j d w_j) for the
  // chosen experts and 0 for the others (a dropped copy's output is absent: its d w is 0).
  std::vector<float> dlogits(static_cast<size_t>(tokens * E), 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    float dot = 0;
    for (int64_t j = 0; j < k; ++j) {
      const size_t c = static_cast<size_t>(t * k + j);
      if (r.copy_slot[c] >= 0) dot += r.weight[c] * slot_dw[static_cast<size_t>(r.copy_slot[c])];
    }
    for (int64_t j = 0; j < k; ++j) {
      const size_t c = static_cast<size_t>(t * k + j);
      const float dw = r.copy_slot[c] >= 0 ? slot_dw[static_cast<size_t>(r.copy_slot[c])] : 0.0f;
      dlogits[static_cast<size_t>(t * E + r.expert[c])] = r.weight[c] * (dw - dot);
    }
  }
  Buffer dl = New(tokens, E, DType::kF32);
  be_->Upload(dl.t(), dlogits.data());
  Buffer dl_act;
  if (be_->act_dtype() != DType::kF32) {
    dl_act = NewAct(tokens, E);
    be_->Copy(dl_act.t(), dl.t());
  }
  const Tensor dlt = dl_act.empty() ? dl.t() : dl_act.t();
  Param& router = P(layer, ParamKind::kRouter);
  be_->Gemm(dn2.t(), dlt, false, router.w(), false, 1, 1);
  be_->Gemm(router.grad.t(), dlt, true, n2, false, 1, 1);
  s.route = MoeRoute{};
  return dn2;
}

}  // namespace hetsim::executor
