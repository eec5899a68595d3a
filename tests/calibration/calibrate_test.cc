// `hetsim calibrate`'s orchestration as a library (calibration/calibrate.h): a refit from a data folder writes
// a file that loads; options are checked before anything is measured; a measuring run without its programs
// says which one is missing.
#include "calibration/calibrate.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "models/kernels.h"

namespace hetsim::calibration {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// calibration/data/a100-80gb holds the nccl-tests curve the bundled a100-80gb calibration was fitted on: the
// refit gives its collective efficiency (0.7057 of NVLink), names the data in the provenance, and asks for no
// program (nothing is measured).
TEST(CalibrateLibrary, RefitsFromADataFolderWithoutMeasuring) {
  CalibrateOptions o;
  o.gpu = "a100-80gb";
  o.name = "refit";
  o.output = testing::TempDir() + "calibrate-lib-refit.yaml";
  o.from_data = std::string(HETSIM_SOURCE_DIR) + "/calibration/data/a100-80gb";
  int asked = 0;
  o.find_program = [&](const std::string& name) -> Result<std::string> {
    ++asked;
    return Status::NotFound(name);
  };
  std::ostringstream out, err;
  ASSERT_EQ(Calibrate(o, out, err), 0) << err.str();
  EXPECT_EQ(asked, 0);
  EXPECT_TRUE(Has(out.str(), "[4/4] fit")) << out.str();
  EXPECT_TRUE(Has(out.str(), "calibration refit -> " + o.output)) << out.str();
  const std::string text = Read(o.output);
  EXPECT_TRUE(Has(text, "collective_efficiency: 0.7057")) << text;
  EXPECT_TRUE(Has(text, "base: default")) << text;
  EXPECT_TRUE(Has(text, "command: hetsim calibrate --gpu a100-80gb --from-data " + o.from_data)) << text;
  EXPECT_TRUE(models::CheckKernelCalibration(o.output).ok());
}

// Wrong options are exit code 2 and name the flag; a step that fails is 1. The profile options are checked
// before the benchmarks (which take minutes) would run: with a zero sequence length no program is asked for.
TEST(CalibrateLibrary, OptionsAreCheckedBeforeAnythingRuns) {
  int asked = 0;
  const auto base = [&] {
    CalibrateOptions o;
    o.output = testing::TempDir() + "calibrate-lib-bad.yaml";
    o.find_program = [&](const std::string& name) -> Result<std::string> {
      ++asked;
      return Status::NotFound(name + " is not built here");
    };
    return o;
  };
  std::ostringstream out, err;
  CalibrateOptions backend = base();
  backend.backend = "tpu";
  EXPECT_EQ(Calibrate(backend, out, err), 2);
  EXPECT_TRUE(Has(err.str(), "--backend: unknown backend 'tpu' (expected cpu or cuda)")) << err.str();
  CalibrateOptions name = base();
  name.name = "my calibration";
  EXPECT_EQ(Calibrate(name, out, err), 2);
  EXPECT_TRUE(Has(err.str(), "--name: 'my calibration' is not a plain name")) << err.str();
  CalibrateOptions seq = base();
  seq.profile_seq_len = 0;
  EXPECT_EQ(Calibrate(seq, out, err), 2);
  EXPECT_TRUE(Has(err.str(), "--profile-seq-len: 0 is not a sequence length")) << err.str();
  EXPECT_EQ(asked, 0);
  // Options that make a run: the missing benchmark program is the error, exit 1.
  CalibrateOptions run = base();
  run.data_dir = testing::TempDir() + "calibrate-lib-data";
  err.str("");
  EXPECT_EQ(Calibrate(run, out, err), 1);
  EXPECT_TRUE(Has(err.str(), "hetsim-kernel-bench is not built here")) << err.str();
  EXPECT_TRUE(std::filesystem::is_directory(run.data_dir));
}

// From profiles: the GPU type and the precision are required, each error naming its flag.
TEST(CalibrateLibrary, FromProfilesNeedsTheGpuAndThePrecision) {
  std::ostringstream out, err;
  FromProfilesOptions o;
  o.profiles = "sailor-opt-30b-gh200";
  EXPECT_EQ(CalibrateFromProfiles(o, out, err), 2);
  EXPECT_TRUE(Has(err.str(), "--from-profiles needs --gpu")) << err.str();
  o.gpu = "gh200";
  EXPECT_EQ(CalibrateFromProfiles(o, out, err), 2);
  EXPECT_TRUE(Has(err.str(), "--from-profiles needs --dtype")) << err.str();
}

}  // namespace
}  // namespace hetsim::calibration
