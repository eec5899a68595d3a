#include "models/yaml_proto.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>

#include "models/proto/options.pb.h"
#include "models/suggest.h"

namespace hetsim::models {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Upper snake case of a CamelCase enum type name: "LayerKind" -> "LAYER_KIND", "DType" -> "DTYPE",
// "Fp8Recipe" -> "FP8_RECIPE".
std::string UpperSnake(std::string_view camel) {
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    const char c = camel[i];
    const unsigned char prev = i > 0 ? static_cast<unsigned char>(camel[i - 1]) : 0;
    if (std::isupper(static_cast<unsigned char>(c)) && (std::islower(prev) || std::isdigit(prev))) {
      out += '_';
    }
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string NodeKind(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "an undefined value";
  }
}

std::string TypeName(const FieldDescriptor* fd) {
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: return "an integer";
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: return "a non-negative integer";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: return "a number";
    case FieldDescriptor::CPPTYPE_BOOL: return "true or false";
    case FieldDescriptor::CPPTYPE_STRING: return "a string";
    case FieldDescriptor::CPPTYPE_ENUM: return "one of " + [&] {
      std::string s;
      for (const auto& n : EnumYamlNames(fd->enum_type())) s += (s.empty() ? "" : "|") + n;
      return s;
    }();
    case FieldDescriptor::CPPTYPE_MESSAGE: return "a mapping";
  }
  return "a value";
}

// Plural element name for list messages: "mappings", "strings", "numbers", …
std::string ElementName(const FieldDescriptor* fd) {
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_MESSAGE: return "mappings";
    case FieldDescriptor::CPPTYPE_STRING: return "strings";
    case FieldDescriptor::CPPTYPE_BOOL: return "booleans";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: return "numbers";
    case FieldDescriptor::CPPTYPE_ENUM: return "names (" + TypeName(fd) + ")";
    default: return "integers";
  }
}

// No number in a spec is physically larger: a field with a lower bound (every field people write) and no
// upper one gets this one (reports, which hetsim writes, carry any double); beyond it sums and products
// overflow to infinity.
constexpr double kLargestNumber = 1e15;

// Parses a YAML float, including the YAML spellings of the special values (.nan, .inf, -.inf).
bool ParseDouble(const std::string& s, double* v) {
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    *v = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (s == ".inf" || s == "+.inf" || s == ".Inf" || s == "+.Inf") {
    *v = std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == "-.inf" || s == "-.Inf") {
    *v = -std::numeric_limits<double>::infinity();
    return true;
  }
  const auto res = std::from_chars(s.data(), s.data() + s.size(), *v);
  return res.ec == std::errc() && res.ptr == s.data() + s.size() && std::isfinite(*v);
}

std::string FormatNumber(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

class Converter {
 public:
  explicit Converter(const std::string& file) : file_(file) {}

  void ParseMessage(const YAML::Node& node, const std::string& path, Message* msg) {
    // `single_switch:` with nothing after it is an empty mapping (and still needs its required keys).
    if (!node.IsNull() && !node.IsMap()) {
      Error(node, path, "expected a mapping, found " + NodeKind(node));
      return;
    }
    const Descriptor* desc = msg->GetDescriptor();
    std::set<std::string> seen;
    std::vector<std::pair<const google::protobuf::OneofDescriptor*, std::string>> oneofs;
    for (const auto& kv : node.IsMap() ? node : YAML::Node(YAML::NodeType::Map)) {
      if (!kv.first.IsScalar()) {
        Error(kv.first, path, "keys must be plain names, found " + NodeKind(kv.first));
        continue;
      }
      const std::string key = kv.first.Scalar();
      const std::string key_path = path.empty() ? key : path + "." + key;
      const FieldDescriptor* fd = desc->FindFieldByName(key);
      if (fd == nullptr) {
        std::vector<std::string> names;
        for (int i = 0; i < desc->field_count(); ++i) names.push_back(desc->field(i)->name());
        Error(kv.first, key_path, "unknown key '" + key + "'" + DidYouMean(key, names));
        continue;
      }
      if (!seen.insert(key).second) {
        Error(kv.first, key_path, "key '" + key + "' appears twice");
        continue;
      }
      if (const auto* oneof = fd->real_containing_oneof()) {
        for (const auto& [o, other] : oneofs) {
          if (o == oneof) {
            Error(kv.first, key_path,
                  "'" + key + "' and '" + other + "' exclude each other (" + oneof->name() +
                      " takes exactly one); keep one");
          }
        }
        oneofs.emplace_back(oneof, key);
      }
      ParseField(kv.second, key_path, fd, msg);
    }
    for (int i = 0; i < desc->field_count(); ++i) {
      const FieldDescriptor* fd = desc->field(i);
      if (fd->options().GetExtension(proto::required) && !seen.count(fd->name())) {
        Error(node, path, "missing required key '" + fd->name() + "' (" +
                              (fd->is_repeated() ? "a list of " + ElementName(fd) : TypeName(fd)) + ")");
      }
    }
  }

  const ErrorList& errors() const { return errors_; }

 private:
  void Error(const YAML::Node& node, const std::string& path, const std::string& what) {
    errors_.Add(YamlLocation(file_, node) + ": " + (path.empty() ? "" : path + ": ") + what);
  }

  void ParseField(const YAML::Node& node, const std::string& path, const FieldDescriptor* fd,
                  Message* msg) {
    if (fd->options().GetExtension(proto::yaml_text) && fd->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
        !fd->is_repeated()) {
      // Kept as text with its structure; its own schema checks it later.
      msg->GetReflection()->SetString(msg, fd, node.IsNull() ? std::string() : YAML::Dump(node));
      return;
    }
    if (fd->is_map()) {
      if (node.IsNull()) return;
      if (!node.IsMap()) {
        Error(node, path, "expected a mapping, found " + NodeKind(node));
        return;
      }
      const Descriptor* entry = fd->message_type();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          Error(kv.first, path, "keys must be plain names, found " + NodeKind(kv.first));
          continue;
        }
        Message* e = msg->GetReflection()->AddMessage(msg, fd);
        e->GetReflection()->SetString(e, entry->FindFieldByName("key"), kv.first.Scalar());
        ParseValue(kv.second, path + "." + kv.first.Scalar(), entry->FindFieldByName("value"), e);
      }
      return;
    }
    if (fd->is_repeated()) {
      if (node.IsNull()) return;
      if (!node.IsSequence()) {
        Error(node, path, "expected a list of " + ElementName(fd) + ", found " + NodeKind(node));
        return;
      }
      for (size_t i = 0; i < node.size(); ++i) {
        ParseValue(node[i], path + "[" + std::to_string(i) + "]", fd, msg);
      }
      return;
    }
    ParseValue(node, path, fd, msg);
  }

  // Parses one value (a singular field, or one element of a repeated field) and stores it.
  void ParseValue(const YAML::Node& node, const std::string& path, const FieldDescriptor* fd,
                  Message* msg) {
    const Reflection* r = msg->GetReflection();
    const bool rep = fd->is_repeated();
    if (fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      Message* sub = rep ? r->AddMessage(msg, fd) : r->MutableMessage(msg, fd);
      ParseMessage(node, path, sub);
      return;
    }
    if (!node.IsScalar()) {
      Error(node, path, "expected " + TypeName(fd) + ", found " + NodeKind(node));
      return;
    }
    const std::string& s = node.Scalar();
    switch (fd->cpp_type()) {
      case FieldDescriptor::CPPTYPE_STRING:
        rep ? r->AddString(msg, fd, s) : r->SetString(msg, fd, s);
        return;
      case FieldDescriptor::CPPTYPE_BOOL: {
        bool b = false;
        if (!YAML::convert<bool>::decode(node, b)) {
          Error(node, path, "expected true or false, found '" + s + "'");
          return;
        }
        rep ? r->AddBool(msg, fd, b) : r->SetBool(msg, fd, b);
        return;
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const EnumDescriptor* e = fd->enum_type();
        std::string want = AsciiLower(s);
        std::replace(want.begin(), want.end(), '-', '_');
        for (int i = 1; i < e->value_count(); ++i) {
          if (EnumValueYamlName(e->value(i)) == want) {
            rep ? r->AddEnumValue(msg, fd, e->value(i)->number())
                : r->SetEnumValue(msg, fd, e->value(i)->number());
            return;
          }
        }
        const auto names = EnumYamlNames(e);
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        Error(node, path, "unknown value '" + s + "' (expected one of: " + list + ")" + DidYouMean(s, names));
        return;
      }
      case FieldDescriptor::CPPTYPE_DOUBLE:
      case FieldDescriptor::CPPTYPE_FLOAT: {
        double v = 0;
        if (!ParseDouble(s, &v)) {
          Error(node, path, "expected a number, found '" + s + "'");
          return;
        }
        if (!std::isfinite(v)) {
          Error(node, path, "expected a finite number, found '" + s + "'");
          return;
        }
        if (!CheckRange(node, path, fd, v)) return;
        if (fd->options().HasExtension(proto::min) && !fd->options().HasExtension(proto::max) &&
            std::fabs(v) > kLargestNumber) {
          Error(node, path, "value " + s + " is out of range (every number must be within ±" +
                                FormatNumber(kLargestNumber) + ")");
          return;
        }
        if (fd->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
          rep ? r->AddDouble(msg, fd, v) : r->SetDouble(msg, fd, v);
        } else {
          rep ? r->AddFloat(msg, fd, static_cast<float>(v)) : r->SetFloat(msg, fd, static_cast<float>(v));
        }
        return;
      }
      default:
        ParseInteger(node, path, fd, msg);
        return;
    }
  }

  void ParseInteger(const YAML::Node& node, const std::string& path, const FieldDescriptor* fd,
                    Message* msg) {
    const std::string& s = node.Scalar();
    const Reflection* r = msg->GetReflection();
    const bool rep = fd->is_repeated();
    const bool is_unsigned = fd->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ||
                             fd->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
    long long v = 0;
    const auto res = std::from_chars(s.data(), s.data() + s.size(), v);
    if (res.ec != std::errc() || res.ptr != s.data() + s.size()) {
      Error(node, path, "expected " + TypeName(fd) + ", found '" + s + "'");
      return;
    }
    if (is_unsigned && v < 0) {
      Error(node, path, "expected a non-negative integer, found " + s);
      return;
    }
    const bool too_large =
        (fd->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 && v > std::numeric_limits<uint32_t>::max()) ||
        (fd->cpp_type() == FieldDescriptor::CPPTYPE_INT32 &&
         (v > std::numeric_limits<int32_t>::max() || v < std::numeric_limits<int32_t>::min()));
    if (too_large) {
      Error(node, path, "value " + s + " does not fit in a 32-bit integer");
      return;
    }
    if (!CheckRange(node, path, fd, static_cast<double>(v))) return;
    switch (fd->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        rep ? r->AddInt32(msg, fd, static_cast<int32_t>(v)) : r->SetInt32(msg, fd, static_cast<int32_t>(v));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        rep ? r->AddInt64(msg, fd, v) : r->SetInt64(msg, fd, v);
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        rep ? r->AddUInt32(msg, fd, static_cast<uint32_t>(v)) : r->SetUInt32(msg, fd, static_cast<uint32_t>(v));
        break;
      default:
        rep ? r->AddUInt64(msg, fd, static_cast<uint64_t>(v)) : r->SetUInt64(msg, fd, static_cast<uint64_t>(v));
        break;
    }
  }

  bool CheckRange(const YAML::Node& node, const std::string& path, const FieldDescriptor* fd, double v) {
    const auto& opt = fd->options();
    if (opt.HasExtension(proto::min)) {
      const double lo = opt.GetExtension(proto::min);
      const bool excl = opt.GetExtension(proto::min_exclusive);
      if (excl ? !(v > lo) : !(v >= lo)) {
        Error(node, path, "value " + node.Scalar() + " is out of range (must be " + (excl ? "> " : ">= ") +
                              FormatNumber(lo) + ")");
        return false;
      }
    }
    if (opt.HasExtension(proto::max) && v > opt.GetExtension(proto::max)) {
      Error(node, path, "value " + node.Scalar() + " is out of range (must be <= " +
                            FormatNumber(opt.GetExtension(proto::max)) + ")");
      return false;
    }
    return true;
  }

  std::string file_;
  ErrorList errors_;
};

// Strings that YAML would read back as something else (null, a bool, a number) are quoted.
bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::set<std::string> kSpecial = {"~", "null", "Null", "NULL", "true", "True", "TRUE",
                                                 "false", "False", "FALSE", "yes", "Yes", "YES", "no",
                                                 "No", "NO", "on", "On", "ON", "off", "Off", "OFF"};
  if (kSpecial.count(s)) return true;
  double d = 0;
  const auto res = std::from_chars(s.data(), s.data() + s.size(), d);
  return res.ec == std::errc() && res.ptr == s.data() + s.size();
}

void EmitScalar(YAML::Emitter& out, const Message& msg, const FieldDescriptor* fd, int index) {
  const Reflection* r = msg.GetReflection();
  const bool rep = index >= 0;
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out << (rep ? r->GetRepeatedInt32(msg, fd, index) : r->GetInt32(msg, fd));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      out << (rep ? r->GetRepeatedInt64(msg, fd, index) : r->GetInt64(msg, fd));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      out << (rep ? r->GetRepeatedUInt32(msg, fd, index) : r->GetUInt32(msg, fd));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      out << (rep ? r->GetRepeatedUInt64(msg, fd, index) : r->GetUInt64(msg, fd));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out << FormatNumber(rep ? r->GetRepeatedDouble(msg, fd, index) : r->GetDouble(msg, fd));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out << FormatNumber(rep ? r->GetRepeatedFloat(msg, fd, index) : r->GetFloat(msg, fd));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out << ((rep ? r->GetRepeatedBool(msg, fd, index) : r->GetBool(msg, fd)) ? "true" : "false");
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      out << EnumValueYamlName(rep ? r->GetRepeatedEnum(msg, fd, index) : r->GetEnum(msg, fd));
      break;
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string s = rep ? r->GetRepeatedString(msg, fd, index) : r->GetString(msg, fd);
      if (NeedsQuotes(s)) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

void EmitMessage(YAML::Emitter& out, const Message& msg) {
  const Descriptor* desc = msg.GetDescriptor();
  const Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  if (fields.empty()) {
    out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    return;
  }
  // ListFields orders by field number; emit in declaration order instead (they coincide in our schemas).
  std::sort(fields.begin(), fields.end(),
            [](const FieldDescriptor* a, const FieldDescriptor* b) { return a->index() < b->index(); });
  (void)desc;
  out << YAML::BeginMap;
  for (const FieldDescriptor* fd : fields) {
    out << YAML::Key << fd->name() << YAML::Value;
    if (fd->options().GetExtension(proto::yaml_text) && !fd->is_repeated()) {
      out << YAML::Load(r->GetString(msg, fd));
      continue;
    }
    if (fd->is_map()) {
      // Entries sorted by key, so that the text does not depend on insertion order.
      std::vector<std::pair<std::string, const Message*>> entries;
      for (int i = 0; i < r->FieldSize(msg, fd); ++i) {
        const Message& e = r->GetRepeatedMessage(msg, fd, i);
        entries.emplace_back(e.GetReflection()->GetString(e, fd->message_type()->FindFieldByName("key")), &e);
      }
      std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out << YAML::BeginMap;
      for (const auto& [key, e] : entries) {
        out << YAML::Key << key << YAML::Value;
        EmitScalar(out, *e, fd->message_type()->FindFieldByName("value"), -1);
      }
      out << YAML::EndMap;
      continue;
    }
    if (fd->is_repeated()) {
      const int n = r->FieldSize(msg, fd);
      const bool is_msg = fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
      const bool is_str = fd->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
      if (!is_msg && !is_str) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (int i = 0; i < n; ++i) {
        if (is_msg) {
          EmitMessage(out, r->GetRepeatedMessage(msg, fd, i));
        } else {
          EmitScalar(out, msg, fd, i);
        }
      }
      out << YAML::EndSeq;
    } else if (fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      EmitMessage(out, r->GetMessage(msg, fd));
    } else {
      EmitScalar(out, msg, fd, -1);
    }
  }
  out << YAML::EndMap;
}

}  // namespace

std::string EnumValueYamlName(const EnumValueDescriptor* value) {
  const std::string prefix = UpperSnake(value->type()->name()) + "_";
  std::string name = value->name();
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  return AsciiLower(name);
}

std::vector<std::string> EnumYamlNames(const EnumDescriptor* e) {
  std::vector<std::string> names;
  for (int i = 1; i < e->value_count(); ++i) names.push_back(EnumValueYamlName(e->value(i)));
  return names;
}

namespace {

void CheckRangesInto(const Message& msg, const std::string& path, const std::string& where,
                     const std::function<std::string(const std::string&)>& flag_of, ErrorList* errors) {
  const Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  for (const FieldDescriptor* fd : fields) {
    const std::string key = path.empty() ? fd->name() : path + "." + fd->name();
    const int n = fd->is_repeated() ? r->FieldSize(msg, fd) : 1;
    for (int i = 0; i < n; ++i) {
      const std::string at = fd->is_repeated() ? key + "[" + std::to_string(i) + "]" : key;
      if (fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        CheckRangesInto(fd->is_repeated() ? r->GetRepeatedMessage(msg, fd, i) : r->GetMessage(msg, fd), at, where,
                        flag_of, errors);
        continue;
      }
      double v = 0;
      switch (fd->cpp_type()) {
        case FieldDescriptor::CPPTYPE_DOUBLE:
          v = fd->is_repeated() ? r->GetRepeatedDouble(msg, fd, i) : r->GetDouble(msg, fd);
          break;
        case FieldDescriptor::CPPTYPE_FLOAT:
          v = fd->is_repeated() ? r->GetRepeatedFloat(msg, fd, i) : r->GetFloat(msg, fd);
          break;
        case FieldDescriptor::CPPTYPE_INT32:
          v = fd->is_repeated() ? r->GetRepeatedInt32(msg, fd, i) : r->GetInt32(msg, fd);
          break;
        case FieldDescriptor::CPPTYPE_INT64:
          v = static_cast<double>(fd->is_repeated() ? r->GetRepeatedInt64(msg, fd, i) : r->GetInt64(msg, fd));
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
          v = fd->is_repeated() ? r->GetRepeatedUInt32(msg, fd, i) : r->GetUInt32(msg, fd);
          break;
        case FieldDescriptor::CPPTYPE_UINT64:
          v = static_cast<double>(fd->is_repeated() ? r->GetRepeatedUInt64(msg, fd, i) : r->GetUInt64(msg, fd));
          break;
        default:
          continue;
      }
      std::string flag = flag_of ? flag_of(key) : "";
      const std::string name = flag.empty() ? where + "." + at : where + " " + flag;
      const auto& opt = fd->options();
      std::string rule;
      if (!std::isfinite(v)) {
        errors->Add(name + ": " + (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf") + " is not a finite number");
        continue;
      }
      if (opt.HasExtension(proto::min)) {
        const double lo = opt.GetExtension(proto::min);
        const bool excl = opt.GetExtension(proto::min_exclusive);
        if (excl ? !(v > lo) : !(v >= lo)) rule = std::string(excl ? "> " : ">= ") + FormatNumber(lo);
      }
      if (rule.empty() && opt.HasExtension(proto::max) && v > opt.GetExtension(proto::max)) {
        rule = "<= " + FormatNumber(opt.GetExtension(proto::max));
      }
      if (!rule.empty()) errors->Add(name + ": " + FormatNumber(v) + " is out of range (must be " + rule + ")");
    }
  }
}

}  // namespace

Status CheckRanges(const Message& msg, const std::string& where,
                   const std::function<std::string(const std::string&)>& flag_of) {
  ErrorList errors;
  CheckRangesInto(msg, "", where, flag_of, &errors);
  return errors.ToStatus();
}

Result<int> ParseEnumFlag(const std::string& flag, const std::string& value, const EnumDescriptor* e) {
  for (int i = 1; i < e->value_count(); ++i) {
    if (EnumValueYamlName(e->value(i)) == value) return e->value(i)->number();
  }
  const auto names = EnumYamlNames(e);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return Status::Invalid("--" + flag + ": unknown value '" + value + "' (expected one of: " + list + ")" +
                         DidYouMean(value, names));
}

std::string YamlLocation(const std::string& file, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null() || m.line < 0) return file;
  return file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

std::string YamlLocationOf(const std::string& file, const YAML::Node& root, const std::string& key_path) {
  // A trail of handles, never one reassigned: assigning to a yaml-cpp node writes into the tree.
  std::vector<YAML::Node> trail = {root};
  size_t i = 0;
  while (i < key_path.size()) {
    const YAML::Node& cur = trail.back();
    if (key_path[i] == '.') {
      ++i;
      continue;
    }
    if (key_path[i] == '[') {
      const size_t close = key_path.find(']', i);
      if (close == std::string::npos) break;
      const std::string idx = key_path.substr(i + 1, close - i - 1);
      i = close + 1;
      char* end = nullptr;
      const unsigned long n = std::strtoul(idx.c_str(), &end, 10);
      if (idx.empty() || *end != '\0' || !cur.IsSequence() || n >= cur.size()) break;
      trail.push_back(cur[n]);
      continue;
    }
    const size_t stop = key_path.find_first_of(".[", i);
    const std::string key = key_path.substr(i, stop == std::string::npos ? std::string::npos : stop - i);
    i = stop == std::string::npos ? key_path.size() : stop;
    if (!cur.IsMap()) break;
    const YAML::Node child = cur[key];
    if (!child) break;
    trail.push_back(child);
  }
  return YamlLocation(file, trail.back());
}

Status YamlToMessage(const YAML::Node& node, const std::string& file, const std::string& path,
                     Message* msg) {
  Converter c(file);
  c.ParseMessage(node, path, msg);
  return c.errors().ToStatus();
}

// Checks what the YAML parser would take badly or not at all, before it runs: bytes that are not UTF-8, tabs
// in indentation, and nesting deeper than any spec has (a deep document would exhaust the parser's stack).
Status PrescanYaml(std::string_view text, const std::string& file) {
  constexpr int kMaxFlowDepth = 64;
  constexpr size_t kMaxIndent = 256;
  size_t line = 1, col = 1, i = 0;
  bool line_start = true;
  int flow = 0;
  char quote = 0;
  auto at = [&] { return file + ":" + std::to_string(line) + ":" + std::to_string(col) + ": "; };
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    // UTF-8: the length of the sequence from its lead byte, then continuation bytes.
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > text.size()) {
      return Status::Invalid(at() + "not UTF-8 text (byte 0x" + "0123456789abcdef"[c >> 4] +
                             "0123456789abcdef"[c & 15] + "); save the file as UTF-8");
    }
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) {
        return Status::Invalid(at() + "not UTF-8 text (a broken multi-byte character); save the file as UTF-8");
      }
    }
    if (c == '\n') {
      ++line;
      col = 1;
      i += 1;
      line_start = true;
      if (quote == '\'') quote = 0;  // a comment or a plain scalar never spans lines in our specs
      continue;
    }
    if (line_start) {
      if (c == '\t') {
        return Status::Invalid(at() + "a tab in the indentation; YAML indents with spaces only");
      }
      if (c != ' ') {
        line_start = false;
        if (col - 1 > kMaxIndent) {
          return Status::Invalid(at() + "indented " + std::to_string(col - 1) +
                                 " spaces deep; no spec nests that far (at most " + std::to_string(kMaxIndent) + ")");
        }
      }
    }
    if (quote == 0 && c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t' || line_start)) {
      while (i < text.size() && text[i] != '\n') ++i;  // a comment
      continue;
    }
    if (quote != 0) {
      if (c == static_cast<unsigned char>(quote)) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = static_cast<char>(c);
    } else if (c == '[' || c == '{') {
      if (++flow > kMaxFlowDepth) {
        return Status::Invalid(at() + "nested more than " + std::to_string(kMaxFlowDepth) +
                               " brackets deep; no spec nests that far");
      }
    } else if (c == ']' || c == '}') {
      flow = std::max(0, flow - 1);
    }
    i += len;
    ++col;
  }
  return Status::Ok();
}

Status ParseYaml(std::string_view text, const std::string& file, Message* msg) {
  msg->Clear();
  HETSIM_RETURN_IF_ERROR(PrescanYaml(text, file));
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    return Status::Invalid(file + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
  // An empty document is an empty mapping (its required keys are still reported).
  if (!root.IsMap() && !root.IsNull()) {
    return Status::Invalid(file + ": expected a mapping of keys at the top level, found " + NodeKind(root));
  }
  return YamlToMessage(root, file, "", msg);
}

std::string MessageToYaml(const Message& msg) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetDoublePrecision(17);
  EmitMessage(out, msg);
  return std::string(out.c_str()) + "\n";
}

}  // namespace hetsim::models
