// hetsim-exec's flags and spec loading.
#include "executor/options.h"

#include <gtest/gtest.h>

namespace hetsim::executor {
namespace {

Result<ExecOptions> Parse(std::vector<const char*> args, std::string* help = nullptr) {
  std::string h;
  args.insert(args.begin(), "hetsim-exec");
  return ParseExecOptions(static_cast<int>(args.size()), args.data(), help ? help : &h);
}

TEST(OptionsTest, ParsesFlagsAndSuggestsNames) {
  auto o = Parse({"--plan", "cpu-4-dp4", "--iterations", "5", "--seed", "9", "--report-out", "r.json"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->iterations, 5u);
  EXPECT_EQ(o->warmup, 1u);
  EXPECT_EQ(o->seed, 9u);
  EXPECT_EQ(o->backend, "auto");
  auto bad = Parse({"--plan", "p", "--iteratons", "3"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("did you mean '--iterations'"), std::string::npos) << bad.status().message();
  auto backend = Parse({"--plan", "p", "--backend", "cdua"});
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("expected auto, cpu or cuda"), std::string::npos) << backend.status().message();
  EXPECT_FALSE(Parse({"--iterations", "2"}).ok());  // no plan
  std::string help;
  auto h = Parse({"--help"}, &help);
  EXPECT_TRUE(h.ok());
  EXPECT_NE(help.find("--dump-gradients"), std::string::npos);
}

TEST(OptionsTest, CoresIsAPoolSizeOrLeftToTheMachine) {
  // Unset: decided at run time from the machine (no value here); 0 turns the pool off; a count is kept; a
  // negative or absurd count is refused naming the flag.
  auto unset = Parse({"--plan", "p"});
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->cores.has_value());
  auto off = Parse({"--plan", "p", "--cores", "0"});
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_EQ(off->cores, 0u);
  auto one = Parse({"--plan", "p", "--cores", "1"});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->cores, 1u);
  for (const char* bad : {"-1", "70000"}) {
    auto r = Parse({"--plan", "p", "--cores", bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--cores"), std::string::npos) << r.status().message();
  }
}

TEST(OptionsTest, LoadsBundledPlanWithItsTrainingSpec) {
  auto o = Parse({"--plan", "cpu-4-hetero"});
  ASSERT_TRUE(o.ok());
  auto specs = LoadSpecs(*o);
  ASSERT_TRUE(specs.ok()) << specs.status().message();
  EXPECT_EQ(specs->cluster.name(), "cpu-4");
  EXPECT_EQ(specs->model.name(), "llama-tiny");
  EXPECT_EQ(specs->training.dtype(), proto::DTYPE_FP32);
  EXPECT_EQ(specs->training.global_batch_size(), 16u);
  EXPECT_EQ(specs->plan_name, "cpu-4-hetero");
  // Flags override the plan's training spec; bf16 is invalid on CPU workers.
  auto o2 = Parse({"--plan", "cpu-4-hetero", "--dtype", "bf16"});
  ASSERT_TRUE(o2.ok());
  auto bad = LoadSpecs(*o2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dtype"), std::string::npos) << bad.status().message();
  auto o3 = Parse({"--plan", "cpu-4-hetero", "--global-batch", "12"});
  auto bad_batch = LoadSpecs(*o3);
  ASSERT_FALSE(bad_batch.ok());
  EXPECT_NE(bad_batch.status().message().find("global batch is 12"), std::string::npos)
      << bad_batch.status().message();
}

}  // namespace
}  // namespace hetsim::executor
