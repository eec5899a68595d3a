// The setting of the simulator's hand-derived tests (simulator_test, pipeline_schedule_test,
// collectives_test): llama-tiny on a cluster given as YAML with exact per-block layer costs, simulated with
// the token-efficiency compute model and no optimizer step, so that an iteration time has a closed form.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

#include "models/profile_db.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/simulator.h"
#include "tests/common/specs.h"

namespace hetsim::sim::fixture {

using testing_util::ClusterFrom;

// One node of 8 H100s whose fabric is so fast that communication is free (1e6 GB/s, ~0 latency).
inline constexpr const char* kFreeNode = R"(
name: free
nodes:
  - name: n
    gpus: {type: h100, count: 8}
    fabric: {kind: nvswitch, bandwidth_gbyte_s: 1000000, latency_us: 0.000001, pcie_bandwidth_gbyte_s: 1000000}
)";

// llama-tiny with exact layer costs: every block takes `forward_s` forward and `backward_s` backward, the
// embedding and the head take no time.
inline models::ProfileDb BlockProfile(double forward_s, double backward_s) {
  proto::Profile p;
  const std::string yaml = "gpu: h100\nmodel: llama-tiny\nseq_len: 128\nlayers:\n"
                           "  - {layer: transformer, tp_degree: 1, micro_batch_size: 1, forward_s: " +
                           std::to_string(forward_s) + ", backward_s: " + std::to_string(backward_s) +
                           "}\n"
                           "  - {layer: embedding, tp_degree: 1, micro_batch_size: 1, forward_s: 0, backward_s: 0}\n"
                           "  - {layer: head, tp_degree: 1, micro_batch_size: 1, forward_s: 0, backward_s: 0}\n";
  const Status s = models::ParseYaml(yaml, "block-profile", &p);
  EXPECT_TRUE(s.ok()) << s.message();
  models::ProfileDb db;
  const Status a = db.Add(p, "block-profile");
  EXPECT_TRUE(a.ok()) << a.message();
  return db;
}

// Blocks of 1 ms forward and 2 ms backward.
inline models::ProfileDb ExactProfile() { return BlockProfile(0.001, 0.002); }

struct Setting {
  models::Cluster cluster;
  models::TransformerModel model;
  proto::Training training;
};

inline Setting MakeSetting(const std::string& cluster_yaml, uint32_t global_batch) {
  auto m = models::LoadModel("llama-tiny");
  EXPECT_TRUE(m.ok());
  proto::Training t;
  t.set_global_batch_size(global_batch);
  t.set_seq_len(128);
  auto tr = models::ResolveTraining(t, *m, "t");
  EXPECT_TRUE(tr.ok());
  return {ClusterFrom(cluster_yaml), std::move(m).value(), std::move(tr).value()};
}

// `shared_cores` > 0: every device's compute time-shares that many cores (SimOptions::shared_cores).
inline double Simulate(const Setting& run, const proto::Plan& plan, const models::ProfileDb& db,
                       Fidelity fid = Fidelity::Balanced(), uint32_t shared_cores = 0) {
  models::PlanContext ctx{run.cluster, run.model, run.training};
  const Status v = models::ValidatePlanStructure(plan, ctx, "plan");
  EXPECT_TRUE(v.ok()) << v.message();
  SimOptions opt;
  opt.compute.model = models::ComputeModel::kTokenEfficiency;  // closed form: no fixed costs
  opt.fidelity = fid;
  opt.profiles = &db;
  opt.compute.optimizer_bytes_per_param = 0;  // no optimizer step: the pipeline alone
  opt.shared_cores = shared_cores;
  auto r = SimulateIteration(plan, ctx, opt);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->report.iteration_time_s() : -1;
}

inline std::string WriteCalibration(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/" + name + ".yaml";
  std::ofstream(path) << "kind: calibration\nname: " << name << "\n" << body;
  return path;
}

}  // namespace hetsim::sim::fixture
