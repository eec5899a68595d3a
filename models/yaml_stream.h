// YAML specs too long to hold as a yaml-cpp node tree: a trace of a million events is ~130 MB of text,
// and yaml-cpp's nodes take about 5 KB per event (466,000 events: 2.5 GB), its scanner ~40 µs. ParseYamlStreaming
// reads the text with libyaml's event parser (C, the reference implementation) and converts each item of one long top-level list (a trace's `events`)
// into its message as soon as the parser has read it, then drops its nodes: the memory is that of the
// messages. Everything else in the file is converted as models::ParseYaml converts it (same checks, same
// messages: `FILE:LINE:COL: key.path: what is wrong`, the position being the item's or top-level key's).
#pragma once

#include <google/protobuf/message.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "models/status.h"

namespace hetsim::models {

// Parses the YAML document `text` into `msg` (cleared first). A document whose top-level `kind:` is not
// `kind` (when given) gets that one error. `stream_key` names a repeated message field
// of `msg` whose items are converted one by one; more than `max_items` of them is an error (reported as soon
// as the parser passes the limit, without reading the rest). At most `max_errors` problems are reported,
// then a line saying how many more were skipped.
Status ParseYamlStreaming(std::string_view text, const std::string& file, const std::string& kind,
                          const std::string& stream_key, size_t max_items, google::protobuf::Message* msg,
                          size_t max_errors = 50);

}  // namespace hetsim::models
