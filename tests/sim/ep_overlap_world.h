#pragma once
// The EP-overlap tests' world (tests/sim/ep_overlap_test.cc, tests/sim/ep_overlap_play_test.cc).
#include <gtest/gtest.h>

#include <string>

#include "models/training.h"
#include "models/yaml_proto.h"
#include "sim/simulator.h"
#include "tests/common/specs.h"

namespace hetsim::sim::ep_overlap {

using testing_util::ClusterFrom;
using testing_util::PlanFrom;

// Four nodes of four H100s (132 SMs each), a NIC per GPU; a two-block MoE model, 16 experts top-2.
struct World {
  models::Cluster cluster = ClusterFrom(
      "name: four-by-four\nnodes:\n  - {name: n, count: 4, gpus: {type: h100, count: 4}, fabric: {kind: nvswitch}, "
      "nic: {kind: infiniband, bandwidth_gbps: 100, attachment: per_gpu}}\n");
  models::TransformerModel model = Model();
  proto::Training training = Training();

  static models::TransformerModel Model() {
    proto::Model m;
    EXPECT_TRUE(models::ParseYaml("name: tiny-moe\nnum_layers: 2\nhidden_size: 512\nffn_hidden_size: 1024\n"
                                  "num_attention_heads: 8\nvocab_size: 1024\nmax_seq_len: 512\nmlp: swiglu\n"
                                  "norm: rmsnorm\nposition: rope\nmoe: {num_experts: 16, top_k: 2, "
                                  "expert_ffn_hidden_size: 512}\n", "m.yaml", &m).ok());
    auto r = models::TransformerModel::Build(m, "m.yaml");
    EXPECT_TRUE(r.ok());
    return std::move(r).value();
  }
  proto::Training Training() const {
    proto::Training t;
    t.set_global_batch_size(32);
    t.set_seq_len(512);
    auto r = models::ResolveTraining(t, model, "t");
    EXPECT_TRUE(r.ok());
    return std::move(r).value();
  }
  // All 16 GPUs in one stage, EP `ep` (4: inside a node; 16: across the four), two micro-batches.
  static proto::Plan Plan(uint32_t ep, const std::string& comm) {
    std::string devices;
    for (int i = 0; i < 16; ++i) devices += (i ? "," : "") + std::to_string(i);
    return PlanFrom("pipelines:\n  - micro_batch_size: 16\n    num_micro_batches: 2\n    stages:\n"
                    "      - {devices: [" + devices + "], ep_degree: " + std::to_string(ep) +
                    ", expert_tp_degree: 1, layer_begin: 0, layer_end: 4}\nzero_stage: 1\ncomm: " + comm + "\n");
  }
  double Simulate(const proto::Plan& plan) const {
    SimOptions opt;
    opt.fold = false;
    auto r = SimulateIteration(plan, models::PlanContext{cluster, model, training}, opt);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r->report.iteration_time_s() : -1;
  }
};

}  // namespace hetsim::sim::ep_overlap
