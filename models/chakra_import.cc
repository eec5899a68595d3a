// Chakra execution traces read back as a lowering (models/chakra.h; docs/chakra.md "Import").
//
// Traces written by `hetsim export-chakra` carry every operation's fields (hetsim_ attributes) and are
// restored operation for operation. Other traces (PyTorch's, through Chakra's converter) are a graph per
// rank; the simulator plays two streams per device, so the graph is laid out on them: communication nodes on
// the second stream, everything else on the main stream, each in the order Chakra's feeder would issue them
// (a node once its data dependencies are done, smallest id first), with a signal after a node whose children
// sit on the other stream and, before such a child, waits for the signals up to its parents'.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include "models/chakra.h"
#include "models/chakra_attrs.h"
#include "models/kernels.h"

namespace hetsim::models {
namespace {

using ChakraProtoMsg::Node;

std::string Where(const ChakraTrace& t, const Node& n) {
  return t.path + ": node id " + std::to_string(n.id()) + " (\"" + n.name().substr(0, 60) + "\")";
}

// ---- traces written by hetsim ----------------------------------------------------------------------

bool FromHetsim(const ChakraTrace& t) { return FindAttr(t.metadata, chakra::kRank) != nullptr; }

double Num(const Node& n, const char* name, double dflt) {
  const auto* a = FindAttr(n, name);
  return a == nullptr ? dflt : AttrNumber(*a);
}

// A number of a damaged or foreign file held inside T's range (a cast out of range is undefined).
template <class T>
T Clamped(double v) {
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (!(v >= lo)) return std::numeric_limits<T>::min();
  if (v >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <class T>
T Field(const Node& n, const char* name, double dflt) {
  return Clamped<T>(Num(n, name, dflt));
}

std::pair<uint32_t, uint32_t> Range(const Node& n, const char* name) {
  const auto* a = FindAttr(n, name);
  if (a == nullptr || a->int64_list().values_size() != 2) return {0, 0};
  return {static_cast<uint32_t>(a->int64_list().values(0)), static_cast<uint32_t>(a->int64_list().values(1))};
}

Result<OpKind> KindNamed(const std::string& name, const std::string& where) {
  for (int k = 0; k <= static_cast<int>(OpKind::kHostCopy); ++k) {
    if (name == OpKindName(static_cast<OpKind>(k))) return static_cast<OpKind>(k);
  }
  return Status::Invalid(where + ": field attr hetsim_op is '" + name +
                         "', not an operation hetsim lowers (compute, send, recv, post_recv, collective, signal, "
                         "await, join, wait_sends, host_copy); the file was changed or is from another version");
}

Category CategoryNamed(const std::string& name) {
  for (int c = 0; c < kNumCategories; ++c) {
    if (name == CategoryName(static_cast<Category>(c))) return static_cast<Category>(c);
  }
  return Category::kForward;
}

Result<CollectiveKind> CollectiveOf(int64_t comm_type, const std::string& where);

// A node of a hetsim trace as the operation it was; `devices`: rank -> device.
Result<Op> RestoreOp(const ChakraTrace& t, const Node& n, const std::vector<uint32_t>& devices) {
  const std::string where = Where(t, n);
  const auto* kind = FindAttr(n, chakra::kOp);
  HETSIM_ASSIGN_OR_RETURN(const OpKind k, KindNamed(kind == nullptr ? "" : kind->string_val(), where));
  Op op;
  op.kind = k;
  if (const auto* c = FindAttr(n, chakra::kCategory)) op.category = CategoryNamed(c->string_val());
  if (k == OpKind::kCollective) {
    HETSIM_ASSIGN_OR_RETURN(op.collective, CollectiveOf(Field<int64_t>(n, chakra::kCommType, -1), where));
    const auto* pg = FindAttr(n, chakra::kPgName);
    op.group = pg == nullptr ? kNone : static_cast<uint32_t>(std::strtoul(pg->string_val().c_str(), nullptr, 10));
  }
  op.algorithm = static_cast<Algorithm>(std::min<int>(Field<uint8_t>(n, "hetsim_algorithm", 0), 2));
  op.reduce = static_cast<ReduceOp>(std::min<int>(Field<uint8_t>(n, "hetsim_reduce", 0), 1));
  op.channel = Field<uint8_t>(n, "hetsim_channel", 0);
  op.recompute = Num(n, "hetsim_recompute", 0) != 0;
  op.in_pass = Num(n, "hetsim_in_pass", 0) != 0;
  op.hide_share = static_cast<float>(std::clamp(Num(n, "hetsim_hide_share", 0), 0.0, 1.0));
  op.sm_share = static_cast<float>(std::clamp(Num(n, "hetsim_sm_share", 0), 0.0, 1.0));
  op.micro_batch = Field<uint16_t>(n, "hetsim_micro_batch", 0);
  op.bucket = Field<uint16_t>(n, "hetsim_bucket", 0);
  op.num_buckets = Field<uint16_t>(n, "hetsim_num_buckets", 1);
  op.calls = Field<uint32_t>(n, "hetsim_calls", 1);
  const double peer = Num(n, chakra::kPeer, -1);
  if (peer >= static_cast<double>(devices.size())) {
    return Status::Invalid(where + ": field attr hetsim_peer names rank " + std::to_string(static_cast<int64_t>(peer)) +
                           ", but there are " + std::to_string(devices.size()) + " ranks (give every rank's file)");
  }
  op.peer = peer < 0 ? kNone : devices[static_cast<size_t>(peer)];
  op.rank = Field<uint32_t>(n, "hetsim_group_rank", 0);
  const double sync = Num(n, "hetsim_sync_group", -1);
  op.sync_group = sync < 0 ? kNone : Clamped<uint32_t>(sync);
  std::tie(op.layer_begin, op.layer_end) = Range(n, "hetsim_layers");
  std::tie(op.seq_begin, op.seq_end) = Range(n, "hetsim_seqs");
  op.bytes = Num(n, "hetsim_bytes", 0);
  op.flops = Num(n, "hetsim_flops", 0);
  op.params = Num(n, "hetsim_params", 0);
  op.host_ranks = Field<uint32_t>(n, "hetsim_host_ranks", 0);
  op.to_host = Num(n, "hetsim_to_host", 0) != 0;
  return op;
}

// The collective groups the files record (hetsim_group_<g>: member ranks), as device lists.
Status RestoreGroups(const std::vector<ChakraTrace>& traces, const std::vector<uint32_t>& devices, Lowering* lw) {
  const std::string prefix = chakra::kGroupPrefix;
  for (const auto& t : traces) {
    for (const auto& a : t.metadata.attr()) {
      if (a.name().compare(0, prefix.size(), prefix) != 0) continue;
      const size_t g = std::strtoul(a.name().c_str() + prefix.size(), nullptr, 10);
      if (g >= 1u << 24) return Status::Invalid(t.path + ": metadata " + a.name() + ": group number out of range");
      if (lw->groups.size() <= g) lw->groups.resize(g + 1);
      std::vector<uint32_t> members;
      for (int64_t r : a.int64_list().values()) {
        if (r < 0 || static_cast<size_t>(r) >= devices.size()) {
          return Status::Invalid(t.path + ": metadata " + a.name() + " names rank " + std::to_string(r) + " of " +
                                 std::to_string(devices.size()) + " (give every rank's file)");
        }
        members.push_back(devices[static_cast<size_t>(r)]);
      }
      lw->groups[g] = std::move(members);
    }
  }
  return Status::Ok();
}

// Seconds of a restored compute node: its recorded price, or FLOPs on the device.
using Pricer = std::function<double(uint32_t device, double flops, double bytes)>;

Status RestoreRank(const ChakraTrace& t, uint32_t slot, const std::vector<uint32_t>& devices, bool durations,
                   const Pricer& price, ImportedChakra* out) {
  RankOps& r = out->lowering.ranks[slot];
  r.device = devices[slot];
  if (const auto* a = FindAttr(t.metadata, chakra::kPipeline)) r.pipeline = Clamped<uint32_t>(AttrNumber(*a));
  if (const auto* a = FindAttr(t.metadata, chakra::kStage)) r.stage = Clamped<uint32_t>(AttrNumber(*a));
  std::vector<std::pair<int64_t, const Node*>> by_stream[2];
  for (const auto& n : t.nodes) {
    const int s = Num(n, chakra::kStream, 0) == 0 ? 0 : 1;
    by_stream[s].emplace_back(Field<int64_t>(n, chakra::kIndex, -1), &n);
  }
  for (int s = 0; s < 2; ++s) {
    auto& nodes = by_stream[s];
    std::sort(nodes.begin(), nodes.end());
    auto& ops = s == 0 ? r.ops : r.dp_stream;
    auto& secs = out->seconds[slot][static_cast<size_t>(s)];
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].first != static_cast<int64_t>(i)) {
        return Status::Invalid(Where(t, *nodes[i].second) + ": field attr hetsim_index is " +
                               std::to_string(nodes[i].first) + " where " + std::to_string(i) +
                               " was expected (each stream's nodes are numbered 0, 1, ...; the file was changed)");
      }
      HETSIM_ASSIGN_OR_RETURN(Op op, RestoreOp(t, *nodes[i].second, devices));
      const Node& n = *nodes[i].second;
      double seconds = 0;
      if (op.kind == OpKind::kCompute) {
        seconds = durations ? Num(n, chakra::kSeconds, static_cast<double>(n.duration_micros()) * 1e-6)
                            : price(r.device, op.flops, 0);
      }
      ops.push_back(op);
      secs.push_back(seconds);
    }
  }
  return Status::Ok();
}

Status RestoreSettings(const ChakraTrace& t, ImportedChakra* out) {
  Lowering& lw = out->lowering;
  const auto flag = [&](const char* name) {
    const auto* a = FindAttr(t.metadata, name);
    return a != nullptr && a->bool_val();
  };
  lw.tp_overlap = flag("hetsim_tp_overlap");
  lw.separate_recompute = flag("hetsim_separate_recompute");
  lw.cpu_staged = flag("hetsim_cpu_staged");
  if (const auto* c = FindAttr(t.metadata, chakra::kComm); c != nullptr && !lw.comm.ParseFromString(c->bytes_val())) {
    return Status::Invalid(t.path + ": metadata hetsim_comm is not a hetsim CommOptions message (the file is damaged)");
  }
  if (const auto* f = FindAttr(t.metadata, chakra::kFidelity)) out->fidelity = f->string_val();
  return Status::Ok();
}

// ---- generic traces ---------------------------------------------------------------------------------

Result<CollectiveKind> CollectiveOf(int64_t t, const std::string& where) {
  switch (t) {
    case ChakraProtoMsg::ALL_REDUCE:
    case ChakraProtoMsg::BARRIER: return CollectiveKind::kAllReduce;
    case ChakraProtoMsg::ALL_GATHER: return CollectiveKind::kAllGather;
    case ChakraProtoMsg::REDUCE_SCATTER:
    case ChakraProtoMsg::REDUCE_SCATTER_BLOCK: return CollectiveKind::kReduceScatter;
    case ChakraProtoMsg::BROADCAST: return CollectiveKind::kBroadcast;
    case ChakraProtoMsg::ALL_TO_ALL: return CollectiveKind::kAllToAll;
    case ChakraProtoMsg::REDUCE:
    case ChakraProtoMsg::GATHER:
    case ChakraProtoMsg::SCATTER:
      return Status::Invalid(where + ": field attr comm_type is " +
                             ChakraProtoMsg::CollectiveCommType_Name(static_cast<ChakraProtoMsg::CollectiveCommType>(t)) +
                             ", which hetsim's simulator does not play (it plays ALL_REDUCE, ALL_GATHER, "
                             "REDUCE_SCATTER, REDUCE_SCATTER_BLOCK, ALL_TO_ALL, BROADCAST and BARRIER); rewrite the "
                             "node as one of those");
    default:
      return Status::Invalid(where + ": field attr comm_type is " + std::to_string(t) +
                             ", not a Chakra CollectiveCommType (0-9: ALL_REDUCE=0, ALL_GATHER=2, BROADCAST=5, "
                             "ALL_TO_ALL=6, REDUCE_SCATTER=7, ...); fix the node's comm_type");
  }
}

// Where a generic node is played.
enum class Role : uint8_t { kNoOp, kCompute, kCollective, kSend, kRecv, kHostCopy };

struct GraphNode {
  const Node* node = nullptr;
  Role role = Role::kNoOp;
  int stream = 0;                // 0 main, 1 communication
  std::vector<uint32_t> parents;  // indices
  std::vector<uint32_t> children;
  uint64_t signal = 0;           // signals of its stream up to and including its own (0: none after it)
};

bool IsCpuOp(const Node& n) {
  const auto* a = FindAttr(n, chakra::kIsCpuOp);
  return a != nullptr && a->bool_val();
}

Role RoleOf(const Node& n) {
  // Host operators order the device's work; their time is the host's, not simulated.
  if (IsCpuOp(n)) return Role::kNoOp;
  switch (n.type()) {
    case ChakraProtoMsg::COMP_NODE: return Role::kCompute;
    case ChakraProtoMsg::COMM_COLL_NODE: return Role::kCollective;
    case ChakraProtoMsg::COMM_SEND_NODE: return Role::kSend;
    case ChakraProtoMsg::COMM_RECV_NODE: return Role::kRecv;
    case ChakraProtoMsg::MEM_LOAD_NODE:
    case ChakraProtoMsg::MEM_STORE_NODE: return Role::kHostCopy;
    default: return Role::kNoOp;
  }
}

// The graph of one trace: node roles and data dependencies by index; errors for repeated ids and
// dependencies on nodes the file does not hold.
Result<std::vector<GraphNode>> BuildGraph(const ChakraTrace& t) {
  std::vector<GraphNode> g(t.nodes.size());
  std::unordered_map<uint64_t, uint32_t> index;
  for (uint32_t i = 0; i < t.nodes.size(); ++i) {
    if (!index.emplace(t.nodes[i].id(), i).second) {
      return Status::Invalid(Where(t, t.nodes[i]) + ": field id repeats an earlier node's id (ids must be unique "
                                                    "in a file; renumber the node)");
    }
    g[i].node = &t.nodes[i];
    g[i].role = RoleOf(t.nodes[i]);
    g[i].stream = g[i].role == Role::kCollective || g[i].role == Role::kSend || g[i].role == Role::kRecv ? 1 : 0;
  }
  for (uint32_t i = 0; i < g.size(); ++i) {
    for (uint64_t d : t.nodes[i].data_deps()) {
      auto it = index.find(d);
      if (it == index.end()) {
        return Status::Invalid(Where(t, t.nodes[i]) + ": field data_deps names node " + std::to_string(d) +
                               ", which is not in the file (Chakra's feeder would wait for it forever; remove the "
                               "dependency or add the node)");
      }
      if (it->second == i) {
        return Status::Invalid(Where(t, t.nodes[i]) + ": field data_deps names the node itself (remove it)");
      }
      g[i].parents.push_back(it->second);
      g[it->second].children.push_back(i);
    }
  }
  return g;
}

// The feeder's issue order over the whole graph: a node once its data dependencies are done, smallest id
// first. An error names a node of a cycle when some nodes can never issue.
Result<std::vector<uint32_t>> IssueOrder(const ChakraTrace& t, const std::vector<GraphNode>& g) {
  std::vector<size_t> waiting(g.size());
  using Item = std::pair<uint64_t, uint32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (uint32_t i = 0; i < g.size(); ++i) {
    waiting[i] = g[i].parents.size();
    if (waiting[i] == 0) ready.emplace(g[i].node->id(), i);
  }
  std::vector<uint32_t> order;
  order.reserve(g.size());
  while (!ready.empty()) {
    const uint32_t i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (uint32_t c : g[i].children) {
      if (--waiting[c] == 0) ready.emplace(g[c].node->id(), c);
    }
  }
  if (order.size() < g.size()) {
    for (uint32_t i = 0; i < g.size(); ++i) {
      if (waiting[i] > 0) {
        return Status::Invalid(Where(t, *g[i].node) + ": field data_deps is part of a cycle (" +
                               std::to_string(g.size() - order.size()) +
                               " nodes can never issue); remove one dependency of the cycle");
      }
    }
  }
  return order;
}

struct GenericContext {
  const Cluster& cluster;
  const ChakraImportOptions& options;
  const Pricer& price;
  std::map<std::string, uint32_t> group_of;  // pg_name -> group
  uint32_t num_ranks = 0;
  uint64_t unpriced = 0, host_ops = 0;
};

// The operation a node plays on rank `slot` (devices: rank -> device), and its compute seconds.
Result<Op> GenericOp(const ChakraTrace& t, const GraphNode& gn, uint32_t slot, const Lowering& lw,
                     GenericContext* cx, double* seconds) {
  const Node& n = *gn.node;
  Op op;
  *seconds = 0;
  switch (gn.role) {
    case Role::kNoOp:
      break;
    case Role::kCompute: {
      const double flops = Num(n, chakra::kNumOps, 0);
      const double bytes = FindAttr(n, chakra::kTensorSize) != nullptr ? Num(n, chakra::kTensorSize, 0)
                                                                       : TensorBytes(n.inputs()) + TensorBytes(n.outputs());
      const bool recorded = cx->options.durations && n.duration_micros() > 0;
      *seconds = recorded ? static_cast<double>(n.duration_micros()) * 1e-6 : cx->price(lw.devices[slot], flops, bytes);
      if (!recorded && *seconds <= 0 && n.duration_micros() > 0) ++cx->unpriced;
      op.flops = flops;
      break;
    }
    case Role::kCollective: {
      const auto* type = FindAttr(n, chakra::kCommType);
      if (type == nullptr) {
        return Status::Invalid(Where(t, n) + ": a COMM_COLL_NODE on the device without field attr comm_type (add "
                                             "comm_type, int64_val: ALL_REDUCE=0, ALL_GATHER=2, BROADCAST=5, ...)");
      }
      op.kind = OpKind::kCollective;
      op.category = Category::kDp;
      HETSIM_ASSIGN_OR_RETURN(op.collective, CollectiveOf(Clamped<int64_t>(AttrNumber(*type)), Where(t, n)));
      op.bytes = Clamped<int64_t>(AttrNumber(*type)) == ChakraProtoMsg::BARRIER ? 0 : Num(n, chakra::kCommSize, 0);
      const auto* pg = FindAttr(n, chakra::kPgName);
      op.group = cx->group_of.at(pg == nullptr ? "" : pg->string_val());
      const auto& members = lw.groups[op.group];
      op.rank = static_cast<uint32_t>(std::find(members.begin(), members.end(), lw.devices[slot]) - members.begin());
      break;
    }
    case Role::kSend:
    case Role::kRecv: {
      const bool send = gn.role == Role::kSend;
      const char* field = send ? chakra::kCommDst : chakra::kCommSrc;
      const double peer = Num(n, field, -1);
      if (peer < 0 || peer >= cx->num_ranks || peer == slot || cx->options.replicate > 0) {
        return Status::Invalid(Where(t, n) + ": field attr " + field + " is " + std::to_string(static_cast<int64_t>(peer)) +
                               ": expected another rank's number, 0 to " + std::to_string(cx->num_ranks - 1) +
                               (cx->options.replicate > 0 ? " (--replicate plays traces without point-to-point nodes)"
                                                          : " (give every rank's file)"));
      }
      op.kind = send ? OpKind::kSend : OpKind::kRecv;
      op.category = Category::kPp;
      op.peer = lw.devices[static_cast<size_t>(peer)];
      op.bytes = FindAttr(n, chakra::kCommSize) != nullptr ? Num(n, chakra::kCommSize, 0) : Num(n, chakra::kTensorSize, 0);
      break;
    }
    case Role::kHostCopy:
      op.kind = OpKind::kHostCopy;
      op.to_host = n.type() == ChakraProtoMsg::MEM_STORE_NODE;
      op.category = op.to_host ? Category::kDp : Category::kZero;
      op.bytes = Num(n, chakra::kTensorSize, 0);
      break;
  }
  return op;
}

void Emit(RankOps& r, std::array<std::vector<double>, 2>& secs, int s, const Op& op, double seconds) {
  (s == 0 ? r.ops : r.dp_stream).push_back(op);
  secs[static_cast<size_t>(s)].push_back(seconds);
}

Op SyncOp(OpKind k) {
  Op op;
  op.kind = k;
  op.category = Category::kIdle;
  return op;
}

// Lays rank `slot`'s graph out on its two streams (see the file comment).
Status LayOut(const ChakraTrace& t, uint32_t slot, ImportedChakra* out, GenericContext* cx) {
  HETSIM_ASSIGN_OR_RETURN(std::vector<GraphNode> g, BuildGraph(t));
  HETSIM_ASSIGN_OR_RETURN(const std::vector<uint32_t> order, IssueOrder(t, g));
  RankOps& r = out->lowering.ranks[slot];
  auto& secs = out->seconds[slot];
  uint64_t signals[2] = {0, 0}, awaited[2] = {0, 0};
  for (uint32_t i : order) {
    GraphNode& gn = g[i];
    const int s = gn.stream;
    uint64_t need = 0;
    for (uint32_t p : gn.parents) {
      if (g[p].stream != s) need = std::max(need, g[p].signal);
    }
    for (; awaited[s] < need; ++awaited[s]) Emit(r, secs, s, SyncOp(OpKind::kAwait), 0);
    double seconds = 0;
    HETSIM_ASSIGN_OR_RETURN(const Op op, GenericOp(t, gn, slot, out->lowering, cx, &seconds));
    if (gn.role != Role::kNoOp) Emit(r, secs, s, op, seconds);
    cx->host_ops += gn.role == Role::kNoOp;
    // A send's children wait for it to arrive (a Chakra node is done when its transfer is).
    if (gn.role == Role::kSend && !gn.children.empty()) Emit(r, secs, s, SyncOp(OpKind::kWaitSends), 0);
    if (std::any_of(gn.children.begin(), gn.children.end(), [&](uint32_t c) { return g[c].stream != s; })) {
      Emit(r, secs, s, SyncOp(OpKind::kSignal), 0);
      gn.signal = ++signals[s];
    }
  }
  if (!r.dp_stream.empty()) {
    Emit(r, secs, 1, SyncOp(OpKind::kWaitSends), 0);
    Emit(r, secs, 0, SyncOp(OpKind::kJoin), 0);
  }
  return Status::Ok();
}

// Collective groups by pg_name (no name: every rank): the ranks whose traces use the name, in rank order.
void GenericGroups(const std::vector<const ChakraTrace*>& ranks, Lowering* lw, GenericContext* cx) {
  std::map<std::string, std::set<uint32_t>> members;
  for (uint32_t slot = 0; slot < ranks.size(); ++slot) {
    for (const auto& n : ranks[slot]->nodes) {
      if (n.type() != ChakraProtoMsg::COMM_COLL_NODE || IsCpuOp(n)) continue;
      const auto* pg = FindAttr(n, chakra::kPgName);
      members[pg == nullptr ? "" : pg->string_val()].insert(slot);
    }
  }
  for (auto& [name, set] : members) {
    if (name.empty()) {
      for (uint32_t s = 0; s < ranks.size(); ++s) set.insert(s);
    }
    cx->group_of[name] = static_cast<uint32_t>(lw->groups.size());
    std::vector<uint32_t> devices;
    for (uint32_t s : set) devices.push_back(lw->devices[s]);
    lw->groups.push_back(std::move(devices));
  }
}

Result<std::vector<uint32_t>> RankDevices(const std::vector<ChakraTrace>& traces, size_t ranks, const Cluster& cluster,
                                          const ChakraImportOptions& options) {
  std::vector<uint32_t> devices = options.devices;
  if (devices.empty()) {
    const auto* recorded = FindAttr(traces[0].metadata, chakra::kDevices);
    if (recorded != nullptr && static_cast<size_t>(recorded->int64_list().values_size()) == ranks) {
      for (int64_t d : recorded->int64_list().values()) devices.push_back(static_cast<uint32_t>(d));
    } else {
      for (uint32_t r = 0; r < ranks; ++r) devices.push_back(r);
    }
  }
  if (devices.size() != ranks) {
    return Status::Invalid(std::to_string(ranks) + " ranks but " + std::to_string(devices.size()) +
                           " devices given for them (give one device per rank)");
  }
  std::set<uint32_t> seen;
  for (size_t r = 0; r < ranks; ++r) {
    if (devices[r] >= cluster.num_devices()) {
      return Status::Invalid(traces[std::min(r, traces.size() - 1)].path + ": rank " + std::to_string(r) +
                             " runs on device " + std::to_string(devices[r]) + ", but cluster '" + cluster.name() +
                             "' has " + std::to_string(cluster.num_devices()) + " devices (" + std::to_string(ranks) +
                             " ranks need a cluster of at least that many devices; `hetsim list clusters`)");
    }
    if (!seen.insert(devices[r]).second) {
      return Status::Invalid("device " + std::to_string(devices[r]) + " is given to two ranks (one rank per device)");
    }
  }
  return devices;
}

// FLOPs at the calibrated GEMM rate and bytes at the calibrated HBM rate, whichever takes longer (one fused
// kernel of the kernel model, models/kernels.h), in the fastest of bf16, fp16 and fp32 the device computes in
// (a trace does not say; CPU workers and older GPUs have no bf16).
Pricer RooflinePrice(const Cluster& cluster, const std::string& calibration) {
  return [&cluster, calibration](uint32_t device, double flops, double bytes) {
    if (flops <= 0 && bytes <= 0) return 0.0;
    const GpuSpec& gpu = *cluster.device(device).gpu;
    proto::DType dtype = proto::DTYPE_FP32;
    for (proto::DType d : {proto::DTYPE_FP16, proto::DTYPE_BF16}) {
      if (gpu.PeakTflops(d) >= gpu.PeakTflops(dtype)) dtype = d;
    }
    Kernel k;
    k.type = Kernel::Type::kFused;
    k.flops = flops;
    k.bytes = bytes;
    return KernelGpuSeconds(k, gpu, KernelParamsFor(gpu, calibration), dtype);
  };
}

void InitLowering(const std::vector<uint32_t>& devices, const Cluster& cluster, ImportedChakra* out) {
  Lowering& lw = out->lowering;
  lw.devices = devices;
  lw.device_slot.assign(cluster.num_devices(), kNone);
  for (uint32_t s = 0; s < devices.size(); ++s) lw.device_slot[devices[s]] = s;
  lw.ranks.resize(devices.size());
  for (uint32_t s = 0; s < devices.size(); ++s) lw.ranks[s].device = devices[s];
  out->seconds.resize(devices.size());
}

Result<ImportedChakra> ImportHetsim(const std::vector<ChakraTrace>& traces, const Cluster& cluster,
                                   const ChakraImportOptions& options, const Pricer& price) {
  const auto* recorded = FindAttr(traces[0].metadata, chakra::kDevices);
  const size_t ranks = recorded == nullptr ? traces.size() : static_cast<size_t>(recorded->int64_list().values_size());
  if (ranks != traces.size()) {
    return Status::Invalid(traces[0].path + ": the export wrote " + std::to_string(ranks) + " ranks' files, " +
                           std::to_string(traces.size()) + " given (give every <prefix>.<rank>.et of the export)");
  }
  HETSIM_ASSIGN_OR_RETURN(const std::vector<uint32_t> devices, RankDevices(traces, ranks, cluster, options));
  ImportedChakra out;
  out.from_hetsim = true;
  InitLowering(devices, cluster, &out);
  HETSIM_RETURN_IF_ERROR(RestoreSettings(traces[0], &out));
  HETSIM_RETURN_IF_ERROR(RestoreGroups(traces, devices, &out.lowering));
  for (uint32_t slot = 0; slot < traces.size(); ++slot) {
    HETSIM_RETURN_IF_ERROR(RestoreRank(traces[slot], slot, devices, options.durations, price, &out));
  }
  for (const auto& r : out.lowering.ranks) {
    for (const auto* stream : {&r.ops, &r.dp_stream}) {
      for (const Op& op : *stream) {
        if (op.kind == OpKind::kCollective && (op.group >= out.lowering.groups.size() || out.lowering.groups[op.group].empty())) {
          return Status::Invalid("rank " + std::to_string(out.lowering.device_slot[r.device]) +
                                 ": a collective on process group " + std::to_string(op.group) +
                                 " that no file's metadata lists (hetsim_group_" + std::to_string(op.group) +
                                 "); give every rank's file of the export");
        }
      }
    }
  }
  if (!options.durations) {
    out.notes.push_back("compute priced from its FLOPs on each device; these traces carry hetsim's priced compute "
                        "times: --durations replays them exactly");
  }
  return out;
}

Result<ImportedChakra> ImportGeneric(const std::vector<ChakraTrace>& traces, const Cluster& cluster,
                                    const ChakraImportOptions& options, const Pricer& price) {
  std::vector<const ChakraTrace*> ranks;
  const uint32_t copies = options.replicate > 0 ? options.replicate : 1;
  if (options.replicate > 0 && traces.size() != 1) {
    return Status::Invalid("--replicate plays one trace on several ranks; " + std::to_string(traces.size()) +
                           " files were given");
  }
  for (const auto& t : traces) {
    for (uint32_t c = 0; c < copies; ++c) ranks.push_back(&t);
  }
  HETSIM_ASSIGN_OR_RETURN(const std::vector<uint32_t> devices, RankDevices(traces, ranks.size(), cluster, options));
  ImportedChakra out;
  InitLowering(devices, cluster, &out);
  GenericContext cx{cluster, options, price, {}, static_cast<uint32_t>(ranks.size()), 0, 0};
  GenericGroups(ranks, &out.lowering, &cx);
  for (uint32_t slot = 0; slot < ranks.size(); ++slot) HETSIM_RETURN_IF_ERROR(LayOut(*ranks[slot], slot, &out, &cx));
  if (cx.host_ops > 0) {
    out.notes.push_back(std::to_string(cx.host_ops) +
                        " host operators (is_cpu_op) and metadata nodes order the work but take no simulated time");
  }
  if (cx.unpriced > 0) {
    out.notes.push_back(std::to_string(cx.unpriced) +
                        " compute nodes have no num_ops or tensor sizes and are priced at 0 s; --durations plays "
                        "their recorded duration_micros");
  }
  return out;
}

}  // namespace

Result<ImportedChakra> ImportChakra(const std::vector<ChakraTrace>& traces, const Cluster& cluster,
                                    const ChakraImportOptions& options) {
  if (traces.empty()) return Status::Invalid("no Chakra traces to import");
  const Pricer price = RooflinePrice(cluster, options.calibration);
  const bool hetsim = FromHetsim(traces[0]);
  for (const auto& t : traces) {
    if (FromHetsim(t) != hetsim) {
      return Status::Invalid(t.path + ": mixes a trace " + (hetsim ? "not " : "") + "written by hetsim export-chakra with " +
                             traces[0].path + " (import one set of files)");
    }
  }
  if (hetsim) {
    if (options.replicate > 0) return Status::Invalid("--replicate is for traces hetsim did not write (these name every rank)");
    return ImportHetsim(traces, cluster, options, price);
  }
  return ImportGeneric(traces, cluster, options, price);
}

}  // namespace hetsim::models
