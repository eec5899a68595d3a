// Small plans and clusters for the planning tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/spec_io.h"
#include "models/training.h"
#include "models/transformer.h"
#include "models/yaml_proto.h"

namespace hetsim::planning::fixtures {

// A stage of one device holding layers [begin, end).
inline proto::Stage StageOf(uint32_t device, uint32_t begin, uint32_t end) {
  proto::Stage s;
  s.add_devices(device);
  s.set_layer_begin(begin);
  s.set_layer_end(end);
  return s;
}

// One pipeline of one stage: `devices` at TP `tp` holding layers [0, layers), `count` micro-batches of `micro`
// sequences.
inline proto::Plan OneStage(uint32_t devices, uint32_t layers, uint32_t micro, uint32_t count, uint32_t tp = 1) {
  proto::Plan plan;
  auto* pipe = plan.add_pipelines();
  pipe->set_micro_batch_size(micro);
  pipe->set_num_micro_batches(count);
  auto* st = pipe->add_stages();
  for (uint32_t d = 0; d < devices; ++d) st->add_devices(d);
  if (tp > 1) st->set_tp_degree(tp);
  st->set_layer_end(layers);
  return plan;
}

// The cluster a YAML text describes (the test fails when it does not build).
inline models::Cluster ClusterFrom(const char* yaml) {
  proto::Cluster spec;
  EXPECT_TRUE(models::ParseYaml(yaml, "c.yaml", &spec).ok());
  auto c = models::Cluster::Build(spec, "c.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

// The bundled llama-tiny (the test fails when it does not load).
inline models::TransformerModel LlamaTiny() {
  auto m = models::LoadModel("llama-tiny");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

// A training spec of `batch` sequences of `seq_len` tokens in `dtype` (unspecified: the model's default),
// resolved against `model` (the test fails when it does not resolve).
inline proto::Training Resolved(const models::TransformerModel& model, uint32_t batch, uint32_t seq_len,
                                proto::DType dtype = proto::DTYPE_UNSPECIFIED) {
  proto::Training t;
  t.set_global_batch_size(batch);
  t.set_seq_len(seq_len);
  t.set_dtype(dtype);
  auto r = models::ResolveTraining(t, model, "training");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

}  // namespace hetsim::planning::fixtures
