// RankKinds: each rank's backend and speed from its device type, which groups mix kinds, the precision rule.
#include "executor/rank_kinds.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/executor/loaded_plan.h"

// (A namespace of its own: the tests build as one unity translation unit.)
namespace hetsim::executor::rank_kinds_test {
namespace {

struct Loaded : test_plans::Loaded {
  ExecPlan exec;
};

Loaded Load(const std::string& plan_name) {
  Loaded l{test_plans::Load(plan_name), {}};
  auto exec = BuildExecPlan(l.plan, {l.cluster, l.model, l.training}, "plan");
  EXPECT_TRUE(exec.ok()) << exec.status().message();
  l.exec = *exec;
  return l;
}

TEST(RankKindsTest, CpuMixedHasTwoSpeedsAndMixesOnlyAcrossKinds) {
  const Loaded l = Load("cpu-mixed-dp");
  auto k = RankKinds::Choose(l.exec, l.cluster, "auto", proto::DTYPE_FP32, "plan");
  ASSERT_TRUE(k.ok()) << k.status().message();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(k->of(r).backend, BackendKind::kCpu);
  // cpu: the machine's speed; cpu-slow: 0.5 of the cpu row's 1 TFLOPS fp32, so twice the time.
  EXPECT_EQ(k->of(1).slowdown, 1.0);
  EXPECT_EQ(k->of(2).slowdown, 2.0);
  // Workers of one kind keep MPI's own path; the slow ones stand in for another vendor (the CPU path between).
  EXPECT_FALSE(k->Mixed({0, 1}));
  EXPECT_FALSE(k->Mixed({2, 3}));
  EXPECT_TRUE(k->Mixed({1, 2}));
  EXPECT_TRUE(k->Mixed({0, 1, 2, 3}));
  EXPECT_EQ(k->Describe(), "ranks 0-1: cpu (cpu backend); ranks 2-3: cpu-slow (cpu backend at 1/2 speed)");
}

TEST(RankKindsTest, GpuAndCpuWorkersRunTheirOwnBackends) {
  const Loaded l = Load("h200-cpu-mixed-dp");
  auto k = RankKinds::Choose(l.exec, l.cluster, "auto", proto::DTYPE_FP32, "plan");
  ASSERT_TRUE(k.ok()) << k.status().message();
  EXPECT_EQ(k->of(0).backend, BackendKind::kCuda);
  EXPECT_EQ(k->of(3).backend, BackendKind::kCpu);
  EXPECT_TRUE(k->Mixed({0, 1}));
  EXPECT_FALSE(k->Mixed({1, 2, 3}));
  // Forced: every rank on one backend, and the GPU's node still of another vendor than the workers'.
  auto cpu = RankKinds::Choose(l.exec, l.cluster, "cpu", proto::DTYPE_FP32, "plan");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->has(BackendKind::kCuda));
  EXPECT_TRUE(cpu->Mixed({0, 1}));
}

TEST(RankKindsTest, Bf16WithACpuRankIsRefusedWithTheFix) {
  const Loaded l = Load("h200-cpu-mixed-dp");
  auto k = RankKinds::Choose(l.exec, l.cluster, "auto", proto::DTYPE_BF16, "p.yaml");
  ASSERT_FALSE(k.ok());
  const std::string& m = k.status().message();
  EXPECT_NE(m.find("p.yaml: training.dtype: bf16: rank 1 runs device 1 (cpu) on the CPU backend"), std::string::npos)
      << m;
  EXPECT_NE(m.find("--dtype fp32"), std::string::npos) << m;
  // CUDA ranks alone train in bf16 only among one kind: here the GPU's node and the workers' are of two vendors.
  auto gpus = RankKinds::Choose(l.exec, l.cluster, "cuda", proto::DTYPE_BF16, "p.yaml");
  ASSERT_FALSE(gpus.ok());
  EXPECT_NE(gpus.status().message().find("ranks are of several kinds"), std::string::npos) << gpus.status().message();
}

TEST(RankKindsTest, UnknownBackendIsNamed) {
  const Loaded l = Load("cpu-mixed-pp");
  auto k = RankKinds::Choose(l.exec, l.cluster, "gpu", proto::DTYPE_FP32, "plan");
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("expected auto, cpu or cuda"), std::string::npos);
}

}  // namespace
}  // namespace hetsim::executor::rank_kinds_test
