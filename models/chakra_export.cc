// A lowering as Chakra execution traces, one per rank (models/chakra.h; docs/chakra.md has the table).
//
// Each operation of a rank's main stream and DP stream is one node, numbered in that order (the main stream
// first). data_deps say what a node must wait for, as the simulator plays the operations: the node before it
// on its stream, except that sends and posted receives do not hold up the nodes after them (they are
// asynchronous); the receive that completes a posted one waits for it; a wait for sends waits for every send
// posted since the last; an await waits for the other stream's matching signal; the main stream's join for
// the DP stream's last node. ctrl_deps record the issue order (the previous node of the stream).
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <utility>

#include "models/chakra.h"
#include "models/chakra_attrs.h"

namespace hetsim::models {
namespace {

using ChakraProtoMsg::Node;

ChakraProtoMsg::CollectiveCommType CommTypeOf(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return ChakraProtoMsg::ALL_REDUCE;
    case CollectiveKind::kReduceScatter: return ChakraProtoMsg::REDUCE_SCATTER;
    case CollectiveKind::kAllGather: return ChakraProtoMsg::ALL_GATHER;
    case CollectiveKind::kBroadcast: return ChakraProtoMsg::BROADCAST;
    case CollectiveKind::kAllToAll: return ChakraProtoMsg::ALL_TO_ALL;
  }
  return ChakraProtoMsg::ALL_REDUCE;
}

int64_t Round(double x) { return static_cast<int64_t>(std::llround(x)); }

// The operation's fields that differ from a default Op, as hetsim_ attributes (peers and groups as ranks).
void AddOpFields(const Op& op, const Lowering& lw, Node* n) {
  const Op d;
  if (op.algorithm != d.algorithm) chakra::AddInt32(n, "hetsim_algorithm", static_cast<int32_t>(op.algorithm));
  if (op.reduce != d.reduce) chakra::AddInt32(n, "hetsim_reduce", static_cast<int32_t>(op.reduce));
  if (op.channel != d.channel) chakra::AddInt32(n, "hetsim_channel", op.channel);
  if (op.recompute) chakra::AddBool(n, "hetsim_recompute", true);
  if (op.in_pass) chakra::AddBool(n, "hetsim_in_pass", true);
  if (op.hide_share != d.hide_share) chakra::AddDouble(n, "hetsim_hide_share", op.hide_share);
  if (op.sm_share != d.sm_share) chakra::AddDouble(n, "hetsim_sm_share", op.sm_share);
  if (op.micro_batch != d.micro_batch) chakra::AddInt32(n, "hetsim_micro_batch", op.micro_batch);
  if (op.bucket != d.bucket) chakra::AddInt32(n, "hetsim_bucket", op.bucket);
  if (op.num_buckets != d.num_buckets) chakra::AddInt32(n, "hetsim_num_buckets", op.num_buckets);
  if (op.calls != d.calls) chakra::AddInt64(n, "hetsim_calls", op.calls);
  if (op.peer != kNone) chakra::AddInt32(n, chakra::kPeer, static_cast<int32_t>(lw.device_slot[op.peer]));
  if (op.rank != d.rank) chakra::AddInt64(n, "hetsim_group_rank", op.rank);
  if (op.sync_group != kNone) chakra::AddInt64(n, "hetsim_sync_group", op.sync_group);
  if (op.layer_begin != 0 || op.layer_end != 0) {
    auto* l = chakra::Add(n->mutable_attr(), "hetsim_layers")->mutable_int64_list();
    l->add_values(op.layer_begin);
    l->add_values(op.layer_end);
  }
  if (op.seq_begin != 0 || op.seq_end != 0) {
    auto* l = chakra::Add(n->mutable_attr(), "hetsim_seqs")->mutable_int64_list();
    l->add_values(op.seq_begin);
    l->add_values(op.seq_end);
  }
  if (op.bytes != 0) chakra::AddDouble(n, "hetsim_bytes", op.bytes);
  if (op.flops != 0) chakra::AddDouble(n, "hetsim_flops", op.flops);
  if (op.params != 0) chakra::AddDouble(n, "hetsim_params", op.params);
  if (op.host_ranks != 0) chakra::AddInt64(n, "hetsim_host_ranks", op.host_ranks);
  if (op.to_host) chakra::AddBool(n, "hetsim_to_host", true);
}

// Chakra's view of the operation: node type and the attributes its tools read.
void AddChakraFields(const Op& op, const Lowering& lw, uint32_t slot, bool posted, Node* n) {
  chakra::AddBool(n, chakra::kIsCpuOp, false);
  const auto peer = [&] { return static_cast<int32_t>(lw.device_slot[op.peer]); };
  switch (op.kind) {
    case OpKind::kCompute:
      n->set_type(ChakraProtoMsg::COMP_NODE);
      if (op.flops > 0) chakra::AddInt64(n, chakra::kNumOps, Round(op.flops));
      break;
    case OpKind::kSend:
    case OpKind::kPostRecv:
    case OpKind::kRecv: {
      const bool send = op.kind == OpKind::kSend;
      if (op.kind == OpKind::kRecv && posted) {  // completes a posted receive: no transfer of its own
        n->set_type(ChakraProtoMsg::COMP_NODE);
        break;
      }
      n->set_type(send ? ChakraProtoMsg::COMM_SEND_NODE : ChakraProtoMsg::COMM_RECV_NODE);
      chakra::AddInt32(n, chakra::kCommSrc, send ? static_cast<int32_t>(slot) : peer());
      chakra::AddInt32(n, chakra::kCommDst, send ? peer() : static_cast<int32_t>(slot));
      chakra::AddInt32(n, chakra::kCommTag, op.channel);
      chakra::AddInt64(n, chakra::kCommSize, Round(op.bytes));
      chakra::AddUint64(n, chakra::kTensorSize, static_cast<uint64_t>(Round(op.bytes)));
      break;
    }
    case OpKind::kCollective:
      n->set_type(ChakraProtoMsg::COMM_COLL_NODE);
      chakra::AddInt64(n, chakra::kCommType, CommTypeOf(op.collective));
      chakra::AddInt64(n, chakra::kCommSize, Round(op.bytes));
      chakra::AddString(n, chakra::kPgName, std::to_string(op.group));
      break;
    case OpKind::kHostCopy:
      n->set_type(op.to_host ? ChakraProtoMsg::MEM_STORE_NODE : ChakraProtoMsg::MEM_LOAD_NODE);
      chakra::AddUint64(n, chakra::kTensorSize, static_cast<uint64_t>(Round(op.bytes)));
      break;
    case OpKind::kSignal:
    case OpKind::kAwait:
    case OpKind::kJoin:
    case OpKind::kWaitSends:
      n->set_type(ChakraProtoMsg::COMP_NODE);  // no work: ordering only (Chakra consumers skip it)
      break;
  }
}

// The dependency state of one stream while its nodes are made.
struct StreamDeps {
  std::optional<uint64_t> last_blocking;  // the node the next one waits for
  std::optional<uint64_t> previous;       // the previous node (issue order)
  std::vector<uint64_t> sends;            // sends posted since the last wait for them
  std::map<std::pair<uint32_t, uint8_t>, std::deque<uint64_t>> posted;  // (peer, channel) -> posted receives
  size_t awaits = 0;
};

struct RankIds {
  uint64_t dp_base = 0;                       // id of the DP stream's first node
  std::vector<uint64_t> signals[2];           // each stream's signal nodes, in order
};

// The data_deps of the node of `op` on stream `s` (0 main, 1 DP); updates the stream's state.
void AddDeps(const Op& op, uint32_t s, uint64_t id, const RankIds& ids, const RankOps& r, StreamDeps* st, Node* n,
             bool* posted) {
  std::vector<uint64_t> deps;
  if (st->last_blocking) deps.push_back(*st->last_blocking);
  bool blocking = true;
  switch (op.kind) {
    case OpKind::kSend:
      st->sends.push_back(id);
      blocking = false;
      break;
    case OpKind::kPostRecv:
      st->posted[{op.peer, op.channel}].push_back(id);
      blocking = false;
      break;
    case OpKind::kRecv: {
      auto it = st->posted.find({op.peer, op.channel});
      *posted = it != st->posted.end() && !it->second.empty();
      if (*posted) {
        deps.push_back(it->second.front());
        it->second.pop_front();
      }
      break;
    }
    case OpKind::kAwait: {
      const auto& other = ids.signals[1 - s];
      if (st->awaits < other.size()) deps.push_back(other[st->awaits]);
      ++st->awaits;
      break;
    }
    case OpKind::kJoin:
      if (!r.dp_stream.empty()) deps.push_back(ids.dp_base + r.dp_stream.size() - 1);
      [[fallthrough]];
    case OpKind::kWaitSends:
      deps.insert(deps.end(), st->sends.begin(), st->sends.end());
      st->sends.clear();
      break;
    default:
      break;
  }
  for (uint64_t d : deps) n->add_data_deps(d);
  if (st->previous) n->add_ctrl_deps(*st->previous);
  st->previous = id;
  if (blocking) st->last_blocking = id;
}

Node MakeNode(const Lowering& lw, uint32_t slot, uint32_t s, size_t index, uint64_t id, const RankIds& ids,
              StreamDeps* st, const ChakraExportOptions& options) {
  const RankOps& r = lw.ranks[slot];
  const Op& op = s == 0 ? r.ops[index] : r.dp_stream[index];
  Node n;
  n.set_id(id);
  n.set_name(FormatOp(lw, r.device, s == 0 ? "main" : "dp", index, op));
  bool posted = false;
  AddDeps(op, s, id, ids, r, st, &n, &posted);
  AddChakraFields(op, lw, slot, posted, &n);
  if (op.kind == OpKind::kCompute && options.compute_seconds) {
    const double seconds = options.compute_seconds(slot, s == 1, index);
    n.set_duration_micros(static_cast<uint64_t>(Round(std::max(0.0, seconds) * 1e6)));
    chakra::AddDouble(&n, chakra::kSeconds, seconds);
  }
  chakra::AddString(&n, chakra::kOp, OpKindName(op.kind));
  if (s != 0) chakra::AddInt32(&n, chakra::kStream, static_cast<int32_t>(s));
  chakra::AddInt64(&n, chakra::kIndex, static_cast<int64_t>(index));
  chakra::AddString(&n, chakra::kCategory, CategoryName(op.category));
  AddOpFields(op, lw, &n);
  return n;
}

ChakraProtoMsg::GlobalMetadata MakeMetadata(const Lowering& lw, uint32_t slot, const ChakraExportOptions& options) {
  ChakraProtoMsg::GlobalMetadata m;
  m.set_version("1.0.0");
  const RankOps& r = lw.ranks[slot];
  chakra::AddMetaInt64(&m, chakra::kRank, slot);
  std::vector<int64_t> devices(lw.devices.begin(), lw.devices.end());
  chakra::AddMetaList(&m, chakra::kDevices, devices);
  chakra::AddMetaInt64(&m, chakra::kPipeline, r.pipeline);
  chakra::AddMetaInt64(&m, chakra::kStage, r.stage);
  chakra::Add(m.mutable_attr(), "hetsim_tp_overlap")->set_bool_val(lw.tp_overlap);
  chakra::Add(m.mutable_attr(), "hetsim_separate_recompute")->set_bool_val(lw.separate_recompute);
  chakra::Add(m.mutable_attr(), "hetsim_cpu_staged")->set_bool_val(lw.cpu_staged);
  chakra::Add(m.mutable_attr(), chakra::kComm)->set_bytes_val(lw.comm.SerializeAsString());
  // Rank 0's file lists every group (the lowering may hold groups no collective uses); the others their own.
  std::map<uint32_t, bool> used;
  for (uint32_t g = 0; slot == 0 && g < lw.groups.size(); ++g) used[g] = true;
  for (const auto* stream : {&r.ops, &r.dp_stream}) {
    for (const Op& op : *stream) {
      if (op.kind == OpKind::kCollective) used[op.group] = true;
    }
  }
  for (const auto& [g, yes] : used) {
    std::vector<int64_t> ranks;
    for (uint32_t d : lw.groups[g]) ranks.push_back(lw.device_slot[d]);
    chakra::AddMetaList(&m, chakra::kGroupPrefix + std::to_string(g), ranks);
  }
  for (const auto& a : options.metadata) *m.add_attr() = a;
  return m;
}

}  // namespace

std::vector<ChakraTrace> ExportChakra(const Lowering& lowering, const ChakraExportOptions& options) {
  std::vector<ChakraTrace> out(lowering.ranks.size());
  for (uint32_t slot = 0; slot < lowering.ranks.size(); ++slot) {
    const RankOps& r = lowering.ranks[slot];
    ChakraTrace& t = out[slot];
    t.rank = slot;
    t.metadata = MakeMetadata(lowering, slot, options);
    RankIds ids;
    ids.dp_base = r.ops.size();
    for (uint32_t s = 0; s < 2; ++s) {
      const auto& stream = s == 0 ? r.ops : r.dp_stream;
      for (size_t i = 0; i < stream.size(); ++i) {
        if (stream[i].kind == OpKind::kSignal) ids.signals[s].push_back((s == 0 ? 0 : ids.dp_base) + i);
      }
    }
    t.nodes.reserve(r.ops.size() + r.dp_stream.size());
    for (uint32_t s = 0; s < 2; ++s) {
      StreamDeps st;
      const size_t n = s == 0 ? r.ops.size() : r.dp_stream.size();
      for (size_t i = 0; i < n; ++i) {
        t.nodes.push_back(MakeNode(lowering, slot, s, i, (s == 0 ? 0 : ids.dp_base) + i, ids, &st, options));
      }
    }
  }
  return out;
}

}  // namespace hetsim::models
