// Chakra execution traces (MLCommons Chakra; the schema is models/proto/chakra_et.proto): reading and writing
// the files, what Chakra's feeder sees in a trace (the nodes it issues first), and the two conversions with
// the lowering (models/lowering.h): a lowering's ranks exported as one trace each (`hetsim export-chakra`),
// and traces read back as a lowering that the simulator prices and plays (`hetsim import-chakra`,
// sim/chakra.h). No SimGrid here. docs/chakra.md has the mapping table.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "models/cluster.h"
#include "models/lowering.h"
#include "models/proto/chakra_et.pb.h"
#include "models/status.h"

namespace hetsim::models {

// One rank's trace, as read from a file or made by ExportChakra.
struct ChakraTrace {
  std::string path;   // the file it was read from ("" for a trace made in memory)
  uint32_t rank = 0;  // the <rank> of a <prefix>.<rank>.et file name (0 for a name without one)
  ChakraProtoMsg::GlobalMetadata metadata;
  std::vector<ChakraProtoMsg::Node> nodes;  // in file order
};

// Reads a Chakra ET file: a GlobalMetadata and then Node messages, each preceded by its size as a varint32
// (Chakra's protoio / protolib encoding). Errors name the file and, for a damaged node, the message's
// position and the id of the last node read.
Result<ChakraTrace> ReadChakraTrace(const std::string& path);
// The same encoding, as bytes; WriteChakraTrace writes them atomically (temporary file and rename).
std::string EncodeChakraTrace(const ChakraTrace& trace);
Status WriteChakraTrace(const std::string& path, const ChakraTrace& trace);

// The name Chakra's tools give rank `rank`'s file: "<prefix>.<rank>.et".
std::string ChakraFileName(const std::string& prefix, uint32_t rank);
// The rank in a "<prefix>.<rank>.et" name (or .et.gz, gzip-compressed, which Chakra's reader also takes), or
// -1 when the name has none.
int64_t ChakraRankOfFileName(const std::string& path);
// The files that command-line arguments name: files as given, folders as every <prefix>.<rank>.et(.gz) in them; ordered
// by rank. Errors: nothing found, a file that is not there, two files of one rank, ranks with gaps.
Result<std::vector<std::string>> ChakraFiles(const std::vector<std::string>& args);

// The attribute named `name`, or null.
const ChakraProtoMsg::AttributeProto* FindAttr(const ChakraProtoMsg::Node& node, std::string_view name);
const ChakraProtoMsg::AttributeProto* FindAttr(const ChakraProtoMsg::GlobalMetadata& meta, std::string_view name);
// An attribute's value as a number, whichever scalar field holds it (int64_val, uint64_val, int32_val, ...).
double AttrNumber(const ChakraProtoMsg::AttributeProto& attr);

// The first `max` nodes Chakra's feeder (src/feeder/et_feeder.cpp) returns from getNextIssuableNode on a
// fresh trace: the nodes whose data dependencies are all resolved — at the start, those with no
// data_deps (ctrl_deps are not waited for) — smallest id first (its priority queue orders by id). The
// feeder reads the first 1,048,576 nodes before it answers; so does this.
std::vector<uint64_t> IssuableNodes(const ChakraTrace& trace, size_t max);

// Counts over one trace, for `hetsim import-chakra`'s summary.
struct ChakraSummary {
  std::map<int, uint64_t> by_type;       // NodeType -> nodes
  std::map<int64_t, uint64_t> by_comm;   // COMM_COLL_NODE comm_type -> nodes
  uint64_t cpu_ops = 0;                  // nodes with is_cpu_op true
  uint64_t with_duration = 0;            // nodes with duration_micros > 0
  uint64_t data_deps = 0, ctrl_deps = 0;
  double num_ops = 0;                    // Σ num_ops (FLOPs)
  double comm_bytes = 0;                 // Σ comm_size of communication nodes
  double duration_s = 0;                 // Σ duration_micros
};
ChakraSummary Summarize(const ChakraTrace& trace);
// A few lines: the file, its metadata, the node counts by type and comm_type, the first `issuable` issuable
// nodes with their type, name and attributes.
std::string DescribeChakraTrace(const ChakraTrace& trace, size_t issuable);

// Bytes of the tensors a PyTorch execution trace lists in an IOInfo's `values`: every
// [tensor_id, storage_id, offset, elements, element_bytes, 'device'] tuple counts elements × element_bytes.
double TensorBytes(const ChakraProtoMsg::IOInfo& io);

// ---- export ----------------------------------------------------------------------------------------

struct ChakraExportOptions {
  // Seconds of compute operation `index` of slot `slot`'s main stream (or DP stream) as the simulator prices
  // it (sim/program.h PriceComputeOp): written as duration_micros and, exactly, as hetsim_seconds. Empty:
  // no durations.
  std::function<double(uint32_t slot, bool dp_stream, size_t index)> compute_seconds;
  // Added to every file's GlobalMetadata after hetsim's own (the plan, cluster and fidelity, say).
  std::vector<ChakraProtoMsg::AttributeProto> metadata;
};
// One trace per rank of a full lowering (LowerPlan without lower_devices), rank = slot (plan order). Each
// lowering operation is one node; docs/chakra.md lists the node types and attributes.
std::vector<ChakraTrace> ExportChakra(const Lowering& lowering, const ChakraExportOptions& options);

// ---- import ----------------------------------------------------------------------------------------

struct ChakraImportOptions {
  // Compute nodes take their recorded time (hetsim_seconds, else duration_micros) instead of a price from
  // their FLOPs (num_ops) and tensor bytes on the device.
  bool durations = false;
  // Rank r runs on device devices[r]; empty: the devices hetsim's export recorded, else device r.
  std::vector<uint32_t> devices;
  // Generic traces: play every rank's one trace on this many ranks (0: as many as files). A one-file
  // trace's collectives then run over that many devices.
  uint32_t replicate = 0;
  std::string calibration;  // kernel-model calibration for FLOPs/bytes prices ("" = default)
};

// The traces as a lowering: per rank the main stream and (where needed) the second stream, with the
// compute seconds of every compute operation beside it.
struct ImportedChakra {
  Lowering lowering;
  // Per slot: {main stream, DP stream} seconds of each operation (0 for those that are not compute).
  std::vector<std::array<std::vector<double>, 2>> seconds;
  bool from_hetsim = false;   // written by `hetsim export-chakra`: operations restored exactly
  std::string fidelity;       // the fidelity the export priced at ("" when not recorded)
  std::vector<std::string> notes;  // assumptions made (nodes without a price, CPU operators, ...)
};
Result<ImportedChakra> ImportChakra(const std::vector<ChakraTrace>& traces, const Cluster& cluster,
                                    const ChakraImportOptions& options);

}  // namespace hetsim::models
