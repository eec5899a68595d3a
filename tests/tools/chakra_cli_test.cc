// `hetsim export-chakra` and `hetsim import-chakra` end to end: Chakra's test trace decoded, a plan exported,
// imported and simulated to the time `simulate` gives, and bad inputs refused with a non-zero exit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/tools/cli_run.h"

namespace hetsim {
namespace {

namespace fs = std::filesystem;
using testing_cli::RunCli;

const std::string kSource = HETSIM_SOURCE_DIR;

// The number after `label` in `text` (e.g. "iteration time  0.1234 s").
double NumberAfter(const std::string& text, const std::string& label) {
  const size_t at = text.find(label);
  EXPECT_NE(at, std::string::npos) << label << " not in:\n" << text;
  return at == std::string::npos ? -1 : std::strtod(text.c_str() + at + label.size(), nullptr);
}

TEST(ChakraCli, DecodesChakrasTestTraceAndNamesItsFirstIssuableNodes) {
  const auto r = RunCli({"import-chakra", kSource + "/tests/data/chakra/chakra.0.et.gz", "--decode-only"});
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t first = r.out.find("id 216  COMP_NODE");
  const size_t second = r.out.find("id 432  COMM_COLL_NODE");
  EXPECT_NE(first, std::string::npos) << r.out;
  EXPECT_NE(second, std::string::npos) << r.out;
  EXPECT_LT(first, second);
  EXPECT_NE(r.out.find("name: \"rf_id\" int64_val: 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("3664 nodes"), std::string::npos) << r.out;
}

TEST(ChakraCli, SimulatesChakrasTestTraceOnAGpuCluster) {
  const auto r = RunCli({"import-chakra", kSource + "/tests/data/chakra/chakra.0.et.gz", "--cluster",
                         "autohet-uniform-a100-h20-4", "--replicate", "2", "--durations"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_GT(NumberAfter(r.out, "iteration time"), 0) << r.out;
  EXPECT_NE(r.out.find("simulated 2 ranks"), std::string::npos) << r.out;
}

TEST(ChakraCli, ExportImportRoundTripGivesSimulatesTime) {
  const std::string dir = ::testing::TempDir() + "/chakra-cli-export";
  fs::create_directories(dir);
  const std::string plan = kSource + "/models/catalog/plans/cpu-4-hetero.yaml";
  const auto e = RunCli({"export-chakra", "--plan", plan, "-o", dir});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(fs::exists(dir + "/cpu-4-hetero.0.et"));
  EXPECT_TRUE(fs::exists(dir + "/cpu-4-hetero.3.et"));
  const auto s = RunCli({"simulate", "--plan", plan, "--no-fold"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto i = RunCli({"import-chakra", dir, "--cluster", "cpu-4", "--durations"});
  ASSERT_EQ(i.code, 0) << i.err;
  const double simulated = NumberAfter(s.out, "iteration time");
  const double imported = NumberAfter(i.out, "iteration time");
  EXPECT_NEAR(imported, simulated, 0.00006) << s.out << i.out;  // simulate prints 4 decimals
  // Without --durations the compute is priced from its FLOPs, and the note says how to replay exactly.
  const auto f = RunCli({"import-chakra", dir, "--cluster", "cpu-4"});
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_NE(f.out.find("--durations replays them exactly"), std::string::npos) << f.out;
}

TEST(ChakraCli, BadInputsExitNonZeroWithTheFileAndTheFix) {
  const std::string bad = ::testing::TempDir() + "/bad.0.et";
  std::ofstream(bad, std::ios::binary) << "\x05\x0a\x03\x31";  // a size prefix longer than what follows
  auto r = RunCli({"import-chakra", bad, "--cluster", "cpu-4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
  // Eight ranks' files of a plan on eight GPUs do not fit the four CPU workers.
  const std::string dir = ::testing::TempDir() + "/chakra-cli-eight";
  fs::create_directories(dir);
  const auto e = RunCli({"export-chakra", "--plan", kSource + "/models/catalog/plans/metis-mixed-stage.yaml", "-o", dir});
  ASSERT_EQ(e.code, 0) << e.err;
  r = RunCli({"import-chakra", dir, "--cluster", "cpu-4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cluster 'cpu-4' has 4 devices"), std::string::npos) << r.err;
  r = RunCli({"import-chakra", dir + "/nothing-here"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("no such file or folder"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hetsim
