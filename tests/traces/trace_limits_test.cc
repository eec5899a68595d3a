// Traces at the limits: binary traces for large ones, event and file-size caps that fail with a message
// before memory runs out, and the Llama 3 generator's check of its options.
#include <gtest/gtest.h>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <limits>

#include "models/spec_io.h"
#include "tests/common/specs.h"
#include "traces/llama3.h"
#include "traces/trace.h"

namespace hetsim::traces {
namespace {

using testing_util::ClusterFrom;

using testing_util::Nodes16;

TEST(TraceLimits, ABinaryTraceRoundTripsAndReadsLikeTheYamlOne) {
  const auto cluster = Nodes16();
  FailureTraceOptions o;
  o.days = 365;
  o.rate_scale = 50;
  const proto::Trace t = GenerateLlama3Failures(cluster, "sixteen", o);
  ASSERT_GT(t.events_size(), 100);
  const std::string pb = ::testing::TempDir() + "/limits.pb", yaml = ::testing::TempDir() + "/limits.yaml";
  ASSERT_TRUE(SaveTrace(t, pb).ok());
  ASSERT_TRUE(SaveTrace(t, yaml).ok());
  auto a = LoadTrace(pb);
  auto b = LoadTrace(yaml);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a->SerializeAsString(), t.SerializeAsString());
  EXPECT_EQ(b->SerializeAsString(), t.SerializeAsString());
  EXPECT_LT(std::filesystem::file_size(pb), std::filesystem::file_size(yaml));
}

TEST(TraceLimits, AYamlFileLargerThanTheCapIsRefusedBeforeItIsParsed) {
  const std::string path = ::testing::TempDir() + "/huge.yaml";
  {
    std::ofstream(path) << "kind: trace\n";
  }
  std::filesystem::resize_file(path, models::kMaxTraceYamlBytes + 1);  // sparse: nothing is written
  auto t = LoadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("huge.yaml: 256 MiB is more than a YAML trace may hold (256 MiB)"),
            std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("binary protobuf"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(TraceLimits, MoreEventsThanTheCapAreRefusedOnWriteAndOnRead) {
  proto::Trace t;
  t.set_kind("trace");
  for (uint32_t i = 0; i <= kMaxTraceEvents; ++i) t.add_events();
  const std::string pb = ::testing::TempDir() + "/many.pb";
  const Status w = SaveTrace(t, pb);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("1000001 events, more than a trace may hold (1000000)"), std::string::npos)
      << w.message();
  // A file written by something else is refused on reading.
  {
    std::ofstream out(pb, std::ios::binary);
    t.SerializeToOstream(&out);
  }
  auto r = LoadTrace(pb);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("many.pb: events: 1000001 events"), std::string::npos) << r.status().message();
  std::filesystem::remove(pb);
}

TEST(TraceLimits, NotATraceInABinaryFileSaysSo) {
  const std::string pb = ::testing::TempDir() + "/text.pb";
  std::ofstream(pb) << "kind: trace\nevents: []\n";
  auto r = LoadTrace(pb);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("text.pb: not a binary trace"), std::string::npos) << r.status().message();
  EXPECT_FALSE(LoadTrace(::testing::TempDir() + "/absent.pb").ok());
}

TEST(TraceLimits, TheGeneratorRefusesOptionsThatWouldDrawTooManyEvents) {
  const auto cluster = Nodes16();  // 128 GPUs: 419 / (16,384 x 54) per GPU-day = 0.0607 events a day
  FailureTraceOptions o;
  o.days = 3650;
  o.rate_scale = 1000;  // 3650 x 1000 x 0.0607 = 221,000 events: allowed
  EXPECT_NEAR(ExpectedFailureEvents(cluster, o), 419.0 / (16384 * 54) * 128 * 3650 * 1000, 1e-6);
  EXPECT_TRUE(CheckFailureTraceOptions(cluster, o, "--days", "--rate-scale").ok());
  const auto big = ClusterFrom(R"(
name: big
nodes:
  - {name: n, count: 2048, gpus: {type: h100, count: 8}, nic: {kind: infiniband, bandwidth_gbps: 400, attachment: per_gpu}}
)");
  const Status s = CheckFailureTraceOptions(big, o, "--days", "--rate-scale");  // 28.3 million
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("about 2.83e+07 events on 16384 GPUs"), std::string::npos) << s.message();
  o.days = std::numeric_limits<double>::infinity();
  EXPECT_NE(CheckFailureTraceOptions(cluster, o, "--days", "--rate-scale").message().find("--days: inf"),
            std::string::npos);
  o.days = 54;
  o.rate_scale = std::nan("");
  EXPECT_FALSE(CheckFailureTraceOptions(cluster, o, "--days", "--rate-scale").ok());
}

}  // namespace
}  // namespace hetsim::traces
