#include "executor/stage_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace hetsim::executor {

StageModel::StageModel(Backend* backend, const models::TransformerModel& model,
                       std::vector<models::LayerRange> chunks, uint32_t tp, uint32_t tp_rank, Comm* tp_comm,
                       const ModelOptions& options, SliceRecorder* recorder)
    : be_(backend),
      model_(model),
      chunks_(std::move(chunks)),
      tp_(tp),
      tp_rank_(tp_rank),
      tp_comm_(tp_comm),
      options_(options),
      recorder_(recorder) {
  HETSIM_CHECK(!chunks_.empty(), "StageModel: no layers");
  for (size_t c = 0; c < chunks_.size(); ++c) {
    HETSIM_CHECK(chunks_[c].begin < chunks_[c].end && chunks_[c].end <= model.num_layers() &&
                     (c == 0 || chunks_[c - 1].end <= chunks_[c].begin),
                 "StageModel: bad layer ranges");
  }
  HETSIM_CHECK(tp == 1 || (tp_comm != nullptr && tp_comm->size() == static_cast<int>(tp)),
               "StageModel: a TP degree above 1 needs a TP communicator of that size");
  heads_ = AttentionHeads(model, tp, tp_rank);
  ffn_local_ = SplitRows(model.spec().ffn_hidden_size(), tp_rank, tp).size();
  shared_local_ = SplitRows(static_cast<int64_t>(model.SharedExpertWidth()), tp_rank, tp).size();
  HETSIM_CHECK(options.ep >= 1 && options.ep_rank < options.ep &&
                   (!model.HasMoe() || model.spec().moe().num_experts() % options.ep == 0),
               "StageModel: EP rank " + std::to_string(options.ep_rank) + " of " + std::to_string(options.ep) +
                   " does not split the experts");
  HETSIM_CHECK(options.etp >= 1 && options.etp_rank < options.etp &&
                   (!model.HasMoe() || model.spec().moe().expert_ffn_hidden_size() % options.etp == 0),
               "StageModel: expert-TP rank " + std::to_string(options.etp_rank) + " of " +
                   std::to_string(options.etp) + " does not split the experts' width");
  vocab_begin_ = SplitRows(model.spec().vocab_size(), tp_rank, tp).begin;
  layer_first_param_.assign(model.num_layers(), SIZE_MAX);
  for (uint32_t l = 0; l < model.num_layers(); ++l) {
    if (std::none_of(chunks_.begin(), chunks_.end(), [&](const models::LayerRange& c) { return c.contains(l); })) {
      continue;
    }
    layer_first_param_[l] = params_.size();
    for (const ParamSpec& spec :
         LayerParams(model, l, tp, tp_rank, options.ep, options.ep_rank, options.etp, options.etp_rank)) {
      Param p;
      p.spec = spec;
      p.master = New(spec.held.size(), spec.cols, DType::kF32);
      be_->InitParam(p.master.t(), options.seed, spec.tensor_id(), spec.held.begin, spec.init_std);
      if (be_->separate_weight_copy()) {
        p.weight = NewAct(spec.held.size(), spec.cols);
        be_->Copy(p.weight.t(), p.master.t());
      }
      p.grad = New(spec.held.size(), spec.cols, DType::kF32);
      p.adam_m = New(spec.held.size(), spec.cols, DType::kF32);
      p.adam_v = New(spec.held.size(), spec.cols, DType::kF32);
      be_->Fill(p.grad.t(), 0);
      be_->Fill(p.adam_m.t(), 0);
      be_->Fill(p.adam_v.t(), 0);
      params_.push_back(std::move(p));
    }
  }
  loss_ = New(1, 1, DType::kF32);
  be_->Fill(loss_.t(), 0);
}

int StageModel::ChunkOf(uint32_t begin, uint32_t end) const {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c].begin == begin && chunks_[c].end == end) return static_cast<int>(c);
  }
  return -1;
}

Param& StageModel::P(uint32_t layer, ParamKind kind, int64_t expert) {
  const size_t first = layer_first_param_.at(layer);
  for (size_t i = first; i < params_.size() && params_[i].spec.layer == layer; ++i) {
    if (params_[i].spec.kind == kind && expert-- == 0) return params_[i];
  }
  HETSIM_CHECK(false, "StageModel: layer " + std::to_string(layer) + " has no " + ParamKindName(kind));
  return params_.front();
}

void StageModel::TpAllReduce(Tensor t, ReduceOp op, int32_t mb, bool behind_gemms) {
  if (tp_ == 1) return;
  if (observer_ != nullptr) {
    observer_->TpCollective(static_cast<uint32_t>(mb), current_layer_,
                            static_cast<double>(t.numel()) * static_cast<double>(DTypeSize(t.dtype)),
                            op == ReduceOp::kMax, models::CollectiveKind::kAllReduce, behind_gemms);
  }
  SliceRecorder::Scope scope(recorder_, Category::kTp, mb);
  tp_comm_->AllReduce(t, op);
}

void StageModel::Regroup(Tensor by_member, Tensor by_sequence, int64_t batch, int64_t members,
                         bool to_sequences) {
  const int64_t part = by_sequence.rows / (batch * members), rows = batch * part;
  HETSIM_CHECK(by_member.rows == by_sequence.rows && part * batch * members == by_sequence.rows,
               "StageModel: regrouping rows of mismatched tensors");
  for (int64_t j = 0; j < members; ++j) {
    for (int64_t b = 0; b < batch; ++b) {
      const Tensor m = by_member.Rows(j * rows + b * part, j * rows + (b + 1) * part);
      const Tensor q = by_sequence.Rows((b * members + j) * part, (b * members + j + 1) * part);
      be_->Copy(to_sequences ? q : m, to_sequences ? m : q);
    }
  }
}

Buffer StageModel::SpGather(Buffer shard, int64_t batch, int64_t seq, int32_t mb) {
  return sp() ? GatherShard(shard.t(), batch, seq, mb) : std::move(shard);
}

Buffer StageModel::Regather(const Buffer& saved, int64_t batch, int64_t seq, int32_t mb) {
  if (!sp()) return Buffer();
  return GatherShard(saved.t(), batch, seq, mb, true);
}

Buffer StageModel::GatherShard(Tensor shard, int64_t batch, int64_t seq, int32_t mb, bool behind_gemms) {
  const int64_t t = tp_, part = seq / t, rows = batch * part, w = shard.cols;
  HETSIM_CHECK(shard.rows == rows, "StageModel: sequence-parallel all-gather of a bad shard");
  Buffer full = NewAct(batch * seq, w);
  if (observer_ != nullptr) {
    observer_->TpCollective(static_cast<uint32_t>(mb), current_layer_, static_cast<double>(full.t().bytes()), false,
                            models::CollectiveKind::kAllGather, behind_gemms);
  }
  SliceRecorder::Scope scope(recorder_, Category::kTp, mb);
  // The members' shards arrive in TP-rank order; member j's rows of sequence b go to positions
  // [j·s/t, (j+1)·s/t) of that sequence.
  Buffer ranks = NewAct(t * rows, w);
  tp_comm_->AllGather(shard, ranks.t());
  Regroup(ranks.t(), full.t(), batch, t, true);
  return full;
}

Buffer StageModel::SpReduce(Buffer full, int64_t batch, int64_t seq, int32_t mb, bool behind_gemms) {
  if (!sp()) {
    TpAllReduce(full.t(), ReduceOp::kSum, mb, behind_gemms && !options_.tp_backward_blocking);
    return full;
  }
  const int64_t t = tp_, part = seq / t, rows = batch * part, w = full.t().cols;
  HETSIM_CHECK(full.t().rows == batch * seq, "StageModel: sequence-parallel reduce-scatter of a bad tensor");
  if (observer_ != nullptr) {
    observer_->TpCollective(static_cast<uint32_t>(mb), current_layer_, static_cast<double>(full.t().bytes()), false,
                            models::CollectiveKind::kReduceScatter, behind_gemms);
  }
  SliceRecorder::Scope scope(recorder_, Category::kTp, mb);
  // Member j's segment: positions [j·s/t, (j+1)·s/t) of every sequence.
  Buffer ranks = NewAct(t * rows, w);
  Regroup(ranks.t(), full.t(), batch, t, false);
  full.Reset();
  Buffer shard = NewAct(rows, w);
  tp_comm_->ReduceScatter(ranks.t(), shard.t());
  return shard;
}

void StageModel::ZeroLoss() { be_->Fill(loss_.t(), 0); }

void StageModel::ZeroGrads() {
  for (auto& p : params_) be_->Fill(p.grad.t(), 0);
}

void StageModel::OptimizerStep(const AdamParams& adam, const std::set<uint32_t>& skip) {
  for (uint32_t l = 0; l < model_.num_layers(); ++l) {
    if (layer_first_param_[l] == SIZE_MAX || skip.count(l)) continue;
    SliceRecorder::Scope scope(layer_recorder_, Category::kOptimizer, -1, static_cast<int32_t>(l));
    for (size_t i = layer_first_param_[l]; i < params_.size() && params_[i].spec.layer == l; ++i) {
      Param& p = params_[i];
      be_->Adam(p.master.t(), p.grad.t(), p.adam_m.t(), p.adam_v.t(), p.weight.empty() ? Tensor{} : p.weight.t(),
                adam);
    }
  }
}

Buffer StageModel::Forward(uint32_t mb, int64_t batch, int64_t seq, Buffer input, Buffer labels, float grad_scale,
                           bool recompute, uint32_t chunk) {
  HETSIM_CHECK(chunk < chunks_.size(), "StageModel::Forward: no chunk " + std::to_string(chunk));
  MicroBatch& st = micro_batches_[{mb, chunk}];
  st = MicroBatch{};
  st.range = chunks_[chunk];
  st.backward_end = st.range.end;
  st.batch = batch;
  st.seq = seq;
  st.grad_scale = grad_scale;
  st.labels = std::move(labels);
  st.saved = !recompute;
  return RunForward(mb, st, std::move(input), recompute);
}

Buffer StageModel::RunForward(uint32_t mb, MicroBatch& st, Buffer input, bool checkpoint) {
  const int64_t T = st.batch * st.seq, h = model_.spec().hidden_size();
  const auto imb = static_cast<int32_t>(mb);
  const uint32_t first = st.range.begin;
  st.blocks.clear();
  st.blocks.resize(st.range.size());
  Buffer x;
  if (layer_recorder_ != nullptr) activation_bytes_.assign(st.range.size(), 0.0);
  for (uint32_t l = first; l < st.range.end; ++l) {
    SliceRecorder::Scope layer_scope(layer_recorder_, Category::kForward, imb, static_cast<int32_t>(l));
    current_layer_ = l;
    ReportRing(mb, l, st, true, true);
    if (observer_ != nullptr) observer_->LayerPass(true, false, mb, l, st.batch);
    ReportRing(mb, l, st, true, false);
    const double bytes_before = static_cast<double>(be_->bytes_in_use());
    auto kept = [&]() {
      if (layer_recorder_ != nullptr) activation_bytes_[l - first] = static_cast<double>(be_->bytes_in_use()) - bytes_before;
    };
    switch (model_.kind(l)) {
      case models::LayerKind::kEmbedding: {
        x = NewAct(T, h);
        be_->Embedding(x.t(), input.t(), P(l, ParamKind::kEmbedding).w(), vocab_begin_);
        x = SpReduce(std::move(x), st.batch, st.seq, imb);
        st.tokens = std::move(input);
        kept();
        break;
      }
      case models::LayerKind::kTransformer: {
        BlockSaved& s = st.blocks[l - first];
        Buffer in = l == first ? std::move(input) : std::move(x);
        if (!checkpoint) {
          x = BlockForward(l, mb, st, s, std::move(in));
        } else {
          // Megatron-LM's full recomputation: the block keeps only its input (the checkpoint).
          Buffer keep(be_, in.t().rows, in.t().cols, in.t().dtype);
          be_->Copy(keep.t(), in.t());
          BlockSaved tmp;
          x = BlockForward(l, mb, st, tmp, std::move(in));
          s.x = std::move(keep);
        }
        kept();
        break;
      }
      case models::LayerKind::kHead: {
        HeadForward(mb, st, st.head, l == first ? std::move(input) : std::move(x), true);
        kept();
        return Buffer();
      }
    }
  }
  return x;
}

Buffer StageModel::BlockForward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s, Buffer x) {
  const int64_t T = st.batch * st.seq, h = model_.spec().hidden_size(), hd = model_.head_dim();
  const int64_t qd = heads_.q_heads * hd, kvd = heads_.kv_heads * hd;
  const auto imb = static_cast<int32_t>(mb);
  const int64_t Ts = ShardRows(T);  // the residual stream's rows (sequence-sharded under SP)
  s.x = std::move(x);
  // Attention.
  s.inv1 = New(Ts, 1, DType::kF32);
  s.n1 = NewAct(Ts, h);
  be_->RmsNorm(s.n1.t(), s.inv1.t(), s.x.t(), P(layer, ParamKind::kAttnNorm).w(), options_.norm_eps);
  {
    // Under SP the saved input stays sequence-sharded (the backward gathers it again).
    const Buffer n1_full = sp() ? GatherShard(s.n1.t(), st.batch, st.seq, imb) : Buffer();
    const Tensor n1 = sp() ? n1_full.t() : s.n1.t();
    s.q = NewAct(T, qd);
    s.k = NewAct(T, kvd);
    s.v = NewAct(T, kvd);
    be_->Gemm(s.q.t(), n1, false, P(layer, ParamKind::kWq).w(), true, 1, 0);
    be_->Gemm(s.k.t(), n1, false, P(layer, ParamKind::kWk).w(), true, 1, 0);
    be_->Gemm(s.v.t(), n1, false, P(layer, ParamKind::kWv).w(), true, 1, 0);
  }
  // Ulysses: the whole sequence for 1/u of the heads (RoPE then takes every token's own position). CP: the
  // rank's queries at their positions in the whole sequence, against every rank's keys (the ring); its own
  // k and v stay as they are, for the backward's ring.
  const int64_t u = ulysses(), cp_ways = cp(), S = st.seq * u * cp_ways;
  if (u > 1) {
    s.q = ToHeads(s.q.t(), st.batch, st.seq, imb);
    s.k = ToHeads(s.k.t(), st.batch, st.seq, imb);
    s.v = ToHeads(s.v.t(), st.batch, st.seq, imb);
  }
  Buffer kf, vf;
  if (cp_ways > 1) {
    CpGatherKv(s.k.t(), s.v.t(), st.batch, st.seq, imb, &kf, &vf);
    s.q = CpScatter(s.q.t(), st.batch, st.seq);
  }
  const Tensor k = cp_ways > 1 ? kf.t() : s.k.t(), v = cp_ways > 1 ? vf.t() : s.v.t();
  be_->Rope(s.q.t(), S, heads_.q_heads / u, hd, options_.rope_theta, false);
  be_->Rope(k, S, heads_.kv_heads / u, hd, options_.rope_theta, false);
  AttentionShape shape{st.batch, S, heads_.q_heads / u, heads_.kv_heads / u, hd,
                       1.0f / std::sqrt(static_cast<float>(hd))};
  shape.cp = cp_ways;
  shape.cp_rank = cp_ways > 1 ? cp_comm_->rank() : 0;
  s.probs = NewAct(shape.probs_numel(), 1);
  if (u > 1) {
    Buffer heads = NewAct(T * u, qd / u);
    be_->Attention(heads.t(), s.probs.t(), s.q.t(), s.k.t(), s.v.t(), shape);
    s.attn = ToTokens(heads.t(), st.batch, st.seq, imb);
  } else if (cp_ways > 1) {
    Buffer full = NewAct(st.batch * S, qd);
    be_->Attention(full.t(), s.probs.t(), s.q.t(), k, v, shape);
    s.attn = CpExtract(full.t(), st.batch, st.seq);
  } else {
    s.attn = NewAct(T, qd);
    be_->Attention(s.attn.t(), s.probs.t(), s.q.t(), s.k.t(), s.v.t(), shape);
  }
  if (options_.selective_recompute) s.probs.Reset();  // recomputed in the backward
  Buffer o = NewAct(T, h);
  be_->Gemm(o.t(), s.attn.t(), false, P(layer, ParamKind::kWoT).w(), false, 1, 0);
  o = SpReduce(std::move(o), st.batch, st.seq, imb);
  be_->Add(o.t(), s.x.t());
  s.x2 = std::move(o);
  // MLP.
  s.inv2 = New(Ts, 1, DType::kF32);
  s.n2 = NewAct(Ts, h);
  be_->RmsNorm(s.n2.t(), s.inv2.t(), s.x2.t(), P(layer, ParamKind::kMlpNorm).w(), options_.norm_eps);
  Buffer y = MlpForward(layer, mb, st, s);
  be_->Add(y.t(), s.x2.t());
  FlushAllToAll(mb, layer);
  return y;
}

Buffer StageModel::MlpForward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s) {
  const int64_t T = st.batch * st.seq, h = model_.spec().hidden_size();
  const auto imb = static_cast<int32_t>(mb);
  const bool moe = model_.IsMoe(layer);
  const int64_t f = moe ? shared_local_ : ffn_local_;
  // A dense block's MLP, or an MoE block's shared experts (a TP-split MLP of their width).
  Buffer y;
  if (!moe || model_.SharedExpertWidth() > 0) {
    {
      const Buffer n2_full = sp() ? GatherShard(s.n2.t(), st.batch, st.seq, imb) : Buffer();
      const Tensor n2 = sp() ? n2_full.t() : s.n2.t();
      s.gate = NewAct(T, f);
      s.up = NewAct(T, f);
      be_->Gemm(s.gate.t(), n2, false, P(layer, ParamKind::kWgate).w(), true, 1, 0);
      be_->Gemm(s.up.t(), n2, false, P(layer, ParamKind::kWup).w(), true, 1, 0);
    }
    s.act = NewAct(T, f);
    be_->SwiGlu(s.act.t(), s.gate.t(), s.up.t());
    y = NewAct(T, h);
    be_->Gemm(y.t(), s.act.t(), false, P(layer, ParamKind::kWdownT).w(), false, 1, 0);
    y = SpReduce(std::move(y), st.batch, st.seq, imb);
  }
  if (!moe) return y;
  // The routed experts take the rank's rows of the residual stream (its sequence shard under SP).
  Buffer routed = MoeForward(layer, mb, s, s.n2.t());
  if (y.empty()) return routed;
  be_->Add(y.t(), routed.t());
  return y;
}

void StageModel::HeadForward(uint32_t mb, MicroBatch& st, HeadSaved& s, Buffer x, bool add_loss) {
  const int64_t T = st.batch * st.seq, h = model_.spec().hidden_size();
  const auto imb = static_cast<int32_t>(mb);
  const uint32_t layer = model_.num_layers() - 1;
  Param& head = P(layer, ParamKind::kHead);
  const int64_t Ts = ShardRows(T);
  s.x = std::move(x);
  s.inv = New(Ts, 1, DType::kF32);
  s.n = NewAct(Ts, h);
  be_->RmsNorm(s.n.t(), s.inv.t(), s.x.t(), P(layer, ParamKind::kFinalNorm).w(), options_.norm_eps);
  Buffer logits = NewAct(T, head.spec.held.size());
  {
    const Buffer n_full = sp() ? GatherShard(s.n.t(), st.batch, st.seq, imb) : Buffer();
    be_->Gemm(logits.t(), sp() ? n_full.t() : s.n.t(), false, head.w(), true, 1, 0);
  }
  Buffer row_max = New(T, 1, DType::kF32), sums = New(T, 2, DType::kF32);
  be_->CrossEntropyMax(row_max.t(), logits.t());
  TpAllReduce(row_max.t(), ReduceOp::kMax, imb);
  be_->CrossEntropySums(sums.t(), row_max.t(), logits.t(), st.labels.t(), vocab_begin_);
  TpAllReduce(sums.t(), ReduceOp::kSum, imb);
  be_->CrossEntropyFinish(logits.t(), loss_.t(), row_max.t(), sums.t(), st.labels.t(), vocab_begin_, st.grad_scale,
                          add_loss);
  s.dlogits = std::move(logits);
}

Buffer StageModel::Backward(uint32_t mb, Buffer dout, uint32_t chunk, uint32_t down_to) {
  auto it = micro_batches_.find({mb, chunk});
  HETSIM_CHECK(it != micro_batches_.end(), "StageModel::Backward before Forward of micro-batch " + std::to_string(mb) +
                                               " (chunk " + std::to_string(chunk) + ")");
  MicroBatch& st = it->second;
  const uint32_t first = st.range.begin, stop = std::max(first, down_to);
  HETSIM_CHECK(stop < st.backward_end, "StageModel::Backward of layers down to " + std::to_string(stop) +
                                           " whose backward already ran (micro-batch " + std::to_string(mb) + ")");
  Buffer d = std::move(dout);
  for (uint32_t l = st.backward_end; l-- > stop;) {
    SliceRecorder::Scope layer_scope(layer_recorder_, Category::kBackward, static_cast<int32_t>(mb),
                                     static_cast<int32_t>(l));
    current_layer_ = l;
    if (!st.saved && model_.kind(l) == models::LayerKind::kTransformer) {
      // Full recomputation: the block's forward again from its checkpointed input, right before its backward.
      ReportRing(mb, l, st, true, true);
      if (observer_ != nullptr) observer_->LayerPass(false, true, mb, l, st.batch);
      ReportRing(mb, l, st, true, false);
      BlockSaved& s = st.blocks[l - first];
      Buffer in = std::move(s.x);
      s = BlockSaved{};
      (void)BlockForward(l, mb, st, s, std::move(in));
    }
    ReportRing(mb, l, st, false, true);
    if (observer_ != nullptr) observer_->LayerPass(false, false, mb, l, st.batch);
    ReportRing(mb, l, st, false, false);
    switch (model_.kind(l)) {
      case models::LayerKind::kHead:
        d = HeadBackward(mb, st, st.head);
        break;
      case models::LayerKind::kTransformer:
        d = BlockBackward(l, mb, st, st.blocks[l - first], std::move(d));
        break;
      case models::LayerKind::kEmbedding:
        d = SpGather(std::move(d), st.batch, st.seq, static_cast<int32_t>(mb));
        be_->EmbeddingBackward(P(l, ParamKind::kEmbedding).grad.t(), st.tokens.t(), d.t(), vocab_begin_);
        d.Reset();
        break;
    }
  }
  st.backward_end = stop;
  if (stop == first) micro_batches_.erase(it);
  return d;
}

Buffer StageModel::HeadBackward(uint32_t mb, MicroBatch& st, HeadSaved& s) {
  const uint32_t layer = model_.num_layers() - 1;
  const int64_t T = st.batch * st.seq, h = model_.spec().hidden_size();
  Param& head = P(layer, ParamKind::kHead);
  Param& norm = P(layer, ParamKind::kFinalNorm);
  const auto imb = static_cast<int32_t>(mb);
  // The column-parallel projection's backward as Megatron-LM issues it: the input's re-gather (SP) behind
  // the dgrad GEMM, the dgrad's reduce-scatter (all-reduce without SP) behind the wgrad GEMM.
  const Buffer n_full = Regather(s.n, st.batch, st.seq, imb);
  Buffer dn = NewAct(T, h);
  be_->Gemm(dn.t(), s.dlogits.t(), false, head.w(), false, 1, 0);
  dn = SpReduce(std::move(dn), st.batch, st.seq, imb, true);
  be_->Gemm(head.grad.t(), s.dlogits.t(), true, sp() ? n_full.t() : s.n.t(), false, 1, 1);
  s.dlogits.Reset();
  Buffer dx = NewAct(ShardRows(T), h);
  be_->RmsNormBackward(dx.t(), norm.grad.t(), s.x.t(), norm.w(), s.inv.t(), dn.t(), false);
  s = HeadSaved{};
  return dx;
}

Buffer StageModel::BlockBackward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s, Buffer dy) {
  const int64_t T = st.batch * st.seq, h = model_.spec().hidden_size(), hd = model_.head_dim();
  const int64_t qd = heads_.q_heads * hd, kvd = heads_.kv_heads * hd;
  const auto imb = static_cast<int32_t>(mb);
  Buffer dn2 = MlpBackward(layer, mb, st, s, dy);
  Param& norm2 = P(layer, ParamKind::kMlpNorm);
  Buffer dx2 = std::move(dy);  // the residual passes dy through; the norm's gradient is added to it
  be_->RmsNormBackward(dx2.t(), norm2.grad.t(), s.x2.t(), norm2.w(), s.inv2.t(), dn2.t(), true);
  dn2.Reset();
  // Attention: x2 = x + o(attention(rope(q), rope(k), v)).
  Param& wo = P(layer, ParamKind::kWoT);
  Buffer dx2_full = sp() ? GatherShard(dx2.t(), st.batch, st.seq, imb) : Buffer();
  const Tensor dx2t = sp() ? dx2_full.t() : dx2.t();
  Buffer dattn = NewAct(T, qd);
  be_->Gemm(dattn.t(), dx2t, false, wo.w(), true, 1, 0);
  be_->Gemm(wo.grad.t(), s.attn.t(), true, dx2t, false, 1, 1);
  dx2_full.Reset();
  s.attn.Reset();
  const int64_t u = ulysses(), cp_ways = cp(), S = st.seq * u * cp_ways;
  AttentionShape shape{st.batch, S, heads_.q_heads / u, heads_.kv_heads / u, hd,
                       1.0f / std::sqrt(static_cast<float>(hd))};
  shape.cp = cp_ways;
  shape.cp_rank = cp_ways > 1 ? cp_comm_->rank() : 0;
  if (u > 1) dattn = ToHeads(dattn.t(), st.batch, st.seq, imb);
  // CP: the K/V round of the ring again (the forward kept only this rank's k and v).
  Buffer kf, vf;
  if (cp_ways > 1) {
    dattn = CpScatter(dattn.t(), st.batch, st.seq);
    CpGatherKv(s.k.t(), s.v.t(), st.batch, st.seq, imb, &kf, &vf);
    be_->Rope(kf.t(), S, heads_.kv_heads, hd, options_.rope_theta, false);
  }
  const Tensor k = cp_ways > 1 ? kf.t() : s.k.t(), v = cp_ways > 1 ? vf.t() : s.v.t();
  // With Ulysses the gradients are laid out like q, k and v after the all-to-all: [T·u, width / u]; with CP
  // over the whole sequence: [T·cp, width].
  const int64_t rows = T * u * cp_ways;
  if (s.probs.empty()) {
    // Selective recomputation: the attention core again, for its probabilities (its output is not needed).
    s.probs = NewAct(shape.probs_numel(), 1);
    Buffer out = NewAct(rows, qd / u);
    be_->Attention(out.t(), s.probs.t(), s.q.t(), k, v, shape);
  }
  Buffer dq = NewAct(rows, qd / u), dk = NewAct(rows, kvd / u), dv = NewAct(rows, kvd / u);
  be_->AttentionBackward(dq.t(), dk.t(), dv.t(), dattn.t(), s.q.t(), k, v, s.probs.t(), shape);
  dattn.Reset();
  s.probs.Reset();
  kf.Reset();
  vf.Reset();
  be_->Rope(dq.t(), S, heads_.q_heads / u, hd, options_.rope_theta, true);
  be_->Rope(dk.t(), S, heads_.kv_heads / u, hd, options_.rope_theta, true);
  if (u > 1) {
    dq = ToTokens(dq.t(), st.batch, st.seq, imb);
    dk = ToTokens(dk.t(), st.batch, st.seq, imb);
    dv = ToTokens(dv.t(), st.batch, st.seq, imb);
  }
  if (cp_ways > 1) {
    dq = CpExtract(dq.t(), st.batch, st.seq);
    CpReduceScatterKv(&dk, &dv, st.batch, st.seq, imb);
  }
  Param& wq = P(layer, ParamKind::kWq);
  Param& wk = P(layer, ParamKind::kWk);
  Param& wv = P(layer, ParamKind::kWv);
  const Buffer n1_full = Regather(s.n1, st.batch, st.seq, imb);
  const Tensor n1 = sp() ? n1_full.t() : s.n1.t();
  Buffer dn1 = NewAct(T, h);
  be_->Gemm(dn1.t(), dq.t(), false, wq.w(), false, 1, 0);
  be_->Gemm(dn1.t(), dk.t(), false, wk.w(), false, 1, 1);
  be_->Gemm(dn1.t(), dv.t(), false, wv.w(), false, 1, 1);
  dn1 = SpReduce(std::move(dn1), st.batch, st.seq, imb, true);
  be_->Gemm(wq.grad.t(), dq.t(), true, n1, false, 1, 1);
  be_->Gemm(wk.grad.t(), dk.t(), true, n1, false, 1, 1);
  be_->Gemm(wv.grad.t(), dv.t(), true, n1, false, 1, 1);
  dq.Reset();
  dk.Reset();
  dv.Reset();
  Param& norm1 = P(layer, ParamKind::kAttnNorm);
  Buffer dx = std::move(dx2);
  be_->RmsNormBackward(dx.t(), norm1.grad.t(), s.x.t(), norm1.w(), s.inv1.t(), dn1.t(), true);
  s = BlockSaved{};
  FlushAllToAll(mb, layer);
  return dx;
}

Buffer StageModel::MlpBackward(uint32_t layer, uint32_t mb, MicroBatch& st, BlockSaved& s, const Buffer& dy) {
  const int64_t T = st.batch * st.seq, h = model_.spec().hidden_size();
  const auto imb = static_cast<int32_t>(mb);
  const bool moe = model_.IsMoe(layer);
  const int64_t f = moe ? shared_local_ : ffn_local_;
  // The dense MLP or the shared experts: y = down(silu(gate) ⊙ up). Under SP the incoming gradient is
  // sequence-sharded: the MLP's GEMMs take it gathered, the residual keeps the shard.
  Buffer dn2;
  if (!moe || model_.SharedExpertWidth() > 0) {
    Param& wdown = P(layer, ParamKind::kWdownT);
    Param& wgate = P(layer, ParamKind::kWgate);
    Param& wup = P(layer, ParamKind::kWup);
    Buffer dy_full = sp() ? GatherShard(dy.t(), st.batch, st.seq, imb) : Buffer();
    const Tensor dyt = sp() ? dy_full.t() : dy.t();
    Buffer dact = NewAct(T, f);
    be_->Gemm(dact.t(), dyt, false, wdown.w(), true, 1, 0);
    be_->Gemm(wdown.grad.t(), s.act.t(), true, dyt, false, 1, 1);
    dy_full.Reset();
    s.act.Reset();
    Buffer dgate = NewAct(T, f), dup = NewAct(T, f);
    be_->SwiGluBackward(dgate.t(), dup.t(), s.gate.t(), s.up.t(), dact.t());
    dact.Reset();
    s.gate.Reset();
    s.up.Reset();
    // The up projections' backward as Megatron-LM issues it (HeadBackward).
    const Buffer n2_full = Regather(s.n2, st.batch, st.seq, imb);
    const Tensor n2 = sp() ? n2_full.t() : s.n2.t();
    dn2 = NewAct(T, h);
    be_->Gemm(dn2.t(), dgate.t(), false, wgate.w(), false, 1, 0);
    be_->Gemm(dn2.t(), dup.t(), false, wup.w(), false, 1, 1);
    dn2 = SpReduce(std::move(dn2), st.batch, st.seq, imb, true);
    be_->Gemm(wgate.grad.t(), dgate.t(), true, n2, false, 1, 1);
    be_->Gemm(wup.grad.t(), dup.t(), true, n2, false, 1, 1);
    dgate.Reset();
    dup.Reset();
  }
  if (!moe) return dn2;
  // The routed experts: their gradient of the rank's rows.
  Buffer routed = MoeBackward(layer, mb, s, s.n2.t(), dy.t());
  if (dn2.empty()) return routed;
  be_->Add(dn2.t(), routed.t());
  return dn2;
}

void StageModel::AllToAll(Tensor in, Tensor out) {
  pending_a2a_.push_back(static_cast<double>(in.bytes()));
  uly_comm_->AllToAll(in, out);
}

void StageModel::FlushAllToAll(uint32_t mb, uint32_t layer) {
  if (observer_ != nullptr) {
    for (double bytes : pending_a2a_) observer_->UlyssesAllToAll(mb, layer, bytes);
    for (const auto& [kind, bytes] : pending_ep_) observer_->ExpertCollective(mb, layer, kind, bytes);
  }
  pending_a2a_.clear();
  pending_ep_.clear();
}

Buffer StageModel::ToHeads(Tensor x, int64_t batch, int64_t seq_local, int32_t mb) {
  SliceRecorder::Scope scope(recorder_, Category::kCp, mb);
  const int64_t u = ulysses(), rows = x.rows, w = x.cols / u;
  HETSIM_CHECK(rows == batch * seq_local && x.cols % u == 0, "StageModel: Ulysses all-to-all of a bad tensor");
  // Block j (member j's head group, this rank's tokens) goes to member j.
  Buffer send = NewAct(u * rows, w), recv = NewAct(u * rows, w);
  for (int64_t j = 0; j < u; ++j) be_->CopyColumns(send.t().Rows(j * rows, (j + 1) * rows), 0, x, j * w, w);
  AllToAll(send.t(), recv.t());
  // Member j's tokens are positions [j·seq_local, (j+1)·seq_local) of every sequence.
  Buffer y = NewAct(u * rows, w);
  Regroup(recv.t(), y.t(), batch, u, true);
  return y;
}

Buffer StageModel::ToTokens(Tensor y, int64_t batch, int64_t seq_local, int32_t mb) {
  SliceRecorder::Scope scope(recorder_, Category::kCp, mb);
  const int64_t u = ulysses(), rows = batch * seq_local, w = y.cols;
  HETSIM_CHECK(y.rows == u * rows, "StageModel: Ulysses all-to-all of a bad tensor");
  // Block j: member j's tokens of this rank's head group.
  Buffer send = NewAct(u * rows, w), recv = NewAct(u * rows, w);
  Regroup(send.t(), y, batch, u, false);
  AllToAll(send.t(), recv.t());
  Buffer x = NewAct(rows, w * u);
  for (int64_t j = 0; j < u; ++j) be_->CopyColumns(x.t(), j * w, recv.t().Rows(j * rows, (j + 1) * rows), 0, w);
  return x;
}

int64_t StageModel::CpPosition(int64_t r, int half, int64_t seq_local) const {
  return CpRuns(cp(), r, seq_local * cp())[static_cast<size_t>(half)].first;
}

Buffer StageModel::CpScatter(Tensor local, int64_t batch, int64_t seq_local) {
  const int64_t S = seq_local * cp(), m = seq_local / 2, c = cp_comm_->rank();
  Buffer full = NewAct(batch * S, local.cols);
  be_->Fill(full.t(), 0);
  for (int64_t b = 0; b < batch; ++b) {
    for (int half = 0; half < 2; ++half) {
      const int64_t from = b * seq_local + half * m, to = b * S + CpPosition(c, half, seq_local);
      be_->Copy(full.t().Rows(to, to + m), local.Rows(from, from + m));
    }
  }
  return full;
}

Buffer StageModel::CpExtract(Tensor full, int64_t batch, int64_t seq_local) {
  const int64_t S = seq_local * cp(), m = seq_local / 2, c = cp_comm_->rank();
  Buffer local = NewAct(batch * seq_local, full.cols);
  for (int64_t b = 0; b < batch; ++b) {
    for (int half = 0; half < 2; ++half) {
      const int64_t to = b * seq_local + half * m, from = b * S + CpPosition(c, half, seq_local);
      be_->Copy(local.t().Rows(to, to + m), full.Rows(from, from + m));
    }
  }
  return local;
}

void StageModel::CpGatherKv(Tensor k, Tensor v, int64_t batch, int64_t seq_local, int32_t mb, Buffer* kf,
                            Buffer* vf) {
  SliceRecorder::Scope scope(recorder_, Category::kCp, mb);
  const int64_t n = cp(), c = cp_comm_->rank(), T = k.rows, w = k.cols, S = seq_local * n, m = seq_local / 2;
  // Block r: CP rank r's k and v side by side ([T, 2w], one message); step i passes on the block that
  // arrived at step i − 1 (this rank's own first) and receives the one from i + 1 ranks back.
  std::vector<Buffer> blocks;
  for (int64_t r = 0; r < n; ++r) blocks.push_back(NewAct(T, 2 * w));
  be_->CopyColumns(blocks[c].t(), 0, k, 0, w);
  be_->CopyColumns(blocks[c].t(), w, v, 0, w);
  for (int64_t i = 0; i + 1 < n; ++i) {
    cp_comm_->SendRecv(blocks[(c - i + n) % n].t(), static_cast<int>((c + 1) % n), blocks[(c - i - 1 + n) % n].t(),
                       static_cast<int>((c - 1 + n) % n));
  }
  *kf = NewAct(batch * S, w);
  *vf = NewAct(batch * S, w);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < batch; ++b) {
      for (int half = 0; half < 2; ++half) {
        const int64_t from = b * seq_local + half * m, to = b * S + CpPosition(r, half, seq_local);
        const Tensor src = blocks[r].t().Rows(from, from + m);
        be_->CopyColumns(kf->t().Rows(to, to + m), 0, src, 0, w);
        be_->CopyColumns(vf->t().Rows(to, to + m), 0, src, w, w);
      }
    }
  }
}

void StageModel::CpReduceScatterKv(Buffer* dk, Buffer* dv, int64_t batch, int64_t seq_local, int32_t mb) {
  SliceRecorder::Scope scope(recorder_, Category::kCp, mb);
  const int64_t n = cp(), c = cp_comm_->rank(), w = dk->t().cols, S = seq_local * n, m = seq_local / 2;
  const int64_t T = batch * seq_local;
  // Block r: this rank's contributions to CP rank r's dK and dV, side by side in r's row order.
  std::vector<Buffer> blocks;
  for (int64_t r = 0; r < n; ++r) {
    blocks.push_back(NewAct(T, 2 * w));
    for (int64_t b = 0; b < batch; ++b) {
      for (int half = 0; half < 2; ++half) {
        const int64_t to = b * seq_local + half * m, from = b * S + CpPosition(r, half, seq_local);
        const Tensor dst = blocks[r].t().Rows(to, to + m);
        be_->CopyColumns(dst, 0, dk->t().Rows(from, from + m), 0, w);
        be_->CopyColumns(dst, w, dv->t().Rows(from, from + m), 0, w);
      }
    }
  }
  dk->Reset();
  dv->Reset();
  // Step i sends the partial sum for rank c − i − 1 and adds this rank's contribution to the one that
  // arrives (for rank c − i − 2); after cp − 1 steps block c holds every rank's contribution to rank c.
  Buffer in = NewAct(T, 2 * w);
  for (int64_t i = 0; i + 1 < n; ++i) {
    cp_comm_->SendRecv(blocks[(c - i - 1 + 2 * n) % n].t(), static_cast<int>((c + 1) % n), in.t(),
                       static_cast<int>((c - 1 + n) % n));
    be_->Add(blocks[(c - i - 2 + 2 * n) % n].t(), in.t());
  }
  *dk = NewAct(T, w);
  *dv = NewAct(T, w);
  be_->CopyColumns(dk->t(), 0, blocks[c].t(), 0, w);
  be_->CopyColumns(dv->t(), 0, blocks[c].t(), w, w);
}

void StageModel::ReportRing(uint32_t mb, uint32_t layer, const MicroBatch& st, bool forward, bool before) {
  if (observer_ == nullptr || cp() == 1 || model_.kind(layer) != models::LayerKind::kTransformer) return;
  const double block = static_cast<double>(st.batch * st.seq) * 2.0 * static_cast<double>(heads_.kv_heads) *
                       static_cast<double>(model_.head_dim()) * static_cast<double>(DTypeSize(be_->act_dtype()));
  observer_->CpRing(mb, layer, std::vector<double>(static_cast<size_t>((forward ? 1 : 2) * (cp() - 1)), block), before);
}

}  // namespace hetsim::executor
