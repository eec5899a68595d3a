// Internal to models/chakra*.cc: building attributes, and the names of the attributes Chakra's tools read
// (src/feeder/et_feeder_node.cpp, src/converter/pytorch_converter.py) and of hetsim's own, which carry what a
// round trip through a file needs (prefixed hetsim_, ignored by Chakra's tools).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/proto/chakra_et.pb.h"

namespace hetsim::models::chakra {

// Chakra's names, with the value field each is read from.
inline constexpr const char* kIsCpuOp = "is_cpu_op";      // bool_val
inline constexpr const char* kNumOps = "num_ops";         // int64_val: FLOPs
inline constexpr const char* kTensorSize = "tensor_size"; // uint64_val: bytes
inline constexpr const char* kCommType = "comm_type";     // int64_val: CollectiveCommType
inline constexpr const char* kCommSize = "comm_size";     // int64_val: bytes
inline constexpr const char* kCommSrc = "comm_src";       // int32_val: rank
inline constexpr const char* kCommDst = "comm_dst";       // int32_val: rank
inline constexpr const char* kCommTag = "comm_tag";       // int32_val
inline constexpr const char* kPgName = "pg_name";         // string_val: process group

// hetsim's: per node (hetsim_ + a models::Op field, where it differs from a default Op) ...
inline constexpr const char* kOp = "hetsim_op";            // string_val: models::OpKindName
inline constexpr const char* kStream = "hetsim_stream";    // int32_val: 0 main, 1 DP stream
inline constexpr const char* kIndex = "hetsim_index";      // int64_val: position in the stream
inline constexpr const char* kCategory = "hetsim_category";  // string_val: models::CategoryName
inline constexpr const char* kSeconds = "hetsim_seconds";  // double_val: the compute's priced seconds
inline constexpr const char* kPeer = "hetsim_peer";        // int32_val: the peer's rank
// ... and per file (GlobalMetadata).
inline constexpr const char* kRank = "hetsim_rank";        // int64_val
inline constexpr const char* kDevices = "hetsim_devices";  // int64_list: every rank's device
inline constexpr const char* kPipeline = "hetsim_pipeline";
inline constexpr const char* kStage = "hetsim_stage";
inline constexpr const char* kComm = "hetsim_comm";        // bytes_val: the plan's proto::CommOptions
inline constexpr const char* kGroupPrefix = "hetsim_group_";  // + group: int64_list of member ranks
inline constexpr const char* kFidelity = "hetsim_fidelity";

inline ChakraProtoMsg::AttributeProto* Add(google::protobuf::RepeatedPtrField<ChakraProtoMsg::AttributeProto>* attrs,
                                           const std::string& name) {
  auto* a = attrs->Add();
  a->set_name(name);
  return a;
}
inline void AddInt64(ChakraProtoMsg::Node* n, const std::string& name, int64_t v) {
  Add(n->mutable_attr(), name)->set_int64_val(v);
}
inline void AddInt32(ChakraProtoMsg::Node* n, const std::string& name, int32_t v) {
  Add(n->mutable_attr(), name)->set_int32_val(v);
}
inline void AddUint64(ChakraProtoMsg::Node* n, const std::string& name, uint64_t v) {
  Add(n->mutable_attr(), name)->set_uint64_val(v);
}
inline void AddDouble(ChakraProtoMsg::Node* n, const std::string& name, double v) {
  Add(n->mutable_attr(), name)->set_double_val(v);
}
inline void AddBool(ChakraProtoMsg::Node* n, const std::string& name, bool v) {
  Add(n->mutable_attr(), name)->set_bool_val(v);
}
inline void AddString(ChakraProtoMsg::Node* n, const std::string& name, const std::string& v) {
  Add(n->mutable_attr(), name)->set_string_val(v);
}
inline void AddMetaInt64(ChakraProtoMsg::GlobalMetadata* m, const std::string& name, int64_t v) {
  Add(m->mutable_attr(), name)->set_int64_val(v);
}
inline void AddMetaList(ChakraProtoMsg::GlobalMetadata* m, const std::string& name, const std::vector<int64_t>& v) {
  auto* list = Add(m->mutable_attr(), name)->mutable_int64_list();
  for (int64_t x : v) list->add_values(x);
}

}  // namespace hetsim::models::chakra
