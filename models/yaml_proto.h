// YAML <-> protobuf conversion for every file people write (clusters, models, trainings, plans, …).
//
// The proto schema is the single source of truth: YAML keys are proto field names, enums are written as
// their value names in lower case without the enum's prefix (`Nic::KIND_ROCE` -> `roce`), a oneof member
// is a key of its own, and the `min`/`max`/`required` options of models/proto/options.proto are enforced.
// Every problem found is reported, one per line, as `FILE:LINE:COL: key.path[3].name: what is wrong`,
// with "did you mean" suggestions for misspelled keys and enum values.
#pragma once

#include <google/protobuf/message.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <string_view>
#include <functional>
#include <vector>

#include "models/status.h"

namespace hetsim::models {

// Parses YAML `text` into `msg` (cleared first). `file` names the source in error messages.
// What the YAML parser would take badly, found before it runs: bytes that are not UTF-8, a tab in the
// indentation, nesting deeper than any spec (file:line:col, the problem and the fix).
Status PrescanYaml(std::string_view text, const std::string& file);

Status ParseYaml(std::string_view text, const std::string& file, google::protobuf::Message* msg);

// Converts an already parsed YAML node. `path` is the key path of `node` inside `file` ("" at the root).
Status YamlToMessage(const YAML::Node& node, const std::string& file, const std::string& path,
                     google::protobuf::Message* msg);

// Writes `msg` as YAML: fields in schema order, only those that are set; numbers in shortest
// round-trip form. ParseYaml(MessageToYaml(m)) == m for every message m.
std::string MessageToYaml(const google::protobuf::Message& msg);

// The YAML spelling of an enum value (`KIND_LOCAL_NVME` of enum `Kind` -> `local_nvme`).
std::string EnumValueYamlName(const google::protobuf::EnumValueDescriptor* value);
// The YAML spellings of every value of `e` except the 0 ("unspecified") value.
std::vector<std::string> EnumYamlNames(const google::protobuf::EnumDescriptor* e);

// The value of `e` whose YAML spelling is `value`, for command-line flags: an error names `--flag`, the
// valid spellings and the nearest one.
Result<int> ParseEnumFlag(const std::string& flag, const std::string& value, const google::protobuf::EnumDescriptor* e);

// Checks every set numeric field of `msg` (recursively) against its schema range ((min), (max),
// (min_exclusive)) and rejects NaN and infinity, for messages filled from command-line flags rather than
// parsed from YAML. Errors name `where` and the field's YAML key path (`hetsim replay.restart_s`); `flag_of`
// may map a key path to the flag that set it (`--restart-s`), which the error then names instead.
Status CheckRanges(const google::protobuf::Message& msg, const std::string& where,
                   const std::function<std::string(const std::string&)>& flag_of = nullptr);

// `file:line:col` of a YAML node (or just `file` when the node has no position).
std::string YamlLocation(const std::string& file, const YAML::Node& node);

// `file:line:col` of the value at `key_path` ("gpus[1].spot_nodes[0]") in the YAML `root`; where the path
// runs out (a key the file does not have), the deepest node it reached. For checks made after parsing, so that
// every error still names the line.
std::string YamlLocationOf(const std::string& file, const YAML::Node& root, const std::string& key_path);

}  // namespace hetsim::models
