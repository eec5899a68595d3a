// The Python package's extension `hetsim._hetsim` (docs/python.md): the pieces its binding files share. The
// extension calls the libraries the CLI calls (models, planners, sim, sim/planning, sim/runner, sim/advise);
// tools/python/hetsim/*.py turns what it returns into Python objects (reports, DataFrames).
//
// Conventions of the bindings: a library error (Status) becomes a Python exception (ThrowStatus); the GIL is
// released around every simulation, search and sweep, and taken back only to call Python (callbacks, a
// planner written in Python).
#pragma once

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/cluster.h"
#include "models/proto/plan.pb.h"
#include "models/proto/training.pb.h"
#include "models/status.h"
#include "models/transformer.h"

namespace hetsim::python {

namespace py = pybind11;

// The exceptions the extension raises (registered in module.cc): SpecError (a ValueError) for what a user can
// fix in a spec or an argument, InfeasibleError (a SpecError) when no plan fits, SimulationError (a
// RuntimeError) when a simulation or search fails for another reason; IoError (an OSError) for files.
struct SpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct InfeasibleError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct SimulationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws the exception of `status`'s code with its message (the CLI's text: file, key path, the fix).
[[noreturn]] void ThrowStatus(const Status& status);

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}
inline void Check(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

// Where a spec comes from: a bundled name or a path (`ref`), or YAML/JSON text (`text`, the Python package's
// dicts) that messages call `label`. Both empty: not given.
struct Source {
  std::string ref;
  std::string text;
  std::string label;
  bool given() const { return !ref.empty() || !text.empty(); }
  // How messages and plan files name it.
  std::string name() const { return text.empty() ? ref : label; }
};

// What a command needs, loaded as `hetsim`'s --cluster, --model, --training, --plan flags load it
// (tools/hetsim/commands.cc LoadSpecs): a plan's own `cluster:`, `model:` and `training:` keys fill in what is
// not given; `training_overrides` (a YAML mapping of training fields, the Python keywords) wins over both.
struct Specs {
  std::optional<models::Cluster> cluster;
  std::optional<models::TransformerModel> model;
  proto::Training training;  // resolved against the model (when there is one)
  std::optional<proto::Plan> plan;
  std::string plan_file;
};
struct SpecSources {
  Source cluster, model, training, plan;
  std::string training_overrides;  // YAML/JSON text; empty: none
};
Specs LoadSpecs(const SpecSources& sources, bool need_cluster, bool need_model);

// A cluster and a model as dicts (name, sizes, devices, the spec as JSON, the CLI's description).
py::dict ClusterDict(const models::Cluster& cluster);
py::dict ModelDict(const models::TransformerModel& model);

// Parses YAML/JSON `text` as a message; errors name `label`, the line and the key path.
void ParseText(const std::string& text, const std::string& label, google::protobuf::Message* msg);
// A message as JSON (proto field names, every field), which the Python side turns into dicts.
std::string ToJson(const google::protobuf::Message& msg);
// A message as Python values in its YAML form (the spec files' keys and enum names, only the fields set):
// what json.dumps of it parses back to the same message.
py::object MessageToPython(const google::protobuf::Message& msg);

// A callable that may be None: called with the GIL taken; a Python exception from it is reported as
// unraisable (printed) and the computation goes on.
void CallQuietly(const py::object& callback, const std::string& line);

// Each binding file registers its functions.
void BindSpecs(py::module_& m);
void BindSimulate(py::module_& m);
void BindPlanners(py::module_& m);
void BindRuns(py::module_& m);

}  // namespace hetsim::python
