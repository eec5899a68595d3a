// How spec files refer to each other and how outputs are written: a reference resolves against the folder of
// the file that makes it, never the current folder, and an output's temporary file never follows a link.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "models/spec_io.h"

namespace hetsim::models {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the test body inside a fresh folder (the "current folder" of a user), restoring the old one after.
class SpecFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hetsim-spec-files-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "cwd");
    old_ = fs::current_path();
    fs::current_path(root_ / "cwd");
  }
  void TearDown() override {
    fs::current_path(old_);
    fs::remove_all(root_);
  }
  fs::path root_, old_;
};

TEST_F(SpecFiles, AReferenceResolvesBesideItsFileEvenWhenTheCurrentFolderHasOneOfThatName) {
  Write(root_ / "exp" / "manifest.yaml", "kind: manifest\n");
  Write(root_ / "exp" / "plan.yaml", "the manifest's plan\n");
  Write(root_ / "cwd" / "plan.yaml", "a decoy in the working folder\n");
  const std::string manifest = (root_ / "exp" / "manifest.yaml").string();
  const std::string got = ResolveRelative("plan.yaml", manifest);
  EXPECT_EQ(Read(got), "the manifest's plan\n") << got;
  // With a folder in the reference, too.
  Write(root_ / "exp" / "sub" / "c.yaml", "beside\n");
  Write(root_ / "cwd" / "sub" / "c.yaml", "decoy\n");
  EXPECT_EQ(Read(ResolveRelative("sub/c.yaml", manifest)), "beside\n");
}

TEST_F(SpecFiles, AMissingReferenceIsNamedBesideItsFileNotFoundInTheCurrentFolder) {
  Write(root_ / "exp" / "manifest.yaml", "kind: manifest\n");
  Write(root_ / "cwd" / "plan.yaml", "decoy\n");
  const std::string got = ResolveRelative("plan.yaml", (root_ / "exp" / "manifest.yaml").string());
  EXPECT_EQ(fs::path(got), (root_ / "exp" / "plan.yaml").lexically_normal());
  EXPECT_FALSE(fs::exists(got));  // the loader then says "no such file" with this path
}

TEST_F(SpecFiles, BareNamesStayBundledNamesAndAbsolutePathsStay) {
  Write(root_ / "exp" / "plan.yaml", "plan\n");
  const std::string plan = (root_ / "exp" / "plan.yaml").string();
  EXPECT_EQ(ResolveRelative("a100-node", plan), "a100-node");
  EXPECT_EQ(ResolveRelative("llama2-7b", plan), "llama2-7b");
  EXPECT_EQ(ResolveRelative("/abs/c.yaml", plan), "/abs/c.yaml");
  // A bare name that is a file beside the plan is that file.
  Write(root_ / "exp" / "mycluster", "kind: cluster\n");
  EXPECT_EQ(ResolveRelative("mycluster", plan), (root_ / "exp" / "mycluster").string());
  // A reference from something that is not a file on disk (a bundled spec) is returned as written.
  EXPECT_EQ(ResolveRelative("../c.yaml", "bundled/plan.yaml"), "../c.yaml");
}

TEST_F(SpecFiles, AnOutputNeverWritesThroughAPlantedLink) {
  Write(root_ / "victim.txt", "keep me\n");
  const fs::path out = root_ / "cwd" / "out.json";
  // A link planted where the output goes is replaced by the output, and its target is left alone.
  fs::create_symlink(root_ / "victim.txt", out);
  ASSERT_TRUE(WriteFileAtomically(out.string(), "{}\n").ok());
  EXPECT_FALSE(fs::is_symlink(out));
  EXPECT_EQ(Read(out), "{}\n");
  EXPECT_EQ(Read(root_ / "victim.txt"), "keep me\n");
  // Nothing temporary is left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(root_ / "cwd")) files += e.path().filename() != "out.json";
  EXPECT_EQ(files, 0);
}

}  // namespace
}  // namespace hetsim::models
