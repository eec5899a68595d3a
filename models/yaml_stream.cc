#include "models/yaml_stream.h"

#include <google/protobuf/descriptor.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/yaml.h>
#include <yaml.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

std::string At(const std::string& file, const YAML::Mark& m) {
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// Thrown from an item callback to stop the parser (too many items, too many errors).
struct StopParsing {};

YAML::Mark MarkOf(const yaml_mark_t& m) {
  YAML::Mark out;
  out.pos = static_cast<int>(m.index);
  out.line = static_cast<int>(m.line);
  out.column = static_cast<int>(m.column);
  return out;
}

// Feeds the first document of `text` to `handler` with libyaml's event parser (C; ~20x faster than yaml-cpp's
// scanner on a trace). Anchors are numbered as yaml-cpp numbers them (1, 2, ... in order of appearance).
// Syntax errors: `FILE:LINE:COL: YAML syntax error: ...`.
Status ParseEvents(std::string_view text, const std::string& file, YAML::EventHandler* handler) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return Status::Internal(file + ": cannot start the YAML parser");
  struct Cleanup {
    yaml_parser_t* p;
    ~Cleanup() { yaml_parser_delete(p); }
  } cleanup{&parser};
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  std::map<std::string, YAML::anchor_t> anchors;
  auto anchor_of = [&](const yaml_char_t* name, bool define) -> YAML::anchor_t {
    if (name == nullptr) return 0;
    const std::string key(reinterpret_cast<const char*>(name));
    if (define) {
      const YAML::anchor_t id = anchors.size() + 1;
      anchors[key] = id;
      return id;
    }
    const auto it = anchors.find(key);
    return it == anchors.end() ? 0 : it->second;
  };
  auto str = [](const yaml_char_t* s) { return s == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(s)); };
  for (bool documents_done = false;;) {
    yaml_event_t e;
    if (!yaml_parser_parse(&parser, &e)) {
      std::string what = parser.problem != nullptr ? parser.problem : "malformed YAML";
      if (parser.context != nullptr) what = std::string(parser.context) + ": " + what;
      return Status::Invalid(At(file, MarkOf(parser.problem_mark)) + ": YAML syntax error: " + what);
    }
    struct EventCleanup {
      yaml_event_t* e;
      ~EventCleanup() { yaml_event_delete(e); }
    } event_cleanup{&e};
    const YAML::Mark mark = MarkOf(e.start_mark);
    switch (e.type) {
      case YAML_STREAM_END_EVENT:
        return Status::Ok();
      case YAML_DOCUMENT_START_EVENT:
        if (documents_done) return Status::Ok();  // as YAML::Load: the first document only
        handler->OnDocumentStart(mark);
        break;
      case YAML_DOCUMENT_END_EVENT:
        handler->OnDocumentEnd();
        documents_done = true;
        break;
      case YAML_ALIAS_EVENT:
        handler->OnAlias(mark, anchor_of(e.data.alias.anchor, false));
        break;
      case YAML_SCALAR_EVENT: {
        const YAML::anchor_t a = anchor_of(e.data.scalar.anchor, true);
        const std::string value(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
        // A plain `~`, `null` or empty value is null, as yaml-cpp reads it; quoted, it is text.
        const bool plain = e.data.scalar.style == YAML_PLAIN_SCALAR_STYLE && e.data.scalar.tag == nullptr;
        if (plain && (value.empty() || value == "~" || value == "null" || value == "Null" || value == "NULL")) {
          handler->OnNull(mark, a);
        } else {
          handler->OnScalar(mark, str(e.data.scalar.tag), a, value);
        }
        break;
      }
      case YAML_SEQUENCE_START_EVENT:
        handler->OnSequenceStart(mark, str(e.data.sequence_start.tag), anchor_of(e.data.sequence_start.anchor, true),
                                 YAML::EmitterStyle::Default);
        break;
      case YAML_SEQUENCE_END_EVENT:
        handler->OnSequenceEnd();
        break;
      case YAML_MAPPING_START_EVENT:
        handler->OnMapStart(mark, str(e.data.mapping_start.tag), anchor_of(e.data.mapping_start.anchor, true),
                            YAML::EmitterStyle::Default);
        break;
      case YAML_MAPPING_END_EVENT:
        handler->OnMapEnd();
        break;
      default:
        break;
    }
  }
}

// Rebuilds yaml-cpp nodes from the parser's events, except the items of the list under the top-level key
// `stream_key`: each goes to `on_item` when complete and is not kept. Anchors and aliases resolve as in
// YAML::Load (an alias shares its anchor's node).
class StreamBuilder final : public YAML::EventHandler {
 public:
  using ItemFn = std::function<void(const YAML::Node& item, const YAML::Mark& mark)>;
  StreamBuilder(std::string stream_key, ItemFn on_item) : key_(std::move(stream_key)), on_item_(std::move(on_item)) {}

  // The document (a null node when it is empty).
  YAML::Node root() const { return root_ ? *root_ : YAML::Node(YAML::NodeType::Null); }
  // Where each top-level key is written, for messages about the keys converted after parsing.
  const std::map<std::string, YAML::Mark>& key_marks() const { return key_marks_; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Add(YAML::Node(YAML::NodeType::Null), mark, anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = anchors_.find(anchor);
    Add(it == anchors_.end() ? YAML::Node(YAML::NodeType::Null) : it->second, mark, 0);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    Add(YAML::Node(value), mark, anchor);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Push(YAML::NodeType::Sequence, mark, anchor);
  }
  void OnSequenceEnd() override { Pop(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Push(YAML::NodeType::Map, mark, anchor);
  }
  void OnMapEnd() override { Pop(); }

 private:
  struct Frame {
    YAML::Node node;
    YAML::Mark mark;
    YAML::anchor_t anchor = 0;
    bool streamed = false;  // the long list: items go to on_item_
    // A map frame's key that waits for its value. Never reassigned: assigning to a yaml-cpp node that
    // already refers to one writes through it into the tree.
    std::optional<YAML::Node> key;
  };

  void Push(YAML::NodeType::value type, const YAML::Mark& mark, YAML::anchor_t anchor) {
    Frame f;
    f.node = YAML::Node(type);
    f.mark = mark;
    f.anchor = anchor;
    // The list under the root mapping's `stream_key`.
    f.streamed = type == YAML::NodeType::Sequence && stack_.size() == 1 && stack_[0].node.IsMap() &&
                 stack_[0].key && stack_[0].key->IsScalar() && stack_[0].key->Scalar() == key_;
    stack_.push_back(std::move(f));
  }

  void Pop() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    Remember(f.anchor, f.node);
    Attach(f.node, f.mark);
  }

  void Add(const YAML::Node& node, const YAML::Mark& mark, YAML::anchor_t anchor) {
    Remember(anchor, node);
    Attach(node, mark);
  }

  void Remember(YAML::anchor_t anchor, const YAML::Node& node) {
    if (anchor == 0) return;
    anchors_.erase(anchor);
    anchors_.emplace(anchor, node);
  }

  void Attach(const YAML::Node& node, const YAML::Mark& mark) {
    if (stack_.empty()) {
      root_.emplace(node);
      return;
    }
    Frame& top = stack_.back();
    if (top.node.IsMap()) {
      if (!top.key) {
        top.key.emplace(node);
        if (stack_.size() == 1 && node.IsScalar()) key_marks_.emplace(node.Scalar(), mark);
        return;
      }
      if (top.key->IsScalar()) {
        top.node[top.key->Scalar()] = node;
      } else {
        top.node[*top.key] = node;
      }
      top.key.reset();
      return;
    }
    if (top.streamed) {
      on_item_(node, mark);
      return;
    }
    top.node.push_back(node);
  }

  std::string key_;
  ItemFn on_item_;
  std::vector<Frame> stack_;
  std::optional<YAML::Node> root_;
  std::map<YAML::anchor_t, YAML::Node> anchors_;
  std::map<std::string, YAML::Mark> key_marks_;
};

// Adds the lines of `s` (one problem each) to `out`, counting them.
void AddLines(const Status& s, std::vector<std::string>* out, size_t* count) {
  std::istringstream lines(s.message());
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    ++*count;
    out->push_back(std::move(line));
  }
}

}  // namespace

Status ParseYamlStreaming(std::string_view text, const std::string& file, const std::string& kind,
                          const std::string& stream_key, size_t max_items, Message* msg, size_t max_errors) {
  msg->Clear();
  const FieldDescriptor* field = msg->GetDescriptor()->FindFieldByName(stream_key);
  if (field == nullptr || !field->is_repeated() || field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
    return Status::Internal("ParseYamlStreaming: '" + stream_key + "' is not a list of messages in " +
                            msg->GetDescriptor()->full_name());
  }
  std::vector<std::string> errors;
  size_t problems = 0, items = 0;
  bool too_many = false;
  StreamBuilder builder(stream_key, [&](const YAML::Node& node, const YAML::Mark& mark) {
    const size_t i = items++;
    if (i >= max_items) {
      too_many = true;
      errors.push_back(At(file, mark) + ": " + stream_key + ": more than " + std::to_string(max_items) + " " +
                       stream_key + ", more than a " + (kind.empty() ? "file" : kind) + " may hold (" +
                       std::to_string(max_items) + ")");
      ++problems;
      throw StopParsing{};
    }
    Message* item = msg->GetReflection()->AddMessage(msg, field);
    const Status s = YamlToMessage(node, At(file, mark), stream_key + "[" + std::to_string(i) + "]", item);
    if (!s.ok()) AddLines(s, &errors, &problems);
    if (problems >= max_errors) throw StopParsing{};
  });
  bool stopped = false;
  try {
    HETSIM_RETURN_IF_ERROR(ParseEvents(text, file, &builder));
  } catch (const StopParsing&) {
    stopped = true;
  }
  if (!stopped) {
    const YAML::Node root = builder.root();
    if (!root.IsMap() && !root.IsNull()) {
      return Status::Invalid(file + ": expected a mapping of keys at the top level, found a " +
                             (root.IsSequence() ? "list" : "value"));
    }
    // A file of another kind gets one error about its kind, not one per key of the wrong schema.
    if (!kind.empty() && root.IsMap() && root["kind"] && root["kind"].IsScalar() && root["kind"].Scalar() != kind) {
      const auto it = builder.key_marks().find("kind");
      return Status::Invalid((it == builder.key_marks().end() ? file : At(file, it->second)) + ": kind: this is a '" +
                             root["kind"].Scalar() + "' file but a " + kind + " was expected here");
    }
    // The top-level keys, converted without the streamed items (their list is empty in `root`); the
    // messages get the position of their top-level key, which rebuilt nodes do not carry.
    google::protobuf::Message* rest = msg->New();
    std::unique_ptr<google::protobuf::Message> owned(rest);
    const Status s = YamlToMessage(root, file, "", rest);
    std::vector<std::string> top;
    size_t top_count = 0;
    if (!s.ok()) AddLines(s, &top, &top_count);
    const std::string prefix = file + ": ";
    for (std::string& line : top) {
      if (line.rfind(prefix, 0) != 0) continue;
      const std::string path = line.substr(prefix.size());
      const std::string key = path.substr(0, path.find_first_of(".[:"));
      const auto it = builder.key_marks().find(key);
      if (it != builder.key_marks().end()) line = At(file, it->second) + ": " + path;
    }
    errors.insert(errors.begin(), top.begin(), top.end());
    problems += top_count;
    // The streamed items into `rest` (whose list is empty), then everything into `msg`.
    msg->GetReflection()->SwapFields(msg, rest, {field});
    msg->GetReflection()->Swap(msg, rest);
  }
  if (errors.empty()) return Status::Ok();
  std::string message;
  for (size_t i = 0; i < errors.size() && i < max_errors; ++i) message += (i ? "\n" : "") + errors[i];
  if (stopped && !too_many) {
    message += "\n" + file + ": stopped after " + std::to_string(max_errors) + " problems; fix these and run again";
  }
  return Status::Invalid(message);
}

}  // namespace hetsim::models
