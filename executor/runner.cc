#include "executor/runner.h"

#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "executor/rank_kinds.h"
#include "executor/runner_internal.h"
#include "executor/unified_comm.h"

namespace hetsim::executor {

void Runner::SetupComms() {
  // One global order of groups on every rank: TP groups, Ulysses groups, CP rings, EP and expert-TP groups,
  // then gradient-sync groups (deduplicated).
  std::vector<std::vector<int>> groups;
  auto add = [&](const std::vector<int>& g) {
    if (g.size() > 1 && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  };
  for (const auto& g : plan_.tp_groups) add(g);
  for (const auto& g : plan_.uly_groups) add(g);
  for (const auto& g : plan_.cp_groups) add(g);
  for (const auto& g : plan_.ep_groups) add(g);
  for (const auto& g : plan_.etp_groups) add(g);
  // The groups the DP stream's collectives use (comm.dp_overlap); one may have the members of a group above
  // (an EP or expert-TP group can be a replica group).
  std::vector<std::vector<int>> dp_groups;
  auto add_dp = [&](const std::vector<int>& g) {
    add(g);
    if (std::find(dp_groups.begin(), dp_groups.end(), g) == dp_groups.end()) dp_groups.push_back(g);
  };
  for (const auto& sg : plan_.sync_groups) add_dp(sg.ranks);
  // Hierarchical all-reduces: the node's members and the members of one position across nodes (every
  // rank scans every rank's operations, so that all create them in one order).
  bool overlap = false;
  for (const auto& r : plan_.lowering.ranks) {
    overlap = overlap || !r.dp_stream.empty();
    for (const auto* stream : {&r.ops, &r.dp_stream}) {
      for (const auto& op : *stream) {
        if (op.kind != models::OpKind::kCollective || op.category != Category::kDp || op.group == models::kNone) continue;
        std::vector<int> ranks;
        for (uint32_t d : plan_.lowering.groups.at(op.group)) ranks.push_back(plan_.RankOfDevice(d));
        add_dp(ranks);
      }
    }
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    if (std::find(g.begin(), g.end(), rank_) == g.end()) continue;
    comms_[g] = factory_->CreateGroup(g, static_cast<int>(i));
  }
  // comm.dp_overlap: the DP stream's collectives get communicators of their own (the lowering's DP groups,
  // again), so that they never interleave with the main stream's (an EP all-to-all on the same members, say).
  for (size_t i = 0; overlap && i < groups.size(); ++i) {
    const auto& g = groups[i];
    if (std::find(g.begin(), g.end(), rank_) == g.end() ||
        std::find(dp_groups.begin(), dp_groups.end(), g) == dp_groups.end()) {
      continue;
    }
    side_comms_[g] = factory_->CreateGroup(g, static_cast<int>(groups.size() + i));
  }
  if (role_.tp > 1) tp_comm_ = comms_.at(role_.tp_group).get();
  // CPU-staged transfers go through host memory and MPI on every backend; otherwise the backend's own.
  p2p_ = plan_.cpu_staged ? MakeStagedPeerToPeer(be_) : factory_->CreatePeerToPeer(plan_.channels);
  be_->SetProgressHook([this] { p2p_->Progress(); });
}

Buffer Runner::Tokens(uint32_t step, uint32_t mb, bool labels) {
  // This rank's tokens of each sequence (and their labels): Ulysses' shard is one run of seq / u tokens;
  // CP rank c holds chunks c and 2·cp − 1 − c of the 2·cp chunks (the load-balanced causal split).
  const uint32_t n = role_.share.size(), s = static_cast<uint32_t>(seq()), full = plan_.seq_len;
  const uint32_t shift = labels ? 1 : 0;
  std::vector<std::pair<int64_t, int64_t>> runs = {{int64_t{role_.shard} * s, s}};  // (first position, tokens)
  if (role_.cp > 1) {
    const auto cp = CpRuns(role_.cp, role_.shard, full);
    runs.assign(cp.begin(), cp.end());
  }
  std::vector<int32_t> host(static_cast<size_t>(n) * s), seqbuf(full + 1);
  const uint32_t vocab = specs_.model.spec().vocab_size();
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t id = uint64_t{step} * plan_.global_batch + role_.FirstSequence(mb) + i;
    SyntheticSequence(o_.seed, id, full + 1, vocab, seqbuf.data());
    auto to = host.begin() + static_cast<ptrdiff_t>(i) * s;
    for (const auto& [from, count] : runs) to = std::copy_n(seqbuf.begin() + from + shift, count, to);
  }
  Buffer b(be_, static_cast<int64_t>(host.size()), 1, DType::kI32);
  be_->Upload(b.t(), host.data());
  return b;
}

void Runner::PrepareData(uint32_t step) {
  inputs_.clear();
  labels_.clear();
  inputs_.resize(role_.num_micro_batches);
  labels_.resize(role_.num_micro_batches);
  for (uint32_t mb = 0; mb < role_.num_micro_batches; ++mb) {
    if (role_.first_stage()) inputs_[mb] = Tokens(step, mb, false);
    if (role_.last_stage()) labels_[mb] = Tokens(step, mb, true);
  }
}

void Runner::MapChunks() {
  const std::vector<models::Op>& ops = plan_.Ops(rank_);
  op_chunk_.assign(ops.size(), 0);
  if (role_.num_chunks == 1) return;
  const auto is_pass = [](const models::Op& op) {
    return op.kind == models::OpKind::kCompute &&
           (op.category == Category::kForward || op.category == Category::kBackward);
  };
  const auto chunk_of = [&](const models::Op& op) {
    for (uint32_t c = 0; c < role_.num_chunks; ++c) {
      if (role_.chunks[c].contains(op.layer_begin)) return c;
    }
    HETSIM_CHECK(false, "hetsim-exec: a pass over layer " + std::to_string(op.layer_begin) + " the rank does not hold");
    return 0u;
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    if (is_pass(ops[i])) op_chunk_[i] = chunk_of(ops[i]);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const models::Op& op = ops[i];
    const bool recv = op.kind == models::OpKind::kRecv || op.kind == models::OpKind::kPostRecv ||
                      (op.kind == models::OpKind::kCollective && op.category == Category::kPp);
    if ((!recv && op.kind != models::OpKind::kSend) || op.channel == models::kChanCp) continue;
    // A receive's pass follows it (a posted receive's: the next of its direction and micro-batch; a broadcast's,
    // whatever its direction), a send's precedes it.
    const Category dir = op.channel == models::kChanPpBackward ? Category::kBackward : Category::kForward;
    const bool any_dir = op.kind == models::OpKind::kCollective;
    size_t j = i;
    bool found = false;
    while (!found && (recv ? ++j < ops.size() : j-- > 0)) {
      found = is_pass(ops[j]) && ops[j].micro_batch == op.micro_batch && (any_dir || ops[j].category == dir);
    }
    HETSIM_CHECK(found, "hetsim-exec: a pipeline transfer of micro-batch " + std::to_string(op.micro_batch) +
                            " without its pass");
    op_chunk_[i] = op_chunk_[j];
  }
}

int Runner::Tag(const models::Op& op, uint32_t chunk) const {
  // Chunk c of stage s is virtual stage c·S + s; a message crosses the boundary after the lower of its two.
  const bool backward = op.channel == models::kChanPpBackward, send = op.kind == models::OpKind::kSend;
  const uint32_t me = chunk * role_.num_stages + role_.stage;
  const uint32_t boundary = (send != backward) ? me : me - 1;  // forward send / backward receive: after me
  return PipelineTag(op.micro_batch, boundary, role_.num_stages * role_.num_chunks, backward);
}

std::pair<Tensor, Tensor> Runner::RecvTarget(const models::Op& op, uint32_t chunk) {
  const int64_t T = role_.share.size() * hidden_seq(), h = specs_.model.spec().hidden_size();
  const bool backward = op.channel == models::kChanPpBackward;
  Buffer& buf = (backward ? recv_backward_ : recv_forward_)[Key(op.micro_batch, chunk)];
  if (buf.empty()) buf = Buffer(be_, T, h, be_->act_dtype());
  const Tensor rows = buf.t().Rows(op.seq_begin * hidden_seq(), op.seq_end * hidden_seq());
  return {rows, Scattered(op) ? Piece(rows) : rows};
}

void Runner::PostRecv(const models::Op& op, uint32_t chunk) {
  const auto [rows, message] = RecvTarget(op, chunk);
  p2p_->PostRecv(plan_.RankOfDevice(op.peer), message, Tag(op, chunk));
  log_.Add(op);
}

void Runner::Recv(const models::Op& op, uint32_t chunk) {
  const int peer = plan_.RankOfDevice(op.peer), tag = Tag(op, chunk);
  const auto [rows, message] = RecvTarget(op, chunk);
  const bool piece = Scattered(op);
  {
    const OffCore off;  // a receive is a wait (ShareCores)
    p2p_->WaitForMessage(peer, tag);  // waiting for the other stage is idle time, not transfer
    SliceRecorder::Scope pp(&recorder_, Category::kPp, static_cast<int32_t>(op.micro_batch));
    p2p_->Recv(peer, message, tag);
  }
  if (piece) pieces_[Key(op.micro_batch, chunk)].push_back(rows);
  models::Op done = op;
  done.bytes = static_cast<double>(message.bytes());
  log_.Add(done);
}

bool Runner::Scattered(const models::Op& op) const {
  // Under sequence parallelism the message is the rank's shard already (nothing to gather).
  if (!plan_.pp_scatter_gather || role_.tp < 2 || sp()) return false;
  return plan_.roles.at(static_cast<size_t>(plan_.RankOfDevice(op.peer))).tp == role_.tp;
}

Tensor Runner::Piece(Tensor message) const {
  HETSIM_CHECK(message.numel() % role_.tp == 0,
               "hetsim-exec: a pipeline message of " + std::to_string(message.numel()) +
                   " elements does not split into " + std::to_string(role_.tp) + " equal pieces");
  const int64_t n = message.numel() / role_.tp;
  return message.Flat(role_.tp_rank * n, n);
}

void Runner::GatherPieces(const models::Op& op, uint32_t chunk) {
  const auto it = pieces_.find(Key(op.micro_batch, chunk));
  HETSIM_CHECK(it != pieces_.end(), "hetsim-exec: an all-gather of pipeline pieces without their receives");
  Comm* tp = CommOf(op.group);
  double bytes = 0;
  {
    SliceRecorder::Scope pp(&recorder_, Category::kPp, static_cast<int32_t>(op.micro_batch));
    for (const Tensor& rows : it->second) {
      // The members' pieces in TP-rank order are the message's elements in order.
      Buffer whole(be_, rows.rows, rows.cols, rows.dtype);
      tp->AllGather(Piece(rows), whole.t().Flat(0, rows.numel()));
      be_->Copy(rows, whole.t());
      bytes += static_cast<double>(rows.bytes());
    }
  }
  pieces_.erase(it);
  models::Op done = op;
  done.bytes = bytes;
  log_.Add(done);
}

Comm* Runner::CommOf(uint32_t g, bool side) {
  std::vector<int> ranks;
  for (uint32_t d : plan_.lowering.groups.at(g)) ranks.push_back(plan_.RankOfDevice(d));
  auto& comms = side ? side_comms_ : comms_;
  const auto it = comms.find(ranks);
  HETSIM_CHECK(it != comms.end(), "hetsim-exec: no communicator for the lowering's group " + std::to_string(g));
  return it->second.get();
}

void Runner::Broadcast(const std::vector<models::Op>& ops, size_t i, uint32_t chunk) {
  const models::Op& op = ops[i];
  bool backward = false;
  for (size_t j = i + 1; j < ops.size(); ++j) {
    const auto& next = ops[j];
    if (next.kind == models::OpKind::kCompute &&
        (next.category == Category::kForward || next.category == Category::kBackward)) {
      backward = next.category == Category::kBackward;
      break;
    }
  }
  const int64_t T = role_.share.size() * hidden_seq(), h = specs_.model.spec().hidden_size();
  Buffer& buf = (backward ? recv_backward_ : recv_forward_)[Key(op.micro_batch, chunk)];
  if (buf.empty()) buf = Buffer(be_, T, h, be_->act_dtype());
  {
    SliceRecorder::Scope pp(&recorder_, Category::kPp, static_cast<int32_t>(op.micro_batch));
    CommOf(op.group)->Broadcast(buf.t(), 0);  // the leader is TP rank 0 of the receiving stage
  }
  models::Op done = op;
  done.bytes = static_cast<double>(buf.t().bytes());
  log_.Add(done);
}

void Runner::Send(const models::Op& op, uint32_t chunk) {
  const bool backward = op.channel == models::kChanPpBackward;
  auto& outs = backward ? out_backward_ : out_forward_;
  const auto it = outs.find(Key(op.micro_batch, chunk));
  HETSIM_CHECK(it != outs.end() && !it->second.empty(),
               "hetsim-exec: send of micro-batch " + std::to_string(op.micro_batch) + " before its pass");
  const Tensor rows = it->second.t().Rows(op.seq_begin * hidden_seq(), op.seq_end * hidden_seq());
  const Tensor message = Scattered(op) ? Piece(rows) : rows;
  p2p_->Send(plan_.RankOfDevice(op.peer), message, Tag(op, chunk));
  models::Op done = op;
  done.bytes = static_cast<double>(message.bytes());
  log_.Add(done);
}

void Runner::Forward(uint32_t mb, uint32_t chunk) {
  const uint32_t key = Key(mb, chunk);
  const bool head = role_.holds_head(chunk, specs_.model.num_layers());
  Buffer input;
  if (role_.holds_embedding(chunk)) {
    input = std::move(inputs_[mb]);
  } else {
    input = std::move(recv_forward_.at(key));
    recv_forward_.erase(key);
  }
  Buffer labels = head ? std::move(labels_[mb]) : Buffer();
  const float grad_scale = 1.0f / (static_cast<float>(plan_.global_batch) * static_cast<float>(plan_.seq_len));
  SliceRecorder::Scope f(&recorder_, Category::kForward, static_cast<int32_t>(mb));
  Buffer out = model_->Forward(mb, role_.share.size(), seq(), std::move(input), std::move(labels), grad_scale,
                               plan_.full_recompute, chunk);
  if (!head) out_forward_[key] = std::move(out);
}

void Runner::Backward(uint32_t mb, uint32_t chunk, uint32_t down_to) {
  const uint32_t key = Key(mb, chunk);
  Buffer dout;
  if (auto part = partial_backward_.find(key); part != partial_backward_.end()) {
    dout = std::move(part->second);  // the gradient where the previous part of this backward stopped
    partial_backward_.erase(part);
  } else if (!role_.holds_head(chunk, specs_.model.num_layers())) {
    dout = std::move(recv_backward_.at(key));
    recv_backward_.erase(key);
  }
  SliceRecorder::Scope b(&recorder_, Category::kBackward, static_cast<int32_t>(mb));
  Buffer dx = model_->Backward(mb, std::move(dout), chunk, down_to);
  if (down_to > role_.chunks[chunk].begin) {
    partial_backward_[key] = std::move(dx);
  } else if (!role_.holds_embedding(chunk)) {
    out_backward_[key] = std::move(dx);
  }
}

size_t Runner::RunPass(const std::vector<models::Op>& ops, size_t i) {
  // The pass: its layers' compute, their in-pass collectives (TP, Ulysses) and CP's ring operations (sends
  // and posted receives before a block's compute, receives after it), which the model runs and reports.
  const auto ring = [&](size_t k) {
    return ops[k].channel == models::kChanCp && ops[k].kind != models::OpKind::kCompute;
  };
  const auto compute_after = [&](size_t k) {
    while (k < ops.size() && ops[k].kind != models::OpKind::kCompute) ++k;
    HETSIM_CHECK(k < ops.size(), "hetsim-exec: ring operations without their pass");
    return k;
  };
  const size_t first_compute = compute_after(i);
  const models::Op& first = ops[first_compute];
  uint32_t lo = first.layer_begin, hi = first.layer_end;
  // ZeRO-3 by units: the pass's first gather before it, the calls behind a unit's compute after that
  // compute's report (hooks[k]: behind the pass's k-th compute operation), the last reduce-scatter after it.
  std::vector<size_t> before, after;
  std::vector<std::vector<size_t>> hooks;
  size_t j = i;
  for (; j < ops.size(); ++j) {
    const models::Op& op = ops[j];
    if (op.kind == models::OpKind::kCompute && op.category == first.category && op.micro_batch == first.micro_batch) {
      hooks.emplace_back();
    }
    if (ZeroUnit(op) && op.micro_batch == first.micro_batch) {
      // An exposed gather after the pass's compute opens the next pass.
      if (j > first_compute && op.hide_share <= 0 && op.collective == models::CollectiveKind::kAllGather) break;
      (j < first_compute ? before : op.hide_share > 0 ? hooks.back() : after).push_back(j);
      continue;
    }
    const bool layer = op.kind == models::OpKind::kCompute && op.category == first.category;
    const bool tp = op.kind == models::OpKind::kCollective && op.in_pass;
    // A ring receive ends its block's pass; ring sends open the next block's, which may be another pass.
    const bool cp = ring(j) && (op.kind == models::OpKind::kRecv || ops[compute_after(j)].category == first.category);
    if (!(layer || tp || cp) || op.micro_batch != first.micro_batch) break;
    if (layer) lo = std::min(lo, op.layer_begin), hi = std::max(hi, op.layer_end);
  }
  // A forward pass covers a whole model chunk; a backward pass may run in parts (comm.dp_overlap signals
  // between the gradient groups of the last backward), later layers first.
  const auto& chunks = role_.chunks;
  const auto c = static_cast<uint32_t>(
      std::find_if(chunks.begin(), chunks.end(), [&](const models::LayerRange& r) { return r.contains(lo); }) -
      chunks.begin());
  const bool whole = c < chunks.size() && chunks[c].begin == lo && chunks[c].end == hi;
  const bool part = c < chunks.size() && hi <= chunks[c].end && first.category == Category::kBackward;
  HETSIM_CHECK(whole || part, "hetsim-exec: a pass over layers " + std::to_string(lo) + "-" + std::to_string(hi) +
                                  " is not one of the rank's model chunks");
  for (size_t k : before) log_.Add(SyncOp(ops[k], false));
  size_t reported = 0;
  if (!hooks.empty()) {
    // The model reports the pass's compute operations in the lowering's order (the executor's op log): the
    // calls behind each run as it is reported, before its compute (the parameters are all resident; the
    // previous unit's gradients are complete).
    log_.after_compute = [&](const models::Op&) {
      HETSIM_CHECK(reported < hooks.size(), "hetsim-exec: the model ran more layer passes than the lowering has");
      for (size_t k : hooks[reported]) log_.Add(SyncOp(ops[k], false));
      ++reported;
    };
  }
  if (first.category == Category::kForward) {
    Forward(first.micro_batch, c);
  } else {
    Backward(first.micro_batch, c, lo);
  }
  log_.after_compute = nullptr;
  for (size_t k : after) log_.Add(SyncOp(ops[k], false));
  return j;
}

void Runner::RunOps() {
  const std::vector<models::Op>& ops = plan_.Ops(rank_);
  TakeCoreInRankOrder();
  for (size_t i = 0; i < ops.size();) {
    const models::Op& op = ops[i];
    const auto at = static_cast<int64_t>(i);
    switch (op.kind) {
      case models::OpKind::kRecv: watchdog_.Beat("a receive", op.peer, at, step_); break;
      case models::OpKind::kSend: watchdog_.Beat("a send", op.peer, at, step_); break;
      case models::OpKind::kCollective: watchdog_.Beat("a gradient all-reduce", -1, at, step_); break;
      case models::OpKind::kWaitSends: watchdog_.Beat("waiting for its sends", -1, at, step_); break;
      default: watchdog_.Beat("a pass or the optimizer", -1, at, step_); break;
    }
    switch (op.kind) {
      case models::OpKind::kRecv:
      case models::OpKind::kSend:
      case models::OpKind::kPostRecv:
        if (op.channel == models::kChanCp) {
          i = RunPass(ops, i);  // CP's ring: part of a block's pass
          break;
        }
        if (op.kind == models::OpKind::kPostRecv) {
          PostRecv(op, op_chunk_[i]);
        } else if (op.kind == models::OpKind::kRecv) {
          Recv(op, op_chunk_[i]);
        } else {
          Send(op, op_chunk_[i]);
        }
        ++i;
        break;
      case models::OpKind::kCompute:
        if (op.category != Category::kOptimizer) {
          i = RunPass(ops, i);
          break;
        }
        sync_->End();
        {
          SliceRecorder::Scope opt(&recorder_, Category::kOptimizer, -1);
          AdamParams adam;
          adam.lr = static_cast<float>(o_.lr);
          adam.step = static_cast<int>(step_) + 1;
          // ZeRO: the synchronised layers' shards here, the others (no replica to shard with) as usual.
          sync_->ZeroStep(adam);
          model_->OptimizerStep(adam, sync_->zero_layers());
        }
        log_.Add(op);
        ++i;
        break;
      case models::OpKind::kWaitSends:
        {
          const OffCore off;
          p2p_->WaitSends();
        }
        out_forward_.clear();
        out_backward_.clear();
        log_.Add(op);
        sync_->Begin();
        ++i;
        break;
      case models::OpKind::kCollective: {
        if (ZeroUnit(op)) {
          i = RunPass(ops, i);  // ZeRO-3 by units: the gather that opens a pass
          break;
        }
        if (op.category == Category::kPp && op.collective == models::CollectiveKind::kBroadcast) {
          Broadcast(ops, i, op_chunk_[i]);
          ++i;
          break;
        }
        if (op.category == Category::kPp && op.collective == models::CollectiveKind::kAllGather) {
          GatherPieces(op, op_chunk_[i]);
          ++i;
          break;
        }
        if (op.category == Category::kTp) {
          // Sequence parallelism: the norms' and routers' partial gradients summed over the TP group.
          models::Op done = op;
          done.bytes = sync_->SumSequenceParallel();
          log_.Add(done);
          ++i;
          break;
        }
        log_.Add(SyncOp(op, false));
        ++i;
        break;
      }
      case models::OpKind::kSignal:
        // The backward of a gradient segment's layers is done: the DP stream runs the segment.
        SubmitDpSegment();
        log_.Add(op);
        ++i;
        break;
      case models::OpKind::kJoin:
        {
          const OffCore off;
          be_->SideJoin();
        }
        HETSIM_CHECK(dp_next_ == plan_.DpOps(rank_).size(),
                     "hetsim-exec: the main stream joined the DP stream before signalling all its segments");
        log_.Add(op);
        ++i;
        break;
      default:
        HETSIM_CHECK(false, "hetsim-exec: the main stream has a " + std::string(models::OpKindName(op.kind)) +
                                " operation the executor does not run");
    }
  }
  LeaveCore();
}

models::Op Runner::SyncOp(const models::Op& op, bool side) {
  HETSIM_CHECK((op.category == Category::kDp || op.category == Category::kZero) && op.sync_group != models::kNone,
               "hetsim-exec: the executor's lowering has a collective outside a pass that is not a gradient "
               "sync or a ZeRO gather");
  const size_t index = plan_.SyncGroupOfLowering(op.sync_group);
  models::Op done = op;
  const std::vector<int>& ranks = plan_.sync_groups[index].ranks;
  const uint32_t own = log_.GroupOf(ranks);
  std::vector<uint32_t> members;
  for (int r : ranks) members.push_back(plan_.devices.at(static_cast<size_t>(r)));
  // A collective over other members than the sync group's is one of a hierarchical all-reduce's three.
  const bool hierarchical = plan_.lowering.groups.at(op.group) != members;
  if (ZeroUnit(op)) {
    done.bytes = op.category == Category::kZero ? sync_->GatherUnit(index, op.bucket) : sync_->ReduceUnit(index, op.bucket);
  } else if (op.category == Category::kZero) {
    done.bytes = sync_->AllGatherGroup(index);
  } else if (hierarchical) {
    // One of a hierarchical all-reduce's three collectives (over the node, or across nodes).
    done.bytes = sync_->RunHierarchical(index, op.bucket, op.num_buckets, op.collective, CommOf(op.group, side));
  } else {
    done.bytes = sync_->RunGroup(index, op.bucket, op.num_buckets);
  }
  // On the DP stream the lowering's groups are the DP stream's own (models::Lowerer::GroupId), run on the
  // side stream's communicators: the operation keeps its group as lowered.
  if (!side) done.group = op.category == Category::kDp && op.group != own ? op.group : own;
  return done;
}

void Runner::SubmitDpSegment() {
  const std::vector<models::Op>& dp = plan_.DpOps(rank_);
  HETSIM_CHECK(dp_next_ < dp.size() && dp[dp_next_].kind == models::OpKind::kAwait,
               "hetsim-exec: a signal with no DP stream segment waiting for it");
  size_t end = dp_next_ + 1;
  while (end < dp.size() && dp[end].kind != models::OpKind::kAwait) ++end;
  const size_t begin = dp_next_;
  dp_next_ = end;
  be_->SideSubmit([this, begin, end] {
    const std::vector<models::Op>& ops = plan_.DpOps(rank_);
    log_.AddDp(ops[begin]);  // the await: this work starts after the signal
    for (size_t i = begin + 1; i < end; ++i) {
      HETSIM_CHECK(ops[i].kind == models::OpKind::kCollective,
                   "hetsim-exec: the DP stream has a " + std::string(models::OpKindName(ops[i].kind)) +
                       " operation the executor does not run");
      log_.AddDp(SyncOp(ops[i], true));
    }
  });
}

double Runner::Step(uint32_t step, bool timed, DeviceTiming* timing) {
  PrepareData(step);
  be_->Synchronize();
  watchdog_.Beat("the barrier before a step", -1, -1, step);
  HETSIM_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  be_->ClearMarks();
  const Backend::Mark origin = be_->Record();
  model_->ZeroLoss();
  step_ = step;
  dp_next_ = 0;
  log_.active = step == 0 && !o_.ops_out.empty();
  RunOps();
  sync_->FinishStep();
  log_.active = false;
  const Backend::Mark end = be_->Record();
  watchdog_.Beat("the end of a step (device work or loss all-reduce)", -1, -1, step);
  be_->Synchronize();
  const double seconds = be_->Elapsed(origin, end);
  auto slices = recorder_.Resolve(origin);
  if (timed) {
    timing->iteration_s.push_back(seconds);
    timing->slices.push_back(std::move(slices));
  }
  if (layer_recorder_ != nullptr) {
    auto layer_slices = layer_recorder_->Resolve(origin);
    if (timed) layer_steps_.push_back(std::move(layer_slices));
  }
  float local_loss = 0;
  if (model_->holds_head() && role_.tp_rank == 0) be_->Download(&local_loss, model_->loss());
  double loss = local_loss;
  HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  loss /= double(plan_.global_batch) * plan_.seq_len;
  double max_seconds = seconds;
  HETSIM_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &max_seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  if (root()) {
    std::printf("step %3u%s  loss %.6f  %.4f s\n", step + 1, timed ? "" : " (warm-up)", loss, max_seconds);
    std::fflush(stdout);
  }
  return loss;
}

std::string Runner::ShareHeartbeats() {
  int ranks = 1;
  HETSIM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  if (o_.timeout_s <= 0 || ranks < 2) return "";
  char dir[512] = "";
  if (rank_ == 0) {
    std::error_code ec;
    const std::string root = std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                                 ? std::string("/dev/shm")
                                 : std::filesystem::temp_directory_path(ec).string();
    std::string pattern = root + "/hetsim-exec-heartbeats-XXXXXX";
    if (pattern.size() < sizeof(dir) && ::mkdtemp(pattern.data()) != nullptr) {
      std::snprintf(dir, sizeof(dir), "%s", pattern.c_str());
    }
  }
  HETSIM_MPI_CHECK(MPI_Bcast(dir, sizeof(dir), MPI_CHAR, 0, MPI_COMM_WORLD));
  watchdog_.Share(dir);
  return dir;
}

int Runner::Run() {
  const auto start = std::chrono::steady_clock::now();
  SetupComms();
  const std::string heartbeats = ShareHeartbeats();
  ModelOptions mo;
  mo.seed = o_.seed;
  mo.rope_theta = static_cast<float>(o_.rope_theta);
  mo.selective_recompute = plan_.selective_recompute;
  mo.sequence_parallel = plan_.sequence_parallel;
  mo.tp_backward_blocking = plan_.tp_backward_blocking;
  mo.ep = role_.ep;
  mo.ep_rank = role_.ep_rank;
  mo.etp = role_.etp;
  mo.etp_rank = role_.etp_rank;
  mo.capacity_factor = plan_.moe_capacity_factor;
  model_ = std::make_unique<StageModel>(be_, specs_.model, role_.chunks, role_.tp, role_.tp_rank, tp_comm_, mo,
                                        &recorder_);
  if (role_.ulysses > 1) model_->SetUlysses(comms_.at(role_.uly_group).get());
  if (role_.cp > 1) model_->SetContextParallel(comms_.at(role_.cp_group).get());
  if (role_.ep > 1 || role_.etp > 1) {
    model_->SetExpertParallel(role_.ep > 1 ? comms_.at(role_.ep_group).get() : nullptr,
                              role_.etp > 1 ? comms_.at(role_.etp_group).get() : nullptr);
  }
  MapChunks();
  model_->SetOpObserver(&log_);
  if (!o_.profile_out.empty()) {
    layer_recorder_ = std::make_unique<SliceRecorder>(be_);
    model_->SetLayerRecorder(layer_recorder_.get());
  }
  std::map<std::vector<int>, Comm*> group_comms;
  for (auto& [ranks, comm] : comms_) group_comms[ranks] = comm.get();
  sync_ = std::make_unique<GradSync>(be_, plan_, rank_, model_.get(), tp_comm_, group_comms, &recorder_);
  if (!side_comms_.empty()) {
    std::map<std::vector<int>, Comm*> side;
    for (auto& [ranks, comm] : side_comms_) side[ranks] = comm.get();
    sync_->UseSideComms(side);
  }
  DeviceTiming timing;
  timing.rank = rank_;
  std::string loss_csv = "step,loss,iteration_s\n";
  int status = 0;
  const uint32_t steps = o_.warmup + o_.iterations;
  for (uint32_t step = 0; step < steps; ++step) {
    const bool timed = step >= o_.warmup;
    if (step == o_.warmup) be_->ResetPeak();
    const double loss = Step(step, timed, &timing);
    char line[96];
    std::snprintf(line, sizeof(line), "%u,%.8f,%.6f\n", step + 1, loss, timed ? timing.iteration_s.back() : 0.0);
    loss_csv += line;
    if (step == 0 && !o_.ops_out.empty()) WriteOps();
    if (step == 0 && (!o_.dump_gradients.empty() || !o_.compare_gradients.empty())) status |= CheckGradients(loss);
    model_->ZeroGrads();
    sync_->ClearGradSegments();
  }
  if (root() && !o_.loss_out.empty()) {
    const Status s = models::WriteFileAtomically(o_.loss_out, loss_csv);
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
  }
  timing.peak_memory_bytes = static_cast<double>(be_->peak_bytes());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (o_.iterations > 0) Report(timing, wall);
  if (layer_recorder_ != nullptr && o_.iterations > 0 && root()) WriteProfile(layer_steps_);
  sync_.reset();
  model_.reset();
  be_->SetProgressHook({});
  p2p_.reset();
  side_comms_.clear();
  comms_.clear();
  if (!heartbeats.empty()) {
    // Every rank has stopped writing before rank 0 removes the folder.
    watchdog_.Share("");
    HETSIM_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    std::error_code ec;
    if (rank_ == 0) std::filesystem::remove_all(heartbeats, ec);
  }
  return status;
}

}  // namespace hetsim::executor
