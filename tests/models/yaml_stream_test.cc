// models::ParseYamlStreaming: the long list converted item by item, the rest as ParseYaml converts it, with
// the same messages and positions.
#include "models/yaml_stream.h"

#include <gtest/gtest.h>

#include <sstream>

#include "models/proto/trace.pb.h"
#include "models/yaml_proto.h"

namespace hetsim::models {
namespace {

Status Parse(const std::string& text, proto::Trace* t, size_t max_items = 100, size_t max_errors = 50) {
  return ParseYamlStreaming(text, "t.yaml", "trace", "events", max_items, t, max_errors);
}

constexpr const char* kTrace =
    "kind: trace\n"
    "name: two\n"
    "events:\n"
    "  - {time_s: 10, kind: gpu_failure, devices: [3], repair_s: 60, cause: Faulty GPU}\n"
    "  - time_s: 20\n"
    "    kind: preemption\n"
    "    nodes: [0, 1]\n"
    "    notice_s: 30\n"
    "duration_s: 100\n";

TEST(YamlStream, GivesWhatParseYamlGives) {
  proto::Trace streamed, whole;
  ASSERT_TRUE(Parse(kTrace, &streamed).ok());
  ASSERT_TRUE(ParseYaml(kTrace, "t.yaml", &whole).ok());
  EXPECT_EQ(streamed.SerializeAsString(), whole.SerializeAsString());
  ASSERT_EQ(streamed.events_size(), 2);
  EXPECT_EQ(streamed.events(1).nodes_size(), 2);
  EXPECT_EQ(streamed.events(0).cause(), "Faulty GPU");
  EXPECT_EQ(streamed.duration_s(), 100);  // a key after the list is kept
}

TEST(YamlStream, AnchorsAndAliasesResolveAsInYamlLoad) {
  proto::Trace t;
  const Status s = Parse("kind: trace\nevents:\n  - &e {time_s: 5, kind: software_failure}\n  - *e\n", &t);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(t.events_size(), 2);
  EXPECT_EQ(t.events(1).time_s(), 5);
}

TEST(YamlStream, ErrorsNameTheItemsLineAndKeyPath) {
  proto::Trace t;
  const Status s = Parse(
      "kind: trace\n"
      "nmae: x\n"
      "events:\n"
      "  - {time_s: 1, kind: software_failure}\n"
      "  - {time_s: -4, kind: gpu_falure, devices: [1]}\n",
      &t);
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  // The item on line 5, column 5 (its opening brace); its key paths as ParseYaml spells them.
  EXPECT_NE(m.find("t.yaml:5:5: events[1].time_s:"), std::string::npos) << m;
  EXPECT_NE(m.find("t.yaml:5:5: events[1].kind:"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu_failure"), std::string::npos) << m;  // the suggestion
  // A top-level key: its own line.
  EXPECT_NE(m.find("t.yaml:2:1: nmae:"), std::string::npos) << m;
}

TEST(YamlStream, AnotherKindOfFileGetsOneError) {
  proto::Trace t;
  const Status s = Parse("kind: cluster\nname: c\nnodes: []\n", &t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "t.yaml:1:1: kind: this is a 'cluster' file but a trace was expected here");
}

TEST(YamlStream, StopsAtTheItemLimitWithoutReadingFurther) {
  proto::Trace t;
  // The fourth item is past the limit of three; the syntax error after it is never reached.
  const Status s = Parse(
      "kind: trace\nevents:\n  - {kind: software_failure}\n  - {kind: software_failure}\n"
      "  - {kind: software_failure}\n  - {kind: software_failure}\n  - {kind: [\n",
      &t, 3);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "t.yaml:6:5: events: more than 3 events, more than a trace may hold (3)");
}

TEST(YamlStream, StopsAfterSoManyProblemsAndSaysSo) {
  std::string text = "kind: trace\nevents:\n";
  for (int i = 0; i < 10; ++i) text += "  - {kind: nosuch}\n";
  proto::Trace t;
  const Status s = Parse(text, &t, 100, 4);
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("t.yaml:6:5: events[3].kind"), std::string::npos) << m;
  EXPECT_EQ(m.find("events[4]"), std::string::npos) << m;
  EXPECT_NE(m.find("t.yaml: stopped after 4 problems; fix these and run again"), std::string::npos) << m;
}

TEST(YamlStream, SyntaxErrorsAndOtherTopLevelsAreClear) {
  proto::Trace t;
  Status s = Parse("kind: trace\nevents: [\n", &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("YAML syntax error"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("t.yaml:", 0), 0u) << s.message();
  s = Parse("- 1\n- 2\n", &t);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "t.yaml: expected a mapping of keys at the top level, found a list");
  s = Parse("", &t);  // empty: an empty mapping (a trace has no required keys)
  EXPECT_TRUE(s.ok()) << s.message();
}

}  // namespace
}  // namespace hetsim::models
